"""`bertprep.convert(...)`: TFRecord ⇄ OFRecord ⇄ HDF5 ⇄ Parquet, losslessly (`bertprep/cli/convert.py` is
the command line).

HDF5 and Parquet hold records of a known kind (bertprep.formats.schemas) as
columns; to or from them a file is converted whole through its kind's
columns, in the kind's key order.

Every feature is kept with its values; integer lists become int64_list in
TFRecord and int32_list in OFRecord (values beyond int32 are refused rather
than wrapped). A record of a known kind (bertprep.formats.schemas) is written
in its kind's key order for the target format (for pretraining records, the
reference's for TFRecord and OneFlow's sample's for OFRecord), so converting
OneFlow's sample to TFRecord and back reproduces it byte for byte; other
records keep their stored order.

Nothing is lost on the way: two sources that would write the same output
(`part-0` and `part-0.tfrecord` to TFRecord) are refused before anything is
written, and so is an empty source (an empty OFRecord part stops OneFlow's
reader). A directory is converted as a tree the command holds, its
temporaries in DST/.partial/, renamed into place only once every file has
converted: a bad file anywhere in it leaves no output behind.

An output directory that already holds record files this run would not
write (an earlier convert of other inputs), or a manifest it would not write,
is refused before anything is written: readers of DST would take them with
the converted files. A rerun that writes the same names replaces them.

A records tree (the directory of `bertprep create` or `pack`: manifest.json
and <format>/<split>/ files) converts as a records tree: the files of one of
its formats (checked against the manifest) are written under DST/<to>/<split>/
and DST/manifest.json, written last, lists them in the new format with the
tree's parameters and vocab, so `validate`, the loaders and the trainer read
DST as they read the source. A tree that already holds `to` is refused.
"""

import contextlib
import dataclasses
import os
import tempfile
from typing import Any, ClassVar

import numpy as np

from bertprep import formats, storage
from bertprep.atomic import atomic_open, check_distinct_outputs, hold, sha256_file, temp_path
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder, natural_key
from bertprep.formats import codecs
from bertprep.formats.columnar_io import Unholdable
from bertprep.formats.protowire import WireError
from bertprep.formats.schemas import kind_of_record
from bertprep.options import (
    build_options,
    check_types,
    errors_name_fields,
    normalise_paths,
    refuse_files_above,
    refuse_overlap,
)
from bertprep.progress import Summary
from bertprep.records_manifest import check_records_manifest, file_digests
from bertprep.workdir import MANIFEST, load_manifest, read_manifest, refuse_unlisted, save_manifest

INT32_RANGE = (-(1 << 31), (1 << 31) - 1)
RECORD_NAMES = "*.tfrecord, part-*, *.hdf5 or *.parquet"  # the four formats' names (codecs.of_file_name's)
NOT_RECORD_NAMES = f"not named {RECORD_NAMES}"  # why a plain directory's file was not converted
RECORDS_TREE_STAGES = ("create", "pack")  # the stages whose manifest a records tree (and its convert) carries


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    """`src`, a record file or a directory of them (format detected), converted `to` a format into `dst` (a
    file, or a directory when `src` is one)."""

    src: str
    dst: str
    to: str
    # what a field of one of some names takes (options.check_types names them for a value of another type)
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"to": formats.ALL_FORMATS}

    def __post_init__(self):
        check_types(self)
        normalise_paths(self, "src", "dst", flags=False, outputs=("dst",))
        refuse_overlap(self.dst, [self.src], what="the output")
        if self.to not in formats.ALL_FORMATS:
            raise UsageError(f"--to must be one of {', '.join(formats.ALL_FORMATS)}, not {self.to!r}")


