"""The task head of a fine-tuned checkpoint (`trainer finetune --checkpoint-dir`), carried through
`checkpoint convert` into what each kind's own fine-tuning code restores.

- GLUE: ours bert/classifier/{kernel,bias} (a Dense, [H, n]); Google run_classifier.py's
  output_weights [n, H], output_bias [n]; Hugging Face BertForSequenceClassification's
  classifier.{weight,bias}.
- SQuAD: ours bert/squad/{kernel,bias} ([H, 2]: start, end); Google run_squad.py's
  cls/squad/output_weights [2, H], cls/squad/output_bias [2]; Hugging Face BertForQuestionAnswering's
  qa_outputs.{weight,bias}.

run_classifier.py's create_model makes its two variables outside any scope (so they have no
prefix) and computes matmul(pooled, output_weights, transpose_b=True) + output_bias; run_squad.py's
the same on every token, unstacking start then end. Both are our kernel transposed, and
Hugging Face's nn.Linear weight has that layout too: the head is held in Google's layout, under
Google's names, in `Checkpoint.weights` beside the encoder (google.write saves it as it saves the
rest, `parameters()` counts it), and `Checkpoint.task_head` says which head it is.

The task and its labels come from the fine-tuned checkpoint's state.json (settings.task and
settings.labels, which `trainer finetune` records; a checkpoint saved before labels were recorded
takes its task's labels from trainer/tasks.py). Hugging Face's config names the labels (id2label):
a head whose labels are not known, or whose output count is not theirs, is not written there.
Google's variables carry no labels; a Google export is written all the same.

Every reader reads the head of its kind (from_ours; from_foreign: Google's names, or Hugging Face's with
config.json's id2label and finetuning_task), so convert carries it from any kind. Reading such checkpoints
back as --init-checkpoint (any kind) loads the encoder and pooler; the head is not a pretraining weight and
starts from its initialization, as the reference's does when it fine-tunes from a pretrained checkpoint.
"""

import dataclasses
import json
import os

from bertprep.errors import DataError, UsageError

# kind -> (our Dense layer's path, Google's weight and bias names, Hugging Face's module, its class)
HEADS = {
    "classifier": ("bert/classifier", ("output_weights", "output_bias"), "classifier",
                   "BertForSequenceClassification"),
    "squad": ("bert/squad", ("cls/squad/output_weights", "cls/squad/output_bias"), "qa_outputs",
              "BertForQuestionAnswering"),
}

MULTI_LABEL = "multi_label_classification"  # Hugging Face's problem_type of a classifier scored label by label

# Every name a head's weight or bias has in a Google checkpoint or a Hugging Face state dict (from_foreign).
FOREIGN_NAMES = frozenset(name for _ours, google, module, _class in HEADS.values()
                          for name in (*google, f"{module}.weight", f"{module}.bias"))


@dataclasses.dataclass
class TaskHead:
    kind: str  # "classifier" or "squad"
    task: str  # as trainer.tasks names it; None where the checkpoint does not say
    labels: tuple  # a classifier's labels by id; None: a regression, SQuAD, or not known
    outputs: int
    regression: bool = False
    multi_label: bool = False  # a Hugging Face classifier of problem_type multi_label_classification (sigmoid)

    @property
    def labels_known(self):
        if self.kind == "squad" or self.regression:
            return self.outputs == (2 if self.kind == "squad" else 1)
        return self.labels is not None and len(self.labels) == self.outputs

    def describe(self):
        if self.kind == "squad":
            return "SQuAD span head (start, end)"
        what = "regression" if self.regression else f"labels {', '.join(self.labels)}" if self.labels_known \
            else "labels not known"
        what = f"multi-label: {what}" if self.multi_label else what
        return f"{self.task or 'GLUE'} classifier head, {self.outputs} outputs ({what})"


def google_names(head):
    return HEADS[head.kind][1]


def from_ours(directory, arrays, hidden_size):
    """(TaskHead, {Google name: array}) of the head among a checkpoint's `arrays` not in the name table
    ({our path: array}), or (None, {})."""
    for kind, (ours, google, _, _) in HEADS.items():
        kernel, bias = arrays.get(f"{ours}/kernel"), arrays.get(f"{ours}/bias")
        if kernel is None or bias is None:
            continue
        if kernel.ndim != 2 or kernel.shape[0] != hidden_size or bias.shape != kernel.shape[1:]:
            raise DataError(f"{directory}: task head {ours} has shapes {kernel.shape} and {bias.shape}, expected "
                            f"[{hidden_size}, n] and [n]")
        head = _described(kind, kernel.shape[1], _settings(directory))
        return head, {google[0]: kernel.T.copy(), google[1]: bias}
    return None, {}


