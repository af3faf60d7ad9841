"""`bertprep.pack(...)`: plan the shard tasks from a create directory, run them, resume, and summarize.

    <records>/<params>/<corpus>/                  what `bertprep create` wrote (manifest.json)
    <out>/<params>_packed<k>/<corpus>/            what pack writes: the same file names, one per input file
        manifest.json
        tfrecord/{training,test}/<shard>.tfrecord
        ofrecord/{training,test}/part-<i>
"""

import dataclasses
import hashlib
import json
import os
import posixpath
import time
from typing import Any

from bertprep import __version__, formats, storage
from bertprep.atomic import hold
from bertprep.engines import EngineOptions, open_engine
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder, natural_key
from bertprep.formats import codecs
from bertprep.formats.schemas import PACKED, PRETRAINING, UNMASKED, kind_of_manifest
from bertprep.options import (
    Name,
    build_options,
    check_types,
    errors_name_fields,
    refuse_empty,
    refuse_files_above,
    refuse_overlap,
)
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.records_manifest import check_records_manifest
from bertprep.stages.create import (
    is_complete,  # the same rule: an entry for the same input and settings, of its size
    remove_stale_outputs,
)
from bertprep.stages.pack.task import PackTask, pack_shard
from bertprep.workdir import MANIFEST, SPLITS, load_manifest, paced_saves, refuse_another_stages, save_manifest

# What the bytes of a packed file depend on besides its input: a change here repacks everything.
LAYOUT_VERSION = 1

MIN_SEQUENCE = 5  # [CLS] A [SEP] B [SEP], A and B a token at least (create's instances)


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class PackOptions:
    """What `pack` reads and writes: `records_dir` a records directory of `create` (<params>/<corpus>), rows of
    at most `max_per_pack` sequences, written under `out` (None: beside <params>) in `format` (None: the
    formats of the input), the shard tasks run by `engine`."""

    records_dir: str
    max_per_pack: int = 3
    out: str | None = None
    format: tuple[Name, ...] | None = None  # format names, not paths: a Path was len()'s TypeError
    engine: EngineOptions = EngineOptions()

    def __post_init__(self):
        check_types(self)
        refuse_files_above(self, "out", folders=("out",))
        if self.max_per_pack < 1:
            raise UsageError(f"--max-per-pack must be at least 1, not {self.max_per_pack}")
        refuse_empty(self, "format")  # () was "unknown --format ''"; the command line's "" is None (the input's)
        if self.format is not None:  # canonical order, as parse_formats gives it
            object.__setattr__(self, "format", formats.parse_formats(self.format))


def read_source(records):
    """The create manifest of the Folder `records` and its sha256; one-line errors for anything else."""
    records_dir, path = records.root, records.path(MANIFEST)  # messages name the directory as it was given
    records.require("directory", DataError(f"{records_dir}: no such directory"))
    manifest = load_manifest(records)
    if not isinstance(manifest, dict):
        raise DataError(f"{records_dir}: not a records directory of `bertprep create` (no readable {MANIFEST}; "
                        "pass <records>/<params>/<corpus>)")
    check_records_manifest(manifest, path)  # its fields; the files it reads are checked by sha256 as they are packed
    kind = kind_of_manifest(manifest, path)
    if kind is PACKED:
        source = (manifest.get("source") or {}).get("records_dir", "the create directory it came from")
        raise DataError(f"{records_dir}: already packed (record kind packed); pack {source} instead")
    if manifest.get("stage") == "create" and kind is UNMASKED:  # said "kind unmasked; pack reads the pretraining
        # records of `bertprep create`", of a directory create had written
        raise DataError(f"{records_dir}: unmasked records (`bertprep create --masking dynamic`, masked by the loaders "
                        "anew each epoch); a packed row holds its sequences' masked positions, so pack reads masked "
                        "records: pack a `bertprep create --masking static` directory (create's default)")
    if manifest.get("stage") != "create" or kind is not PRETRAINING:
        raise DataError(f"{records_dir}: {MANIFEST} is of stage {manifest.get('stage')!r}, {held(manifest, kind)}; "
                        "pack reads the pretraining records of `bertprep create`")
    if not manifest.get("files"):
        raise DataError(f"{records_dir}: the create manifest lists no finished files")
    return manifest, records.sha256(MANIFEST)


