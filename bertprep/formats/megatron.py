"""Megatron-Core's indexed dataset: token ids per sentence with document boundaries, as `<prefix>.bin` + `<prefix>.idx`.

What Megatron-LM's `tools/preprocess_data.py --split-sentences` writes and
`megatron.core.datasets.indexed_dataset.IndexedDataset` reads (its
`BERTMaskedWordPieceDataset` pairs, truncates and masks the sentences at load
time), byte for byte what `IndexedDatasetBuilder` writes for the same ids:

    <prefix>.bin   every sequence's ids, one after another, in the dtype below
    <prefix>.idx   b"MMIDIDX\\x00\\x00", version <Q 1, dtype code <B,
                   sequence count <Q, document count <Q (the entries of the
                   document indices: documents + 1),
                   lengths int32[sequences], byte offsets into .bin int64[sequences],
                   document indices int64[documents + 1]: 0, then the sequence
                   index each document ends at (the last one: the sequence count)

The dtype is what Megatron's `DType.optimal_dtype(vocab size)` picks: uint16
below 65,500 ids, else int32 (code 8 or 4). Preprocess_data names a sentence
level prefix `<output prefix>_text_sentence` (json key "text", level
"sentence"): `prefix_name`. The files hold sequences, not masked-LM records
(`Codec.holds`): no record stage reads or offers them.

`write` removes an earlier .idx, then stages both files and renames the .bin
before the .idx: a prefix is found by its .idx, so a reader never opens one
whose .bin is missing or another run's. `read`
checks what Megatron's reader assumes without checking (it memory-maps and
trusts the counts): each disagreement is one DataError naming the file.
"""

import dataclasses
import hashlib
import struct

import numpy as np

from bertprep import storage
from bertprep.atomic import atomic_write_bytes
from bertprep.errors import DataError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document count: 34 bytes
# Megatron's DType enum: the codes a reader maps back to a NumPy dtype.
DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}
UINT16_LIMIT = 65500  # DType.optimal_dtype: a cardinality below this is stored as uint16
BIN, IDX = ".bin", ".idx"
BIN_IDX = (BIN, IDX)  # the order they are written in: a prefix exists once its .idx does
SENTENCE_LEVEL = "_text_sentence"  # preprocess_data's `{prefix}_{json key}_{level}` for --split-sentences


def prefix_name(stem):
    """The prefix Megatron's preprocess_data gives an input's sentence-level files: `<stem>_text_sentence`."""
    return stem + SENTENCE_LEVEL


def optimal_dtype(vocab_size):
    """Megatron's DType.optimal_dtype: uint16 for fewer than 65,500 ids, else int32."""
    return np.dtype(np.uint16 if vocab_size < UINT16_LIMIT else np.int32)


def index_bytes(lengths, document_indices, dtype):
    """The .idx of sequences of `lengths` ids of `dtype` and the document indices (0, each document's end)."""
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize, out=pointers[1:])
    document_indices = np.asarray(document_indices, dtype=np.int64)
    header = HEADER.pack(MAGIC, VERSION, DTYPE_CODES[np.dtype(dtype).name], len(lengths), len(document_indices))
    return b"".join((header, lengths.tobytes(), pointers.tobytes(), document_indices.tobytes()))


def write(prefix, tokens, lengths, document_indices, dtype, staging=None):
    """Write `<prefix>.bin` and `<prefix>.idx` atomically (temporaries in `staging`, the .bin renamed first);
    {suffix: (bytes, sha256)}. `tokens` are every sequence's ids in order, `lengths` each sequence's count."""
    data = np.asarray(tokens).astype(dtype, copy=False).tobytes()  # ids already checked below the vocab size
    index = index_bytes(lengths, document_indices, dtype)
    written = {}
    if storage.exists(prefix + IDX):  # an earlier pair goes first: its index never describes the new .bin
        storage.remove(prefix + IDX)
    for suffix, payload in zip(BIN_IDX, (data, index)):
        written[suffix] = atomic_write_bytes(prefix + suffix, payload, staging)
    return written


