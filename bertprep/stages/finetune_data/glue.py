"""`bertprep.create_glue(...)`: GLUE TSV files → the features google-research/bert's run_classifier.py writes
(`bertprep create-glue`: bertprep/cli/create_glue.py).

For MRPC, CoLA and MNLI the examples are those of run_classifier.py's
MrpcProcessor, ColaProcessor and MnliProcessor (columns, header rows, labels,
test placeholders, MNLI's matched dev and test files), and the records equal,
value for value, what its `file_based_convert_examples_to_features` writes
(tests compare TFRecord bytes with goldens the reference wrote):
`[CLS] a [SEP] b [SEP]` with the longer side cut one token at a time (b on
a tie), or `[CLS] a [SEP]` cut to seq − 2 when there is no b, then padding.

The reference has no processor for SST-2, QQP, QNLI, RTE, WNLI and STS-B.
Those follow the GLUE processors of HF transformers' `run_glue` (which
NVIDIA's PyTorch BERT uses too): the same column choices, label lists and
header rows, read from the column layout `bertprep download glue` writes;
STS-B is regression, its score a float label (record kind glue_regression).
Test files carry no labels; like the reference, every test example gets the
first label (id 0; 0.0 for STS-B). Rows are read as run_classifier.py's
`_read_tsv` reads them: lines end at "\\n", carriage returns are dropped (as
TensorFlow's GFile readline does), fields are split on tabs with no quoting.
"""

import csv
import dataclasses
import math
import re
import time
from typing import Any

import numpy as np

from bertprep import storage
from bertprep.atomic import hold, refuse_if_held
from bertprep.corpus import read_text, refuse_cr_only
from bertprep.errors import DataError, UsageError
from bertprep.formats.schemas import GLUE, GLUE_REGRESSION
from bertprep.options import build_options, check_types, errors_name_fields, refuse_empty
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.stages.download.glue import ALIASES as TASK_ALIASES
from bertprep.stages.download.glue import is_glue_header
from bertprep.stages.finetune_data.common import (
    RecordsOptions,
    SplitWriter,
    check_seq,
    load_tokenizer,
    open_manifest,
    record_split,
    run_settings,
    sha256_of,
    split_is_complete,
)

SPLITS = ("train", "dev", "test")
ROLE = {"train": "train", "dev": "eval", "test": "test"}  # split -> output files (train / eval / predict+test)
CHUNK_EXAMPLES = 4096
NLI3 = ["contradiction", "entailment", "neutral"]  # run_classifier.py MnliProcessor.get_labels
NLI2 = ["entailment", "not_entailment"]


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where one file's fields are: header row skipped or not, text columns, label column (None: a test file)."""

    header: bool
    text_a: int
    text_b: int | None = None
    label: int | None = None


@dataclasses.dataclass(frozen=True)
class Task:
    labels: list  # label id = index; None for regression (STS-B)
    files: dict  # split -> file name in the task directory
    columns: dict  # split -> Columns
    convention: str  # whose processor the columns follow


def _task(labels, header, a, b, label, test_a, test_b, convention, dev="dev.tsv", test="test.tsv"):
    labelled = Columns(header, a, b, label)
    return Task(labels, {"train": "train.tsv", "dev": dev, "test": test},
                {"train": labelled, "dev": labelled, "test": Columns(True, test_a, test_b)}, convention)


