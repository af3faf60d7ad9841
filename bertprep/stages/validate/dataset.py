"""A records dataset as a whole: finding its files, file-level checks, the manifest, statistics.

A dataset is what one PATH holds: record files of either or both formats
(found by walking it), its `manifest.json` if `bertprep create` wrote one,
OFRecord part directories. Files are checked in parallel (one task per file);
the per-file results are merged here, in file order, so the report does not
depend on the number of workers.
"""

import concurrent.futures
import dataclasses
import multiprocessing
import os
import re

from bertprep import formats, storage
from bertprep.errors import DataError
from bertprep.folder import Folder, natural_key
from bertprep.formats import codecs
from bertprep.formats.schemas import kind_of_manifest
from bertprep.progress import Progress
from bertprep.records_manifest import records_manifest_problems
from bertprep.stages.validate.finetune import FINETUNE_KINDS
from bertprep.stages.validate.records import RULES, Finding, Findings, RecordSpec, scan_file
from bertprep.workdir import MANIFEST, SPLITS, read_manifest

DATASET_CHECKS: dict[str, str] = {
    "files": "part-<i> numbered from 0 without gaps, none empty, at least --min-parts",
    "manifest": "manifest files, counts, bytes and sha256 match; parameters match the records",
    "consistency": "the same record kind and lengths in every file; both formats hold the same counts",
}
# OFRecord parts: part-<i> (pretraining), <split>.of_record-<i> (OneFlow-Benchmark's fine-tuning sets)
_PART = re.compile(r"^(part|.+\.of_record)-(\d+)$")


@dataclasses.dataclass
class RecordFile:
    path: str
    fmt: str
    split: str


def find_record_files(path):
    """Record files under `path` (or `path` itself) in natural order: tfrecord files, then OFRecord parts."""
    tree = Folder(path)
    if tree.isfile():
        return [RecordFile(path, formats.sniff_format(path), _split_of(path))]
    found = []
    for root, dirs, files in tree.walk():  # sorted, without .partial/ and other hidden directories
        for name in files:
            full = storage.join(root, name)
            if formats.format_of_name(name) is not None:
                found.append(RecordFile(full, _sniff(full), _split_of(full)))
    found.sort(key=lambda f: (formats.ALL_FORMATS.index(f.fmt), SPLITS.index(f.split) if f.split in SPLITS else 2,
                              natural_key(f.path)))
    return found


def misnamed_record_files(path):
    """[(file, format)] under the directory `path` whose first bytes are HDF5's or Parquet's magic or a TFRecord
    header (its length's CRC), named as no format (`g1.h5`): every reader finds records by name, so validate
    checked none of them; said, not passed over. An OFRecord part has no magic to be known by."""
    tree = Folder(path)
    if not tree.isdir():
        return []
    found = []
    for root, dirs, files in tree.walk():  # sorted, without .partial/ and other hidden directories
        for name in files:
            full = storage.join(root, name)
            fmt = None if formats.format_of_name(name) is not None else _format_of_bytes(full)
            if fmt is not None:
                found.append((full, fmt))
    return sorted(found, key=lambda item: natural_key(item[0]))


def _format_of_bytes(path):
    try:
        return formats.format_of_bytes(path)
    except OSError:  # unreadable: nothing to tell
        return None


def _sniff(path):
    try:
        return formats.sniff_format(path)
    except OSError:  # unreadable: what its name says (it is listed as a records file by its name)
        return formats.format_of_name(os.path.basename(path))


# Fine-tuning files name their split: train/eval/predict.tf_record, train/eval/test.of_record-<i> (predict = test).
_FINETUNE_FILE = re.compile(r"^(train|eval|predict|test)\.(tf_record|of_record-\d+)$")


def _split_of(path):
    finetune = _FINETUNE_FILE.match(os.path.basename(path))
    if finetune:
        return "test" if finetune.group(1) == "predict" else finetune.group(1)
    parts = storage.absolute_normpath(path).split(os.sep)  # "./part-0" inside training/: a training file
    for part in reversed(parts[:-1]):
        if part in SPLITS:
            return part
    name = os.path.basename(path)
    for split in SPLITS:
        if f"_{split}_" in name or f"_{split}." in name:
            return split
    return "all"


