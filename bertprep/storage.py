"""Paths that may be URLs: local files exactly as before, object stores through fsspec.

Every path a stage or the trainer takes may be `s3://bucket/prefix`,
`gs://bucket/prefix`, `hf://datasets/owner/name/...` (read), `file://...`
or a plain local path. A local path (and `file://`) goes to the `os`
functions it always went to, so local runs keep their bytes and messages;
a URL goes to the fsspec filesystem of its scheme (s3fs, gcsfs,
huggingface_hub's HfFileSystem), whose credentials come from each store's
own chain (AWS environment/config/profile and AWS_ENDPOINT_URL, Google
application default credentials, the HF token). We never write a client.

An object store has no directories, no rename and no flock, so:
- a "directory" of a URL exists when some object lies under it, and making
  one is a no-op;
- an object is written whole or not at all: `atomic.atomic_open` spools it
  to a local temporary and uploads it in one PUT (or one multipart upload,
  completed at the end and aborted on failure: s3fs's `put_file`);
- a tree is held by a lock object created with a conditional write
  (`mode="create"`: S3's If-None-Match: *, GCS's ifGenerationMatch=0), see
  `atomic.hold`.

Errors of a store (no such bucket, refused credentials, no filesystem for
the scheme) become one line naming the URL without its credentials, as an
OSError (exit 1) or a UsageError (exit 2) for a scheme nothing handles.

Hostile paths (docs/cloud.md, "What a URL may hold"): `check_path` refuses,
before any client sees it, every URL whose form would send the output
elsewhere or carry a secret: credentials (`user:pass@`), a query string (a
signed URL) or a fragment, no bucket, `.`/`..` segments, a host on
`file://`, an upper-case scheme, and any scheme but s3/s3a, gs/gcs and hf
(`memory://` would lose the records at exit). Every message a store client
writes passes `redact` (keys, secrets, signatures, tokens, `user:pass@`).
Every request has a connect and a read timeout and a bounded number of
attempts (`store_limits`), so a store that never answers ends the command.
"""

import contextlib
import errno
import glob as _glob
import hashlib
import io
import os
import queue
import re
import shutil
import tempfile
import threading
import urllib.parse
import weakref

from bertprep.errors import DataError, UsageError, redact

READ_BLOCK = 8 << 20  # bytes per ranged read of a streamed object: large, so the network is not the step's wait
READ_AHEAD = 2  # blocks a stream's reader thread keeps ready
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_S3_SCHEMES = ("s3", "s3a")
# An hf:// URL's repository: OWNER/NAME (a model's), or after datasets/ or spaces/; huggingface_hub answered a
# URL without one (hf://, hf://datasets, hf://gpt2) with a ValueError or NotImplementedError traceback.
_HF_REPO = re.compile(r"((datasets|spaces)/)?[^/]+/[^/]+(/|$)")
_BUCKET_SCHEMES = (*_S3_SCHEMES, "gs", "gcs")  # stores of buckets, which exists() cannot tell from a missing key
_READ_ONLY_SCHEMES = ("hf",)  # read through huggingface_hub, never written (refuse_read_only)
_EXTRA_FOR = {**dict.fromkeys(_BUCKET_SCHEMES, "cloud"), "hf": "hf"}


