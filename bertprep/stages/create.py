"""`bertprep create`: text shards → masked-LM records in TFRecord and OFRecord.

For each input shard the records are the instances google-research/bert's
create_pretraining_data.py writes for that file with the same vocab and flags,
in the same order. One output file per input shard per format:

    <out>/<params>/<corpus>/manifest.json
    <out>/<params>/<corpus>/tfrecord/<split>/<shard stem>.tfrecord
    <out>/<params>/<corpus>/ofrecord/<split>/part-<i>
    <out>/<params>/<corpus>/hdf5/<split>/<shard stem>.hdf5        (--format hdf5)
    <out>/<params>/<corpus>/parquet/<split>/<shard stem>.parquet  (--format parquet)

or, with --layout nvidia, the tree NVIDIA's TensorFlow scripts hard-code
(TFRecord only; shard count and test split from the shard stage's manifest):

    <out>/tfrecord/<params>_shard_<N>_test_split_<P>/<corpus>/manifest.json
    <out>/tfrecord/<params>_shard_<N>_test_split_<P>/<corpus>/<split>/<shard stem>.tfrecord

Every file is written in `.partial/` beside the manifest (where no reader
globs) and renamed into place when complete; the manifest records each
finished file with its source's sha256 and the flags (saved at the first
finished shard, then at most once a second, and at the end or before an
error is raised: workdir.PacedSaves), so a rerun skips finished shards and
redoes the rest (one that replaces records made with
other settings, or from inputs at other paths, warns: the directory's name
holds neither every flag nor the inputs' paths). A run holds its records
directory: a second run into the same one is refused. The names it may put in place
before the manifest lists them are claimed in `.partial/steps/` (a rerun
after a kill takes them for its own); a file named as a record file that
neither lists is refused, never overwritten or read with the run's.
"""

import contextlib
import fnmatch
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from importlib import resources
from typing import Any, ClassVar

import numpy as np

from bertprep import __version__, engines, formats, storage
from bertprep.atomic import check_distinct_outputs, hold, refuse_if_held, retry_while_held, staging_dir
from bertprep.corpus import read_text, tokenize_corpus
from bertprep.engines import EngineOptions, open_engine
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs, columnar
from bertprep.formats.schemas import MAX_SEQ, PRETRAINING, UNMASKED
from bertprep.instances import InstanceParams, Instances, create_instances
from bertprep.options import (
    Name,
    build_options,
    check_types,
    errors_name_fields,
    normalise_paths,
    refuse_empty,
    refuse_overlap,
    set_field,
    written_in,
)
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.records_manifest import WRITING
from bertprep.text_inputs import (
    casing_warning,
    check_input,
    corpus_name,
    discover_inputs,
    input_roots,
    read_vocab,
    tokenizer_and_vocab,
    unread_inputs_warning,
)
from bertprep.tokenization import resolve_vocab_path
from bertprep.workdir import (
    SPLITS,
    check_corpus_name,
    forget_outputs,
    load_manifest,
    nvidia_dirname,
    other_inputs_warning,
    other_settings_warning,
    outputs_complete,
    paced_saves,
    params_dirname,
    read_claim,
    refuse_another_stages,
    refuse_names_outside,
    refuse_unlisted,
    removed_warning,
    resolve_workdir,
    resuming_note,
    save_manifest,
    setting_changes,
    write_claim,
)

ENCODE_CHUNK = 1024  # records encoded per call when writing
LAYOUTS: tuple[str, ...] = ("bertprep", "nvidia")  # typed: PrepareOptions.choices, in an import cycle, uses it
MASKINGS = ("static", "dynamic")
# NVIDIA's TF2 input pipeline interleaves this many files: with fewer, a file's records arrive in a row.
NVIDIA_CYCLE_LENGTH = 8
# In the records directory's staging STEPS, which a killed run leaves: the names of the records a run may put in
# place before its manifest lists them, for a rerun to take for its own (a user's file of such a name is refused).
CLAIM = "create-names.json"



