"""`checkpoint run`: a checkpoint's outputs on given inputs with dropout off, through this trainer's
Keras model (TensorFlow or JAX backend): sequence_output [N, L, H], pooled_output [N, H] and, with the
pretraining heads, mlm_logits [N, P, V] at masked_lm_positions and nsp_logits [N, 2]."""

import dataclasses
import json

import numpy as np

from bertprep.errors import DataError

FEATURES = ("input_ids", "input_mask", "segment_ids")


def read_inputs(path):
    """{feature: int32 [N, L]} (and masked_lm_positions [N, P] where given) of a JSON-lines file or a
    records file (TFRecord / OFRecord)."""
    with open(path, "rb") as f:
        first = f.read(1)
    if first == b"{":
        rows = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as exc:
                        raise DataError(f"{path}: line {number}: not JSON: {exc}") from None
    else:
        from bertprep.formats import read_records

        rows = list(read_records(path))
    if not rows:
        raise DataError(f"{path}: no inputs")
    keys = [*FEATURES, *(["masked_lm_positions"] if all("masked_lm_positions" in r for r in rows) else [])]
    inputs = {}
    for key in keys:
        try:
            inputs[key] = np.asarray([np.asarray(r[key], dtype=np.int64) for r in rows]).astype(np.int32)
        except (KeyError, ValueError) as exc:
            raise DataError(f"{path}: every input needs {key} of one length ({exc.__class__.__name__}: {exc})") from None
        if inputs[key].ndim != 2:
            raise DataError(f"{path}: {key} must be a list of integers of the same length in every input")
    return inputs


def build(checkpoint, seq, pred):
    """Our Keras model of the checkpoint's config (dropout off), its weights assigned."""
    import keras

    from trainer.model import BertEncoder, build_model, symbolic_inputs, variables_initialized_together

    # Their outputs are float32's; the dtype policy is global, and a run before in this process (a
    # mixed-precision training run) may have left another.
    keras.config.set_dtype_policy("float32")
    config = dataclasses.replace(checkpoint.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if checkpoint.has_heads:
        model = build_model(config, seq, max(pred, 1))
    else:
        model = BertEncoder(config, name="bert")
        with variables_initialized_together():
            model.pool(model.encode(symbolic_inputs(1, seq)))
    assign(model, checkpoint.ours(), checkpoint.path)
    return model


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
    """{name: float32 array} over all inputs, in batches."""
    from keras import ops

    seq = inputs["input_ids"].shape[1]
    if seq > checkpoint.config.max_position_embeddings:
        raise DataError(f"inputs have length {seq}, the checkpoint's model has "
                        f"{checkpoint.config.max_position_embeddings} positions")
    too_big = int(inputs["input_ids"].max())
    if too_big >= checkpoint.config.vocab_size:
        raise DataError(f"inputs hold token id {too_big}, the checkpoint's vocab_size is {checkpoint.config.vocab_size}")
    with_heads = checkpoint.has_heads and "masked_lm_positions" in inputs
    pred = inputs["masked_lm_positions"].shape[1] if with_heads else 0
    model = build(checkpoint, seq, pred)
    parts = {}
    for start in range(0, len(inputs["input_ids"]), batch_size):
        batch = {k: v[start:start + batch_size] for k, v in inputs.items()}
        sequence = model.encode(batch)
        pooled = model.pool(sequence)
        got = {"sequence_output": sequence, "pooled_output": pooled}
        if with_heads:
            mlm, nsp = model(batch)
            got.update(mlm_logits=mlm, nsp_logits=nsp)
        for name, value in got.items():
            parts.setdefault(name, []).append(np.asarray(ops.convert_to_numpy(value), dtype=np.float32))
    return {name: np.concatenate(values) for name, values in parts.items()}
