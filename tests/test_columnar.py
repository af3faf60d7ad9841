"""HDF5 and Parquet records: the TFRecord's exact values on every golden, NVIDIA's layout, `datasets`, bad input."""

import io
import json
import shutil
import sys

import h5py
import numpy as np
import pytest

from bertprep import formats, hf
from bertprep.cli import main
from bertprep.errors import DataError
from bertprep.formats import columnar
from tests.test_create import GOLDEN, golden_argv, only_records_dir

ALL = "tfrecord,ofrecord,hdf5,parquet"


@pytest.fixture(scope="session", params=sorted(GOLDEN))
def golden_records(request, golden_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"columnar_{request.param}")
    assert main(golden_argv(golden_dir, out, request.param, "--format", ALL, "--workers", "1")) == 0
    return only_records_dir(out)


def whole(path):
    return next(formats.read_batches([path], 1 << 20))


@pytest.mark.parametrize("fmt", ["hdf5", "parquet", "ofrecord"])
def test_every_format_holds_the_tfrecord_values(golden_records, fmt):
    reference = whole(golden_records / "tfrecord/training/corpus.tfrecord")
    path = next((golden_records / fmt / "training").iterdir())
    assert formats.sniff_format(path) == fmt and formats.record_kind(path).name == "pretraining"
    got = whole(path)
    assert list(got) == list(reference)
    for name, values in reference.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)
    records = list(formats.read_records(path))
    assert len(records) == len(reference["input_ids"])
    np.testing.assert_array_equal(records[-1]["masked_lm_weights"], reference["masked_lm_weights"][-1])


