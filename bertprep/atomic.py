"""Write files whole or not at all, with their temporaries where no reader looks.

Readers glob data directories, and TensorFlow's `*` matches dot-files, so a
temporary never lies beside its final name: it is written in a staging
directory, `.partial/`, at the root of the tree a stage writes (for records,
beside `tfrecord/` and `ofrecord/`), and renamed into place when complete.
The staging directory is inside that tree, so the rename stays on one file
system and is atomic. A lone output file (`convert A B`, `validate --json`)
stages in a `.partial/` beside it, removed again when empty.

A stage that owns a tree holds it (`hold`) while it writes: a lock file in
`.partial/` says which process, on which host, holds it; a second run into
the same tree is refused with that line instead of the two runs removing
each other's temporaries. The holder clears what killed runs left in
`.partial/`. A lone output's writer, which holds no tree, removes what
killed writers of that same output left: each temporary is flocked by its
writer (the kernel releases the lock when the writer dies, however it dies),
so one that no process holds and whose writer's pid is gone is a dead
writer's.

A URL (`s3://`, `gs://`; bertprep.storage) has no rename and no flock: its
object is spooled to a local temporary and uploaded whole when the block
succeeds (a PUT, or a multipart upload completed at the end and aborted on
failure), so a reader never lists a partial object; a tree of a URL is held
by a lock object made with a conditional write (create only if absent), and
a directory of a URL (`atomic_dir`) is complete when its `.complete` object,
uploaded last, is there. In a local engine's task (`call_spooled`) the
complete temporary is handed to the engine's process, which uploads it in
the background (`BackgroundUploads`) while the workers build the next ones.

An operating-system error while writing is raised as an OSError naming the
final path, so the command prints one line with that path and the reason
(bertprep.errors.run_reporting_errors), and no half-written file is left.
"""

import concurrent.futures
import contextlib
import contextvars
import datetime
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import time

from bertprep import storage
from bertprep.errors import HeldByAnotherRun, UsageError

PARTIAL = ".partial"  # the staging directory of a tree
LOCK = "lock"  # in PARTIAL: who holds the tree
STEPS = "steps"  # in PARTIAL: the finished steps of a stage's run, kept for its rerun (clear_staging leaves them)
COMPLETE = ".complete"  # in a URL's atomic_dir: uploaded last, lists the objects of a complete directory
LEGACY_TEMP_MARK = ".tmp-"  # temporaries of earlier versions, written beside their final names
NAME_MAX = 255  # bytes in one file name on every common Linux file system


def staging_dir(root):
    return os.path.join(os.fspath(root), PARTIAL)


def temp_path(staging, path):
    """A fresh temporary name in `staging` for the final `path`, never longer than NAME_MAX bytes.

    The process id and a random tag keep concurrent writers (pool workers, a
    Dask task rerun on another host) apart; the name ends in `.partial`, so
    no reader's suffix or `part-<i>` pattern matches it even if it is seen.
    """
    suffix = os.fsencode(f".{os.getpid()}-{secrets.token_hex(4)}.partial")
    name = os.fsencode(os.path.basename(os.fspath(path)))[: NAME_MAX - len(suffix)]
    return os.path.join(staging, os.fsdecode(name + suffix))


def _temp_writer_pid(temp_name, path):
    """The pid in `temp_name` when it is a temporary (temp_path's name) of `path` (None: of any path), else None."""
    match = re.fullmatch(rb"(.*)\.(\d+)-[0-9a-f]{8}\.partial", temp_name, re.DOTALL)
    if not match:
        return None
    if path is None:
        return int(match.group(2))
    name = os.fsencode(os.path.basename(os.fspath(path)))
    suffix_length = len(temp_name) - len(match.group(1))
    return int(match.group(2)) if match.group(1) == name[: NAME_MAX - suffix_length] else None


