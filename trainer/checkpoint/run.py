"""`checkpoint run`: a checkpoint's outputs on given inputs with dropout off, through this trainer's
Keras model (TensorFlow or JAX backend): sequence_output [N, L, H], pooled_output [N, H] (where the
checkpoint has a pooler) and, with the pretraining heads, mlm_logits [N, P, V] at masked_lm_positions and
nsp_logits [N, 2]; with a fine-tune's head, its logits [N, outputs] (a classifier) or start_logits and end_logits
[N, L] (SQuAD)."""

import dataclasses
import json
import os

import numpy as np

from bertprep.errors import DataError
from bertprep.formats.schemas import INT32_RANGE, KINDS, PACKED, first_outside, is_integer
from bertprep.jsonlines import json_lines
from bertprep.options import check_argument

FEATURES = ("input_ids", "input_mask", "segment_ids")
POSITIONS = "masked_lm_positions"
JSON_LINES_SUFFIXES = (".jsonl", ".json", ".ndjson")
INT32_MAX = INT32_RANGE[1]  # what the records readers hold an integer feature in; no input is negative
# Each feature's largest value known before the checkpoint is read (the vocab and the type vocab are its).
_HIGHEST = {"input_ids": INT32_MAX, "input_mask": 1, "segment_ids": INT32_MAX, POSITIONS: INT32_MAX}


@dataclasses.dataclass
class Inputs:
    """The inputs of `checkpoint run`: {feature: int32 [N, L]} (and masked_lm_positions [N, P] when
    every input has them), and where each input came from ("line 3", "record 0") for the messages."""

    path: str
    arrays: dict
    places: list

    @property
    def seq(self):
        return self.arrays["input_ids"].shape[1]

    def check_fits(self, config):
        """Every input fits the checkpoint's model: its positions, its vocab, its segment types."""
        if self.seq > config.max_position_embeddings:
            raise DataError(f"{self.path}: {self.places[0]}: input_ids has {self.seq} tokens, the checkpoint's model "
                            f"has {config.max_position_embeddings} positions")
        for key, size, what in (("input_ids", config.vocab_size, "vocab_size"),
                                ("segment_ids", config.type_vocab_size, "type_vocab_size")):
            self.check_below(key, size, f"the checkpoint's {what} {size}")

    def check_below(self, key, limit, what):
        """Every value of `key` below `limit` (`what` it is), else the first that is not, by line and index."""
        outside = first_outside(self.arrays[key], 0, limit - 1)
        if outside is not None:
            row, column = outside
            raise DataError(f"{self.path}: {self.places[row]}: {key}[{column}] is {self.arrays[key][row, column]}, "
                            f"expected less than {what}")


def read_inputs(path):
    """The Inputs of a JSON-lines file (one object per line) or a records file (TFRecord / OFRecord /
    HDF5 / Parquet), every value checked: integers in their feature's range, one length for all. `path` is a str
    or a path object, as read's is: a pathlib.Path was an AttributeError traceback ('PosixPath' has no endswith)."""
    path = os.fspath(check_argument("read_inputs's path", path, str))
    if _is_json_lines(path):
        rows, places = _json_lines(path)
    else:
        from bertprep.formats import read_records

        rows = list(read_records(path))
        places = [f"record {index}" for index in range(len(rows))]
    if not rows:
        raise DataError(f"{path}: no inputs")
    keys = [*FEATURES, *([POSITIONS] if _with_positions(path, rows, places) else [])]
    _check_lengths(path, rows, places, keys)
    inputs = Inputs(path, {key: np.stack([_integers(path, place, key, row) for row, place in zip(rows, places)])
                           for key in keys}, places)
    if POSITIONS in inputs.arrays:
        inputs.check_below(POSITIONS, inputs.seq, f"the sequence length {inputs.seq}")
    return inputs


def _is_json_lines(path):
    """By the name; else a file that starts with "{" (a record file's first byte is its length's) or holds
    nothing but white space (no records either)."""
    if path.endswith(JSON_LINES_SUFFIXES):
        return True
    with open(path, "rb") as f:
        head = f.read(1 << 16)
        return head[:1] == b"{" or (not head.strip() and not f.read(1))


