"""--model-parallel K (JAX, Keras's ModelParallel) on 4 CPU devices with TensorFlow unimportable:
K = 2 and 4 train as K = 1 (data parallel) does, with NVLAMB and AdamW; each device holds 1/K of the
split variables and their optimizer slots; checkpoints move between K; bad configurations end with
one line; placement orders the mesh; two processes with the model axis across them (heavy)."""

import json
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

pytest.importorskip("jax")
# One xdist worker runs the module (--dist loadgroup): each run of `trained` and the XLA cache serve all its tests.
pytestmark = pytest.mark.xdist_group("model_parallel")

from bertprep.errors import UsageError  # noqa: E402
from test_trainer_data import golden_records  # noqa: E402
from test_trainer_jax import CHECKS, REPO, jax_env, jax_processes_fixture, jax_train  # noqa: E402
from trainer import parallel  # noqa: E402
from trainer_checks import bert_config, free_port, latest_state, losses  # noqa: E402

# TINY with one layer (faster to compile), 4 heads and a vocab that splits 4 ways (it covers the
# golden records' 30,522 ids).
SPLITS_4 = {"num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 30524}
DEVICES = 4
GLOBAL_BATCH = 8
STEPS = 5


# The module's 4-device runs and checks one after another in one JAX process.
jax_processes = jax_processes_fixture()


@pytest.fixture(scope="module")
def records_dir(golden_dir, tmp_path_factory):
    return golden_records(golden_dir, tmp_path_factory.mktemp("records"), parts=2)


@pytest.fixture(scope="module")
def trained(records_dir, jax_processes, tmp_path_factory):
    """train(optimizer, k): the events, final state and checkpoint directory of a 5-step run on 4
    devices at global batch 8, checkpoints at steps 2, 4 and 5 (each run once per module). The config
    says dropout 0.1; --dropout 0 turns it off."""
    root = tmp_path_factory.mktemp("model-parallel")
    done = {}

    def train(optimizer, k):
        name = f"{optimizer}-k{k}"
        if name not in done:
            ckpt = root / f"ckpt-{name}"
            events = jax_train(root, records_dir, name, *common_args(optimizer, k), "--checkpoint-dir", str(ckpt),
                               "--checkpoint-every", "2", "--keep-checkpoints", "5", devices=DEVICES, dropout=0.1,
                               processes=jax_processes, **SPLITS_4)
            done[name] = (events, latest_state(ckpt)[1], ckpt)
        return done[name]

    train.root = root
    train.processes = jax_processes
    return train


def common_args(optimizer, k):
    return ["--steps", str(STEPS), "--optimizer", optimizer, "--lr", "2e-3", "--warmup", "1", "--dropout", "0",
            "--batch-size", str(GLOBAL_BATCH * k // DEVICES), "--model-parallel", str(k)]


def assert_same_training(events, state, reference_events, reference_state):
    """Losses within 1e-4 relative; every state array within 1e-4 in norm, plus 1e-7 per element for
    values that are rounding alone (the key bias has a zero gradient). Not elementwise: Adam's
    m/sqrt(v) turns the rounding of a near-zero gradient into a visible step of single elements."""
    np.testing.assert_allclose(losses(events), losses(reference_events), rtol=1e-4)
    assert state.keys() == reference_state.keys()
    for key, reference in reference_state.items():
        reference = np.asarray(reference, np.float64)
        difference = np.linalg.norm(np.asarray(state[key], np.float64) - reference)
        assert difference <= 1e-4 * np.linalg.norm(reference) + 1e-7 * np.sqrt(reference.size), key


@pytest.fixture(scope="module")
def lamb_data_parallel(trained):
    """The NVLAMB reference at K = 1, trained in the setup of the first test that compares with it."""
    return trained("lamb", 1)


@pytest.mark.usefixtures("lamb_data_parallel")
@pytest.mark.parametrize("optimizer, k", [("lamb", 2), ("lamb", 4), pytest.param("adam", 4, marks=pytest.mark.heavy)])
def test_model_parallel_trains_as_data_parallel(trained, optimizer, k):
    """Same losses (1e-4 relative) and weights as K = 1; the mesh is (4/K, K); the bytes each device
    holds fall by about K (the split variables are nearly all of this model)."""
    reference_events, reference_state, _ = trained(optimizer, 1)
    reference_losses = losses(reference_events)
    assert len(reference_losses) == STEPS and len(set(reference_losses)) == STEPS  # the loss moves
    reference_summary = reference_events[-1]
    events, state, _ = trained(optimizer, k)
    assert_same_training(events, state, reference_events, reference_state)
    summary = events[-1]
    assert summary["mesh"]["shape"] == {"batch": DEVICES // k, "model": k}
    assert summary["replicas"] == DEVICES // k and summary["global_batch"] == GLOBAL_BATCH
    assert summary["mean_sequences_per_second"] > 0
    ratio = summary["param_bytes_per_device"] / reference_summary["param_bytes_per_device"]
    assert 1 / k < ratio < 1.05 / k, (k, ratio)


@pytest.mark.parametrize("saved_k, resumed_k", [(2, 1), (1, 4)])
def test_checkpoints_resume_across_k(trained, records_dir, saved_k, resumed_k):
    """Saved at K = 2, resumed at K = 1; saved at K = 1, resumed at K = 4: the remaining steps give the
    losses and weights of the uninterrupted run."""
    events, state, ckpt = trained("lamb", saved_k)
    resumed_dir = trained.root / f"resumed-k{saved_k}-at-k{resumed_k}"
    shutil.copytree(ckpt / "ckpt-00000002", resumed_dir / "ckpt-00000002")
    resumed = jax_train(trained.root, records_dir, resumed_dir.name, *common_args("lamb", resumed_k),
                        "--checkpoint-dir", str(resumed_dir), "--resume", devices=DEVICES, dropout=0.1,
                        processes=trained.processes, **SPLITS_4)
    assert [e["step"] for e in resumed if e["event"] == "train"] == [3, 4, 5]
    assert_same_training(resumed, latest_state(resumed_dir)[1], [e for e in events if e.get("step", 0) > 2], state)


def test_each_device_holds_its_share_of_the_split_variables(records_dir, jax_processes, tmp_path):
    """Per variable: 1/K on each device for what BERT_LAYOUT splits (optimizer slots too), whole for
    the rest; every rule matches the pretraining model; measured bytes = the layout's estimate."""
    result = jax_processes(DEVICES).request("check", "model_parallel_layout", str(records_dir),
                                            bert_config(tmp_path, 0.0, **SPLITS_4))
    assert result.returncode == 0, result.stderr[-3000:]
    measured = {int(k): v for k, v in json.loads(result.stdout.strip().splitlines()[-1]).items()}
    assert measured[1] > measured[2] > measured[4]


@pytest.mark.parametrize("backend, k, config, expected", [
    ("tensorflow", 2, SPLITS_4,
     "--model-parallel and --placement need KERAS_BACKEND=jax (Keras's ModelParallel); this run's backend is "
     "tensorflow"),
    ("jax", 3, {"hidden_size": 48, "num_attention_heads": 6, "intermediate_size": 192},
     "--model-parallel 3 does not divide the 4 devices"),
    ("jax", 4, {"vocab_size": 30524},
     "--model-parallel 4 does not divide the attention heads (2) of bert/layer_0/attention/query/kernel "
     "(64, 2, 32); use a K that divides it"),
    ("jax", 4, {"num_attention_heads": 4},
     "--model-parallel 4 does not divide the vocab size (30522) of bert/word_embeddings/embeddings (30522, 64); "
     "use a K that divides it or a --bert-config whose vocab_size is a multiple of K (the extra entries are "
     "never used as inputs)"),
])
def test_bad_configurations_end_with_one_line(records_dir, jax_processes, tmp_path, backend, k, config, expected):
    argv = ["--format", "ofrecord", "--data", str(records_dir), "--bert-config", bert_config(tmp_path, 0.0, **config),
            "--steps", "1", "--quiet", "--model-parallel", str(k)]
    if backend == "jax":
        result = jax_processes(DEVICES).request(*argv)
    else:
        result = subprocess.run([sys.executable, "-m", "trainer", *argv], capture_output=True, text=True, cwd=REPO,
                                env=dict(jax_env(DEVICES), KERAS_BACKEND=backend))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == f"trainer: error: {expected}"


def _devices(hosts, per_host):
    return [types.SimpleNamespace(process_index=h, id=h * per_host + i) for h in range(hosts) for i in range(per_host)]


@pytest.mark.parametrize("placement, k, rows, feeds", [
    # 2 hosts x 4 devices; rows of the (8/k, k) mesh by device id; (feed index, feeds, rows fed) per host.
    ("intra_first", 2, [[0, 1], [2, 3], [4, 5], [6, 7]], [(0, 2, 2), (1, 2, 2)]),
    ("inter_first", 2, [[0, 4], [1, 5], [2, 6], [3, 7]], [(0, 1, 4), (0, 1, 4)]),
    ("intra_first", 8, [[0, 1, 2, 3, 4, 5, 6, 7]], [(0, 1, 1), (0, 1, 1)]),
    ("inter_first", 4, [[0, 4, 1, 5], [2, 6, 3, 7]], [(0, 1, 2), (0, 1, 2)]),
    ("inter_first", 1, [[0], [4], [1], [5], [2], [6], [3], [7]], [(0, 2, 4), (1, 2, 4)]),
])
def test_placement_orders_the_mesh_and_splits_the_data(placement, k, rows, feeds):
    ordered = parallel.device_order(_devices(2, 4), placement)
    grid = [ordered[i:i + k] for i in range(0, len(ordered), k)]
    assert [[d.id for d in row] for row in grid] == rows
    processes = [[d.process_index for d in row] for row in grid]
    assert [parallel.data_feed(processes, host) for host in (0, 1)] == feeds


def test_model_replicas_that_straddle_hosts_unevenly_are_refused():
    ordered = parallel.device_order(_devices(3, 2), "intra_first")  # K = 3: a replica on 1 and 2 hosts
    processes = [[d.process_index for d in ordered[i:i + 3]] for i in (0, 3)]
    with pytest.raises(UsageError, match="straddle hosts unevenly"):
        parallel.data_feed(processes, 0)


def test_dropout_flag_replaces_both_rates(records_dir, tmp_path):
    from trainer.config import TrainConfig
    from trainer.data import Records
    from trainer.pretraining import model_config

    args = TrainConfig(format="ofrecord", bert_config=bert_config(tmp_path, 0.1), dropout=0.0)
    config = model_config(args, Records(str(records_dir), "ofrecord"))
    assert config.hidden_dropout_prob == 0.0 and config.attention_probs_dropout_prob == 0.0


@pytest.mark.heavy
def test_two_processes_with_the_model_axis_across_them(trained, records_dir, tmp_path):
    """Two processes (hosts) with 2 CPU devices each, K = 2, inter_first: each model replica has one
    device on each process, both processes feed the same rows (one data feed), so the run equals the
    single-process K = 1 run: losses, and the checkpoint gathered from both processes' shards."""
    events = train_in_two_processes(records_dir, tmp_path, bert_config(tmp_path, 0.1, **SPLITS_4),
                                    *common_args("lamb", 2), "--placement", "inter_first")
    reference_events, reference_state, _ = trained("lamb", 1)
    assert_same_training(events, latest_state(tmp_path / "ckpt0")[1], reference_events, reference_state)
    assert not (tmp_path / "process1.jsonl").exists() and not (tmp_path / "ckpt1").exists()


def train_in_two_processes(records_dir, tmp_path, config_path, *args):
    """Run the trainer in two JAX processes of 2 CPU devices each (a coordinator on 127.0.0.1), logging
    to process{i}.jsonl and checkpointing to ckpt{i} under tmp_path; return process 0's events, after
    checking that both processes ended well and that its mesh spans both, replica by replica."""
    coordinator = f"127.0.0.1:{free_port()}"
    processes = []
    for index in range(2):
        env = jax_env(2, KERAS_DISTRIBUTION_JOB_ADDRESSES=coordinator, KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                      KERAS_DISTRIBUTION_PROCESS_ID=str(index))
        argv = [sys.executable, CHECKS, "--no-tensorflow", "trainer", "--format", "ofrecord",
                "--data", str(records_dir), "--bert-config", config_path, "--seed", "3", "--quiet", "--log-every", "1",
                *args, "--log-json", str(tmp_path / f"process{index}.jsonl"),
                "--checkpoint-dir", str(tmp_path / f"ckpt{index}")]
        processes.append(subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
    outputs = [p.communicate(timeout=900) for p in processes]
    for process, (_out, err) in zip(processes, outputs):
        assert process.returncode == 0, err[-3000:]
    events = [json.loads(line) for line in (tmp_path / "process0.jsonl").read_text().splitlines()]
    mesh = events[-1]["mesh"]
    assert mesh["placement"] == "inter_first" and mesh["processes"] == [[0, 1], [0, 1]]
    return events
