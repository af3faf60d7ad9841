"""Packed rows from pretraining instances and back: the MLPerf packed layout, in NumPy
(docs/reference-facts.md, "Packed rows: the MLPerf layout").

A row of `seq` tokens holds up to k instances one after the other:

    input_ids, segment_ids    each instance's, then 0 (padding)
    input_mask                i over the tokens of the row's i-th instance (1..k), then 0
    positions                 0, 1, … within each instance, then 0
    masked_lm_positions       each instance's masked positions plus its offset in the row,
    masked_lm_ids               the row's instances in order, then 0 (pred + k slots)
    masked_lm_weights         i for the predictions of the i-th instance, then 0.0
    next_sentence_positions   each instance's offset (its [CLS]), then 0 (k slots)
    next_sentence_labels      each instance's label, then 0
    next_sentence_weights     1.0 for each instance, then 0.0

`pack_rows` and `unpack_rows` are inverses: unpacking gives every instance
back unchanged, field for field (what `validate --compare` proves on files).
"""

import numpy as np

from bertprep.formats.schemas import PACKED, PRETRAINING


def pack_rows(instances, members, k, pred):
    """The packed rows {name: (rows, length)} (integers int64, weights float32) of `instances`
    (pretraining fields, (n, length) arrays) grouped by `members`: (rows, k) indices into them, -1 pads.

    The caller guarantees each row fits: its instances' lengths sum to at most
    seq and their predictions to at most pred + k.
    """
    ids = instances["input_ids"]
    seq = ids.shape[1]
    rows = len(members)
    lengths = (instances["input_mask"] != 0).sum(axis=1)
    predictions = (instances["masked_lm_weights"] != 0).sum(axis=1)
    present = members >= 0
    source = np.where(present, members, 0)
    token_offsets = _exclusive_cumsum(np.where(present, lengths[source], 0))
    slot_offsets = _exclusive_cumsum(np.where(present, predictions[source], 0))
    out = {f.name: np.zeros((rows, f.size({"seq": seq, "pred": pred, "k": k})),
                            np.float32 if f.dtype == "float" else np.int64) for f in PACKED.features}
    for slot in range(members.shape[1]):
        row_of = np.flatnonzero(present[:, slot])
        instance = source[row_of, slot]
        # every (row, token) of this slot's instances
        r, t = np.nonzero(np.arange(seq) < lengths[instance][:, None])
        at = token_offsets[row_of[r], slot] + t
        out["input_ids"][row_of[r], at] = ids[instance[r], t]
        out["segment_ids"][row_of[r], at] = instances["segment_ids"][instance[r], t]
        out["input_mask"][row_of[r], at] = slot + 1
        out["positions"][row_of[r], at] = t
        r, s = np.nonzero(np.arange(instances["masked_lm_positions"].shape[1]) < predictions[instance][:, None])
        at = slot_offsets[row_of[r], slot] + s
        out["masked_lm_positions"][row_of[r], at] = (instances["masked_lm_positions"][instance[r], s]
                                                     + token_offsets[row_of[r], slot])
        out["masked_lm_ids"][row_of[r], at] = instances["masked_lm_ids"][instance[r], s]
        out["masked_lm_weights"][row_of[r], at] = slot + 1
        out["next_sentence_positions"][row_of, slot] = token_offsets[row_of, slot]
        out["next_sentence_labels"][row_of, slot] = instances["next_sentence_labels"][instance, 0]
        out["next_sentence_weights"][row_of, slot] = 1.0
    return out


def _exclusive_cumsum(values):
    return np.cumsum(values, axis=1) - values


def sequences_per_row(rows):
    """How many instances each packed row holds (its largest input_mask value)."""
    return rows["input_mask"].max(axis=1, initial=0)


def unpack_rows(rows, pred):
    """The instances of packed rows whose layout is sound (validate.packed checks it first), in
    pack order: (instances {name: (n, length)} with `pred` prediction slots, row (n,), slot (n,),
    offset (n,)). Integers come back int64, weights float32.

    Raises ValueError when an instance has more than `pred` predictions: no
    pretraining record of that shape holds it.
    """
    mask = rows["input_mask"]
    seq = mask.shape[1]
    k = rows["next_sentence_positions"].shape[1]
    held = sequences_per_row(rows)
    row, slot = np.nonzero(np.arange(k) < held[:, None])  # row-major: pack order
    number = slot + 1
    lengths = (mask[row] == number[:, None]).sum(axis=1)
    offsets = rows["next_sentence_positions"][row, slot].astype(np.int64)
    weights = rows["masked_lm_weights"]
    mine = weights[row] == number[:, None]  # (n, pred + k): this instance's prediction slots
    predictions = mine.sum(axis=1)
    if len(predictions) and predictions.max() > pred:
        worst = int(np.argmax(predictions))
        raise ValueError(f"row {int(row[worst])} sequence {int(number[worst])} has {int(predictions[worst])} "
                         f"predictions, more than pred = {pred}")
    n = len(row)
    out = {f.name: np.zeros((n, f.size({"seq": seq, "pred": pred})), np.float32 if f.dtype == "float" else np.int64)
           for f in PRETRAINING.features}
    i, t = np.nonzero(np.arange(seq) < lengths[:, None])
    at = offsets[i] + t
    out["input_ids"][i, t] = rows["input_ids"][row[i], at]
    out["segment_ids"][i, t] = rows["segment_ids"][row[i], at]
    out["input_mask"][i, t] = 1
    i, s = np.nonzero(mine)
    rank = np.cumsum(mine, axis=1)[i, s] - 1  # the slot's place among the instance's predictions
    out["masked_lm_positions"][i, rank] = rows["masked_lm_positions"][row[i], s] - offsets[i]
    out["masked_lm_ids"][i, rank] = rows["masked_lm_ids"][row[i], s]
    out["masked_lm_weights"][i, rank] = 1.0
    out["next_sentence_labels"][:, 0] = rows["next_sentence_labels"][row, slot]
    return out, row, slot, offsets
