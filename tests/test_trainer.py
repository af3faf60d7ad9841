"""Training on CPU with a tiny BERT: formats agree, replicas and accumulation agree, resume is
exact, mixed precision runs, non-finite steps are skipped, learning happens (heavy)."""

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import trainer_checks  # noqa: E402
from bertprep import formats  # noqa: E402
from bertprep.cli import main as bertprep_main  # noqa: E402
from test_trainer_data import golden_records  # noqa: E402
from trainer.cli import main  # noqa: E402
from trainer_checks import assert_resume_is_exact, bert_config, free_port, latest_state, losses, resume_argv  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def records_dir(golden_dir, tmp_path_factory):
    return golden_records(golden_dir, tmp_path_factory.mktemp("records"), parts=2)


def train_argv(tmp_path, data, *extra, name="run", dropout=0.0, fmt="ofrecord"):
    """(the trainer's arguments for a run of TINY logging into tmp_path/<name>.jsonl, that log's path)."""
    log = tmp_path / f"{name}.jsonl"
    return ["--format", fmt, "--data", str(data), "--bert-config", bert_config(tmp_path, dropout), "--log-every", "1",
            "--log-json", str(log), "--quiet", "--seed", "3", *extra], log


def train(tmp_path, data, *extra, name="run", dropout=0.0, fmt="ofrecord"):
    """Run the trainer in this process; return (exit code, JSON log events)."""
    argv, log = train_argv(tmp_path, data, *extra, name=name, dropout=dropout, fmt=fmt)
    code = main(argv)
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return code, events


def test_steps_per_call_trains_as_one_step_per_call(records_dir, tmp_path):
    """Steps 6-8 run in one tf.function call (the first 5 are fetched one by one): the same log
    and the same weights as one step per call."""
    runs = {}
    for calls in ("1", "3"):
        ckpt = tmp_path / f"ckpt-{calls}"
        code, events = train(tmp_path, records_dir, "--steps", "8", "--batch-size", "2", "--log-every", "8",
                             "--steps-per-call", calls, "--checkpoint-dir", str(ckpt), name=f"calls-{calls}")
        assert code == 0
        runs[calls] = (losses(events), latest_state(ckpt)[1])
    assert len(runs["1"][0]) == 1
    np.testing.assert_allclose(runs["3"][0], runs["1"][0], rtol=1e-6)
    for key, value in runs["1"][1].items():
        np.testing.assert_allclose(runs["3"][1][key], value, rtol=1e-5, atol=1e-7, err_msg=key)


@pytest.fixture(scope="module")
def dropout_runs(records_dir, tmp_path_factory):
    """(run, states, root): run(name, *argv) trains in this process with dropout 0.1 (logging into `root`),
    once per name, and returns the JSON log events; states[name] holds the newest checkpoint's arrays as
    the run left them. The resume test's uninterrupted run is also the padded-vocab test's unpadded
    reference (the same arguments): one run of the two tests' three uninterrupted runs is saved."""
    root = tmp_path_factory.mktemp("dropout")
    done, states = {}, {}

    def run(name, *argv):
        if name not in done:
            code, events = train(root, records_dir, *argv, name=name, dropout=0.1)
            assert code == 0
            done[name] = (argv, events)
            ckpt = argv[argv.index("--checkpoint-dir") + 1]
            states[name] = latest_state(ckpt)[1]  # before assert_resume_is_exact removes later checkpoints
        assert done[name][0] == argv, name
        return done[name][1]

    return run, states, root


@pytest.mark.xdist_group("trainer_dropout")  # one xdist worker (--dist loadgroup): the "whole" run serves both
def test_resume_continues_exactly(dropout_runs, records_dir):
    run, _, root = dropout_runs
    ckpt = root / "ckpt"
    assert_resume_is_exact(run, ckpt)
    # A resumed run must keep the settings that fix its trajectory.
    assert main(["--format", "ofrecord", "--data", str(records_dir), "--bert-config", bert_config(root, 0.1),
                 "--steps", "6", "--batch-size", "8", "--checkpoint-dir", str(ckpt), "--resume", "--quiet",
                 "--optimizer", "adam", "--warmup", "2", "--seed", "3"]) == 2


