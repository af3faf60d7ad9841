"""Helpers and checks for the trainer tests under either Keras backend. Nothing here imports
TensorFlow: the checks run in the test process (TensorFlow) and in subprocesses with
KERAS_BACKEND=jax and TensorFlow made unimportable (a GPU host for JAX has none)."""

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import shutil
import socket
import sys

import numpy as np

# The tests' model: one layer, as a layer's code is the same at any depth and each layer costs every run's
# compile (measured: a 3-step run in the test process 9.4 -> 7.5 s of CPU with one layer instead of two); the tests
# about depth (stages of layers, per-layer names, Google's goldens of a 2-layer fine-tune) set num_hidden_layers.
TINY = {"vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 256, "max_position_embeddings": 128}


# TensorFlow: the JAX path must not need it (a GPU host for JAX has none). matplotlib and pandas: Keras
# imports them where installed (for plots and data frames the trainer does not use), at each process's start.
BLOCKED = {"tensorflow": "the JAX path must not need it", "matplotlib": "unused by the trainer",
           "pandas": "unused by the trainer"}


class _Blocked:
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in self.names:
            reason = BLOCKED.get(top, "a host without it")
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: {reason})", name=name)


# The tests' training runs take a few steps: compiling dominates, and LLVM's optimization passes cost
# more than they save (a cold 4-device JAX pipeline process of 4 steps: 41 -> 31 s of CPU; TensorFlow's
# tests/test_trainer.py on 2 workers: 326 -> 275 s of CPU, its 120-step learning run 20 -> 26 s). Only code
# generation is cheaper: XLA's HLO passes (fusion, all-reduce combining) run as before; the comparisons with
# references (trajectories, Google's goldens, checkpoints' outputs) pass within their tolerances either
# way. conftest.py sets them for the test processes (TensorFlow) and everything they start. Not for JAX runs
# of many steps, where running the step costs more than compiling it: a 30-step trajectory run takes 24 s
# of CPU at -O0 and 16 s optimized, its 2-stage pipeline 51 s and 31 s (a 4-step pipeline run: 23 s at -O0,
# 29 s optimized). XLA's CPU fusions are emitted by its older LLVM IR emitters instead of the MLIR fusion
# emitters, which cost more to compile than the few steps gain (measured: a 3-step run of TINY in the test process
# 5.9 -> 4.3 s of CPU after the first, its steps no slower; a one-device JAX process of 3 steps 6.2 -> 4.3 s).
# And XLA compiles each program in one piece, not split for parallel code generation: with both cores busy
# (two test workers) the split's threads only add work (AMD EPYC VM, 2026-11-27: a fresh JAX process of 3 TINY
# steps 11.5 -> 10.4 s of CPU, three pairs, the same losses; TensorFlow's 21.2 -> 20.0 s of user CPU, two pairs;
# test_trainer_jax.py with test_trainer.py on 2 workers 653 -> 644 s of user CPU, one pair, within the spread).
FAST_COMPILE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                          "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")


def xla_flags(devices=None, fast_compile=True):
    """XLA_FLAGS for a test's JAX process (with `devices` CPU devices, when given): the caller's other
    flags and, unless `fast_compile` is false (a long run), fast compiles."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if "xla_force_host_platform_device_count" not in f and f not in FAST_COMPILE_XLA_FLAGS]
    count = [] if devices is None else [f"--xla_force_host_platform_device_count={devices}"]
    return " ".join([*flags, *(FAST_COMPILE_XLA_FLAGS if fast_compile else ()), *count])


# A test's TensorFlow process that trains for long (tens of steps, or the product's tiny model): XLA's optimized
# code, not the test processes' fast compiles, under which running the steps costs more than compiling saves.
OPTIMIZED_TENSORFLOW = {"KERAS_BACKEND": "tensorflow", "XLA_FLAGS": xla_flags(fast_compile=False)}


def block_imports(names=tuple(BLOCKED)):
    """Make TensorFlow (and the unused plotting and data-frame libraries), or those of `names`, unimportable."""
    sys.meta_path.insert(0, _Blocked(names))


def without_tensorflow(env):
    """`env` for a process whose own processes, workers included, cannot import TensorFlow either
    (tests/without_tensorflow/sitecustomize.py on PYTHONPATH)."""
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "without_tensorflow")
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")])))


def bert_config(directory, dropout, **changes):
    """TINY (with `changes`) as a bert_config.json in `directory`."""
    values = dict(TINY, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, **changes)
    path = directory / ("".join([f"bert_config_dropout_{dropout}", *(f"_{k}_{v}" for k, v in sorted(changes.items()))])
                        + ".json")
    path.write_text(json.dumps(values))
    return str(path)


def losses(events):
    return [e["loss"] for e in events if e["event"] == "train"]


def latest_state(checkpoint_dir):
    last = sorted(p for p in os.listdir(checkpoint_dir) if p.startswith("ckpt-"))[-1]
    with np.load(os.path.join(checkpoint_dir, last, "state.npz")) as npz:
        return last, {k: npz[k] for k in npz.files}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resume_argv(ckpt, optimizer="adam"):
    """The trainer arguments of assert_resume_is_exact's runs: 6 steps, checkpoints at 2, 4 and 6 in `ckpt`."""
    return ["--steps", "6", "--batch-size", "4", "--optimizer", optimizer, "--warmup", "2",
            "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2", "--keep-checkpoints", "5"]


