"""The slice of the protobuf wire format that BERT records use.

Both record formats are a `map<string, Feature>` whose Feature is a oneof of
packed lists; only the field numbers differ (TFRecord: bytes=1, float=2,
int64=3; OFRecord: bytes=1, float=2, double=3, int32=4, int64=5). We encode
canonically (map entries in the order given, key then value, lists packed),
which is what both reference writers produce, so bytes are reproducible.
"""

import numpy as np

from bertprep.errors import DataError

WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_FIXED32 = 0, 1, 2, 5

# A varint for every value below 2**14 (token ids, positions, lengths), so the
# encoder's hot path is a table lookup instead of bit twiddling.
_SMALL_VARINTS = [bytes([v]) if v < 0x80 else bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(1 << 14)]


def encode_varint(value):
    if 0 <= value < (1 << 14):
        return _SMALL_VARINTS[value]
    if value < 0:
        value += 1 << 64  # proto int32/int64: negative values are 10-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_packed_varints(values):
    table = _SMALL_VARINTS
    if values and min(values) < 0:  # a negative index would wrap around the table
        return b"".join([encode_varint(int(v)) for v in values])
    try:
        return b"".join([table[v] for v in values])
    except IndexError:
        return b"".join([encode_varint(int(v)) for v in values])


def encode_key(field_number, wire_type):
    return encode_varint((field_number << 3) | wire_type)


def encode_len_field(field_number, payload):
    return encode_varint((field_number << 3) | WIRE_LEN) + encode_varint(len(payload)) + payload


def encode_feature_map(features, field_numbers, map_field=1):
    """Serialize `[(key, kind, values), ...]` as repeated map entries of field `map_field`.

    kind is 'int64', 'int32', 'float' or 'bytes'; field_numbers maps kind to
    the Feature oneof field number of the format.
    """
    parts = []
    for key, kind, values in features:
        if kind == "bytes":
            list_message = b"".join(encode_len_field(1, bytes(v)) for v in values)
            parts.append(encode_map_entry(key.encode(), field_numbers[kind], list_message, map_field))
            continue
        if kind == "float":
            packed = np.asarray(values, dtype="<f4").tobytes()
        else:
            packed = encode_packed_varints([int(v) for v in values])
        parts.append(encode_map_entry(key.encode(), field_numbers[kind], encode_len_field(1, packed) if packed else b"",
                                      map_field))
    return b"".join(parts)


def encode_map_entry(key, list_field, list_message, map_field=1):
    """One `map<string, Feature>` entry: key (bytes) -> Feature{list_field: list_message}."""
    feature = encode_len_field(list_field, list_message)
    return encode_len_field(map_field, encode_len_field(1, key) + encode_len_field(2, feature))


def packed_varint_rows(values):
    """Each row of a 2-D integer array as packed varints: (bytes of all rows, row offsets (rows + 1)).

    The vectorized twin of encode_packed_varints for many records at once:
    negative values become 10-byte two's complement, as proto int32/int64 do.
    Byte k of every value is made in one pass; a mask keeps the bytes each
    value needs, in row-major order.
    """
    values = np.asarray(values)
    rows = values.shape[0]
    flat = np.ascontiguousarray(values, dtype=np.int64).reshape(-1).astype(np.uint64)
    top = int(flat.max()) if flat.size else 0
    if top < 0x80:  # one byte a value (masks, segment ids, labels): the values are the bytes
        columns = values.shape[1] if values.ndim == 2 else 0
        return flat.astype(np.uint8).tobytes(), np.arange(rows + 1, dtype=np.int64) * columns
    width = (top.bit_length() + 6) // 7
    if top < 1 << 32:
        flat = flat.astype(np.uint32)
    planes = np.empty((flat.size, width), np.uint8)
    sizes = np.ones(flat.size, np.int64)
    for k in range(width):
        shifted = flat >> (7 * k) if k else flat
        more = shifted >= 0x80
        planes[:, k] = (shifted & 0x7F) | (more.astype(np.uint8) << 7)
        if k:
            sizes += shifted > 0
    packed = planes[np.arange(width) < sizes[:, None]]
    offsets = np.zeros(rows + 1, np.int64)
    if rows:
        np.cumsum(sizes.reshape(rows, -1).sum(axis=1), out=offsets[1:])
    return packed.tobytes(), offsets


class WireError(DataError):
    """Malformed protobuf bytes; the caller adds file and record context."""


