"""The C core `bertprep._native` against its pure-Python twins and the golden files.

Every native function must give what its twin gives: the same bytes, the
same arrays, the same errors. The golden files (google-research/bert's
instances) pin both down.
"""

import io
import random
import struct

import numpy as np
import pytest

from bertprep import formats
from bertprep.errors import DataError
from bertprep.formats import crc32c as crc_module
from bertprep.formats import ofrecord, tfrecord
from bertprep.formats.protowire import encode_varint, read_varint
from bertprep.formats.schemas import PRETRAINING

native = pytest.importorskip("bertprep._native", reason="C extension not built (python setup.py build_ext --inplace)")

GOLDEN = [("G1", 128, 20), ("G2", 512, 80), ("G3", 128, 20)]
FORMATS = ("tfrecord", "ofrecord")


# -- helpers ------------------------------------------------------------------------------


def compact_layout(records, token_dtype=np.uint16, label_dtype=None):
    """The compact instance layout (bertprep.instances.Instances) rebuilt from decoded records."""
    label_dtype = label_dtype or token_dtype
    tokens, instance_starts, a_lengths = [], [0], []
    positions, labels, mask_starts, is_random_next = [], [], [0], []
    for r in records:
        n = int(r["input_mask"].sum())
        tokens.append(r["input_ids"][:n])
        instance_starts.append(instance_starts[-1] + n)
        a_lengths.append(int((r["segment_ids"][:n] == 0).sum()) - 2)
        m = int(r["masked_lm_weights"].sum())
        positions.append(r["masked_lm_positions"][:m])
        labels.append(r["masked_lm_ids"][:m])
        mask_starts.append(mask_starts[-1] + m)
        is_random_next.append(int(r["next_sentence_labels"][0]))
    return (
        np.concatenate(tokens).astype(token_dtype),
        np.array(instance_starts, np.int64),
        np.array(a_lengths, np.int32),
        np.concatenate(positions).astype(np.uint16),
        np.concatenate(labels).astype(label_dtype),
        np.array(mask_starts, np.int64),
        np.array(is_random_next, np.uint8),
    )


def random_layout(rng, n, seq, pred, token_dtype, max_token):
    """Instances of random lengths and values, edge cases included (full length, no masks)."""
    lengths = [seq if i % 5 == 0 else rng.randint(3, seq) for i in range(n)]
    masks = [0 if i % 7 == 3 else rng.randint(0, min(pred, length)) for i, length in enumerate(lengths)]
    tokens = np.array([rng.randint(0, max_token) for _ in range(sum(lengths))], token_dtype)
    positions = np.concatenate([np.sort(rng.sample(range(length), m)) for length, m in zip(lengths, masks)] + [[]])
    labels = np.array([rng.randint(0, max_token) for _ in range(sum(masks))], token_dtype)
    return (
        tokens,
        np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        np.array([rng.randint(0, length - 3) for length in lengths], np.int32),
        positions.astype(np.uint16),
        labels,
        np.concatenate([[0], np.cumsum(masks)]).astype(np.int64),
        np.array([rng.randint(0, 1) for _ in range(n)], np.uint8),
    )


def new_outputs(n, seq, pred, int_dtype=np.int64):
    return [
        np.full((n, length), -7, np.float32 if is_float else int_dtype)
        for _name, is_float, length in formats.decoder_features(PRETRAINING, {"seq": seq, "pred": pred})
    ]


def golden_records(golden_dir, name):
    return list(formats.read_records(golden_dir / f"{name}.tfrecord"))


def len_field(field, payload):
    return encode_varint((field << 3) | 2) + encode_varint(len(payload)) + payload


def map_entry(key, list_field, list_message):
    """One map<string, Feature> entry whose Feature holds `list_message` in oneof field `list_field`."""
    return len_field(1, len_field(1, key.encode()) + len_field(2, len_field(list_field, list_message)))


def unpacked_ints(values):
    return b"".join(encode_varint(1 << 3) + encode_varint(v) for v in values)


def unpacked_floats(values):
    return b"".join(encode_varint((1 << 3) | 5) + struct.pack("<f", v) for v in values)


def both_decoders(payloads, fmt, seq, pred, int_dtype=np.int64):
    """Run the C decoder and the Python twin; return (native outputs, python outputs, errors)."""
    results, errors = [], []
    for decode in (native.decode_bert_batch, formats.decode_bert_batch_python):
        outputs = new_outputs(len(payloads), seq, pred, int_dtype)
        try:
            decode(payloads, fmt, seq, pred, *outputs)
            errors.append(None)
        except ValueError as exc:
            errors.append(str(exc))
        results.append(outputs)
    return results[0], results[1], errors


# -- crc32c -------------------------------------------------------------------------------


def test_crc32c_check_value_and_twin():
    assert native.crc32c(b"123456789") == 0xE3069283
    assert native.crc32c(b"") == 0
    assert native.crc32c(b"6789", native.crc32c(b"12345")) == 0xE3069283
    rng = random.Random(1)
    for length in (1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 70000):
        data = rng.randbytes(length)
        assert native.crc32c(data) == crc_module._python_crc32c(data), length
        # unaligned starts, other bytes-like objects
        assert native.crc32c(memoryview(data)[3:]) == crc_module._python_crc32c(data[3:])
        assert native.crc32c(bytearray(data), 12345) == crc_module._python_crc32c(data, 12345)
    assert crc_module.crc32c is native.crc32c  # the codecs use the C version when built


def test_crc32c_rejects_bad_arguments():
    with pytest.raises(OverflowError):
        native.crc32c(b"x", 1 << 32)
    with pytest.raises(TypeError):
        native.crc32c("text")


# -- encode_instances ---------------------------------------------------------------------


@pytest.mark.parametrize("name,seq,pred", GOLDEN)
@pytest.mark.parametrize("token_dtype", [np.uint16, np.int32])
def test_encode_instances_reproduces_golden_files(golden_dir, name, seq, pred, token_dtype):
    layout = compact_layout(golden_records(golden_dir, name), token_dtype)
    n = len(layout[2])
    for fmt in FORMATS:
        expected = (golden_dir / f"{name}.{fmt}").read_bytes()
        assert native.encode_instances(fmt, seq, pred, *layout, 0, n) == expected
        if token_dtype == np.uint16:  # the twin is slow; once per file is enough
            assert formats.encode_instances_python(fmt, seq, pred, *layout, 0, n) == expected


