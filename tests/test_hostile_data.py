"""Hostile records and manifests (issue #30, the data side): every reader refuses them with one line naming the
file, row or field, and a non-zero exit; nothing is wrapped, skipped or written.

The bad files are made with h5py and pyarrow from a good `bertprep create` run on a tiny corpus, and the manifest
is kept consistent with them (sizes, sha256), so that each case reaches the check it is about.
"""

import hashlib
import json
import re
import shutil

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertprep import formats, hf
from bertprep.cli import main
from bertprep.errors import DataError, UsageError
from bertprep.formats.schemas import PRETRAINING, check_int_values
from bertprep.torch import BertLoader
from tests.test_create import only_records_dir
from trainer.data import Records, RecordStream

BIG = 1 << 40  # an int64 id: wrapped to 0 by an int32 cast
VOCAB_SIZE = 30522  # the golden vocab's, which the manifests record


@pytest.fixture(scope="module")
def made(golden_dir, tmp_path_factory):
    """{"static": records of 2 training files in all four formats, "dynamic": unmasked ones in tfrecord and
    parquet}, from the golden corpus cut in two."""
    root = tmp_path_factory.mktemp("hostile")
    text = (golden_dir / "corpus.txt").read_text().splitlines(keepends=True)
    shards = root / "corpus" / "training"
    shards.mkdir(parents=True)
    (shards / "c_training_0.txt").write_text("".join(text[:300]))
    (shards / "c_training_1.txt").write_text("".join(text[300:600]))
    made = {}
    for name, extra in (("static", ["--format", "tfrecord,ofrecord,hdf5,parquet"]),
                        ("dynamic", ["--format", "tfrecord,parquet", "--masking", "dynamic"])):
        out = root / name
        assert main(["create", "--input", str(root / "corpus"), "--vocab", str(golden_dir / "vocab.txt"),
                     "--out", str(out), "--seq", "64", "--pred", "10", "--dupe-factor", "1", "--quiet",
                     "--workers", "1", "--min-parts", "1", *extra]) == 0
        made[name] = only_records_dir(out)
    return made


@pytest.fixture
def static(made, tmp_path):
    return shutil.copytree(made["static"], tmp_path / "static")


@pytest.fixture
def dynamic(made, tmp_path):
    return shutil.copytree(made["dynamic"], tmp_path / "dynamic")


def second_file(records, fmt):
    return sorted((records / fmt / "training").iterdir())[1]


def edit_manifest(records, change):
    path = records / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def relist(records, path, **entry):
    """The manifest's entry of a replaced file made to match it again (bytes, sha256, and `entry`)."""
    data = path.read_bytes()
    edit_manifest(records, lambda m: m["files"][str(path.relative_to(records))].update(
        bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), **entry))
    return path


def replace_ids(records, fmt, row=3, column=1, value=BIG):
    """The second training file with one input_ids value set to `value`, stored as int64."""
    path = second_file(records, fmt)
    if fmt == "hdf5":
        with h5py.File(path, "r+") as f:
            ids = f["input_ids"][()].astype(np.int64)
            ids[row, column] = value
            del f["input_ids"]
            f.create_dataset("input_ids", data=ids)
    elif fmt == "parquet":
        table = pq.read_table(path)
        ids = np.stack(table.column("input_ids").to_pylist()).astype(np.int64)
        ids[row, column] = value
        column_array = pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), ids.shape[1])
        pq.write_table(table.set_column(table.schema.get_field_index("input_ids"), "input_ids", column_array), path)
    else:  # tfrecord holds int64 lists
        records_of = list(formats.read_records(path))
        records_of[row]["input_ids"] = records_of[row]["input_ids"].astype(np.int64)
        records_of[row]["input_ids"][column] = value
        path.unlink()
        formats.write_records(path, records_of, "tfrecord", PRETRAINING)
    return relist(records, path)


def only_format(records, fmt):
    """`records` with the files of other formats removed, and their manifest entries (hf.load prefers Parquet)."""
    for other in ("tfrecord", "ofrecord", "hdf5", "parquet"):
        if other != fmt and (records / other).exists():
            shutil.rmtree(records / other)
    edit_manifest(records, lambda m: m.update(files={k: v for k, v in m["files"].items() if k.startswith(fmt + "/")},
                                              formats=[fmt]))
    return records


