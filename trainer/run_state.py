"""The run's own state, for --checkpoint-dir and --resume: `<dir>/ckpt-<step>/{state.npz, state.json}`,
written whole or not at all. (trainer/checkpoint/ reads and writes other projects' checkpoints.)

state.npz holds every model, optimizer and loss-scale variable by name;
state.json the step, the data position (batches drawn, skipped steps
included) and the settings the run must keep to resume exactly. A checkpoint
is written into a directory in `<dir>/.partial/` (the run holds `<dir>`, see
bertprep.atomic.hold) and renamed into place; the oldest beyond `keep` are
deleted afterwards. `<dir>` may be a URL (s3://, gs://): a checkpoint is
uploaded object by object and its `.complete` object last, and readers take
only checkpoints that have it.
"""

import json
import os
import re
import zipfile

import numpy as np

from bertprep import storage
from bertprep.atomic import atomic_dir, directory_complete, remove_directory, staging_dir
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder

_NAME = re.compile(r"^ckpt-(\d+)$")
# What a checkpoint directory holds: what a message names when one is missing.
FILES = {"state.json": "the step and the model's config", "state.npz": "the weights"}


def is_checkpoint_name(name):
    """Whether `name` is a checkpoint's folder name, ckpt-<step>."""
    return _NAME.match(name) is not None


def list_checkpoints(directory):
    """Complete checkpoints in `directory`, oldest first, as (step, path). In a URL's directory a checkpoint
    is complete once its last object (atomic_dir's COMPLETE) is there: one whose upload is under way or was
    cut short is not listed."""
    folder = Folder(directory)
    if not folder.isdir():
        return []
    found = []
    for name in folder.listdir():
        match = _NAME.match(name)
        if match and _complete(folder.folder(name)):
            found.append((int(match.group(1)), folder.path(name)))
    return sorted(found)


def refuse_earlier_run(directory, resumable=True):
    """A UsageError, before anything is trained, where `directory` (a run's --checkpoint-dir) holds complete
    checkpoints already and this run does not continue them: its own would be mixed with them (a later --resume
    takes the newest of either) and the rotation would delete the oldest, theirs or its own (fine-tuning keeps
    one: an earlier pretraining's ckpt of a higher step outranked it, and the fine-tuned model was deleted). Where
    none is complete, a newest one that lost one of its files is named as --resume names it (check_whole): it is not
    listed, and the run replaced it at its step, the earlier run's weights deleted without a word."""
    found = list_checkpoints(directory)
    if found:
        remedy = "give --resume to continue that run, or name a new folder" if resumable else "name a new folder"
        task = _fine_tuned_task(found[-1][1]) if resumable else None
        if task is not None:  # --resume refuses it (refuse_fine_tuned): advise what fits a fine-tuned model
            remedy = (f"it is a fine-tuned checkpoint (trainer finetune --task {task}), which --resume does not "
                      "continue: name a new folder (--init-checkpoint of it starts pretraining from its encoder)")
        raise UsageError(f"--checkpoint-dir {storage.display(directory)}: holds {len(found)} checkpoint(s) of an "
                         f"earlier run (the newest {storage.display(found[-1][1])}): {remedy}; this run's "
                         "checkpoints would be mixed with them and the oldest deleted")
    check_whole(directory)


def refuse_fine_tuned(directory):
    """A UsageError, before anything is trained, where the newest checkpoint of `directory` (--resume's
    --checkpoint-dir) is a fine-tuning run's: `trainer finetune` saves its task in the settings and no data
    position, and --resume said `damaged checkpoint state (no int "draws"); remove the checkpoint to resume from
    the one before`, of a sound fine-tuned model, once the model was built. An unreadable state.json is left to
    load_latest to name."""
    checkpoints = list_checkpoints(directory)
    if not checkpoints:
        return
    path = checkpoints[-1][1]
    task = _fine_tuned_task(path)
    if task is not None:
        raise UsageError(f"--resume: {storage.display(path)} is a fine-tuned checkpoint (trainer finetune --task "
                         f"{task}), not a pretraining run's: --resume continues a pretraining run; name "
                         "another --checkpoint-dir")


def _fine_tuned_task(path):
    """The task the checkpoint `path` was fine-tuned on (its settings' "task"), None for a pretraining run's. An
    unreadable state.json is None: load_latest names it."""
    try:
        with Folder(path).open("state.json", "r", encoding="utf-8") as f:
            settings = json.load(f).get("settings")
    except (OSError, ValueError, AttributeError):  # AttributeError: not a JSON object
        return None
    return settings["task"] if isinstance(settings, dict) and "task" in settings else None