def convert_payload(payload, src_fmt, dst_fmt, where):
    try:
        decoded = formats.decode_payload(payload, src_fmt)
    except WireError as exc:
        raise DataError(f"{where}: {exc}") from None
    # A record of a known kind is written in that kind's key order for the target format.
    kind = kind_of_record({key: stored for key, (stored, _) in decoded.items()})
    canonical = kind.key_order(dst_fmt) if kind is not None else ()
    order = [k for k in canonical if k in decoded] + [k for k in decoded if k not in canonical]
    codec = formats.CODECS[dst_fmt]
    features = []
    for key in order:
        kind, values = decoded[key]
        if kind in ("int32", "int64"):
            kind = codec.INT_KIND
            if kind == "int32" and len(values) and (values.min() < INT32_RANGE[0] or values.max() > INT32_RANGE[1]):
                raise DataError(f"{where}: feature {key!r} has values outside int32; OFRecord int32_list cannot hold "
                                "them")
        elif kind not in codec.FIELD_BY_KIND:
            raise DataError(f"{where}: feature {key!r} is a {kind} list, which {dst_fmt} cannot hold losslessly")
        features.append((key, kind, values if kind == "bytes" else np.asarray(values).tolist() if kind != "float"
                         else values))
    return codec.frame(codec.encode(features))


def convert_columns(src, src_fmt, dst, dst_fmt, staging=None, sha256=None):
    """A whole file through its kind's columns: to or from HDF5 and Parquet (records of a known kind only)."""
    kind, columns = codecs.get(src_fmt).read_columns(src, sha256)
    count = len(columns[kind.names[0]]) if columns else 0
    if count == 0:  # as for an empty framed file: nothing a reader could use, and OneFlow stops on an empty part
        raise DataError(f"{src}: no records to convert (a file of zero rows); nothing was written")
    try:
        codecs.get(dst_fmt).write(dst, columns, kind, staging)
    except Unholdable as exc:  # the writer names the row, not the file it came from
        raise DataError(f"{src}: {exc}") from None
    return count


def convert_file(src, dst, dst_fmt, staging=None, sha256=None):
    src_fmt = formats.sniff_format(src)
    if not codecs.get(src_fmt).framed or not codecs.get(dst_fmt).framed:
        return convert_columns(src, src_fmt, dst, dst_fmt, staging, sha256)
    count = 0
    with atomic_open(dst, staging=staging) as f:
        for index, offset, payload in formats.iter_framed(src, src_fmt, sha256=sha256):
            f.write(convert_payload(payload, src_fmt, dst_fmt, f"{src}: record {index} at byte {offset}"))
            count += 1
    return count


def _is_record_name(path):
    return formats.format_of_name(os.path.basename(path)) is not None


def _tree_pairs(source, listed, target, to, top=None):
    """(src, dst) of every record file of `listed` (the files under the Folder `source`): its directory under
    `target` and its name in `to` (an OFRecord part numbered by its place in its directory, in natural order, as
    create numbers its shards: in name order part-10 came third, so an OFRecord tree of 12 parts converted to
    TFRecord and back had part-2 holding part-10's records, and a create tree's wiki_training_10 became part-2,
    create's own part-2 being wiki_training_2). `top`, a records tree's source format: its directory `<top>/`
    becomes `<to>/`."""
    by_dir: dict = {}
    for path in sorted(filter(_is_record_name, listed), key=natural_key):
        by_dir.setdefault(os.path.dirname(path), []).append(path)
    pairs = []
    for directory, paths in sorted(by_dir.items()):
        relative_dir = source.relpath(directory)
        if top is not None:
            relative_dir = to + relative_dir[len(top):]
        for index, path in enumerate(paths):
            stem = os.path.splitext(os.path.basename(path))[0]
            name = codecs.get(to).file_name(stem, index)
            pairs.append((path, storage.normpath(target.path(relative_dir, name))))
    return pairs


def _refuse_sequence_file(src):
    """A UsageError for a lone source that is a Megatron-Core .bin/.idx (`tokenize`'s output) by its name and
    that no bytes prove a record file: read as records it failed at record 0 with a length of 10^17 bytes."""
    sequences = codecs.of_sequence_file_name(os.path.basename(src))
    if sequences is not None and formats.format_of_bytes(src) is None:
        titles = [codecs.get(name).shown for name in codecs.record_names()]
        raise UsageError(f"{src}: a {sequences.shown} indexed dataset file (token sequences, as tokenize writes "
                         f"them), not records: convert reads {', '.join(titles[:-1])} and {titles[-1]} record files")


