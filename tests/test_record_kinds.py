"""Record kinds described once as data (bertprep.formats.schemas), and the one decoder contract.

A toy kind, described in this module and nowhere else, goes through write,
read, inspect, convert and validate. Damaged files of every sort end, in
every reader, as one DataError naming the file, record, byte offset and
field: never an OverflowError, a MemoryError or a traceback.
"""

import json
import re
import struct

import numpy as np
import pytest

from bertprep import formats
from bertprep.cli import main
from bertprep.errors import DataError
from bertprep.formats import schemas
from bertprep.formats.schemas import FLOAT, INT, PRETRAINING, Feature, RecordKind

TOY = RecordKind(
    "toy",
    "a made-up kind: a token window, a pair of scores and a class",
    (Feature("tokens", INT, "width"), Feature("scores", FLOAT, "2"), Feature("label", INT, "1")),
    ofrecord_order=("label", "scores", "tokens"),
)


@pytest.fixture
def toy_kind():
    schemas.register(TOY)
    yield TOY
    del schemas.KINDS[TOY.name]


def toy_records(count, width=6):
    rng = np.random.default_rng(7)
    return [{"tokens": rng.integers(0, 30000, width).tolist(), "scores": [0.5 * i, -1.25],
             "label": [int(i % 3)]} for i in range(count)]