@errors_name_fields
@dataclass(frozen=True)
class CreateOptions:
    """`bertprep create`'s flags. `input`: text shards (files, globs or directories; None: the shards under
    WORKDIR/sharded, else the embedded sample corpus); `vocab`: vocab.txt or a hub model id; `out`: the records
    root; `format`: comma-separated or a tuple, None for the layout's default; `dupe_factor` None: 5, or 1 with
    `masking="dynamic"`; `eval_samples` K: exactly the first K test instances (test shards in input order, each
    shard's instances in order) are written, None: all. After __post_init__ `format` is the tuple of formats and
    `dupe_factor` a number."""

    input: tuple[str, ...] | None = None
    vocab: str | None = None
    out: str | None = None
    corpus: str | None = None
    seq: int = 128
    pred: int = 20
    dupe_factor: int | None = None
    masking: str = "static"
    seed: int = 12345
    seed_per_shard: bool = False
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    whole_word_mask: bool = False
    lower_case: bool = True
    format: tuple[Name, ...] | Name | None = None  # format names, not paths: a Path was len()'s TypeError
    layout: str = "bertprep"
    min_parts: int = NVIDIA_CYCLE_LENGTH
    eval_samples: int | None = None
    engine: EngineOptions = EngineOptions()
    workdir: str | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"layout": LAYOUTS, "masking": MASKINGS}  # check_types

    def __post_init__(self):
        check_shard_stage_fields(self)
        refuse_empty(self, "format")
        for name, value, choices in (("--layout", self.layout, LAYOUTS), ("--masking", self.masking, MASKINGS)):
            if value not in choices:
                raise UsageError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
        requested = self.format or ((codecs.NVIDIA_LAYOUT.name,) if self.layout == "nvidia" else codecs.DEFAULT_FORMATS)
        fmts = formats.parse_formats(requested if isinstance(requested, str) else ",".join(requested))
        if self.layout == "nvidia" and fmts != (codecs.NVIDIA_LAYOUT.name,):
            raise UsageError("--layout nvidia writes NVIDIA's TFRecord tree, which has no place for OFRecord: "
                             "use --format tfrecord, and a second run without --layout for OFRecord")
        for fmt in fmts:  # a missing optional library is a usage line now, not an error in every worker later
            if not codecs.get(fmt).framed:
                columnar.require(fmt)
        set_field(self, "format", fmts)
        if self.layout == "nvidia" and self.masking == "dynamic":
            raise UsageError("--layout nvidia is the tree NVIDIA's scripts read, and they read masked records: "
                             "use --masking static there, or --masking dynamic without --layout")
        if self.eval_samples is not None and self.eval_samples < 1:
            raise UsageError(f"--eval-samples must be at least 1, not {self.eval_samples}")
        if self.min_parts < 1:
            raise UsageError(f"--min-parts must be at least 1, not {self.min_parts}")
        if self.corpus is not None:
            set_field(self, "corpus", check_corpus_name(self.corpus))
        if self.seq < 5:
            raise UsageError(f"--seq {self.seq} is too small: [CLS] A [SEP] B [SEP] needs at least 5 positions")
        if self.seq > MAX_SEQ:
            raise UsageError(f"--seq {self.seq} is too large: at most {MAX_SEQ:,} positions (the native core's "
                             "16-bit positions; BERT's models have 512)")
        if self.pred < 1 or self.pred > self.seq - 3:
            raise UsageError(
                f"--pred {self.pred} is not possible with --seq {self.seq}: at most seq - 3 = {self.seq - 3} "
                "tokens can be masked ([CLS] and two [SEP] never are)"
            )
        if self.dupe_factor is None:  # a new mask each epoch makes duplicating instances needless
            set_field(self, "dupe_factor", 1 if self.masking == "dynamic" else 5)
        if self.dupe_factor < 1:
            raise UsageError(f"--dupe-factor must be at least 1, not {self.dupe_factor}")
        if self.dupe_factor > sys.maxsize:  # the native core counts passes in a C ssize_t: an OverflowError traceback
            raise UsageError(f"--dupe-factor {self.dupe_factor} is too large: at most {sys.maxsize:,} (the native "
                             "core's count of passes)")
        if not self.engine.scheduler and (why := unholdable(self.dupe_factor, 1)):  # a cluster's workers: their own
            raise UsageError(f"--dupe-factor {self.dupe_factor}: a shard's {why}")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise UsageError(f"--masked-lm-prob must be in (0, 1], not {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UsageError(f"--short-seq-prob must be in [0, 1], not {self.short_seq_prob}")


# A shard's instances of every pass are held at once, to be shuffled, as the reference holds them. An instance
# holds at least its offset, A length, mask offset and flag (8 + 4 + 8 + 1 bytes) and 5 tokens ([CLS] a [SEP] b
# [SEP], 2 bytes each at least), and a pass makes at least one a document: a bound below what any run holds.
MIN_INSTANCE_BYTES = 8 + 4 + 8 + 1 + 5 * 2


def unholdable(dupe_factor, documents):
    """Why the instances of a shard of `documents` documents at `dupe_factor` cannot be held in this machine's
    memory, None where they may be: 2**40 passes over a small corpus grew by gigabytes until the run was killed.
    Never said of a run that could be held."""
    memory, need = engines.machine_memory(), dupe_factor * documents * MIN_INSTANCE_BYTES
    if not memory or need <= memory:
        return None
    return (f"instances need more than {human_bytes(need)} ({dupe_factor:,} passes over {documents:,} document(s), "
            f"at least an instance each, held together to be shuffled), more than this machine's {human_bytes(memory)}")


def check_shard_stage_fields(options):
    """What a stage reading text shards with a vocab checks first (create, tokenize): field types, its paths
    normalised, their schemes known."""
    check_types(options)
    refuse_empty(options, "input")
    normalise_paths(options, "input", "vocab", "out", "workdir", outputs=(written_in(options),),
                    folders=("out", "workdir"))
    storage.check_schemes(options.out, options.workdir, options.vocab, *(options.input or ()))


@dataclass(frozen=True)
class ShardTask:
    """Everything one shard needs; plain data so any engine can ship it to a worker."""

    source: str
    source_sha256: str
    split: str
    index: int  # position within its split: OFRecord part number
    seed: int
    records_dir: str
    vocab_path: str
    vocab_sha256: str  # the bytes the plan read: a worker's tokenizer is of them (tokenizer_and_vocab)
    lower_case: bool
    params: InstanceParams
    formats: tuple
    settings_key: str
    layout: str = "bertprep"
    masking: str = "static"
    limit: int | None = None  # write only the first `limit` instances (--eval-samples)

    def output_paths(self):
        """{format: path relative to records_dir}."""
        stem = os.path.splitext(os.path.basename(self.source))[0]
        if self.layout == "nvidia":  # TFRecord only: <corpus>/<split>/<stem>.tfrecord
            codec = codecs.NVIDIA_LAYOUT
            return {codec.name: f"{self.split}/{codec.file_name(stem, self.index)}"}
        return {fmt: codecs.get(fmt).output_path(self.split, stem, self.index) for fmt in self.formats}


# -- the shard task: pure apart from reading its input and writing its outputs --------------

def shard_instances(task):
    """The instances of one shard (its first `task.limit` when set)."""
    tokenizer, masking_vocab = tokenizer_and_vocab(task.vocab_path, task.vocab_sha256, task.lower_case)
    corpus = tokenize_corpus(read_text(task.source), tokenizer)
    if corpus.num_documents == 0:
        raise DataError(f"{storage.display(task.source)}: no documents (every line is blank or tokenizes to nothing)")
    if why := unholdable(task.params.dupe_factor, corpus.num_documents):  # a shard of many documents
        raise DataError(f"{storage.display(task.source)}: its {why}")
    instances = create_instances(corpus, task.params, masking_vocab, task.seed)
    return instances if task.limit is None else first_instances(instances, task.limit)


def first_instances(instances, count):
    """The first `count` of `instances`."""
    ends, masks = instances.instance_starts[count], instances.mask_starts[count]
    return Instances(tokens=instances.tokens[:ends], instance_starts=instances.instance_starts[:count + 1],
                     a_lengths=instances.a_lengths[:count], masked_positions=instances.masked_positions[:masks],
                     masked_labels=instances.masked_labels[:masks], mask_starts=instances.mask_starts[:count + 1],
                     is_random_next=instances.is_random_next[:count])


def count_instances(task):
    return task.source, len(shard_instances(task))


def limit_test_split(tasks, count, engine, quiet=True):
    """The tasks with the test split cut to exactly its first `count` instances (shards in input order; those
    past the count dropped); DataError when the test split holds fewer. Progress unless `quiet`."""
    test = [task for task in tasks if task.split == "test"]
    counts = count_test_instances(test, engine, quiet)
    total = sum(counts.values())
    if total < count:
        where = storage.display(os.path.dirname(test[0].source)) if test else "the inputs"
        raise DataError(f"{where}: the test split holds {total:,} instances, fewer than --eval-samples {count:,}")
    limited, left = [], count
    for task in tasks:
        if task.split != "test":
            limited.append(task)
        elif left:
            limited.append(replace(task, limit=min(left, counts[task.source])))
            left -= limited[-1].limit
    return limited


def count_test_instances(test, engine, quiet):
    """{source: instances} of the `test` tasks, with progress as each shard is counted: every test instance is
    made once to count it, minutes on a large test split that showed nothing before the shards' progress."""
    progress = Progress("create (eval set)", total=len(test), unit="test shards counted", quiet=quiet)
    counts = {}
    for source, instances in engine.run(count_instances, test, describe=lambda task: task.source):
        counts[source] = instances
        progress.advance(1, instances=instances)
    progress.close()
    return counts


def remove_stale_outputs(records, previous_files, wanted, progress, claimed=()):
    """Delete the files an earlier run's manifest lists, or a killed run `claimed` and put in place, that this run
    does not write (a test shard past --eval-samples, an input no longer given) from the Folder `records`: readers
    that glob a split's directory (NVIDIA's scripts) must find only what the new manifest lists. Returns the
    warning that names them (a Python caller, quiet, hears of it too), None when there were none."""
    refuse_names_outside(records, previous_files)
    unlisted = {rel for rel in claimed if rel not in previous_files and rel not in wanted and records.isfile(rel)}
    stale = sorted({*(rel for rel in previous_files if rel not in wanted), *unlisted})
    for relative in stale:
        records.remove(relative)
    if stale:
        progress.warn(f"removed {len(stale)} file(s) of an earlier run that this run does not write")
        return removed_warning(stale)
    return None


def record_files_present(records, layout):
    """The names in the Folder `records` (split/file or format/split/file) named as create's record files (any
    record format's, any split, by the names its readers glob), whoever wrote them."""
    if layout == "nvidia":
        places = [(split, codecs.NVIDIA_LAYOUT) for split in SPLITS]
    else:
        places = [(f"{fmt}/{split}", codecs.get(fmt)) for fmt in codecs.record_names() for split in SPLITS]
    return [f"{place}/{name}" for place, codec in places if records.isdir(place)  # a hidden name no reader globs
            for name in sorted(records.names_in(place)) if fnmatch.fnmatchcase(name, codec.glob)
            and not name.startswith(".")]


def refuse_unlisted_records(records, layout):
    """A DataError naming the first file in the Folder `records` named as one of create's record files that neither
    its manifest nor a killed run's claim holds: a user's `tfrecord/training/x.tfrecord` was overwritten without a
    word, and a stray one beside the run's was read with them by the readers that glob a split's folder. Other
    files (a notes.txt) are left alone: nothing writes or reads them. A directory without a manifest is let be: a
    damaged manifest's message tells the user to remove it to redo the stage from scratch, which rewrites its
    records (a user's file there is not told from them)."""
    manifest = load_manifest(records) if records.isdir() else None
    if manifest is None:
        return
    ours = set(manifest.get("files") or ()) | read_claim(staging_dir(records.root), CLAIM)
    refuse_unlisted(records, record_files_present(records, layout),
                    "create would overwrite it, or its readers take it for one of its files", ours=ours)


@contextlib.contextmanager
def claimed_while_written(records, staging, ours, pending, local):
    """Claim the outputs of the `pending` tasks in `staging` while they are written: a worker renames a shard's
    files before the manifest lists them, and a rerun after a kill between the two takes them for its own. Gone
    once the block ends (the manifest lists every file). `ours`: the names runs of create wrote here before."""
    names = {relative for task in pending for relative in task.output_paths().values()}
    write_claim(staging, CLAIM, names)
    try:
        yield
    except BaseException:
        release_after_failure(records, staging, names, ours, local)
        raise
    write_claim(staging, CLAIM, set())


def release_after_failure(records, staging, names, ours, local):
    """After a run failed or was interrupted: remove the files of `names` it put in place that no manifest lists
    and no earlier run wrote (not `ours`), so it leaves no name nor claim (.partial/) that was not there before it,
    and claim the rest. `local`: its workers have stopped; a Dask cluster's task goes on after the run stops, and
    every unlisted name stays claimed. A failure here keeps the whole claim, and the run's own error is told."""
    with contextlib.suppress(Exception):
        listed = (load_manifest(records) or {}).get("files") or {}
        unlisted = {name for name in names if name not in listed}
        if local:
            for relative in sorted(unlisted - ours):
                records.remove(relative)
            unlisted &= ours
        write_claim(staging, CLAIM, unlisted)


def create_shard(task):
    """Create one shard's records in every requested format; return their manifest entries."""
    instances = shard_instances(task)
    records = Folder(task.records_dir)
    staging = staging_dir(records.root)  # the run holds the tree; .partial/ is where no reader looks
    entries = {}
    for fmt, relative in task.output_paths().items():
        if not codecs.get(fmt).framed:
            if task.masking == "dynamic":
                kind, columns = UNMASKED, unmasked_columns(instances, unmasked_tokens(instances), 0, len(instances),
                                                           task.params.max_seq_length)
            else:
                kind, columns = PRETRAINING, instance_columns(instances, task.params)
            size, digest = codecs.get(fmt).write(records.path(relative), columns, kind, staging)
        else:
            size, digest = write_instances(records, relative, instances, fmt, task.params, staging, task.masking)
        entries[relative] = {
            "format": fmt,
            "split": task.split,
            "source": storage.display(task.source),
            "source_sha256": task.source_sha256,
            "seed": task.seed,
            "settings": task.settings_key,
            "instances": len(instances),
            "bytes": size,
            "sha256": digest,
        }
    return {"source": task.source, "split": task.split, "instances": len(instances), "files": entries}


def encoded_chunks(instances, fmt, params, masking="static"):
    """Framed records of `instances`, a chunk of ENCODE_CHUNK records at a time (unmasked ones for dynamic)."""
    seq, pred = params.max_seq_length, params.max_predictions_per_seq
    if masking == "dynamic":
        unmasked = unmasked_tokens(instances)
        for first in range(0, len(instances), ENCODE_CHUNK):
            yield formats.encode_columns(unmasked_columns(instances, unmasked, first, ENCODE_CHUNK, seq), fmt, UNMASKED)
        return
    for first in range(0, len(instances), ENCODE_CHUNK):
        yield formats.encode_instances(
            fmt, seq, pred, instances.tokens, instances.instance_starts, instances.a_lengths,
            instances.masked_positions, instances.masked_labels, instances.mask_starts,
            instances.is_random_next, first, min(ENCODE_CHUNK, len(instances) - first),
        )


def instance_columns(instances, params):
    """{feature: (N, length) array} of the padded records (Instances.record for every i at once), for the columnar
    formats: each row's values fill its leading slots, and a boolean fill walks rows in order, as the compact
    arrays do."""
    seq, pred, count = params.max_seq_length, params.max_predictions_per_seq, len(instances)
    lengths = np.diff(instances.instance_starts)
    real = np.arange(seq) < lengths[:, None]
    predicted = np.arange(pred) < np.diff(instances.mask_starts)[:, None]
    tokens = instances.tokens[instances.instance_starts[0]:instances.instance_starts[-1]]
    masks = slice(instances.mask_starts[0], instances.mask_starts[-1])
    columns = {name: np.zeros((count, seq if name in ("input_ids", "segment_ids") else pred), np.int64)
               for name in ("input_ids", "segment_ids", "masked_lm_positions", "masked_lm_ids")}
    columns["input_ids"][real] = tokens
    columns["segment_ids"][real & (np.arange(seq) >= instances.a_lengths[:, None] + 2)] = 1
    columns["masked_lm_positions"][predicted] = instances.masked_positions[masks]
    columns["masked_lm_ids"][predicted] = instances.masked_labels[masks]
    return {**columns, "input_mask": real.astype(np.int64), "masked_lm_weights": predicted.astype(np.float32),
            "next_sentence_labels": instances.is_random_next.astype(np.int64).reshape(count, 1)}


def unmasked_tokens(instances):
    """The instances' tokens with each masked position given back its label: [CLS] A [SEP] B [SEP] as cut."""
    tokens = instances.tokens.copy()
    owner = np.repeat(np.arange(len(instances)), np.diff(instances.mask_starts))
    tokens[instances.instance_starts[:-1][owner] + instances.masked_positions] = instances.masked_labels
    return tokens


def unmasked_columns(instances, tokens, first, count, seq):
    """{feature: (n, length)} of the unmasked kind for instances [first, first + count)."""
    last = min(first + count, len(instances))
    starts = instances.instance_starts[first:last + 1]
    lengths = np.diff(starts)
    column = np.arange(seq)[None, :]
    real = column < lengths[:, None]
    input_ids = np.zeros((last - first, seq), np.int64)
    input_ids[real] = tokens[starts[0]:starts[-1]]
    segment_b = (column >= instances.a_lengths[first:last, None] + 2) & real
    return {"input_ids": input_ids, "input_mask": real.astype(np.int64), "segment_ids": segment_b.astype(np.int64),
            "next_sentence_labels": instances.is_random_next[first:last, None].astype(np.int64)}


def write_instances(records, relative, instances, fmt, params, staging, masking="static"):
    """Write `relative` under the Folder `records` atomically (the temporary in `staging`); return (bytes, sha256)
    computed while writing."""
    digest = hashlib.sha256()
    size = 0
    with records.atomic_open(relative, staging=staging) as f:
        for chunk in encoded_chunks(instances, fmt, params, masking):
            f.write(chunk)
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


# -- planning: inputs, flags, resume -------------------------------------------------------

def sample_paths():
    """The embedded sample corpus (a directory of training/ and test/ shards, as `bertprep shard` writes them,
    enough training shards for --min-parts 8) and its vocab, shipped in the package."""
    data = resources.files("bertprep") / "data"
    return str(data / "sample_corpus"), str(data / "sample_vocab.txt")


def shard_seed(seed, split, path, per_shard):
    if not per_shard:
        return seed
    name = f"{seed}/{split}/{os.path.basename(path)}"
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def plan(options):
    """Resolve inputs, vocab and `options` (CreateOptions) into the run's settings and one ShardTask per input."""
    fmts = options.format
    workdir = resolve_workdir(options.workdir)
    input_values, vocab_value, notes = default_inputs(workdir, options.input, options.vocab, options.corpus)
    if not vocab_value:
        raise UsageError("--vocab is required: a vocab.txt path or a hub model id such as bert-base-uncased")
    # a path or hub id on this machine is resolved to a file; a store's vocab is read from the store
    vocab = read_vocab(resolve_vocab_path(vocab_value) if storage.reads_in_place(vocab_value) else vocab_value)
    # Built once here: forked local workers inherit them instead of each loading the vocab again.
    tokenizer_and_vocab(vocab.path, vocab.sha256, options.lower_case, vocab)
    inputs = discover_inputs(input_values)
    if not inputs:
        raise DataError(f"{' '.join(map(storage.display, input_values))}: no input shards found")
    corpus = options.corpus or corpus_name(inputs)
    params = InstanceParams(
        max_seq_length=options.seq,
        max_predictions_per_seq=options.pred,
        dupe_factor=options.dupe_factor,
        short_seq_prob=options.short_seq_prob,
        masked_lm_prob=options.masked_lm_prob,
        whole_word_mask=options.whole_word_mask,
    )
    lower_case = options.lower_case
    records = records_directory(options, workdir, corpus, inputs)
    refuse_if_held(records.root)  # before every input is read whole and hashed (minutes for a large corpus)
    settings = {
        "params": {**asdict(params), "lower_case": lower_case, "seed": options.seed,
                   "seed_per_shard": options.seed_per_shard,
                   "masking": options.masking,
                   **({"eval_samples": options.eval_samples} if options.eval_samples else {})},
        "vocab": {"path": vocab.path, "sha256": vocab.sha256, "size": vocab.size},
        "version": __version__,
    }
    settings_key = hashlib.sha256(
        json.dumps({k: settings[k] for k in ("params", "version")} | {"vocab": vocab.sha256}, sort_keys=True).encode()
    ).hexdigest()[:16]
    tasks = []
    split_counts = {}
    for path, split in inputs:
        index = split_counts.get(split, 0)
        split_counts[split] = index + 1
        tasks.append(
            ShardTask(
                source=path,
                source_sha256=check_input(path),
                split=split,
                index=index,
                seed=shard_seed(options.seed, split, path, options.seed_per_shard),
                records_dir=records.root,
                vocab_path=vocab.path,
                vocab_sha256=vocab.sha256,
                lower_case=lower_case,
                params=params,
                formats=fmts,
                settings_key=settings_key,
                layout=options.layout,
                masking=options.masking,
            )
        )
    check_distinct_outputs((task.source, records.path(path)) for task in tasks for path in task.output_paths().values())
    warnings = layout_warnings(tasks, options.min_parts)
    warnings += [warning for warning in (vocab.duplicates_warning(), casing_warning(vocab, lower_case),
                                         unread_inputs_warning(input_values, inputs)) if warning]
    return records, settings, fmts, tasks, notes, warnings


def default_inputs(workdir, input_values, vocab_value, corpus):
    """(inputs, vocab, notes): the given ones, else the one corpus under WORKDIR/sharded (or `corpus` there),
    else the embedded sample corpus and, unless given, its vocab. The vocab may still be None."""
    if input_values:
        return input_values, vocab_value, []
    sharded = Folder(workdir).folder("sharded")
    corpora = sharded.subfolders()
    if corpus and corpus in corpora:
        corpora = [corpus]
    if len(corpora) == 1:
        return [sharded.path(corpora[0])], vocab_value, [f"input: {sharded.display(corpora[0])}"]
    if len(corpora) > 1:
        raise UsageError(f"{sharded} holds several corpora ({', '.join(corpora)}): pick one with --corpus or --input")
    corpus_path, sample_vocab = sample_paths()
    return ([corpus_path], vocab_value or sample_vocab,
            ["no --input: using the embedded sample corpus and its vocab (offline demo data)"])


def records_directory(options, workdir, corpus, inputs):
    """The Folder the manifest goes in and every output path starts at, for --layout and --out."""
    lower_case = options.lower_case
    if options.layout == "nvidia":
        train_shards, test_fraction = shard_stage_settings(inputs)
        name = nvidia_dirname(options.seq, options.pred, options.masked_lm_prob, options.seed, options.dupe_factor,
                              lower_case, options.whole_word_mask, train_shards, test_fraction)
        return Folder(storage.absolute(options.out or workdir)).folder(codecs.NVIDIA_LAYOUT.name, name, corpus)
    name = params_dirname(options.seq, options.pred, options.masked_lm_prob, options.seed, options.dupe_factor,
                          lower_case, options.whole_word_mask)
    if options.masking == "dynamic":  # not NVIDIA's: its records are masked
        name += "_dynamic_masking"
    root = Folder(storage.absolute(options.out)) if options.out else Folder(workdir).folder("records")
    return root.folder(name, corpus)


def shard_stage_settings(inputs):
    """(training shards asked for, test fraction) from the manifest of the `bertprep shard` directory
    the inputs come from: NVIDIA's directory name holds both."""
    directories = input_roots(inputs)
    if len(directories) != 1:
        raise UsageError(f"--layout nvidia: the inputs come from {len(directories)} directories; give the one "
                         "directory `bertprep shard` wrote (its manifest names the shard count and test split)")
    shards = Folder(directories.pop())
    manifest = load_manifest(shards)
    if manifest is None or manifest.get("stage") != "shard":
        raise UsageError(f"--layout nvidia: {shards} has no manifest of `bertprep shard`, which "
                         "gives the shard count and test split in NVIDIA's directory name; shard the corpus with "
                         "`bertprep shard`")
    params = manifest.get("params") or {}
    train_shards, test_fraction = params.get("train_shards"), params.get("test_fraction")
    if not isinstance(train_shards, int) or not isinstance(test_fraction, (int, float)):
        raise DataError(f"{shards.display('manifest.json')}: damaged manifest (no "
                        "train_shards and test_fraction in params); rerun `bertprep shard`")
    return train_shards, test_fraction


def layout_warnings(tasks, min_parts):
    """What makes the records a poor fit for the readers that will consume them."""
    warnings = []
    training = sum(task.split == "training" for task in tasks)
    if training < min_parts:
        warnings.append(
            f"{training} training file(s) per format, fewer than --min-parts {min_parts}: NVIDIA's TF2 reader "
            f"interleaves {NVIDIA_CYCLE_LENGTH} files (with fewer, each file's records arrive several times in a row) "
            "and OneFlow needs at least one part per reader rank; shard into at least max(8, GPUs) training shards")
    if not any(task.split == "test" for task in tasks):
        warnings.append("no test split: NVIDIA's --do_eval and the trainer's --eval-every read test/ files; "
                        "give a directory with training/ and test/ shards (`bertprep shard` writes both)")
    return warnings


def is_complete(task, manifest_files):
    """A shard is done when each of its outputs has a manifest entry for the same source and flags
    (and the counts the summary reads) and a file of the recorded size (an object: and sha256)."""
    return outputs_complete(task.records_dir, manifest_files, task.output_paths().values(), task.source_sha256,
                            task.settings_key, ("instances",))


def create(options: CreateOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Create masked-LM records (`CreateOptions`, or its fields as keywords); the summary `--json` prints.
    `quiet=False` shows progress and notes on stderr (warnings are BertprepWarnings, quiet or not). Shards
    already complete are kept (`complete_before` when all were)."""
    options = build_options(CreateOptions, options, fields)
    started = time.monotonic()
    records, settings, fmts, tasks, notes, warnings = plan(options)
    refuse_overlap(records.root, [*(options.input or ()), *(task.source for task in tasks)])
    refuse_another_stages(records, "create", "--out or --corpus")
    refuse_unlisted_records(records, options.layout)  # before the test split is counted: a refusal costs no work
    if options.eval_samples:  # counted before anything is written: too few test instances writes nothing
        # as many workers as test shards at most: a LocalCluster of every --workers to count one shard took minutes
        with open_engine(options.engine, max_tasks=sum(task.split == "test" for task in tasks)) as engine:
            tasks = limit_test_split(tasks, options.eval_samples, engine, quiet)
    progress = Progress("create", total=len(tasks), unit="shards", quiet=quiet)
    for note in notes:
        progress.note(note)
    for warning in warnings:
        progress.warn(f"warning: {warning}")
    with hold(records.root, "bertprep create") as staging:  # clears what killed runs left in .partial/
        previous = load_manifest(records) or {}
        claimed = read_claim(staging, CLAIM)
        wanted = {relative for task in tasks for relative in task.output_paths().values()}
        files = {rel: entry for rel, entry in previous.get("files", {}).items() if rel in wanted}
        removed = remove_stale_outputs(records, previous.get("files", {}), wanted, progress, claimed)
        warnings += [removed] if removed else []
        pending = [t for t in tasks if not is_complete(t, files)]
        for replaced in (replaced_settings_warning(previous, settings, pending),
                         replaced_inputs_warning(previous, tasks, pending)):
            if replaced:
                progress.warn(f"warning: {replaced}")
                warnings.append(replaced)
        follow_moved_inputs(tasks, pending, files)
        skipped = len(tasks) - len(pending)
        if skipped:
            progress.note(resuming_note(skipped, len(tasks)))
            progress.advance(skipped)
        kind, dims = ((UNMASKED, {"seq": options.seq}) if options.masking == "dynamic"
                      else (PRETRAINING, {"seq": options.seq, "pred": options.pred}))
        manifest = {"tool": "bertprep", "stage": "create", "kind": kind.name,
                    "dims": dims, "formats": list(fmts), "layout": options.layout,
                    **settings, "files": files, WRITING: "the shards listed are done; others are being written"}
        ours = {*previous.get("files", {}), *claimed}
        with claimed_while_written(records, staging, ours, pending, local=options.engine.engine == "local"):
            # An earlier run's manifest is marked before any shard changes; a first run's appears with its first
            # shard, so a run that fails before then leaves none.
            forget_outputs(files, [relative for task in pending for relative in task.output_paths().values()])
            if pending and previous:
                save_manifest(records, manifest)
            # saved before an error is raised: release_after_failure keeps what the saved manifest lists
            with (open_engine(options.engine, max_tasks=len(pending)) as engine,
                  paced_saves(lambda: save_manifest(records, manifest)) as saves):
                for result in engine.run(create_shard, pending, describe=lambda task: task.source):
                    files.update(result["files"])
                    saves.changed()
                    progress.advance(1, instances=result["instances"])
            number_instances(tasks, files)
            del manifest[WRITING]
            save_manifest(records, manifest)
    progress.close()
    summary = summarize(records, manifest, tasks, time.monotonic() - started, len(pending))
    summary["warnings"] = warnings
    if options.eval_samples:  # absent otherwise: today's --json
        summary["eval_samples"] = options.eval_samples
    rows = [("records", str(records))]
    for split, count in summary["instances"].items():
        rows.append((f"instances ({split})", f"{count:,}"))
    if options.eval_samples:
        rows.append(("eval samples", f"the first {options.eval_samples:,} test instances (test shards in order)"))
    rows += [
        ("files", f"{summary['files']} ({', '.join(fmts)})"),
        ("bytes", human_bytes(summary["bytes"])),
        ("shards",
         f"{summary['shards']} ({summary['shards_created']} created, {summary['shards'] - summary['shards_created']} "
         "already complete)"),
        ("seconds", f"{summary['seconds']:.2f}"),
    ]
    rows += [("warning", warning) for warning in warnings]
    return Summary("bertprep create: done", summary, rows=rows, complete_before=not pending)


def replaced_settings_warning(previous, settings, pending):
    """The warning of a run that replaces records an earlier run wrote into this directory with other settings,
    None otherwise. The directory's name holds only some flags (not --short-seq-prob, --seed-per-shard,
    --eval-samples, the vocab's content): a run with another of those rewrote every shard of the earlier one,
    which was gone without a word."""
    before, now = previous.get("params"), settings["params"]
    if not previous.get("files") or not isinstance(before, dict):
        return None
    # a field an older version did not record is no change
    changed = setting_changes(before, now, set(before) - {"eval_samples"})
    if before.get("eval_samples") != now.get("eval_samples"):
        was, now_k = before.get("eval_samples") or "all", now.get("eval_samples") or "all"
        changed.append(f"eval_samples was {was}, now {now_k}")
    if (previous.get("vocab") or {}).get("sha256") not in (None, settings["vocab"]["sha256"]):
        changed.append("the vocab's content differs")
    if not changed or not pending:
        return None
    return other_settings_warning("records", "records directory", changed)


def replaced_inputs_warning(previous, tasks, pending):
    """The warning of a run that rewrites a file an earlier run made here from an input at another path, None
    otherwise. The records directory's name holds the corpus name (the inputs' folder's name or --corpus) and,
    with --layout nvidia, the training shard count and int(100 × test fraction), not where the shards are: two
    shard trees of one name (test fractions 0.051 and 0.059, or another corpus) wrote to one directory, and the
    second run replaced the first one's records without a word. A file an earlier run made from the same path is
    no replacement of inputs: an edited or resharded input is redone, as a rerun is for; a file this run no longer
    writes is named by the removal warning."""
    earlier = {relative: entry for relative, entry in (previous.get("files") or {}).items() if isinstance(entry, dict)}
    if not any(earlier.get(relative, {}).get("source") not in (None, storage.display(task.source))
               for task in pending for relative in task.output_paths().values()):
        return None
    before = {entry["source"] for entry in earlier.values() if isinstance(entry.get("source"), str)}
    now = {storage.display(task.source) for task in tasks}
    return other_inputs_warning("records", "records directory", shards_from(before), shards_from(now),
                                keep="--out or --corpus")


def follow_moved_inputs(tasks, pending, files, outputs=lambda task: task.output_paths().values()):
    """Each complete file's manifest entry names the input this run read it from: an input moved with its content
    unchanged is complete (its sha256), and the manifest kept naming the old place, so it said other than a fresh
    run from the new one, and once that input was edited its rerun warned of replacing records made "from other
    inputs" (replaced_inputs_warning: the old place). Only the `source` changes; the records are untouched.
    `outputs(task)`: a task's output names (tokenize's are `task.files()`)."""
    redone = {id(task) for task in pending}
    for task in (task for task in tasks if id(task) not in redone):
        for relative in outputs(task):
            if isinstance(files.get(relative), dict):
                files[relative]["source"] = storage.display(task.source)


def shards_from(sources):
    """The folders the shards `sources` (display paths) come from and their count: `…/f51/a (3 shards)`."""
    folders = ", ".join(sorted(input_roots((source, None) for source in sources)))
    return f"{folders} ({len(sources)} shard{'' if len(sources) == 1 else 's'})"


def number_instances(tasks, files):
    """Give each file's entry `first_instance`: the global index of its first instance within its split, shards
    in input order. Dynamic masks are keyed by that index, so every format and loader masks an instance alike."""
    following = {}
    for task in tasks:
        first = following.get(task.split, 0)
        count = None
        for relative in task.output_paths().values():
            files[relative]["first_instance"] = first
            count = files[relative]["instances"]
        following[task.split] = first + count


def summarize(records, manifest, tasks, seconds, created):
    instances = {}
    counted = set()
    total_bytes = 0
    for task in tasks:
        for fmt, relative in task.output_paths().items():
            entry = manifest["files"][relative]
            total_bytes += entry["bytes"]
            if task.source not in counted:
                counted.add(task.source)
                instances[task.split] = instances.get(task.split, 0) + entry["instances"]
    return {
        "records_dir": str(records),
        "instances": instances,
        "files": sum(len(t.output_paths()) for t in tasks),
        "bytes": total_bytes,
        "shards": len(tasks),
        "shards_created": created,
        "seconds": round(seconds, 3),
        "formats": manifest["formats"],
    }


# Several trainer processes started at once (a two-process job, parallel tests) all make the same sample
# records: the ones that find another holding the directory wait for it, then find them complete.
SAMPLE_WAIT_S = 300


def create_sample_records(out_dir, seq=128, pred=20, dupe_factor=5, quiet=True, wait_s=SAMPLE_WAIT_S,
                          waiting=None):
    """Create records from the embedded sample corpus under `out_dir`; return the records directory.

    The trainer uses this when it is given no --data. While another run holds the directory, wait for it
    (up to `wait_s` seconds; `waiting(error)` is called when the wait starts).
    """
    corpus_path, vocab_path = sample_paths()
    summary = retry_while_held(
        lambda: create(input=(corpus_path,), vocab=vocab_path, out=out_dir, seq=seq, pred=pred, dupe_factor=dupe_factor,
                       engine=EngineOptions(workers=1), corpus="sample", quiet=quiet), wait_s, waiting=waiting)
    if not quiet:
        summary.print()
    return summary["records_dir"]
