"""The batch decoder in pure Python: the C decoder's twin, with the same results and the same errors."""

import operator

import numpy as np

from bertprep.formats.framing import CODECS
from bertprep.formats.protowire import WIRE_FIXED32, WIRE_FIXED64, WIRE_LEN, WIRE_VARINT
from bertprep.formats.schemas import FLOAT, PRETRAINING


def decoder_features(kind, dims):
    """The decoders' description of a kind: ((name, is_float, length), ...)."""
    return tuple((f.name, f.dtype == FLOAT, f.size(dims)) for f in kind.features)


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