def test_encode_instances_ranges_concatenate(golden_dir):
    layout = compact_layout(golden_records(golden_dir, "G1"))
    whole = native.encode_instances("tfrecord", 128, 20, *layout, 0, 100)
    pieces = [native.encode_instances("tfrecord", 128, 20, *layout, first, 25) for first in (0, 25, 50, 75)]
    assert b"".join(pieces) == whole
    assert native.encode_instances("tfrecord", 128, 20, *layout, 7, 0) == b""


@pytest.mark.parametrize("token_dtype,max_token", [(np.uint16, 65535), (np.int32, (1 << 31) - 1), (np.int64, 1 << 40)])
def test_encode_instances_matches_twin_on_random_instances(token_dtype, max_token):
    rng = random.Random(5)
    for seq, pred in ((16, 5), (40, 40), (9, 0)):
        layout = random_layout(rng, 30, seq, pred, token_dtype, max_token)
        for fmt in FORMATS:
            got = native.encode_instances(fmt, seq, pred, *layout, 2, 25)
            assert got == formats.encode_instances_python(fmt, seq, pred, *layout, 2, 25)
            assert len(list(formats.CODECS[fmt].iter_payloads(io.BytesIO(got)))) == 25


NEGATIVE_IDS = (np.array([101, -5, 102, 7, 102], np.int32), np.array([0, 5], np.int64), np.array([1], np.int32),
                np.array([1], np.uint16), np.array([-5], np.int32), np.array([0, 1], np.int64), np.array([0], np.uint8))


def test_encode_instances_negative_ids_are_ten_byte_varints():
    for fmt in FORMATS:
        got = native.encode_instances(fmt, 8, 2, *NEGATIVE_IDS, 0, 1)
        (record,) = _records_of(got, fmt)
        assert record["input_ids"][1] == -5 and record["masked_lm_ids"][0] == -5


def test_encode_instances_twin_agrees_on_negative_ids():
    for fmt in FORMATS:
        assert native.encode_instances(fmt, 8, 2, *NEGATIVE_IDS, 0, 1) == formats.encode_instances_python(
            fmt, 8, 2, *NEGATIVE_IDS, 0, 1)


def _records_of(framed, fmt):
    codec = formats.CODECS[fmt]
    for _offset, payload in codec.iter_payloads(io.BytesIO(framed)):
        yield {name: values for name, (_kind, values) in codec.decode(payload).items()}


def _layout_with(**changes):
    base = dict(
        tokens=np.array([101, 5, 102, 6, 102, 101, 7, 102, 8, 102], np.uint16),
        instance_starts=np.array([0, 5, 10], np.int64),
        a_lengths=np.array([1, 1], np.int32),
        masked_positions=np.array([1, 3], np.uint16),
        masked_labels=np.array([5, 8], np.uint16),
        mask_starts=np.array([0, 1, 2], np.int64),
        is_random_next=np.array([0, 1], np.uint8),
    )
    base.update(changes)
    return list(base.values())


@pytest.mark.parametrize(
    "seq,pred,changes,first,count,message",
    [
        (4, 2, {}, 0, 2, "instance 0: 5 tokens exceed seq=4"),
        (8, 0, {}, 0, 2, "instance 0: 1 masks exceed pred=0"),
        (8, 2, {"a_lengths": np.array([1, 4], np.int32)}, 0, 2, "instance 1: a_length 4 does not fit 5 tokens"),
        (8, 2, {"instance_starts": np.array([0, 5, 11], np.int64)}, 1, 1, "instance 1: tokens [5, 11) out of range"),
        (8, 2, {"mask_starts": np.array([0, 2, 1], np.int64)}, 0, 2, "instance 1: masks [2, 1) out of range"),
        (8, 2, {"is_random_next": np.array([0], np.uint8)}, 0, 1, "inconsistent instances"),
        (8, 2, {}, 1, 2, "instances [1, 1+2) out of range for 2 instances"),
    ],
)
def test_encode_instances_rejects_inconsistent_layouts_like_its_twin(seq, pred, changes, first, count, message):
    layout = _layout_with(**changes)
    for encode in (native.encode_instances, formats.encode_instances_python):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
                           .replace("+", r"\+")):
            encode("tfrecord", seq, pred, *layout, first, count)
    with pytest.raises(ValueError, match="unknown record format"):
        native.encode_instances("json", 8, 2, *_layout_with(), 0, 1)
    with pytest.raises(TypeError, match="integer buffer"):
        native.encode_instances("tfrecord", 8, 2, *_layout_with(tokens=np.zeros(10, np.float32)), 0, 1)


# -- decode_batch and decode_bert_batch ---------------------------------------------------

# A made-up schema: an int feature of 5 values, a float feature of 2, an int feature of 1.
SCHEMA = (("ids", False, 5), ("scores", True, 2), ("label", False, 1))


def schema_outputs(features, n, int_dtype=np.int64):
    return [np.full((n, length), -7, np.float32 if is_float else int_dtype) for _name, is_float, length in features]


def both_schema_decoders(payloads, fmt, features, int_dtype=np.int64, first_index=0):
    """decode_batch in C and its Python twin on fresh outputs: (native outputs, python outputs, errors)."""
    results, errors = [], []
    for decode in (native.decode_batch, formats.decode_batch_python):
        outputs = schema_outputs(features, len(payloads), int_dtype)
        try:
            decode(payloads, fmt, features, outputs, first_index)
            errors.append(None)
        except ValueError as exc:
            errors.append(str(exc))
        results.append(outputs)
    return results[0], results[1], errors


def same_bytes(a, b):
    """Equal arrays, NaNs and all."""
    return all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(a, b))


