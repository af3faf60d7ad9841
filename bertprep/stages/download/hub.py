"""Parquet files from the Hugging Face hub, verified, and read in bounded memory.

Why `huggingface_hub.snapshot_download` plus pyarrow rather than
`datasets.load_dataset`: the snapshot gives the hub's own files in the shared
cache (honouring HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE, with parallel
downloads and resume), pyarrow then streams them one record batch at a time,
and nothing is copied into a second Arrow cache — a 20 GB Wikipedia would
otherwise need twice its size on disk and a long conversion before the first
document is read.

Every file is checked against the size and sha256 the hub publishes for it
(its LFS pointer in the tree listing). Offline, the published sha256 is the
name of the cached blob: the hub served it as the file's ETag when the file
was downloaded.

Every request huggingface_hub makes for a download goes through `bounded_hub`: it waits at most the download's
`--stall-timeout` to connect and for each byte (huggingface_hub asks some with no timeout at all: a hub that
accepted the connection and never answered held `download glue` for ever), and a 429 or 5xx that asks to be
retried later is retried after at most that long too, and never after more than our own downloads wait between
attempts (MAX_WAIT). A response's body stops `--deadline` seconds after it began, as our own connections do:
huggingface_hub then asks for the file again, with Range from the last whole chunk it wrote (10 MB), its retries
renewed where that chunk came since the last failure.
"""

import contextlib
import fnmatch
import functools
import importlib
import logging
import math
import os
import re
import time
import urllib.parse

from bertprep.atomic import sha256_file
from bertprep.errors import DataError, UsageError, redact
from bertprep.stages.download.http import MAX_WAIT, TRANSIENT_STATUS, Limits

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
RETRIES = 6  # attempts after the first when the hub's API answers busy: as many as our own downloads make


def hub_snapshot(repo, revision, patterns, endpoint=None, quiet=False, limits=Limits()):
    """Download (or find in the cache) the files of dataset `repo` matching `patterns`, each request bounded by
    `limits` (`bounded_hub`).

    Returns (commit, [(path in repo, local path, {"bytes", "sha256"})]) sorted by path.
    """
    check_endpoint(endpoint)
    with bounded_hub(limits, quiet):
        return _hub_snapshot(repo, revision, patterns, endpoint, quiet)


def check_endpoint(endpoint):
    """A UsageError where the hub `endpoint` (--base-url) holds a query or a fragment: huggingface_hub appends its
    paths to the endpoint as text (`http://hub/?token=T/api/datasets/...`), so every request asked for the
    endpoint's root, and the download failed as `not reachable at ... and not in the cache`."""
    if endpoint and ("?" in endpoint or "#" in endpoint):
        raise UsageError(f"--base-url {endpoint}: a hub endpoint takes no query or fragment (the hub's paths are "
                         "appended to it); give a hub token in HF_TOKEN")


@contextlib.contextmanager
def bounded_hub(limits, quiet=False):
    """huggingface_hub's requests, while in this block, wait at most `limits.stall` seconds for a connection
    and for each byte: its client factory is wrapped (a user's own factory too) so that each client it makes
    clamps every request's timeouts. Without it `snapshot_download` asked the repository's revision with no
    timeout, so an endpoint that never answered held the command for ever. `quiet`: its warnings (a line or two
    per retry, "Retrying in 1s [Retry 1/5]") are not shown, as --quiet shows no note of our own retries."""
    import huggingface_hub
    from huggingface_hub.utils import _http

    previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level

    def factory():
        client = previous()
        hooks = client.event_hooks
        client.event_hooks = {"request": [*hooks["request"], functools.partial(_clamp_timeouts, limits.stall)],
                              "response": [*hooks["response"], functools.partial(_shorten_waits, limits.stall),
                                           functools.partial(_end_body_at_deadline, limits.deadline)]}
        return client

    huggingface_hub.set_client_factory(factory)  # closes the shared client: the next request makes a bounded one
    if quiet:
        hub_logger.setLevel(logging.ERROR)
    loggers = _hub_loggers(huggingface_hub)
    for logger in loggers:
        logger.addFilter(_redact_record)
    try:
        yield
    finally:
        huggingface_hub.set_client_factory(previous)
        hub_logger.setLevel(level)
        for logger in loggers:
            logger.removeFilter(_redact_record)


def _hub_loggers(huggingface_hub):
    """huggingface_hub's loggers, once the modules whose functions we call are imported (each module has its own
    logger, and a logger's filter sees only the lines logged on it, not those its children pass up)."""
    huggingface_hub.hf_hub_download, huggingface_hub.snapshot_download, huggingface_hub.HfApi  # noqa: B018
    return [logger for name, logger in logging.root.manager.loggerDict.items()
            if name.split(".")[0] == "huggingface_hub" and isinstance(logger, logging.Logger)]


def _redact_record(record):
    """A logging filter: the hub's line without credentials (errors.redact). Its retry lines name the URL it asked,
    "HTTP Error 503 thrown while requesting HEAD http://alice:S3cret@host/...", an endpoint's password with it."""
    record.msg, record.args = redact(record.getMessage()), None
    return True


