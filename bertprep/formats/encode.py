"""Records made bytes: one record of a kind, columns of records at once, compact instances, a whole file."""

import numpy as np

from bertprep.formats import codecs
from bertprep.formats.framing import CODECS, frame
from bertprep.formats.protowire import encode_len_field, encode_map_entry, packed_varint_rows
from bertprep.formats.schemas import FLOAT, PRETRAINING

try:
    from bertprep import _native
except ImportError:  # extension not built: the pure-Python twins give the same results, slower
    _native = None


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


def encode_instances(fmt, *args):
    """encode_instances_python's records, by the C core when it was built (`bertprep._native`) and knows the
    format (its codec's `native`), else by the Python twin: the same bytes."""
    native = _native is not None and codecs.get(fmt).native
    return (_native.encode_instances if native else encode_instances_python)(fmt, *args)


def write_records(path, records, fmt, kind=PRETRAINING):
    """Write an iterable of records of `kind` ({name: sequence}) atomically; returns the count."""
    from bertprep.atomic import atomic_open

    count = 0
    with atomic_open(path) as f:
        for fields in records:
            f.write(frame(encode_record(fields, fmt, kind), fmt))
            count += 1
    return count


def write_framed(path, columns, fmt, kind, staging=None):
    """One file of framed records of `kind` from the rows of `columns`, atomically; (bytes, sha256). The
    framed formats' `write`."""
    from bertprep.atomic import atomic_write_bytes

    return atomic_write_bytes(path, encode_columns(columns, fmt, kind), staging)
