"""`bertprep.validate(...)`: the whole report, and its one-screen table (`bertprep/cli/validate.py` is the
command line).

    bertprep validate PATH [PATH2] [--vocab V] [--compare] [--json [report.json]]
        [--plot report.png] [--max-errors 20] [--workers N] [--min-parts K]

PATH is a records directory from `bertprep create` (either or both formats),
a single record file, a text shard directory from `bertprep shard`, a
downloads directory (SQuAD/GLUE), or token sequences from `bertprep
tokenize` (a directory, or one .bin/.idx: `sequences.py`); a work directory
holds all of them and gets
every check. The report says whether the dataset is `sound`; the command
exits 0 when it is (warnings allowed), 1 when a check fails, 2 on usage
errors.
"""

import base64
import dataclasses
import html
import importlib.util
import io
import json
import os
import sys
from typing import Any, TextIO

from bertprep import formats, storage
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.formats import codecs, megatron
from bertprep.options import (
    build_options,
    check_types,
    errors_name_fields,
    normalise_paths,
    refuse_empty_path,
    refuse_file_above,
    refuse_overlap,
    set_field,
)
from bertprep.progress import Summary, human_bytes
from bertprep.stages.validate.dataset import (
    DATASET_CHECKS,
    dataset_roots,
    describe_shape,
    find_manifest,
    find_record_files,
    misnamed_record_files,
    validate_records,
)
from bertprep.stages.validate.records import RULES, Finding, RecordSpec, checks_of
from bertprep.stages.validate.sequences import (
    SEQUENCE_CHECKS,
    check_tokenize_runs,
    find_sequence_sets,
    sequence_check_notes,
    skipped_sequence_checks,
    tokenize_list,
    validate_sequence_set,
    validate_tokenize_list,
)
from bertprep.stages.validate.text import (
    TEXT_CHECKS,
    find_downloads,
    find_text_shards,
    hidden_shards_warning,
    other_files_warning,
    validate_downloads,
    validate_text_shards,
)
from bertprep.text_inputs import refuse_stream

CHECKS = {**checks_of(RULES), **DATASET_CHECKS, **TEXT_CHECKS,
          "compare": "both datasets hold the same instances in order"}


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class ValidateOptions:
    """What `validate` checks: one or two `paths` (records directories or files, text shard directories,
    downloads directories), record ids against `vocab` (None: the manifest's vocab, else BERT's special ids
    and no size bound), whether to `compare` the two datasets (or PATH's TFRecord and OFRecord files), where
    to draw the `plot`, how many findings to list (`max_errors`; all are counted), checking processes
    (`workers`, None: one per core), the OFRecord parts a directory needs (`min_parts`), and the masking the
    records were made with (`masked_lm_prob`, `whole_word_mask`; None: the manifest's)."""

    paths: tuple[str, ...]
    vocab: str | None = None
    compare: bool = False
    plot: str | None = None
    max_errors: int = 20
    workers: int | None = None
    min_parts: int = 1
    masked_lm_prob: float | None = None
    whole_word_mask: bool | None = None

    def __post_init__(self):
        check_types(self)
        set_field(self, "paths", (self.paths,) if isinstance(self.paths, (str, os.PathLike)) else tuple(self.paths))
        normalise_paths(self, "paths", flags=False)
        set_field(self, "paths", tuple(megatron.dataset_file(path) for path in self.paths))  # a prefix: its .idx
        if not 1 <= len(self.paths) <= 2:
            raise UsageError(f"validate takes one or two paths, not {len(self.paths)}")
        for path in self.paths:
            Folder(path).require("any", UsageError(f"{path}: no such file or directory"))  # a tree, or one file
            if not Folder(path).isdir():  # `validate <(cat a.txt)` (/dev/fd/63) or a FIFO: was "nothing to validate"
                refuse_stream(path)
            else:
                _refuse_special_files(path)
        if self.max_errors < 0 or (self.workers is not None and self.workers < 1) or self.min_parts < 1:
            raise UsageError("--max-errors must be ≥ 0, --workers and --min-parts ≥ 1")
        if self.masked_lm_prob is not None and not 0 < self.masked_lm_prob <= 1:  # create's and manifests' range
            raise UsageError("--masked-lm-prob must be in (0, 1]")
        if self.compare and len(self.paths) == 1 and not _has_both_formats(self.paths[0]):
            raise UsageError("--compare needs PATH2, or a PATH holding both TFRecord and OFRecord files")
        if self.compare and len(self.paths) == 2 and _dataset_key(self.paths[0]) == _dataset_key(self.paths[1]):
            # was "equal", exit 0: a dataset is always equal to itself, whatever a mistyped PATH2 was meant to be
            raise UsageError(f"--compare: {self.paths[0]} and {self.paths[1]} are one dataset, which is equal to "
                             "itself: give two datasets to compare")
        if not self.compare and len(self.paths) == 2:
            _refuse_one_dataset_twice(*self.paths)
        if self.plot is not None:
            check_report_place("--plot", self.plot, self.paths, PNG_MAGIC)


