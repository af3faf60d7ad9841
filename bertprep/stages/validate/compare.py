"""`bertprep validate A B --compare`: do two datasets hold the same instances in the same order?

Each side is read as one stream of records (training, then test, files in
natural order) and compared batch by batch, value by value, whatever the
formats (TFRecord int64 and OFRecord int32 compare by value). The answer is
"equal, N records" or the first differing record, field and slot.

Packed rows against the records they were packed from are compared as
instances instead (validate.packed): each packed file, unpacked, must hold
exactly the instances of its source file.

Token sequences (`bertprep tokenize`'s indexed datasets) are compared the
same way, as one stream per side: every sequence's ids by value and every
document boundary; the answer is "equal, N sequences in D documents" or the
first differing sequence, named in both files with its document.
"""

import os

import numpy as np

from bertprep import formats, storage
from bertprep.errors import DataError
from bertprep.folder import natural_key
from bertprep.formats import codecs
from bertprep.stages.validate import packed
from bertprep.stages.validate.dataset import find_record_files
from bertprep.stages.validate.records import iter_batches
from bertprep.stages.validate.sequences import find_sequence_sets, tokenize_list
from bertprep.stages.validate.text import find_text_shards
from bertprep.workdir import SPLITS


def comparison_pairs(path_a, path_b):
    """[(label, files A, files B)]: what to compare for the given paths.

    One path holding both framed formats: its TFRecord against its OFRecord files.
    Two paths: each format of A against the same format of B (or B's only format; A's only format against each
    of B's).
    """
    files_a = _record_files(path_a)
    if path_b is None:
        present = [fmt for fmt in codecs.framed_names() if any(f.fmt == fmt for f in files_a)]
        if len(present) < 2:
            return []
        first, second = present[:2]
        return [(f"{first} vs {second}", [f for f in files_a if f.fmt == first],
                 [f for f in files_a if f.fmt == second])]
    files_b = _record_files(path_b)
    fmts_a = sorted({f.fmt for f in files_a}, key=formats.ALL_FORMATS.index)
    fmts_b = sorted({f.fmt for f in files_b}, key=formats.ALL_FORMATS.index)
    pairs = []
    for fmt in fmts_a:
        # A's only format against each of B's where B has others only: the mirror of B's only format against
        # each of A's (`validate HDF5_PACKED RECORDS --compare` was refused, the other order compared)
        others = [fmt] if fmt in fmts_b else fmts_b if len(fmts_b) == 1 or len(fmts_a) == 1 else []
        pairs += [(f"{fmt} vs {other}", [f for f in files_a if f.fmt == fmt], [f for f in files_b if f.fmt == other])
                  for other in others]
    return pairs


def _record_files(path):
    """The record files of `path`, as validate checks them: none where `path` is one file of token sequences, a
    text shard or a tokenize --data-path list. Compare read such a file as OFRecord (the format its bytes were
    sniffed as): `validate A.idx B.idx --compare` said "ofrecord vs ofrecord: … truncated data (6958 of
    24844879419493709 bytes)" beside the sequences' "equal", exit 1."""
    if storage.isfile(path) and (tokenize_list(path) or find_sequence_sets(path) or find_text_shards(path)):
        return []
    return find_record_files(path)


def compare_files(files_a, files_b, spec):
    """{"equal", "records", "difference"} for two lists of record files: record by record, or instance
    by instance where one side is packed and the other is not."""
    kinds = [_kind(files) for files in (files_a, files_b)]
    if kinds[0] != kinds[1] and "packed" in kinds:
        packed_side, other = (files_a, files_b) if kinds[0] == "packed" else (files_b, files_a)
        return {**packed.compare_with_unpacked(packed_side, other, spec, iter_batches), "unpacked": True}
    if kinds == ["packed", "packed"]:  # a row holds several instances: counted and named as rows
        return {**compare_streams(files_a, files_b, spec, unit="packed row"), "packed": True}
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


