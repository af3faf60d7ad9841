"""Hugging Face `datasets` from any records directory: `bertprep.hf.load(DIR)`.

    from bertprep import hf
    splits = hf.load("records/<params>/<corpus>")    # DatasetDict: train (and test)
    splits["train"].with_format("torch")[0]["input_ids"]

Splits take `datasets`' names: a records tree's training/ and test/ are "train" and "test"; fine-tuning
files (create-squad, create-glue) train, eval (the labelled dev set) and predict/test are "train",
"validation" and "test"; files in no split directory (`bertprep convert`'s output) are "train". A file outside
training/ and test/ beside those directories (named for a split or not) is refused: its split would be a guess,
and a copy of one of theirs would be read twice.

Parquet files are handed to `datasets`' own Parquet builder, once each has
been read through bertprep's reader (its kind and shape, nulls, and values
beyond int32 or the manifest's vocab are errors naming the file); TFRecord,
OFRecord and HDF5 go through bertprep's readers into `datasets`' Arrow cache.
Either way the result is memory-mapped from that cache, one column per
feature of its own record kind (SQuAD's train split holds the answer
positions its eval split lacks), and each split's `info.description` says
the kind and the manifest's parameters. Where a directory holds several
formats, one is read: the one in the most splits (a `convert`ed copy of one
split beside the whole set is not the set), then Parquet, else HDF5,
TFRecord, OFRecord.

Given a directory with no manifest of its own (`bertprep create`'s --out, or a folder inside a records
directory such as its tfrecord/training/), each file is checked against the manifest of the records directory
it lies in, as when that directory is loaded.
A record file that the manifest of its records directory does not list (a stray copy, another run's file)
is refused, as `bertprep validate` fails it: its records would be read with the listed files'.
"""

import collections
import json
import os

from bertprep import formats, storage
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs, columnar, megatron
from bertprep.formats.schemas import FLOAT, check_int_values
from bertprep.options import refuse_empty_path
from bertprep.records_manifest import (
    dims_mismatch,
    file_digests,
    given_as_text,
    load_records_manifest,
    refuse_unlisted_records,
)
from bertprep.workdir import MANIFEST, SPLITS, load_manifest, read_manifest

READER = "bertprep.hf.load"  # as refusals of what it was given name the reader
# The format read when a directory holds several: one `datasets` reads itself, then columns, then frames.
PREFERENCE = tuple(sorted(codecs.record_names(), key=lambda name: (codecs.get(name).datasets_builder is None,
                                                             codecs.get(name).framed)))
# find_record_files' split -> `datasets`' name. Fine-tuning's eval is the labelled dev set ("validation"), apart
# from its predict/test files, whose labels are placeholders; "all" (files in no split directory) is a name
# `datasets` keeps for the union of the splits.
SPLIT_NAMES = {"training": "train", "train": "train", "test": "test", "eval": "validation", "all": "train"}
BATCH = 1024


def features_of(kind, dims):
    """The `datasets.Features` of a kind: a fixed-length list per feature, a scalar where its length is 1."""
    import datasets

    features = {}
    for feature in kind.features:
        value = datasets.Value("float32" if feature.dtype == FLOAT else "int32")
        features[feature.name] = value if feature.length == "1" else datasets.List(value, length=feature.size(dims))
    return datasets.Features(features)


def _rows(files, kind, vocab_sizes=None, digests=None, dims=None):
    """Each record of `files` as a row, its ids below its file's `vocab_sizes` ({normalised path: size}); `dims`
    ({"dims": the split's dimensions, "of": the file they are of}, not a list, which `datasets` would shard as it
    shards `files`): a file of others is a DataError."""
    for path, _size, _mtime in files:
        first_row = 0
        for batch in formats.read_batches([path], BATCH, kind=kind, digests=digests):
            if not first_row and dims is not None:
                _check_dims(path, kind, batch, dims)
            # `datasets` would cast them to int32
            check_int_values(kind, batch, path, first_row, (vocab_sizes or {}).get(storage.normpath(path)))
            count = len(next(iter(batch.values())))
            first_row += count
            for i in range(count):
                yield {name: values[i] if values.shape[1] > 1 else values[i, 0] for name, values in batch.items()}


