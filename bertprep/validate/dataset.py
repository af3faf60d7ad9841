"""A records dataset as a whole: finding its files, file-level checks, the manifest, statistics.

A dataset is what one PATH holds: record files of either or both formats
(found by walking it), its `manifest.json` if `bertprep create` wrote one,
OFRecord part directories. Files are checked in parallel (one task per file);
the per-file results are merged here, in file order, so the report does not
depend on the number of workers.
"""

import concurrent.futures
import dataclasses
import hashlib
import multiprocessing
import os
import re

import numpy as np

from bertprep import formats
from bertprep.progress import Progress
from bertprep.validate.records import Finding, Findings, RecordSpec, Stats, scan_file
from bertprep.atomic import walk
from bertprep.workdir import MANIFEST, SPLITS, read_manifest

DATASET_CHECKS = {
    "files": "part-<i> numbered from 0 without gaps, none empty, at least --min-parts",
    "manifest": "manifest files, counts, bytes and sha256 match; parameters match the records",
    "consistency": "the same seq/pred in every file; both formats hold the same counts",
}
_PART = re.compile(r"^part-(\d+)$")


def natural_key(path):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


@dataclasses.dataclass
class RecordFile:
    path: str
    fmt: str
    split: str


def find_record_files(path):
    """Record files under `path` (or `path` itself) in natural order: tfrecord files, then OFRecord parts."""
    if os.path.isfile(path):
        return [RecordFile(path, formats.sniff_format(path), _split_of(path))]
    found = []
    for root, dirs, files in walk(path):  # sorted, without .partial/ and other hidden directories
        for name in files:
            full = os.path.join(root, name)
            if name.endswith(".tfrecord"):
                found.append(RecordFile(full, "tfrecord", _split_of(full)))
            elif _PART.match(name):
                found.append(RecordFile(full, _sniff(full), _split_of(full)))
    order = {"tfrecord": 0, "ofrecord": 1}
    found.sort(key=lambda f: (order[f.fmt], SPLITS.index(f.split) if f.split in SPLITS else 2, natural_key(f.path)))
    return found


def _sniff(path):
    try:
        return formats.sniff_format(path)
    except OSError:
        return "ofrecord"


def _split_of(path):
    parts = os.path.normpath(path).split(os.sep)
    for part in reversed(parts[:-1]):
        if part in SPLITS:
            return part
    name = os.path.basename(path)
    for split in SPLITS:
        if f"_{split}_" in name or f"_{split}." in name:
            return split
    return "all"


def find_manifest(path):
    """The create-stage manifest at or above `path` (a records directory or one of its files), or None."""
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    for _ in range(4):
        candidate = os.path.join(directory, MANIFEST)
        if os.path.isfile(candidate):
            manifest, problem = read_manifest(candidate)
            if problem:
                return {"_path": candidate, "_error": problem}
            if manifest.get("stage") == "create":
                return {**manifest, "_path": candidate}
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return None


def dataset_roots(path):
    """The datasets under `path`: each directory below it with a create manifest, else `path` itself."""
    if os.path.isfile(path) or find_manifest(path) is not None:
        return [path]
    roots = []
    for root, dirs, files in walk(path):  # sorted, without .partial/ and other hidden directories
        if MANIFEST in files and find_manifest(root) is not None and find_record_files(root):
            roots.append(root)
            dirs[:] = []
    return roots or [path]


def manifest_params(manifest):
    """(seq, pred, masked_lm_prob, whole_word_mask) from a create manifest (None where absent)."""
    params = (manifest or {}).get("params") or {}
    seq = params.get("max_seq_length", params.get("seq"))
    pred = params.get("max_predictions_per_seq", params.get("pred"))
    return seq, pred, params.get("masked_lm_prob"), params.get("whole_word_mask")


# ---------------------------------------------------------------- scanning


def _scan(task):
    record_file, spec, want_sha256 = task
    report = scan_file(record_file.path, record_file.fmt, record_file.split, spec)
    if want_sha256:
        report.sha256 = _sha256(record_file.path)
    return report


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


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
            for report in pool.map(_scan, tasks):
                reports.append(report)
                progress.advance(1, records=report.records)
    progress.close()
    return reports


# ---------------------------------------------------------------- the dataset


@dataclasses.dataclass
class DatasetResult:
    root: str
    files: list
    reports: list
    findings: Findings
    stats: dict  # (fmt, split) -> Stats
    seq: int
    pred: int
    manifest: str = None
    spec: RecordSpec = None


