"""`bertprep create-squad` / `create-glue`: byte parity with the reference's goldens, eval metadata, manifest,
bad input."""

import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest

import bertprep
import early_waits
from bertprep import formats, progress
from bertprep.cli import main
from bertprep.formats import schemas
from bertprep.stages.download.glue import TASKS as DOWNLOAD_TASKS
from bertprep.stages.finetune_data.glue import CHUNK_EXAMPLES, TASKS, truncated_lengths
from bertprep.tokenization import load_vocab
from conftest import shared_path

REPO = Path(__file__).resolve().parent.parent
SQUAD_GOLDENS = [(version, split, seq, stride, query) for version in ("1.1", "2.0") for split in ("train", "dev")
                 for seq, stride, query in ((384, 128, 64), (128, 32, 24))]
GLUE_SPLITS = {"train": ("train", "train"), "dev": ("eval", "eval"),
               "test": ("predict", "test")}  # golden, tf, of names


@pytest.fixture(scope="module")
def finetune_dir(shared_dir):
    return shared_dir / "fixtures" / "finetune"


@pytest.fixture(scope="module")
def vocab_path(golden_dir):
    return golden_dir / "vocab.txt"


@pytest.fixture(scope="module")
def words(vocab_path):
    return load_vocab(vocab_path).words


def squad(finetune_dir, vocab_path, out, version, split, seq=384, stride=128, query=64, *extra):
    return main(["create-squad", "--input", str(finetune_dir / f"squad/v{version}/{split}-v{version}.json"),
                 "--vocab", str(vocab_path), "--out", str(out), "--seq", str(seq), "--doc-stride", str(stride),
                 "--max-query", str(query), "--quiet", *extra])


def assert_same_values(tf_path, of_path):
    """OFRecord holds the TFRecord's values, feature for feature, as int32 lists."""
    tf_records, of_records = list(formats.read_records(tf_path)), list(formats.read_records(of_path))
    assert len(tf_records) == len(of_records) > 0
    for a, b in zip(tf_records, of_records):
        assert list(a) == list(b)
        for name in a:
            assert b[name].dtype == (np.float32 if a[name].dtype == np.float32 else np.int32), name
            assert np.array_equal(a[name], b[name]), name


# ---------------------------------------------------------------- parity with the reference


@pytest.mark.parametrize("version,split,seq,stride,query", SQUAD_GOLDENS)
def test_squad_goldens_byte_identical(finetune_dir, vocab_path, tmp_path, version, split, seq, stride, query):
    assert squad(finetune_dir, vocab_path, tmp_path, version, split, seq, stride, query) == 0
    role = "train" if split == "train" else "eval"
    golden = finetune_dir / f"squad/v{version}_{split}_seq{seq}_stride{stride}_query{query}.tfrecord"
    assert (tmp_path / f"{role}.tf_record").read_bytes() == golden.read_bytes()
    assert_same_values(tmp_path / f"{role}.tf_record", tmp_path / f"{role}.of_record-0")
    counts = json.loads((finetune_dir / "manifest.json").read_text())[golden.relative_to(finetune_dir).as_posix()]
    entry = json.loads((tmp_path / "manifest.json").read_text())["files"][f"{role}.of_record-0"]
    assert (entry["examples"], entry["records"]) == (counts["examples"], counts["features"])
    assert entry["kind"] == ("squad_train" if split == "train" else "squad_eval")


