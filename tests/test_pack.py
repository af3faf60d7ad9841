"""`bertprep pack`: lossless on the golden sets and on short documents, dense, the same bytes for any
worker count, resumable; every packed-row defect found by validate; bad input in one line."""

import importlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from bertprep import formats
from bertprep.cli import main
from bertprep.formats.schemas import PACKED, PRETRAINING
from bertprep.stages.pack import strategy
from bertprep.stages.pack.layout import pack_rows, unpack_rows
from test_create import fail_after_writing, golden_argv, only_records_dir, output_files


def run_json(capsys, *argv):
    """(exit code, the JSON summary or report) of a CLI command run with --json --quiet."""
    code = main([*map(str, argv), "--json", "--quiet"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def packed_dir(records_dir, k=3):
    return records_dir.parent.parent / f"{records_dir.parent.name}_packed{k}" / records_dir.name


def assert_lossless(capsys, records, packed, instances):
    """validate finds the packed files sound, and their rows hold exactly the source's instances."""
    code, report = run_json(capsys, "validate", packed)
    assert code == 0 and report["sound"], report["findings"]
    assert report["datasets"][0]["kind"] == "packed"
    code, report = run_json(capsys, "validate", packed, records, "--compare")
    assert code == 0, report["compare"]
    assert [(c["equal"], c["records"]) for c in report["compare"]] == [(True, instances)] * 2


def lengths_of(path):
    (batch,) = formats.read_batches(path, 1 << 20)
    return (batch["input_mask"] != 0).sum(axis=1)


@pytest.mark.parametrize("name", ["G1", "G2", "G3"])
def test_golden_sets_round_trip_losslessly(golden_dir, tmp_path, capsys, name):
    assert main(golden_argv(golden_dir, tmp_path, name)) == 0
    records = only_records_dir(tmp_path)
    code, summary = run_json(capsys, "pack", records)
    assert code == 0
    packed = packed_dir(records)
    assert Path(summary["records_dir"]) == packed
    assert sorted(output_files(packed)) == ["ofrecord/training/part-0", "tfrecord/training/corpus.tfrecord"]
    instances = sum(1 for _ in formats.iter_payloads(golden_dir / f"{name}.ofrecord"))
    assert summary["sequences"] == instances
    assert_lossless(capsys, records, packed, instances)
    # its own two formats, row by row: rows, not instances ("equal (568 instances)" was said of 568 rows)
    code, report = run_json(capsys, "validate", packed, "--compare")
    (row,) = report["compare"]
    assert code == 0 and (row["equal"], row["packed"]) == (True, True) and row["records"] < instances
    assert main(["validate", str(packed), "--compare"]) == 0
    assert f"compare tfrecord vs ofrecord: equal ({row['records']:,} packed rows)" in capsys.readouterr().out
    # never more rows than first-fit decreasing; never fewer than the bound
    lengths = lengths_of(golden_dir / f"{name}.ofrecord")
    seq = summary["dims"]["seq"]
    ffd = strategy.row_count(strategy.first_fit_decreasing(np.bincount(lengths, minlength=seq + 1), seq, 3))
    assert strategy.lower_bound(lengths, seq, 3) <= summary["rows"] <= ffd


def short_documents(corpus, directory, shards):
    """The golden corpus cut into documents of two sentences, in `shards` training shards."""
    documents = Path(corpus).read_text(encoding="utf-8").strip("\n").split("\n\n")
    short = []
    for document in documents:
        lines = document.split("\n")
        short += ["\n".join(lines[i:i + 2]) for i in range(0, len(lines), 2)]
    training = Path(directory) / "training"
    training.mkdir(parents=True)
    for i in range(shards):
        (training / f"short_training_{i}.txt").write_text("\n\n".join(short[i::shards]) + "\n", encoding="utf-8")
    return Path(directory)


@pytest.fixture(scope="module")
def short_records(golden_dir, tmp_path_factory):
    """Records of short documents (4 shards, 128/20, dupe factor 1), both formats."""
    root = tmp_path_factory.mktemp("short")
    shards = short_documents(golden_dir / "corpus.txt", root / "short", 4)
    assert main(["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(root / "records"), "--dupe-factor", "1", "--quiet", "--workers", "1"]) == 0
    return only_records_dir(root / "records")


def test_short_documents_pack_densely_and_the_same_for_any_worker_count(short_records, tmp_path, capsys):
    results = []
    for workers in (1, 2):
        code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path / f"w{workers}",
                                 "--workers", workers)
        assert code == 0
        results.append((summary, output_files(summary["records_dir"])))
    (summary, files), (_, files_2) = results
    assert len(files) == 8 and files == files_2
    assert summary["lower_bound_ratio"] <= summary["ratio"] < 0.6
    assert sum(summary["sequences_per_row"][2:]) > summary["sequences_per_row"][1]
    lengths = np.concatenate([lengths_of(p) for p in sorted(short_records.glob("ofrecord/training/part-*"))])
    assert summary["sequences"] == len(lengths) and summary["tokens"] == lengths.sum()
    assert_lossless(capsys, short_records, summary["records_dir"], len(lengths))
    manifest = json.loads((Path(summary["records_dir"]) / "manifest.json").read_text())
    assert manifest["kind"] == "packed" and manifest["dims"] == {"seq": 128, "pred": 20, "k": 3}
    assert manifest["source"]["manifest_sha256"] == formats_sha256(short_records / "manifest.json")
    assert manifest["packing"]["rows"] == summary["rows"] and manifest["vocab"]["size"] == 30522


def formats_sha256(path):
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_rerun_resumes_to_the_same_bytes(short_records, tmp_path, capsys):
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--workers", "1",
                             "--max-per-pack", "2", "--format", "ofrecord")
    assert code == 0 and summary["shards_packed"] == 4 and summary["records_dir"].endswith("_packed2/short")
    packed = Path(summary["records_dir"])
    complete = output_files(packed)
    assert sorted(complete) == [f"ofrecord/training/part-{i}" for i in range(4)]
    # as a killed run leaves it: one output missing, half of it in the staging directory
    (packed / "ofrecord/training/part-2").unlink()
    (packed / ".partial").mkdir()
    (packed / ".partial/part-2.999-0badcafe.partial").write_bytes(b"half a record")
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--workers", "1",
                             "--max-per-pack", "2", "--format", "ofrecord")
    assert code == 0 and summary["shards_packed"] == 1 and output_files(packed) == complete
    assert not (packed / ".partial").exists()
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--max-per-pack", "2",
                             "--format", "ofrecord")
    assert code == 0 and summary["shards_packed"] == 0


