"""`bertprep download squad` and `bertprep download glue` against the stand-in servers."""

import csv
import hashlib
import json
import time

import pytest

from bertprep.stages.download.glue import TASKS as DOWNLOAD_TASKS
from stand_in_servers import (
    StandInServer,
    looks_complete,
    ok,
    one_line_error,
    parquet_bytes,
    run_cli,
    run_python,
    same_apart_from_workdir,
)

COUNTS = {"train-v1.1.json": 87_599, "dev-v1.1.json": 10_570, "train-v2.0.json": 130_319, "dev-v2.0.json": 11_873}
PER_PARAGRAPH = 50


def squad_rows(count, version, split):
    """Flat hub-style rows: `count` questions, 50 per paragraph, 10 paragraphs per article."""
    rows = []
    for i in range(count):
        paragraph, article, k = i // PER_PARAGRAPH, i // (PER_PARAGRAPH * 10), i % PER_PARAGRAPH
        context = f"Paragraph {paragraph} names an answer."
        impossible = version == "2.0" and i % 3 == 0
        rows.append({
            "id": f"{split}{version}-{i}", "title": f"Article {article}", "context": context,
            "question": f"Which answer is question {k} about?",
            "answers": {"text": [] if impossible else ["an answer"],
                        "answer_start": [] if impossible else [context.index("an answer")]},
        })
    return rows


def squad_json(rows, version):
    from bertprep.stages.download.squad import squad_json_from_rows

    return json.dumps(squad_json_from_rows(rows, version)).encode()


@pytest.fixture(scope="session")
def squad_files():
    files = {}
    for name, count in COUNTS.items():
        version = "2.0" if "v2.0" in name else "1.1"
        files[name] = squad_json(squad_rows(count, version, name.split("-")[0]), version)
    return files


@pytest.fixture
def server():
    with StandInServer() as s:
        yield s


def _publish_squad(server, squad_files, tmp_path):
    for name, data in squad_files.items():
        server.add_file(f"squad/{name}", data)
    server.add_file("codalab/0xbcd57bee090b421c982906709c8c27e1/contents/blob/", b"# evaluate v1.1\n")
    sums = tmp_path / "squad.md5"
    sums.write_text("".join(f"{hashlib.md5(d).hexdigest()}  {n}\n" for n, d in squad_files.items()))
    return sums


def test_squad_layout_md5_and_counts(server, squad_files, tmp_path):
    sums = _publish_squad(server, squad_files, tmp_path)
    work = tmp_path / "w"
    args = ["download", "squad", "--workdir", work, "--base-url", server.url + "/squad",
            "--eval-base-url", server.url + "/codalab", "--checksums", sums, "--json"]
    summary = ok(run_cli(*args))
    files = summary["files"]
    for name, count in COUNTS.items():
        relpath = f"v{'2.0' if 'v2.0' in name else '1.1'}/{name}"
        assert files[relpath]["examples"] == count
        assert files[relpath]["md5"] == hashlib.md5(squad_files[name]).hexdigest()
        assert "md5" in files[relpath]["verified"]
        assert (work / "download/squad" / relpath).read_bytes() == squad_files[name]
    assert (work / "download/squad/v1.1/evaluate-v1.1.py").read_text() == "# evaluate v1.1\n"
    assert "v2.0/evaluate-v2.0.py" not in files  # not reachable: reported, not fatal
    before = len(server.requests)
    ok(run_cli(*args))  # complete: nothing is fetched again
    assert [r for r in server.requests[before:] if "/squad/" in r[1]] == []


def test_squad_checksum_mismatch_leaves_nothing(server, squad_files, tmp_path):
    _publish_squad(server, squad_files, tmp_path)
    work = tmp_path / "w"
    # the built-in md5s are those of the real files, which these are not
    line = one_line_error(run_cli("download", "squad", "--version", "1.1", "--workdir", work,
                                  "--base-url", server.url + "/squad", "--eval-base-url", server.url + "/codalab"))
    assert line.startswith("bertprep download: error: ")
    assert "train-v1.1.json: md5 mismatch: expected 981b29407e0affa3b1b156f72073b945" in line
    assert [p for p in looks_complete(work / "download/squad") if p.endswith(".json") and p != "manifest.json"] == []


