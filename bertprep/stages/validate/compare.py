"""`bertprep validate A B --compare`: do two datasets hold the same instances in the same order?

Each side is read as one stream of records (training, then test, files in
natural order) and compared batch by batch, value by value, whatever the
formats (TFRecord int64 and OFRecord int32 compare by value). The answer is
"equal, N records" or the first differing record, field and slot.

Packed rows against the records they were packed from are compared as
instances instead (validate.packed): each packed file, unpacked, must hold
exactly the instances of its source file.
"""

import numpy as np

from bertprep import formats
from bertprep.errors import DataError
from bertprep.formats import codecs
from bertprep.stages.validate import packed
from bertprep.stages.validate.dataset import find_record_files
from bertprep.stages.validate.records import iter_batches


def comparison_pairs(path_a, path_b):
    """[(label, files A, files B)]: what to compare for the given paths.

    One path holding both framed formats: its TFRecord against its OFRecord files.
    Two paths: each format of A against the same format of B (or B's only format).
    """
    files_a = find_record_files(path_a)
    if path_b is None:
        present = [fmt for fmt in codecs.framed_names() if any(f.fmt == fmt for f in files_a)]
        if len(present) < 2:
            return []
        first, second = present[:2]
        return [(f"{first} vs {second}", [f for f in files_a if f.fmt == first],
                 [f for f in files_a if f.fmt == second])]
    files_b = find_record_files(path_b)
    fmts_a = sorted({f.fmt for f in files_a}, key=formats.ALL_FORMATS.index)
    fmts_b = sorted({f.fmt for f in files_b}, key=formats.ALL_FORMATS.index)
    pairs = []
    for fmt in fmts_a:
        other = fmt if fmt in fmts_b else (fmts_b[0] if len(fmts_b) == 1 else None)
        if other is None:
            continue
        pairs.append((f"{fmt} vs {other}", [f for f in files_a if f.fmt == fmt],
                      [f for f in files_b if f.fmt == other]))
    return pairs


def compare_files(files_a, files_b, spec):
    """{"equal", "records", "difference"} for two lists of record files: record by record, or instance
    by instance where one side is packed and the other is not."""
    kinds = [_kind(files) for files in (files_a, files_b)]
    if kinds[0] != kinds[1] and "packed" in kinds:
        packed_side, other = (files_a, files_b) if kinds[0] == "packed" else (files_b, files_a)
        return {**packed.compare_with_unpacked(packed_side, other, spec, iter_batches), "unpacked": True}
    return compare_streams(files_a, files_b, spec)


def _kind(files):
    """The record kind of the first readable file (None if none is: the stream comparison says why)."""
    for record_file in files:
        try:
            return formats.record_kind(record_file.path, record_file.fmt).name
        except DataError:
            continue
    return None


def _stream(files, spec):
    """Yield (path, first record index, batch) in order; raise _Unreadable at the first undecodable record."""
    for record_file in files:
        for indices, batch, problems in iter_batches(record_file.path, record_file.fmt, spec):
            if problems:
                first = min(problems, key=lambda f: f.record if f.record is not None else -1)
                good = indices[indices < first.record] if first.record is not None else indices[:0]
                if len(good):
                    yield record_file.path, good, {k: v[: len(good)] for k, v in batch.items()}
                raise _Unreadable(first)
            if len(indices):
                yield record_file.path, indices, batch


class _Unreadable(Exception):
    def __init__(self, finding):
        super().__init__(finding.line())
        self.finding = finding


class _Cursor:
    """A position in a stream of batches: rows not yet compared."""

    def __init__(self, stream):
        self.stream = stream
        self.path, self.indices, self.batch = None, np.zeros(0, np.int64), {}
        self.offset = 0
        self.done = False
        self.error = None

    def available(self):
        while not self.done and self.offset >= len(self.indices):
            try:
                self.path, self.indices, self.batch = next(self.stream)
                self.offset = 0
            except StopIteration:
                self.done = True
            except _Unreadable as exc:
                self.done = True
                self.error = exc.finding
        return 0 if self.done else len(self.indices) - self.offset

    def take(self, count):
        rows = slice(self.offset, self.offset + count)
        self.offset += count
        return self.indices[rows], {name: values[rows] for name, values in self.batch.items()}


def compare_streams(files_a, files_b, spec):
    """{"equal": bool, "records": compared, "difference": str or None}."""
    a, b = _Cursor(_stream(files_a, spec)), _Cursor(_stream(files_b, spec))
    compared = 0
    while True:
        count = min(a.available(), b.available())
        if count == 0:
            break
        path_a, path_b = a.path, b.path
        indices_a, batch_a = a.take(count)
        indices_b, batch_b = b.take(count)
        row, field, slot = _first_difference(batch_a, batch_b)
        if row is not None:
            if field not in batch_b:
                shown = ": a feature only A's records have (the record kinds differ)"
            elif slot is None:
                shown = f": {len(batch_a[field][row])} vs {len(batch_b[field][row])} values"
            else:
                shown = f"[{slot}]: {_value(batch_a[field][row][slot])} vs {_value(batch_b[field][row][slot])}"
            where = f"{path_a} record {int(indices_a[row])} vs {path_b} record {int(indices_b[row])}"
            return {"equal": False, "records": compared + row,
                    "difference": f"instance {compared + row}: {field}{shown} ({where})"}
        compared += count
    for side, other, name in ((a, b, "A"), (b, a, "B")):
        if side.error is not None:
            return {"equal": False, "records": compared,
                    "difference": f"instance {compared}: {name} cannot be read: {side.error.line()}"}
    if a.available() or b.available():
        longer, name = (a, "A") if a.available() else (b, "B")
        return {"equal": False, "records": compared,
                "difference": f"instance {compared}: only {name} has it "
                              f"({longer.path} record {int(longer.indices[longer.offset])}); "
                              f"the other ends after {compared:,} records"}
    return {"equal": True, "records": compared, "difference": None}


def _first_difference(batch_a, batch_b):
    """(row, field, slot) of the first differing value, fields in the kind's order; (None,)*3 if equal."""
    best = None
    for name in batch_a:
        if name not in batch_b:
            return 0, name, None
        va, vb = batch_a[name], batch_b[name]
        if va.shape[1] != vb.shape[1]:
            return 0, name, None
        differs = va != vb
        rows = np.flatnonzero(differs.any(axis=1))
        if len(rows) and (best is None or rows[0] < best[0]):
            best = (int(rows[0]), name, int(np.flatnonzero(differs[rows[0]])[0]))
    return best if best is not None else (None, None, None)


def _value(v):
    return float(v) if isinstance(v, np.floating) else int(v)
