"""`bertprep dedup`: planted exact and near duplicates found, distinct documents kept, the same bytes for any
worker count and engine, a killed run resumed, evaluation text found by --decontaminate, bad input refused."""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import distributed
import numpy as np
import pytest

import bertprep
from bertprep.errors import BertprepWarning, DataError, UsageError
from bertprep.folder import Folder
from bertprep.stages import dedup as dedup_module
from bertprep.stages.shard import shard
from dedup_corpus import chain_corpus, jaccard, peak_rss, planted_corpus, short_corpus, write_corpus
from test_create import with_default_sigint

pytestmark = pytest.mark.xdist_group("dask")


@pytest.fixture(scope="module")
def corpus(shared_dir, tmp_path_factory):
    return planted_corpus(tmp_path_factory.mktemp("corpus"), shared_dir / "fixtures" / "bench" / "wt2.txt")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as local_cluster:
        yield local_cluster


@pytest.fixture(scope="module")
def chain(shared_dir, tmp_path_factory):
    return chain_corpus(tmp_path_factory.mktemp("chain") / "chain", shared_dir / "fixtures" / "bench" / "wt2.txt")


def dedup_cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "bertprep", "dedup", *map(str, argv)], capture_output=True,
                          text=True, cwd=cwd)


def output_files(root):
    return {os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
            for d, _dirs, names in os.walk(root) for n in names if n.endswith(".jsonl")}


def removed_lines(manifest, corpus_name):
    return {e["line"]: e for e in manifest["removed"] if e["corpus"] == corpus_name}


def test_planted_duplicates_are_found_and_distinct_documents_kept(corpus, tmp_path):
    a, b, planted, b_texts = corpus
    summary = bertprep.dedup(input=(a, b), out=tmp_path / "out", engine=bertprep.EngineOptions(workers=1))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert not removed_lines(manifest, "a")  # the first corpus on the command line keeps its documents
    gone = removed_lines(manifest, "b")
    originals = [json.loads(line)["text"] for line in open(a / "part-0000.jsonl", encoding="utf-8")]
    near_pairs = found_near = 0
    for line, (kind, index, text) in enumerate(planted, 1):
        if kind == "exact":
            assert gone[line]["reason"] == "exact" and gone[line]["kept"] == {"corpus": "a", "part": "part-0000.jsonl",
                                                                                "line": index + 1}
        elif jaccard(originals[index], text) >= 0.8:
            near_pairs += 1
            if line in gone:
                found_near += 1
                assert gone[line]["reason"] == "near" and gone[line]["kept"]["line"] == index + 1
                assert gone[line]["estimate"] >= 0.8
    assert near_pairs >= 50 and found_near / near_pairs >= 0.95
    distinct = range(len(planted) + 1, len(b_texts) + 1)  # same-topic neighbours of a's documents
    assert not set(distinct) & set(gone)
    assert summary["exact"] == 20 and summary["kept"] == summary["documents"] - len(gone)
    # What it writes is a formatted corpus `shard` takes.
    sharded = shard(input=(tmp_path / "out" / "b",), out=tmp_path / "sharded", train_shards=2, test_shards=1)
    assert sum(sharded["documents"].values()) == len(b_texts) - len(gone)


def test_the_function_writes_what_the_command_writes(corpus, tmp_path):
    a, b, _planted, _texts = corpus
    run = dedup_cli("--input", a, b, "--out", tmp_path / "cli", "--workers", "1", "--json", "--quiet")
    assert run.returncode == 0, run.stderr
    summary = bertprep.dedup(bertprep.DedupOptions(input=(str(a), str(b)), out=str(tmp_path / "api"),
                                                   engine=bertprep.EngineOptions(workers=1)))
    assert output_files(tmp_path / "api") == output_files(tmp_path / "cli")
    printed = json.loads(run.stdout)
    assert {k: v for k, v in printed.items() if k != "out"} == {k: v for k, v in summary.fields.items() if k != "out"}
    again = dedup_cli("--input", a, b, "--out", tmp_path / "cli", "--workers", "1")  # not --quiet: its summary
    assert again.returncode == 0 and "already complete" in again.stdout


def test_same_bytes_for_any_worker_count_and_the_dask_engine(corpus, tmp_path, cluster):
    a, b, _planted, _texts = corpus
    runs = {"one": ("--workers", "1"), "two": ("--workers", "2"),
            "dask": ("--engine", "dask", "--scheduler", cluster.scheduler_address)}
    for name, flags in runs.items():
        run = dedup_cli("--input", a, b, "--out", tmp_path / name, "--quiet", *flags)
        assert run.returncode == 0, run.stderr
    expected = output_files(tmp_path / "one")
    assert len(expected) == 2
    assert output_files(tmp_path / "two") == expected and output_files(tmp_path / "dask") == expected
    manifests = [json.loads((tmp_path / n / "manifest.json").read_text()) for n in runs]
    assert all(m["removed"] == manifests[0]["removed"] for m in manifests)


def test_dry_run_reports_and_writes_nothing(corpus, tmp_path):
    a, b, _planted, _texts = corpus
    run = dedup_cli("--input", a, b, "--out", tmp_path / "out", "--dry-run", "--json", "--quiet", "--workers", "1")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["exact"] == 20 and not (tmp_path / "out").exists()


# A corpus of many parts, written one after another (one worker): a window to kill a run in while it writes
# them. That window is the parts' count (each takes about half a millisecond to write, however few of its
# documents are kept), not their documents, which only pass 1's fingerprinting pays for: the first part holds
# every text (the planted duplicates), the others the first few of them (exact copies, all removed). 40 copies
# of all 280 texts took 8 s of CPU a run, these 2.5 s, and their 80 parts keep the 40 copies' ~35 ms window.
PARTS, COPIED = 80, 5


def many_parts(directory, texts):
    big = write_corpus(directory, texts)
    lines = (big / "part-0000.jsonl").read_bytes().splitlines(keepends=True)
    for part in range(1, PARTS):
        (big / f"part-{part:04d}.jsonl").write_bytes(b"".join(lines[:COPIED]))
    return big


@pytest.mark.heavy
def test_a_killed_run_resumes_to_the_same_bytes_keeping_the_parts_it_wrote(corpus, tmp_path):
    a, _b, _planted, texts = corpus
    big = many_parts(tmp_path / "big", texts)
    argv = [sys.executable, "-m", "bertprep", "dedup", "--input", str(a), str(big), "--workers", "1", "--quiet"]
    clean = subprocess.run([*argv, "--out", str(tmp_path / "clean")], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "resumed"
    killed = subprocess.Popen([*argv, "--out", str(out)], start_new_session=True)
    deadline = time.monotonic() + 300
    while not list((out / "big").glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.001)  # the first of big's parts is written: kill it there
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert "writing" in json.loads((out / "manifest.json").read_text())  # killed while writing the parts
    written = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in out.glob("*/*.jsonl")}
    assert out / "big" / "part-0000.jsonl" in written and len(written) < PARTS + 1
    resumed = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert output_files(out) == output_files(tmp_path / "clean")
    assert {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in written} == written  # not rewritten
    final = json.loads((out / "manifest.json").read_text())
    assert "writing" not in final and len(final["files"]) == PARTS + 1


