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

try:
    from bertprep import _native
except ImportError:  # extension not built: the pure-Python twins below give the same results, slower
    _native = None

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


def read_batches(paths, batch_size, fmt=None, drop_remainder=False, seq=None, pred=None):
    """Yield dicts of arrays (batch, length) over the BERT features of `paths` in order.

    Integer features are int64 when the batch holds TFRecord records, int32
    when it holds only OFRecord records; `masked_lm_weights` is float32.
    `seq`/`pred` default to the lengths of the first record; a record that
    lacks a feature or has another length or kind raises DataError naming
    the file and record. The C core reads and decodes when it was built;
    the pure-Python path gives the same batches and the same errors.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
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
                    _decode_pending(pending, seq, pred, native)
                raise
            if seq is None or pred is None:
                seq, pred = _lengths_of_first_record(path, file_fmt, chunk[0], seq, pred)
            taken = 0
            while taken < len(chunk):
                take = min(batch_size - pending_count, len(chunk) - taken)
                pending.append((path, file_fmt, index + taken, chunk[taken:taken + take]))
                pending_count += take
                taken += take
                if pending_count == batch_size:
                    yield _decode_pending(pending, seq, pred, native)
                    pending, pending_count = [], 0
            index += len(chunk)
    if pending:
        batch = _decode_pending(pending, seq, pred, native)  # decoded even when dropped: bad records never pass
        if not drop_remainder:
            yield batch


def _lengths_of_first_record(path, fmt, payload, seq, pred):
    """seq/pred where not given: the lengths of input_ids and masked_lm_positions in the first record."""
    try:
        decoded = decode_payload(payload, fmt)
    except WireError as exc:
        raise DataError(f"{path}: record 0: {exc}") from None
    if seq is None:
        seq = len(decoded["input_ids"][1]) if "input_ids" in decoded else 0
    if pred is None:
        pred = len(decoded["masked_lm_positions"][1]) if "masked_lm_positions" in decoded else 0
    return seq, pred


def _decode_pending(pending, seq, pred, native):
    count = sum(len(payloads) for _, _, _, payloads in pending)
    int_dtype = np.int64 if any(fmt == "tfrecord" for _, fmt, _, _ in pending) else np.int32
    batch = {
        name: np.empty((count, feature_length(name, seq, pred)), np.float32 if is_float else int_dtype)
        for name, is_float, _ in BERT_FEATURES
    }
    decode = native.decode_bert_batch if native else decode_bert_batch_python
    row = 0
    for path, fmt, first_index, payloads in pending:
        rows = [batch[name][row:row + len(payloads)] for name in FEATURE_NAMES]
        try:
            decode(payloads, fmt, seq, pred, *rows, first_index=first_index)
        except ValueError as exc:
            raise DataError(f"{path}: {exc}") from None
        row += len(payloads)
    return batch


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
    """As _python_payload_chunks, framing and TFRecord CRCs checked in C a few MiB at a time."""
    index = offset = needed = 0
    buffer = b""
    try:
        with open(path, "rb") as f:
            while True:
                data = f.read(max(_CHUNK_BYTES, needed - len(buffer)))
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
    """Decode unframed BERT records into row i of each output array: the twin of the C decoder.

    Outputs are C-contiguous NumPy arrays of len(payloads) rows (int32 or
    int64; float32 weights). Any key order, packed or unpacked lists,
    int64_list or int32_list. ValueError "record {i}: ..." names the first
    record that does not fit.
    """
    outputs = (input_ids, input_mask, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights,
               next_sentence_labels)
    rows = {}
    for (name, is_float, _), out in zip(BERT_FEATURES, outputs):
        expected = (np.float32,) if is_float else (np.int32, np.int64)
        if not isinstance(out, np.ndarray) or out.dtype not in expected or not out.flags.c_contiguous:
            raise TypeError(f"output {name}: expected a C-contiguous array of {' or '.join(map(str, expected))}")
        length = feature_length(name, seq, pred)
        if out.size != len(payloads) * length:
            raise ValueError(f"output {name}: expected {len(payloads)} x {length} values, got {out.size}")
        rows[name] = out.reshape(len(payloads), length)
    codec = CODECS[fmt]
    for i, payload in enumerate(payloads):
        where = f"record {first_index + i}"
        try:
            decoded = codec.decode(payload)
        except WireError as exc:
            raise ValueError(f"{where}: {exc}") from None
        for name, is_float, _ in BERT_FEATURES:
            length = feature_length(name, seq, pred)
            if name not in decoded:
                raise ValueError(f"{where}: feature {name!r}: missing")
            kind, values = decoded[name]
            if (kind != "float") if is_float else (kind not in ("int64", "int32")):
                expected = "float_list" if is_float else "int64_list or int32_list"
                raise ValueError(f"{where}: feature {name!r}: expected {expected}, got {kind}_list")
            if len(values) != length:
                raise ValueError(f"{where}: feature {name!r}: expected {length} values, got {len(values)}")
            row = rows[name]
            if row.dtype == np.int32:
                outside = values[(values < -(1 << 31)) | (values >= 1 << 31)]
                if len(outside):
                    raise ValueError(f"{where}: feature {name!r}: value {outside[0]} does not fit int32")
            row[i] = values


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
decode_bert_batch = _native.decode_bert_batch if _native else decode_bert_batch_python


def write_records(path, records, fmt):
    """Write an iterable of BERT records ({name: sequence}) atomically; returns the count."""
    from bertprep.atomic import atomic_open

    count = 0
    with atomic_open(path) as f:
        for fields in records:
            f.write(frame(encode_record(fields, fmt), fmt))
            count += 1
    return count