def scheme(path):
    """`s3` of `s3://b/k`; None for a local path (and for `file://`, which is one)."""
    match = _SCHEME.match(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else None
    if not match or match.group(1).lower() == "file":
        return None
    return match.group(1).lower()


def is_url(path):
    """True when `path` names an object in a store (not a local file)."""
    return scheme(path) is not None


# What a step may do with a path depends on where it lies. The steps ask these questions, each naming what
# it needs, instead of asking whether a path is a URL: this module is the one place that knows.


def renames(path):
    """Whether a file or tree written beside `path` can be renamed onto it (a local disk): a run stages there
    and renames, and a file of the recorded size is whole. A store has no rename: an object is uploaded whole
    (atomic.atomic_open), a tree object by object with its `.complete` marker last."""
    return not is_url(path)


def appends(path):
    """Whether a file at `path` can be appended to as a run goes (an event log, an HTTP download resumed with
    Range into a `.part`); an object is written once, whole."""
    return not is_url(path)


def reads_in_place(path):
    """Whether `path` is a file on this machine, read with os calls or a memory map; else it is read through
    the store's stream of ranged reads (open) or from a local copy (local_copy)."""
    return not is_url(path)


def writes(path):
    """Whether a run may write at `path`: every place but an hf:// one (the Hugging Face hub is read, never
    written: bertprep has no upload to the hub, and its client's write would be a commit made with the token)."""
    return scheme(path) not in _READ_ONLY_SCHEMES


def refuse_read_only(label, path):
    """One UsageError line (exit 2), before any work, where the output `path` (named `label`: its flag, its
    field, "the output") is hf://: an `--out hf://...` did the whole run, then reached the hub client ("Cannot
    reach https://huggingface.co/api/datasets/...: offline mode is enabled", exit 1), and online, with a token,
    a write there would be a commit to the hub."""
    if path is not None and not writes(path):
        raise UsageError(f"{label} {display(path)}: hf:// is read-only (bertprep reads the Hugging Face hub and "
                         "never writes to it): write to a local path, s3:// or gs://")


def named_from_the_working_directory(path):
    """Whether `path` is a local path relative to the working directory (".", "..", `tfrecord/training`): the
    folders above it lie past its names ("." has none), found by its absolute path; not a URL, file:// or an
    absolute path, whose names reach them."""
    return not is_url(path) and not os.fspath(path).startswith("file:") and not os.path.isabs(path)


def checks_locally(path):
    """Whether an output's place at `path` can be checked before a run with os calls (it is on this machine:
    a file where a directory is to be, a missing parent, no write permission); a store's is the store's to
    refuse when the run writes there."""
    return not is_url(path)


def names_in(directory):
    """os.listdir of a directory; nothing for a store's prefix no object lies under yet (a store has no empty
    directories), while a missing local directory is FileNotFoundError."""
    try:
        return listdir(directory)
    except FileNotFoundError:
        if is_url(directory):
            return []
        raise


def holds(path, size, digest):
    """Whether `path` is the file a manifest lists with `size` bytes and sha256 `digest`, for a rerun to keep
    it: a local file of that size (renamed into place whole, so it is that file); an object of that size and
    that sha256 (a store cannot say which run uploaded it). False when it is missing or unreadable."""
    try:
        if getsize(path) != size:
            return False
        return renames(path) or sha256(path) == digest
    except OSError:
        return False


def parent(path):
    """The directory holding `path`; None at a local root and at a bucket (above it nothing is the run's)."""
    up = os.path.dirname(path)
    return None if up == path or is_url(up) != is_url(path) else up


def absolute_normpath(path):
    """normpath(absolute(path)): the one spelling of a place a stage compares paths by (`./part-0` and
    `/r/part-0` alike), its links kept, where comparable resolves them."""
    return normpath(absolute(path))


def comparable(path):
    """`path` as two spellings of one place give it alike: a URL normalised without trailing slashes, a local
    path with its links resolved (to tell an output that is, holds or lies inside an input)."""
    path = os.fspath(path)
    if is_url(path):
        return absolute_normpath(path)
    return os.path.realpath(local_path(path))


def local_path(path):
    """A local path for `file://...` (and any local path); a URL with its doubled slashes collapsed (`collapsed`)."""
    path = os.fspath(path)
    if path.startswith("file://"):
        check_path(path)
        return urllib.parse.unquote(urllib.parse.urlsplit(path).path) or "/"
    return collapsed(path)


def collapsed(url):
    """`url` with each run of slashes after its bucket (repository) one slash: `s3://b//x` and `s3://b/x/y//z` name
    the objects of `s3://b/x` and `s3://b/x/y/z`, as the comparisons of paths (normpath) always took them.
    s3fs's glob and walk found nothing under `s3://b//x` (create: "the pattern matches no file", pack: "not a
    records directory", bertprep.torch: "no tfrecord training records") while its reads found the objects, and
    a store that keeps `//` in a key (AWS S3) would have written the outputs under other keys than a reader
    lists. A local path, an hf:// URL (`hf://datasets//name` is refused as naming no repository), a URL without
    doubled slashes and `s3:///...` (no bucket, refused by check_path) are unchanged; a trailing slash stays."""
    match = _SCHEME.match(url) if isinstance(url, str) else None
    if not match or match.group(1) not in _BUCKET_SCHEMES or "//" not in url[match.end():]:
        return url
    rest = url[match.end():]
    authority, slash, key = rest.partition("/")
    if not authority:
        return url
    return f"{url[:match.end()]}{authority}{re.sub('/{2,}', '/', slash + key)}"


def absolute(path):
    """What a stage keeps of a path it was given: os.path.abspath of a local one, a URL without its
    trailing slashes (a store's keys are strings: `s3://b/p/` and `s3://b/p` are one prefix)."""
    path = local_path(path)
    if is_url(path):
        head, rest = path.split("://", 1)
        return f"{head}://{rest.rstrip('/')}" if rest.rstrip("/") else path
    return os.path.abspath(path)


def display(path):
    """`path` fit for a log line, a summary or a manifest: no user:password@ and no signed query."""
    path = os.fspath(path)
    if not is_url(path):
        return path
    parts = urllib.parse.urlsplit(path)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def join(path, *parts):
    """os.path.join for local paths; `/`-joined keys for URLs."""
    if is_url(path):
        return "/".join([path.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(path, *parts)


def relpath(path, start):
    """os.path.relpath for local paths; for a URL under the prefix `start`, its key after that prefix."""
    if not is_url(path):
        return os.path.relpath(path, start)
    return normpath(path)[len(normpath(start).rstrip("/")) + 1:]


def lies_below(path, directory):
    """Whether `path` lies below `directory` (not at it), "." or "" (the current directory) too: a prefix test
    `directory + "/"` missed every file of "." (`tfrecord/x`, normalised, has no "./")."""
    if is_url(path):
        return normpath(path).startswith(normpath(directory).rstrip("/") + "/")
    relative = os.path.relpath(path or os.curdir, directory or os.curdir)
    return relative not in (os.curdir, os.pardir) and not relative.startswith(os.pardir + os.sep)


def normpath(path):
    """os.path.normpath for local paths; for a URL its key with `.`, `..` and doubled slashes resolved."""
    if not is_url(path):
        return os.path.normpath(path)
    head, rest = path.split("://", 1)
    return f"{head}://{os.path.normpath('/' + rest)[1:]}"


# -- the filesystem of a URL, and its errors ------------------------------------------


_SUPPORTED_SCHEMES = (*_BUCKET_SCHEMES, "hf")
_EXPECTED = "expected s3://, gs://, hf://, file:// or a local path"


def _shown(text):
    """A URL of any scheme without its user:password@, query and fragment: what a refusal may print."""
    head, rest = re.split(r"[?#]", text, maxsplit=1)[0].split("://", 1)
    authority, slash, key = rest.partition("/")
    return f"{head}://{authority.rsplit('@', 1)[-1]}{slash}{key}"


def check_path(path):
    """One UsageError line (exit 2) for a path whose URL form would carry a secret or send what is written
    elsewhere than it says; nothing for a plain local path or a well-formed URL. Called before any client sees
    the URL: by every options object (`options.normalise_paths`) and by `filesystem`."""
    text = os.fspath(path)
    match = _SCHEME.match(text) if isinstance(text, str) else None
    if not match:
        return
    name, shown = match.group(1), _shown(text)
    if name != name.lower():
        raise UsageError(f"{shown}: a URL scheme is written in lower case ({name.lower()}://...)")
    parts = urllib.parse.urlsplit(text)
    if "@" in parts.netloc:
        raise UsageError(f"{shown}: credentials in a URL are refused (they would be printed and stored with the "
                         "path): give them through the store's environment variables or profile")
    if "?" in text:
        raise UsageError(f"{shown}: a query string in a storage URL is refused (a signed URL is no path: give the "
                         "credentials through the store's environment variables or profile)")
    if "#" in text:
        raise UsageError(f"{shown}: '#' in a storage URL is refused (a fragment is not part of a key)")
    if name == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError(f"{shown}: a file:// URL names no host (file:///absolute/path, or a plain path)")
        return
    if name not in _SUPPORTED_SCHEMES:
        raise UsageError(f"{shown}: {_unsupported(name)} URL scheme {name}:// ({_EXPECTED})")
    if name in _BUCKET_SCHEMES and not parts.netloc:
        raise UsageError(f"{shown}: no bucket (expected {name}://BUCKET/PREFIX)")
    if name == "hf" and not _HF_REPO.match(text.split("://", 1)[1]):  # else a ValueError or NotImplementedError
        raise UsageError(f"{shown}: no repository (expected hf://datasets/OWNER/NAME/PATH)")  # from the hub client
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        raise UsageError(f"{shown}: '.' and '..' segments are refused in a URL (a store keeps them as part of the "
                         "key)")


def _unsupported(name):
    """"unknown" for a scheme fsspec does not know; "unsupported" for one it knows that bertprep does not take
    (memory://, whose objects vanish at exit; abfs://, ftp://, ...)."""
    from fsspec.registry import known_implementations, registry

    return "unsupported" if name in known_implementations or name in registry else "unknown"


def filesystem(url):
    """(fsspec filesystem, path inside it) of `url`; one UsageError line when no filesystem handles it."""
    import fsspec

    check_path(url)
    name = scheme(url)
    try:
        fsspec.get_filesystem_class(name)
    except ImportError:
        extra = _EXTRA_FOR.get(name, "cloud")
        raise UsageError(f"{display(url)}: no filesystem for {name}:// is installed "
                         f"(pip install 'bertprep[{extra}]')") from None
    with errors_named(url):
        fs, inner = fsspec.core.url_to_fs(collapsed(url), **_options(name))
    if name in _S3_SCHEMES:
        fs.retries = _S3FS_ATTEMPTS  # s3fs's own loop around botocore's (a body cut off mid-read), bounded too
        with errors_named(url):
            fs.connect()  # the client, made once per instance (no request is sent)
        fs.s3.meta.events.register_last("before-call.s3", _without_expect_continue, unique_id="bertprep-no-expect")
    _OPENED.add(fs)
    return fs, inner


def _without_expect_continue(params, **_kwargs):
    """botocore asks for "Expect: 100-continue" on every upload with a file-like body, and aiohttp waits for the
    store's "100 Continue" with no timeout at all: an endpoint that never answers held a write for ever. Without
    the header the body is sent at once and the read timeout bounds the wait for the answer (the bytes stored
    are the same; only a refusal before the body is sent is lost)."""
    params["headers"].pop("Expect", None)


# botocore (1.36 on) adds a CRC32 of every PutObject and UploadPart body by default ("when_supported"); bertprep
# asks for them only where an operation requires one ("when_required", botocore's behaviour before 1.36). Several
# S3-compatible stores did not accept the new checksum headers at first, and the CRC32 is one more client pass
# over every byte (docs/benchmarks.md, "Object storage", has what it costs). The bytes a stage writes
# stay checked end to end by the sha256 its manifest records per file, computed while the file was written:
# `validate` and a resume after a kill compare every object with it, which catches a damaged transfer and an
# object damaged at rest. Over http botocore still signs each body's SHA-256, so the store checks the transfer.
# A user who wants botocore's default sets AWS_REQUEST_CHECKSUM_CALCULATION=when_supported.
_S3_CHECKSUMS_WHEN_REQUIRED = {"request_checksum_calculation": "when_required"}

# Every request waits a bounded time (issue 39: an endpoint that accepts the connection and never answers held a
# command for ever). s3fs retries timeouts 5 times around botocore's own 5 attempts, 15 s each: over 6 minutes
# before a line. Now botocore makes 1 + retries attempts ("standard" mode: exponential backoff, connection
# errors, timeouts, 5xx and throttling), and s3fs's loop, which also retries a body cut off mid-read, 2.
STORE_LIMITS = {  # environment variable -> (default, what it bounds); docs/cloud.md lists them
    "BERTPREP_STORE_CONNECT_TIMEOUT": (10.0, "seconds to open a connection to the store"),
    "BERTPREP_STORE_READ_TIMEOUT": (30.0, "seconds a request waits for the store's next bytes"),
    "BERTPREP_STORE_RETRIES": (2, "attempts after the first for a failed request"),
}
_S3FS_ATTEMPTS = 2


def store_limits(environ=os.environ):
    """(connect timeout, read timeout, retries) from the environment, or their defaults; one UsageError line
    for a value that is not a number of the right kind."""
    values = []
    for variable, (default, _meaning) in STORE_LIMITS.items():
        text = environ.get(variable)
        if text is None:
            values.append(default)
            continue
        try:
            value = type(default)(text)
        except ValueError:
            value = -1
        if value < 0 or (isinstance(value, float) and value == 0):
            kind = "a whole number >= 0" if isinstance(default, int) else "a number of seconds > 0"
            raise UsageError(f"{variable}={text!r}: expected {kind}")
        values.append(value)
    return tuple(values)


def _options(name):
    """The options bertprep gives the filesystem of scheme `name`: the timeouts and attempts (`store_limits`);
    for S3 request checksums only where required, unless the user chose botocore's
    (AWS_REQUEST_CHECKSUM_CALCULATION set)."""
    connect, read, retries = store_limits()
    if name in _S3_SCHEMES:
        config = {"connect_timeout": connect, "read_timeout": read,
                  "retries": {"mode": "standard", "total_max_attempts": 1 + retries}}
        if "AWS_REQUEST_CHECKSUM_CALCULATION" not in os.environ:
            config.update(_S3_CHECKSUMS_WHEN_REQUIRED)
        return {"config_kwargs": config}
    if name in ("gs", "gcs"):
        return {"requests_timeout": connect + read}  # aiohttp's total per request; gcsfs makes 6 attempts
    return {}  # hf://: huggingface_hub's own timeouts (HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT: 10 s)


# the filesystems this process used: a forked child must leave their connections be
_OPENED: weakref.WeakSet = weakref.WeakSet()


def _leave_inherited_connections():
    """In a forked child (a local engine's or validate's worker): never close the parent's filesystems.

    Their sockets are registered in the parent's event loop's epoll, which the child shares: a child that
    closes them when it drops the parent's instances (their finalizer `close_session`) unregisters the
    parent's sockets, and the parent's next request waits forever; and closing a session of a loop this
    process does not run prints tracebacks ("attached to a different loop", "Unclosed client session"). The
    child makes its own filesystems (fsspec keys its cache by pid); the inherited ones stay referenced and
    unclosed until the child exits. A child has none of the parent's read-ahead threads either, so streams
    prefetched there would never fill: forgotten.
    """
    inherited = {id(fs) for fs in _OPENED}
    for finalizer in list(weakref.finalize._registry):  # the only list of finalizers there is
        alive = finalizer.peek()
        if alive and (id(alive[0]) in inherited or getattr(alive[1], "__name__", None) == "close_session"):
            _INHERITED.append(alive[0])
            finalizer.detach()
    _INHERITED.extend(_OPENED)
    _OPENED.clear()
    _PREFETCHED.clear()


_INHERITED: list = []  # in a forked child: the parent's filesystems, kept so that they are never collected
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_leave_inherited_connections)


def check_schemes(*paths):
    """A UsageError (exit 2) naming the first URL among `paths` whose scheme no installed filesystem handles,
    before a stage reads or writes anything; local paths and None pass."""
    for path in paths:
        if path is not None and is_url(path):
            filesystem(path)


@contextlib.contextmanager
def errors_named(url):
    """A store's failure inside the block becomes an OSError naming `url` (without credentials)."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc.filename, str) and exc.filename == display(url):
            raise
        raise OSError(exc.errno or _ERRNO_OF.get(type(exc), errno.EIO), _reason(exc, url), display(url)) from None
    except Exception as exc:  # botocore/aiohttp/google-auth errors that the filesystems let through
        # huggingface_hub's HTTP client is httpx (httpx2/httpcore2 in its newer releases): an hf:// URL with no
        # hub reachable (offline, a closed HF_ENDPOINT) was a 100-line ConnectError traceback
        if type(exc).__module__.split(".")[0] in ("botocore", "aiobotocore", "aiohttp", "google", "requests",
                                                  "huggingface_hub", "gcsfs", "s3fs", "fsspec", "httpx", "httpx2",
                                                  "httpcore", "httpcore2"):
            raise OSError(errno.EIO, _reason(exc, url), display(url)) from None
        raise


# A filesystem's FileNotFoundError or PermissionError often carries no errno; OSError(errno, ...) picks the class
# from it, so callers can still catch "not there" and "refused" by class.
_ERRNO_OF = {FileNotFoundError: errno.ENOENT, PermissionError: errno.EACCES, FileExistsError: errno.EEXIST}


# The request gcsfs names in a FileNotFoundError when it lists or uploads into a bucket that is not there:
# `b/NAME/o` (a listing), `http://HOST/upload/storage/v1/b/NAME/o` (an upload); a missing object's ends `/o/KEY`.
_GCS_BUCKET_REQUEST = re.compile(r"(^|/)b/[^/?]+/o$")
# The request gcsfs names a missing object by: `b/BUCKET/o/KEY` (the key %-quoted, `dir%2Fx`), the host and
# `/storage/v1/` before it and a query after it where the whole URL is given.
_GCS_OBJECT_REQUEST = re.compile(r"(?:\S*/)?b/([^/?\s]+)/o/([^?\s]+)(?:\?\S*)?")


def _reason(exc, url):
    """A store error's message on one line (the message names `url` before it); a refused credential says so in
    the words users search for."""
    text = redact(" ".join(str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc).split()))
    if isinstance(exc, PermissionError):
        return f"access denied (check the store's credentials): {text}" if text else "access denied"
    if isinstance(exc, FileNotFoundError):
        if _GCS_BUCKET_REQUEST.search(text):  # gcsfs names a missing bucket by its request: "not found: b/NAME/o"
            return "The specified bucket does not exist"  # S3's words
        text = _object_named_as_given(text, url)
        return f"not found: {text}" if text and "not" not in text.lower() else (text or "not found")
    return text or type(exc).__name__


def _object_named_as_given(text, url):
    """`text` with each object gcsfs names by its JSON API request (`b/B/o/dir%2Fx`) named by its gs:// URL; ""
    where it only names `url`'s own object (S3's `bucket/key`, GCS's request for it): the message names `url`
    before it, as the user gave it."""
    text = _GCS_OBJECT_REQUEST.sub(lambda match: f"gs://{match[1]}/{urllib.parse.unquote(match[2])}", text)
    shown = display(url)
    return "" if text in (shown, shown.split("://", 1)[-1]) else text


# -- the os functions, for paths and URLs ---------------------------------------------


def _answer(path, local_question, method):
    """`local_question` of a local path; the filesystem's `method` of a URL's key, its errors named by URL."""
    if not is_url(path):
        return local_question(local_path(path))
    fs, inner = filesystem(path)
    with errors_named(path):
        return getattr(fs, method)(inner)


def exists(path):
    return _answer(path, os.path.exists, "exists")


def check_reachable(path):
    """Nothing for a local path; for a URL the store's error (one line naming it) when its bucket is missing or
    refuses the credentials: exists() and isfile() then say only False, which would read as "no such file"."""
    if scheme(path) not in _BUCKET_SCHEMES:
        return
    fs, inner = filesystem(path)
    bucket = inner.split("/", 1)[0]
    with errors_named(path):
        fs.ls(bucket, detail=False, refresh=True)


def isdir(path):
    """os.path.isdir; for a URL, whether objects lie under `path/`, and a DataError where `path` is also an
    object itself: a store keeps `a.parquet` beside `a.parquet/b.parquet` (our own stages refuse to write under
    an object, refuse_writing_under_an_object, but another tool may), and every reader took it for a directory,
    passing the object over."""
    if not is_url(path):
        return os.path.isdir(local_path(path))
    is_object = isfile(path)  # asked first: once s3fs has listed `path/`, its cache answers isfile False
    if not _answer(path, os.path.isdir, "isdir"):
        return False
    if is_object:
        raise DataError(f"{display(path)}: both an object and the prefix of other objects ({display(path)}/...): "
                        "read as a directory, the object would be passed over; move one of them")
    return True


def isfile(path):
    return _answer(path, os.path.isfile, "isfile")


def refuse_writing_under_an_object(url):
    """A DataError where the prefix `url` (an output to write under) or one above it in its bucket is an object.
    A store takes `a/b/c` beside an object `a/b`, where a local write under a file fails; every later reader of
    `a/b` would then find both an object and a prefix (isdir's error). Nothing for a local path or hf://."""
    if scheme(url) not in _BUCKET_SCHEMES:
        return
    fs, inner = filesystem(url)
    bucket, _, key = inner.partition("/")
    parts = [part for part in key.split("/") if part]
    for depth in range(len(parts), 0, -1):
        above = "/".join([bucket, *parts[:depth]])
        with errors_named(url):
            is_object = fs.isfile(above)
        if is_object:
            shown = display(f"{url.split('://', 1)[0]}://{above}")
            raise DataError(f"{display(url)}: {shown} is an object, so nothing can be written under it as a "
                            f"folder ({shown}/...): its readers would find both an object and a prefix; write "
                            "elsewhere, or move the object")


_IS_KIND = {"file": isfile, "directory": isdir, "any": exists}


def require(path, kind, missing):
    """Nothing when `path` exists as `kind` ("file", "directory" or "any"); else `not_found(path, missing)`."""
    if not _IS_KIND[kind](path):
        raise not_found(path, missing)


def not_found(path, missing):
    """`missing`, the caller's exception saying `path` is not there, for it to raise; but the store's own error,
    raised here, when a URL's bucket is missing or refuses the credentials (exists/isdir/isfile answer only
    False then, which would read as "no such file")."""
    check_reachable(path)
    return missing


def getsize(path):
    if not is_url(path):
        return os.path.getsize(local_path(path))
    fs, inner = filesystem(path)
    with errors_named(path):
        try:
            return fs.size(inner)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), display(path)) from None


def listdir(path):
    """Names directly under `path` (files and directories), like os.listdir, sorted for URLs."""
    if not is_url(path):
        return os.listdir(local_path(path))
    fs, inner = filesystem(path)
    with errors_named(path):
        entries = fs.ls(inner, detail=False, refresh=True)
    if not entries:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), display(path))
    return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)