def test_the_trainers_and_mlperfs_reader_see_the_layout(short_records, tmp_path, capsys):
    """Each row as the MLPerf layout describes it, read back with the kind recognised from the features."""
    _code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--workers", "1")
    path = Path(summary["records_dir"]) / "tfrecord/training/short_training_0.tfrecord"
    assert formats.record_kind(path) is PACKED
    (rows,) = formats.read_batches(path, 1 << 20)
    assert rows["masked_lm_positions"].shape[1] == 23 and rows["next_sentence_positions"].shape[1] == 3
    row = int(np.argmax(rows["input_mask"].max(axis=1) == 3))
    mask, positions = rows["input_mask"][row], rows["positions"][row]
    starts = rows["next_sentence_positions"][row]
    assert starts[0] == 0 and list(mask[starts]) == [1, 2, 3] and list(positions[starts]) == [0, 0, 0]
    assert (rows["input_ids"][row][starts] == 101).all()  # each sequence's [CLS]
    assert list(rows["next_sentence_weights"][row]) == [1.0, 1.0, 1.0]
    weights = rows["masked_lm_weights"][row]
    real = weights > 0
    assert (mask[rows["masked_lm_positions"][row][real]] == weights[real]).all()


# ---------------------------------------------------------------- the strategy


def naive_first_fit_decreasing(lengths, seq, k):
    rows = []
    for length in sorted(lengths, reverse=True):
        row = next((r for r in rows if sum(r) + length <= seq and len(r) < k), None)
        if row is None:
            rows.append(row := [])
        row.append(length)
    return len(rows)


