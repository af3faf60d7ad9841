"""Every options object of the public API checks its fields' types when it is built (issue 39): a wrong type is
one UsageError line naming `Class.field`, never a failure deep inside a worker or a library; a str given for a
tuple of paths is one item, not its characters. Table-driven over every options dataclass `bertprep` and
`trainer` export, so a new one is covered without a new test. Also the tracebacks the issue found, each now one
line."""

import argparse
import dataclasses
import os
import re
import typing
from pathlib import PurePosixPath

import numpy as np
import pytest

import bertprep
import trainer
from bertprep.errors import DataError, UsageError

# What each class needs to be built at all; every other field keeps its default.
REQUIRED = {
    "PretrainedOptions": {"model": "uncased_L-12_H-768_A-12"},
    "PackOptions": {"records_dir": "."},  # it must exist
    "ValidateOptions": {"paths": (".",)},
    "PrepareOptions": {"sources": ("wikipedia",), "vocab": "bert-base-uncased"},
    "InspectOptions": {"file": "part-0"},
    "ConvertOptions": {"src": "a.tfrecord", "dst": "b.ofrecord", "to": "ofrecord"},
    "CreateSquadOptions": {"vocab": "v.txt", "out": "squad", "input": "dev-v1.1.json"},
    "CreateGlueOptions": {"vocab": "v.txt", "out": "mrpc", "task": "MRPC", "data_dir": "glue/MRPC"},
    "TrainConfig": {"format": "tfrecord"},
    "FinetuneConfig": {"task": "mrpc", "data": "mrpc", "format": "tfrecord"},
}
OPTION_CLASSES = [getattr(bertprep, name) for name in bertprep.__all__ if name.endswith("Options") or name == "Limits"]
OPTION_CLASSES += [trainer.TrainConfig, trainer.FinetuneConfig]


class Wrong:
    """A value of no type any field takes."""

    def __repr__(self):
        return "<wrong>"


def fields_of(cls):
    return [(cls, field.name) for field in dataclasses.fields(cls)]


def test_every_options_class_is_covered():
    assert len(OPTION_CLASSES) >= 21
    for cls in OPTION_CLASSES:
        cls(**REQUIRED.get(cls.__name__, {}))  # the table builds each


@pytest.mark.parametrize("cls,name", [pair for cls in OPTION_CLASSES for pair in fields_of(cls)],
                         ids=lambda value: value if isinstance(value, str) else value.__name__)
def test_a_wrong_type_in_any_field_is_one_line_naming_it(cls, name):
    fields = {**REQUIRED.get(cls.__name__, {}), name: Wrong()}
    with pytest.raises(UsageError) as raised:
        cls(**fields)
    message = str(raised.value)
    assert message.startswith(f"{cls.__name__}.{name} must be ") and message.endswith("got Wrong <wrong>"), message
    assert "\n" not in message