def _interrupt_when(argv, ready, deadline_s=300):
    """Run `argv` in its own process group; Ctrl-C it (the whole group, as a terminal does) once
    `ready()`; its exit code and stderr."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=with_default_sigint)
    deadline = time.monotonic() + deadline_s
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


@pytest.mark.heavy
def test_ctrl_c_ends_dedup_with_130_wherever_it_lands_and_the_rerun_finishes_it(corpus, tmp_path):
    """Ctrl-C during dedup exited 0 once in six tries: a run told to stop must never look finished."""
    a, _b, _planted, texts = corpus
    big = many_parts(tmp_path / "big", texts)
    inputs = {path: path.read_bytes() for path in [*a.glob("*"), *big.glob("*")]}
    argv = [sys.executable, "-m", "bertprep", "dedup", "--input", str(a), str(big), "--workers", "2", "--quiet"]
    clean = subprocess.run([*argv, "--out", str(tmp_path / "clean")], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "out"
    moments = {"fingerprinting": lambda: (out / ".partial").exists() or (tmp_path / ".partial").exists(),
               "writing": lambda: bool(list((out / "big").glob("*.jsonl")))}
    for moment, ready in moments.items():
        code, stderr = _interrupt_when([*argv, "--out", str(out)], ready)
        assert code == 130, (moment, code, stderr)
        assert stderr.rstrip().endswith("bertprep dedup: interrupted") and "Traceback" not in stderr, moment
        manifest = out / "manifest.json"
        assert not manifest.exists() or "writing" in json.loads(manifest.read_text()), moment
    assert {path: path.read_bytes() for path in inputs} == inputs
    resumed = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert output_files(out) == output_files(tmp_path / "clean")


def squad_file(path, contexts):
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": c, "qas": [{"id": str(i), "question": "what?", "answers": []}]} for i, c in enumerate(contexts)]}]}
    path.write_text(json.dumps(data))
    return path


def test_decontaminate_finds_squad_contexts_planted_in_training(corpus, tmp_path):
    a, _b, _planted, texts = corpus
    contexts = ["The quick committee of seven river pilots sailed north past the old lighthouse at dawn to meet "
                "the harbour master , who had waited three days .",
                "An entirely unrelated paragraph about nothing in the training text at all , long enough to hold "
                "several thirteen word windows of its own ."]
    training = write_corpus(tmp_path / "train", [texts[-1], texts[-2] + "\n" + contexts[0], texts[-3]])
    squad = squad_file(tmp_path / "dev-v1.1.json", contexts)
    report = dedup_cli("--input", a, training, "--out", tmp_path / "listed", "--decontaminate", squad,
                       "--report-only", "--json", "--quiet", "--workers", "1")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["evaluation"] == {"dev-v1.1.json": {"items": 2, "found_in_training": 1}}
    manifest = json.loads((tmp_path / "listed" / "manifest.json").read_text())
    assert [(e["corpus"], e["line"], e["reason"]) for e in manifest["removed"]] == [("train", 2, "contaminated")]
    assert (tmp_path / "listed" / "train" / "part-0000.jsonl").read_text().count("\n") == 3  # listed, kept
    removed = dedup_cli("--input", a, training, "--out", tmp_path / "removed", "--decontaminate", squad,
                        "--quiet", "--workers", "1")
    assert removed.returncode == 0, removed.stderr
    kept = (tmp_path / "removed" / "train" / "part-0000.jsonl").read_text()
    assert kept.count("\n") == 2 and "river pilots" not in kept


def never_kept_and_removed(summary, manifest, report_only):
    """The listing names as kept only documents it does not remove, and the counts are the listing's."""
    removed = {(e["corpus"], e["part"], e["line"]) for e in manifest["removed"]
               if e["reason"] != "contaminated" or not report_only}
    for entry in manifest["removed"]:
        kept = entry.get("kept")
        assert not kept or (kept["corpus"], kept["part"], kept["line"]) not in removed, entry
    for reason in ("exact", "near"):
        assert summary[reason] == manifest["corpora"]["t"][reason] == sum(e["reason"] == reason
                                                                          for e in manifest["removed"])
    # every document holding evaluation n-grams, a --report-only duplicate among them
    assert summary["contaminated"] == manifest["corpora"]["t"]["contaminated"] == sum("evaluation_sets" in e for e
                                                                                      in manifest["removed"])
    assert summary["kept"] == summary["documents"] - len(removed)


def test_no_duplicate_is_listed_against_a_removed_document(tmp_path):
    """A copy of a contaminated document was listed as an exact (or near) duplicate of it, named as kept where
    it was removed as contaminated; an exact copy of a near copy was listed against that near copy, removed too.
    Contaminated documents are listed as such (removed, unless --report-only), and each cluster keeps its first
    document that is not: 5 (no evaluation n-gram) keeps the cluster of 1, 6 is its exact copy."""
    words = [f"w{i}" for i in range(200)]
    text = " ".join(words)
    near = text.replace("w5 ", "zz ")  # without the evaluation item's 13-gram (w0 … w12)
    texts = [text, "a document of its own", text.upper(), "another one", near, near.upper(),
             near.replace("w150 ", "yy ")]
    training = write_corpus(tmp_path / "t", texts)
    evaluation = tmp_path / "eval.txt"
    evaluation.write_text(" ".join(words[:13]) + "\n")
    one = bertprep.EngineOptions(workers=1)
    summary = bertprep.dedup(input=(training,), out=tmp_path / "out", decontaminate=(evaluation,), engine=one)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    listed = {e["line"]: (e["reason"], e.get("kept", {}).get("line"), e.get("linked_by", {}).get("line"))
              for e in manifest["removed"]}
    assert listed == {1: ("contaminated", None, None), 3: ("contaminated", None, None), 6: ("exact", 5, None),
                      7: ("near", 5, 1)}, listed
    never_kept_and_removed(summary, manifest, report_only=False)
    kept = [json.loads(line)["text"] for line in open(tmp_path / "out" / "t" / "part-0000.jsonl", encoding="utf-8")]
    assert kept == [texts[1], texts[3], near]
    summary = bertprep.dedup(input=(training,), out=tmp_path / "listed", decontaminate=(evaluation,),
                             report_only=True, engine=one)
    manifest = json.loads((tmp_path / "listed" / "manifest.json").read_text())
    listed = {e["line"]: (e["reason"], e.get("kept", {}).get("line"), e.get("linked_by", {}).get("line"))
              for e in manifest["removed"]}
    assert listed == {1: ("contaminated", None, None), 3: ("exact", 1, None), 5: ("near", 1, None),
                      6: ("near", 1, 5), 7: ("near", 1, None)}, listed
    assert listed_estimate(manifest, 6) == listed_estimate(manifest, 5)  # the same words as 5
    never_kept_and_removed(summary, manifest, report_only=True)


def test_a_report_only_duplicate_holding_evaluation_text_is_reported_contaminated(tmp_path):
    """Under --report-only a duplicate holding evaluation n-grams is removed as the duplicate it is, and was listed
    as that alone: no `evaluation_sets`, left out of the contaminated counts (summary, --json, the manifest's)
    that a run without --report-only gives for the same documents. Its entry now carries the sets too, and the
    counts are of every document holding evaluation text; the rest of the listing and the output are as before."""
    words = [f"w{i}" for i in range(200)]
    text = " ".join(words)
    texts = [text, "a document of its own", text.upper(), "another one", text.replace("w150 ", "qq ")]
    training = write_corpus(tmp_path / "t", texts)
    evaluation = tmp_path / "eval.txt"
    evaluation.write_text(" ".join(words[:13]) + "\n")
    argv = ("--input", training, "--decontaminate", evaluation, "--quiet", "--workers", "1")
    removing = dedup_cli(*argv, "--out", tmp_path / "removed", "--json")
    assert removing.returncode == 0, removing.stderr
    assert json.loads(removing.stdout)["contaminated"] == 3
    run = dedup_cli(*argv, "--out", tmp_path / "listed", "--report-only", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    manifest = json.loads((tmp_path / "listed" / "manifest.json").read_text())
    listed = {e["line"]: (e["reason"], e.get("kept", {}).get("line"), e.get("evaluation_sets"))
              for e in manifest["removed"]}
    assert listed == {1: ("contaminated", None, ["eval.txt"]), 3: ("exact", 1, ["eval.txt"]),
                      5: ("near", 1, ["eval.txt"])}, listed
    assert summary["corpora"]["t"] == manifest["corpora"]["t"] == {"documents": 5, "kept": 3, "exact": 1, "near": 1,
                                                                   "contaminated": 3}
    assert (summary["contaminated"], summary["evaluation"]) == (3, {"eval.txt": {"items": 1, "found_in_training": 1}})
    never_kept_and_removed(summary, manifest, report_only=True)
    kept = [json.loads(line)["text"] for line in open(tmp_path / "listed" / "t" / "part-0000.jsonl", encoding="utf-8")]
    assert kept == texts[:2] + [texts[3]]  # the duplicates removed, the contaminated first document kept
    again = dedup_cli(*argv[:-3], "--out", tmp_path / "listed", "--report-only")  # the summary's line, as printed
    assert ["t", "5 documents, 3 kept (1 exact, 1 near, 3 contaminated)"] in [
        line.split(maxsplit=1) for line in again.stdout.splitlines()], again.stdout


def listed_estimate(manifest, line):
    return next(e["estimate"] for e in manifest["removed"] if e["line"] == line)


def test_a_changed_evaluation_file_is_decontaminated_against_again(corpus, tmp_path):
    """The evaluation files' sha256 are part of a run's settings: a rerun after the file changed (a fresh
    download, an edited .txt) said "already complete" and kept the old file's findings, exit 0."""
    a, _b, _planted, texts = corpus
    context = ("The quick committee of seven river pilots sailed north past the old lighthouse at dawn to meet "
               "the harbour master , who had waited three days .")
    training = write_corpus(tmp_path / "train", [texts[-1], texts[-2] + "\n" + context, texts[-3]])
    evaluation = tmp_path / "eval.txt"
    evaluation.write_text(context + "\n")
    argv = ("--input", a, training, "--out", tmp_path / "out", "--decontaminate", evaluation, "--json", "--quiet",
            "--workers", "1")
    first = dedup_cli(*argv)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["evaluation"] == {"eval.txt": {"items": 1, "found_in_training": 1}}
    evaluation.write_text("An entirely unrelated paragraph about nothing in the training text at all , long enough "
                          "to hold several thirteen word windows of its own .\n")
    again = dedup_cli(*argv)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["evaluation"] == {"eval.txt": {"items": 1, "found_in_training": 0}}
    assert (tmp_path / "out" / "train" / "part-0000.jsonl").read_text().count("\n") == 3  # nothing removed now
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["params"]["decontaminate_sha256"] == {"eval.txt": hashlib.sha256(evaluation.read_bytes())
                                                          .hexdigest()}


def test_evaluation_items_shorter_than_the_ngram_are_said_to_be_found_only_whole(corpus, tmp_path):
    """An item of fewer words than --decontaminate-ngram has no n-gram: quoted inside a longer training document
    it is not found. The run says so (stderr and the summary's warnings) instead of reporting it clean."""
    a, _b, _planted, texts = corpus
    short = "the seven river pilots sailed north at dawn"  # 8 words
    long = ("An entirely unrelated paragraph about nothing in the training text at all , long enough to hold "
            "several thirteen word windows of its own .")
    evaluation = tmp_path / "eval.txt"
    evaluation.write_text(f"{short}\n\n{long}\n")
    training = write_corpus(tmp_path / "train", [texts[-1], f"Then {short} to meet the harbour master .",
                                                  texts[-2]])
    run = dedup_cli("--input", a, training, "--out", tmp_path / "out", "--decontaminate", evaluation,
                    "--report-only", "--json", "--workers", "1")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["evaluation"] == {"eval.txt": {"items": 2, "found_in_training": 0}}
    warning = ("--decontaminate eval.txt: 1 of 2 items are shorter than --decontaminate-ngram 13 words: they are "
               "found only in a training document of exactly their words")
    assert [w for w in summary["warnings"] if w.startswith(warning)] and f"dedup: warning: {warning}" in run.stderr
    found = dedup_cli("--input", a, training, "--out", tmp_path / "out8", "--decontaminate", evaluation,
                      "--decontaminate-ngram", "8", "--report-only", "--json", "--quiet", "--workers", "1")
    summary = json.loads(found.stdout)
    assert summary["evaluation"] == {"eval.txt": {"items": 2, "found_in_training": 1}}
    assert "warnings" not in summary


def test_a_corpus_directory_without_a_manifest_is_refused(corpus, tmp_path):
    a, _b, _planted, _texts = corpus
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "part.jsonl").write_text((a / "part-0000.jsonl").read_text())
    run = dedup_cli("--input", a, bare, "--out", tmp_path / "out")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and f"{bare}: no manifest.json" in run.stderr
    assert not (tmp_path / "out").exists()