def _json_lines(path):
    rows, places = [], []
    for number, row in json_lines(path, lambda number, exc: DataError(f"{path}: line {number}: not JSON: {exc}")):
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number}: expected a JSON object of {', '.join(FEATURES)}, got "
                            f"{type(row).__name__} {_shown(row)}")
        _check_fields(path, number, row)
        rows.append(row)
        places.append(f"line {number}")
    return rows, places


def _check_fields(path, number, row):
    """Every key of a JSON line is an input or a field of a bertprep record (its labels and ids, ignored: the
    fixture's lines are pretraining records). Any other is refused: a misspelt masked_lm_positions would
    silently drop the MLM and NSP outputs, a packed row's positions would be read as one sequence."""
    known = {name for kind in KINDS.values() if kind is not PACKED for name in kind.names}
    unknown = next((key for key in row if key not in known), None)
    if unknown is not None:
        raise DataError(f"{path}: line {number}: unknown field {_shown(unknown)} (expected {', '.join(FEATURES)}, "
                        f"{POSITIONS}; a bertprep record's other fields, such as masked_lm_ids, are ignored)")


def _with_positions(path, rows, places):
    """Whether every input has masked_lm_positions (MLM and NSP outputs for all) or none does."""
    having = [POSITIONS in row for row in rows]
    if all(having) or not any(having):
        return having[0]
    lacking = places[having.index(False)]
    raise DataError(f"{path}: {lacking}: no {POSITIONS}, which {places[having.index(True)]} has "
                    "(give them on every input or on none)")


def _check_lengths(path, rows, places, keys):
    """Every input has every key; the encoder's features as many values as the first input's input_ids,
    masked_lm_positions as many as the first input's."""
    first = {key: _length(path, places[0], rows[0], key) for key in keys}
    if not first["input_ids"]:
        raise DataError(f"{path}: {places[0]}: input_ids is empty")
    for row, place in zip(rows, places):
        for key in keys:
            like = "input_ids" if key in FEATURES else key
            got = _length(path, place, row, key)
            if got != first[like]:
                raise DataError(f"{path}: {place}: {key} has {got} values, expected {first[like]} as {places[0]}'s "
                                f"{like} (every input has one length)")


def _length(path, place, row, key):
    if key not in row:
        raise DataError(f"{path}: {place}: no {key}")
    value = row[key]
    if not isinstance(value, (list, np.ndarray)) or np.ndim(value) != 1:
        raise DataError(f"{path}: {place}: {key} is {_shown(value)}, expected a list of integers")
    return len(value)


def _integers(path, place, key, row):
    """row[key] as int32, every value an integer in [0, the feature's highest]: never truncated or wrapped."""
    value = row[key]
    if isinstance(value, np.ndarray):
        if not np.issubdtype(value.dtype, np.integer):
            raise DataError(f"{path}: {place}: {key} is {value.dtype}, expected integers")
        array = value
    else:
        for index, item in enumerate(value):
            if not is_integer(item):  # a float, a bool, a string: refused, never truncated
                raise DataError(f"{path}: {place}: {key}[{index}] is {_shown(item)}, expected an integer")
        # Held just past the range: an integer beyond int64 is reported below, not an OverflowError.
        array = np.array([min(max(item, -1), INT32_MAX + 1) for item in value], np.int64)
    outside = first_outside(array, 0, _HIGHEST[key])
    if outside is not None:
        (index,) = outside
        raise DataError(f"{path}: {place}: {key}[{index}] is {value[index]}, expected an integer from 0 to "
                        f"{_HIGHEST[key]}")
    return array.astype(np.int32)


