"""Checks over the records of one file, vectorized over batches, whatever their kind.

Every file gets the checks any record kind has: framing (lengths, CRCs) and
schema (exactly the kind's features, with their list kinds and lengths, from
its description in bertprep.formats.schemas). A kind with rules of its own
(`RULES`: pretraining's invariants in validate.pretraining) adds its checks,
each a failure mask over a batch, and its statistics.
"""

import dataclasses

import numpy as np

from bertprep import formats, storage
from bertprep.errors import DataError
from bertprep.formats import codecs, columnar
from bertprep.formats.frames import Framing, map_file, release, walk_frames
from bertprep.formats.framing import text_not_records
from bertprep.formats.protowire import WireError
from bertprep.formats.schemas import KINDS, int_values_problem, kind_of_record
from bertprep.stages.validate import finetune, packed, pretraining
from bertprep.stages.validate.decode import exact_decode, layout_of, lockstep_decode

# check id -> what it proves (the table's rows, in order): what every record kind gets
RECORD_CHECKS = {
    "framing": "TFRecord length and data CRCs; OFRecord record sizes; no trailing bytes",
    "schema": "exactly the features of the record kind, their list kinds and lengths",
}


@dataclasses.dataclass(frozen=True)
class KindRules:
    """The checks and statistics of one record kind beyond framing and schema."""

    checks: dict  # check id -> what it proves
    derive: object  # (batch, spec) -> what failure_masks, explain and the statistics share
    failure_masks: object  # (batch, derived, spec) -> {check: (N,) bool, True where the record fails}
    explain: object  # (check, batch, derived, i, spec) -> (field, message) for record i of the batch
    # (dims) -> statistics: update(batch, derived, spec), merge(other), summary(spec, training)
    new_stats: object = None
    table_rows: object = None  # ({split: figures}) -> [(label, figures -> text)]: rows of the one-screen table


# record kind name -> its rules; kinds without an entry get framing and schema checks only
RULES = {
    "pretraining": KindRules(pretraining.CHECKS, pretraining.derive, pretraining.failure_masks,
                             pretraining.explain, pretraining.new_stats, pretraining.table_rows),
    "packed": KindRules(packed.CHECKS, packed.derive, packed.failure_masks, packed.explain, packed.new_stats,
                        packed.table_rows),
    **{name: KindRules(checks, finetune.derive, finetune.failure_masks, finetune.explain, finetune.new_stats,
                       finetune.table_rows)
       for name, checks in (("squad_train", {**finetune.STRUCTURE, **finetune.SQUAD, **finetune.SQUAD_TRAIN}),
                            ("squad_eval", {**finetune.STRUCTURE, **finetune.SQUAD}),
                            ("glue", {**finetune.STRUCTURE, **finetune.GLUE}),
                            ("glue_regression", {**finetune.STRUCTURE, **finetune.GLUE}),
                            ("unmasked", {**finetune.STRUCTURE, **finetune.UNMASKED}))},
}


def checks_of(kind_names):
    """{check: description} of everything validate runs on records of these kinds, in table order."""
    checks = dict(RECORD_CHECKS)
    for name in kind_names:
        if name in RULES:
            checks.update(RULES[name].checks)
    return checks


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    """What the records are checked against (from the manifest, flags, or the data itself)."""

    kind: object = None  # a RecordKind; None: recognised from each file's first record
    dims: dict | None = None  # {"seq": 128, "pred": 20, ...}; None: taken from each file's first record
    vocab_size: int | None = None  # None: no upper bound on ids
    cls_id: int = 101  # BERT's English vocabs; --vocab gives the real ones
    sep_id: int = 102
    mask_id: int = 103
    masked_lm_prob: float | None = 0.15  # None (validate's default): the manifest's, else 0.15
    whole_word_mask: bool | None = False  # None: the manifest's, else False
    num_labels: int | None = None  # GLUE: label ids must be below it (the manifest's label list); None: no bound
    max_errors: int = 20
    chunk: int = 8192


@dataclasses.dataclass
class Finding:
    check: str
    file: str
    record: int | None = None
    field: str | None = None
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


# ---------------------------------------------------------------- one file


@dataclasses.dataclass
class FileReport:
    path: str
    fmt: str
    split: str
    records: int = 0
    bytes: int = 0
    kind: str | None = None  # the record kind's name, once a record was read
    dims: dict | None = None
    findings: Findings | None = None
    stats: object = None  # the kind's statistics (KindRules.new_stats), if it keeps any
    failed_records: int = 0
    sha256: str | None = None