def _check_dims(path, kind, batch, dims):
    """A DataError unless the file's records (`batch`, its first) are of the split's `dims`: a tree of two
    `create` runs' records (its --out, --seq 128 and 512 below it) stopped inside `datasets` with
    "DatasetGenerationError: An error occurred while generating the dataset", naming no file."""
    file_dims = kind.dims_of({name: values.shape[1] for name, values in batch.items()})
    if file_dims != dims["dims"]:
        raise DataError(f"{path}: {kind.name} records of {file_dims}, expected {kind.name} of {dims['dims']} as "
                        f"in {dims['of']}: records of other dimensions (another create's --seq or --pred) are no "
                        "split of one dataset; load each records directory on its own")


def _kind_and_dims(paths, fmt, digests):
    """(the record kind, its dimensions, the file, whether `paths` hold a record) of the first of `paths` that
    holds a record, else of the first columnar file (each read whole: its bytes checked against the manifest's
    sha256 here); None where no framed file holds one."""
    empty = None
    for path in paths:
        if not codecs.get(fmt).framed:
            kind, dims, columns = columnar.read_columns(path, fmt, digests.get(storage.normpath(path)))
            if len(next(iter(columns.values()))):
                return kind, dims, path, True
            empty = empty or (kind, dims, path, False)
            continue
        first = next(formats.read_batches([path], 1), None)
        if first is not None:
            kind = formats.record_kind(path, fmt)
            return kind, kind.dims_of({name: values.shape[1] for name, values in first.items()}), path, True
    return empty


def _kinds_and_dims(by_split, fmt, digests):
    """{split: (kind, dims, the file they are of, whether it holds a record)}, each split's own; a split of no
    records takes another's (its columns then)."""
    kinds = {split: _kind_and_dims(paths, fmt, digests) for split, paths in by_split.items()}
    known = next((kind for kind in kinds.values() if kind), None)
    if known is None:
        paths = [path for paths in by_split.values() for path in paths]
        raise DataError(f"{paths[0]}: no records in it or in the {len(paths) - 1} other {fmt} files")
    return {split: kind or (*known[:3], False) for split, kind in kinds.items()}


def _format_and_splits(found):
    """(the format read, {`datasets` split: its files}) of a directory's record files (find_record_files)."""
    by_format = {}
    for record_file in found:
        by_format.setdefault(record_file.fmt, {}).setdefault(record_file.split, []).append(record_file.path)
    # The format in the most splits (a converted copy of one split beside the whole set is not the set), then
    # the first in PREFERENCE (min keeps the first of equals).
    fmt = min((f for f in PREFERENCE if f in by_format), key=lambda f: -len(by_format[f]))
    by_split = by_format[fmt]
    if "all" in by_split and len(by_split) > 1:  # as "train" it would hold the split it is a copy of twice
        stray = by_split["all"][0]
        raise DataError(f"{stray}: a {fmt} file of no split (in no training/ or test/ directory), beside {fmt} "
                        f"files of the {', '.join(s for s in by_split if s != 'all')} splits; "
                        f"{_apart(stray, by_split)}")
    _refuse_files_named_for_a_split_beside_split_directories(fmt, by_split)
    named = {}
    for split, paths in by_split.items():
        named.setdefault(SPLIT_NAMES.get(split, split), []).extend(paths)
    order = ("train", "validation", "test")  # `datasets`' own order, not the files' (eval, predict, train)
    return fmt, dict(sorted(named.items(), key=lambda item: order.index(item[0]) if item[0] in order else 3))