def assert_timed_steps_alike(events, spread=25):
    """Each timed step's logged sequences/s within `spread`x of the others' (resume_argv's run: steps 4-6,
    checkpoints after 4 and 6). A checkpoint step's line read hundreds of times its neighbours', the step after
    it about half: on a CPU a step's time was counted one step late (trainer/loop.py)."""
    rates = [e["sequences_per_second"] for e in events if e["event"] == "train" and e["sequences_per_second"]]
    assert len(rates) >= 3 and max(rates) < spread * min(rates), rates


def assert_resume_is_exact(run, ckpt, optimizer="adam"):
    """Stop after the checkpoint at step 2 (later checkpoints removed), resume: the weights,
    optimizer and loss-scale state at step 6 equal the uninterrupted run's (dropout on).
    `run(name, *argv)` trains with dropout 0.1 and returns the JSON log events."""
    common = resume_argv(ckpt, optimizer)
    events = run("whole", *common)
    assert_timed_steps_alike(events)
    name, uninterrupted = latest_state(ckpt)
    assert name == "ckpt-00000006"
    for later in ("ckpt-00000004", "ckpt-00000006"):
        shutil.rmtree(ckpt / later)
    resumed_events = run("resumed", *common, "--resume")
    name, resumed = latest_state(ckpt)
    assert name == "ckpt-00000006"
    assert [e["step"] for e in resumed_events if e["event"] == "train"] == [3, 4, 5, 6]
    assert losses(resumed_events) == losses(events)[2:]
    assert resumed.keys() == uninterrupted.keys()
    for key in uninterrupted:
        np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)


@contextlib.contextmanager
def programs_compiled():
    """Under JAX, the programs lowered for compiling inside the block (whether or not a persistent cache
    then has them), one event each; no events under TensorFlow."""
    events = []
    if os.environ.get("KERAS_BACKEND") == "jax":
        import jax

        def listen(event, _seconds, **_):
            if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" and listening:
                events.append(event)

        listening = True
        jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield events
    finally:
        listening = False


def check_nonfinite_step_is_skipped(records_dir, optimizer="lamb"):
    """mixed_float16: a batch with infinite weights leaves the weights, the optimizer and its step
    counter unchanged and halves the loss scale; the next finite batch updates the weights."""
    import keras

    from trainer.config import BertConfig, TrainConfig
    from trainer.data import Records, RecordStream
    from trainer.pretraining import Devices, build_steps
    from trainer.steps import INITIAL_SCALE

    keras.backend.clear_session()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        records = Records(str(records_dir), "ofrecord")
        args = TrainConfig(format="ofrecord", optimizer=optimizer, lr=1e-3, steps=10, precision="mixed_float16",
                           grad_accum=1, pad_vocab=1)
        with programs_compiled() as compiled:
            _, _, steps = build_steps(args, Devices(keras.backend.backend()), BertConfig(**TINY), records, 0)
        if keras.backend.backend() == "jax":
            # The model's initial values and the optimizer's, one program each, and two conversions of
            # values the seed generators are created with (eagerly, Keras compiled some 140).
            assert len(compiled) <= 4, compiled
        batch = next(RecordStream(records, "training", 4, seed=1).batches())
        element = {k: v[None] for k, v in batch.items()}
        poisoned = dict(element, masked_lm_weights=np.full_like(element["masked_lm_weights"], np.inf))
        before = steps.get_state()
        kept = [k for k in before if k.startswith(("model/trainable/", "optimizer/"))]

        result = steps.fetch(steps.train(steps.put(poisoned)))
        assert not result["finite"] and result["loss_scale"] == INITIAL_SCALE
        after = steps.get_state()
        assert steps.iterations() == 0 and after["loss_scale/scale"] == INITIAL_SCALE / 2
        for key in kept:
            np.testing.assert_array_equal(after[key], before[key], err_msg=key)

        result = steps.fetch(steps.train(steps.put(element)))
        assert result["finite"] and result["loss_scale"] == INITIAL_SCALE / 2 and steps.iterations() == 1
        after = steps.get_state()
        assert sum(not np.array_equal(after[k], before[k]) for k in kept if k.startswith("model/")) > 10
        if keras.backend.backend() == "jax":  # the second step reuses the first's compilation
            assert steps._train._cache_size() == 1
    finally:
        keras.config.set_dtype_policy("float32")


