"""The record formats as objects: each format's name, whether it frames records one after another or holds
columns, its frame sizes and how its files are named, written once; every stage asks its codec.

    from bertprep.formats import codecs
    codecs.get("ofrecord").file_name("wiki_training_0", 3)     # 'part-3'
    codecs.get("tfrecord").header                              # 12 bytes before each payload
    codecs.names()                                             # ('tfrecord', 'ofrecord', 'hdf5', 'parquet', 'megatron')
    codecs.record_names()                                      # those holding masked-LM records: the first four

    codecs.get("hdf5").write(path, columns, kind)             # (bytes, sha256), whole or not at all
    codecs.get("parquet").read_columns(path)                  # (kind, {feature: (N, length) array})
    codecs.of_file_name("train.of_record-0")                  # the OFRecord codec

Adding a format is its module here (its encoder and reader: `module`) and its `Codec` in `_REGISTERED`;
`framing.CODECS` and `columnar.CODECS`, which hand a format's bytes to its module, are read from the registry.

A codec says what its files hold (`holds`): BERT records of a kind (`RECORDS`: what create, pack, convert and
validate's record checks read and write, `record_names()`), or token ids per sentence with document boundaries
(`SEQUENCES`: Megatron-Core's indexed dataset, which its loader pairs, truncates and masks itself; written by
`bertprep tokenize`, `sequence_names()`). A sequence format is never offered where records are asked for.
"""

import dataclasses
import importlib
import re

RECORDS, SEQUENCES = "records", "sequences"  # what a format's files hold: Codec.holds