def tiny_corpus(directory, texts):
    """A formatted corpus directory of one part holding `texts`."""
    directory.mkdir(parents=True)
    (directory / "part0.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (directory / "manifest.json").write_text(json.dumps({"tool": "bertprep", "stage": "format", "files": {}}))
    return directory


def test_a_part_named_by_two_inputs_is_refused(tmp_path):
    """`--input c1 c1/part0.jsonl` read the part as two corpora, each the other's exact copy: both outputs were
    written empty, c1 reported "-7 kept", exit 0."""
    c1 = tiny_corpus(tmp_path / "c1", ["one text here", "one text here", "another text"])
    run = dedup_cli("--input", c1, c1 / "part0.jsonl", "--out", tmp_path / "out")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (f"bertprep dedup: error: --input {c1 / 'part0.jsonl'}: named twice (by --input {str(c1)!r} "
                          f"and by --input {str(c1 / 'part0.jsonl')!r}); give each input file once\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,expected", [
    ("nosuch", "{formatted}: no formatted corpus nosuch (run `bertprep download` first or give --input)"),
    ("../../c1", "--corpus '../../c1': use letters, digits, '_' and '-' only"),
])
def test_a_corpus_name_that_is_not_there_is_named_as_given(tmp_path, name, expected):
    """It was `--input WORKDIR/formatted/nosuch: not a formatted corpus directory or .jsonl file`, a flag the user
    never gave; a name that is a path read a corpus outside WORKDIR/formatted."""
    tiny_corpus(tmp_path / "work" / "formatted" / "real", ["one text here"])
    tiny_corpus(tmp_path / "c1", ["another text"])
    run = dedup_cli("--corpus", "real", name, "--workdir", tmp_path / "work", "--out", tmp_path / "out")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == f"bertprep dedup: error: {expected.format(formatted=tmp_path / 'work' / 'formatted')}\n"
    assert not (tmp_path / "out").exists()


def test_two_evaluation_sets_of_one_name_are_refused(tmp_path):
    """The report is keyed by the set's file name: of a/dev.txt and b/dev.txt it said "eval dev.txt 0 of 1 items
    found in training" (b's) while a document went as contaminated by a's."""
    text = "the first words of an evaluation item that the training corpus holds whole"
    c1 = tiny_corpus(tmp_path / "c1", [text, "another text"])
    for folder, item in (("a", text), ("b", "words that no training document holds at all, of any kind")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "dev.txt").write_text(item + "\n")
    run = dedup_cli("--input", c1, "--out", tmp_path / "out", "--decontaminate", tmp_path / "a" / "dev.txt",
                    tmp_path / "b" / "dev.txt")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == ("bertprep dedup: error: --decontaminate: two evaluation sets named 'dev.txt' (the report "
                          "names a set by its file name): give each once, or rename one\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fields,expected", [
    ({"ngram": 10 ** 20}, "DedupOptions.ngram must be at most 1,048,576 words, not 100000000000000000000"),
    ({"decontaminate_ngram": 1 << 21}, "DedupOptions.decontaminate_ngram must be at most 1,048,576 words, not 2097152"),
    ({"num_perm": 10 ** 9}, "DedupOptions.num_perm must be at most 16,384, not 1000000000"),
    ({"num_perm": 10 ** 20, "bands": 10 ** 20}, f"DedupOptions.num_perm must be at most 16,384, not {10 ** 20}"),
])
def test_a_huge_ngram_or_num_perm_is_refused(fields, expected):
    """--ngram 10**20 was the C extension's OverflowError, --num-perm 10**9 asked for gigabytes before the first
    document (the process killed, no message), 10**20 with --bands NumPy's ValueError."""
    with pytest.raises(UsageError) as raised:
        bertprep.dedup(input=("c.jsonl",), out="out", **fields)
    assert str(raised.value).startswith(expected)


def test_nothing_to_remove_is_a_usage_error(tmp_path, capsys):
    """--no-exact --no-near without --decontaminate copied the corpus as it was and exited 0."""
    from bertprep.cli import main
    assert main(["dedup", "--input", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "out"), "--no-exact",
                 "--no-near"]) == 2
    assert capsys.readouterr().err == ("bertprep dedup: error: --no-exact and --no-near without --decontaminate "
                                       "leave nothing to remove\n")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match=r"^DedupOptions\.exact=False and DedupOptions\.near=False without "
                                         r"DedupOptions\.decontaminate leave nothing to remove$"):
        bertprep.DedupOptions(input=("c.jsonl",), exact=False, near=False)  # a Python caller has no --no-near
    bertprep.DedupOptions(input=("c.jsonl",), exact=False, near=False, decontaminate=("squad",))  # that is work


def test_a_decontaminate_ngram_without_decontaminate_is_refused(tmp_path, capsys):
    """--decontaminate-ngram 8 without --decontaminate was taken without a word (exit 0), and the summary's
    "0 contaminated" read as a check that found nothing."""
    from bertprep.cli import main
    assert main(["dedup", "--input", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "out"),
                 "--decontaminate-ngram", "8"]) == 2
    assert capsys.readouterr().err == ("bertprep dedup: error: --decontaminate-ngram 8 needs --decontaminate (the "
                                       "evaluation sets whose n-grams it sets)\n")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match=r"^DedupOptions.decontaminate_ngram 8 needs DedupOptions.decontaminate "):
        bertprep.DedupOptions(input=("c.jsonl",), decontaminate_ngram=8)
    bertprep.DedupOptions(input=("c.jsonl",), decontaminate_ngram=13)  # the default cannot be told from none
    bertprep.DedupOptions(input=("c.jsonl",), decontaminate_ngram=8, decontaminate=("squad",))


