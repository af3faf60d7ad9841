"""Errors that end a command with a one-line message instead of a traceback.

`UsageError` (exit 2) is a bad flag or argument; `DataError` (exit 1) is bad
input data, a failed download, a checksum mismatch. Each message names the
file (and line or record where known) and what was expected.
"""


class BertprepError(Exception):
    exit_code = 1


class UsageError(BertprepError):
    exit_code = 2


class DataError(BertprepError):
    exit_code = 1