@dataclasses.dataclass(frozen=True)
class Sequences:
    """One indexed dataset read back: sequence i is tokens[starts[i]:starts[i + 1]]; document d is sequences
    document_indices[d] .. document_indices[d + 1] - 1."""

    tokens: np.ndarray  # the stored dtype
    lengths: np.ndarray  # int32
    pointers: np.ndarray  # int64, byte offsets into .bin
    document_indices: np.ndarray  # int64, documents + 1

    @property
    def starts(self):
        return np.concatenate(([0], np.cumsum(self.lengths, dtype=np.int64)))

    def sequence(self, i):
        return self.tokens[self.starts[i]:self.starts[i + 1]]


def _read_bytes(path):
    try:
        return storage.read_bytes(path)
    except FileNotFoundError:
        raise DataError(f"{storage.display(path)}: missing (an indexed dataset is a .bin and an .idx)") from None


def read(prefix, sha256=None):
    """The Sequences of `<prefix>.bin/.idx`, every structural fact Megatron's reader relies on checked, then, with
    `sha256` ({suffix: digest} from the manifest), the bytes. DataError (one line naming the file) otherwise:
    a structural fault first, as it says more than a digest that differs."""
    idx_path, bin_path = prefix + IDX, prefix + BIN
    index = _read_bytes(idx_path)
    where = storage.display(idx_path)
    if len(index) < HEADER.size or index[:len(MAGIC)] != MAGIC:
        raise DataError(f"{where}: not a Megatron index (no MMIDIDX header)")
    _, version, code, count, documents = HEADER.unpack_from(index)
    names = {value: name for name, value in DTYPE_CODES.items()}
    if version != VERSION or code not in names:
        raise DataError(f"{where}: version {version}, dtype code {code}: not an index Megatron-Core reads")
    dtype = np.dtype(names[code])
    expected = HEADER.size + count * 12 + documents * 8
    if len(index) != expected:
        raise DataError(f"{where}: {len(index):,} bytes, but its counts ({count:,} sequences, {documents:,} document "
                        f"indices) need {expected:,}")
    lengths = np.frombuffer(index, np.int32, count, HEADER.size)
    pointers = np.frombuffer(index, np.int64, count, HEADER.size + 4 * count)
    document_indices = np.frombuffer(index, np.int64, documents, HEADER.size + 12 * count)
    if (lengths < 0).any():
        raise DataError(f"{where}: sequence {int(np.argmax(lengths < 0))} has a negative length")
    offsets = np.concatenate(([0], np.cumsum(lengths[:-1], dtype=np.int64) * dtype.itemsize)) if count else pointers
    if not np.array_equal(pointers, offsets):
        sizes = {np.dtype(name).itemsize for name in DTYPE_CODES} - {dtype.itemsize}
        fitting = [size for size in sorted(sizes) if count > 1 and lengths[:-1].any() and np.array_equal(
            pointers, np.concatenate(([0], np.cumsum(lengths[:-1], dtype=np.int64) * size)))]
        if fitting:  # the offsets are right for ids of another width: the header's dtype code was changed
            widths = ", ".join(name for name in DTYPE_CODES if np.dtype(name).itemsize == fitting[0])
            raise DataError(f"{where}: dtype code {code} ({dtype.name}, {dtype.itemsize}-byte ids), but its byte "
                            f"offsets are those of {fitting[0]}-byte ids ({widths}): the header's dtype is wrong")
        bad = int(np.argmax(pointers != offsets))
        raise DataError(f"{where}: sequence {bad}'s byte offset {int(pointers[bad]):,} is not the sum of the lengths "
                        f"before it ({int(offsets[bad]):,})")
    if documents == 0 or document_indices[0] != 0 or document_indices[-1] != count or (
            np.diff(document_indices) < 0).any():
        raise DataError(f"{where}: document indices must run from 0 up to the sequence count {count:,} without "
                        "going down")
    data = _read_bytes(bin_path)
    needed = int(lengths.sum(dtype=np.int64)) * dtype.itemsize
    if len(data) != needed:
        raise DataError(f"{storage.display(bin_path)}: {len(data):,} bytes, but its index's lengths need {needed:,} "
                        f"({'truncated' if len(data) < needed else 'bytes past the last sequence'})")
    for path, payload in ((idx_path, index), (bin_path, data)):
        listed = (sha256 or {}).get(path[len(prefix):])
        if listed is not None and hashlib.sha256(payload).hexdigest() != listed:
            raise DataError(f"{storage.display(path)}: sha256 differs from the manifest's (changed or damaged)")
    return Sequences(np.frombuffer(data, dtype), lengths, pointers, document_indices)


