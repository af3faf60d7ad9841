"""Engines only schedule: each runs the same pure shard task over a list of tasks.

- `local` (default): `multiprocess` worker processes on this machine, or this
  process alone for one worker, where start-up would cost more than it saves.
  The objects tasks write to a URL are uploaded by this process while the
  workers go on (run_local).
- `dask`: a Dask cluster: a `LocalCluster` on this machine, or the user's
  scheduler (`dask scheduler` + `dask worker`, or `dask-mpi`). Tasks write
  their outputs atomically and return their manifest entries; only the
  client writes the manifest. Dask reruns the task of a worker that died;
  the rerun writes the same bytes under its own temporary name.

Results are yielded as tasks finish; callers must not depend on that order.
"""

import contextlib
import dataclasses
import functools
import math
import os
import signal
import time
from typing import ClassVar

from bertprep import storage
from bertprep.atomic import BackgroundUploads, call_spooled, remove_stale_temps
from bertprep.errors import BertprepError, DataError, UsageError
from bertprep.options import check_types, errors_name_fields, require_at_least

ENGINES = ("local", "dask")
SCHEDULER_CONNECT_TIMEOUT_S = 5
# How long a Dask run waits while its scheduler has no worker (none started, an adaptive cluster scaling up
# for the tasks it sees queued, or all of them lost), by default: tasks on a scheduler without workers wait
# forever, and the run sat silent. --worker-wait for a batch system whose queue holds workers longer.
WORKER_WAIT_S = 600.0
_WORKER_POLL_S = 5.0
# How often a local pool's waiting parent checks that its workers live (pool_results).
_POOL_POLL_S = 1


def add_engine_arguments(parser):
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local processes (default) or a Dask cluster")
    parser.add_argument(
        "--scheduler", metavar="ADDRESS",
        help="Dask scheduler address (tcp://HOST:8786) or scheduler file (.json, as dask-mpi and "
        "`dask scheduler --scheduler-file` write); with --engine dask. Default: a LocalCluster on this machine",
    )
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    parser.add_argument("--worker-wait", type=float, default=None, metavar="SECONDS",
                        help="with --engine dask: how long the run waits while the scheduler has no worker (none "
                             "started yet, an adaptive cluster scaling up, all lost) before it stops "
                             f"(default {WORKER_WAIT_S:.0f})")