def find_manifest(path):
    """The manifest of a records stage (create, pack, create-squad, ...) at or above `path`, or None.

    A relative `path` climbs by its absolute path (_folders_above): "." has no folder above it by its name, and
    validate run inside a split folder found no manifest and checked no sha256.
    """
    for directory in _folders_above(path if Folder(path).isdir() else os.path.dirname(path)):
        folder = Folder(directory)
        candidate = folder.path(MANIFEST)
        if folder.isfile(MANIFEST):
            manifest, problem = read_manifest(candidate)
            if problem:
                return {"_path": candidate, "_error": problem}
            if manifest.get("stage") == "create" or "kind" in manifest or file_kinds(manifest):
                problems = records_manifest_problems(manifest, candidate)  # fields every reader checks: not used if bad
                if problems:
                    return {"_path": candidate, "_error": "; ".join(map(": ".join, problems)), "_problems": problems}
                return {**manifest, "_path": candidate}
    return None


def _folders_above(directory):
    """`directory` and up to three folders above it, each named as the path was given: by climbing its names;
    a relative one by its absolute path, each folder named as the names' climb named it where that reached it
    (`./manifest.json`), else relative to the working directory (`../../manifest.json`, the climb from ".")."""
    by_name = _climb(directory)
    if not storage.named_from_the_working_directory(directory):
        return by_name
    named = {}
    for name in by_name:
        named.setdefault(storage.absolute_normpath(name), name)
    return [named.get(folder, os.path.relpath(folder)) for folder in _climb(storage.absolute_normpath(directory))]


def _climb(directory, folders=4):
    """`directory` and the folders above it by storage.parent, `folders` in all at most."""
    climbed = [directory]
    while len(climbed) < folders and storage.parent(climbed[-1]) is not None:
        climbed.append(storage.parent(climbed[-1]))
    return climbed


def dataset_roots(path, record_files):
    """The datasets under `path` as (root, its record files; None: all under root): each directory below it with a
    create manifest, else `path` itself; then `path` with those of `record_files` (all under `path`) that no such
    directory holds. Those were checked by none: a truncated records file beside a create output was SOUND."""
    tree = Folder(path)
    if tree.isfile() or find_manifest(path) is not None:
        return [(path, None)]
    roots = []
    for root, dirs, files in tree.walk():  # sorted, without .partial/ and other hidden directories
        if MANIFEST in files and find_manifest(root) is not None and find_record_files(root):
            roots.append(root)
            dirs[:] = []
    if not roots:
        return [(path, None)]
    inside = tuple(os.path.join(storage.absolute_normpath(root), "") for root in roots)
    outside = [f for f in record_files if not storage.absolute_normpath(f.path).startswith(inside)]
    return [(root, None) for root in roots] + ([(path, outside)] if outside else [])


def manifest_params(manifest):
    """(kind, dims, masked_lm_prob, whole_word_mask) a records manifest declares (None where absent).

    Manifests name the kind and its dimensions; create's manifests from before
    kinds were recorded hold pretraining records sized by their params.
    """
    if not manifest or "_error" in manifest:
        return None, None, None, None
    params = manifest.get("params") or {}
    where = manifest.get("_path", MANIFEST)
    if "kind" not in manifest and file_kinds(manifest):  # a fine-tuning directory: a kind per file, checked per file
        for name in file_kinds(manifest).values():
            kind_of_manifest({"kind": name}, where)
        return None, manifest.get("dims"), None, None
    kind = kind_of_manifest(manifest, where)
    dims = manifest.get("dims")
    if dims is None and "max_seq_length" in params:
        dims = {"seq": params["max_seq_length"], "pred": params.get("max_predictions_per_seq")}
    return kind, dims, params.get("masked_lm_prob"), params.get("whole_word_mask")