def _refuse_misnamed_output(dst, to):
    """A UsageError for a lone output whose name says another format than `to` (`out.tfrecord --to parquet`):
    every reader, convert too, takes a file's format from its name first and failed on the file written. A
    Megatron-Core name (.bin, .idx) is refused for OFRecord only, the one format no bytes prove
    (`proven_by_bytes`)."""
    name = os.path.basename(dst)
    wanted = codecs.get(to)
    named = codecs.of_file_name(name) or (codecs.of_sequence_file_name(name) if not wanted.proven_by_bytes else None)
    if named is None or named.name == to:
        return
    raise UsageError(f"{dst}: the name says {named.shown}, but --to {to} writes {wanted.shown}: readers take a "
                     f"file's format from its name and would read it as {named.shown}; name it {wanted.name_shown}")


UNLISTED_OFRECORD_SUFFIXES = (".ofrecord", ".of_record")  # OneFlow's files by names no directory reader lists


def _refuse_unlisted_ofrecord_name(dst, to):
    """A UsageError for a lone OFRecord output named `*.ofrecord` (or `*.of_record`): the readers of a directory
    list OFRecord files as part-<i> (codecs.OFRECORD; fine-tuning's <role>.of_record-<i>), so `convert x.tfrecord
    out/q.ofrecord` wrote a file that `validate out` and the loaders then said held no records."""
    if to != codecs.OFRECORD.name or not os.path.basename(dst).lower().endswith(UNLISTED_OFRECORD_SUFFIXES):
        return
    raise UsageError(f"{dst}: an OFRecord name that no reader of a directory lists (they list "
                     f"{codecs.OFRECORD.name_shown}, and fine-tuning's <role>.of_record-<i>): validate, the loaders "
                     f"and the trainer given its folder would not see it; name it {codecs.OFRECORD.name_shown}")


STAGE_OUTPUT_DEPTH = 3  # a records tree's files lie in <root>/<format>/<split>/: its manifest 2 folders up


def _refuse_inside_a_stage_output(dst):
    """A UsageError for a lone output inside a stage's output folder (its manifest up to STAGE_OUTPUT_DEPTH folders
    above): `convert x.tfrecord RECORDS/ofrecord/training/part-9` wrote a file that manifest does not list, and every
    reader of the folder then refused it as unlisted (or, over a listed file, as changed since written)."""
    folder = storage.parent(storage.absolute(dst))
    for _ in range(STAGE_OUTPUT_DEPTH):
        if folder is None:
            return
        if Folder(folder).isfile(MANIFEST):
            stage = (read_manifest(storage.join(folder, MANIFEST))[0] or {}).get("stage")
            if stage:
                raise UsageError(f"{dst}: inside the output of bertprep {stage} "
                                 f"({storage.display(storage.join(folder, MANIFEST))} lists its files, and would not "
                                 "list this one): write it elsewhere, or convert the whole folder")
        folder = storage.parent(folder)


def _records_tree_format(manifest, src, to):
    """The format a records tree's files are read from, or None where `manifest` is not a records tree's (a
    `create` or `pack` manifest listing each file under its format's directory)."""
    if not manifest or manifest.get("stage") not in RECORDS_TREE_STAGES:
        return None
    entries = manifest.get("files") or {}
    if not entries or any(name.split("/")[0] != entry.get("format") for name, entry in entries.items()):
        return None  # NVIDIA's --layout (no format directory): converted as a plain tree
    held = [fmt for fmt in manifest.get("formats") or [] if any(e.get("format") == fmt for e in entries.values())]
    if to in held:
        raise UsageError(f"{src}: a records tree that already holds its records as {to} ({storage.join(src, to)}); "
                         "nothing to convert (copy the tree, or convert another format)")
    return held[0] if held else None


def _finetuning_names(manifest, src, to):
    """The files a fine-tuning output's records are read from (create-squad, create-glue: `train.tf_record`,
    `eval.of_record-0`, …, a split's records the same in each format it was written in): each split's in the
    first format it holds; None where `manifest` is no such output's. Converted as a plain directory, each split
    came out once per format held, and OFRecord parts lost their split's name (part-0 … part-5 of three splits)."""
    if not manifest or manifest.get("stage") not in ("create-squad", "create-glue"):
        return None
    entries = sorted((manifest.get("files") or {}).items())
    by_split: dict = {}
    for name, entry in entries:
        by_split.setdefault(entry.get("split"), []).append((name, entry.get("format")))
    already = [name for name, entry in entries if entry.get("format") == to]
    if already:
        lacking = [name for files in by_split.values() if all(format_ != to for _name, format_ in files)
                   for name, _format in files]
        what = ("nothing to convert (convert one of its other files, or another format)" if not lacking else
                f"convert the other splits' files on their own ({', '.join(lacking)})")
        raise UsageError(f"{src}: fine-tuning records ({manifest['stage']}) that it holds as {to} already "
                         f"({', '.join(already)}); {what}")
    chosen = []
    for files in by_split.values():  # a later run for another split may have written other formats
        held = [fmt for fmt in codecs.finetuning_names() if any(format_ == fmt for _name, format_ in files)]
        chosen += [name for name, format_ in files if held and format_ == held[0]]
    return chosen