def test_a_kind_described_once_round_trips_through_every_stage(toy_kind, tmp_path, capsys):
    records = toy_records(25)
    directory = tmp_path / "toy"
    for fmt, name in (("tfrecord", "toy.tfrecord"), ("ofrecord", "part-0")):
        assert formats.write_records(directory / fmt / name, records, fmt, toy_kind) == 25
    tf_path, of_path = directory / "tfrecord" / "toy.tfrecord", directory / "ofrecord" / "part-0"

    # read: every value back, in either format; the kind recognised from the features alone
    for path in (tf_path, of_path):
        assert formats.record_kind(path) is toy_kind
        back = list(formats.read_records(path))
        assert [r["tokens"].tolist() for r in back] == [r["tokens"] for r in records]
        assert [r["scores"].tolist() for r in back] == [r["scores"] for r in records]
        (batch,) = formats.read_batches(path, 100)
        assert batch["tokens"].shape == (25, 6) and batch["scores"].dtype == np.float32
        assert batch["label"][:, 0].tolist() == [i % 3 for i in range(25)]
    # each format keeps the kind's key order for it
    assert (list(formats.decode_payload(next(formats.iter_payloads(of_path)), "ofrecord"))
            == ["label", "scores", "tokens"])
    assert (list(formats.decode_payload(next(formats.iter_payloads(tf_path)), "tfrecord"))
            == ["tokens", "scores", "label"])

    # inspect shows the kind and every field
    assert main(["inspect", str(of_path), "-n", "1"]) == 0
    shown = capsys.readouterr().out
    assert f"({'ofrecord'}, toy) record 0" in shown and "scores (float32, 2): 0 -1.25" in shown

    # convert: TFRecord -> OFRecord gives the bytes write_records wrote, and back
    assert main(["convert", str(tf_path), str(tmp_path / "part-0"), "--to", "ofrecord", "--quiet"]) == 0
    assert (tmp_path / "part-0").read_bytes() == of_path.read_bytes()
    assert main(["convert", str(of_path), str(tmp_path / "back.tfrecord"), "--to", "tfrecord", "--quiet"]) == 0
    assert (tmp_path / "back.tfrecord").read_bytes() == tf_path.read_bytes()

    # validate: framing and schema from the description, both formats compared
    assert main(["validate", str(directory), "--compare", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sound"] and report["datasets"][0]["kind"] == "toy"
    assert report["datasets"][0]["dims"] == {"width": 6} and report["compare"][0]["equal"]
    assert report["checks"]["schema"]["status"] == "ok" and report["checks"]["cls"]["status"] == "not run"

    # ... and a record one token short is found, named by field and expected length
    short = records[:3] + [{**records[3], "tokens": records[3]["tokens"][:5]}] + records[4:]
    bad = tmp_path / "bad.tfrecord"
    formats.write_records(bad, short, "tfrecord", toy_kind)  # writers trust their caller; validate does not
    assert main(["validate", str(bad), "--json", "--quiet"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(f["check"], f["record"], f["field"]) for f in report["findings"]] == [("schema", 3, "tokens")]
    assert "5 values, expected 6 (width)" in report["findings"][0]["message"]


def test_kinds_must_be_distinguishable_by_their_features():
    twin = RecordKind("twin", "the pretraining features again", PRETRAINING.features)
    with pytest.raises(ValueError, match="same features as 'pretraining'"):
        schemas.register(twin)
    assert "twin" not in schemas.KINDS


def test_every_built_in_kind_recognises_itself_and_solves_its_dimensions():
    dims = {"seq": 64, "pred": 10, "k": 3}
    for kind in schemas.KINDS.values():
        own = {name: dims[name] for name in kind.dims}
        record = {f.name: (np.zeros(f.size(own), np.float32) if f.dtype == FLOAT else np.zeros(f.size(own), np.int64))
                  for f in kind.features}
        stored = {name: ("float" if values.dtype == np.float32 else "int64") for name, values in record.items()}
        assert schemas.kind_of_record(stored) is kind
        assert kind.dims_of({name: len(values) for name, values in record.items()}) == own
        for fmt in formats.FORMATS:
            payload = formats.encode_record(record, fmt, kind)
            assert list(formats.decode_payload(payload, fmt)) == list(kind.key_order(fmt))


# ---------------------------------------------------------------- one decoder contract for damaged files


def _damaged_files(golden_dir, tmp_path):
    flipped = bytearray((golden_dir / "G1.ofrecord").read_bytes())
    flipped[2109] ^= 0x80  # inside record 2's input_ids: a varint grows past int32
    text = b"This is a text file, not records.\nIt has a few lines.\n" * 20
    huge = struct.pack("<q", 1 << 40) + b"\x0a" * 64  # a 2^40-byte length in a 72-byte file
    tf_header = bytearray((golden_dir / "G1.tfrecord").read_bytes())
    tf_header[3] ^= 0x01  # the first record's length: its CRC no longer matches
    files = {"flipped.ofrecord": flipped, "text.ofrecord": text, "huge.ofrecord": huge, "header": tf_header}
    paths = {}
    for name, data in files.items():
        directory = tmp_path / name.split(".")[0]
        directory.mkdir()
        paths[name] = directory / ("part-0" if name.endswith(".ofrecord") else "damaged")
        paths[name].write_bytes(bytes(data))
    return paths


@pytest.mark.parametrize("native", [True, False])
def test_damaged_files_give_one_data_error_in_every_reader(golden_dir, tmp_path, monkeypatch, native):
    if native:
        pytest.importorskip("bertprep._native")
    else:
        monkeypatch.setattr(formats.batches, "_native", None)
    paths = _damaged_files(golden_dir, tmp_path)
    # record 2 starts at byte 1636; the flipped byte lies inside its input_ids (the batch decoder names that byte)
    expected = {
        "flipped.ofrecord": r"record 2 at byte (1636|2\d\d\d): feature 'input_ids': ",
        "text.ofrecord": r"not an OFRecord file, as its name says: it starts with text "
                         r"\('This is a text file, not records\.'\)$",
        "huge.ofrecord": r"record 0 at byte 0: truncated data \(64 of 1099511627776 bytes\)",
        "header": r"record 0 at byte 0: length CRC mismatch",
    }
    for name, path in paths.items():
        for read in (lambda: list(formats.read_records(path)), lambda: list(formats.read_batches(path, 64))):
            with pytest.raises(DataError) as caught:
                read()
            assert re.match(re.escape(f"{path}: ") + expected[name], str(caught.value)), str(caught.value)


@pytest.mark.parametrize("native", [True, False])
def test_a_text_file_is_named_not_a_record_file_not_a_truncated_record(golden_dir, tmp_path, capsys, monkeypatch,
                                                                        native):
    """A corpus .txt, a .jsonl, or text under a record file's name was "record 0 at byte 0: truncated data
    (59 of 7163385811044755572 bytes)" (its first bytes read as a length) or "length CRC mismatch"; a record
    file cut short is still the truncated record it is."""
    if native:
        pytest.importorskip("bertprep._native")
    else:
        monkeypatch.setattr(formats.batches, "_native", None)
    text = "the quick brown fox\njumps over the lazy dog\n\nanother document\n"
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes((golden_dir / "G1.tfrecord").read_bytes()[:100])
    expected = {
        "corpus.txt": "not a record file (TFRecord, OFRecord, HDF5 or Parquet): it starts with text "
                      "('the quick brown fox')",
        "corpus.jsonl": "not a record file (TFRecord, OFRecord, HDF5 or Parquet): it starts with text "
                        "('{\"text\": \"the quick brown fox\"}')",
        "text.tfrecord": "not a TFRecord file, as its name says: it starts with text ('the quick brown fox')",
        "part-0": "not an OFRecord file, as its name says: it starts with text ('the quick brown fox')",
        "cut.tfrecord": "record 0 at byte 0: truncated data (88 of ",
    }
    for name in expected:
        if name != "cut.tfrecord":
            (tmp_path / name).write_text(json.dumps({"text": "the quick brown fox"}) if name.endswith(".jsonl")
                                         else text)
    for name, message in expected.items():
        path = tmp_path / name
        for read in (lambda: list(formats.read_records(path)), lambda: list(formats.read_batches(path, 64))):
            with pytest.raises(DataError) as caught:
                read()
            assert str(caught.value).startswith(f"{path}: {message}"), str(caught.value)
        assert main(["inspect", str(path)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"bertprep inspect: error: {path}: {message}"), err


def test_inspect_of_an_empty_file_named_for_no_format_is_an_error(tmp_path, capsys):
    """An empty corpus.txt (or x.h5, x.dat) was shown as "(ofrecord, unknown kind): no records", exit 0: sniffing
    falls back to OFRecord, which has no magic. An empty file named as a record file is still an empty one."""
    import bertprep

    for name in ("corpus.txt", "x.h5", "x.dat"):
        path = tmp_path / name
        path.write_bytes(b"")
        assert main(["inspect", str(path)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"bertprep inspect: error: {path}: an empty file (0 bytes) whose name is no record file's "
                       "(*.tfrecord, *.tf_record, part-N, *.ofrecord, *.hdf5, *.parquet): no records and no format "
                       "to show"], err
        with pytest.raises(DataError, match="an empty file"):
            bertprep.inspect(file=str(path))
    for name, fmt in (("x.tfrecord", "tfrecord"), ("part-0", "ofrecord"), ("x.ofrecord", "ofrecord")):
        (tmp_path / name).write_bytes(b"")
        assert main(["inspect", str(tmp_path / name)]) == 0
        assert f"({fmt}, unknown kind): no records at index 0" in capsys.readouterr().out


def test_inspect_skip_frames_the_records_it_passes_over_without_decoding_them(golden_dir, tmp_path, capsys):
    """`inspect --skip N` decoded every record before N (some 70 times the framing's cost: minutes for a skip of a
    million), so a record there that frames but does not decode ended the listing, exit 1, before the record asked
    for. Now they are framed (their CRCs checked) and not decoded; a record asked for still fails to decode."""
    import itertools

    records = list(itertools.islice(formats.read_records(golden_dir / "G1.tfrecord"), 3))
    payloads = [formats.encode_record(r, "tfrecord") for r in records]
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(formats.frame(p, "tfrecord") for p in [payloads[0], b"\xff" * 9, payloads[2]]))
    assert main(["inspect", str(path), "--skip", "2", "-n", "1", "--json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["record"] for line in shown] == [2] and shown[0]["input_ids"] == records[2]["input_ids"].tolist()
    assert main(["inspect", str(path), "--skip", "1"]) == 1
    assert "record 1 at byte" in capsys.readouterr().err


def test_inspect_of_a_pipe_says_it_is_one(tmp_path, capsys):
    """`inspect` of a FIFO (or `<(cat part-0)`) said `no such file`, exit 1, of a path that is there; it reads the
    file more than once (its format, its kind, its records). Now the usage error the stages give a pipe, exit 2."""
    import os

    path = tmp_path / "part-1.tfrecord"
    os.mkfifo(path)
    assert main(["inspect", str(path)]) == 2
    assert capsys.readouterr().err == (f"bertprep inspect: error: {path}: not a regular file (a pipe, as <(zcat …) "
                                       "gives, or a device): this stage reads each record file more than once; "
                                       "write it to a file first\n")


def test_a_damaged_first_tfrecord_header_is_still_read_as_tfrecord(golden_dir, tmp_path):
    paths = _damaged_files(golden_dir, tmp_path)
    assert formats.sniff_format(paths["header"]) == "tfrecord"  # its name says nothing: the bytes must


def test_damaged_files_end_each_command_with_one_line(golden_dir, tmp_path, capsys):
    paths = _damaged_files(golden_dir, tmp_path)
    for name, path in paths.items():
        assert main(["inspect", str(path), "-n", "5"]) == 1, name
        assert main(["convert", str(path), str(tmp_path / "out" / name), "--to", "tfrecord", "--quiet"]) == 1, name
        assert not (tmp_path / "out" / name).exists()  # nothing half-written
        err = capsys.readouterr().err.strip().splitlines()
        said = "not an OFRecord file" if name == "text.ofrecord" else "record "
        assert len(err) == 2 and all(line.startswith(f"bertprep {cmd}: error: {path}: {said}")
                                     for line, cmd in zip(err, ("inspect", "convert"))), err
        code = main(["validate", str(path), "--json", "--quiet"])
        report = json.loads(capsys.readouterr().out)
        assert code == 1 and report["findings"][0]["file"] == str(path)


def test_validate_names_a_text_file_under_a_record_name_as_text(golden_dir, tmp_path, capsys):
    """validate said "record 0: at byte 0: length CRC mismatch" of a corpus saved as .tfrecord, where every
    reader says it is text; a record file damaged at its first header is still a CRC mismatch."""
    paths = _damaged_files(golden_dir, tmp_path)
    text = tmp_path / "corpus.tfrecord"
    text.write_text("the quick brown fox\njumps over the lazy dog\n")
    expected = {text: "not a TFRecord file, as its name says: it starts with text ('the quick brown fox')",
                paths["text.ofrecord"]: "not an OFRecord file, as its name says: it starts with text "
                                        "('This is a text file, not records.')",
                paths["header"]: "record 0: at byte 0: length CRC mismatch"}
    for path, message in expected.items():
        assert main(["validate", str(path), "--quiet"]) == 1
        out = capsys.readouterr().out
        assert f"  {path}: {message}\n" in out, out
        assert main(["validate", str(path), "--json", "--quiet"]) == 1
        finding = json.loads(capsys.readouterr().out)["findings"][0]
        record = f"record {finding['record']}: " if finding["record"] is not None else ""
        assert f"{record}{finding['message']}" == message, finding


@pytest.mark.parametrize("native", [True, False])
def test_records_of_another_format_under_a_name_say_what_their_bytes_are(golden_dir, tmp_path, capsys, monkeypatch,
                                                                         native):
    """A Parquet file renamed x.tfrecord was "record 0 at byte 0: length CRC mismatch", a TFRecord file named part-0
    "unsupported wire type 3 for field 21002284": the reader goes by the name, and now says what the bytes are."""
    if native:
        pytest.importorskip("bertprep._native")
    else:
        monkeypatch.setattr(formats.batches, "_native", None)
    source = tmp_path / "G3.tfrecord"
    source.write_bytes((golden_dir / "G3.tfrecord").read_bytes())
    made = {}
    for fmt in ("parquet", "hdf5", "ofrecord"):
        assert main(["convert", str(source), str(tmp_path / f"as-{fmt}"), "--to", fmt, "--quiet"]) == 0
        made[fmt] = (tmp_path / f"as-{fmt}").read_bytes()
    made["tfrecord"] = source.read_bytes()
    expected = {
        ("parquet", "x.tfrecord"): "not a TFRecord file, as its name says: its bytes are a Parquet file's",
        ("hdf5", "x.tfrecord"): "not a TFRecord file, as its name says: its bytes are an HDF5 file's",
        ("ofrecord", "x.tfrecord"): "not a TFRecord file, as its name says: its bytes look like an OFRecord file's",
        ("parquet", "part-0"): "not an OFRecord file, as its name says: its bytes are a Parquet file's",
        ("tfrecord", "part-0"): "not an OFRecord file, as its name says: its bytes are a TFRecord file's",
    }
    for (fmt, name), message in expected.items():
        path = tmp_path / fmt / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(made[fmt])
        for read in (lambda: list(formats.read_records(path)), lambda: list(formats.read_batches(path, 64))):
            with pytest.raises(DataError) as caught:
                read()
            assert str(caught.value) == f"{path}: {message}"
        assert main(["inspect", str(path)]) == 1
        assert capsys.readouterr().err == f"bertprep inspect: error: {path}: {message}\n"
