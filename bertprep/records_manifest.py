"""The one check of a records manifest (`create`, `pack`, `create-squad`, `create-glue`), before anything reads it.

Every reader that trusts a records manifest (validate, inspect --epoch, pack,
bertprep.hf.load, bertprep.torch, the trainer's record reader) checks it here
first, so a hand-edited or damaged manifest ends with one line naming the
manifest and the field instead of a traceback, an empty run or records
silently skipped: the kind is known, its dimensions are positive integers
(exactly the kind's), counts and first instances are non-negative integers,
`max_predictions_per_seq` is at least 1, `masked_lm_prob` is in (0, 1], a
fine-tuning manifest's task, labels and flags are of their types, and
the files it lists (of the formats the reader reads) are there with the
listed sizes.
"""

import os

from bertprep import storage
from bertprep.errors import DataError
from bertprep.folder import Folder
from bertprep.formats import ALL_FORMATS
from bertprep.formats.schemas import KINDS, PRETRAINING, is_integer
from bertprep.workdir import MANIFEST, load_manifest

# file entry field -> the least value it may hold; every count is below 2^63 (the loaders hold them as int64)
_FILE_COUNTS = {"bytes": 0, "instances": 0, "records": 0, "first_instance": 0}
_INT64_LIMIT = 1 << 63


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind_name(kind):
    """A manifest's kind: its name, or an object with its name and layout (RecordKind.to_manifest)."""
    return kind.get("name") if isinstance(kind, dict) else kind


def _kind_problem(kind):
    name = _kind_name(kind)
    return None if isinstance(name, str) and name in KINDS else \
        f"unknown record kind {name!r} (known: {', '.join(KINDS)})"


def _kind_and_dims_problems(manifest):
    problems = []
    for name, entry in (manifest.get("files") or {}).items():
        if "kind" in entry and _kind_problem(entry["kind"]):
            problems.append((f'files["{name}"].kind', _kind_problem(entry["kind"])))
    per_file = any("kind" in entry for entry in (manifest.get("files") or {}).values())
    kind = manifest.get("kind", None if per_file else PRETRAINING.name)
    if kind is not None and _kind_problem(kind):
        return problems + [("kind", _kind_problem(kind))]
    dims = manifest.get("dims")
    if dims is None:
        return problems
    if not isinstance(dims, dict):
        return problems + [("dims", f"{dims!r}, expected an object of dimensions")]
    for name, value in dims.items():
        if not is_integer(value) or value < 1:
            problems.append((f"dims.{name}", f"{value!r}, expected a positive integer"))
    if kind is not None:
        expected = KINDS[_kind_name(kind)].dims
        if set(dims) != set(expected):
            given = ", ".join(sorted(dims)) or "(none)"
            what = f"{given}, expected {', '.join(expected)} (the dimensions of {_kind_name(kind)} records)"
            problems.append(("dims", what))
    return problems


def _params_problems(params):
    problems = []
    for name in ("max_seq_length", "max_predictions_per_seq"):
        if name in params and (not is_integer(params[name]) or params[name] < 1):
            problems.append((f"params.{name}", f"{params[name]!r}, expected an integer ≥ 1"))
    prob = params.get("masked_lm_prob")
    if "masked_lm_prob" in params and (not _is_number(prob) or not 0 < prob <= 1):
        problems.append(("params.masked_lm_prob", f"{prob!r}, expected a number in (0, 1]"))
    if "seed" in params and not is_integer(params["seed"]):
        problems.append(("params.seed", f"{params['seed']!r}, expected an integer"))
    if "whole_word_mask" in params and not isinstance(params["whole_word_mask"], bool):
        problems.append(("params.whole_word_mask", f"{params['whole_word_mask']!r}, expected true or false"))
    return problems