@pytest.mark.parametrize("task", ["MRPC", "CoLA", "MNLI"])
def test_glue_goldens_byte_identical(finetune_dir, vocab_path, tmp_path, task):
    assert main(["create-glue", "--task", task, "--data-dir", str(finetune_dir / "glue" / task), "--vocab",
                 str(vocab_path), "--out", str(tmp_path), "--quiet"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for split, (tf_name, of_name) in GLUE_SPLITS.items():
        golden = finetune_dir / f"glue/{task}_{split}_seq128.tfrecord"
        assert (tmp_path / f"{tf_name}.tf_record").read_bytes() == golden.read_bytes(), split
        assert_same_values(tmp_path / f"{tf_name}.tf_record", tmp_path / f"{of_name}.of_record-0")
        assert manifest["files"][f"{of_name}.of_record-0"]["records"] == sum(1 for _ in formats.iter_payloads(golden))
    assert manifest["labels"] == {"MRPC": ["0", "1"], "CoLA": ["0", "1"],
                                  "MNLI": ["contradiction", "entailment", "neutral"]}[task]


def test_truncated_lengths_pop_as_the_reference_does():
    def popped(a, b, limit):  # run_classifier.py's _truncate_seq_pair, on lists
        tokens_a, tokens_b = list(range(a)), list(range(b))
        while len(tokens_a) + len(tokens_b) > limit:
            (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
        return len(tokens_a), len(tokens_b)

    for a in range(12):
        for b in range(12):
            for limit in range(14):
                assert truncated_lengths(a, b, limit) == popped(a, b, limit), (a, b, limit)


# ---------------------------------------------------------------- SQuAD evaluation metadata


def test_squad_eval_metadata_matches_the_records(finetune_dir, vocab_path, words, tmp_path):
    assert squad(finetune_dir, vocab_path, tmp_path, "2.0", "dev", 128, 32, 24) == 0
    records = list(formats.read_records(tmp_path / "eval.tf_record"))
    features = [json.loads(line) for line in (tmp_path / "eval.features.jsonl").read_text().splitlines()]
    examples = [json.loads(line) for line in (tmp_path / "eval.examples.jsonl").read_text().splitlines()]
    source = json.loads((finetune_dir / "squad/v2.0/dev-v2.0.json").read_text())
    questions = [qa for article in source["data"] for p in article["paragraphs"] for qa in p["qas"]]
    assert [e["qas_id"] for e in examples] == [qa["id"] for qa in questions]  # eval keeps file order
    assert [e["example_index"] for e in examples] == list(range(len(examples)))
    assert len(features) == len(records)
    max_context = {}  # (example, doc token) -> features where it has its most context
    for feature, record in zip(features, records):
        assert list(feature) == ["unique_id", "example_index", "doc_span_index", "tokens", "token_to_orig_map",
                                 "token_is_max_context"]
        assert feature["unique_id"] == int(record["unique_ids"][0])
        length = int(record["input_mask"].sum())
        assert feature["tokens"] == [words[i] for i in record["input_ids"][:length]]
        context = [i for i in range(length) if record["segment_ids"][i] == 1][:-1]  # without the last [SEP]
        assert list(feature["token_to_orig_map"]) == [str(i) for i in context] == list(feature["token_is_max_context"])
        doc_tokens = examples[feature["example_index"]]["doc_tokens"]
        for position, word in feature["token_to_orig_map"].items():
            piece = feature["tokens"][int(position)].removeprefix("##")
            assert piece == "[UNK]" or piece in doc_tokens[word].lower(), (piece, doc_tokens[word])
        for position, is_max in feature["token_is_max_context"].items():
            if is_max:  # windows start every 32 tokens (stride 32; a window holds >= 101 document tokens)
                key = (feature["example_index"], feature["doc_span_index"] * 32 + int(position) - context[0])
                max_context[key] = max_context.get(key, 0) + 1
    assert set(max_context.values()) == {1}  # each document token has exactly one max-context window
    doc_lengths = {}  # example -> its document tokens: where its last window ends
    for f in features:
        end = f["doc_span_index"] * 32 + len(f["token_to_orig_map"])
        doc_lengths[f["example_index"]] = max(doc_lengths.get(f["example_index"], 0), end)
    assert len(max_context) == sum(doc_lengths.values())
    assert features[0]["unique_id"] == 1000000000


def test_squad_train_is_the_reference_shuffle(finetune_dir, vocab_path, tmp_path):
    """Training examples come in random.Random(12345)'s order; every window holds its answer or 0/0."""
    assert squad(finetune_dir, vocab_path, tmp_path, "1.1", "train") == 0
    source = json.loads((finetune_dir / "squad/v1.1/train-v1.1.json").read_text())
    questions = [qa["id"] for article in source["data"] for p in article["paragraphs"] for qa in p["qas"]]
    random.Random(12345).shuffle(questions)
    records = list(formats.read_records(tmp_path / "train.of_record-0"))
    assert [int(r["unique_ids"][0]) for r in records] == list(range(1000000000, 1000000000 + len(records)))
    assert any(r["start_positions"][0] > 0 for r in records) and any(r["start_positions"][0] == 0 for r in records)
    for record in records:
        start, end = int(record["start_positions"][0]), int(record["end_positions"][0])
        assert start <= end and (start == 0 or record["segment_ids"][start] == record["segment_ids"][end] == 1)


# ---------------------------------------------------------------- manifest, rerun, second split


def test_manifest_accumulates_splits_and_reruns_are_skipped(finetune_dir, vocab_path, tmp_path, capsys):
    assert squad(finetune_dir, vocab_path, tmp_path, "2.0", "train", 128, 32, 24) == 0
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "manifest.json"}
    assert squad(finetune_dir, vocab_path, tmp_path, "2.0", "dev", 128, 32, 24, "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["created"] and summary["kind"] == "squad_eval" and summary["version_2_with_negative"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["stage"] == "create-squad" and manifest["task"] == "squad" and manifest["dims"] == {"seq": 128}
    assert manifest["params"] == {"doc_stride": 32, "max_query_length": 24} and manifest["version_2_with_negative"]
    assert manifest["vocab"]["sha256"] == "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
    assert sorted(manifest["files"]) == ["eval.of_record-0", "eval.tf_record", "train.of_record-0", "train.tf_record"]
    assert sorted(manifest["metadata"]) == ["eval.examples.jsonl", "eval.features.jsonl"]
    assert manifest["source"]["eval"]["path"] == str(finetune_dir / "squad/v2.0/dev-v2.0.json")
    for name, entry in {**manifest["files"], **manifest["metadata"]}.items():
        data = (tmp_path / name).read_bytes()
        assert (entry["bytes"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest()), name
    # a rerun of a finished split writes nothing and says so
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert squad(finetune_dir, vocab_path, tmp_path, "2.0", "train", 128, 32, 24, "--json") == 0
    assert json.loads(capsys.readouterr().out)["created"] is False
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    # ... and after losing a file, the rerun makes the same bytes again
    (tmp_path / "train.tf_record").unlink()
    assert squad(finetune_dir, vocab_path, tmp_path, "2.0", "train", 128, 32, 24) == 0
    assert {n: (tmp_path / n).read_bytes() for n in first} == first
    # another seq into the same directory would mix shapes: refused, nothing changed
    assert squad(finetune_dir, vocab_path, tmp_path, "2.0", "dev", 384, 128, 64) == 2
    assert "made with dims {'seq': 128}" in capsys.readouterr().err
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest


def _files_and_summary(out, summary):
    """(record and metadata files' bytes, the summary but its clock and output directory)."""
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "manifest.json"}
    return files, {k: v for k, v in summary.items() if k not in ("seconds", "out")}


def test_create_squad_called_in_python_writes_what_the_command_writes(finetune_dir, vocab_path, tmp_path, capsys):
    from bertprep.errors import UsageError
    from bertprep.stages.finetune_data.squad import CreateSquadOptions, create_squad

    assert squad(finetune_dir, vocab_path, tmp_path / "cli", "2.0", "dev", 128, 32, 24, "--json") == 0
    printed = json.loads(capsys.readouterr().out)
    options = CreateSquadOptions(input=str(finetune_dir / "squad/v2.0/dev-v2.0.json"), vocab=str(vocab_path),
                           out=str(tmp_path / "py"), seq=128, doc_stride=32, max_query=24)
    summary = create_squad(options)
    assert capsys.readouterr() == ("", "")
    assert summary["out"] == str(tmp_path / "py") and not summary.complete_before
    assert _files_and_summary(tmp_path / "py", summary) == _files_and_summary(tmp_path / "cli", printed)
    assert create_squad(options).complete_before
    with pytest.raises(UsageError, match=r"^CreateSquadOptions.doc_stride must be at least 1, not 0$"):
        CreateSquadOptions(input=options.input, vocab=options.vocab, out=options.out, doc_stride=0)
    with pytest.raises(UsageError, match=r"^unknown CreateSquadOptions.format 'avro' \(choose from"):
        CreateSquadOptions(input=options.input, vocab=options.vocab, out=options.out, format=("avro",))


def test_create_glue_called_in_python_writes_what_the_command_writes(finetune_dir, vocab_path, tmp_path, capsys):
    from bertprep.errors import UsageError
    from bertprep.stages.finetune_data.glue import CreateGlueOptions, create_glue

    assert main(["create-glue", "--task", "mrpc", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab",
                 str(vocab_path), "--out", str(tmp_path / "cli"), "--split", "test", "--split", "dev", "--json",
                 "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = create_glue(task="mrpc", data_dir=finetune_dir / "glue/MRPC", vocab=vocab_path, out=tmp_path / "py",
                          split=("dev", "test"))
    assert capsys.readouterr() == ("", "")
    assert _files_and_summary(tmp_path / "py", summary) == _files_and_summary(tmp_path / "cli", printed)
    assert summary["task"] == "MRPC" and not summary.complete_before
    assert create_glue(task="MRPC", data_dir=finetune_dir / "glue/MRPC", vocab=vocab_path, out=tmp_path / "py",
                       split="dev").complete_before
    with pytest.raises(UsageError, match=r"^CreateGlueOptions.task: unknown GLUE task 'XYZ'; known: CoLA, MRPC"):
        CreateGlueOptions(task="XYZ", data_dir="d", vocab="v", out="o")
    with pytest.raises(UsageError, match=r"^CreateGlueOptions.seq 2 is too small: at least 3 positions are needed$"):
        CreateGlueOptions(task="MRPC", data_dir="d", vocab="v", out="o", seq=2)


def test_formats_flag_writes_only_the_named_format(finetune_dir, vocab_path, tmp_path):
    assert main(["create-glue", "--task", "cola", "--data-dir", str(finetune_dir / "glue/CoLA"), "--vocab",
                 str(vocab_path), "--out", str(tmp_path), "--split", "dev", "--format", "ofrecord", "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.of_record-0", "manifest.json"]


def test_convert_of_a_fine_tuning_output_writes_each_split_once_under_its_name(finetune_dir, vocab_path, tmp_path,
                                                                                capsys):
    """A create-glue output converted as a plain directory came out once per format it held: `--to ofrecord`
    wrote part-0 … part-5 (each split twice, no split's name), exit 0; `--to tfrecord|hdf5|parquet` stopped on
    `eval.of_record-0 and eval.tf_record would both be written to …: rename one of them`."""
    glue = ["create-glue", "--task", "MRPC", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab", str(vocab_path),
            "--quiet"]
    both, only_of = tmp_path / "both", tmp_path / "of"
    assert main([*glue, "--out", str(both)]) == 0
    assert main([*glue, "--out", str(only_of), "--format", "ofrecord"]) == 0
    assert main(["convert", str(only_of), str(tmp_path / "tf"), "--to", "tfrecord", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in (tmp_path / "tf").iterdir()) == ["eval.tf_record", "predict.tf_record",
                                                                    "train.tf_record"]
    for path in (tmp_path / "tf").iterdir():  # create-glue's own TFRecord bytes
        assert path.read_bytes() == (both / path.name).read_bytes(), path.name
    assert summary["not_converted"] == [str(only_of / "manifest.json")] and summary["records"] == 280
    assert main(["convert", str(both), str(tmp_path / "pq"), "--to", "parquet", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == ["eval.parquet", "test.parquet", "train.parquet"]
    assert sum(len(list(formats.read_records(str(p)))) for p in (tmp_path / "pq").iterdir()) == 280
    assert main(["convert", str(both), str(tmp_path / "of2"), "--to", "ofrecord"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep convert: error: {both}: fine-tuning records (create-glue) that it holds as ofrecord already "
        "(eval.of_record-0, test.of_record-0, train.of_record-0); nothing to convert (convert one of its other "
        "files, or another format)")
    assert not (tmp_path / "of2").exists()
    (both / "train.tf_record").unlink()  # its split is not left out, nor its OFRecord copy called the same records
    assert main(["convert", str(both), str(tmp_path / "pq2"), "--to", "parquet"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bertprep convert: error: {both / 'train.tf_record'}: listed in {both / 'manifest.json'} but not there: "
        "restore it, or rerun create-glue")
    assert not (tmp_path / "pq2").exists()


def test_convert_of_a_fine_tuning_output_reads_each_split_in_a_format_it_holds(finetune_dir, vocab_path, tmp_path,
                                                                               capsys):
    """A later run for another split may write another format (`--split train --format tfrecord`, then `--split
    dev --format ofrecord`): each split is read in a format it holds, none left out."""
    glue = ["create-glue", "--task", "MRPC", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab", str(vocab_path),
            "--out", str(tmp_path / "parent/mix"), "--quiet"]
    assert main([*glue, "--split", "train", "--format", "tfrecord"]) == 0
    assert main([*glue, "--split", "dev", "--format", "ofrecord"]) == 0
    mix = tmp_path / "parent/mix"
    assert main(["convert", str(mix), str(tmp_path / "pq"), "--to", "parquet", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == ["eval.parquet", "train.parquet"]
    assert main(["convert", str(mix), str(tmp_path / "tf"), "--to", "tfrecord"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep convert: error: {mix}: fine-tuning records (create-glue) that it holds as tfrecord already "
        "(train.tf_record); convert the other splits' files on their own (eval.of_record-0)")
    # in a directory above it, no split's records are held twice: converted as a plain directory
    assert main(["convert", str(tmp_path / "parent"), str(tmp_path / "whole"), "--to", "hdf5", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "whole/mix").iterdir()) == ["eval.hdf5", "train.hdf5"]


def test_a_vocab_path_under_a_local_directory_is_not_asked_of_the_hub(finetune_dir, tmp_path):
    """`--vocab data/vocab.tx` (a typo) was taken for a hub model id: offline, 25 s of the hub client's retries, a
    line each on stderr, then `not resolvable as a hub model id (LocalEntryNotFoundError: …)`."""
    (tmp_path / "data").mkdir()
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "bertprep", "create-glue", "--task", "MRPC", "--data-dir",
                             str(finetune_dir / "glue/MRPC"), "--vocab", "data/vocab.tx", "--out", "out", "--quiet"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    line = "bertprep create-glue: error: data/vocab.tx: vocab file not found\n"
    assert (result.returncode, result.stderr) == (1, line)
    assert time.monotonic() - started < 20 and sorted(os.listdir(tmp_path)) == ["data"]


def test_a_model_directory_given_as_vocab_names_its_vocab(finetune_dir, vocab_path, tmp_path, capsys):
    """`--vocab MODEL_DIR` (a downloaded model's directory) said `MODEL_DIR: cannot read: Is a directory`."""
    model = tmp_path / "model"
    model.mkdir()
    argv = ["create-squad", "--input", str(finetune_dir / "squad/v1.1/dev-v1.1.json"), "--out", str(tmp_path / "out"),
            "--quiet", "--vocab"]
    assert main([*argv, str(model)]) == 1
    assert capsys.readouterr().err.strip() == (f"bertprep create-squad: error: {model}: a directory, not a vocab "
                                               "file (it holds no vocab.txt)")
    (model / "vocab.txt").write_bytes(vocab_path.read_bytes())
    assert main([*argv, str(model)]) == 1
    assert capsys.readouterr().err.strip() == (f"bertprep create-squad: error: {model}: a directory, not a vocab "
                                               f"file: give {model / 'vocab.txt'}")
    assert not (tmp_path / "out").exists()


def unreachable_hub_id(folder):
    """[exit code, stderr, whether out/ was made] of `create-glue --vocab no-such-model` against a port nothing
    listens on: huggingface_hub retries it for about 25 s (1, 2, 4, 8 and 8 s of backoff), so it begins when the
    session starts (tests/early_waits.py)."""
    with socket.socket() as closed:  # a port nothing listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    mrpc = shared_path() / "fixtures" / "finetune" / "glue" / "MRPC"
    result = subprocess.run([sys.executable, "-m", "bertprep", "create-glue", "--task", "MRPC", "--data-dir",
                             str(mrpc), "--vocab", "no-such-model", "--out", "out", "--quiet"],
                            cwd=folder, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO), "HF_ENDPOINT": f"http://127.0.0.1:{port}",
                                 "HF_HOME": os.path.join(folder, "hf"), "HF_HUB_OFFLINE": "0"})
    return [result.returncode, result.stderr, os.path.exists(os.path.join(folder, "out"))]


early_waits.register("unreachable_hub_id", "unreachable_hub_id_run", unreachable_hub_id)


@pytest.fixture
def unreachable_hub_id_run():
    return early_waits.result("unreachable_hub_id")


def test_a_hub_model_id_with_no_hub_to_reach_is_one_line(unreachable_hub_id_run):
    """`--vocab some-model` with the hub unreachable printed huggingface_hub's retries, two lines each (`'[Errno
    111] Connection refused' thrown while requesting HEAD …`, `Retrying in 1s [Retry 1/5].`), before the error."""
    returncode, stderr, out_made = unreachable_hub_id_run
    assert returncode == 1 and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("bertprep create-glue: error: no-such-model: not a vocab file and not "
                             "resolvable as a hub model id (")
    assert not out_made


def test_a_data_dir_above_the_task_or_of_a_file_is_a_usage_line(finetune_dir, vocab_path, tmp_path, capsys):
    """`--data-dir WORKDIR/download/glue` (the root, not its MRPC/) said `…/glue/train.tsv: no such file (MRPC
    train split; pass --split to convert only some splits)`, and `--data-dir …/MRPC/train.tsv`
    `…/MRPC/train.tsv/train.tsv: no such file (…)`, exit 1."""
    glue = finetune_dir / "glue"
    argv = ["create-glue", "--task", "mrpc", "--vocab", str(vocab_path), "--out", str(tmp_path / "out"), "--quiet"]
    assert main([*argv, "--data-dir", str(glue)]) == 2
    assert capsys.readouterr().err.strip() == (f"bertprep create-glue: error: --data-dir {glue}: its MRPC/ holds the "
                                               f"MRPC files: give --data-dir {glue / 'MRPC'}")
    assert main([*argv, "--data-dir", str(glue / "MRPC/train.tsv")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep create-glue: error: --data-dir {glue / 'MRPC/train.tsv'}: a file; give the directory that holds "
        "the MRPC files (train.tsv, dev.tsv, test.tsv)")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- every GLUE task, in the layout `download glue` writes


def _write_glue_task(directory, task):
    """The task's files written by bertprep download glue's own row functions, from made-up hub rows."""
    from bertprep.stages.download.glue import _label, task_outputs, tsv_bytes

    names = DOWNLOAD_TASKS[task][1]
    label = _label(names)
    for filename, hub_split, (header, make_row) in task_outputs(task):
        rows = []
        for i in range(7):
            text = f"{task} {hub_split} row {i} says something, with Ünïcode and a comma."
            rows.append({"idx": i, "sentence": text, "sentence1": text, "sentence2": f"and {i} more words",
                         "question": f"what is {i}?", "question1": text, "question2": f"is {i} odd?",
                         "premise": text, "hypothesis": f"{i} holds",
                         "label": -1 if hub_split.startswith("test") else
                         (i * 0.75 if task == "STS-B" else i % (len(names) if names else 2))})
        data, _count = tsv_bytes(header, (make_row(r, label) for r in rows))
        (directory / filename).parent.mkdir(parents=True, exist_ok=True)
        (directory / filename).write_bytes(data)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_glue_task_from_the_download_layout(tmp_path, vocab_path, words, task, capsys):
    data = tmp_path / "glue" / task
    _write_glue_task(data, task)
    out = tmp_path / "out"
    assert main(["create-glue", "--task", task, "--data-dir", str(data), "--vocab", str(vocab_path), "--out", str(out),
                 "--seq", "32", "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    regression = task == "STS-B"
    assert summary["kind"] == ("glue_regression" if regression else "glue")
    assert {split: s["examples"] for split, s in summary["splits"].items()} == {"train": 7, "dev": 7, "test": 7}
    labels = TASKS[task].labels
    for tf_name, of_name in (("train", "train"), ("eval", "eval"), ("predict", "test")):
        assert_same_values(out / f"{tf_name}.tf_record", out / f"{of_name}.of_record-0")
        records = list(formats.read_records(out / f"{of_name}.of_record-0"))
        label_ids = [r["label_ids"][0] for r in records]
        if tf_name == "predict":
            assert label_ids == [0] * 7  # test files have no labels: the first label's id, as the reference does
        elif regression:
            assert label_ids == pytest.approx([i * 0.75 for i in range(7)])
        else:  # download wrote the hub's label names (MNLI: entailment, neutral, contradiction); ids index ours
            hub_names = DOWNLOAD_TASKS[task][1] or ["0", "1"]
            assert label_ids == [labels.index(hub_names[i % len(hub_names)]) for i in range(7)]
        tokens = [words[i] for i in records[1]["input_ids"][:int(records[1]["input_mask"].sum())]]
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "1" in tokens
        paired = TASKS[task].columns["train"].text_b is not None
        assert tokens.count("[SEP]") == (2 if paired else 1)
        second = tokens[tokens.index("[SEP]") + 1:-1]
        assert bool(second) == paired and bool(records[1]["segment_ids"].any()) == paired
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task"] == task and manifest["labels"] == labels
    assert {e["split"] for e in manifest["files"].values()} == {"train", "dev", "test"}


# ---------------------------------------------------------------- bad input: one line, exit 1/2, nothing half-written


def _error_line(capsys):
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def _squad_file(path, contexts_and_answers):
    paragraphs = [{"context": context, "qas": [{"id": f"q{i}", "question": "which words?",
                                                 "answers": [{"text": text, "answer_start": start}]}]}
                  for i, (context, text, start) in enumerate(contexts_and_answers)]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


def test_malformed_json_names_the_byte_offset(tmp_path, vocab_path, capsys):
    bad = tmp_path / "train-v1.1.json"
    bad.write_bytes(b'{"data": [{"paragraphs": [{"context": "caf\xc3\xa9", "qas": [}]}]}')
    out = tmp_path / "out"
    assert main(["create-squad", "--input", str(bad), "--vocab", str(vocab_path), "--out", str(out), "--quiet"]) == 1
    line = _error_line(capsys)
    assert line.startswith(f"bertprep create-squad: error: {bad}: malformed JSON at byte 55 (line 1, column 55): "
                           "Expecting value")  # é is two bytes, one column: byte 55 is the 55th character
    assert not out.exists()


def test_a_squad_file_saved_with_a_byte_order_mark_is_read(tmp_path, vocab_path, capsys):
    """A SQuAD file saved with a UTF-8 byte-order mark (Notepad, PowerShell) was `malformed JSON at byte 0 (line 1,
    column 1): Unexpected UTF-8 BOM (decode using utf-8-sig)`, exit 1. It is read past the mark, to the records the
    file without it gives; a later error's byte offset still counts the mark's 3 bytes."""
    plain = _squad_file(tmp_path / "train-v1.1.json", [("The cat sat on the mat.", "cat", 4)])
    marked = tmp_path / "marked" / "train-v1.1.json"
    marked.parent.mkdir()
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    for path, out in ((plain, "a"), (marked, "b")):
        assert main(["create-squad", "--input", str(path), "--vocab", str(vocab_path), "--out", str(tmp_path / out),
                     "--format", "tfrecord", "--quiet"]) == 0
    assert (tmp_path / "a/train.tf_record").read_bytes() == (tmp_path / "b/train.tf_record").read_bytes()
    marked.write_bytes(b'\xef\xbb\xbf{"data": [')
    assert main(["create-squad", "--input", str(marked), "--vocab", str(vocab_path), "--out", str(tmp_path / "c")]) == 1
    assert _error_line(capsys).endswith(f"{marked}: malformed JSON at byte 13 (line 1, column 11): Expecting value")


def test_json_nested_too_deeply_is_one_line(tmp_path, vocab_path, capsys):
    """Python's JSON parser stops with a RecursionError some thousand levels down: a traceback, not a line."""
    bad = tmp_path / "train-v1.1.json"
    bad.write_text("[" * 100000 + "]" * 100000)
    out = tmp_path / "out"
    assert main(["create-squad", "--input", str(bad), "--vocab", str(vocab_path), "--out", str(out), "--quiet"]) == 1
    assert _error_line(capsys) == (f"bertprep create-squad: error: {bad}: JSON nested too deeply to parse (SQuAD "
                                   "JSON is data[].paragraphs[].qas[])")
    assert not out.exists()


def test_answer_not_at_answer_start_is_skipped_counted_and_warned(tmp_path, vocab_path, capsys):
    data = _squad_file(tmp_path / "train-v1.1.json", [("The cat sat on the mat.", "cat", 4),
                                                      ("The dog ran home.", "dog", 9),
                                                      ("A bird sang.", "bird", 200)])
    out = tmp_path / "out"
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["examples"], summary["skipped"], summary["records"]) == (1, 2, 1)
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warnings) == 2
    assert "question 'q1': could not find answer 'dog' at answer_start 9 (the context there reads 'ran')" in warnings[0]
    assert ("question 'q2': answer_start 200 with a 4-character answer lies outside its 12-character "
            "context") in warnings[1]
    assert json.loads((out / "manifest.json").read_text())["files"]["train.tf_record"]["skipped"] == 2
    record = next(formats.read_records(out / "train.tf_record"))
    assert (record["start_positions"][0], record["end_positions"][0]) == (6, 6)  # [CLS] which words ? [SEP] the cat


def test_an_answer_in_another_normalization_form_is_said_to_be_so(tmp_path, vocab_path):
    """An answer written decomposed (NFD) in a composed (NFC) context is skipped, as run_squad.py skips it; the
    warning read `could not find answer 'café' at answer_start 4 (the context there reads 'café')`, two strings
    that look alike, and no word of why."""
    data = _squad_file(tmp_path / "train-v1.1.json", [("The café opened.", unicodedata.normalize("NFD", "café"), 4),
                                                      ("The cat sat.", "cat", 4)])
    with pytest.warns(bertprep.BertprepWarning) as warned:
        summary = bertprep.create_squad(input=str(data), vocab=str(vocab_path), out=str(tmp_path / "out"),
                                        format=("tfrecord",))
    assert (summary["examples"], summary["skipped"]) == (1, 1)
    assert str(warned[0].message).endswith(
        "question 'q0': could not find answer 'cafe\u0301' at answer_start 4 (the context there reads 'café', the "
        "same characters in another Unicode normalization form: normalize the file's answers and contexts alike, "
        "e.g. to NFC); skipped, as run_squad.py does")


def test_a_squad_input_that_is_a_directory_is_a_usage_line_naming_its_files(finetune_dir, vocab_path, tmp_path,
                                                                              capsys):
    """`--input download/squad/v1.1` (the directory, not its file) was `cannot tell the split from the name`, and
    with `--split eval` `…/v1.1: no such file`, exit 1, of a directory that is there."""
    directory = finetune_dir / "squad/v1.1"
    (tmp_path / "empty").mkdir()
    for split in ((), ("--split", "eval")):
        assert main(["create-squad", "--input", str(directory), "--vocab", str(vocab_path), "--out",
                     str(tmp_path / "out"), *split]) == 2
        assert _error_line(capsys).endswith(f"--input {directory}: a directory; give one of the JSON files in it: "
                                            "dev-v1.1.json, train-v1.1.json")
    with pytest.raises(bertprep.errors.UsageError, match=r"^CreateSquadOptions.input .*: a directory; give a SQuAD "
                       r"JSON file \(train-v1.1.json, dev-v2.0.json, ...\)$"):
        bertprep.create_squad(input=str(tmp_path / "empty"), vocab=str(vocab_path), out=str(tmp_path / "out"),
                              split="eval")
    assert not (tmp_path / "out").exists()


def test_bad_squad_structure_and_flags(tmp_path, vocab_path, capsys):
    out = tmp_path / "out"
    data = tmp_path / "train-v1.1.json"
    data.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x y",
                                                          "qas": [{"id": "a1", "question": "q"}]}]}]}))
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(out)]) == 1
    assert _error_line(capsys).endswith(f"{data}: question 'a1': missing 'answers' "
                                        "(expected SQuAD JSON: data[].paragraphs[].qas[])")
    two = {"data": [{"paragraphs": [{"context": "x y", "qas": [{"id": "a2", "question": "q", "answers": [
        {"text": "x", "answer_start": 0}, {"text": "y", "answer_start": 2}]}]}]}]}
    data.write_text(json.dumps(two))
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(out)]) == 1
    assert "question 'a2': 2 answers; training needs exactly 1 per question" in _error_line(capsys)
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(out), "--split", "eval",
                 "--quiet"]) == 0  # evaluation does not read answers
    other = tmp_path / "questions.json"
    other.write_text(json.dumps(two))
    assert main(["create-squad", "--input", str(other), "--vocab", str(vocab_path), "--out", str(out)]) == 2
    assert "cannot tell the split from the name" in _error_line(capsys)
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(out), "--seq",
                 "67"]) == 2
    assert "--seq 67 must be greater than --max-query 64 + 3" in _error_line(capsys)
    assert sorted(p.name for p in out.iterdir()) == ["eval.examples.jsonl", "eval.features.jsonl", "eval.of_record-0",
                                                     "eval.tf_record", "manifest.json"]


