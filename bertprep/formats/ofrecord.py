"""OneFlow OFRecord files: writer and reader, no OneFlow needed.

From OneFlow's `oneflow/core/record/record.proto` (proto2, package oneflow):
OFRecord{map<string, Feature> feature = 1}; Feature oneof bytes_list=1,
float_list=2, double_list=3, int32_list=4, int64_list=5, lists packed.
Framing per record: int64 length (LE), then the message; no checksum. Files
are `<dir>/part-<i>`; OneFlow aborts on a record of size 0.
"""

import struct

from bertprep.formats.protowire import WireError, decode_feature_map, encode_feature_map

FORMAT = "ofrecord"
FIELD_BY_KIND = {"bytes": 1, "float": 2, "double": 3, "int32": 4, "int64": 5}
KIND_BY_FIELD = {v: k for k, v in FIELD_BY_KIND.items()}
INT_KIND = "int32"


class FramingError(WireError):
    pass


def frame(payload):
    if not payload:
        raise ValueError("OneFlow rejects a record of size 0")
    return struct.pack("<q", len(payload)) + payload


def encode(features):
    """Serialize `[(key, kind, values), ...]` as an OFRecord."""
    return encode_feature_map(features, FIELD_BY_KIND)


def message(entries):
    """The OFRecord holding already-encoded feature map entries: the entries themselves."""
    return entries


def decode(payload):
    return decode_feature_map(payload, KIND_BY_FIELD)


def iter_payloads(f, verify=True, size=None):
    """Yield (offset, payload) for each record of an open binary file of `size` bytes (if known).

    A length beyond the bytes left is reported as truncated before anything
    that large is allocated.
    """
    del verify  # OFRecord has no checksum; size checks always run
    index = 0
    offset = 0
    while True:
        header = f.read(8)
        if not header:
            return
        if len(header) < 8:
            raise FramingError(f"record {index} at byte {offset}: truncated length ({len(header)} of 8 bytes)")
        (length,) = struct.unpack("<q", header)
        if length <= 0:
            raise FramingError(f"record {index} at byte {offset}: record size {length} (OneFlow needs > 0)")
        if size is not None and length > size - offset - 8:
            raise FramingError(f"record {index} at byte {offset}: truncated data "
                               f"({max(size - offset - 8, 0)} of {length} bytes)")
        payload = f.read(length)
        if len(payload) < length:
            raise FramingError(f"record {index} at byte {offset}: truncated data ({len(payload)} of {length} bytes)")
        yield offset, payload
        offset += 8 + length
        index += 1


def write(path, columns, kind, staging=None):
    """A whole file of these records from their columns, atomically; (bytes, sha256)."""
    from bertprep.formats.encode import write_framed

    return write_framed(path, columns, FORMAT, kind, staging)


def read_columns(path, sha256=None):
    """(kind, {feature: (N, length) array}) of a whole file, integers as stored."""
    from bertprep.formats.batches import read_framed_columns

    return read_framed_columns(path, FORMAT, sha256)