def _finetuning_files(source, listed, names, manifest):
    """The files of `listed` named in `names` (its manifest's, `_finetuning_names`); a DataError for one listed
    in the manifest that is not there (its split would be left out, its other format's copy called the same)."""
    chosen = [path for path in listed if source.relpath(path) in names]
    missing = sorted(set(names) - {source.relpath(path) for path in chosen})
    if missing:
        raise DataError(f"{source.display(missing[0])}: listed in {source.display(MANIFEST)} but not there: "
                        f"restore it, or rerun {manifest['stage']}")
    return chosen


def _refuse_copies_below(source, listed, src):
    """A UsageError for a plain directory holding a stage's output (create, pack, create-squad, create-glue) whose
    manifest lists its records in more than one format: `convert WORKDIR/records out` converted both copies,
    each record twice (1,266 of a tree's 633), under `tfrecord/` and `ofrecord/` directories holding neither."""
    for path in listed:
        if os.path.basename(path) != MANIFEST or source.relpath(path) == MANIFEST:
            continue
        manifest, _problem = read_manifest(path)
        by_split: dict = {}  # a split's formats (a later fine-tuning run for another split may write another)
        for entry in ((manifest or {}).get("files") or {}).values():
            if isinstance(entry, dict) and entry.get("format"):
                by_split.setdefault(entry.get("split"), set()).add(entry["format"])
        held = sorted(next((formats_ for formats_ in by_split.values() if len(formats_) > 1), ()))
        if held and (manifest or {}).get("stage") in ("create", "pack", "create-squad", "create-glue"):
            below = storage.display(os.path.dirname(path))
            raise UsageError(f"{src}: holds {below}, a {manifest['stage']} output whose {' and '.join(held)} files "
                             "are the same records (converted together, each record would be written twice): "
                             f"convert {below} on its own")


def _finetuning_pairs(paths, target, to):
    """(src, dst) of each fine-tuning file: its role's name in `to` (`predict.tf_record` -> `test.of_record-0`;
    to a format without fine-tuning names, `test.parquet`)."""
    pairs = []
    for path in paths:
        codec, name = codecs.of_file_name(os.path.basename(path)), os.path.basename(path)
        role = next(role for role, _stem in codec.task_stems if codec.task_file(role) == name)
        wanted = codecs.get(to)
        out = wanted.task_file(role) if wanted.task_stems else wanted.file_name(role, 0)
        pairs.append((path, storage.normpath(target.path(out))))
    return pairs


def _records_tree_manifest(manifest, source, target, pairs, to, outputs):
    """The converted tree's manifest: the source's, its files those of `pairs` under their new names in `to`
    with the (bytes, sha256) of `outputs`."""
    files = {}
    for (src, dst), (size, digest) in zip(pairs, outputs):
        entry = dict(manifest["files"][source.relpath(src)])
        entry.update(format=to, bytes=size, sha256=digest)
        files[target.relpath(dst)] = entry
    return {**manifest, "formats": [to], "files": files}


def _refuse_strays(target, pairs, writes_manifest):
    """A DataError, before anything is written, for the first record file (any format's name) or manifest in
    the output tree `target` that this run does not write: readers of it would take an earlier run's files
    with the converted ones (a convert of 5 files then of 1 left part-1..part-4 of the first beside the new
    part-0). A rerun writing the same names replaces them."""
    if not target.isdir():
        return
    ours = {storage.normpath(dst) for _src, dst in pairs}
    for path in target.files():
        name = os.path.basename(path)
        if storage.normpath(path) in ours:
            continue
        if _is_record_name(path):
            raise DataError(f"{storage.display(path)}: a record file this convert does not write (of an earlier "
                            f"run?): readers of {target.display()} would read it with the converted files; remove "
                            "it or choose another output")
        if name == MANIFEST and target.relpath(path) == MANIFEST and not writes_manifest:
            raise DataError(f"{storage.display(path)}: a manifest this convert does not write (of an earlier "
                            f"run?): readers of {target.display()} would check the converted files against it; "
                            "remove it or choose another output")
        if name == MANIFEST and target.relpath(path) == MANIFEST and (
                stage := (load_manifest(target) or {}).get("stage")) not in RECORDS_TREE_STAGES:
            # a records tree's convert replaces it: a shard folder's manifest went, its text shards left unlisted
            raise DataError(f"{storage.display(path)}: a manifest of bertprep {stage or 'another tool'}, not of a "
                            "records tree: convert would replace it; choose another output")


