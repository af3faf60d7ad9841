"""BERT records in TFRecord and OFRecord: the public reader/writer API.

    from bertprep import formats
    for record in formats.read_records("part-0"):          # format sniffed
        record["input_ids"]                                 # NumPy array
    for batch in formats.read_batches(paths, batch_size=256):
        batch["input_ids"].shape                            # (256, seq)

Integer features come back as int64 from TFRecord and int32 from OFRecord
(as stored); float features as float32. What a record holds is its kind
(`formats.schemas`: pretraining, packed, SQuAD, GLUE, ...), described once
as data; the codecs and readers here work from that description.
"""

import operator
import os
import re
import struct

import numpy as np

from bertprep.errors import DataError, UsageError
from bertprep.formats import columnar, ofrecord, tfrecord
from bertprep.formats.crc32c import masked_crc32c
from bertprep.formats.protowire import (
    WIRE_FIXED32,
    WIRE_FIXED64,
    WIRE_LEN,
    WIRE_VARINT,
    WireError,
    encode_len_field,
    encode_map_entry,
    packed_varint_rows,
)
from bertprep.formats.schemas import FLOAT, KINDS, PRETRAINING, kind_of_record

try:
    from bertprep import _native
except ImportError:  # extension not built: the pure-Python twins below give the same results, slower
    _native = None

CODECS = {"tfrecord": tfrecord, "ofrecord": ofrecord}
FORMATS = tuple(CODECS)  # framed: one record after another
ALL_FORMATS = FORMATS + tuple(columnar.CODECS)  # and the columnar ones (HDF5, Parquet): bertprep.formats.columnar
# What each format's files are called, so a name says its format before any byte is read.
_TFRECORD_SUFFIXES = (".tfrecord", ".tf_record")
_OFRECORD_NAME = re.compile(r"^(part-\d+|.*\.of_record-\d+)$")


def encode_record(fields, fmt, kind=PRETRAINING):
    """Serialize one record of `kind` (a mapping name -> sequence) in `fmt`, unframed, in the format's key order."""
    codec = CODECS[fmt]
    return codec.encode([(name, "float" if kind.feature(name).dtype == FLOAT else codec.INT_KIND, fields[name])
                         for name in kind.key_order(fmt)])


def encode_columns(columns, fmt, kind):
    """The framed records of `kind` whose values are the rows of `columns` ({name: (N, length) array}), as bytes.

    The vectorized twin of `frame(encode_record(row, fmt, kind), fmt)` for
    each row: the same bytes. The varints of all rows are made at once; a
    feature's map entry ends with its packed values, and what precedes them
    depends only on their byte length, so that prefix is made once per length.
    """
    codec = CODECS[fmt]
    names = kind.key_order(fmt)
    count = len(columns[names[0]])
    features = []
    for name in names:
        values = np.asarray(columns[name]).reshape(count, -1)
        if kind.feature(name).dtype == FLOAT:
            data = np.ascontiguousarray(values, dtype="<f4")
            buffer, offsets = data.tobytes(), np.arange(count + 1) * data.shape[1] * 4
            field = codec.FIELD_BY_KIND["float"]
        else:
            buffer, offsets = packed_varint_rows(values)
            field = codec.FIELD_BY_KIND[codec.INT_KIND]
        features.append((_EntryPrefixes(name.encode(), field), buffer, offsets.tolist()))
    framed = []
    for i in range(count):
        parts = []
        for prefixes, buffer, offsets in features:
            start, end = offsets[i], offsets[i + 1]
            parts.append(prefixes[end - start])
            parts.append(buffer[start:end])
        framed.append(codec.frame(codec.message(b"".join(parts))))
    return b"".join(framed)


class _EntryPrefixes(dict):
    """packed length -> the bytes of a feature's map entry that come before its packed values."""

    def __init__(self, key, field):
        super().__init__()
        self.key, self.field = key, field

    def __missing__(self, length):
        entry = encode_map_entry(self.key, self.field, encode_len_field(1, bytes(length)) if length else b"")
        self[length] = entry[:len(entry) - length]
        return self[length]