def list_tag_offset(payload, key):
    """Where the list of `key`'s last entry starts in a payload: after its key field, the Feature's tag and length."""
    key_field = len_field(1, key.encode())
    at = payload.rindex(key_field) + len(key_field)
    assert payload[at] == 0x12  # field 2 (the value), length-delimited
    _length, at = read_varint(payload, at + 1, len(payload))
    return at


@pytest.mark.parametrize("name,seq,pred", GOLDEN)
@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_batch_reads_golden_files(golden_dir, name, seq, pred, fmt):
    path = golden_dir / f"{name}.{fmt}"
    payloads = list(formats.iter_payloads(path))
    expected = [np.stack([r[feature] for r in formats.read_records(path)]) for feature in PRETRAINING.names]
    features = formats.decoder_features(PRETRAINING, {"seq": seq, "pred": pred})
    assert [(n, is_float) for n, is_float, _ in features] == [(f.name, f.dtype == "float")
                                                              for f in PRETRAINING.features]
    runs = [(native.decode_batch, np.int32), (native.decode_batch, np.int64),
            (formats.decode_batch_python, np.int32 if fmt == "ofrecord" else np.int64)]  # the twin is slow: once
    for decode, int_dtype in runs:
        got = schema_outputs(features, len(payloads), int_dtype)
        decode(payloads, fmt, features, got)
        for feature, g, want in zip(PRETRAINING.names, got, expected):
            assert np.array_equal(g, want), (decode, feature)
    # decode_bert_batch is decode_batch with this schema
    bert = new_outputs(len(payloads), seq, pred)
    native.decode_bert_batch(payloads, fmt, seq, pred, *bert)
    assert same_bytes(bert, [g.astype(np.int64) if g.dtype == np.int32 else g for g in got])


def _schema_record(fmt, ids, scores, label, int_kind=None, order=(0, 1, 2), extra=()):
    codec = formats.CODECS[fmt]
    int_kind = int_kind or codec.INT_KIND
    items = [("ids", int_kind, ids), ("scores", "float", scores), ("label", int_kind, [label])]
    return codec.encode([items[k] for k in order] + list(extra))


def test_decode_batch_made_up_schema():
    rows = [([1, 2, 300, 70000, 5], [0.5, -2.0], 1), ([0, 0, 0, 0, 0], [0.0, 1e30], 0),
            ([(1 << 31) - 1, -(1 << 31), 7, 8, 9], [float("inf"), 3.25], -1), ([9] * 5, [1.0, 2.0], 12345)]
    cases = {
        "tfrecord": [
            _schema_record("tfrecord", *rows[0]),
            _schema_record("tfrecord", *rows[1], order=(2, 0, 1), extra=[("note", "bytes", [b"x", b""])]),
            # unpacked lists, and Example's Features message split in two (protobuf merges them)
            len_field(1, map_entry("label", 3, unpacked_ints([rows[2][2] % (1 << 64)])) + map_entry(
                "scores", 2, unpacked_floats(rows[2][1]))) + len_field(1, map_entry(
                    "ids", 3, unpacked_ints([v % (1 << 64) for v in rows[2][0]]))),
            # a key given twice: the last entry counts
            _schema_record("tfrecord", [1] * 5, [0.0, 0.0], 4, extra=[("ids", "int64", rows[3][0]),
                                                                       ("label", "int64", [rows[3][2]]),
                                                                       ("scores", "float", rows[3][1])]),
        ],
        "ofrecord": [
            _schema_record("ofrecord", *rows[0]),
            _schema_record("ofrecord", *rows[1], int_kind="int64", order=(1, 2, 0))
            + map_entry("d", 3, len_field(1, struct.pack("<d", 1.5))),  # a double_list (protowire writes none)
            # a negative int32 written as its 32 bits unsigned reads back negative, as in the 10-byte form
            map_entry("ids", 4, len_field(1, b"".join(encode_varint(v % (1 << 32)) for v in rows[2][0])))
            + _schema_record("ofrecord", [0] * 5, rows[2][1], rows[2][2], order=(1, 2)),
            _schema_record("ofrecord", *rows[3], extra=[("extra", "int32", list(range(40)))]),
        ],
    }
    expected = [np.array([ids for ids, _, _ in rows]), np.array([scores for _, scores, _ in rows], np.float32),
                np.array([[label] for _, _, label in rows])]
    for fmt, payloads in cases.items():
        for int_dtype in (np.int32, np.int64):
            got, twin, errors = both_schema_decoders(payloads, fmt, SCHEMA, int_dtype)
            assert errors == [None, None], (fmt, errors)
            for g, t, want in zip(got, twin, expected):
                assert np.array_equal(g, want) and same_bytes([g], [t]), fmt


