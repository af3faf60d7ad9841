"""What `bertprep validate` checks in packed rows (the MLPerf layout, bertprep.stages.pack.layout), and how
`--compare` proves a packed dataset holds exactly the instances of the one it was packed from.

A packed row is judged in two steps. Its layout first, as array expressions
over a batch of rows: sequences contiguous and numbered 1, 2, … in order,
positions restarting at 0 for each, padding zero, each prediction's weight
the index of the sequence its position lies in, `[CLS]` offsets and weights
for the sequences present. Rows whose layout is sound are then unpacked into
their instances, and every pretraining invariant (validate.pretraining) is
checked on each instance: one piece of code judges instances packed or not.
A finding inside a sequence names the row, the sequence and its offset.

Comparison: `pack` moves instances between rows, so a packed file and its
source are compared as multisets: every instance of the source file exactly
once among the unpacked rows, nothing else. Files are paired as
`compare_streams` pairs records: in natural order per split (pack writes one
file per source file, under the same name).
"""

import collections
import dataclasses

import numpy as np

from bertprep.formats.schemas import PRETRAINING
from bertprep.stages.pack.layout import sequences_per_row, unpack_rows
from bertprep.stages.validate import pretraining

LAYOUT_CHECKS = {
    "pack_mask": "input_mask 1…1 2…2 … then 0: each sequence contiguous, numbered in order",
    "pack_positions": "positions 0, 1, … restarting at each sequence; 0 in padding",
    "pack_padding": "input_ids and segment_ids 0 in padding",
    "pack_predictions": "weights the index of the sequence each masked position lies in, in sequence order, "
                        "then 0; at most pred per sequence",
    "pack_next_sentence": "next_sentence_positions at each sequence's [CLS], weights 1.0, then 0",
}
# What pretraining checks on each unpacked instance (its mask, padding and weights are the layout's).
SEQUENCE_CHECKS = ("cls", "sep", "segment_ids", "vocab", "masked_positions", "num_predictions",
                   "next_sentence_labels")
CHECKS = {**LAYOUT_CHECKS, **{check: pretraining.CHECKS[check] for check in SEQUENCE_CHECKS}}


@dataclasses.dataclass
class Derived:
    layout: dict  # layout check -> (N,) bool failures
    sound: np.ndarray  # (N,) rows whose layout is sound: unpacked below
    sequences: np.ndarray  # (N,) sequences per row (the largest input_mask value)
    instances: dict  # the instances of the sound rows, pretraining arrays
    row: np.ndarray  # per instance: its row in the batch, slot (0-based), offset in the row
    slot: np.ndarray
    offset: np.ndarray
    inner: object  # pretraining.Derived of the instances
    inner_fails: dict  # pretraining check -> (instances,) bool


def _pred(batch):
    return batch["masked_lm_positions"].shape[1] - batch["next_sentence_positions"].shape[1]


def _sequence_starts(mask):
    """(N, seq): where the sequence of each token begins (a token whose mask differs from the one before)."""
    cols = np.arange(mask.shape[1])
    begins = np.ones(mask.shape, bool)
    begins[:, 1:] = mask[:, 1:] != mask[:, :-1]
    return np.maximum.accumulate(np.where(begins, cols, 0), axis=1)


def _first_token(mask, k):
    """(N, k): the first token of sequence j + 1 in each row (0 where absent)."""
    return np.stack([np.argmax(mask == j + 1, axis=1) for j in range(k)], axis=1)