def _claim(fd):
    """Mark the temporary open as `fd` as a live writer's (remove_stale_temps leaves it alone)."""
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def remove_stale_temps(staging, path=None):
    """Remove the temporaries of `path` (None: of any path) in `staging` that killed writers left: those no
    process holds (_claim) whose writer's pid is gone from this host too (a writer between creating its
    temporary and claiming it is alive)."""
    try:
        names = os.listdir(os.fsencode(staging))
    except FileNotFoundError:
        return
    for name in names:
        pid = _temp_writer_pid(name, path)
        if pid is None or _process_alive(pid):
            continue
        temp = os.path.join(os.fsencode(staging), name)
        try:
            fd = os.open(temp, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            _claim(fd)
        except BlockingIOError:
            continue  # a live writer on another host that shares this file system
        else:
            remove_entry(temp)
        finally:
            os.close(fd)


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def _with_path(exc, path):
    """`exc` naming `path` (the final name, not the temporary's) so the one-line error says which output failed."""
    return OSError(exc.errno, exc.strerror or str(exc), storage.display(os.fspath(path)))


@contextlib.contextmanager
def _naming(path):
    """OSErrors of the block name `path`."""
    try:
        yield
    except OSError as exc:
        raise _with_path(exc, path) from None


@contextlib.contextmanager
def _writes_named(path):
    """An OSError from the caller's block without a file name is a failed write to `f`: name `path`.
    (One with a file name is about another file, an input the block reads, and keeps its name.)"""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise _with_path(exc, path) from None
        raise


@contextlib.contextmanager
def atomic_open(path, mode="wb", staging=None):
    """A file object for `path`: written in `staging` (default: `.partial/` beside it), renamed to `path`
    when the block succeeds, removed when it fails.

    A target that exists and is not a regular file (a device such as
    /dev/stdout, a FIFO) is written directly: it cannot be renamed over.
    """
    path = os.fspath(path)
    if storage.is_url(path):
        with _object_open(path, mode) as f:
            yield f
        return
    path = storage.local_path(path)
    with _naming(path):
        try:
            mode_bits = os.stat(path).st_mode
        except FileNotFoundError:
            mode_bits = None
        if mode_bits is not None and stat.S_ISDIR(mode_bits):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if mode_bits is not None and not stat.S_ISREG(mode_bits):
        with _naming(path):
            f = open(path, mode)
        with _writes_named(path), f:  # closing flushes: a full device fails there too
            yield f
        return
    lone = staging is None
    staging = staging or staging_dir(os.path.dirname(path) or ".")
    with _naming(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        f, tmp = _open_temp(staging, path, mode)
    try:
        with _naming(path):
            _claim(f.fileno())
        with _writes_named(path):
            yield f
        with _naming(path):
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(tmp, path)
        tmp = None
    finally:
        with contextlib.suppress(OSError):
            f.close()  # after a failed flush close() flushes again and fails again; the file is closed all the same
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if lone:
            with contextlib.suppress(OSError):
                os.rmdir(staging)  # only when empty: another writer may be using it


def _open_temp(staging, path, mode, tries=8):
    """(file, name) of a fresh temporary for `path` in `staging`, made if need be. Another lone writer in the
    same directory removes `staging` once it is empty: between our makedirs and open it may go, which failed
    dedup's dry run, its parallel steps writing one directory ("…/bands/0001: No such file or directory")."""
    for attempt in range(tries):
        os.makedirs(staging, exist_ok=True)
        remove_stale_temps(staging, path)
        tmp = temp_path(staging, path)
        try:
            return open(tmp, mode), tmp
        except FileNotFoundError:
            if attempt == tries - 1 or os.path.isdir(staging):
                raise


@contextlib.contextmanager
def _object_open(url, mode):
    """atomic_open for a URL: a local temporary (flocked like any), uploaded whole to `url` when the block
    succeeds and removed either way; inside `call_spooled` the complete temporary is listed for the caller's
    BackgroundUploads instead."""
    spool = storage.spool_dir()
    with _naming(url):
        remove_stale_temps(spool, url)
        tmp = temp_path(spool, url)
        f = open(tmp, mode)
    try:
        with _naming(url):
            _claim(f.fileno())
        with _writes_named(url):
            yield f
        with _naming(url):
            f.close()
            if _SPOOLED.get() is None:
                storage.upload(tmp, url)
            else:
                _SPOOLED.get().append((tmp, url))
                tmp = None
    finally:
        with contextlib.suppress(OSError):
            f.close()
        if tmp is not None:
            remove_temporaries([tmp])


# -- uploads in the background ---------------------------------------------------------

# While a local engine's task runs (call_spooled): the (temporary, URL) of each object it wrote, left in the spool.
_SPOOLED = contextvars.ContextVar("spooled", default=None)
UPLOAD_THREADS = 2  # objects uploaded at once by a BackgroundUploads


def call_spooled(function, task):
    """(function(task), [(temporary, url)]): its URL objects written whole to local temporaries, not uploaded.

    A local engine runs each task so (engines.run_local) and has the objects uploaded by its own process's
    BackgroundUploads while its workers build the next ones; nothing of a failed task is handed on.
    """
    spooled = []
    token = _SPOOLED.set(spooled)
    try:
        return function(task), spooled
    except BaseException:
        remove_temporaries(tmp for tmp, _ in spooled)
        raise
    finally:
        _SPOOLED.reset(token)


def remove_temporaries(paths):
    """Unlink each local temporary (gone already is fine)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class BackgroundUploads:
    """Spooled objects (call_spooled) uploaded by UPLOAD_THREADS threads while the caller goes on; each task's
    result is handed back by `finished` only once every object it wrote is in the store.

    A stage lists an object in its manifest (written last) only from a result, so the manifest never names an
    object still on its way; the first failed upload is raised from `finished` (an OSError naming the URL, as a
    synchronous upload raises it), and `close` drops what was not uploaded yet.
    """

    def __init__(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="upload")
        self._waiting = []  # [(result, [future of each of its objects])], in the order added
        self._temporaries = {}  # temporary -> the fd of our claim on it (remove_stale_temps leaves it alone)

    def add(self, result, spooled):
        for tmp, url in spooled:
            with _naming(url):
                self._claim(tmp)
        self._waiting.append((result, [self._pool.submit(self._upload, tmp, url) for tmp, url in spooled]))

    def _claim(self, tmp):
        """Hold the temporary a worker left, whose pid in its name may be gone before the upload is."""
        fd = os.open(tmp, os.O_RDONLY)
        self._temporaries[tmp] = fd
        _claim(fd)

    def _upload(self, tmp, url):
        with _naming(url):
            storage.upload(tmp, url)
        self._release(tmp)

    def _release(self, tmp):
        fd = self._temporaries.pop(tmp, None)
        remove_temporaries([tmp])
        if fd is not None:
            os.close(fd)

    def finished(self, wait=False):
        """Yield the results whose objects are all uploaded (every result, waiting for them, when `wait`);
        raise the first failed upload's error as soon as it is seen."""
        while self._waiting:
            for _result, futures in self._waiting:
                for future in futures:
                    if future.done():
                        future.result()  # raises a failed upload's error
            done = [entry for entry in self._waiting if all(future.done() for future in entry[1])]
            if not done and not wait:
                return
            if not done:
                under_way = [future for _result, futures in self._waiting for future in futures if not future.done()]
                concurrent.futures.wait(under_way, return_when=concurrent.futures.FIRST_COMPLETED)
            for entry in done:
                self._waiting.remove(entry)
                yield entry[0]

    def close(self):
        """Stop: cancel the uploads not begun, wait for those under way, remove every temporary left."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        for tmp in list(self._temporaries):
            self._release(tmp)


def atomic_write_bytes(path, data, staging=None):
    """Write `data` to `path` whole or not at all; (bytes, sha256): what a manifest lists of it."""
    with atomic_open(path, "wb", staging) as f:
        f.write(data)
    return len(data), hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def atomic_dir(path, staging):
    """A directory to fill, renamed to `path` (replacing an older one) when the block succeeds."""
    path = os.fspath(path)
    if storage.is_url(path):
        with _object_dir(path) as tmp:
            yield tmp
        return
    remove_stale_temps(staging, path)
    tmp = temp_path(staging, path)
    claim = None
    try:
        with _naming(path):
            os.makedirs(tmp)
            claim = os.open(tmp, os.O_RDONLY)
            _claim(claim)
        with _naming(path):  # the block writes only inside `tmp`: whatever fails is this output
            yield tmp
        with _naming(path):
            if os.path.isdir(path):
                shutil.rmtree(path)
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if claim is not None:
            os.close(claim)


@contextlib.contextmanager
def _object_dir(url):
    """atomic_dir for a URL: filled locally, then the older objects under `url` removed, the new ones
    uploaded, and COMPLETE (the list of them with their sizes) uploaded last: `directory_complete` is True
    only once every object is there."""
    with tempfile.TemporaryDirectory(prefix="bertprep-dir-", dir=storage.spool_dir()) as tmp:
        with _naming(url):
            yield tmp
        files = sorted(os.path.relpath(os.path.join(d, n), tmp) for d, _, names in os.walk(tmp) for n in names)
        with _naming(url):
            remove_directory(url)
            for relative in files:
                storage.upload(os.path.join(tmp, relative), storage.join(url, relative))
            listing = {f: os.path.getsize(os.path.join(tmp, f)) for f in files}
            marker = os.path.join(tmp, COMPLETE)
            with open(marker, "w") as f:
                json.dump({"files": listing}, f, sort_keys=True)
            storage.upload(marker, storage.join(url, COMPLETE))


def remove_directory(path):
    """Remove a directory atomic_dir wrote (gone already is fine); a URL's COMPLETE first, so no reader takes
    it as complete while its objects go."""
    if storage.is_url(path):
        storage.remove(storage.join(path, COMPLETE))
    storage.rmtree(path)


def directory_complete(path):
    """True when the directory `path` was written whole: a local one exists (atomic_dir renamed it into
    place); a URL's has its COMPLETE object."""
    if not storage.is_url(path):
        return os.path.isdir(storage.local_path(path))
    return storage.exists(storage.join(path, COMPLETE))


# -- holding a tree --------------------------------------------------------------------


@contextlib.contextmanager
def hold(root, command):
    """Hold the tree `root` for this run of `command`; yields its staging directory.

    The lock is an flock on `.partial/lock`, so the kernel releases it when
    the holder dies however it dies; the file names the holder for the
    message a second run prints. Temporaries of killed runs are removed on
    entry and on exit, and `.partial/` itself on exit. A run that fails
    removes the folders holding made (`root` and the parents it lacked)
    where they are empty again: a failed first run into a fresh --out had
    left an empty folder, as if it had written something there.
    """
    root = os.fspath(root)
    if storage.is_url(root):
        with _hold_prefix(root, command) as staging:
            yield staging
        return
    root = storage.local_path(root)
    made = _missing_folders(root)
    try:
        try:
            if os.path.exists(root) and not os.path.isdir(root):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), root)
            os.makedirs(root, exist_ok=True)
            fd = _lock(root, command)
        except OSError as exc:
            raise _with_path(exc, exc.filename or root) from None
        try:
            clear_staging(root)
            _remove_legacy_temps(root)
            yield staging_dir(root)
        finally:
            clear_staging(root)
            _unlock(fd, root)
    except BaseException:
        for folder in made:  # deepest first; a folder another run or the user filled since stays
            storage.remove_if_empty(folder)
        raise