@dataclasses.dataclass(frozen=True)
class Codec:
    """One record format. Framed files hold records one after another, each a `header` of bytes (its length,
    and for TFRecord the length's CRC), the payload, a `trailer` (TFRecord's payload CRC); columnar files
    (HDF5, Parquet) hold each feature as one column of every record (formats/columnar.py)."""

    name: str
    framed: bool
    suffix: str | None  # its files' suffix; None: OneFlow's part-<index>, named by position in the split
    header: int = 0
    trailer: int = 0
    # The integer lists a record may store, the native one first (OneFlow's BERT reads int32; TFRecord has
    # only int64); validate accepts the others with a note.
    int_kinds: tuple[str, ...] = ("int64",)
    # A framed record's feature map sits inside an Example message (TFRecord: Example{features = 1: ...}).
    example_wrapped: bool = False
    # Why an empty file of this format is an error, or None: then it is a shard without instances (a warning).
    empty_file_problem: str | None = None
    # Fine-tuning data (create-squad/create-glue, the trainer's tasks): role -> file stem, and the suffix
    # after it, `{index}` numbering parts; None: the format holds no fine-tuning data.
    task_stems: tuple[tuple[str, str], ...] | None = None
    task_suffix: str = ""
    # The `datasets` builder that reads this format's files itself, or None (bertprep.hf reads them).
    datasets_builder: str | None = None
    # Its module in bertprep/formats/ (loaded by name on first use: `implementation`; the registry imports
    # no format module, so a format module may use the registry). Every one has `write(path, columns, kind,
    # staging)` and `read_columns(path, sha256)`; framed: `frame`, `encode`, `message`, `decode`,
    # `iter_payloads`, `FIELD_BY_KIND`/`KIND_BY_FIELD`, `INT_KIND`; columnar: `SUFFIX`, `LIBRARY`, `MAGIC`,
    # `encode(columns, kind)`, `decode(path, sha256)` (formats/columnar.py). A sequence format's module instead
    # has `write(prefix, tokens, lengths, document_indices, dtype, staging)`, `read(prefix, sha256)`,
    # `optimal_dtype`, `prefix_name`, `prefixes` and `BIN_IDX` (its files' suffixes): write_sequences and
    # read_sequences below.
    module: str = ""
    # Whether the C core (bertprep/native/) frames, decodes and encodes it; a format it does not know goes
    # through the Python twins (python_decoder.py, encode.encode_instances_python): the same bytes, slower.
    native: bool = False
    # What its files are called in the ecosystems that read them (a full match), so a name says its format
    # before any byte is read; the default is any name ending in `suffix`.
    name_pattern: str | None = None
    # What a file holds: RECORDS (masked-LM records of a kind, one per instance) or SEQUENCES (a token id
    # sequence per sentence and the document boundaries: Megatron's .bin/.idx pair, `bertprep tokenize`).
    holds: str = RECORDS
    # How messages spell it (TFRecord, Parquet); the name where none is given.
    title: str = ""
    # Whether a file's first bytes prove the format whatever its name (TFRecord's length CRC, HDF5's and
    # Parquet's magic: framing.format_of_bytes); an OFRecord part has nothing to be known by but its name.
    proven_by_bytes: bool = True

    @property
    def shown(self):
        """`title`, else `name`: the format as a message names it."""
        return self.title or self.name

    @property
    def name_shown(self):
        """Its files' name as a message suggests it: `*.parquet`, OneFlow's `part-<i>`."""
        return "part-<i>" if self.suffix is None else f"*{self.suffix}"

    @property
    def implementation(self):
        """The module that encodes and reads this format (imported on first use: h5py and pyarrow only then)."""
        return importlib.import_module(f"bertprep.formats.{self.module or self.name}")

    def names_file(self, name: str) -> bool:
        """Whether a file called `name` (no directory) holds this format by its ecosystem's naming."""
        pattern = self.name_pattern or (".*" + re.escape(self.suffix or ""))
        return re.fullmatch(pattern, name, flags=re.DOTALL) is not None

    def file_name(self, stem, index):
        """The file this format's shard `index` of input `stem` is written to (create, pack, convert)."""
        return f"part-{index}" if self.suffix is None else f"{stem}{self.suffix}"

    def output_path(self, split, stem, index):
        """`file_name` under the format's own directory of a records tree: `<format>/<split>/<file>`."""
        return f"{self.name}/{split}/{self.file_name(stem, index)}"

    @property
    def glob(self):
        """The pattern of this format's files in a directory."""
        return "part-*" if self.suffix is None else f"*{self.suffix}"

    def task_file(self, role, index=0):
        """The fine-tuning file of `role` ("train", "eval", "test"): Google's `predict.tf_record`, OneFlow's
        `test.of_record-0`."""
        return dict(self.task_stems)[role] + self.task_suffix.format(index=index)

    def task_glob(self, role):
        """The pattern of `role`'s fine-tuning files (OneFlow's parts: `train.of_record-*`)."""
        return dict(self.task_stems)[role] + self.task_suffix.format(index="*")

    def write(self, path, columns, kind, staging=None):
        """Write the records of `kind` whose values are the rows of `columns` ({feature: (N, length) array})
        as one file of this format, atomically (a temporary name, then a rename or one upload); (bytes, sha256).
        The same bytes for any caller: its module's `write`."""
        return self.implementation.write(path, columns, kind, staging)

    def write_sequences(self, prefix, tokens, lengths, document_indices, vocab_size, staging=None):
        """A sequence format's files for `prefix` (`holds` SEQUENCES): every sequence's ids one after another
        (`tokens`, `lengths[i]` of them for sequence i) and the document indices (0, then each document's end),
        the ids in the width the format picks for `vocab_size`; atomically, {file suffix: (bytes, sha256)}."""
        module = self.implementation
        return module.write(prefix, tokens, lengths, document_indices, module.optimal_dtype(vocab_size), staging)

    def read_sequences(self, prefix, sha256=None):
        """The sequences of `prefix`'s files (`.tokens`, `.lengths`, `.document_indices`, `.sequence(i)`), their
        structure checked, and their bytes against `sha256` ({file suffix: digest}) where given."""
        return self.implementation.read(prefix, sha256)

    def read_columns(self, path, sha256=None):
        """(kind, {feature: (N, length) array}) of a whole file of this format, by its module's `read_columns`;
        with `sha256` (its manifest's) the bytes are checked as they are read. Integer features come back as
        stored (int64 from TFRecord) from framed files, int32 from columnar ones; float features as float32."""
        return self.implementation.read_columns(path, sha256)