def from_foreign(source, arrays, hidden_size, settings):
    """(TaskHead, {Google name: array}, the names it took) of the head among `arrays` ({name: array}: a Google
    checkpoint's variables by Google's names, or a Hugging Face state dict's by its canonical names), both in
    Google's layout ([n, H] and [n]); (None, {}, ()) where there is none. Their readers skipped it as not BERT's,
    so `convert` wrote the encoder alone (a BertModel for --to hf), exit 0, the fine-tune's head gone."""
    for kind, (_ours, google, module, _class) in HEADS.items():
        for weight, bias in (google, (f"{module}.weight", f"{module}.bias")):
            kernel, offset = arrays.get(weight), arrays.get(bias)
            if kernel is None or offset is None or (kind == "squad" and kernel.shape[:1] != (2,)):
                continue  # a span head is start and end; another count is no SQuAD head: skipped, as before
            if kernel.ndim != 2 or kernel.shape[1] != hidden_size or offset.shape != kernel.shape[:1]:
                raise DataError(f"{source}: task head {weight} has shapes {kernel.shape} and {offset.shape}, "
                                f"expected [n, {hidden_size}] and [n]")
            head = _described(kind, kernel.shape[0], settings)
            return head, {google[0]: kernel, google[1]: offset}, (weight, bias)
    return None, {}, ()


# transformers' BERT classes whose head is `classifier.*` too, but no sentence classifier's: their config.json's
# architectures names them. Read as BertForSequenceClassification's, a token classifier was exported as a sentence
# classifier (its per-token head on a pooler it never had), a multiple-choice model as a one-output regression.
OTHER_HF_CLASSIFIERS = {"BertForTokenClassification": "a label for each token",
                        "BertForMultipleChoice": "a score for each choice of a question"}


def without_other_hf_classifier(values, arrays):
    """(`arrays` without `classifier.*`, a note saying why) where a Hugging Face config.json (`values`) names one
    of OTHER_HF_CLASSIFIERS, whose head convert does not carry; else (`arrays`, None)."""
    architectures = values.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    held = sorted(name for name in arrays if name.startswith("classifier."))
    if not isinstance(architecture, str) or architecture not in OTHER_HF_CLASSIFIERS or not held:
        return arrays, None
    note = (f"{' and '.join(held)}: the head of a {architecture} (config.json's architectures), "
            f"{OTHER_HF_CLASSIFIERS[architecture]}, not a sentence classifier's: not read as a task head, and not "
            "converted (the encoder is)")
    return {name: value for name, value in arrays.items() if name not in held}, note


def attach(checkpoint, head, weights):
    """Put a read head (from_ours, from_foreign) on the checked `checkpoint`, and say so."""
    if head:
        checkpoint.task_head = head
        checkpoint.weights.update(weights)
        checkpoint.notes.append(f"fine-tuned: {head.describe()}")
    return checkpoint


def hf_settings(values):
    """The task and labels a Hugging Face config.json (`values`) gives, as state.json's settings name them."""
    id2label = values.get("id2label")
    labels = None
    if isinstance(id2label, dict) and all(str(i) in id2label for i in range(len(id2label))):
        labels = [id2label[str(i)] for i in range(len(id2label))]
    return {"task": values.get("finetuning_task"), "labels": labels, "problem_type": values.get("problem_type")}


def _settings(directory):
    try:
        with open(os.path.join(directory, "state.json"), encoding="utf-8") as f:
            settings = json.load(f).get("settings")
    except (OSError, ValueError, AttributeError):
        return {}
    return settings if isinstance(settings, dict) else {}


def _described(kind, outputs, settings):
    """The TaskHead of a head with `outputs` units, its task and labels from the run's settings."""
    from trainer.tasks import task_named

    task = settings.get("task")
    try:
        known = task_named(task) if isinstance(task, str) else None
    except UsageError:
        known = None
    labels = settings.get("labels") or (known.labels if known else None)
    if not (isinstance(labels, (list, tuple)) and all(isinstance(label, str) for label in labels)):
        labels = None
    regression = bool(known and known.is_regression) or settings.get("problem_type") == "regression"
    # transformers' pipeline scores such a head with a sigmoid each, not a softmax: it was exported as
    # single_label_classification, every score another
    multi_label = kind == "classifier" and not regression and settings.get("problem_type") == MULTI_LABEL
    return TaskHead(kind, known.name if known else None, tuple(labels) if labels else None, outputs,
                    regression=regression, multi_label=multi_label)


