"""`bertprep validate` on text shard directories and SQuAD/GLUE downloads."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

from bertprep.cli import main
from bertprep.stages.download.glue import task_outputs
from bertprep.text_inputs import discover_inputs


def validate(capsys, *argv):
    code = main(["validate", *map(str, argv), "--json", "--quiet"])
    return code, json.loads(capsys.readouterr().out)


def findings(report):
    return [(f["check"], f["file"], f["message"]) for f in report["findings"]]


def shard_dir(root, training, test):
    for split, shards in (("training", training), ("test", test)):
        (root / split).mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(shards):
            (root / split / f"c_{split}_{i}.txt").write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


DOC_A = "The first sentence.\nThe second one.\n\n"
DOC_B = "Another document here.\nWith two lines.\n\n"
DOC_C = "A third document.\n\n"


def test_sound_shards_and_their_figures(capsys, tmp_path):
    root = shard_dir(tmp_path / "sharded", [DOC_A + DOC_B, DOC_B + DOC_A], [DOC_C])
    code, report = validate(capsys, root)
    assert code == 0, findings(report)
    figures = report["text_shards"][0]["figures"]
    assert figures["training"]["documents"] == 4 and figures["training"]["sentences"] == 8
    assert figures["test"] == {"shards": 1, "documents": 1, "sentences": 1, "bytes": len(DOC_C),
                               "min_bytes": len(DOC_C), "max_bytes": len(DOC_C), "size_spread": 0.0}
    assert figures["overlap"]["test_documents_in_training"] == 0


def test_empty_document_and_bad_utf8(capsys, tmp_path):
    bad = DOC_A.encode() + b"caf\xe9 latin-1\n\n"
    root = shard_dir(tmp_path / "sharded", [DOC_A + "\n" + DOC_B, bad], [DOC_C])
    code, report = validate(capsys, root)
    assert code == 1
    first = root / "training" / "c_training_0.txt"
    second = root / "training" / "c_training_1.txt"
    assert findings(report) == [
        ("documents", f"{first}:4", "empty document (more than one blank line between documents)"),
        ("utf8", f"{second}:4", "not UTF-8 (byte 0xe9 at column 4)"),
    ]


def test_a_shard_whose_lines_end_in_cr_alone_fails(capsys, tmp_path):
    """Only LF ends a line: a shard saved with classic Mac OS line endings was "ok", 1 document of 1 sentence,
    where create, tokenize and shard refuse it."""
    root = shard_dir(tmp_path / "sharded", [(DOC_A + DOC_B).replace("\n", "\r")], [DOC_C])
    code, report = validate(capsys, root)
    assert code == 1
    assert findings(report) == [("documents", str(root / "training" / "c_training_0.txt"),
                                 "its lines end in a carriage return alone (CR, classic Mac OS line endings), which "
                                 "ends no line: one sentence of one document")]
    shard_dir(root, [(DOC_A + DOC_B).replace("\n", "\r\n")], [DOC_C])  # CRLF is read as the reference reads it
    assert validate(capsys, root)[0] == 0


def test_overlap_and_spread_are_warnings(capsys, tmp_path):
    root = shard_dir(tmp_path / "sharded", [DOC_A * 20, DOC_B], [DOC_A])
    code, report = validate(capsys, root)
    assert code == 0
    assert "1 test documents also occur in training" in report["warnings"]
    assert any(w.startswith("training: shard sizes") for w in report["warnings"])


def test_shard_manifest_mismatch(capsys, tmp_path):
    root = shard_dir(tmp_path / "sharded", [DOC_A], [DOC_C])
    data = (root / "training" / "c_training_0.txt").read_bytes()
    files = {"training/c_training_0.txt": {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
             "test/c_test_0.txt": {"bytes": 999, "sha256": "0" * 64}}
    (root / "manifest.json").write_text(json.dumps({"stage": "shard", "files": files}))
    code, report = validate(capsys, root)
    assert code == 1
    assert findings(report) == [("shard_manifest", str(root / "test" / "c_test_0.txt"),
                                 f"{len(DOC_C)} bytes, manifest.json says 999")]


def test_one_shard_file_is_validated_as_a_shard_only(capsys, tmp_path):
    """A .txt given alone is a text shard: it was also judged as a record file, FAILED "not a record file"."""
    shard = shard_dir(tmp_path / "sharded", [DOC_A + DOC_B], [DOC_C]) / "training" / "c_training_0.txt"
    code, report = validate(capsys, shard)
    assert code == 0 and report["datasets"] == [] and findings(report) == []
    assert report["text_shards"][0]["figures"]["training"]["documents"] == 2


def test_a_hidden_shard_is_named_not_validated(capsys, tmp_path):
    """`training/.draft.txt` was validated and counted as a shard, which create and tokenize never read."""
    root = shard_dir(tmp_path / "sharded", [DOC_A], [DOC_C])
    (root / "training" / ".draft.txt").write_text(DOC_B)
    code, report = validate(capsys, root)
    assert code == 0 and report["text_shards"][0]["figures"]["training"]["shards"] == 1
    assert (f"not read: {root / 'training' / '.draft.txt'} (hidden files: create and tokenize do not read them "
            "either)") in report["warnings"]
    alone = tmp_path / "alone" / "training"
    alone.mkdir(parents=True)
    (alone / ".draft.txt").write_text(DOC_B)
    assert main(["validate", str(alone.parent)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bertprep validate: error: {alone.parent}: nothing to validate (no record files, text shards, SQuAD or GLUE "
        f"files); not read: {alone / '.draft.txt'} (hidden files: create and tokenize do not read them either)")


def test_files_beside_the_shards_that_are_no_shards_are_named_not_validated(capsys, tmp_path):
    """A training/notes.md and a subdirectory's .txt were passed over without a word, the tree SOUND: validate
    reads neither, nor do create and tokenize. A hidden shard keeps its own line; other dot-files are not named."""
    root = shard_dir(tmp_path / "sharded", [DOC_A], [DOC_C])
    (root / "training" / "notes.md").write_text("notes\n")
    (root / "training" / "sub").mkdir()
    (root / "training" / "sub" / "e.txt").write_text(DOC_B)
    (root / "training" / ".draft.txt").write_text(DOC_B)
    (root / "test" / ".DS_Store").write_bytes(b"\0")
    code, report = validate(capsys, root)
    assert code == 0 and report["text_shards"][0]["figures"]["training"]["shards"] == 1
    assert [w for w in report["warnings"] if w.startswith("not read")] == [
        f"not read: {root / 'training' / '.draft.txt'} (hidden files: create and tokenize do not read them either)",
        f"not read: {root / 'training' / 'notes.md'}, {root / 'training' / 'sub' / 'e.txt'} (not text shards: "
        "create and tokenize do not read them either)"]
    code, report = validate(capsys, root / "training" / "c_training_0.txt")  # one shard asked: the rest unasked
    assert code == 0 and not [w for w in report["warnings"] if w.startswith("not read")]
    (root / "training" / "notes.md").unlink()
    shutil.rmtree(root / "training" / "sub")
    (root / "training" / ".draft.txt").unlink()
    code, report = validate(capsys, root)
    assert code == 0 and not [w for w in report["warnings"] if w.startswith("not read")]


def test_files_at_the_root_of_a_shard_tree_are_named_not_validated(capsys, tmp_path, golden_dir):
    """A notes.md and a .txt beside a `bertprep shard` tree's training/, test/ and manifest were passed over
    without a word, the tree SOUND; one named as a shard was validated and counted. create and tokenize read
    neither (discover_inputs, which both use). The manifest and other dot-files are not named, and a split folder
    given alone names nothing above it."""
    root = tmp_path / "sharded"
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(root), "--corpus", "g",
                 "--train-shards", "2", "--test-shards", "1", "--test-fraction", "0.2", "--quiet"]) == 0
    (root / "notes.md").write_text("notes\n")
    shutil.copy(root / "training" / "g_training_0.txt", root / "g_training_9.txt")
    (root / ".DS_Store").write_bytes(b"\0")
    assert [path for path, _split in discover_inputs([str(root)])] == [
        str(root / "training" / "g_training_0.txt"), str(root / "training" / "g_training_1.txt"),
        str(root / "test" / "g_test_0.txt")]
    code, report = validate(capsys, root)
    assert code == 0 and findings(report) == []
    assert report["text_shards"][0]["figures"]["training"]["shards"] == 2
    assert [w for w in report["warnings"] if w.startswith("not read")] == [
        f"not read: {root / 'g_training_9.txt'}, {root / 'notes.md'} (not text shards: create and tokenize do not "
        "read them either)"]
    code, report = validate(capsys, root / "training")
    assert code == 0 and not [w for w in report["warnings"] if w.startswith("not read")]


def test_a_file_named_as_a_shard_in_a_folder_create_does_not_read_is_named_not_validated(capsys, tmp_path,
                                                                                          golden_dir):
    """A shard-named .txt in a subfolder of training/, or in a folder of the tree's root or of a directory
    with no split folder, was validated and counted by its name alone (against the manifest: FAILED, "not
    listed"), where create and tokenize of the same directory read none of them (discover_inputs)."""
    root = tmp_path / "sharded"
    assert main(["shard", "--input", str(golden_dir / "corpus.txt"), "--out", str(root), "--corpus", "g",
                 "--train-shards", "2", "--test-shards", "1", "--test-fraction", "0.2", "--quiet"]) == 0
    (root / "training" / "sub").mkdir()
    shutil.copy(root / "training" / "g_training_0.txt", root / "training" / "sub" / "g_training_5.txt")
    (root / "sub").mkdir()
    shutil.copy(root / "test" / "g_test_0.txt", root / "sub" / "g_test_7.txt")
    assert [path for path, _split in discover_inputs([str(root)])] == [
        str(root / "training" / "g_training_0.txt"), str(root / "training" / "g_training_1.txt"),
        str(root / "test" / "g_test_0.txt")]
    code, report = validate(capsys, root)
    assert code == 0 and findings(report) == []
    figures = report["text_shards"][0]["figures"]
    assert (figures["training"]["shards"], figures["test"]["shards"]) == (2, 1)
    assert [w for w in report["warnings"] if w.startswith("not read")] == [
        f"not read: {root / 'training' / 'sub' / 'g_training_5.txt'}, {root / 'sub' / 'g_test_7.txt'} (not text "
        "shards: create and tokenize do not read them either)"]
    flat = tmp_path / "flat"  # no training/ or test/: create reads its own *.txt, not its folders'
    (flat / "sub").mkdir(parents=True)
    shutil.copy(root / "training" / "g_training_0.txt", flat / "sub" / "g_training_5.txt")
    assert main(["validate", str(flat)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bertprep validate: error: {flat}: nothing to validate (no record files, text shards, SQuAD or GLUE "
        f"files); not read: {flat / 'sub' / 'g_training_5.txt'} (not text shards: create and tokenize do not read "
        "them either)")
    code, report = validate(capsys, flat / "sub")  # the folder given: read by create and validated
    assert code == 0 and report["text_shards"][0]["figures"]["training"]["shards"] == 1
    (flat / "sub" / "corpus.txt").write_text("A sentence.\nAnother one.\n", encoding="utf-8")
    code, report = validate(capsys, flat / "sub")  # create reads its corpus.txt too, as a training shard
    assert [path for path, split in discover_inputs([str(flat / "sub")])] == [
        str(flat / "sub" / "corpus.txt"), str(flat / "sub" / "g_training_5.txt")]
    assert code == 0 and report["text_shards"][0]["figures"]["training"]["shards"] == 2
    assert not [w for w in report["warnings"] if w.startswith("not read")]  # was "not read: …/corpus.txt"


def test_a_file_named_as_a_test_shard_outside_a_test_folder_is_validated_in_the_split_create_reads_it_in(capsys,
                                                                                                        tmp_path):
    """A `c_test_0.txt` beside `a.txt` in a folder with no training/ or test/ (or given alone) was counted in
    validate's test split by its name, and checked against the training split for overlap, where create and
    tokenize read it as a training shard (its folder names no split): both are training shards now."""
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.txt").write_text(DOC_A + DOC_B, encoding="utf-8")
    (flat / "c_test_0.txt").write_text(DOC_B + DOC_A, encoding="utf-8")  # a.txt's documents: test's overlap
    assert [split for _path, split in discover_inputs([str(flat)])] == ["training", "training"]
    code, report = validate(capsys, flat)
    figures = report["text_shards"][0]["figures"]
    assert code == 0 and set(figures) == {"training"} and figures["training"]["shards"] == 2
    assert report["warnings"] == []  # was "1 test documents also occur in training"
    assert discover_inputs([str(flat / "c_test_0.txt")])[0][1] == "training"
    code, report = validate(capsys, flat / "c_test_0.txt")
    assert code == 0 and list(report["text_shards"][0]["figures"]) == ["training"]  # was ["test"]


def test_shard_the_manifest_does_not_list_fails(capsys, tmp_path):
    """A shard beside those the manifest lists (another run's, another corpus's) is refused by tokenize and
    create: the directory is not sound (it was SOUND, shard_manifest ok)."""
    root = shard_dir(tmp_path / "sharded", [DOC_A, DOC_B], [DOC_C])
    files = {}
    for name in ("training/c_training_0.txt", "test/c_test_0.txt"):
        data = (root / name).read_bytes()
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (root / "manifest.json").write_text(json.dumps({"stage": "shard", "files": files}))
    code, report = validate(capsys, root)
    assert code == 1
    assert findings(report) == [("shard_manifest", str(root / "training" / "c_training_1.txt"),
                                 "not listed in manifest.json (a file of another run or corpus?): tokenize and "
                                 "create refuse it")]


def _squad(count, version="1.1"):
    qa = {"id": "q", "question": "why?", "answers": [{"text": "x", "answer_start": 0}]}
    if version == "2.0":
        qa["is_impossible"] = False
    return {"version": version, "data": [{"title": "t", "paragraphs": [{"context": "x", "qas": [qa] * count}]}]}


def test_squad_counts_and_checksums(capsys, tmp_path):
    directory = tmp_path / "download" / "squad" / "v1.1"
    directory.mkdir(parents=True)
    dev = directory / "dev-v1.1.json"
    dev.write_text(json.dumps(_squad(10_570)))
    code, report = validate(capsys, tmp_path / "download")
    assert code == 1  # right count, but not the published file and nothing vouches for it
    assert findings(report) == [("download_checksum", str(dev),
                                 "md5 differs from the published 3e85deb501d4e538b6bc56f786231552 "
                                 "and no manifest vouches for it")]
    sha = hashlib.sha256(dev.read_bytes()).hexdigest()
    (tmp_path / "download" / "squad" / "manifest.json").write_text(
        json.dumps({"files": {"v1.1/dev-v1.1.json": {"sha256": sha}}}))
    code, report = validate(capsys, tmp_path / "download")
    assert code == 0, findings(report)
    assert report["downloads"][0]["files"]["squad/v1.1/dev-v1.1.json"] == {"examples": 10_570, "expected": 10_570}
    dev.write_text(json.dumps(_squad(10_569)))
    code, report = validate(capsys, tmp_path / "download")
    assert ("download_examples", str(dev), "10,569 questions, SQuAD v1.1 dev has 10,570") in findings(report)


def _glue_file(path, header, rows, width):
    lines = (["\t".join(header)] if header else []) + ["\t".join(f"c{j}" for j in range(width))] * rows
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_glue_counts_and_columns(capsys, tmp_path):
    task = tmp_path / "glue" / "RTE"
    task.mkdir(parents=True)
    header = {name: layout[0] for name, _split, layout in task_outputs("RTE")}["dev.tsv"]
    _glue_file(task / "dev.tsv", header, 277, len(header))
    code, report = validate(capsys, tmp_path / "glue")
    assert code == 0, findings(report)
    _glue_file(task / "dev.tsv", header, 276, len(header))
    code, report = validate(capsys, tmp_path / "glue")
    assert findings(report) == [("download_examples", str(task / "dev.tsv"), "276 examples, GLUE RTE dev.tsv has 277")]
    _glue_file(task / "dev.tsv", ["idx"] + header[1:], 277, len(header))
    code, report = validate(capsys, tmp_path / "glue")
    assert findings(report) == [("download_examples", f"{task / 'dev.tsv'}:1",
                                 f"header {['idx'] + header[1:]}, expected {header}")]


def test_a_pipe_is_refused_as_the_corpus_stages_refuse_it(tmp_path):
    """`validate <(cat a.txt)` (a pipe, /dev/fd/63) and a FIFO said "nothing to validate (no record files, text
    shards, SQuAD or GLUE files)", exit 1, of a pipe full of text: the corpus stages' refusal now
    (text_inputs.refuse_stream), exit 2, nothing written, the FIFO never opened."""
    fifo = tmp_path / "f.txt"
    os.mkfifo(fifo)
    why = ("not a regular file (a pipe, as <(zcat …) gives, or a device): this stage reads each input more than "
           "once; write it to a file first")
    report = tmp_path / "report.json"
    command = f"{sys.executable} -m bertprep validate <(printf 'One sentence.\\nTwo.\\n\\n') --json {report} --quiet"
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2 and re.fullmatch(rf"bertprep validate: error: /dev/fd/\d+: {re.escape(why)}\n",
                                                run.stderr), run.stderr
    run = subprocess.run([sys.executable, "-m", "bertprep", "validate", str(fifo), "--json", str(report), "--quiet"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (2, f"bertprep validate: error: {fifo}: {why}\n")
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]
