"""What `bertprep validate` checks in SQuAD and GLUE fine-tuning records beyond framing and schema, and their
statistics.

The records are run_squad.py's and run_classifier.py's features: `[CLS] a
[SEP] b [SEP]` (SQuAD: question, context; GLUE: one or two texts) then
padding, segment 1 over b. Each invariant is one NumPy expression over a
batch, as in validate.pretraining; a check whose premise is broken (no
readable mask, no [SEP] where one must be) is not judged, so one damage gives
one finding. A GLUE record with is_real_example 0 is the reference's
all-zero TPU padding example: it must be all zeros and nothing else is judged.
"""

import dataclasses

import numpy as np

from bertprep.stages.validate.pretraining import CHECKS as PRETRAINING_CHECKS
from bertprep.stages.validate.pretraining import explain_shared

FIRST_UNIQUE_ID = 1000000000  # run_squad.py's first unique_id

# check id -> what it proves (the table's rows, in order). The ids pretraining also has mean the same there.
STRUCTURE = {
    "input_mask": "ones over the real tokens, then zeros",
    "cls": "input_ids[0] is [CLS]",
    "separators": "[SEP] after the first segment and at the last real token (SQuAD, unmasked: exactly two)",
    "segment_ids": "0…0 1…1 over the real tokens, then 0",
    "padding": "input_ids 0 after the real tokens",
    "vocab": "token ids inside the vocabulary",
}
SQUAD = {
    "unique_ids": f"from {FIRST_UNIQUE_ID:,}, one more than the record before",
}
SQUAD_TRAIN = {
    "answer_span": "start ≤ end: both 0 (no answer in this window) or both inside the context segment",
    "is_impossible": "0 or 1; an impossible question has start = end = 0",
}
GLUE = {
    "label_ids": "class ids in 0 … labels − 1 (the manifest's label list); STS-B: a finite score",
    "is_real_example": "1, or 0 for an all-zero padding example (the reference's TPU padding)",
}
# Unmasked pretraining instances (create --masking dynamic) share the structure checks.
UNMASKED = {"next_sentence_labels": PRETRAINING_CHECKS["next_sentence_labels"]}
# The kinds a fine-tuning directory may hold side by side, one per split (SQuAD train and eval differ).
FINETUNE_KINDS = ("squad_train", "squad_eval", "glue", "glue_regression")


@dataclasses.dataclass
class Derived:
    length: np.ndarray  # real tokens (ones in input_mask)
    mask_ok: np.ndarray
    seps: np.ndarray  # [SEP]s among the real tokens
    sep1: np.ndarray  # the first [SEP]
    sep_ok: np.ndarray
    judged: np.ndarray  # records whose structure is judged (GLUE padding examples are not)


def derive(batch, spec):
    ids, mask = batch["input_ids"], batch["input_mask"]
    count, seq = ids.shape
    length = (mask == 1).sum(axis=1)
    real = np.arange(seq) < length[:, None]
    mask_ok = (((mask == 0) | (mask == 1)).all(axis=1) & (mask[:, :1] == 1).all(axis=1)
               & (mask[:, 1:] <= mask[:, :-1]).all(axis=1))
    is_sep = (ids == spec.sep_id) & real
    seps = is_sep.sum(axis=1)
    sep1 = is_sep.argmax(axis=1)
    last_is_sep = is_sep[np.arange(count), np.maximum(length - 1, 0)] & (length > 1)
    two_segments = "unique_ids" in batch or "next_sentence_labels" in batch  # SQuAD; unmasked: A and B
    count_ok = (seps == 2) if two_segments else (seps == 1) | (seps == 2)
    sep_ok = mask_ok & count_ok & last_is_sep & (sep1 >= 1) & ((seps == 1) | (sep1 <= length - 3))
    judged = np.ones(count, bool) if "is_real_example" not in batch else batch["is_real_example"][:, 0] != 0
    return Derived(length, mask_ok, seps, sep1, sep_ok, judged)


