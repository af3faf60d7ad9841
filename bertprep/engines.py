"""Engines only schedule: each runs the same pure shard task over a list of tasks.

`run_local` uses `multiprocess` worker processes (or runs in this process for
one worker, where start-up would cost more than it saves). Results are
yielded as tasks finish; callers must not depend on that order.
"""

import os
import signal


def default_workers():
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _ignore_sigint():
    # Ctrl-C is the parent's to handle: it stops the pool and cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Several worker processes on few cores: the tokenizer's own threads would oversubscribe.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


def run_local(function, tasks, workers):
    """Yield function(task) for every task, in completion order."""
    tasks = list(tasks)
    workers = max(1, min(workers, len(tasks)))
    if workers == 1:
        for task in tasks:
            yield function(task)
        return
    import multiprocess

    pool = multiprocess.Pool(workers, initializer=_ignore_sigint)
    try:
        yield from pool.imap_unordered(function, tasks)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