def _squad_run(tmp_path, vocab_path, data, name="train-v1.1.json", *extra):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    out = tmp_path / "out"
    return main(["create-squad", "--input", str(path), "--vocab", str(vocab_path), "--out", str(out), *extra]), path


@pytest.mark.parametrize("data, message", [
    ({"data": [{"paragraphs": 5}]}, "data[0]: 'paragraphs' is int, expected list"),  # a TypeError traceback
    ({"data": [{"paragraphs": [{"context": "x y", "qas": 5}]}]}, "data[0].paragraphs[0]: 'qas' is int, expected list"),
    ('{"data": [{"paragraphs": [{"context": "x \\ud800 y", "qas": []}]}]}',
     "data[0].paragraphs[0]: 'context' holds a lone surrogate (U+D800 at character 2): not Unicode text"),
    ({"version": "v2.0", "data": [{"paragraphs": [{"context": "x y", "qas": [
        {"id": "a", "question": "q", "is_impossible": "false", "answers": []}]}]}]},
     "question 'a': 'is_impossible' is str, expected bool"),  # "false" was taken for True
    ({"data": [{"paragraphs": [{"context": "x y", "qas": [
        {"id": "a", "question": "q", "answers": [{"text": "x", "answer_start": 0}]},
        {"id": "a", "question": "r", "answers": [{"text": "y", "answer_start": 2}]}]}]}]},
     "data[0].paragraphs[0].qas[1]: question id 'a' again (first at "),  # a prediction overwrote the other
    ({"data": [{"paragraphs": [{"context": "x y", "qas": [
        {"id": 1, "question": "q", "answers": [{"text": "x", "answer_start": 0}]},
        {"id": "1", "question": "r", "answers": [{"text": "y", "answer_start": 2}]}]}]}]},
     "data[0].paragraphs[0].qas[1]: question id '1' again (first at "),  # one key "1" in predictions.json
    ({"data": [{"paragraphs": [{"context": "x y", "qas": [
        {"id": "a", "question": "q", "answers": [{"text": "y", "answer_start": True}]}]}]}]},
     "'answer_start' is bool, expected int"),  # true was read as 1, then skipped as "could not find answer"
    ({"data": [{"paragraphs": [{"context": "x y", "qas": [
        {"id": True, "question": "q", "answers": [{"text": "x", "answer_start": 0}]}]}]}]},
     "'id' is bool, expected str or int"),
])
def test_squad_structure_and_text_errors_are_one_line(tmp_path, vocab_path, capsys, data, message):
    code, path = _squad_run(tmp_path, vocab_path, data)
    assert code == 1
    line = _error_line(capsys)
    assert message in line and str(path) in line
    assert not (tmp_path / "out").exists()


