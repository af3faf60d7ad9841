"""The Dask engine: the same shard task on a real LocalCluster, byte-identical to the local engine."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from test_create import output_files, write_shards  # noqa: E402


def create_argv(shards, vocab, out, *extra):
    return [sys.executable, "-m", "bertprep", "create", "--input", str(shards), "--vocab", str(vocab),
            "--out", str(out), "--dupe-factor", "3", "--quiet", *extra]


# One xdist worker runs the module (--dist loadgroup): one Dask cluster serves all its tests.
pytestmark = pytest.mark.xdist_group("dask")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as local_cluster:
        yield local_cluster


def test_dask_engine_gives_the_local_engines_bytes(golden_dir, tmp_path, cluster):
    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 5)
    vocab = golden_dir / "vocab.txt"
    local = subprocess.run(create_argv(shards, vocab, tmp_path / "local", "--workers", "2"), capture_output=True,
                           text=True)
    assert local.returncode == 0, local.stderr
    on_cluster = subprocess.run(
        create_argv(shards, vocab, tmp_path / "dask", "--engine", "dask", "--scheduler", cluster.scheduler_address),
        capture_output=True, text=True,
    )
    assert on_cluster.returncode == 0, on_cluster.stderr
    expected = output_files(tmp_path / "local")
    assert len(expected) == 10 and output_files(tmp_path / "dask") == expected
    # Without --scheduler the engine starts its own LocalCluster.
    own = subprocess.run(create_argv(shards, vocab, tmp_path / "own", "--engine", "dask", "--workers", "2"),
                         capture_output=True, text=True)
    assert own.returncode == 0, own.stderr
    assert output_files(tmp_path / "own") == expected


@pytest.mark.heavy
def test_a_worker_killed_mid_run_still_ends_with_identical_bytes(shared_dir, tmp_path, cluster):
    bench = shared_dir / "fixtures" / "bench" / "wt2.txt"
    vocab = shared_dir / "fixtures" / "golden" / "vocab.txt"
    # Large enough that most shards are still to do when the first one lands.
    write_shards(bench, tmp_path / "wt2", 8, copies=3)
    local = subprocess.run(create_argv(tmp_path / "wt2", vocab, tmp_path / "local", "--workers", "2"),
                           capture_output=True, text=True)
    assert local.returncode == 0, local.stderr

    with distributed.Client(cluster.scheduler_address) as client:
        pids_before = set(client.run(os.getpid).values())
        proc = subprocess.Popen(
            create_argv(tmp_path / "wt2", vocab, tmp_path / "dask", "--engine", "dask", "--scheduler",
                        cluster.scheduler_address),
            stderr=subprocess.PIPE, text=True,
        )
        # Kill one worker process while shards are being created: after the first shard is done.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((tmp_path / "dask").rglob("*.tfrecord")):
            time.sleep(0.05)
        assert proc.poll() is None, "the job finished before a worker could be killed"
        os.kill(sorted(pids_before)[0], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        client.wait_for_workers(2, timeout=60)
        assert set(client.run(os.getpid).values()) != pids_before  # the nanny restarted the killed worker
    assert output_files(tmp_path / "dask") == output_files(tmp_path / "local")
    assert not [p for p in (tmp_path / "dask").rglob("*") if ".tmp-" in p.name]


def test_unreachable_scheduler_fails_fast_with_a_clear_message(golden_dir, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    result = subprocess.run(
        create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "o", "--engine", "dask",
                    "--scheduler", f"tcp://127.0.0.1:{port}"),
        capture_output=True, text=True, timeout=60,
    )
    assert time.monotonic() - start < 20
    assert result.returncode == 1
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(Path(tmp_path).rglob("*.tfrecord"))


def test_a_port_that_never_answers_as_dask_ends_within_the_connect_timeout(golden_dir, tmp_path):
    """distributed bounds the connect but not the handshake read after it: a port that accepts and never
    answers held the command forever, and one that answers with other bytes asked for exabytes (MemoryError)."""

    def answer(listener):
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n" * 4)

    with socket.socket() as silent, socket.socket() as chatty:
        for listener in (silent, chatty):
            listener.bind(("127.0.0.1", 0))
            listener.listen(4)  # the kernel accepts the connection; nobody reads or writes on the silent one
        threading.Thread(target=answer, args=(chatty,), daemon=True).start()
        for listener in (silent, chatty):
            port = listener.getsockname()[1]
            start = time.monotonic()
            result = subprocess.run(create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "o",
                                                "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{port}"),
                                    capture_output=True, text=True, timeout=60)  # killed there: it hung
            assert time.monotonic() - start < 20 and result.returncode == 1, result.stderr
            assert result.stderr.startswith(
                f"bertprep create: error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"), result.stderr
            assert result.stderr.count("\n") == 1
    assert not list(Path(tmp_path).rglob("*.tfrecord"))


@pytest.mark.parametrize("scheduler, content, code, message", [
    ("nonsense", None, 2, "--scheduler 'nonsense' is no Dask scheduler address (missing port number"),
    ("udp://127.0.0.1:8786", None, 2, "--scheduler 'udp://127.0.0.1:8786' is no Dask scheduler address (unknown"),
    ("", None, 2, "--scheduler: an empty address names no scheduler"),
    ("s.json", "{not json", 1, 's.json: not a Dask scheduler file, whose JSON gives an "address"'),
    ("s.json", "[1, 2]", 1, 's.json: not a Dask scheduler file: its JSON gives no "address" string'),
    ("s.json", '{"address": "x"}', 1, "s.json: its address 'x' is no Dask scheduler address"),
])
def test_a_scheduler_that_names_none_is_one_line(golden_dir, tmp_path, scheduler, content, code, message):
    """A ValueError, AssertionError or TypeError traceback from inside distributed; an empty --scheduler ran a
    LocalCluster here, as if none were given."""
    if content is not None:
        (tmp_path / scheduler).write_text(content)
    result = subprocess.run(create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "o",
                                        "--engine", "dask", "--scheduler", scheduler),
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == code and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"bertprep create: error: {message}"), result.stderr


@pytest.mark.parametrize("flag,value", [("--scheduler", "tcp://127.0.0.1:8786"), ("--worker-wait", "5")])
def test_scheduler_without_dask_engine_is_a_usage_error(golden_dir, tmp_path, flag, value):
    """--worker-wait, too, was ignored without --engine dask, exit 0: the local engine has no scheduler."""
    result = subprocess.run(create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "o",
                                        flag, value), capture_output=True, text=True)
    assert result.returncode == 2 and f"{flag} needs --engine dask" in result.stderr
    assert not (tmp_path / "o").exists()


def test_shard_on_dask_gives_the_local_engines_bytes(golden_dir, tmp_path, cluster):
    inputs = write_shards(golden_dir / "corpus.txt", tmp_path / "raw", 3) / "training"
    outputs = {}
    for engine in ("local", "dask"):
        extra = (["--engine", "dask", "--scheduler", cluster.scheduler_address] if engine == "dask"
                 else ["--workers", "2"])
        result = subprocess.run(
            [sys.executable, "-m", "bertprep", "shard", "--input", str(inputs), "--corpus", "golden",
             "--out", str(tmp_path / engine), "--train-shards", "4", "--test-shards", "2", "--quiet", *extra],
            capture_output=True, text=True,
        )
        assert result.returncode == 0, result.stderr
        outputs[engine] = output_files(tmp_path / engine)
    assert len(outputs["local"]) == 6 and outputs["dask"] == outputs["local"]


def test_scheduler_file_is_accepted(golden_dir, tmp_path, cluster):
    scheduler_file = tmp_path / "scheduler.json"
    scheduler_file.write_text('{"address": "%s", "type": "Scheduler"}' % cluster.scheduler_address)
    result = subprocess.run(create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "o",
                                        "--engine", "dask", "--scheduler", str(scheduler_file)), capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    local = subprocess.run(create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "local"),
                           capture_output=True, text=True)
    assert local.returncode == 0, local.stderr
    assert output_files(tmp_path / "o") == output_files(tmp_path / "local")


def test_pack_on_dask_gives_the_local_engines_bytes(golden_dir, tmp_path, cluster):
    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 3)
    created = subprocess.run(create_argv(shards, golden_dir / "vocab.txt", tmp_path / "records", "--workers", "2"),
                             capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    (manifest,) = (tmp_path / "records").rglob("manifest.json")
    outputs = {}
    for engine in ("local", "dask"):
        extra = (["--engine", "dask", "--scheduler", cluster.scheduler_address] if engine == "dask"
                 else ["--workers", "2"])
        result = subprocess.run([sys.executable, "-m", "bertprep", "pack", str(manifest.parent), "--out",
                                 str(tmp_path / engine), "--quiet", *extra], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        outputs[engine] = output_files(tmp_path / engine)
    assert len(outputs["local"]) == 6 and outputs["dask"] == outputs["local"]


def test_a_scheduler_without_workers_ends_the_run_within_the_worker_wait(golden_dir, tmp_path):
    """Tasks on a scheduler with no worker wait for one forever: the command sat silent, however long. No wait
    at the connect: an adaptive cluster starts its workers once it sees tasks queued."""
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=":0") as empty:
        start = time.monotonic()
        result = subprocess.run(create_argv(golden_dir / "corpus.txt", golden_dir / "vocab.txt", tmp_path / "o",
                                            "--engine", "dask", "--scheduler", empty.scheduler_address,
                                            "--worker-wait", "1"),
                                capture_output=True, text=True, timeout=120)  # killed there: it hung
    assert time.monotonic() - start < 60 and result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"bertprep create: error: the Dask scheduler at {empty.scheduler_address} has had "
                                    f"no worker for 1s, with "), result.stderr
    assert result.stderr.endswith(f" tasks left; start `dask worker {empty.scheduler_address}` (or give a longer "
                                  "--worker-wait) and rerun\n") and result.stderr.count("\n") == 1


def _sleep_a_minute(task):
    time.sleep(60)
    return task


def test_a_run_whose_workers_are_all_gone_ends_within_the_worker_wait():
    """Every worker lost mid-run: Dask holds the tasks left until a worker joins, and the run waited forever."""
    from bertprep import engines
    from bertprep.errors import DataError

    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as one:
        with distributed.Client(one) as client:
            results, raised = engines.run_dask(client, _sleep_a_minute, range(3), worker_wait=1), []
            client.wait_for_workers(1, timeout=10)
            one.scale(0)
            waiting = threading.Thread(target=lambda: raised.append(pytest.raises(DataError, next, results)),
                                       daemon=True)
            waiting.start()
            waiting.join(30)  # still waiting there: unbounded
            assert not waiting.is_alive() and raised
            assert raised[0].match(r"has had no worker for 1s, with 3 tasks left; start `dask worker")


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan")])
def test_the_worker_wait_is_a_positive_number_of_seconds(value):
    from bertprep.engines import EngineOptions
    from bertprep.errors import UsageError

    with pytest.raises(UsageError, match=r"^EngineOptions\.worker_wait must be a positive number of seconds, not "):
        EngineOptions(engine="dask", worker_wait=value)


def test_eval_samples_counts_on_no_more_dask_workers_than_test_shards(golden_dir, tmp_path, monkeypatch, capsys):
    """--eval-samples counts the test split's instances first, on an engine of its own: without --scheduler it
    started a LocalCluster of every --workers (one per core by default) to count one test shard, more processes
    than the run's own, minutes of start-up on a large machine."""
    from bertprep import engines
    from bertprep.cli import main

    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "tree", 2)
    (shards / "test").mkdir()
    (shards / "test" / "t.txt").write_text("the cat sat on the mat.\nit was warm.\n\na dog ran.\nthen it slept.\n")
    started, connect = [], engines.connect_dask

    def connect_recording(scheduler=None, workers=None):  # the real LocalCluster, its size noted
        started.append(workers)
        return connect(scheduler, workers)

    monkeypatch.setattr(engines, "connect_dask", connect_recording)
    # more samples than the split holds: the count is the only pass, its one line the end
    assert main(["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "out"), "--dupe-factor", "1", "--engine", "dask", "--workers", "3",
                 "--eval-samples", "1000"]) == 1
    assert "fewer than --eval-samples 1,000" in capsys.readouterr().err
    assert started == [1]
