"""google-research/bert's own training step against `python -m trainer --optimizer google-adam`.

    pip install tf_keras   # modeling.py's tf.layers under TensorFlow 2 (TF_USE_LEGACY_KERAS=1 is set here)
    python scripts/google_optimizer_golden.py --bert-dir PATH/TO/google-research/bert [--steps 20]

The reference: modeling.BertModel, run_pretraining.get_masked_lm_output / get_next_sentence_output and
optimization.create_optimizer, read from --bert-dir (not part of this project) with one change:
`import tensorflow as tf` becomes `import tensorflow.compat.v1 as tf`. TensorFlow 2 has no
tf.contrib, so modeling.layer_norm's `tf.contrib.layers.layer_norm` is given here as contrib wrote
it (variables LayerNorm/beta, LayerNorm/gamma; moments over the last axis; batch_normalization with
epsilon 1e-12). It trains google_tiny (the project's fixture, or --checkpoint) on the trajectories
README's fixed batch of 14 records with dropout 0, --lr, --warmup, --steps, in graph mode.

create_optimizer groups the update with `global_step`'s increment, and the learning rate reads
`global_step` with no order between the two (google-research/bert issue 1050): run as written
(--as-written) each update takes the rate of its step or of the next, as the threads fall. By
default the script runs the update (the optimizer's own op, recorded as create_optimizer builds it)
and then the increment, so every update takes the rate of the step before it, as the code's comment
says ("if global_step < num_warmup_steps, the learning rate will be global_step/num_warmup_steps *
init_lr"). The rate each update used is printed beside the reference's loss.

Ours: the same run under each --backends, then its final checkpoint converted to Google's names
(`python -m trainer checkpoint convert --to google`). Prints the per-step losses of each and the
largest loss and weight differences. --write-fixture DIR writes the reference's per-step losses
(losses.jsonl) and final weights of FIXTURE_VARIABLES (weights.npz) for tests/test_optimizer_trajectories.py.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERTPREP_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
CHECKPOINT = os.path.join(SHARED, "fixtures", "checkpoints", "google_tiny", "bert_model.ckpt")
GOLDEN = os.path.join(SHARED, "fixtures", "golden")
# The final weights the fixture keeps (Google's names): the last layer, pooler and heads but the vocab-wide
# ones, kernels, biases and LayerNorm, decayed and not: about 0.9 MB.
FIXTURE_VARIABLES = r"bert/encoder/layer_1/.*|bert/pooler/.*|cls/predictions/transform/.*|cls/seq_relationship/.*"
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
            "next_sentence_labels")


def fixed_batch(work):
    """The trajectories README's batch: `bertprep create` of the golden corpus's first 50 lines (14 records)."""
    from bertprep.cli import main as bertprep_main

    lines = open(os.path.join(GOLDEN, "corpus.txt"), encoding="utf-8").readlines()[:50]
    with open(os.path.join(work, "s50.txt"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    assert bertprep_main(["create", "--input", os.path.join(work, "s50.txt"), "--vocab",
                          os.path.join(GOLDEN, "vocab.txt"), "--out", os.path.join(work, "rec"), "--seq", "128",
                          "--pred", "20", "--dupe-factor", "1", "--format", "tfrecord", "--workers", "1",
                          "--quiet"]) == 0
    (params,) = os.listdir(os.path.join(work, "rec"))
    (corpus,) = os.listdir(os.path.join(work, "rec", params))
    return os.path.join(work, "rec", params, corpus)


def load_reference_module(name, bert_dir):
    """`name`.py of google-research/bert with its TF1 import redirected to tensorflow.compat.v1."""
    with open(os.path.join(bert_dir, f"{name}.py"), encoding="utf-8") as f:
        source = f.read()
    assert source.count("import tensorflow as tf\n") == 1, name
    module = types.ModuleType(name)
    module.__file__ = os.path.join(bert_dir, f"{name}.py")
    sys.modules[name] = module
    exec(compile(source.replace("import tensorflow as tf\n", "import tensorflow.compat.v1 as tf\n"),
                 module.__file__, "exec"), module.__dict__)
    return module


def contrib_layer_norm(tf):
    """tf.contrib.layers.layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope) as TF 1.15 had it."""

    def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
        assert begin_norm_axis == begin_params_axis == -1
        with tf.variable_scope(scope, "LayerNorm", [inputs]):
            shape = inputs.shape[-1:]
            beta = tf.get_variable("beta", shape, inputs.dtype, initializer=tf.zeros_initializer())
            gamma = tf.get_variable("gamma", shape, inputs.dtype, initializer=tf.ones_initializer())
            mean, variance = tf.nn.moments(inputs, [inputs.shape.ndims - 1], keep_dims=True)
            return tf.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma, variance_epsilon=1e-12)

    return types.SimpleNamespace(layers=types.SimpleNamespace(layer_norm=layer_norm))


def run_reference(args):
    """In this process (graph mode): per-step losses before each update, learning rates, final weights."""
    import tensorflow.compat.v1 as tf

    from bertprep import formats

    tf.disable_v2_behavior()
    tf.contrib = contrib_layer_norm(tf)
    modeling = load_reference_module("modeling", args.bert_dir)
    optimization = load_reference_module("optimization", args.bert_dir)
    run_pretraining = load_reference_module("run_pretraining", args.bert_dir)

    (path,) = [os.path.join(d, n) for d, _, names in os.walk(args.records) for n in names if n.endswith(".tfrecord")]
    records = list(formats.read_records(path))
    batch = {k: np.stack([r[k] for r in records]) for k in FEATURES}
    config = modeling.BertConfig.from_json_file(os.path.join(os.path.dirname(args.checkpoint), "bert_config.json"))
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    inputs = {k: tf.constant(v.astype(np.float32 if k == "masked_lm_weights" else np.int32)) for k, v in batch.items()}
    model = modeling.BertModel(config=config, is_training=True, input_ids=inputs["input_ids"],
                               input_mask=inputs["input_mask"], token_type_ids=inputs["segment_ids"],
                               use_one_hot_embeddings=False)
    mlm_loss = run_pretraining.get_masked_lm_output(
        config, model.get_sequence_output(), model.get_embedding_table(), inputs["masked_lm_positions"],
        inputs["masked_lm_ids"], inputs["masked_lm_weights"])[0]
    nsp_loss = run_pretraining.get_next_sentence_output(config, model.get_pooled_output(),
                                                        inputs["next_sentence_labels"])[0]
    loss = mlm_loss + nsp_loss
    tvars = tf.trainable_variables()
    assignment, _ = modeling.get_assignment_map_from_checkpoint(tvars, args.checkpoint)
    tf.train.init_from_checkpoint(args.checkpoint, assignment)
    # Recorded, not changed: the learning-rate tensor create_optimizer hands its optimizer, and the op of
    # the update alone (create_optimizer groups it with global_step's increment).
    rates, updates = [], []
    optimizer = optimization.AdamWeightDecayOptimizer
    init, apply_gradients = optimizer.__init__, optimizer.apply_gradients
    optimizer.__init__ = lambda self, learning_rate, **kw: (rates.append(learning_rate),
                                                            init(self, learning_rate, **kw))[1]
    optimizer.apply_gradients = lambda self, *a, **kw: updates.append(apply_gradients(self, *a, **kw)) or updates[-1]
    train_op = optimization.create_optimizer(loss, args.lr, args.steps, args.warmup, use_tpu=False)
    global_step = tf.train.get_global_step()
    if not args.as_written:  # the update, then the increment: the rate read at the step before it
        increment = global_step.assign_add(1)
        train_op = [updates[0]]
    steps = []
    config = tf.ConfigProto(inter_op_parallelism_threads=args.inter_op_threads)
    with tf.Session(config=config) as session:
        session.run(tf.global_variables_initializer())
        for step in range(1, args.steps + 1):
            values = session.run({"loss": loss, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss, "global_step": global_step})
            # The rate this update used: fetched in the same run as the update.
            _, rate = session.run([train_op, rates[0]])
            if not args.as_written:
                session.run(increment)
            values = {k: int(v) if k == "global_step" else float(v) for k, v in values.items()}
            steps.append({"step": step, **values, "learning_rate": float(rate)})
        weights = {v.name.split(":")[0]: value for v, value in zip(tvars, session.run(tvars))}
    np.savez(args.reference_out + ".npz", **weights)
    with open(args.reference_out, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(s) + "\n" for s in steps))


def run_ours(args, backend, work):
    """Our trainer's per-step losses and final weights (in Google's names) under `backend`."""
    run_dir = os.path.join(work, backend)
    log = os.path.join(run_dir, "log.jsonl")
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    trainer = [sys.executable, "-m", "trainer"]
    subprocess.run([*trainer, "--format", "tfrecord", "--data", args.records, "--init-checkpoint", args.checkpoint,
                    "--optimizer", "google-adam", "--lr", str(args.lr), "--warmup", str(args.warmup), "--steps",
                    str(args.steps), "--batch-size", "14", "--dropout", "0", "--log-every", "1", "--log-json", log,
                    "--checkpoint-dir", os.path.join(run_dir, "ckpt"), "--quiet"], check=True, env=env, cwd=REPO)
    last = sorted(n for n in os.listdir(os.path.join(run_dir, "ckpt")) if n.startswith("ckpt-"))[-1]
    google = os.path.join(run_dir, "google")
    subprocess.run([*trainer, "checkpoint", "convert", os.path.join(run_dir, "ckpt", last), google, "--to", "google",
                    "--quiet"], check=True, env=env, cwd=REPO)
    losses = [e["loss"] for e in map(json.loads, open(log, encoding="utf-8")) if e["event"] == "train"]
    return losses, os.path.join(google, "bert_model.ckpt")


def compare(args, work):
    import tensorflow as tf

    reference_out = os.path.join(work, "reference.jsonl")
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, os.path.abspath(__file__), "--bert-dir", args.bert_dir, "--checkpoint",
                    args.checkpoint, "--records", args.records, "--steps", str(args.steps), "--lr", str(args.lr),
                    "--warmup", str(args.warmup), "--inter-op-threads", str(args.inter_op_threads),
                    *(["--as-written"] if args.as_written else []),
                    "--reference-out", reference_out], check=True, env=env)
    reference = [json.loads(line) for line in open(reference_out, encoding="utf-8")]
    with np.load(reference_out + ".npz") as npz:
        reference_weights = {k: npz[k] for k in npz.files}
    if args.write_fixture:
        write_fixture(args.write_fixture, reference, reference_weights)
    runs = {backend: run_ours(args, backend, work) for backend in args.backends}
    print("step  reference (its lr)         " + "  ".join(f"{b:>10}" for b in runs))
    for i, r in enumerate(reference):
        print(f"{r['step']:4d}  {r['loss']:9.6f} ({r['learning_rate']:.3e})  "
              + "  ".join(f"{losses[i]:10.6f}" for losses, _ in runs.values()))
    for backend, (losses, checkpoint) in runs.items():
        reader = tf.train.load_checkpoint(checkpoint)
        weight_gaps = {name: float(np.abs(reader.get_tensor(name) - value).max())
                       for name, value in reference_weights.items()}
        worst = max(weight_gaps, key=weight_gaps.get)
        loss_gap = max(abs(a - r["loss"]) for a, r in zip(losses, reference))
        print(f"{backend}: max loss difference {loss_gap:.2e} over {len(reference)} steps; max weight difference "
              f"{weight_gaps[worst]:.2e} ({worst}) over {len(weight_gaps)} variables")


def write_fixture(directory, reference, weights):
    import re

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "losses.jsonl"), "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(step, sort_keys=True) + "\n" for step in reference))
    np.savez(os.path.join(directory, "weights.npz"),
             **{name: value for name, value in sorted(weights.items()) if re.fullmatch(FIXTURE_VARIABLES, name)})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bert-dir", required=True, help="a google-research/bert checkout (modeling.py, optimization.py, "
                                                     "run_pretraining.py)")
    p.add_argument("--checkpoint", default=CHECKPOINT, help="Google checkpoint prefix, bert_config.json beside it")
    p.add_argument("--records", help="records directory (default: the fixed batch, made in a temporary directory)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backends", default="tensorflow,jax")
    p.add_argument("--inter-op-threads", type=int, default=0, help="the reference session's (0: TensorFlow's choice)")
    p.add_argument("--as-written", action="store_true",
                   help="run create_optimizer's train_op as it is: its global_step increment races with the "
                        "learning rate's read of it (google-research/bert issue 1050), so each update takes the "
                        "rate of its step or of the next, as the threads fall")
    p.add_argument("--write-fixture", metavar="DIR", help="write the reference's losses and weights here")
    p.add_argument("--reference-out", help=argparse.SUPPRESS)  # the reference's own process
    args = p.parse_args()
    if args.reference_out:
        return run_reference(args)
    args.backends = args.backends.split(",")
    with tempfile.TemporaryDirectory() as work:
        args.records = args.records or fixed_batch(work)
        compare(args, work)


if __name__ == "__main__":
    main()
