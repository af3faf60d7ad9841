"""`bertprep shard`: reference format, determinism, balance, bad input, resume."""

import hashlib
import json
import random

import pytest

from bertprep.sentences import document_sentences
from bertprep.stages.create import sample_paths
from bertprep.stages.shard import balance, balance_count, choose_test
from stand_in_servers import ok, one_line_error, run_cli

SAMPLE_VOCAB = sample_paths()[1]


def make_corpus(directory, files=3, docs_per_file=40, seed=0):
    """Blank-line separated text files of documents of very different sizes."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        docs = []
        for d in range(docs_per_file):
            sentences = [f"Document {f}-{d} sentence {s} has {rng.randint(1, 99)} words. Another one follows here."
                         for s in range(rng.choice([1, 3, 10, 40]))]
            docs.append("\n".join(sentences))
        (directory / f"part-{f}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return directory


def read_documents(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n\n")
    return [block.split("\n") for block in text[:-2].split("\n\n")]


def shard_files(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.txt"))}


def test_reference_format_and_manifest(tmp_path):
    corpus = make_corpus(tmp_path / "in")
    out = tmp_path / "w/sharded/demo"
    summary = ok(run_cli("shard", "--workdir", tmp_path / "w", "--input", corpus, "--corpus", "demo",
                         "--train-shards", "4", "--test-shards", "2", "--json"))
    assert summary["documents"] == {"training": 108, "test": 12}
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ([f"test/demo_test_{i}.txt" for i in range(2)]
                                         + [f"training/demo_training_{i}.txt" for i in range(4)])
    seen = []
    for relpath, entry in manifest["files"].items():
        data = (out / relpath).read_bytes()
        docs = read_documents(out / relpath)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        assert entry["documents"] == len(docs) and entry["sentences"] == sum(len(d) for d in docs)
        assert all(line.strip() == line and line for doc in docs for line in doc)  # one sentence per line
        seen.extend(doc[0].split(" sentence ")[0] for doc in docs)
    # every document exactly once, never split: each first line names its document
    assert sorted(seen) == sorted(f"Document {f}-{d}" for f in range(3) for d in range(40))
    # sentences split inside a paragraph line
    assert "Another one follows here." in (out / "training/demo_training_0.txt").read_text().split("\n")


def test_more_shards_than_documents_is_a_warning_in_the_summary(tmp_path):
    """A split with fewer documents than shards asked for gets one shard a document: said in the summary (a
    progress line --quiet and --json never showed), not for a test split that --test-fraction 0 empties."""
    corpus = make_corpus(tmp_path / "in", files=1, docs_per_file=40)
    argv = ["shard", "--input", corpus, "--corpus", "demo", "--train-shards", "64", "--test-shards", "8",
            "--workers", "1"]
    summary = ok(run_cli(*argv, "--out", tmp_path / "a", "--json"))
    assert summary["documents"] == {"training": 36, "test": 4}
    assert summary["warnings"] == ["training: 36 document(s), so 36 shard(s) instead of the 64 of --train-shards",
                                   "test: 4 document(s), so 4 shard(s) instead of the 8 of --test-shards"]
    printed = ok(run_cli(*argv, "--out", tmp_path / "b"))
    assert "  warning    training: 36 document(s), so 36 shard(s) instead of the 64 of --train-shards\n" in printed
    summary = ok(run_cli(*argv[:-4], "--train-shards", "4", "--test-fraction", "0", "--out", tmp_path / "c",
                         "--json", "--workers", "1"))
    assert summary["documents"] == {"training": 40, "test": 0} and "warnings" not in summary


def test_same_input_same_bytes_whatever_the_worker_count(tmp_path):
    corpus = make_corpus(tmp_path / "in", files=4)
    outputs = []
    for workers in (1, 2, 3):
        out = tmp_path / f"out{workers}"
        ok(run_cli("shard", "--input", corpus, "--corpus", "demo", "--out", out, "--workers", workers,
                   "--train-shards", "5", "--test-shards", "3", "--quiet"))
        outputs.append(shard_files(out))
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) == 8


def test_balance_spread_is_small_and_reported(tmp_path):
    corpus = make_corpus(tmp_path / "in", files=2, docs_per_file=300, seed=3)
    summary = ok(run_cli("shard", "--input", corpus, "--corpus", "demo", "--out", tmp_path / "out",
                         "--train-shards", "8", "--test-shards", "2", "--json"))
    spread = summary["spread"]["training"]
    assert spread["shards"] == 8
    largest = max(len(b) + 1 for p in (tmp_path / "in").iterdir() for b in p.read_text().split("\n\n"))
    # greedy largest-first: no shard exceeds the lightest by more than one document
    assert spread["max_bytes"] - spread["min_bytes"] <= largest
    assert spread["spread_pct"] < 5


def test_balance_and_test_choice_are_pure_functions():
    import numpy as np

    sizes = np.array([50, 10, 40, 30, 20, 20, 60, 5], np.int64)
    assignment = balance(sizes, 3)
    loads = [int(sizes[assignment == s].sum()) for s in range(3)]
    # largest first: 60->0, 50->1, 40->2, 30->2, 20->1, 20->0, 10->1 (tie: lower shard), 5->2
    assert assignment.tolist() == [1, 1, 2, 2, 1, 0, 0, 2] and loads == [80, 80, 75]
    hashes = np.array([9, 3, 7, 1, 5, 3, 8, 2, 6, 4], np.uint64)
    assert np.flatnonzero(choose_test(hashes, 0.3)).tolist() == [1, 3, 7]  # hash 3 twice: position 1 wins
    assert choose_test(hashes, 0.0).sum() == 0 and choose_test(hashes[:2], 0.1).sum() == 1


def test_balance_count_gives_equal_document_counts():
    import numpy as np

    sizes = np.array([50, 10, 40, 30, 20, 20, 60, 5], np.int64)
    assignment = balance_count(sizes, 3)
    # room 3/3/2; largest first into the lightest shard with room:
    # 60->0, 50->1, 40->2, 30->2 (full), 20->1, 20->0, 10->1 (full), 5->0
    assert assignment.tolist() == [1, 1, 2, 2, 1, 0, 0, 0]
    assert np.bincount(assignment).tolist() == [3, 3, 2]
    lopsided = np.array([1000] + [1] * 9, np.int64)
    assert np.bincount(balance_count(lopsided, 4)).tolist() == [3, 3, 2, 2]
    assert np.bincount(balance(lopsided, 4)).tolist() != [3, 3, 2, 2]  # size balance puts the giant alone


def test_shard_balance_count_on_the_command_line(tmp_path):
    corpus = make_corpus(tmp_path / "in", files=2, docs_per_file=101, seed=5)
    summary = ok(run_cli("shard", "--input", corpus, "--corpus", "demo", "--out", tmp_path / "out", "--balance",
                         "count", "--train-shards", "7", "--test-shards", "3", "--json"))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["params"]["balance"].startswith("equal document counts")
    for split, shards in (("training", 7), ("test", 3)):
        counts = [e["documents"] for e in manifest["files"].values() if e["split"] == split]
        assert len(counts) == shards and max(counts) - min(counts) <= 1, counts
        assert sum(counts) == summary["documents"][split]


def test_invalid_utf8_and_markup_only_documents(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.txt").write_bytes(b"Good document one. It has two sentences.\n\n"
                                b"Bad \xff\xfe bytes here. Still a sentence.\n\n"
                                b"   \n\t\n\n"
                                b"Last document.\n")
    (inp / "b.jsonl").write_text(json.dumps({"id": "1", "title": "only markup", "text": " \n \n"}) + "\n"
                                 + json.dumps({"id": "2", "title": "ok", "text": "Plain text here."}) + "\n",
                                 encoding="utf-8")
    summary = ok(run_cli("shard", "--input", inp, "--corpus", "mixed", "--out", tmp_path / "out",
                         "--train-shards", "1", "--test-shards", "1", "--json"))
    assert summary["dropped"] == {"empty_documents": 1, "invalid_utf8_lines": 1}
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((tmp_path / "out").rglob("*.txt")))
    assert "Bad \ufffd\ufffd bytes here.\nStill a sentence.\n" in text
    assert sorted(summary["documents"].values()) == [1, 3]


def test_the_first_invalid_utf8_line_named_is_the_first_inputs_whatever_finishes_first(tmp_path):
    """The note naming the first line of invalid UTF-8 took the first input file to finish: with --workers 2 a
    large a.txt, bad at its end, and a small b.txt, bad at line 1, named b.txt:1 (with --workers 1 a.txt's
    line). It names the first input's line now, whatever the worker count (on the old code b.txt finishes first
    as a rule, so the test fails there)."""
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.txt").write_bytes(b"A sentence of the first file here. And another one.\n\n" * 40000 + b"Bad \xff.\n")
    (inp / "b.txt").write_bytes(b"Bad \xfe byte early. Ok then.\n")
    result = run_cli("shard", "--input", inp, "--out", tmp_path / "out", "--train-shards", "2", "--test-shards", "1",
                     "--workers", "2")
    ok(result)
    assert f"2 line(s) with invalid UTF-8 decoded with U+FFFD (first: {inp / 'a.txt'}:80001)" in result.stderr


def test_bad_jsonl_line_is_a_one_line_error(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "x.jsonl").write_text('{"text": "fine."}\n{"text": broken\n', encoding="utf-8")
    line = one_line_error(run_cli("shard", "--input", inp, "--corpus", "x", "--out", tmp_path / "out"))
    assert "x.jsonl:2: not a JSON document line" in line


def test_rerun_is_skipped_and_changed_settings_rewrite(tmp_path):
    corpus = make_corpus(tmp_path / "in", files=1)
    out = tmp_path / "out"
    args = ["shard", "--input", corpus, "--corpus", "demo", "--out", out, "--test-shards", "1"]
    ok(run_cli(*args, "--train-shards", "6"))
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("*.txt")}
    again = ok(run_cli(*args, "--train-shards", "6"))
    assert "already complete" in again and {p: p.stat().st_mtime_ns for p in out.rglob("*.txt")} == stamp
    ok(run_cli(*args, "--train-shards", "2"))
    assert sorted(p.name for p in (out / "training").iterdir()) == ["demo_training_0.txt", "demo_training_1.txt"]


def test_a_rerun_with_other_settings_says_it_replaces_the_shards_and_one_with_the_same_is_silent(golden_dir,
                                                                                                   tmp_path):
    """A second run into one --out with another --test-fraction resharded without a word, exit 0, and the first
    run's shards were gone. It now warns, on stderr and in the summary, naming the setting, as create does; a rerun
    with the same settings and inputs stays silent and leaves the shards as they were."""
    out = tmp_path / "f/a"
    args = ["shard", "--input", golden_dir / "corpus.txt", "--out", out, "--corpus", "g", "--train-shards", "2",
            "--test-shards", "1", "--workers", "1"]
    ok(run_cli(*args, "--test-fraction", "0.169"))
    expected = ("replacing the shards an earlier run wrote here with other settings (test_fraction was 0.169, now "
                "0.16): a shard tree holds one setting; give another --out to keep both")
    result = run_cli(*args, "--test-fraction", "0.16")
    assert f"  warning    {expected}\n" in ok(result) and f"shard: warning: {expected}\n" in result.stderr
    stamp = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    again = run_cli(*args, "--test-fraction", "0.16", "--json")
    assert "warnings" not in ok(again) and "warning" not in again.stderr
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()} == stamp
    summary = ok(run_cli(*args, "--eval-documents", "2", "--json"))
    assert summary["warnings"] == [
        "replacing the shards an earlier run wrote here with other settings (eval_documents was none, now 2; "
        "eval_seed was none, now 12345): a shard tree holds one setting; give another --out to keep both"]


def test_a_rerun_from_other_inputs_says_it_replaces_the_shards(golden_dir, tmp_path):
    """A rerun into one --out from inputs at other paths with other content names them; the same content at
    another path (a moved corpus) gives the same shards and no warning."""
    text = (golden_dir / "corpus.txt").read_text(encoding="utf-8")
    for name, corpus in (("a", text), ("moved", text), ("b", text[:len(text) // 2].rsplit("\n\n", 1)[0] + "\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "corpus.txt").write_text(corpus, encoding="utf-8")
    args = ["shard", "--out", tmp_path / "out", "--corpus", "g", "--train-shards", "2", "--test-shards", "1",
            "--workers", "1", "--json"]
    assert "warnings" not in ok(run_cli(*args, "--input", tmp_path / "a/corpus.txt"))
    assert "warnings" not in ok(run_cli(*args, "--input", tmp_path / "moved/corpus.txt"))
    summary = ok(run_cli(*args, "--input", tmp_path / "b/corpus.txt"))
    assert summary["warnings"] == [
        f"replacing the shards an earlier run wrote here from other inputs (inputs were {tmp_path}/moved/corpus.txt, "
        f"now {tmp_path}/b/corpus.txt): a shard tree holds the shards of one set of inputs; give another --out to "
        "keep both"]


def test_an_input_edited_in_place_to_the_same_size_is_sharded_again(tmp_path):
    corpus = make_corpus(tmp_path / "in", files=1)
    out = tmp_path / "out"
    args = ["shard", "--input", corpus, "--corpus", "demo", "--out", out, "--train-shards", "2", "--test-shards", "1"]
    ok(run_cli(*args))
    source = corpus / "part-0.txt"
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace("Document 0-0 ", "Document X-0 ", 1), encoding="utf-8")  # same size, other content
    assert "already complete" not in ok(run_cli(*args))
    assert "Document X-0 " in "".join(p.read_text(encoding="utf-8") for p in out.rglob("*.txt"))


def test_a_damaged_shard_manifest_is_named(tmp_path):
    corpus = make_corpus(tmp_path / "in", files=1)
    out = tmp_path / "out"
    args = ["shard", "--input", corpus, "--corpus", "demo", "--out", out, "--test-shards", "1"]
    ok(run_cli(*args))
    (out / "manifest.json").write_text('{"params": [], "files": {}}')
    line = one_line_error(run_cli(*args))
    assert line == (f'bertprep shard: error: {out / "manifest.json"}: damaged manifest ("params" is not a JSON '
                    "object); remove it to redo this stage from scratch")


def test_default_input_is_the_workdirs_formatted_corpus(tmp_path):
    formatted = tmp_path / "w/formatted/wikicorpus_en"
    formatted.mkdir(parents=True)
    docs = [{"id": str(i), "title": f"T{i}", "text": f"Article {i} starts here. It ends here.\nSecond paragraph {i}."}
            for i in range(20)]
    (formatted / "part.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    ok(run_cli("shard", "--workdir", tmp_path / "w", "--train-shards", "3", "--test-shards", "1"))
    out = tmp_path / "w/sharded/wikicorpus_en"
    assert (out / "training/wikicorpus_en_training_2.txt").is_file()
    assert (out / "test/wikicorpus_en_test_0.txt").is_file()
    line = one_line_error(run_cli("shard", "--workdir", tmp_path / "w", "--corpus", "books_wiki_en_corpus"), code=2)
    assert "no formatted corpus bookcorpus" in line


@pytest.mark.parametrize("text,expected", [
    ("Heading\nFirst sentence here. Second one here.", ["Heading", "First sentence here.", "Second one here."]),
    ("No final stop\nNext paragraph.", ["No final stop", "Next paragraph."]),
    ("  \n\n", []),
])
def test_paragraph_lines_never_merge(text, expected):
    assert document_sentences(text) == expected


# -- the Python API (issue 31): shard(...) without argv ---------------------------------------------------


def test_shard_function_writes_the_cli_bytes_and_summary(tmp_path):
    from bertprep.engines import EngineOptions
    from bertprep.errors import UsageError
    from bertprep.stages.shard import ShardOptions, shard

    corpus = make_corpus(tmp_path / "in")
    by_cli = ok(run_cli("shard", "--input", corpus, "--out", tmp_path / "cli", "--train-shards", "4", "--test-shards",
                        "2", "--balance", "count", "--workers", "1", "--json"))
    summary = shard(input=[corpus], out=tmp_path / "py", train_shards=4, test_shards=2, balance="count",
                    engine=EngineOptions(workers=1))
    assert shard_files(tmp_path / "py") == shard_files(tmp_path / "cli")
    unstable = ("out", "seconds", "mb_per_s")
    assert {k: v for k, v in summary.items() if k not in unstable} == {k: v for k, v in by_cli.items()
                                                                       if k not in unstable}
    assert summary["out"] == str(tmp_path / "py") and not summary.complete_before
    again = shard(ShardOptions(input=(str(corpus),), out=str(tmp_path / "py"), train_shards=4, test_shards=2,
                               balance="count"))
    assert again.complete_before and again["documents"] == summary["documents"]
    with pytest.raises(UsageError,
                       match=r"^ShardOptions.train_shards and ShardOptions.test_shards must be at least 1$"):
        ShardOptions(test_shards=0)
    with pytest.raises(TypeError, match="not both"):
        shard(ShardOptions(), corpus="x")


def test_files_of_an_input_directory_that_shard_does_not_read_are_named(tmp_path):
    """A notes.md beside the parts and a hidden `.draft.txt` were left out without a word, exit 0, where create,
    tokenize and dedup name theirs; they are named now (text_inputs.unread_files_warning), and still not read.
    Other dot-files (`.DS_Store`) are no input to name; a subdirectory's .txt is read, as before."""
    import bertprep
    from bertprep.engines import EngineOptions

    corpus = make_corpus(tmp_path / "in", files=1, docs_per_file=10)
    (corpus / "notes.md").write_text("Not a corpus. Only notes.\n")
    (corpus / "sub").mkdir()
    (corpus / "sub" / ".draft.txt").write_text("A draft never sharded.\n")
    (corpus / "sub" / "more.txt").write_text("One more document here.\n")
    (corpus / ".DS_Store").write_bytes(b"\0")
    expected = (f"not read: {corpus / 'notes.md'}, {corpus / 'sub' / '.draft.txt'} (an input directory's inputs are "
                "the .jsonl and .txt files under it; a hidden file (.name) never)")
    with pytest.warns(bertprep.BertprepWarning, match="^bertprep.shard: not read: "):
        summary = bertprep.shard(input=[str(corpus)], out=str(tmp_path / "out"), train_shards=1, test_shards=1,
                                 engine=EngineOptions(workers=1))
    assert summary["warnings"] == [expected] and summary["documents"]["training"] + summary["documents"]["test"] == 11
    assert not any(b"draft" in data for data in shard_files(tmp_path / "out").values())
    again = ok(run_cli("shard", "--input", corpus, "--out", tmp_path / "out", "--train-shards", "1", "--test-shards",
                       "1", "--workers", "1"))
    assert "is already complete" in again and f"  warning    {expected}\n" in again