@pytest.mark.parametrize("seed", range(6))
def test_strategy_packs_every_sequence_once_within_the_limits(seed):
    rng = np.random.default_rng(seed)
    seq, pred, k = (128, 20, 3) if seed % 2 else (64, 10, 4)
    lengths = np.minimum(rng.geometric(1 / (seq / 3), size=int(rng.integers(50, 400))) + 4, seq)
    predictions = np.minimum(pred, np.maximum(1, np.round(lengths * 0.15))).astype(int)
    members, name = strategy.pack(lengths, predictions, seq, pred, k)
    used = members[members >= 0]
    assert sorted(used.tolist()) == list(range(len(lengths)))
    held = np.where(members >= 0, lengths[np.maximum(members, 0)], 0)
    assert held.sum(axis=1).max() <= seq and (members[:, 0] >= 0).all()
    assert np.where(members >= 0, predictions[np.maximum(members, 0)], 0).sum(axis=1).max() <= pred + k
    # rows in the order of their first sequence, each row's sequences in input order
    assert (np.diff(members[:, 0]) > 0).all()
    assert all((np.diff(row[row >= 0]) > 0).all() for row in members)
    histogram = np.bincount(lengths, minlength=seq + 1)
    ffd = strategy.row_count(strategy.first_fit_decreasing(histogram, seq, k))
    assert ffd == naive_first_fit_decreasing(lengths.tolist(), seq, k)
    assert strategy.lower_bound(lengths, seq, k) <= len(members) <= ffd
    again, _ = strategy.pack(lengths, predictions, seq, pred, k)
    assert np.array_equal(members, again)
    assert name in ("best fill", "best fill (tokens)", "first-fit decreasing")


def test_rows_over_the_prediction_slots_are_split():
    """masked_lm_prob 0.5: three sequences of 40 tokens hold 60 predictions, more than pred + k = 23."""
    lengths = np.full(9, 40)
    members, _ = strategy.pack(lengths, np.full(9, 20), 128, 20, 3)
    per_row = (members >= 0).sum(axis=1)
    assert sorted(members[members >= 0].tolist()) == list(range(9)) and per_row.max() == 1


def test_pack_rows_and_unpack_rows_are_inverses(golden_dir):
    (instances,) = formats.read_batches(golden_dir / "G1.tfrecord", 1 << 20)
    lengths = (instances["input_mask"] != 0).sum(axis=1)
    members, _ = strategy.pack(lengths, (instances["masked_lm_weights"] != 0).sum(axis=1), 128, 20, 3)
    rows = pack_rows(instances, members, 3, 20)
    back, row, slot, offset = unpack_rows(rows, 20)
    for name in PRETRAINING.names:
        np.testing.assert_array_equal(back[name], instances[name][members[row, slot]], err_msg=name)
    assert (rows["input_ids"][row, offset] == 101).all()


# ---------------------------------------------------------------- validate finds each defect


def defective_rows(golden_dir):
    """Ten rows of two short G1 instances each (k 3): sound, so that each test damages one."""
    (instances,) = formats.read_batches(golden_dir / "G1.tfrecord", 1 << 20)
    short = np.flatnonzero((instances["input_mask"] != 0).sum(axis=1) <= 56)[:20]
    members = np.full((10, 3), -1)
    members[:, :2] = short.reshape(10, 2)
    return pack_rows(instances, members, 3, 20)


