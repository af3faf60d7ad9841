"""Resumable, verified HTTP downloads.

`fetch` streams a URL into `<dest>.part`, resumes it with an HTTP Range request
after a dropped connection or an interrupted run (`If-Range` makes sure the
remote file is still the one the partial file came from), retries transient
failures with exponential backoff, checks the size and every checksum the
source publishes, and only then renames the file to `dest`. A 4xx answer or a
checksum mismatch ends with `DataError` and leaves no file under `dest`.

`Limits` bound one connection: a connection that delivers no byte for
`stall` seconds, or is still receiving its status line, headers or body
`deadline` seconds after its request, is closed and treated like a dropped
one (resumed with Range, one of the retries). Without the deadline a server
trickling a byte every few seconds would hold a download forever. It covers
the headers too: a server trickling header lines was bounded only by
http.client's 100-header limit times the stall. One mechanism keeps both
limits (`_Clock`): before connecting (the TCP connect, a TLS handshake and
sending the request each wait at most that long) and before each read of the
socket, its timeout is set to the stall limit or the time left to the
deadline, whichever is less, by the connection and response classes urllib
is given (`_opener`). A connection closed before the blank line that ends
the headers is a failed attempt, not a whole response of no body.

`SourceDownloads` wraps `fetch` with the per-source manifest
(`WORKDIR/download/<source>/manifest.json`): a file whose entry matches is not
fetched again.
"""

import base64
import contextlib
import functools
import hashlib
import http.client
import io
import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from bertprep import __version__, storage
from bertprep.errors import ON_COMMAND_LINE, DataError, UsageError, redact
from bertprep.options import check_types, errors_name_fields
from bertprep.workdir import load_manifest, save_manifest

CHUNK = 1 << 20
USER_AGENT = f"bertprep/{__version__}"
# Statuses worth retrying: the server is busy or failing, not refusing.
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}


MAX_SECONDS = 1e9  # 31 years: a limit, not "none" (which --deadline 0 says)
MAX_WAIT = 60.0  # the longest wait between two attempts (the backoff doubles up to it)
MAX_TEXT = 1 << 20  # fetch_text's largest body: a dump's md5 list is some kilobytes


@errors_name_fields
@dataclass(frozen=True)
class Limits:
    """Seconds one connection may go without a byte (`stall`) and may last in all (`deadline`; 0: no limit).

    The deadline's default, an hour, lets one connection bring about 3.6 GB at
    1 MB/s; a larger file takes several connections, each resumed where the
    last one stopped, and each counts as one of fetch's retries.
    """

    stall: float = 60.0
    deadline: float = 3600.0

    def check(self) -> "Limits":
        """Self, when both limits can be met; every source's options call this when built (DownloadOptions),
        and fetch and fetch_text before they connect."""
        # at most MAX_SECONDS: a socket takes no timeout beyond time_t (`inf` was an OverflowError traceback)
        if not 0 < self.stall <= MAX_SECONDS:
            raise UsageError(f"{_named('stall', '--stall-timeout')}: expected a number of seconds above 0 and at most "
                             f"{MAX_SECONDS:g}, got {self.stall:g}")
        if not 0 <= self.deadline <= MAX_SECONDS:
            raise UsageError(f"{_named('deadline', '--deadline')}: expected a number of seconds (0 for none) of at "
                             f"most {MAX_SECONDS:g}, got {self.deadline:g}")
        return self

    def __post_init__(self):
        check_types(self)


def _named(field, flag):
    """A limit as its error names it: the flag on a command line, else the field (`Limits.stall`), as options
    errors name them (options.errors_name_fields). check runs from the options that hold a Limits, none of whose
    fields `--stall-timeout` is: `download(..., limits=Limits(stall=nan))` named a flag Python has not."""
    return flag if ON_COMMAND_LINE.get() else f"Limits.{field}"


class _Transient(Exception):
    """A failure that a later attempt may not meet (dropped connection, 5xx)."""


