"""Training data: find the records of a `bertprep create` (or `bertprep pack`) directory and stream batches.

Layout (from `bertprep create`; `bertprep pack` writes the same with packed rows):
    <dir>/manifest.json
    <dir>/tfrecord/{training,test}/*.tfrecord
    <dir>/ofrecord/{training,test}/part-<i>
or NVIDIA's (`create --layout nvidia`):
    <dir>/manifest.json
    <dir>/{training,test}/*.tfrecord
`--data` may be that directory or one to three levels above it (a params
directory holding several corpora: all of them are used). The record kind,
pretraining instances or packed rows, comes from the manifest (else the
first record); every directory used must hold the same kind and shape.

The stream is deterministic for a seed and has a position: a worker's record
files (every `num_workers`-th file of the sorted list) are read in an order
shuffled per epoch; the concatenated records are cut into windows of
`window` records and each window is permuted (a shuffle buffer that can be
reopened at any record without replaying the past); batches are consecutive
records of that endless stream. Reopening at record k (a checkpoint's data
position) skips whole files by their record counts and decodes at most one
file's worth of records to reach k.
"""

import os
import queue
import threading

import numpy as np

from bertprep import formats, storage
from bertprep.binning import bin_width, bins_of, uncut_bins_reason
from bertprep.engines import machine_memory
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs, columnar, megatron
from bertprep.formats.schemas import (
    FLOAT,
    PACKED,
    PRETRAINING,
    UNMASKED,
    check_int_values,
    first_outside,
    kind_of_manifest,
    kind_of_record,
)
from bertprep.masking import DynamicMasking, first_instances
from bertprep.records_manifest import (
    file_digests,
    given_as_text,
    kind_mismatch,
    load_records_manifest,
    refuse_unlisted_records,
)
from bertprep.workdir import load_manifest

SPLITS = ("training", "test")
READER = "the trainer"  # who would read the records, in refusals of what it was given (Megatron's, unlisted files)
TRAINABLE_KINDS = (PRETRAINING, PACKED, UNMASKED)
# Columns the stream adds to unmasked records: what their masks are keyed by.
INDEX, EPOCH = "instance_index", "epoch"


def feature_dtypes(kind):
    """The dtype the model and loss receive for each feature of a record kind."""
    return {f.name: (np.float32 if f.dtype == FLOAT else np.int32) for f in kind.features}


FINETUNING_STAGES = ("create-squad", "create-glue")  # their manifests' "stage"


def _finetuning_records(data_dir):
    """The DataError for a --data of `bertprep create-glue` or `create-squad` (train.tf_record in no training/
    directory), or None: it was "no tfrecord training records", as if the stage had written nothing."""
    folder = Folder(data_dir)
    manifest = load_manifest(folder) if folder.isdir() else None
    if not manifest or manifest.get("stage") not in FINETUNING_STAGES:
        return None
    return DataError(f"{folder}: fine-tuning records ({manifest['stage']}, task {manifest.get('task')}), not "
                     "pretraining records: fine-tune on them with `python -m trainer finetune`; pretraining reads "
                     "the records `bertprep create` or `pack` writes")


def _inside_records(data_dir, fmt):
    """The DataError of a --data inside a records directory (its tfrecord/ or tfrecord/training/), or None: it said
    "no tfrecord training records (looked for [*/[*/]]/tfrecord/training/*.tfrecord)" of a folder holding them."""
    up = storage.parent(storage.absolute(data_dir))
    for place in (up, up and storage.parent(up)):
        if place and Folder(place).isfile("manifest.json") and holds_pretraining_records(place, fmt):
            return DataError(f"{Folder(data_dir)}: a folder inside the records directory {storage.display(place)}: "
                             f"give --data {storage.display(place)} (its manifest.json is read with the records)")
    return None


def _other_formats(data_dir, fmt):
    """The DataError of a --data holding training records of formats other than --format `fmt`, or None: it said
    only "no hdf5 training records" of a directory of TFRecord ones, as if it held none."""
    held = [name for name in codecs.record_names() if name != fmt and holds_pretraining_records(data_dir, name)]
    if not held:
        return None
    return DataError(f"{Folder(data_dir)}: no {fmt} training records, but {' and '.join(held)} ones: give --format "
                     f"{held[0]}, or make {fmt} ones (bertprep create --format {fmt})")


