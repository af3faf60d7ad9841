"""This trainer's checkpoints (trainer/run_state.py): a `ckpt-<step>/` directory (state.npz +
state.json) or a --checkpoint-dir (its newest). Model variables are named
`model/trainable/<index>/<path>`; the config is state.json's settings.model. `write` makes the same
form from any checkpoint: a directory that --init-checkpoint takes."""

import dataclasses
import json
import os
import re
import zipfile

import numpy as np

from bertprep.errors import DataError
from trainer import run_state
from trainer.checkpoint import names, task_heads
from trainer.checkpoint.base import LOST, checked, vocab_beside
from trainer.config import BertConfig

KIND = "bertprep"
HELD = "a checkpoint of this trainer (state.npz)"
_VARIABLE_NAME = re.compile(r"^model/(trainable|non_trainable)/(\d+)/(.+)$")
_LAYER = re.compile(r"^bert/layer_(\d+)/")


def _directory(path):
    run_state.check_whole(path)  # a ckpt-<step>/ that lost a file: named, not taken for no checkpoint
    if os.path.isfile(os.path.join(path, "state.npz")):
        return path
    found = run_state.list_checkpoints(path)
    return found[-1][1] if found else None


def sniff(path):
    return os.path.isdir(path) and _directory(path) is not None


def lost_file(path):
    """What the directory `path` lacks where it holds state.json but no state.npz (a converted `--to bertprep`
    copy, named anything; a ckpt-<step>/ is run_state.check_whole's), else None (sniff: no)."""
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "state.json")) and \
            not os.path.isfile(os.path.join(path, "state.npz")):
        return (f"state.json of a checkpoint of this trainer without its state.npz ({run_state.FILES['state.npz']}): "
                f"{LOST}")
    return None


def read_arrays(path):
    """(BertConfig, {our variable path: array}, checkpoint directory): the trainer's own form."""
    directory = _directory(path)
    if directory is None:
        raise DataError(f"{path}: not a checkpoint of the trainer (no state.npz, no ckpt-<step>/ inside)")
    # The file that failed is named: a damaged state.npz or state.json was said under the directory alone
    # ("BadZipFile: File is not a zip file", "JSONDecodeError: Expecting ..."), which of the two unsaid.
    state_path = reading = os.path.join(directory, "state.json")
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        reading = os.path.join(directory, "state.npz")
        with np.load(reading) as npz:
            weights = _model_arrays(reading, npz)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{reading}: unreadable checkpoint: {exc.__class__.__name__}: {exc}") from None
    return _model_config(state_path, state), weights, directory


def _model_arrays(path, npz):
    """{our variable path: array} of the model entries of the state.npz at `path`. Two entries of one index
    (`model/trainable/0003/a` and `model/trainable/0003/b`), or two of one variable with other values, are a
    DataError naming both: the later one was kept, the other dropped in silence. Equal copies lose nothing."""
    weights, by_index, by_variable = {}, {}, {}
    for name in npz.files:
        match = _VARIABLE_NAME.match(name)
        if not match:
            continue
        group, index, variable = match.groups()
        first = by_index.setdefault((group, int(index)), name)
        if first != name:
            raise DataError(f"{path}: entries {first} and {name} both carry index {index} of model/{group}: which "
                            "one is meant? Keep one of them")
        value = npz[name]
        first = by_variable.setdefault(variable, name)
        if first != name and not np.array_equal(weights[variable], value):
            raise DataError(f"{path}: entries {first} and {name} are both {variable} and their values differ: which "
                            "one is meant? Keep one of them")
        weights[variable] = value
    return weights


def _model_config(path, state):
    """The BertConfig of state.json's settings.model, an object of bert_config.json keys. Another value there,
    or a key BertConfig has not, was Python's TypeError ("unexpected keyword argument 'x'", "list indices must
    be integers"), the file and the field unnamed."""
    settings = state.get("settings") if isinstance(state, dict) else None
    model = settings.get("model") if isinstance(settings, dict) else None
    if not isinstance(model, dict):
        raise DataError(f"{path}: no settings.model object (expected the model's config: bert_config.json keys)")
    known = BertConfig().to_dict()
    unknown = sorted(set(model) - set(known))
    if unknown:
        raise DataError(f"{path}: settings.model: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    return BertConfig.checked(path, model, DataError)


def read(path):
    config, arrays, directory = read_arrays(path)
    by_ours = {row.ours: row for row in names.rows(_every_layer(config, arrays))}
    found, others = {}, {}
    for name, value in arrays.items():
        row = by_ours.get(name)
        if row is None:
            others[name] = value  # a fine-tuned model's task head (task_heads.py), or what no kind holds
            continue
        found[row.google] = names.from_layout(value, row.ours_layout)
    head, head_weights = task_heads.from_ours(directory, others, config.hidden_size)
    skipped = [name for name in others if not name.startswith(task_heads.HEADS[head.kind][0] + "/")] if head \
        else list(others)
    return task_heads.attach(checked(KIND, directory, config, found, vocab_beside(directory), skipped), head,
                             head_weights)


def _every_layer(config, arrays):
    """`config`'s layer count, or the deeper one of the layers `arrays` holds: their variables are then
    found, and `checked` refuses those the config has no place for as it does for every kind (skipped as
    not BERT's, they made a shallower model without a word)."""
    held = [int(match.group(1)) + 1 for name in arrays if (match := _LAYER.match(name))]
    return dataclasses.replace(config, num_hidden_layers=max([config.num_hidden_layers, *held]))


def write(checkpoint, directory):
    """state.npz + state.json (step 0, the config) into `directory`: an --init-checkpoint (the
    checkpoint's weights stay: np.savez streams each array)."""
    named = {**checkpoint.ours(), **task_heads.ours_arrays(checkpoint)}
    arrays = {f"model/trainable/{i:04d}/{name}": value for i, (name, value) in enumerate(named.items())}
    with open(os.path.join(directory, "state.npz"), "wb") as f:
        np.savez(f, **arrays)
    state = {"step": 0, "draws": 0, "settings": {"model": checkpoint.config.to_dict(),
                                                  **task_heads.settings(checkpoint),
                                                  "converted_from": {"kind": checkpoint.kind, "path": checkpoint.path}}}
    with open(os.path.join(directory, "state.json"), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    return directory