def test_questions_with_nothing_to_tokenize_are_skipped_counted_and_warned(tmp_path, vocab_path, capsys):
    """An answer of only characters the tokenizer drops gave a record whose start lies after its end (exit 0,
    then refused by validate); a context of them gave its question no feature, silently (eval too); an empty
    answer text became the whole context. Each is now skipped, counted, and a warning."""
    contexts = [("The cat sat on the mat.", "cat", 4), ("A word \u0301 here.", "\u0301", 7),
                ("\u200b", "\u200b", 0), ("Some words here.", "", 0)]
    data = _squad_file(tmp_path / "train-v1.1.json", contexts)
    out = tmp_path / "out"
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["examples"], summary["skipped"], summary["records"]) == (1, 3, 1)
    assert summary["warnings"] == [f"3 question(s) skipped, first {data}: question 'q3': its answer text is empty; "
                                   "skipped (run_squad.py would take the whole context for its answer)"]
    assert "question 'q1': its answer has no token once tokenized" in captured.err
    assert "question 'q2': its context has no token once tokenized" in captured.err
    assert main(["validate", str(out), "--quiet"]) == 0
    capsys.readouterr()
    evaluation = _squad_file(tmp_path / "dev-v1.1.json", contexts[:3])
    assert main(["create-squad", "--input", str(evaluation), "--vocab", str(vocab_path), "--out",
                 str(tmp_path / "eval"), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["examples"], summary["skipped"]) == (2, 1) and "'q2': its context has no token" in \
        summary["warnings"][0]
    examples = (tmp_path / "eval" / "eval.examples.jsonl").read_text().splitlines()
    assert [json.loads(line)["qas_id"] for line in examples] == ["q0", "q1"]



def test_a_python_caller_not_quiet_hears_the_skipped_questions_once(tmp_path, vocab_path, capfd):
    """bertprep.create_squad(quiet=False) printed each skipped question's `create-squad: warning: ...` line (20,
    then `... N more questions skipped`) and raised the BertprepWarning of the summary, which repeats the first:
    two sinks for one warning. As every stage's warnings (Progress.warn), the lines are the command line's; a
    Python caller hears the BertprepWarning alone. The command's lines are as they were."""
    wrong = [("A bird sang.", "bird", 200 + i) for i in range(22)]  # answer_start past the context: skipped
    data = _squad_file(tmp_path / "train-v1.1.json", [("The cat sat on the mat.", "cat", 4), *wrong])
    fields = {"input": str(data), "vocab": str(vocab_path), "out": str(tmp_path / "py")}
    with pytest.warns(bertprep.BertprepWarning) as caught:
        summary = bertprep.create_squad(**fields, quiet=False)
    assert (summary["examples"], summary["skipped"]) == (1, 22)
    assert [str(w.message) for w in caught] == [f"bertprep.create_squad: {w}" for w in summary["warnings"]]
    stderr = capfd.readouterr().err
    assert "warning" not in stderr and stderr.startswith("create-squad: 1/1 examples")
    assert main(["create-squad", "--input", str(data), "--vocab", str(vocab_path), "--out", str(tmp_path / "cli")]) == 0
    said = capfd.readouterr()
    assert [line for line in said.err.splitlines() if "warning" in line] == [
        f"create-squad: warning: {data}: question 'q{i}': answer_start {199 + i} with a 4-character answer lies "
        "outside its 12-character context; skipped, as run_squad.py does" for i in range(1, 21)] + [
        "create-squad: warning: ... 2 more questions skipped"]
    assert said.out.count("  warning  ") == 1

@pytest.mark.parametrize("flags, message", [
    (["--format", "parquet"], "--format parquet: fine-tuning records are written as "),  # a TypeError traceback
    (["--seq", str(10 ** 12)], f"--seq {10 ** 12} is too large: at most 65,535 positions"),  # a 7 TiB MemoryError
])
def test_fine_tuning_flags_they_cannot_write_are_usage_errors(tmp_path, vocab_path, finetune_dir, capsys, flags,
                                                             message):
    squad_input = finetune_dir / "squad/v1.1/dev-v1.1.json"
    assert main(["create-squad", "--input", str(squad_input), "--vocab", str(vocab_path), "--out",
                 str(tmp_path / "s"), *flags]) == 2
    assert message in _error_line(capsys)
    assert main(["create-glue", "--task", "MRPC", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab",
                 str(vocab_path), "--out", str(tmp_path / "g"), *flags]) == 2
    assert message in _error_line(capsys)
    assert not (tmp_path / "s").exists() and not (tmp_path / "g").exists()


def _sts_b_score_error(tmp_path, vocab_path, capsys, score):
    """create-glue of a one-row STS-B train.tsv whose score is `score`: (its path, the error line; exit 1)."""
    data = tmp_path / "STS-B"
    data.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    (data / "train.tsv").write_text(header + f"0\tmain\tf\t2012\t0\tnone\tnone\ta man plays\ta man sings\t{score}\n")
    assert main(["create-glue", "--task", "STS-B", "--data-dir", str(data), "--vocab", str(vocab_path), "--out",
                 str(tmp_path / "out"), "--split", "train"]) == 1
    return data / "train.tsv", _error_line(capsys)


@pytest.mark.parametrize("score", ["nan", "inf", "1_0", "-inf"])
def test_an_sts_b_score_that_is_no_finite_decimal_is_one_line(tmp_path, vocab_path, capsys, score):
    """float() took them: nan and inf were written, and validate then refused the records; "1_0" became 10.0."""
    path, line = _sts_b_score_error(tmp_path, vocab_path, capsys, score)
    assert line.endswith(f"{path}:2: score {score!r} in the last column is not a finite decimal number (STS-B is "
                         "regression)")


@pytest.mark.parametrize("score", ["-1e308", "3.5e38"])
def test_an_sts_b_score_past_float32_is_one_line(tmp_path, vocab_path, capsys, score):
    """The records hold the score as float32: -1e308 was finite as a Python float, written as -inf (a NumPy
    RuntimeWarning, exit 0), and validate then refused the records."""
    path, line = _sts_b_score_error(tmp_path, vocab_path, capsys, score)
    assert line.endswith(f"{path}:2: score {score!r} in the last column is past float32's range, as the records "
                         "store it (STS-B is regression)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task, row", [("MRPC", "1\t1\t2\tthe cat sat\tthe dog ran"),
                                       ("STS-B", "0\tmain\tf\t2012\t0\tnone\tnone\ta man plays\ta man sings\t3.8")])
def test_a_labelled_file_without_its_header_row_is_refused(tmp_path, vocab_path, capsys, task, row):
    """The first row is skipped as the header row, as run_classifier.py's processors skip it: a dev.tsv saved without
    its header lost its first example without a word (exit 0, one example fewer). A first row whose label column
    holds a label is no header."""
    data = tmp_path / task
    data.mkdir()
    (data / "dev.tsv").write_text(f"{row}\n{row}\n")
    assert main(["create-glue", "--task", task, "--data-dir", str(data), "--vocab", str(vocab_path), "--out",
                 str(tmp_path / "out"), "--split", "dev"]) == 1
    label = row.split("\t")[-1 if task == "STS-B" else 0]
    column = "last" if task == "STS-B" else "0"
    assert _error_line(capsys).endswith(f"{data / 'dev.tsv'}:1: the first row is skipped as the header row ({task} "
                                        f"dev files start with one), but it is an example (label {label!r} in column "
                                        f"{column}): put the header row back")
    assert not (tmp_path / "out").exists()


def _glue_argv(data, vocab_path, out, split):
    """create-glue's arguments for one split of the task directory `data` (named as its task)."""
    return ["create-glue", "--task", data.name, "--data-dir", str(data), "--vocab", str(vocab_path), "--out", str(out),
            "--split", split, "--quiet"]


def _assert_refused(argv, capsys, out, message):
    """The command exits 1 with one error line ending in `message`, and writes no `out`."""
    assert main(argv) == 1
    assert _error_line(capsys).endswith(message)
    assert not out.exists()


def test_a_file_without_its_header_row_is_refused_behind_a_byte_order_mark(tmp_path, vocab_path, capsys):
    """A dev.tsv saved with a UTF-8 byte-order mark (Excel, Notepad) and without its header row: its first label read
    '\\ufeff1', no label, so the row was skipped as the header, exit 0 and one example fewer. With its header row
    and the mark, the header is skipped and the examples kept, as before."""
    data = tmp_path / "MRPC"
    data.mkdir()
    rows = "1\t1\t2\tthe cat sat\tthe dog ran\n0\t3\t4\ta cat sat\ta dog ran\n"
    (data / "dev.tsv").write_text("\ufeff" + rows, encoding="utf-8")
    argv = _glue_argv(data, vocab_path, tmp_path / "out", "dev")
    _assert_refused(argv, capsys, tmp_path / "out", f"{data / 'dev.tsv'}:1: the first row is skipped as the header "
                    "row (MRPC dev files start with one), but it is an example (label '1' in column 0): put the header "
                    "row back")
    (data / "dev.tsv").write_text("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + rows, encoding="utf-8")
    assert main(argv) == 0
    assert json.loads((tmp_path / "out/manifest.json").read_text())["files"]["eval.tf_record"]["examples"] == 2


def test_a_test_file_without_its_header_row_is_refused(tmp_path, vocab_path, capsys):
    """A test.tsv saved without its header lost its first example: every prediction after it on the wrong line."""
    data = tmp_path / "RTE"
    data.mkdir()
    (data / "test.tsv").write_text("0\tthe cat sat\ta cat sat\n1\tthe dog ran\ta dog ran\n")
    assert main(["create-glue", "--task", "RTE", "--data-dir", str(data), "--vocab", str(vocab_path), "--out",
                 str(tmp_path / "out"), "--split", "test"]) == 1
    assert _error_line(capsys).endswith(f"{data / 'test.tsv'}:1: the first row is skipped as the header row (RTE test "
                                        "files start with one), but it names no GLUE column (index, sentence, "
                                        "question1, ...): put the header row back")
    (data / "test.tsv").write_text("index\tsentence1\tsentence2\n0\tthe cat sat\ta cat sat\n")
    assert main(["create-glue", "--task", "RTE", "--data-dir", str(data), "--vocab", str(vocab_path), "--out",
                 str(tmp_path / "out"), "--split", "test"]) == 0


def test_a_tsv_whose_lines_end_in_cr_alone_is_refused(finetune_dir, tmp_path, vocab_path, capsys):
    """Only LF ends a row, as _read_tsv reads it under TensorFlow: a CoLA train.tsv (no header row) saved with classic
    Mac OS line endings was one row, every example but the first lost without a word (exit 0)."""
    data = tmp_path / "CoLA"
    data.mkdir()
    rows = (finetune_dir / "glue/CoLA/train.tsv").read_bytes().split(b"\n")[:5]
    (data / "train.tsv").write_bytes(b"\r".join(rows) + b"\r")
    argv = _glue_argv(data, vocab_path, tmp_path / "out", "train")
    _assert_refused(argv, capsys, tmp_path / "out", f"{data / 'train.tsv'}: its lines end in a carriage return alone "
                    "(CR, classic Mac OS line endings), which ends no line; GLUE files are UTF-8 TSV, lines ending in "
                    "LF or CRLF")
    (data / "train.tsv").write_bytes(b"\r\n".join(rows) + b"\r\n")  # CRLF: the CRs dropped, as the reference does
    assert main(argv) == 0
    assert json.loads((tmp_path / "out/manifest.json").read_text())["files"]["train.tf_record"]["examples"] == 5


def test_a_stage_function_given_options_and_keywords_refuses_both(finetune_dir, vocab_path, tmp_path):
    """create_squad(options, out=X) wrote to options.out, keyword ignored; a wrong options class was an
    AttributeError. As `bertprep.create` does: a TypeError saying which."""
    import bertprep

    options = bertprep.CreateSquadOptions(input=str(finetune_dir / "squad/v1.1/dev-v1.1.json"),
                                          vocab=str(vocab_path), out=str(tmp_path / "a"))
    with pytest.raises(TypeError, match=r"give a CreateSquadOptions or its fields as keywords, not both \(out\)"):
        bertprep.create_squad(options, out=str(tmp_path / "b"))
    with pytest.raises(TypeError, match="expected CreateGlueOptions, got CreateSquadOptions"):
        bertprep.create_glue(options)
    with pytest.raises(TypeError, match="expected InspectOptions, got str"):
        bertprep.inspect("records.tfrecord")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_bad_glue_input(finetune_dir, tmp_path, vocab_path, capsys):
    data = tmp_path / "MRPC"
    data.mkdir()
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        (data / name).write_bytes((finetune_dir / "glue/MRPC" / name).read_bytes())
    lines = (data / "dev.tsv").read_text().split("\n")
    lines[5] = "\t".join(lines[5].split("\t")[:4])  # the second sentence lost
    (data / "dev.tsv").write_text("\n".join(lines))
    out = tmp_path / "out"
    argv = ["create-glue", "--data-dir", str(data), "--vocab", str(vocab_path), "--out", str(out)]
    assert main([*argv, "--task", "MRPC"]) == 1
    assert _error_line(capsys).endswith(f"{data / 'dev.tsv'}:6: 4 columns, expected at least 5 "
                                        "(MRPC dev: text in column 3, second text in column 4, label in column 0)")
    assert not out.exists()  # every split's file is read before any is written
    lines[5] = "2" + lines[4][1:]
    (data / "dev.tsv").write_text("\n".join(lines))
    assert main([*argv, "--task", "MRPC"]) == 1
    assert _error_line(capsys).endswith(f"{data / 'dev.tsv'}:6: label '2' in column 0, expected one of 0, 1")
    assert main([*argv, "--task", "SQuAD"]) == 2
    assert _error_line(capsys).endswith("--task: unknown GLUE task 'SQuAD'; known: CoLA, MRPC, MNLI, SST-2, STS-B, "
                                        "QQP, QNLI, RTE, WNLI")
    assert main([*argv, "--task", "MRPC", "--split", "train", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "train.of_record-0", "train.tf_record"]


def test_an_empty_glue_split_is_refused_for_what_it_is(finetune_dir, tmp_path, vocab_path, capsys):
    """A split's file of a header row alone was refused `(OneFlow cannot read an empty part)`, with `--format
    tfrecord` too, which writes no OneFlow part: the reason misled. It names the split and the remedy now."""
    data = tmp_path / "MRPC"
    data.mkdir()
    (data / "train.tsv").write_bytes((finetune_dir / "glue/MRPC/train.tsv").read_bytes())
    (data / "dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n")
    out = tmp_path / "out"
    assert main(["create-glue", "--task", "MRPC", "--data-dir", str(data), "--vocab", str(vocab_path), "--out",
                 str(out), "--split", "train", "--split", "dev", "--format", "tfrecord"]) == 1
    assert _error_line(capsys).endswith(f"{data / 'dev.tsv'}: no examples after its header row (MRPC dev); a split "
                                        "needs at least one: pass --split to convert only the others")
    assert not out.exists()


# ---------------------------------------------------------------- the encoder every record goes through


def test_encode_columns_gives_encode_record_bytes_for_every_kind():
    rng = np.random.default_rng(3)
    dims = {"seq": 40, "pred": 6, "k": 3}
    for kind in schemas.KINDS.values():
        columns = {f.name: (rng.random((30, f.size(dims))).astype(np.float32) if f.dtype == schemas.FLOAT
                            else rng.integers(-3, 2**31 - 1, (30, f.size(dims)))) for f in kind.features}
        columns["input_ids"][0, :] = [0, 127, 128, 16383, 16384, 2**21, 2**28, -1] * 5  # every varint width
        for fmt in formats.FORMATS:
            expected = b"".join(
                formats.frame(formats.encode_record({k: v[i] for k, v in columns.items()}, fmt, kind), fmt)
                for i in range(30))
            assert formats.encode_columns(columns, fmt, kind) == expected, (kind.name, fmt)



# ---------------------------------------------------------------- validate and inspect


def _validate(capsys, *argv):
    code = main(["validate", *map(str, argv), "--json", "--quiet"])
    return code, json.loads(capsys.readouterr().out)


def _findings(report):
    return [(f["check"], f["record"], f["field"], f["message"]) for f in report["findings"]]


def test_validate_a_squad_directory_and_damaged_squad_records(finetune_dir, vocab_path, tmp_path, capsys):
    out = tmp_path / "squad"
    for split in ("train", "dev"):
        assert squad(finetune_dir, vocab_path, out, "2.0", split, 128, 32, 24) == 0
    code, report = _validate(capsys, out, "--compare")
    assert code == 0, _findings(report)
    section = report["datasets"][0]
    assert sorted(section["kinds"]) == ["squad_eval", "squad_train"] and section["dims"] == {"seq": 128}
    assert section["vocab_size"] == 30522  # the manifest's vocab
    assert report["compare"][0]["equal"] and report["compare"][0]["records"] == 576 + 185
    train = section["stats"]["tfrecord"]["train"]
    assert train["records"] == 576 and sum(train["answers"].values()) == 576 and train["answers"]["impossible"] > 0
    assert section["stats"]["ofrecord"]["eval"]["duplicate_unique_ids"] == 0
    assert {check for check, row in report["checks"].items() if row["status"] == "ok"} >= {
        "answer_span", "is_impossible", "unique_ids", "separators", "segment_ids", "manifest", "consistency"}

    records = [dict(r) for r in formats.read_records(out / "train.tf_record")][:8]
    answered = next(i for i, r in enumerate(records) if r["start_positions"][0] > 0)
    records = [records[answered], *records[:answered], *records[answered + 1:]][:6]  # record 0 has an answer
    first_sep = int(np.flatnonzero(records[1]["input_ids"] == 102)[0])
    records[0]["start_positions"] = records[0]["end_positions"] + 1  # start after end
    records[1]["start_positions"] = np.array([first_sep])  # on the question's [SEP]
    records[1]["end_positions"] = np.array([first_sep + 1])
    records[2]["is_impossible"] = np.array([1])  # impossible, with an answer (or 0/0 and fine)
    records[2]["start_positions"], records[2]["end_positions"] = np.array([first_sep + 2]), np.array([first_sep + 2])
    records[3]["unique_ids"] = records[3]["unique_ids"] + 5
    length = int(records[4]["input_mask"].sum())
    records[4]["input_ids"] = records[4]["input_ids"].copy()
    records[4]["input_ids"][length - 1] = 1996  # the last [SEP] gone
    records[5]["segment_ids"] = records[5]["segment_ids"].copy()
    records[5]["segment_ids"][-1] = 1  # segment 1 in the padding (or the last token: 1 is right there)
    damaged = formats.write_records(tmp_path / "damaged.tfrecord", records, "tfrecord", schemas.SQUAD_TRAIN)
    assert damaged == 6
    code, report = _validate(capsys, tmp_path / "damaged.tfrecord", "--vocab", vocab_path)
    assert code == 1
    found = {(check, record): message for check, record, _field, message in _findings(report)}
    assert found[("answer_span", 0)].startswith("start ") and "after end" in found[("answer_span", 0)]
    assert found[("answer_span", 1)] == (f"answer {first_sep} … {first_sep + 1}, expected 0 … 0 or inside the context "
                                         f"(the context is positions {first_sep + 1} … "
                                         f"{int(records[1]['input_mask'].sum()) - 2})")
    assert found[("is_impossible", 2)] == (f"1 with an answer at {first_sep + 2} … {first_sep + 2}, "
                                           "expected start = end = 0")
    assert found[("unique_ids", 3)] == f"{int(records[3]['unique_ids'][0])} after 1000000002, expected one more"
    assert found[("unique_ids", 4)].endswith("expected one more")  # the run continues from the original ids
    assert found[("separators", 4)] == f"1 [SEP] (102) at [{first_sep}], expected 2 (length {length})"
    if int(records[5]["input_mask"].sum()) < 128:
        assert found[("segment_ids", 5)] == "segment_ids[127] is 1, expected 0 (padding)"


def test_validate_glue_labels_against_the_manifest_and_padding_examples(finetune_dir, vocab_path, tmp_path, capsys):
    out = tmp_path / "mnli"
    assert main(["create-glue", "--task", "MNLI", "--data-dir", str(finetune_dir / "glue/MNLI"), "--vocab",
                 str(vocab_path), "--out", str(out), "--quiet"]) == 0
    code, report = _validate(capsys, out)
    assert code == 0, _findings(report)
    labels = report["datasets"][0]["stats"]["ofrecord"]["train"]["labels"]
    assert set(labels) <= {"0", "1", "2"} and sum(labels.values()) == 160
    assert report["datasets"][0]["stats"]["ofrecord"]["test"]["labels"] == {"0": 60}

    records = [dict(r) for r in formats.read_records(out / "eval.tf_record")]
    records[1]["label_ids"] = np.array([3])  # MNLI has 3 labels
    records[2] = {name: np.zeros_like(values) for name, values in records[2].items()}  # the reference's TPU padding
    records[3]["is_real_example"] = np.array([0])  # says padding, holds an example
    formats.write_records(out / "eval.tf_record", records, "tfrecord", schemas.GLUE)
    code, report = _validate(capsys, out)
    assert code == 1
    found = _findings(report)
    assert ("label_ids", 1, "label_ids", "label 3, expected 0 … 2 (3 labels in the manifest)") in found
    assert ("is_real_example", 3, "is_real_example",
            "0 on a record that is not all zeros (a padding example holds nothing)") in found
    assert not [f for f in found if f[1] == 2]  # an all-zero padding example is sound
    assert {f[0] for f in found if f[1] is None} == {"manifest"}  # eval.tf_record: other bytes and sha256 now
    assert report["datasets"][0]["stats"]["tfrecord"]["eval"]["padding_examples"] == 2


def test_inspect_shows_squad_answers_and_glue_labels(finetune_dir, vocab_path, tmp_path, capsys):
    assert squad(finetune_dir, vocab_path, tmp_path, "1.1", "train", 128, 32, 24) == 0
    records = list(formats.read_records(tmp_path / "train.of_record-0"))
    index = next(i for i, r in enumerate(records) if r["start_positions"][0] > 0)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "train.of_record-0"), "--vocab", str(vocab_path), "--skip", str(index),
                 "-n", "1"]) == 0
    shown = capsys.readouterr().out
    assert f"(ofrecord, squad_train) record {index}" in shown
    answer = next(line for line in shown.splitlines() if line.startswith("  answer: "))
    start, end = int(records[index]["start_positions"][0]), int(records[index]["end_positions"][0])
    words = load_vocab(vocab_path).words
    assert answer == "  answer: " + " ".join(words[i] for i in records[index]["input_ids"][start:end + 1])