REFERENCE = "google-research/bert run_classifier.py"
HF = "HF transformers run_glue (glue processors)"
TASKS = {
    "CoLA": Task(["0", "1"], {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"},
                 {"train": Columns(False, 3, None, 1), "dev": Columns(False, 3, None, 1), "test": Columns(True, 1)},
                 REFERENCE),
    "MRPC": _task(["0", "1"], True, 3, 4, 0, 3, 4, REFERENCE),
    "MNLI": _task(NLI3, True, 8, 9, -1, 8, 9, REFERENCE, dev="dev_matched.tsv", test="test_matched.tsv"),
    "SST-2": _task(["0", "1"], True, 0, None, 1, 1, None, HF),
    "STS-B": _task(None, True, 7, 8, -1, 7, 8, HF),
    "QQP": _task(["0", "1"], True, 3, 4, 5, 1, 2, HF),
    "QNLI": _task(NLI2, True, 1, 2, -1, 1, 2, HF),
    "RTE": _task(NLI2, True, 1, 2, -1, 1, 2, HF),
    "WNLI": _task(["0", "1"], True, 1, 2, -1, 1, 2, HF),
}


def task_named(value):
    key = value.strip().lower().replace("-", "").replace("_", "")
    name = TASK_ALIASES.get(key)
    if name not in TASKS:
        raise UsageError(f"--task: unknown GLUE task {value!r}; known: {', '.join(TASKS)}")
    return name


@errors_name_fields
@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateGlueOptions(RecordsOptions):
    """What `create_glue` converts: the GLUE `task`'s TSV directory `data_dir` (e.g. WORKDIR/download/glue/MRPC),
    its `split`s (train, dev, test; None: all three), with run_classifier.py's max_seq_length `seq`; and the
    shared `RecordsOptions`."""

    task: str
    data_dir: str
    split: tuple[str, ...] | None = None
    seq: int = 128

    def __post_init__(self):
        check_types(self)
        if isinstance(self.split, str):
            object.__setattr__(self, "split", (self.split,))
        refuse_empty(self, "split")
        unknown = [split for split in self.split or () if split not in SPLITS]
        if unknown:
            raise UsageError(f"--split must be among {', '.join(SPLITS)}, not {unknown[0]!r}")
        task_named(self.task)
        check_seq(self.seq, 3)
        super().__post_init__()


# ---------------------------------------------------------------- reading the TSV files


def read_rows(path):
    """The rows of a TSV file as run_classifier.py's _read_tsv gets them: [(line number, fields)]."""
    expected = "GLUE files are UTF-8 TSV"
    text = read_text(path, expected=expected)
    refuse_cr_only(text, path, expected)  # its rows ran into one: a CoLA train file lost all but its first
    # A file saved with a byte-order mark (Excel's "UTF-8 CSV", Notepad): the reference keeps it in the first row's
    # first field, where it hid a headerless MRPC file's first label from refuse_an_example_as_header. That field
    # is a header's or an unread one (CoLA's source), so dropping the mark changes no record.
    text = text.removeprefix("\ufeff").replace("\r", "")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    try:
        return [(number, fields) for number, fields in
                enumerate(csv.reader((line + "\n" for line in lines), delimiter="\t", quotechar=None), 1)]
    except csv.Error as exc:
        raise DataError(f"{path}: not a TSV file ({exc})") from None


def read_examples(path, task, split):
    """[(text_a, text_b or None, label)] of one split's file, labels as given (placeholders for test)."""
    columns = TASKS[task].columns[split]
    labels = TASKS[task].labels
    wanted = max(c for c in (columns.text_a, columns.text_b, columns.label) if c is not None and c >= 0) + 1
    rows = read_rows(path)
    if columns.header and rows and len(rows[0][1]) >= wanted:
        refuse_an_example_as_header(path, rows[0][1], columns, labels, f"{task} {split}")
    examples = []
    for number, fields in rows[1 if columns.header else 0:]:
        if len(fields) < wanted:
            raise DataError(f"{path}:{number}: {len(fields)} columns, expected at least {wanted} "
                            f"({task} {split}: {_column_names(columns)})")
        text_b = fields[columns.text_b] if columns.text_b is not None else None
        if columns.label is None:
            label = labels[0] if labels else 0.0
        elif labels is None:
            label = _score(fields[columns.label], path, number)
        else:
            label = fields[columns.label]
            if label not in labels:
                raise DataError(f"{path}:{number}: label {label!r} in column {_column(columns.label)}, "
                                f"expected one of {', '.join(labels)}")
        examples.append((fields[columns.text_a], text_b, label))
    return examples


def refuse_an_example_as_header(path, fields, columns, labels, which):
    """The first row of a file with a header row is skipped, as run_classifier.py's processors skip it: a file saved
    without its header lost its first example without a word (a test file's: every prediction after it on the
    wrong line). Such a row is known by its label column holding a label (a score, for STS-B), which no GLUE
    header's does ("Quality", "label", "gold_label", "score"); in a test file, by naming no GLUE column."""
    if columns.label is None:  # a test file: a header names a GLUE column ("index", "question1"), an example none
        if not is_glue_header("\t".join(fields)):
            raise DataError(f"{path}:1: the first row is skipped as the header row ({which} files start with one), "
                            "but it names no GLUE column (index, sentence, question1, ...): put the header row back")
        return
    value = fields[columns.label]
    if (_DECIMAL.fullmatch(value) is not None) if labels is None else value in labels:
        raise DataError(f"{path}:1: the first row is skipped as the header row ({which} files start with one), but "
                        f"it is an example (label {value!r} in column {_column(columns.label)}): put the header row "
                        "back")


# A decimal score: float() also took "nan", "inf" (written, then refused by validate) and "1_0" (10.0).
_DECIMAL = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")


def _score(value, path, number):
    if not _DECIMAL.fullmatch(value) or not math.isfinite(float(value)):
        raise DataError(f"{path}:{number}: score {value!r} in the last column is not a finite decimal number "
                        "(STS-B is regression)")
    with np.errstate(over="ignore"):  # the records hold float32: -1e308 was written as -inf, which validate refuses
        if not np.isfinite(np.float32(float(value))):
            raise DataError(f"{path}:{number}: score {value!r} in the last column is past float32's range, as the "
                            "records store it (STS-B is regression)")
    return float(value)


def _column(index):
    return "last" if index == -1 else str(index)


def _column_names(columns):
    parts = [f"text in column {columns.text_a}"]
    if columns.text_b is not None:
        parts.append(f"second text in column {columns.text_b}")
    if columns.label is not None:
        parts.append(f"label in column {_column(columns.label)}")
    return ", ".join(parts)


# ---------------------------------------------------------------- examples -> features


def truncated_lengths(a, b, limit):
    """run_classifier.py's _truncate_seq_pair on lengths: pop from the longer side (b on a tie) until a + b <= limit."""
    excess = a + b - limit
    if excess <= 0:
        return a, b
    if a > b:
        cut = min(a - b, excess)
        a, excess = a - cut, excess - cut
    elif b > a:
        cut = min(b - a, excess)
        b, excess = b - cut, excess - cut
    return a - excess // 2, b - (excess + 1) // 2


def feature_columns(examples, tokenizer, seq, labels):
    """The record columns of `examples` ({name: (N, length) array}), as convert_single_example builds them."""
    count = len(examples)
    a_ids, a_offsets = tokenizer.encode(e[0] for e in examples)
    paired = [i for i, e in enumerate(examples) if e[1]]  # run_classifier.py: `if example.text_b:`
    b_ids, b_offsets = tokenizer.encode(examples[i][1] for i in paired)
    b_of = dict(zip(paired, range(len(paired))))
    input_ids = np.zeros((count, seq), np.int32)
    segment_ids = np.zeros((count, seq), np.int32)
    lengths = np.empty(count, np.int64)
    for i in range(count):
        a = a_ids[a_offsets[i]:a_offsets[i + 1]]
        j = b_of.get(i)
        b = b_ids[b_offsets[j]:b_offsets[j + 1]] if j is not None else b_ids[:0]
        row = input_ids[i]
        row[0] = tokenizer.cls_id
        if len(b):  # `if tokens_b:` an empty second text is a single sentence
            la, lb = truncated_lengths(len(a), len(b), seq - 3)
            row[1:la + 1] = a[:la]
            row[la + 1] = tokenizer.sep_id
            row[la + 2:la + 2 + lb] = b[:lb]
            row[la + 2 + lb] = tokenizer.sep_id
            segment_ids[i, la + 2:la + 3 + lb] = 1
            lengths[i] = la + lb + 3
        else:
            la = min(len(a), seq - 2)
            row[1:la + 1] = a[:la]
            row[la + 1] = tokenizer.sep_id
            lengths[i] = la + 2
    if labels is None:
        label_ids = np.array([e[2] for e in examples], np.float32)
    else:
        label_id = {label: index for index, label in enumerate(labels)}
        label_ids = np.array([label_id[e[2]] for e in examples], np.int64)
    return {
        "input_ids": input_ids,
        "input_mask": (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32),
        "segment_ids": segment_ids,
        "label_ids": label_ids.reshape(count, 1),
        "is_real_example": np.ones((count, 1), np.int64),
    }


# ---------------------------------------------------------------- the command


def refuse_an_empty_split(path, task, split):
    """A DataError for a split's file with no example: `(OneFlow cannot read an empty part)` was its reason with
    `--format tfrecord` too, which writes no OneFlow part; a split of no record trains or scores nothing."""
    after = " after its header row" if TASKS[task].columns[split].header else ""
    raise DataError(f"{path}: no examples{after} ({task} {split}); a split needs at least one: pass --split to "
                    "convert only the others")


def _refuse_a_data_dir_beside_the_task(data_dir, task, spec):
    """A UsageError where `--data-dir` is a file (`…/MRPC/train.tsv`), or the directory above the task's (the
    `download glue` root, whose `MRPC/` holds the files): `…/glue/train.tsv: no such file` was all they said."""
    if storage.isfile(data_dir):
        raise UsageError(f"--data-dir {data_dir}: a file; give the directory that holds the {task} files "
                         f"({', '.join(spec.files.values())})")
    below = storage.join(data_dir, task)
    if any(storage.isfile(storage.join(below, name)) for name in spec.files.values()):
        raise UsageError(f"--data-dir {data_dir}: its {task}/ holds the {task} files: give --data-dir {below}")


def _examples_progress(manifest, writers, done, examples, quiet):
    """Progress in examples, counted as each chunk is written (by splits, MNLI's 393k-example train split was
    silent until its end). Every file is read before this, so the total is exact; the splits already complete
    count as done before this run (their examples from the manifest), out of its rate and ETA."""
    before = sum(manifest["files"][next(iter(writers[split].names.values()))]["examples"] for split in done)
    return Progress("create-glue", total=before + sum(map(len, examples.values())), unit="examples", quiet=quiet,
                    initial=before)


def create_glue(options: CreateGlueOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Write the records of a GLUE task's splits (`options`, or CreateGlueOptions(**fields)); progress on stderr
    unless `quiet`. Every file is read and checked before anything is written; a split already written with
    the same input and settings is left as it is (`complete_before`: all were)."""
    options = build_options(CreateGlueOptions, options, fields)  # not both (a keyword beside one was ignored)
    started = time.monotonic()
    task = task_named(options.task)
    splits = [s for s in SPLITS if s in (options.split or SPLITS)]
    spec = TASKS[task]
    kind = GLUE if spec.labels is not None else GLUE_REGRESSION
    paths = {split: storage.join(options.data_dir, spec.files[split]) for split in splits}
    for split, path in paths.items():
        if not storage.isfile(path):
            _refuse_a_data_dir_beside_the_task(options.data_dir, task, spec)
        storage.require(path, "file", DataError(f"{path}: no such file ({task} {split} split; pass --split to "
                                                "convert only some splits)"))
    refuse_if_held(storage.absolute(options.out))  # before every split is read and checked
    tokenizer = load_tokenizer(options.vocab, options.lower_case)
    out = storage.absolute(options.out)
    storage.check_reachable(out)  # before the examples are converted: a bucket that is not there fails now
    settings = run_settings(tokenizer, options.seq, task=task, labels=spec.labels,
                            params={"convention": spec.convention})
    manifest = open_manifest(out, "create-glue", settings)
    sources = {split: {"path": storage.display(storage.absolute(path)), "sha256": sha256_of(path)}
               for split, path in paths.items()}
    writers = {split: SplitWriter(out, ROLE[split], options.format, kind) for split in splits}
    done = {split for split in splits
            if split_is_complete(out, manifest, split, list(writers[split].names.values()), sources[split]["sha256"])}
    # Every file is read and checked before anything is written: bad input leaves the directory as it was.
    examples = {split: read_examples(paths[split], task, split) for split in splits if split not in done}
    for split, found in examples.items():
        if not found:
            refuse_an_empty_split(paths[split], task, split)
    progress = _examples_progress(manifest, writers, done, examples, quiet)
    results = {}
    with hold(out, "bertprep create-glue") as staging:
        for split in splits:
            writer = writers[split]
            names = list(writer.names.values())
            if split in done:
                progress.note(f"{split}: already complete in {out}")
                entry = manifest["files"][names[0]]
                results[split] = {"examples": entry["examples"], "records": entry["records"], "created": False}
            else:
                with writer.staged_in(staging):
                    for first in range(0, len(examples[split]), CHUNK_EXAMPLES):
                        chunk = examples[split][first:first + CHUNK_EXAMPLES]
                        writer.write(feature_columns(chunk, tokenizer, options.seq, spec.labels))
                        progress.advance(len(chunk), records=len(chunk))  # one record per example
                record_split(out, manifest, split, sources[split], writer, len(examples[split]))
                results[split] = {"examples": len(examples[split]), "records": writer.records, "created": True}
            results[split]["files"] = {name: {k: manifest["files"][name][k] for k in ("bytes", "sha256")}
                                       for name in names}
    progress.close()
    summary = {"out": storage.display(out), "task": task, "kind": kind.name, "labels": spec.labels,
               "splits": results, "seconds": round(time.monotonic() - started, 3)}
    rows = [("out", summary["out"]),
            ("task", f"{task} ({kind.name}, labels {spec.labels or 'float'}; {spec.convention})")]
    for split, result in results.items():
        files = ", ".join(f"{name} ({human_bytes(e['bytes'])})" for name, e in result["files"].items())
        rows.append((split, f"{result['examples']:,} examples -> {files}"
                     + ("" if result["created"] else " (already complete)")))
    rows.append(("seconds", f"{summary['seconds']:.2f}"))
    return Summary("bertprep create-glue: done", summary, tuple(rows), complete_before=done == set(splits))