def name_labels(checkpoint, labels):
    """convert's `labels` (a classifier's, in id order) on the read `checkpoint`'s head: a Google classifier's
    variables carry none, and Hugging Face's config names every one. One line where they fit no head."""
    head = checkpoint.task_head
    if head is None or head.kind != "classifier" or head.regression:
        what = "no task head" if head is None else "a regression head" if head.regression else f"a {head.kind} head"
        raise UsageError(f"--labels: {checkpoint.path} holds {what}; labels name a fine-tuned classifier's outputs")
    if len(labels) != head.outputs or len(set(labels)) != len(labels) or not all(labels):
        raise UsageError(f"--labels {','.join(labels)}: {head.outputs} different non-empty labels expected, one "
                         f"for each output of {checkpoint.path}'s classifier head, in id order")
    read_note = f"fine-tuned: {head.describe()}"
    checkpoint.task_head = dataclasses.replace(head, labels=tuple(labels))
    # the note the read head left (attach) said "labels not known": the summary's notes then contradicted its
    # task_head, which names them
    checkpoint.notes[:] = [f"fine-tuned: {checkpoint.task_head.describe()}" if note == read_note else note
                           for note in checkpoint.notes]


def check_writable(checkpoint, to):
    """Before anything is written: Hugging Face's config needs the head's labels."""
    head = checkpoint.task_head
    if to == "hf" and head is not None and not head.labels_known:
        said = f"task {head.task}'s {len(head.labels)} labels" if head.labels else "no task labels"
        if checkpoint.kind != "bertprep":  # Google's variables carry no labels
            named = f"{len(head.labels)} label{'s' * (len(head.labels) != 1)}" if head.labels else "no labels"
            raise DataError(f"{checkpoint.path}: a fine-tuned {head.kind} head of {head.outputs} outputs, and the "
                            f"checkpoint names {named}: Hugging Face's config names every label (id2label); "
                            "name them with --labels, in id order")
        raise DataError(f"{checkpoint.path}: a fine-tuned {head.kind} head of {head.outputs} outputs, and its "
                        f"state.json gives {said}: Hugging Face's config names every label (id2label); convert "
                        "--to google or bertprep instead, or record settings.task / settings.labels in state.json")


def hf_tensors(checkpoint):
    """[(Hugging Face name, Google name)] of the head's weights (same layout), or []."""
    head = checkpoint.task_head
    if head is None:
        return []
    module, (weight, bias) = HEADS[head.kind][2], HEADS[head.kind][1]
    return [(f"{module}.weight", weight), (f"{module}.bias", bias)]


def hf_config(checkpoint):
    """config.json entries of the head's model class: its architecture, and a classifier's labels and
    problem_type (what BertForSequenceClassification's loss and pipeline("text-classification") read)."""
    head = checkpoint.task_head
    if head is None:
        return {}
    config = {"architectures": [HEADS[head.kind][3]], "finetuning_task": head.task or head.kind}
    if head.kind == "classifier":
        labels = head.labels if not head.regression else ("LABEL_0",)
        config.update(num_labels=head.outputs, id2label={str(i): label for i, label in enumerate(labels)},
                      label2id={label: i for i, label in enumerate(labels)},
                      problem_type="regression" if head.regression else MULTI_LABEL if head.multi_label
                      else "single_label_classification")
    return config


def ours_arrays(checkpoint):
    """{our path: array} of the head (our layout), or {}."""
    head = checkpoint.task_head
    if head is None:
        return {}
    ours, (weight, bias) = HEADS[head.kind][0], HEADS[head.kind][1]
    return {f"{ours}/kernel": checkpoint.weights[weight].T.copy(), f"{ours}/bias": checkpoint.weights[bias]}


def settings(checkpoint):
    """state.json settings that name the head's task and labels, as `trainer finetune` writes them."""
    head = checkpoint.task_head
    if head is None:
        return {}
    # problem_type only where it is multi-label (what _described reads back): other state.json files as before
    return {"task": head.task, "labels": list(head.labels) if head.labels else None,
            **({"problem_type": MULTI_LABEL} if head.multi_label else {})}