def failure_masks(batch, d, spec):
    """{check: (N,) bool}, True where the record fails the check."""
    ids, seg = batch["input_ids"], batch["segment_ids"]
    count, seq = ids.shape
    cols = np.arange(seq)
    real = cols < d.length[:, None]
    judged = d.judged
    fails = {
        "input_mask": judged & ~d.mask_ok,
        "cls": judged & (ids[:, 0] != spec.cls_id),
        "separators": judged & d.mask_ok & ~d.sep_ok,
        "segment_ids": judged & d.sep_ok & (seg != ((cols > d.sep1[:, None]) & real)).any(axis=1),
        "padding": judged & d.mask_ok & ((ids != 0) & ~real).any(axis=1),
    }
    vocab_bad = (ids < 0).any(axis=1)
    if spec.vocab_size is not None:
        vocab_bad |= (ids >= spec.vocab_size).any(axis=1)
    fails["vocab"] = vocab_bad
    if "unique_ids" in batch:
        ids_ = batch["unique_ids"][:, 0]
        bad = ids_ < FIRST_UNIQUE_ID
        bad[1:] |= ids_[1:] != ids_[:-1] + 1
        fails["unique_ids"] = bad
    if "start_positions" in batch:
        start, end = batch["start_positions"][:, 0], batch["end_positions"][:, 0]
        impossible = batch["is_impossible"][:, 0]
        none = (start == 0) & (end == 0)
        inside = (start > d.sep1) & (start <= end) & (end < d.length - 1)
        fails["answer_span"] = d.sep_ok & ~(none | inside)
        fails["is_impossible"] = ~((impossible == 0) | ((impossible == 1) & none))
    if "next_sentence_labels" in batch:
        fails["next_sentence_labels"] = ~np.isin(batch["next_sentence_labels"][:, 0], (0, 1))
    if "is_real_example" in batch:
        real_flag = batch["is_real_example"][:, 0]
        all_zero = np.ones(count, bool)
        for name, values in batch.items():
            if name != "is_real_example":
                all_zero &= (values.reshape(count, -1) == 0).all(axis=1)
        fails["is_real_example"] = ~((real_flag == 1) | ((real_flag == 0) & all_zero))
        labels = batch["label_ids"][:, 0]
        if labels.dtype.kind == "f":
            fails["label_ids"] = judged & ~np.isfinite(labels)
        else:
            upper = spec.num_labels if spec.num_labels is not None else np.iinfo(np.int64).max
            fails["label_ids"] = judged & ((labels < 0) | (labels >= upper))
    return fails


def explain(check, batch, d, i, spec):
    """(field, message) saying exactly what record `i` of the batch gets wrong for `check`."""
    ids, mask, seg = batch["input_ids"][i], batch["input_mask"][i], batch["segment_ids"][i]
    length = int(d.length[i])
    shared = explain_shared(check, ids, mask, seg, int(d.sep1[i]), length)
    if shared is not None:
        return shared
    if check == "cls":
        return "input_ids", f"input_ids[0] is {int(ids[0])}, expected [CLS] ({spec.cls_id})"
    if check == "separators":
        where = [int(j) for j in np.flatnonzero(ids[:length] == spec.sep_id)]
        two_segments = "unique_ids" in batch or "next_sentence_labels" in batch
        expected = "2" if two_segments else "1 or 2"
        if len(where) not in ((2,) if two_segments else (1, 2)):
            return "input_ids", f"{len(where)} [SEP] ({spec.sep_id}) at {where}, expected {expected} (length {length})"
        if where[-1] != length - 1:
            return "input_ids", f"last [SEP] at {where[-1]}, expected at the last real token {length - 1}"
        if where[0] < 1:
            return "input_ids", "[SEP] at 0, expected [CLS] there"
        return "input_ids", f"[SEP] at {where} leave the second segment empty"
    if check == "vocab":
        limit = f"< {spec.vocab_size}" if spec.vocab_size is not None else ">= 0"
        j = next(j for j, v in enumerate(ids) if v < 0 or (spec.vocab_size is not None and v >= spec.vocab_size))
        return "input_ids", f"input_ids[{j}] is {int(ids[j])}, expected an id {limit} (vocab size)"
    if check == "unique_ids":
        value = int(batch["unique_ids"][i][0])
        if value < FIRST_UNIQUE_ID:
            return "unique_ids", f"{value}, expected at least {FIRST_UNIQUE_ID}"
        return "unique_ids", f"{value} after {int(batch['unique_ids'][i - 1][0])}, expected one more"
    if check == "answer_span":
        start, end = int(batch["start_positions"][i][0]), int(batch["end_positions"][i][0])
        context = f"the context is positions {int(d.sep1[i]) + 1} … {length - 2}"
        if start > end:
            return "start_positions", f"start {start} after end {end}"
        return "start_positions", f"answer {start} … {end}, expected 0 … 0 or inside the context ({context})"
    if check == "is_impossible":
        value = int(batch["is_impossible"][i][0])
        if value not in (0, 1):
            return "is_impossible", f"{value}, expected 0 or 1"
        start, end = int(batch["start_positions"][i][0]), int(batch["end_positions"][i][0])
        return "is_impossible", f"1 with an answer at {start} … {end}, expected start = end = 0"
    if check == "next_sentence_labels":
        return "next_sentence_labels", f"label {int(batch['next_sentence_labels'][i][0])}, expected 0 or 1"
    if check == "is_real_example":
        value = int(batch["is_real_example"][i][0])
        if value not in (0, 1):
            return "is_real_example", f"{value}, expected 1 (or 0 for a padding example)"
        return "is_real_example", "0 on a record that is not all zeros (a padding example holds nothing)"
    if check == "label_ids":
        label = batch["label_ids"][i][0]
        if batch["label_ids"].dtype.kind == "f":
            return "label_ids", f"score {float(label)}, expected a finite number"
        bound = f"0 … {spec.num_labels - 1} ({spec.num_labels} labels in the manifest)" if spec.num_labels else "≥ 0"
        return "label_ids", f"label {int(label)}, expected {bound}"
    return None, "failed"


