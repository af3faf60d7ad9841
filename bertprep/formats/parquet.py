"""Parquet record files: one column per feature, readable by pyarrow and `datasets` without bertprep.

A feature of length 1 is a scalar column (int32 or float32); a longer one a
fixed-size list of its length, so `datasets` sees `List(Value("int32"),
length=seq)`. Every feature is kept (masked_lm_weights too), and the kind is
told by the column names and types, as for framed records. Bytes are
deterministic for one pyarrow version: one row group, zstd at a fixed level,
no statistics, a CRC per page; the footer names the writing library (`created_by`), which
pyarrow sets from its version and offers no way to change.
"""

import io

import numpy as np

from bertprep import storage
from bertprep.errors import DataError
from bertprep.formats.columnar_io import Unreadable, require
from bertprep.formats.schemas import FLOAT, kind_of_record

SUFFIX = ".parquet"
LIBRARY = "pyarrow.parquet"
MAGIC = b"PAR1"
WRITER = {"compression": "zstd", "compression_level": 3, "write_statistics": False, "use_dictionary": False,
          "write_page_checksum": True}  # a CRC per page, checked by decode (as TFRecord's CRCs are)


def _pyarrow():
    pq = require("parquet", LIBRARY)
    import pyarrow

    return pyarrow, pq


def arrow_table(columns, kind):
    pa, _pq = _pyarrow()

    arrays, fields = [], []
    for feature in kind.features:
        values = np.asarray(columns[feature.name])
        value_type = pa.float32() if feature.dtype == FLOAT else pa.int32()
        flat = values.astype(np.float32 if feature.dtype == FLOAT else np.int64).reshape(-1)
        if feature.dtype != FLOAT and flat.size and (flat.min() < -(1 << 31) or flat.max() >= 1 << 31):
            raise DataError(f"{feature.name}: values {flat.min()}..{flat.max()} do not fit int32, Parquet's type for "
                            "it")
        flat = pa.array(flat.astype(np.float32 if feature.dtype == FLOAT else np.int32), value_type)
        if feature.length == "1":
            arrays.append(flat)
            fields.append(pa.field(feature.name, value_type, nullable=False))
        else:
            width = values.shape[1] if values.ndim == 2 else 0
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, width))
            fields.append(pa.field(feature.name, pa.list_(pa.field("item", value_type, nullable=False), width),
                                   nullable=False))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def encode(columns, kind):
    pa, pq = _pyarrow()

    table = arrow_table(columns, kind)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=max(1, table.num_rows), **WRITER)
    return sink.getvalue().to_pybytes()


def _stored_kind(field):
    pa, _pq = _pyarrow()

    value_type = field.type.value_type if pa.types.is_list(field.type) or pa.types.is_fixed_size_list(field.type) \
        else field.type
    if pa.types.is_floating(value_type):
        return "float"
    if pa.types.is_integer(value_type):
        return "int32"
    return str(value_type)


def decode(path, sha256=None):
    """(kind, {name: (N, length) array}) of a Parquet record file (a URL's object from a local copy, as HDF5's).
    With `sha256` (its manifest's) the file is read once into memory, its bytes checked, and decoded from there."""
    if sha256 is not None:
        return _decode(storage.display(path), io.BytesIO(storage.read_bytes(path, sha256)))
    with storage.local_copy(path) as local:
        return _decode(storage.display(path), local)


def _decode(path, local):
    pa, pq = _pyarrow()

    try:
        table = pq.read_table(local, page_checksum_verification=True)
    except (OSError, pa.ArrowException) as exc:
        raise Unreadable(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    kinds = {field.name: _stored_kind(field) for field in table.schema}
    kind = kind_of_record(kinds)
    if kind is None:
        raise DataError(f"{path}: Parquet columns {', '.join(f'{n} ({k})' for n, k in kinds.items()) or '(none)'} "
                        "match no record kind")
    stored = {}
    for feature in kind.features:
        column = table.column(feature.name).combine_chunks()
        nested = pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type)
        if column.null_count or (nested and column.flatten().null_count):  # a null record, or a null in a list
            raise DataError(f"{path}: column {feature.name} holds nulls, expected a value in every record")
        if isinstance(column.type, pa.FixedSizeListType):
            values = column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), column.type.list_size)
        elif pa.types.is_list(column.type):
            rows = column.to_pylist()
            widths = {len(row) for row in rows}
            if len(widths) > 1:
                raise DataError(f"{path}: column {feature.name} holds lists of lengths {sorted(widths)[:4]}, "
                                "expected one length")
            values = np.array(rows).reshape(len(rows), widths.pop() if widths else 0)
        else:
            values = column.to_numpy(zero_copy_only=False).reshape(len(column), 1)
        stored[feature.name] = values
    return kind, stored


def write(path, columns, kind, staging=None):
    """A whole file of these records from their columns, atomically; (bytes, sha256)."""
    from bertprep.formats.columnar import write_columns

    return write_columns(path, columns, "parquet", kind, staging)


def read_columns(path, sha256=None):
    """(kind, {feature: (N, length) int32/float32 array}) of a whole file."""
    from bertprep.formats.columnar import read_columns as read

    kind, _dims, columns = read(path, "parquet", sha256)
    return kind, columns