def test_a_corpus_directory_without_a_jsonl_part_is_refused(tmp_path):
    """A corpus whose text is in .txt files was "0 documents, 0 kept", an empty corpus written, exit 0."""
    corpus = tiny_corpus(tmp_path / "c1", [])
    (corpus / "part0.jsonl").rename(corpus / "part0.txt")
    run = dedup_cli("--input", corpus, "--out", tmp_path / "out")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (f"bertprep dedup: error: {corpus}: no .jsonl part in it: not a formatted corpus (expected "
                          "the directory `bertprep download` writes)\n")
    assert not (tmp_path / "out").exists()


ONE_WORKER = bertprep.EngineOptions(workers=1)


def test_a_corpus_directorys_files_that_are_no_part_are_said(tmp_path, capsys):
    """A .txt beside a corpus's .jsonl parts (its text, notes) was left out without a word; tokenize and create
    name the files of an input directory they do not read, and so does dedup now (a warning)."""
    corpus = tiny_corpus(tmp_path / "c1", ["one text here", "another text there"])
    (corpus / "more.txt").write_text("a document a user meant to include\n")
    (corpus / "sub").mkdir()
    (corpus / "sub" / "part1.jsonl").write_text(json.dumps({"text": "a third text"}) + "\n")  # read: no warning
    with pytest.warns(BertprepWarning, match="^bertprep.dedup: not read: "):
        summary = bertprep.dedup(input=corpus, out=tmp_path / "out", engine=ONE_WORKER, quiet=False)
    warning = f"not read: {corpus / 'more.txt'} (a corpus directory's documents are the *.jsonl parts under it)"
    assert summary["warnings"] == [warning]
    assert "warning" not in capsys.readouterr().err  # once, as the BertprepWarning (the command prints the line)
    clean = bertprep.dedup(input=tiny_corpus(tmp_path / "c2", ["one text here"]), out=tmp_path / "out2",
                           engine=ONE_WORKER)
    assert "warnings" not in clean


def test_an_output_directory_of_another_stage_is_refused(tmp_path):
    """`--out` a shard output: its shards were removed as "files of an earlier run" and its manifest replaced."""
    c1 = tiny_corpus(tmp_path / "c1", ["one text here"])
    out = tmp_path / "sharded"
    (out / "training").mkdir(parents=True)
    (out / "training" / "c_training_0.txt").write_text("A sentence.\n")
    manifest = json.dumps({"tool": "bertprep", "stage": "shard", "files": {"training/c_training_0.txt": {}}})
    (out / "manifest.json").write_text(manifest)
    run = dedup_cli("--input", c1, "--out", out)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (f"bertprep dedup: error: {out / 'manifest.json'}: a manifest of bertprep shard, not of "
                          "dedup: dedup would replace it and remove the files it lists; choose another --out\n")
    assert (out / "training" / "c_training_0.txt").read_text() == "A sentence.\n"
    assert (out / "manifest.json").read_text() == manifest


def test_evaluation_sets_are_compared_with_out_as_what_is_read(tmp_path, monkeypatch):
    """squad was compared with --out as the path ./squad (`--out .` "held the input squad", WORKDIR/download not
    at all), and an empty path as the current directory (`--out deduped` "is inside the input ")."""
    text = "the first words of an evaluation item that the training corpus holds whole"
    c1 = tiny_corpus(tmp_path / "c1", [text])
    (tmp_path / "work" / "download" / "squad").mkdir(parents=True)
    (tmp_path / "work" / "download" / "squad" / "dev-v1.1.json").write_text(
        json.dumps({"data": [{"paragraphs": [{"context": text}]}]}))
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    fields = {"input": (str(c1),), "decontaminate": ("squad",), "workdir": str(tmp_path / "work"), "dry_run": True}
    assert bertprep.dedup(**fields, out=".")["contaminated"] == 1
    with pytest.raises(UsageError, match=r"^DedupOptions.out .*/work/download holds the input .*/download/squad: "):
        bertprep.dedup(**fields, out=str(tmp_path / "work" / "download"))
    with pytest.raises(UsageError, match=r"^DedupOptions.decontaminate: an empty path names no file or directory$"):
        bertprep.dedup(**dict(fields, decontaminate=("",)), out="deduped")


def test_an_input_whose_name_is_no_corpus_name_is_named_as_the_input(tmp_path):
    """`--input wiki.v2.jsonl` said `--corpus 'wiki.v2': use letters, ...`, a flag the user never gave."""
    part = tmp_path / "wiki.v2.jsonl"
    part.write_text(json.dumps({"text": "one text here"}) + "\n")
    run = dedup_cli("--input", part, "--out", tmp_path / "out")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (f"bertprep dedup: error: --input {part}: its corpus name 'wiki.v2' (its folder under "
                          "--out) may use letters, digits, '_' and '-' only: rename it\n")


def test_an_out_that_is_a_file_is_a_usage_error(tmp_path):
    c1 = tiny_corpus(tmp_path / "c1", ["one text here"])
    (tmp_path / "out.txt").write_text("mine\n")
    run = dedup_cli("--input", c1, "--out", tmp_path / "out.txt")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (f"bertprep dedup: error: --out {tmp_path / 'out.txt'}: is a file; give the directory to "
                          "write the corpora to\n")
    assert (tmp_path / "out.txt").read_text() == "mine\n"


def test_an_out_that_is_a_file_is_named_as_given(tmp_path):
    """`--out out.txt` (relative, a file) was named by its absolute path, `--out /tmp/…/out.txt: is a file; …`,
    where every other stage's output line shows the path as the user gave it."""
    c1 = tiny_corpus(tmp_path / "c1", ["one text here"])
    (tmp_path / "out.txt").write_text("mine\n")
    run = dedup_cli("--input", "c1", "--out", "out.txt", cwd=tmp_path)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == "bertprep dedup: error: --out out.txt: is a file; give the directory to write the corpora to\n"
    assert (tmp_path / "out.txt").read_text() == "mine\n" and (c1 / "part0.jsonl").exists()


def test_a_lone_surrogate_in_a_document_is_one_line_naming_it(tmp_path):
    """JSON's \\ud800 escape is half of a UTF-16 pair, which UTF-8 cannot encode: a UnicodeEncodeError traceback
    from the exact hash (and from shard and vocab, which read the part alike). A whole pair is its character."""
    c1 = tiny_corpus(tmp_path / "c1", ["a smile \U0001F600 here"])
    with open(c1 / "part0.jsonl", "a") as part:
        part.write('{"text": "hello \\ud800 world"}\n')
    run = dedup_cli("--input", c1, "--out", tmp_path / "out")
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr == (f'bertprep dedup: error: {c1 / "part0.jsonl"}:2: "text" holds a lone UTF-16 surrogate '
                          "(\\ud800 at character 6), no character: expected text that UTF-8 can encode\n")
    assert output_files(tmp_path / "out") == {}


def test_a_squad_file_saved_with_a_byte_order_mark_is_decontaminated_against(tmp_path):
    """A SQuAD dev file saved with a UTF-8 byte-order mark (Notepad, PowerShell) was refused: `expected SQuAD JSON
    (data[].paragraphs[].context), not this (JSONDecodeError: Unexpected UTF-8 BOM (decode using utf-8-sig) …)`."""
    context = "the first words of an evaluation item that the training corpus holds whole, as it stands"
    training = tiny_corpus(tmp_path / "c1", [context, "another text"])
    evaluation = squad_file(tmp_path / "dev-v1.1.json", [context])
    evaluation.write_bytes(b"\xef\xbb\xbf" + evaluation.read_bytes())
    summary = bertprep.dedup(input=(training,), out=tmp_path / "out", decontaminate=(evaluation,), dry_run=True,
                             engine=bertprep.EngineOptions(workers=1))
    assert summary["evaluation"] == {"dev-v1.1.json": {"items": 1, "found_in_training": 1}}


def test_a_directory_or_a_misspelt_set_name_to_decontaminate_against_says_what_is_taken(tmp_path):
    """`--decontaminate evaluation/` (a directory of dev files) and `--decontaminate SQuAD` were both `not squad, glue
    or a file`: no word that a directory is not read, nor where squad is read from, nor that SQuAD is no name."""
    c1 = tiny_corpus(tmp_path / "c1", ["one text here"])
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation" / "dev.txt").write_text("some evaluation text\n")
    files = "by path (SQuAD .json, GLUE .tsv or .txt), or"
    for name, expected in (
            (tmp_path / "evaluation", f"a directory; give the evaluation files in it {files} squad or glue for the "
                                      "dev/test files of WORKDIR/download/squad or glue"),
            ("SQuAD", f"no such file; give evaluation files {files} squad (lower-case, alone) for the dev/test files "
                      "of WORKDIR/download/squad")):
        run = dedup_cli("--input", c1, "--out", tmp_path / "out", "--decontaminate", name, cwd=tmp_path)
        assert (run.returncode, run.stdout) == (2, "")
        assert run.stderr == f"bertprep dedup: error: --decontaminate {name}: {expected}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,content,expected", [
    ("dev.json", '{"questions": []}', "expected SQuAD JSON"),
    ("dev.csv", "a,b\n", "expected a SQuAD .json, GLUE .tsv or .txt evaluation file, not .csv"),
    ("dev.txt", b"\xff\xfe binary", "found bytes that are not UTF-8"),
])
def test_an_evaluation_file_that_is_not_squad_glue_or_text_is_refused(corpus, tmp_path, name, content, expected):
    a, _b, _planted, _texts = corpus
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    run = dedup_cli("--input", a, "--out", tmp_path / "out", "--decontaminate", path)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and str(path) in run.stderr and expected in run.stderr
    assert not (tmp_path / "out").exists()


