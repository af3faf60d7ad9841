"""Hostile uses of the data stages (issue 57, the data side): budgets beyond the work, empty inputs, output
folders holding earlier or foreign files, paths a third-party list file cannot carry, runs that exit 0 on what
is not fine, messages that did not say what to fix, and a case flag that contradicts the vocab. Each case ends in
one line (an error naming the file or flag, or a warning) and never a traceback; the results are checked with the
real readers (megatron-core's IndexedDataset where it reads the files)."""

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import bertprep
from bertprep.cli import main
from bertprep.errors import BertprepWarning, UsageError
from bertprep.progress import human_bytes
from bertprep.stages import dedup as dedup_module
from bertprep.stages.create import sample_paths


def cli_lines(capsys, argv):
    """(exit code, stdout, the non-blank stderr lines) of `bertprep ARGV`; never a traceback."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def cli_error(capsys, argv, code):
    """The one `bertprep ARGV: error:` line of a run that exits `code`."""
    exit_code, _out, err = cli_lines(capsys, argv)
    assert exit_code == code and len(err) == 1 and err[0].startswith(f"bertprep {argv[0]}: error: "), err
    return err[0]


def formatted_corpus(directory, texts, part="p0"):
    """A formatted corpus (what `bertprep download` writes) of `texts`, one document each."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"id": str(i), "title": "", "text": t}) + "\n" for i, t in enumerate(texts))
    (directory / f"{part}.jsonl").write_text(lines)
    (directory / "manifest.json").write_text(json.dumps({"tool": "bertprep", "stage": "format", "files": {}}))
    return directory


@pytest.fixture(scope="module")
def megatron_indexed():
    return pytest.importorskip("megatron.core.datasets.indexed_dataset")


DOCUMENT = "the quick brown fox jumps over the lazy dog near the river bank on a sunny day"


# -- 1. a budget larger than the work -------------------------------------------------------------------------


@pytest.mark.parametrize("memory", ["100G", "10T"])
def test_a_memory_budget_beyond_the_corpus_is_held_to_what_the_corpus_needs(tmp_path, capsys, memory):
    corpus = formatted_corpus(tmp_path / "c1", [DOCUMENT])
    code, out, err = cli_lines(capsys, ["dedup", "--input", str(corpus), "--out", str(tmp_path / "out"),
                                        "--memory", memory, "--workers", "1"])
    assert code == 0 and "1 documents, 1 kept" in out
    assert "is more than this machine's" in out  # the summary's warning row (this machine has less than 100G)
    assert [line for line in err if "warning" in line] == [f"dedup: warning: {line.split('warning  ')[1]}"
                                                          for line in out.splitlines() if "warning  " in line]


def test_the_python_dedup_warns_of_a_budget_beyond_the_machine(tmp_path):
    corpus = formatted_corpus(tmp_path / "c1", [DOCUMENT])
    with pytest.warns(BertprepWarning, match=r"DedupOptions.memory 100G is more than this machine's"):
        summary = bertprep.dedup(input=(str(corpus),), out=str(tmp_path / "out"), memory="100G",
                                 engine=bertprep.EngineOptions(workers=1))
    assert summary["kept"] == 1


def test_a_chunk_is_never_larger_than_its_part_can_hold():
    assert dedup_module.chunk_documents(1 << 40, 128, 9, part_bytes=100) <= 100 // 12 + 1
    assert dedup_module.chunk_documents(1 << 20, 128, 9, part_bytes=1 << 40) == dedup_module.chunk_documents(
        1 << 20, 128, 9)  # a big part: --memory decides, as before


def test_a_budget_beyond_the_machine_makes_a_chunk_the_machine_can_hold(tmp_path, monkeypatch):
    """A chunk's signatures' array is made at once for as many documents as --memory and the part's bytes allow:
    --memory 1T on a part of 1 GB asked NumPy for 42.7 GiB, a MemoryError traceback on a 24 GB machine (the part
    here says it holds 1 TB; the machine, 64 MiB). The chunk is held to the machine's memory too."""
    from bertprep.folder import Folder
    from bertprep.stages.dedup import storage

    part = formatted_corpus(tmp_path / "c1", [DOCUMENT, DOCUMENT.replace("sunny", "rainy")]) / "p0.jsonl"
    size = storage.getsize
    monkeypatch.setattr(storage, "getsize", lambda path: 1 << 40 if str(path) == str(part) else size(path))
    monkeypatch.setattr(dedup_module, "machine_memory", lambda: 64 << 20)
    bands = dedup_module.optimal_bands(0.8, 128)
    marker = dedup_module.fingerprint_part((str(part), 0, Folder(str(tmp_path / "steps")), 5, 128, bands,
                                            np.zeros(0, np.uint64), 13, 1 << 50, None))
    assert marker["documents"] == 2 and marker["starts"] == [0]


def test_a_budget_below_one_chunk_is_a_warning_naming_what_it_takes(tmp_path):
    """--memory 1K was taken without a word for the 32-document chunks it cannot hold (66 KiB at the defaults),
    and the run was many times slower in chunks that small."""
    options = bertprep.DedupOptions(input=("x.jsonl",), memory="1K")
    floor = dedup_module.MIN_CHUNK * dedup_module.chunk_bytes_per_document(128, options.band_rows()[0])
    assert dedup_module.settings_warnings(options, machine_bytes=1 << 30) == [
        f"--memory 1K is less than a chunk of 32 documents needs ({human_bytes(floor)}): the run takes that, in "
        f"many small chunks (slower); give at least {human_bytes(floor)}"]
    assert dedup_module.settings_warnings(bertprep.DedupOptions(input=("x.jsonl",), memory=f"{floor}"),
                                          machine_bytes=1 << 30) == []