@pytest.mark.xdist_group("trainer_dropout")
def test_padded_vocab_trains_and_saves_as_the_real_vocab(dropout_runs):
    """--pad-vocab 8 (30,522 -> 30,528 embedding rows): the same losses and the same saved arrays,
    of the real vocabulary's shape, as no padding (the resume test's uninterrupted run, 6 steps with
    checkpoints at 2, 4, 6); a padded run resumes from them."""
    run, states, root = dropout_runs
    unpadded_events = run("whole", *resume_argv(root / "ckpt"))
    padded_ckpt = root / "ckpt-pad-8"
    padded_events = run("pad-8", *resume_argv(padded_ckpt), "--pad-vocab", "8")
    runs = {"1": (losses(unpadded_events), states["whole"]), "8": (losses(padded_events), states["pad-8"])}
    np.testing.assert_allclose(runs["8"][0], runs["1"][0], rtol=1e-5)
    embeddings = [key for key in runs["1"][1] if "word_embeddings" in key]
    assert embeddings and all(runs["8"][1][key].shape[0] == 30522 for key in embeddings)
    for key, value in runs["1"][1].items():
        assert runs["8"][1][key].shape == value.shape, key
        np.testing.assert_allclose(runs["8"][1][key], value, rtol=1e-4, atol=2e-6, err_msg=key)
    shutil.rmtree(padded_ckpt / "ckpt-00000006")
    events = run("pad-8-resumed", *resume_argv(padded_ckpt), "--pad-vocab", "8", "--resume")
    assert losses(events) == runs["8"][0][-2:]


@pytest.fixture(scope="module")
def bfloat16_run(records_dir, tmp_path_factory):
    """Events and TensorBoard directory of 2 mixed_bfloat16 steps, the test split evaluated at step 2 (one run
    for the two tests below)."""
    root = tmp_path_factory.mktemp("bfloat16")
    code, events = train(root, records_dir, "--steps", "2", "--batch-size", "4", "--precision", "mixed_bfloat16",
                         "--tensorboard-dir", str(root / "tb"), "--eval-every", "2", "--eval-steps", "2")
    assert code == 0
    return events, root / "tb"


@pytest.mark.xdist_group("trainer_bfloat16")  # one xdist worker (--dist loadgroup): the run serves both tests
def test_mixed_bfloat16_runs(bfloat16_run):
    events, _ = bfloat16_run
    summary = events[-1]
    assert summary["event"] == "summary" and summary["steps"] == 2 and summary["precision"] == "mixed_bfloat16"
    assert all(np.isfinite(losses(events))) and summary["final_loss_scale"] == 1.0
    (evaluation,) = [event for event in events if event["event"] == "eval"]  # --eval-every 2 of 2 steps
    assert evaluation["step"] == 2 and np.isfinite(evaluation["loss"]) and 0 <= evaluation["mlm_accuracy"] <= 1
    assert evaluation["loss"] == pytest.approx(evaluation["mlm_loss"] + evaluation["nsp_loss"], rel=1e-5)


@pytest.mark.xdist_group("trainer_bfloat16")
def test_tensorboard_scalars_read_back_with_tensorflows_event_reader(bfloat16_run):
    """The event file is written without TensorFlow (the JAX backend has none); TF's own reader parses it."""
    import tensorflow as tf

    events, tensorboard_dir = bfloat16_run
    (name,) = os.listdir(tensorboard_dir)
    assert name.startswith("events.out.tfevents.")
    read = list(tf.compat.v1.train.summary_iterator(str(tensorboard_dir / name)))
    assert read[0].file_version == "brain.Event:2"
    scalars = {(e.step, v.tag): v.simple_value for e in read[1:] for v in e.summary.value}
    for event in events:
        for key in ("loss", "mlm_accuracy", "learning_rate", "mean_sequences_per_second"):
            if event.get(key) is not None:
                assert scalars.pop((event["step"], f"{event['event']}/{key}")) == np.float32(event[key])
    assert "train/nsp_loss" in {tag for _, tag in scalars}


def test_a_packed_step_equals_the_same_sequences_unpacked(golden_dir):
    trainer_checks.check_packed_step_equals_unpacked(golden_dir)
    trainer_checks.check_step_counts_real_sequences(golden_dir)


def test_cross_entropy_and_hits_equal_numpy():
    trainer_checks.check_cross_entropy_and_hits()


