"""What `bertprep validate` checks in BERT pretraining records beyond framing and schema, and their statistics.

Every invariant of a pretraining record is one NumPy expression over a batch
of decoded records, giving a failure mask per check; only failing records are
looked at one by one, to say exactly what is wrong. The invariants come from
docs/reference-facts.md, "Instance creation: the reference's traps" and
docs/reference-facts.md, "Pretraining record features".
A check whose premise is broken is not judged (a record whose input_mask is
malformed has no known length, so its padding is not judged either): one
damage gives one finding.
"""

import dataclasses

import numpy as np

from bertprep.formats.schemas import PRETRAINING

# check id -> what it proves (the table's rows, in order)
CHECKS = {
    "input_mask": "ones over the real tokens, then zeros",
    "cls": "input_ids[0] is [CLS]",
    "sep": "two [SEP]: where segment 0 ends and at the last real token",
    "segment_ids": "0…0 1…1 over the real tokens, then 0",
    "padding": "input_ids 0 after the real tokens",
    "vocab": "token ids inside the vocabulary",
    "masked_positions": "strictly increasing, inside the real tokens, not on [CLS]/[SEP]",
    "masked_weights": "1.0 for real predictions then 0.0; 0 ids and positions in padding slots",
    "num_predictions": "min(pred, max(1, round(length × masked_lm_prob)))",
    "next_sentence_labels": "0 or 1",
}


# ---------------------------------------------------------------- checks


@dataclasses.dataclass
class Derived:
    """What the checks and statistics need beyond the raw arrays."""

    length: np.ndarray  # real tokens per record (ones in input_mask)
    predictions: np.ndarray  # real predictions (weights equal to 1.0)
    slot_real: np.ndarray  # (N, pred): slot holds a real prediction
    slot_valid: np.ndarray  # (N, pred): real prediction at a position inside the real tokens
    restored: np.ndarray  # input_ids with every masked position given back its label
    sep1: np.ndarray
    sep2: np.ndarray
    sep_ok: np.ndarray