@pytest.mark.parametrize("cls,fields,message", [
    (bertprep.CreateOptions, {"seq": "128"}, "CreateOptions.seq must be an int, got str '128'"),
    (bertprep.CreateOptions, {"seq": 128.5}, "CreateOptions.seq must be an int, got float 128.5"),
    (bertprep.CreateOptions, {"seq": 128.0}, "CreateOptions.seq must be an int, got float 128.0"),
    (bertprep.CreateOptions, {"seed": "12345"}, "CreateOptions.seed must be an int, got str '12345'"),
    (bertprep.CreateOptions, {"engine": "local"}, "CreateOptions.engine must be an EngineOptions, got str 'local'"),
    (bertprep.CreateOptions, {"engine": None}, "CreateOptions.engine must be an EngineOptions, got NoneType None"),
    (bertprep.DedupOptions, {"exact": "no"}, "DedupOptions.exact must be a bool, got str 'no'"),
    (bertprep.DedupOptions, {"near": 0}, "DedupOptions.near must be a bool, got int 0"),
    (bertprep.DedupOptions, {"num_perm": 64.5}, "DedupOptions.num_perm must be an int, got float 64.5"),
    (bertprep.DedupOptions, {"corpus": 5},
     "DedupOptions.corpus must be a tuple of str (or a path) or None, got int 5"),
    (bertprep.EngineOptions, {"workers": True}, "EngineOptions.workers must be an int or None, got bool True"),
    # a size, not a file: it said "must be an int or a str (or a path)", and took Path("64M") as 64 MiB
    (bertprep.DedupOptions, {"memory": 1.5}, "DedupOptions.memory must be an int or a str, got float 1.5"),
    (bertprep.DedupOptions, {"memory": PurePosixPath("64M")},
     "DedupOptions.memory must be an int or a str, got PurePosixPath PurePosixPath('64M')"),
    # a field of one of some names says which (it said "must be a str (or a path)", as of a file)
    (bertprep.ConvertOptions, {"src": "a", "dst": "b", "to": ["parquet"]},
     "ConvertOptions.to must be one of tfrecord, ofrecord, hdf5, parquet, got list ['parquet']"),
    (bertprep.CreateOptions, {"masking": True}, "CreateOptions.masking must be one of static, dynamic, got bool True"),
    (bertprep.EngineOptions, {"engine": ("dask",)}, "EngineOptions.engine must be one of local, dask, got tuple "
                                                    "('dask',)"),
    (bertprep.CreateSquadOptions, {"vocab": "v.txt", "out": "squad", "input": "dev-v1.1.json", "split": 1},
     "CreateSquadOptions.split must be one of train, eval, or None, got int 1"),
    (trainer.TrainConfig, {"format": "tfrecord", "steps": "5"}, "TrainConfig.steps must be an int, got str '5'"),
    (trainer.TrainConfig, {"format": "tfrecord", "lr": "1e-4"},
     "TrainConfig.lr must be a float, got str '1e-4'"),
])
def test_the_issues_examples_name_the_field(cls, fields, message):
    with pytest.raises(UsageError) as raised:
        cls(**fields)
    assert str(raised.value) == message


def test_what_each_type_accepts(tmp_path):
    # a str or a path for a tuple of paths is one item, not its characters
    assert bertprep.CreateOptions(input="ref/sh1").input == ("ref/sh1",)
    assert bertprep.ShardOptions(input=tmp_path).input == (str(tmp_path),)
    assert bertprep.DedupOptions(input=["a.jsonl", tmp_path]).input == ("a.jsonl", str(tmp_path))
    # floats take ints as they are (a manifest keeps the number it was given), ints take numpy's
    assert bertprep.DedupOptions(threshold=1).threshold == 1
    assert bertprep.CreateOptions(seq=np.int64(256)).seq == 256
    assert typing.get_type_hints(bertprep.CreateOptions)["seq"] is int


@pytest.mark.parametrize("annotation, described", [(tuple[str, ...], "a tuple of str (or a path)"),
                                                   (list[str], "a list of str (or a path)")])
@pytest.mark.parametrize("value", ["a,b", os.path.join("a", "b")])
def test_check_argument_refuses_a_str_for_a_tuple_or_list_of_them(annotation, described, value):
    """check_argument (the public functions' own arguments) took a str for a tuple of str as its one item ('a,b',
    one label: convert had to check its labels by hand), and took anything for a list[str], "abc" too. A str or
    a path is now no sequence of them there; the options keep taking one path for a tuple of paths (check_types,
    test_what_each_type_accepts), and a list or tuple of them is taken as before."""
    from pathlib import Path

    from bertprep.options import check_argument

    for given in (value, Path(value)):
        with pytest.raises(UsageError) as raised:
            check_argument("f's names", given, annotation)
        assert str(raised.value) == f"f's names must be {described}, got {type(given).__name__} {given!r}"
    kept = check_argument("f's names", [value, "c"], annotation)
    assert kept == typing.get_origin(annotation)((value, "c"))
    assert bertprep.CreateOptions(input=value).input == (value,)


