"""Errors that end a command with a one-line message instead of a traceback.

`UsageError` (exit 2) is a bad flag or argument; `DataError` (exit 1) is bad
input data, a failed download, a checksum mismatch. Each message names the
file (and line or record where known) and what was expected.
"""

import sys


class BertprepError(Exception):
    exit_code = 1


class UsageError(BertprepError):
    exit_code = 2


class DataError(BertprepError):
    exit_code = 1


def run_reporting_errors(prog, command):
    """`command()`'s exit code; a BertprepError becomes `prog: error: message` on stderr and its
    exit code, Ctrl-C becomes `prog: interrupted` and 130."""
    try:
        return command()
    except BertprepError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
