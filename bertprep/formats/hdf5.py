"""HDF5 record files: NVIDIA's PyTorch BERT layout (and MLPerf's packed one), written with h5py.

NVIDIA's `pretraining_dataset` (DeepLearningExamples PyTorch/LanguageModeling/
BERT run_pretraining.py) opens one `.hdf5` per shard and reads six datasets
by name: input_ids, input_mask, segment_ids, masked_lm_positions,
masked_lm_ids as (N, length) arrays and next_sentence_labels as (N,); its
data scripts store them gzip-compressed as i4, i1, i1, i4, i4, i1. There is
no masked_lm_weights: the reader finds the padding of the predictions as the
first masked_lm_positions of 0 ([CLS] is never masked). MLPerf's packed
files (training_results, bert/pytorch pack_pretraining_data_pytorch.py) add
positions, next_sentence_positions and next_sentence_weights and likewise
leave out masked_lm_weights (the sequence index of each prediction: the
input_mask at its position, 0 where masked_lm_ids is 0).

Other kinds keep every feature, integers as i4, floats as f4. A feature of
length 1 is stored as (N,), as NVIDIA stores next_sentence_labels. A weight
left out is derived again on reading, and a writer refuses records whose
weights would not derive back: the file always holds exactly the values.
Each chunk carries a Fletcher-32 checksum that h5py checks on reading (any
h5py reader, NVIDIA's included, reads such files as it reads others). Bytes
are deterministic: no timestamps (track_times=False), a fixed libver,
chunking from the shape alone, each dataset closed as soon as it is written.
"""

import io

import numpy as np

from bertprep import storage
from bertprep.errors import DataError
from bertprep.formats.columnar_io import Unholdable, Unreadable, as_rows, require
from bertprep.formats.schemas import FLOAT, KINDS, PACKED, PRETRAINING, check_int_values

SUFFIX = ".hdf5"
LIBRARY = "h5py"
MAGIC = b"\x89HDF\r\n\x1a\n"
LIBVER = ("earliest", "v110")


def _pretraining_weights(columns):
    return (columns["masked_lm_positions"] != 0).astype(np.float32)


def _packed_weights(columns):
    positions = columns["masked_lm_positions"].astype(np.int64)
    sequence = np.take_along_axis(columns["input_mask"], positions, axis=1)
    return np.where(columns["masked_lm_ids"] != 0, sequence, 0).astype(np.float32)


# kind name -> {feature: HDF5 dtype} where it differs from i4/f4, and {feature left out: how to derive it}.
DTYPES = {
    PRETRAINING.name: {"input_mask": "i1", "segment_ids": "i1", "next_sentence_labels": "i1"},
    PACKED.name: {"segment_ids": "i1", "next_sentence_labels": "i1", "next_sentence_weights": "i4"},
}
DERIVED = {
    PRETRAINING.name: {"masked_lm_weights": _pretraining_weights},
    PACKED.name: {"masked_lm_weights": _packed_weights},
}


def stored_dtype(kind, feature):
    return DTYPES.get(kind.name, {}).get(feature.name, "f4" if feature.dtype == FLOAT else "i4")


def stored_features(kind):
    derived = DERIVED.get(kind.name, {})
    return [f for f in kind.features if f.name not in derived]


def encode(columns, kind):
    """The bytes of one HDF5 file holding `columns` ({name: (N, length)}) of `kind`."""
    h5py = require("hdf5", LIBRARY)

    problem = _unholdable(columns, kind)
    if problem is not None:
        raise Unholdable(problem)
    buffer = io.BytesIO()
    with h5py.File(buffer, "w", libver=LIBVER) as f:
        for feature in stored_features(kind):
            dtype = np.dtype(stored_dtype(kind, feature))
            values = np.asarray(columns[feature.name])
            if feature.length == "1":
                values = values.reshape(len(values))
            # fletcher32: a checksum per chunk, verified by h5py on every read (TFRecord's CRCs, for HDF5)
            dataset = f.create_dataset(feature.name, data=values.astype(dtype), dtype=dtype, compression="gzip",
                                       fletcher32=True, track_times=False)
            # Closed here, not when the last reference goes: its chunks wait in HDF5's chunk cache and get their
            # file space when it closes, and a thread that holds h5py's frames a moment (Dask's worker profiler)
            # kept it open while the next datasets took space first: the same data in another layout.
            dataset.id.close()
    return buffer.getvalue()


def _unholdable(columns, kind):
    """Why NVIDIA's layout cannot hold these records, naming the first row that it cannot, or None: a packed
    position outside its row (deriving the weights indexed the row with it: an IndexError, or a read from the
    row's end), a weight left out that would not derive back, a value wider than the dataset's dtype."""
    if kind is PACKED and (problem := _position_problem(columns)):
        return problem
    for name, derive in DERIVED.get(kind.name, {}).items():
        differs = np.flatnonzero((derive(columns) != as_rows(columns[name]).astype(np.float32)).any(axis=1))
        if differs.size:
            return (f"row {differs[0]}: {name} does not follow from the other features, so NVIDIA's HDF5 layout "
                    f"(which leaves it out and derives it on reading) cannot hold this {kind.name} record")
    for feature in stored_features(kind):
        dtype = np.dtype(stored_dtype(kind, feature))
        values = as_rows(columns[feature.name])
        if dtype.kind == "i" and values.size:
            info = np.iinfo(dtype)
            bad = (values < info.min) | (values > info.max)
            if bad.any():
                row, column = np.argwhere(bad)[0].tolist()
                return (f"row {row}: {feature.name}[{column}]: {values[row, column]} does not fit {dtype.name}, the "
                        "HDF5 layout's dtype for it")
    return None


