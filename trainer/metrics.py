"""Fine-tuning scores: GLUE's metrics and SQuAD's exact match and F1.

SQuAD: `squad_v1_scores` and `squad_v2_scores` compute what the official
`evaluate-v1.1.py` and `evaluate-v2.0.py` print for a dataset and a
predictions file, in the same order of operations, so the numbers are equal
to the last bit (tests/test_finetune_scores.py runs the official scripts on
the same files). v1.1 and v2.0 differ in details that change scores: v2.0
drops gold answers that normalize to nothing, scores an empty prediction
against an empty gold answer as a match, and with null odds counts a
question whose odds exceed the threshold as answered "no answer".

GLUE (as the GLUE benchmark reports them): accuracy; F1 of the positive
class (label id 1) for MRPC and QQP; Matthews correlation for CoLA; Pearson
and Spearman correlation for STS-B. Pure NumPy: no scikit-learn or SciPy.
"""

import collections
import re
import string

import numpy as np

# ---------------------------------------------------------------- SQuAD

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text):
    """Lower-case, drop punctuation, the articles a/an/the and extra whitespace (both scripts)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(prediction_tokens, gold_tokens):
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0
    precision = 1.0 * same / len(prediction_tokens)
    recall = 1.0 * same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def _questions(dataset):
    """(qid, [gold answer texts]) of a SQuAD JSON's "data", in file order."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa["id"], [answer["text"] for answer in qa["answers"]]


def squad_v1_scores(dataset, predictions):
    """evaluate-v1.1.py: {"exact_match", "f1"} in percent; a question without a prediction scores 0."""
    exact = f1 = total = 0
    for qid, golds in _questions(dataset):
        total += 1
        if qid not in predictions:
            continue
        prediction = normalize_answer(predictions[qid])
        exact += max(prediction == normalize_answer(gold) for gold in golds)
        f1 += max(_f1(prediction.split(), normalize_answer(gold).split()) for gold in golds)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _v2_f1(gold, prediction):
    gold_tokens = normalize_answer(gold).split() if gold else []
    prediction_tokens = normalize_answer(prediction).split() if prediction else []
    if not gold_tokens or not prediction_tokens:
        return int(gold_tokens == prediction_tokens)  # no answer: right only if both say so
    return _f1(prediction_tokens, gold_tokens)


def _mean(scores, qids):
    return 100.0 * sum(scores[q] for q in qids) / len(qids)


def squad_v2_scores(dataset, predictions, null_odds=None, null_odds_threshold=1.0):
    """evaluate-v2.0.py [--na-prob-file null_odds.json]: exact, f1, total, HasAns_* and NoAns_*, and
    with null odds best_exact/best_f1 and their thresholds.

    Dict orders matter where the script's do (ties in the null-odds sort): pass the predictions and
    null odds in the order their JSON files hold them.
    """
    has_answer = {}
    exact_raw, f1_raw = {}, {}
    for qid, golds in _questions(dataset):
        has_answer[qid] = bool(golds)
        golds = [gold for gold in golds if normalize_answer(gold)] or [""]
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        exact_raw[qid] = max(int(normalize_answer(gold) == normalize_answer(prediction)) for gold in golds)
        f1_raw[qid] = max(_v2_f1(gold, prediction) for gold in golds)
    odds = null_odds if null_odds is not None else {qid: 0.0 for qid in predictions}

    def thresholded(raw):
        return {qid: float(not has_answer[qid]) if odds[qid] > null_odds_threshold else score
                for qid, score in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    result = {"exact": _mean(exact, list(exact)), "f1": _mean(f1, list(f1)), "total": len(exact)}
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, answered in has_answer.items() if answered == wanted]
        if qids:
            result.update({f"{prefix}_exact": _mean(exact, qids), f"{prefix}_f1": _mean(f1, qids),
                           f"{prefix}_total": len(qids)})
    if null_odds is not None:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            result[f"best_{name}"], result[f"best_{name}_thresh"] = _best_threshold(
                predictions, raw, null_odds, has_answer)
    return result


def _best_threshold(predictions, scores, null_odds, has_answer):
    """The null-odds threshold that maximizes the score, and that score (find_best_thresh)."""
    score = best = sum(1 for answered in has_answer.values() if not answered)
    threshold = 0.0
    for qid in sorted(null_odds, key=lambda q: null_odds[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, threshold = score, null_odds[qid]
    return 100.0 * best / len(scores), threshold


# ---------------------------------------------------------------- GLUE


def accuracy(predictions, labels):
    return float(np.mean(np.asarray(predictions) == np.asarray(labels)))


def f1_positive(predictions, labels):
    """F1 of label 1 (MRPC: paraphrase; QQP: duplicate)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    tp = int(np.sum((predictions == 1) & (labels == 1)))
    fp = int(np.sum((predictions == 1) & (labels != 1)))
    fn = int(np.sum((predictions != 1) & (labels == 1)))
    return 2.0 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews_correlation(predictions, labels):
    """Binary Matthews correlation (CoLA); 0 where a marginal is empty."""
    predictions, labels = np.asarray(predictions) == 1, np.asarray(labels) == 1
    tp = float(np.sum(predictions & labels))
    tn = float(np.sum(~predictions & ~labels))
    fp = float(np.sum(predictions & ~labels))
    fn = float(np.sum(~predictions & labels))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / denominator) if denominator else 0.0


def _ranks(values):
    """1-based ranks, ties sharing their mean rank (as Spearman's correlation needs)."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman(x, y):
    return pearson(_ranks(x), _ranks(y))
