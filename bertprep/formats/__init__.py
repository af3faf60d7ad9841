"""BERT pretraining records in TFRecord and OFRecord: the public reader/writer API.

    from bertprep import formats
    for record in formats.read_records("part-0"):          # format sniffed
        record["input_ids"]                                 # NumPy array
    for batch in formats.read_batches(paths, batch_size=256):
        batch["input_ids"].shape                            # (256, seq)

Integer features come back as int64 from TFRecord and int32 from OFRecord
(as stored); `masked_lm_weights` is float32.
"""

import os
import struct

import numpy as np

from bertprep.errors import DataError
from bertprep.formats import ofrecord, tfrecord
from bertprep.formats.crc32c import masked_crc32c
from bertprep.formats.protowire import WireError

CODECS = {"tfrecord": tfrecord, "ofrecord": ofrecord}
FORMATS = tuple(CODECS)

# (name, is_float, length) with length "seq", "pred" or 1. Order: the
# reference script's insertion order, which is also our TFRecord order.
BERT_FEATURES = (
    ("input_ids", False, "seq"),
    ("input_mask", False, "seq"),
    ("segment_ids", False, "seq"),
    ("masked_lm_positions", False, "pred"),
    ("masked_lm_ids", False, "pred"),
    ("masked_lm_weights", True, "pred"),
    ("next_sentence_labels", False, 1),
)
FEATURE_NAMES = tuple(name for name, _, _ in BERT_FEATURES)
# Key order of OneFlow's published BERT sample; writing in it reproduces that file byte for byte.
OFRECORD_KEY_ORDER = (
    "masked_lm_weights",
    "masked_lm_positions",
    "input_mask",
    "masked_lm_ids",
    "input_ids",
    "segment_ids",
    "next_sentence_labels",
)
KEY_ORDER = {"tfrecord": FEATURE_NAMES, "ofrecord": OFRECORD_KEY_ORDER}
_IS_FLOAT = {name: is_float for name, is_float, _ in BERT_FEATURES}


def feature_length(name, seq, pred):
    length = dict((n, ln) for n, _, ln in BERT_FEATURES)[name]
    return {"seq": seq, "pred": pred}.get(length, length)


def encode_record(fields, fmt):
    """Serialize one BERT record (a mapping name -> sequence) in `fmt`, unframed."""
    codec = CODECS[fmt]
    return codec.encode(
        [(name, "float" if _IS_FLOAT[name] else codec.INT_KIND, fields[name]) for name in KEY_ORDER[fmt]]
    )


def frame(payload, fmt):
    return CODECS[fmt].frame(payload)


def decode_payload(payload, fmt):
    """Parse one unframed record into {name: (kind, array)} in stored order (any keys)."""
    return CODECS[fmt].decode(payload)


def sniff_format(path):
    """Tell TFRecord from OFRecord by the first record's framing.

    A TFRecord header carries a masked CRC of its length; an OFRecord has none,
    and the chance that its first payload bytes match that CRC is 2**-32.
    """
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) == 12 and struct.unpack_from("<I", head, 8)[0] == masked_crc32c(head[:8]):
        return "tfrecord"
    name = os.path.basename(path)
    if len(head) < 12 and name.endswith(".tfrecord"):
        return "tfrecord"
    return "ofrecord"


def iter_payloads(path, fmt=None, verify=True):
    """Yield raw payloads of a record file; framing errors name the file."""
    fmt = fmt or sniff_format(path)
    try:
        with open(path, "rb") as f:
            for _offset, payload in CODECS[fmt].iter_payloads(f, verify=verify):
                yield payload
    except WireError as exc:
        raise DataError(f"{path}: {exc}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_records(path, fmt=None, verify=True):
    """Yield each record of a file as {name: NumPy array}, any feature names."""
    fmt = fmt or sniff_format(path)
    for index, payload in enumerate(iter_payloads(path, fmt, verify)):
        try:
            decoded = CODECS[fmt].decode(payload)
        except WireError as exc:
            raise DataError(f"{path}: record {index}: {exc}") from None
        yield {name: values for name, (_kind, values) in decoded.items()}


def read_batches(paths, batch_size, fmt=None, drop_remainder=False):
    """Yield dicts of stacked arrays (batch, length) over the BERT features of `paths` in order."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    buffer = []
    for path in paths:
        for record in read_records(path, fmt):
            missing = [n for n in FEATURE_NAMES if n not in record]
            if missing:
                raise DataError(f"{path}: record lacks feature {missing[0]!r}")
            buffer.append(record)
            if len(buffer) == batch_size:
                yield _stack(buffer)
                buffer = []
    if buffer and not drop_remainder:
        yield _stack(buffer)


def _stack(records):
    return {name: np.stack([r[name] for r in records]) for name in FEATURE_NAMES}


def write_records(path, records, fmt):
    """Write an iterable of BERT records ({name: sequence}) atomically; returns the count."""
    from bertprep.atomic import atomic_open

    count = 0
    with atomic_open(path) as f:
        for fields in records:
            f.write(frame(encode_record(fields, fmt), fmt))
            count += 1
    return count