def test_validate_checks_the_eval_metadata_against_the_manifest(finetune_dir, vocab_path, tmp_path, capsys):
    assert squad(finetune_dir, vocab_path, tmp_path, "1.1", "dev", 128, 32, 24) == 0
    lines = (tmp_path / "eval.features.jsonl").read_text().splitlines()
    (tmp_path / "eval.features.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # a feature lost
    code, report = _validate(capsys, tmp_path)
    assert code == 1
    (finding,) = report["findings"]
    assert finding["check"] == "manifest" and finding["file"] == str(tmp_path / "eval.features.jsonl")
    assert "manifest.json says" in finding["message"]


def test_squad_words_split_on_the_reference_whitespace_only():
    """run_squad.py splits contexts on space, tab, CR, LF and U+202F; str.split()'s other whitespace stays inside
    words."""
    import sys

    from bertprep.stages.finetune_data.squad import _OTHER_WHITESPACE, split_words

    others = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()} - set(" \t\r\n\u202f")
    assert {c for c in others if _OTHER_WHITESPACE.match(c)} == others  # the fast path knows every one of them
    assert split_words("a b\tc\r\nd\u202fe  f") == ["a", "b", "c", "d", "e", "f"]
    for c in sorted(others):
        assert split_words(f" x{c}y  z") == [f"x{c}y", "z"], hex(ord(c))


