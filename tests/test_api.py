"""The public Python API: every stage function and its options at the top level of `bertprep`."""

import importlib
import subprocess
import sys

import pytest

import bertprep
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


def test_options_are_frozen_and_checked_once_with_the_commands_messages():
    options = bertprep.ShardOptions(input=("a.jsonl",))
    with pytest.raises(AttributeError):
        options.train_shards = 0  # frozen
    with pytest.raises(UsageError, match="--train-shards and --test-shards must be at least 1"):
        bertprep.ShardOptions(input=("a.jsonl",), train_shards=0)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        bertprep.nope  # noqa: B018