def rewrite_parquet(records, change, **entry):
    path = second_file(records, "parquet")
    pq.write_table(change(pq.read_table(path)), path)
    return relist(records, path, **entry)


def with_null(table):
    labels = table.column("next_sentence_labels").to_pylist()
    labels[2] = None
    return table.set_column(table.schema.get_field_index("next_sentence_labels"), "next_sentence_labels",
                            pa.array(labels, pa.int32()))


def with_null_id(table):
    ids = table.column("input_ids").combine_chunks()
    values = ids.flatten().to_pylist()
    values[3 * ids.type.list_size + 2] = None
    column = pa.FixedSizeListArray.from_arrays(pa.array(values, pa.int32()), ids.type.list_size)
    return table.set_column(table.schema.get_field_index("input_ids"), "input_ids", column)


def cli_error(capsys, argv, code):
    """Run `bertprep ARGV`: exit `code`, one line on stderr and no traceback; that line."""
    capsys.readouterr()
    try:
        exit_code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        exit_code = exc.code
    assert exit_code == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"bertprep {argv[0]}: error: ") and "Traceback" not in err[0], err
    return err[0]


def hf_load(records, tmp_path):
    return hf.load(str(records), cache_dir=str(tmp_path / "hf-cache"))


def trainer_reads(records, fmt):
    """What the trainer's --format FMT reader takes from `records`: every record of one epoch."""
    data = Records(str(records), fmt)
    stream = RecordStream(data, "training", batch_size=16, seed=1, window=64)
    count = sum(data.count(path) for path in data.files["training"])
    batches = stream.batches()
    return [next(batches) for _ in range(-(-count // 16))]


def torch_reads(records, fmt, **args):
    return list(BertLoader(str(records), batch_size=8, fmt=fmt, **args))


# ---------------------------------------------------------------- 1. silent wrong values


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
@pytest.mark.parametrize("reader", ["inspect", "convert", "hf", "trainer"])
def test_an_id_beyond_int32_in_a_columnar_file_is_refused_not_wrapped(static, tmp_path, capsys, fmt, reader):
    bad = replace_ids(static, fmt)
    expected = f"{bad}: row 3: input_ids[1]: {BIG} does not fit int32"
    if reader == "inspect":
        assert expected in cli_error(capsys, ["inspect", str(bad), "--skip", "3", "-n", "1"], 1)
    elif reader == "convert":
        out = tmp_path / "out.tfrecord"
        assert expected in cli_error(capsys, ["convert", str(bad), str(out), "--to", "tfrecord", "--quiet"], 1)
        assert not out.exists()
    else:
        with pytest.raises(DataError, match=re.escape(expected)):
            hf_load(only_format(static, fmt), tmp_path) if reader == "hf" else trainer_reads(static, fmt)


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
def test_convert_of_a_tree_with_a_bad_later_file_leaves_nothing_behind(static, tmp_path, capsys, fmt):
    bad = replace_ids(static, fmt)
    out = tmp_path / "converted"
    assert f"{bad}: row 3" in cli_error(capsys, ["convert", str(static / fmt), str(out), "--to", "tfrecord"], 1)
    assert not out.exists()  # the first file's output was renamed into place before the second was read


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
def test_validate_calls_a_file_with_an_id_beyond_int32_not_sound(static, capsys, fmt):
    bad = replace_ids(static, fmt)
    assert main(["validate", str(static), "--quiet", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and f"{bad}: row 3: input_ids[1]: {BIG} does not fit int32" in out
    assert main(["validate", str(second_file(static, "tfrecord")), str(bad), "--quiet"]) == 1  # the 2nd path too


def test_validate_refuses_a_tfrecord_int64_beyond_int32_without_a_vocab(static, tmp_path, capsys):
    lone = shutil.copy(replace_ids(static, "tfrecord"), tmp_path / "lone.tfrecord")  # no manifest, no vocab
    assert main(["validate", str(lone), "--quiet"]) == 1
    assert f"{lone}: record 3: input_ids[1]: {BIG} does not fit int32" in capsys.readouterr().out


@pytest.mark.parametrize("value, message", [(BIG, "is not a token id of the vocab of 30522"),
                                            (VOCAB_SIZE, "is not a token id of the vocab of 30522"),
                                            (-1, "is not a token id of the vocab of 30522")])
@pytest.mark.parametrize("reader", ["hf", "trainer", "torch"])
def test_ids_outside_the_manifests_vocab_are_refused(static, tmp_path, value, message, reader):
    bad = replace_ids(static, "tfrecord", value=value)
    with pytest.raises(DataError, match=f"{bad}: row 3: input_ids\\[1\\]: {value} {message}"):
        {"hf": lambda: hf_load(only_format(static, "tfrecord"), tmp_path),
         "trainer": lambda: trainer_reads(static, "tfrecord"),
         "torch": lambda: torch_reads(static, "tfrecord")}[reader]()


def test_a_torch_workers_error_is_the_one_line_it_is_without_workers(static):
    """With num_workers > 0 torch raised a worker's DataError again made from "Caught DataError in DataLoader
    worker process 0.\nOriginal Traceback (most recent call last): ..." and the whole traceback; without workers
    the same records said one line."""
    bad = replace_ids(static, "tfrecord", value=VOCAB_SIZE)
    with pytest.raises(DataError) as raised:
        torch_reads(static, "tfrecord", num_workers=1)
    assert str(raised.value) == f"{bad}: row 3: input_ids[1]: {VOCAB_SIZE} is not a token id of the vocab of 30522 " \
                                "(0..30521)"


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("change, said", [("remove", "cannot read: No such file or directory"),
                                          ("empty", "empty, but it held records when the loader was made "
                                                    "(changed since?)")])
def test_a_record_file_gone_since_the_torch_loader_was_made_is_named(static, num_workers, change, said):
    """A file removed (or emptied) after the loader's index was made was an OSError (a ValueError) traceback, and
    from a DataLoader worker the worker's whole traceback as the message."""
    loader = BertLoader(str(static), batch_size=8, fmt="tfrecord", num_workers=num_workers)
    path = second_file(static, "tfrecord")
    path.unlink() if change == "remove" else path.write_bytes(b"")
    with pytest.raises(DataError) as raised:
        list(loader)
    assert str(raised.value) == f"{path}: {said}"


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_record_the_torch_loader_cannot_decode_is_named_by_its_file(static, num_workers):
    """A record that did not decode was "DIR: record 5 at byte 769: ...": the directory, the record's place in
    its batch and a byte within its payload, where the other readers name the file, its record and the byte."""
    path = second_file(static, "ofrecord")
    data = path.read_bytes()
    at = data.index(b"input_ids", data.index(b"input_ids", data.index(b"input_ids") + 1) + 1)  # record 2's
    path.write_bytes(data[:at] + b"input_idz" + data[at + 9:])
    relist(static, path)
    with pytest.raises(DataError) as read:
        list(formats.read_batches([path], 64))
    assert str(read.value).startswith(f"{path}: record 2 at byte ")
    with pytest.raises(DataError) as raised:
        torch_reads(static, "ofrecord", num_workers=num_workers)
    assert str(raised.value) == str(read.value)


@pytest.mark.parametrize("values, message", [
    ([[101.0, 101.5]], "row 0: input_ids\\[1\\]: 101.5 is not an integer"),
    ([[101.0, np.nan]], "row 0: input_ids\\[1\\]: nan is not an integer"),
    ([[101, 2 ** 31]], "row 0: input_ids\\[1\\]: 2147483648 does not fit int32"),
])
def test_the_value_check_refuses_non_integers_and_values_beyond_int32(values, message):
    with pytest.raises(DataError, match=f"^f.json: {message}"):
        check_int_values(PRETRAINING, {"input_ids": np.array(values)}, "f.json")
    check_int_values(PRETRAINING, {"input_ids": np.array([[101.0, 102.0]])}, "f.json")  # integral floats pass


@pytest.mark.parametrize("position", [500, -1])
def test_a_packed_hdf5_position_outside_the_row_is_refused(made, tmp_path, capsys, position):
    """HDF5 packed files leave out the weights, which are read from input_mask at the positions: a position
    past the row ended in a traceback, a negative one read from the row's end."""
    assert main(["pack", str(made["static"]), "--out", str(tmp_path), "--format", "tfrecord,hdf5", "--quiet",
                 "--workers", "1"]) == 0
    bad = min(tmp_path.glob("*_packed*/*/hdf5/training/*.hdf5"))
    with h5py.File(bad, "r+") as f:
        positions = f["masked_lm_positions"][()]
        positions[0, 0] = position
        f["masked_lm_positions"][...] = positions
    expected = f"{bad}: row 0: masked_lm_positions[0]: {position} is not a position of the row (0..63)"
    assert expected in cli_error(capsys, ["inspect", str(bad)], 1)
    assert main(["validate", str(bad), "--quiet"]) == 1 and expected in capsys.readouterr().out


# ---------------------------------------------------------------- 2. silent skips


@pytest.mark.parametrize("fmt, reader", [("parquet", "trainer"), ("hdf5", "trainer"), ("parquet", "hf"),
                                         ("tfrecord", "torch"), ("ofrecord", "torch")])
def test_a_file_the_manifest_lists_but_that_is_gone_is_an_error(static, tmp_path, fmt, reader):
    gone = second_file(static, fmt)
    gone.unlink()
    with pytest.raises(DataError, match=f"{static / 'manifest.json'}: .*{gone} is missing"):
        {"hf": lambda: hf_load(static, tmp_path), "trainer": lambda: trainer_reads(static, fmt),
         "torch": lambda: torch_reads(static, fmt)}[reader]()


@pytest.mark.parametrize("change, message", [
    (with_null, "column next_sentence_labels holds nulls"),
    (with_null_id, "column input_ids holds nulls"),
    (lambda table: table.drop_columns(["segment_ids"]), "match no record kind"),
])
def test_hf_load_checks_every_parquet_file_not_only_the_first(static, tmp_path, change, message):
    bad = rewrite_parquet(static, change)
    with pytest.raises(DataError, match=f"{bad}: .*{message}"):
        hf_load(static, tmp_path)


# ---------------------------------------------------------------- 3. manifests


BAD_FIELDS = {
    "max_predictions_per_seq 0": (lambda m: m["params"].update(max_predictions_per_seq=0),
                                  "params.max_predictions_per_seq: 0, expected an integer ≥ 1"),
    "masked_lm_prob 1.5": (lambda m: m["params"].update(masked_lm_prob=1.5),
                           "params.masked_lm_prob: 1.5, expected a number in \\(0, 1\\]"),
    "first_instance -5": (lambda m: m["files"][next(iter(m["files"]))].update(first_instance=-5),
                          "first_instance: -5, expected an integer in 0..2\\^63-1"),
    "first_instance 2^70": (lambda m: m["files"][next(iter(m["files"]))].update(first_instance=2 ** 70),
                            f"first_instance: {2 ** 70}, expected an integer in 0..2\\^63-1"),
    "seed not a number": (lambda m: m["params"].update(seed="s"), "params.seed: 's', expected an integer"),
    "vocab size not a number": (lambda m: m["vocab"].update(size="big"),
                                "vocab.size: 'big', expected an integer ≥ 1"),
    "dims not an object": (lambda m: m.update(dims="abc"), "dims: 'abc', expected an object of dimensions"),
    "dims seq 0": (lambda m: m["dims"].update(seq=0), "dims.seq: 0, expected a positive integer"),
    "unknown kind": (lambda m: m.update(kind="bogus"), "kind: unknown record kind 'bogus'"),
    "formats without one of its files'": (lambda m: m.update(formats=["tfrecord"]),
                                          "formats: \\['tfrecord'\\], but files lists .*parquet files too"),
}


@pytest.mark.parametrize("reader", ["trainer", "torch", "hf", "inspect --epoch"])
@pytest.mark.parametrize("field", sorted(BAD_FIELDS))
def test_every_reader_of_a_manifest_refuses_a_bad_field_naming_it(dynamic, tmp_path, capsys, reader, field):
    change, message = BAD_FIELDS[field]
    edit_manifest(dynamic, change)
    expected = f"{dynamic / 'manifest.json'}: .*{message}"
    if reader == "inspect --epoch":
        first = min((dynamic / "tfrecord" / "training").iterdir())
        line = cli_error(capsys, ["inspect", str(first), "--epoch", "1"], 1)
        assert re.search(expected, line), line
        return
    with pytest.raises(DataError, match=expected):
        {"hf": lambda: hf_load(dynamic, tmp_path), "trainer": lambda: trainer_reads(dynamic, "tfrecord"),
         "torch": lambda: torch_reads(dynamic, "tfrecord")}[reader]()


@pytest.mark.parametrize("field", ["max_predictions_per_seq 0", "dims seq 0", "dims not an object",
                                   "formats without one of its files'"])
def test_validate_and_pack_name_the_bad_manifest_field(static, capsys, field):
    """validate checks the records of a manifest it cannot use by the defaults (here Google's [CLS] 101, not
    the golden vocab's): the manifest's finding comes first, where their failures had pushed it off the
    listing's first 20, so that 'FAILED manifest' named no reason."""
    change, message = BAD_FIELDS[field]
    edit_manifest(static, change)
    assert main(["validate", str(static), "--quiet", "--workers", "1", "--json", "-"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"].get("manifest") and not report["sound"]
    first = report["findings"][0]
    assert first["check"] == "manifest" and re.search(message, f"{first['field']}: {first['message']}"), first
    assert re.search(message, cli_error(capsys, ["pack", str(static), "--quiet"], 1))
    assert not list(static.parent.glob("*_packed*"))


@pytest.mark.parametrize("reader", ["trainer", "torch"])
def test_a_relabelled_manifest_is_reported_naming_the_manifest(dynamic, reader):
    edit_manifest(dynamic, lambda m: m.update(kind="pretraining", dims={"seq": 64, "pred": 10}))
    with pytest.raises(DataError, match=f"{dynamic / 'manifest.json'}: kind: pretraining, but .* record 0 holds "
                                        "unmasked records"):
        trainer_reads(dynamic, "tfrecord") if reader == "trainer" else torch_reads(dynamic, "tfrecord")


@pytest.mark.parametrize("reader", ["torch", "hf"])
def test_a_manifest_of_other_dims_than_its_records_is_refused_by_both_loaders(static, tmp_path, reader):
    """A manifest whose dims say seq 128 over records of 64 (a relabelled manifest): bertprep.torch refused it,
    bertprep.hf.load loaded the records without a word, the manifest's dimensions unread. Both now say it in the
    same words, naming the manifest, the file and both dimensions."""
    edit_manifest(static, lambda m: m.update(dims={"seq": 128, "pred": 10}))
    expected = (f"^{re.escape(str(static / 'manifest.json'))}: dims: {{'seq': 128, 'pred': 10}}, but "
                f"{re.escape(str(static))}/(tfrecord|parquet)/training/.* record 0 is a pretraining record of "
                "{'seq': 64, 'pred': 10}$")
    with pytest.raises(DataError, match=expected):
        hf_load(static, tmp_path) if reader == "hf" else torch_reads(static, "tfrecord")


@pytest.mark.parametrize("reader", ["torch", "inspect --epoch", "trainer"])
def test_unmasked_records_are_masked_with_their_own_vocab_only(dynamic, golden_dir, tmp_path, capsys, reader):
    """A vocab of the same size with two tokens moved (here [MASK] with [unused3]) masked the records without a
    word: its [MASK] id, 4, went into records whose [MASK] is 103. Given (vocab=, --vocab) or at the manifest's
    path, edited since, the vocab must be the one whose sha256 the manifest records."""
    lines = (golden_dir / "vocab.txt").read_text().splitlines(keepends=True)
    lines[4], lines[103] = lines[103], lines[4]
    other = tmp_path / "other_vocab.txt"
    other.write_text("".join(lines))
    first = min((dynamic / "tfrecord" / "training").iterdir())
    if reader == "trainer":  # the manifest's own vocab, changed at its path since
        edit_manifest(dynamic, lambda m: m["vocab"].update(path=str(other)))
        expected = f"{dynamic / 'manifest.json'}: made with the vocab {other} .*, but {other} has changed since"
        with pytest.raises(DataError, match=expected):
            trainer_reads(dynamic, "tfrecord")
        return
    expected = (f"{dynamic / 'manifest.json'}: made with the vocab .*, but {other} is another vocab .*: give the "
                "vocab.txt they were made with")
    if reader == "inspect --epoch":
        assert re.search(expected, cli_error(capsys, ["inspect", str(first), "--epoch", "1", "--vocab", str(other)], 1))
        return
    with pytest.raises(DataError, match=expected):
        torch_reads(dynamic, "tfrecord", vocab=str(other))


def test_a_world_size_that_leaves_a_rank_no_batch_is_an_error(static):
    with pytest.raises(UsageError, match="leave rank 3 of world_size 100000 no batch"):
        torch_reads(static, "tfrecord", rank=3, world_size=100000)


@pytest.mark.parametrize("args, message", [
    ({"batch_size": "8"}, "batch_size must be an int, got str '8'"),
    ({"batch_size": 2.5}, "batch_size must be an int, got float 2.5"),
    ({"batch_size": 0}, "batch_size must be at least 1, not 0"),
    ({"rank": True, "world_size": 2}, "rank must be an int, got bool True"),
    ({"rank": 2, "world_size": 2}, r"rank 2 is not in \[0, world_size 2\)"),
    ({"seed": -1}, "seed must be at least 0, not -1"),
    ({"bin_size": "16"}, "bin_size must be an int, got str '16'"),
    ({"num_workers": 1.0}, "num_workers must be an int, got float 1.0"),
    ({"drop_last": "no"}, "drop_last must be True or False, got str 'no'"),
    ({"split": 0}, "split must be a str, got int 0"),
])
def test_the_torch_loader_names_an_argument_of_the_wrong_type(static, args, message):
    """One UsageError naming the argument, before any record is read (a str batch size stopped inside NumPy)."""
    args = {"batch_size": 8, **args}
    with pytest.raises(UsageError, match=f"^{message}$"):
        BertLoader(str(static), fmt="tfrecord", **args)


@pytest.mark.parametrize("args, message", [
    ((5, 8), "data_dir must be a str (or a path), got int 5"),
    ((None, 8), "data_dir must be a str (or a path), got NoneType None"),
    ((b"R", 8), "data_dir must be a str (or a path), got bytes b'R'"),
    (("R", 8, 0, {"vocab": 5}), "vocab must be a str (or a path) or None, got int 5"),
    (("", 8), "data_dir: an empty path names no file or directory"),  # was the current directory's "no manifest"
])
def test_the_torch_loader_names_a_data_dir_or_vocab_that_is_no_path(args, message):
    """5 or None was os.fspath's TypeError, b"R" one from str.startswith, neither naming the argument."""
    *positional, keywords = args if isinstance(args[-1], dict) else (*args, {})
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        BertLoader(*positional, **keywords)


def test_the_torch_loader_names_itself_for_an_unknown_keyword():
    """It passes its keywords on to BertRecords, whose name Python's message gave."""
    with pytest.raises(TypeError, match=r"^BertLoader\(\) got an unexpected keyword argument 'shuffle'$"):
        BertLoader("R", 8, shuffle=True)


def test_the_torch_loader_names_fine_tuning_records_as_such(shared_dir, golden_dir, tmp_path):
    """create-glue's (or create-squad's) directory given to the pretraining loader said "no tfrecord training
    records", as if the stage had written nothing."""
    out = tmp_path / "mrpc"
    assert main(["create-glue", "--task", "MRPC", "--data-dir", str(shared_dir / "fixtures/finetune/glue/MRPC"),
                 "--vocab", str(golden_dir / "vocab.txt"), "--out", str(out), "--seq", "64", "--quiet"]) == 0
    message = (f"{out}: fine-tuning records (create-glue, task MRPC), not pretraining records: bertprep.torch reads "
               "the records `bertprep create` or `pack` writes; load these with bertprep.hf.load")
    for split in ("training", "train"):
        with pytest.raises(DataError, match=f"^{re.escape(message)}"):
            BertLoader(str(out), 8, split=split)


@pytest.mark.parametrize("split", ["", "train", "../tfrecord/training", "training/"])
def test_the_torch_loader_takes_only_the_splits_create_writes(static, split):
    """split was joined into a path: "" said "no tfrecord  records", "../tfrecord/training" was read from there."""
    with pytest.raises(UsageError, match=f"^split must be one of training, test \\(the split directories create "
                                         f"writes\\), not {re.escape(repr(split))}$"):
        BertLoader(str(static), 8, split=split)


def test_the_torch_loader_refuses_a_vocab_it_would_not_read(static, golden_dir):
    """vocab is read only to mask unmasked records: given for masked ones it was taken and ignored."""
    with pytest.raises(UsageError, match=f"^vocab: {re.escape(str(static))} holds pretraining records, masked when "
                                         "they were made; vocab is read only to mask unmasked records"):
        BertLoader(str(static), 8, fmt="tfrecord", vocab=str(golden_dir / "vocab.txt"))


def test_the_torch_loader_names_a_manifests_formats_that_is_no_list(static):
    """The format read was the first of the manifest's `formats`: a str's first letter, "format 't': the PyTorch
    loader reads tfrecord or ofrecord", a UsageError as if the caller had given fmt='t'."""
    manifest = json.loads((static / "manifest.json").read_text())
    (static / "manifest.json").write_text(json.dumps({**manifest, "formats": "tfrecord"}))
    with pytest.raises(DataError) as raised:
        BertLoader(str(static), 8)
    assert str(raised.value) == (f"{static / 'manifest.json'}: formats: 'tfrecord', expected a list of tfrecord, "
                                 "ofrecord, hdf5, parquet")


def test_the_torch_loader_names_a_directory_of_only_formats_it_does_not_read(golden_dir, tmp_path):
    """`create --format parquet` records said "format 'parquet': the PyTorch loader reads tfrecord or ofrecord", a
    UsageError as if the caller had given fmt='parquet', naming no directory."""
    (tmp_path / "corpus.txt").write_text("".join((golden_dir / "corpus.txt").read_text().splitlines(True)[:300]))
    assert main(["create", "--input", str(tmp_path / "corpus.txt"), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "out"), "--seq", "64", "--pred", "10", "--dupe-factor", "1", "--format", "parquet",
                 "--quiet"]) == 0
    records = only_records_dir(tmp_path / "out")
    with pytest.raises(DataError) as raised:
        BertLoader(str(records), 8)
    assert str(raised.value) == (f"{records}: parquet records only (its manifest's formats): the PyTorch loader reads "
                                 "tfrecord or ofrecord; read these with bertprep.hf.load, or make TFRecord ones "
                                 "(bertprep create --format tfrecord)")
    with pytest.raises(UsageError, match="^format 'parquet': the PyTorch loader reads tfrecord or ofrecord$"):
        BertLoader(str(records), 8, fmt="parquet")  # given: as before


def test_the_torch_loader_takes_numpy_ints(static):
    import numpy as np
    batches = list(BertLoader(str(static), np.int64(8), fmt="tfrecord", seed=np.int32(1)))
    assert batches and all(len(b["input_ids"]) == 8 for b in batches)


# ---------------------------------------------------------------- 4. exit 0 on bad input


@pytest.mark.parametrize("epoch", ["-1", str(2 ** 64), str(2 ** 64 + 3)])
def test_inspect_refuses_an_epoch_that_is_no_epoch(dynamic, capsys, epoch):
    first = min((dynamic / "tfrecord" / "training").iterdir())
    assert "--epoch" in cli_error(capsys, ["inspect", str(first), "--epoch", epoch], 2)


def test_inspect_epoch_of_records_with_no_manifest_above_names_the_file(dynamic, tmp_path, capsys):
    """--epoch seeks the records directory's manifest as validate and bertprep.hf do (find_manifest, one search
    where inspect had its own); a record file with none above it is still this one line, exit 1."""
    alone = tmp_path / "alone" / "a" / "b" / "c"
    alone.mkdir(parents=True)
    copy = shutil.copy(min((dynamic / "tfrecord" / "training").iterdir()), alone)
    assert cli_error(capsys, ["inspect", str(copy), "--epoch", "1"], 1).endswith(
        f"{copy}: no manifest.json in the directories above it: --epoch needs the records directory's manifest "
        "(its masking settings)")


# ---------------------------------------------------------------- 5. tracebacks: a Parquet file of zero rows


def test_a_parquet_file_of_zero_rows_listed_with_count_0_is_valid_and_yields_nothing(static, tmp_path, capsys):
    empty = rewrite_parquet(static, lambda table: table.slice(0, 0), instances=0)
    first = min((static / "parquet" / "training").iterdir())
    rows = pq.read_metadata(first).num_rows
    parquet_only = only_format(shutil.copytree(static, tmp_path / "parquet_only"), "parquet")
    assert main(["validate", str(parquet_only), "--quiet", "--workers", "1"]) == 0
    assert main(["inspect", str(empty)]) == 0
    assert "no records" in capsys.readouterr().out
    assert len(hf_load(static, tmp_path)["train"]) == rows
    assert trainer_reads(static, "parquet")
    data = Records(str(static), "parquet")
    assert [data.count(path) for path in data.files["training"]] == [rows, 0]
    out = tmp_path / "empty.tfrecord"
    assert "no records to convert" in cli_error(capsys, ["convert", str(empty), str(out), "--to", "tfrecord"], 1)
    assert not out.exists()