def derive(batch, spec):
    ids, mask, pos, mids, weights = (batch[k] for k in (
        "input_ids", "input_mask", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"))
    count, seq = ids.shape
    pred = pos.shape[1]
    length = (mask == 1).sum(axis=1)
    real = np.arange(seq) < length[:, None]
    predictions = (weights == 1.0).sum(axis=1)
    slot_real = np.arange(pred) < predictions[:, None]
    slot_valid = slot_real & (pos >= 1) & (pos < length[:, None])
    restored = ids.copy()
    rows, slots = np.nonzero(slot_valid)
    # A random replacement may be any vocab entry, [SEP] included: judge structure on the original tokens.
    restored[rows, pos[rows, slots]] = mids[rows, slots]
    is_sep = (restored == spec.sep_id) & real
    sep_count = is_sep.sum(axis=1)
    sep1 = is_sep.argmax(axis=1)
    sep2 = seq - 1 - is_sep[:, ::-1].argmax(axis=1)
    sep_ok = (sep_count == 2) & (sep2 == length - 1) & (sep1 >= 2) & (sep2 - sep1 >= 2)
    return Derived(length, predictions, slot_real, slot_valid, restored, sep1, sep2, sep_ok)


def expected_predictions(length, spec, pred):
    """The reference's number of predictions for each length, as (half-to-even, half-up) roundings: its
    num_to_predict, of which it masks as many as there are candidates, the tokens but [CLS] and the two [SEP]
    (`create --masked-lm-prob 1` masks 16 of a record of 19 tokens; checked against 19, its records failed)."""
    raw = length * spec.masked_lm_prob
    floor = np.floor(raw)
    half_even = np.round(raw)  # Python 3's round
    half_up = floor + (raw - floor >= 0.5)  # Python 2's round, which OneFlow's sample was made with
    candidates = np.maximum(np.asarray(length) - 3, 0)
    return (np.minimum(np.minimum(pred, np.maximum(1, half_even)), candidates).astype(np.int64),
            np.minimum(np.minimum(pred, np.maximum(1, half_up)), candidates).astype(np.int64))


def failure_masks(batch, d, spec):
    """{check: (N,) bool}, True where the record fails the check."""
    ids, mask, seg, pos, mids, weights, nsl = (batch[name] for name in PRETRAINING.names)
    seq = ids.shape[1]
    cols = np.arange(seq)
    real = cols < d.length[:, None]
    mask_ok = ((mask == 0) | (mask == 1)).all(axis=1) & (mask[:, 0] == 1) & (mask[:, 1:] <= mask[:, :-1]).all(axis=1)
    fails = {"input_mask": ~mask_ok, "cls": d.restored[:, 0] != spec.cls_id}
    fails["sep"] = mask_ok & ~d.sep_ok
    expected_seg = (cols > d.sep1[:, None]) & real
    fails["segment_ids"] = mask_ok & d.sep_ok & (seg != expected_seg).any(axis=1)
    fails["padding"] = mask_ok & ((ids != 0) & ~real).any(axis=1)
    vocab_bad = (ids < 0).any(axis=1) | ((mids < 0) & d.slot_real).any(axis=1)
    if spec.vocab_size is not None:
        vocab_bad |= (ids >= spec.vocab_size).any(axis=1) | ((mids >= spec.vocab_size) & d.slot_real).any(axis=1)
    fails["vocab"] = vocab_bad
    weights_binary = ((weights == 0.0) | (weights == 1.0)).all(axis=1)
    weights_ok = weights_binary & (weights[:, 1:] <= weights[:, :-1]).all(axis=1)
    padding_slots = ~d.slot_real
    weights_ok &= ~((padding_slots & ((pos != 0) | (mids != 0))).any(axis=1))
    fails["masked_weights"] = ~weights_ok
    increasing = ((pos[:, 1:] > pos[:, :-1]) | ~d.slot_real[:, 1:]).all(axis=1)
    inside = (d.slot_valid | ~d.slot_real).all(axis=1)
    on_sep = (d.slot_real & ((pos == d.sep1[:, None]) | (pos == d.sep2[:, None])) & d.sep_ok[:, None]).any(axis=1)
    fails["masked_positions"] = mask_ok & ~(increasing & inside & ~on_sep)
    even, up = expected_predictions(d.length, spec, pos.shape[1])
    if spec.whole_word_mask:  # a whole word that would overflow the budget is skipped
        count_ok = d.predictions <= np.maximum(even, up)
    else:
        count_ok = (d.predictions == even) | (d.predictions == up)
    fails["num_predictions"] = mask_ok & weights_ok & ~count_ok
    fails["next_sentence_labels"] = ~((nsl == 0) | (nsl == 1)).all(axis=1)
    return fails


def explain(check, row, d, i, spec):
    """(field, message) saying exactly what record `i` of the batch gets wrong for `check`."""
    ids, mask, seg, pos, mids, weights, nsl = (row[name][i] for name in PRETRAINING.names)
    length = int(d.length[i])
    k = int(d.predictions[i])
    shared = explain_shared(check, ids, mask, seg, int(d.sep1[i]), length)
    if shared is not None:
        return shared
    if check == "cls":
        return "input_ids", f"input_ids[0] is {int(d.restored[i][0])}, expected [CLS] ({spec.cls_id})"
    if check == "sep":
        where = [int(j) for j in np.flatnonzero(d.restored[i][:length] == spec.sep_id)]
        if len(where) != 2:
            return "input_ids", f"{len(where)} [SEP] ({spec.sep_id}) at {where}, expected 2 (length {length})"
        if where[1] != length - 1:
            return "input_ids", f"second [SEP] at {where[1]}, expected at the last real token {length - 1}"
        return "input_ids", f"[SEP] at {where} leaves an empty segment"
    if check == "vocab":
        limit = f"< {spec.vocab_size}" if spec.vocab_size is not None else ">= 0"
        for name, values, count in (("input_ids", ids, len(ids)), ("masked_lm_ids", mids, k)):
            out = [j for j in range(count) if values[j] < 0
                   or (spec.vocab_size is not None and values[j] >= spec.vocab_size)]
            if out:
                return name, f"{name}[{out[0]}] is {int(values[out[0]])}, expected an id {limit} (vocab size)"
    if check == "masked_weights":
        bad = [j for j, v in enumerate(weights) if v not in (0.0, 1.0)]
        if bad:
            return "masked_lm_weights", f"weight {float(weights[bad[0]])} at slot {bad[0]}, expected 1.0 or 0.0"
        rising = np.flatnonzero(weights[1:] > weights[:-1])
        if len(rising):
            j = int(rising[0]) + 1
            return "masked_lm_weights", f"1.0 at slot {j} after 0.0, expected 1.0 for real predictions then 0.0"
        for name, values in (("masked_lm_positions", pos), ("masked_lm_ids", mids)):
            j = next((j for j in range(k, len(values)) if values[j] != 0), None)
            if j is not None:
                return name, f"{name}[{j}] is {int(values[j])} in a padding slot (weight 0.0), expected 0"
    if check == "masked_positions":
        for j in range(k):
            p = int(pos[j])
            if not 1 <= p < length:
                where = "on [CLS]" if p == 0 else f"outside the real tokens (length {length})"
                return "masked_lm_positions", f"position {p} at slot {j} is {where}, expected 1 ≤ position < {length}"
            if j and p <= pos[j - 1]:
                return ("masked_lm_positions",
                        f"position {p} at slot {j} after {int(pos[j - 1])}, expected strictly increasing")
            if d.sep_ok[i] and p in (d.sep1[i], d.sep2[i]):
                return "masked_lm_positions", f"position {p} at slot {j} is on [SEP]"
    if check == "num_predictions":
        even, up = expected_predictions(np.array([length]), spec, len(pos))
        want = sorted({int(even[0]), int(up[0])})
        rule = f"min({len(pos)}, max(1, round({length} × {spec.masked_lm_prob})))"
        if length - 3 < min(len(pos), max(1, round(length * spec.masked_lm_prob))):
            rule += f", capped at its {length - 3} tokens other than [CLS] and [SEP]"
        if spec.whole_word_mask:
            return "masked_lm_weights", f"{k} predictions, expected at most {max(want)} = {rule} (whole-word masking)"
        shown = " or ".join(map(str, want))
        hint = "; made with whole-word masking? pass --whole-word-mask" if k < min(want) else ""
        return "masked_lm_weights", f"{k} predictions, expected {shown} = {rule}{hint}"
    if check == "next_sentence_labels":
        return "next_sentence_labels", f"label {int(nsl[0])}, expected 0 or 1"
    return None, "failed"


def explain_shared(check, ids, mask, seg, sep1, length):
    """(field, message) for the checks every BERT record kind shares (mask, segments, padding), else None."""
    if check == "input_mask":
        bad = [j for j, v in enumerate(mask) if v not in (0, 1)]
        if bad:
            return "input_mask", f"value {int(mask[bad[0]])} at {bad[0]}, expected 0 or 1"
        if mask[0] != 1:
            return "input_mask", "input_mask[0] is 0, expected 1 ([CLS] is a real token)"
        j = int(np.flatnonzero(mask[1:] > mask[:-1])[0]) + 1
        return "input_mask", f"1 at {j} after a 0 at {j - 1}, expected ones then zeros"
    if check == "segment_ids":
        cols = np.arange(len(seg))
        expected = ((cols > sep1) & (cols < length)).astype(int)
        j = int(np.flatnonzero(seg != expected)[0])
        part = "padding" if j >= length else f"segment {expected[j]} (first [SEP] at {sep1})"
        return "segment_ids", f"segment_ids[{j}] is {int(seg[j])}, expected {expected[j]} ({part})"
    if check == "padding":
        j = int(np.flatnonzero((ids != 0) & (np.arange(len(ids)) >= length))[0])
        return "input_ids", f"input_ids[{j}] is {int(ids[j])} in the padding (length {length}), expected 0"
    return None


# ---------------------------------------------------------------- statistics


class Stats:
    """Mergeable statistics of one group of records (a format's split)."""

    def __init__(self, seq, pred):
        self.seq, self.pred = seq, pred
        self.instances = 0
        self.tokens = 0
        self.predictions = 0
        self.expected_predictions = 0
        self.length_hist = np.zeros(seq + 1, dtype=np.int64)
        self.position_hist = np.zeros(seq, dtype=np.int64)
        self.replacement = np.zeros(3, dtype=np.int64)  # [MASK] / the label itself / another token
        self.nsp = np.zeros(3, dtype=np.int64)  # label 0 / 1 / other
        self.record_hashes = []
        self.text_hashes = []
        self.segment_hashes = []

    def update(self, batch, d, spec):
        ids, pos, mids, nsl = (batch[k] for k in ("input_ids", "masked_lm_positions", "masked_lm_ids",
                                                  "next_sentence_labels"))
        self.instances += len(ids)
        self.tokens += int(d.length.sum())
        self.predictions += int(d.predictions.sum())
        self.expected_predictions += int(expected_predictions(d.length, spec, self.pred)[0].sum())
        self.length_hist += np.bincount(np.minimum(d.length, self.seq), minlength=self.seq + 1)
        rows, slots = np.nonzero(d.slot_valid)
        where = pos[rows, slots]
        self.position_hist += np.bincount(where, minlength=self.seq)[: self.seq]
        held = ids[rows, where]
        is_mask = held == spec.mask_id
        is_label = ~is_mask & (held == mids[rows, slots])
        self.replacement += [int(is_mask.sum()), int(is_label.sum()), int((~is_mask & ~is_label).sum())]
        labels = nsl[:, 0]
        self.nsp += [int((labels == 0).sum()), int((labels == 1).sum()), int(((labels != 0) & (labels != 1)).sum())]
        record, text, segments = _hashes(batch, d)
        self.record_hashes.append(record)
        self.text_hashes.append(text)
        self.segment_hashes.append(segments)

    def merge(self, other):
        for name in ("instances", "tokens", "predictions", "expected_predictions"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if len(other.length_hist) != len(self.length_hist):
            return  # a file of another seq: its own consistency finding says so
        self.length_hist += other.length_hist
        self.position_hist += other.position_hist
        self.replacement += other.replacement
        self.nsp += other.nsp
        self.record_hashes += other.record_hashes
        self.text_hashes += other.text_hashes
        self.segment_hashes += other.segment_hashes

    def hashes(self, name):
        parts = getattr(self, name)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def summary(self, spec, test_vs_training=None):
        return summarize_stats(self, spec, test_vs_training)


def new_stats(dims):
    return Stats(dims["seq"], dims["pred"])


def table_rows(splits):
    """(label, figures -> text) rows of the one-screen table for the figures of `splits` ({split: figures})."""
    rows = [
        ("instances", lambda s: f"{s['instances']:,}"),
        ("tokens", lambda s: f"{s['tokens']:,}"),
        ("mean length", lambda s: f"{s['mean_length']:.1f}"),
        ("full length / ≤ seq/2", lambda s: f"{s['full_length_share']:.1%} / {s['short_share']:.1%}"),
        ("mask rate (expected)", lambda s: f"{s['mask_rate']:.4f} ({s['expected_mask_rate']:.4f})"),
        ("[MASK] / same / other", lambda s: "/".join(f"{100 * x:.1f}" for x in s["replacement_shares"])),
        ("NSP random-next share", lambda s: f"{s['random_next_share']:.1%}"),
        ("duplicate records / texts", lambda s: f"{s['duplicate_records']:,} / {s['duplicate_texts']:,}"),
    ]
    if any("segments_also_in_training" in s for s in splits.values()):
        rows.append(("test segments in training",
                     lambda s: f"{s['segment_overlap_share']:.2%}" if "segment_overlap_share" in s else "-"))
    return rows


def _hashes(batch, d):
    """(record, text, segment) 64-bit hashes: polynomial in a random odd base, mod 2**64.

    text is the sequence with masked positions given back their labels;
    segments are A and B of records with sound [SEP]s, hashed independently
    of where they sit; the record hash adds what masking did and the label.
    """
    restored = d.restored
    count, seq = restored.shape
    prefix = np.cumsum((restored.astype(np.uint64) + np.uint64(1)) * _POWERS[:seq], axis=1, dtype=np.uint64)
    text = prefix[:, -1].copy()  # a view would keep the whole chunk's prefix sums (8 bytes a token) alive
    rows = np.flatnonzero(d.sep_ok)
    sep1, sep2 = d.sep1[rows], d.sep2[rows]
    segment_a = (prefix[rows, sep1 - 1] - prefix[rows, 0]) * _INVERSE_POWERS[1]
    segment_b = (prefix[rows, sep2 - 1] - prefix[rows, sep1]) * _INVERSE_POWERS[sep1 + 1]
    segments = np.concatenate([segment_a + (sep1 - 1).astype(np.uint64) * _MIX[0],
                               segment_b + (sep2 - sep1 - 1).astype(np.uint64) * _MIX[0]])
    pos = batch["masked_lm_positions"]
    held = np.take_along_axis(batch["input_ids"], np.clip(pos, 0, seq - 1), axis=1)
    masking = np.concatenate([pos, held, batch["masked_lm_weights"].view(np.int32), batch["next_sentence_labels"],
                              d.length[:, None]], axis=1).astype(np.uint64)
    record = text + (masking * _MIX[1:masking.shape[1] + 1]).sum(axis=1, dtype=np.uint64)
    return record, text, segments


def _powers(base, count):
    out, value = [], 1
    for _ in range(count):
        out.append(value)
        value = value * base % 2**64
    return np.array(out, dtype=np.uint64)


_rng = np.random.default_rng(0x5EED_B347)
_BASE = int(_rng.integers(2**32, 2**63)) | 1
_POWERS = _powers(_BASE, 8192)
_INVERSE_POWERS = _powers(pow(_BASE, -1, 2**64), 8192)
_MIX = _rng.integers(1, 2**63, size=1024, dtype=np.uint64)


def summarize_stats(stats, spec, test_vs_training=None):
    """JSON-able figures of one group, with warnings [(check, message)] where a figure is out of its range."""
    seq = len(stats.length_hist) - 1
    n = max(stats.instances, 1)
    lengths = np.arange(seq + 1)
    short = int(stats.length_hist[: seq // 2 + 1].sum())
    replaced = stats.replacement
    total_replaced = max(int(replaced.sum()), 1)
    records = stats.hashes("record_hashes")
    texts = stats.hashes("text_hashes")
    at_least = stats.length_hist[::-1].cumsum()[::-1][1:]  # records longer than position j
    out = {
        "instances": stats.instances,
        "tokens": stats.tokens,
        "mean_length": round(float((stats.length_hist * lengths).sum() / n), 2),
        "full_length_share": round(float(stats.length_hist[seq] / n), 4),
        "short_share": round(short / n, 4),
        "length_histogram": stats.length_hist.tolist(),
        "predictions": stats.predictions,
        "expected_predictions": stats.expected_predictions,  # by Python 3's rounding
        "mask_rate": round(stats.predictions / max(stats.tokens, 1), 4),
        "expected_mask_rate": round(stats.expected_predictions / max(stats.tokens, 1), 4),
        "mask_rate_by_position": [round(float(c / d), 4) if d else 0.0 for c, d in zip(stats.position_hist, at_least)],
        "replacement": {"mask": int(replaced[0]), "same": int(replaced[1]), "other": int(replaced[2])},
        "replacement_shares": [round(int(c) / total_replaced, 4) for c in replaced],
        "nsp": {"is_next": int(stats.nsp[0]), "random_next": int(stats.nsp[1]), "other": int(stats.nsp[2])},
        "random_next_share": round(int(stats.nsp[1]) / n, 4),
        "duplicate_records": int(len(records) - len(np.unique(records))),
        "duplicate_texts": int(len(texts) - len(np.unique(texts))),
    }
    warnings = []
    if stats.instances:
        _range_warnings(out, stats, spec, warnings)
    if test_vs_training is not None:
        test_segments = stats.hashes("segment_hashes")
        shared = int(np.isin(test_segments, test_vs_training.hashes("segment_hashes")).sum())
        out["segments_also_in_training"] = shared
        out["segment_overlap_share"] = round(shared / max(len(test_segments), 1), 4)
        if out["segment_overlap_share"] > 0.01:
            warnings.append(("overlap", f"{shared:,} of {len(test_segments):,} test segments "
                                        f"({out['segment_overlap_share']:.1%}) also occur in training"))
    return out, warnings


def _range_warnings(out, stats, spec, warnings):
    """Figures far from what the reference algorithm produces (5 standard errors, at least 2 points)."""
    predictions = max(int(stats.replacement.sum()), 1)
    for share, expected, what in zip(out["replacement_shares"], (0.8, 0.1, 0.1), ("[MASK]", "kept", "random")):
        tolerance = max(0.02, 5 * (expected * (1 - expected) / predictions) ** 0.5)
        if abs(share - expected) > tolerance:
            warnings.append(("replacement",
                             f"{what} share {share:.3f}, expected {expected} ± {tolerance:.3f} (80/10/10)"))
    if abs(out["mask_rate"] - out["expected_mask_rate"]) > 0.01:
        warnings.append(("mask_rate", f"mask rate {out['mask_rate']:.4f}, expected {out['expected_mask_rate']:.4f} "
                                      f"for masked_lm_prob {spec.masked_lm_prob}"))
    share = out["random_next_share"]
    tolerance = 5 * (0.25 / stats.instances) ** 0.5
    if not 0.45 - tolerance <= share <= 0.65 + tolerance:  # 0.5, plus single-segment chunks forced random
        warnings.append(("nsp", f"random-next share {share:.3f}, expected 0.45–0.65"))
    if out["duplicate_records"]:
        warnings.append(("duplicates", f"{out['duplicate_records']:,} records are exact copies of another"))