class _ShortRange(_Transient):
    """A 206 answer whose Content-Range ends before the file does: a server (or a proxy) that sends a resumed file
    in pieces. The next piece is asked for at once; a piece that brought bytes spends no attempt."""


@dataclass
class Fetched:
    path: str
    url: str
    bytes: int
    sha256: str
    checksums: dict  # algorithm -> hex digest actually verified against the published one
    resumed_at: int  # bytes already on disk when this run started (0 = fresh)
    attempts: int


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f)


def _remove(*paths):
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class _Partial:
    """The `.part` file being written and the running digests of its bytes."""

    def __init__(self, path, algorithms):
        self.path = path
        self.algorithms = sorted(set(algorithms) | {"sha256"})
        self.hashers = {name: hashlib.new(name) for name in self.algorithms}
        self.have = 0
        if os.path.exists(path):
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    self._update(chunk)

    def _update(self, chunk):
        for h in self.hashers.values():
            h.update(chunk)
        self.have += len(chunk)

    def restart(self):
        _remove(self.path)
        self.hashers = {name: hashlib.new(name) for name in self.algorithms}
        self.have = 0

    def append_from(self, response, progress, limits):
        try:
            with open(self.path, "ab") as out:
                for chunk in _body_chunks(response, limits, self.have):
                    out.write(chunk)
                    self._update(chunk)
                    if progress is not None:
                        progress.advance(0, bytes=len(chunk))
        except OSError as exc:  # a full disk, a quota: "File too large" named no file
            raise DataError(f"{self.path}: cannot write at byte {self.have:,} ({exc.strerror or exc}); free space "
                            "and rerun to resume") from None

    def digests(self):
        return {name: h.hexdigest() for name, h in self.hashers.items()}


def fetch(url, dest, *, size=None, checksums=None, progress=None, retries=6, backoff=1.0, limits=Limits()):
    """Download `url` to `dest` and verify it; returns `Fetched`.

    `checksums` maps hashlib names (md5, sha1, sha256) to the published hex
    digests; `size` is the published size in bytes. Both are optional: what
    the source does not publish is not checked, but the server's own
    Content-Length always is. `limits` bound each connection (`Limits`).
    """
    limits.check()  # before the first connection: a stall of -1 or inf was no bound
    checksums = {k: v.lower() for k, v in (checksums or {}).items()}
    part_path, meta_path = dest + ".part", dest + ".part.json"
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    meta = _read_json(meta_path)
    # the URL as the manifest keeps it (errors.redact): a .part.json left for a resume held a mirror's password
    if meta is None or meta.get("url") != redact(url) or not os.path.exists(part_path):
        _remove(part_path, meta_path)
        meta = {"url": redact(url), "validator": None}
    part = _Partial(part_path, checksums)
    resumed_at, attempts = part.have, 0
    while True:
        attempts, before = attempts + 1, part.have
        try:
            _transfer(url, part, meta, meta_path, progress, limits)
            break
        except _Transient as exc:
            if isinstance(exc, _ShortRange) and part.have > before:
                attempts -= 1  # a piece of a file sent in pieces: progress, not a failed attempt
                continue
            if attempts > retries:
                raise DataError(
                    f"{url}: {exc} (gave up after {attempts} attempts; rerun to resume at byte {part.have:,})"
                ) from None
            wait = min(backoff * 2 ** (attempts - 1), MAX_WAIT)
            if progress is not None:
                progress.note(f"{os.path.basename(dest)}: {exc}; retrying in {wait:.1f}s from byte {part.have:,}")
            time.sleep(wait)
    if size is not None and part.have != size:
        page = file_page_note(part_path)
        _remove(part_path, meta_path)
        raise DataError(f"{url}: size mismatch: expected {size:,} bytes (published), got {part.have:,}{page}; the "
                        "download was deleted")
    digests = part.digests()
    for name, expected in sorted(checksums.items()):
        if digests[name] != expected:
            page = file_page_note(part_path)
            _remove(part_path, meta_path)
            raise DataError(f"{url}: {name} mismatch: expected {expected} (published), got {digests[name]}{page}; "
                            "the download was deleted")
    os.replace(part_path, dest)
    _remove(meta_path)
    return Fetched(dest, url, part.have, digests["sha256"], {k: digests[k] for k in checksums}, resumed_at, attempts)