def test_decontaminate_squad_and_glue_reads_the_dev_files_of_the_work_directory(corpus, tmp_path):
    a, _b, _planted, texts = corpus
    glue_sentence = ("the senate voted late on tuesday to extend the emergency water rationing programme for "
                     "another six months")
    squad_context = ("Normans were the people who in the 10th and 11th centuries gave their name to Normandy , "
                     "a region in France .")
    workdir = tmp_path / "work"
    squad = workdir / "download" / "squad" / "v1.1"
    squad.mkdir(parents=True)
    squad_file(squad / "dev-v1.1.json", [squad_context])
    squad_file(squad / "train-v1.1.json", [texts[-1]])  # training text, not evaluation text
    (workdir / "download" / "glue" / "MRPC").mkdir(parents=True)
    (workdir / "download" / "glue" / "MRPC" / "dev.tsv").write_text(
        f"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t11\t12\t{glue_sentence}\tno such sentence here\n")
    training = write_corpus(tmp_path / "train", [texts[-1], glue_sentence.upper() + " !", texts[-2],
                                                  "Intro .\n" + squad_context])
    run = dedup_cli("--workdir", workdir, "--input", a, training, "--out", tmp_path / "out",
                    "--decontaminate", "squad", "glue", "--json", "--quiet", "--workers", "1")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["evaluation"] == {"squad/v1.1/dev-v1.1.json": {"items": 1, "found_in_training": 1},
                                     "glue/MRPC/dev.tsv": {"items": 1, "found_in_training": 1}}
    assert summary["corpora"]["train"] == {"documents": 4, "kept": 2, "exact": 0, "near": 0, "contaminated": 2}


def test_a_downloaded_evaluation_file_without_text_is_refused(tmp_path):
    """A dev file of the glue download holding a header alone (a download cut short) was checked against as
    "eval glue/MRPC/dev.tsv  0 of 0 items found in training", exit 0, what a clean corpus reads; a file given by
    path was refused so already. Now refused too, naming the file, before anything is written."""
    workdir = tmp_path / "work"
    (workdir / "download" / "glue" / "MRPC").mkdir(parents=True)
    dev = workdir / "download" / "glue" / "MRPC" / "dev.tsv"
    dev.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    training = write_corpus(tmp_path / "train", ["one document of a few words", "another document of words"])
    run = dedup_cli("--workdir", workdir, "--input", training, "--out", tmp_path / "out", "--decontaminate", "glue")
    assert run.returncode == 1, run.stderr
    assert run.stderr == (f"bertprep dedup: error: --decontaminate glue: {dev}: no evaluation text in it (empty, "
                          "blank, or no text field): run `bertprep download glue` again, or give its other files by "
                          "path\n")
    assert not (tmp_path / "out").exists()


# -- the decision in steps (issue 42) ----------------------------------------------------

# What the in-memory decision (bertprep before issue 42: one process over every document's arrays) removed and
# wrote on these corpora: its manifest's listing and candidate pair count, and the sha256 of each part written.
IN_MEMORY = json.loads((Path(__file__).parent / "data" / "dedup_in_memory_decisions.json").read_text())
@pytest.mark.parametrize("argv,field,message", [
    (["--threshold", "0.6"], {"threshold": 0.6}, "--threshold 0.6"),
    (["--bands", "4"], {"bands": 4}, "--bands 4"),
    (["--ngram", "3"], {"ngram": 3}, "--ngram 3"),
    (["--num-perm", "64"], {"num_perm": 64}, "--num-perm 64"),
])
def test_a_near_duplicate_setting_with_no_near_is_refused(tmp_path, capsys, argv, field, message):
    """--no-near --threshold 0.6 (or --bands, --ngram, --num-perm) was taken without a word (exit 0): exact
    deduplication only, the setting changing nothing."""
    from bertprep.cli import main
    assert main(["dedup", "--input", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "out"), "--no-near",
                 *argv]) == 2
    assert capsys.readouterr().err == (f"bertprep dedup: error: {message} has no effect with --no-near (it sets how "
                                       "near duplicates are found)\n")
    assert not (tmp_path / "out").exists()
    python_name = message.replace("--", "DedupOptions.").replace("-", "_")
    with pytest.raises(UsageError, match=rf"^{python_name} has no effect with DedupOptions\.near=False "):
        bertprep.DedupOptions(input=("c.jsonl",), near=False, **field)
    bertprep.DedupOptions(input=("c.jsonl",), near=False, threshold=0.8, ngram=5, num_perm=128)  # the defaults
    bertprep.DedupOptions(input=("c.jsonl",), **field)  # with the near-duplicate search: what it sets


VARIANTS = {"default": {}, "no-exact": {"exact": False}, "t0.6": {"threshold": 0.6}, "chain": {"threshold": 0.75}}


def written(out):
    """{relative path: bytes} of the parts and the plot under `out`."""
    return {os.path.relpath(os.path.join(d, n), out): open(os.path.join(d, n), "rb").read()
            for d, _dirs, names in os.walk(out) for n in names if n.endswith((".jsonl", ".png"))}


def run_variant(corpus, chain, out, variant, **flags):
    inputs = (chain,) if variant == "chain" else corpus[:2]
    bertprep.dedup(input=inputs, out=out, **VARIANTS[variant], **flags)
    manifest = json.loads((out / "manifest.json").read_text())
    expected = IN_MEMORY[variant]
    assert manifest["removed"] == expected["removed"] and manifest["candidate_pairs"] == expected["candidate_pairs"]
    assert {name: hashlib.sha256(data).hexdigest() for name, data in written(out).items()
            if name.endswith(".jsonl")} == expected["files"]
    assert not (out / ".partial").exists()  # the steps' files go with a complete output
    return written(out)


@pytest.mark.filterwarnings("ignore:.*is less than a chunk of 32 documents needs")  # small chunks on purpose
def test_the_steps_decide_and_write_what_the_in_memory_decision_did(corpus, chain, tmp_path, cluster):
    """Exact and near duplicates, clusters linked through removed documents, any --memory (16K: chunks of 32
    documents, blocks of 8 rows merged from some 28 runs), one or two workers, or Dask: the same listing,
    candidate pairs and bytes (the plot's too) as deciding in one process over every document's arrays."""
    one = bertprep.EngineOptions(workers=1)
    for variant in VARIANTS:
        first = run_variant(corpus, chain, tmp_path / variant, variant, engine=one)
        assert "pair_similarity.png" in first
        if variant in ("default", "chain"):
            engines = {"two": bertprep.EngineOptions(workers=2),
                       "dask": bertprep.EngineOptions(engine="dask", scheduler=cluster.scheduler_address)}
            for name, engine in engines.items():
                again = run_variant(corpus, chain, tmp_path / f"{variant}-16K-{name}", variant, engine=engine,
                                    memory="16K")
                assert again == first, (variant, name)


def test_merged_sorted_runs_are_the_sort_of_all_their_rows(tmp_path):
    """Runs read a few rows at a time, keys repeated within and across runs and blocks: batches in (key,
    document) order whose keys never continue in the next batch."""
    rng = np.random.default_rng(0)
    folder, runs, everything, first = Folder(str(tmp_path)), [], [], 0
    for index, size in enumerate([0, 1, 5, 40, 97, 300]):
        keys = np.sort(rng.integers(0, 60, size).astype(np.uint64) * np.uint64(2**58))  # the top bits, equal often
        docs = rng.permutation(size)
        order = np.lexsort((docs, keys))
        dedup_module.write_arrays(folder, f"run{index}", {"keys": keys[order], "docs": docs[order]})
        runs.append(dedup_module._Run(dedup_module.Arrays(folder, f"run{index}"), "keys", "docs", first, 3))
        everything.append((keys[order], docs[order] + first))
        first += size
    batches = list(dedup_module.merged(runs))
    keys, docs = (np.concatenate(side) for side in zip(*everything))
    order = np.lexsort((docs, keys))
    assert np.array_equal(np.concatenate([k for k, _d in batches]), keys[order])
    assert np.array_equal(np.concatenate([d for _k, d in batches]), docs[order])
    assert len(batches) > 10 and all(a[-1] < b[0] for (a, _), (b, _) in zip(batches, batches[1:]) if len(a) and len(b))


