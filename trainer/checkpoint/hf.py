"""Hugging Face BERT: a directory with `config.json` and `model.safetensors` (or `pytorch_model.bin`),
`BertModel` or `BertForPreTraining` names with or without the `bert.` prefix, or a hub id resolved
through huggingface_hub and its cache (offline under HF_HUB_OFFLINE=1). Written as
`BertForPreTraining.save_pretrained` writes it: safetensors, tied decoder left out."""

import importlib.util
import itertools
import json
import os
import re

import numpy as np

from bertprep.bert_config import read_json_object
from bertprep.errors import DataError, UsageError
from trainer.checkpoint import names, task_heads
from trainer.checkpoint.base import LOST, checked, vocab_beside
from trainer.config import BertConfig

KIND = "hf"
HELD = "a Hugging Face checkpoint (config.json with model.safetensors or pytorch_model.bin)"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Weights a Hugging Face directory may hold in a form not read here: sharded, TensorFlow's, Flax's.
UNREAD_WEIGHT_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json", "tf_model.h5",
                       "flax_model.msgpack")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# config.json keys that carry a BERT config value (the same names as bert_config.json's).
_CONFIG_KEYS = [field for field in BertConfig().to_dict()]
# Hugging Face's activation names -> ours: "gelu" is the exact GELU, "gelu_new" (and the fused
# "gelu_pytorch_tanh") the tanh approximation of google-research/bert's modeling.py.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def _weights_file(path):
    for name in WEIGHT_FILES:
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return None


def sniff(path):
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")) and _weights_file(path) is not None


def lost_file(path):
    """What the directory `path` lacks where it holds one of config.json and a weights file but not the other, else
    None (sniff: no). Weights in a form not read here (shards, TF's or Flax's file) are named as that."""
    if not os.path.isdir(path):
        return None
    config, weights = os.path.isfile(os.path.join(path, "config.json")), _weights_file(path)
    unread = next((name for name in UNREAD_WEIGHT_FILES if os.path.isfile(os.path.join(path, name))), None)
    if config and weights is None and unread:
        return (f"config.json of a Hugging Face checkpoint whose weights are in {unread}, which this trainer does "
                f"not read: save the model with transformers' save_pretrained as one {WEIGHT_FILES[0]}")
    if config and weights is None:
        return f"config.json of a Hugging Face checkpoint without its weights ({' or '.join(WEIGHT_FILES)}): {LOST}"
    if weights and not config:
        return (f"{os.path.basename(weights)} of a Hugging Face checkpoint without its config.json (the model's "
                f"size): {LOST}")
    return None


def looks_like_hub_id(path):
    return not os.path.exists(path) and bool(_HUB_ID.match(path)) and not path.endswith((".ckpt", ".pt", ".bin"))