def parse_formats(value):
    """`--format tfrecord,ofrecord` as a tuple in canonical order, whatever order it listed them in."""
    fmts = tuple(f.strip() for f in value.split(",") if f.strip())
    unknown = [f for f in fmts if f not in ALL_FORMATS]
    if unknown or not fmts:
        raise UsageError(f"unknown --format {','.join(unknown) or value!r} (choose from {', '.join(ALL_FORMATS)})")
    return tuple(f for f in ALL_FORMATS if f in fmts)


def frame(payload, fmt):
    return CODECS[fmt].frame(payload)


def decode_payload(payload, fmt):
    """Parse one unframed record into {name: (kind, array)} in stored order (any keys)."""
    return CODECS[fmt].decode(payload)


def format_of_name(name):
    """The format a file's name says it holds (`*.tfrecord`, `*.tf_record`; `part-<i>`, `*.of_record-<i>`), or None."""
    if columnar.format_of_name(name):
        return columnar.format_of_name(name)
    if name.endswith(_TFRECORD_SUFFIXES):
        return "tfrecord"
    if _OFRECORD_NAME.match(name):
        return "ofrecord"
    return None


def sniff_format(path):
    """TFRecord or OFRecord, from the file's name where it follows either ecosystem's naming, else its framing.

    A TFRecord header carries a masked CRC of its length; an OFRecord has none,
    and the chance that its first payload bytes match that CRC is 2**-32. A
    damaged first TFRecord header still tells itself apart: its payload starts
    at byte 12 with the Example's field tag (0x0A), an OFRecord's at byte 8.
    """
    named = format_of_name(os.path.basename(path))
    if named is not None:
        return named
    if columnar.sniff(path):
        return columnar.sniff(path)
    with open(path, "rb") as f:
        head = f.read(13)
    if len(head) >= 12 and struct.unpack_from("<I", head, 8)[0] == masked_crc32c(head[:8]):
        return "tfrecord"
    if len(head) == 13 and head[12] == 0x0A and head[8] != 0x0A:
        return "tfrecord"
    return "ofrecord"


