"""Google's TF1 checkpoints (`bert_model.ckpt.{index,data-*}` + `bert_config.json`), as released and
as google-research/bert's and NVIDIA's TF scripts write them (with optimizer slots and global_step,
skipped). Read with TensorFlow's own checkpoint reader, written with its own SaveV2 op, so
google-research/bert's `init_from_checkpoint` finds every variable by name."""

import dataclasses
import glob
import json
import os

from bertprep.errors import DataError, UsageError
from trainer.checkpoint import names, task_heads
from trainer.checkpoint.base import LOST, checked, vocab_beside
from trainer.config import BertConfig

KIND = "google"
HELD = "a Google checkpoint (bert_model.ckpt)"
CONFIG = "bert_config.json"
PREFIX = "bert_model.ckpt"
CHUNK_BYTES = 1 << 28


def checkpoint_prefix(path):
    """The checkpoint prefix `path` names, or None."""
    if os.path.isfile(path + ".index"):
        return path
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, PREFIX + ".index")):
            return os.path.join(path, PREFIX)
        state = os.path.join(path, "checkpoint")  # TF's state file: model.ckpt-<step> of a training run
        if os.path.isfile(state):
            # errors="replace": another tool's binary file of that name holds no such line (it was a
            # UnicodeDecodeError traceback, whatever kind of checkpoint the directory held)
            with open(state, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("model_checkpoint_path:"):
                        name = line.split(":", 1)[1].strip().strip('"')
                        return name if os.path.isabs(name) else os.path.join(path, name)
    return None


def sniff(path):
    return checkpoint_prefix(path) is not None


def lost_file(path):
    """What a Google prefix `path` (or the bert_model.ckpt of the directory `path`) lacks where its .data-* files
    are there without its .index, which lists their variables (sniff looks for the .index alone), else None."""
    prefix = os.path.join(path, PREFIX) if os.path.isdir(path) else path
    data = sorted(glob.glob(glob.escape(prefix) + ".data-*"))
    if data and not os.path.isfile(prefix + ".index"):
        return (f"{os.path.basename(data[0])} of a Google checkpoint without its {os.path.basename(prefix)}.index "
                f"(the list of its variables): {LOST}")
    return None


def _tensorflow():
    try:
        import tensorflow as tf
    except ImportError:
        raise UsageError("reading or writing a TF checkpoint (bert_model.ckpt) needs TensorFlow: "
                         "pip install 'bertprep[train]' beside JAX") from None
    return tf


def read(path):
    prefix = checkpoint_prefix(path)
    if not os.path.isfile(prefix + ".index"):  # a TF state file's: it was TensorFlow's "Unsuccessful
        # TensorSliceReader constructor" of the .index, once TensorFlow had loaded, the state file unnamed
        raise DataError(f"{os.path.join(path, 'checkpoint')}: model_checkpoint_path names {prefix}, which has no "
                        f".index file (deleted or moved?): name a checkpoint prefix that is there")
    directory = os.path.dirname(prefix) or "."
    config_path = os.path.join(directory, CONFIG)
    if not os.path.isfile(config_path):
        raise DataError(f"{prefix}: no {CONFIG} beside the checkpoint (it gives the model's size)")
    # google-research/bert's modeling.py computes "gelu" with the tanh approximation.
    config = dataclasses.replace(BertConfig.from_json_file(config_path, DataError), hidden_act="gelu_tanh")
    tf = _tensorflow()
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as exc:
        raise DataError(f"{prefix}.index: unreadable TF checkpoint: {_first_line(exc)}") from None
    found, skipped, heads = {}, [], {}
    for name in shapes:
        # run_classifier.py's output_* or run_squad.py's cls/squad/output_*: a fine-tune's head, carried by convert
        into = heads if name in task_heads.FOREIGN_NAMES else found
        if into is found and (names.is_tf_training_state(name)
                              or not name.startswith(("bert/", "cls/predictions", "cls/seq_rel"))):
            skipped.append(name)
            continue
        try:
            into[name] = reader.get_tensor(name)
        except (tf.errors.OpError, ValueError, IndexError) as exc:  # IndexError: a data file cut short
            raise DataError(f"{prefix}.data-*: variable {name}: unreadable: {_first_line(exc)}") from None
    head, head_weights, taken = task_heads.from_foreign(prefix, heads, config.hidden_size, {})
    skipped += [name for name in heads if name not in taken]
    return task_heads.attach(checked(KIND, prefix, config, found, vocab_beside(directory), skipped), head,
                             head_weights)


def _first_line(exc):
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


def write(checkpoint, directory):
    """bert_model.ckpt.{index,data-00000-of-00001} + bert_config.json into `directory` (a staging one);
    the checkpoint's weights are consumed."""
    tf = _tensorflow()
    # One SaveV2 over every weight held them all twice (arrays and tensors: 2.16 copies of BERT-large above
    # the imports, scripts/bench_checkpoint_convert.py); parts of about CHUNK_BYTES, each saved and let go,
    # then merged by TensorFlow into one checkpoint (a data shard per part), keep it near one copy.
    parts, part, size = [], [], 0
    for name in sorted(checkpoint.weights):
        part.append(name)
        size += checkpoint.weights[name].nbytes
        if size >= CHUNK_BYTES:
            parts, part, size = parts + [part], [], 0
    parts += [part] if part else []
    prefixes = []
    with tf.device("CPU:0"):
        for i, part in enumerate(parts):
            prefixes.append(os.path.join(directory, f"part-{i}", PREFIX))
            tf.raw_ops.SaveV2(prefix=prefixes[-1], tensor_names=part, shape_and_slices=[""] * len(part),
                              tensors=[checkpoint.take(name) for name in part])
        tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=prefixes, destination_prefix=os.path.join(directory, PREFIX),
                                      delete_old_dirs=True)
    # Google's modeling.py knows one "gelu", the tanh approximation: an exact-GELU model (Hugging Face's,
    # ours) written here computes slightly differently there (about 1e-4), said in the summary's notes.
    if checkpoint.config.hidden_act != "gelu_tanh":
        checkpoint.notes.append("Google's modeling.py computes gelu with the tanh approximation; this model "
                                "was trained with the exact (erf) GELU")
    if checkpoint.task_head is not None and checkpoint.task_head.multi_label:  # written, its problem_type lost
        checkpoint.notes.append("the classifier head is multi-label (a sigmoid for each label): Google's "
                                "run_classifier.py scores it with a softmax, and its variables record neither "
                                "that nor the labels")
    with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as f:
        json.dump(dict(checkpoint.config.to_dict(), hidden_act="gelu"), f, indent=2, sort_keys=True)
    return os.path.join(directory, PREFIX)