class Records:
    """The record files of one format in a data directory: files per split, kind, shape and counts."""

    def __init__(self, data_dir, fmt):
        self.data_dir = data_dir
        self.fmt = fmt
        self.files = {split: [] for split in SPLITS}
        self._manifest_counts = {}
        self._manifest_sha256 = {}  # each listed file's digest, checked as the file is read (formats.read_batches)
        self.kind = self.dims = None  # pretraining or packed; {"seq", "pred"[, "k"]}
        self.vocab_size = None  # from the manifest: the vocab the records were made with
        self.vocabs = []  # [(manifest path, its "vocab" entry, params.lower_case)]: the run's tokenizer
        self.manifests = {}  # {manifest path: its sha256}: what a checkpoint's model card names as its data
        self.masking = None  # unmasked records: how they are masked as they are read (bertprep.masking)
        self._first_instance = {}  # unmasked records: file -> global index of its first instance
        corpus_files = []  # each corpus's training files, and its manifest where that names kind and dims
        for corpus_dir, splits_dir in _corpus_dirs(data_dir, fmt):
            manifest, source = self._read_manifest(corpus_dir)
            for split in SPLITS:
                found = Folder(splits_dir).folder(split).glob(codecs.get(fmt).glob)
                # a stray copy (`x copy.tfrecord`) or another run's file: its records read with the rest, where
                # validate fails the directory (bertprep.hf.load and bertprep.torch refuse it alike)
                refuse_unlisted_records(found, manifest, corpus_dir, READER)
                if split == "training" and found:
                    corpus_files.append((found, source))
                self.files[split] += found
        if not self.files["training"]:
            raise (megatron.given_as_records(data_dir, Folder(data_dir), READER)
                   or _finetuning_records(data_dir)
                   or given_as_text(load_manifest(Folder(data_dir)) if Folder(data_dir).isdir() else None,
                                    Folder(data_dir), READER)
                   or _inside_records(data_dir, fmt)
                   or _other_formats(data_dir, fmt)
                   or DataError(f"{Folder(data_dir)}: no {fmt} training records (looked for "
                                f"{os.path.join('[*/[*/]]', fmt, 'training', codecs.get(fmt).glob)})"))
        for paths, manifest in corpus_files:
            self._check_shapes(paths, manifest)

    def _read_manifest(self, corpus_dir):
        """Take kind, dims, masking, vocab and counts from a corpus's manifest: (the manifest or None, its path
        where it gave kind and dims, else None)."""
        manifest = load_records_manifest(corpus_dir, (self.fmt,))  # its files there, its fields sound
        if not manifest:
            return None, None
        corpus = Folder(corpus_dir)
        source = corpus.path("manifest.json")
        params = manifest.get("params") or {}
        dims = manifest.get("dims")
        if dims is None and "max_seq_length" in params and "max_predictions_per_seq" in params:
            dims = {"seq": params["max_seq_length"], "pred": params["max_predictions_per_seq"]}
        if dims is not None:
            self._set_shape(kind_of_manifest(manifest, source), {k: int(v) for k, v in dims.items()}, source)
        if self.kind is UNMASKED:
            masking = DynamicMasking.from_manifest(manifest, source)
            if self.masking is not None and _masking_settings(masking) != _masking_settings(self.masking):
                raise DataError(f"{source}: masking settings {_masking_settings(masking)} differ from the other "
                                f"records' {_masking_settings(self.masking)} (point --data at one dataset)")
            self.masking = masking
            self._first_instance.update(first_instances(manifest, corpus_dir))
        vocab_size = (manifest.get("vocab") or {}).get("size")
        if vocab_size:
            self.vocab_size = max(self.vocab_size or 0, int(vocab_size))
        self.manifests[corpus.display("manifest.json")] = corpus.sha256("manifest.json")
        if isinstance(manifest.get("vocab"), dict):
            self.vocabs.append((corpus.display("manifest.json"), manifest["vocab"], params.get("lower_case")))
        self._manifest_sha256.update(file_digests(manifest, corpus_dir))
        for rel, entry in (manifest.get("files") or {}).items():
            if isinstance(entry, dict) and "instances" in entry:
                self._manifest_counts[storage.normpath(corpus.path(rel))] = int(entry["instances"])
        return manifest, (source if dims is not None else None)

    def _set_shape(self, kind, dims, source):
        if kind not in TRAINABLE_KINDS:
            raise DataError(f"{source}: {kind.name} records; the trainer pretrains on pretraining records "
                            "(`bertprep create`) or packed rows (`bertprep pack`)")
        if self.kind is not None and (kind, dims) != (self.kind, self.dims):
            raise DataError(f"{source}: {_shape(kind, dims)} differ from the other records' "
                            f"{_shape(self.kind, self.dims)} (point --data at one kind and shape)")
        self.kind, self.dims = kind, dims

    def _check_shapes(self, paths, manifest):
        """The first record of a corpus's training files must have the kind and shape of all others, and the
        kind its `manifest` (a path or None) names; a file of zero rows holds none to check."""
        path, record = next(((p, r) for p in paths for r in formats.read_records(p, self.fmt)), (paths[0], None))
        if record is None:
            raise DataError(f"{paths[0]}: no records")
        kind = kind_of_record({name: "float" if values.dtype == np.float32 else "int64"
                               for name, values in record.items()})
        dims = kind.dims_of({name: len(values) for name, values in record.items()}) if kind else None
        if manifest is not None and kind is not self.kind:  # a relabelled manifest
            raise kind_mismatch(manifest, self.kind, f"{path} record 0", kind)
        if dims is None:
            raise DataError(f"{path}: record 0 has features {', '.join(record)}: not a pretraining record "
                            "or packed row")
        self._set_shape(kind, dims, f"{path}: record 0")
        if kind is UNMASKED and self.masking is None:
            raise DataError(f"{path}: unmasked records without the manifest of `bertprep create --masking dynamic` "
                            "beside them, which says how to mask them")

    def check_split_shape(self, split):
        """The first record of `split`'s files must be of the training records' kind and shape: a test split of
        other records (another create's --seq, beside files no manifest lists) was read only at the first
        evaluation, --eval-every steps into the run, and ended it there."""
        if self.files[split]:
            self._check_shapes(self.files[split], None)

    @property
    def seq(self):
        return self.dims["seq"]

    @property
    def pred(self):
        """Prediction slots per record (pred + k in packed rows; the manifest's for unmasked records)."""
        if self.masking is not None:
            return self.masking.max_predictions
        return self.kind.feature("masked_lm_positions").size(self.dims)

    @property
    def batch_kind(self):
        """The kind of the batches the model gets: unmasked records are masked as they are read."""
        return PRETRAINING if self.kind is UNMASKED else self.kind

    def first_instance(self, path):
        """The global index of an unmasked file's first instance (its manifest's `first_instance`)."""
        key = storage.normpath(path)
        if key not in self._first_instance:
            raise DataError(f"{path}: its manifest gives no first_instance (rerun `bertprep create --masking dynamic`)")
        return self._first_instance[key]

    @property
    def packed(self):
        return self.kind is PACKED

    def check_labels(self, chunk, path, first_row=0):
        """Pretraining records hold no label ids to check (tasks.TaskData's do)."""

    def sha256(self, path):
        """The manifest's sha256 of a file, or None where no manifest lists it."""
        return self._manifest_sha256.get(storage.normpath(path))

    def count(self, path):
        """Records in a file: from the manifest, else by reading the framing (no decoding), or a columnar
        file's columns."""
        key = storage.normpath(path)
        if key not in self._manifest_counts:
            if not codecs.get(self.fmt).framed:
                _kind, _dims, columns = columnar.read_columns(path, self.fmt)
                self._manifest_counts[key] = len(next(iter(columns.values())))
            else:
                self._manifest_counts[key] = sum(1 for _ in formats.iter_payloads(path, self.fmt, verify=False))
        return self._manifest_counts[key]


