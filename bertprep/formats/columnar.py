"""Columnar record files (HDF5, Parquet): a whole file of one record kind as columns.

TFRecord and OFRecord frame one record after another; HDF5 and Parquet hold
each feature as one column of every record. A columnar codec is a module with

    SUFFIX                    what its files are called (`.hdf5`, `.parquet`)
    LIBRARY                   the module it needs, from the `columnar` extra (see `require`)
    MAGIC                     the bytes its files start with
    encode(columns, kind)     {name: (N, length) array} of every feature -> the file's bytes (deterministic)
    decode(path)              -> (kind, {name: stored array}); DataError naming file and column
                              (Unreadable where the bytes themselves are damaged)

and this module gives them what the framed formats have: reading records and
batches through the kind's description (bertprep.formats.schemas), sniffing,
and atomic writing. Integer features come back as int32 (what both store at
most), float features as float32, every feature as (N, length).
"""

import os

import numpy as np

from bertprep import storage
from bertprep.errors import DataError
from bertprep.formats import codecs, columnar_io
from bertprep.formats.columnar_io import (  # Unreadable: validate tells framing from schema by it
    Unreadable,  # noqa: F401
    as_rows,
)
from bertprep.formats.schemas import FLOAT, check_int_values

# Each columnar format's module (SUFFIX, LIBRARY, MAGIC, encode, decode), as the registry names it.
CODECS = {name: codecs.get(name).implementation for name in codecs.record_names() if not codecs.get(name).framed}


def require(fmt):
    """The library `fmt`'s codec needs (its LIBRARY), imported; or a UsageError naming the extra with it."""
    return columnar_io.require(fmt, CODECS[fmt].LIBRARY)


def format_of_name(name):
    codec = codecs.of_file_name(name)
    return codec.name if codec and not codec.framed else None


def sniff(path):
    """The columnar format a file's first bytes say it is, or None."""
    with storage.open(path, "rb") as f:
        head = f.read(8)
    return next((fmt for fmt, codec in CODECS.items() if head.startswith(codec.MAGIC)), None)


def full_columns(kind, stored, path):
    """Every feature of `kind` as (N, length) int32/float32 arrays, from a file's stored columns; and the dims.

    Integer values that int32 cannot hold are refused, not wrapped (DataError naming row, feature and value)."""
    check_int_values(kind, stored, path)
    columns = {}
    for feature in kind.features:
        columns[feature.name] = as_rows(stored[feature.name]).astype(
            np.float32 if feature.dtype == FLOAT else np.int32, copy=False)
    counts = {name: len(values) for name, values in columns.items()}
    if len(set(counts.values())) > 1:
        raise DataError(f"{path}: columns hold different numbers of records "
                        f"({', '.join(f'{name} {count}' for name, count in counts.items())}), expected one count")
    dims = kind.dims_of({name: values.shape[1] for name, values in columns.items()})
    if dims is None:
        raise DataError(f"{path}: column widths do not fit a {kind.name} record "
                        f"({', '.join(f'{f.name}[{f.length}]' for f in kind.features)})")
    return columns, dims


def read_columns(path, fmt, sha256=None):
    """(kind, dims, {name: (N, length) array}) of a columnar file; with `sha256` (its manifest's) its bytes are
    checked as they are read (storage.read_checked)."""
    if fmt not in CODECS:
        raise DataError(f"{path}: {fmt} records cannot be read in one pass with HDF5 or Parquet files")
    kind, stored = CODECS[fmt].decode(path, sha256)  # a URL's object from a local copy (h5py and pyarrow read files)
    columns, dims = full_columns(kind, stored, path)
    return kind, dims, columns


def record_kind(path, fmt):
    return CODECS[fmt].decode(path)[0]


def read_records(path, fmt):
    """Each record as {name: 1-D array}, in the kind's feature order."""
    _kind, _dims, columns = read_columns(path, fmt)
    count = len(next(iter(columns.values()))) if columns else 0
    for i in range(count):
        yield {name: values[i] for name, values in columns.items()}


def read_batches(paths, batch_size, drop_remainder=False, kind=None, dims=None, digests=None):
    """formats.read_batches over columnar files: batches run across files, int32 and float32."""
    pending = []
    for path in paths:
        file_kind, file_dims, columns = read_columns(path, format_of_name(os.path.basename(os.fspath(path)))
                                                     or sniff(path),
                                                     (digests or {}).get(storage.normpath(os.fspath(path))))
        kind, dims = kind or file_kind, dims or file_dims
        if file_kind.name != kind.name or file_dims != dims:
            raise DataError(f"{path}: {file_kind.name} records of {file_dims}, expected {kind.name} of {dims}")
        pending.append(columns)
        while sum(len(c[kind.names[0]]) for c in pending) >= batch_size:
            merged = {name: np.concatenate([c[name] for c in pending]) for name in kind.names}
            yield {name: values[:batch_size] for name, values in merged.items()}
            pending = [{name: values[batch_size:] for name, values in merged.items()}]
    if pending and not drop_remainder:
        merged = {name: np.concatenate([c[name] for c in pending]) for name in kind.names}
        if len(merged[kind.names[0]]):
            yield merged


def encode(columns, fmt, kind):
    return CODECS[fmt].encode({f.name: np.asarray(columns[f.name]) for f in kind.features}, kind)


def write_columns(path, columns, fmt, kind, staging=None):
    """Write one columnar file atomically; (bytes, sha256)."""
    from bertprep.atomic import atomic_write_bytes

    return atomic_write_bytes(path, encode(columns, fmt, kind), staging)