def iter_framed(path, fmt=None, verify=True):
    """Yield (index, byte offset, payload) for each record of a file.

    Allocation is bounded by the file's size: a length field larger than the
    bytes left (a damaged header, a text file) is reported, not read. Errors
    are DataErrors naming the file, record and byte offset.
    """
    fmt = fmt or sniff_format(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            for index, (offset, payload) in enumerate(CODECS[fmt].iter_payloads(f, verify=verify, size=size)):
                yield index, offset, payload
    except WireError as exc:
        raise DataError(f"{path}: {exc}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


def iter_payloads(path, fmt=None, verify=True):
    """Yield the raw payloads of a record file (see iter_framed)."""
    for _index, _offset, payload in iter_framed(path, fmt, verify):
        yield payload


def read_records(path, fmt=None, verify=True):
    """Yield each record of a file as {name: NumPy array}, any feature names.

    A record that does not parse raises DataError naming the file, record,
    byte offset and, where it lies inside one, the feature.
    """
    fmt = fmt or sniff_format(path)
    if fmt in columnar.CODECS:
        yield from columnar.read_records(path, fmt)
        return
    for index, offset, payload in iter_framed(path, fmt, verify):
        try:
            decoded = CODECS[fmt].decode(payload)
        except WireError as exc:
            raise DataError(f"{path}: record {index} at byte {offset}: {exc}") from None
        yield {name: values for name, (_kind, values) in decoded.items()}


def record_kind(path, fmt=None):
    """The kind of the records in a file, from its first record (DataError if empty or of no known kind)."""
    if (fmt or sniff_format(path)) in columnar.CODECS:
        return columnar.record_kind(path, fmt or sniff_format(path))
    for index, offset, payload in iter_framed(path, fmt):
        try:
            decoded = decode_payload(payload, fmt or sniff_format(path))
        except WireError as exc:
            raise DataError(f"{path}: record {index} at byte {offset}: {exc}") from None
        kind = kind_of_record({name: stored for name, (stored, _) in decoded.items()})
        if kind is None:
            raise DataError(f"{path}: record 0 has features {', '.join(decoded)}, which match no record kind "
                            f"(known: {', '.join(KINDS)})")
        return kind
    raise DataError(f"{path}: no records")


def read_batches(paths, batch_size, fmt=None, drop_remainder=False, kind=None, dims=None):
    """Yield dicts of arrays (batch, length) over the features of `kind` in `paths`, in order.

    Integer features are int64 when the batch holds TFRecord records, int32
    when it holds only OFRecord records; float features are float32.
    `kind` defaults to the kind of the first record, `dims` ({"seq": ...,
    "pred": ...}) to its sizes; a record that lacks a feature or has another
    length or kind raises DataError naming the file, record, byte offset and
    feature. The C core reads and decodes when it was built; the
    pure-Python path gives the same batches and the same errors.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if any((fmt or sniff_format(path)) in columnar.CODECS for path in paths):
        yield from columnar.read_batches(paths, batch_size, drop_remainder, kind, dims)
        return
    native = _native
    pending = []  # [(path, fmt, index of its first record in the file, payloads)], < batch_size records
    pending_count = 0
    for path in paths:
        file_fmt = fmt or sniff_format(path)
        chunks = _native_payload_chunks(path, file_fmt) if native else _python_payload_chunks(path, file_fmt)
        index = 0
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except DataError:  # framing: a bad record read before it is reported first
                if pending:
                    _decode_pending(pending, kind, dims)
                raise
            if kind is None or dims is None:
                kind, dims = _kind_and_dims_of_first_record(path, file_fmt, chunk[0], kind, dims)
            taken = 0
            while taken < len(chunk):
                take = min(batch_size - pending_count, len(chunk) - taken)
                pending.append((path, file_fmt, index + taken, chunk[taken:taken + take]))
                pending_count += take
                taken += take
                if pending_count == batch_size:
                    yield _decode_pending(pending, kind, dims)
                    pending, pending_count = [], 0
            index += len(chunk)
    if pending:
        batch = _decode_pending(pending, kind, dims)  # decoded even when dropped: bad records never pass
        if not drop_remainder:
            yield batch


def _kind_and_dims_of_first_record(path, fmt, payload, kind, dims):
    """What read_batches was not given: the kind and dimensions of a file's first record."""
    try:
        decoded = decode_payload(payload, fmt)
    except WireError as exc:
        raise DataError(f"{path}: record 0 at byte 0: {exc}") from None
    if kind is None:
        kind = kind_of_record({name: stored for name, (stored, _) in decoded.items()})
        if kind is None:
            raise DataError(f"{path}: record 0 has features {', '.join(decoded)}, which match no record kind "
                            f"(known: {', '.join(KINDS)})")
    if dims is None:
        dims = kind.dims_of({name: len(values) for name, (_, values) in decoded.items()})
        if dims is None:
            raise DataError(f"{path}: record 0: list lengths do not fit a {kind.name} record "
                            f"({', '.join(f'{f.name}[{f.length}]' for f in kind.features)})")
    return kind, dims


def batch_arrays(kind, dims, count, int_dtype):
    """Empty output arrays {name: (count, length)} for `count` records of `kind`."""
    return {feature.name: np.empty((count, feature.size(dims)), np.float32 if feature.dtype == FLOAT else int_dtype)
            for feature in kind.features}


def decoder_features(kind, dims):
    """The decoders' description of a kind: ((name, is_float, length), ...)."""
    return tuple((f.name, f.dtype == FLOAT, f.size(dims)) for f in kind.features)


def _decode_pending(pending, kind, dims):
    count = sum(len(payloads) for _, _, _, payloads in pending)
    int_dtype = np.int64 if any(fmt == "tfrecord" for _, fmt, _, _ in pending) else np.int32
    batch = batch_arrays(kind, dims, count, int_dtype)
    features = decoder_features(kind, dims)
    row = 0
    for path, fmt, first_index, payloads in pending:
        rows = [batch[name][row:row + len(payloads)] for name, _, _ in features]
        try:
            decode_batch(payloads, fmt, features, rows, first_index=first_index)
        except ValueError as exc:
            raise DataError(f"{path}: {_with_file_offset(path, fmt, str(exc))}") from None
        row += len(payloads)
    return batch


def _with_file_offset(path, fmt, message):
    """A decoder's "record i at byte b: ..." (b within the record's payload) with b made the byte's offset in
    the file, so a user can look at it with any hex viewer (error path only: it walks the framing again)."""
    match = re.match(r"record (\d+)(?: at byte (\d+))?: ", message)
    if not match:
        return message
    wanted, within = int(match.group(1)), int(match.group(2) or 0)
    header = 12 if fmt == "tfrecord" else 8
    for index, offset, _payload in iter_framed(path, fmt, verify=False):
        if index == wanted:
            return f"record {wanted} at byte {offset + header + within}: {message[match.end():]}"
    return message


# Records per list handed on by the payload readers; the native one reads this many bytes at a time.
_CHUNK_RECORDS = 1024
_CHUNK_BYTES = 1 << 22


def _python_payload_chunks(path, fmt):
    """Lists of payloads of a file; a framing error comes after the payloads before it."""
    chunk = []
    try:
        for payload in iter_payloads(path, fmt):
            chunk.append(payload)
            if len(chunk) == _CHUNK_RECORDS:
                yield chunk
                chunk = []
    except DataError:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


def _native_payload_chunks(path, fmt):
    """As _python_payload_chunks, framing and TFRecord CRCs checked in C a few MiB at a time.

    A read never asks for more than the bytes left in the file, so a garbage
    length field ends as "truncated data" instead of one huge allocation.
    """
    index = offset = needed = 0
    buffer = b""
    try:
        with open(path, "rb") as f:
            left = os.fstat(f.fileno()).st_size
            while True:
                data = f.read(min(max(_CHUNK_BYTES, needed - len(buffer)), left))
                left -= len(data)
                buffer = buffer + data if buffer else data
                payloads, consumed, needed, error = _native.split_records(
                    buffer, fmt, first_index=index, first_offset=offset, final=not data
                )
                if payloads:
                    yield payloads
                if error is not None:
                    raise DataError(f"{path}: {error}")
                if not data:
                    return
                index += len(payloads)
                offset += consumed
                buffer = buffer[consumed:]
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


def decode_bert_batch_python(payloads, fmt, seq, pred, input_ids, input_mask, segment_ids, masked_lm_positions,
                             masked_lm_ids, masked_lm_weights, next_sentence_labels, *, first_index=0):
    """decode_batch_python with BERT's schema at seq/pred: the twin of the C decoder's decode_bert_batch."""
    if seq < 0 or pred < 0:
        raise ValueError("seq and pred must be >= 0")
    outputs = (input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights,
               next_sentence_labels)
    decode_batch_python(payloads, fmt, decoder_features(PRETRAINING, {"seq": seq, "pred": pred}), outputs, first_index)


def decode_batch_python(payloads, fmt, features, outputs, first_index=0):
    """Decode unframed records into row i of each output array, by a schema: the twin of the C decoder.

    `features` is a sequence of (name, is_float, length); `outputs` one
    C-contiguous NumPy array per feature of len(payloads) * length values
    (float32 for a float feature, int32 or int64 otherwise). A record may
    hold its keys in any order, its lists packed or not, an integer feature
    as int64_list or int32_list; other keys are checked and not kept; a key
    given twice counts once, the last time. The first record that does not
    fit raises ValueError "record {first_index + i} at byte {b}: feature
    'name': what is wrong, expected what", b being the offset in its payload
    of the byte that shows it (the payload's length for a missing feature);
    the outputs' contents are then unspecified.
    """
    if fmt not in CODECS:
        raise ValueError(f"unknown record format {fmt} (expected 'tfrecord' or 'ofrecord')")
    if len(outputs) != len(features):
        raise ValueError(f"outputs: expected one array per feature ({len(features)}), got {len(outputs)}")
    schema, index = [], {}
    for k, feature in enumerate(features):
        if not (isinstance(feature, tuple) and len(feature) == 3 and isinstance(feature[0], str)):
            raise TypeError(f"features[{k}]: {_FEATURES_EXPECTED}")
        name, is_float, length = feature[0].encode(), bool(feature[1]), operator.index(feature[2])
        if length < 0:
            raise ValueError(f"features[{k}]: length {length}, {_FEATURES_EXPECTED}")
        if name in index:
            raise ValueError(f"features[{k}]: name {feature[0]!r} repeats features[{index[name]}]")
        index[name] = k
        schema.append((name, is_float, length))
    rows = []
    for (name, is_float, length), out in zip(schema, outputs):
        expected = (np.float32,) if is_float else (np.int32, np.int64)
        if (not isinstance(out, np.ndarray) or out.dtype not in expected or not out.flags.c_contiguous
                or not out.flags.writeable):
            raise TypeError(f"output {name.decode()}: expected a writable C-contiguous array of "
                            f"{' or '.join(map(str, expected))}")
        if out.size != len(payloads) * length:
            raise ValueError(f"output {name.decode()}: expected {len(payloads)} x {length} values, got {out.size}")
        rows.append(out.reshape(len(payloads), length))
    for i, payload in enumerate(payloads):
        try:
            _decode_record(payload, fmt, schema, index, rows, i)
        except _Undecodable as error:
            raise ValueError(f"record {first_index + i} at byte {error.offset}: {error.message}") from None


_FEATURES_EXPECTED = "expected (name: str, is_float: bool, length: int >= 0)"
_INT32_RANGE = "expected -2147483648 to 2147483647"
_LIST_FIELDS = {
    "tfrecord": "field 1 (bytes_list), 2 (float_list) or 3 (int64_list)",
    "ofrecord": "field 1 (bytes_list), 2 (float_list), 3 (double_list), 4 (int32_list) or 5 (int64_list)",
}


class _Undecodable(Exception):
    """Why a record does not fit its schema, and the offset in its payload of the byte that shows it."""

    def __init__(self, offset, message):
        super().__init__(offset, message)
        self.offset, self.message = offset, message

    def about(self, key):
        """The same error, naming the feature (UTF-8 bytes) it is about."""
        plain = len(key) < 80 and all(0x20 <= b < 0x7F and b not in b"'\\" for b in key)
        name = f"feature '{key.decode()}'" if plain else f"a feature with a {len(key)}-byte name"
        return _Undecodable(self.offset, f"{name}: {self.message}")


def _decode_record(buf, fmt, schema, index, rows, i):
    """Row i of `rows` from one payload: every key's lists checked, then each schema feature in order."""
    found = [None] * len(schema)
    if fmt == "tfrecord":  # Example{1: Features{map}}
        for _at, field, wire, start, stop, _value in _fields(buf, 0, len(buf)):
            if field == 1 and wire == WIRE_LEN:
                _feature_map(buf, start, stop, fmt, index, found)
    else:
        _feature_map(buf, 0, len(buf), fmt, index, found)
    for (name, is_float, length), row, got in zip(schema, rows, found):
        expected = "float_list" if is_float else "int64_list or int32_list"
        try:
            if got is None:
                article = "a" if is_float else "an"
                raise _Undecodable(len(buf), f"missing, expected {article} {expected} of {length} values")
            kind, list_at, values, offsets = got
            if kind not in (("float",) if is_float else ("int64", "int32")):
                raise _Undecodable(list_at, f"{kind}_list, expected {expected}")
            if len(values) != length:
                raise _Undecodable(list_at, f"{len(values)} values, expected {length}")
            if row.dtype == np.int32:
                outside = np.flatnonzero((values < -(1 << 31)) | (values >= 1 << 31))
                if len(outside):
                    first = outside[0]
                    raise _Undecodable(int(offsets[first]), f"value {values[first]} does not fit int32, {_INT32_RANGE}")
        except _Undecodable as error:
            raise error.about(name) from None
        row[i] = values


def _feature_map(buf, start, end, fmt, index, found):
    """map<string, Feature> entries in buf[start:end]: found[k] = (kind, list offset, values, value offsets)."""
    kinds = CODECS[fmt].KIND_BY_FIELD
    for at, field, wire, entry_start, entry_stop, _value in _fields(buf, start, end):
        if field != 1 or wire != WIRE_LEN:
            continue
        key = span = not_utf8 = None
        try:
            for f_at, f, w, f_start, f_stop, _ in _fields(buf, entry_start, entry_stop):
                if f == 1 and w == WIRE_LEN:
                    name = bytes(buf[f_start:f_stop])
                    try:
                        name.decode()
                    except UnicodeDecodeError:
                        not_utf8 = f_at
                        break
                    key = name
                elif f == 2 and w == WIRE_LEN:
                    span = (f_start, f_stop)
        except _Undecodable as error:
            raise error if key is None else error.about(key) from None
        if not_utf8 is not None:
            raise _Undecodable(not_utf8, "feature name is not UTF-8, expected UTF-8 text")
        if key is None:
            raise _Undecodable(at, "map entry without a key, expected field 1 (the feature name)")
        kind = None
        try:
            for l_at, l_field, l_wire, l_start, l_stop, _ in _fields(buf, *span) if span else ():
                if l_field not in kinds:
                    raise _Undecodable(l_at, f"unknown list field {l_field}, expected {_LIST_FIELDS[fmt]}")
                if l_wire != WIRE_LEN:
                    raise _Undecodable(l_at, f"list field {l_field} of wire type {l_wire}, expected wire type 2")
                kind, list_at = kinds[l_field], l_at
                values, offsets = _list_values(buf, l_start, l_stop, kind)
            if kind is None:
                raise _Undecodable(at, f"holds no list, expected {_LIST_FIELDS[fmt]}")
        except _Undecodable as error:
            raise error.about(key) from None
        if key in index:
            found[index[key]] = (kind, list_at, values, offsets)


def _list_values(buf, start, stop, kind):
    """One list message buf[start:stop]: (float32 values, None) for float and double lists,
    (int64 values, the offset of each) for integer lists, (None, None) for a bytes_list."""
    floats = kind in ("float", "double")
    chunks, offsets = [], []
    for at, field, wire, a, b, value in _fields(buf, start, stop):
        if field != 1 or kind == "bytes":
            continue
        if wire == WIRE_LEN and floats:
            size = 4 if kind == "float" else 8
            if (b - a) % size:
                raise _Undecodable(at, f"packed {kind}_list of {b - a} bytes, expected a multiple of {size}")
            chunks.append(np.frombuffer(buf, f"<f{size}", (b - a) // size, a).astype(np.float32))
        elif wire == WIRE_LEN:
            values, value_offsets = _packed_varints(buf, a, b)
            chunks.append(values)
            offsets.append(value_offsets)
        elif floats and wire in (WIRE_FIXED32, WIRE_FIXED64):
            chunks.append(np.frombuffer(buf, "<f4" if wire == WIRE_FIXED32 else "<f8", 1, a).astype(np.float32))
        elif not floats and wire == WIRE_VARINT:
            chunks.append(np.array([value], np.uint64))
            offsets.append(np.array([a], np.int64))
        else:
            wires = "2, 5 or 1" if floats else "2 or 0"
            raise _Undecodable(at, f"wire type {wire} in the {kind}_list, expected {wires}")
    if kind == "bytes":
        return None, None
    if floats:
        return (np.concatenate(chunks) if chunks else np.zeros(0, np.float32)), None
    values = np.concatenate(chunks) if chunks else np.zeros(0, np.uint64)
    if kind == "int32":  # an int32 written as 32 bits unsigned reads as its negative
        values = np.where((values >= 1 << 31) & (values < 1 << 63), values - np.uint64(1 << 32), values)
    return values.view(np.int64), (np.concatenate(offsets) if offsets else np.zeros(0, np.int64))


def _packed_varints(buf, start, stop):
    """The varints packed in buf[start:stop], modulo 2**64 (uint64), and the offset of each."""
    raw = np.frombuffer(buf, np.uint8, stop - start, start)
    lasts = (raw < 0x80).nonzero()[0]  # each varint's final byte
    if len(lasts) == len(raw):  # one byte each (masks, segments, small ids)
        return raw.astype(np.uint64), lasts + start
    firsts = np.concatenate([[0], lasts[:-1] + 1]) if len(lasts) else lasts
    too_long = (lasts - firsts >= 10).nonzero()[0]
    if len(too_long):
        raise _Undecodable(start + int(firsts[too_long[0]]), _VARINT_TOO_LONG)
    tail = int(lasts[-1]) + 1 if len(lasts) else 0
    if tail < len(raw):  # the last varint has no final byte
        message = _VARINT_TOO_LONG if len(raw) - tail >= 10 else _truncated_varint(stop)
        raise _Undecodable(start + tail, message)
    if not len(lasts):
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    shifts = (np.arange(len(raw)) - np.repeat(firsts, lasts - firsts + 1)).astype(np.uint64) * np.uint64(7)
    values = np.add.reduceat((raw & 0x7F).astype(np.uint64) << shifts, firsts)
    return values, start + firsts


_VARINT_TOO_LONG = "varint longer than 10 bytes, expected at most 10"


def _truncated_varint(end):
    return f"truncated varint (its message ends at byte {end}), expected a final byte below 0x80"


def _varint(buf, pos, end):
    """(value modulo 2**64, position after it) of the varint at buf[pos:end]."""
    start, result, shift = pos, 0, 0
    while True:
        if pos >= end:
            raise _Undecodable(start, _truncated_varint(end))
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFF_FFFF_FFFF_FFFF, pos
        shift += 7
        if shift > 63:
            raise _Undecodable(start, _VARINT_TOO_LONG)


def _fields(buf, pos, end):
    """Yield (tag offset, field, wire type, value start, value stop, varint value) over buf[pos:end]."""
    while pos < end:
        at = pos
        tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise _Undecodable(at, "field number 0, expected 1 or more")
        start = pos
        if wire == WIRE_VARINT:
            value, pos = _varint(buf, pos, end)
            yield at, field, wire, start, pos, value
        elif wire == WIRE_LEN:
            length, start = _varint(buf, pos, end)
            if length > end - start:
                raise _Undecodable(at, f"field {field} of {length} bytes runs past the end of its message, "
                                       f"expected at most {end - start}")
            pos = start + length
            yield at, field, wire, start, pos, None
        elif wire in (WIRE_FIXED32, WIRE_FIXED64):
            size = 4 if wire == WIRE_FIXED32 else 8
            if end - pos < size:
                raise _Undecodable(at, f"fixed{8 * size} field {field} cut off after {end - pos} bytes, "
                                       f"expected {size}")
            pos += size
            yield at, field, wire, start, pos, None
        else:
            raise _Undecodable(at, f"wire type {wire} for field {field}, expected 0, 1, 2 or 5")


def decode_batch(payloads, fmt, features, outputs, *, first_index=0):
    """Decode unframed records into `outputs` (see decode_batch_python): the C decoder when it was built,
    else its Python twin, with the same results and errors."""
    if _native is None:
        decode_batch_python(payloads, fmt, features, outputs, first_index)
    else:
        _native.decode_batch(payloads, fmt, features, outputs, first_index=first_index)


def encode_instances_python(fmt, seq, pred, tokens, instance_starts, a_lengths, masked_positions, masked_labels,
                            mask_starts, is_random_next, first, count):
    """The framed records of instances [first, first+count) of the compact layout: the C encoder's twin.

    The layout is bertprep.instances.Instances: instance i's unpadded tokens
    are tokens[instance_starts[i]:instance_starts[i+1]], segment A has
    a_lengths[i] tokens, its predictions are masked_positions/masked_labels
    [mask_starts[i]:mask_starts[i+1]], is_random_next[i] its NSP label.
    """
    n = len(a_lengths)
    if len(instance_starts) != n + 1 or len(mask_starts) != n + 1 or len(is_random_next) != n:
        raise ValueError(
            f"inconsistent instances: {n} a_lengths, {len(instance_starts)} instance_starts, "
            f"{len(mask_starts)} mask_starts, {len(is_random_next)} is_random_next (expected n, n+1, n+1, n)"
        )
    if first < 0 or count < 0 or first + count > n:
        raise ValueError(f"instances [{first}, {first}+{count}) out of range for {n} instances")
    n_masks = min(len(masked_positions), len(masked_labels))
    parts = []
    for i in range(first, first + count):
        s0, s1 = int(instance_starts[i]), int(instance_starts[i + 1])
        m0, m1 = int(mask_starts[i]), int(mask_starts[i + 1])
        a_length = int(a_lengths[i])
        length, masks = s1 - s0, m1 - m0
        if s0 < 0 or s1 < s0 or s1 > len(tokens):
            raise ValueError(f"instance {i}: tokens [{s0}, {s1}) out of range for {len(tokens)} tokens")
        if length > seq:
            raise ValueError(f"instance {i}: {length} tokens exceed seq={seq}")
        if a_length < 0 or a_length + 2 > length:
            raise ValueError(f"instance {i}: a_length {a_length} does not fit {length} tokens")
        if m0 < 0 or m1 < m0 or m1 > n_masks:
            raise ValueError(f"instance {i}: masks [{m0}, {m1}) out of range for {n_masks} masks")
        if masks > pred:
            raise ValueError(f"instance {i}: {masks} masks exceed pred={pred}")
        padding, mask_padding = [0] * (seq - length), [0] * (pred - masks)
        fields = {
            "input_ids": [int(t) for t in tokens[s0:s1]] + padding,
            "input_mask": [1] * length + padding,
            "segment_ids": [0] * (a_length + 2) + [1] * (length - a_length - 2) + padding,
            "masked_lm_positions": [int(p) for p in masked_positions[m0:m1]] + mask_padding,
            "masked_lm_ids": [int(t) for t in masked_labels[m0:m1]] + mask_padding,
            "masked_lm_weights": [1.0] * masks + [0.0] * (pred - masks),
            "next_sentence_labels": [int(is_random_next[i])],
        }
        parts.append(frame(encode_record(fields, fmt), fmt))
    return b"".join(parts)


# The C core when it was built (`bertprep._native`), else the Python twins: same results.
encode_instances = _native.encode_instances if _native else encode_instances_python


def write_records(path, records, fmt, kind=PRETRAINING):
    """Write an iterable of records of `kind` ({name: sequence}) atomically; returns the count."""
    from bertprep.atomic import atomic_open

    count = 0
    with atomic_open(path) as f:
        for fields in records:
            f.write(frame(encode_record(fields, fmt, kind), fmt))
            count += 1
    return count