def check_whole(directory):
    """A DataError naming the missing file where the newest ckpt-<step>/ of the local `directory` (or `directory`
    itself, a ckpt-<step>/) holds one of state.json and state.npz but not the other. atomic_dir renames a
    checkpoint into place whole, so one without both was damaged afterwards: reading the one before, or starting
    afresh, would be silent, and "no checkpoint" untrue. A URL's is left out: an upload cut short has no
    COMPLETE object and is not listed."""
    folder = Folder(directory)
    if not folder.renames or not folder.isdir():
        return
    if _NAME.match(os.path.basename(os.path.normpath(folder.root))):
        newest = folder
    else:
        steps = sorted((int(m.group(1)), name) for name in folder.listdir() if (m := _NAME.match(name)))
        if not steps or not folder.isdir(steps[-1][1]):
            return
        newest = folder.folder(steps[-1][1])
    missing = [name for name in FILES if not newest.isfile(name)]
    if len(missing) == 1:  # neither: not this trainer's (another tool's ckpt-1/, an export so named)
        name, holds = missing[0], FILES[missing[0]]
        raise DataError(f"{newest}: incomplete checkpoint: no {name} ({holds}): restore it, or remove "
                        "that directory (the checkpoint before it, if any, is then the newest)")


def _complete(checkpoint):
    if not checkpoint.renames:  # uploaded object by object: complete once its marker is there
        return directory_complete(checkpoint.root)
    return checkpoint.isfile("state.json")


def save(directory, step, arrays, state, keep, files=None):
    """`files` ({name: bytes}): what else the checkpoint carries (the run's vocab.txt and tokenizer casing)."""
    final = Folder(directory).path(f"ckpt-{step:08d}")
    with atomic_dir(final, staging_dir(directory)) as temp:  # a URL's: filled locally, uploaded, COMPLETE last
        for name, data in (files or {}).items():
            with open(os.path.join(temp, name), "wb") as f:
                f.write(data)
        with open(os.path.join(temp, "state.npz"), "wb") as f:
            np.savez(f, **arrays)
        with open(os.path.join(temp, "state.json"), "w", encoding="utf-8") as f:
            json.dump(dict(state, step=step), f, indent=1, sort_keys=True)
    for _step, path in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        remove_directory(path)
    return final


def load_latest(directory):
    """(arrays, state) of the newest checkpoint, or None when there is none."""
    path = _newest(directory)
    if path is None:
        return None
    checkpoint = Folder(path)
    state = _read_state(checkpoint)
    try:
        with checkpoint.local_copy("state.npz") as local, np.load(local) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # a cut-off or damaged state.npz too
        raise DataError(f"{checkpoint}: unreadable checkpoint: {exc}") from None
    _check_state(checkpoint, state)
    return path, arrays, state


def latest_state(directory):
    """(path, state) of the newest checkpoint, its state.json alone (load_latest reads the weights too), or None
    when there is none."""
    path = _newest(directory)
    if path is None:
        return None
    checkpoint = Folder(path)
    state = _read_state(checkpoint)
    _check_state(checkpoint, state)
    return path, state


def _newest(directory):
    """The path of the newest complete checkpoint of `directory`, None where there is none; an incomplete newest
    one is named (check_whole)."""
    check_whole(directory)
    checkpoints = list_checkpoints(directory)
    return checkpoints[-1][1] if checkpoints else None


def _read_state(checkpoint):
    try:
        with checkpoint.open("state.json", "r", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise DataError(f"{checkpoint}: unreadable checkpoint: {exc}") from None


def _check_state(checkpoint, state):
    problem = state_problem(state)
    if problem:
        raise DataError(f"{checkpoint.display('state.json')}: damaged checkpoint state ({problem}); "
                        "remove the checkpoint to resume from the one before")


def carried_files(path):
    """{name: bytes} of what the checkpoint `path` carries besides its state (save's `files`: the run's vocab.txt
    and tokenizer_config.json), for the checkpoints of a run that resumes it."""
    checkpoint = Folder(path)
    files = {}
    for name in ("vocab.txt", "tokenizer_config.json"):
        if checkpoint.isfile(name):
            with checkpoint.open(name, "rb") as f:
                files[name] = f.read()
    return files


def state_problem(state):
    """What makes a parsed state.json unusable, or None: `save` writes an object with these."""
    if not isinstance(state, dict):
        return "not a JSON object"
    for key, kind in (("step", int), ("draws", int), ("settings", dict)):
        if not isinstance(state.get(key), kind):
            return f'no {kind.__name__} "{key}"'
    return None


def _first_difference(key, saved, current):
    """(name, saved value, this run's) of the first field two settings' values differ in: a model of another
    size was named by both whole model dicts, a line of some 400 characters to compare by eye."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for field in [*current, *(field for field in saved if field not in current)]:
            if saved.get(field) != current.get(field):
                return f"{key}.{field}", saved.get(field), current.get(field)
    return key, saved, current


def check_compatible(path, saved, current, arrays, expected_shapes):
    """A resumed run must keep what fixes the weights' trajectory; name the first difference."""
    for key, value in current.items():
        if saved.get(key) != value:
            name, was, now = _first_difference(key, saved.get(key), value)
            raise UsageError(f"{path}: checkpoint was written with {name}={was!r}, this run has {now!r}")
    for name, shape in expected_shapes.items():
        if name not in arrays:
            raise UsageError(f"{path}: checkpoint lacks variable {name}")
        if tuple(arrays[name].shape) != tuple(shape):
            raise UsageError(f"{path}: variable {name} has shape {arrays[name].shape}, expected {tuple(shape)}")