def convert_all(pairs, dst_fmt, staging, digests=None, hashes=None):
    """Each (src, dst) converted; the records of each. A tree's files (`staging` given) are all converted in
    `staging` first and renamed into place only when every one succeeded, so a bad file late in a tree leaves
    none of its outputs behind. `digests` ({normalised source path: sha256}, its manifest's): each source's
    bytes are checked as they are read. `hashes`, a list: (bytes, sha256) of each output appended (a tree's)."""
    digests = digests or {}
    if staging is None:
        return [convert_file(src, dst, dst_fmt, sha256=digests.get(storage.normpath(src))) for src, dst in pairs]
    if not storage.renames(staging):  # a store has no rename: the tree is staged here, each object uploaded whole after
        with tempfile.TemporaryDirectory(prefix="bertprep-convert-", dir=storage.spool_dir()) as local:
            return _convert_staged(pairs, dst_fmt, local, storage.upload, digests, hashes)
    return _convert_staged(pairs, dst_fmt, staging, _rename_into_place, digests, hashes)


def _convert_staged(pairs, dst_fmt, staging, place, digests, hashes=None):
    """Convert every pair into `staging`, then `place(temporary, dst)` each once all succeeded."""
    staged = [temp_path(staging, dst) for _src, dst in pairs]
    counts = [convert_file(src, tmp, dst_fmt, staging, digests.get(storage.normpath(src)))
              for (src, _dst), tmp in zip(pairs, staged)]
    if hashes is not None:
        hashes.extend((os.path.getsize(tmp), sha256_file(tmp)) for tmp in staged)
    for tmp, (_src, dst) in zip(staged, pairs):
        place(tmp, dst)
    return counts