def _missing_folders(path):
    """`path` and its parents up to the first that exists, deepest first: what os.makedirs(path) would make."""
    missing = []
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def retry_while_held(make, wait_s, poll_s=0.2, waiting=None):
    """make(), tried again every `poll_s` seconds while another run holds the directory it writes, for up to
    `wait_s` seconds; then the holder's error. For outputs that every concurrent caller makes alike (the
    trainer's cached sample records and checkpoint), where waiting for the other run is the answer.
    `waiting(error)`, if given, is called at the first refusal (to say whom the caller waits for)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return make()
        except HeldByAnotherRun as error:
            if time.monotonic() >= deadline:
                raise
            if waiting is not None:
                waiting(error)
                waiting = None
            time.sleep(poll_s)


def refuse_if_held(root):
    """HeldByAnotherRun, as hold() would raise it, where a live run holds the local tree `root` now: for a
    stage that reads its inputs whole (hashing them) before it holds its output, so that a second run is
    refused before that work (dedup hashed every input first: minutes for a large corpus). Creates nothing;
    hold() still decides, a URL's lock only there."""
    root = os.fspath(root)
    if storage.is_url(root):
        return
    try:
        fd = os.open(os.path.join(staging_dir(storage.local_path(root)), LOCK), os.O_RDONLY)
    except OSError:  # no lock file: no holder
        return
    try:
        if _locked_by_another(fd):
            raise _held_locally(storage.local_path(root), fd)
    finally:
        os.close(fd)  # releases the shared lock, if taken