def read_varint(buf, pos, end):
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def iter_fields(buf, pos, end):
    """Yield (field_number, wire_type, value_or_(start, stop)) over buf[pos:end]."""
    while pos < end:
        tag, pos = read_varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise WireError("field number 0")
        if wire == WIRE_VARINT:
            value, pos = read_varint(buf, pos, end)
            yield field, wire, value
        elif wire == WIRE_LEN:
            length, pos = read_varint(buf, pos, end)
            if pos + length > end:
                raise WireError(f"length-delimited field {field} runs past the end of its message")
            yield field, wire, (pos, pos + length)
            pos += length
        elif wire == WIRE_FIXED32:
            if pos + 4 > end:
                raise WireError("truncated fixed32")
            yield field, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == WIRE_FIXED64:
            if pos + 8 > end:
                raise WireError("truncated fixed64")
            yield field, wire, buf[pos:pos + 8]
            pos += 8
        else:
            raise WireError(f"unsupported wire type {wire} for field {field}")


def _to_signed(value, bits):
    if value >= 1 << (bits - 1):
        value -= 1 << 64 if value >= 1 << 63 or bits == 64 else 1 << bits
    return value


def decode_list(buf, start, stop, kind):
    """Decode a FloatList/Int64List/Int32List/BytesList message into a NumPy array (or list of bytes)."""
    if kind == "bytes":
        return [bytes(buf[a:b]) for f, w, (a, b) in iter_fields(buf, start, stop) if f == 1 and w == WIRE_LEN]
    floats = kind in ("float", "double")
    item_size = 4 if kind == "float" else 8
    values = []
    chunks = []
    for field, wire, value in iter_fields(buf, start, stop):
        if field != 1:
            continue
        if wire == WIRE_LEN:
            a, b = value
            if floats:
                if (b - a) % item_size:
                    raise WireError(f"packed {kind} list of {b - a} bytes is not a multiple of {item_size}")
                chunks.append(np.frombuffer(bytes(buf[a:b]), dtype="<f4" if kind == "float" else "<f8"))
            else:
                pos = a
                while pos < b:
                    v, pos = read_varint(buf, pos, b)
                    values.append(v)
        elif floats and wire in (WIRE_FIXED32, WIRE_FIXED64):
            chunks.append(np.frombuffer(bytes(value), dtype="<f4" if wire == WIRE_FIXED32 else "<f8"))
        elif not floats and wire == WIRE_VARINT:
            values.append(value)
        else:
            raise WireError(f"unexpected wire type {wire} inside a {kind} list")
    if floats:
        dtype = np.float32 if kind == "float" else np.float64
        return np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype)
    bits = 32 if kind == "int32" else 64
    signed = [_to_signed(v, bits) for v in values]
    if bits == 32:
        outside = next((v for v in signed if not -(1 << 31) <= v < 1 << 31), None)
        if outside is not None:  # a damaged varint: say so instead of overflowing the array
            raise WireError(f"value {outside} does not fit an int32_list")
    return np.array(signed, dtype=np.int32 if bits == 32 else np.int64)


def decode_feature_map(buf, kinds_by_field, map_field=1, start=0, end=None):
    """Parse repeated map entries into {key: (kind, values)} in stored order.

    Raises WireError for malformed bytes or an unknown Feature kind.
    """
    end = len(buf) if end is None else end
    result = {}
    for field, wire, value in iter_fields(buf, start, end):
        if field != map_field or wire != WIRE_LEN:
            continue
        key = None
        feature_span = None
        for f, w, v in iter_fields(buf, *value):
            if f == 1 and w == WIRE_LEN:
                try:
                    key = bytes(buf[v[0]:v[1]]).decode()
                except UnicodeDecodeError:
                    raise WireError("feature name is not UTF-8") from None
            elif f == 2 and w == WIRE_LEN:
                feature_span = v
        if key is None:
            raise WireError("map entry without a key")
        kind, values = None, None
        if feature_span is not None:
            for f, w, v in iter_fields(buf, *feature_span):
                if w != WIRE_LEN or f not in kinds_by_field:
                    raise WireError(f"feature {key!r} has unknown list field {f}")
                kind = kinds_by_field[f]
                try:
                    values = decode_list(buf, v[0], v[1], kind)
                except WireError as exc:
                    raise WireError(f"feature {key!r}: {exc}") from None
        if kind is None:
            raise WireError(f"feature {key!r} holds no list")
        result[key] = (kind, values)
    return result
