"""The trainer under KERAS_BACKEND=jax with TensorFlow unimportable, as on a GPU host for JAX:
both formats, two devices against one, accumulation, exact resume, loss scaling, several processes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")
# One xdist worker runs the module (--dist loadgroup): its processes share one XLA cache.
pytestmark = [pytest.mark.usefixtures("jax_compilation_cache"), pytest.mark.xdist_group("trainer_jax")]

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


def jax_train(tmp_path, data, name, *extra, devices=1, fmt="ofrecord", dropout=0.0, **config):
    """Run the trainer in a JAX process without TensorFlow (TINY model with `config` changes);
    return the JSON log events."""
    log = tmp_path / f"{name}.jsonl"
    argv = [sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", fmt, "--data", str(data),
            "--bert-config", bert_config(tmp_path, dropout, **config), "--seed", "3", "--quiet", "--log-every", "1",
            "--log-json", str(log), *extra]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=jax_env(devices))
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


# The same global batch of 8 as 1 device x 8 (OFRecord and TFRecord), 2 devices x 4, 1 device x 4 x 2
# micro-batches: name -> (format, devices, arguments).
GLOBAL_BATCH_8 = {"one": ("ofrecord", 1, ["--batch-size", "8"]),
                  "tfrecord": ("tfrecord", 1, ["--batch-size", "8"]),
                  "two": ("ofrecord", 2, ["--batch-size", "4"]),
                  "acc": ("ofrecord", 1, ["--batch-size", "4", "--grad-accum", "2"])}


@pytest.fixture(scope="module")
def batch_8_runs(records_dir, tmp_path_factory):
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
                               devices=devices, fmt=fmt)
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


def test_resume_continues_exactly(records_dir, tmp_path):
    assert_resume_is_exact(lambda name, *argv: jax_train(tmp_path, records_dir, name, *argv, dropout=0.1),
                           tmp_path / "ckpt")


def test_mixed_float16_skips_a_nonfinite_step_and_halves_the_scale(records_dir):
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "check", "nonfinite_step_is_skipped",
                             str(records_dir)], capture_output=True, text=True, cwd=REPO, env=jax_env())
    assert result.returncode == 0, result.stderr[-3000:]


def test_grad_accum_adds_no_all_reduce_to_the_compiled_step(records_dir):
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "check", "one_allreduce_set_per_step",
                             str(records_dir)], capture_output=True, text=True, cwd=REPO, env=jax_env(2))
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.heavy
def test_mixed_bfloat16_runs(records_dir, tmp_path):
    events = jax_train(tmp_path, records_dir, "bf16", "--steps", "2", "--batch-size", "4",
                       "--precision", "mixed_bfloat16")
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


def test_cross_entropy_and_hits_equal_numpy():
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "check", "cross_entropy_and_hits"],
                            capture_output=True, text=True, cwd=REPO, env=jax_env())
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_packed_step_equals_the_same_sequences_unpacked(golden_dir):
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "check", "packed_step_equals_unpacked",
                             str(golden_dir)], capture_output=True, text=True, cwd=REPO, env=jax_env())
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.heavy
def test_the_compiled_step_counts_real_sequences_of_packed_rows(golden_dir):
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "check", "step_counts_real_sequences",
                             str(golden_dir)], capture_output=True, text=True, cwd=REPO, env=jax_env())
    assert result.returncode == 0, result.stderr[-3000:]