def _refuse_special_files(path):
    """A UsageError naming the first file under the local directory `path` that is no regular file (a FIFO, a
    device): validate opens every file there to learn what it holds, and `validate DIR` with a FIFO in DIR that no
    one writes waited for ever, nothing said. Asked of each path (os.stat), never opened."""
    if not storage.reads_in_place(path):  # a store holds objects only
        return
    for directory, _dirs, files in storage.walk(path):
        for name in files:
            full = os.path.join(directory, name)
            if os.path.exists(full) and not os.path.isfile(full):
                raise UsageError(f"{full}: not a regular file (a pipe or a device) in {path}: validate reads every "
                                 "file there, and a pipe that no one writes waits for ever; move it out of the folder")


def _refuse_one_dataset_twice(first, second):
    """A UsageError where the two paths (without --compare) are one dataset, or one holds the other: `validate A A`
    checked A twice and reported each finding twice, its counts doubled (FAILED, 4 failures, of 2)."""
    a, b = _dataset_key(first), _dataset_key(second)
    if a == b:
        raise UsageError(f"{first} and {second} are one dataset: give it once (--compare compares two)")
    for outer, inner, key_outer, key_inner in ((first, second, a, b), (second, first, b, a)):
        if key_inner.startswith(key_outer.rstrip("/") + "/"):
            raise UsageError(f"{inner} lies inside {outer}, which validate checks whole: its findings would be "
                             f"counted twice; give {outer} alone")


PNG_MAGIC = b"\x89PNG"
# The report is one JSON object written with indent=1 and sorted keys, "checks" first: a bare "{" let --json
# replace any JSON file, a stage's manifest.json or a SQuAD file among them.
JSON_MAGIC = b'{\n "checks": {'


def check_report_place(flag, path, paths, magic):
    """A UsageError, before anything is read, where a report's file (--json's, --plot's) is one of the validated
    `paths`, lies inside one or holds one, or is an existing file that is not such a report (its first bytes not
    `magic`): `validate --json q1.tfrecord q2.tfrecord` took the dataset q1 for --json's file name and replaced
    it with the report of q2."""
    refuse_empty_path(flag, path)  # else "--json  holds the input": "" compares as the current directory
    refuse_overlap(path, paths, what=flag)
    # else found after every check, "Not a directory", exit 1; a link to nothing there was replaced by the report
    refuse_file_above(flag, path, file=True)
    local = storage.local_path(path)
    if storage.checks_locally(path) and os.path.isdir(local):  # else found after every check, "Is a directory", exit 1
        raise UsageError(f"{flag} {path}: is a directory; name a file for the report")
    storage.check_reachable(path)  # a missing bucket, refused credentials: found only after every check, exit 1
    storage.refuse_writing_under_an_object(storage.parent(storage.absolute(path)))  # it went under an object
    if storage.checks_locally(path) and os.path.isfile(local):
        with open(local, "rb") as f:
            first = f.read(len(magic))
    else:  # an object there is replaced as a file is: refused unless it is a report (it was replaced unasked)
        first = storage.read_range(path, 0, len(magic)) if storage.isfile(path) else magic
    if first != magic:
        raise UsageError(f"{flag} {storage.display(path)}: exists and is not a report validate wrote: it would be "
                         "replaced; name a new file (--json without a value prints the report on stdout)")