def test_validate_finds_every_packed_row_defect(golden_dir, tmp_path, capsys):
    rows = defective_rows(golden_dir)
    second = rows["next_sentence_positions"][:, 1]  # where each row's second sequence starts
    length = (rows["input_mask"] != 0).sum(axis=1)

    def damage(row, name, at, value):
        rows[name][row, at] = value

    damage(0, "input_mask", second[0] + 3, 1)  # sequence 1 again inside sequence 2
    damage(1, "positions", second[1], second[1])  # positions run on instead of restarting
    slot = int(np.flatnonzero(rows["masked_lm_weights"][2] == 1)[0])
    damage(2, "masked_lm_positions", slot, second[2] + 1)  # a masked position in the other sequence
    slot = int(np.flatnonzero(rows["masked_lm_weights"][3] == 2)[0])
    damage(3, "masked_lm_weights", slot, 3.0)  # the weight of a sequence the row does not hold
    damage(4, "input_ids", length[4] + 2, 2003)  # a token in the padding
    damage(5, "next_sentence_positions", 1, second[5] + 1)  # NSP read off another token
    damage(6, "next_sentence_weights", 2, 1.0)  # a weight for an absent sequence
    damage(7, "input_ids", second[7], 2003)  # sequence 2 lacks its [CLS]
    damage(8, "segment_ids", second[8] + 1, 1)  # sequence 2's segment A marked B
    damage(9, "input_mask", length[9], 2)  # ... and row 9: padding that claims to be sequence 2
    path = tmp_path / "packed.tfrecord"
    formats.write_records(path, [{n: v[i] for n, v in rows.items()} for i in range(10)], "tfrecord", PACKED)
    code, report = run_json(capsys, "validate", path)
    assert code == 1
    found = {f["record"]: (f["check"], f["field"]) for f in report["findings"]}
    assert found == {
        0: ("pack_mask", "input_mask"),
        1: ("pack_positions", "positions"),
        2: ("pack_predictions", "masked_lm_positions"),
        3: ("pack_predictions", "masked_lm_weights"),
        4: ("pack_padding", "input_ids"),
        5: ("pack_next_sentence", "next_sentence_positions"),
        6: ("pack_next_sentence", "next_sentence_weights"),
        7: ("cls", "input_ids"),
        8: ("segment_ids", "segment_ids"),
        9: ("pack_positions", "positions"),
    }, report["findings"]
    messages = {f["record"]: f["message"] for f in report["findings"]}
    assert messages[0] == f"1 at {second[0] + 3} after 2, expected 2, 3 or 0"
    assert messages[7].startswith(f"sequence 2 (tokens {second[7]}–{length[7] - 1}): input_ids[0] is 2003")
    assert messages[6] == "next_sentence_weights[2] is 1.0, expected 0.0 (no sequence in this slot)"
    assert len(report["findings"]) == 10  # one damage, one finding


def test_compare_names_an_instance_lost_or_changed(short_records, tmp_path, capsys):
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--workers", "1",
                             "--format", "ofrecord")
    packed = Path(summary["records_dir"])
    part = packed / "ofrecord/training/part-1"
    (rows,) = formats.read_batches(part, 1 << 20)
    instances, row, _slot, _ = unpack_rows(rows, 20)
    source = short_records / "ofrecord/training/part-1"
    (originals,) = formats.read_batches(source, 1 << 20)
    lost = int(np.flatnonzero((originals["input_ids"] == instances["input_ids"][0]).all(axis=1))[0])
    members = np.arange(len(row)).reshape(-1, 1)[1:]  # every instance in a row of its own but the first
    formats.write_records(part, _records(pack_rows(instances, members, 3, 20)), "ofrecord", PACKED)
    code, report = run_json(capsys, "validate", packed, short_records, "--compare")
    assert code == 1
    assert report["compare"][0]["difference"] == f"{source} record {lost} is missing from {part}: in none of its rows"
    # a duplicate instead of the lost one
    formats.write_records(part, _records(pack_rows(instances, np.arange(len(row)).reshape(-1, 1)[[1] + list(
        range(1, len(row)))], 3, 20)), "ofrecord", PACKED)
    code, report = run_json(capsys, "validate", packed, short_records, "--compare")
    assert report["compare"][0]["difference"].startswith(f"{source} record {lost} is missing from {part}")


def test_compare_of_one_packed_format_against_both_formats_in_either_order(short_records, tmp_path, capsys):
    """`validate PACKED_HDF5 RECORDS --compare` (RECORDS holding TFRecord and OFRecord) ended "--compare: no record
    files of a common format to compare", exit 2, while `validate RECORDS PACKED_HDF5 --compare` compared both
    formats with the HDF5 rows: A's only format is now compared with each of B's, as B's only one is with A's."""
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--workers", "1", "--format", "hdf5")
    packed = summary["records_dir"]
    instances = summary["sequences"]
    code, report = run_json(capsys, "validate", packed, short_records, "--compare")
    assert code == 0 and report["sound"], report["findings"]
    assert [(c["what"], c["equal"], c["records"], c["unpacked"]) for c in report["compare"]] == [
        ("hdf5 vs tfrecord", True, instances, True), ("hdf5 vs ofrecord", True, instances, True)]
    code, report = run_json(capsys, "validate", short_records, packed, "--compare")  # the other order, as it was
    assert code == 0 and [c["what"] for c in report["compare"]] == ["tfrecord vs hdf5", "ofrecord vs hdf5"]


