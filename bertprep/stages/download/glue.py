"""GLUE from the hub's `nyu-mll/glue`, written as the original GLUE TSV files.

    WORKDIR/download/glue/<Task>/{train,dev,test}.tsv
    WORKDIR/download/glue/MNLI/{train,dev_matched,dev_mismatched,test_matched,test_mismatched}.tsv
    WORKDIR/download/glue/diagnostic/diagnostic.tsv

NVIDIA's `run_classifier.py` (and the processors derived from
google-research/bert) read these files with `csv.reader(delimiter="\\t",
quotechar=None)` and pick columns by position, so each file keeps the
original column layout and header. Columns the hub does not carry (MRPC's
sentence ids, STS-B's genre/source, MNLI's parses, QQP's question ids) are
left empty or filled with the row index; no processor reads them. Tabs and
line breaks inside a text become spaces, as nothing can quote them.
"""

import hashlib
import os
from dataclasses import dataclass
from typing import ClassVar

from bertprep.atomic import atomic_write_bytes, hold
from bertprep.errors import UsageError
from bertprep.options import errors_name_fields, refuse_empty, set_field
from bertprep.stages.download import DownloadOptions
from bertprep.stages.download.http import SourceDownloads
from bertprep.stages.download.hub import hub_snapshot, iter_parquet_rows

REPO = "nyu-mll/glue"
NLI3 = ["entailment", "neutral", "contradiction"]
NLI2 = ["entailment", "not_entailment"]


# Column names of GLUE's TSV header rows (lower-cased), by which dedup --decontaminate tells a header row from
# an example and create-glue a test file's header from an example saved in its place. CoLA's train and dev
# files have none: their first row had been skipped as a header, and its sentence never checked.
GLUE_COLUMNS = frozenset(("index", "sentence", "sentence1", "sentence2", "label", "gold_label", "quality",
                          "#1 string", "#2 string", "question", "question1", "question2", "is_duplicate", "genre"))


def is_glue_header(line):
    """Whether a TSV line (tab-separated fields) names a GLUE column."""
    return any(field.strip().lower() in GLUE_COLUMNS for field in line.split("\t"))


def _label(names):
    return lambda label: names[label] if names else str(label)


def _rows_cola(r, label):
    # source, label, the original "*" mark of an unacceptable sentence, sentence (no header)
    return ["hub", label(r["label"]), "" if r["label"] else "*", r["sentence"]]