def compiled_step_allreduces(records_dir, grad_accum, allreduce_dtype="fp32"):
    """How many all-reduce instructions the compiled JAX train step has (HLO text, after XLA's passes,
    which combine small ones) on the devices of this process, for a global batch of 4 per micro-batch."""
    import keras

    from trainer.config import BertConfig, TrainConfig
    from trainer.data import Records, RecordStream
    from trainer.pretraining import Devices, build_steps

    keras.backend.clear_session()
    records = Records(str(records_dir), "ofrecord")
    grad_accum = int(grad_accum)
    args = TrainConfig(format="ofrecord", optimizer="lamb", lr=1e-3, steps=10, precision="fp32", grad_accum=grad_accum,
                       allreduce_dtype=allreduce_dtype, pad_vocab=1)
    devices = Devices(keras.backend.backend())
    # TINY's one layer: the count does not depend on the depth.
    _, _, steps = build_steps(args, devices, BertConfig(**TINY), records, 0)
    batch = next(RecordStream(records, "training", 4 * grad_accum, seed=1).batches())
    element = steps.put({k: v.reshape((grad_accum, 4) + v.shape[1:]) for k, v in batch.items()})
    text = steps._train.lower(*steps.step_arguments(element)).compile().as_text()
    return sum(" all-reduce(" in line or " all-reduce-start(" in line for line in text.splitlines())


def check_one_allreduce_set_per_step(records_dir):
    """Two devices: the compiled step has as many all-reduces with 4 micro-batches as with 1
    (gradients are summed per device over the micro-batches, then reduced once)."""
    counts = {accum: compiled_step_allreduces(records_dir, accum) for accum in (1, 4)}
    assert counts[1] >= 1 and counts[4] == counts[1], counts
    assert compiled_step_allreduces(records_dir, 4, "bf16") == counts[1]


def packed_and_unpacked_batches(golden_dir, count=12):
    """`count` short G1 instances as one unpacked batch, and the packed rows `bertprep pack` makes of them."""
    from bertprep import formats
    from bertprep.formats.schemas import PACKED, PRETRAINING
    from bertprep.stages.pack import strategy
    from bertprep.stages.pack.layout import pack_rows
    from trainer.data import feature_dtypes

    (records,) = formats.read_batches(os.path.join(golden_dir, "G1.tfrecord"), 1 << 20)
    lengths = (records["input_mask"] != 0).sum(axis=1)
    chosen = np.flatnonzero(lengths <= 40)[:count]
    unpacked = {name: values[chosen] for name, values in records.items()}
    members, _ = strategy.pack(lengths[chosen], (unpacked["masked_lm_weights"] != 0).sum(axis=1), 128, 20, 3)
    packed = pack_rows(unpacked, members, 3, 20)
    assert len(packed["input_ids"]) < count / 2  # several sequences per row
    unpacked_dtypes, packed_dtypes = feature_dtypes(PRETRAINING), feature_dtypes(PACKED)
    return ({name: values.astype(unpacked_dtypes[name]) for name, values in unpacked.items()},
            {name: values.astype(packed_dtypes[name]) for name, values in packed.items()})


def loss_sums_and_gradients(model, batch):
    """The loss sums of one batch (dropout off) and the gradient of the loss the trainer minimizes."""
    import keras

    from trainer.losses import PRETRAINING_OBJECTIVE as objective

    inputs, totals = objective.inputs(batch), objective.totals(batch)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            sums = objective.sums(model(inputs, training=True), batch)
            loss = objective.share(sums, totals)
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
    else:
        import jax

        non_trainable = [v.value for v in model.non_trainable_variables]

        def loss_fn(trainable):
            outputs, _ = model.stateless_call(trainable, non_trainable, inputs, training=True)
            sums = objective.sums(outputs, batch)
            return objective.share(sums, totals), sums

        # Compiled as the trainer's step is: op by op, JAX dispatches (and compiles) every primitive alone.
        grads, sums = jax.jit(jax.grad(loss_fn, has_aux=True))([v.value for v in model.trainable_variables])
    return {k: float(v) for k, v in sums.items()}, [np.asarray(g) for g in grads]


def check_cross_entropy_and_hits():
    """cross_entropy_and_hits against float64 NumPy: the cross-entropy, its gradient (softmax minus
    one-hot, weighted), and top-1 hits where a tie for the largest logit counts as a hit."""
    import keras

    from trainer.losses import cross_entropy_and_hits

    rng = np.random.default_rng(5)
    logits = rng.normal(0, 4, (3, 4, 301)).astype(np.float32)
    logits[0, 0, 7] = 90.0  # large: logsumexp must not overflow
    labels = rng.integers(0, 301, (3, 4)).astype(np.int32)
    labels[0, 0] = 7
    logits[1, 2, labels[1, 2]] = logits[1, 2, 0] = logits[1, 2].max() + 1.0  # a tie for the largest
    weights = rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        x = tf.constant(logits)
        with tf.GradientTape() as tape:
            tape.watch(x)
            nll, hits = cross_entropy_and_hits(x, tf.constant(labels))
            loss = tf.reduce_sum(nll * weights)
        grad = tape.gradient(loss, x)
    else:
        import jax

        def loss_fn(x):
            nll, hits = cross_entropy_and_hits(x, labels)
            return (nll * weights).sum(), (nll, hits)

        grad, (nll, hits) = jax.jit(jax.grad(loss_fn, has_aux=True))(logits)
    x = logits.astype(np.float64)
    top = x.max(-1, keepdims=True)
    log_total = top[..., 0] + np.log(np.exp(x - top).sum(-1))
    picked = np.take_along_axis(x, labels[..., None], -1)[..., 0]
    one_hot = np.arange(x.shape[-1]) == labels[..., None]
    expected_grad = weights[..., None] * (np.exp(x - log_total[..., None]) - one_hot)
    np.testing.assert_allclose(np.asarray(nll), log_total - picked, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), expected_grad, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(hits), (picked >= top[..., 0]).astype(np.float32))
    assert np.asarray(hits)[0, 0] == 1.0 and np.asarray(hits)[1, 2] == 1.0 and 0 < np.asarray(hits).sum() < 12