# ---------------------------------------------------------------- statistics


class Stats:
    """Mergeable statistics of one group of fine-tuning records (a format's split)."""

    def __init__(self, seq):
        self.seq = seq
        self.records = 0
        self.tokens = 0
        self.length_hist = np.zeros(seq + 1, dtype=np.int64)
        self.labels = {}  # GLUE: label id -> records; STS-B: none (scores below)
        self.scores = []
        self.answers = np.zeros(3, dtype=np.int64)  # SQuAD training: answer in window / none in window / impossible
        self.unique_ids = []
        self.padding_examples = 0

    def update(self, batch, d, spec):
        self.records += len(d.length)
        self.tokens += int(d.length.sum())
        self.length_hist += np.bincount(np.minimum(d.length, self.seq), minlength=self.seq + 1)
        if "unique_ids" in batch:
            self.unique_ids.append(batch["unique_ids"][:, 0].astype(np.int64))
        if "start_positions" in batch:
            impossible = batch["is_impossible"][:, 0] == 1
            answered = batch["start_positions"][:, 0] > 0
            self.answers += [int((answered & ~impossible).sum()), int((~answered & ~impossible).sum()),
                             int(impossible.sum())]
        if "label_ids" in batch:
            real = batch["is_real_example"][:, 0] == 1
            self.padding_examples += int((~real).sum())
            labels = batch["label_ids"][real, 0]
            if labels.dtype.kind == "f":
                self.scores.append(labels.astype(np.float64))
            else:
                for label, count in zip(*np.unique(labels, return_counts=True)):
                    self.labels[int(label)] = self.labels.get(int(label), 0) + int(count)

    def merge(self, other):
        self.records += other.records
        self.tokens += other.tokens
        if len(other.length_hist) == len(self.length_hist):
            self.length_hist += other.length_hist
        for label, count in other.labels.items():
            self.labels[label] = self.labels.get(label, 0) + count
        self.scores += other.scores
        self.answers += other.answers
        self.unique_ids += other.unique_ids
        self.padding_examples += other.padding_examples

    def summary(self, spec, test_vs_training=None):
        del test_vs_training  # fine-tuning splits are separate tasks' files, not a held-out share
        n = max(self.records, 1)
        out = {
            "records": self.records,
            "tokens": self.tokens,
            "mean_length": round(float((self.length_hist * np.arange(self.seq + 1)).sum() / n), 2),
            "full_length_share": round(float(self.length_hist[self.seq] / n), 4),
            "length_histogram": self.length_hist.tolist(),
        }
        warnings = []
        if self.unique_ids:
            ids = np.concatenate(self.unique_ids)
            out["duplicate_unique_ids"] = int(len(ids) - len(np.unique(ids)))
            if out["duplicate_unique_ids"]:
                warnings.append(("unique_ids", (f"{out['duplicate_unique_ids']:,} unique_ids occur twice: "
                                                "predictions cannot be mapped back to their features")))
        if self.answers.any():
            out["answers"] = {"in_window": int(self.answers[0]), "not_in_window": int(self.answers[1]),
                              "impossible": int(self.answers[2])}
        if self.labels:
            out["labels"] = {str(k): v for k, v in sorted(self.labels.items())}
        if self.scores:
            scores = np.concatenate(self.scores)
            out["scores"] = {"min": round(float(scores.min()), 4), "max": round(float(scores.max()), 4),
                             "mean": round(float(scores.mean()), 4)}
        if self.padding_examples:
            out["padding_examples"] = self.padding_examples
        return out, warnings


def new_stats(dims):
    return Stats(dims["seq"])


def table_rows(splits):
    """(label, figures -> text) rows of the one-screen table for the figures of `splits` ({split: figures})."""
    rows = [
        ("records", lambda s: f"{s['records']:,}"),
        ("tokens", lambda s: f"{s['tokens']:,}"),
        ("mean length", lambda s: f"{s['mean_length']:.1f}"),
        ("full length", lambda s: f"{s['full_length_share']:.1%}"),
    ]
    if any("answers" in s for s in splits.values()):
        rows.append(("answer in/not in window/impossible",
                     lambda s: "/".join(f"{v:,}" for v in s["answers"].values()) if "answers" in s else "-"))
    if any("labels" in s for s in splits.values()):
        rows.append(("labels (id:records)", lambda s: " ".join(f"{k}:{v}" for k, v in s.get("labels", {}).items())
                     or "-"))
    if any("scores" in s for s in splits.values()):
        rows.append(("scores (min…max)", lambda s: f"{s['scores']['min']}…{s['scores']['max']}" if "scores" in s
                     else "-"))
    return rows
