"""Fine-tuning tasks and their data: what each task reads, predicts and scores.

A data directory is one `bertprep create-squad` / `create-glue` output,
flat:

    DIR/{train,eval,predict}.tf_record          TFRecord (google-research/bert's names)
    DIR/{train,eval,test}.of_record-<i>         OFRecord (OneFlow-Benchmark's names)
    DIR/manifest.json                           task, labels, dims, vocab, lower_case, sources
    DIR/eval.{features,examples}.jsonl          SQuAD: what turns span logits into answers

The split `--predict` predicts (Task.predict_split) is GLUE's test split
(predict.tf_record: run_classifier.py's name), unlabelled; for SQuAD it is
the eval split, as run_squad.py's --predict_file becomes its eval.tf_record.

Without a manifest (the golden files copied under these names, say) the task
comes from --task and the label count from the task.
"""

import dataclasses

from bertprep import formats, storage
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder, natural_key
from bertprep.formats import codecs
from bertprep.formats.schemas import GLUE, GLUE_REGRESSION, SQUAD_EVAL, SQUAD_TRAIN, first_outside
from bertprep.records_manifest import file_digests, load_records_manifest, refuse_unlisted_records
from trainer.data import READER, check_model_values, holds_pretraining_records, no_records_directory


@dataclasses.dataclass(frozen=True)
class Task:
    name: str  # as the GLUE benchmark and the manifests spell it
    train_kind: object
    eval_kind: object
    labels: tuple | None = None  # label id = index; None: regression or SQuAD
    metrics: tuple = ()  # GLUE metrics (metrics.py function names) beside accuracy

    @property
    def is_squad(self):
        return self.name == "squad"

    @property
    def is_regression(self):
        return self.train_kind is GLUE_REGRESSION

    @property
    def predict_split(self):
        return "eval" if self.is_squad else "test"


def _glue(name, labels, *metrics):
    kind = GLUE_REGRESSION if labels is None else GLUE
    return Task(name, kind, kind, labels, metrics)


TASKS = {task.name.lower().replace("-", ""): task for task in (
    Task("squad", SQUAD_TRAIN, SQUAD_EVAL),
    _glue("CoLA", ("0", "1"), "matthews_correlation"),
    _glue("SST-2", ("0", "1")),
    _glue("MRPC", ("0", "1"), "f1_positive"),
    _glue("STS-B", None, "pearson", "spearman"),
    _glue("QQP", ("0", "1"), "f1_positive"),
    _glue("MNLI", ("contradiction", "entailment", "neutral")),
    _glue("QNLI", ("entailment", "not_entailment")),
    _glue("RTE", ("entailment", "not_entailment")),
    _glue("WNLI", ("0", "1")),
)}


def task_named(name):
    """squad, cola, sst-2 (or sst2), mrpc, sts-b, qqp, mnli, qnli, rte, wnli; any case. An unknown name is refused
    naming --task, which FinetuneConfig writes as its field (`unknown task 'mrcp'` named neither, where
    bertprep.create_glue's says `CreateGlueOptions.task: unknown GLUE task`)."""
    key = name.lower().replace("-", "").replace("_", "")
    if key not in TASKS:
        raise UsageError(f"--task: unknown task {name!r} (known: "
                         f"{', '.join(t.name.lower() for t in TASKS.values())})")
    return TASKS[key]