def _records(rows):
    return [{name: values[i] for name, values in rows.items()} for i in range(len(rows["input_ids"]))]


# ---------------------------------------------------------------- bad input


def one_line_error(capsys, argv, code):
    assert main(argv) == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("bertprep pack: error: "), err
    return err[0]


def test_bad_inputs_end_with_one_line(short_records, golden_dir, tmp_path, capsys):
    assert "not a records directory of `bertprep create`" in one_line_error(
        capsys, ["pack", str(golden_dir), "--quiet"], 1)
    assert "no such directory" in one_line_error(capsys, ["pack", str(tmp_path / "nope"), "--quiet"], 1)
    assert "--max-per-pack must be at least 1" in one_line_error(
        capsys, ["pack", str(short_records), "--max-per-pack", "0", "--quiet"], 2)
    # a k no row of 128 tokens can reach sized every row's arrays by it: 20,000 wrote 197 MB of a 632 KB source
    assert one_line_error(capsys, ["pack", str(short_records), "--out", str(tmp_path / "k"), "--max-per-pack",
                                   "26", "--quiet"], 2) == (
        "bertprep pack: error: --max-per-pack 26: a row of 128 tokens holds at most 25 sequences ([CLS] A [SEP] "
        "B [SEP] takes at least 5)")
    assert not (tmp_path / "k").exists()
    assert "unknown --format" in one_line_error(
        capsys, ["pack", str(short_records), "--format", "avro", "--quiet"], 2)
    _code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path / "p", "--workers", "1")
    assert "already packed" in one_line_error(capsys, ["pack", summary["records_dir"], "--quiet"], 1)

    # a create directory whose files do not hold what its manifest says
    bad = tmp_path / "records" / "params" / "bad"
    (bad / "ofrecord" / "training").mkdir(parents=True)
    mixed = bad / "ofrecord" / "training" / "part-1"
    mixed.write_bytes((golden_dir / "G2.ofrecord").read_bytes())  # 512/80 records among 128/20
    truncated = bad / "ofrecord" / "training" / "part-0"
    truncated.write_bytes((golden_dir / "G1.ofrecord").read_bytes()[:-100])

    def manifest(files):
        entries = {f"ofrecord/training/{p.name}": {"format": "ofrecord", "split": "training", "source": p.name,
                                                   "sha256": formats_sha256(p), "bytes": p.stat().st_size}
                   for p in files}
        (bad / "manifest.json").write_text(json.dumps({"stage": "create", "kind": "pretraining",
                                                       "formats": ["ofrecord"],
                                                       "dims": {"seq": 128, "pred": 20}, "files": entries}))

    manifest([truncated])
    line = one_line_error(capsys, ["pack", str(bad), "--quiet"], 1)
    assert line.endswith(f"{truncated}: record 1372 at byte 1103384: truncated data (721 of 821 bytes)"), line
    manifest([mixed])
    line = one_line_error(capsys, ["pack", str(bad), "--quiet"], 1)
    assert f"{mixed}: record 0 at byte 1269: feature 'input_ids': 512 values, expected 128" in line, line
    manifest([mixed])
    truncated.replace(mixed)  # changed since create wrote it
    line = one_line_error(capsys, ["pack", str(bad), "--quiet"], 1)
    assert line.endswith(f"{mixed}: sha256 differs from the create manifest's: the file changed after "
                         "`bertprep create` wrote it (rerun create)"), line
    assert not [p for p in (tmp_path / "records").rglob("*") if "_packed" in str(p) and p.is_file()
                and p.name != "manifest.json"]
    assert os.path.isdir(short_records)


