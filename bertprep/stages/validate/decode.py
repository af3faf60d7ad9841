"""Read BERT record files for `bertprep validate`: framing, CRCs and decoding in NumPy batches.

The pure-Python codecs in bertprep.formats decode one record at a time
(~100 µs each); validate reads every record, so it works on a whole file's
bytes at once:

- framing is one short Python loop over record headers (offsets only);
- TFRecord CRCs run in lockstep over many records (the native crc32c when the
  extension is built);
- records are decoded "in lockstep": every record of a file normally has the
  same layout (keys, key order, list kinds, list lengths), so each parsing
  step is one NumPy operation over all records of a chunk. A record that does
  not follow the layout is marked and decoded again by the exact per-record
  codec (`formats.decode_payload`), which either accepts it (another key
  order, unpacked lists, wide varints) or says exactly what is wrong.

Both paths give the same arrays: integers as int64, weights as float32.
"""

import mmap
import struct

import numpy as np

from bertprep import formats, storage
from bertprep.formats.crc32c import _make_table
from bertprep.formats.protowire import WireError
from bertprep.formats.schemas import FLOAT

try:
    from bertprep._native import crc32c as _native_crc32c
except ImportError:  # extension not built: the NumPy paths below, same results
    _native_crc32c = None
# The C batch decoder when it was built; None: the NumPy path only.
_native_decode = formats.decode_batch if _native_crc32c is not None else None

_CRC_TABLE = np.array(_make_table(), dtype=np.uint32)
_CRC_MASK_DELTA = np.uint32(0xA282EAD8)
_HEADER = {"tfrecord": 12, "ofrecord": 8}
_TRAILER = {"tfrecord": 4, "ofrecord": 0}
# Bytes of a mapped record file walked or CRC-checked before their pages are given back: the memory a
# file holds is this much, not its size (a 342 MB file held 342 MB of mapped pages before).
WINDOW = 64 << 20


class Framing:
    """Where the records of one file are: payload offsets and lengths, and the framing error that ended it."""

    def __init__(self, starts, lengths, error=None, error_index=None):
        self.starts = starts
        self.lengths = lengths
        self.error = error  # the first framing error ("at byte …: …"); records from it on are unreadable
        self.error_index = error_index
        self.bad_crc = np.zeros(0, dtype=np.int64)  # TFRecord records whose data CRC fails (framing intact)


def map_file(path):
    """The file's bytes as a read-only uint8 array (memory-mapped; empty files give an empty array). A URL's
    object is read whole into memory (one record file at a time: a shard, not a corpus)."""
    if not storage.reads_in_place(path):
        return np.frombuffer(storage.read_bytes(path), dtype=np.uint8)
    with open(storage.local_path(path), "rb") as f:
        f.seek(0, 2)
        if f.tell() == 0:
            return np.zeros(0, dtype=np.uint8)
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=np.uint8)


