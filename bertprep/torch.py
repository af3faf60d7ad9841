"""A PyTorch loader over any records directory: static, dynamic (unmasked) or packed, TFRecord or OFRecord.

    from bertprep.torch import BertLoader
    loader = BertLoader(records_dir, batch_size=32, num_workers=2, rank=rank, world_size=world_size)
    for batch in loader:                       # one epoch: {name: torch tensor (32, ...)}
        loss = model(**batch)
    torch.save(loader.state_dict(), "data.pt")  # mid-epoch too; load_state_dict resumes the rest of the epoch

`BertRecords` is the `torch.utils.data.IterableDataset`; `BertLoader` wraps
it in a `DataLoader` and counts the batches handed out, which is what a
checkpoint must record when workers run ahead of training.

What each rank gets is a pure function of (seed, epoch, rank, world_size):
the epoch's order is a permutation of all records drawn from (seed, epoch);
it is cut into batches (with --bin-size, batches of one length bin each, see
bertprep.binning); rank r takes batches r, r + world_size, ...; a rank's
DataLoader worker w takes every num_workers-th of those, which the
DataLoader hands out in order. Unmasked records are masked as they are read
(bertprep.masking), keyed by their global instance index, so the masks do
not depend on workers, ranks or restarts.
"""

import inspect
import mmap
import os
import re
from typing import Any

import numpy as np

from bertprep import formats, storage
from bertprep.binning import bin_width, binned_batches, bins_of, uncut_bins_reason
from bertprep.errors import BertprepError, DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs, megatron
from bertprep.formats.schemas import PACKED, UNMASKED, int_values_problem, kind_of_manifest, kind_of_record
from bertprep.masking import DynamicMasking, first_instances
from bertprep.options import check_argument, refuse_empty_path, short_repr
from bertprep.records_manifest import (
    check_records_manifest,
    file_digests,
    given_as_text,
    kind_mismatch,
    refuse_unlisted_records,
)
from bertprep.workdir import SPLITS, load_manifest, read_manifest

try:
    import torch
except ImportError:  # the module still imports, so the error can say what to install
    torch = None