def test_a_budget_below_one_chunk_is_a_warning_under_no_near_too():
    """--no-near --memory 1K was taken without a word: pass 1 makes its chunks of 32 documents (signatures and
    band keys among them) as it does with near duplicates."""
    options = bertprep.DedupOptions(input=("x.jsonl",), memory="1K", near=False)
    assert dedup_module.chunk_documents(options.memory_bytes(), 128, options.band_rows()[0]) == 32
    assert dedup_module.settings_warnings(options, machine_bytes=1 << 30) == dedup_module.settings_warnings(
        bertprep.DedupOptions(input=("x.jsonl",), memory="1K"), machine_bytes=1 << 30) != []


def test_an_evaluation_file_without_text_is_refused(tmp_path, capsys):
    """An empty or blank --decontaminate file reported "items 0, found_in_training 0", exit 0: a clean corpus."""
    corpus = formatted_corpus(tmp_path / "c1", [DOCUMENT])
    for name, text in (("empty.txt", ""), ("blank.txt", "\n \n\n")):
        (tmp_path / name).write_text(text)
        assert cli_error(capsys, ["dedup", "--input", str(corpus), "--out", str(tmp_path / "out"), "--decontaminate",
                                  str(tmp_path / name), "--quiet"], 1) == (
            f"bertprep dedup: error: --decontaminate {tmp_path / name}: no evaluation text in it (empty, blank, or "
            "no text field): nothing to decontaminate against")
    assert not (tmp_path / "out").exists()


def test_a_glue_tsv_loses_no_row_to_a_header_it_does_not_have(shared_dir):
    """CoLA's dev.tsv has no header row: its first sentence was skipped as one, and never checked."""
    glue = shared_dir / "fixtures" / "finetune" / "glue"
    cola = (glue / "CoLA" / "dev.tsv").read_text().splitlines()
    items = dedup_module.file_items(str(glue / "CoLA" / "dev.tsv"))
    assert items[0] == cola[0].split("\t")[3] and len(items) == sum(" " in line.split("\t")[3] for line in cola)
    mrpc = dedup_module.file_items(str(glue / "MRPC" / "dev.tsv"))  # a header: not an item
    assert not any("#1 String" in item for item in mrpc)
    assert len(mrpc) == len((glue / "MRPC" / "dev.tsv").read_text().splitlines()) - 1


def test_a_budget_within_the_machine_gives_no_warning():
    options = bertprep.DedupOptions(input=("x.jsonl",), memory="64M")
    assert dedup_module.settings_warnings(options, machine_bytes=1 << 30) == []
    assert dedup_module.settings_warnings(options, machine_bytes=None) == []  # unknown: nothing to say


# -- 2. an empty input is no input ----------------------------------------------------------------------------