def is_dataset(prefix):
    """Whether `prefix` names an indexed dataset: its .idx exists and opens with Megatron's magic or has its .bin
    beside it (a damaged index is still found, to be reported). A record file that happens to end in .bin,
    with no index, is not one."""
    if not storage.isfile(prefix + IDX):
        return False
    with storage.open(prefix + IDX, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC or storage.isfile(prefix + BIN)


def dataset_file(path):
    """`path`, or the .idx of the Megatron prefix it names: the prefixes data-path.txt lists, which Megatron
    takes and inspect and validate called "not a file" (issue 57)."""
    if not storage.exists(path) and is_dataset(path):
        return path + IDX
    return path


def check_index_beside(path):
    """A DataError naming the .idx that `path`, a .bin, lacks, when its bytes are no record file either (a
    framed file's first length prefix fits in it; HDF5 and Parquet open with their magic): inspect and validate
    read such a .bin as a TFRecord and reported a first record of 640364595932235724 bytes (issue 57)."""
    if not path.endswith(BIN) or storage.exists(path[:-len(BIN)] + IDX):
        return
    with storage.open(path, "rb") as f:
        head = f.read(8)
    fits = len(head) == 8 and int.from_bytes(head, "little") + 8 <= storage.getsize(path)
    if head[:4] in (b"\x89HDF", b"PAR1") or fits:
        return
    raise DataError(f"{storage.display(path)}: its index {storage.display(path[:-len(BIN)] + IDX)} is missing: a "
                    "Megatron indexed dataset is a .bin and its .idx (rerun `bertprep tokenize`)")


def check_index_named(path):
    """A DataError where `path`, a file, opens with an index's magic but is not named `<prefix>.idx` (a link named
    otherwise, `X.IDX`): inspect and validate find a pair by its names and read such a file as a TFRecord, "record 0
    at byte 0: truncated data (794 of 24844879419493709 bytes)"."""
    # on this machine only: a store's object is no link, and the read would be one more request
    if path.endswith(IDX) or not storage.checks_locally(path) or not storage.isfile(path):
        return
    with storage.open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            return
    raise DataError(f"{storage.display(path)}: a Megatron index (it opens with MMIDIDX), not named <prefix>.idx: an "
                    "indexed dataset is read by its names, <prefix>.idx beside <prefix>.bin; give it by such a name")


def prefixes(path):
    """The indexed datasets at `path`: a prefix, its .bin or .idx, or a directory walked (sorted) for .idx
    files; [] when it holds none."""
    if storage.isfile(path):
        candidates = [path[:-len(IDX)]] if path.endswith(BIN_IDX) else []
    elif storage.isdir(path):
        candidates = [storage.join(root, name[:-len(IDX)]) for root, _dirs, files in storage.walk(path)
                      for name in sorted(files) if name.endswith(IDX)]  # sorted walk: .partial/ never seen
    else:
        candidates = [path]
    return [prefix for prefix in candidates if is_dataset(prefix)]


def given_as_records(directory, shown, reader):
    """The DataError for a records directory given to `reader` (a loader) that holds Megatron indexed data, as
    `bertprep tokenize` writes, `shown` naming it; None where it holds none. The loaders said "no tfrecord
    training records" or "no record files" of it, as if tokenize had written nothing."""
    if not prefixes(directory):
        return None
    return DataError(f"{shown}: Megatron indexed data (.bin/.idx, as `bertprep tokenize` writes), not training "
                     f"records: Megatron-LM trains on it (--data-path, as data-path.txt lists it); {reader} reads "
                     "the records `bertprep create` or `pack` writes")
