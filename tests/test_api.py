"""The public Python API: every stage function and its options at the top level of `bertprep`."""

import importlib
import subprocess
import sys

import pytest

import bertprep
import trainer
from bertprep.cli import main as bertprep_main
from bertprep.errors import UsageError


def test_every_exported_name_loads_and_stage_functions_are_not_replaced_by_their_modules():
    for name in bertprep.__all__:
        assert getattr(bertprep, name) is not None, name
    importlib.import_module("bertprep.stages.create")  # a stage module's import leaves the function in place

    assert callable(bertprep.create) and bertprep.create.__module__ == "bertprep.stages.create"
    assert bertprep.SquadOptions is not bertprep.CreateSquadOptions  # the download's, and create-squad's


def test_import_bertprep_loads_no_stage():
    code = "import sys, bertprep; print(sorted(m for m in sys.modules if m.startswith('bertprep.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_options_are_frozen_and_checked_once_naming_the_python_fields():
    options = bertprep.ShardOptions(input=("a.jsonl",))
    with pytest.raises(AttributeError):
        options.train_shards = 0  # frozen
    with pytest.raises(UsageError, match="^ShardOptions.train_shards and ShardOptions.test_shards must be at least 1$"):
        bertprep.ShardOptions(input=("a.jsonl",), train_shards=0)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        bertprep.nope  # noqa: B018


@pytest.mark.parametrize("build, python, command_line", [
    (lambda: bertprep.CreateOptions(layout="x"), "CreateOptions.layout must be one of bertprep, nvidia, not 'x'",
     ["create", "--vocab", "v.txt", "--pred", "200"]),
    (lambda: bertprep.CreateOptions(pred=200), "CreateOptions.pred 200 is not possible with CreateOptions.seq 128: "
     "at most seq - 3 = 125 tokens can be masked ([CLS] and two [SEP] never are)", None),
    (lambda: bertprep.EngineOptions(workers=0), "EngineOptions.workers must be at least 1, not 0", None),
    (lambda: trainer.TrainConfig(format="tfrecord", grad_accum=0),
     "TrainConfig.grad_accum: expected a positive integer, got 0", None),
])
def test_an_option_error_names_the_python_field_from_python_and_the_flag_from_the_command_line(
        build, python, command_line, capsys):
    with pytest.raises(UsageError) as raised:
        build()
    assert str(raised.value) == python
    if command_line:  # the same check from the command line: the flag
        assert bertprep_main(command_line) == 2
        assert capsys.readouterr().err == ("bertprep create: error: --pred 200 is not possible with --seq 128: at most "
                                           "seq - 3 = 125 tokens can be masked ([CLS] and two [SEP] never are)\n")


@pytest.mark.parametrize("build", [
    lambda **f: bertprep.CreateOptions(input=("sh",), vocab="v.txt", **f),
    lambda **f: bertprep.PackOptions(records_dir="records/x", **f),
    lambda **f: bertprep.CreateSquadOptions(input="train-v1.1.json", vocab="v.txt", out="o", **f),
    lambda **f: bertprep.CreateGlueOptions(task="MRPC", data_dir="g", vocab="v.txt", out="o", **f),
])
def test_a_format_is_named_not_a_path_and_none_is_refused_as_empty(build):
    """`format` takes format names, annotated `str` as a path is, so check_types took a pathlib.Path for one:
    CreateOptions(format=Path("tfrecord")) was `object of type 'PosixPath' has no len()`, PackOptions',
    create_squad's and create_glue's `sequence item 0: expected str instance, PosixPath found` (TypeErrors from
    inside), and `format=()` for the last two `unknown CreateSquadOptions.format '' (choose from …)`. A format is
    now a Name (a str), and an empty one is refused as create's and pack's were."""
    from pathlib import Path

    assert build(format=["tfrecord"]).format == build(format="tfrecord").format == ("tfrecord",)
    with pytest.raises(UsageError, match=r"^\w+Options\.format must be a tuple of str.*, got PosixPath PosixPath"):
        build(format=Path("tfrecord"))
    with pytest.raises(UsageError, match=r"^\w+Options\.format is empty: give at least one value"):
        build(format=())