def _vocab_and_formats_problems(manifest):
    problems = []
    vocab = manifest.get("vocab") or {}
    if "size" in vocab and (not is_integer(vocab["size"]) or vocab["size"] < 1):
        problems.append(("vocab.size", f"{vocab['size']!r}, expected an integer ≥ 1"))
    if "path" in vocab and not isinstance(vocab["path"], str):
        problems.append(("vocab.path", f"{vocab['path']!r}, expected a file name"))
    fmts = manifest.get("formats", [])
    if not isinstance(fmts, list) or not all(isinstance(fmt, str) and fmt in ALL_FORMATS for fmt in fmts):
        problems.append(("formats", f"{fmts!r}, expected a list of {', '.join(ALL_FORMATS)}"))
    elif "formats" in manifest and (unlisted := _unlisted_formats(manifest, fmts)):
        # a hand-edited `formats` that drops one: validate said SOUND and the loaders read the files it
        # no longer names, while convert and pack go by `formats`
        problems.append(("formats", f"{fmts!r}, but files lists {' and '.join(unlisted)} files too: expected "
                                    "every format of its files"))
    return problems


def _unlisted_formats(manifest, fmts):
    files = manifest.get("files")
    held = {entry.get("format") for entry in (files.values() if isinstance(files, dict) else ())
            if isinstance(entry, dict)}
    return sorted(held & set(ALL_FORMATS) - set(fmts))


def _task_problems(manifest):
    """create-squad's and create-glue's own fields, which fine-tuning trusts: a task of 5 was an AttributeError
    traceback, labels "01" were two labels by their characters, lower_case "yes" was taken for true."""
    problems = []
    if "task" in manifest and not isinstance(manifest["task"], str):
        problems.append(("task", f"{manifest['task']!r}, expected a task name"))
    labels = manifest.get("labels")
    if labels is not None and not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)
                                   and len(set(labels)) == len(labels)):
        problems.append(("labels", f"{labels!r}, expected a list of distinct label names (strings)"))
    for name in ("lower_case", "version_2_with_negative"):
        if name in manifest and not isinstance(manifest[name], bool):
            problems.append((name, f"{manifest[name]!r}, expected true or false"))
    return problems


def _file_problems(manifest, base, fmts):
    problems = []
    for name, entry in (manifest.get("files") or {}).items():
        for field, least in _FILE_COUNTS.items():
            if field in entry and (not is_integer(entry[field]) or not least <= entry[field] < _INT64_LIMIT):
                expected = f"{entry[field]!r}, expected an integer in {least}..2^63-1"
                problems.append((f'files["{name}"].{field}', expected))
        fmt = entry.get("format") or name.split("/")[0]
        if fmts is None or fmt not in fmts:
            continue
        full = storage.normpath(storage.join(base, name))
        if not storage.isfile(full):
            problems.append((f'files["{name}"]', f"{storage.display(full)} is missing"))
        else:
            problems += _size_problems(f'files["{name}"]', full, entry)
    metadata = manifest.get("metadata")
    for name, entry in (metadata.items() if isinstance(metadata, dict) and fmts is not None else ()):
        # create-squad's eval.{features,examples}.jsonl, read only once the fine-tuning is done: one cut short
        # failed after every step had been trained (a missing one is the fine-tuning reader's to name)
        full = storage.normpath(storage.join(base, name))
        if isinstance(entry, dict) and storage.isfile(full):
            problems += _size_problems(f'metadata["{name}"]', full, entry)
    return problems


def _size_problems(field, full, entry):
    """[(field.bytes, what is wrong)] where the file `full` does not hold the bytes its entry lists."""
    if is_integer(entry.get("bytes")) and storage.getsize(full) != entry["bytes"]:
        return [(f"{field}.bytes", f"{entry['bytes']:,}, but {full} holds {storage.getsize(full):,} bytes")]
    return []


# In a records manifest while `bertprep create` writes its shards (saved as they finish, for a rerun to resume),
# removed by the run's last save: a killed or running create's manifest lists the shards done so far, which
# `pack`, the loaders and `validate` took for the whole set.
WRITING = "writing"


def records_manifest_problems(manifest, path, fmts=None):
    """[(field, what is wrong)] of a parsed records manifest at `path`; the files listed in formats `fmts`
    (a collection of format names; None: none) must be there with their listed sizes."""
    params = manifest.get("params") or {}
    unfinished = [(WRITING, f"the {manifest.get('stage', 'create')} run that writes these records has not "
                            "finished (killed, or still running): rerun it to complete them")] \
        if WRITING in manifest else []
    return unfinished + _kind_and_dims_problems(manifest) + _params_problems(params) + \
        _vocab_and_formats_problems(manifest) + _task_problems(manifest) + \
        _file_problems(manifest, os.path.dirname(path), fmts)