# -- an --out that holds files shard did not write (nothing lost) ---------------------------------------------


def tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("earlier_run", [False, True])
def test_a_file_named_as_a_shard_that_no_manifest_lists_is_refused_not_deleted(tmp_path, earlier_run):
    """With no manifest, files named as this corpus's shards were removed as "an earlier run's": a user's own
    training/demo_training_5.txt went without a word. Without a manifest they cannot be told from a killed run's;
    beside one, the manifest does not list them. Either way: one line naming the file, exit 1, nothing changed."""
    corpus = make_corpus(tmp_path / "in", files=1)
    out = tmp_path / "out"
    args = ["shard", "--input", corpus, "--corpus", "demo", "--out", out, "--train-shards", "2", "--test-shards", "1"]
    if earlier_run:
        ok(run_cli(*args))
    mine = out / "training" / "demo_training_5.txt"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("my own notes\n", encoding="utf-8")
    before = tree(out)
    line = one_line_error(run_cli(*args, "--train-shards", "3"))
    assert line == (f"bertprep shard: error: {mine}: no manifest of bertprep lists it (a file of yours or of another "
                    "tool?): shard would overwrite or remove it; remove it, or choose another --out")
    assert tree(out) == before and sorted(p.name for p in out.iterdir()) == (
        ["manifest.json", "test", "training"] if earlier_run else ["training"])