def _schema_errors():
    """(id, fmt, payload, int dtype, the message both decoders give): one per kind of error."""
    good = _schema_record("tfrecord", [1, 2, 3, 4, 5], [1.0, 0.0], 1)
    big = _schema_record("tfrecord", [1, 2, 3, 4, 5], [1.0, 0.0], 1 << 33)
    short = _schema_record("tfrecord", [1, 2, 3, 4], [1.0, 0.0], 1)
    int_scores = _schema_record("tfrecord", [1, 2, 3, 4, 5], [1.0, 0.0], 1, extra=[("scores", "int64", [1, 0])])
    no_scores = tfrecord.encode([("ids", "int64", [1, 2, 3, 4, 5]), ("label", "int64", [1])])
    doubles = _schema_record("ofrecord", [1, 2, 3, 4, 5], [1.0], 1) + map_entry(
        "scores", 3, len_field(1, struct.pack("<2d", 1.0, 0.0)))
    bad_value = read_varint(big, list_tag_offset(big, "label") + 4, len(big))  # tag, length, packed tag, length
    assert bad_value[0] == 1 << 33
    records = {
        "missing": ("tfrecord", no_scores, np.int64,
                    f"record 7 at byte {len(no_scores)}: feature 'scores': missing, expected a float_list of 2 values"),
        "count": ("tfrecord", short, np.int64,
                  f"record 7 at byte {list_tag_offset(short, 'ids')}: feature 'ids': 4 values, expected 5"),
        "kind": ("tfrecord", int_scores, np.int64, f"record 7 at byte {list_tag_offset(int_scores, 'scores')}: "
                 "feature 'scores': int64_list, expected float_list"),
        "double": ("ofrecord", doubles, np.int64, f"record 7 at byte {list_tag_offset(doubles, 'scores')}: "
                   "feature 'scores': double_list, expected float_list"),
        "int32": ("tfrecord", big, np.int32, f"record 7 at byte {list_tag_offset(big, 'label') + 4}: feature 'label': "
                  "value 8589934592 does not fit int32, expected -2147483648 to 2147483647"),
        "cut": ("tfrecord", good[:20], np.int64, f"record 7 at byte 0: field 1 of {len(good) - 2} bytes runs past the "
                "end of its message, expected at most 18"),
        "no key": ("ofrecord", len_field(1, len_field(2, b"")), np.int64,
                   "record 7 at byte 0: map entry without a key, expected field 1 (the feature name)"),
        "no list": ("ofrecord", len_field(1, len_field(1, b"label") + len_field(2, b"")), np.int64,
                    "record 7 at byte 0: feature 'label': holds no list, expected field 1 (bytes_list), "
                    "2 (float_list), 3 (double_list), 4 (int32_list) or 5 (int64_list)"),
        "list field": ("tfrecord", len_field(1, map_entry("ids", 7, b"")), np.int64,
                       "record 7 at byte 11: feature 'ids': unknown list field 7, expected field 1 (bytes_list), "
                       "2 (float_list) or 3 (int64_list)"),
        # offsets below: Example tag and length at 0-1, entry 2-3, key field 4-8, Feature 9-10, its list at 11
        "list wire": ("tfrecord", len_field(1, len_field(1, len_field(1, b"ids") + len_field(2, b"\x18\x01"))),
                      np.int64,
                      "record 7 at byte 11: feature 'ids': list field 3 of wire type 0, expected wire type 2"),
        "utf-8": ("ofrecord", len_field(1, len_field(1, b"\xff") + len_field(2, b"")), np.int64,
                  "record 7 at byte 2: feature name is not UTF-8, expected UTF-8 text"),
        # OFRecord, no Example: entry 0-1, key field 2 on, then Feature, list, packed field, values
        "floats": ("ofrecord", map_entry("scores", 2, len_field(1, b"\x00" * 7)), np.int64,
                   "record 7 at byte 14: feature 'scores': packed float_list of 7 bytes, expected a multiple of 4"),
        "list item": ("tfrecord", len_field(1, map_entry("ids", 3, b"\x0d" + b"\x00" * 4)), np.int64,
                      "record 7 at byte 13: feature 'ids': wire type 5 in the int64_list, expected 2 or 0"),
        "long varint": ("ofrecord", map_entry("label", 4, len_field(1, b"\xff" * 10 + b"\x01")), np.int64,
                        "record 7 at byte 15: feature 'label': varint longer than 10 bytes, expected at most 10"),
        "cut varint": ("ofrecord", map_entry("label", 4, len_field(1, b"\x01\xff\xff")), np.int64,
                       "record 7 at byte 16: feature 'label': truncated varint (its message ends at byte 18), "
                       "expected a final byte below 0x80"),
        "wire 7": ("tfrecord", b"\x0f", np.int64, "record 7 at byte 0: wire type 7 for field 1, expected 0, 1, 2 or 5"),
        "field 0": ("ofrecord", b"\x02\x00", np.int64, "record 7 at byte 0: field number 0, expected 1 or more"),
        "fixed32": ("ofrecord", b"\x15\x00\x00", np.int64,
                    "record 7 at byte 0: fixed32 field 2 cut off after 2 bytes, expected 4"),
        "odd name": ("ofrecord", map_entry("it's", 4, b"\x08"), np.int64,
                     "record 7 at byte 13: a feature with a 4-byte name: truncated varint (its message ends at byte "
                     "13), expected a final byte below 0x80"),
    }
    return [(name, *case) for name, case in records.items()]


@pytest.mark.parametrize("case", _schema_errors(), ids=lambda case: case[0])
def test_decode_batch_errors_name_record_byte_and_feature(case):
    _name, fmt, bad, int_dtype, message = case
    good = _schema_record(fmt, [1, 2, 3, 4, 5], [1.0, 0.0], 1)
    _got, _twin, errors = both_schema_decoders([good, bad, good], fmt, SCHEMA, int_dtype, first_index=6)
    assert errors == [message, message]


def test_decode_batch_checks_its_arguments():
    features, outputs = (("a", False, 2),), [np.zeros((1, 2), np.int64)]
    read_only = np.zeros((1, 2), np.int64)
    read_only.setflags(write=False)
    bad_calls = [
        (ValueError, "unknown record format", ("json", features, outputs)),
        (TypeError, r"features\[0\]: expected \(name: str", ("tfrecord", (("a", False),), outputs)),
        (TypeError, None, ("tfrecord", (("a", False, 2.5),), outputs)),
        (ValueError, r"features\[0\]: length -1", ("tfrecord", (("a", False, -1),), outputs)),
        (ValueError, r"features\[1\]: name 'a' repeats features\[0\]", ("tfrecord", features * 2, outputs * 2)),
        (ValueError, r"outputs: expected one array per feature \(1\), got 2", ("tfrecord", features, outputs * 2)),
        (TypeError, "output a: expected", ("tfrecord", features, [np.zeros((1, 2), np.float64)])),
        (TypeError, "output a: expected", ("tfrecord", (("a", True, 2),), outputs)),
        (TypeError, "output a: expected", ("tfrecord", features, [read_only])),
        (ValueError, "output a: expected 1 x 2 values, got 3", ("tfrecord", features, [np.zeros(3, np.int32)])),
    ]
    for decode in (native.decode_batch, formats.decode_batch_python):
        for error, match, args in bad_calls:
            with pytest.raises(error, match=match):
                decode([b""], *args)
        with pytest.raises(ValueError, match=r"^record 41 at byte 0: feature 'a': missing"):
            decode([b""], "ofrecord", features, outputs, 41)
        decode([], "ofrecord", features, [np.zeros((0, 2), np.int32)])  # nothing to do
        decode([b""], "ofrecord", (), [])  # no features: every record fits