def _from_hub(model_id):
    if importlib.util.find_spec("huggingface_hub") is None:
        raise UsageError(f"{model_id}: a hub id needs huggingface_hub: pip install 'bertprep[checkpoints]'")
    from huggingface_hub import snapshot_download

    from bertprep import storage
    from bertprep.stages.download.http import Limits
    from bertprep.stages.download.hub import bounded_hub

    # each request waits for a byte at most what a store's does (BERTPREP_STORE_READ_TIMEOUT), as a vocab named by
    # hub id (bertprep.tokenization): a hub that never answered held the read for ever, and the hub's retry lines
    # (the endpoint's password with them) came before the error, which is ours, one line
    limits = Limits(stall=storage.store_limits()[1])
    try:
        with bounded_hub(limits, quiet=True):
            return snapshot_download(model_id, allow_patterns=["config.json", "vocab.txt", *WEIGHT_FILES])
    except Exception as exc:  # offline cache miss, unknown repo, network: one line
        raise DataError(f"{model_id}: not a directory and not found on the Hugging Face hub or in its cache "
                        f"({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def read_config(path):
    config_path = os.path.join(path, "config.json")
    values = read_json_object(config_path, DataError, "Hugging Face config keys", "cannot read")
    if values.get("model_type", "bert") != "bert":
        raise DataError(f"{config_path}: model_type {values.get('model_type')!r} is another architecture "
                        "(expected 'bert')")
    activation = values.get("hidden_act", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise DataError(f"{config_path}: hidden_act {activation!r} is not BERT's (expected one of "
                        f"{', '.join(HF_ACTIVATIONS)})")
    values["hidden_act"] = HF_ACTIVATIONS[activation]
    for key, expected in (("layer_norm_eps", 1e-12), ("position_embedding_type", "absolute")):
        if key in values and values[key] != expected:
            raise DataError(f"{config_path}: {key} {values[key]!r} is not BERT's ({expected!r})")
    missing = [key for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size") if key not in values]
    if missing:
        raise DataError(f"{config_path}: no {missing[0]}")
    return BertConfig.checked(config_path, {key: values[key] for key in _CONFIG_KEYS if key in values}, DataError)


def _load_state(weights_file):
    if weights_file.endswith(".safetensors"):
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(weights_file, framework="np") as f:
                bfloat16 = {name for name in f.keys() if f.get_slice(name).get_dtype() == "BF16"}
                state = {name: f.get_tensor(name) for name in f.keys() if name not in bfloat16}
            return {**state, **_bfloat16_tensors(weights_file, bfloat16)}
        except (SafetensorError, OSError, ValueError) as exc:
            raise DataError(f"{weights_file}: unreadable safetensors file: {exc}") from None
    return load_torch(weights_file)


def _bfloat16_tensors(weights_file, names):
    """{name: float32 array} of the BF16 tensors `names` of a safetensors file (a model transformers saved in
    bfloat16): NumPy has no bfloat16, so safetensors.numpy fails on them ("data type 'bfloat16' not understood",
    a traceback). A bfloat16 is the high half of a float32's bits: widened exactly."""
    found = {}
    with open(weights_file, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))  # read and checked by safe_open already
        for name in sorted(names):
            start, end = header[name]["data_offsets"]
            f.seek(8 + length + start)
            bits = np.frombuffer(f.read(end - start), dtype="<u2").astype("<u4") << 16
            found[name] = bits.view("<f4").reshape(header[name]["shape"])
    return found


def load_torch(weights_file, key=None):
    """{name: float array} of a torch state dict (`key` picks it out of a larger object)."""
    if importlib.util.find_spec("torch") is None:
        raise UsageError(f"{weights_file}: a PyTorch checkpoint needs torch: pip install 'bertprep[checkpoints]'")
    import torch

    try:
        state = torch.load(weights_file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError ... on a damaged file
        raise DataError(f"{weights_file}: unreadable PyTorch checkpoint: {str(exc).splitlines()[0]}") from None
    if key is not None:
        if not isinstance(state, dict) or not isinstance(state.get(key), dict):
            raise DataError(f"{weights_file}: no {key!r} state dict in it")
        state = state[key]
    return {name: value.float().numpy() if value.is_floating_point() else value.numpy()
            for name, value in state.items() if hasattr(value, "numpy")}


def google_names(source, state):
    """{Google name: Google-layout array} of a Hugging Face state dict, and the names skipped."""
    by_hf, spelled = {}, {}
    for name, value in state.items():
        canonical = names.canonical_hf_name(name)
        _refuse_two_values(source, canonical, spelled.get(canonical), by_hf.get(canonical), name, value)
        by_hf[canonical], spelled[canonical] = value, name
    found = {}
    mapped = set()
    for row in names.rows(_LayerCount(by_hf)):
        if row.hf in by_hf:
            found[row.google] = names.from_layout(by_hf[row.hf], row.hf_layout)
            mapped.add(row.hf)
    decoder = by_hf.get("cls.predictions.decoder.weight")
    if decoder is not None and "bert.embeddings.word_embeddings.weight" in by_hf and not np.array_equal(
            decoder, by_hf["bert.embeddings.word_embeddings.weight"]):
        raise DataError(f"{source}: cls.predictions.decoder.weight differs from the word embeddings "
                        "(BERT ties them)")
    skipped = []
    # sorted: a set's order moves with PYTHONHASHSEED, and the error named another variable each run
    for name in sorted(set(by_hf) - mapped):
        if name in names.HF_DERIVED:
            continue
        if name.startswith("bert."):  # the file's own spelling: `bert.foo.bar` was said of a file holding `foo.bar`
            raise DataError(f"{source}: variable {spelled[name]} is not part of BERT: another architecture?")
        skipped.append(name)
    return found, skipped


def _refuse_two_values(source, canonical, first, first_value, name, value):
    """A DataError where `name` and the earlier `first` spell the same variable (`module.`, no `bert.`, LayerNorm's
    gamma/beta) with other values: the later one was kept, the other dropped in silence. Equal copies lose nothing."""
    if first is not None and not np.array_equal(first_value, value):
        raise DataError(f"{source}: variables {first} and {name} are both {canonical} and their values differ: "
                        "which one is meant? Keep one of them")


class _LayerCount:
    """As many layers as the state dict holds, so that every layer's names are tried."""

    def __init__(self, by_hf):
        layers = [int(m.group(1)) for n in by_hf if (m := re.match(r"bert\.encoder\.layer\.(\d+)\.", n))]
        self.num_hidden_layers = max(layers) + 1 if layers else 0


def read(path):
    directory = path if os.path.isdir(path) else _from_hub(path)
    if not sniff(directory):
        raise DataError(f"{path}: no config.json and model.safetensors / pytorch_model.bin in {directory}")
    config = read_config(directory)
    weights_file = _weights_file(directory)
    state = _load_state(weights_file)
    found, skipped = google_names(weights_file, state)
    # BertForSequenceClassification's classifier.* or BertForQuestionAnswering's qa_outputs.*: a fine-tune's head,
    # its labels and task from config.json, carried by convert
    by_name = {names.canonical_hf_name(name): value for name, value in state.items()}
    values = _config_values(directory)
    offered, other_head = task_heads.without_other_hf_classifier(
        values, {name: by_name[name] for name in skipped if name in task_heads.FOREIGN_NAMES})
    head, head_weights, taken = task_heads.from_foreign(weights_file, offered, config.hidden_size,
                                                        task_heads.hf_settings(values))
    skipped = [name for name in skipped if name not in taken]
    checkpoint = checked(KIND, weights_file, config, found, vocab_beside(directory), skipped)
    checkpoint.notes.extend([other_head] if other_head else [])
    return task_heads.attach(checkpoint, head, head_weights)


def _config_values(directory):
    return read_json_object(os.path.join(directory, "config.json"), DataError, "Hugging Face config keys",
                            "cannot read")


def write(checkpoint, directory):
    """config.json + model.safetensors of a BertForPreTraining (or BertModel without heads, with or without
    a pooler); the checkpoint's weights are consumed."""
    rows, head = checkpoint.rows(), task_heads.hf_tensors(checkpoint)  # a fine-tune's head: same layout
    write_safetensors(os.path.join(directory, "model.safetensors"),
                      [(row.hf, checkpoint.weights[row.google].shape[::-1] if row.hf_layout == "T"
                        else checkpoint.weights[row.google].shape) for row in rows]
                      + [(hf, checkpoint.weights[google].shape) for hf, google in head],
                      itertools.chain((names.to_layout(checkpoint.take(row.google), row.hf_layout, 1) for row in rows),
                                      (checkpoint.take(google) for _, google in head)))
    config = dict(checkpoint.config.to_dict(), model_type="bert",
                  hidden_act={"gelu": "gelu", "gelu_tanh": "gelu_new"}[checkpoint.config.hidden_act],
                  layer_norm_eps=1e-12, pad_token_id=0,
                  position_embedding_type="absolute", tie_word_embeddings=True,
                  architectures=["BertForPreTraining" if checkpoint.has_heads else "BertModel"])
    config.update(task_heads.hf_config(checkpoint))  # a fine-tune's model class and labels
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    return directory


def write_safetensors(path, shapes, arrays):
    """A float32 safetensors file of [(name, shape)] whose values `arrays` yields one at a time, in order.

    safetensors.numpy.save_file holds a bytes copy of every tensor until the file is written (BERT-large
    to hf peaked at 1.96 copies of the weights above the imports, scripts/bench_checkpoint_convert.py);
    the format (8-byte little-endian header length, JSON header of dtype/shape/data_offsets, the raw
    bytes) lets each tensor go as soon as it is written. safetensors itself reads the result (tests)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for (name, shape), array in zip(shapes, arrays):
            array = np.ascontiguousarray(array, dtype="<f4")
            if array.shape != tuple(shape):
                raise ValueError(f"{name}: shape {array.shape}, header says {tuple(shape)}")
            f.write(memoryview(array).cast("B"))