def _refuse_files_named_for_a_split_beside_split_directories(fmt, by_split):
    """A file whose split only its name says (`g_training_0.parquet`, `train.tf_record`: a converted copy, a
    fine-tuning file) beside files in training/ or test/ directories is refused: its split's name merged it into
    theirs, and a copy of one of them was read twice (each file is read in one split, or the layout refused)."""
    in_directories = [path for paths in by_split.values() for path in paths if _split_directory(path)]
    if not in_directories:
        return
    for split, paths in by_split.items():
        stray = next((path for path in paths if not _split_directory(path)), None)
        if stray is not None:
            raise DataError(f"{stray}: a {fmt} file named for the {split} split but in no training/ or test/ "
                            f"directory, beside {fmt} files in them ({in_directories[0]}): which split it belongs "
                            f"to is ambiguous, and a copy of one of them would be read twice; "
                            f"{_apart(stray, by_split)}")


def _split_directory(path):
    """The split directory (training/, test/) `path` lies in, as find_record_files' split reads it, or None."""
    return next((part for part in reversed(os.path.normpath(path).split(os.sep)[:-1]) if part in SPLITS), None)


def _apart(stray, by_split):
    """How to read a stray file apart from the files of `by_split` it lies beside: its directory on its own, or
    the file moved out where that directory holds them too (loading it would find them again)."""
    parent = os.path.dirname(stray)
    below = storage.normpath(parent).rstrip("/") + "/"
    if any(storage.normpath(path).startswith(below) for paths in by_split.values() for path in paths
           if path != stray and os.path.dirname(path) != parent):
        return f"move it out of {parent} (and load it on its own)"
    return f"load {parent} on its own"


def _parquet_files_with_rows(paths, kind, dims, vocab_sizes, digests):
    """Those of `paths` with rows (a file of zero rows is valid and adds none; `datasets` fails on it), each
    read through bertprep's reader before `datasets` reads it: a file of another kind or shape, a null, a
    missing column or a bad value is an error naming the file (`datasets` would give `None`s, cast the values
    or fail with an error that names no file), and its bytes checked against the manifest's sha256."""
    with_rows = []
    for path in paths:
        file_kind, file_dims, columns = columnar.read_columns(path, codecs.PARQUET.name,
                                                              digests.get(storage.normpath(path)))
        if (file_kind, file_dims) != (kind, dims):
            raise DataError(f"{path}: {file_kind.name} records of {file_dims}, expected {kind.name} of {dims} "
                            f"as in {paths[0]}")
        check_int_values(kind, columns, path, vocab_size=vocab_sizes.get(storage.normpath(path)))
        if len(columns[kind.names[0]]):
            with_rows.append(path)
    return with_rows