def _mutated(rng, payload):
    """payload with one random defect: flipped bits, a cut, inserted, overwritten or deleted bytes."""
    data = bytearray(payload)
    how = rng.randrange(5)
    if how == 0:
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == 1:
        del data[rng.randrange(len(data)):]
    elif how == 2:
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 8))
    elif how == 3:
        at = rng.randrange(len(data))
        data[at:at + 8] = rng.randbytes(len(data[at:at + 8]))
    else:
        at = rng.randrange(len(data))
        del data[at:at + rng.randint(1, 16)]
    return bytes(data)


def _fuzz(golden_dir, fmt, count, seed):
    """C and Python on `count` damaged G1 records: the same error, or the same values."""
    payloads = list(formats.iter_payloads(golden_dir / f"G1.{fmt}"))[:64]
    features = formats.decoder_features(PRETRAINING, {"seq": 128, "pred": 20})
    rng = random.Random(seed)
    outcomes, disagreements = {}, []
    for i in range(count):
        bad = _mutated(rng, rng.choice(payloads))
        got, twin, errors = both_schema_decoders([bad], fmt, features, (np.int32, np.int64)[i % 2], first_index=i)
        if errors[0] != errors[1] or (errors[0] is None and not same_bytes(got, twin)):
            disagreements.append((bad, errors))
        # what kind of outcome: the message without its record, offset, feature and numbers
        kind = "fits" if errors[0] is None else " ".join(
            w for w in errors[0].split(": ", 1)[1].split() if not any(c.isdigit() for c in w) and "'" not in w)[:40]
        outcomes[kind] = outcomes.get(kind, 0) + 1
    assert not disagreements, disagreements[:3]
    return outcomes


@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_batch_fuzzed_records_agree_with_the_twin(golden_dir, fmt):
    outcomes = _fuzz(golden_dir, fmt, 3000, seed=1 if fmt == "tfrecord" else 2)
    # the damage must reach many paths, or the test proves little
    assert outcomes["fits"] > 20 and len(outcomes) >= 8, outcomes


@pytest.mark.heavy
@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_batch_fuzzed_records_agree_with_the_twin_at_length(golden_dir, fmt):
    outcomes = _fuzz(golden_dir, fmt, 30000, seed=3 if fmt == "tfrecord" else 4)
    assert len(outcomes) >= 12, outcomes


@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_batch_every_prefix_of_a_record(golden_dir, fmt):
    (payload,) = list(formats.iter_payloads(golden_dir / f"G1.{fmt}"))[5:6]
    features = formats.decoder_features(PRETRAINING, {"seq": 128, "pred": 20})
    for cut in range(len(payload) + 1):
        _got, _twin, errors = both_schema_decoders([payload[:cut]], fmt, features)
        assert errors[0] == errors[1] and (errors[0] is None) == (cut == len(payload)), (cut, errors)


# decode_bert_batch: the same C code with BERT's schema, kept while Python callers move to decode_batch


def _fields(seq=6, pred=3, offset=0):
    return {
        "input_ids": [101 + offset, 2000, 3000, 102, 40000, 102][:seq] + [0] * max(0, seq - 6),
        "input_mask": [1] * seq,
        "segment_ids": [0, 0, 0, 0, 1, 1][:seq] + [0] * max(0, seq - 6),
        "masked_lm_positions": [1, 4, 0][:pred],
        "masked_lm_ids": [2001, 300, 0][:pred],
        "masked_lm_weights": [1.0, 1.0, 0.0][:pred],
        "next_sentence_labels": [offset % 2],
    }


def _expected(records, seq, pred):
    return [np.array([r[name] for r in records]) for name in PRETRAINING.names]


def test_decode_bert_batch_any_key_order_and_list_encoding():
    records = [_fields(offset=i) for i in range(4)]
    payloads = [
        # canonical order, packed
        tfrecord.encode([(n, "float" if n == "masked_lm_weights" else "int64", records[0][n])
                         for n in PRETRAINING.names]),
        # reversed key order plus an extra feature the decoder ignores
        tfrecord.encode([(n, "float" if n == "masked_lm_weights" else "int64", records[1][n])
                         for n in reversed(PRETRAINING.names)] + [("extra", "bytes", [b"x"])]),
    ]
    # unpacked repeated fields, and the Features message split in two (protobuf merges them)
    entries = [
        map_entry(n, 2, unpacked_floats(records[2][n])) if n == "masked_lm_weights"
        else map_entry(n, 3, unpacked_ints(records[2][n]))
        for n in PRETRAINING.names
    ]
    payloads.append(len_field(1, b"".join(entries[:3])) + len_field(1, b"".join(entries[3:])))
    # a duplicated key: the last entry wins, as in a protobuf map
    wrong = dict(records[3], input_ids=[9] * 6)
    payloads.append(tfrecord.encode(
        [(n, "float" if n == "masked_lm_weights" else "int64", wrong[n]) for n in PRETRAINING.names]
        + [("input_ids", "int64", records[3]["input_ids"])]))
    got, twin, errors = both_decoders(payloads, "tfrecord", 6, 3)
    assert errors == [None, None]
    for g, t, want in zip(got, twin, _expected(records, 6, 3)):
        assert np.array_equal(g, want) and np.array_equal(t, want)


@pytest.mark.parametrize("int_kind", ["int32", "int64"])
def test_decode_bert_batch_ofrecord_int32_or_int64_lists(int_kind):
    records = [_fields(offset=i) for i in range(3)]
    payloads = [ofrecord.encode([(n, "float" if n == "masked_lm_weights" else int_kind, r[n])
                                 for n in PRETRAINING.key_order("ofrecord")]) for r in records]
    for int_dtype in (np.int32, np.int64):
        got, twin, errors = both_decoders(payloads, "ofrecord", 6, 3, int_dtype)
        assert errors == [None, None]
        for g, t, want in zip(got, twin, _expected(records, 6, 3)):
            assert np.array_equal(g, want) and np.array_equal(t, want)