def _kind_of(path, datasets):
    """The kind whose stored features are the file's datasets; float-or-not tells GLUE's two kinds apart."""
    names = set(datasets)
    matches = [kind for kind in KINDS.values() if {f.name for f in stored_features(kind)} == names]
    if len(matches) > 1:
        matches = [kind for kind in matches
                   if all((datasets[f.name].dtype.kind == "f") == (stored_dtype(kind, f) == "f4")
                          for f in stored_features(kind))]
    if len(matches) != 1:
        raise DataError(f"{path}: HDF5 datasets {', '.join(sorted(names)) or '(none)'} match no record kind's "
                        "layout (NVIDIA's pretraining files hold "
                        f"{', '.join(f.name for f in stored_features(PRETRAINING))})")
    return matches[0]


def decode(path, sha256=None):
    """(kind, {name: array}) of an HDF5 record file, the left-out weights derived again. h5py reads a real
    file: a URL's object is fetched to a local copy first (messages still name the URL). With `sha256` (its
    manifest's) the file is read once into memory, its bytes checked, and h5py reads it from there."""
    if sha256 is not None:
        return _decode(storage.display(path), io.BytesIO(storage.read_bytes(path, sha256)))
    with storage.local_copy(path) as local:
        return _decode(storage.display(path), local)


def _decode(path, local):
    h5py = require("hdf5", LIBRARY)

    try:
        f = h5py.File(local, "r")
    except (OSError, ValueError) as exc:
        raise Unreadable(f"{path}: not a readable HDF5 file ({str(exc).splitlines()[0]})") from None
    try:
        with f:
            datasets = _datasets(path, f, h5py)
            kind = _kind_of(path, datasets)
            stored = {}
            for feature in stored_features(kind):
                data = datasets[feature.name]
                expected = "f" if stored_dtype(kind, feature) == "f4" else "iu"
                if data.dtype.kind not in expected:
                    raise DataError(f"{path}: dataset {feature.name} holds {data.dtype}, expected "
                                    f"{'floats' if expected == 'f' else 'integers'} ({stored_dtype(kind, feature)})")
                if data.ndim not in (1, 2):
                    raise DataError(f"{path}: dataset {feature.name} has shape {data.shape}, expected (N, length)")
                try:
                    stored[feature.name] = data[()]
                except (OSError, ValueError) as exc:
                    raise Unreadable(f"{path}: dataset {feature.name} cannot be read "
                                    f"({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise Unreadable(f"{path}: damaged HDF5 file ({str(exc).splitlines()[0]})") from None
    check_int_values(kind, stored, path)  # before the cast to int32, which would wrap them
    for feature in stored_features(kind):
        stored[feature.name] = as_rows(stored[feature.name]).astype(np.float32 if feature.dtype == FLOAT else np.int32)
    if kind is PACKED:
        _check_positions(path, stored)
    for name, derive in DERIVED.get(kind.name, {}).items():
        stored[name] = derive(stored)
    return kind, stored


def _datasets(path, f, h5py):
    """{name: dataset} of the file's top level, each stored in this file: a soft or external link that leads
    nowhere was a KeyError traceback, and a virtual dataset whose source file is gone read as its fill value
    (zeros, without a word); one that leads elsewhere reads another file's values."""
    datasets = {}
    for name in f.keys():
        link = f.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise DataError(f"{path}: {name} is a link ({type(link).__name__}) to another place, expected a dataset "
                            "stored in this file")
        member = f[name]
        if isinstance(member, h5py.Dataset):
            if member.is_virtual or member.external:
                raise DataError(f"{path}: dataset {name} keeps its values in other files (a virtual or external "
                                "dataset), expected them in this file")
            datasets[name] = member
    return datasets


def _check_positions(path, stored):
    """Packed weights are read from input_mask at masked_lm_positions: each must be a position of the row (an
    index past it would end in a traceback, a negative one would silently read from the row's end)."""
    problem = _position_problem(stored)
    if problem is not None:
        raise DataError(f"{path}: {problem}")


def _position_problem(columns):
    """The first packed masked_lm_positions value that is no position of its row, as "row R: ...", or None."""
    positions, seq = as_rows(columns["masked_lm_positions"]), as_rows(columns["input_mask"]).shape[1]
    bad = (positions < 0) | (positions >= seq)
    if not bad.any():
        return None
    row, column = np.argwhere(bad)[0].tolist()
    return (f"row {row}: masked_lm_positions[{column}]: {positions[row, column]} is not a position of the row "
            f"(0..{seq - 1})")


def write(path, columns, kind, staging=None):
    """A whole file of these records from their columns, atomically; (bytes, sha256)."""
    from bertprep.formats.columnar import write_columns

    return write_columns(path, columns, "hdf5", kind, staging)


def read_columns(path, sha256=None):
    """(kind, {feature: (N, length) int32/float32 array}) of a whole file."""
    from bertprep.formats.columnar import read_columns as read

    kind, _dims, columns = read(path, "hdf5", sha256)
    return kind, columns