class Report(Summary):
    """What `validate` returns: `fields` the full report (what `--json` prints), `sound` whether every check
    passed; printed as the one-screen table."""

    @property
    def sound(self) -> bool:
        return self.fields["sound"]

    def print(self, as_json: bool = False, stream: TextIO | None = None) -> None:
        if as_json:
            super().print(as_json=True, stream=stream)
        else:
            print_table(self.fields, stream)

    def _repr_html_(self):
        """The one-screen table, and --plot's figures inline where matplotlib is installed."""
        buffer = io.StringIO()
        print_table(self.fields, buffer)
        figures = _figures_png(self.fields)
        image = (f'<img alt="validate figures" style="max-width:100%" '
                 f'src="data:image/png;base64,{base64.b64encode(figures).decode()}"/>' if figures else "")
        return f"<pre>{html.escape(buffer.getvalue())}</pre>{image}"


def _figures_png(report):
    """--plot's PNG of the report's record statistics, or None (no statistics, or no matplotlib)."""
    if not any(section["stats"] for section in report["datasets"]) or importlib.util.find_spec("matplotlib") is None:
        return None
    import tempfile

    from bertprep.stages.validate.plot import plot_report

    with tempfile.TemporaryDirectory() as temp:
        path = os.path.join(temp, "figures.png")
        plot_report(report, path)
        with open(path, "rb") as f:
            return f.read()