def _masking_settings(masking):
    return masking.seed, masking.max_predictions, masking.masked_lm_prob, masking.whole_word


def _shape(kind, dims):
    return f"{kind.name} records of " + ", ".join(f"{name} {value}" for name, value in dims.items())


def no_records_directory(folder):
    """The DataError of a --data that is no directory: a file given for it (a corpus .txt, one .tfrecord) is named
    as a file, where "no such directory" read as if nothing were there."""
    if folder.isfile():
        return DataError(f"{folder}: a file, not a directory: give the directory of records that bertprep create, "
                         "create-squad or create-glue wrote")
    return DataError(f"{folder}: no such directory")


def _corpus_dirs(data_dir, fmt):
    """[(corpus directory, the directory holding its training/ and test/)] at the one depth that has any:
    <corpus>/<fmt>/training (bertprep's layout) or <corpus>/training with record files (NVIDIA's). Records at two
    depths are refused: the shallowest were read, and the others left out of the training unsaid."""
    data = Folder(data_dir)
    data.require("directory", no_records_directory(data))
    levels = [found for found in (_corpus_dirs_at(data, fmt, depth) for depth in range(4)) if found]
    if len(levels) > 1:  # only the shallowest were read: the others' records were left out without a word
        shallow, deep = levels[0][0][0], levels[1][0][0]
        raise DataError(f"{deep}: {fmt} records deeper below {data} than {shallow}'s, which --data would read "
                        "alone: give --data one records directory, or move the records directories to one depth "
                        "below it (all of one depth are read)")
    return levels[0] if levels else []