# The start of an HTML page: what a mirror answers with 200 for an expired token or a missing file, as many do.
_PAGE = re.compile(rb"\s*(?:<!doctype\s+html|<html|<head|<body)", re.IGNORECASE)


def page_note(head):
    """' (an HTML page: ...)' where `head`, a body's first bytes, begins an HTML page, else '': a checksum mismatch
    or a list without the line sought said nothing more, and a user took the mirror for one that had republished
    the file under another checksum."""
    return " (an HTML page: the server's error or sign-in page, not the file?)" if _PAGE.match(
        head[:1024].removeprefix(b"\xef\xbb\xbf")) else ""


def file_page_note(path):
    """page_note of the file at `path`."""
    with open(path, "rb") as f:
        return page_note(f.read(1024))


def _body_chunks(response, limits, at):
    """The body as it arrives (`at`: its first byte's offset in the file); a stall or the deadline ends it."""
    try:
        # read1 returns whatever has arrived, one read of the socket (`_Reader`) at a time.
        while chunk := response.read1(CHUNK):
            yield chunk
            at += len(chunk)
    except _PastDeadline:
        raise _Transient(f"still transferring after the {limits.deadline:g} s deadline, at byte {at:,}") from None
    except TimeoutError:  # the socket's timeout was the stall limit
        raise _Transient(f"no byte for {limits.stall:g} s at byte {at:,}") from None
    except (ConnectionError, http.client.HTTPException) as exc:
        raise _Transient(f"connection lost at byte {at:,} ({exc.__class__.__name__})") from None


URL_SCHEMES = ("http", "https", "ftp", "file")  # what urllib's opener fetches (file:// a local mirror)


def check_url(url, name):
    """`url`, where it is a URL to download from, else a UsageError naming it as `name` (its flag or variable):
    `--base-url mirror.local/squad` (no scheme) and `http://[::1` were a ValueError traceback, and `s3://...` or
    `http://` (no host) were retried for a minute before `cannot connect (unknown url type: s3)`."""
    problem = _url_problem(url)
    if problem is not None:
        raise UsageError(f"{name} {url}: expected a URL such as https://host/path ({', '.join(URL_SCHEMES)}), but "
                         f"{problem}")
    return url


def _url_problem(url):
    """What makes `url` no URL to download from, or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (a port out of range is a ValueError here)
    except ValueError as exc:
        return f"it does not parse ({exc})"
    scheme = parts.scheme.lower()
    if not scheme:
        return "it has no scheme"
    if scheme not in URL_SCHEMES:
        return f"its scheme is {scheme}:"
    if scheme != "file" and not parts.hostname:
        return "it names no host"
    return None


def mirror_base(given, variable, default):
    """The base URL a source downloads from: `given` (--base-url, which its options checked), else the environment
    `variable`'s (checked here, naming it), else `default`."""
    if given:
        return given
    value = os.environ.get(variable)
    return check_url(value, f"${variable}") if value else default


def join_url(base, *names):
    """`base`, a mirror's URL, with `names` appended to its path: a query (a signed mirror's `?token=...`) stays
    after them. Joined as text, the names went into the query (`.../squad?token=T/train-v1.1.json`), every file
    was asked for as the directory itself, and the redacted error named no file."""
    parts = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(parts._replace(path="/".join([parts.path.rstrip("/"), *names])))