def held(manifest, kind):
    """What a manifest's directory holds, as pack's refusal names it. A manifest naming no kind is pretraining
    only where create wrote it (before kinds were recorded): `bertprep tokenize`'s was called "kind pretraining",
    and its files hold token sequences, which have no instances to pack (Megatron pairs and masks them itself)."""
    fmt = manifest.get("format")
    if isinstance(fmt, str) and fmt in codecs.sequence_names():
        return f"which holds token sequences ({fmt} .bin/.idx), not records"
    if "kind" in manifest or manifest.get("stage") == "create":
        return f"kind {kind.name}"
    return "which names no record kind"


def output_dir(records_dir, out, k):
    """The Folder <out>/<params>_packed<k>/<corpus>: beside the input's <params> unless --out names another root."""
    params_dir, corpus = os.path.split(records_dir)
    root, params = os.path.split(params_dir)
    return Folder(storage.absolute(out) if out else root).folder(f"{params}_packed{k}", corpus)


def plan(options):
    """(source manifest, its sha256, output Folder, formats, dims, tasks)."""
    records = Folder(storage.absolute(options.records_dir))
    records_dir = records.root
    manifest, manifest_sha256 = read_source(records)
    fmts = options.format or formats.parse_formats(manifest.get("formats") or formats.FORMATS)
    dims = manifest.get("dims") or {}
    params = manifest.get("params") or {}
    seq = int(dims.get("seq", params.get("max_seq_length", 0)))
    pred = int(dims.get("pred", params.get("max_predictions_per_seq", 0)))
    if seq < 1 or pred < 1:
        raise DataError(f"{records_dir}: the create manifest gives no seq/pred")
    if options.max_per_pack > seq // MIN_SEQUENCE:  # a k no row can reach only sizes every row's arrays up
        raise UsageError(f"--max-per-pack {options.max_per_pack}: a row of {seq} tokens holds at most "
                         f"{seq // MIN_SEQUENCE} sequences ([CLS] A [SEP] B [SEP] takes at least {MIN_SEQUENCE})")
    out = output_dir(records_dir, options.out, options.max_per_pack)
    settings_key = hashlib.sha256(json.dumps(
        {"k": options.max_per_pack, "seq": seq, "pred": pred, "layout": LAYOUT_VERSION, "version": __version__},
        sort_keys=True).encode()).hexdigest()[:16]
    # One task per input shard (create wrote each shard in each of its formats; any one of them will do).
    shards = {}
    for relative, entry in manifest["files"].items():
        if not isinstance(entry, dict) or entry.get("format") not in formats.ALL_FORMATS:
            raise DataError(f"{records_dir}: {MANIFEST} entry {relative!r} has no format")
        key = (entry.get("split", "training"), entry.get("source", relative))
        _check_names(records_dir, relative, key[0])
        shards.setdefault(key, {})[entry["format"]] = (relative, entry)
    tasks = []
    for split in [s for s in SPLITS if any(key[0] == s for key in shards)] + sorted(
            {key[0] for key in shards} - set(SPLITS)):
        in_split = sorted((key for key in shards if key[0] == split), key=lambda key: natural_key(key[1]))
        for index, key in enumerate(in_split):
            by_format = shards[key]
            source_format = next((f for f in formats.FORMATS if f in by_format), None)
            if source_format is None:  # the packer reads framed records
                raise DataError(f"{records_dir}: {key[1]} has no TFRecord or OFRecord file, which pack reads; "
                                "create with --format tfrecord too")
            relative, entry = by_format[source_format]
            source = records.path(relative)
            if not records.isfile(relative):
                raise DataError(f"{source}: listed in {records.path(MANIFEST)} but missing")
            outputs = tuple((fmt, by_format[fmt][0] if fmt in by_format else _output_name(fmt, split, key[1], index))
                            for fmt in fmts)
            tasks.append(PackTask(source=source, source_format=source_format, source_sha256=entry.get("sha256"),
                                  split=split, records_dir=out.root, outputs=outputs, seq=seq, pred=pred,
                                  k=options.max_per_pack, settings_key=settings_key))
    _refuse_shared_outputs(tasks, out)
    return manifest, manifest_sha256, out, fmts, {"seq": seq, "pred": pred, "k": options.max_per_pack}, tasks