def validate(options: ValidateOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Report:
    """Check `options.paths` (or ValidateOptions(**fields)); progress on stderr unless `quiet`. A dataset
    that fails a check is no error: the report says so (`report.sound`, its findings)."""
    options = build_options(ValidateOptions, options, fields)  # not both (a keyword beside one was ignored)
    vocab_warnings: list = []
    spec = RecordSpec(max_errors=options.max_errors, masked_lm_prob=options.masked_lm_prob,
                      whole_word_mask=options.whole_word_mask, **_vocab_settings(options.vocab, vocab_warnings))
    report = validate_paths(list(options.paths), spec, workers=options.workers or os.cpu_count() or 1,
                            min_parts=options.min_parts, compare=options.compare,
                            vocab_given=options.vocab is not None, quiet=quiet)
    refuse_unread_flags(options, report)
    report["warnings"][:0] = vocab_warnings
    if options.plot:
        from bertprep.stages.validate.plot import plot_report

        plot_report(report, options.plot)
    return Report("bertprep validate", report)


# The flags only some checks read, and what they apply to: how the records were masked and the OFRecord parts a
# directory needs (the record checks); the vocab (the record and token sequence checks; no text shard check); the
# plot, whose panels are the records' and the token sequences' statistics (of text shards alone it was a PNG that
# said "no records").
# A report holds token sequences where its "sequences" key is there (a list with no section: a tokenize run's pairs
# all gone).
READERS = {"records": lambda report: bool(report["datasets"]),
           "records and token sequences": lambda report: bool(report["datasets"]) or "sequences" in report}
NARROW_FLAGS = (("masked_lm_prob", "--masked-lm-prob", "records"), ("whole_word_mask", "--whole-word-mask", "records"),
                ("min_parts", "--min-parts", "records"), ("vocab", "--vocab", "records and token sequences"),
                ("plot", "--plot", "records and token sequences"))


def refuse_unread_flags(options, report):
    """A UsageError where a flag of NARROW_FLAGS was given and the paths held nothing it applies to: `validate
    TOKENIZED --masked-lm-prob 0.3` (or --whole-word-mask, --min-parts 8; --vocab of text shards) was SOUND, exit
    0, the flag read by no check. Said once the paths are read: what they hold is found as they are checked."""
    defaults = {field.name: field.default for field in dataclasses.fields(ValidateOptions)}
    changed = [(flag, to) for field, flag, to in NARROW_FLAGS if getattr(options, field) != defaults[field]]
    for applies, read in READERS.items():
        given = [flag for flag, to in changed if to == applies]
        if given and not read(report):
            raise _unread_flags_error(report, given, applies)


def _unread_flags_error(report, given, applies):
    """The UsageError of refuse_unread_flags, naming the flags (bertprep.validate writes them as the options'
    fields for a Python caller, as it does every usage error of the stage)."""
    holds = [what for what, there in (("token sequences of `bertprep tokenize`", report.get("sequences") is not None),
                                      ("text shards", report["text_shards"]),
                                      ("SQuAD/GLUE downloads", report["downloads"])) if there]
    one = len(given) == 1
    message = (f"{', '.join(given)} {'applies' if one else 'apply'} to {applies}, and {' and '.join(report['paths'])} "
               f"{'holds' if len(report['paths']) == 1 else 'hold'} none ({', '.join(holds)}): "
               f"{'it' if one else 'they'} had no effect; leave {'it' if one else 'them'} out")
    return UsageError(message)


def _dataset_key(path):
    """`path` as its two spellings give it alike (storage.comparable), a Megatron pair's .bin or .idx as its
    prefix: the dataset a path names."""
    key = storage.comparable(path)
    prefix = key[:-len(megatron.IDX)]
    return prefix if key.endswith(megatron.BIN_IDX) and megatron.is_dataset(prefix) else key


def _has_both_formats(path):
    """Whether `path` holds TFRecord and OFRecord files, what one PATH's --compare compares (comparison_pairs):
    not "two formats", which refused a create output of all four and took TFRecord + HDF5."""
    return set(codecs.framed_names()) <= {f.fmt for f in find_record_files(path)}


def _vocab_settings(path, warnings=None):
    """Bounds and special ids from a vocab.txt, read by create's own loader so both agree on every id."""
    if path is None:
        return {}
    from bertprep.tokenization import load_vocab, refuse_vocab_directory

    try:
        refuse_vocab_directory(path)  # as create, tokenize and inspect say it: "cannot read: Is a directory" here
        vocab = load_vocab(path, required=("[CLS]", "[SEP]", "[MASK]"))
    except DataError as exc:
        raise UsageError(f"--vocab {exc}") from None
    if warnings is not None and vocab.duplicates_warning():
        warnings.append(vocab.duplicates_warning())
    return {"vocab_size": vocab.size, "cls_id": vocab.id_of("[CLS]"), "sep_id": vocab.id_of("[SEP]"),
            "mask_id": vocab.id_of("[MASK]")}


def _manifest_vocab(manifest, spec, warnings):
    """Vocab settings from a create manifest when --vocab was not given: its file if present, else its size."""
    vocab = manifest.get("vocab") or {}
    if vocab.get("path") and storage.isfile(vocab["path"]):
        try:
            return dataclasses.replace(spec, **_vocab_settings(vocab["path"], warnings))
        except UsageError:
            pass
    if isinstance(vocab.get("size"), int):
        return dataclasses.replace(spec, vocab_size=vocab["size"])
    return spec


def validate_paths(paths, spec, workers=1, min_parts=1, compare=False, vocab_given=False, quiet=True):
    """The full report (a JSON-able dict) for one or two paths, their records checked against `spec`."""
    report = {"paths": [storage.display(path) for path in paths], "datasets": [], "text_shards": [],
              "downloads": [], "compare": [], "findings": [], "warnings": [], "counts": {}}
    all_findings = []
    for path in paths:
        if tokenize_list(path):  # data-path.txt: the pairs it names, not a text shard of one line
            findings, warnings, section = validate_tokenize_list(path, spec.vocab_size if vocab_given else None)
            report.setdefault("sequences", []).append(section)
            _add_findings(report, all_findings, findings, warnings)
            continue
        found_anything = False
        megatron.check_index_beside(path)  # a .bin without its .idx: no record file to be read as one
        megatron.check_index_named(path)  # nor an index under another name
        sequence_sets = find_sequence_sets(path)
        for fmt, prefixes in sequence_sets:  # tokenize's files: token sequences, not records
            found_anything = True
            findings, warnings, section = validate_sequence_set(fmt, prefixes, spec.vocab_size if vocab_given else None)
            report.setdefault("sequences", []).append(section)  # absent without them: the report of records as it was
            _add_findings(report, all_findings, findings, warnings)
        run_findings = check_tokenize_runs(path, [prefix for _fmt, prefixes in sequence_sets for prefix in prefixes])
        if run_findings:  # a killed run's manifest, or listed pairs that are gone (perhaps every one)
            found_anything = True
            report.setdefault("sequences", [])
            _add_findings(report, all_findings, run_findings, [])
        # a file that is token sequences or a text shard (.txt) is not also judged as a record file (FAILED)
        text_file = storage.isfile(path) and (sequence_sets or find_text_shards(path))
        record_files = [] if text_file else find_record_files(path)
        for root, files in dataset_roots(path, record_files) if record_files else []:
            found_anything = True
            manifest = find_manifest(root) if files is None else None
            path_spec = (spec if vocab_given or manifest is None or "_error" in manifest
                         else _manifest_vocab(manifest, spec, report["warnings"]))
            result = validate_records(root, path_spec, workers=workers, min_parts=min_parts, quiet=quiet,
                                      record_files=files)
            report["datasets"].append(_dataset_section(result))
            all_findings.extend(result.findings.kept)
            _add_counts(report["counts"], result.findings.counts)
            for finding in result.findings.kept:
                if finding.severity == "warning":
                    report["warnings"].append(finding.line())
            for section in report["datasets"][-1]["stats"].values():
                for split_figures in section.values():
                    report["warnings"].extend(split_figures.pop("_warnings"))
        shards = find_text_shards(path)
        if shards:
            found_anything = True
            findings, warnings, figures = validate_text_shards(path)
            report["text_shards"].append({"path": path, "figures": figures})
            _add_findings(report, all_findings, findings, warnings)
        squad, glue = find_downloads(path)
        if squad or glue:
            found_anything = True
            findings, warnings, figures = validate_downloads(path)
            report["downloads"].append({"path": path, "files": figures})
            _add_findings(report, all_findings, findings, warnings)
        misnamed = _misnamed(path)
        report["warnings"].extend(misnamed)
        if not found_anything:  # a hidden or misplaced shard, not validated, is named as the reason there was nothing
            unread = [line for line in [hidden_shards_warning(path), other_files_warning(path, [])] if line]
            raise DataError(f"{path}: nothing to validate (no record files, text shards, SQuAD or GLUE files)"
                            + "".join(f"; {line}" for line in (misnamed + unread)[:1]))
    if compare:
        from bertprep.stages.validate.compare import (
            compare_files,
            compare_sequences,
            comparison_pairs,
            nothing_to_compare,
            sequence_pairs,
        )

        pairs = comparison_pairs(paths[0], paths[1] if len(paths) > 1 else None)
        sequences = sequence_pairs(*paths) if len(paths) > 1 else []  # two tokenize outputs
        if not pairs and not sequences:
            raise UsageError(nothing_to_compare(*paths))
        outcomes = [(label, compare_files(files_a, files_b, dataclasses.replace(spec, kind=None, dims=None)))
                    for label, files_a, files_b in pairs]
        outcomes += [(label, compare_sequences(a, b)) for label, a, b in sequences]
        for label, outcome in outcomes:
            report["compare"].append({"what": label, **outcome})
            if not outcome["equal"]:
                finding = Finding("compare", label, None, None, outcome["difference"])
                all_findings.append(finding)
                _add_counts(report["counts"], {"compare": 1})
    errors = [f for f in all_findings if f.severity == "error"]
    report["findings"] = [dataclasses.asdict(f) for f in errors[: spec.max_errors]]
    report["errors_total"] = sum(report["counts"].values())
    report["checks"] = _check_table(report)
    report["sound"] = report["errors_total"] == 0
    return report


def _misnamed(path):
    """A warning for each file under `path` that starts as a record format's but no reader finds by its name."""
    return [f"{storage.display(file)}: its first bytes are {fmt}'s, but it is not named {codecs.get(fmt).glob}: not "
            "validated, and no reader takes it for records" for file, fmt in misnamed_record_files(path)]


def _add_counts(counts, more):
    for check, count in more.items():
        counts[check] = counts.get(check, 0) + count


def _add_findings(report, all_findings, findings, warnings):
    all_findings.extend(findings)
    _add_counts(report["counts"], _tally(findings))
    report["warnings"].extend(message for _check, message in warnings)


def _tally(findings):
    counts = {}
    for finding in findings:
        counts[finding.check] = counts.get(finding.check, 0) + 1
    return counts


def _dataset_section(result):
    stats = {}
    training = {fmt: s for (fmt, split), s in result.stats.items() if split == "training"}
    order = {"training": 0, "train": 0, "eval": 1, "test": 2}
    for (fmt, split), group in sorted(result.stats.items(),
                                      key=lambda item: (formats.ALL_FORMATS.index(item[0][0]),
                                                        order.get(item[0][1], 2))):
        figures, warnings = group.summary(result.spec, training.get(fmt) if split == "test" else None)
        figures["_warnings"] = [f"{fmt} {split}: {message}" for _check, message in warnings]
        stats.setdefault(fmt, {})[split] = figures
    return {
        "path": result.root,
        "manifest": result.manifest,
        "kind": result.kind,
        "kinds": result.kinds,
        "dims": result.dims,
        "seq": (result.dims or {}).get("seq"),
        "pred": (result.dims or {}).get("pred"),
        "masked_lm_prob": result.spec.masked_lm_prob,
        "whole_word_mask": result.spec.whole_word_mask,
        "vocab_size": result.spec.vocab_size,
        "files": [{"path": r.path, "format": r.fmt, "split": r.split, "records": r.records, "bytes": r.bytes}
                  for r in result.reports],
        "records": sum(r.records for r in result.reports),
        "bytes": sum(r.bytes for r in result.reports),
        "stats": stats,
    }


def _check_table(report):
    ran = set()
    if report["datasets"]:
        ran |= set(checks_of({k for section in report["datasets"] for k in section["kinds"]})) | set(DATASET_CHECKS)
    if report["text_shards"]:
        ran |= {"utf8", "documents", "shard_manifest"}
    if report["downloads"]:
        ran |= {"download_checksum", "download_examples"}
    if report["compare"]:
        ran.add("compare")
    checks = CHECKS
    if report.get("sequences") is not None:  # listed only where they ran: a records report's table is as it was
        ran |= set(SEQUENCE_CHECKS)
        checks = {**CHECKS, **SEQUENCE_CHECKS}
    skipped = {**skipped_checks(report["datasets"]), **skipped_sequence_checks(report.get("sequences"))}
    notes = sequence_check_notes(report.get("sequences"))
    table = {}
    for check, description in checks.items():
        failures = report["counts"].get(check, 0)
        status = "failed" if failures else "skipped" if check in skipped and check in ran else \
            "ok" if check in ran else "not run"
        table[check] = {"status": status, "failures": failures, "description": skipped.get(check, description)
                        if status == "skipped" else notes.get(check, description) if status == "ok" else description}
    return table


def skipped_checks(datasets):
    """{check: why it was skipped} of the record checks that had nothing to check against in every dataset: a
    table row "ok" for them said a check passed that never ran (issue 57: no manifest and no --vocab)."""
    if not datasets:
        return {}
    skipped = {}
    if not any(section["manifest"] for section in datasets):
        skipped["manifest"] = "no manifest.json beside the records: nothing to match"
    if all(section["vocab_size"] is None for section in datasets):
        skipped["vocab"] = "no vocab size (no manifest, no --vocab): ids were not checked against a vocabulary"
    if not any(section["records"] for section in datasets):
        skipped.update((check, "no readable records") for check in (*checks_of(RULES), "consistency")
                       if check != "framing" and check not in skipped)
    return skipped


# ---------------------------------------------------------------- the one-screen table


def print_table(report, stream=None):
    stream = stream or sys.stdout
    failed = [c for c, row in report["checks"].items() if row["status"] == "failed"]
    verdict = "SOUND" if report["sound"] else f"FAILED ({len(failed)} checks, {report['errors_total']:,} failures)"
    out = [f"bertprep validate: {verdict}"]
    for section in report["datasets"]:
        fmts = " + ".join(section["stats"]) or "no readable records"
        out.append(f"  records  {section['path']}: {section['records']:,} in {len(section['files'])} files "
                   f"({human_bytes(section['bytes'])}), {fmts}, {describe_shape(section['kind'], section['dims'])}"
                   + (", manifest" if section["manifest"] else ", no manifest"))
    for section in report["text_shards"]:
        parts = [f"{split} {f['documents']:,} docs / {f['sentences']:,} sentences in {f['shards']} shards"
                 for split, f in section["figures"].items() if split != "overlap"]
        out.append(f"  shards   {section['path']}: " + "; ".join(parts))
    for section in report["downloads"]:
        out.append(f"  download {section['path']}: {len(section['files'])} files")
    for section in report.get("sequences", ()):
        out.append(f"  tokens   {section['format']}: {section['sequences']:,} sequences in {section['documents']:,} "
                   f"documents, {section['tokens']:,} tokens, {len(section['files'])} files "
                   f"({human_bytes(section['bytes'])})")
    out.append("checks")
    for check, row in report["checks"].items():
        if row["status"] == "not run":
            continue
        mark = {"ok": "ok    ", "skipped": "skipped"}.get(row["status"], "FAILED")
        detail = f"{row['failures']:,} failing" if row["failures"] else row["description"]
        out.append(f"  {mark} {check:<22} {detail}")
    for section in report["datasets"]:
        shown = None
        for fmt, splits in section["stats"].items():
            if shown is not None and _same_figures(splits, section["stats"][shown]):
                out.append(f"statistics ({fmt}): the same as {shown}")
                continue
            out.extend(_stats_rows(fmt, splits, section["kinds"][0]))
            shown = shown or fmt
    for item in report["compare"]:
        how = ", the packed side unpacked" if item.get("unpacked") else ""
        counted = (f"{item['sequences']:,} sequences in {item['documents']:,} documents" if "sequences" in item
                   else f"{item['records']:,} {'packed rows' if item.get('packed') else 'instances'}{how}")
        verdict = f"equal ({counted})" if item["equal"] else item["difference"]
        out.append(f"compare {item['what']}: {verdict}")
    if report["warnings"]:
        out.append("warnings")
        out.extend(f"  {w}" for w in report["warnings"][:10])
        if len(report["warnings"]) > 10:
            out.append(f"  … {len(report['warnings']) - 10} more (--json lists all)")
    if report["findings"]:
        shown = len(report["findings"])
        out.append(f"findings (first {shown} of {report['errors_total']:,})")
        out.extend(f"  {Finding(**f).line()}" for f in report["findings"])
    print("\n".join(out), file=stream)


def _same_figures(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _stats_rows(fmt, splits, kind):
    names = list(splits)
    rows = [f"statistics ({fmt})".ljust(28) + "".join(f"{n:>16}" for n in names)]
    for label, fn in RULES[kind].table_rows(splits):
        rows.append(f"  {label:<26}" + "".join(f"{fn(splits[n]):>16}" for n in names))
    return rows