@pytest.mark.filterwarnings("ignore:.*is less than a chunk of 32 documents needs")  # small chunks on purpose
def test_a_run_killed_between_steps_redoes_only_the_unfinished_ones(corpus, chain, tmp_path, monkeypatch):
    def killed(*_args):
        raise DataError("killed")

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(dedup_module, "decide_step", killed)  # pass 1, the exact copies and every band are done
        with pytest.raises(DataError, match="killed"):
            bertprep.dedup(input=corpus[:2], out=out, memory="64K", engine=bertprep.EngineOptions(workers=1))
    steps = out / ".partial" / "steps"
    assert (steps / "exact").is_file() and len(list((steps / "bands").iterdir())) == bertprep.DedupOptions(
    ).band_rows()[0] and len(list((steps / "fingerprints").glob("*.json"))) == 2
    with monkeypatch.context() as patch:
        for name in ("fingerprint", "band_keys"):  # what pass 1 and the bands compute
            patch.setattr(dedup_module, name, killed)
        with pytest.raises(DataError, match="killed"):  # other settings: the killed run's steps are not theirs
            bertprep.dedup(input=corpus[:2], out=out, threshold=0.6, engine=bertprep.EngineOptions(workers=1))
    with monkeypatch.context() as patch:
        patch.setattr(dedup_module, "decide_step", killed)
        with pytest.raises(DataError, match="killed"):
            bertprep.dedup(input=corpus[:2], out=out, memory="64K", engine=bertprep.EngineOptions(workers=1))
    with monkeypatch.context() as patch:
        for name in ("fingerprint", "band_keys"):
            patch.setattr(dedup_module, name, killed)
        run_variant(corpus, chain, out, "default", memory="64K", engine=bertprep.EngineOptions(workers=1))


@pytest.mark.filterwarnings("ignore:.*is less than a chunk of 32 documents needs")  # small chunks on purpose
def test_a_resumed_runs_progress_counts_only_the_parts_it_fingerprints(corpus, tmp_path, monkeypatch, capsys):
    """A rerun after a kill in pass 1 counted the parts the killed run had fingerprinted (their markers found) as
    done now: its progress showed their documents and bytes, and a rate, it had not read. They are where the
    progress starts; the summary's counts are the same."""
    def killed(*_args):
        raise DataError("killed")

    out, one = tmp_path / "out", bertprep.EngineOptions(workers=1)
    with monkeypatch.context() as patch:
        patch.setattr(dedup_module, "decide_step", killed)
        with pytest.raises(DataError, match="killed"):
            bertprep.dedup(input=corpus[:2], out=out, memory="64K", engine=one)
    (out / ".partial" / "steps" / "fingerprints" / "00001.json").unlink()  # killed before the second part's marker
    capsys.readouterr()
    summary = bertprep.dedup(input=corpus[:2], out=out, memory="64K", engine=one, quiet=False)
    line = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dedup: ")][-1]
    (part,) = corpus[1].glob("*.jsonl")  # the second input's one part, fingerprinted now
    second = summary["corpora"][corpus[1].name]["documents"]
    assert line.startswith(f"dedup: 2/2 parts, {dedup_module.human_bytes(part.stat().st_size)} ("), line
    assert f", {second:,} documents (" in line, line
    clean = bertprep.dedup(input=corpus[:2], out=tmp_path / "clean", memory="64K", engine=one)
    assert {k: v for k, v in summary.items() if k != "out"} == {k: v for k, v in clean.items() if k != "out"}


@pytest.mark.parametrize("num_perm", [16, 128])
def test_minhashes_of_many_documents_at_once_are_datasketchs(num_perm):
    """No shingle, one, many, and one document of more shingles than a pass permutes at a time."""
    import datasketch
    import xxhash

    rng = np.random.default_rng(num_perm)
    documents = [[], [b"one"], *([str(w).encode() for w in rng.integers(0, 10**9, size)] for size in (3, 40, 20000))]
    hashes = [np.array([xxhash.xxh32_intdigest(s) for s in shingles], np.uint32) for shingles in documents]
    got = dedup_module.minhashes(np.concatenate(hashes), [len(h) for h in hashes], num_perm)
    for shingles, values in zip(documents, got):
        expected = datasketch.MinHash(num_perm=num_perm, seed=dedup_module.MINHASH_SEED,
                                      hashfunc=xxhash.xxh32_intdigest)
        expected.update_batch(shingles)
        assert np.array_equal(values, expected.hashvalues.astype(np.uint32))


@pytest.mark.parametrize("n", [1, 5, 13])
def test_the_native_shingle_hashes_are_their_python_twins(n):
    """bertprep._native.ngram_xxh32 and ngram_hashes_python: no word, fewer words than n, many; words of 1-4 byte
    UTF-8 characters, short and past XXH32's 16-byte stripes; then a word that is not a str, and n < 1."""
    native = pytest.importorskip("bertprep._native")
    rng = np.random.default_rng(n)
    letters = list("abz09éß漢字🙂")
    for count in [0, 1, n - 1, n, n + 1, 300]:
        words = ["".join(rng.choice(letters, rng.integers(1, 30))) for _ in range(max(count, 0))]
        got = dedup_module.ngram_hashes(words, n, bits=32)
        assert got.dtype == np.uint32 and np.array_equal(got, dedup_module.ngram_hashes_python(words, n, bits=32))
    assert dedup_module._native_ngram_xxh32 is native.ngram_xxh32
    with pytest.raises(TypeError, match=r"ngram_xxh32: words\[1\] is bytes, not str"):
        native.ngram_xxh32(["a", b"b"], n)
    with pytest.raises(ValueError, match="n must be >= 1"):
        native.ngram_xxh32(["a"], 0)


@pytest.mark.parametrize("num_perm", [1, 7, 128])
def test_the_native_minhash_gives_its_numpy_twins_values(num_perm):
    """bertprep._native's loop and minhashes_numpy, on documents of no shingle, one, and many (more than a NumPy
    pass permutes at a time), hashes over the whole uint32 range; then the C entry point's argument checks."""
    native = pytest.importorskip("bertprep._native")
    rng = np.random.default_rng(num_perm)
    counts = np.array([0, 1, 0, 5, 40, 20000, 3, 0], np.int64)
    shingles = rng.integers(0, 2**32, int(counts.sum()), dtype=np.uint32)
    twin = dedup_module.minhashes_numpy(shingles, counts, num_perm)
    got = dedup_module.minhashes(shingles, counts, num_perm)
    assert dedup_module._native_minhash is native.minhash and got.dtype == np.uint32
    assert np.array_equal(got, twin) and (got[counts == 0] == dedup_module.EMPTY_MINHASH).all()
    a, b = dedup_module._affine32(num_perm)
    out = np.empty((len(counts), num_perm), np.uint32)
    for bad in [(shingles, counts - 1, a, b, out), (shingles[1:], counts, a, b, out), (shingles, counts, a, b[:0], out),
                (shingles, counts, a, b, out[1:]), (shingles, counts, a[:0], b[:0], out[:, :0])]:
        with pytest.raises(ValueError, match="minhash: need counts >= 0 that sum to len"):
            native.minhash(*bad)
    with pytest.raises(TypeError, match="counts: wrong array type"):
        native.minhash(shingles, counts.astype(np.int32), a, b, out)
    with pytest.raises(BufferError):
        native.minhash(shingles, counts, a, b, out.tobytes())  # not writable


@pytest.mark.parametrize("num_perm", [3, 128])
def test_the_permutations_are_datasketchs(num_perm):
    """Its parameters drawn as datasketch draws them, bit for bit, and a MinHash of no shingle its empty value."""
    import datasketch
    from datasketch.minhash import _fmix

    permute, empty = dedup_module._permutation(num_perm)
    drawn = datasketch.MinHash(num_perm=num_perm, seed=dedup_module.MINHASH_SEED)
    hashes = np.random.default_rng(0).integers(0, 2**32, 1000, dtype=np.uint32)
    a, b = drawn.permutations
    got = permute(hashes)
    assert got.dtype == np.uint32 and np.array_equal(got, _fmix(hashes, 32)[:, None] * a + b)
    assert empty == drawn.hashvalues[0] and empty.dtype == drawn.hashvalues.dtype == np.uint32