def layout_failures(batch, pred):
    """{layout check: (N,) bool}; a check whose premise (a sound input_mask) fails is not judged."""
    mask, ids, seg, positions = (batch[k] for k in ("input_mask", "input_ids", "segment_ids", "positions"))
    seq = mask.shape[1]
    k = batch["next_sentence_positions"].shape[1]
    step = mask[:, 1:] - mask[:, :-1]
    mask_ok = (((mask >= 0) & (mask <= k)).all(axis=1) & (mask[:, 0] == 1)
               & ((mask[:, 1:] == 0) | ((mask[:, :-1] > 0) & ((step == 0) | (step == 1)))).all(axis=1))
    held = sequences_per_row(batch)
    real = mask > 0
    fails = {"pack_mask": ~mask_ok}
    expected_positions = np.where(real, np.arange(seq) - _sequence_starts(mask), 0)
    fails["pack_positions"] = mask_ok & (positions != expected_positions).any(axis=1)
    fails["pack_padding"] = mask_ok & (((ids != 0) | (seg != 0)) & ~real).any(axis=1)
    weights, where, labels = (batch[k] for k in ("masked_lm_weights", "masked_lm_positions", "masked_lm_ids"))
    slot_real = weights != 0
    in_row = (where >= 0) & (where < seq)
    sequence_at = np.take_along_axis(mask, np.clip(where, 0, seq - 1), axis=1)
    weights_ok = ((weights == np.floor(weights)) & (weights >= 0) & (weights <= held[:, None])).all(axis=1)
    ordered = ((weights[:, 1:] == 0) | ((weights[:, :-1] > 0) & (weights[:, 1:] >= weights[:, :-1]))).all(axis=1)
    own = (~slot_real | (in_row & (sequence_at == weights))).all(axis=1)
    padding_slots = (slot_real | ((where == 0) & (labels == 0))).all(axis=1)
    per_sequence = np.stack([(weights == j + 1).sum(axis=1) for j in range(k)], axis=1)
    fails["pack_predictions"] = mask_ok & ~(weights_ok & ordered & own & padding_slots
                                            & (per_sequence <= pred).all(axis=1))
    present = np.arange(k) < held[:, None]
    nsp_positions, nsp_labels, nsp_weights = (batch[k] for k in (
        "next_sentence_positions", "next_sentence_labels", "next_sentence_weights"))
    starts = _first_token(mask, k)
    nsp_ok = np.where(present, (nsp_positions == starts) & (nsp_weights == 1.0),
                      (nsp_positions == 0) & (nsp_labels == 0) & (nsp_weights == 0.0))
    fails["pack_next_sentence"] = mask_ok & ~nsp_ok.all(axis=1)
    return fails


def derive(batch, spec):
    pred = _pred(batch)
    layout = layout_failures(batch, pred)
    sound = ~np.logical_or.reduce(list(layout.values()))
    sound_rows = np.flatnonzero(sound)
    instances, row, slot, offset = unpack_rows({name: values[sound_rows] for name, values in batch.items()}, pred)
    row = sound_rows[row]
    inner = pretraining.derive(instances, spec)
    inner_fails = pretraining.failure_masks(instances, inner, spec)
    return Derived(layout, sound, sequences_per_row(batch), instances, row, slot, offset, inner, inner_fails)


def failure_masks(batch, d, spec):
    fails = dict(d.layout)
    for check in SEQUENCE_CHECKS:
        failing = np.zeros(len(d.sound), bool)
        failing[d.row[d.inner_fails[check]]] = True
        fails[check] = failing
    return fails


def explain(check, batch, d, i, spec):
    """(field, message) for row `i` of the batch: where the layout breaks, or which sequence fails and why."""
    if check in SEQUENCE_CHECKS:
        j = int(np.flatnonzero((d.row == i) & d.inner_fails[check])[0])
        field, message = pretraining.explain(check, d.instances, d.inner, j, spec)
        length = int(d.inner.length[j])
        start = int(d.offset[j])
        return field, f"sequence {int(d.slot[j]) + 1} (tokens {start}–{start + length - 1}): {message}"
    mask = batch["input_mask"][i]
    seq = len(mask)
    k = batch["next_sentence_positions"].shape[1]
    if check == "pack_mask":
        bad = [t for t, v in enumerate(mask) if not 0 <= v <= k]
        if bad:
            return "input_mask", f"value {int(mask[bad[0]])} at {bad[0]}, expected 0 (padding) or 1…{k}"
        if mask[0] != 1:
            return "input_mask", f"input_mask[0] is {int(mask[0])}, expected 1 (a row starts with its first sequence)"
        t = next(t for t in range(1, seq) if mask[t] and not (mask[t - 1] and mask[t] - mask[t - 1] in (0, 1)))
        return "input_mask", (f"{int(mask[t])} at {t} after {int(mask[t - 1])}, expected {int(mask[t - 1])}, "
                              f"{int(mask[t - 1]) + 1} or 0" if mask[t - 1] else
                              f"{int(mask[t])} at {t} after padding, expected 0 to the end")
    if check == "pack_positions":
        expected = np.where(mask > 0, np.arange(seq) - _sequence_starts(mask[None])[0], 0)
        t = int(np.flatnonzero(batch["positions"][i] != expected)[0])
        return "positions", (f"positions[{t}] is {int(batch['positions'][i][t])}, expected {int(expected[t])} "
                             + ("(padding)" if mask[t] == 0 else f"(sequence {int(mask[t])} restarts at 0)"))
    if check == "pack_padding":
        for name in ("input_ids", "segment_ids"):
            padded = np.flatnonzero((batch[name][i] != 0) & (mask == 0))
            if len(padded):
                t = int(padded[0])
                return name, f"{name}[{t}] is {int(batch[name][i][t])} in the padding, expected 0"
    if check == "pack_predictions":
        return _explain_predictions(batch, i, _pred(batch))
    if check == "pack_next_sentence":
        starts = _first_token(batch["input_mask"][i:i + 1], k)[0]
        held = int(d.sequences[i])
        for j in range(k):
            present = j < held
            expected = ((int(starts[j]), 0, 1.0) if present else (0, 0, 0.0))
            got = tuple(batch[name][i][j] for name in (
                "next_sentence_positions", "next_sentence_labels", "next_sentence_weights"))
            for name, want, value, judged in zip(("next_sentence_positions", "next_sentence_labels",
                                                  "next_sentence_weights"), expected, got, (True, not present, True)):
                if judged and value != want:
                    what = f"sequence {j + 1}'s [CLS]" if present else "no sequence in this slot"
                    shown = float(value) if isinstance(want, float) else int(value)
                    return name, f"{name}[{j}] is {shown}, expected {want} ({what})"
    return None, "failed"