def _bad_payloads():
    """(name, payload, the message both decoders give, or None where only the prefix is shared)."""
    good = _fields()

    def tf(fields, kinds=None, drop=()):
        kinds = kinds or {}
        return tfrecord.encode([(n, kinds.get(n, "float" if n == "masked_lm_weights" else "int64"), fields[n])
                                for n in PRETRAINING.names if n not in drop])

    def at(payload, key):
        return f"record 1 at byte {list_tag_offset(payload, key)}: feature '{key}'"

    whole = tf(good)
    missing = tf(good, drop=("segment_ids",))
    short = tf(dict(good, masked_lm_ids=[1, 2]))
    long = tf(dict(good, input_ids=list(range(7))))
    float_ids = tf(good, kinds={"input_mask": "float"})
    int_weights = tf(dict(good, masked_lm_weights=[1, 1, 0]), kinds={"masked_lm_weights": "int64"})
    bytes_label = tf(dict(good, next_sentence_labels=[b"1"]), kinds={"next_sentence_labels": "bytes"})
    return [
        ("missing", missing, f"record 1 at byte {len(missing)}: feature 'segment_ids': missing, "
                             "expected an int64_list or int32_list of 6 values"),
        ("short", short, f"{at(short, 'masked_lm_ids')}: 2 values, expected 3"),
        ("long", long, f"{at(long, 'input_ids')}: 7 values, expected 6"),
        ("float ids", float_ids, f"{at(float_ids, 'input_mask')}: float_list, expected int64_list or int32_list"),
        ("int weights", int_weights, f"{at(int_weights, 'masked_lm_weights')}: int64_list, expected float_list"),
        ("bytes label", bytes_label,
         f"{at(bytes_label, 'next_sentence_labels')}: bytes_list, expected int64_list or int32_list"),
        ("truncated", whole[:-5], None),
        ("garbage", b"\xff" * 12, None),
        ("empty", b"", "record 1 at byte 0: feature 'input_ids': missing, expected an int64_list or int32_list of "
                       "6 values"),
    ]


@pytest.mark.parametrize("case", _bad_payloads(), ids=lambda case: case[0])
def test_decode_bert_batch_errors_name_record_byte_and_feature(case):
    _name, bad, message = case
    good = tfrecord.encode([(n, "float" if n == "masked_lm_weights" else "int64", v) for n, v in _fields().items()])
    _got, _twin, errors = both_decoders([good, bad, good], "tfrecord", 6, 3)
    assert errors[0] == errors[1] and errors[0].startswith("record 1 at byte "), errors
    if message is not None:
        assert errors == [message, message]


def test_decode_bert_batch_int32_overflow_and_first_index():
    fields = dict(_fields(), input_ids=[101, 1 << 33, 5, 102, 6, 102])
    payload = tfrecord.encode([(n, "float" if n == "masked_lm_weights" else "int64", fields[n])
                               for n in PRETRAINING.names])
    at = list_tag_offset(payload, "input_ids") + 5  # list tag and length, packed tag and length, then 101
    assert read_varint(payload, at, len(payload))[0] == 1 << 33
    for decode in (native.decode_bert_batch, formats.decode_bert_batch_python):
        with pytest.raises(ValueError, match=rf"^record 41 at byte {at}: feature 'input_ids': value 8589934592 "
                                             "does not fit int32"):
            decode([payload], "tfrecord", 6, 3, *new_outputs(1, 6, 3, np.int32), first_index=41)
        decode([payload], "tfrecord", 6, 3, *new_outputs(1, 6, 3, np.int64))  # fits int64


def test_decode_bert_batch_checks_its_outputs():
    outputs = new_outputs(2, 6, 3)
    with pytest.raises(ValueError, match="output input_ids: expected 3 x 6 values"):
        native.decode_bert_batch([b"", b"", b""], "tfrecord", 6, 3, *outputs)
    outputs[5] = outputs[5].astype(np.float64)
    with pytest.raises(TypeError, match="masked_lm_weights"):
        native.decode_bert_batch([b"", b""], "tfrecord", 6, 3, *outputs)
    outputs = new_outputs(2, 6, 3, np.int16)
    with pytest.raises(TypeError, match="int32 or int64"):
        native.decode_bert_batch([b"", b""], "tfrecord", 6, 3, *outputs)


# -- split_records and read_batches -------------------------------------------------------


@pytest.mark.parametrize("name", ["G1.tfrecord", "G2.ofrecord"])
def test_split_records_matches_the_python_reader(golden_dir, name):
    path = golden_dir / name
    data = path.read_bytes()
    fmt = formats.sniff_format(path)
    expected = list(formats.iter_payloads(path))
    payloads, consumed, needed, error = native.split_records(data, fmt, final=True)
    assert (payloads, consumed, needed, error) == (expected, len(data), 0, None)
    # a cut in the middle of a record: the whole records before it, and the size of the next
    cut = len(data) // 3
    payloads, consumed, needed, error = native.split_records(data[:cut], fmt)
    assert payloads == expected[: len(payloads)] and error is None
    header = 12 if fmt == "tfrecord" else 8
    assert consumed <= cut < consumed + needed
    assert needed == header + len(expected[len(payloads)]) + (4 if fmt == "tfrecord" else 0)


def _read_all(paths, batch_size, use_native, monkeypatch, **kwargs):
    """read_batches on the C path or the pure path: (batches, error message or None)."""
    monkeypatch.setattr(formats.batches, "_native", native if use_native else None)
    batches = []
    try:
        for batch in formats.read_batches(paths, batch_size, **kwargs):
            batches.append(batch)
    except DataError as exc:
        return batches, str(exc)
    return batches, None


def _assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in PRETRAINING.names:
            assert x[name].dtype == y[name].dtype and np.array_equal(x[name], y[name]), name


