"""The shard task of `bertprep pack`: one create output file in, its packed rows out in every format.

Pure apart from reading its input and writing its outputs, so any engine can
run it anywhere and a rerun writes the same bytes. Memory is one shard's
lengths, not its records: the first pass reads the lengths (and checks the
records can be packed), the strategy picks the rows, and the second pass
decodes, for each chunk of rows in output order, just the records it needs
from the memory-mapped input.
"""

import contextlib
import dataclasses
import hashlib
import re

import numpy as np

from bertprep import formats, storage
from bertprep.atomic import staging_dir
from bertprep.errors import DataError
from bertprep.folder import Folder
from bertprep.formats import codecs
from bertprep.formats.frames import map_file, walk_frames
from bertprep.formats.schemas import PACKED, PRETRAINING
from bertprep.stages.pack.layout import pack_rows
from bertprep.stages.pack.strategy import lower_bound, pack

CHUNK = 2048  # records decoded, or rows built and encoded, at a time


@dataclasses.dataclass(frozen=True)
class PackTask:
    """Everything one shard needs; plain data so any engine can ship it to a worker."""

    source: str  # a record file of `bertprep create`
    source_format: str
    source_sha256: str  # as create's manifest lists it
    split: str
    records_dir: str  # the packed corpus directory
    outputs: tuple  # ((format, path relative to records_dir), ...)
    seq: int
    pred: int
    k: int
    settings_key: str

    def output_paths(self):
        """{format: path relative to records_dir}."""
        return dict(self.outputs)


def pack_shard(task):
    """Pack one file; return its manifest entries and figures."""
    buf = map_file(task.source)
    if hashlib.sha256(buf.data if len(buf) else b"").hexdigest() != task.source_sha256:
        raise DataError(f"{task.source}: sha256 differs from the create manifest's: the file changed after "
                        "`bertprep create` wrote it (rerun create)")
    starts, sizes = _record_spans(task.source, buf, task.source_format)
    lengths, predictions = _lengths(task, buf, starts, sizes)
    members, strategy = pack(lengths, predictions, task.seq, task.pred, task.k)
    figures = {
        "sequences": len(lengths),
        "tokens": int(lengths.sum()),
        "lower_bound": lower_bound(lengths, task.seq, task.k),
        "strategy": strategy,
        "sequences_per_row": np.bincount((members >= 0).sum(axis=1), minlength=task.k + 1).tolist(),
    }
    out = Folder(task.records_dir)
    staging = staging_dir(out.root)  # the run holds the tree; .partial/ is where no reader looks
    with contextlib.ExitStack() as stack:
        outputs = [(fmt, relative, stack.enter_context(out.atomic_open(relative, staging=staging)),
                    hashlib.sha256(), [0]) for fmt, relative in task.outputs if codecs.get(fmt).framed]
        chunks = []  # a columnar file is written whole, from every chunk's rows
        for first in range(0, len(members), CHUNK):
            rows = _rows(task, buf, starts, sizes, members[first:first + CHUNK])
            if len(outputs) < len(task.outputs):
                chunks.append(rows)
            for fmt, _relative, f, digest, size in outputs:
                data = formats.encode_columns(rows, fmt, PACKED)
                f.write(data)
                digest.update(data)
                size[0] += len(data)
    written = {relative: (fmt, size[0], digest.hexdigest()) for fmt, relative, _f, digest, size in outputs}
    for fmt, relative in task.outputs:
        if not codecs.get(fmt).framed:
            dims = {"seq": task.seq, "pred": task.pred, "k": task.k}
            rows = {f.name: np.concatenate([c[f.name] for c in chunks]) if chunks
                    else np.zeros((0, f.size(dims))) for f in PACKED.features}
            written[relative] = (fmt, *codecs.get(fmt).write(out.path(relative), rows, PACKED, staging))
    files = {relative: {"format": fmt, "split": task.split, "source": storage.display(task.source),
                        "source_sha256": task.source_sha256, "settings": task.settings_key,
                        "instances": len(members), **figures, "bytes": size, "sha256": digest}
             for relative, (fmt, size, digest) in written.items()}
    return {"source": task.source, "split": task.split, "rows": len(members), **figures, "files": files}