def _explain_predictions(batch, i, pred):
    mask = batch["input_mask"][i]
    weights, where, labels = (batch[k][i] for k in ("masked_lm_weights", "masked_lm_positions", "masked_lm_ids"))
    held = int(mask.max(initial=0))
    for s, w in enumerate(weights):
        if w != int(w) or not 0 <= w <= held:
            return "masked_lm_weights", f"weight {float(w)} at slot {s}, expected a sequence index 1…{held} or 0.0"
    for s in range(1, len(weights)):
        if weights[s] and not (weights[s - 1] and weights[s] >= weights[s - 1]):
            return "masked_lm_weights", (f"weight {float(weights[s])} at slot {s} after {float(weights[s - 1])}, "
                                         "expected the sequences' predictions in order, then 0.0")
    for s, w in enumerate(weights):
        if w and not (0 <= where[s] < len(mask) and mask[where[s]] == w):
            inside = f"in sequence {int(mask[where[s]])}" if 0 <= where[s] < len(mask) else "outside the row"
            return "masked_lm_positions", (f"position {int(where[s])} at slot {s} is {inside}, "
                                           f"expected inside sequence {int(w)} (its weight)")
        if not w and (where[s] or labels[s]):
            name, value = ("masked_lm_positions", where[s]) if where[s] else ("masked_lm_ids", labels[s])
            return name, f"{name}[{s}] is {int(value)} in a padding slot (weight 0.0), expected 0"
    counts = collections.Counter(int(w) for w in weights if w)
    j, most = max(counts.items(), key=lambda item: item[1])
    return "masked_lm_weights", f"sequence {j} has {most} predictions, expected at most pred = {pred}"


# ---------------------------------------------------------------- statistics


class Stats:
    """The pretraining statistics of the unpacked instances, plus how full the rows are."""

    def __init__(self, seq, pred, k):
        self.seq = seq
        self.inner = pretraining.Stats(seq, pred)
        self.rows = 0
        self.sequences_per_row = np.zeros(k + 1, np.int64)

    def update(self, batch, d, spec):
        self.inner.update(d.instances, d.inner, spec)
        self.rows += len(d.sound)
        self.sequences_per_row += np.bincount(np.minimum(d.sequences, len(self.sequences_per_row) - 1),
                                              minlength=len(self.sequences_per_row))

    def merge(self, other):
        self.inner.merge(other.inner)
        self.rows += other.rows
        if len(other.sequences_per_row) == len(self.sequences_per_row):
            self.sequences_per_row += other.sequences_per_row

    def summary(self, spec, test_vs_training=None):
        out, warnings = self.inner.summary(spec, test_vs_training.inner if test_vs_training is not None else None)
        out.update(rows=self.rows, sequences_per_row=self.sequences_per_row.tolist(),
                   packing_ratio=round(self.rows / max(self.inner.instances, 1), 4),
                   fill=round(self.inner.tokens / max(self.rows * self.seq, 1), 4))
        return out, warnings


def new_stats(dims):
    return Stats(dims["seq"], dims["pred"], dims["k"])