def _corpus_dirs_at(data, fmt, depth):
    """_corpus_dirs' pairs `depth` levels below the Folder `data`, sorted."""
    corpus = "/".join(["*"] * depth + [""])  # "", "*/", "*/*/", ...
    found = [(os.path.dirname(p), p) for p in data.glob(corpus + fmt) if Folder(p).isdir("training")]
    found += [(os.path.dirname(p), os.path.dirname(p)) for p in data.glob(corpus + "training")
              if os.path.basename(os.path.dirname(p)) != fmt and Folder(p).glob(codecs.get(fmt).glob)]
    return sorted(found)


def holds_pretraining_records(data_dir, fmt):
    """Whether `data_dir` holds `fmt` training records of `bertprep create` or `pack` where pretraining looks."""
    return any(Folder(splits).glob(os.path.join("training", codecs.get(fmt).glob))
               for _corpus, splits in _corpus_dirs(data_dir, fmt))


def full_batches(records, split, batch_size, num_workers=1):
    """How many whole batches of `batch_size` each of `num_workers` shares of `records.files[split]` holds (the
    fewest of any share, RecordStream's split of the files): an evaluation of more batches read records twice,
    and workers evaluating different numbers of batches would wait on one another's collectives for ever."""
    files = records.files[split]
    return min(sum(map(records.count, files[index::num_workers])) for index in range(num_workers)) // batch_size


def check_model_values(kind, columns, path, first_row, vocab_size, model=None):
    """check_int_values of a chunk of `path` (its first row `first_row`): token ids below `vocab_size` (the
    records' vocab, where their manifest names it) or else below the `model`'s (a BertConfig, where given),
    and segment ids below the model's type_vocab_size. The step's gather does not check an index: records
    without a manifest holding an id beyond the embeddings, or a segment id 2, trained on another row without a
    word under JAX (TensorFlow's gather was a traceback); the eval and predict splits are checked alike."""
    check_int_values(kind, columns, path, first_row, vocab_size or (model.vocab_size if model else None))
    if model is None or "segment_ids" not in columns:
        return
    types = model.type_vocab_size
    outside = first_outside(columns["segment_ids"], 0, types - 1)
    if outside is not None:
        raise DataError(f"{path}: row {first_row + outside[0]}: segment_ids[{outside[1]}]: "
                        f"{columns['segment_ids'][outside]} is not a segment id of the model's type_vocab_size "
                        f"{types} (0..{types - 1})")