# ours, and Google's fine-tuning files
TFRECORD = Codec("tfrecord", framed=True, suffix=".tfrecord", header=12, trailer=4, example_wrapped=True,
                 task_stems=(("train", "train"), ("eval", "eval"), ("test", "predict")), task_suffix=".tf_record",
                 name_pattern=r".*\.(tfrecord|tf_record)", native=True, title="TFRecord")
# OneFlow's parts and fine-tuning parts
OFRECORD = Codec("ofrecord", framed=True, suffix=None, header=8, int_kinds=("int32", "int64"),
                 empty_file_problem="OneFlow aborts on an empty part",
                 task_stems=(("train", "train"), ("eval", "eval"), ("test", "test")), task_suffix=".of_record-{index}",
                 name_pattern=r"part-\d+|.*\.of_record-\d+", native=True, title="OFRecord",
                 proven_by_bytes=False)
HDF5 = Codec("hdf5", framed=False, suffix=".hdf5", title="HDF5")
PARQUET = Codec("parquet", framed=False, suffix=".parquet", datasets_builder="parquet", title="Parquet")

# Megatron-Core's IndexedDataset: <prefix>.bin (the ids) and <prefix>.idx (header, dtype, lengths, offsets,
# document indices); a prefix is named by its .idx. Not a record format: create's --format never lists it.
MEGATRON = Codec("megatron", framed=False, suffix=".idx", holds=SEQUENCES, name_pattern=r".*\.(bin|idx)",
                  title="Megatron-Core")

_REGISTERED = {codec.name: codec for codec in (TFRECORD, OFRECORD, HDF5, PARQUET, MEGATRON)}


def get(name):
    """The codec of a format name (one of `names()`); KeyError naming the known ones otherwise."""
    try:
        return _REGISTERED[name]
    except KeyError:
        raise KeyError(f"unknown record format {name!r}; known: {', '.join(_REGISTERED)}") from None


def of_file_name(name):
    """The record codec whose ecosystem names a file `name` (no directory) so, or None (then its bytes tell:
    framing.sniff_format). Sequence files are found by their own format's module, never as records."""
    return next((_REGISTERED[fmt] for fmt in record_names() if _REGISTERED[fmt].names_file(name)), None)


def of_sequence_file_name(name):
    """The sequence codec (`bertprep tokenize`'s formats) whose files are named like `name`, or None."""
    return next((_REGISTERED[fmt] for fmt in sequence_names() if _REGISTERED[fmt].names_file(name)), None)


def names():
    """Every format's name, framed ones first, in the order help texts and defaults list them."""
    return tuple(_REGISTERED)


def record_names():
    """The formats that hold masked-LM records: what create, pack, convert and validate offer and read."""
    return tuple(name for name, codec in _REGISTERED.items() if codec.holds == RECORDS)


def sequence_names():
    """The formats that hold token sequences with document boundaries (`bertprep tokenize --format`)."""
    return tuple(name for name, codec in _REGISTERED.items() if codec.holds == SEQUENCES)


def framed_names():
    """The formats that frame records one after another (TFRecord, OFRecord)."""
    return tuple(name for name, codec in _REGISTERED.items() if codec.framed and codec.holds == RECORDS)


def finetuning_names():
    """The formats fine-tuning data is written in (create-squad, create-glue) and the trainer's tasks read."""
    return tuple(name for name, codec in _REGISTERED.items() if codec.task_stems is not None)


# What `create` writes unless told (NVIDIA's --layout tree holds TFRecord only: NVIDIA_LAYOUT).
DEFAULT_FORMATS = (TFRECORD.name, OFRECORD.name)
NVIDIA_LAYOUT = TFRECORD