def scan_file(path, fmt, split, spec):
    """Run every record check on one file; statistics of its decodable records."""
    report = FileReport(path, fmt, split, findings=Findings(spec.max_errors))
    if not codecs.get(fmt).framed:
        return _scan_columnar(report, spec)
    buf = map_file(path)
    report.bytes = len(buf)
    framing = walk_frames(buf, fmt) if len(buf) else Framing(np.zeros(0, np.int64), np.zeros(0, np.int64))
    findings = report.findings
    if framing.error:
        findings.add(_framing_finding(path, fmt, framing))
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
        if len(kept):
            _check_batch(batch, kept, state.kind, state.dims, spec, report, bad_records)
        _release_chunk(buf, framing, indices)
    for name, count in state.int64_records.items():
        findings.add(Finding("oneflow_int64", path, None, name,
                             f"int64_list in {count} records; OneFlow's BERT decoder expects int32_list (it casts)",
                             severity="warning"))
    report.kind = state.kind.name if state.kind is not None else None
    report.dims = state.dims
    report.failed_records = len(bad_records) + (1 if framing.error else 0)
    return report


def _check_batch(batch, kept, kind, dims, spec, report, bad_records):
    """Run the kind's own checks over one decoded batch (records `kept` of the file); update the statistics."""
    findings, path = report.findings, report.path
    problem = int_values_problem(kind, batch)  # a TFRecord int64 beyond int32: what OFRecord and trainers hold
    if problem is not None:
        row, name, value, what = problem
        bad_records.add(int(kept[row]))
        findings.add(Finding("schema", path, int(kept[row]), name, f"{value} {what}"))
    rules = RULES.get(kind.name)
    if rules is None:
        return
    if report.stats is None and rules.new_stats is not None:
        report.stats = rules.new_stats(dims)
    file_spec = dataclasses.replace(spec, kind=kind, dims=dims)
    d = rules.derive(batch, file_spec)
    fails = rules.failure_masks(batch, d, file_spec)
    for check in rules.checks:
        if check not in fails:
            continue
        failing = np.flatnonzero(fails[check])
        for i in failing.tolist():
            bad_records.add(int(kept[i]))
            if len(findings.kept) < spec.max_errors:
                field, message = rules.explain(check, batch, d, i, file_spec)
                findings.add(Finding(check, path, int(kept[i]), field, message))
            else:
                findings.add(Finding(check, path, int(kept[i])))
    if report.stats is not None:
        report.stats.update(batch, d, file_spec)


def _read_columnar(path, fmt, spec):
    """(kind, dims, columns) of an HDF5 or Parquet file, or a schema Finding: the file is read whole."""
    try:
        kind, dims, columns = columnar.read_columns(path, fmt)
    except DataError as exc:
        check = "framing" if isinstance(exc, columnar.Unreadable) else "schema"
        return None, None, None, Finding(check, path, None, None, str(exc).removeprefix(f"{path}: "))
    if (spec.kind is not None and spec.kind.name != kind.name) or (spec.dims is not None and spec.dims != dims):
        return None, None, None, Finding("schema", path, None, None, f"{kind.name} records of {dims}, expected "
                                         f"{(spec.kind or kind).name} of {spec.dims or dims}")
    return kind, dims, columns, None


def _scan_columnar(report, spec):
    """scan_file for a columnar file: no framing to check; the schema as a whole file; the kind's rules by chunk."""
    report.bytes = storage.getsize(report.path)
    kind, dims, columns, problem = _read_columnar(report.path, report.fmt, spec)
    if problem is not None:
        report.findings.add(problem)
        report.failed_records = 1
        return report
    report.records = len(columns[kind.names[0]])
    bad_records = set()
    for first in range(0, report.records, spec.chunk):
        batch = {name: values[first:first + spec.chunk] for name, values in columns.items()}
        _check_batch(batch, np.arange(first, first + len(batch[kind.names[0]])), kind, dims, spec, report,
                     bad_records)
    report.kind, report.dims, report.failed_records = kind.name, dims, len(bad_records)
    return report


def iter_batches(path, fmt, spec):
    """Yield (record indices, batch, findings) over a file in order, `spec.chunk` records at a time.

    findings are the framing and schema failures among those records (they
    are left out of the batch); a framing error comes last and ends the file.
    """
    if not codecs.get(fmt).framed:
        kind, _dims, columns, problem = _read_columnar(path, fmt, spec)
        if problem is not None:
            yield np.zeros(0, np.int64), {}, [problem]
            return
        count = len(columns[kind.names[0]])
        for first in range(0, count, spec.chunk):
            batch = {name: values[first:first + spec.chunk] for name, values in columns.items()}
            yield np.arange(first, min(first + spec.chunk, count)), batch, []
        return
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
        _release_chunk(buf, framing, usable)
        yield kept, batch, chunk_findings.kept
    if framing.error:
        yield np.zeros(0, np.int64), {}, [_framing_finding(path, fmt, framing)]