def test_trains_on_packed_records_and_logs_real_sequences_and_tokens(golden_dir, tmp_path):
    from test_pack import short_documents

    shards = short_documents(golden_dir / "corpus.txt", tmp_path / "short", 2)
    assert bertprep_main(["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                          str(tmp_path / "records"), "--dupe-factor", "1", "--quiet", "--workers", "1"]) == 0
    assert bertprep_main(["pack", str(next((tmp_path / "records").glob("*/short"))), "--quiet", "--workers", "1",
                          "--format", "tfrecord"]) == 0
    packed = next((tmp_path / "records").glob("*_packed3/short"))
    code, events = train(tmp_path, packed.parent, "--steps", "4", "--batch-size", "4", fmt="tfrecord")
    assert code == 0
    train_events = [e for e in events if e["event"] == "train"]
    assert len(train_events) == 4 and all(np.isfinite(losses(events)))
    assert all(e["sequences_per_second"] and e["tokens_per_second"] for e in train_events[3:])
    # the summary counts the real sequences and tokens of the 16 rows the 4 steps drew, not rows
    from trainer.data import Records, RecordStream

    stream = RecordStream(Records(str(packed.parent), "tfrecord"), "training", 4, seed=3)
    rows = list(itertools.islice(stream.batches(), 4))
    summary = events[-1]
    assert summary["sequences"] == sum(int(r["next_sentence_weights"].sum()) for r in rows) > 16 + 8
    assert summary["tokens"] == sum(int((r["input_mask"] != 0).sum()) for r in rows)


def test_mixed_float16_skips_a_nonfinite_step_and_halves_the_scale(records_dir):
    trainer_checks.check_nonfinite_step_is_skipped(records_dir)


def test_loss_that_stays_nonfinite_stops_with_one_line_error(golden_dir, tmp_path, capsys):
    records = list(formats.read_records(golden_dir / "G1.ofrecord"))[:64]
    for record in records:
        record["masked_lm_weights"] = np.full_like(record["masked_lm_weights"], np.nan)
    formats.write_records(tmp_path / "bad" / "ofrecord" / "training" / "part-0", records, "ofrecord")
    config = bert_config(tmp_path, 0.0)
    assert main(["--format", "ofrecord", "--data", str(tmp_path / "bad"), "--bert-config", config, "--steps", "40",
                 "--batch-size", "2", "--quiet"]) == 1
    # fp32 has no finite check in the step (no host sync): the NaN steps are applied and counted.
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "trainer: error: loss not finite for 25 steps in a row at step 25 (loss scale 1); "
        "lower --lr or use another --precision")


def test_checkpoint_dir_on_a_file_is_a_one_line_error_before_training(records_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, events = train(tmp_path, records_dir, "--steps", "1", "--batch-size", "2", "--checkpoint-dir", str(blocker))
    assert code == 2 and events == []  # refused when the config is built (issue 57): a usage error
    assert capsys.readouterr().err.splitlines() == [
        f"trainer: error: --checkpoint-dir {blocker}: is a file; name a directory"]


REPLICA_SCRIPT = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    replicas = int(sys.argv[1])
    if replicas > 1:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    from trainer.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def run_replicas(tmp_path, replicas, data, name, *extra, fmt="tfrecord"):
    """Train 3 steps on `replicas` logical CPU devices: one replica in this process, more in a process
    of their own (TensorFlow's devices are fixed once it starts)."""
    ckpt = tmp_path / name
    argv = ["--format", fmt, "--data", str(data), "--bert-config", bert_config(tmp_path, 0.0), "--steps", "3",
            "--seed", "3", "--quiet", "--log-every", "1", "--log-json", str(tmp_path / f"{name}.jsonl"),
            "--checkpoint-dir", str(ckpt), *extra]
    if replicas == 1:
        assert main(argv) == 0
    else:
        result = subprocess.run([sys.executable, "-c", REPLICA_SCRIPT, str(replicas), *argv], capture_output=True,
                                text=True, cwd=REPO)
        assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    return events, latest_state(ckpt)[1]


# The same global batch of 8 as 1 replica x 8 (TFRecord and OFRecord), 2 replicas x 4, 1 replica x 4 x 2
# micro-batches: name -> (replicas, format, arguments).
GLOBAL_BATCH_8 = {"one": (1, "tfrecord", ["--batch-size", "8"]), "ofrecord": (1, "ofrecord", ["--batch-size", "8"]),
                  "two": (2, "tfrecord", ["--batch-size", "4"]),
                  "acc": (1, "tfrecord", ["--batch-size", "4", "--grad-accum", "2"])}


@pytest.fixture(scope="module")
def batch_8_runs(records_dir, tmp_path_factory):
    """run(name): run_replicas of GLOBAL_BATCH_8[name], once per module, so the one-replica reference
    serves both comparisons."""
    root = tmp_path_factory.mktemp("global-batch-8")
    done = {}

    def run(name):
        if name not in done:
            replicas, fmt, extra = GLOBAL_BATCH_8[name]
            done[name] = run_replicas(root, replicas, records_dir, name, *extra, fmt=fmt)
        return done[name]

    return run


@pytest.fixture(scope="module")
def one_replica(batch_8_runs):
    """The one-replica reference, trained in the setup of the first test that compares with it."""
    return batch_8_runs("one")


@pytest.mark.xdist_group("trainer_batch_8")  # one xdist worker (--dist loadgroup): the reference runs once
def test_tfrecord_and_ofrecord_give_identical_losses_and_weights(batch_8_runs, one_replica):
    one_events, one = one_replica
    events, state = batch_8_runs("ofrecord")
    assert len(losses(one_events)) == 3 and all(np.isfinite(losses(one_events)))
    assert losses(events) == losses(one_events)
    assert state.keys() == one.keys()
    for key in one:
        np.testing.assert_array_equal(state[key], one[key], err_msg=key)


@pytest.mark.xdist_group("trainer_batch_8")
@pytest.mark.parametrize("name, replicas", [("two", 2), ("acc", 1)])
def test_two_replicas_and_accumulation_match_one_replica(batch_8_runs, one_replica, name, replicas):
    one_events, one = one_replica
    events, state = batch_8_runs(name)
    assert [e["replicas"] for e in (one_events[-1], events[-1])] == [1, replicas]
    np.testing.assert_allclose(losses(events), losses(one_events), rtol=1e-5)
    moved = 0
    for key in one:
        np.testing.assert_allclose(state[key], one[key], rtol=1e-4, atol=2e-6, err_msg=key)
        moved += key.startswith("model/trainable") and not np.array_equal(one[key], 0)
    assert moved > 10


@pytest.mark.heavy
def test_multi_worker_mirrored_two_local_processes(records_dir, tmp_path):
    workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                      "task": {"type": "worker", "index": index}}))
        argv = [sys.executable, "-m", "trainer", "--format", "ofrecord", "--data", str(records_dir),
                "--bert-config", bert_config(tmp_path, 0.1), "--steps", "3", "--batch-size", "4",
                "--log-every", "1", "--quiet", "--json", "--log-json", str(tmp_path / f"worker{index}.jsonl")]
        processes.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=600) for p in processes]
    for process, (_out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    summary = json.loads(outputs[0][0])
    assert summary["replicas"] == 2 and summary["steps"] == 3 and summary["global_batch"] == 8
    events = [json.loads(line) for line in (tmp_path / "worker0.jsonl").read_text().splitlines()]
    assert len(losses(events)) == 3 and all(np.isfinite(losses(events)))
    assert not (tmp_path / "worker1.jsonl").exists()  # only the chief logs


@pytest.mark.heavy
def test_loss_falls_and_masked_lm_accuracy_rises(records_dir, tmp_path):
    # 40 steps at lr 3e-3: the loss (each line the mean of 4 steps) falls from 10.9 (steps 1-4) to 7.4 (steps
    # 37-40), MLM accuracy 0.058. At lr 1e-3 it took 120 steps, from 10.3 (steps 1-20) to 7.1, at 2.5 times the
    # CPU (the steps cost more than compiling them here); at 3e-3 30 steps fall 3.0, 40 steps of batch 8 only 3.1.
    # In a process of its own with XLA's optimized code (OPTIMIZED_TENSORFLOW): 40 steps of batch 16 cost more under
    # the test processes' fast compiles (conftest.py) than a process's start saves (measured: 17 -> 14 s of CPU).
    argv, log = train_argv(tmp_path, records_dir, "--steps", "40", "--batch-size", "16", "--optimizer", "adam", "--lr",
                           "3e-3", "--warmup", "0.1", "--log-every", "4", name="learn")
    result = subprocess.run([sys.executable, "-m", "trainer", *argv], capture_output=True, text=True, cwd=REPO,
                            env=dict(os.environ, **trainer_checks.OPTIMIZED_TENSORFLOW), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    train_events = [e for e in events if e["event"] == "train"]
    first, last = train_events[0], train_events[-1]
    assert last["loss"] < first["loss"] - 3.0
    assert last["mlm_accuracy"] > 1000 / 30522  # over a thousand times chance