def _locked_by_another(fd):
    """Whether another open file holds an exclusive flock on the file open as `fd` (a live holder: the kernel
    drops a dead one's); a shared lock taken here to ask is released when `fd` is closed."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


@contextlib.contextmanager
def hold_file(path, command):
    """Hold the lone output file `path` for this run of `command`, a stage that writes it only at its end
    (vocab): a flock on `.partial/<name>.lock` beside it, refused with hold()'s line while a live run holds it.
    Two runs into one --out both ran to the end, the last rename won, and the other's summary named a sha256
    that was not the file's. A run that fails removes the folders the lock made. A URL's object is not held
    (a store's conditional write is for trees)."""
    path = os.fspath(path)
    if storage.is_url(path):
        yield
        return
    path = storage.local_path(path)
    staging = staging_dir(os.path.dirname(path) or ".")
    lock_path = os.path.join(staging, os.path.basename(path)[: NAME_MAX - len(".lock")] + ".lock")
    made = _missing_folders(staging)
    try:
        with _naming(path):
            fd = _lock(path, command, lock_path)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):  # unlinked while still held, as _unlock does
                os.unlink(lock_path)
            os.close(fd)
            with contextlib.suppress(OSError):
                os.rmdir(staging)
    except BaseException:
        for folder in made:  # deepest first; a folder another run or the user filled since stays
            storage.remove_if_empty(folder)
        raise