def test_pack_of_a_tokenize_output_names_what_it_holds(golden_dir, tmp_path, capsys):
    """tokenize's manifest names no kind, and pack called its token sequences "kind pretraining" while
    refusing them; a shard manifest (text) was "kind pretraining" too."""
    shards = tmp_path / "shards"
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(shards), "--corpus", "g",
                 "--train-shards", "1", "--test-shards", "1", "--test-fraction", "0.2", "--quiet"]) == 0
    assert main(["tokenize", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "tok"), "--quiet"]) == 0
    (tokenized,) = (tmp_path / "tok").iterdir()
    assert one_line_error(capsys, ["pack", str(tokenized), "--quiet"], 1) == (
        f"bertprep pack: error: {tokenized}: manifest.json is of stage 'tokenize', which holds token sequences "
        "(megatron .bin/.idx), not records; pack reads the pretraining records of `bertprep create`")
    assert one_line_error(capsys, ["pack", str(shards), "--quiet"], 1) == (
        f"bertprep pack: error: {shards}: manifest.json is of stage 'shard', which names no record kind; pack "
        "reads the pretraining records of `bertprep create`")
    assert not list(tmp_path.glob("*_packed*"))


def test_pack_of_unmasked_records_says_what_it_reads(tmp_path, capsys):
    """create --masking dynamic writes unmasked records, which pack refuses: it said "manifest.json is of stage
    'create', kind unmasked; pack reads the pretraining records of `bertprep create`" of create's own output."""
    assert main(["create", "--workdir", str(tmp_path), "--masking", "dynamic", "--dupe-factor", "1", "--quiet"]) == 0
    (unmasked,) = (tmp_path / "records").glob("*/sample_corpus")
    assert one_line_error(capsys, ["pack", str(unmasked), "--quiet"], 1) == (
        f"bertprep pack: error: {unmasked}: unmasked records (`bertprep create --masking dynamic`, masked by the "
        "loaders anew each epoch); a packed row holds its sequences' masked positions, so pack reads masked records: "
        "pack a `bertprep create --masking static` directory (create's default)")
    assert not list((tmp_path / "records").glob("*_packed*"))


def test_pack_refuses_an_output_folder_of_another_stage(short_records, tmp_path, capsys):
    """pack's output folder holding another stage's manifest (here tokenize's): pack removed the files it lists
    as an earlier run's ("removed 18 file(s) …") and replaced the manifest. It is refused, nothing touched."""
    out = tmp_path / "out"
    target = packed_dir(out / short_records.parent.name / short_records.name)
    assert main(["tokenize", "--out", str(target.parent), "--corpus", target.name, "--workdir", str(tmp_path / "w"),
                 "--quiet"]) == 0  # the embedded sample corpus
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    assert one_line_error(capsys, ["pack", str(short_records), "--out", str(out), "--quiet"], 1) == (
        f"bertprep pack: error: {target}/manifest.json: a manifest of bertprep tokenize, not of pack: pack would "
        "replace it and remove the files it lists; choose another --out")
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before


# Figures that depend on the clock, not on the data.
TIMINGS = ("seconds", "sequences_per_second")


def test_pack_called_in_python_writes_what_the_command_writes(short_records, tmp_path, capsys):
    from bertprep.errors import UsageError
    from bertprep.stages.pack import PackOptions, pack

    code, printed = run_json(capsys, "pack", short_records, "--out", tmp_path / "cli", "--format", "ofrecord,hdf5")
    assert code == 0
    summary = pack(records_dir=short_records, out=str(tmp_path / "py"), format=("hdf5", "ofrecord"))
    assert capsys.readouterr() == ("", "")  # quiet, and the summary returned, not printed
    assert not summary.complete_before and summary.title == "bertprep pack: done"
    assert summary["records_dir"] == str(tmp_path / "py" / f"{short_records.parent.name}_packed3" / short_records.name)
    assert output_files(summary["records_dir"]) == output_files(printed["records_dir"])
    assert ({k: v for k, v in summary.items() if k not in (*TIMINGS, "records_dir")}
            == {k: v for k, v in printed.items() if k not in (*TIMINGS, "records_dir")})
    again = pack(PackOptions(str(short_records), out=str(tmp_path / "py"), format=("ofrecord", "hdf5")))
    assert again.complete_before and again["shards_packed"] == 0
    with pytest.raises(UsageError, match=r"^PackOptions.max_per_pack must be at least 1, not 0$"):
        PackOptions(str(short_records), max_per_pack=0)
    with pytest.raises(UsageError, match=r"^unknown PackOptions.format 'avro' \(choose from"):
        PackOptions(str(short_records), format=("avro",))