def _request(url, headers):
    """The request for `url`; a mirror's `user:password@` as HTTP basic auth (urllib looked the host up as
    "user:password@host"), in a header that a redirect to another host does not carry."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return urllib.request.Request(url, headers=headers)
    request = urllib.request.Request(urllib.parse.urlunsplit(parts._replace(netloc=host)), headers=headers)
    user, _colon, password = userinfo.partition(":")
    token = base64.b64encode(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()).decode()
    request.add_unredirected_header("Authorization", f"Basic {token}")
    return request


class _PastDeadline(Exception):
    """The connection's deadline came while it waited for bytes (not an OSError: urllib wraps those)."""


class _Clock:
    """One connection's limits against the clock, from its request on."""

    def __init__(self, limits):
        self.limits = limits
        self.ends = time.monotonic() + limits.deadline if limits.deadline else math.inf

    def timeout(self):
        """The socket timeout for the next wait: the stall limit or the time left, whichever is less."""
        left = self.ends - time.monotonic()
        if left <= 0:
            raise _PastDeadline
        return min(self.limits.stall, left)


class _Reader(io.RawIOBase):
    """A socket's bytes, each read waiting at most `clock.timeout()`."""

    def __init__(self, sock, clock):
        self.sock, self.clock = sock, clock
        self.raw = sock.makefile("rb", buffering=0)  # holds the socket open once urllib closes its own handle
        self.ended = False  # the server closed the connection

    def readable(self):
        return True

    def readinto(self, buffer):
        timeout = self.clock.timeout()
        self.sock.settimeout(timeout)
        try:
            count = self.raw.readinto(buffer)
            self.ended = self.ended or count == 0
            return count
        except TimeoutError:
            if timeout < self.clock.limits.stall:  # the deadline's time ran out, not the stall limit's
                raise _PastDeadline from None
            raise

    def close(self):
        self.raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response, reading the status line, headers and body through a `_Reader`."""

    def __init__(self, sock, *args, clock, **kwargs):
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # sock.makefile's reader: each of its reads waits the socket's one timeout
        self.reader = _Reader(sock, clock)
        self.fp = io.BufferedReader(self.reader)

    def begin(self):
        super().begin()
        # http.client ends the headers at the end of the stream as at their blank line: a connection closed inside
        # them was a whole response of no body, and its download an empty file called complete.
        if self.reader.ended:
            raise http.client.HTTPException("the connection closed inside the headers")


class _Connection(http.client.HTTPConnection):
    """http.client's connection, bounded by `clock` from connecting to the response's last byte."""

    def __init__(self, host, *, clock, **kwargs):
        super().__init__(host, **kwargs)
        self.clock = clock
        self.response_class = functools.partial(_Response, clock=clock)

    def connect(self):
        self.timeout = self.clock.timeout()  # for the TCP connect, a TLS handshake and sending the request
        super().connect()


class _HTTPSConnection(_Connection, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def http_open(self, req):
        return self.do_open(_Connection, req, clock=self.clock)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def https_open(self, req):
        return self.do_open(_HTTPSConnection, req, context=self._context, clock=self.clock)  # as urllib's own


def _opener(clock):
    """urllib's opener (proxies, redirects, errors) with connections bounded by `clock`: urlopen's own wait
    the stall limit per read of the status line and headers, with no deadline over them."""
    return urllib.request.build_opener(_HTTPHandler(clock), _HTTPSHandler(clock))


def _open(url, have, validator, clock):
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
        if validator:
            headers["If-Range"] = validator
    request = _request(url, headers)
    try:
        return _opener(clock).open(request, timeout=clock.limits.stall)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:
            return exc  # the partial file may already be whole; the caller checks
        reason = " ".join(str(exc.reason).split())  # a redirect loop's reason is three lines
        if exc.code in TRANSIENT_STATUS:
            raise _Transient(f"HTTP {exc.code} {reason}") from None
        raise DataError(f"{url}: HTTP {exc.code} {reason}") from None
    except urllib.error.URLError as exc:
        raise _Transient(f"cannot connect ({exc.reason})") from None
    except _PastDeadline:
        raise _Transient(f"still receiving the headers after the {clock.limits.deadline:g} s deadline") from None
    except TimeoutError:
        raise _Transient(f"no answer within {clock.limits.stall:g} s") from None
    except (ConnectionError, http.client.HTTPException) as exc:
        raise _Transient(f"connection failed ({exc.__class__.__name__}: {exc})") from None


def _transfer(url, part, meta, meta_path, progress, limits):
    """One attempt: append the rest of the body to the partial file."""
    response = _open(url, part.have, meta.get("validator"), _Clock(limits))
    with contextlib.closing(response):
        status = response.code
        if status == 416:
            # Range starts at or past the end: the partial file is whole if the total agrees.
            if _content_range_total(response.headers.get("Content-Range")) == part.have:
                return
            part.restart()
            raise _Transient("server refused the resume range; restarting from byte 0")
        if status == 206:
            start = _content_range_start(response.headers.get("Content-Range"))
            if start != part.have:
                part.restart()
                raise _Transient(f"server resumed at byte {start}, expected {part.have}; restarting")
        elif part.have:
            # 200 to a Range request: no Range support, or the file changed (If-Range). Start over.
            if progress is not None:
                name = os.path.basename(urllib.parse.urlsplit(url).path)  # not `name?token=***`
                progress.note(f"{name}: server sent the whole file; restarting from byte 0")
            part.restart()
        length = _content_length(url, response)
        expected_end = part.have + length if length is not None else None
        meta["validator"] = response.headers.get("ETag") or response.headers.get("Last-Modified")
        _write_json(meta_path, meta)
        part.append_from(response, progress, limits)
        if expected_end is not None and part.have < expected_end:
            raise _Transient(f"connection closed at byte {part.have:,} of {expected_end:,}")
        total = _content_range_total(response.headers.get("Content-Range")) if status == 206 else None
        if total is not None and part.have < total:  # the piece was whole, the file not: it was kept as complete
            raise _ShortRange(f"the server's answer ended at byte {part.have:,} of {total:,}")


def _content_length(url, response):
    """The response's Content-Length in bytes, None without one."""
    length = response.headers.get("Content-Length")
    if length is not None and not re.fullmatch(r"[0-9]+", length.strip()):
        raise DataError(f"{url}: the server's Content-Length {length!r} is not a number of bytes")
    return int(length) if length is not None else None


