"""Decode BERT record files for `bertprep validate` in NumPy batches (their framing and CRCs:
bertprep.formats.frames).

The pure-Python codecs in bertprep.formats decode one record at a time
(~100 µs each); validate reads every record, so it works on a whole file's
bytes at once:

- framing is one short Python loop over record headers (offsets only) and
  TFRecord CRCs run in lockstep over many records (formats/frames.py);
- records are decoded "in lockstep": every record of a file normally has the
  same layout (keys, key order, list kinds, list lengths), so each parsing
  step is one NumPy operation over all records of a chunk. A record that does
  not follow the layout is marked and decoded again by the exact per-record
  codec (`formats.decode_payload`), which either accepts it (another key
  order, unpacked lists, wide varints) or says exactly what is wrong.

Both paths give the same arrays: integers as int64, weights as float32.
"""

import numpy as np

from bertprep import formats
from bertprep.formats import codecs
from bertprep.formats.protowire import WireError
from bertprep.formats.schemas import FLOAT

try:
    from bertprep._native import crc32c as _native_crc32c
except ImportError:  # extension not built: the NumPy path only
    _native_crc32c = None
# The C batch decoder when it was built; None: the NumPy path only.
_native_decode = formats.decode_batch if _native_crc32c is not None else None

# ---------------------------------------------------------------- decoding


class Layout:
    """The shape every record of a file is expected to have: [(key, kind, length)] in stored order."""

    def __init__(self, fmt, entries):
        self.fmt = fmt
        self.entries = tuple(entries)

    @property
    def kinds(self):
        return {key: kind for key, kind, _ in self.entries}


def exact_decode(payload, fmt, kind, dims):
    """Decode one record with the exact codec and check it against the schema of `kind` at `dims`.

    Returns (fields, kinds, problems): fields {name: array} (int64 / float32)
    or None, kinds {name: kind} as stored, problems [(field, message)]
    (schema errors; an empty list means the record has the kind's schema).
    """
    try:
        decoded = formats.decode_payload(payload, fmt)
    except WireError as exc:
        return None, {}, [(None, f"malformed record: {exc}")]
    problems = []
    for name in kind.names:
        if name not in decoded:
            problems.append((name, f"missing feature {name!r}"))
    for name in decoded:
        if name not in kind.names:
            problems.append((name, f"unexpected feature {name!r} (a {kind.name} record has exactly the "
                                   f"{len(kind.names)} features {', '.join(kind.names)})"))
    kinds = {name: stored for name, (stored, _) in decoded.items()}
    fields = {}
    for feature in kind.features:
        if feature.name not in decoded:
            continue
        stored, values = decoded[feature.name]
        is_float = feature.dtype == FLOAT
        allowed = ("float",) if is_float else codecs.get(fmt).int_kinds
        if stored not in allowed:
            problems.append((feature.name, f"{stored}_list, expected {allowed[0]}_list"))
            continue
        expected = feature.size(dims)
        if len(values) != expected:
            problems.append((feature.name, f"{len(values)} values, expected {expected} ({feature.length})"))
            continue
        fields[feature.name] = values.astype(np.float32 if is_float else np.int64)
    if problems:
        return None, kinds, problems
    return fields, kinds, []


def layout_of(stored_kinds, fmt, kind, dims):
    """The byte layout of a record of `kind` whose lists were stored as `stored_kinds`, in stored order."""
    lengths = kind.lengths(dims)
    return Layout(fmt, [(name, stored, lengths[name]) for name, stored in stored_kinds.items()])


def lockstep_decode(buf, starts, lengths, layout):
    """Decode the records at buf[starts:starts+lengths] that follow `layout` exactly.

    Returns (ok, fields): ok (N,) bool marks records decoded here; fields
    {name: (N, length) array}, meaningful in rows where ok. Rows not ok must go
    through `exact_decode`. With the native extension the values come from
    its batch decoder; the NumPy path below gives the same arrays.
    """
    ok, spans = lockstep_structure(buf, starts, lengths, layout)
    if not len(starts):
        return ok, {}
    features = tuple((key, kind == "float", length) for key, kind, length in layout.entries)
    if _native_decode is not None:
        fields = _native_values(buf, starts, lengths, layout.fmt, features, ok)
        if fields is not None:
            return ok, fields
    fields = {}
    for key, kind, length in layout.entries:
        start, stop = spans[key]
        if kind == "float":
            raw = _bytes_at(buf, start[:, None] + np.arange(4 * length))
            fields[key] = raw.view("<f4").astype(np.float32)
        else:
            fields[key] = _packed_varints(buf, start, stop, length, ok)
    return ok, fields