@pytest.mark.parametrize("stage, fields", [
    ("tokenize", {"input": ()}), ("create", {"input": []}), ("shard", {"input": ()}),
    ("dedup", {"input": ()}), ("dedup", {"corpus": ()}), ("create", {"input": ("x.txt",), "format": ()}),
])
def test_an_empty_list_is_refused_not_taken_for_the_default(tmp_path, stage, fields):
    name = next(iter(fields)) if stage != "create" or "format" not in fields else "format"
    options = f"{''.join(p.capitalize() for p in stage.split('_'))}Options"
    with pytest.raises(UsageError, match=rf"^{options}\.{name} is empty: give at least one value"):
        getattr(bertprep, stage)(**fields, out=str(tmp_path / "out"), vocab=sample_paths()[1]) \
            if stage in ("tokenize", "create") else getattr(bertprep, stage)(**fields, out=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_tokenize_of_no_input_still_takes_the_sample_corpus(tmp_path):
    summary = bertprep.tokenize(out=str(tmp_path / "out"), workdir=str(tmp_path / "work"))
    assert summary["shards"] > 0  # None is "not given": the documented default


# -- 3. an output folder's earlier or foreign files -----------------------------------------------------------


def documents(count):
    return [f"document {i} says {DOCUMENT}. It has a second sentence, number {i}." for i in range(count)]


def sample_shards(tmp_path, count):
    """A copy of the sample corpus with its first `count` training shards and no test split."""
    corpus = tmp_path / f"shards{count}" / "sample_corpus"
    (corpus / "training").mkdir(parents=True)
    for path in sorted(Path(sample_paths()[0], "training").iterdir())[:count]:
        shutil.copy(path, corpus / "training")
    return corpus


def test_a_tokenize_rerun_with_fewer_shards_names_the_files_it_removed(tmp_path, megatron_indexed):
    vocab, out = sample_paths()[1], str(tmp_path / "tok")
    bertprep.tokenize(input=(str(sample_shards(tmp_path, 3)),), vocab=vocab, out=out)
    with pytest.warns(BertprepWarning, match=r"removed 4 file\(s\) of an earlier run that this run does not write: "
                                             r"training/sample_corpus_training_1_text_sentence\.bin"):
        summary = bertprep.tokenize(input=(str(sample_shards(tmp_path, 1)),), vocab=vocab, out=out)
    prefixes = (tmp_path / "tok" / "sample_corpus" / "data-path.txt").read_text().split()[1::2]
    assert [p.rsplit("/", 1)[1] for p in prefixes] == ["sample_corpus_training_0_text_sentence"]
    assert sorted(p.name for p in (tmp_path / "tok" / "sample_corpus" / "training").iterdir()) == [
        "sample_corpus_training_0_text_sentence.bin", "sample_corpus_training_0_text_sentence.idx"]
    assert len(megatron_indexed.IndexedDataset(prefixes[0])) == summary["counts"]["training"]["sequences"]


@pytest.mark.filterwarnings("ignore:.*no test split:bertprep.errors.BertprepWarning")
def test_a_create_rerun_with_fewer_shards_warns_as_well(tmp_path):
    vocab, out = sample_paths()[1], str(tmp_path / "records")
    fields = {"vocab": vocab, "out": out, "seq": 32, "pred": 5, "dupe_factor": 1, "min_parts": 1,
              "format": "tfrecord"}
    bertprep.create(input=(str(sample_shards(tmp_path, 2)),), **fields)
    with pytest.warns(BertprepWarning, match=r"removed 1 file\(s\) of an earlier run that this run does not write: "
                                             r"tfrecord/training/sample_corpus_training_1\.tfrecord"):
        bertprep.create(input=(str(sample_shards(tmp_path, 1)),), **fields)


def test_a_shard_rerun_into_fewer_shards_names_the_shards_it_removed(tmp_path, capsys):
    corpus = formatted_corpus(tmp_path / "c1", documents(12))
    argv = ["shard", "--input", str(corpus), "--out", str(tmp_path / "sharded"), "--test-fraction", "0",
            "--workers", "1", "--test-shards", "1"]
    assert cli_lines(capsys, [*argv, "--train-shards", "4", "--quiet"])[0] == 0
    code, out, _err = cli_lines(capsys, [*argv, "--train-shards", "2"])
    assert code == 0 and "removed 2 file(s) of an earlier run that this run does not write: " \
                         "training/c1_training_2.txt, training/c1_training_3.txt" in out
    assert sorted(p.name for p in (tmp_path / "sharded" / "training").iterdir()) == ["c1_training_0.txt",
                                                                                     "c1_training_1.txt"]


def test_a_shard_rerun_under_another_corpus_name_reshards_and_removes_the_first_names(tmp_path, capsys):
    """The same input and --out as `--corpus a`, then `--corpus b`: taken for complete, it returned corpus a."""
    corpus = formatted_corpus(tmp_path / "c1", documents(12))
    argv = ["shard", "--input", str(corpus), "--out", str(tmp_path / "sharded"), "--test-fraction", "0",
            "--workers", "1", "--test-shards", "1", "--train-shards", "2"]
    assert cli_lines(capsys, [*argv, "--corpus", "a", "--quiet"])[0] == 0
    code, out, _err = cli_lines(capsys, [*argv, "--corpus", "b", "--json"])
    summary = json.loads(out)
    assert code == 0 and summary["corpus"] == "b" and summary["warnings"] == [
        "removed 2 file(s) of an earlier run that this run does not write: training/a_training_0.txt, "
        "training/a_training_1.txt"]
    assert sorted(p.name for p in (tmp_path / "sharded" / "training").iterdir()) == ["b_training_0.txt",
                                                                                     "b_training_1.txt"]


def test_a_shard_rerun_removes_no_file_outside_its_out_that_a_manifest_names(tmp_path, capsys):
    """A rerun under another --corpus removes the files the earlier manifest lists: one that listed
    `../notes.txt` (edited, or copied from elsewhere) had that file, outside --out, deleted with a warning, exit 0.
    Such a name is a damaged manifest now, refused before anything is removed."""
    corpus = formatted_corpus(tmp_path / "c1", documents(12))
    argv = ["shard", "--input", str(corpus), "--out", str(tmp_path / "sharded"), "--test-fraction", "0",
            "--workers", "1", "--test-shards", "1", "--train-shards", "2", "--quiet"]
    assert cli_lines(capsys, [*argv, "--corpus", "a"])[0] == 0
    manifest_path = tmp_path / "sharded" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["../notes.txt"] = manifest["files"]["training/a_training_0.txt"]
    manifest_path.write_text(json.dumps(manifest))
    (tmp_path / "notes.txt").write_text("mine")
    assert cli_error(capsys, [*argv, "--corpus", "b"], 1) == (
        f'bertprep shard: error: {manifest_path}: damaged manifest (files["../notes.txt"] names a file outside its '
        "folder); remove it to redo this stage from scratch")
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "sharded" / "training").iterdir()) == ["a_training_0.txt",
                                                                                     "a_training_1.txt"]


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_tokenize_and_create_refuse_a_json_lines_corpus(tmp_path, capsys, stage):
    """A .jsonl file given to the stages that read text shards was tokenized as it is: each document's JSON one
    "sentence", braces, quotes and escaped newlines in the training data, exit 0."""
    corpus = formatted_corpus(tmp_path / "c1", documents(4))
    part = corpus / "p0.jsonl"
    vocab = sample_paths()[1]
    assert cli_error(capsys, [stage, "--input", str(part), "--vocab", vocab, "--out", str(tmp_path / "out"),
                              "--quiet"], 2) == (
        f"bertprep {stage}: error: {part}: a JSON-lines corpus (one document a line, as download and dedup write): "
        f"this stage reads text shards (a sentence a line, documents apart by a blank line); shard it first: "
        f"`bertprep shard --input {part}`")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError) as refused:  # a Python caller: the command as written, not
        getattr(bertprep, stage)(input=(str(part),), vocab=vocab, out=str(tmp_path / "out"))  # "shard XOptions.input"
    assert str(refused.value).endswith(f"shard it first: `bertprep shard --input {part}`"), refused.value


