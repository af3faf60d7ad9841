"""What `create-squad` and `create-glue` share: options, the tokenizer, a split's output files, the manifest.

One run writes one split (or, for GLUE, each split) into a flat directory,
under the names the two ecosystems read:

    DIR/{train,eval,predict}.tf_record      google-research/bert's and NVIDIA's names
    DIR/{train,eval,test}.of_record-0       OneFlow-Benchmark's names
    DIR/manifest.json                       one entry per written file; a later run adds its split

Every file is written under a temporary name and renamed when complete; the
manifest is saved after the files, so a file it lists is whole. A rerun whose
split is already listed with the same input and settings is skipped.
"""

import contextlib
import dataclasses
import fnmatch
import hashlib

import numpy as np

from bertprep import __version__, formats, storage
from bertprep.atomic import staging_dir
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs
from bertprep.formats.schemas import MAX_SEQ
from bertprep.options import Name, check_types, errors_name_fields, normalise_paths, refuse_empty, refuse_overlap
from bertprep.tokenization import LineTokenizer, load_vocab, resolve_vocab_path
from bertprep.workdir import file_matches, load_manifest, read_claim, refuse_unlisted, save_manifest
from bertprep.workdir import write_claim as write_claim_in

# The names of the files the two stages write in their --out (any task, split and format): a record file's of
# every role (OneFlow's parts as their glob, as the readers take them) and create-squad's eval metadata.
OUTPUT_PATTERNS = (*(codecs.get(fmt).task_glob(role) for fmt in codecs.finetuning_names()
                     for role in ("train", "eval", "test")), "eval.features.jsonl", "eval.examples.jsonl")

# In the staging directory's STEPS, which a killed run leaves: the names of the split files being put in place
# and not yet in the manifest, for a rerun to take for its own (a user's file of such a name is refused).
CLAIM = "fine-tuning-names.json"

# The settings two runs into one directory must share (their files are read together).
SHARED_SETTINGS = ("task", "dims", "labels", "version_2_with_negative", "lower_case", "params")


@errors_name_fields
@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordsOptions:
    """What `create_squad` and `create_glue` share: `vocab` (a vocab.txt or hub model id), the output directory
    `out` (a later run for another split adds to it), lower-casing (False for cased vocabs), the `format`s."""

    vocab: str
    out: str
    lower_case: bool = True
    format: tuple[Name, ...] = codecs.finetuning_names()  # format names: a Path was join's TypeError

    def __post_init__(self):
        check_types(self)
        refuse_empty(self, "format")  # () was "unknown --format ''", as pack's was
        object.__setattr__(self, "format", formats.parse_formats(self.format))  # canonical order
        unwritable = [name for name in self.format if name not in codecs.finetuning_names()]
        if unwritable:  # parse_formats takes every format; hdf5 and parquet were a TypeError traceback
            raise UsageError(f"--format {unwritable[0]}: fine-tuning records are written as "
                             f"{' or '.join(codecs.finetuning_names())}")
        normalise_paths(self, *(name for name in ("out", "input", "data_dir") if hasattr(self, name)), outputs=("out",),
                        folders=("out",))
        refuse_overlap(self.out, [getattr(self, name) for name in ("input", "data_dir") if hasattr(self, name)])


class Tokenizer:
    """google-research/bert's FullTokenizer.tokenize, as ids, for many texts at once.

    bertprep.tokenization.LineTokenizer does the work (C for ASCII text, HF
    tokenizers otherwise, both exact); a text's token ids never depend on
    other texts, so texts are tokenized in batches and words once each.
    """

    def __init__(self, vocab, lower_case):
        self.vocab = vocab
        self.lines = LineTokenizer(vocab, lower_case).warmed()
        self.cls_id, self.sep_id = vocab.id_of("[CLS]"), vocab.id_of("[SEP]")
        # id -> token, as the reference's inv_vocab (a repeated vocab line keeps its last id)
        tokens = np.empty(max(vocab.ids.values()) + 1, dtype=object)
        for token, index in vocab.ids.items():
            tokens[index] = token
        self.tokens = tokens

    def encode(self, texts):
        """(ids int32, offsets int64 of len(texts) + 1): text i's ids are ids[offsets[i]:offsets[i + 1]]."""
        ids, counts = self.lines.encode(list(texts))
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return ids, offsets