def lockstep_structure(buf, starts, lengths, layout):
    """Which records follow `layout` byte for byte (keys, order, kinds, packed lengths): (ok, spans).

    spans {key: (start, stop)} are the offsets of each record's packed values.
    """
    count = len(starts)
    if count == 0 or len(buf) == 0:
        return np.zeros(count, dtype=bool), {}
    ends = starts + lengths
    ok = np.ones(count, dtype=bool)
    codec = formats.CODECS[layout.fmt]
    pos = starts.copy()
    if codecs.get(layout.fmt).example_wrapped:  # Example{features = 1: Features{...}}
        _expect(buf, pos, 0x0A, ok)
        size, pos = _varint(buf, pos + 1, ends, ok)
        ok &= pos + size == ends
    spans = {}
    for key, kind, length in layout.entries:
        key_bytes = np.frombuffer(key.encode(), dtype=np.uint8)
        _expect(buf, pos, 0x0A, ok)  # map entry, field 1
        size, pos = _varint(buf, pos + 1, ends, ok)
        entry_end = pos + size
        _expect(buf, pos, 0x0A, ok)  # its key, field 1
        _expect(buf, pos + 1, len(key_bytes), ok)
        pos += 2
        ok &= (_bytes_at(buf, pos[:, None] + np.arange(len(key_bytes))) == key_bytes).all(axis=1)
        pos += len(key_bytes)
        _expect(buf, pos, 0x12, ok)  # its value, field 2: a Feature
        size, pos = _varint(buf, pos + 1, entry_end, ok)
        ok &= pos + size == entry_end
        _expect(buf, pos, (codec.FIELD_BY_KIND[kind] << 3) | 2, ok)  # the oneof list
        size, pos = _varint(buf, pos + 1, entry_end, ok)
        ok &= pos + size == entry_end
        if length:
            _expect(buf, pos, 0x0A, ok)  # the packed values, field 1
            size, pos = _varint(buf, pos + 1, entry_end, ok)
            ok &= pos + size == entry_end
        else:
            ok &= pos == entry_end
        if kind == "float":
            ok &= entry_end - pos == 4 * length
        spans[key] = (pos, entry_end)
        pos = entry_end
    ok &= pos == ends
    return ok, spans


def _native_values(buf, starts, lengths, fmt, features, ok):
    """The values of the records where ok, from the native batch decoder (None if it refuses one)."""
    count = len(starts)
    rows = np.flatnonzero(ok)
    data = buf.data
    payloads = [data[s:s + n] for s, n in zip(starts[rows].tolist(), lengths[rows].tolist())]
    outputs = {key: np.zeros((len(rows), length), np.float32 if is_float else np.int64)
               for key, is_float, length in features}
    try:
        _native_decode(payloads, fmt, features, list(outputs.values()))
    except ValueError:
        return None  # the NumPy path decodes them and marks the odd record
    if len(rows) == count:
        return outputs
    fields = {}
    for name, values in outputs.items():
        fields[name] = np.zeros((count, values.shape[1]), values.dtype)
        fields[name][rows] = values
    return fields


def _bytes_at(buf, pos):
    return buf[np.minimum(pos, len(buf) - 1)]  # positions are never negative; past the end: a row not ok


def _expect(buf, pos, value, ok):
    ok &= _bytes_at(buf, pos) == value


def _varint(buf, pos, limit, ok):
    """Read a varint of at most 5 bytes at each position (a longer one: the row is not ok)."""
    b = _bytes_at(buf, pos).astype(np.int64)
    value = b & 0x7F
    more = b >= 0x80
    size = np.ones_like(pos)
    for k in range(1, 5):
        if not more.any():
            break
        b = _bytes_at(buf, pos + k).astype(np.int64)
        value = np.where(more, value | ((b & 0x7F) << (7 * k)), value)
        size += more
        more &= b >= 0x80
    ok &= ~more
    pos = pos + size
    ok &= pos <= limit
    return value, pos


def _packed_varints(buf, start, stop, length, ok):
    """Decode packed varint lists buf[start:stop] of `length` values each (rows where ok)."""
    out = np.zeros((len(start), length), dtype=np.int64)
    if length == 0:
        return out
    sizes = stop - start
    if (sizes[ok] == length).all():  # one byte per value (masks, segments, short positions)
        raw = _bytes_at(buf, start[:, None] + np.arange(length))
        ok &= (raw < 0x80).all(axis=1)
        return raw.astype(np.int64)
    while True:  # each pass that fails drops at least one row
        rows = np.flatnonzero(ok)
        if not len(rows):
            return out
        row_sizes = sizes[rows]
        row_ends = np.cumsum(row_sizes)
        total = int(row_ends[-1])
        b = buf[np.repeat(start[rows] - (row_ends - row_sizes), row_sizes) + np.arange(total)]
        last = np.flatnonzero(b < 0x80)
        counts = np.diff(np.searchsorted(last, row_ends), prepend=0)
        # a row holds exactly `length` varints and ends on a varint's last byte
        bad = (counts != length) | (b[np.maximum(row_ends - 1, 0)] >= 0x80) | (row_sizes <= 0)
        if not bad.any():
            first = np.empty_like(last)
            first[0] = 0
            first[1:] = last[:-1] + 1
            value_sizes = last - first + 1
            values = (b[first] & 0x7F).astype(np.int64)
            for k in range(1, 5):
                longer = np.flatnonzero(value_sizes > k)
                if not len(longer):
                    break
                values[longer] |= (b[first[longer] + k] & 0x7F).astype(np.int64) << (7 * k)
            values = values.reshape(len(rows), length)
            too_long = (value_sizes > 5).reshape(len(rows), length).any(axis=1)  # ≥ 2**35 or negative
            if not too_long.any():
                out[rows] = values
                return out
            bad = too_long
        ok[rows[bad]] = False