def test_squad_wrong_count_is_rejected(server, squad_files, tmp_path):
    short = squad_json(squad_rows(100, "1.1", "train"), "1.1")
    server.add_file("squad/train-v1.1.json", short)
    sums = tmp_path / "s.md5"
    sums.write_text(f"{hashlib.md5(short).hexdigest()}  train-v1.1.json\n")
    line = one_line_error(run_cli("download", "squad", "--version", "1.1", "--workdir", tmp_path / "w",
                                  "--base-url", server.url + "/squad", "--checksums", sums))
    assert "train-v1.1.json: 100 examples, expected 87,599" in line
    assert not (tmp_path / "w/download/squad/v1.1/train-v1.1.json").exists()


def test_squad_404(server, tmp_path):
    line = one_line_error(run_cli("download", "squad", "--workdir", tmp_path / "w", "--base-url",
                                  server.url + "/nothing"))
    assert line.endswith("/nothing/train-v1.1.json: HTTP 404 Not Found")


@pytest.mark.parametrize("served", [None, b"<html><body>502 Bad Gateway - please log in</body></html>"])
def test_an_evaluation_script_not_fetched_is_a_warning_even_quiet(server, squad_files, tmp_path, served):
    """A 404, or an error page served with 200 (kept as evaluate-v1.1.py before: no checksum is published), is
    a summary warning, so `--json --quiet` says it too; the SQuAD data is complete without it."""
    sums = _publish_squad(server, squad_files, tmp_path)
    eval_path = "codalab/0xbcd57bee090b421c982906709c8c27e1/contents/blob/"
    if served is None:
        del server.files["/" + eval_path]
    else:
        server.add_file(eval_path, served)
    work = tmp_path / "w"
    summary = ok(run_cli("download", "squad", "--version", "1.1", "--workdir", work, "--base-url",
                         server.url + "/squad", "--eval-base-url", server.url + "/codalab", "--checksums", sums,
                         "--json", "--quiet"))
    (warning,) = summary["warnings"]
    assert warning.startswith("v1.1/evaluate-v1.1.py: not fetched (")
    assert ("HTTP 404" if served is None else "not Python source (SyntaxError") in warning
    assert warning.endswith("SQuAD data is complete without it")
    assert not (work / "download/squad/v1.1/evaluate-v1.1.py").exists()
    assert "v1.1/evaluate-v1.1.py" not in json.loads((work / "download/squad/manifest.json").read_text())["files"]