def test_another_stages_manifest_in_out_is_refused_and_its_files_kept(tmp_path):
    """`--out` a folder of another stage: shard removed its manifest and, taking it for another --corpus's, every
    file it listed."""
    corpus = make_corpus(tmp_path / "in", files=1)
    out = tmp_path / "formatted"
    out.mkdir()
    (out / "part0.jsonl").write_text('{"title": "t", "text": "A document."}\n', encoding="utf-8")
    (out / "manifest.json").write_text(json.dumps({"stage": "format", "corpus": "other",
                                                   "files": {"part0.jsonl": {"bytes": 37}}}))
    before = tree(out)
    line = one_line_error(run_cli("shard", "--input", corpus, "--corpus", "demo", "--out", out))
    assert line == (f"bertprep shard: error: {out / 'manifest.json'}: a manifest of bertprep format, not of shard: "
                    "shard would remove the files it lists; choose another --out")
    assert tree(out) == before


def test_shards_asked_past_the_documents_are_never_named(tmp_path, monkeypatch):
    """The run's claim named every shard asked for, before the split's documents capped them: --train-shards 10**9
    on a corpus of two documents took minutes and gigabytes (10**7: 54 s, 2 GB) to write two shards."""
    from bertprep.engines import EngineOptions
    from bertprep.stages import shard as stage

    real, named = stage.shard_name, []
    monkeypatch.setattr(stage, "shard_name", lambda *args: named.append(args) or real(*args))
    corpus = make_corpus(tmp_path / "in", files=1, docs_per_file=10)
    summary = stage.shard(input=[corpus], corpus="demo", out=tmp_path / "out", train_shards=10 ** 6,
                          test_shards=10 ** 6, engine=EngineOptions(workers=1))
    assert summary["warnings"] == ["training: 9 document(s), so 9 shard(s) instead of the 1000000 of --train-shards",
                                   "test: 1 document(s), so 1 shard(s) instead of the 1000000 of --test-shards"]
    assert len(named) < 100