def test_check_argument_refuses_a_value_that_is_none_of_its_choices():
    """check_argument's `choices` only worded the message of a wrong type: a str of the type but none of the names
    was returned as given. It is now one line in the same words; a name among them, and None where the
    annotation takes it, are returned as before."""
    from bertprep.options import Name, check_argument

    for annotation, none in ((str, ""), (Name | None, ", or None")):
        with pytest.raises(UsageError) as raised:
            check_argument("f's kind", "avro", annotation, choices=("tfrecord", "ofrecord"))
        assert str(raised.value) == f"f's kind must be one of tfrecord, ofrecord{none}, got str 'avro'"
        with pytest.raises(UsageError) as raised:
            check_argument("f's kind", 5, annotation, choices=("tfrecord", "ofrecord"))
        assert str(raised.value) == f"f's kind must be one of tfrecord, ofrecord{none}, got int 5"
        assert check_argument("f's kind", "ofrecord", annotation, choices=("tfrecord", "ofrecord")) == "ofrecord"
    assert check_argument("f's kind", None, Name | None, choices=("tfrecord", "ofrecord")) is None


@pytest.mark.parametrize("cls,name", [(cls, name) for cls in OPTION_CLASSES for name in getattr(cls, "choices", {})],
                         ids=lambda value: value if isinstance(value, str) else value.__name__)
def test_an_options_name_that_is_none_of_its_choices_keeps_the_classs_own_words(cls, name):
    """check_types words a wrong type with the class's `choices`, but leaves a str that is none of them to the
    class's own check, whose words name the flag on the command line (`--layout must be one of bertprep, nvidia,
    not 'x'`), the field from Python."""
    with pytest.raises(UsageError) as raised:
        cls(**{**REQUIRED.get(cls.__name__, {}), name: "nope"})
    assert re.fullmatch(r"\S+ must be one of [^\n]+, not 'nope'", str(raised.value)), str(raised.value)


def test_shard_refuses_a_negative_eval_seed_in_one_line():
    with pytest.raises(UsageError, match=r"^ShardOptions.eval_seed must be at least 0, not -1$"):
        bertprep.ShardOptions(eval_documents=2, eval_seed=-1)