def _content_range_start(value):
    match = re.match(r"bytes (\d+)-", value or "")
    return int(match.group(1)) if match else None


def _content_range_total(value):
    match = re.search(r"/(\d+)$", value or "")
    return int(match.group(1)) if match else None


def fetch_text(url, retries=4, backoff=1.0, limits=Limits()):
    """A small text resource (a checksum list) fetched whole, with retries; 4xx, a body past MAX_TEXT bytes or
    not UTF-8 -> DataError."""
    limits.check()
    for attempt in range(retries + 1):
        try:
            response = _open(url, 0, None, _Clock(limits))
            with contextlib.closing(response):
                return _utf8_text(url, _small_body(url, response, limits))
        except _Transient as exc:
            if attempt == retries:
                raise DataError(f"{url}: {exc} (gave up after {retries + 1} attempts)") from None
            time.sleep(min(backoff * 2**attempt, MAX_WAIT))


def _small_body(url, response, limits):
    """The whole body of a small text resource: at most MAX_TEXT bytes (the dump's own bytes served at its checksum
    list's URL were read whole into memory), and as many as its Content-Length says (one cut short was a list
    that lacked the lines after the cut)."""
    length = _content_length(url, response)
    body = bytearray()
    for chunk in _body_chunks(response, limits, 0):
        body += chunk
        if len(body) > MAX_TEXT:
            raise DataError(f"{url}: expected a short text file (a checksum list), got more than {MAX_TEXT:,} "
                            "bytes")
    if length is not None and len(body) < length:
        raise _Transient(f"connection closed at byte {len(body):,} of {length:,}")
    return bytes(body)


