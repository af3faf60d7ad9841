"""Checks and statistics over the records of one file, vectorized over batches.

Every invariant of a BERT pretraining record (DESIGN.md §2–3) is one NumPy
expression over a batch of decoded records, giving a failure mask per check;
only failing records are looked at one by one, to say exactly what is wrong.
A check whose premise is broken is not judged (a record whose input_mask is
malformed has no known length, so its padding is not judged either): one
damage gives one finding.
"""

import dataclasses

import numpy as np

from bertprep import formats
from bertprep.formats.protowire import WireError
from bertprep.validate.decode import Framing, exact_decode, layout_of, lockstep_decode, map_file, walk_frames

# check id -> what it proves (the table's rows, in order)
RECORD_CHECKS = {
    "framing": "TFRecord length and data CRCs; OFRecord record sizes; no trailing bytes",
    "schema": "exactly the seven BERT features, their kinds and lengths",
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


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    """What the records are checked against (from the manifest, flags, or the data itself)."""

    seq: int = None  # None: taken from each file's first record
    pred: int = None
    vocab_size: int = None  # None: no upper bound on ids
    cls_id: int = 101  # BERT's English vocabs; --vocab gives the real ones
    sep_id: int = 102
    mask_id: int = 103
    masked_lm_prob: float = 0.15
    whole_word_mask: bool = False
    max_errors: int = 20
    chunk: int = 8192


@dataclasses.dataclass
class Finding:
    check: str
    file: str
    record: int = None
    field: str = None
    message: str = ""
    severity: str = "error"

    def line(self):
        where = self.file + (f": record {self.record}" if self.record is not None else "")
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"


class Findings:
    """Counts every failure, keeps the first `limit` for the listing."""

    def __init__(self, limit):
        self.limit = limit
        self.counts = {}  # check -> failing records (or files)
        self.warning_counts = {}
        self.kept = []

    def add(self, finding, count=1):
        counts = self.counts if finding.severity == "error" else self.warning_counts
        counts[finding.check] = counts.get(finding.check, 0) + count
        if len(self.kept) < self.limit or finding.severity != "error":
            self.kept.append(finding)

    def extend(self, other):
        for check, count in other.counts.items():
            self.counts[check] = self.counts.get(check, 0) + count
        for check, count in other.warning_counts.items():
            self.warning_counts[check] = self.warning_counts.get(check, 0) + count
        errors = sum(f.severity == "error" for f in self.kept)
        for finding in other.kept:
            if finding.severity != "error":
                self.kept.append(finding)
            elif errors < self.limit:
                self.kept.append(finding)
                errors += 1


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
    """The reference's num_to_predict for each length, as (half-to-even, half-up) roundings."""
    raw = length * spec.masked_lm_prob
    floor = np.floor(raw)
    half_even = np.round(raw)  # Python 3's round
    half_up = floor + (raw - floor >= 0.5)  # Python 2's round, which OneFlow's sample was made with
    return (np.minimum(pred, np.maximum(1, half_even)).astype(np.int64),
            np.minimum(pred, np.maximum(1, half_up)).astype(np.int64))


def failure_masks(batch, d, spec):
    """{check: (N,) bool}, True where the record fails the check."""
    ids, mask, seg, pos, mids, weights, nsl = (batch[name] for name in formats.FEATURE_NAMES)
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
    ids, mask, seg, pos, mids, weights, nsl = (row[name][i] for name in formats.FEATURE_NAMES)
    length = int(d.length[i])
    k = int(d.predictions[i])
    if check == "input_mask":
        bad = [j for j, v in enumerate(mask) if v not in (0, 1)]
        if bad:
            return "input_mask", f"value {int(mask[bad[0]])} at {bad[0]}, expected 0 or 1"
        if mask[0] != 1:
            return "input_mask", "input_mask[0] is 0, expected 1 ([CLS] is a real token)"
        j = int(np.flatnonzero(mask[1:] > mask[:-1])[0]) + 1
        return "input_mask", f"1 at {j} after a 0 at {j - 1}, expected ones then zeros"
    if check == "cls":
        return "input_ids", f"input_ids[0] is {int(d.restored[i][0])}, expected [CLS] ({spec.cls_id})"
    if check == "sep":
        where = [int(j) for j in np.flatnonzero(d.restored[i][:length] == spec.sep_id)]
        if len(where) != 2:
            return "input_ids", f"{len(where)} [SEP] ({spec.sep_id}) at {where}, expected 2 (length {length})"
        if where[1] != length - 1:
            return "input_ids", f"second [SEP] at {where[1]}, expected at the last real token {length - 1}"
        return "input_ids", f"[SEP] at {where} leaves an empty segment"
    if check == "segment_ids":
        cols = np.arange(len(seg))
        expected = ((cols > d.sep1[i]) & (cols < length)).astype(int)
        j = int(np.flatnonzero(seg != expected)[0])
        part = "padding" if j >= length else f"segment {expected[j]} (first [SEP] at {int(d.sep1[i])})"
        return "segment_ids", f"segment_ids[{j}] is {int(seg[j])}, expected {expected[j]} ({part})"
    if check == "padding":
        j = int(np.flatnonzero((ids != 0) & (np.arange(len(ids)) >= length))[0])
        return "input_ids", f"input_ids[{j}] is {int(ids[j])} in the padding (length {length}), expected 0"
    if check == "vocab":
        limit = f"< {spec.vocab_size}" if spec.vocab_size is not None else ">= 0"
        for name, values, count in (("input_ids", ids, len(ids)), ("masked_lm_ids", mids, k)):
            out = [j for j in range(count) if values[j] < 0 or (spec.vocab_size is not None and values[j] >= spec.vocab_size)]
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
                return "masked_lm_positions", f"position {p} at slot {j} after {int(pos[j - 1])}, expected strictly increasing"
            if d.sep_ok[i] and p in (d.sep1[i], d.sep2[i]):
                return "masked_lm_positions", f"position {p} at slot {j} is on [SEP]"
    if check == "num_predictions":
        even, up = expected_predictions(np.array([length]), spec, len(pos))
        want = sorted({int(even[0]), int(up[0])})
        rule = f"min({len(pos)}, max(1, round({length} × {spec.masked_lm_prob})))"
        if spec.whole_word_mask:
            return "masked_lm_weights", f"{k} predictions, expected at most {max(want)} = {rule} (whole-word masking)"
        shown = " or ".join(map(str, want))
        hint = "; made with whole-word masking? pass --whole-word-mask" if k < min(want) else ""
        return "masked_lm_weights", f"{k} predictions, expected {shown} = {rule}{hint}"
    if check == "next_sentence_labels":
        return "next_sentence_labels", f"label {int(nsl[0])}, expected 0 or 1"
    return None, "failed"


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


def _hashes(batch, d):
    """(record, text, segment) 64-bit hashes: polynomial in a random odd base, mod 2**64.

    text is the sequence with masked positions given back their labels;
    segments are A and B of records with sound [SEP]s, hashed independently
    of where they sit; the record hash adds what masking did and the label.
    """
    restored = d.restored
    count, seq = restored.shape
    prefix = np.cumsum((restored.astype(np.uint64) + np.uint64(1)) * _POWERS[:seq], axis=1, dtype=np.uint64)
    text = prefix[:, -1]
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


# ---------------------------------------------------------------- one file


@dataclasses.dataclass
class FileReport:
    path: str
    fmt: str
    split: str
    records: int = 0
    bytes: int = 0
    seq: int = None
    pred: int = None
    findings: Findings = None
    stats: Stats = None
    failed_records: int = 0
    sha256: str = None


def scan_file(path, fmt, split, spec):
    """Run every record check on one file; statistics of its decodable records."""
    report = FileReport(path, fmt, split, findings=Findings(spec.max_errors))
    buf = map_file(path)
    report.bytes = len(buf)
    framing = walk_frames(buf, fmt) if len(buf) else Framing(np.zeros(0, np.int64), np.zeros(0, np.int64))
    findings = report.findings
    if framing.error:
        findings.add(Finding("framing", path, framing.error_index, None, framing.error))
    bad_records = set()
    for index in framing.bad_crc.tolist():
        offset = int(framing.starts[index]) - 12
        findings.add(Finding("framing", path, index, None, f"at byte {offset}: data CRC mismatch"))
        bad_records.add(index)
    report.records = len(framing.starts)  # readable records; a framing error ends the file
    usable = np.setdiff1d(np.arange(len(framing.starts)), framing.bad_crc)
    state = _FileState(spec)
    for first in range(0, len(usable), spec.chunk):
        indices = usable[first:first + spec.chunk]
        batch, kept = _decode_chunk(buf, framing, indices, fmt, state, path, findings, bad_records)
        if not len(kept):
            continue
        if report.stats is None:
            report.stats = Stats(state.seq, state.pred)
        file_spec = dataclasses.replace(spec, seq=state.seq, pred=state.pred)
        d = derive(batch, file_spec)
        fails = failure_masks(batch, d, file_spec)
        for check in RECORD_CHECKS:
            if check not in fails:
                continue
            failing = np.flatnonzero(fails[check])
            for i in failing.tolist():
                bad_records.add(int(kept[i]))
                if len(findings.kept) < spec.max_errors:
                    field, message = explain(check, batch, d, i, file_spec)
                    findings.add(Finding(check, path, int(kept[i]), field, message))
                else:
                    findings.add(Finding(check, path, int(kept[i])))
        report.stats.update(batch, d, file_spec)
    for name, count in state.int64_records.items():
        findings.add(Finding("oneflow_int64", path, None, name,
                             f"int64_list in {count} records; OneFlow's BERT decoder expects int32_list (it casts)",
                             severity="warning"))
    report.seq, report.pred = state.seq, state.pred
    report.failed_records = len(bad_records) + (1 if framing.error else 0)
    return report


def iter_batches(path, fmt, spec):
    """Yield (record indices, batch, findings) over a file in order, `spec.chunk` records at a time.

    findings are the framing and schema failures among those records (they
    are left out of the batch); a framing error comes last and ends the file.
    """
    buf = map_file(path)
    framing = walk_frames(buf, fmt) if len(buf) else Framing(np.zeros(0, np.int64), np.zeros(0, np.int64))
    state = _FileState(spec)
    bad_crc = set(framing.bad_crc.tolist())
    for first in range(0, len(framing.starts), spec.chunk):
        indices = np.arange(first, min(first + spec.chunk, len(framing.starts)))
        chunk_findings = Findings(len(indices) + 1)
        for index in sorted(bad_crc.intersection(indices.tolist())):
            offset = int(framing.starts[index]) - 12
            chunk_findings.add(Finding("framing", path, index, None, f"at byte {offset}: data CRC mismatch"))
        usable = np.array([i for i in indices.tolist() if i not in bad_crc], dtype=np.int64)
        batch, kept = _decode_chunk(buf, framing, usable, fmt, state, path, chunk_findings, set())
        yield kept, batch, chunk_findings.kept
    if framing.error:
        yield np.zeros(0, np.int64), {}, [Finding("framing", path, framing.error_index, None, framing.error)]


class _FileState:
    def __init__(self, spec):
        self.seq, self.pred = spec.seq, spec.pred
        self.layout = None
        self.int64_records = {}

    def note_kinds(self, kinds, count):
        for name, kind in kinds.items():
            if kind == "int64" and self.fmt == "ofrecord":
                self.int64_records[name] = self.int64_records.get(name, 0) + count


def _decode_chunk(buf, framing, indices, fmt, state, path, findings, bad_records):
    """Decode records `indices` of a file; schema failures become findings. Returns (batch, kept indices)."""
    state.fmt = fmt
    starts = framing.starts[indices]
    lengths = framing.lengths[indices]
    data = buf.data
    if state.layout is None:  # learn it from the first record with the BERT schema
        for i in range(len(indices)):
            payload = bytes(data[starts[i]:starts[i] + lengths[i]])
            if state.seq is None:
                state.seq, state.pred = _shape_of(payload, fmt)
            _fields, kinds, problems = exact_decode(payload, fmt, state.seq, state.pred)
            if not problems:
                state.layout = layout_of(kinds, fmt, state.seq, state.pred)
                break
    if state.layout is not None:
        ok, fields = lockstep_decode(buf, starts, lengths, state.layout)
        state.note_kinds(state.layout.kinds, int(ok.sum()))
    else:
        ok, fields = np.zeros(len(indices), dtype=bool), {}
    slow = {}
    for i in np.flatnonzero(~ok).tolist():
        payload = bytes(data[starts[i]:starts[i] + lengths[i]])
        if state.seq is None:
            state.seq, state.pred = _shape_of(payload, fmt)
        record_fields, kinds, problems = exact_decode(payload, fmt, state.seq, state.pred)
        if problems:
            index = int(indices[i])
            bad_records.add(index)
            for field, message in problems[:1]:  # the first problem; later ones follow from it or repeat it
                findings.add(Finding("schema", path, index, field, message))
            continue
        state.note_kinds(kinds, 1)
        slow[i] = record_fields
    decoded = ok.copy()
    decoded[list(slow)] = True
    keep = np.flatnonzero(decoded)
    if not len(keep):
        return {}, keep
    batch = {}
    for name, is_float, _ in formats.BERT_FEATURES:
        length = formats.feature_length(name, state.seq, state.pred)
        column = fields[name] if name in fields else np.zeros((len(indices), length), np.float32 if is_float else np.int64)
        for i, record_fields in slow.items():
            column[i] = record_fields[name]
        batch[name] = column if len(keep) == len(indices) else column[keep]
    return batch, indices[keep]


def _shape_of(payload, fmt):
    """(seq, pred) of a record: the lengths of its input_ids and masked_lm_positions (None if unreadable)."""
    try:
        decoded = formats.decode_payload(payload, fmt)
    except WireError:
        return None, None
    if "input_ids" not in decoded or "masked_lm_positions" not in decoded:
        return None, None
    return len(decoded["input_ids"][1]), len(decoded["masked_lm_positions"][1])