def test_pack_options_take_numpy_ints_as_ints(short_records, tmp_path):
    """PackOptions(max_per_pack=np.int64(2)) passed the type check and then stopped the settings' JSON with a
    "not JSON serializable" traceback."""
    import numpy as np

    import bertprep

    options = bertprep.PackOptions(records_dir=str(short_records), out=str(tmp_path / "p"), max_per_pack=np.int64(2))
    assert type(options.max_per_pack) is int
    summary = bertprep.pack(options)
    assert summary["dims"]["k"] == 2


def edited_copy(records, tmp_path, edit):
    """A copy of the records directory `records` (as <tmp>/records/params/c) whose manifest `edit` changed."""
    import shutil

    copy = tmp_path / "records" / "params" / "c"
    shutil.copytree(records, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_a_file_entry_whose_source_is_no_name_is_a_damaged_manifest(short_records, tmp_path, capsys):
    """A hand-edited entry's `source` (the create input a shard came from, which pack groups and orders shards
    by) of a list or a number stopped pack with a TypeError traceback from deep inside its plan."""
    def edit(manifest):
        manifest["files"]["tfrecord/training/short_training_0.tfrecord"]["source"] = ["a"]

    copy = edited_copy(short_records, tmp_path, edit)
    assert one_line_error(capsys, ["pack", str(copy), "--quiet"], 1) == (
        f"bertprep pack: error: {copy}/manifest.json: damaged manifest "
        '(files["tfrecord/training/short_training_0.tfrecord"]["source"] has the wrong type); remove it to redo '
        "this stage from scratch")
    assert not (tmp_path / "records" / "params_packed3").exists()


def test_entries_that_lead_out_of_the_directory_are_refused(short_records, tmp_path, capsys):
    """pack writes each packed file under its input's manifest name and split: an entry listed by its absolute
    path had pack replace its own input with packed rows (exit 0), and a split of '../../x' wrote outside the
    output directory."""
    name = "ofrecord/training/part-0"
    copy = tmp_path / "records" / "params" / "c"

    def absolute(manifest):
        manifest["files"][str(copy / name)] = manifest["files"].pop(name)

    copy = edited_copy(short_records, tmp_path, absolute)
    before = (copy / name).read_bytes()
    assert one_line_error(capsys, ["pack", str(copy), "--format", "ofrecord", "--quiet"], 1) == (
        f"bertprep pack: error: {copy}: manifest.json entry '{copy / name}' names no file inside the directory; "
        "pack writes its packed file under the same name (create lists <format>/<split>/<file>)")
    assert (copy / name).read_bytes() == before

    def upward(manifest):
        manifest["files"][name]["split"] = "../../x"

    copy = edited_copy(short_records, tmp_path / "2", upward)
    assert one_line_error(capsys, ["pack", str(copy), "--quiet"], 1) == (
        f"bertprep pack: error: {copy}: manifest.json entry '{name}' has split '../../x', not a directory name "
        "(create writes training and test)")
    assert not list((tmp_path / "2").rglob("*_packed*"))


def test_two_shards_are_never_packed_into_one_file(golden_dir, tmp_path, capsys):
    """--format tfrecord (or hdf5, parquet) names a file by the create input's name: two inputs of one name in an
    OFRecord-only create (its parts numbered) were packed into one x.tfrecord, the second replacing the first,
    while the summary counted both."""
    lines = (golden_dir / "corpus.txt").read_text(encoding="utf-8").split("\n")
    for name, part in (("a", lines[:40]), ("b", lines[40:100])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.txt").write_text("\n".join(part) + "\n", encoding="utf-8")
    assert main(["create", "--input", str(tmp_path / "a" / "x.txt"), str(tmp_path / "b" / "x.txt"), "--vocab",
                 str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "records"), "--dupe-factor", "1",
                 "--format", "ofrecord", "--quiet"]) == 0
    records = only_records_dir(tmp_path / "records")
    packed = packed_dir(records)
    assert one_line_error(capsys, ["pack", str(records), "--format", "tfrecord", "--quiet"], 2) == (
        f"bertprep pack: error: {records}/ofrecord/training/part-0 and {records}/ofrecord/training/part-1 would "
        f"both be packed into {packed}/tfrecord/training/x.tfrecord: tfrecord names its files by the create "
        "input's name, which theirs share; pack to ofrecord, which numbers its files")
    assert not packed.exists()
    code, summary = run_json(capsys, "pack", records, "--format", "ofrecord")
    assert code == 0 and len(output_files(packed)) == 2


def test_a_rerun_with_fewer_formats_removes_the_earlier_files(short_records, tmp_path, capsys):
    """A rerun into the same output with fewer formats left the earlier run's files, which its manifest no longer
    lists: readers that glob a split's directory found them, and validate failed the directory for them."""
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--workers", "1")
    assert code == 0 and "warnings" not in summary
    code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path, "--format", "ofrecord")
    assert code == 0 and summary["shards_packed"] == 0
    assert summary["warnings"] == ["removed 4 file(s) of an earlier run that this run does not write: "
                                   + ", ".join(f"tfrecord/training/short_training_{i}.tfrecord" for i in range(4))]
    assert sorted(output_files(summary["records_dir"])) == [f"ofrecord/training/part-{i}" for i in range(4)]
    code, report = run_json(capsys, "validate", summary["records_dir"])
    assert code == 0 and report["sound"], report["findings"]