def test_a_run_that_failed_while_writing_is_rerun_over_its_own_shards(tmp_path, monkeypatch):
    """What a run leaves that stops in pass 2 (no manifest, a shard it wrote) is its own: the rerun, told so by
    the claim the run saved before it changed anything, replaces it, as a rerun over a finished run does. A run
    that fails in pass 1 leaves the earlier output as it was, manifest and all."""
    from bertprep.engines import EngineOptions
    from bertprep.errors import DataError
    from bertprep.stages import shard as stage

    corpus = make_corpus(tmp_path / "in", files=1)
    out = tmp_path / "out"
    fields = {"input": [corpus], "corpus": "demo", "out": out, "test_shards": 1, "engine": EngineOptions(workers=1)}
    stage.shard(train_shards=4, **fields)
    real, written = stage.write_shard, []

    def fails_on_the_second_shard(task):
        if written:
            raise DataError("stopped")
        written.append(task[0])
        return real(task)

    monkeypatch.setattr(stage, "write_shard", fails_on_the_second_shard)
    with pytest.raises(DataError, match="^stopped$"):
        stage.shard(train_shards=2, **fields)
    assert sorted(tree(out)) == [".partial/steps/shard-names.json", "training/demo_training_0.txt"]
    monkeypatch.undo()
    summary = stage.shard(train_shards=2, **fields)
    assert summary["spread"]["training"]["shards"] == 2 and not (out / ".partial").exists()
    assert sorted(tree(out)) == ["manifest.json", "test/demo_test_0.txt", "training/demo_training_0.txt",
                                 "training/demo_training_1.txt"]
    assert stage.shard(train_shards=2, **fields).complete_before

    (corpus / "part-1.jsonl").write_text('{"text": broken\n', encoding="utf-8")
    finished = tree(out)
    with pytest.raises(DataError, match="part-1.jsonl:1: not a JSON document line"):
        stage.shard(train_shards=4, **fields)
    assert tree(out) == finished