def load(directory, cache_dir=None):
    """A `datasets.DatasetDict` of the records under `directory`, one split per split directory or file name."""
    import datasets

    from bertprep.stages.validate.dataset import find_record_files

    for name, value in (("directory", directory), ("cache_dir", cache_dir)):
        # a path or None (cache_dir): load(None) was a TypeError inside storage, cache_dir=5 a folder "./5"
        if not isinstance(value, (str, os.PathLike)) and not (name == "cache_dir" and value is None):
            raise UsageError(f"bertprep.hf.load: {name} must be a path, got {type(value).__name__} {value!r}")
        if value is not None:  # "" was read as the current directory
            refuse_empty_path(f"bertprep.hf.load: {name}", value)
    if cache_dir is not None and os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        # datasets would stop with a FileExistsError from inside its cache
        raise UsageError(f"bertprep.hf.load: cache_dir {os.fspath(cache_dir)}: not a directory")
    records = Folder(storage.local_path(directory))  # file://...: the path
    directory = records.root  # as messages name it
    # a path that is not there was "not a directory", as if something else stood there
    records.require("directory", DataError(f"{directory}: not a directory" if records.exists() else
                                           f"{directory}: no such directory"))
    found = find_record_files(directory)
    if not found:
        raise (megatron.given_as_records(directory, directory, READER)
               or given_as_text(load_manifest(records), directory, READER)
               or DataError(f"{directory}: no record files (TFRecord, OFRecord, HDF5 or Parquet)"))
    fmt, by_split = _format_and_splits(found)
    paths = [path for paths in by_split.values() for path in paths]
    place, manifest = records.root, load_records_manifest(records, (fmt,))  # its files there, its fields sound
    if manifest is None:  # a folder inside a records directory (its tfrecord/training/), or one above them
        place, manifest = _records_directory_above(records, paths, fmt) or (None, {})
    manifests = {place: manifest} if manifest else _manifests_below(records, paths, fmt)
    _refuse_unlisted(paths, manifests)
    digests = _digests(paths, manifests)
    splits = {}
    kinds = _kinds_and_dims(by_split, fmt, digests)
    _refuse_dims_no_manifest_gives(manifests, kinds)
    for split, (kind, dims, source, holds_records) in kinds.items():
        features = features_of(kind, dims)
        paths = by_split[split]
        vocab_sizes = _vocab_sizes(paths, manifests)
        builder = codecs.get(fmt).datasets_builder
        if builder and records.reads_in_place:  # a URL's Parquet through _rows, as the others
            paths = _parquet_files_with_rows(paths, kind, dims, vocab_sizes, digests)
            dataset = datasets.load_dataset(builder, data_files={split: paths}, split=split, features=features,
                                            cache_dir=cache_dir) if paths else _empty(datasets, features, split)
        # `datasets` fails on a generator of no rows: 'Instruction "test" corresponds to no data!', a ValueError
        # from deep inside it, where a split's files all hold none (a small corpus's test shards)
        elif not holds_records:
            dataset = _empty(datasets, features, split)
        else:  # the files' sizes and times are in the cache's fingerprint: a changed file is read again
            files = [(path, *_version_of(path)) for path in paths]
            dataset = _generated(datasets, features, cache_dir, split,
                                 {"files": files, "kind": kind, "vocab_sizes": vocab_sizes,
                                  "digests": digests, "dims": {"dims": dims, "of": source}})
        dataset.info.description = _description(kind, dims, fmt, manifest)
        splits[split] = dataset
    return datasets.DatasetDict(splits)


def _refuse_dims_no_manifest_gives(manifests, kinds):
    """A DataError where a split's records (`kinds`: _kinds_and_dims') are of other dimensions than the manifest
    ({records directory: manifest}) of the directory they lie in gives: a relabelled manifest (dims seq 64 over
    records of 128) was loaded without a word, where bertprep.torch refuses it."""
    for place, its_manifest in manifests.items():
        for kind, dims, source, holds_records in kinds.values():
            if holds_records and storage.lies_below(source, place):
                mismatch = dims_mismatch(storage.join(place, MANIFEST), its_manifest.get("dims"),
                                         f"{source} record 0", kind, dims)
                if mismatch:
                    raise mismatch


def _empty(datasets, features, split):
    """A split of no rows, with its kind's columns."""
    return datasets.Dataset.from_dict({name: [] for name in features}, features=features, split=split)


def _records_directory_above(records, paths, fmt):
    """(the records directory, its manifest, checked) holding the Folder `records` (its tfrecord/ or
    tfrecord/training/), found as `bertprep validate` finds it: the nearest records manifest above, where it lists
    some of the record files `paths`; else None. The manifest was sought only below, so loading a folder inside
    a records directory checked no sha256, vocab, size or unfinished run."""
    from bertprep.stages.validate.dataset import find_manifest

    found = find_manifest(storage.absolute(records.root))  # "." has no folder above it by its name
    if found is None:
        return None
    place = os.path.dirname(found["_path"])
    manifest, _problem = read_manifest(found["_path"])  # a damaged one (no files to tell) is refused below
    listed = (manifest or {}).get("files")
    # "." climbs by its absolute path: the place is absolute
    if isinstance(listed, dict) and not {storage.absolute_normpath(storage.join(place, name)) for name in listed} & \
            {storage.absolute_normpath(path) for path in paths}:
        return None  # another directory's records
    return place, load_records_manifest(place, (fmt,))


