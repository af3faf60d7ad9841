"""Hugging Face `datasets` from any records directory: `bertprep.hf.load(DIR)`.

    from bertprep import hf
    splits = hf.load("records/<params>/<corpus>")    # DatasetDict: train (and test)
    splits["train"].with_format("torch")[0]["input_ids"]

Parquet files are handed to `datasets`' own Parquet builder, once each has
been read through bertprep's reader (its kind and shape, nulls, and values
beyond int32 or the manifest's vocab are errors naming the file); TFRecord,
OFRecord and HDF5 go through bertprep's readers into `datasets`' Arrow cache.
Either way the result is memory-mapped from that cache, one column per
feature of the record kind, and each split's `info.description` says the
kind and the manifest's parameters. Where a directory holds several formats
of the same records, one is read: Parquet, else HDF5, TFRecord, OFRecord.
"""

import json
import os

from bertprep import formats, storage
from bertprep.errors import DataError
from bertprep.folder import Folder
from bertprep.formats import codecs, columnar
from bertprep.formats.schemas import FLOAT, check_int_values
from bertprep.records_manifest import file_digests, load_records_manifest

# The format read when a directory holds several: one `datasets` reads itself, then columns, then frames.
PREFERENCE = tuple(sorted(codecs.record_names(), key=lambda name: (codecs.get(name).datasets_builder is None,
                                                             codecs.get(name).framed)))
SPLIT_NAMES = {"training": "train", "train": "train", "test": "test", "eval": "test"}
BATCH = 1024


def features_of(kind, dims):
    """The `datasets.Features` of a kind: a fixed-length list per feature, a scalar where its length is 1."""
    import datasets

    features = {}
    for feature in kind.features:
        value = datasets.Value("float32" if feature.dtype == FLOAT else "int32")
        features[feature.name] = value if feature.length == "1" else datasets.List(value, length=feature.size(dims))
    return datasets.Features(features)


def _rows(files, kind, vocab_size=None, digests=None):
    for path, _size, _mtime in files:
        first_row = 0
        for batch in formats.read_batches([path], BATCH, kind=kind, digests=digests):
            check_int_values(kind, batch, path, first_row, vocab_size)  # `datasets` would cast them to int32
            count = len(next(iter(batch.values())))
            first_row += count
            for i in range(count):
                yield {name: values[i] if values.shape[1] > 1 else values[i, 0] for name, values in batch.items()}


def _kind_and_dims(paths, fmt, digests):
    """The record kind and dimensions of the first of `paths` that holds a record (or any columnar file, read
    whole: its bytes checked against the manifest's sha256 here)."""
    for path in paths:
        if not codecs.get(fmt).framed:
            kind, dims, _columns = columnar.read_columns(path, fmt, digests.get(storage.normpath(path)))
            return kind, dims
        first = next(formats.read_batches([path], 1), None)
        if first is not None:
            kind = formats.record_kind(path, fmt)
            return kind, kind.dims_of({name: values.shape[1] for name, values in first.items()})
    raise DataError(f"{paths[0]}: no records in it or in the {len(paths) - 1} other {fmt} files")


def _parquet_files_with_rows(paths, kind, dims, vocab_size, digests):
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
        check_int_values(kind, columns, path, vocab_size=vocab_size)
        if len(columns[kind.names[0]]):
            with_rows.append(path)
    return with_rows


def load(directory, cache_dir=None):
    """A `datasets.DatasetDict` of the records under `directory`, one split per split directory."""
    import datasets

    from bertprep.stages.validate.dataset import find_record_files

    records = Folder(storage.local_path(directory))  # file://...: the path
    directory = records.root  # as messages name it
    records.require("directory", DataError(f"{directory}: not a directory"))
    found = find_record_files(directory)
    if not found:
        raise DataError(f"{directory}: no record files (TFRecord, OFRecord, HDF5 or Parquet)")
    fmt = next(f for f in PREFERENCE if any(r.fmt == f for r in found))
    by_split = {}
    for record_file in found:
        if record_file.fmt == fmt:
            by_split.setdefault(SPLIT_NAMES.get(record_file.split, record_file.split), []).append(record_file.path)
    manifest = load_records_manifest(records, (fmt,)) or {}  # its files there, its fields sound
    vocab_size = (manifest.get("vocab") or {}).get("size")
    digests = file_digests(manifest, records)
    kind, dims = _kind_and_dims([path for paths in by_split.values() for path in paths], fmt, digests)
    description = f"bertprep {kind.name} records ({kind.description}), {json.dumps(dims)}, from {fmt}"
    if manifest.get("params"):
        description += (f"; {manifest.get('stage', 'manifest')} parameters "
                        f"{json.dumps(manifest['params'], sort_keys=True)}")
    features = features_of(kind, dims)
    splits = {}
    for split, paths in by_split.items():
        builder = codecs.get(fmt).datasets_builder
        if builder and records.reads_in_place:  # a URL's Parquet through _rows, as the others
            paths = _parquet_files_with_rows(paths, kind, dims, vocab_size, digests)
            dataset = datasets.load_dataset(builder, data_files={split: paths}, split=split, features=features,
                                            cache_dir=cache_dir) if paths else \
                datasets.Dataset.from_dict({name: [] for name in features}, features=features, split=split)
        else:  # the files' sizes and times are in the cache's fingerprint: a changed file is read again
            files = [(path, *_version_of(path)) for path in paths]
            dataset = _generated(datasets, features, cache_dir, split,
                                 {"files": files, "kind": kind, "vocab_size": vocab_size,
                                  "digests": digests})
        dataset.info.description = description
        splits[split] = dataset
    return datasets.DatasetDict(splits)


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