@pytest.mark.parametrize("stage, given, field", [
    ("pack", "records/x", "records_dir"), ("inspect", "part-0", "file"), ("validate", "records/x", "paths"),
    ("create_squad", "dev.json", "input")])
def test_a_path_given_for_the_options_names_the_field_to_give_it_as(stage, given, field):
    """`bertprep.pack("records/x")`, as the command line takes it, said "expected PackOptions, got str": neither
    which field the path is nor that fields are keywords."""
    import pathlib

    with pytest.raises(TypeError) as raised:
        getattr(bertprep, stage)(pathlib.Path(given))
    options = "".join(part.capitalize() for part in stage.split("_")) + "Options"
    assert str(raised.value) == (f"expected {options}, got PosixPath PosixPath('{given}'): a stage takes its options "
                                 f"object or its fields as keywords, as bertprep.{stage}({field}=...)")
    with pytest.raises(TypeError, match=r"^expected ShardOptions, got int$"):  # no path: as before
        bertprep.shard(5)


def test_options_take_a_file_url_as_its_path(tmp_path):
    """file://PATH is PATH from where the options are built, in every stage's options (a stage then joins,
    compares and names one spelling of it); pathlib paths become strings, URLs and hub ids stay."""
    (tmp_path / "a b").mkdir()
    url, path = f"file://{tmp_path}/a%20b", f"{tmp_path}/a b"
    assert bertprep.ShardOptions(input=(url, tmp_path), out=url).input == (path, str(tmp_path))
    assert bertprep.ShardOptions(input=(url,), out=url).out == path
    assert bertprep.CreateOptions(input=(url,), vocab=f"file://{tmp_path}/v.txt", out="s3://b/o").vocab == (
        f"{tmp_path}/v.txt")
    assert bertprep.CreateOptions(input=(url,), vocab="bert-base-uncased", out="s3://b/o").out == "s3://b/o"
    other = f"file://{tmp_path}/c%20d"  # an output apart from the input (one over it is refused: test_in_place)
    assert (bertprep.ConvertOptions(src=url, dst=other, to="tfrecord").src,
            bertprep.ConvertOptions(src=url, dst=other, to="tfrecord").dst) == (path, f"{tmp_path}/c d")
    assert bertprep.InspectOptions(file=url).file == path
    assert bertprep.ValidateOptions(paths=url).paths == (path,)
    assert bertprep.CreateGlueOptions(task="mrpc", data_dir=url, vocab="v", out=other).data_dir == path
    squad = bertprep.CreateSquadOptions(input=f"{url}/dev.json", split="eval", vocab="v", out=other)
    assert (squad.input, squad.out) == (f"{path}/dev.json", f"{tmp_path}/c d")


def test_a_data_error_found_while_a_stage_runs_names_the_field_but_keeps_a_quoted_command(golden_dir, tmp_path):
    """Only usage errors named the fields: shard's refusal of too many evaluation documents said `--eval-documents
    100000 needs more documents ...` to a caller who gave eval_documents. A command quoted in backticks, a
    remedy's `bertprep create --input X`, keeps its flags."""
    from bertprep.errors import DataError
    from bertprep.options import python_field_names

    corpus = str(golden_dir / "corpus.txt")
    with pytest.raises(DataError) as raised:
        bertprep.shard(input=(corpus,), corpus="g", out=str(tmp_path / "sh"), eval_documents=100000)
    assert str(raised.value) == (f"{corpus}: ShardOptions.eval_documents 100000 needs more documents than the 15 "
                                 "with sentences (at least one must stay for training)")
    assert not (tmp_path / "sh").exists()
    assert python_field_names("x: make them with `bertprep create --input x --seq 64`, or --seq 64",
                              bertprep.CreateOptions) == ("x: make them with `bertprep create --input x --seq 64`, "
                                                          "or CreateOptions.seq 64")