def test_read_batches_native_and_pure_paths_agree(golden_dir, monkeypatch):
    paths = [golden_dir / "G1.tfrecord", golden_dir / "G3.tfrecord"]
    pure, pure_error = _read_all(paths, 100, False, monkeypatch)
    assert pure_error is None
    records = [r for p in paths for r in formats.read_records(p)]
    for name in PRETRAINING.names:
        assert np.array_equal(np.concatenate([b[name] for b in pure]), np.stack([r[name] for r in records]))
    for batch_size in (1, 100, 5000):
        fast, fast_error = _read_all(paths, batch_size, True, monkeypatch)
        assert fast_error is None
        if batch_size == 100:
            _assert_same_batches(fast, pure)
        assert [len(b["input_ids"]) for b in fast] == [batch_size] * (len(records) // batch_size) + (
            [len(records) % batch_size] if len(records) % batch_size else [])
        for name in PRETRAINING.names:
            joined = np.concatenate([b[name] for b in fast])
            assert joined.dtype == pure[0][name].dtype
            assert np.array_equal(joined, np.concatenate([b[name] for b in pure]))
    dropped, _ = _read_all(paths, 1000, True, monkeypatch, drop_remainder=True)
    assert [len(b["input_ids"]) for b in dropped] == [1000, 1000]


def test_read_batches_ofrecord_is_int32_and_mixed_batches_int64(golden_dir, monkeypatch):
    for use_native in (True, False):
        (batch,), _ = _read_all(golden_dir / "G2.ofrecord", 500, use_native, monkeypatch)
        assert batch["input_ids"].dtype == np.int32 and batch["input_ids"].shape == (199, 512)
        batches, _ = _read_all([golden_dir / "G2.ofrecord", golden_dir / "G2.tfrecord"], 150, use_native, monkeypatch)
        assert [b["input_ids"].dtype for b in batches] == [np.int32, np.int64, np.int64]


def _corruptions(golden_dir, tmp_path):
    """Files with one defect each; read_batches must fail the same way on both paths."""
    tf_offsets, of_offsets = [0], [0]
    for payload in formats.iter_payloads(golden_dir / "G1.tfrecord"):
        tf_offsets.append(tf_offsets[-1] + 16 + len(payload))
    for payload in formats.iter_payloads(golden_dir / "G1.ofrecord"):
        of_offsets.append(of_offsets[-1] + 8 + len(payload))
    # the first 60 records are enough to cross batch boundaries on both sides of a defect
    tf = (golden_dir / "G1.tfrecord").read_bytes()[: tf_offsets[60]]
    of = (golden_dir / "G1.ofrecord").read_bytes()[: of_offsets[60]]
    at = tf_offsets[30]
    seq_512 = formats.frame(formats.encode_record(
        {n: [0] * PRETRAINING.feature(n).size({"seq": 512, "pred": 20}) for n in PRETRAINING.names}, "tfrecord"),
                            "tfrecord")
    cases = {
        "data_crc.tfrecord": tf[: at + 40] + bytes([tf[at + 40] ^ 1]) + tf[at + 41:],
        "length_crc.tfrecord": tf[: at + 9] + bytes([tf[at + 9] ^ 1]) + tf[at + 10:],
        "cut_data.tfrecord": tf[: at + 100],
        "cut_header.tfrecord": tf[: at + 5],
        "other_seq.tfrecord": tf[:at] + seq_512 + tf[at:],
        "cut.ofrecord": of[: of_offsets[40] + 30],
        "zero_size.ofrecord": of[: of_offsets[5]] + bytes(8) + of[of_offsets[5]:],
        "bad_payload.ofrecord": of[: of_offsets[9]] + struct.pack("<q", 3) + b"\x0a\x05x" + of[of_offsets[9]:],
        "bad_first.ofrecord": struct.pack("<q", 3) + b"\x0a\x05x" + of,
        "crc_first.tfrecord": tf[:20] + bytes([tf[20] ^ 1]) + tf[21:],
    }
    paths = []
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_read_batches_errors_are_identical_on_both_paths(golden_dir, tmp_path, monkeypatch):
    for path in _corruptions(golden_dir, tmp_path):
        for batch_size in (7, 256):
            fast, fast_error = _read_all([path, path], batch_size, True, monkeypatch)
            pure, pure_error = _read_all([path, path], batch_size, False, monkeypatch)
            assert fast_error is not None and fast_error == pure_error, (path.name, fast_error, pure_error)
            assert fast_error.startswith(f"{path}: record "), fast_error
            _assert_same_batches(fast, pure)


def test_read_batches_reports_a_bad_record_before_a_later_framing_error(golden_dir, tmp_path, monkeypatch):
    # record 2 lacks a feature, record 4's CRC is wrong: the record read first is the one reported
    records = list(formats.read_records(golden_dir / "G1.tfrecord"))[:6]
    del records[2]["segment_ids"]
    data = bytearray()
    for r in records:
        kinds = [(n, "float" if n == "masked_lm_weights" else "int64", r[n]) for n in r]
        data += tfrecord.frame(tfrecord.encode(kinds))
    path = tmp_path / "two_defects.tfrecord"
    path.write_bytes(bytes(data))
    payloads = list(formats.iter_payloads(path))
    offsets = np.cumsum([0] + [16 + len(payload) for payload in payloads])
    data[offsets[4] + 20] ^= 1
    path.write_bytes(bytes(data))
    for use_native in (True, False):
        batches, error = _read_all(path, 256, use_native, monkeypatch)
        # the byte in the file: record 2's payload starts after its 12-byte header; a missing feature shows at its end
        at = offsets[2] + 12 + len(payloads[2])
        assert batches == [] and error == (f"{path}: record 2 at byte {at}: feature 'segment_ids': "
                                           "missing, expected an int64_list or int32_list of 128 values")


def test_read_batches_dims_can_be_given(golden_dir, monkeypatch):
    path = golden_dir / "G2.tfrecord"
    at = 12 + list_tag_offset(next(formats.iter_payloads(path)), "input_ids")  # in the file: after the header
    for use_native in (True, False):
        batches, error = _read_all(path, 64, use_native, monkeypatch, dims={"seq": 128, "pred": 80})
        assert batches == []
        assert error == f"{path}: record 0 at byte {at}: feature 'input_ids': 512 values, expected 128"


# -- create_instances ---------------------------------------------------------------------