def test_vocab_decodes_invalid_utf8_says_so_and_counts_it(tmp_path, capsys):
    """A binary .txt ended in KeyError: 'invalid_utf8_lines' (the second pass counted into an empty dict)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"hello world of words\n\xff\xfe binary \x80 line\n\nmore words here\n" * 20)
    said = f"20 line(s) with invalid UTF-8 decoded with U+FFFD (first: {corpus}:2)"
    with pytest.warns(bertprep.BertprepWarning, match=re.escape(said)):  # a summary warning, not a progress note
        summary = bertprep.vocab(input=(corpus,), out=tmp_path / "vocab.txt", vocab_size=1100, quiet=False)
    assert summary["invalid_utf8_lines"] == 20 and summary["warnings"] == [said]


def test_a_cut_off_state_npz_in_a_complete_checkpoint_is_one_line(tmp_path):
    from trainer import run_state
    from trainer.checkpoint import ours

    checkpoint = tmp_path / "ck" / "ckpt-1"
    checkpoint.mkdir(parents=True)
    np.savez(checkpoint / "state.npz", a=np.arange(1000))
    whole = (checkpoint / "state.npz").read_bytes()
    (checkpoint / "state.npz").write_bytes(whole[:len(whole) // 2])
    (checkpoint / "state.json").write_text('{"step": 1, "settings": {"model": {}}}')
    with pytest.raises(DataError, match="unreadable checkpoint"):
        run_state.load_latest(str(tmp_path / "ck"))
    with pytest.raises(DataError, match="unreadable checkpoint: BadZipFile"):
        ours.read_arrays(str(checkpoint))


@pytest.mark.parametrize("cls,fields", [
    (bertprep.ConvertOptions, {"src": "", "dst": "b.ofrecord", "to": "ofrecord"}),
    (bertprep.ConvertOptions, {"src": "a.tfrecord", "dst": "", "to": "ofrecord"}),
    (bertprep.ValidateOptions, {"paths": ("records", "")}),
    (bertprep.InspectOptions, {"file": ""}),
    (bertprep.ShardOptions, {"input": ""}),
    (bertprep.CreateOptions, {"vocab": ""}),
    (bertprep.DedupOptions, {"out": ""}),
])
def test_an_empty_path_is_refused_naming_the_field(cls, fields):
    """`convert "" out` took "" for the current directory and said the output lay "inside the input"; an empty
    path names nothing, whatever a join or a comparison makes of it."""
    name = next(name for name, value in fields.items() if value == "" or isinstance(value, tuple) and "" in value)
    with pytest.raises(UsageError, match=rf"^{cls.__name__}.{name}: an empty path names no file or directory$"):
        cls(**fields)


def test_convert_on_the_command_line_refuses_an_empty_path(capsys):
    from bertprep.cli import main
    assert main(["convert", "", "out", "--to", "parquet"]) == 2
    assert capsys.readouterr().err == "bertprep convert: error: src: an empty path names no file or directory\n"
    # A flag is named as the flag (it was `out:`, the field, where every other message of a stage names --out).
    for command in (["create", "--seq", "128", "--pred", "20", "--out", ""], ["dedup", "--input", "x", "--out", ""],
                    ["create-glue", "--task", "mrpc", "--data-dir", "", "--vocab", "v", "--out", "o"]):
        flag = command[command.index("") - 1]
        assert main(command) == 2
        assert capsys.readouterr().err == (f"bertprep {command[0]}: error: {flag}: an empty path names no file or "
                                           "directory\n")


@pytest.mark.parametrize("argv,field,expected", [
    (["create", "--input", "a.txt", "--input", "b.txt", "c.txt"], "input", ("a.txt", "b.txt", "c.txt")),
    (["shard", "--input", "a.txt", "--input", "b.txt"], "input", ("a.txt", "b.txt")),
    (["tokenize", "--input", "a.txt", "--input", "b.txt"], "input", ("a.txt", "b.txt")),
    (["vocab", "--input", "a.txt", "--input", "b.txt"], "input", ("a.txt", "b.txt")),
    (["vocab", "--corpus", "wiki", "--corpus", "books"], "corpus", ("wiki", "books")),
    (["dedup", "--input", "a.jsonl", "--input", "b.jsonl"], "input", ("a.jsonl", "b.jsonl")),
    (["dedup", "--corpus", "wiki", "--corpus", "books"], "corpus", ("wiki", "books")),
    (["dedup", "--decontaminate", "squad", "--decontaminate", "glue"], "decontaminate", ("squad", "glue")),
])
def test_a_repeated_list_flag_adds_to_the_list(argv, field, expected, tmp_path, monkeypatch):
    """`--input a --input b` kept only b: argparse's nargs="+" replaces the list at each flag, so the first
    corpus was dropped without a word. Each flag now adds to the list (action="extend")."""
    import importlib

    from bertprep.cli import COMMANDS, build_parser
    monkeypatch.chdir(tmp_path)
    args = build_parser(only=argv[0]).parse_args(argv)
    assert tuple(getattr(args, field)) == expected
    built = importlib.import_module(COMMANDS[argv[0]][0]).options(args)
    assert tuple(os.path.basename(value) for value in getattr(built, field)) == expected


def _options_with_a_default(parser, name):
    """(command, action) of every option of `parser` and its subcommands whose default is a value to state."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _options_with_a_default(subparser, f"{name} {sub}")
        elif (action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
              and not any(action.default is value for value in (None, False, True, argparse.SUPPRESS))
              and action.default != []):
            yield name, action