class RecordStream:
    """An endless, seeded stream of batches from one worker's share of `records.files[split]`, of the
    record kind `records.kind` with dimensions `records.dims` (Records here; finetune.TaskRecords)."""

    def __init__(self, records, split, batch_size, seed, window=8192, worker_index=0, num_workers=1, bin_size=None,
                 model=None):
        files = records.files[split]
        if len(files) < num_workers:
            raise UsageError(f"{records.data_dir}: {len(files)} {records.fmt} {split} files cannot be split "
                             f"across {num_workers} workers (create at least {num_workers} shards)")
        self.records = records
        self.files = files[worker_index::num_workers]
        self.counts = [records.count(path) for path in self.files]
        self.epoch_size = sum(self.counts)
        if self.epoch_size == 0:
            raise DataError(f"{records.data_dir}: the {split} files of worker {worker_index} hold no records")
        _check_batch_fits(records, batch_size)
        self.batch_size = batch_size
        self.seed = seed
        self.bin_size = bin_size
        self.model = model  # the BertConfig the batches feed, whose embeddings bound their ids (check_model_values)
        if bin_size:
            if records.packed:
                raise UsageError("--bin-size: packed rows are full and are not binned")
            if num_workers > 1:
                raise UsageError("--bin-size needs one data worker: each worker's batches would be cut to widths "
                                 "of their own (use the PyTorch loader, whose ranks share one plan, or no binning)")
            if uncut := uncut_bins_reason(bin_size, records.seq):  # every batch kept whole: the flag did nothing
                raise UsageError(f"--bin-size {bin_size}: {uncut}")
            window = -(-window // batch_size) * batch_size  # batches never straddle windows
        self.window = window

    def _epoch_order(self, epoch):
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.files))
        return [self.files[i] for i in order], [self.counts[i] for i in order]

    def _epoch_windows(self, epoch, start):
        """Permuted windows of epoch `epoch`, the first trimmed to begin at record `start`."""
        files, counts = self._epoch_order(epoch)
        first_window = start // self.window
        window_start = first_window * self.window
        skipped_files, before = 0, 0
        while before + counts[skipped_files] <= window_start:
            before += counts[skipped_files]
            skipped_files += 1
        windows = _rechunk(self._chunks(files[skipped_files:], epoch), self.window, drop=window_start - before)
        for index, window in enumerate(windows, start=first_window):
            n = len(window["input_ids"])
            order = np.random.default_rng([self.seed, epoch, index]).permutation(n)
            if self.bin_size:
                order = self._binned(window, order, np.random.default_rng([self.seed, epoch, index, 1]))
            if index == first_window:
                order = order[start - window_start:]
            yield {name: values[order] for name, values in window.items()}

    def _binned(self, window, order, rng):
        """The window's permuted `order` regrouped into batches of one length bin where the bins allow
        (each bin's rows in a run, runs cut into batches, the batches in a random order): a permutation of
        the window still, so positions and resume stay exact; a batch at a run's end may span two bins."""
        lengths = (window["input_mask"][order] != 0).sum(1)
        order = order[np.argsort(bins_of(lengths, self.bin_size), kind="stable")]
        blocks = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        full = len(order) // self.batch_size
        shuffled = [blocks[i] for i in rng.permutation(full)] + blocks[full:]
        return np.concatenate(shuffled) if shuffled else order

    def _chunks(self, files, epoch):
        """Decoded records of `files` in order; unmasked ones with their global index and epoch, to be masked by."""
        records = self.records
        for number, path in enumerate(files):  # file by file (_rechunk makes the windows): a bad value is named
            if number + 1 < len(files):  # by file and row; an object store's next file starts arriving now
                storage.prefetch(files[number + 1])
            first = records.first_instance(path) if records.masking is not None else None
            row = 0
            digest = records.sha256(path)
            for chunk in formats.read_batches(path, self.window, records.fmt, kind=records.kind, dims=records.dims,
                                              digests={storage.normpath(path): digest} if digest else None):
                # the batches are cast to int32 below: a value beyond it, or an id beyond the vocab, is refused
                check_model_values(records.kind, chunk, path, row, records.vocab_size, self.model)
                records.check_labels(chunk, path, row)
                n = len(chunk["input_ids"])
                row += n
                if first is None:
                    yield chunk
                    continue
                yield {**chunk, INDEX: np.arange(first, first + n), EPOCH: np.full(n, epoch)}
                first += n
            _check_count(records, path, row)

    def batches(self, start=0):
        """Yield batches (dicts of arrays, `batch_size` rows) beginning at stream record `start`."""
        epoch, offset = divmod(start, self.epoch_size)
        dtypes = feature_dtypes(self.records.batch_kind)
        masking = self.records.masking
        pending = []
        have = 0
        while True:
            for window in self._epoch_windows(epoch, offset):
                pending.append(window)
                have += len(window["input_ids"])
                while have >= self.batch_size:
                    batch, pending = _take(pending, self.batch_size)
                    have -= self.batch_size
                    if masking is not None:
                        batch = masking.apply(batch, batch[EPOCH], batch[INDEX])
                    if self.bin_size:
                        batch = cut_to_bin(batch, self.bin_size, self.records.seq)
                    yield {name: values.astype(dtypes[name], copy=False) for name, values in batch.items()}
            epoch, offset = epoch + 1, 0