def validate_records(root, spec, workers=1, min_parts=1, quiet=True):
    """Check every record file under `root`, the files as a set, and the manifest."""
    record_files = find_record_files(root)
    manifest = find_manifest(root)
    findings = Findings(spec.max_errors)
    spec = resolve_spec(spec, manifest)
    reports = scan_files(record_files, spec, workers, want_sha256=manifest is not None, quiet=quiet)
    for report in reports:
        findings.extend(report.findings)
    _check_parts(record_files, reports, min_parts, findings)
    seq, pred = _check_consistency(reports, findings)
    if manifest is not None:
        _check_manifest(manifest, root, record_files, reports, (seq, pred), findings)
    stats = {}
    for report in reports:
        if report.stats is None or report.seq != seq:
            continue
        key = (report.fmt, report.split)
        if key not in stats:
            stats[key] = Stats(seq, pred)
        stats[key].merge(report.stats)
    _check_format_counts(reports, findings)
    return DatasetResult(root, record_files, reports, findings, stats, seq, pred,
                         manifest.get("_path") if manifest else None, spec)


def resolve_spec(spec, manifest):
    """Fill what flags left open (None) from the manifest, else the reference's defaults."""
    m_seq, m_pred, m_prob, m_wwm = manifest_params(manifest if manifest and "_error" not in manifest else None)
    prob = spec.masked_lm_prob if spec.masked_lm_prob is not None else m_prob if m_prob is not None else 0.15
    wwm = spec.whole_word_mask if spec.whole_word_mask is not None else bool(m_wwm)
    return dataclasses.replace(spec, seq=spec.seq or m_seq, pred=spec.pred or m_pred, masked_lm_prob=prob,
                               whole_word_mask=wwm)


def _check_parts(record_files, reports, min_parts, findings):
    by_dir = {}
    for record_file, report in zip(record_files, reports):
        if report.bytes == 0:
            severity = "error" if record_file.fmt == "ofrecord" else "warning"
            why = "OneFlow aborts on an empty part" if record_file.fmt == "ofrecord" else "a shard without instances"
            findings.add(Finding("files", record_file.path, None, None, f"empty file ({why})", severity))
        match = _PART.match(os.path.basename(record_file.path))
        if match:
            by_dir.setdefault(os.path.dirname(record_file.path), []).append(int(match.group(1)))
    for directory, numbers in by_dir.items():
        present = set(numbers)
        for missing in sorted(set(range(max(numbers) + 1)) - present):
            findings.add(Finding("files", os.path.join(directory, f"part-{missing}"), None, None,
                                 f"missing: parts must be part-0 … part-{max(numbers)} without gaps "
                                 f"(OneFlow reads part-0 … part-<data_part_num - 1>)"))
        if len(present) < min_parts:
            findings.add(Finding("files", directory, None, None,
                                 f"{len(present)} parts, fewer than --min-parts {min_parts} "
                                 "(OneFlow needs data_part_num ≥ reader ranks)"))


def _check_consistency(reports, findings):
    shaped = [r for r in reports if r.seq is not None]
    if not shaped:
        return None, None
    seq, pred = shaped[0].seq, shaped[0].pred
    for report in shaped[1:]:
        if (report.seq, report.pred) != (seq, pred):
            findings.add(Finding("consistency", report.path, None, None,
                                 f"seq/pred {report.seq}/{report.pred}, expected {seq}/{pred} as in {shaped[0].path}"))
    return seq, pred


def _check_format_counts(reports, findings):
    counts = {}
    for report in reports:
        key = (report.fmt, report.split)
        counts[key] = counts.get(key, 0) + report.records
    fmts = sorted({fmt for fmt, _ in counts}, key=formats.FORMATS.index)
    if len(fmts) < 2:
        return
    for split in sorted({split for _, split in counts}):
        a, b = counts.get((fmts[0], split), 0), counts.get((fmts[1], split), 0)
        if a != b:
            findings.add(Finding("consistency", split, None, None,
                                 f"{fmts[0]} holds {a:,} records, {fmts[1]} {b:,}: both formats must hold the same instances"))


def _check_manifest(manifest, root, record_files, reports, shape, findings):
    path = manifest["_path"]
    if "_error" in manifest:
        findings.add(Finding("manifest", path, None, None, f"unreadable: {manifest['_error']}"))
        return
    base = os.path.dirname(path)
    entries = manifest.get("files") or {}
    by_path = {os.path.normpath(f.path): r for f, r in zip(record_files, reports)}
    listed = set()
    for relative, entry in sorted(entries.items(), key=lambda item: natural_key(item[0])):
        full = os.path.normpath(os.path.join(base, relative))
        listed.add(full)
        report = by_path.get(full)
        if report is None:
            if not os.path.exists(full):
                findings.add(Finding("manifest", full, None, None, "listed in manifest.json but missing"))
            continue
        if entry.get("bytes") is not None and entry["bytes"] != report.bytes:
            findings.add(Finding("manifest", full, None, None,
                                 f"{report.bytes:,} bytes, manifest.json says {entry['bytes']:,}"))
        if entry.get("sha256") and entry["sha256"] != getattr(report, "sha256", None):
            findings.add(Finding("manifest", full, None, None,
                                 f"sha256 {getattr(report, 'sha256', '?')[:16]}…, manifest.json says {entry['sha256'][:16]}…"))
        if entry.get("instances") is not None and entry["instances"] != report.records:
            findings.add(Finding("manifest", full, None, None,
                                 f"{report.records:,} records, manifest.json says {entry['instances']:,}"))
        if entry.get("format") and entry["format"] != report.fmt:
            findings.add(Finding("manifest", full, None, None, f"{report.fmt}, manifest.json says {entry['format']}"))
    for record_file in record_files:
        if os.path.normpath(record_file.path) not in listed:
            findings.add(Finding("manifest", record_file.path, None, None,
                                 "not listed in manifest.json (an unfinished or stray file)"))
    m_seq, m_pred, _, _ = manifest_params(manifest)
    seq, pred = shape
    if seq is not None and m_seq is not None and (seq, pred) != (m_seq, m_pred):
        findings.add(Finding("manifest", path, None, None, f"seq/pred {m_seq}/{m_pred}, the records hold {seq}/{pred}"))


