"""Errors that end a command with a one-line message instead of a traceback.

`UsageError` (exit 2) is a bad flag or argument; `DataError` (exit 1) is bad
input data, a failed download, a checksum mismatch. Each message names the
file (and line or record where known) and what was expected. An operating-
system error (a full disk, a read-only directory, a path under a regular
file) also ends with one line, naming the path and the system's reason.
"""

import contextvars
import os
import re
import signal
import sys
import threading

# What a shell reports for a program killed by SIGPIPE: `bertprep inspect ... | head -1`.
EXIT_BROKEN_PIPE = 128 + 13


# What a store client's message may carry that must never be printed, logged or written (issue 39: botocore's
# "Invalid bucket name "KEY:SECRET@bucket"" printed the secret of a URL): applied to every store error (storage.py) and
# to every message run_reporting_errors prints.
_SECRET_TEXT = (
    # a signed URL's or a form's secret parameters: X-Amz-Signature=..., X-Amz-Credential=..., token=..., and the
    # same words after a `_`/`-` prefix (access_key=, client_secret=, private-token=: a bare \bkey= missed them)
    # (stopping before the `:` after a URL that starts an error line: `...?token=T: HTTP 404` lost its colon)
    (re.compile(r"(?i)\b((?:[a-z0-9]+[_-])*(?:signature|credential|token|secret|password|passwd|sig|"
                r"awsaccesskeyid|apikey|key))=[^&\s\"'<>]+?(?=:?(?:[&\s\"'<>]|$))"), r"\1=***"),
    # user:password@ in a URL, up to the authority's last @ (a request splits it there: `alice:p@ss@host`)
    (re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s\"']*@"), r"\1"),
    (re.compile(r"[^\s/\"':@]+:[^\s/\"']+@"), "***@"),  # the same quoted without its scheme
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "***"),  # AWS access key ids
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), "***"),  # Hugging Face tokens
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1***"),
)
# The credentials a user gave through the environment: their values are taken out wherever they appear.
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GOOGLE_OAUTH_ACCESS_TOKEN")


def redact(text):
    """`text` without credentials: secret query parameters, user:password@, access keys, tokens, and the values
    of SECRET_VARIABLES (4 characters or more, so that a test's "x" is not taken out of every word)."""
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    for variable in SECRET_VARIABLES:
        value = os.environ.get(variable)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text



class BertprepError(Exception):
    exit_code = 1

    def __init__(self, *args):
        # A Python caller reads (and logs) the message the command line prints (run_reporting_errors): without
        # credentials. A download's mirror may carry user:password@ or ?token=, and its errors name the URL.
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


class BertprepWarning(UserWarning):
    """A stage's warning (too few parts for a job's ranks, a vocab with duplicates, ...), raised as a Python
    warning by the stage functions of the `bertprep` package whatever `quiet` says; the command line prints
    its own lines instead."""


class UsageError(BertprepError):
    exit_code = 2


class DataError(BertprepError):
    exit_code = 1


class HeldByAnotherRun(DataError):
    """Another run holds the output directory's lock: a caller that knows the other run makes the same
    bytes (the trainer's cached sample records) may wait for it and try again."""


def os_error_line(exc):
    """`path: reason` of an OSError (both paths of a rename)."""
    reason = exc.strerror or str(exc)
    paths = [os.fsdecode(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {reason}" if paths else reason


# True while a command line runs its command: option errors then name the flags (`--seq`), elsewhere the Python
# fields (`CreateOptions.seq`; options.errors_name_fields).
ON_COMMAND_LINE = contextvars.ContextVar("bertprep_on_command_line", default=False)


def run_reporting_errors(prog, command, sigterm=False):
    """`command()`'s exit code; a BertprepError or OSError becomes `prog: error: message` on stderr and
    exit 1 (2 for usage errors), Ctrl-C becomes `prog: interrupted` and 130, a reader that closed
    stdout (`| head`) ends the command quietly with 141. `sigterm`: SIGTERM too ends the command as Ctrl-C
    does (Stopped), `prog: stopped by SIGTERM` and 143; a Stopped's own line says where the command stopped."""
    interrupted = _InterruptRecorder(sigterm)
    on_command_line = ON_COMMAND_LINE.set(True)
    try:
        with interrupted:
            code = command()
        sys.stdout.flush()  # here, where a closed pipe can still be caught, not at interpreter exit
        if interrupted.seen:  # the KeyboardInterrupt was swallowed (a finalizer, a callback): still 130 (or 143)
            raise Stopped(interrupted.seen)
        return code
    except BrokenPipeError as exc:
        if not _stdout_closed():
            print(redact(f"{prog}: error: {os_error_line(exc)}"), file=sys.stderr)
            return 1
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except BertprepError as exc:
        print(redact(f"{prog}: error: {exc}"), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(redact(f"{prog}: error: {os_error_line(exc)}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        print(redact(f"{prog}: {stopped.line}"), file=sys.stderr)
        return stopped.exit_code
    finally:
        ON_COMMAND_LINE.reset(on_command_line)


class Stopped(KeyboardInterrupt):
    """A command stopped by the signal `signum`: Ctrl-C's SIGINT, or SIGTERM, which a cluster's scheduler (and
    `kill`) sends. Raised in the main thread as Ctrl-C's KeyboardInterrupt is, so the command unwinds the same
    way: an output being written is dropped whole, a held directory released. `line`: what the command says as
    it ends (where it stopped, what it kept); its exit code is the shell's for the signal, 128 + its number."""

    def __init__(self, signum, line=None):
        self.signum = signum
        self.exit_code = 128 + signum
        self.line = line or ("interrupted" if signum == signal.SIGINT else
                             f"stopped by {signal.Signals(signum).name}")
        super().__init__(self.line)

    def __reduce__(self):  # pickled (a worker's result) with both arguments, not the line alone
        return Stopped, (self.signum, self.line)


class _InterruptRecorder:
    """Remembers a Ctrl-C (and with `sigterm`, a SIGTERM) while the command runs. Python raises
    KeyboardInterrupt wherever the main thread is; inside a finalizer or a callback it is printed as "Exception
    ignored" and lost, and a run that was told to stop would end with 0. SIGTERM's default ended the process at
    once, exit 143 without a word of where it stopped."""

    seen = None  # the number of the signal received

    def __init__(self, sigterm=False):
        self._defaults = {signal.SIGINT: signal.default_int_handler}
        if sigterm:
            self._defaults[signal.SIGTERM] = signal.SIG_DFL

    def __enter__(self):
        self._previous = {}
        self._pid = os.getpid()
        if threading.current_thread() is threading.main_thread():
            for signum, default in self._defaults.items():
                if signal.getsignal(signum) is default:  # not where the caller set a handler of its own
                    self._previous[signum] = signal.signal(signum, self._record)
        return self

    def _record(self, signum, frame):
        if os.getpid() != self._pid:  # a forked worker inherits the handler: the signal's default there
            signal.signal(signum, self._defaults[signum])
            os.kill(os.getpid(), signum)
            return
        self.seen = signum
        raise Stopped(signum)

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        return False


def _stdout_closed():
    """Whether stdout is a pipe whose reader has gone (another pipe, a worker's, may break too)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _silence_stdout():
    """Point stdout at /dev/null so the interpreter's final flush of what is still buffered
    does not fail again on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a real file (captured in tests): nothing will flush to the pipe
    finally:
        os.close(devnull)