def _clamp_timeouts(stall, request):
    """An httpx request hook: each of the request's timeouts (connect, read, write, pool) at most `stall`;
    None (no timeout) becomes `stall`."""
    timeout = dict(request.extensions.get("timeout") or {})
    for key in ("connect", "read", "write", "pool"):
        value = timeout.get(key)
        timeout[key] = stall if value is None else min(value, stall)
    request.extensions = {**request.extensions, "timeout": timeout}


def _end_body_at_deadline(deadline, response):
    """An httpx response hook: the body's bytes end with a ReadTimeout `deadline` seconds (0: never) after its
    headers came, which huggingface_hub takes as a dropped connection and asks again. Without it the
    --deadline of our own downloads bounded no hub connection: one that trickled a byte inside every
    --stall-timeout held the file's download for as long as the hub kept it up."""
    if deadline:
        http = importlib.import_module(type(response).__module__.split(".")[0])  # httpx, or httpx2 in newer hubs
        response.stream = _stream_until(http, response.stream, time.monotonic() + deadline, deadline,
                                        response.request)


def _stream_until(http, stream, ends, deadline, request):
    """`stream` (the client's SyncByteStream) that raises http.ReadTimeout at its first chunk after `ends`."""

    class StreamUntil(http.SyncByteStream):
        def __iter__(self):
            for chunk in stream:
                if time.monotonic() > ends:
                    raise http.ReadTimeout(f"still transferring after the {deadline:g} s deadline", request=request)
                yield chunk

        def close(self):
            stream.close()

    return StreamUntil()


def _shorten_waits(stall, response):
    """An httpx response hook: a 429 or 5xx's `Retry-After` (or `RateLimit` reset, `t=`) of more seconds than
    `stall` and MAX_WAIT allow is shortened to that. huggingface_hub slept whatever it said, plus 1 s, before it
    tried again: `Retry-After: 3600` held a download an hour per retry (it makes 5), where our own downloads wait
    at most MAX_WAIT between attempts."""
    if response.status_code not in TRANSIENT_STATUS:
        return
    most = max(0, math.ceil(min(stall, MAX_WAIT)) - 1)  # huggingface_hub adds 1 s to what the server says
    after = response.headers.get("Retry-After", "").strip()
    if after.isdigit() and int(after) > most:
        response.headers["Retry-After"] = str(most)
    ratelimit = response.headers.get("RateLimit")
    if ratelimit:
        response.headers["RateLimit"] = re.sub(r"\bt=(\d+)", lambda m: f"t={min(int(m.group(1)), most)}", ratelimit)


def _hub_snapshot(repo, revision, patterns, endpoint, quiet):
    import huggingface_hub

    if quiet:
        huggingface_hub.utils.disable_progress_bars()
    where = endpoint or huggingface_hub.constants.ENDPOINT
    offline = huggingface_hub.constants.HF_HUB_OFFLINE
    commit, verified, damaged = _verified_snapshot(repo, revision, patterns, endpoint, where)
    if damaged and not offline:  # a damaged copy in the cache (a disk error, a killed copy): fetched once more
        for _problem, local in damaged:
            _remove_cached(local)
        commit, verified, damaged = _verified_snapshot(repo, revision, patterns, endpoint, where)
    if damaged:
        errors = [damaged_copy_error(problem, local, offline) for problem, local in damaged]  # online: all removed
        raise errors[0]
    return commit, verified


def damaged_copy_error(problem, local, offline):
    """The DataError of the cached file `local` whose bytes are not what the hub publishes (`problem`, the
    mismatch). Offline it could not be fetched again: the line names the copy to delete. Online it was fetched
    once more and is still wrong, so the hub serves other bytes than it publishes: the copy is removed, and
    nothing damaged is left in the cache. (It used to end every later download, kept, with "delete it".)"""
    if offline:
        return DataError(f"{problem}; the cached copy is damaged (HF_HUB_OFFLINE=1: not downloaded again): delete "
                         f"{os.path.realpath(local)} and rerun online")
    _remove_cached(local)
    return DataError(f"{problem}, again after a fresh download: the hub serves other bytes than it publishes (the "
                     "copy was removed from the cache)")


def _verified_snapshot(repo, revision, patterns, endpoint, where):
    """(commit, [(path in repo, local path, {"bytes", "sha256"})], [(problem, local path)] of the files whose bytes
    are not what the hub publishes)."""
    import huggingface_hub
    from huggingface_hub import HfApi

    folder = _snapshot_folder(repo, revision, patterns, endpoint, where)
    commit = os.path.basename(os.path.normpath(folder))
    files = _matching_files(folder, patterns)
    if not files:
        raise DataError(f"{repo}@{revision} at {where}: no files match {', '.join(patterns)}")
    published = _published_checksums(HfApi(endpoint=endpoint), repo, commit, huggingface_hub.constants.HF_HUB_OFFLINE)
    verified, damaged = [], []
    for relpath in files:
        local = os.path.join(folder, relpath)
        actual = {"bytes": os.path.getsize(local), "sha256": sha256_file(local)}
        expected = published.get(relpath) or _blob_checksum(local)
        if expected is None:
            raise DataError(f"{repo}@{commit}/{relpath}: the hub published no sha256 to verify it against")
        wrong = [key for key in ("bytes", "sha256") if key in expected and expected[key] != actual[key]]
        if wrong:
            damaged.append((f"{repo}@{commit}/{relpath}: {wrong[0]} mismatch: expected {expected[wrong[0]]} "
                            f"(published), got {actual[wrong[0]]}", local))
        verified.append((relpath, local, actual))
    return commit, verified, damaged