def default_workers():
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def machine_memory():
    """This machine's physical memory in bytes, None where the system does not say (what dedup sizes its work
    by, and create and the trainer's batches are held to)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """Where a stage's tasks run: `engine` 'local' or 'dask', `workers` (None: one per core), and for Dask
    the user's `scheduler` (an address or a scheduler file; None: a LocalCluster on this machine) and
    `worker_wait`, the seconds a run waits while the scheduler has no worker before it stops (None: 600)."""

    engine: str = "local"
    workers: int | None = None
    scheduler: str | None = None
    worker_wait: float | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"engine": ENGINES}  # check_types

    def __post_init__(self):
        check_types(self)
        if self.engine not in ENGINES:
            raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.workers is not None:
            require_at_least("--workers", self.workers, 1)
        if self.scheduler == "":  # was taken as not given: a LocalCluster here instead of the cluster meant
            raise UsageError("--scheduler: an empty address names no scheduler (leave it out for a LocalCluster "
                             "on this machine)")
        if self.scheduler and self.engine != "dask":
            raise UsageError("--scheduler needs --engine dask")
        if self.worker_wait is None:
            return
        if not (isinstance(self.worker_wait, (int, float)) and 0 < self.worker_wait < math.inf):
            raise UsageError(f"--worker-wait must be a positive number of seconds, not {self.worker_wait!r}")
        if self.engine != "dask":  # the local engine has no scheduler to wait for: it was ignored, exit 0
            raise UsageError("--worker-wait needs --engine dask")


@contextlib.contextmanager
def open_engine(options, max_tasks=None):
    """The engine `options` (an EngineOptions) chose, for one or more `run` calls."""
    workers = options.workers or default_workers()
    if max_tasks is not None:
        workers = max(1, min(workers, max_tasks))
    if options.engine == "dask":
        client = connect_dask(options.scheduler, workers)
        try:
            yield DaskEngine(client, WORKER_WAIT_S if options.worker_wait is None else options.worker_wait)
        finally:
            cluster = None if options.scheduler else client.cluster
            client.close()
            if cluster is not None:
                cluster.close()
    else:
        yield LocalEngine(workers)


def _call_indexed(function, indexed_task):
    index, task = indexed_task
    return index, function(task)


class LocalEngine:
    def __init__(self, workers):
        self.workers = workers

    def run(self, function, tasks, describe=str):
        """Yield function(task) for every task, in completion order."""
        del describe  # local errors keep their own message and type
        return run_local(function, tasks, self.workers)

    def run_indexed(self, function, tasks, describe=str):
        """Yield (index, function(tasks[index])) in completion order."""
        return self.run(functools.partial(_call_indexed, function), list(enumerate(tasks)), lambda it: describe(it[1]))


class DaskEngine(LocalEngine):
    def __init__(self, client, worker_wait=WORKER_WAIT_S):
        self.client, self.worker_wait = client, worker_wait

    def run(self, function, tasks, describe=str):
        return run_dask(self.client, function, tasks, describe, self.worker_wait)


def _worker_init(parent):
    # Ctrl-C is the parent's to handle: it stops the pool and cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Several worker processes on few cores: the tokenizer's own threads would oversubscribe.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _end_with(parent)


def _end_with(parent):
    """Linux: the kernel kills this worker when the process that started it dies. A SIGKILLed run's workers
    went on with their tasks, then each printed a BrokenPipeError traceback where it sent its result to the
    pipe nobody read. (Killing the parent leaves .partial files either way; the rerun clears them.)"""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl to call: the worker ends as it did before
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def run_local(function, tasks, workers):
    """Yield function(task) for every task, in completion order.

    The objects a task writes to a URL are uploaded by this process in the background
    (atomic.BackgroundUploads) while the workers go on with the next tasks; a task's result is yielded once
    they are all in the store, so what a stage lists from it is there.
    """
    results = _spooled_results(functools.partial(call_spooled, function), list(tasks), workers)
    uploads = BackgroundUploads()
    try:
        for result, spooled in results:
            uploads.add(result, spooled)
            yield from uploads.finished()
        yield from uploads.finished(wait=True)
    finally:
        results.close()  # after an error: stops the workers now (not when the traceback goes), some mid-write
        uploads.close()
        remove_stale_temps(storage.spool_dir(make=False))  # what workers stopped mid-write left in the spool


def _spooled_results(function, tasks, workers):
    workers = max(1, min(workers, len(tasks)))
    if workers == 1:
        for task in tasks:
            yield function(task)
        return
    import multiprocess

    pool = multiprocess.Pool(workers, initializer=_worker_init, initargs=(os.getpid(),))
    try:
        yield from pool_results(pool, pool.imap_unordered(function, tasks))
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def pool_results(pool, results):
    """Yield from `results`, an imap or imap_unordered iterator of the multiprocess.Pool `pool`; a DataError once
    one of the pool's worker processes has died. A worker killed mid-task (the kernel's OOM killer, a stray
    `kill -9`, a task that ended its process) takes its task with it: the pool starts another worker but never
    runs that task again, and its iterator waited forever, the run silent. A pool's workers end only with the
    pool (no maxtasksperchild), so any one gone is one lost; however long a live worker's task takes is its
    own."""
    import multiprocess

    seen = set()
    while True:
        # the pool's worker processes (a dead one is replaced); a private attribute of multiprocessing.pool's
        # Pool, so read with a default: a release without it only loses this check
        seen.update(getattr(pool, "_pool", ()))
        try:
            result = results.next(timeout=_POOL_POLL_S)
        except StopIteration:
            return
        except multiprocess.TimeoutError:
            _refuse_a_dead_worker(pool, seen)
            continue
        yield result


def _refuse_a_dead_worker(pool, seen):
    seen.update(getattr(pool, "_pool", ()))
    dead = sorted((p for p in seen if p.exitcode is not None), key=lambda p: p.pid)
    if not dead and len(seen) <= getattr(pool, "_processes", len(seen)):  # more seen than it runs: one replaced
        return
    worker = f"a worker process (pid {dead[0].pid})" if dead else "a worker process"
    code = dead[0].exitcode if dead else None
    if code is None:
        how = "died"
    elif code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        how = f"was killed by {name}" + (" (the kernel's OOM killer, when memory runs out?)"
                                         if -code == signal.SIGKILL else "")
    else:
        how = f"exited with status {code}"
    _stop_workers(pool)
    raise DataError(f"{worker} {how} mid-run: the task it held will never finish; rerun to resume (with fewer "
                    "--workers if memory ran out)")


def _stop_workers(pool):
    """Stop the pool's worker handler and workers and free its task queue's read lock, so that the caller's
    terminate() returns. The replacement for a dead worker is forked by the handler's thread, and its
    PDEATHSIG (_end_with) fires when that thread ends, as terminate() ends it: the replacement was killed while
    it read the queue for its next task, holding that lock (a semaphore the kernel does not give back), and
    terminate() waited for the lock forever."""
    from multiprocess.connection import wait
    from multiprocess.pool import TERMINATE

    pool._worker_handler._state = TERMINATE  # no more replacements: what terminate() does first
    pool._change_notifier.put(None)
    pool._worker_handler.join(10)
    workers = list(pool._pool)
    for process in workers:
        with contextlib.suppress(OSError):
            process.kill()
    wait([process.sentinel for process in workers], timeout=10)
    lock = pool._inqueue._rlock
    if lock._semlock._get_value() == 0:  # taken by a worker killed while reading; every worker is dead now
        with contextlib.suppress(ValueError):
            lock.release()


def connect_dask(scheduler=None, workers=None):
    """A distributed.Client for `scheduler`, or for a new LocalCluster of `workers` processes.

    An unreachable scheduler fails within SCHEDULER_CONNECT_TIMEOUT_S with a one-line error.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError('--engine dask needs the distributed package: pip install "bertprep[distributed]"') from None
    if scheduler:
        address = _scheduler_file_address(scheduler) if scheduler.endswith(".json") else scheduler
        _check_address(scheduler, address)
        try:
            _handshake(address, SCHEDULER_CONNECT_TIMEOUT_S)
            client = Client(address=address, timeout=SCHEDULER_CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise DataError(
                f"cannot reach the Dask scheduler at {scheduler} within {SCHEDULER_CONNECT_TIMEOUT_S}s "
                f"({exc.__class__.__name__}); is `dask scheduler` running there?"
            ) from None
        return client  # no wait for a worker here: an adaptive cluster starts them once tasks are queued
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
        env={"TOKENIZERS_PARALLELISM": "false"},
    )
    return Client(cluster)