def _check_names(records_dir, relative, split):
    """A DataError for an entry whose name or split leads out of the directory (absolute, or up with `..`): pack
    writes each packed file under its input's name and split, so a hand-edited manifest made it write outside
    its output, over its own input where the two lie side by side."""
    normal = posixpath.normpath(relative)
    if posixpath.isabs(normal) or normal.split("/")[0] == "..":
        raise DataError(f"{records_dir}: {MANIFEST} entry {relative!r} names no file inside the directory; pack "
                        "writes its packed file under the same name (create lists <format>/<split>/<file>)")
    if split in ("", ".", "..") or "/" in split:
        raise DataError(f"{records_dir}: {MANIFEST} entry {relative!r} has split {split!r}, not a directory name "
                        "(create writes training and test)")


def _refuse_shared_outputs(tasks, out):
    """A UsageError where two shards would be packed into one file: a format the input lacks names its files by
    the create input's name, which two inputs of an OFRecord-only create (numbered parts) can share; the second
    replaced the first without a word, its sequences counted in the summary."""
    first = {}
    for task in tasks:
        for fmt, relative in task.outputs:
            other = first.setdefault(relative, task.source)
            if other != task.source:
                raise UsageError(f"{other} and {task.source} would both be packed into {out.display(relative)}: "
                                 f"{fmt} names its files by the create input's name, which theirs share; pack "
                                 "to ofrecord, which numbers its files")


def _output_name(fmt, split, source, index):
    """create's name for a shard's file in a format the input directory does not hold."""
    return codecs.get(fmt).output_path(split, os.path.splitext(os.path.basename(source))[0], index)


