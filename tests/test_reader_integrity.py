"""Readers check what the manifest promises (issue 39): a record file whose bytes changed after it was written,
its size kept (one byte flipped), is named in one line by the reader that has its manifest, from the bytes it
reads (no second pass), instead of being trained on. The trainer trained on such an OFRecord part before."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertprep import formats
from bertprep.cli import main
from bertprep.errors import DataError

REPO = Path(__file__).resolve().parents[1]


def created(out, golden_dir, fmts):
    """The records directory of `bertprep create` of the golden corpus in `fmts`."""
    assert main(["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(golden_dir / "vocab.txt"),
                 "--out", str(out), "--seq", "128", "--pred", "20", "--dupe-factor", "1", "--quiet",
                 "--format", fmts]) == 0
    return next(p.parent for p in out.rglob("manifest.json"))


@pytest.fixture(scope="module")
def records(tmp_path_factory, golden_dir):
    return created(tmp_path_factory.mktemp("records"), golden_dir, "tfrecord,ofrecord")


def flipped_copy(records, tmp_path, fmt):
    """A copy of the records directory whose `fmt` training file has one byte flipped in its last quarter."""
    copy = tmp_path / "records"
    subprocess.run(["cp", "-r", str(records), str(copy)], check=True)
    path = next(p for p in (copy / fmt / "training").iterdir() if p.is_file())
    data = bytearray(path.read_bytes())
    at = len(data) * 3 // 4
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    return copy, path


@pytest.mark.parametrize("native", [True, False], ids=["C core", "pure Python"])
@pytest.mark.parametrize("fmt", ["tfrecord", "ofrecord"])
def test_a_flipped_byte_is_named_by_the_reader_that_has_the_digest(records, tmp_path, fmt, native, monkeypatch):
    from bertprep.formats import batches

    if not native:
        monkeypatch.setattr(batches, "_native", None)
    manifest = json.loads((records / "manifest.json").read_text())
    clean = next(p for p in (records / fmt / "training").iterdir() if p.is_file())
    digest = manifest["files"][str(clean.relative_to(records))]["sha256"]
    whole = list(formats.read_batches(str(clean), 64, fmt, digests={str(clean): digest}))  # the bytes it wrote
    assert sum(len(b["input_ids"]) for b in whole) > 64
    _copy, path = flipped_copy(records, tmp_path, fmt)
    if fmt == "tfrecord":  # a flipped payload byte would fail its CRC first: flip the byte back, change a CRC-free
        path.write_bytes(clean.read_bytes()[:-1] + bytes([clean.read_bytes()[-1] ^ 0x01]))  # byte: the last one
    with pytest.raises(DataError) as raised:
        list(formats.read_batches(str(path), 64, fmt, digests={str(path): digest}))
    assert str(raised.value).startswith(f"{path}: sha256 ") and f"is not the manifest's {digest}" in str(raised.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() in str(raised.value)


@pytest.fixture(scope="module")
def columnar_records(tmp_path_factory, golden_dir):
    return created(tmp_path_factory.mktemp("columnar"), golden_dir, "hdf5,parquet")


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
def test_a_columnar_file_is_checked_against_its_digest_before_it_is_decoded(columnar_records, tmp_path, fmt):
    """HDF5 and Parquet files are read whole: their bytes are hashed as they are read, then decoded from
    memory; a changed file is named before h5py or pyarrow sees it (pyarrow's page CRC spoke first before)."""
    manifest = json.loads((columnar_records / "manifest.json").read_text())
    clean = next(p for p in (columnar_records / fmt / "training").iterdir() if p.is_file())
    digest = manifest["files"][str(clean.relative_to(columnar_records))]["sha256"]
    whole = list(formats.read_batches(str(clean), 64, fmt, digests={str(clean): digest}))
    assert np.array_equal(np.concatenate([b["input_ids"] for b in whole]),
                          np.concatenate([b["input_ids"] for b in formats.read_batches(str(clean), 64, fmt)]))
    copy, path = flipped_copy(columnar_records, tmp_path, fmt)
    with pytest.raises(DataError, match=f"^{path}: sha256 [0-9a-f]{{64}} is not the manifest's {digest}"):
        list(formats.read_batches(str(path), 64, fmt, digests={str(path): digest}))
    if fmt == "parquet":  # hf.load reads Parquet through bertprep's reader first
        from bertprep import hf

        with pytest.raises(DataError, match=f"^{path}: sha256 [0-9a-f]{{64}} is not the manifest's "):
            hf.load(str(copy), cache_dir=str(tmp_path / "cache"))


@pytest.mark.heavy
def test_the_trainer_stops_on_a_part_whose_bytes_changed(records, tmp_path):
    copy, path = flipped_copy(records, tmp_path, "ofrecord")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "trainer", "--format", "ofrecord", "--data", str(copy),
                             "--model", "tiny", "--steps", "2", "--batch-size", "4"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith(f"trainer: error: {path}: sha256 "), lines[-1]
    assert "is not the manifest's" in lines[-1]


def test_a_reader_without_a_digest_reads_as_before(records):
    path = next(p for p in (records / "ofrecord" / "training").iterdir() if p.is_file())
    plain = list(formats.read_batches(str(path), 64, "ofrecord"))
    checked = list(formats.read_batches(str(path), 64, "ofrecord",
                                        digests={str(path): hashlib.sha256(path.read_bytes()).hexdigest()}))
    assert len(plain) == len(checked) and all(np.array_equal(a["input_ids"], b["input_ids"])
                                              for a, b in zip(plain, checked))


def test_bert_loader_and_hf_load_name_a_part_whose_bytes_changed(records, tmp_path):
    copy, ofrecord = flipped_copy(records, tmp_path, "ofrecord")
    tfrecord = next(p for p in (copy / "tfrecord" / "training").iterdir() if p.is_file())
    data = bytearray(tfrecord.read_bytes())
    data[-1] ^= 0x01  # a CRC byte: the bytes' digest is what is checked first
    tfrecord.write_bytes(bytes(data))
    from bertprep.torch import BertLoader

    with pytest.raises(DataError, match=f"^{ofrecord}: sha256 [0-9a-f]{{64}} is not the manifest's "):
        BertLoader(str(copy), batch_size=4, fmt="ofrecord")
    from bertprep import hf

    with pytest.raises(DataError, match=r": sha256 [0-9a-f]{64} is not the manifest's "):
        hf.load(str(copy), cache_dir=str(tmp_path / "cache"))


def corpus_with_manifest(directory):
    """A formatted corpus as `bertprep download` or `dedup` writes it: parts and a manifest listing their sha256."""
    directory.mkdir(parents=True)
    for part in ("part0.jsonl", "part1.jsonl"):
        lines = [json.dumps({"id": f"{part}-{i}", "text": f"Sentence {i} of {part}. Another one here."}) + "\n"
                 for i in range(20)]
        (directory / part).write_text("".join(lines))
    files = {p.name: {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
             for p in sorted(directory.glob("*.jsonl"))}
    (directory / "manifest.json").write_text(json.dumps({"stage": "format", "files": files}))
    return directory


def shard_line(corpus, out):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["shard", "--input", str(corpus), "--out", str(out), "--train-shards", "1", "--test-shards", "1",
                     "--quiet"])
    return code, err.getvalue().strip()


def test_shard_checks_a_corpus_parts_against_its_manifest(tmp_path):
    corpus = corpus_with_manifest(tmp_path / "deduped" / "wiki")
    assert shard_line(corpus, tmp_path / "ok") == (0, "")
    part = corpus / "part1.jsonl"
    part.write_bytes(part.read_bytes().replace(b"Sentence 7", b"Sentence 8"))  # size kept
    code, line = shard_line(corpus, tmp_path / "changed")
    assert code == 1 and line.startswith(f"bertprep shard: error: {part}: sha256 "), line
    part.unlink()
    code, line = shard_line(corpus, tmp_path / "deleted")
    assert (code, line) == (1, f"bertprep shard: error: {part}: listed in {corpus}/manifest.json but missing (rerun "
                               "the stage that wrote it)")


@pytest.mark.parametrize("to", ["hdf5", "parquet"])
def test_convert_checks_a_trees_files_against_its_manifest(records, tmp_path, to):
    copy, path = flipped_copy(records, tmp_path, "tfrecord")
    import contextlib
    import io

    err = io.StringIO()
    # the tree's manifest is the records directory's: a convert of the whole tree checks every file it reads (a
    # records tree's first format, tfrecord here: its other formats hold the same records)
    with contextlib.redirect_stderr(err):
        code = main(["convert", "--to", to, str(copy), str(tmp_path / "out-tree")])
    assert code == 1 and f"{path}: sha256 " in err.getvalue() and "is not the manifest's" in err.getvalue()
    assert not (tmp_path / "out-tree").exists() or not any((tmp_path / "out-tree").rglob("*.*"))


def peak_rss_mib(argv, cwd):
    """Peak RSS (MiB) of the largest process of a command's tree, and its exit code."""
    script = ("import resource, subprocess, sys; "
              "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, code)")
    result = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=cwd,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    peak, code = result.stdout.split()
    return int(peak), int(code)


@pytest.mark.heavy
def test_dedup_of_one_huge_line_stays_within_its_bound(tmp_path):
    """One 16 MB single-line document took 8 GB per 50 MB: datasketch permuted all its shingles at once."""
    rng = np.random.default_rng(0)
    vocabulary = np.array([f"w{i}" for i in range(5000)])
    text = " ".join(vocabulary[rng.integers(0, len(vocabulary), 4_000_000)])  # ~16 MB, 4 million shingles
    corpus = tmp_path / "huge"
    corpus.mkdir()
    (corpus / "part0.jsonl").write_text(json.dumps({"id": "0", "text": text}) + "\n")
    (corpus / "manifest.json").write_text("{}")
    peak, code = peak_rss_mib([sys.executable, "-m", "bertprep", "dedup", "--input", str(corpus), "--out",
                               str(tmp_path / "out"), "--workers", "1", "--quiet"], tmp_path)
    assert code == 0
    # the words of the document (~60 bytes each) and one 64 MiB batch of permuted shingles: 2.6 GB before
    assert peak < 900, peak


def test_validate_holds_a_window_of_a_record_file_not_the_file(tmp_path, golden_dir):
    """validate held about 2.2 MB per MB of record file (851 MB for a 342 MB file): every chunk's prefix
    sums stayed alive behind a view, and every mapped page of the file stayed in memory."""
    one = (golden_dir / "G1.tfrecord").read_bytes()
    peaks = []
    for copies in (20, 80):  # 21 and 85 MiB of framed records
        path = tmp_path / f"x{copies}.tfrecord"
        path.write_bytes(one * copies)
        peak, code = peak_rss_mib([sys.executable, "-m", "bertprep", "validate", str(path), "--workers", "1",
                                   "--quiet"], tmp_path)
        assert code == 0
        peaks.append(peak)
        path.unlink()
    assert peaks[1] - peaks[0] < 32, peaks  # 64 MiB more file; 155 MiB more memory before


@pytest.mark.heavy
def test_shard_of_one_huge_line_stays_within_its_bound(tmp_path):
    """blingfire took ~25 bytes per character of the document it split: 640 MiB for one 22 MB line."""
    rng = np.random.default_rng(0)
    vocabulary = np.array([f"w{i}" for i in range(5000)])
    corpus = tmp_path / "huge"
    corpus.mkdir()
    text = " ".join(vocabulary[rng.integers(0, len(vocabulary), 4_000_000)])  # ~22 MB, one paragraph
    (corpus / "part0.txt").write_text(text + "\n\nA short document.\n")
    peak, code = peak_rss_mib([sys.executable, "-m", "bertprep", "shard", "--input", str(corpus), "--out",
                               str(tmp_path / "out"), "--workers", "1", "--quiet"], tmp_path)
    assert code == 0
    # the interpreter (~100 MiB), blingfire's ~100 MiB for a 4 Mi-character group, ~3 copies of the line
    assert peak < 300, peak
    sentences = (tmp_path / "out").rglob("*.txt")
    assert sum(path.stat().st_size for path in sentences) >= len(text)


def test_hf_load_of_the_out_above_the_records_checks_them_as_the_records_directory(records, tmp_path):
    """`bertprep.hf.load` of create's --out (the records directory one level further down, <params>/<corpus>)
    read no manifest: a file whose bytes changed and ids beyond the manifest's vocab were loaded without a word,
    which loading the records directory itself refused."""
    from bertprep import hf

    out = tmp_path / "out"
    subprocess.run(["cp", "-r", str(records.parent.parent), str(out)], check=True)
    copy = out / records.relative_to(records.parent.parent)
    tfrecord = next(p for p in (copy / "tfrecord" / "training").iterdir() if p.is_file())
    data = bytearray(tfrecord.read_bytes())
    data[-1] ^= 0x01  # a CRC byte, which nothing but the digest checks
    tfrecord.write_bytes(bytes(data))
    for place in (copy, out, copy.parent):
        with pytest.raises(DataError, match=f"^{tfrecord}: sha256 [0-9a-f]{{64}} is not the manifest's "):
            hf.load(str(place), cache_dir=str(tmp_path / "cache"))
    data[-1] ^= 0x01
    tfrecord.write_bytes(bytes(data))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["vocab"]["size"] = 10  # ids of the golden vocab's 30522 are beyond it
    (copy / "manifest.json").write_text(json.dumps(manifest))
    for place in (copy, out):
        with pytest.raises(DataError, match=f"^{tfrecord}: row 0: input_ids\\[0\\]: 101 is not a token id of the "
                                            "vocab of 10 "):
            hf.load(str(place), cache_dir=str(tmp_path / "cache"))


def test_hf_load_of_a_folder_inside_the_records_checks_them_as_the_records_directory(records, tmp_path,
                                                                                      monkeypatch):
    """`bertprep.hf.load` of a folder inside a records directory (its ofrecord/, ofrecord/training/) sought the
    manifest only below it: an OFRecord part whose bytes changed (no CRC to catch it), ids beyond the manifest's
    vocab and an unfinished run's records were loaded without a word. And a records directory or create's --out
    loaded as "." checked no vocab: its files' paths missed the prefix "./"."""
    from bertprep import hf

    copy = tmp_path / "records"
    subprocess.run(["cp", "-r", str(records), str(copy)], check=True)
    part = copy / "ofrecord" / "training" / "part-0"
    data = bytearray(part.read_bytes())
    data[len(data) * 3 // 4] ^= 0x01
    part.write_bytes(bytes(data))
    for place in (copy / "ofrecord", copy / "ofrecord" / "training"):
        with pytest.raises(DataError, match=f"^{part}: sha256 [0-9a-f]{{64}} is not the manifest's "):
            hf.load(str(place), cache_dir=str(tmp_path / "cache"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["vocab"]["size"] = 10  # ids of the golden vocab's 30522 are beyond it
    (copy / "manifest.json").write_text(json.dumps(manifest))
    tfrecord = next(p.name for p in (copy / "tfrecord" / "training").iterdir() if p.is_file())
    monkeypatch.chdir(copy)
    for place, named in (("tfrecord/training", "tfrecord/training"), (".", "tfrecord/training"),
                         (str(copy / "tfrecord"), str(copy / "tfrecord" / "training"))):
        with pytest.raises(DataError, match=f"^(\\./)?{named}/{tfrecord}: row 0: input_ids\\[0\\]: 101 is not a "
                                            "token id of the vocab of 10 "):
            hf.load(place, cache_dir=str(tmp_path / "cache"))
    manifest["vocab"]["size"] = 30522
    manifest["writing"] = True  # as a killed create leaves it
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=f"^{copy / 'manifest.json'}: writing: the create run that writes these "
                                        "records has not finished"):
        hf.load(str(copy / "tfrecord" / "training"), cache_dir=str(tmp_path / "cache"))


def test_hf_load_of_the_current_directory_inside_the_records_checks_them_as_the_records_directory(
        records, tmp_path, monkeypatch):
    """`hf.load(".")` run inside a records directory's ofrecord/training/ (or `..` there) sought the manifest
    at "." alone, with no folder above it, and loaded an OFRecord part whose bytes changed (no CRC to catch it)
    without a word; the manifest is now found above by the absolute path, and its sha256 checked."""
    from bertprep import hf

    copy, part = flipped_copy(records, tmp_path, "ofrecord")
    monkeypatch.chdir(copy / "ofrecord" / "training")
    for place, named in ((".", part.name), ("..", f"training/{part.name}")):
        with pytest.raises(DataError, match=f"^(\\./|\\.\\./)?{named}: sha256 [0-9a-f]{{64}} is not the "
                                            "manifest's "):
            hf.load(place, cache_dir=str(tmp_path / "cache"))


def test_validate_of_the_current_directory_inside_the_records_checks_them_as_its_absolute_path(
        records, tmp_path, monkeypatch, capsys):
    """`bertprep validate .` run inside a records directory's ofrecord/training/ (or `..` there) sought the
    manifest at "." alone, with no folder above it, and called a part whose bytes changed checked against no
    manifest (its sha256 unread) where validate of the absolute path named it FAILED; "." now finds the
    manifest above by the absolute path and reports the same checks, the files named as found under "."."""
    def report(place):
        code = main(["validate", place, "--json", "--quiet"])
        return code, json.loads(capsys.readouterr().out)

    intact = tmp_path / "intact"
    subprocess.run(["cp", "-r", str(records), str(intact)], check=True)
    copy, part = flipped_copy(records, tmp_path, "ofrecord")
    for records_dir, failing in ((intact, {}), (copy, {"manifest": 1})):
        training = records_dir / "ofrecord" / "training"
        monkeypatch.chdir(training)
        code, whole = report(str(training))
        assert (code, whole["counts"], whole["datasets"][0]["files"][0]["split"]) == (1 if failing else 0,
                                                                                      failing, "training")
        for place, prefix in ((".", "./"), ("..", "../training/")):
            assert report(place) == (code, {**whole, "paths": [place], "findings": [
                {**finding, "file": finding["file"].replace(f"{training}/", prefix)} for finding in whole["findings"]],
                "datasets": [{**whole["datasets"][0], "path": place, "manifest": "../../manifest.json", "files": [
                    {**entry, "path": entry["path"].replace(f"{training}/", prefix)}
                    for entry in whole["datasets"][0]["files"]]}]})
    assert f"./{part.name}" in [finding["file"] for finding in report(".")[1]["findings"]
                                if finding["message"].startswith("sha256 ")]


def test_the_loaders_refuse_a_record_file_the_manifest_does_not_list(records, tmp_path):
    """A record file in a records directory that its manifest does not list (a stray copy, `x copy.tfrecord`, or
    another run's file) was read by `bertprep.hf.load` and `bertprep.torch.BertLoader` with the listed ones
    without a word, its records twice, where `bertprep validate` fails it as "not listed in manifest.json"."""
    from bertprep import hf

    out = tmp_path / "out"
    subprocess.run(["cp", "-r", str(records.parent.parent), str(out)], check=True)
    copy = out / records.relative_to(records.parent.parent)
    listed = next(p for p in sorted((copy / "tfrecord" / "training").iterdir()) if p.is_file())
    stray = listed.with_name(listed.stem + " copy.tfrecord")
    stray.write_bytes(listed.read_bytes())
    said = f"^{stray}: not listed in {copy / 'manifest.json'} \\(an unfinished or stray file\\): "
    for place in (copy, out, copy / "tfrecord" / "training"):  # the records, create's --out, a folder inside
        with pytest.raises(DataError, match=said + "bertprep.hf.load would read its records with the listed"):
            hf.load(str(place), cache_dir=str(tmp_path / "cache"))
    pytest.importorskip("torch")
    from bertprep.torch import BertLoader

    with pytest.raises(DataError, match=said + "bertprep.torch would read its records with the listed"):
        BertLoader(str(copy), 1)
    stray.unlink()
    assert len(BertLoader(str(copy), 1)) > 0 and hf.load(str(copy), cache_dir=str(tmp_path / "cache"))["train"]