@pytest.mark.parametrize("stage", ["shard", "tokenize", "create"])
def test_a_corpus_name_given_as_a_path_is_its_name(tmp_path, stage):
    """`corpus=Path("c")`, which the options' types take for a str, was a TypeError deep inside (str.replace)."""
    options = getattr(bertprep, f"{stage.capitalize()}Options")(corpus=Path("mine"))
    assert options.corpus == "mine" or stage == "shard"  # shard checks the name where it resolves its inputs
    if stage == "shard":
        corpus = formatted_corpus(tmp_path / "c1", documents(4))
        summary = bertprep.shard(input=str(corpus), corpus=Path("mine"), out=str(tmp_path / "out"), train_shards=1,
                                 test_shards=1, test_fraction=0.0, engine=bertprep.EngineOptions(workers=1))
        assert summary["corpus"] == "mine" and (tmp_path / "out" / "training" / "mine_training_0.txt").is_file()


def test_dedup_refuses_an_output_corpus_folder_holding_a_foreign_part(tmp_path, capsys):
    corpus = formatted_corpus(tmp_path / "c1", [DOCUMENT])
    stray = tmp_path / "out" / "c1" / "other.jsonl"
    stray.parent.mkdir(parents=True)
    stray.write_text(json.dumps({"text": "a document of another corpus"}) + "\n")
    line = cli_error(capsys, ["dedup", "--input", str(corpus), "--out", str(tmp_path / "out")], 2)
    assert f"{stray} is no part of this run nor of an earlier dedup into it" in line
    assert sorted(p.name for p in stray.parent.iterdir()) == ["other.jsonl"]  # nothing written


def test_dedup_removes_an_earlier_dedups_parts_and_says_so(tmp_path):
    out = str(tmp_path / "out")
    bertprep.dedup(input=(str(formatted_corpus(tmp_path / "a" / "c1", [DOCUMENT], part="old")),), out=out)
    with pytest.warns(BertprepWarning, match=r"removed 1 file\(s\) of an earlier run .*: c1/old\.jsonl"):
        bertprep.dedup(input=(str(formatted_corpus(tmp_path / "b" / "c1", [DOCUMENT], part="new")),), out=out)
    assert sorted(p.name for p in (tmp_path / "out" / "c1").iterdir()) == ["manifest.json", "new.jsonl"]


