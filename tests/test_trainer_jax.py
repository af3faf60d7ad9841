"""The trainer under KERAS_BACKEND=jax with TensorFlow unimportable, as on a GPU host for JAX:
both formats, two devices against one, accumulation, exact resume, loss scaling, several processes."""

import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

pytest.importorskip("jax")
# One xdist worker runs the module (--dist loadgroup): its processes share one XLA cache.
pytestmark = pytest.mark.xdist_group("trainer_jax")

from test_trainer_data import golden_records  # noqa: E402
from trainer_checks import assert_resume_is_exact, bert_config, free_port, latest_state, losses, xla_flags  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = os.path.join(REPO, "tests", "trainer_checks.py")


@pytest.fixture(scope="module")
def records_dir(golden_dir, tmp_path_factory):
    return golden_records(golden_dir, tmp_path_factory.mktemp("records"), parts=2)


def jax_env(devices=1, **extra):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", **extra)
    env["XLA_FLAGS"] = xla_flags(devices)
    return env


# A JAX process without TensorFlow that trains (trainer.cli.main) or checks (trainer_checks' check_NAME) one
# request after another, read as JSON lines from stdin; a JSON reply per request on the stdout it started with
# (the file descriptor 1 the libraries print to goes to stderr, a file the test reads). Each request starts
# from Keras's state of a fresh process (clear_session): the trainer checks a configuration (tracing the model
# to see whether K divides its variables) before it clears the session, and the distribution an earlier run
# set would split that trace and fail it with JAX's error instead of the trainer's one line.
SERVE = r"""
import contextlib, io, json, os, sys, traceback
sys.path.insert(0, sys.argv[1])
import trainer_checks
trainer_checks.block_imports()
replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
from trainer.cli import main
for line in sys.stdin:
    request, out = json.loads(line), io.StringIO()
    if "keras" in sys.modules:
        sys.modules["keras"].backend.clear_session(free_memory=False)
    trainer_checks.freeze_survivors()
    try:
        with contextlib.redirect_stdout(out):
            code = main(request) if request[0] != "check" else getattr(trainer_checks, "check_" + request[1])(
                *request[2:])
    except SystemExit as exit:
        code = exit.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    replies.write(json.dumps({"code": code or 0, "stdout": out.getvalue()}) + "\n")
    replies.flush()
"""


class JaxProcess:
    """One SERVE process on `devices` CPU devices: request(*argv) returns what subprocess.run would of
    `CHECKS --no-tensorflow trainer *argv` (or `check NAME ARGS...`): returncode, stdout and stderr."""

    def __init__(self, devices, stderr_path):
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self.process = subprocess.Popen([sys.executable, "-c", SERVE, os.path.dirname(CHECKS)], cwd=REPO,
                                            env=jax_env(devices), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=stderr, text=True)
        self.requests = 0

    def request(self, *argv):
        start = os.path.getsize(self.stderr_path)
        self.requests += 1
        self.process.stdin.write(json.dumps(argv) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        with open(self.stderr_path, "rb") as f:
            f.seek(start)
            stderr = f.read().decode("utf-8", "replace")
        assert reply, f"the JAX process ended (exit {self.process.wait()}): {stderr[-3000:]}"
        reply = json.loads(reply)
        return types.SimpleNamespace(returncode=reply["code"], stdout=reply["stdout"], stderr=stderr)

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


class JaxProcesses:
    """A module's JAX processes, one per device count (XLA's forced device count is per process), each
    kept for all the module's runs on that count: JAX's and Keras's imports and the op-by-op compiles of
    the model's build are paid once, not per run. Measured here: test_formats_agree_on_one_device's two runs
    took 15 s in processes of their own, 8 s in the module's process (the second, whose programs the XLA
    cache holds, 2.4 s of CPU); the CPU of this module
    fell from 133 to 101 s, of tests/test_trainer_pipeline.py from 270 to 210 s, of
    tests/test_trainer_model_parallel.py from 105 to 74 s."""

    def __init__(self, root):
        self.root = root
        self.processes = {}

    def __call__(self, devices, fresh=False):
        """The process for `devices`; with `fresh`, one that has served nothing yet (a check that counts
        what its code compiles: a process that compiled the same programs before would hide them)."""
        process = self.processes.get(devices)
        if process is None or process.process.poll() is not None or (fresh and process.requests):
            if process is not None:
                process.close()
            process = JaxProcess(devices, self.root / f"devices-{devices}-{len(os.listdir(self.root))}.stderr")
            self.processes[devices] = process
        return process

    def close(self):
        for process in self.processes.values():
            process.close()


def jax_processes_fixture():
    """A module's JaxProcesses fixture (they cache their compiled programs in the worker's cache,
    conftest.WORKER_CACHE)."""

    @pytest.fixture(scope="module")
    def jax_processes(tmp_path_factory):
        processes = JaxProcesses(tmp_path_factory.mktemp("jax-processes"))
        yield processes
        processes.close()

    return jax_processes


jax_processes = jax_processes_fixture()


def jax_train(tmp_path, data, name, *extra, devices=1, fmt="ofrecord", dropout=0.0, processes=None, **config):
    """Run the trainer in a JAX process without TensorFlow (TINY model with `config` changes): a
    process of its own, or with `processes` (a JaxProcesses) that module's process for `devices`;
    return the JSON log events."""
    log = tmp_path / f"{name}.jsonl"
    argv = ["--format", fmt, "--data", str(data), "--bert-config", bert_config(tmp_path, dropout, **config), "--seed",
            "3", "--quiet", "--log-every", "1", "--log-json", str(log), *extra]
    if processes is None:
        result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "trainer", *argv], capture_output=True,
                                text=True, cwd=REPO, env=jax_env(devices))
    else:
        result = processes(devices).request(*argv)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