def _holder_info(command):
    return {"command": command, "pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


@contextlib.contextmanager
def _hold_prefix(root, command):
    """hold() for a URL: the lock object `.partial/lock`, created only if absent (a conditional write).

    A store cannot tell that a holder died, so a lock left by a killed run
    stays: one whose holder was on this host and is gone is taken over; any
    other is named in the refusal, with the object to remove once that run
    is known to be dead.
    """
    storage.refuse_writing_under_an_object(root)
    lock = storage.join(root, PARTIAL, LOCK)
    data = json.dumps(_holder_info(command)).encode() + b"\n"
    with _naming(root):
        taken = storage.write_exclusive(lock, data)
        if not taken and _dead_local_holder(lock):
            storage.remove(lock)
            taken = storage.write_exclusive(lock, data)
    if not taken:
        raise HeldByAnotherRun(f"{storage.display(root)}: another run is writing here ({_holder_of(lock)}); wait for "
                               f"it to finish or stop it (a run that died on another host leaves "
                               f"{storage.display(lock)}: remove it then)")
    try:
        yield storage.join(root, PARTIAL)
    finally:
        with contextlib.suppress(OSError):
            storage.remove(lock)


def _lock_info(lock):
    try:
        return json.loads(storage.read_bytes(lock))
    except (OSError, ValueError):
        return None


def _dead_local_holder(lock):
    info = _lock_info(lock)
    return (isinstance(info, dict) and info.get("host") == socket.gethostname()
            and isinstance(info.get("pid"), int) and not _process_alive(info["pid"]))


def _holder_of(lock):
    info = _lock_info(lock)
    try:
        return f"{info['command']}, pid {info['pid']} on {info['host']}, since {info['since']}"
    except (TypeError, KeyError):
        return "a process that has not yet said who it is"


def _lock(root, command, lock_path=None):
    """The fd of the flocked lock file of the tree `root` (`lock_path`: another lock file, named for `root`)."""
    lock_path = lock_path or os.path.join(staging_dir(root), LOCK)
    while True:
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            continue  # the previous holder removed .partial between our makedirs and open
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _held_locally(root, fd)
            os.close(fd)
            raise held from None
        # A holder that was releasing may have unlinked the file we opened: lock the file at lock_path.
        try:
            current = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            info = _holder_info(command)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
            return fd
        os.close(fd)


def _held_locally(root, fd):
    """The refusal of a local tree `root` whose lock file (open as `fd`) a live run holds, naming that run."""
    return HeldByAnotherRun(f"{root}: another run is writing here ({_holder(fd)}); wait for it to finish or stop it")


def _holder(fd):
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        return f"{info['command']}, pid {info['pid']} on {info['host']}, since {info['since']}"
    except (OSError, ValueError, TypeError, KeyError):
        return "a process that has not yet said who it is"


def _unlock(fd, root):
    # Unlink while still holding the lock: a waiter that opened this file sees it is gone and retries.
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(staging_dir(root), LOCK))
    os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(staging_dir(root))