def check_packed_step_equals_unpacked(golden_dir):
    """One step on packed rows, dropout off, fp32: the same loss sums and gradients (1e-5) as the
    same sequences unpacked: per-sequence positions, block-diagonal attention, NSP from each [CLS]. And
    with the last layer on the predicted positions only (trainer/last_layer.py), packed and unpacked,
    the whole layer's sums and gradients."""
    import keras

    from trainer.config import BertConfig
    from trainer.model import build_model

    keras.backend.clear_session()
    keras.utils.set_random_seed(7)
    config = BertConfig(**dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               num_hidden_layers=2))
    model = build_model(config, 128, 20)
    unpacked, packed = packed_and_unpacked_batches(golden_dir)
    sums, grads = loss_sums_and_gradients(model, unpacked)
    whole_layer = model.options
    model.options = dataclasses.replace(whole_layer, last_layer="predicted")  # read at each call
    for batch in (unpacked, packed):
        _assert_same_sums_and_gradients(model, loss_sums_and_gradients(model, batch), (sums, grads))
    model.options = whole_layer
    _assert_same_sums_and_gradients(model, loss_sums_and_gradients(model, packed), (sums, grads))
    # Padding (positions 40 on, in the unpacked rows) passes no gradient: the sequences are truly apart.
    position_grad = grads[[v.path for v in model.trainable_variables].index("bert/position_embeddings/embeddings")]
    assert not position_grad[40:].any() and position_grad[:40].all(axis=1).any()


def _assert_same_sums_and_gradients(model, found, expected):
    """The loss sums and gradients `found` equal to `expected`'s (1e-5)."""
    (found_sums, found_grads), (sums, grads) = found, expected
    assert sums["sequences"] == found_sums["sequences"] == 12 and sums["tokens"] == found_sums["tokens"]
    assert sums["mlm_weight_sum"] == found_sums["mlm_weight_sum"] > 12
    for key in ("mlm_loss_sum", "nsp_loss_sum", "mlm_correct", "nsp_correct"):
        np.testing.assert_allclose(found_sums[key], sums[key], rtol=1e-5, err_msg=key)
    assert len(grads) == len(model.trainable_variables) > 10
    largest = max(np.abs(grad).max() for grad in grads)
    for variable, found_grad, grad in zip(model.trainable_variables, found_grads, grads):
        if variable.path.endswith("attention/key/bias"):
            # Zero in exact arithmetic (a softmax ignores what is added to all its scores): rounding noise.
            assert np.abs(grad).max() < 1e-9 * largest and np.abs(found_grad).max() < 1e-9 * largest
            continue
        np.testing.assert_allclose(found_grad, grad, rtol=1e-5, atol=1e-5 * np.abs(grad).max(), err_msg=variable.path)


def check_step_counts_real_sequences(golden_dir):
    """The compiled training step on packed rows reports what the logs divide by time: the real
    sequences and tokens it trained on, not rows."""
    import keras

    from trainer.config import BertConfig, TrainConfig
    from trainer.pretraining import Devices, build_steps

    keras.backend.clear_session()
    unpacked, packed = packed_and_unpacked_batches(golden_dir)
    args = TrainConfig(format="ofrecord", optimizer="adam", lr=1e-3, steps=10, precision="fp32", grad_accum=1,
                       pad_vocab=1)
    shape = argparse.Namespace(seq=128, pred=23)
    _, _, steps = build_steps(args, Devices(keras.backend.backend()), BertConfig(**TINY), shape, 0)
    result = steps.fetch(steps.train(steps.put({name: values[None] for name, values in packed.items()})))
    assert len(packed["input_ids"]) < 6 and result["finite"]
    assert (result["sequences"], result["tokens"]) == (12, (unpacked["input_mask"] != 0).sum())