# The bands datasketch's MinHashLSH picks, computed by datasketch (scipy's quad) in this test only. Every num_perm
# 2-512 at the thresholds 0.05, 0.1, ..., 1 agreed once (docs/benchmarks.md, 13 minutes); here every num_perm to 32
# and some to 512, densely near 0.8 (the default), in about a second (datasketch's quad is the cost: every num_perm
# to 64 and six to 256 took 5 s of the suite).
BAND_THRESHOLDS = [round(0.05 * i, 2) for i in range(1, 21)] + [0.75, 0.78, 0.79, 0.81, 0.82, 0.85, 0.9, 0.95]
BAND_CASES = [(n, t) for n in [*range(2, 33), 48, 64, 128] for t in BAND_THRESHOLDS] + \
    [(n, t) for n in (127, 129, 256, 511, 512) for t in (0.5, 0.8)]


def test_the_default_bands_are_datasketchs_optimum():
    from datasketch.lsh import _optimal_param

    differ = [(num_perm, threshold) for num_perm, threshold in BAND_CASES
              if dedup_module.optimal_bands(threshold, num_perm) != _optimal_param(threshold, num_perm, 0.5, 0.5)]
    assert differ == []


def test_the_band_areas_closed_form_is_scipys_incomplete_beta():
    """optimal_bands takes each pair's areas from the regularized incomplete beta function, computed without
    scipy (the quadrature before it took minutes at --num-perm 16384): it must be scipy's over the whole range
    the bands reach, a = 1/r for r up to 16,384, b = bands + 1 up to 16,385, x = t^r down to underflow."""
    from scipy.special import betainc

    rows = np.array([1, 2, 3, 7, 20, 30, 128, 1000, 16384], np.float64)
    bands = np.array([1, 2, 9, 19, 20, 89, 546, 5461, 16384], np.float64)
    r, b, t = (grid.ravel() for grid in np.meshgrid(rows, bands, [0.0, 1e-9, 0.05, 0.5, 0.8, 0.95, 0.999999]))
    x = t ** r
    got = dedup_module._regularized_incomplete_beta(1 / r, b + 1, x)
    assert np.allclose(got, betainc(1 / r, b + 1, x), rtol=1e-13, atol=1e-16)