def load_tokenizer(value, lower_case):
    return Tokenizer(load_vocab(resolve_vocab_path(value)), lower_case)


def check_seq(seq, minimum):
    if seq < minimum:
        raise UsageError(f"--seq {seq} is too small: at least {minimum} positions are needed")
    if seq > MAX_SEQ:  # a larger one only allocated arrays of it (--seq 10**12: a 7 TiB MemoryError traceback)
        raise UsageError(f"--seq {seq} is too large: at most {MAX_SEQ:,} positions, as `bertprep create` takes")


def sha256_of(path):
    try:
        return storage.sha256(path, 1 << 22)
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


# ---------------------------------------------------------------- one split's output files


class SplitWriter:
    """The record files of one split in every requested format, written as feature columns arrive.

        with SplitWriter(out, "eval", fmts, kind) as writer:
            writer.write(columns)            # {name: (N, length) array}, any number of times
        writer.entries()                     # manifest entries, once the files are in place
    """

    def __init__(self, out, role, fmts, kind, extra_files=()):
        self.out, self.role, self.fmts, self.kind = Folder(out), role, fmts, kind
        self.names = {fmt: codecs.get(fmt).task_file(role) for fmt in fmts}  # GLUE dev, SQuAD eval: "eval"
        self.extra_files = tuple(extra_files)  # names of text files written beside the records (JSON lines)
        self.records = 0
        self._stack = None
        self._staging = None  # None: atomic_open's own .partial/ beside each file
        self._files, self._digests, self._sizes = {}, {}, {}

    @contextlib.contextmanager
    def staged_in(self, staging):
        """Write the split's files with their temporaries in `staging` (the held tree's .partial/), their names
        claimed there until record_split lists them."""
        self._staging = staging
        write_claim(staging, claimed_names(staging) | self.all_names())
        with self:
            yield self

    def all_names(self):
        return {*self.names.values(), *self.extra_files}

    @property
    def staging(self):
        """Where the split's temporaries and its claim are (staged_in's), None for each file's own .partial/."""
        return self._staging

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        for name in (*self.names.values(), *self.extra_files):
            self._files[name] = self._stack.enter_context(self.out.atomic_open(name, staging=self._staging))
            self._digests[name], self._sizes[name] = hashlib.sha256(), 0
        return self

    def __exit__(self, *exc_info):
        return self._stack.__exit__(*exc_info)

    def _put(self, name, data):
        self._files[name].write(data)
        self._digests[name].update(data)
        self._sizes[name] += len(data)

    def write(self, columns):
        for fmt, name in self.names.items():
            self._put(name, formats.encode_columns(columns, fmt, self.kind))
        self.records += len(next(iter(columns.values())))

    def write_lines(self, name, lines):
        """Append text lines (each without its newline) to one of the extra files."""
        if lines:
            self._put(name, ("\n".join(lines) + "\n").encode("utf-8"))

    def entries(self, split, examples, **extra):
        """{file name: manifest entry} for the record files."""
        return {name: {"kind": self.kind.name, "split": split, "format": fmt, "records": self.records,
                       "examples": examples, "bytes": self._sizes[name], "sha256": self._digests[name].hexdigest(),
                       **extra}
                for fmt, name in self.names.items()}

    def extra_entries(self, split):
        return {name: {"split": split, "bytes": self._sizes[name], "sha256": self._digests[name].hexdigest()}
                for name in self.extra_files}


# ---------------------------------------------------------------- the manifest