def check_records_manifest(manifest, path, fmts=None):
    """The manifest, or a DataError naming the manifest and its first bad field."""
    problems = records_manifest_problems(manifest, path, fmts)
    if problems:
        field, problem = problems[0]
        raise DataError(f"{path}: {field}: {problem}")
    return manifest


def load_records_manifest(directory, fmts=None):
    """`load_manifest(directory)` checked (None where there is none); `directory` a Folder or a path."""
    folder = Folder.of(directory)
    manifest = load_manifest(folder)
    return None if manifest is None else check_records_manifest(manifest, folder.path(MANIFEST), fmts)


def file_digests(manifest, directory):
    """{normalised path: sha256} of the files `manifest` lists under `directory` (a Folder or a path): what a
    reader checks the bytes it reads against (formats.read_batches / iter_framed `digests`)."""
    folder = Folder.of(directory)
    return {storage.normpath(folder.path(relative)): entry["sha256"]
            for relative, entry in ((manifest or {}).get("files") or {}).items()
            if isinstance(entry, dict) and isinstance(entry.get("sha256"), str)}


def refuse_unlisted_records(paths, manifest, directory, reader):
    """A DataError for the first record file of `paths` that `manifest` (of the records `directory`, a Folder or a
    path) does not list, where it lists its files: a stray copy (`x copy.tfrecord`) or another run's file was read
    by `reader` (bertprep.hf.load, bertprep.torch) with the rest without a word, its records twice, where validate
    fails it. Matched by absolute path: hf.load finds a manifest above "." by its absolute path."""
    folder = Folder.of(directory)
    listed = {storage.absolute_normpath(folder.path(name)) for name in (manifest or {}).get("files") or {}}
    stray = [path for path in paths if storage.absolute_normpath(path) not in listed] if listed else []
    if stray:
        raise DataError(f"{stray[0]}: not listed in {folder.path(MANIFEST)} (an unfinished or stray file): {reader} "
                        "would read its records with the listed files'; remove it, or move it out of the records "
                        "directory")


def kind_mismatch(path, manifest_kind, where, record_kind):
    """The DataError for records whose kind is not the one their manifest names (a relabelled manifest)."""
    held = f"{record_kind.name} records" if record_kind is not None else "records of no known kind"
    return DataError(f"{path}: kind: {manifest_kind.name}, but {where} holds {held}")


def dims_mismatch(path, manifest_dims, where, kind, dims):
    """The DataError for records of other dimensions than their manifest's `dims` (a relabelled manifest), or None
    where `dims` agree or name other dimensions (those of a record kind the manifest does not describe)."""
    listed = {name: int(value) for name, value in (manifest_dims or {}).items()}
    if not listed or set(listed) != set(dims) or listed == dims:
        return None
    return DataError(f"{path}: dims: {listed}, but {where} is a {kind.name} record of {dims}")


# The stages whose output is text, not records: what it is, and what makes records of it ({} its path).
_MAKE_RECORDS = "shard it with `bertprep shard --input {}`, then make records with `bertprep create`"
_TEXT_OUTPUTS = {"shard": ("text shards (as `bertprep shard` writes)",
                           "make records of them with `bertprep create --input {}`"),
                 "dedup": ("a deduplicated corpus (as `bertprep dedup` writes)", _MAKE_RECORDS),
                 "format": ("a formatted corpus (as `bertprep download` writes)", _MAKE_RECORDS),
                 "download": ("a download (as `bertprep download` writes)", _MAKE_RECORDS)}


def given_as_text(manifest, shown, reader):
    """The DataError for a directory given to `reader` (a loader) whose `manifest` is a text stage's (`bertprep
    shard`'s shards, a formatted corpus), `shown` naming it; None for any other. The loaders said "no tfrecord
    training records" or "no record files", as if the stage had written no records."""
    stage = manifest.get("stage") if isinstance(manifest, dict) else None
    if stage not in _TEXT_OUTPUTS:
        return None
    what, then = _TEXT_OUTPUTS[stage]
    return DataError(f"{shown}: {what}, not records: {then.format(shown)}; {reader} reads the records `bertprep "
                     "create` or `pack` writes")