# First: its one-device process is then the module's too (a fresh one serves the check, which counts compiles).
def test_mixed_float16_skips_a_nonfinite_step_and_halves_the_scale(records_dir, jax_processes):
    result = jax_processes(1, fresh=True).request("check", "nonfinite_step_is_skipped", str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


# The same global batch of 8 as 1 device x 8 (OFRecord and TFRecord), 2 devices x 4, 1 device x 4 x 2
# micro-batches: name -> (format, devices, arguments).
GLOBAL_BATCH_8 = {"one": ("ofrecord", 1, ["--batch-size", "8"]),
                  "tfrecord": ("tfrecord", 1, ["--batch-size", "8"]),
                  "two": ("ofrecord", 2, ["--batch-size", "4"]),
                  "acc": ("ofrecord", 1, ["--batch-size", "4", "--grad-accum", "2"])}


@pytest.fixture(scope="module")
def batch_8_runs(records_dir, jax_processes, tmp_path_factory):
    """run(name): the events and final state of 3 steps of GLOBAL_BATCH_8[name] (each run once per
    module, so the one-device reference serves every comparison); a TensorBoard event file is written
    without TensorFlow."""
    root = tmp_path_factory.mktemp("global-batch-8")
    done = {}

    def run(name):
        if name not in done:
            fmt, devices, extra = GLOBAL_BATCH_8[name]
            ckpt = root / f"ckpt-{name}"
            events = jax_train(root, records_dir, name, "--steps", "3", "--checkpoint-dir", str(ckpt), *extra,
                               devices=devices, fmt=fmt, processes=jax_processes)
            assert os.listdir(ckpt / "tensorboard")[0].startswith("events.out.tfevents.")
            done[name] = (events, latest_state(ckpt)[1])
        return done[name]

    return run


def test_formats_agree_on_one_device(batch_8_runs):
    one_events, one = batch_8_runs("one")
    assert one_events[-1]["replicas"] == 1
    assert len(losses(one_events)) == 3 and all(np.isfinite(losses(one_events)))
    assert losses(batch_8_runs("tfrecord")[0]) == losses(one_events)
    moved = sum(key.startswith("model/trainable") and not np.array_equal(one[key], 0) for key in one)
    assert moved > 10


@pytest.mark.parametrize("name, replicas", [("two", 2), ("acc", 1)])
def test_two_devices_and_accumulation_match_one_device(batch_8_runs, name, replicas):
    one_events, one = batch_8_runs("one")
    events, state = batch_8_runs(name)
    assert events[-1]["replicas"] == replicas
    np.testing.assert_allclose(losses(events), losses(one_events), rtol=1e-5)
    for key in one:
        np.testing.assert_allclose(state[key], one[key], rtol=1e-4, atol=2e-6, err_msg=f"{name} {key}")


def test_resume_continues_exactly(records_dir, jax_processes, tmp_path):
    assert_resume_is_exact(lambda name, *argv: jax_train(tmp_path, records_dir, name, *argv, dropout=0.1,
                                                         processes=jax_processes), tmp_path / "ckpt")


def test_grad_accum_adds_no_all_reduce_to_the_compiled_step(records_dir, jax_processes):
    result = jax_processes(2).request("check", "one_allreduce_set_per_step", str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.heavy
def test_mixed_bfloat16_runs(records_dir, jax_processes, tmp_path):
    events = jax_train(tmp_path, records_dir, "bf16", "--steps", "2", "--batch-size", "4",
                       "--precision", "mixed_bfloat16", processes=jax_processes)
    summary = events[-1]
    assert summary["event"] == "summary" and summary["steps"] == 2 and summary["precision"] == "mixed_bfloat16"
    assert all(np.isfinite(losses(events))) and summary["final_loss_scale"] == 1.0


@pytest.mark.heavy
def test_two_processes_on_127_0_0_1(records_dir, tmp_path):
    """Two JAX processes (one CPU device each) joined by Keras's distribution variables."""
    coordinator = f"127.0.0.1:{free_port()}"
    processes = []
    for index in range(2):
        env = jax_env(KERAS_DISTRIBUTION_JOB_ADDRESSES=coordinator, KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                      KERAS_DISTRIBUTION_PROCESS_ID=str(index))
        argv = [sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", "ofrecord",
                "--data", str(records_dir), "--bert-config", bert_config(tmp_path, 0.1), "--steps", "3",
                "--batch-size", "4", "--log-every", "1", "--quiet", "--json",
                "--log-json", str(tmp_path / f"process{index}.jsonl"),
                "--checkpoint-dir", str(tmp_path / f"ckpt{index}")]
        processes.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600) for p in processes]
    for process, (_out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    summary = json.loads(outputs[0][0])  # stdout holds the summary alone (Gloo's line goes to stderr)
    assert summary["replicas"] == 2 and summary["steps"] == 3 and summary["global_batch"] == 8
    events = [json.loads(line) for line in (tmp_path / "process0.jsonl").read_text().splitlines()]
    assert len(losses(events)) == 3 and all(np.isfinite(losses(events)))
    assert latest_state(tmp_path / "ckpt0")[0] == "ckpt-00000003"
    # Only the first process logs and writes checkpoints.
    assert not (tmp_path / "process1.jsonl").exists() and not (tmp_path / "ckpt1").exists()


def test_several_processes_need_their_count_and_index(records_dir, tmp_path):
    env = jax_env(KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{free_port()}", KERAS_DISTRIBUTION_NUM_PROCESSES="2")
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", "ofrecord",
                             "--data", str(records_dir), "--steps", "1", "--quiet"],
                            capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "trainer: error: KERAS_DISTRIBUTION_JOB_ADDRESSES is set: KERAS_DISTRIBUTION_NUM_PROCESSES and "
        "KERAS_DISTRIBUTION_PROCESS_ID must be set to integers too")


