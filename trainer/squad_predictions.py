"""SQuAD answers from span logits: google-research/bert run_squad.py's write_predictions.

The evaluation metadata `create-squad` writes beside the eval records (one
JSON object per line, in record order) says what each feature's tokens are
and where they came from:

    eval.features.jsonl  {"unique_id", "example_index", "doc_span_index", "tokens",
                          "token_to_orig_map": {"<token index>": <doc token index>},
                          "token_is_max_context": {"<token index>": bool}}
    eval.examples.jsonl  {"example_index", "qas_id", "question_text", "doc_tokens"}

For every example, the n best start and end logits of each of its features
give candidate spans; spans outside the document, in a window where the token
is not in its maximum context, reversed, or longer than `max_answer_length`
are dropped; the rest are ranked by start + end logit and mapped back to the
original text (`final_text`). For SQuAD 2.0 the null answer competes: its
score is the smallest start[0] + end[0] over the example's features, and ""
is predicted when null score minus the best non-null score exceeds
`null_score_diff_threshold` (that difference is the example's entry of
null_odds.json). Logits are float32 from the model, used as Python floats,
as the reference does.
"""

import collections
import functools
import json
import math

from bertprep import storage
from bertprep.errors import DataError

N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30


def read_jsonl(path, required):
    """The objects of a JSON-lines file, each checked for the `required` keys."""
    rows = []
    try:
        with storage.open(path, "r", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise DataError(f"{path}: line {number}: not JSON ({exc})") from None
                missing = [key for key in required if not isinstance(row, dict) or key not in row]
                if missing:
                    raise DataError(f"{path}: line {number}: missing {missing[0]!r}")
                rows.append(row)
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return rows


def load_eval_metadata(features_path, examples_path):
    """(examples, features) from the JSONL files, with token-index keys turned back into ints."""
    features = read_jsonl(features_path, ("unique_id", "example_index", "tokens", "token_to_orig_map",
                                          "token_is_max_context"))
    for feature in features:
        feature["token_to_orig_map"] = {int(k): v for k, v in feature["token_to_orig_map"].items()}
        feature["token_is_max_context"] = {int(k): v for k, v in feature["token_is_max_context"].items()}
    examples = read_jsonl(examples_path, ("example_index", "qas_id", "doc_tokens"))
    for position, example in enumerate(examples):
        if example["example_index"] != position:
            raise DataError(f"{examples_path}: line {position + 1}: example_index {example['example_index']}, "
                            f"expected {position} (one line per example, in order)")
    return examples, features


_Candidate = collections.namedtuple("_Candidate", "feature_index start end start_logit end_logit")
_Answer = collections.namedtuple("_Answer", "text start_logit end_logit")


def write_predictions(examples, features, logits, version_2_with_negative=False, lower_case=True,
                      n_best_size=N_BEST_SIZE, max_answer_length=MAX_ANSWER_LENGTH, null_score_diff_threshold=0.0):
    """(predictions {qas_id: text}, nbest {qas_id: [{text, probability, start_logit, end_logit}]},
    null_odds {qas_id: score difference} (SQuAD 2.0, else empty)), all in example order.

    `logits` maps each feature's unique_id to its (start_logits, end_logits) sequences.
    """
    features_of = collections.defaultdict(list)
    for feature in features:
        features_of[feature["example_index"]].append(feature)
    predictions, nbest_json, null_odds = {}, {}, {}
    for example_index, example in enumerate(examples):
        candidates = []
        null_score, null_feature, null_start, null_end = 1000000, 0, 0, 0  # the reference's "large" start
        for feature_index, feature in enumerate(features_of[example_index]):
            start_logits, end_logits = (list(map(float, values)) for values in logits[feature["unique_id"]])
            if version_2_with_negative and start_logits[0] + end_logits[0] < null_score:
                null_score = start_logits[0] + end_logits[0]
                null_feature, null_start, null_end = feature_index, start_logits[0], end_logits[0]
            for start in _best_indexes(start_logits, n_best_size):
                for end in _best_indexes(end_logits, n_best_size):
                    if _valid_span(feature, start, end, max_answer_length):
                        candidates.append(_Candidate(feature_index, start, end, start_logits[start],
                                                     end_logits[end]))
        if version_2_with_negative:
            candidates.append(_Candidate(null_feature, 0, 0, null_start, null_end))
        candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)

        answers, seen = [], set()
        for candidate in candidates:
            if len(answers) >= n_best_size:
                break
            if candidate.start > 0:
                text = _candidate_text(example, features_of[example_index][candidate.feature_index], candidate,
                                       lower_case)
                if text in seen:
                    continue
            else:
                text = ""
            seen.add(text)
            answers.append(_Answer(text, candidate.start_logit, candidate.end_logit))
        if version_2_with_negative and "" not in seen:
            answers.append(_Answer("", null_start, null_end))
        if not answers:  # the reference's guard for the rare example with no valid span
            answers.append(_Answer("empty", 0.0, 0.0))

        probabilities = _softmax([a.start_logit + a.end_logit for a in answers])
        qas_id = example["qas_id"]
        nbest_json[qas_id] = [{"text": a.text, "probability": p, "start_logit": a.start_logit,
                               "end_logit": a.end_logit} for a, p in zip(answers, probabilities)]
        if not version_2_with_negative:
            predictions[qas_id] = answers[0].text
        else:
            # The reference fails where no span is valid; here that compares with a zero-score span.
            best_non_null = next((a for a in answers if a.text), _Answer("", 0.0, 0.0))
            null_odds[qas_id] = null_score - best_non_null.start_logit - best_non_null.end_logit
            predictions[qas_id] = "" if null_odds[qas_id] > null_score_diff_threshold else best_non_null.text
    return predictions, nbest_json, null_odds


