"""Hugging Face `datasets` from any records directory: `bertprep.hf.load(DIR)`.

    from bertprep import hf
    splits = hf.load("records/<params>/<corpus>")    # DatasetDict: train (and test)
    splits["train"].with_format("torch")[0]["input_ids"]

Parquet files are handed to `datasets`' own Parquet builder; TFRecord,
OFRecord and HDF5 go through bertprep's readers into `datasets`' Arrow cache.
Either way the result is memory-mapped from that cache, one column per
feature of the record kind, and each split's `info.description` says the
kind and the manifest's parameters. Where a directory holds several formats
of the same records, one is read: Parquet, else HDF5, TFRecord, OFRecord.
"""

import json
import os

from bertprep import formats
from bertprep.errors import DataError
from bertprep.formats.schemas import FLOAT
from bertprep.workdir import load_manifest

PREFERENCE = ("parquet", "hdf5", "tfrecord", "ofrecord")
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


def _rows(files):
    for path, _size, _mtime in files:
        for batch in formats.read_batches([path], BATCH):
            for i in range(len(next(iter(batch.values())))):
                yield {name: values[i] if values.shape[1] > 1 else values[i, 0] for name, values in batch.items()}


def load(directory, cache_dir=None):
    """A `datasets.DatasetDict` of the records under `directory`, one split per split directory."""
    import datasets

    from bertprep.validate.dataset import find_record_files

    if not os.path.isdir(directory):
        raise DataError(f"{directory}: not a directory")
    found = find_record_files(directory)
    if not found:
        raise DataError(f"{directory}: no record files (TFRecord, OFRecord, HDF5 or Parquet)")
    fmt = next(f for f in PREFERENCE if any(r.fmt == f for r in found))
    by_split = {}
    for record_file in found:
        if record_file.fmt == fmt:
            by_split.setdefault(SPLIT_NAMES.get(record_file.split, record_file.split), []).append(record_file.path)
    kind = formats.record_kind(by_split[next(iter(by_split))][0], fmt)
    first = next(formats.read_batches([by_split[next(iter(by_split))][0]], 1, kind=kind))
    dims = kind.dims_of({name: values.shape[1] for name, values in first.items()})
    manifest = load_manifest(directory) or {}
    description = f"bertprep {kind.name} records ({kind.description}), {json.dumps(dims)}, from {fmt}"
    if manifest.get("params"):
        description += f"; {manifest.get('stage', 'manifest')} parameters {json.dumps(manifest['params'], sort_keys=True)}"
    features = features_of(kind, dims)
    splits = {}
    for split, paths in by_split.items():
        if fmt == "parquet":
            dataset = datasets.load_dataset("parquet", data_files={split: paths}, split=split, features=features,
                                            cache_dir=cache_dir)
        else:  # the files' sizes and times are in the cache's fingerprint: a changed file is read again
            files = [(path, os.path.getsize(path), os.stat(path).st_mtime_ns) for path in paths]
            dataset = datasets.Dataset.from_generator(_rows, features=features, gen_kwargs={"files": files},
                                                      cache_dir=cache_dir, split=split)
        dataset.info.description = description
        splits[split] = dataset
    return datasets.DatasetDict(splits)