def test_a_second_squad_download_into_the_same_workdir_is_refused_while_the_first_runs(server, squad_files,
                                                                                       tmp_path):
    """Two runs appended to one .part and left a file under its final name that the manifest called verified."""
    import subprocess
    import sys

    sums = _publish_squad(server, squad_files, tmp_path)
    server.stall_after["/squad/train-v1.1.json"] = [1000, 1]
    work = tmp_path / "w"
    argv = ["download", "squad", "--version", "1.1", "--workdir", str(work), "--base-url", server.url + "/squad",
            "--eval-base-url", server.url + "/codalab", "--checksums", str(sums), "--quiet", "--stall-timeout", "5"]
    first = subprocess.Popen([sys.executable, "-m", "bertprep", *argv])
    try:
        deadline = time.monotonic() + 60
        while not any(r[1] == "/squad/train-v1.1.json" for r in server.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        line = one_line_error(run_cli(*argv))
        assert f"{work / 'download' / 'squad'}: another run is writing here (bertprep download squad, pid " \
               f"{first.pid}" in line
    finally:
        assert first.wait(timeout=120) == 0  # it resumes after the stall and completes
    assert (work / "download/squad/v1.1/train-v1.1.json").read_bytes() == squad_files["train-v1.1.json"]


def test_squad_from_hub_writes_the_same_layout(server, tmp_path):
    for version, repo, config in (("1.1", "rajpurkar/squad", "plain_text"), ("2.0", "rajpurkar/squad_v2", "squad_v2")):
        files = {}
        for split, hub_split in (("train", "train"), ("dev", "validation")):
            rows = squad_rows(COUNTS[f"{split}-v{version}.json"], version, split)
            columns = {k: [r[k] for r in rows] for k in rows[0]}
            files[f"{config}/{hub_split}-00000-of-00001.parquet"] = parquet_bytes(columns)
        server.add_hub_dataset(repo, files)
    work = tmp_path / "w"
    summary = ok(run_cli("download", "squad", "--from-hub", "--workdir", work, "--json", server=server,
                         hf_home=tmp_path / "hf"))
    assert summary["files"]["v2.0/dev-v2.0.json"]["examples"] == 11_873
    data = json.loads((work / "download/squad/v2.0/train-v2.0.json").read_text())
    assert data["version"] == "v2.0" and len(data["data"]) == -(-130_319 // (PER_PARAGRAPH * 10))
    qa = data["data"][0]["paragraphs"][0]["qas"][0]
    assert qa == {"answers": [], "question": "Which answer is question 0 about?", "id": "train2.0-0",
                  "is_impossible": True}
    qa = data["data"][0]["paragraphs"][0]["qas"][1]
    assert qa["answers"] == [{"text": "an answer",
                              "answer_start": len("Paragraph 0 names ")}] and not qa["is_impossible"]
    assert data["data"][0]["paragraphs"][0]["context"] == "Paragraph 0 names an answer."
    assert len(data["data"][0]["paragraphs"][0]["qas"]) == PER_PARAGRAPH
    v11 = json.loads((work / "download/squad/v1.1/dev-v1.1.json").read_text())
    assert v11["version"] == "1.1" and "is_impossible" not in v11["data"][0]["paragraphs"][0]["qas"][0]


# -- GLUE ---------------------------------------------------------------------------

HUB_GLUE = {
    "cola": {"train": 5, "validation": 3, "test": 2},
    "sst2": {"train": 4, "validation": 2, "test": 2},
    "mrpc": {"train": 4, "validation": 2, "test": 2},
    "stsb": {"train": 4, "validation": 2, "test": 2},
    "qqp": {"train": 4, "validation": 2, "test": 2},
    "mnli": {"train": 6, "validation_matched": 3, "validation_mismatched": 3, "test_matched": 2, "test_mismatched": 2},
    "qnli": {"train": 4, "validation": 2, "test": 2},
    "rte": {"train": 4, "validation": 2, "test": 2},
    "wnli": {"train": 4, "validation": 2, "test": 2},
    "ax": {"test": 3},
}
TEXT_COLUMNS = {"cola": ["sentence"], "sst2": ["sentence"], "mrpc": ["sentence1", "sentence2"],
                "stsb": ["sentence1", "sentence2"],
                "qqp": ["question1", "question2"], "mnli": ["premise", "hypothesis"], "qnli": ["question", "sentence"],
                "rte": ["sentence1", "sentence2"], "wnli": ["sentence1", "sentence2"], "ax": ["premise", "hypothesis"]}


def glue_files():
    files = {}
    for task, splits in HUB_GLUE.items():
        for split, n in splits.items():
            columns = {c: [f"{task} {split} {c} {i}\twith a tab" for i in range(n)] for c in TEXT_COLUMNS[task]}
            test = split.startswith("test")
            if task == "stsb":
                columns["label"] = [-1.0 if test else i * 1.25 for i in range(n)]
            else:
                columns["label"] = [-1 if test else i % (3 if task in ("mnli", "ax") else 2) for i in range(n)]
            columns["idx"] = list(range(n))
            files[f"{task}/{split}-00000-of-00001.parquet"] = parquet_bytes(columns)
    return files


def read_tsv(path):
    # exactly how google-research/bert's DataProcessor._read_tsv reads them
    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t", quotechar=None))


def test_glue_all_tasks_as_original_tsv(server, tmp_path):
    server.add_hub_dataset("nyu-mll/glue", glue_files())
    work = tmp_path / "w"
    summary = ok(run_cli("download", "glue", "--workdir", work, "--json", server=server, hf_home=tmp_path / "hf"))
    glue = work / "download/glue"
    expected = {"CoLA": ["train.tsv", "dev.tsv", "test.tsv"],
                "MNLI": ["train.tsv", "dev_matched.tsv", "dev_mismatched.tsv", "test_matched.tsv",
                         "test_mismatched.tsv"],
                "diagnostic": ["diagnostic.tsv"]}
    for task in ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI", "diagnostic"):
        for name in expected.get(task, ["train.tsv", "dev.tsv", "test.tsv"]):
            assert (glue / task / name).is_file(), f"{task}/{name}"
    # CoLA train: no header; label in column 1, sentence in column 3 (ColaProcessor)
    cola = read_tsv(glue / "CoLA/train.tsv")
    assert len(cola) == 5 and cola[1] == ["hub", "1", "", "cola train sentence 1 with a tab"] and cola[0][2] == "*"
    assert read_tsv(glue / "CoLA/test.tsv")[0] == ["index", "sentence"]
    # MNLI: header skipped; text_a = line[8], text_b = line[9], label = line[-1] (MnliProcessor)
    mnli = read_tsv(glue / "MNLI/dev_matched.tsv")
    assert len(mnli) == 4 and len(mnli[0]) == 16
    assert (mnli[2][8], mnli[2][9], mnli[2][-1]) == ("mnli validation_matched premise 1 with a tab",
                                                     "mnli validation_matched hypothesis 1 with a tab", "neutral")
    assert [r[-1] for r in read_tsv(glue / "MNLI/train.tsv")[1:]] == ["entailment", "neutral", "contradiction"] * 2
    # MRPC: label = line[0], text_a = line[3], text_b = line[4] (MrpcProcessor)
    mrpc = read_tsv(glue / "MRPC/train.tsv")
    assert mrpc[0][0] == "Quality" and (mrpc[2][0], mrpc[2][3]) == ("1", "mrpc train sentence1 1 with a tab")
    assert read_tsv(glue / "STS-B/dev.tsv")[2][-1] == "1.250"
    assert read_tsv(glue / "RTE/train.tsv")[1][-1] == "entailment"
    assert read_tsv(glue / "QNLI/train.tsv")[2][-1] == "not_entailment"
    assert summary["files"]["MNLI/train.tsv"]["rows"] == 6 and summary["files"]["QQP/test.tsv"]["rows"] == 2
    manifest = json.loads((glue / "manifest.json").read_text())
    assert (manifest["files"]["CoLA/train.tsv"]["sha256"]
            == hashlib.sha256((glue / "CoLA/train.tsv").read_bytes()).hexdigest())


def test_glue_task_selection_and_unknown_task(server, tmp_path):
    server.add_hub_dataset("nyu-mll/glue", glue_files())
    work = tmp_path / "w"
    ok(run_cli("download", "glue", "--tasks", "cola,sts-b", "--workdir", work, server=server, hf_home=tmp_path / "hf"))
    assert sorted(p.name for p in (work / "download/glue").iterdir()) == ["CoLA", "STS-B", "manifest.json"]
    assert [r for r in server.requests if "/resolve/" in r[1] and "/mnli/" in r[1]] == []
    line = one_line_error(run_cli("download", "glue", "--tasks", "CoLA,SQuAD", "--workdir", work, server=server),
                          code=2)
    assert "unknown GLUE task 'SQuAD'" in line


@pytest.mark.parametrize("tasks", [(), [], ""])
def test_no_glue_task_is_refused_as_empty(tmp_path, tasks):
    """`GlueOptions(tasks=())` (a list comprehension that kept nothing) said `GlueOptions.tasks: unknown GLUE task
    ''; known: …`, a task of no name; it is refused as an empty field is."""
    import bertprep

    with pytest.raises(bertprep.errors.UsageError, match=r"^GlueOptions\.tasks is empty: give at least one value"):
        bertprep.download("glue", tasks=tasks, workdir=tmp_path)
    assert not (tmp_path / "download").exists()


# -- the Python API (issue 31): download(...) without argv -----------------------------------------------


def test_squad_function_gives_the_cli_files_and_summary(server, squad_files, tmp_path):
    from bertprep.stages.download import download
    from bertprep.stages.download.squad import SquadOptions

    sums = _publish_squad(server, squad_files, tmp_path)
    by_cli = ok(run_cli("download", "squad", "--version", "1.1", "--workdir", tmp_path / "cli", "--base-url",
                        server.url + "/squad", "--eval-base-url", server.url + "/codalab", "--checksums", sums,
                        "--json"))
    flags = {"squad_version": "1.1", "base_url": server.url + "/squad", "eval_base_url": server.url + "/codalab",
             "checksums": sums}
    summary = download("squad", workdir=tmp_path / "py", **flags)
    assert same_apart_from_workdir(summary, tmp_path / "py", by_cli, tmp_path / "cli")
    for relpath in ("v1.1/train-v1.1.json", "v1.1/dev-v1.1.json", "v1.1/evaluate-v1.1.py"):
        assert ((tmp_path / "py/download/squad" / relpath).read_bytes()
                == (tmp_path / "cli/download/squad" / relpath).read_bytes())
    before = len(server.requests)
    download(SquadOptions(workdir=str(tmp_path / "py"), **flags))  # complete: nothing is fetched again
    assert [r for r in server.requests[before:] if "/squad/" in r[1]] == []


def test_a_wrong_squad_version_names_the_field_for_a_python_caller(tmp_path):
    """The command line's flag is --version, the field squad_version: the message said `--version must be one of
    1.1, 2.0, all, not '3'` to a caller who gave squad_version."""
    import bertprep

    for call in (lambda: bertprep.download("squad", squad_version="3", workdir=tmp_path),
                 lambda: bertprep.SquadOptions(squad_version="3")):
        with pytest.raises(bertprep.errors.UsageError) as raised:
            call()
        assert str(raised.value) == "SquadOptions.squad_version must be one of 1.1, 2.0, all, not '3'"
    assert not (tmp_path / "download").exists()


def test_glue_function_gives_the_cli_files_and_summary(server, tmp_path):
    from bertprep.stages.download.glue import GlueOptions

    server.add_hub_dataset("nyu-mll/glue", glue_files())
    settings = {"server": server, "hf_home": tmp_path / "hf"}
    by_cli = ok(run_cli("download", "glue", "--tasks", "cola,sts-b", "--workdir", tmp_path / "cli", "--json",
                        **settings))
    code = ("import json; from bertprep.stages.download import download; "
            f"print(json.dumps(dict(download('glue', tasks=('cola', 'sts-b'), workdir={str(tmp_path / 'py')!r}))))")
    summary = ok(run_python(code, **settings))
    assert same_apart_from_workdir(summary, tmp_path / "py", by_cli, tmp_path / "cli")
    for relpath in by_cli["files"]:
        assert ((tmp_path / "py/download/glue" / relpath).read_bytes()
                == (tmp_path / "cli/download/glue" / relpath).read_bytes())
    assert GlueOptions(tasks="all").tasks == GlueOptions(tasks=("ALL",)).tasks == tuple(DOWNLOAD_TASKS)
