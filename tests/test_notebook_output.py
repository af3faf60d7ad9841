"""What a notebook or a script sees (issue 40): summaries show themselves as their table (repr) and as HTML,
a stage's warnings reach Python's `warnings` whatever `quiet` says, and `--quiet` means the same for every
command: no progress and no summary, `--json` still printing the summary. That no TensorFlow line reaches a
notebook's cell (its logger starts at INFO in a kernel, where sys.ps1 is set) is checked by running the
README's notebook in a real kernel (tests/test_python_api.py)."""

import contextlib
import dataclasses
import io
import json
import warnings

import pytest

import bertprep
from bertprep.cli import main
from bertprep.errors import BertprepWarning


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The embedded sample's records (the README's first command) and its shards."""
    work = tmp_path_factory.mktemp("work")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = bertprep.create(seq=128, pred=20, out=str(work / "records"), min_parts=64)
    return work, summary, caught


def test_a_stage_summary_shows_its_table_not_its_fields(sample):
    _work, summary, _caught = sample
    text = repr(summary)
    assert text.splitlines()[0] == "bertprep create: done" and len(text.splitlines()) < 20
    buffer = io.StringIO()
    summary.print(stream=buffer)
    assert text == buffer.getvalue().rstrip("\n")  # what the command prints
    html = summary._repr_html_()
    assert html.startswith("<table>") and "<b>bertprep create: done</b>" in html and "instances (training)" in html


def test_a_summary_is_the_dict_json_prints(sample):
    """json.dumps(summary) was "Object of type Summary is not JSON serializable" (a Mapping, no dict): a script
    could not save what `--json` prints without dict(summary)."""
    work, summary, _caught = sample
    buffer = io.StringIO()
    summary.print(as_json=True, stream=buffer)  # what --json prints
    assert json.loads(json.dumps(summary)) == json.loads(buffer.getvalue()) == summary
    assert isinstance(summary, dict) and summary.fields is summary and not summary.complete_before
    report = bertprep.validate(paths=(summary["records_dir"],))
    assert json.loads(json.dumps(report))["sound"] is report.sound is True


def test_a_stage_warning_is_a_python_warning_even_when_quiet(sample):
    _work, summary, caught = sample
    listed = summary["warnings"]
    assert listed and any("fewer than CreateOptions.min_parts 64" in w for w in listed)
    raised = [str(w.message) for w in caught if issubclass(w.category, BertprepWarning)]
    assert raised == [f"bertprep.create: {w}" for w in listed]
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertprepWarning)  # a script can make them errors
        with pytest.raises(BertprepWarning, match="fewer than CreateOptions.min_parts 64"):
            bertprep.create(seq=128, pred=20, out=str(_work / "records"), min_parts=64)


def test_validate_shows_its_report_with_its_figures_inline(sample):
    _work, summary, _caught = sample
    report = bertprep.validate(paths=(summary["records_dir"],))
    text = repr(report)
    assert text.startswith("bertprep validate: SOUND") and len(text) < 4000 and "\n" in text
    html = report._repr_html_()
    assert html.startswith("<pre>bertprep validate: SOUND") and '<img alt="validate figures"' in html
    assert "data:image/png;base64,iVBORw0KGgo" in html  # a PNG's first bytes, base64


def test_trainer_summaries_show_their_table():
    from trainer.config import FinetuneSummary, TrainSummary

    for kind, title in ((TrainSummary, "trainer: done"), (FinetuneSummary, "trainer finetune: done")):
        values = {field.name: {"accuracy": 0.5} if field.type in (dict, "dict") else 1
                  for field in dataclasses.fields(kind) if field.name != "warnings"}  # (): a list is no row
        summary = kind(**values)
        text = repr(summary)
        assert text.splitlines()[0] == title and len(text.splitlines()) == len(summary.to_dict()) + 1
        assert summary._repr_html_().startswith(f'<table><caption style="text-align:left"><b>{title}</b>')


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_quiet_means_no_progress_and_no_summary_for_every_stage(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "part0.jsonl").write_text("".join(json.dumps({"id": str(i), "text": f"Document {i}. It has two "
                                                            f"sentences about {i * 7}."}) + "\n" for i in range(40)))
    (corpus / "manifest.json").write_text("{}")
    commands = {
        "dedup": ["dedup", "--input", corpus, "--out", tmp_path / "deduped", "--workers", "1"],
        "shard": ["shard", "--input", corpus, "--out", tmp_path / "sharded", "--workers", "1"],
        "vocab": ["vocab", "--input", corpus, "--out", tmp_path / "vocab.txt", "--vocab-size", "200", "--unused", "0"],
    }
    for name, argv in commands.items():
        code, out, err = run([*argv, "--quiet"])
        assert (code, out, err) == (0, "", ""), name
        code, out, _err = run([*argv, "--quiet", "--json"])  # done already: its summary as JSON still
        assert code == 0 and isinstance(json.loads(out), dict), name