def _record_spans(path, buf, fmt):
    """Payload offsets and sizes of every record; a framing or CRC error is a DataError."""
    if not len(buf):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    framing = walk_frames(buf, fmt)
    if framing.error:
        raise DataError(f"{path}: record {framing.error_index} {framing.error}")
    if len(framing.bad_crc):
        index = int(framing.bad_crc[0])
        raise DataError(f"{path}: record {index} at byte {int(framing.starts[index]) - 12}: data CRC mismatch")
    return framing.starts, framing.lengths


def _decode(task, buf, starts, sizes, indices):
    """Records `indices` of the input as pretraining arrays (int32; weights float32)."""
    dims = {"seq": task.seq, "pred": task.pred}
    out = formats.batch_arrays(PRETRAINING, dims, len(indices), np.int32)
    data = buf.data
    payloads = [data[s:s + n] for s, n in zip(starts[indices].tolist(), sizes[indices].tolist())]
    try:
        formats.decode_batch(payloads, task.source_format, formats.decoder_features(PRETRAINING, dims),
                             list(out.values()))
    except ValueError as exc:  # "record i[ at byte b]: ...": i counted from 0 in this call, b in its payload
        message = str(exc)
        match = re.match(r"record (\d+)(?: at byte (\d+))?: ", message)
        if match:
            index = int(indices[int(match.group(1))])
            at = int(starts[index]) + int(match.group(2) or 0)  # the byte's offset in the file
            message = f"record {index} at byte {at}: {message[match.end():]}"
        raise DataError(f"{task.source}: {message} (expected a pretraining record of seq {task.seq}, "
                        f"pred {task.pred} as the create manifest says)") from None
    return out


def _framed_offset(task, payload_start):
    return int(payload_start) - codecs.get(task.source_format).header


def _lengths(task, buf, starts, sizes):
    """Real tokens and predictions of every record, after checking what packing relies on."""
    lengths, predictions = [], []
    for first in range(0, len(starts), CHUNK):
        indices = np.arange(first, min(first + CHUNK, len(starts)))
        batch = _decode(task, buf, starts, sizes, indices)
        mask, weights = batch["input_mask"], batch["masked_lm_weights"]
        length = mask.sum(axis=1)
        count = (weights != 0).sum(axis=1)
        real = np.arange(task.seq) < length[:, None]
        slots = np.arange(task.pred) < count[:, None]
        bad = {
            "input_mask is not ones then zeros": (mask != real).any(axis=1) | (length == 0),
            "masked_lm_weights are not 1.0 then 0.0": (weights != slots).any(axis=1),
            "a masked position lies outside the real tokens": ((batch["masked_lm_positions"] >= length[:, None])
                                                                & slots).any(axis=1),
        }
        for what, failing in bad.items():
            if failing.any():
                index = int(indices[np.argmax(failing)])
                raise DataError(f"{task.source}: record {index} at byte {_framed_offset(task, starts[index])}: "
                                f"{what}; cannot pack it (bertprep validate {task.source} says more)")
        lengths.append(length)
        predictions.append(count)
    if not lengths:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(lengths).astype(np.int64), np.concatenate(predictions).astype(np.int64)


def _rows(task, buf, starts, sizes, members):
    """The packed rows of `members` (indices into the input file), decoding only those records."""
    needed, local = np.unique(members[members >= 0], return_inverse=True)
    instances = _decode(task, buf, starts, sizes, needed)
    grouped = np.full(members.shape, -1, dtype=np.int64)
    grouped[members >= 0] = local
    return pack_rows(instances, grouped, task.k, task.pred)


