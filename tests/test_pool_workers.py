"""A local pool's worker killed mid-task (the OOM killer's SIGKILL, a task that ends its process) ends the run
with one line: multiprocess.Pool starts another worker but never reruns the lost task, and the run waited for
its result forever. Each case runs in a thread joined with a timeout, so a regression fails, not hangs."""

import os
import signal
import threading

from bertprep import engines
from bertprep.cli import main
from bertprep.errors import DataError
from bertprep.stages import create
from bertprep.stages.download import formatted
from test_create import write_shards

_CREATE_SHARD = create.create_shard


def _dies_at_two(task):
    if task == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return task


def _exits_at_two(task):
    if task == 2:
        os._exit(3)
    return task


def _outcome(run, timeout=30):
    """What run() returned or raised, or "hung" after `timeout` seconds."""
    outcome = ["hung"]

    def go():
        try:
            outcome[0] = run()
        except BaseException as exc:  # the outcome under test
            outcome[0] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0]


def test_a_worker_killed_mid_task_ends_the_local_engine_in_one_line():
    outcome = _outcome(lambda: list(engines.run_local(_dies_at_two, range(6), 2)))
    assert isinstance(outcome, DataError), outcome
    assert "was killed by SIGKILL (the kernel's OOM killer, when memory runs out?) mid-run" in str(outcome)
    assert "rerun to resume" in str(outcome)


def test_a_worker_that_exits_names_its_status():
    outcome = _outcome(lambda: list(engines.run_local(_exits_at_two, range(6), 2)))
    assert isinstance(outcome, DataError), outcome
    assert "exited with status 3 mid-run" in str(outcome)


def test_the_download_stages_pool_ends_at_a_killed_worker_too():
    outcome = _outcome(lambda: list(formatted._map(_dies_at_two, list(range(6)), 2)))
    assert isinstance(outcome, DataError), outcome


def test_live_workers_still_give_every_result():
    assert sorted(engines.run_local(abs, range(1, 9), 2)) == list(range(1, 9))


def _create_dying_at_part_1(task):
    if task.source.endswith("_1.txt"):
        os.kill(os.getpid(), signal.SIGKILL)
    return _CREATE_SHARD(task)


def test_create_with_a_worker_killed_mid_shard_exits_1_in_one_line(golden_dir, tmp_path, monkeypatch, capsys):
    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 4)
    monkeypatch.setattr(create, "create_shard", _create_dying_at_part_1)  # the forked workers run it too
    argv = ["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "o"),
            "--dupe-factor", "1", "--workers", "2", "--quiet"]
    assert _outcome(lambda: main(argv)) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "was killed by SIGKILL" in err and "rerun to resume" in err, err


def _dies(task):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_validate_worker_killed_mid_file_is_one_line(monkeypatch):
    """validate --workers N runs its files in a ProcessPoolExecutor, which does not hang on a dead worker, but its
    BrokenProcessPool ended the command in a traceback ("A process in the process pool was terminated
    abruptly")."""
    from bertprep.stages.validate import dataset

    monkeypatch.setattr(dataset, "_scan", _dies)  # the forked workers inherit it
    outcome = _outcome(lambda: dataset.scan_files(["a.tfrecord", "b.tfrecord", "c.tfrecord"], spec=None, workers=2))
    assert isinstance(outcome, DataError), outcome
    assert str(outcome) == ("a worker process died with 3 of 3 record files unchecked (killed: the kernel's OOM "
                            "killer, when memory runs out?); rerun, with fewer --workers if memory ran out")