def table_rows(splits):
    """The rows of the one-screen table: pretraining's for the sequences, and how full the rows are."""
    rows = pretraining.table_rows(splits)
    return rows[:1] + [
        ("rows (per sequence)", lambda s: f"{s['rows']:,} ({s['packing_ratio']:.3f})"),
        ("sequences per row 1/2/…", lambda s: "/".join(f"{n:,}" for n in s["sequences_per_row"][1:])),
        ("real tokens / row slots", lambda s: f"{s['fill']:.1%}"),
    ] + rows[1:]


# ---------------------------------------------------------------- comparison


def compare_with_unpacked(packed_files, unpacked_files, spec, iter_batches):
    """{"equal", "records", "difference"}: does each packed file hold exactly the instances of its source?

    `iter_batches` is validate.records' reader, handed in because records imports this module.
    """
    by_split = collections.defaultdict(lambda: ([], []))
    for side, files in enumerate((packed_files, unpacked_files)):
        for record_file in files:
            by_split[record_file.split][side].append(record_file)
    compared = 0
    for split, (packed, unpacked) in by_split.items():
        if len(packed) != len(unpacked):
            return {"equal": False, "records": compared,
                    "difference": f"{split}: {len(packed)} packed files, {len(unpacked)} unpacked files "
                                  "(pack writes one file per source file)"}
        for packed_file, unpacked_file in zip(packed, unpacked):
            outcome = _compare_files(packed_file, unpacked_file, spec, iter_batches)
            compared += outcome["records"]
            if not outcome["equal"]:
                return {**outcome, "records": compared}
    return {"equal": True, "records": compared, "difference": None}


def _compare_files(packed_file, unpacked_file, spec, iter_batches):
    """The instances of one packed file against those of its source, as multisets of exact values."""
    unpacked, where = [], []
    for indices, batch, problems in iter_batches(packed_file.path, packed_file.fmt, spec):
        if problems:
            return _unreadable(packed_file, problems)
        if not len(indices):
            continue
        layout = layout_failures(batch, _pred(batch))
        broken = np.logical_or.reduce(list(layout.values()))
        if broken.any():
            row = int(np.flatnonzero(broken)[0])
            check = next(check for check, fails in layout.items() if fails[row])
            return {"equal": False, "records": 0,
                    "difference": f"{packed_file.path} record {int(indices[row])} cannot be unpacked: its layout "
                                  f"fails {check} (validate lists why)"}
        instances, row, slot, _offset = unpack_rows(batch, _pred(batch))
        unpacked.append(_canonical(instances))
        where += [(int(indices[r]), int(s) + 1) for r, s in zip(row.tolist(), slot.tolist())]
    sources, source_index = [], []
    for indices, batch, problems in iter_batches(unpacked_file.path, unpacked_file.fmt, spec):
        if problems:
            return _unreadable(unpacked_file, problems)
        if len(indices):
            sources.append(_canonical(batch))
            source_index += indices.tolist()
    packed_keys = [key for part in unpacked for key in part]
    source_keys = [key for part in sources for key in part]
    in_rows, in_source = collections.Counter(packed_keys), collections.Counter(source_keys)
    if in_rows == in_source:
        return {"equal": True, "records": len(source_keys), "difference": None}
    for index, key in zip(source_index, source_keys):
        if in_rows[key] < in_source[key]:
            held = (f"{in_rows[key]} times among its rows, {in_source[key]} in the source" if in_rows[key]
                    else "in none of its rows")
            return {"equal": False, "records": 0,
                    "difference": f"{unpacked_file.path} record {index} is missing from {packed_file.path}: {held}"}
    (record, sequence), key = next(item for item in zip(where, packed_keys) if in_rows[item[1]] > in_source[item[1]])
    held = (f"{in_rows[key]} times among the rows, {in_source[key]} in the source" if in_source[key]
            else "not in the source")
    return {"equal": False, "records": 0,
            "difference": f"{packed_file.path} record {record} sequence {sequence} is no instance of "
                          f"{unpacked_file.path}: {held}"}


def _canonical(instances):
    """Each instance's values as one bytes key (integers as int64, weights by their float32 bits)."""
    columns = [np.asarray(instances[name]).astype(np.int64) if PRETRAINING.feature(name).dtype != "float"
               else np.asarray(instances[name], np.float32).view(np.int32).astype(np.int64)
               for name in PRETRAINING.names]
    rows = np.ascontiguousarray(np.concatenate(columns, axis=1))
    return [row.tobytes() for row in rows]


def _unreadable(record_file, problems):
    first = min(problems, key=lambda f: f.record if f.record is not None else -1)
    return {"equal": False, "records": 0, "difference": f"{record_file.path} cannot be read: {first.line()}"}