def test_a_failed_pack_leaves_no_file_its_manifest_does_not_list(short_records, tmp_path, monkeypatch):
    """With --workers 2, a shard that failed (its records changed since create) while another worker's shard was
    written and not yet handed back left that shard's packed files under their final names, unlisted (a first
    run: no manifest at all), where a reader that globs the split takes them. Played here in one process: the first
    shard is written, then the run fails before its result is taken. What the manifest does not list goes, and the
    folders left empty."""
    import importlib

    import bertprep
    from bertprep.errors import DataError

    stage = importlib.import_module("bertprep.stages.pack.stage")
    fail_after_writing(monkeypatch, stage, "pack_shard", "a shard: sha256 differs from the create manifest's")
    with pytest.raises(DataError, match="sha256 differs"):
        bertprep.pack(records_dir=str(short_records), out=str(tmp_path), engine=bertprep.EngineOptions(workers=1))
    assert list(tmp_path.iterdir()) == []


def test_the_manifest_is_saved_paced_with_the_same_bytes(short_records, tmp_path, monkeypatch, capsys):
    """pack rewrote its manifest, its figures summed over every shard again, after every finished shard: N
    shards wrote O(N²) bytes. Paced as tokenize's and create's (workdir.PacedSaves): with the pace set past any
    run's length, 4 shards save at the first shard and at the end (4 saves before and 1 more), and the manifest
    and records are those of a run that saves after every shard (a pace of 0, as before)."""
    import math

    import bertprep.workdir

    stage = importlib.import_module("bertprep.stages.pack.stage")
    saves, save = [], stage.save_manifest
    monkeypatch.setattr(stage, "save_manifest", lambda directory, manifest: (saves.append(len(manifest["files"])),
                                                                             save(directory, manifest)))
    runs = {}
    for pace in (0, math.inf):
        monkeypatch.setattr(bertprep.workdir, "SAVE_EVERY_S", pace)
        monkeypatch.setattr(bertprep.workdir, "PACE_FACTOR", pace)
        saves.clear()
        code, summary = run_json(capsys, "pack", short_records, "--out", tmp_path / str(pace), "--workers", "1",
                                 "--max-per-pack", "2", "--format", "ofrecord")
        assert code == 0 and summary["shards_packed"] == 4
        runs[pace] = (list(saves), {name: (Path(summary["records_dir"]) / name).read_bytes()
                                    for name in [*output_files(summary["records_dir"]), "manifest.json"]})
    assert runs[0][0] == [1, 2, 3, 4, 4] and runs[math.inf][0] == [1, 4, 4]
    assert runs[0][1] == runs[math.inf][1]