def test_hdf5_is_the_layout_nvidias_pretraining_dataset_reads(golden_records):
    """Six datasets by name, NVIDIA's dtypes and shapes; the predictions' padding starts at the first position 0."""
    reference = whole(golden_records / "tfrecord/training/corpus.tfrecord")
    with h5py.File(golden_records / "hdf5/training/corpus.hdf5", "r") as f:
        assert sorted(f.keys()) == sorted(["input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                                           "masked_lm_ids", "next_sentence_labels"])
        dtypes = {name: f[name].dtype.str for name in f.keys()}
        assert dtypes == {"input_ids": "<i4", "input_mask": "|i1", "segment_ids": "|i1", "masked_lm_positions": "<i4",
                          "masked_lm_ids": "<i4", "next_sentence_labels": "|i1"}
        count = len(reference["input_ids"])
        assert f["next_sentence_labels"].shape == (count,)
        assert f["input_ids"].shape == reference["input_ids"].shape
        positions = f["masked_lm_positions"][()]
    padding = np.argmax(np.concatenate([positions, np.zeros((count, 1), np.int32)], axis=1) == 0, axis=1)
    np.testing.assert_array_equal(padding, reference["masked_lm_weights"].sum(axis=1).astype(int))


def test_nvidias_reader_logic_recovers_the_tfrecord_labels(golden_records):
    """What NVIDIA's PyTorch `pretraining_dataset.__getitem__` does with a record, in torch: int64 tensors of the
    six datasets, labels -1 everywhere but at masked_lm_positions up to the first position 0."""
    import torch

    reference = whole(golden_records / "tfrecord/training/corpus.tfrecord")
    with h5py.File(golden_records / "hdf5/training/corpus.hdf5", "r") as f:
        names = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "next_sentence_labels"]
        inputs = [np.asarray(f[name][:]) for name in names]
    pred = inputs[3].shape[1]
    for i in range(0, len(inputs[0]), 7):
        ids, mask, segments, positions, labels, nsp = (torch.from_numpy(np.asarray(x[i]).astype(np.int64))
                                                       for x in inputs)
        zeros = (positions == 0).nonzero()
        count = zeros[0].item() if len(zeros) else pred
        mlm_labels = torch.full(ids.shape, -1, dtype=torch.long)
        mlm_labels[positions[:count]] = labels[:count]
        expected = np.full(ids.shape, -1)
        real = reference["masked_lm_weights"][i] > 0
        expected[reference["masked_lm_positions"][i][real]] = reference["masked_lm_ids"][i][real]
        np.testing.assert_array_equal(mlm_labels.numpy(), expected)
        for got, name in ((ids, "input_ids"), (mask, "input_mask"), (segments, "segment_ids")):
            np.testing.assert_array_equal(got.numpy(), reference[name][i])
        assert nsp.item() == reference["next_sentence_labels"][i, 0]


def test_parquet_reads_with_pyarrow_alone_and_with_datasets(golden_records, tmp_path):
    import datasets
    import pyarrow.parquet as pq

    reference = whole(golden_records / "tfrecord/training/corpus.tfrecord")
    path = golden_records / "parquet/training/corpus.parquet"
    table = pq.read_table(path)
    assert table.column_names == list(reference)
    np.testing.assert_array_equal(np.array(table.column("input_ids").to_pylist()), reference["input_ids"])
    loaded = datasets.load_dataset("parquet", data_files=[str(path)], split="train", cache_dir=str(tmp_path))
    np.testing.assert_array_equal(loaded.with_format("numpy")[:]["masked_lm_weights"], reference["masked_lm_weights"])


@pytest.mark.parametrize("fmt", ["parquet", "hdf5", "tfrecord"])
def test_hf_load_gives_the_same_rows_from_any_format(golden_records, fmt, tmp_path):
    reference = whole(golden_records / "tfrecord/training/corpus.tfrecord")
    only = tmp_path / "only"
    shutil.copytree(golden_records / fmt, only / fmt)
    (only / "manifest.json").write_text((golden_records / "manifest.json").read_text())
    splits = hf.load(str(only), cache_dir=str(tmp_path / "cache"))
    assert list(splits) == ["train"]
    assert "pretraining" in splits["train"].info.description and "dupe_factor" in splits["train"].info.description
    rows = splits["train"].with_format("numpy")[:]
    for name, values in reference.items():
        np.testing.assert_array_equal(rows[name].reshape(values.shape), values, err_msg=name)


def test_same_bytes_for_any_worker_count(golden_dir, tmp_path):
    from tests.test_create import write_shards

    shards = write_shards(golden_dir / "corpus.txt", tmp_path / "golden", 3)
    runs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        argv = ["create", "--input", str(shards), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(out),
                "--format", "hdf5,parquet", "--workers", str(workers), "--quiet", "--dupe-factor", "1"]
        assert main(argv) == 0
        runs.append({str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.*"))
                     if p.suffix in (".hdf5", ".parquet")})
    assert len(runs[0]) == 6 and runs[0] == runs[1]


def test_hdf5_bytes_do_not_depend_on_how_long_a_profiler_holds_frames(golden_dir):
    """Dask's worker profiler samples the task thread's frames and holds them a moment. A held frame of h5py's that
    still referred to a just-written dataset kept it open, and its chunks then took file space after the next
    datasets' (other bytes in some Dask runs, issue 33). Here a profile hook holds every returning frame."""
    from bertprep.formats.schemas import PRETRAINING

    columns = whole(golden_dir / "G1.tfrecord")
    expected = columnar.encode(columns, "hdf5", PRETRAINING)
    held, previous = [], sys.getprofile()
    sys.setprofile(lambda frame, event, _arg: held.append(frame) if event == "return" else None)
    try:
        got = columnar.encode(columns, "hdf5", PRETRAINING)
    finally:
        sys.setprofile(previous)
    assert held and got == expected


def test_validate_and_inspect_know_columnar_files(golden_records, capsys):
    assert main(["validate", str(golden_records), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sound"] and report["errors_total"] == 0, report["findings"]
    assert sorted(report["datasets"][0]["stats"]) == ["hdf5", "ofrecord", "parquet", "tfrecord"]
    assert main(["inspect", str(golden_records / "hdf5/training/corpus.hdf5"), "-n", "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    reference = next(formats.read_records(golden_records / "tfrecord/training/corpus.tfrecord"))
    assert shown["masked_lm_weights"] == reference["masked_lm_weights"].tolist()


def _one_line(capsys, argv):
    assert main(argv) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_columnar_files_give_one_line_errors(golden_records, tmp_path, capsys):
    good = (golden_records / "hdf5/training/corpus.hdf5").read_bytes()
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(good[:len(good) // 2])
    assert "truncated.hdf5: not a readable HDF5 file" in _one_line(capsys, ["inspect", str(truncated)])
    with h5py.File(golden_records / "hdf5/training/corpus.hdf5", "r") as f:  # one bit in input_ids' first chunk
        chunk = f["input_ids"].id.get_chunk_info(0)
    flipped = bytearray(good)
    flipped[chunk.byte_offset + chunk.size // 2] ^= 1
    (tmp_path / "flipped.hdf5").write_bytes(bytes(flipped))
    assert "flipped.hdf5: dataset input_ids cannot be read" in _one_line(
        capsys, ["inspect", str(tmp_path / "flipped.hdf5")])
    foreign = tmp_path / "foreign.hdf5"
    with h5py.File(foreign, "w") as f:
        f.create_dataset("images", data=np.zeros((2, 3)))
    assert "foreign.hdf5: HDF5 datasets images match no record kind" in _one_line(capsys, ["inspect", str(foreign)])
    wrong_dtype = tmp_path / "wrong.hdf5"
    with h5py.File(golden_records / "hdf5/training/corpus.hdf5", "r") as src, h5py.File(wrong_dtype, "w") as f:
        for name in src:
            data = src[name][()]
            f.create_dataset(name, data=data.astype(np.float32) if name == "input_ids" else data)
    assert "dataset input_ids holds float32, expected integers" in _one_line(capsys, ["inspect", str(wrong_dtype)])
    import pyarrow.parquet as pq

    column = pq.ParquetFile(golden_records / "parquet/training/corpus.parquet").metadata.row_group(0).column(0)
    flipped = bytearray((golden_records / "parquet/training/corpus.parquet").read_bytes())
    flipped[column.data_page_offset + column.total_compressed_size // 2] ^= 1
    (tmp_path / "flipped.parquet").write_bytes(bytes(flipped))
    assert "CRC checksum verification failed" in _one_line(capsys, ["inspect", str(tmp_path / "flipped.parquet")])
    assert main(["validate", str(tmp_path / "flipped.parquet"), "--json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["check"] == "framing" and "CRC checksum verification failed" in finding["message"]
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_bytes(b"PAR1 but nothing more")
    assert "x.parquet: not a readable Parquet file" in _one_line(capsys, ["inspect", str(not_parquet)])


@pytest.mark.parametrize("member, message", [
    (lambda n: h5py.SoftLink("/nowhere"),
     "input_ids is a link (SoftLink) to another place, expected a dataset stored in this file"),
    (lambda n: h5py.ExternalLink("gone.hdf5", "/input_ids"),
     "input_ids is a link (ExternalLink) to another place, expected a dataset stored in this file"),
    ("virtual", "dataset input_ids keeps its values in other files (a virtual or external dataset), expected them "
                "in this file"),
])
def test_hdf5_values_must_be_stored_in_the_file_itself(golden_records, tmp_path, capsys, member, message):
    """A dangling soft or external link was a KeyError traceback; a virtual dataset whose source file is gone
    was read as its fill value, zeros, without a word."""
    path = tmp_path / "linked.hdf5"
    with h5py.File(golden_records / "hdf5/training/corpus.hdf5", "r") as src, h5py.File(path, "w") as f:
        for name in src:
            if name != "input_ids":
                f[name] = src[name][()]
        shape = src["input_ids"].shape
        if member == "virtual":
            layout = h5py.VirtualLayout(shape=shape, dtype="i4")
            layout[:] = h5py.VirtualSource(str(tmp_path / "gone.hdf5"), "input_ids", shape=shape)
            f.create_virtual_dataset("input_ids", layout, fillvalue=0)
        else:
            f["input_ids"] = member(shape)
    for argv in (["inspect", str(path)], ["convert", str(path), str(tmp_path / "o.parquet"), "--to", "parquet"]):
        assert _one_line(capsys, argv).endswith(f"{path}: {message}")
    assert not (tmp_path / "o.parquet").exists()


def test_hdf5_refuses_weights_it_could_not_derive_back():
    from bertprep.errors import DataError
    from bertprep.formats.schemas import PRETRAINING

    columns = {f.name: np.zeros((1, 4 if f.length == "seq" else 2 if f.length == "pred" else 1))
               for f in PRETRAINING.features}
    columns["masked_lm_weights"][0, 0] = 1.0  # a weight on position 0, which NVIDIA's layout reads as padding
    with pytest.raises(DataError, match="masked_lm_weights"):
        columnar.encode(columns, "hdf5", PRETRAINING)
    assert io.BytesIO(columnar.encode({**columns, "masked_lm_weights": np.zeros((1, 2))}, "parquet", PRETRAINING))


@pytest.mark.parametrize("kind_name, feature, value, message", [
    ("packed", "masked_lm_positions", 500, "row 1: masked_lm_positions[0]: 500 is not a position of the row (0..3)"),
    ("pretraining", "masked_lm_weights", 0.5, "row 1: masked_lm_weights does not follow from the other features"),
    ("pretraining", "segment_ids", 300, "row 1: segment_ids[0]: 300 does not fit int8, the HDF5 layout's dtype"),
])
def test_convert_to_hdf5_names_the_file_and_row_it_cannot_hold(tmp_path, capsys, kind_name, feature, value, message):
    """A packed position outside its row was an IndexError traceback from deriving the weights; a weight that
    would not derive back, or a value wider than the layout's dtype, named neither the file nor the row."""
    from bertprep.formats.schemas import KINDS

    kind = KINDS[kind_name]
    width = {"seq": 4, "pred": 2, "1": 1}
    columns = {f.name: np.zeros((2, width.get(f.length, 3)), np.float32 if f.dtype == "float" else np.int32)
               for f in kind.features}
    columns[feature][1, 0] = value
    source = tmp_path / "hand.parquet"
    columnar.write_columns(source, columns, "parquet", kind)
    line = _one_line(capsys, ["convert", str(source), str(tmp_path / "out.hdf5"), "--to", "hdf5"])
    assert line.startswith(f"bertprep convert: error: {source}: {message}"), line
    assert not (tmp_path / "out.hdf5").exists()


def test_pack_writes_mlperfs_packed_hdf5_and_parquet_with_the_tfrecord_values(golden_records, tmp_path):
    assert main(["pack", str(golden_records), "--out", str(tmp_path), "--format", "tfrecord,hdf5,parquet",
                 "--quiet", "--workers", "1"]) == 0
    packed = only_records_dir(tmp_path)
    reference = whole(packed / "tfrecord/training/corpus.tfrecord")
    with h5py.File(packed / "hdf5/training/corpus.hdf5", "r") as f:  # MLPerf's names; masked_lm_weights derived
        assert sorted(f.keys()) == sorted(["input_ids", "input_mask", "segment_ids", "positions", "masked_lm_positions",
                                           "masked_lm_ids", "next_sentence_positions", "next_sentence_labels",
                                           "next_sentence_weights"])
    for fmt in ("hdf5", "parquet"):
        got = whole(next((packed / fmt / "training").iterdir()))
        for name, values in reference.items():
            np.testing.assert_array_equal(got[name], values, err_msg=f"{fmt} {name}")


def test_convert_to_and_from_columnar_gives_create_s_own_bytes(golden_records, tmp_path):
    """TFRecord -> HDF5 -> Parquet -> OFRecord -> TFRecord, each step byte-identical to what create wrote."""
    steps = [("tfrecord/training/corpus.tfrecord", "hdf5", "hdf5/training/corpus.hdf5"),
             ("hdf5/training/corpus.hdf5", "parquet", "parquet/training/corpus.parquet"),
             ("parquet/training/corpus.parquet", "ofrecord", "ofrecord/training/part-0"),
             ("ofrecord/training/part-0", "tfrecord", "tfrecord/training/corpus.tfrecord")]
    source = golden_records / steps[0][0]
    for index, (_src, fmt, expected) in enumerate(steps):
        out = tmp_path / f"step{index}"
        assert main(["convert", str(source), str(out), "--to", fmt, "--quiet"]) == 0
        assert out.read_bytes() == (golden_records / expected).read_bytes(), expected
        source = out


def test_hf_load_names_the_splits_train_and_test(golden_dir, tmp_path):
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(tmp_path / "s"), "--corpus", "g",
                 "--train-shards", "2", "--test-shards", "1", "--test-fraction", "0.2", "--quiet"]) == 0
    assert main(["create", "--input", str(tmp_path / "s"), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "r"), "--format", "hdf5", "--dupe-factor", "1", "--quiet"]) == 0
    records = only_records_dir(tmp_path / "r")
    splits = hf.load(str(records), cache_dir=str(tmp_path / "cache"))
    assert sorted(splits) == ["test", "train"]
    for split, directory in (("train", "training"), ("test", "test")):
        count = sum(len(b["input_ids"])
                    for b in formats.read_batches(sorted((records / "hdf5" / directory).iterdir()), 64))
        assert splits[split].num_rows == count > 0
    # README's example: int32 columns in the Arrow cache, handed out by `datasets`' torch format as int64
    # (README said "(32, 128) int32")
    torch = pytest.importorskip("torch")
    assert splits["train"].features["input_ids"].feature.dtype == "int32"
    batch = splits["train"].with_format("torch")[:4]["input_ids"]
    assert (tuple(batch.shape), batch.dtype) == ((4, 128), torch.int64)


def test_hf_load_names_a_file_of_other_dimensions_in_a_split(golden_dir, tmp_path):
    """A tree of two records sets of other --seq and --pred (create's --out after two runs) stopped inside
    `datasets`: "DatasetGenerationError: An error occurred while generating the dataset", naming no file."""
    for name, golden in (("a", "G2"), ("b", "G1")):  # 512/80, then 128/20
        (tmp_path / "tree" / name / "training").mkdir(parents=True)
        shutil.copy(golden_dir / f"{golden}.tfrecord", tmp_path / "tree" / name / "training" / "x.tfrecord")
    with pytest.raises(DataError) as raised:
        hf.load(str(tmp_path / "tree"), cache_dir=str(tmp_path / "cache"))
    tree = tmp_path / "tree"
    assert str(raised.value) == (
        f"{tree}/b/training/x.tfrecord: pretraining records of {{'seq': 128, 'pred': 20}}, expected pretraining of "
        f"{{'seq': 512, 'pred': 80}} as in {tree}/a/training/x.tfrecord: records of other dimensions (another "
        "create's --seq or --pred) are no split of one dataset; load each records directory on its own")


@pytest.mark.parametrize("fmt", ["tfrecord", "hdf5"])
def test_hf_load_gives_a_split_of_no_records_as_an_empty_split(golden_dir, tmp_path, fmt):
    """A split whose files hold no record (an empty test shard) ended on `datasets`' ValueError traceback,
    'Instruction "test" corresponds to no data!'; Parquet's gave an empty split already."""
    tree = tmp_path / "tree"
    (tree / "training").mkdir(parents=True)
    (tree / "test").mkdir()
    assert main(["convert", str(golden_dir / "G1.tfrecord"), str(tree / "training" / f"x.{fmt}"), "--to", fmt,
                 "--quiet"]) == 0
    if fmt == "tfrecord":
        (tree / "test" / "y.tfrecord").write_bytes(b"")
    else:  # the training file's datasets and attributes, of no rows
        with h5py.File(tree / "training" / "x.hdf5") as full, h5py.File(tree / "test" / "y.hdf5", "w") as empty:
            for name, values in full.items():
                empty.create_dataset(name, shape=(0, *values.shape[1:]), dtype=values.dtype)
            empty.attrs.update(full.attrs)
    splits = hf.load(str(tree), cache_dir=str(tmp_path / "cache"))
    assert splits["test"].num_rows == 0 and splits["train"].num_rows == len(whole(golden_dir / "G1.tfrecord")
                                                                           ["input_ids"])
    assert splits["test"].features == splits["train"].features


def assert_split_holds(split, *paths):
    """A `datasets` split holds exactly the records of the files at `paths`, its columns those of their kind."""
    reference = next(formats.read_batches(sorted(paths), 1 << 20))
    assert split.column_names == list(reference)
    rows = split.with_format("numpy")[:]
    for name, values in reference.items():
        np.testing.assert_array_equal(rows[name].reshape(values.shape), values, err_msg=name)


def test_hf_load_keeps_the_glue_dev_and_test_splits_apart(shared_dir, golden_dir, tmp_path):
    """create-glue's eval.tf_record (the labelled dev set) is "validation", predict.tf_record (labels all
    placeholders) "test": merged, the placeholders read as labels."""
    out = tmp_path / "mrpc"
    assert main(["create-glue", "--task", "MRPC", "--data-dir", str(shared_dir / "fixtures/finetune/glue/MRPC"),
                 "--vocab", str(golden_dir / "vocab.txt"), "--out", str(out), "--seq", "64", "--quiet"]) == 0
    splits = hf.load(str(out), cache_dir=str(tmp_path / "cache"))
    assert list(splits) == ["train", "validation", "test"]
    for split, name in (("train", "train.tf_record"), ("validation", "eval.tf_record"), ("test", "predict.tf_record")):
        assert_split_holds(splits[split], out / name)
        assert "glue records" in splits[split].info.description
    assert set(splits["validation"]["label_ids"]) == {0, 1} and set(splits["test"]["label_ids"]) == {0}


def test_hf_load_reads_each_squad_split_as_its_own_kind(shared_dir, golden_dir, tmp_path):
    """train.tf_record holds the answer positions eval.tf_record lacks: read as the eval kind they were lost."""
    out = tmp_path / "squad"
    for name in ("train", "dev"):
        assert main(["create-squad", "--input", str(shared_dir / f"fixtures/finetune/squad/v1.1/{name}-v1.1.json"),
                     "--vocab", str(golden_dir / "vocab.txt"), "--out", str(out), "--seq", "128",
                     "--doc-stride", "32", "--max-query", "24", "--quiet"]) == 0
    splits = hf.load(str(out), cache_dir=str(tmp_path / "cache"))
    assert list(splits) == ["train", "validation"]
    assert_split_holds(splits["train"], out / "train.tf_record")
    assert_split_holds(splits["validation"], out / "eval.tf_record")
    assert {"start_positions", "end_positions", "is_impossible"} <= set(splits["train"].column_names)
    assert "squad_train records" in splits["train"].info.description
    assert "squad_eval records" in splits["validation"].info.description


def test_hf_load_names_a_flat_directory_of_converted_records_train(golden_dir, tmp_path):
    """README's `bertprep convert $R/tfrecord/training $R/hdf5-copy --to hdf5`: the copy, in no split directory
    and named for none, loads as "train" (`datasets` keeps "all" for the union of the splits); $R is still its
    training and test sets, not the copy; a copy beside its own format's split directories, which it would
    double, is an error naming it."""
    documents = (golden_dir / "corpus.txt").read_text().split("\n\n")
    for split, name, part in (("training", "a.txt", documents[:4]), ("test", "b.txt", documents[4:6])):
        (tmp_path / "s" / split).mkdir(parents=True)  # files whose names say no split, as a user's may be
        (tmp_path / "s" / split / name).write_text("\n\n".join(part) + "\n")
    assert main(["create", "--input", str(tmp_path / "s"), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "r"), "--format", "tfrecord,hdf5", "--dupe-factor", "1", "--quiet"]) == 0
    records = only_records_dir(tmp_path / "r")
    training = sorted((records / "tfrecord/training").iterdir())
    for fmt in ("parquet", "hdf5"):  # Parquet through `datasets`' own builder, HDF5 through bertprep's reader
        assert main(["convert", str(records / "tfrecord/training"), str(records / f"{fmt}-copy"), "--to", fmt,
                     "--quiet"]) == 0
        copy = hf.load(str(records / f"{fmt}-copy"), cache_dir=str(tmp_path / "cache"))
        assert list(copy) == ["train"]
        assert_split_holds(copy["train"], *training)
        if fmt == "parquet":
            whole_set = hf.load(str(records), cache_dir=str(tmp_path / "cache"))
            assert list(whole_set) == ["train", "test"] and "from hdf5" in whole_set["test"].info.description
            assert_split_holds(whole_set["train"], *training)
    with pytest.raises(DataError, match=r"hdf5-copy/a\.hdf5: a hdf5 file of no split .* training, test "
                                        r"splits; load .*hdf5-copy on its own$"):
        hf.load(str(records), cache_dir=str(tmp_path / "cache"))


def test_hf_load_refuses_files_named_for_a_split_beside_split_directories(golden_dir, tmp_path):
    """A file whose name says its split (a converted copy of a training file, a fine-tuning train.tf_record)
    beside training/ was merged into "train" with the files there: a copy of one was read twice. A stray file
    in the directory that holds the split directories was told to load that directory on its own."""
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(tmp_path / "s"), "--corpus", "g",
                 "--train-shards", "2", "--test-shards", "1", "--test-fraction", "0.2", "--quiet"]) == 0
    assert main(["create", "--input", str(tmp_path / "s"), "--vocab", str(golden_dir / "vocab.txt"), "--out",
                 str(tmp_path / "r"), "--format", "tfrecord,parquet", "--dupe-factor", "1", "--quiet"]) == 0
    records = only_records_dir(tmp_path / "r")
    first = records / "parquet/training/g_training_0.parquet"
    cache = str(tmp_path / "cache")
    (records / "copy").mkdir()
    for stray, at, fmt, split, apart in (
            (records / "copy/g_training_0.parquet", "parquet/training/g_training_0.parquet", "parquet", "training",
             f"load {records / 'copy'} on its own"),
            (records / "tfrecord/train.tf_record", "tfrecord/training/g_training_0.tfrecord", "tfrecord", "train",
             f"move it out of {records / 'tfrecord'} (and load it on its own)")):
        shutil.copy(records / at, stray)  # its format the one read: in the most splits, or Parquet
        with pytest.raises(DataError) as caught:
            hf.load(str(records), cache_dir=cache)
        assert str(caught.value) == (
            f"{stray}: a {fmt} file named for the {split} split but in no training/ or test/ directory, beside "
            f"{fmt} files in them ({records / at}): which split it belongs to is ambiguous, and a copy of one of "
            f"them would be read twice; {apart}")
        stray.unlink()
    hub = shutil.copy(first, records / "parquet/train-00000.parquet")  # a name of no split: refused as before,
    with pytest.raises(DataError) as caught:  # and the way out is no longer to load the directory that holds it
        hf.load(str(records), cache_dir=cache)
    assert str(caught.value) == (f"{hub}: a parquet file of no split (in no training/ or test/ directory), beside "
                                 "parquet files of the training, test splits; move it out of "
                                 f"{records / 'parquet'} (and load it on its own)")
    hub.unlink()
    flat = tmp_path / "flat"  # named for their splits in no split directory: each read once, in its own split
    flat.mkdir()
    shutil.copy(first, flat)
    shutil.copy(records / "parquet/test/g_test_0.parquet", flat)
    splits = hf.load(str(flat), cache_dir=cache)
    assert_split_holds(splits["train"], flat / first.name)
    assert_split_holds(splits["test"], flat / "g_test_0.parquet")
    (flat / "training").mkdir()
    (flat / "g_training_0.parquet").rename(flat / "training/g_training_0.parquet")
    with pytest.raises(DataError) as caught:
        hf.load(str(flat), cache_dir=cache)
    assert str(caught.value).startswith(f"{flat / 'g_test_0.parquet'}: a parquet file named for the test split ")
    assert str(caught.value).endswith(f"; move it out of {flat} (and load it on its own)")


def test_a_missing_library_is_one_usage_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(__import__("sys").modules, "h5py", None)  # as when the columnar extra is not installed
    assert main(["create", "--out", str(tmp_path), "--format", "tfrecord,hdf5", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == ("bertprep create: error: hdf5 records need h5py: "
                                               "pip install 'bertprep[columnar]'")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, message", [((None,), "directory must be a path, got NoneType None"),
                                           ((".", 5), "cache_dir must be a path, got int 5"),
                                           (("",), "directory: an empty path names no file or directory"),
                                           ((".", ""), "cache_dir: an empty path names no file or directory")])
def test_hf_load_names_an_argument_that_is_no_path(tmp_path, monkeypatch, args, message):
    """load(None) was a TypeError inside storage; cache_dir=5 made a folder "./5" beside the caller."""
    from bertprep import hf
    from bertprep.errors import UsageError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=f"^bertprep.hf.load: {message}$"):
        hf.load(*args)
    assert list(tmp_path.iterdir()) == []


def test_hf_load_refuses_a_cache_dir_that_is_a_file(golden_records, tmp_path):
    """datasets stopped with a FileExistsError from inside its cache."""
    from bertprep.errors import UsageError

    (tmp_path / "cache").write_text("a file")
    with pytest.raises(UsageError, match=f"^bertprep.hf.load: cache_dir {tmp_path / 'cache'}: not a directory$"):
        hf.load(golden_records, cache_dir=tmp_path / "cache")


def test_hf_load_of_a_missing_directory_says_no_such_directory(tmp_path):
    """`hf.load("does-not-exist")` said `does-not-exist: not a directory`, as if something else stood there."""
    from bertprep.errors import DataError

    (tmp_path / "a-file").write_text("x")
    for name, message in (("does-not-exist", "no such directory"), ("a-file", "not a directory")):
        with pytest.raises(DataError) as caught:
            hf.load(tmp_path / name)
        assert str(caught.value) == f"{tmp_path / name}: {message}"