def run_settings(tokenizer, seq, **settings):
    """The manifest's top-level settings for a run (vocab, dims, flags)."""
    vocab = tokenizer.vocab
    return {"dims": {"seq": seq}, "lower_case": tokenizer.lines.lower_case,
            "vocab": {"path": vocab.path, "sha256": vocab.sha256, "size": vocab.size}, **settings}


def open_manifest(out, stage, settings):
    """The manifest this run adds to: the directory's own if it was made with the same settings, else a new one.

    Two runs into one directory must agree on everything their files are
    read with together (task, seq, vocab, case, ...); otherwise the second
    stops with a usage error and changes nothing.
    """
    manifest = load_manifest(out)
    if manifest is None:
        refuse_unlisted_outputs(out, {}, stage)
        return {"tool": "bertprep", "stage": stage, "version": __version__, **settings, "source": {}, "files": {},
                "metadata": {}}
    where = storage.join(out, "manifest.json")
    if manifest.get("stage") != stage:
        raise UsageError(f"{where}: written by {manifest.get('stage')!r}, not {stage}: use another --out")
    for key in (*SHARED_SETTINGS, "vocab"):
        ours, theirs = settings.get(key), manifest.get(key)
        if key == "vocab":
            ours, theirs = (ours or {}).get("sha256"), (theirs or {}).get("sha256")
        if ours != theirs:
            raise UsageError(f"{where}: its files were made with {key} {theirs!r}, this run has {ours!r}; "
                             "use another --out (or remove the directory)")
    refuse_unlisted_outputs(out, manifest, stage)
    return {**manifest, **settings, "version": __version__}


def refuse_unlisted_outputs(out, manifest, stage):
    """A DataError naming the first file in `out` named as a fine-tuning output (OUTPUT_PATTERNS) that its manifest
    ({} when there is none yet) does not list: the run overwrote a user's `train.tf_record` without a word, and a stray
    `train.of_record-1` beside the run's part 0 is read with it by OneFlow's and the trainer's `train.of_record-*`.
    Other files (notes, a README) are left alone: nothing writes or reads them."""
    folder = Folder(out)
    if not folder.isdir():
        return
    ours = {*manifest.get("files", {}), *manifest.get("metadata", {}), *claimed_names(staging_dir(out))}
    named = [name for name in folder.listdir() if any(fnmatch.fnmatchcase(name, p) for p in OUTPUT_PATTERNS)]
    refuse_unlisted(folder, named, f"{stage} would overwrite it, or its readers take it for one of its files",
                    ours=ours)


def claimed_names(staging):
    """The names a run's CLAIM in `staging` holds (a killed run's: renamed, not yet listed)."""
    return read_claim(staging, CLAIM)


def write_claim(staging, names):
    """Claim `names` in `staging` (none: remove the claim, and STEPS with it, for the tree's .partial/ to go)."""
    write_claim_in(staging, CLAIM, names)


def split_is_complete(out, manifest, split, names, source_sha256):
    """Whether `split` is listed with this source and its files are present at their recorded sizes (an object
    of a store, written without rename: and of its recorded sha256, what a rerun after a kill trusts)."""
    if (manifest.get("source", {}).get(split) or {}).get("sha256") != source_sha256:
        return False
    listed = {**manifest.get("files", {}), **manifest.get("metadata", {})}
    for name in names:
        entry = listed.get(name)
        if entry is None or entry.get("split") != split or not file_matches(storage.join(out, name), entry):
            return False
    return True


def record_split(out, manifest, split, source, writer, examples, **extra):
    """Add a finished split's files to the manifest and save it."""
    manifest["source"][split] = source
    manifest["files"].update(writer.entries(split, examples, **extra))
    manifest.setdefault("metadata", {}).update(writer.extra_entries(split))
    save_manifest(out, manifest)
    if writer.staging is not None:  # listed now: the claim lets them go
        write_claim(writer.staging, claimed_names(writer.staging) - writer.all_names())