class TaskData:
    """The record files of one task's data directory in one format, and what its manifest says.

    Offers what trainer.data.RecordStream reads for the training split: `files`, `count(path)`, `sha256(path)`,
    `check_labels(chunk, path, row)`, `fmt`, `data_dir`, `kind`, `dims`, `batch_kind` and `masking` (task records
    are never masked).
    """

    masking = None

    def __init__(self, data_dir, fmt, task):
        folder = self.folder = Folder(data_dir)
        folder.require("directory", no_records_directory(folder))
        self.data_dir, self.fmt, self.task = data_dir, fmt, task
        self.manifest = load_records_manifest(data_dir, (fmt,)) or {}  # its files there, its fields sound
        manifest_task = self.manifest.get("task")
        if manifest_task and manifest_task.lower().replace("-", "") != task.name.lower().replace("-", ""):
            raise UsageError(f"{folder}: records of task {manifest_task}, not {task.name} (--task)")
        codec = codecs.get(fmt)
        self.files = {split: in_part_order(folder.glob(codec.task_glob(split))) for split in ("train", "eval", "test")}
        for found in self.files.values():  # another run's part (train.of_record-3 of a bigger one), a stray file
            refuse_unlisted_records(found, self.manifest, data_dir, READER)
        if not self.files["train"]:
            if holds_pretraining_records(data_dir, fmt):  # it said "no tfrecord training records" of them
                raise DataError(f"{folder}: pretraining records (of `bertprep create` or `pack`), not fine-tuning "
                                "records: pretrain on them with `python -m trainer`; fine-tuning reads the records "
                                "`bertprep create-squad` or `create-glue` writes")
            raise DataError(f"{folder}: no {fmt} training records ({codec.task_glob('train')})"
                            + _other_formats(folder, fmt))
        self.kind = self.batch_kind = task.train_kind
        self.dims = self._dims_of(self.files["train"][0], self.kind)
        if task.is_squad:
            self.files["test"] = []  # create-squad writes none: SQuAD predicts its eval split
        for split, kind in (("eval", task.eval_kind), ("test", task.train_kind)):
            if self.files[split]:  # checked now, before any training: another task's records are one line
                dims = self._dims_of(self.files[split][0], kind)
                if dims != self.dims:
                    raise DataError(f"{self.files[split][0]}: sequence length {dims['seq']} differs from the "
                                    f"training records' {self.dims['seq']}")
        if task.is_squad and self.files["eval"]:
            for path in self.eval_metadata:
                if not storage.isfile(path):
                    raise DataError(f"{path}: missing: SQuAD answers need the evaluation metadata create-squad writes")
        self.labels = self.manifest.get("labels") or task.labels
        if not task.is_squad and not task.is_regression and len(self.labels) < 2:
            raise DataError(f"{storage.display(folder.path('manifest.json'))}: labels {self.labels!r}: a "
                            "classifier needs two or more")
        self._counts = {}
        self._digests = file_digests(self.manifest, data_dir)

    def sha256(self, path):
        """The manifest's sha256 of a record file (checked as RecordStream reads it), or None."""
        return self._digests.get(storage.normpath(path))

    @staticmethod
    def _dims_of(path, expected):
        kind = formats.record_kind(path)
        if kind is not expected:
            raise DataError(f"{path}: {kind.name} records, expected {expected.name}")
        first = next(formats.read_records(path))
        return kind.dims_of({name: len(values) for name, values in first.items()})

    @property
    def eval_metadata(self):
        """SQuAD: the paths of eval.features.jsonl and eval.examples.jsonl."""
        return tuple(self.folder.path(f"eval.{name}.jsonl") for name in ("features", "examples"))

    @property
    def seq(self):
        return self.dims["seq"]

    @property
    def vocab_size(self):
        return (self.manifest.get("vocab") or {}).get("size")

    @property
    def lower_case(self):
        return self.manifest.get("lower_case", True)

    @property
    def version_2_with_negative(self):
        return bool(self.manifest.get("version_2_with_negative"))

    def source(self, split):
        """The input file a split was made from (the manifest's "source"), or None."""
        entry = (self.manifest.get("source") or {}).get(split)
        return entry.get("path") if isinstance(entry, dict) else entry

    def count(self, path):
        if path not in self._counts:
            self._counts[path] = sum(1 for _ in formats.iter_payloads(path, self.fmt, verify=False))
        return self._counts[path]

    def records(self, split):
        return sum(self.count(path) for path in self.files[split])

    @property
    def label_count(self):
        """The label ids a classifier's records may hold (0 .. count - 1); None where labels are no ids
        (a regression's are its scores, SQuAD's records have none)."""
        return None if self.task.is_squad or self.task.is_regression else len(self.labels)

    def check_labels(self, chunk, path, first_row=0):
        """Every label id of a chunk of records indexes the head's logits: one beyond them (another task's
        records) trained silently (an out-of-range one-hot is all zeros) and failed the scoring with an
        IndexError. Called on each chunk RecordStream reads, beside its int32 and vocab checks."""
        count = self.label_count
        outside = None if count is None else first_outside(chunk["label_ids"], 0, count - 1)
        if outside is not None:
            raise DataError(f"{path}: row {first_row + outside[0]}: label_ids {chunk['label_ids'][outside]}, but "
                            f"{self.task.name} has {count} labels (0..{count - 1})")

    def check_split_labels(self, split):
        """check_labels over a whole split before any training: the eval split is read only once the
        training is done."""
        if self.label_count is None:
            return
        kind = self.task.eval_kind if split == "eval" else self.kind
        for path in self.files[split]:
            row = 0
            for chunk in formats.read_batches(path, 8192, self.fmt, kind=kind, dims=self.dims):
                self.check_labels(chunk, path, row)
                row += len(chunk["label_ids"])

    def check_split_values(self, split, model):
        """Every record of a split read only once the training is done (the eval split, --predict's test split)
        read whole before it: its framing, its manifest's sha256, and its integers in int32, token ids below the
        `model`'s vocab_size and segment ids below its type_vocab_size (data.check_model_values). A damaged file,
        or an id beyond the embeddings (records without a manifest naming their vocab, a segment id 2), ended the
        run after every step had been trained and the checkpoint saved: a truncated file in one line, an id in
        TensorFlow's gather traceback (JAX's gather clamps it: another token's row); a file changed since its
        manifest was predicted."""
        kind = self.task.eval_kind if split == "eval" else self.kind
        for path in self.files[split]:
            row = 0
            digest = self.sha256(path)  # the manifest's: a file changed since, its size kept, was predicted as it is
            for chunk in formats.read_batches(path, 8192, self.fmt, kind=kind, dims=self.dims,
                                              digests={storage.normpath(path): digest} if digest else None):
                check_model_values(kind, chunk, path, row, None, model)
                row += len(chunk["input_ids"])


def _other_formats(folder, fmt):
    """", but tfrecord ones (train.tf_record): give --format tfrecord" where the Folder `folder` holds training
    files of formats other than `fmt`, else "": "no ofrecord training records" of a directory of TFRecord ones
    read as if it held none."""
    held = [name for name in codecs.finetuning_names()
            if name != fmt and folder.glob(codecs.get(name).task_glob("train"))]
    if not held:
        return ""
    ones = " and ".join(f"{name} ones ({codecs.get(name).task_glob('train')})" for name in held)
    return f", but {ones}: give --format {held[0]}"


def in_part_order(paths):
    """OFRecord parts by their index, `test.of_record-2` before `-10`: sorted as text, the eleventh part was read
    third, so --predict's test_results.tsv (a line per test example, in record order: test.tsv's order) was out of
    order without a word, and SQuAD's eval records did not match eval.features.jsonl."""
    return sorted(paths, key=natural_key)