def _shown(value):
    text = json.dumps(value) if isinstance(value, (int, float, str, list, dict, type(None))) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def build(checkpoint, seq, pred):
    """Our Keras model of the checkpoint's config (dropout off), its weights assigned."""
    import keras

    from trainer.model import BertEncoder, build_model, symbolic_inputs, variables_initialized_together

    # Their outputs are float32's; the dtype policy is global, and a run before in this process (a
    # mixed-precision training run) may have left another.
    keras.config.set_dtype_policy("float32")
    config = dataclasses.replace(checkpoint.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    def assigned(model):
        return assigned_paths(model, checkpoint.our_paths())

    if checkpoint.has_heads:
        model = build_model(config, seq, max(pred, 1), assigned=assigned)
    else:
        model = BertEncoder(config, with_pooler=checkpoint.has_pooler, name="bert")
        with variables_initialized_together() as not_drawn:
            model(symbolic_inputs(1, seq))
            not_drawn.update(assigned(model))
    assign(model, checkpoint.ours(), checkpoint.path)
    return model


def assigned_paths(model, paths, skip=()):
    """The paths of the variables that assign(model, weights, …, skip) gives a checkpoint's value, for a
    checkpoint holding `paths`: model.variables_initialized_together does not draw them. (One that assign
    would refuse, of another shape, is among them: the run then ends in assign's error.)"""
    return {v.path for v in model.trainable_variables if v.path not in skip and v.path in paths}


def assign(model, weights, path, skip=()):
    """Every model variable not in `skip` gets the checkpoint's value; returns how many."""
    loaded = 0
    for variable in model.trainable_variables:
        if variable.path in skip:
            continue
        if variable.path not in weights:
            raise DataError(f"{path}: checkpoint lacks variable {variable.path}")
        value = _with_vocab_padding(model, weights[variable.path], variable.shape)
        if tuple(value.shape) != tuple(variable.shape):
            raise DataError(f"{path}: variable {variable.path} has shape {value.shape}, the model's is "
                            f"{tuple(variable.shape)}")
        variable.assign(value)
        loaded += 1
    return loaded


def _with_vocab_padding(model, value, shape):
    """--pad-vocab: a checkpoint's real vocabulary rows, with the model's zero padding rows put back
    (only where the rows are exactly the config's vocab and the model's are its padded count)."""
    value = np.asarray(value)
    padded = getattr(model, "padded_vocab", None)
    if (padded is None or not value.ndim or len(shape) != value.ndim or value.shape[0] != model.config.vocab_size
            or shape[0] != padded or padded == value.shape[0]):
        return value
    return np.concatenate([value, np.zeros((padded - value.shape[0],) + value.shape[1:], value.dtype)])


def outputs(checkpoint, inputs, batch_size=32):
    """{name: float32 array} over all `inputs` (an Inputs, checked against the checkpoint), in batches."""
    from keras import ops

    inputs.check_fits(checkpoint.config)
    arrays = inputs.arrays
    seq = arrays["input_ids"].shape[1]
    with_heads = checkpoint.has_heads and POSITIONS in arrays
    pred = arrays[POSITIONS].shape[1] if with_heads else 0
    model = build(checkpoint, seq, pred)
    parts = {}
    for start in range(0, len(arrays["input_ids"]), batch_size):
        batch = {k: v[start:start + batch_size] for k, v in arrays.items()}
        sequence = model.encode(batch)
        got = {"sequence_output": sequence, **({"pooled_output": model.pool(sequence)} if checkpoint.has_pooler
                                               else {})}
        if with_heads:  # on the sequence output above: the encoder runs once per batch
            mlm, nsp = model.heads(sequence, batch)
            got.update(mlm_logits=mlm, nsp_logits=nsp)
        if checkpoint.task_head is not None:
            got.update(_task_head_logits(checkpoint, got))
        for name, value in got.items():
            parts.setdefault(name, []).append(np.asarray(ops.convert_to_numpy(value), dtype=np.float32))
    return {name: np.concatenate(values) for name, values in parts.items()}


def _task_head_logits(checkpoint, got):
    """A fine-tune's head on the encoder's outputs `got`, as trainer/heads.py computes it with dropout off: a
    classifier's `logits` [N, outputs] on the pooled [CLS], SQuAD's `start_logits` and `end_logits` [N, L] on every
    token (transformers' names). The run gave the encoder's outputs alone, the head read and left out unsaid."""
    from keras import ops

    from trainer.checkpoint.task_heads import google_names

    head = checkpoint.task_head
    weight, bias = (checkpoint.weights[name] for name in google_names(head))  # Google's layout: [outputs, hidden]
    on = ops.convert_to_numpy(got["sequence_output" if head.kind == "squad" else "pooled_output"])
    logits = np.matmul(np.asarray(on, np.float32), weight.T) + bias
    if head.kind == "squad":
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
    return {"logits": logits}