def check_model_parallel_layout(records_dir, config_path):
    """On 4 devices, for K = 1, 2, 4: every variable BERT_LAYOUT splits holds 1/K of itself on each
    device, its optimizer slots likewise, everything else whole; every rule matches some variable of
    the pretraining model; the bytes measured per device equal the layout's estimate (plus the
    optimizer's and loss scale's scalars)."""
    import re

    import keras

    from trainer import parallel
    from trainer.config import BertConfig, TrainConfig
    from trainer.data import Records
    from trainer.pretraining import Devices, build_steps

    records = Records(str(records_dir), "ofrecord")
    config = BertConfig.from_json_file(config_path)
    abstract = parallel.abstract_variables(config, records.seq, records.pred)
    paths = [path for variables in abstract for path in variables]
    for pattern, _axes, _what in parallel.BERT_LAYOUT:
        assert any(re.fullmatch(pattern, path) for path in paths), f"{pattern} matches no variable"
    args = TrainConfig(format="ofrecord", optimizer="lamb", lr=1e-3, steps=10, precision="fp32", grad_accum=1,
                       pad_vocab=1)
    measured = {}
    for k in (1, 2, 4):
        keras.backend.clear_session()
        model, optimizer, steps = build_steps(args, Devices("jax", k), config, records, 0)
        layouts = parallel.layout_map()
        split = 0
        for i, variable in enumerate(model.trainable_variables):
            axes = parallel.split_axes(layouts, variable.path) or (None,) * len(variable.shape)
            expected = tuple(d // k if axis == parallel.MODEL else d for d, axis in zip(variable.shape, axes))
            slots = [steps.state[2][j] for j, v in enumerate(optimizer.variables)
                     if v.path.startswith(f"{optimizer.name}/{variable.path.replace('/', '_')}_")]
            assert len(slots) == parallel.OPTIMIZER_SLOTS, variable.path
            for array in [steps.state[0][i], *slots]:
                assert {shard.data.shape for shard in array.addressable_shards} == {expected}, (k, variable.path)
            split += expected != tuple(variable.shape)
        # Per layer q, k, v kernels and biases, attention output kernel, intermediate kernel and bias,
        # output kernel; then word embeddings and masked-LM bias.
        assert split == (0 if k == 1 else 10 * config.num_hidden_layers + 2), (k, split)
        measured[k] = steps.param_bytes_per_device()
        estimate = parallel.layout_bytes_per_device(*abstract, k)
        assert 0 <= measured[k] - estimate <= 64, (k, measured[k], estimate)
    print(json.dumps(measured))


def freeze_survivors():
    """In a test process that trains run after run: collect what the last run left, then move the survivors
    (modules, caches) out of the garbage collector's reach, so that the next run's collections (Keras's
    clear_session collects at every run's start) walk only what that run made, not the whole heap of
    imports and earlier runs' caches. Only cycles need the collector: a frozen object still goes when
    nothing refers to it. `python -m pytest tests/test_trainer_jax.py`: 113.8 and 124.0 s before, 104.7 and
    107.5 s after."""
    gc.collect()
    gc.freeze()


def train_one_after_another(runs):
    """Each trainer argv of `runs` in this process, in order: the first non-zero exit code, else 0. One
    JAX process for several runs pays JAX's start and the op-by-op compiles of a model's build once
    (measured: a 30-step trajectory run after the first takes about 12 s of CPU in the same process,
    about 20 s in a process of its own with the same XLA cache)."""
    from trainer.cli import main

    for argv in runs:
        freeze_survivors()
        code = main(argv)
        if code:
            return code
    return 0


def trained_in_groups(groups, train):
    """run(*key): `train(keys)`'s {key: result} for key, each key trained once. The keys of key's group
    in `groups` (a key in none is alone) that are not yet trained are trained with it, in one go: a
    group is the runs that one process trains one after another (train_one_after_another)."""
    done = {}

    def run(*key):
        if key not in done:
            group = next((group for group in groups if key in group), [key])
            done.update(train([k for k in group if k not in done]))
        return done[key]

    return run


def built_steps(records_dir, precision, options, schedule=("adam", 1e-4, 0, 10), **changes):
    """(the JAX Steps of TINY with `changes`, an element of 4 records) under `precision` ("amp" is resolved on
    this CPU: mixed_bfloat16) and StepOptions `options`; `schedule`: (optimizer, peak, warmup, total steps)."""
    import keras

    from trainer.config import BertConfig, StepOptions, TrainConfig
    from trainer.data import Records, RecordStream
    from trainer.pretraining import Devices, build_steps, set_precision

    keras.backend.clear_session()
    keras.utils.set_random_seed(1)  # the same initial values and dropout seeds at every call
    records = Records(str(records_dir), "ofrecord")
    optimizer, peak, warmup, total = schedule
    config, _ = set_precision(TrainConfig(format="ofrecord", optimizer=optimizer, lr=peak, steps=total,
                                          precision=precision, pad_vocab=1), keras)
    _, _, steps = build_steps(config, Devices(keras.backend.backend()), BertConfig(**dict(TINY, **changes)),
                              records, warmup, options=StepOptions(*options))
    batch = next(RecordStream(records, "training", 4, seed=1).batches())
    return steps, steps.put({k: v[None] for k, v in batch.items()})


def step_exported_for_gpu(records_dir, precision, options, variables=False, **changes):
    """The StableHLO text of the JAX train step of TINY (with `changes`; batch 4) exported for an NVIDIA GPU
    (jax.export with platforms=["cuda"]: lowered here, on the CPU, as the GPU would compile it), under
    `precision` ("amp" is resolved on this CPU: mixed_bfloat16) and StepOptions `options`; with `variables`,
    (text, the number of trainable variables)."""
    import jax

    steps, element = built_steps(records_dir, precision, options, **changes)
    text = jax.export.export(steps._train, platforms=["cuda"])(*steps.step_arguments(element)).mlir_module()
    return (text, len(steps.state[0])) if variables else text


DOT_TYPES = r"stablehlo\.dot_general[^\n]*: \(tensor<([^>]*)>, tensor<([^>]*)>\)"


def check_mixed_precision_step_multiplies_in_bf16(records_dir):
    """amp with the GPU's levers: every matrix product of the step exported for a GPU takes bfloat16 operands
    (those over TINY's hidden 64, intermediate 256 and vocab 30,522 among them), the dropout masks
    come from XLA's RngBitGenerator (no threefry) and the embeddings' gradients are sorted; under fp32 the
    same products take float32 (what the check tells apart)."""
    import re

    text = step_exported_for_gpu(records_dir, "amp", ("sorted", "rbg"))
    dots = re.findall(DOT_TYPES, text)
    assert len(dots) >= 30, len(dots)
    not_bf16 = [pair for pair in dots if not all(t.endswith("xbf16") for t in pair)]
    assert not not_bf16, not_bf16
    for dim in (64, 256, 30522):  # products over the hidden, intermediate and vocab dimensions are among them
        assert any(f"x{dim}x" in f"x{a}" or f"x{dim}x" in f"x{b}" for a, b in dots), dim
    assert "stablehlo.rng_bit_generator" in text and "threefry" not in text
    assert "stablehlo.sort" in text
    fp32 = re.findall(DOT_TYPES, step_exported_for_gpu(records_dir, "fp32", ("scatter", "threefry")))
    assert len(fp32) == len(dots) and all(t.endswith("xf32") for pair in fp32 for t in pair), fp32


def check_step_for_gpu_writes_no_masks_or_bias_arrays(records_dir):
    """What the step asks of a GPU's memory (scripts/gpu_step_traffic.py counts it on a compiled step), and of
    its tracing (trainer/called_layers.py: one layer traced, a function called once per layer): with
    --dropout-rng hash no generator at all (no RngBitGenerator, no threefry: each mask is arithmetic on the
    element's position, which XLA fuses where the mask is applied); the query, key and value projections
    are 2-D products (no [hidden, heads, size] kernel operand), whose bias is a vector XLA adds in the
    product's epilogue; each GELU is recomputed in the backward pass (JAX's checkpoint: its erfc in a
    rematerialized computation behind an optimization barrier). The rbg step is the control: a generator; it
    also takes the GELU's erf formula (trainer/gelu.py): one erf instruction where Keras's erfc is expanded.
    The optimizer's step of each variable is a call of one function per distinct shape (trainer/optimizers.py)."""
    import collections
    import re

    layers = 2
    hashed, trainable = step_exported_for_gpu(records_dir, "amp", ("sorted", "hash"), True, num_hidden_layers=layers)
    rbg = step_exported_for_gpu(records_dir, "amp", ("sorted", "rbg", False, "einsum", "erf"),
                                num_hidden_layers=layers)
    assert "stablehlo.rng_bit_generator" in rbg
    assert '"chlo.erf"' in rbg and '"chlo.erf"' not in hashed  # a composite of one erf, expanded only if need be
    assert "rng_bit_generator" not in hashed and "threefry" not in hashed
    heads, size = TINY["num_attention_heads"], TINY["hidden_size"] // TINY["num_attention_heads"]
    kernels = [rhs for _, rhs in re.findall(DOT_TYPES, hashed)]
    assert not [k for k in kernels if k.startswith(f"{TINY['hidden_size']}x{heads}x{size}x")], kernels
    assert sum(k.startswith(f"{TINY['hidden_size']}x{heads * size}x") for k in kernels) >= 3 * layers, kernels
    # The layers' feed-forward GELU (one traced layer) and the masked-LM head's transform.
    recomputed = set(re.findall(r'loc\("([^"]*/checkpoint/rematted_computation/erfc)"', hashed))
    assert {site.split("/")[-4] for site in recomputed} == {"intermediate", "transform"}, recomputed
    assert hashed.count("stablehlo.optimization_barrier") >= 2
    # One layer traced: its forward and its backward each one function, called once per layer.
    calls = collections.Counter(re.findall(r"call @(one_layer\w*)\(", hashed))
    assert len(calls) == 2 and set(calls.values()) == {layers}, calls
    updates = collections.Counter(re.findall(r"call @(_arithmetic\w*)\(", hashed))
    assert sum(updates.values()) == trainable and len(updates) <= trainable // 3, updates


def check_called_layers_compute_as_one_by_one(records_dir):
    """trainer/called_layers.py: three float32 steps of TINY with two layers and dropout 0.1 (hashed masks:
    the seeds each layer advances): the first step's loss to the bit as the layers called one by one, the
    next steps' and the weights within 1e-6 (XLA fuses and sums the inlined layers' gradients in another
    order: about 1e-7 relative under the tests' fast-compile flags, equal without them; in amp, within
    bfloat16's rounding after the first step)."""
    import numpy as np

    from trainer import called_layers, scan_layers

    def trained():
        steps, element = built_steps(records_dir, "fp32", ("sorted", "hash"), num_hidden_layers=2,
                                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        results = [steps.fetch(steps.train(element)) for _ in range(3)]
        return results, [np.asarray(v) for v in steps.state[0]]

    called = trained()
    run, called_layers.run = called_layers.run, scan_layers.one_by_one
    try:
        one_by_one = trained()
    finally:
        called_layers.run = run
    assert called[0][0] == one_by_one[0][0]
    for key in ("mlm_loss_sum", "nsp_loss_sum"):
        np.testing.assert_allclose([r[key] for r in called[0]], [r[key] for r in one_by_one[0]], rtol=1e-6)
    for a, b in zip(called[1], one_by_one[1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def check_scanned_layers_are_one_loop(records_dir):
    """--scan-layers: the step of three layers, exported for a GPU, holds one layer's matrix products inside a
    loop (those of a one-layer step less the embeddings' and heads', which stay outside); without it the
    three layers are calls of one traced layer (trainer/called_layers.py: as many products, no loop)."""
    import re

    def dots(scan, layers):
        text = step_exported_for_gpu(records_dir, "amp", ("sorted", "rbg", scan), num_hidden_layers=layers)
        return text, len(re.findall(DOT_TYPES, text))

    (called, called_dots), (scanned, scanned_dots) = dots(False, 3), dots(True, 3)
    assert "stablehlo.while" not in called and "stablehlo.while" in scanned
    outside = dots(False, 0)[1]
    per_layer = dots(False, 1)[1] - outside
    assert per_layer >= 18 and scanned_dots == called_dots == outside + per_layer, (outside, per_layer)


def check_variables_drawn_on_the_host_equal_the_device_program():
    """model._drawn_on_host_cpu (how an accelerator run draws the initial values) gives what the one compiled
    program gives on this CPU: the same draws."""
    import jax
    import keras
    import numpy as np

    from trainer.model import _drawn_on_host_cpu

    initializers = [keras.initializers.TruncatedNormal(stddev=0.02, seed=seed) for seed in (1, 2)]

    def initial_values():
        return [initializers[0]((30, 8)), initializers[1]((5,)), keras.initializers.Zeros()((3, 3))]

    expected = jax.jit(initial_values)()
    drawn = _drawn_on_host_cpu(initial_values, (), None)
    assert len(drawn) == 3
    for want, got in zip(expected, drawn):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.devices() == {jax.devices()[0]}



# (peak, warmup, total): the trajectories' run, no warmup, BERT's 10k of 1M, numbers whose reciprocals round.
SCHEDULE_CASES = [(1e-3, 5, 30), (1e-4, 0, 7), (5e-5, 10_000, 1_000_000), (1.2345e-3, 3, 20), (3e-4, 37, 113)]


def check_schedule_numbers_as_inputs():
    """Each schedule's learning rates, compiled by JAX's XLA with its numbers as constants (with_constants)
    and as inputs (with_inputs), one scalar step at a time as the step computes them: equal bit for bit."""
    import jax

    from trainer.optimizers import GoogleSchedule, WarmupPolynomialDecay

    for peak, warmup, total in SCHEDULE_CASES:
        steps = np.concatenate([np.arange(min(warmup, 600) + 3), np.arange(max(total - 300, 0), total + 3)])
        schedules = (WarmupPolynomialDecay(peak, warmup, total, 1.0), WarmupPolynomialDecay(peak, warmup, total, 0.5),
                     GoogleSchedule(peak, warmup, total))
        for schedule in schedules:
            constants = jax.jit(lambda steps, schedule=schedule: jax.lax.map(schedule.with_constants, steps))(steps)
            inputs = jax.jit(lambda steps, numbers, schedule=schedule: jax.lax.map(
                lambda step: schedule.with_inputs(step, numbers), steps))(steps, schedule.numbers())
            assert np.asarray(constants).max() > 0
            np.testing.assert_array_equal(np.asarray(inputs), np.asarray(constants), err_msg=f"{schedule.get_config()}")


if __name__ == "__main__":
    # python tests/trainer_checks.py [--no-tensorflow] check NAME ARGS... | trainer ARGS... | trainers JSON
    # (JSON: a list of trainer argvs, run one after another in this process)
    argv = sys.argv[1:]
    if argv[:1] == ["--no-tensorflow"]:
        block_imports()
        argv = argv[1:]
    if argv[0] == "check":
        globals()[f"check_{argv[1]}"](*argv[2:])
        sys.exit(0)
    if argv[0] == "trainers":
        sys.exit(train_one_after_another(json.loads(argv[1])))
    from trainer.cli import main

    sys.exit(main(argv[1:]))


def check_traced_program_computes_as_the_jitted_step(records_dir, folder):
    """trainer/traced_steps.py: the step's exported program, called as the trainer calls it, gives the jitted
    step's new state and results bit for bit (amp, the tiny model, two steps, each from the same state), first
    exported into `folder` and then read back from the one file there."""
    import jax
    import numpy as np

    from trainer.traced_steps import SUFFIX, step_with_traced_program

    steps, element = built_steps(records_dir, "amp", ())
    arguments = steps.step_arguments(element)
    copies = [jax.tree.map(lambda value: value.copy(), arguments[0]) for _ in range(3)]  # the steps donate it
    expected = jax.tree.leaves(steps._train(copies[0], *arguments[1:]))
    for copy in copies[1:]:
        traced = step_with_traced_program(steps._train, arguments, folder, "a description", **steps._train_options)
        got = jax.tree.leaves(traced(copy, *arguments[1:]))
        assert len(got) == len(expected) > 50, (len(got), len(expected))
        differ = [i for i, (a, b) in enumerate(zip(got, expected)) if not np.array_equal(np.asarray(a), np.asarray(b))]
        assert not differ, f"{len(differ)} of {len(got)} outputs differ: {differ[:10]}"
        assert [name.endswith(SUFFIX) for name in os.listdir(folder)] == [True], os.listdir(folder)
    # A file cut short (a full disk, a killed writer outside the rename) is exported again, not a failure.
    (path,) = [os.path.join(folder, name) for name in os.listdir(folder)]
    whole = os.path.getsize(path)
    os.truncate(path, whole // 2)
    traced = step_with_traced_program(steps._train, arguments, folder, "a description", **steps._train_options)
    copy = jax.tree.map(lambda value: value.copy(), arguments[0])
    assert all(np.array_equal(np.asarray(a), np.asarray(b))
               for a, b in zip(jax.tree.leaves(traced(copy, *arguments[1:])), expected))
    assert os.path.getsize(path) == whole


def check_initial_values_take_their_seeds_as_arguments():
    """trainer.model's initial values' program (_draws_of_given_seeds): with the seeds as its arguments it draws
    Keras's own values bit for bit (each variable's `value` traced with its int seed a constant), for padded
    vocab rows (_ZeroPadded) and dropout seed states too; the same program with other seeds draws other values."""
    import jax
    import keras
    import numpy as np

    from trainer import keras_internals
    from trainer.config import BertConfig
    from trainer.model import BertPretrainer, _draws_of_given_seeds, symbolic_inputs

    keras.backend.clear_session()
    keras.utils.set_random_seed(5)
    model = BertPretrainer(BertConfig(**TINY), pad_vocab=8, name="bert")
    with keras.StatelessScope(initialize_variables=False):
        model(symbolic_inputs(2, 16, 3))
    variables = keras_internals.take_uninitialized_variables()
    try:
        keras_own = [np.asarray(v) for v in jax.jit(lambda: [v.value for v in variables])()]
        program, (seeds, states) = _draws_of_given_seeds(variables)
        assert len(seeds) >= 5 and len(states) >= 1, (len(seeds), len(states))
        drawn = jax.jit(program)
        ours = [np.asarray(v) for v in drawn(seeds, states)]
        assert [v.dtype for v in ours] == [v.dtype for v in keras_own]
        assert all(np.array_equal(a, b) for a, b in zip(ours, keras_own))
        others = [np.asarray(v) for v in drawn(seeds + 1, states)]
        assert 0 < len(seeds) <= sum(not np.array_equal(a, b) for a, b in zip(others, ours))
        assert _draws_random_bits(program, (seeds, states))
        assigned = {v.path for v in model.trainable_variables}  # a checkpoint's, assigned next: not drawn
        program, arguments = _draws_of_given_seeds(variables, assigned)
        assert not _draws_random_bits(program, arguments)
        zeros = dict(zip([v.path for v in variables], jax.jit(program)(*arguments)))
        assert all(not np.asarray(zeros[path]).any() for path in assigned)
    finally:
        keras_internals.forget_uninitialized_variables()


def _draws_random_bits(program, arguments):
    import jax

    text = str(jax.make_jaxpr(program)(*arguments))
    return "random_bits" in text or "threefry" in text


def check_an_unexportable_step_is_traced_as_before(folder):
    """A step jax.export cannot serialize (here a host callback) runs as the plain jit it was, after one line
    saying so, and leaves no file: the traced-step cache is a saving, never a failure."""
    import io

    import jax
    import numpy as np

    from trainer.traced_steps import step_with_traced_program

    def step(x):
        return jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    jitted, x = jax.jit(step), jax.numpy.arange(3.0)
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        traced = step_with_traced_program(jitted, (x,), folder, "a description")
    assert traced is jitted and np.array_equal(traced(x), [0.0, 2.0, 4.0])
    assert said.getvalue().startswith("trainer: note: the train step could not be exported") and said.getvalue(
    ).count("\n") == 1, said.getvalue()
    assert not os.path.exists(folder) or not os.listdir(folder)


def check_a_step_exported_under_one_schedule_computes_another(records_dir):
    """The traced-step cache keys a program without --lr, --warmup and --steps (pretraining.OUTSIDE_THE_STEP):
    the step exported under one schedule, called with another's numbers and state, gives that schedule's own
    jitted step's results bit for bit, for both kinds of schedule, warmup 0 one way and the other (a Python
    branch on warmup 0 in GoogleSchedule.with_inputs had made them two programs under one key)."""
    import jax
    import numpy as np

    for optimizer in ("lamb", "google-adam"):
        built = [built_steps(records_dir, "fp32", (), schedule=(optimizer, *numbers))
                 for numbers in ((1e-3, 0, 10), (3e-4, 3, 20))]
        for (exported_from, element), (other, _) in (built, built[::-1]):
            exported = jax.export.export(exported_from._train)(*exported_from.step_arguments(element))
            state = [jax.tree.map(lambda value: value.copy(), other.state) for _ in range(2)]
            expected = jax.tree.leaves(other._train(state[0], element, other.schedule_numbers))
            got = jax.tree.leaves(jax.jit(exported.call)(state[1], element, other.schedule_numbers))
            differ = [i for i, (a, b) in enumerate(zip(got, expected)) if not np.array_equal(a, b)]
            assert len(got) == len(expected) and not differ, (optimizer, len(differ), len(got))
