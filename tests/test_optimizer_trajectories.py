"""Each optimizer's training run step for step against an independent PyTorch trainer
(shared/fixtures/trajectories: hf_tiny, one fixed batch of 14 records, dropout 0, lr 1e-3, warmup 5,
30 steps): adam against AdamW, lamb against NVLAMB, google-adam against google-research/bert's
optimization.create_optimizer, under TensorFlow and JAX (a process without TensorFlow), each backend's
runs in a process of their own; google-adam also on two TensorFlow replicas and on a JAX pipeline of 2
stages with accumulation, against google-research/bert's own code (tests/data/google_create_optimizer: losses and
final weights of google_tiny), under fp16 loss scaling, and resumed exactly. Bad optimizer flags end
with one line."""

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")
# The JAX runs on one xdist worker (--dist loadgroup), sharing one XLA cache, the TensorFlow runs on
# another: each worker makes the batch (a second) and runs only its own backend's.
ON_TENSORFLOW_WORKER = pytest.mark.xdist_group("optimizer_trajectories_tensorflow")
ON_JAX_WORKER = pytest.mark.xdist_group("optimizer_trajectories_jax")

from bertprep import formats  # noqa: E402
from bertprep.cli import main as bertprep_main  # noqa: E402
from test_trainer import REPLICA_SCRIPT  # noqa: E402
from test_trainer_data import golden_records  # noqa: E402
from trainer.cli import main  # noqa: E402
from trainer_checks import (  # noqa: E402
    OPTIMIZED_TENSORFLOW,
    assert_resume_is_exact,
    check_nonfinite_step_is_skipped,
    losses,
    trained_in_groups,
    xla_flags,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = os.path.join(REPO, "tests", "trainer_checks.py")
STEPS = 30
REFERENCE = {"adam": "adam.jsonl", "lamb": "lamb.jsonl", "google-adam": "google_create_optimizer.jsonl"}
# The README's measured agreement of adam and lamb is 2.2e-5; the issue asks 1e-4 of google-adam. The
# controls are far above: a schedule one step off moves step 2 by 0.145, bias correction step 10 by 4.7.
TOLERANCE = {"adam": 5e-5, "lamb": 5e-5, "google-adam": 1e-4}
# google-research/bert's own run (its README says how it was made): google_tiny, lr 1e-3, warmup 2, 20 steps.
GOOGLES_OWN = os.path.join(REPO, "tests", "data", "google_create_optimizer")
GOOGLES_OWN_ARGV = ["--lr", "1e-3", "--warmup", "2", "--steps", "20", "--batch-size", "14"]
WEIGHT_TOLERANCE = 1e-5  # measured: 2.2e-6


@pytest.fixture(scope="module")
def fixed_batch(golden_dir, tmp_path_factory):
    """The trajectories README's batch: `bertprep create` of the golden corpus's first 50 lines, 14 records."""
    root = tmp_path_factory.mktemp("fixed-batch")
    lines = (golden_dir / "corpus.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:50]
    (root / "s50.txt").write_text("".join(lines), encoding="utf-8")
    assert bertprep_main(["create", "--input", str(root / "s50.txt"), "--vocab", str(golden_dir / "vocab.txt"),
                          "--out", str(root / "rec"), "--seq", "128", "--pred", "20", "--dupe-factor", "1",
                          "--format", "tfrecord", "--workers", "1", "--quiet"]) == 0
    (manifest,) = (root / "rec").glob("*/*/manifest.json")
    (records,) = manifest.parent.glob("tfrecord/training/*.tfrecord")
    assert sum(1 for _ in formats.read_records(records)) == 14
    return manifest.parent


@pytest.fixture(scope="module")
def trajectories(shared_dir):
    root = shared_dir / "fixtures" / "trajectories"
    return {name: [json.loads(line) for line in (root / file).read_text().splitlines()][:STEPS]
            for name, file in REFERENCE.items()}


@pytest.fixture(scope="module")
def hf_tiny(shared_dir):
    return str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny")


def trainer_argv(data, checkpoint, optimizer, log, *extra):
    """The README's run, with `extra` arguments after (a later flag wins)."""
    return ["--format", "tfrecord", "--data", str(data), "--init-checkpoint", checkpoint, "--optimizer", optimizer,
            "--lr", "1e-3", "--warmup", "5", "--steps", str(STEPS), "--dropout", "0", "--log-every", "1",
            "--log-json", str(log), "--quiet", *extra]


def succeeds(command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


# TensorFlow's runs of 20 or 30 steps in processes of their own with XLA's optimized code, not the test
# process's fast compiles (conftest.py, FAST_COMPILE_XLA_FLAGS), under which running the steps costs more than
# compiling saves: measured, the four one-replica runs in one process take 57 s of CPU optimized and 100 s with
# fast compiles (in this process, which has them, they took about 95 s); the two-replica run 30 s and 40 s.


def in_one_tensorflow_process(argvs):
    """Trains its argvs one after another in one TensorFlow process (trainer_checks.train_one_after_another)."""
    succeeds([sys.executable, CHECKS, "trainers", json.dumps(argvs)], dict(os.environ, **OPTIMIZED_TENSORFLOW))


def in_two_replicas(argvs):
    (argv,) = argvs
    succeeds([sys.executable, "-c", REPLICA_SCRIPT, "2", *argv], dict(os.environ, **OPTIMIZED_TENSORFLOW))


def in_one_jax_process(devices):
    """Trains its argvs one after another in one JAX process (trainer_checks.train_one_after_another)
    on `devices` CPU devices; 20 or 30 steps: XLA's optimized code, not fast compiles (xla_flags)."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(devices, fast_compile=False))
    return lambda argvs: succeeds([sys.executable, CHECKS, "--no-tensorflow", "trainers", json.dumps(argvs)], env)


@pytest.fixture(scope="module")
def run(fixed_batch, hf_tiny, google_tiny, tmp_path_factory):
    """run(layout, optimizer, init=hf_tiny, *extra): the train events of the README's run from `init`, with
    `extra` arguments, and its checkpoint directory; layouts: 'tensorflow', 'jax', 'tensorflow-2' (2 replicas
    x 7), 'jax-pipeline' (2 stages, 2 micro-batches of 7). Each once; the module's four 'tensorflow' runs in
    one process and its four 'jax' runs in another, each group all when its first is asked for."""
    root = tmp_path_factory.mktemp("trajectories")
    layouts = {"tensorflow": (in_one_tensorflow_process, ["--batch-size", "14"]),
               "jax": (in_one_jax_process(1), ["--batch-size", "14"]),
               "tensorflow-2": (in_two_replicas, ["--batch-size", "7"]),
               "jax-pipeline": (in_one_jax_process(2),
                                ["--batch-size", "7", "--grad-accum", "2", "--pipeline-stages", "2"])}
    one_process = {backend: [(backend, optimizer, hf_tiny) for optimizer in REFERENCE] + [
        (backend, "google-adam", google_tiny[backend], *GOOGLES_OWN_ARGV)] for backend in ("tensorflow", "jax")}
    count = itertools.count()

    def train(keys):
        """Train `keys`, all of one layout, in one go."""
        train_them, extra = layouts[keys[0][0]]
        runs = {}
        for key in keys:
            layout, optimizer, init, *more = key
            name = f"{next(count)}-{layout}-{optimizer}"
            log, ckpt = root / f"{name}.jsonl", root / name
            runs[key] = (trainer_argv(fixed_batch, init, optimizer, log, *extra, *more, "--checkpoint-dir", str(ckpt)),
                         log, ckpt)
        train_them([argv for argv, _, _ in runs.values()])
        return {key: ([e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "train"], ckpt)
                for key, (_, log, ckpt) in runs.items()}

    runs = trained_in_groups(list(one_process.values()), train)
    return lambda layout, optimizer, init=hf_tiny, *more: runs(layout, optimizer, init, *more)


def assert_follows(events, reference, tolerance):
    """The loss at every step (before its update) within `tolerance` of the reference's, at its learning rate."""
    assert [e["step"] for e in events] == [r["step"] for r in reference] == list(range(1, STEPS + 1))
    np.testing.assert_allclose([e["learning_rate"] for e in events], [r["learning_rate"] for r in reference],
                               rtol=1e-6, atol=1e-10)
    gaps = np.abs(np.array(losses(events)) - [r["loss"] for r in reference])
    assert gaps.max() <= tolerance, f"step {gaps.argmax() + 1}: {gaps.max():.2e} off (tolerance {tolerance})"
    assert reference[-1]["loss"] < reference[0]["loss"] - 0.5  # the run learns: the comparison is not of a flat line


@ON_TENSORFLOW_WORKER
@pytest.mark.parametrize("optimizer", [pytest.param("adam", marks=pytest.mark.heavy),
                                       pytest.param("lamb", marks=pytest.mark.heavy), "google-adam"])
def test_tensorflow_follows_the_reference_trainer(run, trajectories, optimizer):
    assert_follows(run("tensorflow", optimizer)[0], trajectories[optimizer], TOLERANCE[optimizer])


@ON_JAX_WORKER
@pytest.mark.heavy
@pytest.mark.parametrize("optimizer", list(REFERENCE))
def test_jax_follows_the_reference_trainer(run, trajectories, optimizer):
    assert_follows(run("jax", optimizer)[0], trajectories[optimizer], TOLERANCE[optimizer])


@pytest.mark.heavy
@pytest.mark.parametrize("layout", [pytest.param("tensorflow-2", marks=ON_TENSORFLOW_WORKER),
                                    pytest.param("jax-pipeline", marks=ON_JAX_WORKER)])
def test_google_adam_on_several_devices_follows_the_reference(run, trajectories, layout):
    """Two TensorFlow replicas (each clips the all-reduced gradients itself) and a JAX pipeline (the
    optimizer on the stacks' per-layer slices, accumulated micro-batches): the same run."""
    assert_follows(run(layout, "google-adam")[0], trajectories["google-adam"], TOLERANCE["google-adam"])


@pytest.fixture(scope="module")
def google_tiny(shared_dir, tmp_path_factory):
    """{backend: google_tiny as that backend's trainer reads it}: JAX has no TensorFlow to read Google's
    checkpoint with, so it starts from ours, converted here."""
    google = str(shared_dir / "fixtures" / "checkpoints" / "google_tiny" / "bert_model.ckpt")
    ours = str(tmp_path_factory.mktemp("google_tiny") / "ours")
    assert main(["checkpoint", "convert", google, ours, "--to", "bertprep", "--quiet"]) == 0
    return {"tensorflow": google, "jax": ours}


@pytest.mark.parametrize("layout", [pytest.param("tensorflow", marks=ON_TENSORFLOW_WORKER),
                                    pytest.param("jax", marks=[ON_JAX_WORKER, pytest.mark.heavy])])
def test_google_adam_follows_googles_own_code(run, google_tiny, layout, tmp_path):
    """google_tiny trained by google-research/bert's create_optimizer (tests/data/google_create_optimizer):
    the same loss at every step within 1e-4, the same final weights within 1e-5."""
    import tensorflow as tf

    events, ckpt = run(layout, "google-adam", google_tiny[layout], *GOOGLES_OWN_ARGV)
    reference = [json.loads(line) for line in open(os.path.join(GOOGLES_OWN, "losses.jsonl"), encoding="utf-8")]
    np.testing.assert_allclose([e["learning_rate"] for e in events], [r["learning_rate"] for r in reference],
                               rtol=1e-6, atol=1e-10)
    np.testing.assert_allclose(losses(events), [r["loss"] for r in reference], rtol=0, atol=1e-4)
    (last,) = [name for name in os.listdir(ckpt) if name.startswith("ckpt-")]
    assert main(["checkpoint", "convert", str(ckpt / last), str(tmp_path / "google"), "--to", "google", "--quiet"]) == 0
    ours = tf.train.load_checkpoint(str(tmp_path / "google" / "bert_model.ckpt"))
    with np.load(os.path.join(GOOGLES_OWN, "weights.npz")) as theirs:
        assert len(theirs.files) == 24
        for name in theirs.files:
            np.testing.assert_allclose(ours.get_tensor(name), theirs[name], rtol=0, atol=WEIGHT_TOLERANCE, err_msg=name)


@pytest.mark.heavy
def test_google_adam_skips_a_nonfinite_fp16_step(golden_dir, tmp_path):
    """Clipping keeps a non-finite gradient non-finite: the loss-scaled step is skipped whole."""
    check_nonfinite_step_is_skipped(golden_records(golden_dir, tmp_path), "google-adam")


@pytest.mark.heavy
def test_google_adam_resumes_exactly(fixed_batch, hf_tiny, tmp_path, capsys):
    def train(name, *argv):
        log = tmp_path / f"{name}.jsonl"
        assert main(["--format", "tfrecord", "--data", str(fixed_batch), "--init-checkpoint", hf_tiny, "--dropout",
                     "0.1", "--seed", "3", "--log-every", "1", "--log-json", str(log), "--quiet", *argv]) == 0
        return [json.loads(line) for line in log.read_text().splitlines()]

    ckpt = tmp_path / "ckpt"
    assert_resume_is_exact(train, ckpt, "google-adam")
    # The clipping norm is part of the trajectory a resumed run must keep.
    capsys.readouterr()
    assert main(["--format", "tfrecord", "--data", str(fixed_batch), "--init-checkpoint", hf_tiny, "--dropout", "0.1",
                 "--seed", "3", "--steps", "6", "--batch-size", "4", "--optimizer", "google-adam", "--warmup", "2",
                 "--clip-norm", "0.5", "--checkpoint-dir", str(ckpt), "--resume", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "checkpoint was written with clip_norm=None, this run has 0.5")


@pytest.mark.parametrize("command", [[], ["finetune", "--task", "mrpc", "--data", "nowhere"]])
def test_bad_optimizer_flags_end_with_one_line(command, tmp_path, capsys):
    usage = "trainer finetune: error: argument" if command else "trainer: error: argument"
    def error(*argv):
        try:  # argparse's errors exit
            code = main([*command, "--format", "tfrecord", "--quiet", "--output-dir" if command else "--steps",
                         str(tmp_path / "out") if command else "3", *argv])
        except SystemExit as exit:
            code = exit.code
        return code, capsys.readouterr().err.strip().splitlines()

    for value in ("0", "-1", "nan", "inf"):
        assert error("--optimizer", "google-adam", "--clip-norm", value) == (
            2, [f"{usage} --clip-norm: expected a positive number, got {value}"])
    for value in ("-0.1", "1.5", "nan", "inf"):  # nan and inf: a ValueError and an OverflowError traceback
        assert error("--warmup", value) == (
            2, [f"{usage} --warmup: expected a fraction below 1 or a whole number of steps, got {value}"])
    code, lines = error("--optimizer", "google_adam")
    # Python's versions differ in whether the choices are quoted.
    assert code == 2 and len(lines) == 1 and lines[0].startswith(
        f"{usage} --optimizer: invalid choice: 'google_adam' (choose from ") and "google-adam" in lines[0]
    assert error("--optimizer", "adam", "--clip-norm", "2") == (
        2, ["trainer: error: --clip-norm: --optimizer adam does not clip gradients (only lamb and google-adam do)"])
    assert not (tmp_path / "out").exists()