def test_cross_entropy_and_hits_equal_numpy(jax_processes):
    result = jax_processes(1).request("check", "cross_entropy_and_hits")
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_packed_step_equals_the_same_sequences_unpacked(golden_dir, jax_processes):
    result = jax_processes(1).request("check", "packed_step_equals_unpacked", str(golden_dir))
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.heavy
def test_the_compiled_step_counts_real_sequences_of_packed_rows(golden_dir, jax_processes):
    result = jax_processes(1).request("check", "step_counts_real_sequences", str(golden_dir))
    assert result.returncode == 0, result.stderr[-3000:]


# The step shaped for a GPU (docs/trainer.md, "The step on a GPU"), checked on the CPU.
GPU_LEVERS = ("--embedding-gradient", "sorted", "--dropout-rng", "rbg")


def test_the_mixed_precision_step_for_a_gpu_multiplies_in_bf16(records_dir, jax_processes):
    result = jax_processes(1).request("check", "mixed_precision_step_multiplies_in_bf16", str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_step_for_a_gpu_writes_no_masks_or_bias_arrays_and_traces_one_layer(records_dir, jax_processes):
    result = jax_processes(1).request("check", "step_for_gpu_writes_no_masks_or_bias_arrays", str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


def test_layers_traced_once_compute_as_layers_one_by_one(records_dir, jax_processes):
    result = jax_processes(1).request("check", "called_layers_compute_as_one_by_one", str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


def test_variables_drawn_on_the_host_cpu_are_the_programs_draws(jax_processes):
    result = jax_processes(1).request("check", "variables_drawn_on_the_host_equal_the_device_program")
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_gpu_levers_train_as_keras_does(records_dir, jax_processes, tmp_path):
    """Sorted embedding gradients and the GELU's erf formula: the same losses as Keras's scatter and erfc (up to
    float32 rounding) with the same dropout masks; rbg's masks and hash's: other losses, the same for the same
    seed, finite."""
    def run(name, *levers):
        return losses(jax_train(tmp_path, records_dir, name, "--steps", "3", "--batch-size", "4", *levers,
                                dropout=0.1, processes=jax_processes))

    keras_own = run("scatter-threefry")
    np.testing.assert_allclose(run("sorted-threefry", "--embedding-gradient", "sorted"), keras_own, rtol=2e-6)
    # the same function (trainer/gelu.py); JAX's erfc is 1 - erf below |1|, most GELU inputs: bits differ in the tails
    np.testing.assert_allclose(run("scatter-threefry-erf", "--gelu", "erf"), keras_own, rtol=2e-6)
    rbg = run("sorted-rbg", *GPU_LEVERS)
    assert all(np.isfinite(rbg)) and rbg != keras_own
    assert run("sorted-rbg-again", *GPU_LEVERS) == rbg
    hashed = run("sorted-hash", "--embedding-gradient", "sorted", "--dropout-rng", "hash")
    assert all(np.isfinite(hashed)) and hashed not in (keras_own, rbg)
    assert run("sorted-hash-again", "--embedding-gradient", "sorted", "--dropout-rng", "hash") == hashed


def test_resume_continues_exactly_with_the_gpu_levers(records_dir, jax_processes, tmp_path):
    """rbg's masks, sorted gradients and the last layer on the predicted positions (its own masks too)."""
    assert_resume_is_exact(lambda name, *argv: jax_train(tmp_path, records_dir, name, *argv, *GPU_LEVERS,
                                                         "--last-layer", "predicted", dropout=0.1,
                                                         processes=jax_processes), tmp_path / "ckpt")


def test_scanned_layers_train_as_the_unrolled_layers(records_dir, jax_processes, tmp_path):
    """--scan-layers (trainer/scan_layers.py): the same losses as the layers one by one, dropout on (each layer
    draws its own masks and advances its own seeds), with Keras's levers and with the GPU's."""
    def run(name, *levers):
        return losses(jax_train(tmp_path, records_dir, name, "--steps", "3", "--batch-size", "4", *levers,
                                dropout=0.1, processes=jax_processes, num_hidden_layers=3))

    np.testing.assert_allclose(run("scanned", "--scan-layers"), run("unrolled"), rtol=1e-6)
    np.testing.assert_allclose(run("scanned-gpu", "--scan-layers", *GPU_LEVERS), run("unrolled-gpu", *GPU_LEVERS),
                               rtol=1e-6)


def test_fused_attention_trains_as_einsum_and_draws_its_own_masks(records_dir, jax_processes, tmp_path):
    """--attention fused (trainer/fused_attention.py, interpreted on the CPU): without dropout the losses of
    Keras's einsum attention; with it, its own masks: other losses; with the query, key and value projections
    as one product (--qkv-projection packed), the same masks and losses (bitwise on this CPU; a product's
    summation order is the CPU library's)."""
    def run(name, *levers, dropout):
        return losses(jax_train(tmp_path, records_dir, name, "--steps", "3", "--batch-size", "4", *levers,
                                dropout=dropout, processes=jax_processes, num_hidden_layers=2))

    np.testing.assert_allclose(run("fused-0", "--attention", "fused", dropout=0.0), run("einsum-0", dropout=0.0),
                               rtol=1e-5)
    fused = run("fused", "--attention", "fused", dropout=0.1)
    assert all(np.isfinite(fused)) and fused != run("einsum", dropout=0.1)
    packed = run("fused-packed", "--attention", "fused", "--qkv-projection", "packed", dropout=0.1)
    np.testing.assert_allclose(packed, fused, rtol=1e-6)  # one product instead of three: the same sums per column


def test_the_last_layer_on_the_predicted_positions_trains_as_the_whole_layer(records_dir, jax_processes, tmp_path):
    """--last-layer predicted (trainer/last_layer.py): without dropout the whole layer's losses (the same values
    at the positions the heads read); with dropout and the GPU's levers (fused attention and packed
    projections in the layer before, hash's masks), a finite loss at every step, and scanned the same losses
    as unrolled (the scan runs all the layers but the last, which takes the rows)."""
    def run(name, *levers, dropout):
        return losses(jax_train(tmp_path, records_dir, name, "--steps", "3", "--batch-size", "4", *levers,
                                dropout=dropout, processes=jax_processes, num_hidden_layers=2))

    np.testing.assert_allclose(run("predicted-0", "--last-layer", "predicted", dropout=0.0),
                               run("einsum-0", dropout=0.0), rtol=1e-5)  # einsum-0: the fused test's run
    levers = ("--last-layer", "predicted", "--attention", "fused", "--qkv-projection", "packed", "--dropout-rng",
              "hash")
    rows = run("predicted-gpu", *levers, "--scan-layers", dropout=0.1)
    assert len(rows) == 3 and all(np.isfinite(rows))
    np.testing.assert_allclose(rows, run("predicted-gpu-unrolled", *levers, dropout=0.1), rtol=1e-6)


def test_resume_continues_exactly_with_scanned_layers_fused_attention_and_hashed_masks(records_dir, jax_processes,
                                                                                      tmp_path):
    assert_resume_is_exact(lambda name, *argv: jax_train(tmp_path, records_dir, name, *argv, "--scan-layers",
                                                         "--attention", "fused", "--dropout-rng", "hash", dropout=0.1,
                                                         processes=jax_processes, num_hidden_layers=3),
                           tmp_path / "ckpt")


def test_scanned_layers_are_one_loop_in_the_step_for_a_gpu(records_dir, jax_processes):
    result = jax_processes(1).request("check", "scanned_layers_are_one_loop", str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


def compiles_before_the_first_step(records_dir, tmp_path, cache, *extra):
    """(programs compiled, of them loaded from the persistent cache, the "train step" lines, the times the
    step was traced) of a fresh `python -m trainer` process, JAX_LOG_COMPILES on, its cache in `cache`; the
    summary's start-up figures (trainer/startup.py, from JAX's monitoring events) count the same programs as
    JAX's log lines."""
    env = jax_env(JAX_LOG_COMPILES="1", BERTPREP_COMPILATION_CACHE_DIR=str(cache))
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", "ofrecord", "--data",
                             str(records_dir), "--bert-config", bert_config(tmp_path, 0.1), "--steps", "2",
                             "--batch-size", "4", "--log-every", "1", "--json", *extra],
                            capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    before = result.stderr.split("train step 1:")[0]
    steps = [line for line in result.stderr.splitlines() if line.startswith("train step")]
    # "Compiling" is said of a program lowered (an export too), "Finished XLA compilation" of one compiled or loaded.
    compiled, hits = before.count("Finished XLA compilation of jit("), before.count("Persistent compilation cache hit")
    summary = json.loads(result.stdout)
    startup = summary["startup"]
    assert (startup["programs"], startup["programs_from_cache"]) == (compiled, hits), startup
    assert startup["from"] == "process start"
    phases = [startup[key] for key in ("imports_s", "devices_s", "model_built_s", "first_step_s")]
    assert 0 < phases[0] and phases == sorted(phases), startup
    assert startup["first_step_s"] == summary["seconds_to_first_step"]
    assert 0 < startup["traced_s"] and 0 < startup["lowered_s"] and 0 < startup["compiled_or_loaded_s"], startup
    return compiled, hits, steps, before.count("Finished tracing _train_step")


def test_a_run_compiles_a_handful_of_programs_and_a_rerun_loads_them_all(records_dir, tmp_path):
    """A rerun loads every program from the persistent cache and the step's traced program from the traced-step
    cache (trainer/traced_steps.py): the first run traced the model's step once (for its export) and the call
    of the exported program once, the rerun only that call."""
    cache = tmp_path / "cache"
    compiled, hits, steps, traces = compiles_before_the_first_step(records_dir, tmp_path, cache)
    # The initial values, the optimizer's slots, the step and a few conversions: not one program per operation.
    assert 1 <= compiled <= 8 and hits == 0 and len(steps) == 2 and traces == 2, (compiled, hits, traces)
    assert any(name.startswith("jit__train_step-") for name in os.listdir(cache))
    assert len(os.listdir(cache / "traced-steps")) == 1
    assert compiles_before_the_first_step(records_dir, tmp_path, cache) == (compiled, compiled, steps, 1)
    # The learning-rate schedule's numbers are the step's inputs, the initializers' seeds and the dropout layers'
    # seed states the initial values' program's: other --steps, --lr, --warmup and --seed load every program too.
    other = compiles_before_the_first_step(records_dir, tmp_path, cache, "--steps", "3", "--lr", "3e-4",
                                           "--warmup", "1", "--seed", "7")
    assert other[:2] == (compiled, compiled) and len(other[2]) == 3 and other[3] == 1, other
    assert len(os.listdir(cache / "traced-steps")) == 1
    # Another model (its dropout) is traced anew, beside the first.
    assert compiles_before_the_first_step(records_dir, tmp_path, cache, "--dropout", "0.2")[3] == 2
    assert len(os.listdir(cache / "traced-steps")) == 2
    # Without the cache nothing is exported: the step is traced once, as a plain jit.
    assert compiles_before_the_first_step(records_dir, tmp_path, cache, "--no-compilation-cache") == (
        compiled, 0, steps, 1)


def test_the_traced_step_computes_as_the_jitted_step(records_dir, jax_processes, tmp_path):
    result = jax_processes(1).request("check", "traced_program_computes_as_the_jitted_step", str(records_dir),
                                      str(tmp_path / "traced"))
    assert result.returncode == 0, result.stderr[-3000:]


def test_binned_records_give_one_traced_step_per_width(records_dir, tmp_path):
    """--bin-size cuts batches to a few widths: the traced-step cache keeps one exported program per width (one
    program for all had failed at the second width: the exported program takes one shape), and a rerun traces
    only their calls and trains alike."""
    env = jax_env(JAX_LOG_COMPILES="1", BERTPREP_COMPILATION_CACHE_DIR=str(tmp_path / "cache"))
    argv = [sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", "ofrecord", "--data", str(records_dir),
            "--bert-config", bert_config(tmp_path, 0.1), "--steps", "6", "--batch-size", "4", "--bin-size", "32",
            "--log-every", "1"]
    runs = [subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[-1].stderr[-3000:]
    widths = len(os.listdir(tmp_path / "cache" / "traced-steps"))
    assert widths >= 2
    assert [run.stderr.count("Finished tracing _train_step") for run in runs] == [2 * widths, widths]
    steps = [[re.sub(r" [\d.,]+ seq/s [\d.,]+ tok/s", "", line) for line in run.stderr.splitlines()
              if line.startswith("train step")] for run in runs]  # the same losses; not the same speed
    assert len(steps[0]) == 6 and steps[0] == steps[1]


def test_a_step_exported_under_one_schedule_computes_another(records_dir, jax_processes):
    result = jax_processes(1).request("check", "a_step_exported_under_one_schedule_computes_another",
                                      str(records_dir))
    assert result.returncode == 0, result.stderr[-3000:]


def test_initial_values_take_their_seeds_as_arguments(jax_processes):
    result = jax_processes(1).request("check", "initial_values_take_their_seeds_as_arguments")
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_step_that_cannot_be_exported_is_traced_as_before(jax_processes, tmp_path):
    result = jax_processes(1).request("check", "an_unexportable_step_is_traced_as_before", str(tmp_path / "traced"))
    assert result.returncode == 0, result.stderr[-3000:]


def test_without_tensorflow_and_keras_backend_the_trainer_takes_jax(records_dir, tmp_path):
    """A host with JAX and no TensorFlow (the GPU image): no KERAS_BACKEND needed; amp is mixed_bfloat16 on a CPU
    and the first line says why."""
    env = {k: v for k, v in jax_env().items() if k != "KERAS_BACKEND"}
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", "ofrecord", "--data",
                             str(records_dir), "--bert-config", bert_config(tmp_path, 0.1), "--steps", "1",
                             "--batch-size", "4", "--precision", "amp"],
                            capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    first = next(line for line in result.stderr.splitlines() if line.startswith("trainer: 1 device"))
    assert "cpu:0" in first and "amp: mixed_bfloat16 (cpu multiplies bfloat16)" in first, first
    assert "precision               mixed_bfloat16" in result.stdout