def file_kinds(manifest):
    """{file: record kind} where a manifest names the kind of each file (create-squad, create-glue), else {}."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        return {}
    return {name: entry["kind"] for name, entry in files.items() if isinstance(entry, dict) and "kind" in entry}


# ---------------------------------------------------------------- scanning


def _scan(task):
    record_file, spec, want_sha256 = task
    report = scan_file(record_file.path, record_file.fmt, record_file.split, spec)
    if want_sha256:
        report.sha256 = _sha256(record_file.path)
    return report


def _sha256(path):
    return storage.sha256(path, 1 << 22)


def scan_files(record_files, spec, workers=1, want_sha256=False, quiet=True):
    """FileReports for every file, in the given order; parallel over files."""
    progress = Progress("validate", total=len(record_files), unit="files", quiet=quiet)
    tasks = [(f, spec, want_sha256) for f in record_files]
    reports = []
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            reports.append(_scan(task))
            progress.advance(1, records=reports[-1].records)
    else:
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            try:
                for report in pool.map(_scan, tasks):
                    reports.append(report)
                    progress.advance(1, records=report.records)
            except concurrent.futures.process.BrokenProcessPool:  # was its traceback, "A process in the
                # process pool was terminated abruptly", the file being checked not named
                raise DataError(f"a worker process died with {len(tasks) - len(reports)} of {len(tasks)} record "
                                "files unchecked (killed: the kernel's OOM killer, when memory runs out?); rerun, "
                                "with fewer --workers if memory ran out") from None
    progress.close()
    return reports


# ---------------------------------------------------------------- the dataset


@dataclasses.dataclass
class DatasetResult:
    root: str
    files: list
    reports: list
    findings: Findings
    stats: dict  # (fmt, split) -> the kind's statistics
    kind: str  # the record kind's name (None when no record could be read)
    dims: dict
    manifest: str | None = None
    spec: RecordSpec | None = None
    kinds: list | None = None  # the record kinds' names: one, or a fine-tuning directory's kind per split


def validate_records(root, spec, workers=1, min_parts=1, quiet=True, record_files=None):
    """Check every record file under `root` (or `record_files` of it, which no manifest lists), the files as a set,
    and the manifest."""
    manifest = find_manifest(root) if record_files is None else None
    record_files = find_record_files(root) if record_files is None else record_files
    findings = Findings(spec.max_errors)
    if manifest is not None and "_error" in manifest:  # first: its values unused, the records are checked by
        _report_damaged_manifest(manifest, findings)  # defaults, and their failures had pushed it off the listing
    spec = resolve_spec(spec, manifest)
    reports = scan_files(record_files, spec, workers, want_sha256=manifest is not None, quiet=quiet)
    for report in reports:
        findings.extend(report.findings)
    _check_parts(record_files, reports, min_parts, findings)
    shapes = _check_consistency(reports, findings, one_kind=not _holds_kind_per_split(manifest, reports))
    kind, dims = ("+".join(shapes), next(iter(shapes.values()))) if shapes else (None, None)
    if manifest is not None and "_error" not in manifest:
        _check_manifest(manifest, root, record_files, reports, (kind, dims), findings)
    stats = {}
    for report in reports:
        if report.stats is None or shapes.get(report.kind) != report.dims:
            continue
        key = (report.fmt, report.split)
        if key not in stats:
            stats[key] = RULES[report.kind].new_stats(report.dims)
        stats[key].merge(report.stats)
    _check_format_counts(reports, findings)
    return DatasetResult(root, record_files, reports, findings, stats, kind, dims,
                         manifest.get("_path") if manifest else None, spec, list(shapes))


def resolve_spec(spec, manifest):
    """Fill what flags left open (None) from the manifest, else the reference's defaults.

    The kind and dimensions stay open (learned from each file's records): the
    manifest's are compared with the records' in _check_manifest instead.
    """
    _kind, _dims, m_prob, m_wwm = manifest_params(manifest)
    prob = spec.masked_lm_prob if spec.masked_lm_prob is not None else m_prob if m_prob is not None else 0.15
    wwm = spec.whole_word_mask if spec.whole_word_mask is not None else bool(m_wwm)
    labels = (manifest or {}).get("labels")
    num_labels = spec.num_labels if spec.num_labels is not None else len(labels) if isinstance(labels, list) else None
    return dataclasses.replace(spec, masked_lm_prob=prob, whole_word_mask=wwm, num_labels=num_labels)


def _check_parts(record_files, reports, min_parts, findings):
    if reports and not any(report.bytes for report in reports):
        # an empty shard beside full ones is a warning; a dataset of nothing trains on nothing: not SOUND (a
        # file of bytes without a readable record fails its framing already)
        where = record_files[0].path if len(record_files) == 1 else os.path.commonpath([f.path for f in record_files])
        findings.add(Finding("files", where, None, None, f"no records in the {len(reports)} file(s) given: "
                             "nothing to train on"))
    by_dir = {}
    for record_file, report in zip(record_files, reports):
        if report.bytes == 0:
            problem = codecs.get(record_file.fmt).empty_file_problem
            severity, why = ("error", problem) if problem else ("warning", "a shard without instances")
            findings.add(Finding("files", record_file.path, None, None, f"empty file ({why})", severity))
        match = _PART.match(os.path.basename(record_file.path))
        if match:
            by_dir.setdefault((os.path.dirname(record_file.path), match.group(1)), []).append(int(match.group(2)))
    for (directory, prefix), numbers in by_dir.items():
        present = set(numbers)
        for missing in sorted(set(range(max(numbers) + 1)) - present):
            findings.add(Finding("files", os.path.join(directory, f"{prefix}-{missing}"), None, None,
                                 f"missing: parts must be {prefix}-0 … {prefix}-{max(numbers)} without gaps "
                                 f"(OneFlow reads {prefix}-0 … {prefix}-<data_part_num - 1>)"))
        if len(present) < min_parts:
            findings.add(Finding("files", directory, None, None,
                                 f"{len(present)} parts, fewer than --min-parts {min_parts} "
                                 "(OneFlow needs data_part_num ≥ reader ranks)"))


def _holds_kind_per_split(manifest, reports):
    """A fine-tuning directory: its manifest names a kind per file, or every kind in it is a fine-tuning kind."""
    if manifest is not None and "_error" not in manifest and "kind" not in manifest and file_kinds(manifest):
        return True
    kinds = {r.kind for r in reports if r.kind is not None}
    return bool(kinds) and kinds <= set(FINETUNE_KINDS)


def _check_consistency(reports, findings, one_kind=True):
    """{kind: dims} of the dataset; findings where a file differs.

    A dataset holds one kind with one set of dimensions; a fine-tuning
    directory (one_kind False) holds a kind per split, each kind with one set
    of dimensions and every kind with the same seq.
    """
    shaped = [r for r in reports if r.kind is not None and r.dims is not None]
    if not shaped:
        return {}
    first_of_kind = {}
    for report in shaped:
        reference = first_of_kind.setdefault(report.kind, report) if not one_kind else shaped[0]
        if (report.kind, report.dims) != (reference.kind, reference.dims):
            findings.add(Finding("consistency", report.path, None, None,
                                 f"{describe_shape(report.kind, report.dims)}, expected "
                                 f"{describe_shape(reference.kind, reference.dims)} as in {reference.path}"))
    if one_kind:
        return {shaped[0].kind: shaped[0].dims}
    first = shaped[0]
    for kind, report in first_of_kind.items():
        if report.dims.get("seq") != first.dims.get("seq"):
            findings.add(Finding("consistency", report.path, None, None,
                                 f"{describe_shape(kind, report.dims)}, expected seq {first.dims.get('seq')} "
                                 f"as in {first.path} (the splits of one task share seq)"))
    return {kind: report.dims for kind, report in first_of_kind.items()}


def describe_shape(kind, dims):
    """A kind and its dimensions for messages and the table, e.g. `pretraining seq 128, pred 20`; `kind
    unknown` where no record was read."""
    if kind is None:
        return "kind unknown"
    return f"{kind} " + ", ".join(f"{name} {value}" for name, value in (dims or {}).items())


def _check_format_counts(reports, findings):
    counts = {}
    for report in reports:
        key = (report.fmt, report.split)
        counts[key] = counts.get(key, 0) + report.records
    fmts = sorted({fmt for fmt, _ in counts}, key=formats.ALL_FORMATS.index)
    if len(fmts) < 2:
        return
    for split in sorted({split for _, split in counts}):
        a, b = counts.get((fmts[0], split), 0), counts.get((fmts[1], split), 0)
        if a != b:
            findings.add(Finding("consistency", split, None, None,
                                 f"{fmts[0]} holds {a:,} records, {fmts[1]} {b:,}: both formats must hold the same "
                                 "instances"))


def _report_damaged_manifest(manifest, findings):
    path = manifest["_path"]
    for field, problem in manifest.get("_problems", []):  # a field no reader would accept: the rest unchecked
        findings.add(Finding("manifest", path, None, field, problem))
    if "_problems" not in manifest:
        findings.add(Finding("manifest", path, None, None, f"unreadable: {manifest['_error']}"))


def _check_manifest(manifest, root, record_files, reports, shape, findings):
    path = manifest["_path"]
    base = os.path.dirname(path)
    entries = manifest.get("files") or {}
    # matched by absolute path: the manifest above "." is named `../../manifest.json`, its files under it, and the
    # records as found under "." (`./part-0`); a finding names the record file as found
    by_path = {storage.absolute_normpath(f.path): (f, r) for f, r in zip(record_files, reports)}
    listed = set()
    for relative, entry in sorted(entries.items(), key=lambda item: natural_key(item[0])):
        full = storage.normpath(storage.join(base, relative))
        listed.add(storage.absolute_normpath(full))
        record_file, report = by_path.get(storage.absolute_normpath(full), (None, None))
        if report is None:
            if not storage.exists(full):
                findings.add(Finding("manifest", full, None, None, "listed in manifest.json but missing"))
            continue
        full = record_file.path
        if entry.get("bytes") is not None and entry["bytes"] != report.bytes:
            findings.add(Finding("manifest", full, None, None,
                                 f"{report.bytes:,} bytes, manifest.json says {entry['bytes']:,}"))
        if entry.get("sha256") and entry["sha256"] != getattr(report, "sha256", None):
            findings.add(Finding("manifest", full, None, None,
                                 f"sha256 {getattr(report, 'sha256', '?')[:16]}…, manifest.json says "
                                 f"{entry['sha256'][:16]}…"))
        listed_records = entry.get("instances", entry.get("records"))  # create says instances, fine-tuning records
        if listed_records is not None and listed_records != report.records:
            findings.add(Finding("manifest", full, None, None,
                                 f"{report.records:,} records, manifest.json says {listed_records:,}"))
        if entry.get("format") and entry["format"] != report.fmt:
            findings.add(Finding("manifest", full, None, None, f"{report.fmt}, manifest.json says {entry['format']}"))
        _check_entry_split(full, entry, record_file.split, findings)
        m_dims = manifest.get("dims")
        if entry.get("kind") and report.kind is not None and (entry["kind"], m_dims) != (report.kind, report.dims):
            findings.add(Finding("manifest", full, None, None,
                                 f"{describe_shape(report.kind, report.dims)}, manifest.json says "
                                 f"{describe_shape(entry['kind'], m_dims)}"))
    for relative, entry in sorted((manifest.get("metadata") or {}).items()):  # SQuAD eval's JSON lines
        full = storage.normpath(storage.join(base, relative))
        if not storage.isfile(full):
            findings.add(Finding("manifest", full, None, None, "listed in manifest.json but missing"))
            continue
        held = (storage.getsize(full), _sha256(full))  # read once: an object's bytes come over the network
        if held != (entry.get("bytes"), entry.get("sha256")):
            findings.add(Finding("manifest", full, None, None,
                                 f"{held[0]:,} bytes, sha256 {held[1][:16]}…; manifest.json says "
                                 f"{entry.get('bytes', 0):,} bytes, sha256 {str(entry.get('sha256'))[:16]}…"))
    for record_file in record_files:
        if storage.absolute_normpath(record_file.path) not in listed:
            findings.add(Finding("manifest", record_file.path, None, None,
                                 "not listed in manifest.json (an unfinished or stray file)"))
    m_kind, m_dims, _, _ = manifest_params(manifest)
    kind, dims = shape
    if m_kind is not None and kind is not None and (m_kind.name, m_dims) != (kind, dims) and m_dims is not None:
        findings.add(Finding("manifest", path, None, None,
                             f"{describe_shape(m_kind.name, m_dims)}, the records hold {describe_shape(kind, dims)}"))


def _check_entry_split(full, entry, split, findings):
    """A file in test/ that its manifest entry puts in training (or the other way): pack takes the manifest's
    split, the loaders that glob a split's directory the directory's, so one of them trains on test records."""
    if entry.get("split") in SPLITS and split in SPLITS and entry["split"] != split:
        findings.add(Finding("manifest", full, None, None,
                             f"a {split} file (its directory), manifest.json says split {entry['split']}"))