def pack(options: PackOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Pack the records of `options.records_dir` (or PackOptions(**fields)); progress on stderr unless `quiet`.
    A rerun packs only the shards not already complete (`complete_before`: none was left)."""
    options = build_options(PackOptions, options, fields)  # not both (a keyword beside one was ignored)
    started = time.monotonic()
    source, source_sha256, out, fmts, dims, tasks = plan(options)
    if storage.absolute(out.root) == storage.absolute(options.records_dir):
        raise UsageError(f"--out {options.out}: the packed records would overwrite their input")
    refuse_overlap(out.root, [options.records_dir])
    refuse_another_stages(out, "pack", "--out")
    progress = Progress("pack", total=len(tasks), unit="shards", quiet=quiet)
    with hold(out.root, "bertprep pack"):  # clears what killed runs left in .partial/
        previous = load_manifest(out) or {}
        wanted = {relative for task in tasks for relative in task.output_paths().values()}
        files = {rel: entry for rel, entry in (previous.get("files") or {}).items() if rel in wanted}
        # a rerun with fewer formats or shards: readers that glob a split's directory would find the earlier ones
        removed = remove_stale_outputs(out, previous.get("files") or {}, wanted, progress)
        pending = [task for task in tasks if not is_complete(task, files)]
        if len(pending) < len(tasks):
            progress.note(f"resuming: {len(tasks) - len(pending)} of {len(tasks)} shards already complete")
            progress.advance(len(tasks) - len(pending))
        manifest = {
            "tool": "bertprep", "stage": "pack", "kind": PACKED.name, "dims": dims, "formats": list(fmts),
            "max_per_pack": dims["k"], "version": __version__,
            "source": {"records_dir": storage.display(storage.absolute(options.records_dir)),
                       "manifest_sha256": source_sha256, "kind": PRETRAINING.name,
                       "dims": {"seq": dims["seq"], "pred": dims["pred"]}},
            # what the trainer and validate read from a records manifest: the vocab and masking parameters
            "params": source.get("params"), "vocab": source.get("vocab"), "files": files,
        }
        def save():  # the figures of the shards finished so far, with them
            manifest["packing"] = packing_figures(tasks, files, dims["k"])
            save_manifest(out, manifest)

        try:
            # paced as tokenize's and create's (workdir.PacedSaves): saved after every shard, with its figures
            # summed over every shard again, N shards wrote O(N²) bytes
            with open_engine(options.engine, max_tasks=len(pending)) as engine, paced_saves(save) as saves:
                for result in engine.run(pack_shard, pending, describe=lambda task: task.source):
                    files.update(result["files"])
                    saves.changed()
                    progress.advance(1, sequences=result["sequences"])
        except BaseException:  # the workers are stopped by now
            # another worker's shard finished while the failing one raised was left under its final names with no
            # entry, records a reader that globs the split takes
            out.remove_unlisted([name for task in pending for name in task.output_paths().values()], files)
            raise
        manifest["packing"] = packing_figures(tasks, files, dims["k"])
        if manifest != previous:  # a complete rerun rewrites nothing, not even the same manifest
            save_manifest(out, manifest)
    progress.close()
    summary = summarize(out, manifest, tasks, time.monotonic() - started, len(pending))
    if removed:  # absent otherwise: today's --json
        summary["warnings"] = [removed]
    rows = (*summary_rows(summary, fmts), *(("warning", removed),) * bool(removed))
    return Summary("bertprep pack: done", summary, rows, complete_before=not pending)


def packing_figures(tasks, files, k):
    """Ratio, rows, lower bound and sequences per row over the finished shards (one entry per shard)."""
    figures = {"sequences": 0, "rows": 0, "tokens": 0, "lower_bound_rows": 0, "sequences_per_row": [0] * (k + 1),
               "by_split": {}}
    for task in tasks:
        entry = files.get(next(iter(task.output_paths().values())))
        if entry is None:
            continue
        split = figures["by_split"].setdefault(task.split, {"sequences": 0, "rows": 0})
        split["sequences"] += entry["sequences"]
        split["rows"] += entry["instances"]
        figures["sequences"] += entry["sequences"]
        figures["rows"] += entry["instances"]
        figures["tokens"] += entry["tokens"]
        figures["lower_bound_rows"] += entry["lower_bound"]
        figures["sequences_per_row"] = [a + b for a, b in zip(figures["sequences_per_row"], entry["sequences_per_row"])]
    sequences = max(figures["sequences"], 1)
    figures["ratio"] = round(figures["rows"] / sequences, 4)
    figures["lower_bound_ratio"] = round(figures["lower_bound_rows"] / sequences, 4)
    return figures


def summarize(out, manifest, tasks, seconds, packed):
    packing = manifest["packing"]
    return {
        "records_dir": str(out),
        "kind": PACKED.name,
        "dims": manifest["dims"],
        **{key: packing[key] for key in ("sequences", "rows", "tokens", "ratio", "lower_bound_ratio",
                                         "sequences_per_row", "by_split")},
        "fill": round(packing["tokens"] / max(packing["rows"] * manifest["dims"]["seq"], 1), 4),
        "files": sum(len(task.output_paths()) for task in tasks),
        "bytes": sum(manifest["files"][relative]["bytes"] for task in tasks
                     for relative in task.output_paths().values()),
        "shards": len(tasks),
        "shards_packed": packed,
        "seconds": round(seconds, 3),
        "sequences_per_second": round(packing["sequences"] / seconds, 1) if seconds > 0 else None,
        "formats": manifest["formats"],
    }


def summary_rows(summary, fmts):
    rows = [("records", summary["records_dir"])]
    for split, figures in summary["by_split"].items():
        rows.append((f"sequences ({split})", f"{figures['sequences']:,} in {figures['rows']:,} rows"))
    rows += [
        ("rows / sequences", f"{summary['ratio']:.4f} (lower bound {summary['lower_bound_ratio']:.4f})"),
        ("sequences per row", ", ".join(f"{n}: {count:,}" for n, count in enumerate(summary["sequences_per_row"])
                                        if n and count)),
        ("real tokens", f"{summary['fill']:.1%} of the row slots"),
        ("files", f"{summary['files']} ({', '.join(fmts)})"),
        ("bytes", human_bytes(summary["bytes"])),
        ("shards", (f"{summary['shards']} ({summary['shards_packed']} packed, "
                    f"{summary['shards'] - summary['shards_packed']} already complete)")),
        ("seconds", f"{summary['seconds']:.2f}"),
    ]
    return rows
