"""google-research/bert's own fine-tuning model on a Google checkpoint ($BERTPREP_GOOGLE_BERT: a checkout of
google-research/bert, commit eedf5716ce1268e56f0a50264a88cafad334ac61; its code is not part of this
repository, and the tests that need it are skipped without it): run as a
script, in its own process, because the reference needs TensorFlow 1 graph behaviour
(`disable_v2_behavior`: `Dimension.value`, `tf.get_variable`), which is process-wide.

    python tests/google_bert_reference.py --checkpoint PREFIX --inputs in.npz --head classifier --labels 2 --out out.npz

`--head classifier`: modeling.BertModel + run_classifier.create_model (is_training False); writes
`probabilities` [N, labels] and `logits`. `--head squad`: run_squad.create_model; writes `start_logits`
and `end_logits` [N, seq]; both also `variables`, the JSON list of [name, shape] of every variable restored. The
checkpoint is restored as run_classifier.py's model_fn restores
--init_checkpoint (modeling.get_assignment_map_from_checkpoint + tf.train.init_from_checkpoint); every
trainable variable of the reference's graph must come from it, or the script fails (but for the pooler
BertModel always makes and run_squad.py never reads).
"""

import argparse
import ast
import json
import os
import sys
import types

import numpy as np

BERT_DIR = os.environ.get("BERTPREP_GOOGLE_BERT", "")
TF1_IMPORT = "import tensorflow as tf\n"


def tf1():
    """tensorflow.compat.v1 with the two library functions modeling.py calls that TensorFlow 2 (with
    Keras 3) lacks, as TF 1.15 computed them: tf.contrib.layers.layer_norm and tf.layers.dense."""
    import tensorflow.compat.v1 as tf

    # The optimizer golden's generator gives the same layer_norm to the same modeling.py.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
    from google_optimizer_golden import contrib_layer_norm

    def dense(inputs, units, activation=None, name=None, kernel_initializer=None):
        # modeling.py calls it on rank-2 tensors only (it reshapes to 2D first).
        with tf.variable_scope(name, "dense"):
            kernel = tf.get_variable("kernel", [inputs.shape[-1], units], inputs.dtype, initializer=kernel_initializer)
            bias = tf.get_variable("bias", [units], inputs.dtype, initializer=tf.zeros_initializer())
            outputs = tf.nn.bias_add(tf.matmul(inputs, kernel), bias)
            return activation(outputs) if activation else outputs

    class Namespace(types.ModuleType):
        def __getattr__(self, name):
            return getattr(tf, name)

    shim = Namespace("tf1")
    shim.contrib = contrib_layer_norm(tf)
    shim.layers = types.SimpleNamespace(dense=dense)
    return tf, shim


def load_modeling(shim):
    """modeling.py as written, its `tf` the shimmed tensorflow.compat.v1."""
    with open(os.path.join(BERT_DIR, "modeling.py"), encoding="utf-8") as f:
        source = f.read()
    assert source.count(TF1_IMPORT) == 1
    module = types.ModuleType("modeling")
    module.__file__ = os.path.join(BERT_DIR, "modeling.py")
    module.tf = shim
    exec(compile(source.replace(TF1_IMPORT, ""), module.__file__, "exec"), module.__dict__)
    return module


def create_model(script, modeling, shim):
    """The create_model function of run_classifier.py or run_squad.py, its source as written (the scripts'
    module level defines flags and imports their tokenizer and optimizer, which the model does not use)."""
    path = os.path.join(BERT_DIR, f"{script}.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "create_model"]
    namespace = {"tf": shim, "modeling": modeling}
    exec(compile(ast.Module(body=[function], type_ignores=[]), path, "exec"), namespace)
    return namespace["create_model"]


def run(checkpoint, inputs, head, labels):
    tf, shim = tf1()
    tf.disable_v2_behavior()
    modeling = load_modeling(shim)
    config = modeling.BertConfig.from_json_file(os.path.join(os.path.dirname(checkpoint), "bert_config.json"))
    features = [tf.constant(inputs[name].astype(np.int32)) for name in ("input_ids", "input_mask", "segment_ids")]
    if head == "classifier":
        label_ids = tf.zeros([len(inputs["input_ids"])], tf.int32)
        _, _, logits, probabilities = create_model("run_classifier", modeling, shim)(
            config, False, *features, label_ids, labels, False)
        fetch = {"logits": logits, "probabilities": probabilities}
    else:
        start, end = create_model("run_squad", modeling, shim)(config, False, *features, False)
        fetch = {"start_logits": start, "end_logits": end}
    variables = tf.trainable_variables()
    assignment, restored = modeling.get_assignment_map_from_checkpoint(variables, checkpoint)
    # run_squad.py's model never reads BertModel's pooler, nor does ours have one to export: left at its init.
    unused = "bert/pooler/" if head == "squad" else None
    missing = [v.name for v in variables if v.name not in restored and not (unused and v.name.startswith(unused))]
    if missing:
        sys.exit(f"not in {checkpoint}: {', '.join(missing)}")
    tf.train.init_from_checkpoint(checkpoint, assignment)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        outputs = session.run(fetch)
    # What the reference's graph restored, by name and shape: the golden a run without its code checks against.
    restored_variables = sorted([v.name.split(":")[0], v.shape.as_list()] for v in variables if v.name in restored)
    return dict(outputs, variables=np.array(json.dumps(restored_variables)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--inputs", required=True)
    p.add_argument("--head", choices=("classifier", "squad"), required=True)
    p.add_argument("--labels", type=int, default=2)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with np.load(args.inputs) as inputs:
        outputs = run(args.checkpoint, dict(inputs), args.head, args.labels)
    np.savez(args.out, **outputs)


if __name__ == "__main__":
    main()