def _mapped(path):
    """A record file's bytes for random access: memory-mapped; a URL's object read whole (one file in memory). A
    file gone since the index was made was an OSError traceback (from a DataLoader worker, the worker's whole
    traceback as its message), and one emptied mmap's ValueError; each is a DataError naming the file."""
    if not storage.reads_in_place(path):
        return storage.read_bytes(path)
    try:
        with open(storage.local_path(path), "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # mmap's "cannot mmap an empty file"
        raise DataError(f"{path}: empty, but it held records when the loader was made (changed since?)") from None


def _split_files(records, fmt, split):
    """The record files of `split` in the Folder `records`: under <fmt>/<split>, else <split> (--layout nvidia)."""
    split_dir = records.folder(fmt, split)
    if not split_dir.isdir():
        split_dir = records.folder(split)
    return split_dir.glob(codecs.get(fmt).glob)


def _check_whole(name, value, least):
    """A UsageError naming the argument unless `value` is an int (not a bool, not 8.0, not "8") >= `least`: a
    notebook's `BertLoader(d, batch_size="8")` stopped deep inside NumPy, `batch_size=2.5` made fractional
    slices, and `rank=True` read as rank 1."""
    value = check_argument(name, value, int)
    if value < least:
        raise UsageError(f"{name} must be at least {least}, not {value}")
    return value


def _records_below(records):
    """Where the Folder `records` holds records directories below it (create's --out: one per run's parameters
    and corpus, <out>/<params>/<corpus>; a workdir's records/ one level further down), "; below it: ..." naming
    them, else "": the loader given the --out it had given create said only that it was not the directory create
    wrote. Only create's and pack's manifests: given a workdir, its sharded/<corpus>/ (text shards) was named as
    the records directory to give, and its records/<params>/<corpus>/ not at all."""
    found = [os.path.dirname(path) for pattern in ("*/manifest.json", "*/*/manifest.json", "*/*/*/manifest.json")
             for path in records.glob(pattern)
             if _stage_of(path) in RECORDS_STAGES]
    if not found:
        return ""
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return f"; below it are the records directories they wrote, {shown} (a summary's records_dir): give one"


def _stage_of(path):
    """The stage a manifest.json below the directory given says wrote it; None where it cannot be read (a hint
    is no place to fail on a file the loader was not given)."""
    try:
        return (read_manifest(path)[0] or {}).get("stage")
    except OSError:
        return None


def _no_manifest(records):
    """The DataError of the Folder `records` holding no manifest.json. A path that is not there (a typo) or a file
    (a record file, the manifest.json itself) said "no manifest.json (give the directory `bertprep create` or
    `pack` wrote)", as if a records directory stood there without its manifest; they are said as hf.load and the
    trainer's --data say them. A store's prefix (no directory of its own) that holds nothing is as before."""
    if records.reads_in_place and not records.exists():
        return DataError(f"{records.root}: no such directory")
    if records.reads_in_place and not records.isdir():
        return DataError(f"{records.root}: a file, not a directory: give the directory `bertprep create` or `pack` "
                         "wrote")
    return DataError(f"{records.root}: no manifest.json (give the directory `bertprep create` or `pack` wrote)"
                     f"{_records_below(records)}")


def _vocab_file(vocab):
    """`vocab` (None: the manifest's) where it is a file. One that is not was said to be the manifest's own:
    "manifest.json: names the vocab X, which is not there: give the vocab.txt it was made with (--vocab)", of the
    caller's argument, and "not there" of a directory."""
    if vocab is None or storage.isfile(vocab):
        return vocab
    if storage.isdir(vocab):
        raise DataError(f"vocab: {vocab}: a directory, not a vocab file (give the vocab.txt the records were made "
                        "with)")
    raise storage.not_found(vocab, DataError(f"vocab: {vocab}: no such file (give the vocab.txt the records were "
                                             "made with)"))


def _format_to_read(manifest, fmt, data_dir):
    """`fmt`, else the first of the manifest's formats; one of them this loader does not read is refused. A
    manifest's `formats` that is no list is left to check_records_manifest (a str gave its first letter, "format
    't'"). A directory of only Parquet or HDF5 records said "format 'parquet': the PyTorch loader reads tfrecord
    or ofrecord", a UsageError as if the caller had given fmt, naming no directory."""
    if fmt is None:
        listed = manifest.get("formats")
        fmt = (listed if isinstance(listed, list) and listed else formats.FORMATS)[0]
        if fmt not in formats.FORMATS:
            raise DataError(f"{data_dir}: {' and '.join(map(str, listed))} records only (its manifest's formats): "
                            "the PyTorch loader reads tfrecord or ofrecord; read these with bertprep.hf.load, or "
                            f"make TFRecord ones (bertprep {manifest.get('stage', 'create')} --format tfrecord)")
    if fmt not in formats.FORMATS:  # the framed ones
        raise UsageError(f"format {fmt!r}: the PyTorch loader reads tfrecord or ofrecord")
    return fmt


def _require_torch():
    if torch is None:
        raise UsageError('bertprep.torch needs PyTorch: pip install "bertprep[torch]"')


READER = "bertprep.torch"  # as a Megatron directory's refusal names the reader
FINETUNING_STAGES = ("create-squad", "create-glue")  # their manifests' "stage"
RECORDS_STAGES = ("create", "pack")  # the stages whose records this loader reads


class RecordIndex:
    """Every record of one split of a records directory: where its payload lies, in global instance order."""

    def __init__(self, data_dir, split="training", fmt=None, vocab=None):
        records = Folder(storage.local_path(data_dir))  # file://...: the path
        data_dir = records.root  # as messages name it
        manifest = load_manifest(records)
        if manifest is None:
            raise (megatron.given_as_records(data_dir, data_dir, READER)
                   or records.not_found(_no_manifest(records)))
        where = records.path("manifest.json")
        text = given_as_text(manifest, data_dir, READER)
        if text is not None:
            raise text
        if manifest.get("stage") in FINETUNING_STAGES:
            # its train/eval/predict files are in no training/ directory: "no tfrecord training records" read as
            # if the stage had written nothing
            raise DataError(f"{data_dir}: fine-tuning records ({manifest['stage']}, task {manifest.get('task')}), "
                            f"not pretraining records: {READER} reads the records `bertprep create` or `pack` "
                            "writes; load these with bertprep.hf.load, or fine-tune on them with `python -m "
                            "trainer finetune`")
        if split not in SPLITS:  # "" said "no tfrecord  records"; "../x" was joined into a path and read there
            raise UsageError(f"split must be one of {', '.join(SPLITS)} (the split directories create writes), "
                             f"not {split!r}")
        fmt = _format_to_read(manifest, fmt, data_dir)
        paths = _split_files(records, fmt, split)
        check_records_manifest(manifest, where, (fmt,))  # its files there, its fields sound
        if not paths:
            raise (megatron.given_as_records(data_dir, data_dir, READER)
                   or DataError(f"{data_dir}: no {fmt} {split} records"))
        refuse_unlisted_records(paths, manifest, records, READER)
        self.kind = kind_of_manifest(manifest, where)
        self.dims = {k: int(v) for k, v in (manifest.get("dims") or {}).items()} or None
        self.fmt, self.data_dir, self.where = fmt, data_dir, where
        self.vocab_size = (manifest.get("vocab") or {}).get("size")
        self.masking = DynamicMasking.from_manifest(manifest, where, _vocab_file(vocab)) if self.kind is UNMASKED \
            else None
        if self.masking is not None:
            first = first_instances(manifest, data_dir)
            missing = [p for p in paths if os.path.normpath(p) not in first]
            if missing:
                raise DataError(f"{missing[0]}: its manifest gives no first_instance "
                                "(rerun `bertprep create --masking dynamic`)")
            paths.sort(key=lambda p: first[os.path.normpath(p)])
        self.paths = paths
        offsets, sizes, file_of = [], [], []
        digests = file_digests(manifest, records)
        for number, path in enumerate(paths):
            # the index is the one whole pass over each file: its bytes are checked against the manifest here
            sha256 = digests.get(storage.normpath(path))
            for _index, offset, payload in formats.iter_framed(path, fmt, verify=False, sha256=sha256):
                offsets.append(offset + codecs.get(fmt).header)
                sizes.append(len(payload))
                file_of.append(number)
        self.offsets = np.asarray(offsets, np.int64)
        self.sizes = np.asarray(sizes, np.int64)
        self.file_of = np.asarray(file_of, np.int64)
        self.dims = self._dims_of_first_record()
        self._maps = {}

    def __len__(self):
        return len(self.offsets)

    def _dims_of_first_record(self):
        """The dimensions of the first record, which must be of the manifest's kind and dimensions."""
        if not len(self):
            raise DataError(f"{self.data_dir}: the {self.fmt} files of its manifest hold no records")
        path = self.paths[self.file_of[0]]
        record = next(formats.read_records(path, self.fmt))
        kind = kind_of_record({n: "float" if v.dtype == np.float32 else "int64" for n, v in record.items()})
        if kind is not self.kind:  # a relabelled manifest
            raise kind_mismatch(self.where, self.kind, f"{path} record 0", kind)
        dims = kind.dims_of({n: len(v) for n, v in record.items()})
        if dims is None or (self.dims is not None and dims != self.dims):
            raise DataError(f"{self.where}: dims: {self.dims}, but {path} record 0 is a {kind.name} record of "
                            f"{dims}")
        return dims

    def __getstate__(self):  # memory maps are opened again in each worker
        return {**self.__dict__, "_maps": {}}

    def payloads(self, positions):
        positions = np.asarray(positions, np.int64)
        files = self.file_of[positions]
        for number in np.unique(files).tolist():
            if number not in self._maps:
                self._maps[number] = _mapped(self.paths[number])
        maps = self._maps
        starts = self.offsets[positions]
        # Plain ints from tolist() and one comprehension: per-record indexing of the arrays cost as much as
        # decoding the batch.
        return [maps[number][start:end] for number, start, end in
                zip(files.tolist(), starts.tolist(), (starts + self.sizes[positions]).tolist())]

    def decode(self, positions):
        """The records at `positions` as {name: array (n, length)} of their stored kind (ints as int64)."""
        payloads = self.payloads(positions)
        batch = formats.batch_arrays(self.kind, self.dims, len(payloads), np.int64)
        try:
            formats.decode_batch(payloads, self.fmt, formats.decoder_features(self.kind, self.dims),
                                 [batch[f.name] for f in self.kind.features])
        except ValueError as exc:
            raise self._decode_error(positions, str(exc)) from None
        self._check_values(batch, positions)
        return batch

    def _decode_error(self, positions, message):
        """The DataError of a record of `positions` that did not decode (`message`, the decoder's "record i at byte
        b: ..." of the batch's i-th payload), naming its file, its record there and the byte's offset in the file,
        as the other readers do: "DIR: record 5 at byte 769" named the directory, the record's place in the batch
        and a byte within its payload."""
        match = re.match(r"record (\d+)(?: at byte (\d+))?: ", message)
        if not match:
            return DataError(f"{self.data_dir}: {message}")
        position = int(np.asarray(positions)[int(match.group(1))])
        number = self.file_of[position]
        record = position - int(np.searchsorted(self.file_of, number))
        return DataError(f"{self.paths[number]}: record {record} at byte "
                         f"{int(self.offsets[position]) + int(match.group(2) or 0)}: {message[match.end():]}")

    def _check_values(self, batch, positions):
        """Refuse ids beyond int32 or the manifest's vocab, naming the file and record they are in."""
        problem = int_values_problem(self.kind, batch, self.vocab_size)
        if problem is not None:
            row, name, value, what = problem
            position = int(np.asarray(positions)[row])
            number = self.file_of[position]
            record = position - int(np.searchsorted(self.file_of, number))
            raise DataError(f"{self.paths[number]}: row {record}: {name}: {value} {what}")

    def lengths(self):
        """Each record's real tokens (input_mask != 0), decoded once."""
        if not hasattr(self, "_lengths"):
            chunks = [(self.decode(np.arange(a, min(a + 4096, len(self))))["input_mask"] != 0).sum(1)
                      for a in range(0, len(self), 4096)]
            self._lengths = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        return self._lengths


def epoch_batches(count, batch_size, seed, epoch, lengths=None, bin_size=None, drop_last=True):
    """The epoch's batches (arrays of global positions), the same on every rank: a pure function."""
    order = np.random.default_rng([seed, epoch]).permutation(count)
    if bin_size:
        return binned_batches(order, bins_of(lengths, bin_size), batch_size,
                              np.random.default_rng([seed, epoch, 1]), drop_last)
    cut = count - count % batch_size if drop_last else count
    return [order[i:i + batch_size] for i in range(0, cut, batch_size)]


def rank_batches(batches, rank, world_size):
    """Rank `rank`'s batches: every world_size-th, the same number on every rank."""
    per_rank = len(batches) // world_size
    return batches[rank::world_size][:per_rank]


# torch's IterableDataset where torch is installed (BertRecords then says what to install when used).
_DATASET_BASE: Any = torch.utils.data.IterableDataset if torch is not None else object


class BertRecords(_DATASET_BASE):
    """One epoch of one rank's batches as dicts of torch tensors; `set_epoch`, `state_dict`, `load_state_dict`."""

    def __init__(self, data_dir, batch_size, split="training", fmt=None, seed=0, rank=0, world_size=1,
                 bin_size=None, vocab=None, drop_last=True):
        _require_torch()
        batch_size, seed = _check_whole("batch_size", batch_size, 1), _check_whole("seed", seed, 0)
        rank, world_size = _check_whole("rank", rank, 0), _check_whole("world_size", world_size, 1)
        if not rank < world_size:
            raise UsageError(f"rank {rank} is not in [0, world_size {world_size})")
        if bin_size is not None:
            bin_size = _check_whole("bin_size", bin_size, 1)
        if not isinstance(drop_last, bool):
            raise UsageError(f"drop_last must be True or False, got {type(drop_last).__name__} {drop_last!r}")
        for name, value in (("split", split), ("fmt", fmt)):
            if not (isinstance(value, str) or (name == "fmt" and value is None)):
                raise UsageError(f"{name} must be a str, got {type(value).__name__} {value!r}")
        # a path or an os.PathLike: 5 or None was a TypeError from os.fspath, b"R" one from str.startswith
        data_dir = check_argument("data_dir", data_dir, str)
        refuse_empty_path("data_dir", data_dir)  # "" was read as the current directory: "no manifest.json"
        vocab = check_argument("vocab", vocab, str | None)
        self.index = RecordIndex(data_dir, split, fmt, vocab)
        if vocab is not None and self.index.masking is None:  # read only to mask: it was taken and never read
            raise UsageError(f"vocab: {self.index.data_dir} holds {self.index.kind.name} records, masked when they "
                             "were made; vocab is read only to mask unmasked records (create --masking dynamic): "
                             "leave it out")
        if bin_size is not None and self.index.kind is PACKED:
            raise UsageError("bin_size: packed rows are not binned (they are full)")
        seq = self.index.dims["seq"]
        if bin_size is not None and (uncut := uncut_bins_reason(bin_size, seq)):  # as the trainer's --bin-size
            raise UsageError(f"bin_size {bin_size}: {uncut}")
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.bin_size, self.drop_last = bin_size, drop_last
        self.epoch = 0
        self.start = 0  # batches of this rank's epoch already consumed (a resumed epoch skips them)
        if bin_size:
            self.index.lengths()  # once, before workers are forked
        if not self.batches_of_rank():
            raise UsageError(f"{data_dir}: {len(self.index)} {split} records in batches of {batch_size} leave rank "
                             f"{rank} of world_size {world_size} no batch")
        if not drop_last:
            self._check_every_batch_dealt(data_dir, split)

    def _check_every_batch_dealt(self, data_dir, split):
        """drop_last=False asks for every record each epoch, but every rank takes the same number of batches:
        batches that do not divide among the ranks were left out without a word (166 records in batches of 4 on
        4 ranks: 6 records an epoch). The number of an epoch's batches is the same in every epoch."""
        plan = epoch_batches(len(self.index), self.batch_size, self.seed, 0, self.index.lengths() if self.bin_size
                             else None, self.bin_size, False)
        left = len(plan) % self.world_size
        if left:
            records = sum(len(batch) for batch in plan[-left:])
            raise UsageError(f"{data_dir}: drop_last=False, but its {len(self.index)} {split} records make "
                             f"{len(plan)} batches, which do not divide among world_size {self.world_size} ranks "
                             f"(each takes the same number): {left} batch(es) ({records} records in epoch 0) would "
                             "be left out of every epoch; "
                             "give drop_last=True, or a batch_size or world_size whose batches divide evenly")

    def set_epoch(self, epoch):
        # int() took "abc" (a ValueError) and 2.7 (epoch 2); -1 failed later, in NumPy's seed
        self.epoch, self.start = _check_whole("epoch", epoch, 0), 0

    def state_dict(self):
        return {"epoch": self.epoch, "batches": self.start, "seed": self.seed, **self._plan()}

    def _plan(self):
        """What, beside the seed and epoch, decides which records a count of batches covers: a state saved with
        another batch_size, world_size, bin_size or drop_last, or over another number of records, resumed at
        a position of another plan without a word (a count of 5 batches of 4 skipped 40 records at 8)."""
        return {"batch_size": self.batch_size, "world_size": self.world_size, "bin_size": self.bin_size,
                "drop_last": self.drop_last, "records": len(self.index)}

    def load_state_dict(self, state):
        """Resume where `state` (what state_dict returned) left off. A count of batches this rank's epoch does not
        have is refused: a negative one made len() count batches never handed out, and one past the end (a state
        of another batch_size or world_size) skipped the rest of the epoch without a word."""
        if not isinstance(state, dict) or not {"epoch", "batches"} <= set(state):
            raise UsageError(f"the saved data state must be a dict with epoch and batches (what state_dict returns), "
                             f"got {type(state).__name__} {short_repr(state)}")
        # A state of an earlier release holds no plan's fields: those it lacks are not compared.
        if state.get("seed", self.seed) != self.seed:
            # repr, as the plan's fields: a seed "3" (a state written as text) was "seed 3, this loader's is 3"
            raise UsageError(f"the saved data state is of seed {state['seed']!r}, this loader's is {self.seed!r}")
        for name, value in self._plan().items():
            if name in state and state[name] != value:
                raise UsageError(f"the saved data state is of {name} {state[name]!r}, this loader's is {value!r}: "
                                 "its count of batches would resume elsewhere in the epoch (load it into a loader "
                                 "of the records and settings it was saved with)")
        epoch = _check_whole("the saved data state's epoch", state["epoch"], 0)
        batches = _check_whole("the saved data state's batches", state["batches"], 0)
        count = len(self.batches_of_rank(epoch))
        if batches > count:
            raise UsageError(f"the saved data state has {batches} batches of epoch {epoch} handed out, but this "
                             f"loader's rank has {count} in it (saved with another batch_size or world_size?)")
        self.epoch, self.start = epoch, batches

    def batches_of_rank(self, epoch=None):
        """This rank's batches of `epoch` (None: the current one)."""
        lengths = self.index.lengths() if self.bin_size else None
        plan = epoch_batches(len(self.index), self.batch_size, self.seed, self.epoch if epoch is None else epoch,
                             lengths, self.bin_size, self.drop_last)
        return rank_batches(plan, self.rank, self.world_size)

    def __len__(self):
        """The batches an iteration yields: those of this rank's epoch after the `start` already handed out. The
        whole epoch's count, after load_state_dict, made a DataLoader over this dataset promise batches it never
        yields (82 of which 77 came)."""
        return len(self.batches_of_rank()) - self.start

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        start = self.start
        for number, positions in enumerate(self.batches_of_rank()):
            # The DataLoader takes a batch from worker 0, 1, ... in turn: deal from the first one wanted.
            if number < start or (number - start) % workers != worker:
                continue
            yield {name: torch.from_numpy(values) for name, values in self.read_batch(positions).items()}

    def read_batch(self, positions):
        """The batch of records at `positions` (NumPy): masked if unmasked, cut to its bin with binning."""
        index = self.index
        batch = index.decode(positions)
        if index.masking is not None:
            batch = index.masking.apply(batch, self.epoch, np.asarray(positions, np.int64))
        if self.bin_size:
            width = bin_width(bins_of(index.lengths()[positions], self.bin_size).max(), self.bin_size,
                              index.dims["seq"])
            seq = index.dims["seq"]
            batch = {name: values[:, :width] if values.shape[1] == seq else values for name, values in batch.items()}
        return {name: np.ascontiguousarray(values) for name, values in batch.items()}


def _raised_in_worker(exc):
    """A bertprep error a DataLoader worker raised, as it was raised there: torch raises it again in the main
    process made from "Caught DataError in DataLoader worker process 0.\nOriginal Traceback ..." and the whole
    traceback, where the same records read without workers said one line (the file, row and value). `exc` itself
    where it is not such a copy."""
    text = str(exc)
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    prefix = f"{type(exc).__module__}.{type(exc).__qualname__}: "
    if not (text.startswith(f"Caught {type(exc).__name__} in DataLoader worker") and last.startswith(prefix)):
        return exc
    return type(exc)(last[len(prefix):])


# what BertLoader passes on to BertRecords by keyword
_DATASET_ARGS = frozenset(inspect.signature(BertRecords.__init__).parameters) - {"self", "data_dir", "batch_size"}


class BertLoader:
    """A DataLoader over BertRecords that counts what it handed out: its state_dict resumes mid-epoch.

    Each `iter()` is one epoch (the rest of one, after load_state_dict); the
    next begins at epoch + 1. One iterator at a time: a second one's first
    batch, while another is unfinished (neither run out nor closed), is a
    UsageError, as both would count into one state_dict and each end the epoch; so is load_state_dict while
    one is unfinished.
    """

    def __init__(self, data_dir, batch_size, num_workers=0, **dataset_args):
        _require_torch()
        unknown = [name for name in dataset_args if name not in _DATASET_ARGS]
        if unknown:  # passed on to BertRecords, whose name Python's own message gave
            raise TypeError(f"BertLoader() got an unexpected keyword argument {unknown[0]!r}")
        self.num_workers = _check_whole("num_workers", num_workers, 0)
        self.dataset = BertRecords(data_dir, batch_size, **dataset_args)
        self._iterating = False  # an iterator of this loader has started and neither run out nor been closed

    def __iter__(self):
        if self._iterating:
            # Two at once handed out the same batches and counted both in one state_dict (batch 0 twice: "2
            # batches" of epoch 0), and each one's end started another epoch.
            dataset = self.dataset
            raise UsageError(f"bertprep.torch.BertLoader: another iterator of this loader is unfinished (epoch "
                             f"{dataset.epoch}, {dataset.start} batch(es) handed out): one loader counts one "
                             "iterator's batches (its state_dict) and each iterator ends the epoch; run that one out "
                             "or close it (its .close(), or del) first, or make a BertLoader for each")
        self._iterating = True
        try:
            yield from self._epoch()
        finally:
            self._iterating = False

    def _epoch(self):
        """The rest of the current epoch's batches, counted as the caller takes them; then the next epoch."""
        dataset = self.dataset
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=self.num_workers,
                                             persistent_workers=False)
        batches = iter(loader)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except BertprepError as exc:
                unwrapped = _raised_in_worker(exc)
                if unwrapped is exc:
                    raise
                raise unwrapped from None
            dataset.start += 1  # the workers hold copies: the count that matters is what the caller got
            yield batch
        dataset.set_epoch(dataset.epoch + 1)

    def __len__(self):
        return len(self.dataset)

    def state_dict(self):
        return self.dataset.state_dict()

    def load_state_dict(self, state):
        if self._iterating:
            # The iterator's workers go on from where they were while the count restarts from the state's: loaded
            # at 10 batches after 3 were taken, the next was batch 3 and state_dict said 11 were handed out.
            dataset = self.dataset
            raise UsageError(f"bertprep.torch.BertLoader: load_state_dict while an iterator of this loader is "
                             f"unfinished (epoch {dataset.epoch}, {dataset.start} batch(es) handed out): it would go "
                             "on from its own place, not the state's; run it out or close it (its .close(), or del) "
                             "first")
        self.dataset.load_state_dict(state)