# ---------------------------------------------------------------- statistics


def summarize_stats(stats, spec, test_vs_training=None):
    """JSON-able figures of one group, with warnings [(check, message)] where a figure is out of its range."""
    seq = len(stats.length_hist) - 1
    n = max(stats.instances, 1)
    lengths = np.arange(seq + 1)
    short = int(stats.length_hist[: seq // 2 + 1].sum())
    replaced = stats.replacement
    total_replaced = max(int(replaced.sum()), 1)
    records = stats.hashes("record_hashes")
    texts = stats.hashes("text_hashes")
    at_least = stats.length_hist[::-1].cumsum()[::-1][1:]  # records longer than position j
    out = {
        "instances": stats.instances,
        "tokens": stats.tokens,
        "mean_length": round(float((stats.length_hist * lengths).sum() / n), 2),
        "full_length_share": round(float(stats.length_hist[seq] / n), 4),
        "short_share": round(short / n, 4),
        "length_histogram": stats.length_hist.tolist(),
        "predictions": stats.predictions,
        "expected_predictions": stats.expected_predictions,  # by Python 3's rounding
        "mask_rate": round(stats.predictions / max(stats.tokens, 1), 4),
        "expected_mask_rate": round(stats.expected_predictions / max(stats.tokens, 1), 4),
        "mask_rate_by_position": [round(float(c / d), 4) if d else 0.0 for c, d in zip(stats.position_hist, at_least)],
        "replacement": {"mask": int(replaced[0]), "same": int(replaced[1]), "other": int(replaced[2])},
        "replacement_shares": [round(int(c) / total_replaced, 4) for c in replaced],
        "nsp": {"is_next": int(stats.nsp[0]), "random_next": int(stats.nsp[1]), "other": int(stats.nsp[2])},
        "random_next_share": round(int(stats.nsp[1]) / n, 4),
        "duplicate_records": int(len(records) - len(np.unique(records))),
        "duplicate_texts": int(len(texts) - len(np.unique(texts))),
    }
    warnings = []
    if stats.instances:
        _range_warnings(out, stats, spec, warnings)
    if test_vs_training is not None:
        test_segments = stats.hashes("segment_hashes")
        shared = int(np.isin(test_segments, test_vs_training.hashes("segment_hashes")).sum())
        out["segments_also_in_training"] = shared
        out["segment_overlap_share"] = round(shared / max(len(test_segments), 1), 4)
        if out["segment_overlap_share"] > 0.01:
            warnings.append(("overlap", f"{shared:,} of {len(test_segments):,} test segments "
                                        f"({out['segment_overlap_share']:.1%}) also occur in training"))
    return out, warnings


def _range_warnings(out, stats, spec, warnings):
    """Figures far from what the reference algorithm produces (5 standard errors, at least 2 points)."""
    predictions = max(int(stats.replacement.sum()), 1)
    for share, expected, what in zip(out["replacement_shares"], (0.8, 0.1, 0.1), ("[MASK]", "kept", "random")):
        tolerance = max(0.02, 5 * (expected * (1 - expected) / predictions) ** 0.5)
        if abs(share - expected) > tolerance:
            warnings.append(("replacement", f"{what} share {share:.3f}, expected {expected} ± {tolerance:.3f} (80/10/10)"))
    if abs(out["mask_rate"] - out["expected_mask_rate"]) > 0.01:
        warnings.append(("mask_rate", f"mask rate {out['mask_rate']:.4f}, expected {out['expected_mask_rate']:.4f} "
                                      f"for masked_lm_prob {spec.masked_lm_prob}"))
    share = out["random_next_share"]
    tolerance = 5 * (0.25 / stats.instances) ** 0.5
    if not 0.45 - tolerance <= share <= 0.65 + tolerance:  # 0.5, plus single-segment chunks forced random
        warnings.append(("nsp", f"random-next share {share:.3f}, expected 0.45–0.65"))
    if out["duplicate_records"]:
        warnings.append(("duplicates", f"{out['duplicate_records']:,} records are exact copies of another"))