def test_every_command_line_default_is_in_its_help():
    """`--help` states each option's default (or what `auto` picks): `trainer --batch-size`, `--checkpoint-every`,
    `--log-every`, `trainer finetune --precision`, `create --masked-lm-prob`, `prepare --train-shards` and
    `trainer.benchmark --runs` said none, some had no help at all, and the defaults docs/trainer.md and README
    give could not be checked there."""
    from bertprep.cli import build_parser
    from trainer import cli as trainer_cli
    from trainer.benchmark import cli as benchmark_cli
    from trainer.checkpoint import cli as checkpoint_cli

    parsers = ((build_parser(), "bertprep"), (trainer_cli.build_parser(), "trainer"),
               (trainer_cli.build_finetune_parser(), "trainer finetune"),
               (checkpoint_cli.build_parser(), "trainer checkpoint"),
               (benchmark_cli.build_parser(), "trainer.benchmark"))
    silent = [f"{name} {action.option_strings[-1]} (default {action.default!r})" for parser, command in parsers
              for name, action in _options_with_a_default(parser, command)
              if not re.search(r"default|\bauto: ", action.help or "", re.IGNORECASE)]
    assert silent == []


def test_download_workers_help_says_which_sources_use_it(capsys):
    """`download squad|glue|pretrained --help` said `--workers: parallel extraction workers`, a flag those sources
    take (DownloadOptions.workers) and read nowhere: only wikipedia and bookcorpus extract text on workers."""
    from bertprep.cli import main

    for source in ("wikipedia", "bookcorpus", "squad", "glue", "pretrained"):
        with pytest.raises(SystemExit):
            main(["download", source, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        used = source in ("wikipedia", "bookcorpus")
        assert ("--workers WORKERS parallel extraction workers (default: all cores)" in text) == used, source
        assert (f"--workers WORKERS not used by {source}, which has no text to extract" in text) == (not used), source


@pytest.mark.parametrize("stage, keyword, hint", [
    (bertprep.create, "workers", " (--workers is engine=bertprep.EngineOptions(workers=...))"),
    (bertprep.pack, "scheduler", " (--scheduler is engine=bertprep.EngineOptions(scheduler=...))"),
    (bertprep.create, "no_lower_case", " (--no-lower-case is lower_case=False)"),
    (bertprep.create, "shuffle", ""),  # no flag of that name: Python's own message
])
def test_a_flag_that_is_no_field_says_where_it_is_set(stage, keyword, hint):
    """The stage functions take the commands' flags as fields (`--dupe-factor` is dupe_factor), but --workers,
    --scheduler and --worker-wait are the `engine` field's and --no-lower-case is lower_case=False: a notebook's
    `bertprep.create(..., workers=8)` was Python's bare "unexpected keyword argument 'workers'"."""
    cls = {bertprep.create: "CreateOptions", bertprep.pack: "PackOptions"}[stage]
    with pytest.raises(TypeError) as exc:
        stage(**{keyword: True})
    assert str(exc.value) == f"{cls}.__init__() got an unexpected keyword argument {keyword!r}{hint}"


@pytest.mark.parametrize("stage, fields", [(bertprep.pack, {"records_dir": "."}), (bertprep.create, {})])
def test_an_empty_format_tuple_is_refused_as_empty(stage, fields):
    """format=() asks for no format: create said so, pack said "unknown PackOptions.format ''" (a name it was
    never given). The command line's `pack --format ""` is None, the input's formats, as before."""
    cls = {bertprep.create: "CreateOptions", bertprep.pack: "PackOptions"}[stage]
    with pytest.raises(UsageError) as exc:
        stage(format=(), **fields)
    assert str(exc.value) == (f"{cls}.format is empty: give at least one value (did a pattern match nothing?), "
                              "or leave it out for the default")


def test_a_size_takes_a_unit_with_b_or_ib_and_refuses_ib_without_one():
    """`--memory 64iB` was read as 64 bytes (the unit letter dropped, its `iB` taken); a unit is K, M, G or T,
    then B or iB, or B alone."""
    from bertprep.errors import UsageError
    from bertprep.options import parse_size

    for text, size in (("64", 64), ("64B", 64), ("64M", 64 << 20), ("64mb", 64 << 20), ("64 MiB", 64 << 20),
                       ("2G", 2 << 30), ("1TiB", 1 << 40)):
        assert parse_size(text, "--memory") == size, text
    for text in ("64iB", "64i", "64MiBB", "1.5G", "0M", "M"):
        with pytest.raises(UsageError, match=f"^--memory must be a positive size in bytes .* not '{re.escape(text)}'$"):
            parse_size(text, "--memory")