def test_word_at_is_the_references_char_to_word_offset():
    from bertprep.stages.finetune_data.squad import Paragraph, split_words, word_at

    rng = random.Random(5)
    alphabet = ["a", "b", "é", " ", "  ", "\t", "\n", "\r", "\u202f", "\xa0", "\u2003", "."]
    for _ in range(300):
        context = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        offsets, words, previous_is_space = [], [], True  # read_squad_examples, as written
        for c in context:
            if c in " \t\r\n\u202f":
                previous_is_space = True
            else:
                if previous_is_space:
                    words.append(c)
                else:
                    words[-1] += c
                previous_is_space = False
            offsets.append(len(words) - 1)
        paragraph = Paragraph(context, split_words(context))
        assert paragraph.words == words
        for offset in range(-len(context) - 2, len(context) + 2):
            expected = offsets[offset] if -len(context) <= offset < len(context) else None
            assert word_at(paragraph, offset) == expected, (context, offset)


def test_max_context_windows_is_the_references_in_memory_of_the_context_only():
    """Each token's max-context window is _check_is_max_context's (run as written). It was found by scoring every
    window at every token of the context: memory of windows × tokens, 1.9 GB and 6 s for each question of a
    100,000-token context, more than memory for a book's; its peak for 20,000 tokens was 74 MB, now under 1 MB."""
    import tracemalloc

    from bertprep.stages.finetune_data.squad import doc_spans, max_context_windows

    def reference(spans, position):
        best_score, best_index = None, None
        for index, (start, length) in enumerate(spans):
            end = start + length - 1
            if position < start or position > end:
                continue
            score = min(position - start, end - position) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best_index = score, index
        return best_index

    for length, window, stride in ((1, 1, 1), (7, 1, 1), (40, 9, 2), (40, 9, 9), (40, 9, 30), (41, 10, 4), (5, 64, 2)):
        spans = doc_spans(length, window, stride)
        assert max_context_windows(spans, length).tolist() == [reference(spans, p) for p in range(length)]
    spans = doc_spans(20000, 379, 128)
    tracemalloc.start()
    try:
        max_context_windows(spans, 20000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


@pytest.mark.heavy
def test_tensorflow_parses_our_records_with_the_reference_input_fn_specs(finetune_dir, vocab_path, tmp_path):
    """run_squad.py's and run_classifier.py's input_fn feature specs, through TensorFlow's own parser."""
    tf = pytest.importorskip("tensorflow")
    assert squad(finetune_dir, vocab_path, tmp_path / "squad", "2.0", "train", 128, 32, 24) == 0
    assert main(["create-glue", "--task", "MRPC", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab",
                 str(vocab_path), "--out", str(tmp_path / "glue"), "--split", "dev", "--quiet"]) == 0
    seq = tf.io.FixedLenFeature([128], tf.int64)
    scalar = tf.io.FixedLenFeature([], tf.int64)
    specs = {  # input_fn_builder (run_squad.py, is_training) and file_based_input_fn_builder (run_classifier.py)
        tmp_path / "squad/train.tf_record": {"unique_ids": scalar, "input_ids": seq, "input_mask": seq,
                                             "segment_ids": seq, "start_positions": scalar, "end_positions": scalar},
        tmp_path / "glue/eval.tf_record": {"input_ids": seq, "input_mask": seq, "segment_ids": seq,
                                           "label_ids": scalar, "is_real_example": scalar},
    }
    for path, spec in specs.items():
        ours = list(formats.read_records(path))
        parsed = [tf.io.parse_single_example(record, spec) for record in tf.data.TFRecordDataset(str(path))]
        assert len(parsed) == len(ours)
        for theirs, mine in zip(parsed, ours):
            for name in spec:
                assert np.array_equal(np.atleast_1d(theirs[name].numpy()), mine[name]), (path.name, name)


def test_glue_rerun_skips_finished_splits_and_adds_the_rest(finetune_dir, vocab_path, tmp_path, capsys):
    argv = ["create-glue", "--task", "CoLA", "--data-dir", str(finetune_dir / "glue/CoLA"), "--vocab", str(vocab_path),
            "--out", str(tmp_path), "--json", "--quiet"]
    assert main([*argv, "--split", "train"]) == 0
    train = (tmp_path / "train.tf_record").read_bytes()
    capsys.readouterr()
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {split: s["created"] for split, s in summary["splits"].items()} == {"train": False, "dev": True,
                                                                               "test": True}
    assert (tmp_path / "train.tf_record").read_bytes() == train
    assert ((tmp_path / "predict.tf_record").read_bytes()
            == (finetune_dir / "glue/CoLA_test_seq128.tfrecord").read_bytes())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(manifest["source"]) == ["dev", "test", "train"] and len(manifest["files"]) == 6


def test_a_file_named_as_a_fine_tuning_output_that_no_manifest_lists_is_refused(finetune_dir, vocab_path, tmp_path,
                                                                                capsys):
    """create-glue (and create-squad, with the same directory) overwrote a user's `train.tf_record` in --out
    without a word, and left a stray `train.of_record-1` beside its part 0 for `train.of_record-*` to read."""
    glue = ["create-glue", "--task", "MRPC", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab", str(vocab_path),
            "--quiet", "--out"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.tf_record").write_bytes(b"mine")
    (mine / "notes.txt").write_text("nothing writes or reads it")
    assert main([*glue, str(mine)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"bertprep create-glue: error: {mine}/train.tf_record: no manifest of bertprep lists it (a file of yours or "
        "of another tool?): create-glue would overwrite it, or its readers take it for one of its files; remove it, "
        "or choose another --out")
    assert sorted(os.listdir(mine)) == ["notes.txt", "train.tf_record"]
    assert (mine / "train.tf_record").read_bytes() == b"mine"
    (mine / "train.tf_record").unlink()
    assert main([*glue, str(mine), "--split", "dev"]) == 0  # notes.txt is let be
    assert main([*glue, str(mine)]) == 0  # a second run adds the other splits
    (mine / "train.of_record-1").write_bytes(b"stray")
    assert main([*glue, str(mine)]) == 1
    assert f"{mine}/train.of_record-1: no manifest of bertprep lists it" in capsys.readouterr().err
    squad_out = tmp_path / "squad"
    squad_out.mkdir()
    (squad_out / "eval.features.jsonl").write_text("{}\n")
    assert squad(finetune_dir, vocab_path, squad_out, "1.1", "dev", 128, 32, 24) == 1
    assert f"{squad_out}/eval.features.jsonl: no manifest of bertprep lists it" in capsys.readouterr().err


def test_a_rerun_takes_the_files_a_killed_run_renamed_before_its_manifest_listed_them(finetune_dir, vocab_path,
                                                                                      tmp_path):
    """A run killed between a split's renames and its manifest save leaves files no manifest lists: its claim in
    .partial/steps names them, so the rerun rewrites them (a user's file of such a name is refused, above)."""
    glue = ["create-glue", "--task", "MRPC", "--data-dir", str(finetune_dir / "glue/MRPC"), "--vocab", str(vocab_path),
            "--quiet", "--out", str(tmp_path / "out")]
    assert main([*glue, "--split", "dev"]) == 0
    # the state that kill leaves: train's files in place, unlisted, and claimed
    (tmp_path / "out" / "train.tf_record").write_bytes(b"renamed, not listed")
    steps = tmp_path / "out" / ".partial" / "steps"
    steps.mkdir(parents=True)
    (steps / "fine-tuning-names.json").write_text(json.dumps(["train.of_record-0", "train.tf_record"]))
    assert main(glue) == 0
    assert not (tmp_path / "out" / ".partial").exists()
    listed = json.loads((tmp_path / "out" / "manifest.json").read_text())["files"]
    assert "train.tf_record" in listed and (tmp_path / "out" / "train.tf_record").stat().st_size > 100


def test_glue_progress_counts_examples_within_a_split_and_leaves_complete_splits_out_of_its_rate(
        finetune_dir, vocab_path, tmp_path, capsys, monkeypatch):
    """create-glue's progress went by splits: `create-glue: 1/1 splits, 20,000 examples (...)` once, at the end,
    and MNLI's 393k-example train split was silent until then. It counts the examples as each chunk is written,
    out of every split's (all are read first); a split already complete counts as done before the run."""
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0)  # a line at every chunk, as a run of minutes has them
    data = tmp_path / "MRPC"
    data.mkdir()
    header, *rows = (finetune_dir / "glue/MRPC/train.tsv").read_text().splitlines()
    count = CHUNK_EXAMPLES + 904  # two chunks
    (data / "train.tsv").write_text("\n".join([header, *(rows[i % len(rows)] for i in range(count))]) + "\n")
    shutil.copy(finetune_dir / "glue/MRPC/dev.tsv", data / "dev.tsv")
    argv = ["create-glue", "--task", "MRPC", "--data-dir", str(data), "--vocab", str(vocab_path), "--out",
            str(tmp_path / "out"), "--split", "train"]
    assert main(argv) == 0
    lines = [re.sub(r"\([\d,]+ records/s\)", "(R)", line) for line in capsys.readouterr().err.splitlines()]
    assert re.fullmatch(rf"create-glue: {CHUNK_EXAMPLES}/{count} examples, {CHUNK_EXAMPLES:,} records \(R\), "
                        r"ETA \d+s, \d+s", lines[0]), lines
    assert re.fullmatch(rf"create-glue: {count}/{count} examples, {count:,} records \(R\), \d+s", lines[-1]), lines
    assert main([*argv, "--split", "dev"]) == 0  # train is complete: its examples are done before the run
    lines = [re.sub(r"\([\d,]+ records/s\)", "(R)", line) for line in capsys.readouterr().err.splitlines()]
    assert lines[0] == f"create-glue: train: already complete in {tmp_path / 'out'}"
    assert re.fullmatch(rf"create-glue: {count + 60}/{count + 60} examples, 60 records \(R\), \d+s", lines[-1]), lines


def test_a_data_errors_remedy_names_the_field_for_a_python_caller(golden_dir, tmp_path, capsys):
    """Only usage errors were rewritten for a Python caller: a missing split's DataError said `pass --split to
    convert only some splits` to a caller of bertprep.create_glue, whose field is CreateGlueOptions.split."""
    (tmp_path / "MRPC").mkdir()
    fields = {"task": "MRPC", "data_dir": str(tmp_path / "MRPC"), "vocab": str(golden_dir / "vocab.txt"),
              "out": str(tmp_path / "out")}
    missing = f"{tmp_path / 'MRPC' / 'train.tsv'}: no such file (MRPC train split; pass "
    with pytest.raises(bertprep.errors.DataError) as raised:
        bertprep.create_glue(**fields)
    assert str(raised.value) == missing + "CreateGlueOptions.split to convert only some splits)"
    assert main(["create-glue", *(f"--{name.replace('_', '-')}={value}" for name, value in fields.items())]) == 1
    assert capsys.readouterr().err == f"bertprep create-glue: error: {missing}--split to convert only some splits)\n"
