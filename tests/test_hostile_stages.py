"""Hostile uses of the data stages (issue 57, the data side): budgets beyond the work, empty inputs, output
folders holding earlier or foreign files, paths a third-party list file cannot carry, runs that exit 0 on what
is not fine, messages that did not say what to fix, and a case flag that contradicts the vocab. Each case ends in
one line (an error naming the file or flag, or a warning) and never a traceback; the results are checked with the
real readers (megatron-core's IndexedDataset where it reads the files)."""

import json

import pytest

import bertprep
from bertprep.cli import main
from bertprep.errors import BertprepWarning, UsageError
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
    with pytest.warns(BertprepWarning, match=r"--memory 100G is more than this machine's"):
        summary = bertprep.dedup(input=(str(corpus),), out=str(tmp_path / "out"), memory="100G",
                                 engine=bertprep.EngineOptions(workers=1))
    assert summary["kept"] == 1


def test_a_chunk_is_never_larger_than_its_part_can_hold():
    assert dedup_module.chunk_documents(1 << 40, 128, 9, part_bytes=100) <= 100 // 12 + 1
    assert dedup_module.chunk_documents(1 << 20, 128, 9, part_bytes=1 << 40) == dedup_module.chunk_documents(
        1 << 20, 128, 9)  # a big part: --memory decides, as before


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