def _remove_cached(local):
    """The cached blob behind the snapshot's link `local`, and the link: the next snapshot downloads the file."""
    blob = os.path.realpath(local)
    for path in (blob, local):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _snapshot_folder(repo, revision, patterns, endpoint, where):
    """snapshot_download's folder of the files; the hub's API asked again while it answers busy."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    attempt = 0
    while True:
        attempt += 1
        try:
            return snapshot_download(
                repo, repo_type="dataset", revision=revision, allow_patterns=patterns, endpoint=endpoint, max_workers=8
            )
        except LocalEntryNotFoundError as exc:
            if _hub_was_busy(exc.__cause__) and attempt <= RETRIES:
                time.sleep(min(2 ** (attempt - 1), MAX_WAIT))  # as our own downloads back off
                continue
            gave_up = f"; gave up after {attempt} attempts" if attempt > 1 else ""
            raise DataError(f"{repo}@{revision}: not reachable at {where} and not in the cache "
                            f"({_first_line(exc)}{gave_up})") from None
        except Exception as exc:
            if not hub_failure(exc):
                raise
            file = _file_asked(exc)
            raise DataError(f"{repo}@{revision}{'/' + file if file else ''} at {where}: {_first_line(exc)}") from None


def _file_asked(exc):
    """The file in the repository whose request failed with `exc` (an HTTP client's error carries its request), or
    None: a file that stalled on every attempt ended in `nyu-mll/glue@main at URL: timed out`, not naming it."""
    for error in (exc, exc.__cause__, exc.__context__):
        try:
            path = error.request.url.path  # httpx's .request raises where the error has none
        except (AttributeError, RuntimeError):
            continue
        match = re.search(r"/resolve/[^/]+/(.+)$", path)
        if match:
            return urllib.parse.unquote(match.group(1))
    return None


def _hub_was_busy(error):
    """Whether `error`, why snapshot_download fell back to the cache, is the hub answering its API (the revision,
    the file listing) with a status worth retrying (429, 5xx). snapshot_download asks the revision once: one 503
    ended a download that our own downloads would have retried; the files' requests huggingface_hub retries
    itself."""
    response = getattr(error, "response", None)
    return (response is not None and response.status_code in TRANSIENT_STATUS
            and "/api/" in response.request.url.path)


def hub_failure(exc):
    """Whether `exc` is a download's failure to report in one line: an OSError or ValueError, or one of
    huggingface_hub's or its HTTP client's (httpx, httpx2 in its newer releases) own errors, which are no
    OSError (a hub whose endpoint redirected in a loop was an httpx2.TooManyRedirects traceback)."""
    return isinstance(exc, (OSError, ValueError)) or type(exc).__module__.split(".")[0] in (
        "huggingface_hub", "httpx", "httpx2", "httpcore", "httpcore2")


def _first_line(exc):
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


def _matching_files(folder, patterns):
    found = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            relpath = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if any(fnmatch.fnmatch(relpath, p) for p in patterns):
                found.append(relpath)
    return sorted(found)


def _published_checksums(api, repo, commit, offline):
    """{path: {"bytes", "sha256"}} from the hub's tree listing; {} offline."""
    if offline:
        return {}
    from huggingface_hub.hf_api import RepoFile

    try:
        entries = api.list_repo_tree(repo, repo_type="dataset", revision=commit, recursive=True)
        return {
            e.path: {"bytes": e.lfs.size, "sha256": e.lfs.sha256}
            for e in entries
            if isinstance(e, RepoFile) and e.lfs is not None
        }
    except Exception:  # noqa: BLE001 - an unreachable listing falls back to the cached ETag below
        return {}


def _blob_checksum(local):
    """The sha256 the hub sent as ETag, kept as the cached blob's name (LFS files only)."""
    name = os.path.basename(os.path.realpath(local))
    return {"sha256": name} if SHA256_HEX.fullmatch(name) else None


def iter_parquet_rows(path, columns, batch_size=1024):
    """Yield dicts of `columns` from a parquet file, one record batch in memory at a time."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        missing = [c for c in columns if c not in parquet.schema_arrow.names]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}; found "
                            f"{', '.join(parquet.schema_arrow.names)}")
        for batch in parquet.iter_batches(batch_size=batch_size, columns=list(columns)):
            yield from batch.to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise DataError(f"{path}: not a readable parquet file ({_first_line(exc)})") from None