# task directory -> (hub directory, label names or None for numeric labels,
#                    (header, row) of train/dev files, (header, row) of test files)
TASKS = {
    "CoLA": ("cola", None, (None, _rows_cola), (["index", "sentence"], lambda r, _: [r["idx"], r["sentence"]])),
    "SST-2": ("sst2", None, (["sentence", "label"], lambda r, lab: [r["sentence"], lab(r["label"])]),
              (["index", "sentence"], lambda r, _: [r["idx"], r["sentence"]])),
    "MRPC": ("mrpc", None,
             (["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
              lambda r, lab: [lab(r["label"]), r["idx"], r["idx"], r["sentence1"], r["sentence2"]]),
             (["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
              lambda r, _: [r["idx"], r["idx"], r["idx"], r["sentence1"], r["sentence2"]])),
    "STS-B": ("stsb", None,
              (["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2",
                "score"],
               lambda r, _: [r["idx"], "", "", "", r["idx"], "", "", r["sentence1"], r["sentence2"],
                             f"{r['label']:.3f}"]),
              (["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"],
               lambda r, _: [r["idx"], "", "", "", r["idx"], "", "", r["sentence1"], r["sentence2"]])),
    "QQP": ("qqp", None,
            (["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
             lambda r, lab: [r["idx"], "", "", r["question1"], r["question2"], lab(r["label"])]),
            (["id", "question1", "question2"], lambda r, _: [r["idx"], r["question1"], r["question2"]])),
    "MNLI": ("mnli", NLI3, None, None),
    "QNLI": ("qnli", NLI2,
             (["index", "question", "sentence", "label"],
              lambda r, lab: [r["idx"], r["question"], r["sentence"], lab(r["label"])]),
             (["index", "question", "sentence"], lambda r, _: [r["idx"], r["question"], r["sentence"]])),
    "RTE": ("rte", NLI2,
            (["index", "sentence1", "sentence2", "label"],
             lambda r, lab: [r["idx"], r["sentence1"], r["sentence2"], lab(r["label"])]),
            (["index", "sentence1", "sentence2"], lambda r, _: [r["idx"], r["sentence1"], r["sentence2"]])),
    "WNLI": ("wnli", None,
             (["index", "sentence1", "sentence2", "label"],
              lambda r, lab: [r["idx"], r["sentence1"], r["sentence2"], lab(r["label"])]),
             (["index", "sentence1", "sentence2"], lambda r, _: [r["idx"], r["sentence1"], r["sentence2"]])),
    "diagnostic": ("ax", None, None,
                   (["index", "sentence1", "sentence2"], lambda r, _: [r["idx"], r["premise"], r["hypothesis"]])),
}
_MNLI_PARSES = ["promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
                "sentence2_parse"]
MNLI_TRAIN = (["index", *_MNLI_PARSES, "sentence1", "sentence2", "label1", "gold_label"],
              lambda r, lab: [r["idx"], *[""] * 7, r["premise"], r["hypothesis"], lab(r["label"]), lab(r["label"])])
MNLI_DEV = (["index", *_MNLI_PARSES, "sentence1", "sentence2", "label1", "label2", "label3", "label4", "label5",
             "gold_label"],
            lambda r, lab: [r["idx"], *[""] * 7, r["premise"], r["hypothesis"], lab(r["label"]), "", "", "", "",
                            lab(r["label"])])
MNLI_TEST = (["index", *_MNLI_PARSES, "sentence1", "sentence2"],
             lambda r, _: [r["idx"], *[""] * 7, r["premise"], r["hypothesis"]])
ALIASES = {"sst2": "SST-2", "stsb": "STS-B", "ax": "diagnostic",
           **{name.lower().replace("-", ""): name for name in TASKS}}


def task_outputs(task):
    """[(output file, hub split, (header, row function))] for a task directory."""
    if task == "MNLI":
        return [("train.tsv", "train", MNLI_TRAIN), ("dev_matched.tsv", "validation_matched", MNLI_DEV),
                ("dev_mismatched.tsv", "validation_mismatched", MNLI_DEV),
                ("test_matched.tsv", "test_matched", MNLI_TEST), ("test_mismatched.tsv", "test_mismatched", MNLI_TEST)]
    if task == "diagnostic":
        return [("diagnostic.tsv", "test", TASKS[task][3])]
    _hub, _names, labelled, test = TASKS[task]
    return [("train.tsv", "train", labelled), ("dev.tsv", "validation", labelled), ("test.tsv", "test", test)]


def parse_tasks(value):
    if value.strip().lower() == "all":
        return list(TASKS)
    tasks = []
    for name in value.split(","):
        key = name.strip().lower().replace("-", "").replace("_", "")
        if key not in ALIASES:
            raise UsageError(f"--tasks: unknown GLUE task {name.strip()!r}; known: {', '.join(TASKS)} or all")
        tasks.append(ALIASES[key])
    return list(dict.fromkeys(tasks))


@errors_name_fields
@dataclass(frozen=True, kw_only=True, repr=False)  # DownloadOptions.__repr__: no secrets
class GlueOptions(DownloadOptions):
    """`tasks`: 'all', or task names (a comma-separated string or a tuple, any case, such as 'CoLA,sts-b'), a tuple
    of the task directories after __post_init__; `base_url`: the hub endpoint. The hub client has its own limits."""

    source: ClassVar[str] = "glue"
    tasks: tuple[str, ...] | str = "all"

    def __post_init__(self):
        super().__post_init__()
        refuse_empty(self, "tasks")  # () was "unknown GLUE task ''", a task of no name
        tasks = self.tasks if isinstance(self.tasks, str) else ",".join(self.tasks)
        set_field(self, "tasks", tuple(parse_tasks(tasks)))


def _clean(value):
    return str(value).replace("\t", " ").replace("\r", " ").replace("\n", " ")


def tsv_bytes(header, rows):
    """(UTF-8 TSV, data row count): unquoted, as the GLUE readers expect."""
    lines = [] if header is None else ["\t".join(header)]
    for row in rows:
        lines.append("\t".join(_clean(v) for v in row))
    text = "\n".join(lines) + "\n" if lines else ""
    return text.encode("utf-8"), len(lines) - (header is not None)


def run(options, workdir, progress):
    directory = os.path.join(workdir, "download", "glue")
    # held, as the other sources are: two runs into one workdir appended to one .part and left a file that
    # the manifest called verified
    with hold(directory, "bertprep download glue"):
        return _download(options, directory, progress)


def _download(options, directory, progress):
    tasks = options.tasks
    downloads = SourceDownloads(directory, "glue", progress)
    patterns = [f"{TASKS[t][0]}/*.parquet" for t in tasks]
    commit, files = hub_snapshot(REPO, "main", patterns, options.base_url, progress.quiet, options.limits)
    downloads.set_info(repo=REPO, commit=commit)
    rows = []
    for task in tasks:
        hub_dir, names, _labelled, _test = TASKS[task]
        label = _label(names)
        for filename, split, (header, make_row) in task_outputs(task):
            parts = [(p, local, info) for p, local, info in files if p.startswith(f"{hub_dir}/{split}-")]
            if not parts:
                raise UsageError(f"{REPO}@{commit}: no {hub_dir}/{split}-*.parquet for {task}/{filename}")
            relpath = f"{task}/{filename}"
            sources = {p: info["sha256"] for p, _local, info in parts}
            entry = downloads.manifest["files"].get(relpath)
            if not (entry and entry.get("hub_files") == sources and os.path.exists(downloads.path(relpath))):
                records = (row for _p, local, _i in parts for row in iter_parquet_rows(local, _columns(parts[0][1])))
                data, count = tsv_bytes(header, (make_row(r, label) for r in records))
                atomic_write_bytes(downloads.path(relpath), data)
                entry = {"repo": REPO, "commit": commit, "hub_files": sources, "rows": count, "bytes": len(data),
                         "sha256": hashlib.sha256(data).hexdigest(), "verified": ["hub sha256"]}
                downloads.record(relpath, entry)
            rows.append((relpath, f"{entry['rows']:,} rows"))
    return {"source": "glue", "directory": downloads.directory, "files": downloads.manifest["files"]}, rows


def _columns(local):
    import pyarrow.parquet as pq

    return pq.ParquetFile(local).schema_arrow.names
