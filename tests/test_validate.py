"""`bertprep validate` on the golden sets, OneFlow's sample, and datasets damaged one way each.

Each damage test builds a dataset from golden records with exactly one fault
and asserts the exact finding (check, file, record, field, message) through
the real CLI and its JSON report.
"""

import hashlib
import itertools
import json
import os
import struct

import numpy as np
import pytest

from bertprep import formats
from bertprep.cli import main
from bertprep.formats.schemas import PRETRAINING

VOCAB_SIZE = 30522


def validate(capsys, *argv):
    """Run the CLI with --json - and return (exit code, report)."""
    code = main(["validate", *map(str, argv), "--json", "--quiet"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def errors(report):
    return [(f["check"], f["record"], f["field"], f["message"]) for f in report["findings"]]


@pytest.fixture(scope="module")
def g1(golden_dir):
    """The first 40 records of G1 (128/20) as {name: array}."""
    return list(itertools.islice(formats.read_records(golden_dir / "G1.tfrecord"), 40))


def write(path, records, fmt):
    formats.write_records(path, records, fmt)
    return path


def copy(records):
    return [{k: np.array(v) for k, v in r.items()} for r in records]


def encode_raw(features, fmt):
    """A framed record from [(name, kind, values)], for layouts write_records refuses to make."""
    return formats.frame(formats.CODECS[fmt].encode(features), fmt)


def kinds_of(record, fmt, int_kind=None):
    int_kind = int_kind or formats.CODECS[fmt].INT_KIND
    return [(name, "float" if name == "masked_lm_weights" else int_kind, record[name])
            for name in PRETRAINING.key_order(fmt)]


# ---------------------------------------------------------------- sound data passes


@pytest.mark.parametrize("name,extra", [
    ("G1.tfrecord", []), ("G1.ofrecord", []), ("G2.tfrecord", []), ("G2.ofrecord", []),
    ("G3.tfrecord", ["--whole-word-mask"]), ("G3.ofrecord", ["--whole-word-mask"]),
])
def test_golden_sets_pass(capsys, golden_dir, name, extra):
    code, report = validate(capsys, golden_dir / name, "--vocab", golden_dir / "vocab.txt", *extra)
    assert code == 0, errors(report)
    assert report["sound"] and report["errors_total"] == 0
    seq = 512 if name.startswith("G2") else 128
    assert report["datasets"][0]["seq"] == seq
    figures = report["datasets"][0]["stats"][name.split(".")[1]]["all"]
    expected = {"G1": 1373, "G2": 199, "G3": 1206}[name[:2]]
    assert figures["instances"] == expected
    assert figures["mask_rate"] == figures["expected_mask_rate"]
    assert abs(figures["replacement_shares"][0] - 0.8) < 0.02


def test_oneflow_sample_passes_with_half_up_rounding(capsys, shared_dir, golden_dir):
    sample = shared_dir / "fixtures" / "oneflow" / "part-0"
    code, report = validate(capsys, sample, "--vocab", golden_dir / "vocab.txt")
    assert code == 0, errors(report)
    figures = report["datasets"][0]["stats"]["ofrecord"]["all"]
    assert figures["instances"] == 1024
    # 7 records carry Python 2's half-up count: one prediction more than half-to-even gives
    assert figures["predictions"] - figures["expected_predictions"] == 7
    assert report["warnings"] == []


def test_half_to_even_alone_rejects_a_record_one_prediction_short(capsys, tmp_path, g1):
    records = copy(g1)
    r = records[3]
    k = int((r["masked_lm_weights"] == 1).sum())
    r["masked_lm_weights"][k - 1] = 0.0
    r["masked_lm_positions"][k - 1] = 0
    r["masked_lm_ids"][k - 1] = 0
    path = write(tmp_path / "short.tfrecord", records, "tfrecord")
    code, report = validate(capsys, path)
    length = int(r["input_mask"].sum())
    assert code == 1
    assert errors(report) == [("num_predictions", 3, "masked_lm_weights",
                               f"{k - 1} predictions, expected {k} = min(20, max(1, round({length} × 0.15))); "
                               "made with whole-word masking? pass --whole-word-mask")]
    code, report = validate(capsys, path, "--whole-word-mask")
    assert code == 0, errors(report)


def test_random_replacement_by_sep_is_not_a_third_sep(capsys, tmp_path, g1):
    # The reference may replace a masked token by any vocab entry, [SEP] (102) included.
    records = copy(g1)
    r = records[0]
    r["input_ids"][r["masked_lm_positions"][0]] = 102
    code, report = validate(capsys, write(tmp_path / "sep.tfrecord", records, "tfrecord"))
    assert code == 0, errors(report)


# ---------------------------------------------------------------- one damage, one finding


def test_flipped_byte_is_a_data_crc_mismatch(capsys, tmp_path, g1):
    path = write(tmp_path / "flip.tfrecord", g1, "tfrecord")
    data = bytearray(path.read_bytes())
    offset = 0
    for _ in range(5):  # to record 5
        offset += 16 + struct.unpack_from("<Q", data, offset)[0]
    data[offset + 12 + 40] ^= 0x01
    path.write_bytes(bytes(data))
    code, report = validate(capsys, path)
    assert code == 1
    assert errors(report) == [("framing", 5, None, f"at byte {offset}: data CRC mismatch")]
    assert report["datasets"][0]["stats"]["tfrecord"]["all"]["instances"] == 39  # the rest is still checked


def test_truncated_tail(capsys, tmp_path, g1):
    path = write(tmp_path / "cut.ofrecord", g1, "ofrecord")
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    last = len(b"".join(formats.frame(formats.encode_record(r, "ofrecord"), "ofrecord") for r in g1[:39]))
    code, report = validate(capsys, path)
    assert code == 1
    size = len(data) - last - 8
    assert errors(report) == [("framing", 39, None, f"at byte {last}: truncated data ({size - 10} of {size} bytes)")]


def test_a_record_of_no_known_kind_is_a_finding_not_a_traceback(capsys, tmp_path, g1):
    """A flipped bit in an OFRecord's first length byte leaves record 0's features unreadable: the message
    naming the known kinds raised AttributeError (formats.KINDS); the table printed `None` for its kind."""
    path = write(tmp_path / "part-0", g1, "ofrecord")
    data = bytearray(path.read_bytes())
    data[1] ^= 0x10
    path.write_bytes(bytes(data))
    code, report = validate(capsys, path)
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["check"] == "schema"]
    assert finding["record"] == 0 and finding["message"].endswith(
        "match no record kind (known: pretraining, unmasked, packed, squad_train, squad_eval, glue, glue_regression)")
    assert main(["validate", str(path), "--quiet"]) == 1
    table = capsys.readouterr().out
    assert "no readable records, kind unknown, no manifest" in table and "None" not in table, table


def test_missing_key(capsys, tmp_path, g1):
    frames = [formats.frame(formats.encode_record(r, "tfrecord"), "tfrecord") for r in g1]
    features = [f for f in kinds_of(g1[7], "tfrecord") if f[0] != "masked_lm_ids"]
    frames[7] = encode_raw(features, "tfrecord")
    path = tmp_path / "missing.tfrecord"
    path.write_bytes(b"".join(frames))
    code, report = validate(capsys, path)
    assert code == 1
    assert errors(report) == [("schema", 7, "masked_lm_ids", "missing feature 'masked_lm_ids'")]


def test_list_one_element_short(capsys, tmp_path, g1):
    records = copy(g1)
    records[11]["input_ids"] = records[11]["input_ids"][:-1]
    code, report = validate(capsys, write(tmp_path / "short.ofrecord", records, "ofrecord"))
    assert code == 1
    assert errors(report) == [("schema", 11, "input_ids", "127 values, expected 128 (seq)")]


def test_int64_list_in_ofrecord_is_a_warning(capsys, tmp_path, g1):
    path = tmp_path / "part-0"
    path.write_bytes(b"".join(encode_raw(kinds_of(r, "ofrecord", "int64"), "ofrecord") for r in g1))
    code, report = validate(capsys, path)
    assert code == 0
    assert report["sound"] and report["findings"] == []
    assert f"{path}: input_ids: int64_list in 40 records; OneFlow's BERT decoder expects int32_list (it casts)" \
        in report["warnings"]
    assert sum("int64_list" in w for w in report["warnings"]) == 6  # every integer feature


def test_next_sentence_label_2(capsys, tmp_path, g1):
    records = copy(g1)
    records[4]["next_sentence_labels"][0] = 2
    code, report = validate(capsys, write(tmp_path / "nsp.tfrecord", records, "tfrecord"))
    assert code == 1
    assert errors(report) == [("next_sentence_labels", 4, "next_sentence_labels", "label 2, expected 0 or 1")]
    assert report["checks"]["next_sentence_labels"] == {
        "status": "failed", "failures": 1, "description": "0 or 1"}


def test_masked_position_in_the_padding(capsys, tmp_path, g1):
    records = copy(g1)
    index, r = next((i, r) for i, r in enumerate(records) if r["input_mask"].sum() < 120)
    length = int(r["input_mask"].sum())
    k = int((r["masked_lm_weights"] == 1).sum())
    r["masked_lm_positions"][k - 1] = length + 2
    code, report = validate(capsys, write(tmp_path / "pad.tfrecord", records, "tfrecord"))
    assert code == 1
    assert errors(report) == [("masked_positions", index, "masked_lm_positions",
                               f"position {length + 2} at slot {k - 1} is outside the real tokens (length {length}), "
                               f"expected 1 ≤ position < {length}")]


def test_out_of_vocab_id(capsys, tmp_path, golden_dir, g1):
    records = copy(g1)
    r = records[9]
    j = next(j for j in range(1, 50) if j not in set(r["masked_lm_positions"].tolist()) and r["input_ids"][j] != 102)
    r["input_ids"][j] = VOCAB_SIZE
    path = write(tmp_path / "oov.tfrecord", records, "tfrecord")
    code, report = validate(capsys, path, "--vocab", golden_dir / "vocab.txt")
    assert code == 1
    assert errors(report) == [("vocab", 9, "input_ids",
                               f"input_ids[{j}] is {VOCAB_SIZE}, expected an id < {VOCAB_SIZE} (vocab size)")]
    code, report = validate(capsys, path)  # without a vocab there is no upper bound
    assert code == 0


def test_a_vocab_directory_is_named_as_create_and_inspect_name_it(capsys, tmp_path, golden_dir):
    """`--vocab DIR` (a model's directory) said "--vocab DIR: cannot read: Is a directory" where create, tokenize
    and inspect name the vocab.txt inside."""
    for vocab, said in ((golden_dir, f"give {golden_dir / 'vocab.txt'}"), (tmp_path, "(it holds no vocab.txt)")):
        assert main(["validate", str(golden_dir / "G1.tfrecord"), "--vocab", str(vocab), "--quiet"]) == 2
        assert capsys.readouterr().err == (f"bertprep validate: error: --vocab {vocab}: a directory, not a vocab "
                                           f"file{':' if said.startswith('give') else ''} {said}\n")


def test_empty_part(capsys, tmp_path, g1):
    directory = tmp_path / "ofrecord" / "training"
    write(directory / "part-0", g1[:20], "ofrecord")
    (directory / "part-1").write_bytes(b"")
    write(directory / "part-2", g1[20:], "ofrecord")
    code, report = validate(capsys, tmp_path)
    assert code == 1
    assert errors(report) == [("files", None, None, "empty file (OneFlow aborts on an empty part)")]
    assert report["findings"][0]["file"] == str(directory / "part-1")


def test_files_that_are_all_empty_are_not_sound(capsys, tmp_path):
    """One empty file was SOUND (exit 0) with "no readable records": an empty shard among full ones is a
    warning, a dataset of nothing is a failure."""
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    code, report = validate(capsys, tmp_path / "empty.tfrecord")
    assert code == 1
    assert errors(report) == [("files", None, None, "no records in the 1 file(s) given: nothing to train on")]
    directory = tmp_path / "tfrecord" / "training"
    directory.mkdir(parents=True)
    for name in ("part-0", "part-1"):
        (directory / name).write_bytes(b"")
    code, report = validate(capsys, tmp_path / "tfrecord")
    assert code == 1 and report["findings"][0]["file"] == str(directory)


def test_json_before_path_says_it_took_the_path_as_its_report(capsys, tmp_path, g1):
    """`validate --json R`, --json a flag as in every other command: --json takes R as its REPORT file, and argparse
    said `the following arguments are required: PATH` of a command that names one. It now says what happened; no
    PATH at all reads as before, and the usage line is argparse's for a required PATH."""
    records = write(tmp_path / "a.tfrecord", g1[:2], "tfrecord")
    before = records.read_bytes()
    assert main(["validate", "--json", str(records)]) == 2
    assert capsys.readouterr().err == (f"bertprep validate: error: --json took {records} as its REPORT file, leaving "
                                       f"no PATH: give PATH first (bertprep validate {records} --json) or a REPORT "
                                       "file after --json\n")
    assert records.read_bytes() == before
    for argv in (["validate"], ["validate", "--json"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == "bertprep validate: error: the following arguments are required: PATH\n"
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.startswith("usage: bertprep validate [-h]") and usage.endswith(" PATH [PATH2]")
    code, report = validate(capsys, records)
    assert code == 0 and report["sound"]


def test_gap_in_part_numbering_and_min_parts(capsys, tmp_path, g1):
    directory = tmp_path / "parts"
    write(directory / "part-0", g1[:20], "ofrecord")
    write(directory / "part-2", g1[20:], "ofrecord")
    code, report = validate(capsys, tmp_path)
    assert code == 1
    assert [(f["check"], f["file"]) for f in report["findings"]] == [("files", str(directory / "part-1"))]
    assert report["findings"][0]["message"].startswith("missing: parts must be part-0 … part-2 without gaps")
    os.rename(directory / "part-2", directory / "part-1")
    code, report = validate(capsys, tmp_path, "--min-parts", "8")
    assert code == 1
    assert errors(report) == [("files", None, None, "2 parts, fewer than --min-parts 8 "
                                                     "(OneFlow needs data_part_num ≥ reader ranks)")]
    code, report = validate(capsys, tmp_path, "--min-parts", "2")
    assert code == 0


def _dataset_with_manifest(root, g1):
    """A create-style dataset (both formats, both splits) with its manifest.json."""
    files = {}
    for fmt, split, name, records in [("tfrecord", "training", "tfrecord/training/c_training_0.tfrecord", g1[:30]),
                                      ("tfrecord", "test", "tfrecord/test/c_test_0.tfrecord", g1[30:]),
                                      ("ofrecord", "training", "ofrecord/training/part-0", g1[:30]),
                                      ("ofrecord", "test", "ofrecord/test/part-0", g1[30:])]:
        path = write(root / name, records, fmt)
        data = path.read_bytes()
        files[name] = {"format": fmt, "split": split, "instances": len(records), "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {"tool": "bertprep", "stage": "create", "formats": ["tfrecord", "ofrecord"],
                "params": {"max_seq_length": 128, "max_predictions_per_seq": 20, "masked_lm_prob": 0.15,
                           "whole_word_mask": False},
                "vocab": {"path": "/nonexistent/vocab.txt", "size": VOCAB_SIZE}, "files": files}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_manifest_dataset_passes_and_compares_its_formats(capsys, tmp_path, g1):
    _dataset_with_manifest(tmp_path, g1)
    code, report = validate(capsys, tmp_path, "--compare")
    assert code == 0, errors(report)
    section = report["datasets"][0]
    assert section["manifest"] == str(tmp_path / "manifest.json")
    assert section["vocab_size"] == VOCAB_SIZE  # from the manifest
    assert {split: s["instances"] for split, s in section["stats"]["tfrecord"].items()} == {"training": 30, "test": 10}
    assert "segments_also_in_training" in section["stats"]["tfrecord"]["test"]
    assert report["compare"] == [{"what": "tfrecord vs ofrecord", "equal": True, "records": 40, "difference": None}]


def test_manifest_mismatch(capsys, tmp_path, g1):
    manifest = _dataset_with_manifest(tmp_path, g1)
    manifest["files"]["ofrecord/test/part-0"]["instances"] = 11
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    code, report = validate(capsys, tmp_path)
    assert code == 1
    assert errors(report) == [("manifest", None, None, "10 records, manifest.json says 11")]
    assert report["findings"][0]["file"] == str(tmp_path / "ofrecord" / "test" / "part-0")


def test_a_manifest_no_reader_accepts_is_the_first_finding_listed(capsys, tmp_path, g1):
    """A damaged manifest's findings were added after the records' failures (its records are then checked by the
    defaults): past --max-errors of those, the listing never said why 'manifest' failed. A hand-edited `formats`
    that drops one of its files' formats is such a manifest: validate said SOUND, and the loaders read the files
    it no longer names while convert and pack go by it."""
    manifest = _dataset_with_manifest(tmp_path, g1)
    records = copy(g1[:30])
    records[4]["next_sentence_labels"][0] = 2
    write(tmp_path / "tfrecord" / "training" / "c_training_0.tfrecord", records, "tfrecord")
    (tmp_path / "manifest.json").write_text(json.dumps({**manifest, "formats": ["tfrecord"]}))
    code, report = validate(capsys, tmp_path, "--max-errors", "1")
    assert code == 1 and report["counts"]["next_sentence_labels"] == 1
    assert errors(report) == [("manifest", None, "formats", "['tfrecord'], but files lists ofrecord files too: "
                                                            "expected every format of its files")]


def test_manifest_split_other_than_the_files_directory(capsys, tmp_path, g1):
    """pack takes a file's split from its manifest entry, the loaders from its directory: a test file the
    manifest put in training was SOUND, and packed into training."""
    manifest = _dataset_with_manifest(tmp_path, g1)
    manifest["files"]["ofrecord/test/part-0"]["split"] = "training"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    code, report = validate(capsys, tmp_path)
    assert code == 1
    assert errors(report) == [("manifest", None, None, "a test file (its directory), manifest.json says split "
                                                       "training")]
    assert report["findings"][0]["file"] == str(tmp_path / "ofrecord" / "test" / "part-0")


def test_manifest_sha256_and_unlisted_file(capsys, tmp_path, g1):
    _dataset_with_manifest(tmp_path, g1)
    records = copy(g1[:30])
    records[0]["next_sentence_labels"][0] = 1 - records[0]["next_sentence_labels"][0]  # same size, other bytes
    write(tmp_path / "tfrecord" / "training" / "c_training_0.tfrecord", records, "tfrecord")
    write(tmp_path / "tfrecord" / "training" / "c_training_1.tfrecord", g1[:3], "tfrecord")
    code, report = validate(capsys, tmp_path)
    assert code == 1
    found = [(f["check"], os.path.basename(f["file"]), f["message"].split(",")[0]) for f in report["findings"]]
    assert ("manifest", "c_training_1.tfrecord", "not listed in manifest.json (an unfinished or stray file)") in found
    assert sum(check == "manifest" and name == "c_training_0.tfrecord" and message.startswith("sha256")
               for check, name, message in found) == 1
    assert ("consistency", "training", "tfrecord holds 33 records") in found


def test_record_files_beside_a_manifest_dataset_are_checked(capsys, tmp_path, g1):
    """A folder holding a create output (its manifest.json) and record files outside it: validate checked the
    manifest's dataset alone, and a truncated stray.tfrecord beside it was SOUND, exit 0. Now those files are one
    more dataset, checked without a manifest."""
    _dataset_with_manifest(tmp_path / "records", g1)
    cut = write(tmp_path / "stray.tfrecord", g1[:3], "tfrecord")
    cut.write_bytes(cut.read_bytes()[:-10])
    code, report = validate(capsys, tmp_path)
    assert code == 1
    assert [(d["path"], d["manifest"] is None) for d in report["datasets"]] == [(str(tmp_path / "records"), False),
                                                                              (str(tmp_path), True)]
    assert [(f["check"], f["file"], f["record"]) for f in report["findings"]] == [("framing", str(cut), 2)]


def test_parallel_workers_give_the_same_report(capsys, tmp_path, g1):
    _dataset_with_manifest(tmp_path, g1)
    records = copy(g1[30:])
    records[2]["segment_ids"][1] = 1
    write(tmp_path / "ofrecord" / "test" / "part-0", records, "ofrecord")
    code1, one = validate(capsys, tmp_path, "--workers", "1")
    code2, two = validate(capsys, tmp_path, "--workers", "2")
    assert code1 == code2 == 1
    assert one == two
    assert ("segment_ids", 2, "segment_ids") in [e[:3] for e in errors(one)]


def test_max_errors_bounds_the_listing_not_the_count(capsys, tmp_path, g1):
    records = copy(g1)
    for r in records:
        r["next_sentence_labels"][0] = 3
    code, report = validate(capsys, write(tmp_path / "bad.tfrecord", records, "tfrecord"), "--max-errors", "5")
    assert code == 1
    assert len(report["findings"]) == 5
    assert report["checks"]["next_sentence_labels"]["failures"] == 40


# ---------------------------------------------------------------- --compare


def test_compare_golden_pairs_agree(capsys, golden_dir):
    for name in ("G1", "G2", "G3"):
        code, report = validate(capsys, golden_dir / f"{name}.tfrecord", golden_dir / f"{name}.ofrecord",
                                "--compare", "--whole-word-mask")
        assert code == 0, errors(report)
        expected = {"G1": 1373, "G2": 199, "G3": 1206}[name]
        assert report["compare"] == [{"what": "tfrecord vs ofrecord", "equal": True, "records": expected,
                                      "difference": None}]


def test_compare_finds_a_one_field_change(capsys, tmp_path, golden_dir):
    records = list(formats.read_records(golden_dir / "G1.ofrecord"))
    records[700] = dict(records[700])
    changed = records[700]["masked_lm_ids"].copy()
    changed[2] += 1
    records[700]["masked_lm_ids"] = changed
    other = write(tmp_path / "part-0", records, "ofrecord")
    code, report = validate(capsys, golden_dir / "G1.tfrecord", other, "--compare")
    assert code == 1  # the changed record itself is still sound: only the comparison fails
    assert report["counts"] == {"compare": 1}
    difference = report["compare"][0]["difference"]
    assert difference.startswith(f"instance 700: masked_lm_ids[2]: {changed[2] - 1} vs {changed[2]} (")
    assert report["compare"][0]["records"] == 700


def test_compare_names_the_shorter_side(capsys, tmp_path, g1):
    a = write(tmp_path / "a.tfrecord", g1, "tfrecord")
    b = write(tmp_path / "b" / "part-0", g1[:25], "ofrecord")
    code, report = validate(capsys, a, b, "--compare")
    assert code == 1
    assert report["compare"][0]["difference"].startswith("instance 25: only A has it")


# ---------------------------------------------------------------- usage and output


def test_usage_errors_exit_2(capsys, tmp_path, golden_dir):
    assert main(["validate", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["validate", str(golden_dir / "G1.tfrecord"), "--compare"]) == 2
    assert "--compare needs PATH2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(golden_dir / "G1.tfrecord"), "--max-errors", "x"])
    assert exc.value.code == 2


def test_one_dataset_given_twice_is_a_usage_error(capsys, tmp_path, g1):
    """`validate A A` (or A and a folder inside it) checked A's files twice: each finding listed twice, FAILED with
    2 failures of one damaged record. Now a usage error, exit 2, before anything is read."""
    records = copy(g1[:3])
    records[1]["next_sentence_labels"][0] = 2
    write(tmp_path / "sub" / "a.tfrecord", records, "tfrecord")
    assert main(["validate", str(tmp_path), str(tmp_path), "--quiet"]) == 2
    assert f"{tmp_path} and {tmp_path} are one dataset: give it once" in capsys.readouterr().err
    assert main(["validate", str(tmp_path), str(tmp_path / "sub"), "--quiet"]) == 2
    assert f"{tmp_path / 'sub'} lies inside {tmp_path}, which validate checks whole" in capsys.readouterr().err
    code, report = validate(capsys, tmp_path)
    assert code == 1 and report["errors_total"] == 1


@pytest.mark.parametrize("name", ["part-1.tfrecord", "notes.dat"])
def test_a_pipe_in_the_folder_is_a_usage_error_not_a_wait(capsys, tmp_path, g1, name):
    """A FIFO in the folder (a record file's name or any other): validate opened it to learn its format and waited
    for ever for a writer, nothing said. Now a usage error, exit 2, before any file is opened."""
    write(tmp_path / "part-0.tfrecord", g1[:3], "tfrecord")
    os.mkfifo(tmp_path / name)
    assert main(["validate", str(tmp_path), "--quiet"]) == 2
    assert capsys.readouterr().err == (f"bertprep validate: error: {tmp_path / name}: not a regular file (a pipe or a "
                                       f"device) in {tmp_path}: validate reads every file there, and a pipe that no "
                                       "one writes waits for ever; move it out of the folder\n")


def test_masked_lm_prob_of_one_is_checked_not_refused(capsys, golden_dir):
    """create and the manifests take masked_lm_prob in (0, 1]: records made with 1 are validated with it (it was
    a usage error); G1 (0.15) then fails num_predictions."""
    code, report = validate(capsys, golden_dir / "G1.tfrecord", "--masked-lm-prob", "1")
    assert code == 1 and {f["check"] for f in report["findings"]} == {"num_predictions"}
    assert main(["validate", str(golden_dir / "G1.tfrecord"), "--masked-lm-prob", "1.01"]) == 2
    assert "--masked-lm-prob must be in (0, 1]" in capsys.readouterr().err


def test_records_create_masks_at_masked_lm_prob_one_are_sound(capsys, tmp_path, golden_dir):
    """At --masked-lm-prob 1 the reference's budget, round(length × 1.0), passes the tokens it may mask (all but
    [CLS] and the two [SEP]): it masks those. validate expected the budget and failed create's own records
    (num_predictions, "16 predictions, expected 19"); a record short of the capped count still fails, said so."""
    text = tmp_path / "short.txt"
    text.write_text("the cat sat on the mat.\nit was warm there.\n\na dog ran in the park.\nthen it slept.\n")
    assert main(["create", "--input", str(text), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "out"), "--masked-lm-prob", "1", "--dupe-factor", "1", "--format", "tfrecord",
                 "--quiet"]) == 0
    capsys.readouterr()
    (records,) = (tmp_path / "out").glob("*/*/tfrecord/training/short.tfrecord")
    code, report = validate(capsys, records, "--masked-lm-prob", "1")
    assert code == 0 and report["sound"], errors(report)
    damaged = copy(formats.read_records(records))
    length = int(damaged[0]["input_mask"].sum())
    assert 1 < length - 3 == int(damaged[0]["masked_lm_weights"].sum()) < 20  # the cap binds
    last = length - 4
    for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        damaged[0][name][last] = 0
    damaged[0]["input_ids"][damaged[0]["input_ids"] == 103] = 1996  # no [MASK] left over the dropped slot
    code, report = validate(capsys, write(tmp_path / "damaged.tfrecord", damaged, "tfrecord"),
                            "--masked-lm-prob", "1")
    assert code == 1
    assert ("num_predictions", 0, "masked_lm_weights",
            f"{length - 4} predictions, expected {length - 3} = min(20, max(1, round({length} × 1.0))), capped at "
            f"its {length - 3} tokens other than [CLS] and [SEP]; made with whole-word masking? "
            "pass --whole-word-mask") in errors(report)


def test_record_file_no_reader_finds_by_its_name_is_said(capsys, tmp_path, g1):
    """An HDF5 file named g1.h5, a TFRecord named g1.bin: readers find records by name, so validate checked
    neither and said nothing (SOUND over what it read; "nothing to validate" where they were all)."""
    data = tmp_path / "data"
    data.mkdir()
    write(data / "g1.tfrecord", copy(g1), "tfrecord")
    assert main(["convert", str(data / "g1.tfrecord"), str(tmp_path / "g1.hdf5"), "--to", "hdf5", "--quiet"]) == 0
    (tmp_path / "g1.hdf5").rename(data / "g1.h5")
    (data / "g1.bin").write_bytes((data / "g1.tfrecord").read_bytes())
    code, report = validate(capsys, data)
    assert code == 0 and report["datasets"][0]["records"] == 40
    assert report["warnings"] == [
        f"{data / name}: its first bytes are {fmt}'s, but it is not named {glob}: not validated, and no reader takes "
        "it for records" for name, fmt, glob in (("g1.bin", "tfrecord", "*.tfrecord"), ("g1.h5", "hdf5", "*.hdf5"))]
    (data / "g1.tfrecord").unlink()
    (data / "g1.bin").unlink()
    assert main(["validate", str(data), "--quiet"]) == 1
    assert capsys.readouterr().err == (f"bertprep validate: error: {data}: nothing to validate (no record files, "
                                       f"text shards, SQuAD or GLUE files); {data / 'g1.h5'}: its first bytes are "
                                       "hdf5's, but it is not named *.hdf5: not validated, and no reader takes it for "
                                       "records\n")


def test_compare_of_one_path_holding_more_formats_than_the_framed_two(capsys, tmp_path, g1):
    """One PATH's --compare compares its TFRecord and OFRecord files: a PATH with a Parquet file beside them was
    refused ("needs PATH2"), one of TFRecord and Parquet taken and refused only after every check."""
    write(tmp_path / "g1.tfrecord", copy(g1), "tfrecord")
    assert main(["convert", str(tmp_path / "g1.tfrecord"), str(tmp_path / "g1.parquet"), "--to", "parquet",
                 "--quiet"]) == 0
    assert main(["validate", str(tmp_path), "--compare", "--quiet"]) == 2
    assert "--compare needs PATH2, or a PATH holding both TFRecord and OFRecord files" in capsys.readouterr().err
    write(tmp_path / "part-0", copy(g1), "ofrecord")
    code, report = validate(capsys, tmp_path, "--compare")
    assert code == 0 and report["compare"][0]["what"] == "tfrecord vs ofrecord" and report["compare"][0]["equal"]


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_report_file_that_is_a_directory_is_a_usage_error(capsys, tmp_path, golden_dir, flag):
    """Refused before anything is read (it was found after every check, "Is a directory", exit 1 as if the data
    were bad); an empty path is named as one (it was "--json  holds the input")."""
    assert main(["validate", str(golden_dir / "G1.tfrecord"), flag, str(tmp_path), "--quiet"]) == 2
    assert capsys.readouterr() == ("", f"bertprep validate: error: {flag} {tmp_path}: is a directory; name a file "
                                       "for the report\n")
    assert main(["validate", str(golden_dir / "G1.tfrecord"), flag, "", "--quiet"]) == 2
    assert capsys.readouterr().err == f"bertprep validate: error: {flag}: an empty path names no file or directory\n"


def test_table_and_plot(capsys, tmp_path, golden_dir):
    png = tmp_path / "report.png"
    report_json = tmp_path / "report.json"
    code = main(["validate", str(golden_dir / "G1.tfrecord"), "--quiet", "--plot", str(png), "--json",
                 str(report_json)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0] == "bertprep validate: SOUND"
    assert "  ok     next_sentence_labels" in out
    assert len(out.splitlines()) <= 40  # one screen
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(report_json.read_text())["datasets"][0]["records"] == 1373


def test_real_create_output_validates(capsys, tmp_path, golden_dir):
    shards = tmp_path / "sharded"
    lines = (golden_dir / "corpus.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (shards / "training").mkdir(parents=True)
    (shards / "test").mkdir()
    (shards / "training" / "g_training_0.txt").write_text("".join(lines[:300]), encoding="utf-8")
    (shards / "test" / "g_test_0.txt").write_text("".join(lines[300:]), encoding="utf-8")
    out = tmp_path / "records"
    assert main(["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(out),
                 "--dupe-factor", "1", "--workers", "1", "--quiet"]) == 0
    capsys.readouterr()
    code, report = validate(capsys, out, "--compare")
    assert code == 0, errors(report)
    assert report["datasets"][0]["manifest"].endswith("manifest.json")
    assert report["compare"][0]["equal"]


# ---------------------------------------------------------------- the decoding paths agree


@pytest.mark.parametrize("name", ["G1.tfrecord", "G2.ofrecord", "G3.ofrecord"])
def test_numpy_fallback_decodes_like_the_exact_codec(monkeypatch, golden_dir, name):
    import bertprep.formats.frames as frames
    import bertprep.stages.validate.decode as decode

    monkeypatch.setattr(decode, "_native_decode", None)
    monkeypatch.setattr(frames, "_native_crc32c", None)
    path = str(golden_dir / name)
    fmt = formats.sniff_format(path)
    seq, pred = (512, 80) if name.startswith("G2") else (128, 20)
    buf = frames.map_file(path)
    framing = frames.walk_frames(buf, fmt)
    assert framing.error is None and len(framing.bad_crc) == 0
    first = bytes(buf[framing.starts[0]:framing.starts[0] + framing.lengths[0]])
    dims = {"seq": seq, "pred": pred}
    _fields, kinds, problems = decode.exact_decode(first, fmt, PRETRAINING, dims)
    assert problems == []
    ok, fields = decode.lockstep_decode(buf, framing.starts, framing.lengths,
                                        decode.layout_of(kinds, fmt, PRETRAINING, dims))
    assert ok.all()
    expected = list(formats.read_records(path))
    for feature in PRETRAINING.names:
        assert np.array_equal(fields[feature], np.stack([r[feature] for r in expected])), feature


def test_numpy_fallback_gives_the_same_report(capsys, monkeypatch, tmp_path, g1):
    import bertprep.stages.validate.decode as decode

    records = copy(g1)
    records[4]["next_sentence_labels"][0] = 2
    records[6]["input_ids"][3] = 70000  # a 3-byte varint, out of vocab
    path = write(tmp_path / "mixed.tfrecord", records, "tfrecord")
    data = bytearray(path.read_bytes())
    data[-30] ^= 0x10  # the last record's data CRC
    path.write_bytes(bytes(data))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]"] + [f"t{i}" for i in range(1, 101)] + ["[CLS]", "[SEP]", "[MASK]"]
                                + [f"t{i}" for i in range(104, VOCAB_SIZE)]) + "\n")
    _, native = validate(capsys, path, "--vocab", vocab)
    monkeypatch.setattr(decode, "_native_decode", None)
    monkeypatch.setattr(decode, "_native_crc32c", None)
    _, fallback = validate(capsys, path, "--vocab", vocab)
    assert native == fallback
    assert [(e[0], e[1]) for e in errors(native)] == [("framing", 39), ("vocab", 6), ("next_sentence_labels", 4)]


def test_length_crc_mismatch_ends_the_file(capsys, tmp_path, g1):
    path = write(tmp_path / "header.tfrecord", g1, "tfrecord")
    data = bytearray(path.read_bytes())
    offset = 0
    for _ in range(12):
        offset += 16 + struct.unpack_from("<Q", data, offset)[0]
    data[offset + 1] ^= 0x40  # the length of record 12: its CRC fails, and the length is wrong too
    path.write_bytes(bytes(data))
    code, report = validate(capsys, path)
    assert code == 1
    assert errors(report) == [("framing", 12, None, f"at byte {offset}: length CRC mismatch")]
    assert report["datasets"][0]["records"] == 12


def test_another_key_order_is_decoded_exactly(capsys, tmp_path, g1):
    # OFRecord records in TFRecord key order and with unpacked lists are still sound records.
    frames = [formats.frame(formats.encode_record(r, "ofrecord"), "ofrecord") for r in g1]
    frames[8] = encode_raw(kinds_of(g1[8], "tfrecord", "int32")[::-1], "ofrecord")
    path = tmp_path / "part-0"
    path.write_bytes(b"".join(frames))
    code, report = validate(capsys, path)
    assert code == 0, errors(report)
    assert report["datasets"][0]["stats"]["ofrecord"]["all"]["instances"] == 40


def test_validate_called_in_python_returns_the_report_the_command_prints(capsys, tmp_path, golden_dir, g1):
    from bertprep.errors import UsageError
    from bertprep.stages.validate import ValidateOptions
    from bertprep.stages.validate import validate as validate_dataset

    pair = (str(golden_dir / "G1.tfrecord"), str(golden_dir / "G1.ofrecord"))
    code, printed = validate(capsys, *pair, "--compare")
    report = validate_dataset(ValidateOptions(pair, compare=True))
    assert capsys.readouterr() == ("", "")  # quiet, and the report returned, not printed
    assert code == 0 and report.sound and report.fields == printed
    assert main(["validate", *pair, "--compare", "--quiet"]) == 0
    table = capsys.readouterr().out
    report.print()
    assert capsys.readouterr().out == table
    # a dataset that fails a check is a report that says so, not an exception
    broken = write(tmp_path / "bad.tfrecord", copy(g1), "tfrecord")
    broken.write_bytes(broken.read_bytes()[:-3])
    code, printed = validate(capsys, broken)
    report = validate_dataset(paths=broken)  # a path alone, a Path object
    assert code == 1 and not report.sound and report.fields == printed
    with pytest.raises(UsageError, match=r"^ValidateOptions.max_errors must be ≥ 0, ValidateOptions.workers and "
                                         r"ValidateOptions.min_parts ≥ 1$"):
        ValidateOptions(pair, max_errors=-1)
    with pytest.raises(UsageError,
                       match=r"^ValidateOptions.compare needs PATH2, or a PATH holding both TFRecord and OFRecord"):
        ValidateOptions(pair[0], compare=True)