def _rename_into_place(tmp, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.replace(tmp, dst)


def convert(options: ConvertOptions | None = None, /, **fields: Any) -> Summary:
    """Convert `options.src` (or ConvertOptions(**fields)); a tree is written whole or not at all. The Summary
    lists each file (`files`: src, dst, records) and the records in all."""
    options = build_options(ConvertOptions, options, fields)  # not both (a keyword beside one was ignored)
    src, dst, to = options.src, options.dst, options.to
    source, target = Folder(src), Folder(dst)  # a tree each, or a file each
    listed = source.files() if source.isdir() else []  # listed once: a store's listing is a request
    manifest, top, tuning = None, None, None
    if source.isdir():
        refuse_files_above(options, "dst", flags=False, folders=("dst",))  # a tree's output is a directory
        manifest = load_manifest(source)
        top = _records_tree_format(manifest, src, to)
        tuning = None if top is not None else _finetuning_names(manifest, src, to)
        if top is not None:  # a records tree: its files of one format, each one its manifest lists
            check_records_manifest(manifest, source.path(MANIFEST), [top])
            chosen = [path for path in listed
                      if _is_record_name(path) and source.relpath(path).replace(os.sep, "/").split("/")[0] == top]
            refuse_unlisted(source, [source.relpath(path) for path in chosen], "bertprep convert")
        elif tuning is not None:  # fine-tuning records: each split's files of one format, named by their role
            chosen = _finetuning_files(source, listed, tuning, manifest)
        else:
            _refuse_copies_below(source, listed, src)
            chosen = listed
        pairs = (_finetuning_pairs(chosen, target, to) if tuning is not None
                 else _tree_pairs(source, chosen, target, to, top))
        if not pairs:
            raise DataError(f"{src}: no record files ({RECORD_NAMES}) found{_what_it_holds(manifest)}")
        if target.isfile():  # it failed while holding the output: "x.parquet: Not a directory"
            raise UsageError(f"{dst}: is a file, and {src} is a directory; give an output directory")
        tree: contextlib.AbstractContextManager = hold(dst, "bertprep convert")
    elif source.isfile():
        refuse_files_above(options, "dst", flags=False, files=("dst",))  # a lone file's output is a file
        if target.isdir():
            raise UsageError(f"{dst}: is a directory; give an output file name")
        if dst.endswith(("/", os.sep)):  # a directory to be: written as a file, it failed "ydir/: Not a directory"
            raise UsageError(f"{dst}: names a directory (it ends in /), and {src} is one file; give an output file "
                             "name")
        _refuse_sequence_file(src)
        _refuse_misnamed_output(dst, to)
        _refuse_unlisted_ofrecord_name(dst, to)
        _refuse_inside_a_stage_output(dst)
        pairs = [(src, dst)]
        tree = contextlib.nullcontext(None)  # a lone file stages beside itself
    else:
        raise source.not_found(DataError(f"{src}: not found"))
    check_distinct_outputs(pairs)
    for path, _dst in pairs:
        if Folder(path).getsize() == 0:
            raise DataError(f"{path}: empty file, no records to convert (an empty OFRecord part stops OneFlow's "
                            "reader); nothing was written")
    if source.isdir():
        _refuse_strays(target, pairs, writes_manifest=top is not None)
    created = not target.exists()
    hashes: list = []
    try:
        with tree as staging:
            digests = file_digests(manifest, source) if source.isdir() else {}
            counts = convert_all(pairs, to, staging, digests, hashes)
            if top is not None:  # last: the manifest vouches for files already in place
                save_manifest(target, _records_tree_manifest(manifest, source, target, pairs, to, hashes))
    except BaseException:
        # the tree's root, made to hold it: left empty, not left behind (a URL's prefix is no directory)
        if created and target.reads_in_place and os.path.isdir(dst):
            with contextlib.suppress(OSError):
                os.rmdir(dst)
        raise
    files = [{"src": storage.display(path), "dst": storage.display(out), "records": count}
             for (path, out), count in zip(pairs, counts)]
    if tuning is not None:  # its other formats' files hold the same records; the rest are no records
        left = [storage.display(path) for path in listed if path not in chosen]
    elif top is None:  # said, not skipped silently
        left = [storage.display(path) for path in listed if not _is_record_name(path)]
    else:  # a records tree: what its manifest does not list (its other formats hold the same records)
        left = [storage.display(path) for path in listed
                if source.relpath(path) != MANIFEST and source.relpath(path) not in (manifest or {})["files"]]
    why = ("the same records as a file converted, or no records" if tuning is not None else
           NOT_RECORD_NAMES if top is None else f"not listed in {source.display(MANIFEST)}")
    fields = {"to": to, "files": files, "records": sum(counts), "not_converted": left, "not_converted_why": why,
              "records_tree_from": top}  # a records tree's source format (None: a file, or a plain directory)
    return Summary("bertprep convert: done", fields,
                   (("records", sum(counts)), ("files", len(files)), ("to", to),
                    *((("records tree", f"its {top} files, and {MANIFEST}"),) if top else ()),
                    *((("not converted", f"{_first_few(left)} ({why})"),) if left else ())))


# What the output of a stage that writes no records holds, and how records are made of it.
FROM_DOCUMENTS = "shard it, run `bertprep create` on the shards and convert their records"
NOT_RECORDS = {"shard": ("text shards", "run `bertprep create` on it and convert its records"),
               "download": ("formatted documents", FROM_DOCUMENTS), "format": ("formatted documents", FROM_DOCUMENTS),
               "dedup": ("deduplicated documents", FROM_DOCUMENTS),
               "tokenize": ("token sequences (Megatron-Core .bin/.idx)",
                            "run `bertprep create` on the text shards it was tokenized from")}


def _what_it_holds(manifest):
    """For a directory of no record files, what its stage's manifest says it is: `convert WORKDIR/sharded/wiki`
    said only "no record files found", as of an empty folder."""
    stage = (manifest or {}).get("stage")
    if stage not in NOT_RECORDS:
        return ""
    held, remedy = NOT_RECORDS[stage]
    return f": a bertprep {stage} output ({held}), not records: {remedy}"


def _first_few(names, shown=3):
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