def glob(pattern):
    """glob.glob for local patterns; for a URL pattern the matching URLs, sorted."""
    if not is_url(pattern):
        return _glob.glob(local_path(pattern))
    fs, inner = filesystem(pattern)
    with errors_named(pattern):
        found = fs.glob(inner)
    prefix = pattern.split("://", 1)[0]
    return sorted(f"{prefix}://{p}" for p in found)


def walk(top):
    """os.walk in sorted order without hidden directories (`.partial/`), for paths and URLs."""
    if not is_url(top):
        for directory, dirs, files in os.walk(local_path(top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            yield directory, dirs, sorted(files)  # as a store's: a listing's order is the file system's
        return
    fs, inner = filesystem(top)
    with errors_named(top):
        listing = list(fs.walk(inner))
    prefix = top.split("://", 1)[0]
    base = inner.rstrip("/")
    for directory, dirs, files in listing:
        relative = directory.rstrip("/")[len(base):].strip("/")
        if any(part.startswith(".") for part in relative.split("/") if part):
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield f"{prefix}://{directory.rstrip('/')}", dirs, sorted(files)


def makedirs(path):
    """os.makedirs(exist_ok=True); nothing for a URL (a store has no directories to make)."""
    if not is_url(path):
        os.makedirs(local_path(path), exist_ok=True)


def remove(path):
    """Remove a file or an object (gone already is fine)."""
    if not is_url(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(local_path(path))
        return
    fs, inner = filesystem(path)
    with contextlib.suppress(FileNotFoundError), errors_named(path):
        fs.rm_file(inner)


def remove_if_empty(path):
    """Remove the directory `path` if nothing is in it; nothing for a URL (a store has no directories: a prefix
    with no object under it is gone already)."""
    if not is_url(path):
        with contextlib.suppress(OSError):  # not empty, or gone: kept as it is
            os.rmdir(local_path(path))


def rmtree(path):
    """Remove a directory tree or every object under a prefix (gone already is fine)."""
    if not is_url(path):
        shutil.rmtree(local_path(path), ignore_errors=True)
        return
    fs, inner = filesystem(path)
    with contextlib.suppress(FileNotFoundError), errors_named(path):
        if fs.exists(inner):
            fs.rm(inner, recursive=True)


def open(path, mode="rb", encoding=None, errors=None, newline=None, sha256=None):  # the builtin's name, on purpose
    """builtins.open for a local path; for a URL, reading streams it with read-ahead (`ReadAhead`). With `sha256`
    (binary reading: its manifest's), the bytes read are hashed and checked when the end is read
    (`DigestChecked`)."""
    if sha256 is not None:
        return io.BufferedReader(DigestChecked(open(path, "rb"), path, sha256))
    if not is_url(path):
        return io.open(local_path(path), mode, encoding=encoding, errors=errors, newline=newline)
    if set(mode) - set("rbt"):
        raise ValueError(f"{display(path)}: objects are written with atomic.atomic_open, not opened in {mode!r}")
    with _PREFETCH_LOCK:
        stream = _PREFETCHED.pop(path, None)
    stream = stream or ReadAhead(path)
    if "b" in mode:
        return stream
    return io.TextIOWrapper(stream, encoding=encoding or "utf-8", errors=errors, newline=newline)


class DigestChecked(io.RawIOBase):
    """A binary stream that hashes the bytes read through it and, when its end is read, compares the sha256 with
    a manifest's: a file changed after it was written is named in one DataError line, from the bytes its reader
    reads anyway (no second pass). A reader that stops before the end checks nothing."""

    def __init__(self, f, path, sha256):
        super().__init__()
        self._f, self.path, self._expected, self._digest = f, path, sha256, hashlib.sha256()

    def readable(self):
        return True

    def readinto(self, target):
        count = self._f.readinto(target)
        if count:
            self._digest.update(memoryview(target)[:count])
        elif self._digest is not None:
            digest, self._digest = self._digest.hexdigest(), None
            if digest != self._expected:
                raise DataError(f"{display(self.path)}: sha256 {digest} is not the manifest's {self._expected}: the "
                                "file changed after it was written (rerun the stage that wrote it)")
        return count

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


_PREFETCHED: dict = {}  # URL -> its ReadAhead, started by prefetch() before open() asks for it
_PREFETCH_LOCK = threading.Lock()
PREFETCH_LIMIT = 2  # streams started ahead at once (each holds at most READ_AHEAD + 1 blocks)


def prefetch(path):
    """Start reading the object `path` before it is opened (the next file of a sequence), so its first blocks
    are ready when `open` asks instead of one request's wait per file; nothing for a local path."""
    if not is_url(path):
        return
    with _PREFETCH_LOCK:
        if path in _PREFETCHED:
            return
        while len(_PREFETCHED) >= PREFETCH_LIMIT:  # the oldest was never opened: a reader changed its plan
            _PREFETCHED.pop(next(iter(_PREFETCHED))).close()
        _PREFETCHED[path] = ReadAhead(path)


def read_bytes(path, sha256=None):
    """The whole file's bytes; with `sha256` (its manifest's), checked as they are read (DigestChecked)."""
    with open(path, "rb", sha256=sha256) as f:
        return f.read()


def read_range(path, start, length):
    """`length` bytes of the file at `start` (fewer at its end): one ranged read of an object, a seek of a file."""
    if not is_url(path):
        with io.open(local_path(path), "rb") as f:
            f.seek(start)
            return f.read(length)
    fs, inner = filesystem(path)
    with errors_named(path):
        return fs.cat_file(inner, start=start, end=start + length)


def sha256(path, chunk_size=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def upload(local, url, exclusive=False):
    """Put the local file `local` at `url` whole or not at all (`exclusive`: only if no object is there)."""
    refuse_read_only("the output", url)  # each stage refuses it up front; this is the last guard
    fs, inner = filesystem(url)
    # s3fs sends one PUT below 100 MiB, else 50 MiB parts completed at the end (aborted on failure). Smaller
    # parts were measured: no faster into SeaweedFS, and reading multipart objects cost it more CPU.
    with errors_named(url):
        fs.put_file(local, inner, mode="create" if exclusive else "overwrite")


def write_exclusive(url, data):
    """Create the object `url` holding `data` only if none is there; False when one is (a conditional write)."""
    refuse_read_only("the output", url)  # each stage refuses it up front; this is the last guard
    fs, inner = filesystem(url)
    try:
        with errors_named(url):
            fs.pipe_file(inner, data, mode="create")
    except OSError as exc:
        # S3 says PreconditionFailed (s3fs: FileExistsError, or EINVAL when the store omits the condition),
        # GCS a 412 on ifGenerationMatch=0; whichever: the object there is someone else's.
        if exists(url):
            return False
        raise exc
    return True


@contextlib.contextmanager
def local_copy(path):
    """A local file with `path`'s bytes, for readers that need a real file (h5py); the path itself when local."""
    if not is_url(path):
        yield local_path(path)
        return
    fs, inner = filesystem(path)
    with tempfile.TemporaryDirectory(prefix="bertprep-") as directory:
        target = os.path.join(directory, os.path.basename(inner) or "object")
        with errors_named(path):
            fs.get_file(inner, target)
        yield target


def download_files(directory, target):
    """The files directly in `directory` (not those of its subdirectories) copied into the new local directory
    `target`, for a reader that needs them side by side on disk (a checkpoint's)."""
    os.makedirs(target)
    if not is_url(directory):
        for entry in os.scandir(local_path(directory)):
            if entry.is_file():
                shutil.copyfile(entry.path, os.path.join(target, entry.name))
        return
    fs, inner = filesystem(directory)
    with errors_named(directory):
        for entry in fs.ls(inner, detail=True, refresh=True):
            if entry["type"] == "file":
                fs.get_file(entry["name"], os.path.join(target, entry["name"].rsplit("/", 1)[-1]))


def spool_dir(make=True):
    """Where objects are written before their upload: $BERTPREP_SPOOL, else the system's temporary directory."""
    directory = os.environ.get("BERTPREP_SPOOL") or os.path.join(tempfile.gettempdir(), "bertprep-spool")
    if make:
        os.makedirs(directory, exist_ok=True)
    return directory


class ReadAhead(io.BufferedIOBase):
    """An object read front to back in READ_BLOCK ranged reads by a thread that stays READ_AHEAD blocks ahead.

    Record files are read sequentially, so the reader never waits on the
    network while a block is ready; seeking is not offered (a reader that
    needs it takes `local_copy`). `read(n)` returns n bytes until the end, as
    a file's does, slicing the blocks it holds: no second buffer copies them
    again (a whole block asked for is handed over as it came).
    """

    def __init__(self, url, block_size=READ_BLOCK, depth=READ_AHEAD):
        super().__init__()
        self.url = url
        fs, inner = filesystem(url)
        with errors_named(url):
            self._size = fs.size(inner)
            self._file = fs.open(inner, "rb", block_size=block_size, cache_type="none")
        self._blocks = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._block, self._at = b"", 0  # the block being read and the position in it
        self._done = False
        self._thread = threading.Thread(target=self._fill, args=(block_size,), daemon=True,
                                        name=f"read-ahead {display(url)}")
        self._thread.start()

    def _fill(self, block_size):
        try:
            while not self._stop.is_set():
                with errors_named(self.url):
                    block = self._file.read(block_size)
                self._put(block)
                if not block:
                    return
        except BaseException as exc:  # handed to the reader, raised there
            self._put(exc)

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._blocks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def readable(self):
        return True

    def size(self):
        return self._size

    def _next_block(self):
        """False at the end of the object; else the next block is the one being read."""
        if self._done:
            return False
        block = self._blocks.get()
        if isinstance(block, BaseException):
            self._done = True
            raise block
        self._block, self._at, self._done = block, 0, not block
        return bool(block)

    def read1(self, n=-1):
        if self._at >= len(self._block) and not self._next_block():
            return b""
        if self._at == 0 and (n is None or n < 0 or n >= len(self._block)):
            piece = self._block
        else:
            end = len(self._block) if n is None or n < 0 else self._at + n
            piece = self._block[self._at:end]
        self._at += len(piece)
        return piece

    def read(self, n=-1):
        pieces, wanted = [], -1 if n is None or n < 0 else n
        while wanted != 0 and (piece := self.read1(wanted)):
            pieces.append(piece)
            wanted = wanted - len(piece) if wanted > 0 else wanted
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def readinto(self, target):
        piece = self.read(len(target))
        target[:len(piece)] = piece
        return len(piece)

    def readline(self, size=-1):
        """The next line, found in the blocks held: io's own readline, offered no peek, reads a byte at a time
        (a line-by-line reader of a 9 MB object took seconds)."""
        pieces, left = [], -1 if size is None or size < 0 else size
        while left != 0 and (self._at < len(self._block) or self._next_block()):
            end = self._block.find(b"\n", self._at) + 1
            stop = end or len(self._block)
            if left > 0:
                stop = min(stop, self._at + left)
                left -= stop - self._at
            pieces.append(self._block[self._at:stop])
            self._at = stop
            if stop == end:
                break
        return b"".join(pieces)

    def close(self):
        if not self.closed:
            self._stop.set()
            self._thread.join()
            with contextlib.suppress(Exception):
                self._file.close()
        super().close()
