"""TFRecord files of `tf.train.Example`s: writer and reader, no TensorFlow needed.

Framing per record: uint64 length (LE), uint32 masked CRC-32C of the length
bytes, the data, uint32 masked CRC-32C of the data. Example proto:
Example{1: Features{1: map<string, Feature>}}, Feature oneof
bytes_list=1, float_list=2, int64_list=3, lists packed.
"""

import struct

from bertprep.formats.crc32c import masked_crc32c
from bertprep.formats.protowire import (
    WIRE_LEN,
    WireError,
    decode_feature_map,
    encode_feature_map,
    encode_len_field,
    iter_fields,
)

FORMAT = "tfrecord"
FIELD_BY_KIND = {"bytes": 1, "float": 2, "int64": 3}
KIND_BY_FIELD = {v: k for k, v in FIELD_BY_KIND.items()}
# The integer kind BERT's integer features have in this format.
INT_KIND = "int64"


class FramingError(WireError):
    pass


def frame(payload):
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc32c(header)) + payload + struct.pack("<I", masked_crc32c(payload))


def encode(features):
    """Serialize `[(key, kind, values), ...]` as a tf.train.Example."""
    return message(encode_feature_map(features, FIELD_BY_KIND))


def message(entries):
    """The tf.train.Example holding already-encoded feature map entries."""
    return encode_len_field(1, entries)


def decode(payload):
    """Parse a tf.train.Example into {key: (kind, array)} in stored order."""
    result = {}
    for field, wire, span in iter_fields(payload, 0, len(payload)):
        if field == 1 and wire == WIRE_LEN:
            result.update(decode_feature_map(payload, KIND_BY_FIELD, start=span[0], end=span[1]))
    return result


def iter_payloads(f, verify=True, size=None):
    """Yield (offset, payload) for each record of an open binary file of `size` bytes (if known).

    Raises FramingError naming the record index and byte offset for a
    truncated record or a CRC mismatch. A length beyond the bytes left is
    reported as truncated before anything that large is allocated.
    """
    index = 0
    offset = 0
    while True:
        header = f.read(12)
        if not header:
            return
        if len(header) < 12:
            raise FramingError(f"record {index} at byte {offset}: truncated header ({len(header)} of 12 bytes)")
        (length,) = struct.unpack_from("<Q", header)
        (length_crc,) = struct.unpack_from("<I", header, 8)
        if verify and masked_crc32c(header[:8]) != length_crc:
            raise FramingError(f"record {index} at byte {offset}: length CRC mismatch")
        if size is not None and length + 4 > size - offset - 12:
            raise FramingError(f"record {index} at byte {offset}: truncated data "
                               f"({max(size - offset - 12, 0)} of {length + 4} bytes)")
        data = f.read(length + 4)
        if len(data) < length + 4:
            raise FramingError(f"record {index} at byte {offset}: truncated data ({len(data)} of {length + 4} bytes)")
        payload = data[:length]
        if verify and masked_crc32c(payload) != struct.unpack_from("<I", data, length)[0]:
            raise FramingError(f"record {index} at byte {offset}: data CRC mismatch")
        yield offset, payload
        offset += 12 + length + 4
        index += 1


def write(path, columns, kind, staging=None):
    """A whole file of these records from their columns, atomically; (bytes, sha256)."""
    from bertprep.formats.encode import write_framed

    return write_framed(path, columns, FORMAT, kind, staging)


def read_columns(path, sha256=None):
    """(kind, {feature: (N, length) array}) of a whole file, integers as stored."""
    from bertprep.formats.batches import read_framed_columns

    return read_framed_columns(path, FORMAT, sha256)