def _valid_span(feature, start, end, max_answer_length):
    tokens = len(feature["tokens"])
    return (start < tokens and end < tokens
            and start in feature["token_to_orig_map"] and end in feature["token_to_orig_map"]
            and feature["token_is_max_context"].get(start, False)
            and start <= end < start + max_answer_length)


def _candidate_text(example, feature, candidate, lower_case):
    """The span's text in the original document (WordPieces joined, then aligned by final_text)."""
    piece_text = " ".join(feature["tokens"][candidate.start:candidate.end + 1])
    piece_text = " ".join(piece_text.replace(" ##", "").replace("##", "").strip().split())
    first = feature["token_to_orig_map"][candidate.start]
    last = feature["token_to_orig_map"][candidate.end]
    original = " ".join(example["doc_tokens"][first:last + 1])
    return final_text(piece_text, original, lower_case)


def final_text(predicted, original, lower_case):
    """The part of `original` (whitespace-joined document tokens) that `predicted` (normalized,
    de-WordPieced text) covers, by a character alignment with `original` basic-tokenized: "Steve
    Smith's" -> "Steve Smith" for "steve smith". Where the alignment fails, `original` whole."""
    tokenized = " ".join(basic_tokenize(original, lower_case))
    start = tokenized.find(predicted)
    if start == -1:
        return original
    end = start + len(predicted) - 1
    original_chars, original_positions = _without_spaces(original)
    tokenized_chars, tokenized_positions = _without_spaces(tokenized)
    if len(original_chars) != len(tokenized_chars):
        return original
    tokenized_to_stripped = {position: i for i, position in enumerate(tokenized_positions)}
    if start not in tokenized_to_stripped or end not in tokenized_to_stripped:
        return original
    original_start = original_positions[tokenized_to_stripped[start]]
    original_end = original_positions[tokenized_to_stripped[end]]
    return original[original_start:original_end + 1]


def _without_spaces(text):
    """(text without " ", the position in `text` of each character kept)."""
    positions = [i for i, ch in enumerate(text) if ch != " "]
    return "".join(text[i] for i in positions), positions


def _best_indexes(logits, n_best_size):
    """Indexes of the n largest logits, ties in index order (a stable sort, as the reference's)."""
    return [index for index, _ in sorted(enumerate(logits), key=lambda x: x[1], reverse=True)[:n_best_size]]


def _softmax(scores):
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [x / total for x in exps]


@functools.lru_cache(maxsize=2)
def _basic_pipeline(lower_case):
    from tokenizers import normalizers, pre_tokenizers

    # bertprep.tokenization.build_tokenizer's normalizer and pre-tokenizer: the reference's tokens.
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                            lowercase=lower_case)
    return normalizer, pre_tokenizers.BertPreTokenizer()


def basic_tokenize(text, lower_case=True):
    """The reference's BasicTokenizer.tokenize (clean text, CJK split, lower-case + accent strip,
    whitespace and punctuation split): HF tokenizers' BERT pipeline without WordPiece (equal to the
    reference's on every context and question of the SQuAD fixtures, cased and uncased)."""
    normalizer, pre_tokenizer = _basic_pipeline(lower_case)
    return [piece for piece, _span in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]
