"""`python -m trainer.benchmark`: DLPerf's arithmetic, the max search, one-line errors, and whole reports
from real worker processes on 1 and 2 logical CPU devices with a tiny model (heavy)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bertprep.errors import DataError
from test_trainer_data import golden_records
from trainer.benchmark import method
from trainer.benchmark.worker import MEMORY_LIMIT_VARIABLE
from trainer.config import BertConfig
from trainer_checks import bert_config, without_tensorflow, xla_flags

# The JAX runs' processes share one XLA cache: a configuration's later runs and probes compile nothing.

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_throughput_is_global_batch_times_timed_iterations_over_their_time():
    times = [10.0, 11.0, 11.5, 12.0, 12.5, 13.0]  # iteration i ends at times[i - 1]
    assert method.throughput(times, global_batch=8, skip=2) == 8 * 4 / (13.0 - 11.0)
    for skip in (0, 6):
        with pytest.raises(ValueError):
            method.throughput(times, 8, skip)


def test_real_sequences_per_second_count_each_timed_iteration_s_sequences():
    times = [10.0, 11.0, 11.5, 12.0, 12.5, 13.0]
    sequences = [99, 99, 20, 21, 22, 23]  # iterations 3..6 are timed
    assert method.sequence_throughput(times, sequences, skip=2) == (20 + 21 + 22 + 23) / (13.0 - 11.0)
    with pytest.raises(ValueError):
        method.sequence_throughput(times, sequences[1:], 2)


def test_speedup_is_against_the_one_device_median_of_the_same_precision_and_batch():
    def config(devices, precision, batch, *rates):
        return {"devices": devices, "precision": precision, "batch": batch,
                "runs": [{"throughput": r} for r in rates]}

    configs = [config(1, "fp32", 32, 10, 30, 20), config(1, "amp", 32, 40, 41, 39), config(1, "fp32", "max", 50),
               config(2, "fp32", 32, 36, 38, 37, 35), config(2, "amp", 32, 70), config(2, "fp32", "max", 90),
               config(2, "fp32", 64, 99)]
    method.add_medians_and_speedups(configs)
    assert [c["median"] for c in configs] == [20, 40, 50, 36.5, 70, 90, 99]
    assert [c["speedup"] for c in configs] == [1.0, 1.0, 1.0, 36.5 / 20, 70 / 40, 90 / 50, None]
    assert configs[3]["scaling_efficiency"] == 36.5 / 20 / 2
    # A report without 1-device runs (several hosts) takes them from an earlier report.
    later = method.add_medians_and_speedups([config(16, "fp32", 32, 320)], baseline_configs=configs)
    assert later[0]["speedup"] == 16.0 and later[0]["scaling_efficiency"] == 1.0


def test_training_flops_of_bert_base_at_128_20():
    """docs/reference-facts.md, "FLOPs per sequence": about 70 GFLOP per sequence (encoder 3 x 22.4 GFLOP
    plus the MLM head)."""
    base = BertConfig.sized("base")
    encoder = 12 * (2 * (4 * 768**2 + 2 * 768 * 3072) * 128 + 4 * 128**2 * 768)
    assert encoder == 22_347_251_712
    masked_lm = 20 * 2 * (768**2 + 768 * 30522)
    assert method.forward_flops_per_sequence(base, 128, 20) == encoder + masked_lm + 2 * (768**2 + 2 * 768)
    assert 69.9e9 < method.training_flops_per_sequence(base, 128, 20) < 70.0e9
    assert method.mfu(70e9, 1000, 140e12) == 0.5 and method.mfu(70e9, None, 1e12) is None


@pytest.mark.parametrize("limit, start, expected, probes", [
    (5, 4, 5, [(4, True), (8, False), (6, False), (5, True)]),
    (100, 32, 96, [(32, True), (64, True), (128, False), (96, True), (112, False), (104, False)]),
    (20, 32, 16, [(32, False), (16, True), (24, False)]),  # above 8, multiples of 8 only
    (3, 32, 3, [(32, False), (16, False), (8, False), (4, False), (2, True), (3, True)]),
    (0, 4, None, [(4, False), (2, False), (1, False)]),
])
def test_max_search_doubles_then_bisects(limit, start, expected, probes):
    assert method.search_max_batch(lambda batch: batch <= limit, start) == (expected, probes)


def jax_host_env(memory_limit):
    """The JAX runs' environment: fast compiles, the test's memory limit (sequences per device), and no
    TensorFlow in the workers, as on the GPU recipe's hosts (under JAX, Keras imports it only to seed it:
    ~2 s of CPU per worker)."""
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_FLAGS=xla_flags(), **{MEMORY_LIMIT_VARIABLE: str(memory_limit)})
    return without_tensorflow(env)


def benchmark(*args, env=None):
    return subprocess.run([sys.executable, "-m", "trainer.benchmark", *args], capture_output=True, text=True,
                          cwd=REPO, env=env)


def test_the_plot_of_a_report_where_no_configuration_ran_is_drawn_without_a_warning(tmp_path):
    """Every configuration out of memory or failed: matplotlib printed "No artists with labels found to put in
    legend" (a UserWarning, two lines) under the report's summary."""
    import warnings

    from trainer.benchmark import report

    configs = [{"devices": d, "hosts": 1, "precision": "fp32", "batch": 8, "median": None, "speedup": None,
                "status": "oom"} for d in (1, 2)]
    results = {"configs": configs, "setup": {"amp": "mixed_bfloat16", "packed": False, "model": "tiny", "seq": 128,
                                             "pred": 20, "backend": "jax"},
               "host": {"hostname": "h", "accelerator": None, "cpu": "cpu"}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report.plot(tmp_path / "throughput.png", results)
    assert (tmp_path / "throughput.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_get_one_line_errors(tmp_path):
    cases = [
        (["--devices", "0"], 2, "argument --devices: expected distinct positive integers, got '0'"),
        (["--devices", "1,x"], 2, "argument --devices: expected comma-separated positive integers, got '1,x'"),
        (["--batch-size", "32,big"], 2,
         "argument --batch-size: expected positive integers or 'max', got 'big' in '32,big'"),
        (["--precision", "fp16"], 2, "argument --precision: expected distinct values of fp32, amp, got 'fp16'"),
        (["--iterations", "20", "--skip", "20"], 2, "--skip 20 must be below --iterations 20"),
        (["--runs", "0"], 2, "argument --runs: expected a positive integer, got 0"),
        (["--data", str(tmp_path / "none")], 1, f"{tmp_path / 'none'}: no such directory"),
        # a corpus file given for the records: it was "no such directory", as if nothing were there
        (["--data", str(tmp_path / "corpus.txt")], 1, f"{tmp_path / 'corpus.txt'}: a file, not a directory: give the "
         "directory of records that bertprep create, create-squad or create-glue wrote"),
    ]
    (tmp_path / "corpus.txt").write_text("One sentence.\n")
    for argv, code, message in cases:
        result = benchmark("--format", "ofrecord", *argv, "--out", str(tmp_path / "out"))
        assert result.returncode == code, (argv, result.stderr)
        assert result.stderr.strip().splitlines() == [f"trainer.benchmark: error: {message}"], argv


@pytest.mark.parametrize("out, relation, source", [
    ("bo", "holds", "bo/results.json"),  # the new results.json was written over the --baseline it read
    ("records", "is", "records"),
    ("records/bench", "is inside", "records"),
])
def test_an_out_that_holds_or_is_inside_an_input_is_refused_before_anything(tmp_path, out, relation, source):
    (tmp_path / "bo").mkdir()
    (tmp_path / "bo" / "results.json").write_text('{"configs": []}')
    (tmp_path / "records").mkdir()  # empty: where the check was missing, refused later rather than benchmarked
    result = benchmark("--format", "ofrecord", "--data", str(tmp_path / "records"),
                       "--baseline", str(tmp_path / "bo" / "results.json"), "--out", str(tmp_path / out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"trainer.benchmark: error: --out {tmp_path / out} {relation} the input {tmp_path / source}: the run would "
        "overwrite or delete what it reads; write the output elsewhere"]
    assert (tmp_path / "bo" / "results.json").read_text() == '{"configs": []}'
    assert os.listdir(tmp_path / "bo") == ["results.json"] and os.listdir(tmp_path / "records") == []


ONE_DEVICE = {"devices": 1, "precision": "fp32", "batch": 32, "median": 120.5}


@pytest.mark.parametrize("configs, said", [
    (5, "configs is 5, expected a list of configurations"),
    ([ONE_DEVICE, [1]], "configs[1] is [1], expected an object"),
    ([{"devices": 1}], "configs[0] lacks precision: expected one of fp32, amp"),
    ([dict(ONE_DEVICE, devices=0)], "configs[0] has devices 0, expected an integer >= 1"),
    ([dict(ONE_DEVICE, devices=True)], "configs[0] has devices true, expected an integer >= 1"),
    ([dict(ONE_DEVICE, precision="fp16")], 'configs[0] has precision "fp16", expected one of fp32, amp'),
    ([dict(ONE_DEVICE, batch="32")], 'configs[0] has batch "32", expected a positive integer or "max"'),
    ([{k: v for k, v in ONE_DEVICE.items() if k != "median"}],
     "configs[0] lacks median: expected a positive number (or null)"),
    ([ONE_DEVICE, dict(ONE_DEVICE, median=-3)], "configs[1] has median -3, expected a positive number (or null)"),
])
def test_a_malformed_baseline_is_named_before_any_run(tmp_path, configs, said):
    """Each entry is checked for what the speed-up reads: a KeyError once every run had finished, before."""
    from trainer.benchmark.cli import _load_baseline

    path = tmp_path / "results.json"
    path.write_text(json.dumps({"configs": configs}))
    with pytest.raises(DataError) as raised:
        _load_baseline(str(path))
    assert str(raised.value) == f"--baseline {path}: {said}"


def test_a_malformed_baseline_ends_the_command_before_any_run(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"configs": [{"devices": 1}]}))
    # A plan of one short run: without the check, the command ran it and then failed on the baseline.
    result = benchmark("--format", "ofrecord", "--baseline", str(path), "--devices", "1", "--precision", "fp32",
                       "--batch-size", "1", "--iterations", "2", "--skip", "1", "--runs", "1",
                       "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"trainer.benchmark: error: --baseline {path}: configs[0] lacks precision: expected one of fp32, amp"]
    assert not (tmp_path / "out").exists()  # no worker started, no log written


@pytest.mark.parametrize("variable, value, said", [
    ("BERTPREP_COMPILATION_CACHE_DIR", "taken", "BERTPREP_COMPILATION_CACHE_DIR {taken}: is a file; name a directory "
                                                "(or BERTPREP_COMPILATION_CACHE=0: no cache)"),
    ("BERTPREP_COMPILATION_CACHE", "disabled",
     "BERTPREP_COMPILATION_CACHE='disabled': expected 0, off, false, no (off) or 1, on, true, yes (on)"),
])
def test_an_unusable_compilation_cache_ends_the_command_before_any_run(tmp_path, variable, value, said):
    """The workers' cache: a file for its folder had every worker's JAX warn twice a program and run uncached;
    another value of the switch left it on without a word."""
    taken = tmp_path / "taken"
    taken.write_text("")
    env = dict(os.environ, **{variable: str(taken) if value == "taken" else value})
    result = benchmark("--format", "ofrecord", "--backend", "jax", "--devices", "1", "--precision", "fp32",
                       "--batch-size", "1", "--iterations", "2", "--skip", "1", "--runs", "1",
                       "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"trainer.benchmark: error: {said.format(taken=taken)}"]
    assert not (tmp_path / "out").exists()  # no worker started, no log written


@pytest.mark.parametrize("argv, said", [
    (["--seed", "-1"], "--seed must be an integer from 0 to 4294967295, got -1"),
    (["--qkv-projection", "packed", "--attention", "einsum"],
     "--qkv-projection packed: only with the fused attention (--attention fused or auto)"),
])
def test_the_runs_shared_settings_are_checked_before_any_run(tmp_path, argv, said):
    """Each worker builds its TrainConfig: a --seed out of range failed in every one, each run an error (a
    traceback in its log), and the command wrote its report, exit 0."""
    result = benchmark("--format", "ofrecord", *argv, "--devices", "1", "--precision", "fp32", "--batch-size", "1",
                       "--iterations", "2", "--skip", "1", "--runs", "1", "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"trainer.benchmark: error: {said}"]
    assert not (tmp_path / "out").exists()


def test_the_platform_is_detected_on_every_accelerator_the_host_shows(tmp_path, monkeypatch):
    """The parent checks --devices against the detected count: narrowed to one device first, the detection
    counted 1 GPU of 8 and refused --devices 2. A CUDA_VISIBLE_DEVICES of "" (every GPU hidden) stays so."""
    from trainer.benchmark import worker

    seen = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setattr(worker, "detect", lambda backend: seen.append(os.environ["CUDA_VISIBLE_DEVICES"]) or {})
    assert worker.work(1, 3, str(tmp_path / "platform.json"), detect_only=True) == 0
    assert seen == ["0,1,2,3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("XLA_FLAGS", "")
    worker.select_devices(2, "jax")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


@pytest.fixture(scope="module")
def records_dir(golden_dir, tmp_path_factory):
    return golden_records(golden_dir, tmp_path_factory.mktemp("records"), parts=2)


def test_logical_cpu_devices_are_bounded_by_the_hosts_cores(records_dir, tmp_path):
    """Without an accelerator, --devices N makes N logical CPU devices, as many as asked: a mistyped count
    asked for thousands of replicas before any line of progress."""
    pytest.importorskip("jax")
    from trainer.benchmark.cli import cpu_device_limit

    limit = cpu_device_limit(len(os.sched_getaffinity(0)))
    result = benchmark("--format", "tfrecord", "--data", str(records_dir), "--bert-config", bert_config(tmp_path, 0.0),
                       "--devices", f"1,{limit + 1}", "--precision", "fp32", "--batch-size", "2", "--out",
                       str(tmp_path / "out"), "--quiet", env=jax_host_env(memory_limit=8))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"trainer.benchmark: error: --devices {limit + 1}: this host has no accelerator, and as many logical CPU "
        f"devices on its {len(os.sched_getaffinity(0))} cores would measure their contention, each holding a replica "
        f"(at most {limit} here)"]
    assert cpu_device_limit(1) == 8 and cpu_device_limit(16) == 64
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.heavy
def test_report_of_one_and_two_devices_with_a_failing_configuration(records_dir, tmp_path):
    """Real runs (JAX, as on the GPU recipe's hosts, tiny model, 1 and 2 CPU devices): medians are the
    medians of the throughputs recomputed from every run's step times, speed-up is against 1 device at
    the same batch; a configuration out of memory (the test limit) is reported in the table and the
    others go on."""
    pytest.importorskip("jax")
    out = tmp_path / "out"
    env = jax_host_env(memory_limit=8)
    result = benchmark("--format", "tfrecord", "--data", str(records_dir), "--bert-config", bert_config(tmp_path, 0.0),
                       "--devices", "1,2", "--precision", "fp32", "--batch-size", "2,16", "--iterations", "5",
                       "--skip", "1", "--runs", "2", "--out", str(out), "--json", "--quiet", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    results = json.loads((out / "results.json").read_text())
    assert results["method"]["iterations"] == 5 and results["method"]["skip"] == 1
    configs = {(c["devices"], c["batch"]): c for c in results["configs"]}
    assert sorted(configs) == [(1, 2), (1, 16), (2, 2), (2, 16)]
    for devices in (1, 2):
        config = configs[(devices, 2)]
        assert config["status"] == "ok" and config["global_batch"] == 2 * devices and len(config["runs"]) == 2
        recomputed = []
        for run in config["runs"]:
            times = run["step_times"]
            assert len(times) == 5 and all(np.diff(times) >= 0)
            recomputed.append(config["global_batch"] * 4 / (times[4] - times[0]))
            assert (out / run["log"]).is_file()
            # Each worker's start, by the trainer's clock (trainer/startup.py), at the moment the worker timed.
            assert run["startup"]["first_step_s"] == pytest.approx(run["first_step_s"], abs=0.5), run["startup"]
        # The workers share the compilation cache: the second run of a configuration compiles nothing.
        second = config["runs"][1]["startup"]
        assert second["programs"] >= 1 and second["programs_from_cache"] == second["programs"], second
        assert config["median"] == pytest.approx(float(np.median(recomputed)), rel=1e-12)
        assert config["peak_flops"] > 1e8 and 0 < config["mfu"] < 1
        failed = configs[(devices, 16)]
        assert failed["status"] == "oom" and failed["median"] is None and len(failed["runs"]) == 1
        assert "exceed the test limit" in failed["error"]
    assert configs[(2, 2)]["speedup"] == pytest.approx(configs[(2, 2)]["median"] / configs[(1, 2)]["median"])
    assert configs[(1, 2)]["speedup"] == 1.0
    report = (out / "report.md").read_text()
    assert "| 2 | " in report and "out of memory" in report and f"{configs[(2, 2)]['median']:,.1f}" in report
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert [c["median"] for c in summary["configs"]] == [c["median"] for c in results["configs"]]


@pytest.mark.heavy
def test_max_batch_is_searched_under_a_memory_limit(records_dir, tmp_path):
    """Each probe a process (JAX); batches above the test limit fail as out of memory: the max found is the limit."""
    pytest.importorskip("jax")
    out = tmp_path / "out"
    env = jax_host_env(memory_limit=3)
    result = benchmark("--format", "ofrecord", "--data", str(records_dir), "--bert-config", bert_config(tmp_path, 0.0),
                       "--precision", "fp32", "--batch-size", "max", "--max-start", "2", "--iterations", "3",
                       "--skip", "1", "--runs", "1", "--out", str(out), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (config,) = json.loads((out / "results.json").read_text())["configs"]
    assert config["max_search"] == [{"batch_size": 2, "fits": True}, {"batch_size": 4, "fits": False},
                                    {"batch_size": 3, "fits": True}]
    assert config["batch_size"] == 3 and config["global_batch"] == 3 and config["median"] > 0
    assert "(b3)" in (out / "report.md").read_text()
    assert "max search, batch 4 out of memory" in result.stderr


@pytest.mark.heavy
def test_packed_records_report_rows_and_real_sequences_per_second(golden_dir, tmp_path):
    """TensorFlow: on packed rows the DLPerf figure is rows/s, and the report adds the real sequences/s recomputed
    from the sequences each timed iteration trained on (several per row)."""
    pytest.importorskip("tensorflow")
    from bertprep.cli import main as bertprep_main
    from test_pack import short_documents

    shards = short_documents(golden_dir / "corpus.txt", tmp_path / "short", 2)
    assert bertprep_main(["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                          str(tmp_path / "records"), "--dupe-factor", "1", "--quiet", "--workers", "1"]) == 0
    assert bertprep_main(["pack", str(next((tmp_path / "records").glob("*/short"))), "--quiet", "--workers", "1",
                          "--format", "ofrecord"]) == 0
    packed = next((tmp_path / "records").glob("*_packed3/short")).parent
    out = tmp_path / "out"
    result = benchmark("--format", "ofrecord", "--data", str(packed), "--bert-config", bert_config(tmp_path, 0.0),
                       "--precision", "fp32", "--batch-size", "2", "--iterations", "4", "--skip", "1",
                       "--runs", "1", "--out", str(out), "--json", "--quiet")  # medians over runs: the JAX report test
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["setup"]["packed"] is True
    (config,) = results["configs"]
    recomputed = []
    for run in config["runs"]:
        times, sequences = run["step_times"], run["step_sequences"]
        assert len(sequences) == len(times) == 4 and all(2 <= n <= 2 * 3 for n in sequences)
        assert sum(sequences[1:]) > 3 * 2  # short documents: more than one sequence per row
        recomputed.append(sum(sequences[1:]) / (times[3] - times[0]))
        assert run["sequence_throughput"] > run["throughput"]
    assert config["sequence_median"] == pytest.approx(float(np.median(recomputed)), rel=1e-12)
    report = (out / "report.md").read_text()
    assert "packed rows/s" in report and "## Real sequences/s" in report
    assert f"{config['sequence_median']:,.1f}" in report


def test_a_baseline_of_another_model_is_refused_before_any_run(tmp_path):
    """A --baseline measured on another model (or records, optimizer, backend): its 1-device medians were taken
    as this run's, and the report printed speed-ups of one model's throughput over another's (exit 0)."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    one = ("--format", "ofrecord", "--precision", "fp32", "--batch-size", "2", "--iterations", "2", "--skip", "1",
           "--runs", "1", "--quiet")
    first = benchmark(*one, "--model", "tiny", "--devices", "1", "--out", str(tmp_path / "one"), env=env)
    assert first.returncode == 0, first.stderr
    baseline = tmp_path / "one" / "results.json"
    result = benchmark(*one, "--model", "mini", "--devices", "2", "--baseline", str(baseline),
                       "--out", str(tmp_path / "two"), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"trainer.benchmark: error: --baseline {baseline}: measured with model_config.hidden_size=128, this run's "
        "256: its 1-device medians are no baseline for this run's speed-ups"]
    assert not (tmp_path / "two").exists()  # no worker started, no log written


def _workers_of(pid):
    """The pids of trainer.benchmark.worker processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{entry}/status") as f:
                parent = f"PPid:\t{pid}\n" in f.read()
        except (OSError, ValueError):  # not a process, or one gone meanwhile
            continue
        if parent and b"trainer.benchmark.worker" in command:
            found.append(int(entry))
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"trainer.benchmark.worker" in f.read()
    except OSError:
        return False


def test_sigterm_ends_the_benchmark_with_its_worker(tmp_path):
    """SIGTERM (a scheduler's stop, `timeout`) killed trainer.benchmark at once, exit 143 without a word, and
    its worker, started in a session of its own, went on running (on the GPUs the job had given back), its
    scratch folder left in the temporary directory. It now ends as after Ctrl-C: the worker killed, the scratch
    removed, one line, exit 143."""
    import signal
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TMPDIR=str(scratch))
    process = subprocess.Popen([sys.executable, "-m", "trainer.benchmark", "--format", "ofrecord", "--devices", "1",
                                "--runs", "1", "--backend", "jax", "--out", str(tmp_path / "out"), "--quiet"],
                               cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    workers = []
    try:
        deadline = time.monotonic() + 300  # a bound on the wait, not a measurement
        while not workers and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = _workers_of(process.pid)
        assert workers, "no worker started"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
        assert (process.returncode, err.strip().splitlines()[-1:]) == (143, ["trainer.benchmark: stopped by SIGTERM"])
        assert [pid for pid in workers if _alive(pid)] == []
        assert os.listdir(scratch) == []
    finally:
        for pid in workers:  # the old code's orphan: its own session, its own process group
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
