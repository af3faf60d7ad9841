"""Walking a framed record file (TFRecord, OFRecord) as one array of bytes: where each record's payload
lies, the first framing error, and TFRecord's CRCs checked for many records at once.

`validate` reads every record of a file and `pack` copies payloads by their offsets, so both walk a whole
file's headers in one short loop (a memory map; a URL's object read whole) instead of decoding records one
by one. The frame sizes are the codecs' (codecs.py). CRCs run in lockstep over many records (the native
crc32c when the extension is built), a window of the file at a time, its pages given back behind it.
"""

import mmap
import struct

import numpy as np

from bertprep import storage
from bertprep.formats import codecs
from bertprep.formats.crc32c import _make_table

try:
    from bertprep._native import crc32c as _native_crc32c
except ImportError:  # extension not built: the NumPy paths below, same results
    _native_crc32c = None

_CRC_TABLE = np.array(_make_table(), dtype=np.uint32)
_CRC_MASK_DELTA = np.uint32(0xA282EAD8)
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
    header, trailer = codecs.get(fmt).header, codecs.get(fmt).trailer
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
    header = codecs.TFRECORD.header  # an 8-byte length, then its 4-byte masked CRC
    header_starts = framing.starts - header
    if framing.error is not None and len(buf) - walked_to >= header:
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
