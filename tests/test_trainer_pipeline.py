"""--pipeline-stages S (JAX, GPipe over a stage mesh axis) on 4 CPU devices with TensorFlow unimportable:
S = 2 and 4 train as S = 1 does (NVLAMB; AdamW at S = 2 and S = 2 x K = 2 heavy); each device holds 1/S of the
Transformer layers' stacks; checkpoints keep per-layer names and resume across S; bad configurations
end with one line; placement orders the (stage, batch, model) mesh; two processes with the stages
across them (heavy)."""

import shutil
import types

import numpy as np
import pytest

pytest.importorskip("jax")
# One xdist worker runs the module (--dist loadgroup): the trained runs and the XLA cache serve every test.
pytestmark = pytest.mark.xdist_group("trainer_pipeline")

from test_trainer_data import golden_records  # noqa: E402
from test_trainer_jax import jax_processes_fixture, jax_train  # noqa: E402
from test_trainer_model_parallel import assert_same_training, train_in_two_processes  # noqa: E402
from trainer import pipeline_parallel  # noqa: E402
from trainer_checks import bert_config, latest_state, losses  # noqa: E402

# TINY with 4 layers (one per stage at S = 4), 4 heads and a vocab that splits 4 ways.
CONFIG = {"num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 30524}
DEVICES = 4
GLOBAL_BATCH = 8
MICRO_BATCHES = 2
STEPS = 4


# The module's 4-device runs (and each other device count's) one after another in one JAX process.
jax_processes = jax_processes_fixture()


@pytest.fixture(scope="module")
def records_dir(golden_dir, tmp_path_factory):
    return golden_records(golden_dir, tmp_path_factory.mktemp("records"), parts=2)


def common_args(optimizer, s, k=1):
    replicas = DEVICES // (s * k)
    return ["--steps", str(STEPS), "--optimizer", optimizer, "--lr", "2e-3", "--warmup", "1", "--dropout", "0",
            "--grad-accum", str(MICRO_BATCHES), "--batch-size", str(GLOBAL_BATCH // (replicas * MICRO_BATCHES)),
            "--pipeline-stages", str(s), "--model-parallel", str(k)]


@pytest.fixture(scope="module")
def trained(records_dir, jax_processes, tmp_path_factory):
    """train(optimizer, s, k): events, final state and checkpoint directory of a 4-step run on 4 devices
    at global batch 8 in 2 micro-batches, checkpoints at steps 2 and 4 (each run once per module)."""
    root = tmp_path_factory.mktemp("pipeline")
    done = {}

    def train(optimizer, s, k=1):
        name = f"{optimizer}-s{s}-k{k}"
        if name not in done:
            ckpt = root / f"ckpt-{name}"
            events = jax_train(root, records_dir, name, *common_args(optimizer, s, k), "--checkpoint-dir", str(ckpt),
                               "--checkpoint-every", "2", "--keep-checkpoints", "5", devices=DEVICES, dropout=0.1,
                               processes=jax_processes, **CONFIG)
            done[name] = (events, latest_state(ckpt)[1], ckpt)
        return done[name]

    train.root = root
    train.processes = jax_processes
    return train


@pytest.fixture(scope="module")
def lamb_one_stage(trained):
    """The NVLAMB reference at S = 1, trained in the setup of the first test that compares with it."""
    return trained("lamb", 1)


def assert_pipeline_trains_as_unpipelined(trained, optimizer, s, k=1):
    reference_events, reference_state, _ = trained(optimizer, 1)
    reference_losses = losses(reference_events)
    assert len(reference_losses) == STEPS and len(set(reference_losses)) == STEPS  # the loss moves
    events, state, _ = trained(optimizer, s, k)
    np.testing.assert_allclose(losses(events), reference_losses, rtol=0, atol=1e-5)
    assert_same_training(events, state, reference_events, reference_state)  # same per-layer names too
    summary = events[-1]
    assert summary["mesh"]["shape"] == {"stage": s, "batch": DEVICES // (s * k), "model": k}
    assert summary["global_batch"] == GLOBAL_BATCH and summary["pipeline_stages"] == s
    piped = summary["pipeline"]
    assert piped["micro_batches"] == MICRO_BATCHES
    assert piped["bubble_fraction"] == pytest.approx((s - 1) / (MICRO_BATCHES + s - 1))
    return piped


@pytest.mark.usefixtures("lamb_one_stage")
@pytest.mark.parametrize("s", [2, pytest.param(4, marks=pytest.mark.heavy)])
def test_stages_train_as_one_stage_with_nvlamb(trained, s):
    """Losses within 1e-5 of S = 1 and the same weights; the layers' stacks (parameters, optimizer
    slots, seed states) lie 1/S on each device."""
    piped = assert_pipeline_trains_as_unpipelined(trained, "lamb", s)
    assert piped["layer_bytes_per_device"] * s == piped["layer_bytes"]


@pytest.mark.heavy
@pytest.mark.parametrize("optimizer, s, k", [("adam", 2, 1), ("lamb", 2, 2)])
def test_stages_train_as_one_stage_with_adam_and_with_tensor_parallelism(trained, optimizer, s, k):
    """AdamW at S = 2 (its update of the stacked layers is the same code at any S: S = 4 is NVLAMB's);
    S = 2 x K = 2 (each stage's layers split over 2 devices as --model-parallel
    splits them): the layers' bytes per device fall by S x K, apart from the unsplit LayerNorms."""
    piped = assert_pipeline_trains_as_unpipelined(trained, optimizer, s, k)
    ratio = piped["layer_bytes_per_device"] / piped["layer_bytes"]
    assert 1 / (s * k) <= ratio < 1.1 / (s * k), ratio


@pytest.mark.heavy
@pytest.mark.parametrize("rng", ["threefry", "hash"])  # Keras's masks (a CPU's auto) and a GPU's auto
def test_dropout_and_mixed_precision_draw_as_one_stage(records_dir, jax_processes, tmp_path, rng):
    """Dropout 0.1 and mixed_float16: layer l on micro-batch m draws what the unpipelined step draws,
    so S = 2 gives S = 1's losses (within rounding, 1e-5) and loss scale. One replica each (S devices):
    data-parallel replicas draw from seeds offset by their device index, which a pipeline's replicas
    (fewer, by S) cannot match row for row."""
    runs = [jax_train(tmp_path, records_dir, f"dropout-{rng}-s{s}", "--steps", "3", "--optimizer", "lamb", "--lr",
                      "2e-3", "--warmup", "1", "--grad-accum", "2", "--batch-size", "8", "--pipeline-stages", str(s),
                      "--precision", "mixed_float16", "--dropout-rng", rng, devices=s, dropout=0.1,
                      processes=jax_processes, num_hidden_layers=2)
            for s in (1, 2)]
    np.testing.assert_allclose(losses(runs[1]), losses(runs[0]), rtol=0, atol=1e-5)
    assert runs[1][-1]["final_loss_scale"] == runs[0][-1]["final_loss_scale"]


@pytest.mark.parametrize("saved_s, resumed_s", [(2, 1), pytest.param(4, 2, marks=pytest.mark.heavy)])
def test_checkpoints_resume_across_stages(trained, records_dir, saved_s, resumed_s):
    """A checkpoint written at step 2 with S stages resumes with another S: the remaining steps give
    the losses and weights of the uninterrupted run."""
    events, state, ckpt = trained("lamb", saved_s)
    resumed_dir = trained.root / f"resumed-s{saved_s}-at-s{resumed_s}"
    shutil.copytree(ckpt / "ckpt-00000002", resumed_dir / "ckpt-00000002")
    resumed = jax_train(trained.root, records_dir, resumed_dir.name, *common_args("lamb", resumed_s),
                        "--checkpoint-dir", str(resumed_dir), "--resume", devices=DEVICES, dropout=0.1,
                        processes=trained.processes, **CONFIG)
    assert [e["step"] for e in resumed if e["event"] == "train"] == [3, 4]
    assert_same_training(resumed, latest_state(resumed_dir)[1], [e for e in events if e.get("step", 0) > 2], state)


@pytest.mark.parametrize("s, k, config, expected", [
    (3, 1, CONFIG, "--pipeline-stages 3 does not divide the 4 layers (num_hidden_layers); use an S that divides it"),
    (3, 1, dict(CONFIG, num_hidden_layers=3), "--pipeline-stages 3 x --model-parallel 1 does not divide the 4 devices"),
])
def test_bad_configurations_end_with_one_line(records_dir, jax_processes, tmp_path, s, k, config, expected):
    argv = ["--format", "ofrecord", "--data", str(records_dir), "--bert-config", bert_config(tmp_path, 0.0, **config),
            "--steps", "1", "--quiet", "--pipeline-stages", str(s), "--model-parallel", str(k)]
    result = jax_processes(DEVICES).request(*argv)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == f"trainer: error: {expected}"


@pytest.mark.parametrize("placement, replicas", [
    # 2 hosts x 4 devices, S = 2, K = 2: each replica's [stage][model] device ids.
    ("intra_first", [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]),  # a replica on one host
    ("inter_first", [[[0, 4], [1, 5]], [[2, 6], [3, 7]]]),  # a replica across both hosts
])
def test_placement_orders_the_stage_mesh(placement, replicas):
    devices = [types.SimpleNamespace(process_index=h, id=h * 4 + i) for h in range(2) for i in range(4)]
    grid = pipeline_parallel.mesh_devices(devices, 2, 2, placement)  # (stage, replica, model)
    assert grid.shape == (2, 2, 2)
    assert [[[d.id for d in row] for row in grid[:, r]] for r in range(2)] == replicas


@pytest.mark.heavy
def test_two_processes_with_the_stages_across_them(trained, records_dir, tmp_path):
    """Two processes (hosts) with 2 CPU devices each, S = 2, inter_first: each replica's two stages lie
    on both processes (ppermute crosses them), one data feed; the run equals the single-process S = 1
    run: losses, and the checkpoint gathered from both processes' stacks."""
    events = train_in_two_processes(records_dir, tmp_path, bert_config(tmp_path, 0.1, **CONFIG),
                                    *common_args("lamb", 2), "--placement", "inter_first")
    reference_events, reference_state, _ = trained("lamb", 1)
    np.testing.assert_allclose(losses(events), losses(reference_events), rtol=0, atol=1e-5)
    assert_same_training(events, latest_state(tmp_path / "ckpt0")[1], reference_events, reference_state)