def _scheduler_file_address(path):
    """The address a scheduler file (`dask scheduler --scheduler-file`, dask-mpi) gives: distributed read a file
    that is not JSON, or holds no address, with an AssertionError, a JSONDecodeError or a TypeError traceback."""
    import json

    if not os.path.isfile(path):
        raise DataError(f"{path}: scheduler file not found")
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a Dask scheduler file, whose JSON gives an \"address\" ({exc})") from None
    if not isinstance(info, dict) or not isinstance(info.get("address"), str):
        raise DataError(f"{path}: not a Dask scheduler file: its JSON gives no \"address\" string")
    return info["address"]


def _check_address(scheduler, address):
    """One line for an address no Dask comm can dial (no port, an unknown scheme): distributed's ValueError ended
    the command in a traceback. A usage error as given, bad data where a scheduler file holds it."""
    from distributed.comm.addressing import get_address_host_port

    try:
        get_address_host_port(address)
    except ValueError as exc:
        if scheduler == address:
            raise UsageError(f"--scheduler {scheduler!r} is no Dask scheduler address ({exc}); expected "
                             "tcp://HOST:PORT or a scheduler file (.json)") from None
        raise DataError(f"{scheduler}: its address {address!r} is no Dask scheduler address ({exc})") from None


def _handshake(address, timeout):
    """Connect to `address` and read the scheduler's handshake within `timeout` seconds, or a TimeoutError or
    OSError. distributed bounds the connect but not the handshake read after it, so a port that accepts and
    never answers (a silent socket, an HTTP server waiting for its request line) held Client() forever; bytes
    that are not Dask's (their first 8 read as a frame count) asked for exabytes. Run in its own thread: the
    caller may be inside an event loop (a notebook)."""
    import asyncio
    import concurrent.futures

    from distributed.comm import connect

    async def probe():  # a second more than the connect's own timeout, whose OSError says "refused" or "timed out"
        comm = await asyncio.wait_for(connect(address, timeout=timeout), timeout + 1)
        await comm.close()

    def run():
        try:
            asyncio.run(probe())
        except (OSError, TimeoutError):
            raise
        except Exception as exc:  # a peer that answers, but not as Dask does
            raise OSError(f"{address} does not answer as a Dask scheduler ({exc.__class__.__name__})") from None

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(run).result()


def run_dask(client, function, tasks, describe=str, worker_wait=WORKER_WAIT_S):
    """Yield function(task) for every task from a Dask cluster, in completion order; a DataError once the
    scheduler has had no worker for `worker_wait` seconds."""
    tasks = list(tasks)
    if not tasks:
        return
    # pure=False: every task runs even if an equal one ran before; retries cover
    # transient failures, and a dead worker's tasks are rescheduled by Dask itself.
    futures = client.map(function, tasks, pure=False, retries=1)
    task_of = {f.key: t for f, t in zip(futures, tasks)}
    try:
        for future in _completed_while_workers_remain(client, futures, worker_wait):
            try:
                yield future.result()
            except Exception as exc:
                if isinstance(exc, BertprepError) or (isinstance(exc, OSError) and exc.filename is not None):
                    raise  # the task's own one-line error (a file error names its path)
                raise DataError(f"{describe(task_of[future.key])}: failed on a Dask worker: {exc.__class__.__name__}: "
                                f"{exc}") from None
    finally:
        client.cancel(futures)


def _completed_while_workers_remain(client, futures, worker_wait):
    """Yield `futures` as they complete; a DataError once the scheduler has had no worker for `worker_wait`
    seconds (none started, or every worker lost: Dask holds the tasks until one joins, however long)."""
    from distributed import wait

    pending, no_worker_since, poll = list(futures), None, min(_WORKER_POLL_S, worker_wait / 2)
    while pending:
        try:
            done = wait(pending, timeout=poll, return_when="FIRST_COMPLETED").done
        except TimeoutError:
            if client.nthreads():
                no_worker_since = None
            elif time.monotonic() - (no_worker_since := no_worker_since or time.monotonic()) >= worker_wait:
                address = client.scheduler.address
                raise DataError(f"the Dask scheduler at {address} has had no worker for {worker_wait:g}s, with "
                                f"{len(pending)} tasks left; start `dask worker {address}` (or give a longer "
                                "--worker-wait) and rerun") from None
            continue
        no_worker_since = None
        yield from (future for future in pending if future in done)
        pending = [future for future in pending if future not in done]
