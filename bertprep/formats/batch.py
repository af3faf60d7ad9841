"""Encode many records of one kind at once, in NumPy: the same bytes as encoding them one by one.

Every record of a kind has the same keys, key order, list kinds and list
lengths; only the varint sizes of its values differ. So a batch is encoded
field by field over all records at once: each part of a record (a tag, a
key, a length, a packed list) is computed for every record as one flat
array of bytes plus each record's share of it, and the parts are then
interleaved into the records in one scatter per part. For rows of
thousands of values this is some 20× faster than `encode_record` per
record, and the tests compare it with `encode_record` byte for byte.
"""

import struct

import numpy as np

from bertprep.formats import ofrecord, tfrecord
from bertprep.formats.crc32c import masked_crc32c
from bertprep.formats.protowire import WIRE_LEN, encode_key

_CODECS = {"tfrecord": tfrecord, "ofrecord": ofrecord}


class _Part:
    """Bytes of one part of every record: `flat` holds record 0's, then record 1's, …; `sizes` their counts."""

    def __init__(self, flat, sizes):
        self.flat = flat
        self.sizes = sizes


def _constant(data, count):
    return _Part(np.tile(np.frombuffer(data, np.uint8), count), np.full(count, len(data), np.int64))


def varint_sizes(values):
    """Bytes of each value's varint (negative values are 10 bytes, as proto int32/int64 write them)."""
    values = np.asarray(values, dtype=np.int64)
    sizes = np.ones(values.shape, np.int8)
    largest = int(values.max(initial=0))
    for shift in range(7, 64, 7):
        if largest < (1 << shift):
            break
        sizes += values >= (1 << shift)
    if values.min(initial=0) < 0:
        sizes[values < 0] = 10
    return sizes


def _varints(values):
    """The varints of (count, width) values, concatenated per record."""
    values = np.asarray(values, dtype=np.int64)
    count = len(values)
    if values.min(initial=0) >= 0 and values.max(initial=0) < 0x80:  # one byte each: the values themselves
        return _Part(values.astype(np.uint8).reshape(-1), np.full(count, values[0].size if count else 0, np.int64))
    sizes = varint_sizes(values).reshape(-1)
    widest = int(sizes.max(initial=1))
    # 7-bit groups, low first, as (values, widest) bytes; the continuation bit on all but each value's last
    flat = values.reshape(-1)
    narrow = flat.astype(np.uint32) if widest <= 4 else flat.view(np.uint64)
    shifted = narrow[:, None] >> (np.arange(widest) * 7).astype(narrow.dtype)
    groups = (shifted & 0x7F).astype(np.uint8)
    groups |= (shifted > 0x7F).astype(np.uint8) << 7  # bits left above this group: more bytes follow
    return _Part(groups[np.arange(widest, dtype=np.int8) < sizes[:, None]],
                 sizes.reshape(count, -1).sum(axis=1, dtype=np.int64))


def _length_prefixed(field_number, parts, count):
    """A length-delimited field around `parts`: tag, varint(total size), then the parts."""
    total = sum(part.sizes for part in parts) if parts else np.zeros(count, np.int64)
    return [_constant(encode_key(field_number, WIRE_LEN), count), _varints(total[:, None])] + parts


def _size(parts):
    return sum(part.sizes for part in parts)


def _join(parts, count):
    """Interleave the parts into records: (flat bytes, offset of each record) with offsets[-1] the total."""
    sizes = np.stack([part.sizes for part in parts], axis=1)  # (count, parts)
    record_sizes = sizes.sum(axis=1)
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(record_sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    starts = offsets[:-1, None] + np.cumsum(sizes, axis=1) - sizes  # where each part lands in its record
    for index, part in enumerate(parts):
        lengths = part.sizes
        source_starts = np.cumsum(lengths) - lengths
        out[np.repeat(starts[:, index] - source_starts, lengths) + np.arange(int(lengths.sum()))] = part.flat
    return out, offsets


def encode_batch(columns, fmt, kind):
    """The framed records of `kind` whose fields are `columns` {name: (count, length) array}, in `fmt`:
    byte for byte `frame(encode_record(record, fmt, kind), fmt)` of each record in turn."""
    codec = _CODECS[fmt]
    count = len(columns[kind.features[0].name])
    entries = []
    for name in kind.key_order(fmt):
        values = columns[name]
        if kind.feature(name).dtype == "float":
            data = np.ascontiguousarray(values, dtype="<f4").view(np.uint8).reshape(count, -1)
            packed = _Part(data.reshape(-1), np.full(count, data.shape[1], np.int64))
            field = codec.FIELD_BY_KIND["float"]
        else:
            packed = _varints(np.asarray(values).reshape(count, -1))
            field = codec.FIELD_BY_KIND[codec.INT_KIND]
        list_message = _length_prefixed(1, [packed], count) if np.asarray(values).shape[1] else []
        feature = _length_prefixed(field, list_message, count)
        key = _length_prefixed(1, [_constant(name.encode(), count)], count)
        entries += _length_prefixed(1, key + _length_prefixed(2, feature, count), count)
    message = _length_prefixed(1, entries, count) if fmt == "tfrecord" else entries
    payloads, offsets = _join(message, count)
    return _frame_all(payloads, offsets, fmt)


def _frame_all(payloads, offsets, fmt):
    data = payloads.tobytes()
    framed = []
    for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        payload = data[start:stop]
        if fmt == "tfrecord":
            header = struct.pack("<Q", stop - start)
            framed.append(header + struct.pack("<I", masked_crc32c(header)) + payload
                          + struct.pack("<I", masked_crc32c(payload)))
        else:
            framed.append(ofrecord.frame(payload))
    return b"".join(framed)