def test_deduplicating_imports_neither_datasketch_nor_scipy_nor_matplotlib(corpus, tmp_path):
    """datasketch (it pulls scipy in) and matplotlib cost a process 40-60 MiB each: what dedup needed of datasketch
    is in the module, and the plot is drawn by a child interpreter."""
    a, b, _planted, _texts = corpus
    code = ("import sys, bertprep; bertprep.dedup(input=sys.argv[1:3], out=sys.argv[3], "
            "engine=bertprep.EngineOptions(workers=1)); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'datasketch', 'scipy', 'matplotlib'}))")
    run = subprocess.run([sys.executable, "-c", code, str(a), str(b), str(tmp_path / "out")], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[]"] and (tmp_path / "out" / "pair_similarity.png").is_file()


def test_the_child_draws_the_plot_this_process_draws():
    job = {"path": sys.path, "histogram": list(range(dedup_module.HISTOGRAM_BINS)), "threshold": 0.8}
    png = dedup_module._plot_child(job)
    assert png.startswith(b"\x89PNG") and png == dedup_module.similarity_png(job)


def test_a_plot_child_that_does_not_end_in_time_is_killed_and_the_plot_drawn_here(tmp_path, monkeypatch):
    monkeypatch.setattr(dedup_module, "PLOT_CHILD_TIMEOUT_S", 0.001)
    histogram = np.arange(dedup_module.HISTOGRAM_BINS)
    job = {"path": sys.path, "histogram": histogram.tolist(), "threshold": 0.8}
    assert dedup_module._plot_child(job) is False
    assert dedup_module.plot_similarities(histogram, str(tmp_path / "plot.png"), 0.8, None) == "plot.png"
    assert (tmp_path / "plot.png").read_bytes() == dedup_module.similarity_png(job)


@pytest.fixture(scope="module")
def short_corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("short")
    # Parts of 25,000 documents at both sizes, as a corpus grows by more shards of the same size: what the bound
    # is about. Pass 1's chunk grows with a part up to --memory's cap (89,000 documents here) and no further;
    # 4 parts of 100,000 at 400k filled it where 100k's parts did not: 135 -> 172 MiB (1.27x) in a CI run once the
    # processes had dropped datasketch, scipy and matplotlib.
    return {size: short_corpus(root / f"short-{size}", size, parts=size // 25_000) for size in (100_000, 400_000)}


@pytest.mark.heavy
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_memory_does_not_grow_with_the_corpus(short_corpora, engine, request):
    """The issue's bound: with --memory 64M the peak RSS of `bertprep dedup`'s processes (the command and its
    workers; on Dask its client and the cluster's workers, given only bucket URLs) at 400k short documents is
    within 1.25 times its peak at 100k. Before the steps (a4f4ac4, one process deciding over every document's
    arrays) the local runs peaked at 334 and 576 MiB (1.72x); with them 293 and 325 MiB locally, 520 and 575 MiB
    on Dask (docs/benchmarks.md)."""
    flags = ("--memory", "64M", "--num-perm", "32", "--json", "--quiet")
    peaks = {}
    with contextlib.ExitStack() as stack:
        if engine == "local":
            places = {size: (str(path), str(path.parent / f"out-{size}")) for size, path in short_corpora.items()}
            flags, workers = (*flags, "--workers", "2"), ()
        else:
            from test_store_pipeline import cluster_in_own_directories
            from test_store_stages import store

            bucket = request.getfixturevalue("s3_bucket")
            places = {}
            for size, path in short_corpora.items():
                store().put(str(path), f"{bucket}/short-{size}".split("://", 1)[1], recursive=True)
                places[size] = (f"{bucket}/short-{size}", f"{bucket}/out-{size}")
            cluster = stack.enter_context(cluster_in_own_directories())
            with distributed.Client(cluster) as client:
                workers = list(client.run(os.getpid).values())
            flags = (*flags, "--engine", "dask", "--scheduler", cluster.scheduler_address)
        for size, (source, out) in places.items():
            peak, run = peak_rss([sys.executable, "-m", "bertprep", "dedup", "--input", source, "--out", out, *flags],
                                 workers)
            assert run.returncode == 0, run.stderr
            summary = json.loads(run.stdout)
            assert summary["documents"] == size and summary["exact"] > size / 200 and summary["near"] > size / 400
            peaks[size] = peak
    assert peaks[400_000] <= 1.25 * peaks[100_000], {size: peak / 2**20 for size, peak in peaks.items()}


def test_a_held_output_is_refused_before_the_inputs_are_hashed(tmp_path, monkeypatch):
    """A second dedup into an --out a live run holds hashed every input (and evaluation file) before hold()
    refused it: seconds for 12 MB, minutes for a large corpus. It is refused first now, with hold()'s line."""
    from bertprep.atomic import hold
    from bertprep.errors import HeldByAnotherRun
    from bertprep.stages import dedup as dedup_stage

    corpus = tiny_corpus(tmp_path / "c1", ["one text here", "another text there"])
    hashed = []
    real = dedup_stage.sha256_file
    monkeypatch.setattr(dedup_stage, "sha256_file", lambda path, *a, **k: hashed.append(path) or real(path, *a, **k))
    with hold(tmp_path / "out", "bertprep dedup"):
        with pytest.raises(HeldByAnotherRun, match=rf"^{tmp_path / 'out'}: another run is writing here \(bertprep "
                                                   rf"dedup, pid {os.getpid()} on "):
            bertprep.dedup(input=corpus, out=tmp_path / "out", engine=ONE_WORKER)
    assert hashed == []
    bertprep.dedup(input=corpus, out=tmp_path / "out", engine=ONE_WORKER)
    assert hashed  # the same run, once the output is free, hashes its inputs (and writes)
    assert (tmp_path / "out" / "manifest.json").exists()


def test_a_txt_evaluation_files_items_are_its_paragraphs_as_the_help_says(tmp_path, capsys):
    """A .txt's evaluation items are its blank-line-separated paragraphs: a file of one passage a line is one item
    ("1 of 1 items found"), which neither --help nor the README said."""
    from bertprep.cli import main
    lines, paragraphs = tmp_path / "lines.txt", tmp_path / "paragraphs.txt"
    lines.write_text("first passage\nsecond passage\nthird passage\n")
    paragraphs.write_text("first passage\n\nsecond passage\n \nthird passage\n")
    assert dedup_module.file_items(str(lines)) == ["first passage\nsecond passage\nthird passage\n"]
    assert dedup_module.file_items(str(paragraphs)) == ["first passage", "second passage", "third passage\n"]
    with pytest.raises(SystemExit):
        main(["dedup", "--help"])
    assert "evaluation items are its paragraphs: lines up to a blank line" in " ".join(capsys.readouterr().out.split())


def test_a_band_key_shared_by_thousands_of_documents_stays_within_memory(tmp_path):
    """2,000 copies of one boilerplate (each with its own last word) share every band key: the group's
    1,999,000 pairs were made at once (their indices, then their documents), 201 MiB of RSS at --memory 16M
    (1 GB at 4,000 documents); now a batch at a time and each document's first edge to each cluster, 76 MiB,
    the same listing."""
    base = " ".join(f"w{i}" for i in range(60))
    corpus = write_corpus(tmp_path / "c", [f"{base} doc{i}" for i in range(2000)])
    peak, run = peak_rss([sys.executable, "-m", "bertprep", "dedup", "--input", corpus, "--out", tmp_path / "out",
                          "--memory", "16M", "--num-perm", "32", "--workers", "1"])
    assert run.returncode == 0, run.stderr
    assert peak < 130 << 20, peak >> 20
    removed = json.loads((tmp_path / "out" / "manifest.json").read_text())["removed"]
    assert {e["kept"]["line"] for e in removed} == {1} and len(removed) > 1900


def test_a_large_band_key_group_decides_as_its_pairs_at_once_did(tmp_path):
    """A group of more pairs than a batch (--memory 1M: 1,024) is verified a batch at a time, keeping each
    document's first edge to each cluster of the earlier ones: the same bytes, listing (kept, linked_by,
    estimates) and candidate pairs as with --memory 1G, where every pair of the group is made at once."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(80)]
    texts = []
    for i in range(300):
        text = list(words)
        for position in rng.choice(80, int(rng.integers(0, 14)), replace=False):
            text[position] = f"x{i}_{position}"
        texts.append(" ".join(text))
    corpus = write_corpus(tmp_path / "c", texts)
    one = bertprep.EngineOptions(workers=1)
    results = []
    for memory in ("1G", "1M"):
        bertprep.dedup(input=(corpus,), out=tmp_path / memory, memory=memory, engine=one)
        manifest = json.loads((tmp_path / memory / "manifest.json").read_text())
        results.append((output_files(tmp_path / memory), manifest["removed"], manifest["candidate_pairs"]))
    assert results[0] == results[1]
    assert any("linked_by" in e for e in results[0][1]) and len(results[0][1]) > 30


def old_large_group_edges(group, signatures, band, rows, threshold):
    """large_group_edges as band_step's `check` gave it before, pair by pair: every pair's estimate (the mean of
    its equal values), then each later document's first edge to each cluster of the earlier ones."""
    first, second = np.tril_indices(len(group), -1)  # (later, earlier), by later then earlier
    if band:
        keys = dedup_module.band_keys(signatures, band, rows)
        mine = ~(keys[first] == keys[second]).any(axis=1)
        first, second = first[mine], second[mine]
    shares = dedup_module.pair_estimates(signatures, first, second)
    histogram = np.histogram(shares, bins=dedup_module.HISTOGRAM_BINS, range=(0, 1))[0]
    cluster, edges = np.arange(len(group)), set()
    for later in range(1, len(group)):
        mask = (first == later) & (shares >= threshold)
        earlier = second[mask]
        if earlier.size:
            labels, firsts = np.unique(cluster[earlier], return_index=True)
            kept = zip(earlier[firsts].tolist(), shares[mask][firsts].tolist())
            edges |= {(int(group[e]), int(group[later]), s) for e, s in kept}
            joined = np.isin(cluster, labels)
            joined[later] = True
            cluster[joined] = labels[0]
    return edges, histogram.tolist(), len(shares)


@pytest.mark.parametrize("alphabet", [None, 3])
@pytest.mark.parametrize("batch", [40, 1 << 20])
@pytest.mark.parametrize("band", [0, 2])
def test_a_large_groups_values_compared_at_once_give_its_pairs_edges(alphabet, batch, band):
    """large_group_edges compares a block of the group's signatures at once (a product of class indicators where
    equal values are few classes, else value by value; `batch` 40 forces the latter), where it read and copied two
    signatures a pair (43 s of CPU for 8,000 copies of one page against 8.8 s: scripts/bench_dedup_large_group.py):
    the same edges, histogram and candidate count as every pair's estimate, band by band. `alphabet`: the changed
    values drawn from 3 (classes shared by many documents), or each its own."""
    rng = np.random.default_rng(band + batch)
    signatures = np.tile(rng.integers(0, 1 << 32, 32, dtype=np.uint32), (150, 1))
    for row in signatures:
        changed = rng.choice(32, int(rng.integers(0, 12)), replace=False)
        row[changed] = rng.integers(0, alphabet or 1 << 32, len(changed), dtype=np.uint32)
    group = np.sort(rng.choice(10_000, 150, replace=False)).astype(np.int64)
    found, histogram, count = dedup_module.large_group_edges(group, signatures, band, 4, 0.7, batch)
    edges = {(int(e), int(later), float(s)) for side in found for e, later, s in zip(*side)}
    assert (edges, histogram.tolist(), count) == old_large_group_edges(group, signatures, band, 4, 0.7)
    assert len(edges) > 100 and count > 1000


def test_each_corpus_is_counted_from_one_pass_over_the_removed_listing(tmp_path):
    """Each --input .jsonl file is a corpus of its own: the counts per corpus were a pass over the whole removed
    listing per corpus, 73 s of a run's 265 s with 2,000 files and 80,000 documents removed. corpus_counts (fails
    on the old code: no such function, the passes were in _decide) takes the listing once (an iterator here), and
    bertprep.dedup's counts over 30 files are those of the listing."""
    texts = [f"shared page {i} " + " ".join(f"w{k}" for k in range(i + 3)) for i in range(4)]
    inputs = []
    for index in range(30):
        inputs.append(tmp_path / f"f{index:02d}.jsonl")
        inputs[-1].write_text("".join(json.dumps({"text": text}) + "\n" for text in texts[:1 + index % 4]))
    summary = bertprep.dedup(input=tuple(inputs), out=tmp_path / "out", engine=bertprep.EngineOptions(workers=1))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert summary["corpora"]["f00"] == {"documents": 1, "exact": 0, "near": 0, "contaminated": 0, "kept": 1}
    assert summary["corpora"]["f07"] == {"documents": 4, "exact": 4, "near": 0, "contaminated": 0, "kept": 0}
    assert summary["exact"] == len(manifest["removed"]) == 69  # 73 documents, 4 texts
    corpora = [(f"f{index:02d}", [str(path)]) for index, path in enumerate(inputs)]
    drops = dedup_module._drops(manifest["removed"], corpora, False)
    documents = {str(path): 1 + index % 4 for index, path in enumerate(inputs)}
    assert dedup_module.corpus_counts(corpora, documents, iter(manifest["removed"]), drops) == summary["corpora"]


def test_membership_in_the_evaluation_n_grams_is_a_binary_search_per_n_gram(tmp_path):
    """Each document's n-grams were checked against the evaluation set's with np.isin, which sorted both together
    for every document: 2,000 documents of 300 words against 2,000 paragraphs of evaluation text took 215 s of CPU
    (a cost of corpus times evaluation set); in_sorted (fails on the old code: no such function) searches the
    sorted set, 1 s for that run. Its answers are np.isin's, at the ends and with nothing to search too, and a
    corpus quoting evaluation paragraphs is still found."""
    rng = np.random.default_rng(0)
    ordered = np.unique(rng.integers(0, 1 << 63, 5000).astype(np.uint64))
    values = np.r_[ordered[::7], rng.integers(0, 1 << 63, 500).astype(np.uint64), np.uint64(0),
                   np.uint64((1 << 64) - 1), ordered[-1], ordered[0]]
    assert (dedup_module.in_sorted(values, ordered) == np.isin(values, ordered)).all()
    assert not dedup_module.in_sorted(values, ordered[:0]).any()
    words = [f"v{i}" for i in range(3000)]
    paragraphs = [" ".join(words[i * 40:(i + 1) * 40]) for i in range(60)]
    (tmp_path / "dev.txt").write_text("\n\n".join(paragraphs))
    corpus = write_corpus(tmp_path / "c", [f"intro {paragraphs[i // 10][:200]} outro" if i % 10 == 0 else
                                          " ".join(words[i + 2500:i + 2560]) for i in range(100)])
    summary = bertprep.dedup(input=(corpus,), out=tmp_path / "out", decontaminate=(tmp_path / "dev.txt",),
                             engine=bertprep.EngineOptions(workers=1))
    assert summary["contaminated"] == 10 and summary["evaluation"]["dev.txt"]["found_in_training"] == 10