def test_a_dedup_rerun_with_fewer_inputs_removes_the_dropped_corpus_and_says_so(tmp_path, capsys):
    """`--input c1 c2` then `--input c1` into one OUT left OUT/c2/ whole, manifest and all, which `bertprep
    shard --input OUT/*` read beside c1's deduplicated parts."""
    out = tmp_path / "out"
    inputs = [str(formatted_corpus(tmp_path / name, documents(3))) for name in ("c1", "c2")]
    bertprep.dedup(input=inputs, out=str(out))
    assert sorted(p.name for p in (out / "c2").iterdir()) == ["manifest.json", "p0.jsonl"]
    assert main(["dedup", "--input", inputs[0], "--out", str(out), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["warnings"] == ["removed 2 file(s) of an earlier run that this run does not write: "
                                   "c2/p0.jsonl, c2/manifest.json"]
    assert not (out / "c2").exists() and (out / "c1").is_dir()
    assert json.loads((out / "manifest.json").read_text())["corpora"].keys() == {"c1"}


def test_shard_refuses_a_part_its_corpus_manifest_does_not_list(tmp_path, capsys):
    deduped = tmp_path / "out"
    bertprep.dedup(input=(str(formatted_corpus(tmp_path / "c1", [DOCUMENT])),), out=str(deduped))
    (deduped / "c1" / "other.jsonl").write_text(json.dumps({"text": "not deduplicated"}) + "\n")
    line = cli_error(capsys, ["shard", "--input", str(deduped / "c1"), "--out", str(tmp_path / "sh")], 1)
    assert line.endswith(f"{deduped}/c1/other.jsonl: not listed in {deduped}/c1/manifest.json (a file of another "
                         "run or corpus?): shard would read it with the files listed; remove it, or give the files "
                         "you mean")


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_tokenize_and_create_refuse_a_shard_the_shard_manifest_does_not_list(tmp_path, capsys, stage):
    corpus = formatted_corpus(tmp_path / "c1", documents(12))
    sharded = tmp_path / "sharded"
    bertprep.shard(input=(str(corpus),), out=str(sharded), train_shards=2, test_shards=1)
    shutil.copy(sharded / "training" / "c1_training_0.txt", sharded / "training" / "other_training_0.txt")
    line = cli_error(capsys, [stage, "--input", str(sharded), "--vocab", sample_paths()[1], "--out",
                              str(tmp_path / "out")], 1)
    assert f"{sharded}/training/other_training_0.txt: not listed in {sharded}/manifest.json" in line


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_tokenize_and_create_refuse_a_shard_tree_missing_a_shard_its_manifest_lists(tmp_path, capsys, stage):
    """A shard deleted from the tree (or left behind by a copy) was passed over without a word: exit 0 over the
    other shards, where an unlisted shard is refused and `bertprep shard` names a missing input."""
    corpus = formatted_corpus(tmp_path / "c1", documents(12))
    sharded = tmp_path / "sharded"
    bertprep.shard(input=(str(corpus),), out=str(sharded), train_shards=2, test_shards=1)
    (sharded / "training" / "c1_training_1.txt").unlink()
    line = cli_error(capsys, [stage, "--input", str(sharded), "--vocab", sample_paths()[1], "--out",
                              str(tmp_path / "out")], 1)
    assert line.endswith(f"{sharded}/training/c1_training_1.txt: listed in {sharded}/manifest.json but missing: "
                         "this stage would go on without it; rerun the stage that wrote it, or give the files you "
                         "mean")
    assert not (tmp_path / "out").exists()
    assert main([stage, "--input", str(sharded / "training" / "c1_training_0.txt"), "--vocab", sample_paths()[1],
                 "--out", str(tmp_path / "out"), "--quiet"]) == 0  # the files meant, given as files


# -- 6. a list file a third-party tool splits on whitespace ----------------------------------------------------


@pytest.mark.parametrize("out_name, shard_name, named", [("my out", "s_training_0.txt", "--out {out}"),
                                                         ("out", "my shard.txt", "the input {shard}")])
def test_tokenize_refuses_a_megatron_prefix_with_whitespace_naming_where_it_comes_from(tmp_path, capsys, out_name,
                                                                                       shard_name, named):
    shard = tmp_path / "corpus" / "training" / shard_name
    shard.parent.mkdir(parents=True)
    shutil.copy(Path(sample_paths()[0], "training", "sample_corpus_training_0.txt"), shard)
    out = tmp_path / out_name
    line = cli_error(capsys, ["tokenize", "--input", str(tmp_path / "corpus"), "--vocab", sample_paths()[1],
                              "--out", str(out)], 2)
    assert line.startswith(f"bertprep tokenize: error: {named.format(out=out, shard=shard)}: the Megatron prefix ")
    assert "data-path.txt is read as words (--data-path $(cat data-path.txt))" in line
    assert not out.exists() or not any(out.rglob("*.bin"))


def test_tokenize_refuses_a_megatron_prefix_utf8_cannot_write(tmp_path, capsys):
    """A shard named in Latin-1 bytes (caf\\xe9.txt) was tokenized, and then data-path.txt, UTF-8 text, stopped the
    run with a UnicodeEncodeError traceback; it is refused before anything is written."""
    training = tmp_path / "corpus" / "training"
    training.mkdir(parents=True)
    shard = os.fsdecode(os.path.join(os.fsencode(training), b"caf\xe9.txt"))
    shutil.copy(Path(sample_paths()[0], "training", "sample_corpus_training_0.txt"), shard)
    out = tmp_path / "out"
    line = cli_error(capsys, ["tokenize", "--input", str(tmp_path / "corpus"), "--vocab", sample_paths()[1],
                              "--out", str(out)], 2)
    shown = shard.encode("utf-8", "backslashreplace").decode()  # caf\\udce9.txt, as the prefix's repr shows it
    assert line.startswith(f"bertprep tokenize: error: the input {shown}: the Megatron prefix ")
    assert line.endswith("holds bytes that are no UTF-8 (a file name's), and data-path.txt is UTF-8 text; choose an "
                         "--out and input names in UTF-8")
    assert not out.exists()


def test_the_data_path_of_an_ordinary_path_is_what_megatron_takes(tmp_path, megatron_indexed):
    from megatron.core.datasets.utils import get_blend_from_list

    bertprep.tokenize(input=(str(sample_shards(tmp_path, 2)),), vocab=sample_paths()[1], out=str(tmp_path / "o"))
    words = (tmp_path / "o" / "sample_corpus" / "data-path.txt").read_text().split()  # as $(cat ...) splits it
    prefixes, weights = get_blend_from_list(words)
    assert [len(megatron_indexed.IndexedDataset(p)) > 0 for p in prefixes] == [True, True] and len(weights) == 2


# -- 7. exit 0 on what is not fine ----------------------------------------------------------------------------


def test_dedup_warns_that_one_band_finds_no_near_duplicates(tmp_path, capsys):
    corpus = formatted_corpus(tmp_path / "c1", [DOCUMENT, DOCUMENT.replace("sunny", "rainy")])
    code, out, err = cli_lines(capsys, ["dedup", "--input", str(corpus), "--out", str(tmp_path / "out"),
                                        "--bands", "1", "--workers", "1"])
    assert code == 0 and "dedup: warning: --bands 1 (128 MinHash values a band) makes a pair of Jaccard 0.90 a " \
                         "candidate with a chance of 1.4e-06: most near duplicates will not be found" in err[0]
    assert "0 near" in out  # what the warning foretold
    options = bertprep.DedupOptions(input=("x.jsonl",))
    assert dedup_module.settings_warnings(options, None) == []  # the default bands: found 93 times in 100 at 0.9
    # under --no-near, --bands is refused (tests/test_dedup.py::test_a_near_duplicate_setting_with_no_near_is_refused)
    assert dedup_module.settings_warnings(bertprep.DedupOptions(input=("x.jsonl",), near=False), None) == []


def test_validate_says_skipped_for_the_checks_it_had_nothing_to_check_against(golden_dir, tmp_path, capsys):
    records = shutil.copy(golden_dir / "G1.tfrecord", tmp_path / "g1.tfrecord")  # no manifest beside it
    code, out, _err = cli_lines(capsys, ["validate", str(records)])
    rows = {line.split()[1]: line.split()[0] for line in out.splitlines() if line.startswith("  ") and
            len(line.split()) > 2 and line.split()[0] in ("ok", "skipped", "FAILED")}
    assert code == 0 and rows["vocab"] == "skipped" and rows["manifest"] == "skipped" and rows["cls"] == "ok"
    assert "  skipped vocab                  no vocab size (no manifest, no --vocab)" in out
    report = bertprep.validate(paths=(str(records),), vocab=str(golden_dir / "vocab.txt"))
    assert report["checks"]["vocab"]["status"] == "ok" and report["checks"]["manifest"]["status"] == "skipped"


def test_a_resumed_tokenize_says_what_it_trusted(tmp_path, capsys):
    argv = ["tokenize", "--input", str(sample_shards(tmp_path, 1)), "--vocab", sample_paths()[1], "--out",
            str(tmp_path / "tok")]
    assert cli_lines(capsys, [*argv, "--quiet"])[0] == 0
    code, _out, err = cli_lines(capsys, argv)
    assert code == 0 and "tokenize: resuming: 1 of 1 shards already complete (same input sha256 and settings, " \
                         "output files of the recorded size; `bertprep validate` checks their bytes)" in err


@pytest.mark.parametrize("flag", ["-n", "--skip"])
def test_inspect_refuses_a_negative_count(tmp_path, capsys, flag):
    bertprep.tokenize(input=(str(sample_shards(tmp_path, 1)),), vocab=sample_paths()[1], out=str(tmp_path / "t"))
    idx = next((tmp_path / "t").rglob("*.idx"))
    line = cli_error(capsys, ["inspect", flag, "-1", str(idx)], 2)
    assert line.endswith("--num and --skip must be at least 0, not -1")


def test_inspect_num_0_shows_nothing_and_says_it_was_asked_for_none(golden_dir, tmp_path, capsys):
    """-n 0 of a file holding records said "no records at index 0 or later", as if the file were empty."""
    records = golden_dir / "G1.tfrecord"
    code, out, err = cli_lines(capsys, ["inspect", str(records), "-n", "0"])
    assert (code, out, err) == (0, f"{records} (tfrecord, pretraining): --num 0: no records shown\n", [])
    bertprep.tokenize(input=(str(sample_shards(tmp_path, 1)),), vocab=sample_paths()[1], out=str(tmp_path / "t"))
    idx = next((tmp_path / "t").rglob("*.idx"))
    code, out, err = cli_lines(capsys, ["inspect", str(idx), "-n", "0", "--skip", "1"])
    assert (code, out, err) == (0, f"{idx} (megatron, sequences): --num 0: no sequences shown\n", [])
    shown = bertprep.inspect(file=str(records), num=0)  # the format and kind, no record
    assert (shown["kind"], shown["records"]) == ("pretraining", [])
    code, out, _err = cli_lines(capsys, ["inspect", str(records), "--skip", "100000"])  # past the end: as before
    assert code == 0 and out == f"{records} (tfrecord, pretraining): no records at index 100000 or later\n"


def test_inspect_of_a_directory_names_a_file_of_it_to_give(golden_dir, tmp_path, capsys):
    """A records or tokenize folder was "…: not a file", exit 1, with nothing said of what to give instead."""
    records = tmp_path / "rec" / "tfrecord" / "training"
    records.mkdir(parents=True)
    for name in ("part_10.tfrecord", "part_9.tfrecord"):
        shutil.copyfile(golden_dir / "G1.tfrecord", records / name)
    line = cli_error(capsys, ["inspect", str(tmp_path / "rec")], 2)
    assert line.endswith(f"{tmp_path / 'rec'}: a directory; inspect shows one file of records or token sequences: "
                         f"name one of its files, e.g. {records / 'part_9.tfrecord'} (bertprep validate checks a "
                         "whole directory)")
    bertprep.tokenize(input=(str(sample_shards(tmp_path, 1)),), vocab=sample_paths()[1], out=str(tmp_path / "t"))
    assert ", e.g. " in cli_error(capsys, ["inspect", str(tmp_path / "t")], 2)
    (tmp_path / "empty").mkdir()
    assert cli_error(capsys, ["inspect", str(tmp_path / "empty")], 2).endswith(
        ": it holds no record or token-sequence file (bertprep validate checks a whole directory)")
    assert cli_error(capsys, ["inspect", str(tmp_path / "gone.tfrecord")], 1).endswith(
        f"{tmp_path / 'gone.tfrecord'}: no such file")


@pytest.mark.parametrize("stream", [5, "out.txt", io.BytesIO(), "binary file"])
def test_inspect_refuses_a_stream_that_is_no_text_stream(golden_dir, tmp_path, stream):
    """5 or a file name was an AttributeError ('int' object has no attribute 'write'), a binary stream a
    TypeError, each after the file was opened and read."""
    records = golden_dir / "G1.tfrecord"
    with contextlib.ExitStack() as stack:
        if stream == "binary file":
            stream = stack.enter_context(open(tmp_path / "out.bin", "wb", buffering=0))
        with pytest.raises(UsageError, match=r'^stream must be a text stream \(sys\.stdout, io\.StringIO, '
                                             rf'open\(path, "w"\)\), got {type(stream).__name__} '):
            bertprep.inspect(file=str(records), num=1, stream=stream)
    text = io.StringIO()
    assert bertprep.inspect(file=str(records), num=1, stream=text)["records"] and text.getvalue()
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize("value", ["yes", "", 1, None])
def test_the_python_stages_refuse_a_quiet_that_is_no_bool(tmp_path, value):
    with pytest.raises(UsageError, match=rf"^bertprep.tokenize: quiet must be True or False, got "
                                         rf"{type(value).__name__} "):
        bertprep.tokenize(input=("x.txt",), out=str(tmp_path / "out"), quiet=value)
    assert not (tmp_path / "out").exists()


# -- 8. messages that say what to fix -------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["inspect", "validate"])
def test_a_bin_without_its_idx_is_named_as_such(tmp_path, capsys, stage):
    bertprep.tokenize(input=(str(sample_shards(tmp_path, 1)),), vocab=sample_paths()[1], out=str(tmp_path / "t"))
    idx = next((tmp_path / "t").rglob("*.idx"))
    idx.unlink()
    binary = idx.with_suffix(".bin")
    line = cli_error(capsys, [stage, str(binary)], 1)
    assert line == f"bertprep {stage}: error: {binary}: its index {idx} is missing: a Megatron indexed dataset " \
                   "is a .bin and its .idx (rerun `bertprep tokenize`)"


def test_inspect_and_validate_take_the_prefixes_data_path_txt_lists(tmp_path, megatron_indexed):
    bertprep.tokenize(input=(str(sample_shards(tmp_path, 1)),), vocab=sample_paths()[1], out=str(tmp_path / "t"))
    prefix = (tmp_path / "t" / "sample_corpus" / "data-path.txt").read_text().split()[1]
    shown = bertprep.inspect(file=prefix, num=2)
    dataset = megatron_indexed.IndexedDataset(prefix)  # held while its arrays are read: they map its files
    assert shown["kind"] == "sequences" and [r["ids"] for r in shown["records"]] == [
        dataset[i].tolist() for i in range(2)]
    assert bertprep.validate(paths=(prefix,)).sound


def test_a_record_file_named_bin_is_still_records(golden_dir, tmp_path):
    records = shutil.copy(golden_dir / "G2.tfrecord", tmp_path / "records.bin")
    assert bertprep.inspect(file=str(records), num=1)["kind"] == "pretraining"


# -- 4. the case flag against the vocab -----------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_no_lower_case_with_an_uncased_vocab_is_a_warning_naming_both(golden_dir, tmp_path, capsys, stage):
    vocab = str(golden_dir / "vocab.txt")  # BERT's uncased vocab
    code, out, err = cli_lines(capsys, [stage, "--input", str(sample_shards(tmp_path, 1)), "--vocab", vocab,
                                        "--out", str(tmp_path / "out"), "--no-lower-case", "--min-parts", "1"]
                               if stage == "create" else
                               [stage, "--input", str(sample_shards(tmp_path, 1)), "--vocab", vocab,
                                "--out", str(tmp_path / "out"), "--no-lower-case"])
    expected = (f"--no-lower-case with the uncased vocab {vocab} (no token holds a capital letter): every "
                "capitalised word becomes [UNK]; leave out --no-lower-case")
    assert code == 0 and f"{stage}: warning: {expected}" in err
    assert any(line.split()[0] == "warning" and line.endswith(expected) for line in out.splitlines() if line.strip())


def test_the_case_check_passes_agreeing_flags(golden_dir):
    from bertprep.text_inputs import casing_warning
    from bertprep.tokenization import load_vocab

    uncased = load_vocab(str(golden_dir / "vocab.txt"))
    assert casing_warning(uncased, True) is None and casing_warning(uncased, False) is not None


def test_a_download_into_a_corpus_folder_says_what_it_removed_and_refuses_a_foreign_part(tmp_path, capsys):
    """download's formatted parts (format_parts, what the Wikipedia and BookCorpus parquet paths call): a part the
    source no longer has is removed and named; a .jsonl no download wrote is refused before anything is written,
    not removed (it was, silently) and not left for shard to read."""
    from bertprep.errors import DataError
    from bertprep.progress import Progress
    from bertprep.stages.download.formatted import corpus_dir, format_parts

    def parts(*names):
        return [(name, f"key-{name}", lambda name=name: [{"id": name, "title": name, "text": f"text of {name}"}])
                for name in names]

    format_parts(tmp_path, "wiki", {"source": 1}, parts("a", "b"))
    folder = Path(corpus_dir(tmp_path, "wiki"))
    progress = Progress("download", total=1, quiet=False)
    manifest = format_parts(tmp_path, "wiki", {"source": 1}, parts("a"), progress=progress)
    progress.close()
    assert sorted(manifest["files"]) == ["a.jsonl"] and not (folder / "b.jsonl").exists()
    assert "removed 1 file(s) of an earlier run that this run does not write: b.jsonl" in capsys.readouterr().err
    (folder / "mine.jsonl").write_text('{"id": "x", "title": "", "text": "not from a download"}\n')
    with pytest.raises(DataError, match=r"mine\.jsonl: a \.jsonl that no download into this corpus folder wrote"):
        format_parts(tmp_path, "wiki", {"source": 1}, parts("a"))
    assert (folder / "mine.jsonl").exists() and (folder / "a.jsonl").exists()


@pytest.mark.parametrize("stage", ["create", "tokenize", "shard", "vocab"])
def test_a_text_input_whose_lines_end_in_cr_alone_is_refused(golden_dir, tmp_path, capsys, stage):
    """Only LF ends a line, as the reference's readline reads it: a shard saved with classic Mac OS line endings was
    one sentence of every line (exit 0), and shard read its documents as one."""
    shard = tmp_path / "mac.txt"
    shard.write_bytes(b"One sentence here.\rTwo sentences here.\r\rA second document.\r")
    argv = [stage, "--input", str(shard), "--out", str(tmp_path / "out"), "--quiet"]
    vocab = ["--vocab", str(golden_dir / "vocab.txt")]
    argv += {"create": vocab, "tokenize": vocab, "shard": ["--corpus", "mac"], "vocab": []}[stage]
    line = cli_error(capsys, argv, 1)
    assert line.startswith(f"bertprep {stage}: error: {shard}: its lines end in a carriage return alone (CR, classic "
                           "Mac OS line endings), which ends no line; "), line
    shard.write_bytes(b"One sentence here.\r\nTwo sentences here.\r\n\r\nA second document.\r\n")  # CRLF is read
    assert cli_lines(capsys, argv)[0] == 0


def test_a_vocab_whose_lines_end_in_cr_alone_is_refused(golden_dir, tmp_path):
    """It was one token, and refused as lacking [UNK], the token on its line 1."""
    from bertprep.errors import DataError
    from bertprep.tokenization import load_vocab

    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes((golden_dir / "vocab.txt").read_bytes().replace(b"\n", b"\r"))
    with pytest.raises(DataError, match=r"vocab.txt: its lines end in a carriage return alone \(CR, classic Mac "
                                        r"OS line endings\), which ends no line; a vocab.txt is UTF-8, one token"):
        load_vocab(vocab)


def read_with(reader, given):
    """Open the directory `given` as `reader` does: bertprep.torch's BertLoader, bertprep.hf.load, or the trainer's
    Records (TFRecord)."""
    if reader == "bertprep.torch":
        from bertprep.torch import BertLoader

        BertLoader(str(given), batch_size=2)
    elif reader == "bertprep.hf.load":
        from bertprep.hf import load

        load(str(given))
    else:
        from trainer.data import Records

        Records(str(given), "tfrecord")


@pytest.mark.parametrize("reader", ["bertprep.torch", "bertprep.hf.load", "the trainer"])
def test_a_loader_given_tokenize_output_names_it_as_megatron_data(golden_dir, tmp_path, reader):
    """BertLoader said "no tfrecord training records" of tokenize's folder, bertprep.hf.load "no record files", as
    if tokenize had written nothing: Megatron-LM reads it, not these loaders."""
    from bertprep.errors import DataError

    bertprep.tokenize(input=[str(golden_dir / "corpus.txt")], vocab=str(golden_dir / "vocab.txt"),
                      out=str(tmp_path / "tok"))
    for given in (tmp_path / "tok", tmp_path / "tok/golden", tmp_path / "tok/golden/training"):
        with pytest.raises(DataError) as caught:
            read_with(reader, given)
        assert str(caught.value) == (f"{given}: Megatron indexed data (.bin/.idx, as `bertprep tokenize` writes), not "
                                     "training records: Megatron-LM trains on it (--data-path, as data-path.txt lists "
                                     f"it); {reader} reads the records `bertprep create` or `pack` writes")


@pytest.mark.parametrize("reader", ["bertprep.torch", "bertprep.hf.load", "the trainer"])
def test_a_loader_given_shard_output_names_it_as_text_shards(golden_dir, tmp_path, reader):
    """BertLoader and the trainer said "no tfrecord training records" of shard's folder, bertprep.hf.load "no
    record files", as if shard had written no records: its text shards are create's input."""
    from bertprep.errors import DataError

    given = tmp_path / "sharded"
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(given), "--corpus", "g",
                 "--train-shards", "1", "--test-shards", "1", "--quiet"]) == 0
    with pytest.raises(DataError) as caught:
        read_with(reader, given)
    assert str(caught.value) == (f"{given}: text shards (as `bertprep shard` writes), not records: make records of "
                                 f"them with `bertprep create --input {given}`; {reader} reads the records `bertprep "
                                 "create` or `pack` writes")