def release(buf, start, end):
    """Give back the pages of a mapped file's bytes [start, end) that this process has read: they leave
    its memory and are read again from the page cache if touched again. Nothing for bytes in memory."""
    mapped = getattr(buf.base, "obj", None)  # np.frombuffer(mmap) holds a memoryview of the map
    if not isinstance(mapped, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = start // mmap.PAGESIZE * mmap.PAGESIZE
    end = min(end, len(mapped)) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > start:
        mapped.madvise(mmap.MADV_DONTNEED, start, end - start)


def walk_frames(buf, fmt):
    """Split a file into payload spans; a bad header or a short tail ends the walk with an error.

    TFRecord length CRCs are checked afterwards for all headers at once; the
    first header whose CRC fails is where the walk really ended (its length
    cannot be trusted), whatever the walk itself ran into later.
    """
    header, trailer = _HEADER[fmt], _TRAILER[fmt]
    data = buf.data if len(buf) else b""
    size = len(buf)
    unpack = struct.Struct("<q" if fmt == "ofrecord" else "<Q").unpack_from
    starts = []
    lengths = []
    offset = released = 0
    error = None
    while offset < size:
        if offset - released >= WINDOW:
            release(buf, released, offset)
            released = offset
        if size - offset < header:
            what = "length" if fmt == "ofrecord" else "header"
            error = f"at byte {offset}: truncated {what} ({size - offset} of {header} bytes)"
            break
        (length,) = unpack(data, offset)
        if fmt == "ofrecord" and length <= 0:
            error = f"at byte {offset}: record size {length} (OneFlow needs > 0)"
            break
        if offset + header + length + trailer > size:
            need = length + trailer
            error = f"at byte {offset}: truncated data ({size - offset - header} of {need} bytes)"
            break
        starts.append(offset + header)
        lengths.append(length)
        offset += header + length + trailer
    release(buf, released, offset)
    starts = np.array(starts, dtype=np.int64)
    lengths = np.array(lengths, dtype=np.int64)
    framing = Framing(starts, lengths, error, len(starts) if error else None)
    if fmt == "tfrecord":
        _check_tfrecord_crcs(buf, framing, walked_to=offset)
    return framing


def _check_tfrecord_crcs(buf, framing, walked_to):
    header_starts = framing.starts - 12
    if framing.error is not None and len(buf) - walked_to >= 12:
        header_starts = np.append(header_starts, walked_to)  # the header the walk stopped at
    bad = np.flatnonzero(_crcs_differ(buf, header_starts, np.full(len(header_starts), 8), header_starts + 8))
    if len(bad):
        first = int(bad[0])
        framing.error = f"at byte {int(header_starts[first])}: length CRC mismatch"
        framing.error_index = first
        framing.starts = framing.starts[:first]
        framing.lengths = framing.lengths[:first]
    framing.bad_crc = np.flatnonzero(_crcs_differ(buf, framing.starts, framing.lengths,
                                                  framing.starts + framing.lengths))


def _crcs_differ(buf, starts, lengths, crc_offsets):
    """Whether each span's masked CRC-32C differs from the one stored at its crc offset, a window of the
    file at a time, its pages given back behind it."""
    differ = []
    cuts = np.unique(np.searchsorted(starts, np.arange(0, len(buf) + WINDOW, WINDOW)))
    for first, last in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        part = slice(first, last)
        differ.append(masked_crc32c_many(buf, starts[part], lengths[part]) != _read_u32(buf, crc_offsets[part]))
        release(buf, int(starts[first]), int(crc_offsets[last - 1]) + 4)
    return np.concatenate(differ) if differ else np.zeros(0, dtype=bool)


def _read_u32(buf, offsets):
    if not len(offsets):
        return np.zeros(0, dtype=np.uint32)
    b = buf[offsets[:, None] + np.arange(4)].astype(np.uint32)
    return b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)


def masked_crc32c_many(buf, starts, lengths):
    """TFRecord's masked CRC-32C of buf[start:start+length] for every span."""
    crc = crc32c_many(buf, starts, lengths)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + _CRC_MASK_DELTA


def crc32c_many(buf, starts, lengths):
    if _native_crc32c is not None:
        data = buf.data
        return np.array([_native_crc32c(data[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist())],
                        dtype=np.uint32)
    return _crc32c_lockstep(buf, starts, lengths)


def _crc32c_lockstep(buf, starts, lengths):
    """Byte-at-a-time CRC-32C over all spans at once: one NumPy step per byte column.

    Spans are sorted longest first so the spans still running at column j are
    a prefix, and each step touches only them.
    """
    count = len(starts)
    if count == 0:
        return np.zeros(0, dtype=np.uint32)
    order = np.argsort(-lengths, kind="stable")
    sorted_starts = starts[order]
    sorted_lengths = lengths[order]
    # running[j] = how many spans are longer than j
    running = np.searchsorted(-sorted_lengths, -np.arange(int(sorted_lengths[0])), side="left")
    crc = np.full(count, 0xFFFFFFFF, dtype=np.uint32)
    table = _CRC_TABLE
    eight = np.uint32(8)
    for column, active in enumerate(running.tolist()):
        head = crc[:active]
        byte = buf[sorted_starts[:active] + column]
        crc[:active] = table[(head ^ byte) & 0xFF] ^ (head >> eight)
    crc ^= np.uint32(0xFFFFFFFF)
    out = np.empty(count, dtype=np.uint32)
    out[order] = crc
    return out


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
        allowed = ("float",) if is_float else ("int64",) if fmt == "tfrecord" else ("int32", "int64")
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
    if layout.fmt == "tfrecord":  # Example{features = 1: Features{...}}
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
