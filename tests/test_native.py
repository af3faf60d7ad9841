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
from bertprep.formats.protowire import encode_varint
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


# -- decode_bert_batch --------------------------------------------------------------------


@pytest.mark.parametrize("name,seq,pred", GOLDEN)
@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_bert_batch_reads_golden_files(golden_dir, name, seq, pred, fmt):
    path = golden_dir / f"{name}.{fmt}"
    payloads = list(formats.iter_payloads(path))
    expected = [np.stack([r[feature] for r in formats.read_records(path)]) for feature in PRETRAINING.names]
    twin = new_outputs(len(payloads), seq, pred)
    formats.decode_bert_batch_python(payloads, fmt, seq, pred, *twin)
    for int_dtype in (np.int32, np.int64):
        got = new_outputs(len(payloads), seq, pred, int_dtype)
        native.decode_bert_batch(payloads, fmt, seq, pred, *got)
        for feature, g, t, want in zip(PRETRAINING.names, got, twin, expected):
            assert np.array_equal(g, want) and np.array_equal(t, want), feature


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

    whole = tf(good)
    return [
        ("missing", tf(good, drop=("segment_ids",)), "record 1: feature 'segment_ids': missing"),
        ("short", tf(dict(good, masked_lm_ids=[1, 2])), "record 1: feature 'masked_lm_ids': expected 3 values, got 2"),
        ("long", tf(dict(good, input_ids=list(range(7)))), "record 1: feature 'input_ids': expected 6 values, got 7"),
        ("float ids", tf(good, kinds={"input_mask": "float"}),
         "record 1: feature 'input_mask': expected int64_list or int32_list, got float_list"),
        ("int weights", tf(dict(good, masked_lm_weights=[1, 1, 0]), kinds={"masked_lm_weights": "int64"}),
         "record 1: feature 'masked_lm_weights': expected float_list, got int64_list"),
        ("bytes label", tf(dict(good, next_sentence_labels=[b"1"]), kinds={"next_sentence_labels": "bytes"}),
         "record 1: feature 'next_sentence_labels': expected int64_list or int32_list, got bytes_list"),
        ("truncated", whole[:-5], None),
        ("garbage", b"\xff" * 12, None),
        ("empty", b"", "record 1: feature 'input_ids': missing"),
    ]


@pytest.mark.parametrize("case", _bad_payloads(), ids=lambda case: case[0])
def test_decode_bert_batch_errors_name_record_and_feature(case):
    _name, bad, message = case
    good = tfrecord.encode([(n, "float" if n == "masked_lm_weights" else "int64", v) for n, v in _fields().items()])
    _got, _twin, errors = both_decoders([good, bad, good], "tfrecord", 6, 3)
    assert all(e is not None and e.startswith("record 1: ") for e in errors), errors
    if message is not None:
        assert errors == [message, message]


def test_decode_bert_batch_int32_overflow_and_first_index():
    fields = dict(_fields(), input_ids=[101, 1 << 33, 5, 102, 6, 102])
    payload = tfrecord.encode([(n, "float" if n == "masked_lm_weights" else "int64", fields[n])
                               for n in PRETRAINING.names])
    for decode in (native.decode_bert_batch, formats.decode_bert_batch_python):
        with pytest.raises(ValueError, match=r"^record 41: feature 'input_ids': value 8589934592 does not fit int32"):
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
    monkeypatch.setattr(formats, "_native", native if use_native else None)
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
        {n: [0] * PRETRAINING.feature(n).size({"seq": 512, "pred": 20}) for n in PRETRAINING.names}, "tfrecord"), "tfrecord")
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
    offsets = [0]
    for payload in formats.iter_payloads(path):
        offsets.append(offsets[-1] + 16 + len(payload))
    data[offsets[4] + 20] ^= 1
    path.write_bytes(bytes(data))
    for use_native in (True, False):
        batches, error = _read_all(path, 256, use_native, monkeypatch)
        assert batches == [] and error == f"{path}: record 2 at byte {offsets[2]}: feature 'segment_ids': missing"


def test_read_batches_dims_can_be_given(golden_dir, monkeypatch):
    for use_native in (True, False):
        batches, error = _read_all(golden_dir / "G2.tfrecord", 64, use_native, monkeypatch,
                                   dims={"seq": 128, "pred": 80})
        assert batches == [] and error == (
            f"{golden_dir / 'G2.tfrecord'}: record 0 at byte 0: feature 'input_ids': expected 128 values, got 512")


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
    assert len(c) == 25500  # the reference's count (DESIGN.md §6)


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