# -- probes of 2026-11-29 (eighth) ------------------------------------------------------------------------------


@pytest.mark.parametrize("stage, flag", [("vocab", "--out"), ("validate", "--json"), ("validate", "--plot"),
                                         ("convert", "dst")])
def test_a_file_output_that_is_a_symbolic_link_to_nothing_is_refused_before_anything_is_read(
        golden_dir, tmp_path, capsys, stage, flag):
    """A file output that is itself a symbolic link to nothing was written as though the link were not there:
    the atomic write's rename replaced the link with the file, exit 0, where the trainer's --log-json wrote at
    the link's target. It is the line a directory output under such a link gets (options.refuse_dangling_link),
    exit 2, before anything is read: the link is left, and nothing is made at its target."""
    (tmp_path / "elsewhere").mkdir()  # the target's folder exists: a write through the link would succeed
    target = tmp_path / "elsewhere" / "output"
    link = tmp_path / "output"
    link.symlink_to(target)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(DOCUMENT + "\n")
    records = str(golden_dir / "G1.tfrecord")
    argv = {"vocab": ["vocab", "--input", str(corpus), "--vocab-size", "120", "--unused", "0", "--out", str(link)],
            "validate": ["validate", records, flag, str(link)],
            "convert": ["convert", records, str(link), "--to", "parquet"]}[stage]
    assert cli_error(capsys, [*argv, "--quiet"], 2) == (
        f"bertprep {stage}: error: {flag} {link}: {link} is a symbolic link to {target}, which does not exist: "
        "name a file, or a link to an existing one")
    assert os.readlink(link) == str(target) and os.listdir(tmp_path / "elsewhere") == []