def _manifests_below(records, paths, fmt):
    """{records directory: its manifest, checked} for the record files `paths` under the Folder `records`, which
    has no manifest of its own (create's --out, the records one or more levels down): each file's is the nearest
    manifest at or above its directory, up to the root. Only the records directory's own manifest was read, so
    loading the --out above it checked no sha256, vocab, size or unfinished run."""
    manifests = {}
    for path in paths:
        place = os.path.dirname(storage.normpath(path))
        while storage.lies_below(place, records.root) and place not in manifests:
            if storage.isfile(storage.join(place, MANIFEST)):
                manifests[place] = load_records_manifest(place, (fmt,))
                break
            place = os.path.dirname(place)
    return manifests


def _refuse_unlisted(paths, manifests):
    """refuse_unlisted_records of each records directory's files among `paths` ({records directory: manifest}),
    against the manifest of the nearest one that holds them."""
    by_place = collections.defaultdict(list)
    for path in paths:
        by_place[_nearest(path, manifests)].append(path)
    for place, held in by_place.items():
        if place is not None:
            refuse_unlisted_records(held, manifests[place], place, READER)


def _nearest(path, manifests):
    """The records directory among `manifests`' that `path` lies in, the nearest; None where none holds it."""
    path = storage.normpath(path)
    return max((place for place in manifests if storage.lies_below(path, place)),
               key=lambda place: len(storage.normpath(place)), default=None)


def _digests(paths, manifests):
    """{normalised path: the sha256 its manifest ({records directory: manifest}) lists} of the record files
    `paths`, matched by absolute path: a manifest found above "." lies at an absolute path, its files' names
    under it missed the files as `./part-0` names them, and their bytes went unchecked."""
    listed = {storage.absolute_normpath(path): sha256 for place, its_manifest in manifests.items()
              for path, sha256 in file_digests(its_manifest, place).items()}
    placed = {storage.normpath(path): storage.absolute_normpath(path) for path in paths}
    return {path: listed[place] for path, place in placed.items() if place in listed}


def _vocab_sizes(paths, manifests):
    """{normalised path: the vocab size its ids are checked against (None: int32 only)} of the record files
    `paths`, each by the manifest ({records directory: manifest}) of the directory it lies in."""
    sizes = {}
    for path in paths:
        path = storage.normpath(path)
        place = _nearest(path, manifests)
        sizes[path] = ((manifests[place].get("vocab") or {}).get("size")) if place is not None else None
    return sizes


def _description(kind, dims, fmt, manifest):
    description = f"bertprep {kind.name} records ({kind.description}), {json.dumps(dims)}, from {fmt}"
    if manifest.get("params"):
        description += (f"; {manifest.get('stage', 'manifest')} parameters "
                        f"{json.dumps(manifest['params'], sort_keys=True)}")
    return description


def _version_of(path):
    """(size, what changes with the content) of a file: its mtime; an object's sha256 (a store's times are not
    the content's)."""
    if not storage.reads_in_place(path):
        return storage.getsize(path), storage.sha256(path)
    return os.path.getsize(path), os.stat(path).st_mtime_ns


def _generated(datasets, features, cache_dir, split, gen_kwargs):
    """`Dataset.from_generator(_rows)`; bertprep's own error, which `datasets` wraps in one naming no file, as is."""
    from datasets.exceptions import DatasetGenerationError

    try:
        return datasets.Dataset.from_generator(_rows, features=features, cache_dir=cache_dir, split=split,
                                               gen_kwargs=gen_kwargs)
    except DatasetGenerationError as exc:
        if isinstance(exc.__cause__, DataError):
            raise exc.__cause__ from None
        raise