def _same_instances(a, b):
    for field in a.__dataclass_fields__:
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y), field


def _both_creators(corpus, params, masking, seed):
    """Python and C instance creation from the same state: (python, native) instances and final states."""
    from bertprep import instances

    results = []
    for create in (instances._create_python, instances._create_native):
        rng = random.Random(seed)
        order = list(range(corpus.num_documents))
        rng.shuffle(order)
        shuffled = corpus.reordered(order)
        made = create(shuffled.documents() if create is instances._create_python else shuffled, params, masking, rng)
        results.append((made, rng.getstate()))
    (python, python_state), (c, c_state) = results
    assert c_state == python_state  # the generator is left where the Python code leaves it
    return python, c


@pytest.fixture(scope="module")
def golden_corpus(golden_dir):
    from bertprep.corpus import read_text, tokenize_corpus
    from bertprep.instances import MaskingVocab
    from bertprep.tokenization import LineTokenizer, load_vocab

    vocab = load_vocab(golden_dir / "vocab.txt")
    return tokenize_corpus(read_text(golden_dir / "corpus.txt"), LineTokenizer(vocab)), MaskingVocab.from_vocab(vocab)


@pytest.mark.parametrize(
    "seq,pred,dupe,seed,wwm,short_seq_prob,masked_lm_prob",
    [(128, 20, 2, 12345, False, 0.1, 0.15), (512, 80, 1, 12345, False, 0.1, 0.15), (128, 20, 2, 1, True, 0.1, 0.15),
     (24, 7, 3, 99, True, 0.5, 0.25), (16, 3, 1, 3, False, 1.0, 0.5)],
)
def test_create_instances_matches_python_on_golden_corpus(golden_corpus, seq, pred, dupe, seed, wwm,
                                                          short_seq_prob, masked_lm_prob):
    from bertprep.instances import InstanceParams

    corpus, masking = golden_corpus
    params = InstanceParams(seq, pred, dupe, short_seq_prob, masked_lm_prob, wwm)
    python, c = _both_creators(corpus, params, masking, seed)
    _same_instances(python, c)
    assert len(c) > 0


def test_create_instances_golden_g1_end_to_end(golden_corpus, golden_dir):
    from bertprep.instances import InstanceParams, create_instances

    corpus, masking = golden_corpus
    made = create_instances(corpus, InstanceParams(128, 20, 2), masking, 12345, use_native=True)
    arrays = [made.tokens, made.instance_starts, made.a_lengths, made.masked_positions, made.masked_labels,
              made.mask_starts, made.is_random_next]
    for fmt in FORMATS:
        encoded = native.encode_instances(fmt, 128, 20, *arrays, 0, len(made))
        assert encoded == (golden_dir / f"G1.{fmt}").read_bytes()


def test_create_instances_matches_python_on_odd_corpora():
    """One document (random next retries randint(0, 0)), one-sentence documents, int32 tokens past 2**16."""
    from bertprep.instances import Corpus, InstanceParams, MaskingVocab

    rng = random.Random(11)
    word_ids = np.arange(70000, dtype=np.int32)
    is_subword = (np.arange(70000) % 3 == 0).astype(np.uint8)
    masking = MaskingVocab(cls_id=1, sep_id=2, mask_id=3, word_ids=word_ids, is_subword=is_subword)
    for n_documents, sentences_per_document in ((1, 9), (6, 1), (5, 4)):
        sentence_lengths = [rng.randint(1, 30) for _ in range(n_documents * sentences_per_document)]
        # ids 1 and 2 inside sentences: the reference skips them as candidates, as the C core must
        tokens = np.array([rng.choice([1, 2, rng.randint(4, 69999)]) for _ in range(sum(sentence_lengths))], np.int32)
        corpus = Corpus(tokens, np.concatenate([[0], np.cumsum(sentence_lengths)]).astype(np.int64),
                        np.arange(0, n_documents * sentences_per_document + 1, sentences_per_document, dtype=np.int64))
        for wwm in (False, True):
            params = InstanceParams(32, 6, 3, 0.3, 0.2, wwm)
            python, c = _both_creators(corpus, params, masking, n_documents)
            _same_instances(python, c)
            assert c.tokens.dtype == np.int32


@pytest.mark.heavy
def test_create_instances_matches_python_on_wt2(shared_dir, golden_dir):
    from bertprep.corpus import read_text, tokenize_corpus
    from bertprep.instances import InstanceParams, MaskingVocab
    from bertprep.tokenization import LineTokenizer, load_vocab

    vocab = load_vocab(golden_dir / "vocab.txt")
    corpus = tokenize_corpus(read_text(shared_dir / "fixtures" / "bench" / "wt2.txt"), LineTokenizer(vocab))
    python, c = _both_creators(corpus, InstanceParams(128, 20, 5), MaskingVocab.from_vocab(vocab), 12345)
    _same_instances(python, c)
    assert len(c) == 25500  # the reference's count (docs/reference-facts.md, "Measured reference run on wt2")


def test_create_instances_rejects_bad_arguments(golden_corpus):
    corpus, masking = golden_corpus
    state = random.Random(1).getstate()
    args = [corpus.tokens.astype(np.int32), corpus.sentence_starts, corpus.document_starts, 128, 20, 1, 0.1, 0.15,
            False, masking.cls_id, masking.sep_id, masking.mask_id, masking.word_ids, masking.is_subword, 2]
    with pytest.raises(ValueError, match="state"):
        native.create_instances((3, (1, 2), None), *args)
    bad_starts = corpus.sentence_starts.copy()
    bad_starts[-1] += 1
    with pytest.raises(ValueError, match="inconsistent corpus"):
        native.create_instances(state, args[0], bad_starts, *args[2:])
    with pytest.raises(TypeError, match="tokens"):
        native.create_instances(state, corpus.tokens.astype(np.int64), *args[1:])
    # randint(2, max_num_tokens) with max_seq_length 4: Python's randrange error, not a crash
    with pytest.raises(ValueError, match="empty range for randrange"):
        native.create_instances(state, *args[:3], 4, 1, 1, 1.0, *args[7:])