def _framing_finding(path, fmt, framing):
    """The finding of the framing error that ends a file; a file that fails at its first byte because it is
    text (a corpus under a .tfrecord name) is named as text, not as a length CRC mismatch."""
    if framing.error_index == 0 and framing.error.startswith("at byte 0: "):
        text = text_not_records(path, fmt)
        if text is not None:
            return Finding("framing", path, None, None, text)
    return Finding("framing", path, framing.error_index, None, framing.error)


def _release_chunk(buf, framing, indices):
    """The mapped pages of a decoded chunk's records go back: a file is held a chunk at a time."""
    if len(indices):
        first, last = int(indices[0]), int(indices[-1])
        release(buf, int(framing.starts[first]), int(framing.starts[last] + framing.lengths[last]))


class _FileState:
    def __init__(self, spec):
        self.kind, self.dims = spec.kind, spec.dims
        self.layout = None
        self.int64_records = {}

    def note_kinds(self, kinds, count):
        for name, kind in kinds.items():
            int_kinds = codecs.get(self.fmt).int_kinds
            if kind in int_kinds[1:]:  # accepted, not what the format's readers take natively (OneFlow: int32)
                self.int64_records[name] = self.int64_records.get(name, 0) + count


def _decode_chunk(buf, framing, indices, fmt, state, path, findings, bad_records):
    """Decode records `indices` of a file; schema failures become findings. Returns (batch, kept indices)."""
    state.fmt = fmt
    starts = framing.starts[indices]
    lengths = framing.lengths[indices]
    data = buf.data
    if state.layout is None:  # learn it from the first record of a known kind with a sound schema
        for i in range(len(indices)):
            payload = bytes(data[starts[i]:starts[i] + lengths[i]])
            _learn_kind_and_dims(payload, fmt, state)
            if state.kind is None or state.dims is None:
                continue
            _fields, kinds, problems = exact_decode(payload, fmt, state.kind, state.dims)
            if not problems:
                state.layout = layout_of(kinds, fmt, state.kind, state.dims)
                break
    if state.layout is not None:
        ok, fields = lockstep_decode(buf, starts, lengths, state.layout)
        state.note_kinds(state.layout.kinds, int(ok.sum()))
    else:
        ok, fields = np.zeros(len(indices), dtype=bool), {}
    slow = {}
    for i in np.flatnonzero(~ok).tolist():
        payload = bytes(data[starts[i]:starts[i] + lengths[i]])
        _learn_kind_and_dims(payload, fmt, state)
        if state.kind is None:
            problems = [(None, f"features {_names_of(payload, fmt)} match no record kind "
                               f"(known: {', '.join(KINDS)})")]
        elif state.dims is None:
            problems = [(None, "list lengths do not fit a " + state.kind.name + " record ("
                         + ", ".join(f"{f.name}[{f.length}]" for f in state.kind.features) + ")")]
        else:
            record_fields, kinds, problems = exact_decode(payload, fmt, state.kind, state.dims)
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
    for feature in state.kind.features:
        length = feature.size(state.dims)
        column = (fields[feature.name] if feature.name in fields
                  else np.zeros((len(indices), length), np.float32 if feature.dtype == "float" else np.int64))
        for i, record_fields in slow.items():
            column[i] = record_fields[feature.name]
        batch[feature.name] = column if len(keep) == len(indices) else column[keep]
    return batch, indices[keep]


def _learn_kind_and_dims(payload, fmt, state):
    """Set the file's kind and dimensions from a record where the spec left them open (and it is readable)."""
    if state.kind is not None and state.dims is not None:
        return
    try:
        decoded = formats.decode_payload(payload, fmt)
    except WireError:
        return
    if state.kind is None:
        state.kind = kind_of_record({name: stored for name, (stored, _) in decoded.items()})
    if state.kind is not None and state.dims is None:
        state.dims = state.kind.dims_of({name: len(values) for name, (_, values) in decoded.items()})


def _names_of(payload, fmt):
    try:
        return ", ".join(formats.decode_payload(payload, fmt)) or "(none)"
    except WireError as exc:
        return f"unreadable ({exc})"