def compare_streams(files_a, files_b, spec, unit="instance"):
    """{"equal": bool, "records": compared, "difference": str or None}; `unit` names what a record is."""
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
                    "difference": f"{unit} {compared + row}: {field}{shown} ({where})"}
        compared += count
    for side, other, name in ((a, b, "A"), (b, a, "B")):
        if side.error is not None:
            return {"equal": False, "records": compared,
                    "difference": f"{unit} {compared}: {name} cannot be read: {side.error.line()}"}
    if a.available() or b.available():
        longer, name = (a, "A") if a.available() else (b, "B")
        return {"equal": False, "records": compared,
                "difference": f"{unit} {compared}: only {name} has it "
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


# ---------------------------------------------------------------- token sequences (`bertprep tokenize`)


def sequence_pairs(path_a, path_b):
    """[(label, [(fmt, prefix)] of A, [(fmt, prefix)] of B)]: the token sequences of two tokenize outputs (a
    directory, one .bin/.idx, or a data-path.txt), each format of A against the same format of B (or B's only
    one); [] where a side holds none. Each side is one stream: training, then test, prefixes in natural order."""
    sides = [_sequence_sets(path) for path in (path_a, path_b)]
    pairs = []
    for fmt, prefixes in sides[0].items():
        other = fmt if fmt in sides[1] else (next(iter(sides[1])) if len(sides[1]) == 1 else None)
        if other is not None:
            pairs.append((f"{fmt} vs {other}", [(fmt, p) for p in prefixes], [(other, p) for p in sides[1][other]]))
    return pairs


def nothing_to_compare(path_a, path_b=None):
    """The usage line where `--compare` of these paths found no pair to compare: one side token sequences
    (`bertprep tokenize`) and the other records was "no record files of a common format", of a records directory."""
    if path_b is not None:
        holds = [("token sequences (`bertprep tokenize`)" if _sequence_sets(path) else
                  "records" if _record_files(path) else
                  TEXT_SHARDS if find_text_shards(path) else None) for path in (path_a, path_b)]
        if holds == [TEXT_SHARDS] * 2:  # was "no record files of a common format", as if one side were empty
            return (f"--compare: {storage.display(path_a)} and {storage.display(path_b)} hold {TEXT_SHARDS}, which "
                    "--compare does not read (it compares records and token sequences): `diff -r` compares their "
                    "bytes")
        if None not in holds and holds[0] != holds[1]:
            return (f"--compare: {storage.display(path_a)} holds {holds[0]}, {storage.display(path_b)} {holds[1]}: "
                    "nothing to compare them by; compare two tokenize outputs, or two records directories")
    return "--compare: no record files of a common format to compare"


TEXT_SHARDS = "text shards (`bertprep shard`)"


def _sequence_sets(path):
    """{fmt: [prefix, ...]} at `path`, in stream order."""
    listed = tokenize_list(path)
    if listed:  # data-path.txt: the pairs it names
        fmt = listed[1].get("format") or codecs.sequence_names()[0]
        module = codecs.get(fmt).implementation
        words = storage.read_bytes(path).decode("utf-8", "replace").split()
        found = [(fmt, [prefix for prefix in words[1::2] if module.is_dataset(prefix)])]
    else:
        found = find_sequence_sets(path)
    return {fmt: sorted(prefixes, key=_stream_order) for fmt, prefixes in found if prefixes}


def _stream_order(prefix):
    split = os.path.basename(os.path.dirname(prefix))  # tokenize writes <out>/<corpus>/<split>/<prefix>
    return (SPLITS.index(split) if split in SPLITS else len(SPLITS)), natural_key(prefix)


class _SequenceCursor:
    """A position in a stream of indexed datasets: the current one read whole, the sequences not yet compared."""

    def __init__(self, prefixes):
        self.prefixes = iter(prefixes)
        self.data = self.prefix = self.module = None
        self.offset = 0
        self.done = False
        self.error = None

    def available(self):
        while not self.done and (self.data is None or self.offset >= len(self.data.lengths)):
            try:
                fmt, self.prefix = next(self.prefixes)
            except StopIteration:
                self.done = True
                break
            self.module = codecs.get(fmt).implementation
            try:
                self.data = codecs.get(fmt).read_sequences(self.prefix)
            except DataError as exc:
                self.done, self.error = True, str(exc)
                break
            self.offset = 0
            self.starts = self.data.starts
        return 0 if self.done else len(self.data.lengths) - self.offset

    def lengths(self, count):
        return self.data.lengths[self.offset:self.offset + count]

    def tokens(self, count):
        return self.data.tokens[self.starts[self.offset]:self.starts[self.offset + count]].astype(np.int64)

    def document_starts(self, count):
        """The sequences (0 … count - 1 from here) where a document starts, once per document (an empty
        document's start repeats its successor's)."""
        starts = self.data.document_indices[:-1] - self.offset
        return starts[(starts >= 0) & (starts < count)]

    def where(self, row, suffix):
        """`row` (from here) as this side's file, sequence and document."""
        sequence = self.offset + row
        document = int(np.searchsorted(self.data.document_indices, sequence, side="right") - 1)
        return f"{storage.display(self.prefix + suffix)} sequence {sequence:,}, document {document:,}"


def compare_sequences(prefixes_a, prefixes_b):
    """{"equal", "sequences", "documents", "difference"} for two streams of indexed datasets ([(fmt, prefix)]):
    the same ids in every sequence (compared by value, whatever the dtype) and the same document boundaries."""
    a, b = _SequenceCursor(prefixes_a), _SequenceCursor(prefixes_b)
    compared = documents = 0
    while True:
        count = min(a.available(), b.available())
        if count == 0:
            break
        difference = _first_sequence_difference(a, b, count)
        if difference is not None:
            row, what, suffix = difference
            return {"equal": False, "sequences": compared + row, "documents": documents,
                    "difference": f"sequence {compared + row:,}: {what} ({a.where(row, suffix)} vs "
                                  f"{b.where(row, suffix)})"}
        documents += len(a.document_starts(count))
        compared += count
        a.offset += count
        b.offset += count
    for side, name in ((a, "A"), (b, "B")):
        if side.error is not None:
            return {"equal": False, "sequences": compared, "documents": documents,
                    "difference": f"sequence {compared:,}: {name} cannot be read: {side.error}"}
    if a.available() or b.available():
        longer, name = (a, "A") if a.available() else (b, "B")
        return {"equal": False, "sequences": compared, "documents": documents,
                "difference": f"sequence {compared:,}: only {name} has it ({longer.where(0, longer.module.BIN)}); "
                              f"the other ends after {compared:,} sequences"}
    return {"equal": True, "sequences": compared, "documents": documents, "difference": None}


def _first_sequence_difference(a, b, count):
    """(row, what differs, the file suffix that holds it) of the first of the next `count` sequences whose ids
    or document start differ on the two sides, or None."""
    lengths_a, lengths_b = a.lengths(count), b.lengths(count)
    unequal = np.flatnonzero(lengths_a != lengths_b)
    same_length = int(unequal[0]) if len(unequal) else count  # the sequences before it line up id by id
    tokens_a, tokens_b = a.tokens(same_length), b.tokens(same_length)
    differs = np.flatnonzero(tokens_a != tokens_b)
    ends = np.cumsum(lengths_a[:same_length], dtype=np.int64)
    row = int(np.searchsorted(ends, differs[0], side="right")) if len(differs) else same_length
    starts_a, starts_b = a.document_starts(count), b.document_starts(count)
    shared = min(len(starts_a), len(starts_b))
    mismatch = np.flatnonzero(starts_a[:shared] != starts_b[:shared])
    boundary = (min(int(starts_a[mismatch[0]]), int(starts_b[mismatch[0]])) if len(mismatch) else
                int(min(starts_a[shared:].min(initial=count), starts_b[shared:].min(initial=count))))
    if boundary < count and boundary <= row:
        in_a, in_b = int((starts_a == boundary).sum()), int((starts_b == boundary).sum())
        what = (f"a document starts here in {'A' if in_a else 'B'}, not in {'B' if in_a else 'A'}"
                if not in_a or not in_b else f"{in_a} documents start here in A, {in_b} in B (empty documents)")
        return boundary, what, a.module.IDX
    if row >= count:
        return None
    ids_a, ids_b = a.data.sequence(a.offset + row), b.data.sequence(b.offset + row)
    shared = min(len(ids_a), len(ids_b))
    slot = np.flatnonzero(ids_a[:shared].astype(np.int64) != ids_b[:shared].astype(np.int64))
    if len(slot):
        return row, f"ids[{int(slot[0])}]: {int(ids_a[slot[0]])} vs {int(ids_b[slot[0]])}", a.module.BIN
    return row, f"{len(ids_a):,} vs {len(ids_b):,} ids", a.module.IDX