def _utf8_text(url, body):
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:  # was a UnicodeDecodeError traceback
        raise DataError(f"{url}: expected a UTF-8 text file (a checksum list), got byte 0x{body[exc.start]:02x} "
                        f"at offset {exc.start:,}, which is not UTF-8") from None


def read_checksum_list(path, algorithm):
    """{file name: hex digest} from an md5sum/sha256sum-style list (`<digest>  <name>`; directories in
    the name are dropped), for a mirror that republishes files under its own checksums."""
    length = len(hashlib.new(algorithm).hexdigest())
    sums = {}
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    # a list saved with a BOM (PowerShell's Out-File, Notepad) was refused at its first line
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    raise UsageError(f"{path}:{number}: expected '<{algorithm}> <file name>' in UTF-8, found bytes "
                                     "that are not UTF-8") from None
                if line.strip():
                    parts = line.split()
                    if len(parts) != 2 or not re.fullmatch(f"[0-9a-fA-F]{{{length}}}", parts[0]):
                        raise UsageError(f"{path}:{number}: expected '<{algorithm}> <file name>'")
                    sums[os.path.basename(parts[1].lstrip("*"))] = parts[0].lower()
    except OSError as exc:
        raise UsageError(f"--checksums {path}: {exc.strerror}") from None
    return sums


class SourceDownloads:
    """The files of one source under WORKDIR/download/<source>/ and their manifest."""

    def __init__(self, directory, source, progress=None, limits=Limits()):
        self.directory = directory
        self.source = source
        self.progress = progress
        self.limits = limits
        storage.makedirs(directory)
        manifest = load_manifest(directory) or {}
        if manifest.get("source") != source:
            manifest = {}
        self.manifest = {
            "tool": "bertprep",
            "version": __version__,
            "stage": "download",
            "source": source,
            "files": manifest.get("files", {}),
            "info": manifest.get("info", {}),
        }

    def path(self, relpath):
        return storage.join(self.directory, relpath)

    def is_complete(self, relpath, url=None, checksums=None):
        entry = self.manifest["files"].get(relpath)
        if entry is None or (url is not None and entry.get("url") != redact(url)):
            return False
        for name, value in (checksums or {}).items():
            if entry.get(name) != value.lower():
                return False
        try:
            return storage.getsize(self.path(relpath)) == entry["bytes"]
        except OSError:
            return False

    def get(self, url, relpath, *, size=None, checksums=None, **extra):
        """Fetch `url` to `relpath` unless the manifest says it is already here; returns its entry."""
        if self.is_complete(relpath, url, checksums):
            if self.progress is not None:
                self.progress.note(f"{relpath}: already downloaded and verified")
            return self.manifest["files"][relpath]
        self.manifest["files"].pop(relpath, None)
        fetched = fetch(url, self.path(relpath), size=size, checksums=checksums, progress=self.progress,
                        limits=self.limits)
        verified = sorted(fetched.checksums) + (["size"] if size is not None else [])
        entry = {"url": url, "bytes": fetched.bytes, "sha256": fetched.sha256, "verified": verified,
                 **fetched.checksums, **extra}
        self.record(relpath, entry)
        if self.progress is not None:
            self.progress.advance(1)
        return self.manifest["files"][relpath]  # as recorded: without a credential

    def record(self, relpath, entry):
        self.manifest["files"][relpath] = redacted(entry)
        save_manifest(self.directory, self.manifest)

    def forget(self, relpath):
        if self.manifest["files"].pop(relpath, None) is not None:
            save_manifest(self.directory, self.manifest)

    def set_info(self, **info):
        self.manifest["info"].update(redacted(info))
        save_manifest(self.directory, self.manifest)


def redacted(value):
    """`value` (an entry of the manifest) with every string passed through errors.redact: a mirror's URL or
    endpoint may carry `user:password@` or a token, and a manifest is written to disk and printed by --json."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    return value