@pytest.mark.parametrize("made", [False, True])
def test_a_run_that_fails_leaves_no_folder_it_made(tmp_path, made):
    """A bad input found in pass 1 left a fresh --out (and its parents) behind empty, as if something had been
    written there (atomic.hold now removes the folders it made, where they are empty again); a user's stays."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p.jsonl").write_text('{"title": "a", "text": "One document."}\nnot json\n', encoding="utf-8")
    if made:
        (tmp_path / "out").mkdir()
    error = one_line_error(run_cli("shard", "--input", tmp_path / "in" / "p.jsonl", "--corpus", "c", "--out",
                                   tmp_path / "out" / "deep", "--quiet"))
    assert error.endswith("p.jsonl:2: not a JSON document line (Expecting value: line 1 column 1 (char 0))")
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["in", "out", "p.jsonl"] if made else ["in", "p.jsonl"])


def test_a_manifest_or_binary_file_given_as_input_is_refused(tmp_path):
    """`shard --input OUT/*` of a dedup output named OUT/manifest.json and OUT/pair_similarity.png with the
    corpora: both were sentence-split into training text (the PNG decoded with U+FFFD, a note --quiet hid),
    exit 0. A stage's manifest is a usage error, binary data vocab's error; nothing is written."""
    corpus = make_corpus(tmp_path / "in", files=1)
    dedup = tmp_path / "deduped"
    ok(run_cli("dedup", "--input", _jsonl(corpus, tmp_path), "--out", dedup,
               "--quiet", "--workers", "1"))
    argv = ("shard", "--corpus", "c", "--out", tmp_path / "out", "--quiet", "--workers", "1")
    error = one_line_error(run_cli(*argv, "--input", *sorted(dedup.iterdir())), 2)
    assert error == (f"bertprep shard: error: --input {dedup / 'manifest.json'}: a stage's manifest, not corpus "
                     "text: give the corpus directory or its .jsonl/.txt files")
    png = tmp_path / "pair_similarity.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + b"x" * 100)
    gz = tmp_path / "part.txt.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00" + b"x" * 100)
    late = tmp_path / "late.txt"  # a NUL past the 64 KiB read before the work
    late.write_bytes(b"A sentence of text.\n" * 5000 + b"x\0y.\n")
    for path, what in ((png, "a NUL byte at offset 8"), (gz, "a gzip file?"), (late, "a NUL byte")):
        error = one_line_error(run_cli(*argv, "--input", corpus / "part-0.txt", path))
        assert error.startswith(f"bertprep shard: error: {path}: binary data ({what}), expected UTF-8 text"), error
    assert not (tmp_path / "out").exists()


def test_a_json_lines_corpus_not_named_jsonl_is_refused(tmp_path):
    """`shard --input corpus.json --corpus c` (Megatron-LM's name for a JSON-lines corpus) read the file as text:
    each object's braces, keys and escapes were split into sentences of the shards, exit 0. Refused now as vocab
    refuses it, naming the line and the name it is read as JSON lines by; nothing is written."""
    corpus = tmp_path / "corpus.json"
    corpus.write_text('{"title": "a", "text": "One sentence. Another one."}\n\n{"title": "b", "text": "More."}\n')
    error = one_line_error(run_cli("shard", "--input", corpus, "--corpus", "c", "--out", tmp_path / "out",
                                   "--quiet", "--workers", "1"), 2)
    assert error == (f"bertprep shard: error: {corpus}:1: a JSON object, as a JSON-lines corpus holds (one document a "
                     "line), but only a .jsonl file is read as JSON lines: read as text, its braces and keys would be "
                     f"sentences of the shards; rename it {tmp_path / 'corpus.jsonl'}")
    assert not (tmp_path / "out").exists()


def test_a_vocab_in_an_input_directory_is_refused(tmp_path, golden_dir):
    """A vocab.txt kept beside the corpus in an --input directory was sharded as a document of its 30,522 tokens,
    one a sentence, exit 0. Refused now as vocab refuses it; nothing is written."""
    corpus = make_corpus(tmp_path / "in", files=1)
    (corpus / "vocab.txt").write_bytes((golden_dir / "vocab.txt").read_bytes())
    error = one_line_error(run_cli("shard", "--input", corpus, "--out", tmp_path / "out", "--quiet", "--workers", "1"),
                           2)
    assert error == (f"bertprep shard: error: {corpus / 'vocab.txt'}: a WordPiece vocab (a token a line, [CLS] [SEP] "
                     "[MASK] [UNK] among them), not corpus text: keep it out of the inputs (a pattern or a directory "
                     "matched it?)")
    assert not (tmp_path / "out").exists()


def test_a_utf16_input_is_named_as_utf16_text(tmp_path):
    """A corpus saved as UTF-16 (Notepad's "Unicode", a byte-order mark and a NUL after each ASCII letter) was
    refused as "binary data (a NUL byte at offset 3)", which left the user to guess: now named as UTF-16 text, with
    the conversion to do; nothing is written."""
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.txt").write_bytes("Hello world. A document.\n\nAnother one here.\n".encode("utf-16"))
    error = one_line_error(run_cli("shard", "--input", inp, "--out", tmp_path / "out", "--quiet", "--workers", "1"))
    assert error == (f"bertprep shard: error: {inp / 'a.txt'}: UTF-16 text (its byte-order mark FF FE), expected "
                     "UTF-8 text: convert it first (iconv -f UTF-16 -t UTF-8)")
    assert not (tmp_path / "out").exists()


def test_a_tokenize_output_given_as_input_is_refused(tmp_path):
    """`shard --input WORKDIR/tokenized` sentence-split the data-path.txt lists of the tokenize output under it
    (the prefixes they name) into a corpus, exit 0; its corpus directory was refused as "data-path.txt: not listed
    in manifest.json (a file of another run or corpus?): shard would read it …; remove it" (vocab's the same, naming
    shard), which said nothing of what it was."""
    corpus = make_corpus(tmp_path / "in" / "training", files=2)
    tokenized = tmp_path / "tokenized"
    ok(run_cli("tokenize", "--input", corpus.parent, "--vocab", SAMPLE_VOCAB, "--out", tokenized, "--quiet",
               "--workers", "1"))
    output = tokenized / "in"
    assert (output / "data-path.txt").is_file()
    argv = ("--out", tmp_path / "out", "--quiet")
    for stage, given in (("shard", tokenized), ("shard", output), ("shard", output / "data-path.txt"),
                         ("vocab", output)):
        extra = ("--corpus", "c", "--workers", "1") if stage == "shard" else ()
        error = one_line_error(run_cli(stage, "--input", given, *argv, *extra), 2)
        assert error == (f"bertprep {stage}: error: --input {given}: {output} is a `bertprep tokenize` output (token "
                         "ids and the --data-path lists naming them), not corpus text: give the text shards it was "
                         "tokenized from")
    assert not (tmp_path / "out").exists()


def test_validate_compare_of_two_shard_outputs_says_it_reads_none(tmp_path):
    """`validate A B --compare` of two shard outputs was "--compare: no record files of a common format to compare",
    as if one side were empty or of another format; it says that --compare reads no text shards, and what does."""
    corpus = make_corpus(tmp_path / "in", files=1)
    for name in ("a", "b"):
        ok(run_cli("shard", "--input", corpus, "--out", tmp_path / name, "--quiet", "--workers", "1"))
    a, b = tmp_path / "a", tmp_path / "b"
    error = one_line_error(run_cli("validate", a, b, "--compare", "--quiet"), 2)
    assert error == (f"bertprep validate: error: --compare: {a} and {b} hold text shards (`bertprep shard`), which "
                     "--compare does not read (it compares records and token sequences): `diff -r` compares their "
                     "bytes")


def _jsonl(text_corpus, tmp_path):
    """The documents of a text corpus as a .jsonl file (dedup's input)."""
    path = tmp_path / "c.jsonl"
    documents = (text_corpus / "part-0.txt").read_text(encoding="utf-8").split("\n\n")
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents if d.strip()), encoding="utf-8")
    return path


@pytest.mark.parametrize("stage", ["shard", "vocab"])
def test_a_given_input_file_is_asked_refuse_stream_once(tmp_path, monkeypatch, stage):
    """shard asked refuse_stream twice of an --input file: ahead of the --corpus question (resolve_inputs) and again
    in input_files, which vocab shares. One question per path now; vocab asks its own, as resolve_inputs does, and
    the lines and exit codes are as before (tests/test_tokenize.py's pipe and FIFO tests)."""
    from bertprep.stages import shard as shard_stage
    from bertprep.stages import vocab as vocab_stage

    corpus = tmp_path / "c.txt"
    corpus.write_text("One sentence.\nTwo.\n")
    asked = []
    monkeypatch.setattr(shard_stage, "refuse_stream", asked.append)
    monkeypatch.setattr(vocab_stage, "refuse_stream", asked.append, raising=False)  # the old vocab had none
    if stage == "shard":
        shard_stage.resolve_inputs(str(tmp_path), (str(corpus),), "c")
    else:
        vocab_stage.resolve_vocab_inputs(str(tmp_path), (str(corpus),), ())
    assert asked == [str(corpus)]