def clear_staging(root):
    """Remove every temporary in `root`'s staging directory (the lock file and a killed run's STEPS stay). A URL's
    has none: its temporaries are local (_object_open)."""
    if storage.is_url(root):
        return
    staging = staging_dir(root)
    try:
        names = os.listdir(staging)
    except FileNotFoundError:
        return
    for name in names:
        if name not in (LOCK, STEPS) and not _held_by_a_live_process(os.path.join(staging, name)):
            remove_entry(os.path.join(staging, name))


def _held_by_a_live_process(path):
    """Whether a live process holds an flock on the staging entry `path`: a lone output's lock (hold_file) or the
    temporary a live writer claimed (_claim). A folder's staging is shared: `bertprep create --out D` cleared the
    lock and the temporary of a `bertprep vocab --out D/vocab.txt` running there, so a second vocab run was let in
    and the first one's rename failed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # gone since, or unreadable: nothing holds it that we could tell
        return False
    try:
        return _locked_by_another(fd)
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_entry(path):
    """Remove a temporary file or directory (gone already is fine)."""
    if storage.is_url(path):
        storage.remove(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _remove_legacy_temps(root):
    """Temporaries that earlier versions wrote beside their final names, where readers glob them."""
    for directory, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith(LEGACY_TEMP_MARK):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))


# -- what readers see -------------------------------------------------------------------


def walk(top):
    """os.walk in sorted directory order without hidden directories (`.partial/` and the like); URLs too."""
    return storage.walk(top)


def check_distinct_outputs(pairs):
    """Refuse a plan in which two inputs would write the same output: [(input, output)]."""
    first = {}
    for source, output in pairs:
        key = os.path.normpath(output)
        if key in first and first[key] != source:
            raise UsageError(f"{first[key]} and {source} would both be written to {output}: rename one of them")
        first.setdefault(key, source)


def sha256_file(path, chunk_size=1 << 20):
    return storage.sha256(path, chunk_size)