def _check_count(records, path, read):
    """A DataError unless the `read` records of a file read whole are the count `records` gives (Records: its
    manifest's): the stream's positions (a resume, an epoch's end) and an evaluation's batches are reckoned from
    that count, and a count edited in a manifest, its file's sha256 kept, misplaced them without a word."""
    expected = records.count(path)
    if read != expected:
        raise DataError(f"{path}: {read:,} records, its manifest.json says {expected:,} instances (edited since "
                        "`bertprep create` wrote it? `bertprep validate` checks the directory)")


def _check_batch_fits(records, batch_size):
    """A UsageError where one batch (a step's: --batch-size x replicas x --grad-accum rows) needs more than this
    machine's memory, counting only the rows as read (8 bytes a value) and once more as gathered into the batch:
    `--grad-accum 200000` read the records over and over for minutes, then stopped in a MemoryError traceback, or
    had the kernel kill the run. A batch below that can still be too large; this one never fits."""
    memory = machine_memory()
    if memory is None:  # the system does not say
        return
    needed = batch_size * 2 * 8 * sum(feature.size(records.dims) for feature in records.kind.features)
    if needed > memory:
        raise UsageError(f"a step's batch of {batch_size:,} records needs over {needed / 2**30:,.1f} GiB, more than "
                         f"this machine's {memory / 2**30:,.1f} GiB of memory: give a smaller --batch-size (or "
                         "--grad-accum)")


def cut_to_bin(batch, bin_size, seq):
    """The batch's seq-long features cut to its widest bin's width (bertprep.binning.bin_width)."""
    widest = bins_of((batch["input_mask"] != 0).sum(1), bin_size).max()
    width = bin_width(widest, bin_size, seq)
    return {name: values[:, :width] if values.shape[1] == seq else values for name, values in batch.items()}


def _rechunk(chunks, size, drop):
    """Regroup a stream of row-batches into batches of exactly `size` rows (the last may be
    short), after dropping the first `drop` rows."""
    pending = []
    have = 0
    for chunk in chunks:
        n = len(chunk["input_ids"])
        if drop >= n:
            drop -= n
            continue
        if drop:
            chunk = {name: values[drop:] for name, values in chunk.items()}
            n -= drop
            drop = 0
        pending.append(chunk)
        have += n
        while have >= size:
            out, pending = _take(pending, size)
            have -= size
            yield out
    if have:
        yield _take(pending, have)[0]


def _take(pending, n):
    """Split the first n rows off a list of row-batches: (those rows, the rest)."""
    taken, rest, need = [], list(pending), n
    while need:
        head = rest.pop(0)
        rows = len(head["input_ids"])
        if rows <= need:
            taken.append(head)
            need -= rows
        else:
            taken.append({k: v[:need] for k, v in head.items()})
            rest.insert(0, {k: v[need:] for k, v in head.items()})
            need = 0
    if len(taken) == 1:
        return taken[0], rest
    return {k: np.concatenate([t[k] for t in taken]) for k in taken[0]}, rest


def prefetch(iterator, depth=4):
    """Run `iterator` in a background thread, `depth` items ahead; errors surface on next()."""
    items = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for item in iterator:
                while not stop.is_set():
                    try:
                        items.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(done)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            items.put(exc)

    thread = threading.Thread(target=produce, daemon=True, name="batch-prefetch")
    thread.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
