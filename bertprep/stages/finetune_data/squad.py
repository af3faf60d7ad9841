"""`bertprep.create_squad(...)`: SQuAD JSON → the features google-research/bert's run_squad.py writes
(`bertprep create-squad`: bertprep/cli/create_squad.py).

The records equal, value for value and in order, what run_squad.py's
`read_squad_examples`, the `random.Random(12345)` shuffle of training
examples, `convert_examples_to_features` and `FeatureWriter` produce for the
same file, vocab and flags (tests compare TFRecord bytes with goldens the
reference wrote). The algorithm is the reference's, step for step:

- a context is split into words on space, tab, CR, LF and U+202F only; an
  answer's characters map to the words they fall in;
- in training, an answer whose text is not found in the words it maps to is
  skipped with a warning (counted in the summary), and v2.0's unanswerable
  questions get start = end = 0;
- each word is tokenized alone (BasicTokenizer + WordPiece), the question as
  a whole and cut to --max-query tokens;
- the answer span is narrowed to the tokens of the answer text where they
  occur inside it (`_improve_answer_span`);
- windows of seq − query − 3 document tokens start every --doc-stride
  tokens; a training window without the whole answer gets start = end = 0;
- a token's "max context" window is the one where min(left, right context)
  + 0.01 × window length is largest, the first on a tie.

Speed comes from doing the same work once: each distinct word is tokenized
once for the whole file, each paragraph's tokens are assembled once for all
its questions, features are built as NumPy rows and encoded in batches.

The eval split also gets, beside its records, what run_squad.py's
`write_predictions` needs to turn logits back into answer strings:
`eval.features.jsonl` (per feature: unique_id, example_index,
doc_span_index, tokens, token_to_orig_map, token_is_max_context) and
`eval.examples.jsonl` (per question: example_index, qas_id, question_text,
doc_tokens), one JSON object per line in record order.
"""

import dataclasses
import itertools
import json
import os
import random
import re
import sys
import time
import unicodedata
from typing import Any, ClassVar

import numpy as np

from bertprep import storage
from bertprep.atomic import hold, refuse_if_held
from bertprep.corpus import read_text
from bertprep.errors import ON_COMMAND_LINE, DataError, UsageError
from bertprep.formats.schemas import SQUAD_EVAL, SQUAD_TRAIN
from bertprep.options import build_options, check_types, errors_name_fields
from bertprep.progress import Progress, Summary, human_bytes
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

FIRST_UNIQUE_ID = 1000000000  # run_squad.py's first unique_id
SHUFFLE_SEED = 12345  # run_squad.py main: random.Random(12345).shuffle(train_examples)
CHUNK_EXAMPLES = 512  # examples converted and encoded at a time (bounds memory)
EVAL_FEATURES, EVAL_EXAMPLES = "eval.features.jsonl", "eval.examples.jsonl"
# run_squad.py's is_whitespace: a context's words are what lies between these characters.
_WORD = re.compile("[^ \t\r\n\u202f]+")
# What str.split() also splits on: where a context holds none of these, str.split() gives its words.
_OTHER_WHITESPACE = re.compile("[\x0b\x0c\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u205f\u3000]")
SHOWN_WARNINGS = 20
# Questions skipped where run_squad.py writes a record: an empty answer (it takes the whole context for it), an
# answer or a context with no token (a record whose start lies after its end, which `validate` refuses; or none).
EMPTY_ANSWER = "its answer text is empty; skipped (run_squad.py would take the whole context for its answer)"
NO_ANSWER_TOKEN = "its answer has no token once tokenized; skipped (run_squad.py would write start after end)"
NO_CONTEXT_TOKEN = "its context has no token once tokenized; skipped (run_squad.py writes no feature for it)"
OUR_SKIPS = (EMPTY_ANSWER, NO_ANSWER_TOKEN, NO_CONTEXT_TOKEN)


SPLITS = ("train", "eval")


@dataclasses.dataclass(frozen=True)
class Params:
    max_seq_length: int
    doc_stride: int
    max_query_length: int


@dataclasses.dataclass
class Paragraph:
    context: str
    words: list  # doc_tokens: the context split on SQuAD's whitespace


@dataclasses.dataclass
class Example:
    qas_id: str
    question: str
    paragraph: int  # index into the file's paragraphs
    answer: str | None = None  # training only
    start_word: int | None = None
    end_word: int | None = None
    is_impossible: bool = False


# ---------------------------------------------------------------- reading the JSON


def load_json(path):
    """The parsed file; a DataError names the byte offset of malformed JSON."""
    text = read_text(path, expected="SQuAD files are UTF-8 JSON")
    # A file saved with a byte-order mark (Notepad, PowerShell) was "malformed JSON at byte 0: Unexpected UTF-8 BOM
    # (decode using utf-8-sig)": read past it, as the JSON lines reader does (its 3 bytes still count in offsets)
    body = text.removeprefix("\ufeff")
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        offset = len(text[:exc.pos + len(text) - len(body)].encode("utf-8"))
        raise DataError(f"{path}: malformed JSON at byte {offset} (line {exc.lineno}, column {exc.colno}): "
                        f"{exc.msg}") from None
    except RecursionError:  # Python's parser gives up on arrays or objects nested some thousand deep: a traceback
        raise DataError(f"{path}: JSON nested too deeply to parse (SQuAD JSON is data[].paragraphs[].qas[])") from None


def _get(container, key, kind, where):
    if not isinstance(container, dict) or key not in container:
        raise DataError(f"{where}: missing {key!r} (expected SQuAD JSON: data[].paragraphs[].qas[])")
    value = container[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):  # JSON true is no int
        names = " or ".join(k.__name__ for k in kinds)
        raise DataError(f"{where}: {key!r} is {type(value).__name__}, expected {names}")
    return value


def _list(value):
    """`value` where it is a list, else nothing: the v2.0 sniff runs before the checks that name a bad value."""
    return value if isinstance(value, list) else []


def _text(container, key, where):
    """A str field that is Unicode text: a JSON escape of a lone surrogate ("\\ud800") parses, then stopped the
    tokenizer with a TypeError traceback."""
    value = _get(container, key, str, where)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(f"{where}: {key!r} holds a lone surrogate (U+{ord(value[exc.start]):04X} at character "
                        f"{exc.start}): not Unicode text") from None
    return value


def split_words(context):
    """run_squad.py's doc_tokens: the context split on space, tab, CR, LF and U+202F only."""
    if _OTHER_WHITESPACE.search(context) is None:
        return context.split()
    return _WORD.findall(context)


def word_at(paragraph, offset):
    """run_squad.py's char_to_word_offset[offset], Python indexing included (a negative offset counts from the end).

    That is the number of words begun at or before the offset, less one: the
    words of the context up to it. None where the reference's list has no
    such index (it would stop with an IndexError).
    """
    length = len(paragraph.context)
    if not -length <= offset < length:
        return None
    return len(split_words(paragraph.context[:offset % length + 1])) - 1


def read_examples(path, is_training):
    """(examples, paragraphs, skipped warnings, version_2_with_negative) of a SQuAD file, in file order.

    As run_squad.py's read_squad_examples; v2.0 is recognised by questions
    carrying `is_impossible`. In training a question must have exactly one
    answer unless it is impossible, and an answer whose text is not where its
    answer_start says is skipped with a warning.
    """
    data = load_json(path)
    articles = _get(data, "data", list, path)
    version_2 = any(isinstance(qa, dict) and "is_impossible" in qa
                    for article in articles if isinstance(article, dict)
                    for paragraph in _list(article.get("paragraphs")) if isinstance(paragraph, dict)
                    for qa in _list(paragraph.get("qas")))
    examples, paragraphs, skipped, first_seen = [], [], [], {}
    for a, article in enumerate(articles):
        for p, paragraph_json in enumerate(_get(article, "paragraphs", list, f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = _text(paragraph_json, "context", where)
            paragraph = Paragraph(context, split_words(context))
            paragraphs.append(paragraph)
            for q, qa in enumerate(_get(paragraph_json, "qas", list, where)):
                qa_where = f"{where}.qas[{q}]"
                qas_id = _get(qa, "id", (str, int), qa_where)
                # predictions are keyed by the id as JSON text: 1 and "1" are one key there
                if first_seen.setdefault(str(qas_id), qa_where) != qa_where:
                    raise DataError(f"{qa_where}: question id {qas_id!r} again (first at {first_seen[str(qas_id)]}); "
                                    "ids must be unique: predictions and scores are keyed by them")
                qa_where = f"{path}: question {qas_id!r}"
                example = Example(qas_id, _text(qa, "question", qa_where), len(paragraphs) - 1)
                if is_training:
                    problem = _training_answer(example, qa, paragraph, version_2, qa_where)
                    if problem is not None:
                        skipped.append(f"{qa_where}: {problem}"
                                       + ("" if problem in OUR_SKIPS else "; skipped, as run_squad.py does"))
                        continue
                examples.append(example)
    return examples, paragraphs, skipped, version_2


def _training_answer(example, qa, paragraph, version_2, where):
    """Fill a training example's answer; a reason to skip it, or None."""
    # a bool: "false" (a str) was taken for True
    example.is_impossible = _get(qa, "is_impossible", bool, where) if version_2 and "is_impossible" in qa else False
    answers = _get(qa, "answers", list, where)
    if example.is_impossible:
        example.start_word = example.end_word = -1
        example.answer = ""
        return None
    if len(answers) != 1:
        raise DataError(f"{where}: {len(answers)} answers; training needs exactly 1 per question "
                        "(or is_impossible in SQuAD v2.0)")
    text = _text(answers[0], "text", f"{where}: answers[0]")
    offset = _get(answers[0], "answer_start", int, f"{where}: answers[0]")
    if not paragraph.words:
        return "its context is empty"
    if not text.split():  # run_squad.py takes the whole context for it (its last word ends the span)
        return EMPTY_ANSWER
    start, end = word_at(paragraph, offset), word_at(paragraph, offset + len(text) - 1)
    if start is None or end is None:
        return (f"answer_start {offset} with a {len(text)}-character answer lies outside its "
                f"{len(paragraph.context)}-character context")
    actual = " ".join(paragraph.words[start:end + 1])
    cleaned = " ".join(text.split())
    if actual.find(cleaned) == -1:
        return (f"could not find answer {cleaned!r} at answer_start {offset} (the context there reads {actual!r}"
                f"{_normalization_note(actual, cleaned)})")
    example.answer, example.start_word, example.end_word = text, start, end
    return None


def _normalization_note(actual, answer):
    """Where the answer is in the context once both are NFC-normalized, a note saying so: an answer written
    decomposed (NFD, as macOS file names and some scrapers write "é") is skipped, as run_squad.py skips it, and the
    warning "could not find answer 'café' (the context there reads 'café')" showed two strings that look alike."""
    if unicodedata.normalize("NFC", actual).find(unicodedata.normalize("NFC", answer)) == -1:
        return ""
    return (", the same characters in another Unicode normalization form: normalize the file's answers and contexts "
            "alike, e.g. to NFC")


# ---------------------------------------------------------------- examples -> features


class DocTokens:
    """Every paragraph's WordPiece tokens, each distinct word tokenized once for the whole file."""

    def __init__(self, paragraphs, tokenizer):
        distinct = list(dict.fromkeys(itertools.chain.from_iterable(p.words for p in paragraphs)))
        index = dict(zip(distinct, itertools.count()))
        self.word_ids = [np.fromiter(map(index.__getitem__, p.words), np.int64, len(p.words)) for p in paragraphs]
        self.ids, self.offsets = tokenizer.encode(distinct)
        self.counts = np.diff(self.offsets)
        self._cache = {}

    def of(self, paragraph):
        """(all_doc_tokens ids, tok_to_orig_index, orig_to_tok_index) of a paragraph, as run_squad.py builds them."""
        if paragraph not in self._cache:
            words = self.word_ids[paragraph]
            counts = self.counts[words]
            orig_to_tok = np.cumsum(counts) - counts
            total = int(counts.sum())
            gather = np.repeat(self.offsets[words] - orig_to_tok, counts) + np.arange(total)
            tok_to_orig = np.repeat(np.arange(len(words), dtype=np.int32), counts)
            self._cache[paragraph] = (self.ids[gather], tok_to_orig, orig_to_tok)
        return self._cache[paragraph]


def doc_spans(length, max_tokens, stride):
    """[(start, length)] of the sliding windows over `length` document tokens."""
    spans = []
    start = 0
    while start < length:
        span = min(length - start, max_tokens)
        spans.append((start, span))
        if start + span == length:
            break
        start += min(span, stride)
    return spans


def max_context_windows(spans, length):
    """For each document token, the window where it has the most context (run_squad.py's _check_is_max_context).

    Each window is scored over its own tokens only: a score for every window
    at every token of the context (windows × tokens) took 1.9 GB and 6 s per
    question of a 100,000-token context, and more than memory of a book's.
    """
    best = np.zeros(length, np.int64)
    best_score = np.full(length, -np.inf)
    for index, (start, size) in enumerate(spans):
        position = np.arange(start, start + size)
        score = np.minimum(position - start, start + size - 1 - position) + 0.01 * size
        better = score > best_score[start:start + size]  # strict: the first of equal scores, as the reference's ">"
        best[start:start + size][better] = index
        best_score[start:start + size][better] = score[better]
    return best


def improve_answer_span(doc_ids, start, end, answer_ids):
    """run_squad.py's _improve_answer_span on token ids.

    The reference compares " ".join of token strings; tokens hold no spaces
    and are never empty, so that is list equality, which only a span of the
    answer's own length can meet: the first start whose span fits inside
    [start, end] and equals the answer wins.
    """
    if start < 0:  # only reachable through Python's negative indexing in the reference: run its loop as written
        return _improve_answer_span_as_written(doc_ids, start, end, answer_ids)
    size = len(answer_ids)
    if size:
        for new_start in range(start, end - size + 2):
            if np.array_equal(doc_ids[new_start:new_start + size], answer_ids):
                return new_start, new_start + size - 1
    return start, end


def _improve_answer_span_as_written(doc_ids, start, end, answer_ids):
    wanted = list(answer_ids)
    ids = list(doc_ids)
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if ids[new_start:new_end + 1] == wanted:
                return new_start, new_end
    return start, end


def answer_tokens(example, paragraphs, doc_tokens):
    """(first, last) document token of a training example's answer words, as run_squad.py maps them; last <
    first where those words have no token."""
    doc_ids, _tok_to_orig, orig_to_tok = doc_tokens.of(example.paragraph)
    words = len(paragraphs[example.paragraph].words)
    first = int(orig_to_tok[example.start_word])
    last = int(orig_to_tok[example.end_word + 1]) - 1 if example.end_word < words - 1 else len(doc_ids) - 1
    return first, last


def drop_untokenized(examples, paragraphs, doc_tokens, is_training):
    """(the examples that have tokens to train or predict on, a skip message per other): a context of only
    characters the tokenizer drops (zero-width spaces, lone accents) gave a question no feature, silently; an
    answer of such characters a record whose start lies after its end."""
    kept, skipped = [], []
    for example in examples:
        problem = None
        if not len(doc_tokens.of(example.paragraph)[0]):
            problem = NO_CONTEXT_TOKEN
        elif is_training and not example.is_impossible:
            first, last = answer_tokens(example, paragraphs, doc_tokens)
            problem = NO_ANSWER_TOKEN if last < first else None
        if problem is None:
            kept.append(example)
        else:
            skipped.append(f"question {example.qas_id!r}: {problem}")
    return kept, skipped


def convert(examples, paragraphs, doc_tokens, tokenizer, params, is_training):
    """Yield the features of `examples` a chunk at a time: (columns, first example index, metadata lines or None).

    columns holds the record kind's features as (N, length) arrays; the
    metadata (eval only) is (feature lines, example lines) of the JSON-lines
    files.
    """
    seq = params.max_seq_length
    unique_id = FIRST_UNIQUE_ID
    for first in range(0, len(examples), CHUNK_EXAMPLES):
        chunk = examples[first:first + CHUNK_EXAMPLES]
        query_ids, query_offsets = tokenizer.encode(e.question for e in chunk)
        if is_training:
            answer_ids, answer_offsets = tokenizer.encode(e.answer for e in chunk)
        rows = []  # (example in chunk, query length, span start, span length, start_position, end_position)
        feature_lines, example_lines = [], []
        for i, example in enumerate(chunk):
            query = query_ids[query_offsets[i]:min(query_offsets[i + 1], query_offsets[i] + params.max_query_length)]
            doc_ids, tok_to_orig, orig_to_tok = doc_tokens.of(example.paragraph)
            if is_training and not example.is_impossible:
                tok_start, tok_end = answer_tokens(example, paragraphs, doc_tokens)
                tok_start, tok_end = improve_answer_span(
                    doc_ids, tok_start, tok_end, answer_ids[answer_offsets[i]:answer_offsets[i + 1]])
            spans = doc_spans(len(doc_ids), seq - len(query) - 3, params.doc_stride)
            for span_start, span_length in spans:
                start = end = 0
                if (is_training and not example.is_impossible
                        and span_start <= tok_start and tok_end <= span_start + span_length - 1):
                    start = tok_start - span_start + len(query) + 2
                    end = tok_end - span_start + len(query) + 2
                rows.append((i, query, span_start, span_length, start, end))
            if not is_training:
                best = max_context_windows(spans, len(doc_ids)) if spans else None
                for span_index, (span_start, span_length) in enumerate(spans):
                    feature_lines.append(_feature_line(unique_id + len(feature_lines), first + i, span_index,
                                                       span_start, span_length, query, doc_ids, tok_to_orig, best,
                                                       tokenizer))
                example_lines.append(json.dumps({"example_index": first + i, "qas_id": example.qas_id,
                                                 "question_text": example.question,
                                                 "doc_tokens": paragraphs[example.paragraph].words},
                                                ensure_ascii=False))
        columns = _feature_columns(rows, chunk, doc_tokens, tokenizer, seq, unique_id, is_training)
        unique_id += len(rows)
        yield columns, len(chunk), (None if is_training else (feature_lines, example_lines))


def _feature_columns(rows, chunk, doc_tokens, tokenizer, seq, first_unique_id, is_training):
    count = len(rows)
    input_ids = np.zeros((count, seq), np.int32)
    lengths = np.empty(count, np.int64)
    context_starts = np.empty(count, np.int64)
    for f, (i, query, span_start, span_length, _start, _end) in enumerate(rows):
        doc_ids = doc_tokens.of(chunk[i].paragraph)[0]
        q = len(query)
        row = input_ids[f]
        row[0] = tokenizer.cls_id
        row[1:q + 1] = query
        row[q + 1] = tokenizer.sep_id
        row[q + 2:q + 2 + span_length] = doc_ids[span_start:span_start + span_length]
        row[q + 2 + span_length] = tokenizer.sep_id
        lengths[f] = q + 3 + span_length
        context_starts[f] = q + 2
    position = np.arange(seq)[None, :]
    real = position < lengths[:, None]
    columns = {
        "unique_ids": np.arange(first_unique_id, first_unique_id + count, dtype=np.int64)[:, None],
        "input_ids": input_ids,
        "input_mask": real.astype(np.int32),
        "segment_ids": (real & (position >= context_starts[:, None])).astype(np.int32),
    }
    if is_training:
        columns["start_positions"] = np.array([r[4] for r in rows], np.int64).reshape(count, 1)
        columns["end_positions"] = np.array([r[5] for r in rows], np.int64).reshape(count, 1)
        columns["is_impossible"] = np.array([int(chunk[r[0]].is_impossible) for r in rows], np.int64).reshape(count, 1)
    return columns


def _feature_line(unique_id, example_index, span_index, span_start, span_length, query, doc_ids, tok_to_orig, best,
                  tokenizer):
    """One line of eval.features.jsonl: what write_predictions reads from an InputFeatures."""
    first = len(query) + 2
    ids = np.concatenate([[tokenizer.cls_id], query, [tokenizer.sep_id],
                          doc_ids[span_start:span_start + span_length], [tokenizer.sep_id]])
    keys = [str(k) for k in range(first, first + span_length)]
    return json.dumps({
        "unique_id": unique_id,
        "example_index": example_index,
        "doc_span_index": span_index,
        "tokens": tokenizer.tokens[ids].tolist(),
        "token_to_orig_map": dict(zip(keys, tok_to_orig[span_start:span_start + span_length].tolist())),
        "token_is_max_context": dict(zip(keys, (best[span_start:span_start + span_length] == span_index).tolist())),
    }, ensure_ascii=False)


# ---------------------------------------------------------------- the command


def split_of(path, value):
    """`value`, else the split the file's name tells (train-* or dev-*)."""
    if value:
        return value
    name = os.path.basename(path)
    if name.startswith("train"):
        return "train"
    if name.startswith("dev"):
        return "eval"
    raise UsageError(f"{path}: cannot tell the split from the name (train-* or dev-*): pass --split train or --split "
                     "eval")


@errors_name_fields
@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateSquadOptions(RecordsOptions):
    """What `create_squad` converts: the SQuAD JSON `input` (train-v1.1.json, dev-v2.0.json, ...), as the
    `split` train (shuffled, with answers) or eval (with prediction metadata; None: from the file name,
    train-* or dev-*), with run_squad.py's max_seq_length `seq`, `doc_stride` and max_query_length
    `max_query`; and the shared `RecordsOptions`."""

    input: str
    split: str | None = None
    doc_stride: int = 128
    max_query: int = 64
    seq: int = 384
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"split": SPLITS}  # check_types

    def __post_init__(self):
        check_types(self)
        if self.split not in (None, *SPLITS):
            raise UsageError(f"--split must be one of {', '.join(SPLITS)}, not {self.split!r}")
        check_seq(self.seq, 4)
        if self.doc_stride < 1:
            raise UsageError(f"--doc-stride must be at least 1, not {self.doc_stride}")
        if self.max_query < 0:
            raise UsageError(f"--max-query must be at least 0, not {self.max_query}")
        if self.seq <= self.max_query + 3:
            raise UsageError(f"--seq {self.seq} must be greater than --max-query {self.max_query} + 3 "
                             "([CLS] question [SEP] context [SEP] needs a context token)")
        super().__post_init__()
        refuse_a_directory_input(self.input)
        split_of(self.input, self.split)  # a name that tells no split, and no --split: a usage error now


def refuse_a_directory_input(path):
    """A UsageError for an --input that is a directory (`download/squad/v1.1`): it was "cannot tell the split from
    the name", and with --split given, "no such file", of a directory that is there."""
    if not storage.isdir(path):
        return
    try:
        found = sorted(name for name in storage.listdir(path) if name.endswith(".json"))
    except OSError:  # unreadable: the refusal without the names
        found = []
    files = (f"one of the JSON files in it: {', '.join(found[:4])}{', ...' if len(found) > 4 else ''}" if found
             else "a SQuAD JSON file (train-v1.1.json, dev-v2.0.json, ...)")
    raise UsageError(f"--input {storage.display(path)}: a directory; give {files}")


def create_squad(options: CreateSquadOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Write the records of one SQuAD split (`options`, or CreateSquadOptions(**fields)); progress on stderr
    unless `quiet`, and on the command line the skipped questions (a Python caller hears of them as the
    summary's warning). A split already written with the same input and settings is left as it is
    (`complete_before`)."""
    options = build_options(CreateSquadOptions, options, fields)  # not both (a keyword beside one was ignored)
    started = time.monotonic()
    split = split_of(options.input, options.split)
    storage.require(options.input, "file", DataError(f"{options.input}: no such file"))
    refuse_if_held(storage.absolute(options.out))  # before the questions are read and their paragraphs tokenized
    is_training = split == "train"
    kind = SQUAD_TRAIN if is_training else SQUAD_EVAL
    tokenizer = load_tokenizer(options.vocab, options.lower_case)
    params = Params(options.seq, options.doc_stride, options.max_query)
    source = {"path": storage.display(storage.absolute(options.input)), "sha256": sha256_of(options.input)}
    examples, paragraphs, skipped, version_2 = read_examples(options.input, is_training)
    if is_training:
        random.Random(SHUFFLE_SEED).shuffle(examples)  # as the reference, before its untokenizable ones are left out
    doc_tokens = DocTokens(paragraphs, tokenizer)
    examples, untokenized = drop_untokenized(examples, paragraphs, doc_tokens, is_training)
    skipped += [f"{options.input}: {line}" for line in untokenized]
    if not examples:
        raise DataError(f"{options.input}: no questions to convert" + (f" ({len(skipped)} skipped)" if skipped else ""))
    out = storage.absolute(options.out)
    storage.check_reachable(out)  # before the examples are converted: a bucket that is not there fails now
    settings = run_settings(tokenizer, options.seq, task="squad", version_2_with_negative=version_2,
                            params={"doc_stride": options.doc_stride, "max_query_length": options.max_query})
    manifest = open_manifest(out, "create-squad", settings)
    extra = () if is_training else (EVAL_FEATURES, EVAL_EXAMPLES)
    writer = SplitWriter(out, "train" if is_training else "eval", options.format, kind, extra)
    names = [*writer.names.values(), *extra]
    progress = Progress("create-squad", total=len(examples), unit="examples", quiet=quiet)
    if split_is_complete(out, manifest, split, names, source["sha256"]):
        progress.note(f"{split}: already complete in {out}")
        records = manifest["files"][names[0]]["records"]
        created = False
    else:
        _show_skipped(skipped, quiet)
        with hold(out, "bertprep create-squad") as staging:
            with writer.staged_in(staging):
                for columns, done, metadata in convert(examples, paragraphs, doc_tokens, tokenizer, params,
                                                       is_training):
                    writer.write(columns)
                    if metadata is not None:
                        writer.write_lines(EVAL_FEATURES, metadata[0])
                        writer.write_lines(EVAL_EXAMPLES, metadata[1])
                    progress.advance(done, features=len(columns["unique_ids"]))
            record_split(out, manifest, split, source, writer, len(examples), skipped=len(skipped))
        records = writer.records
        created = True
    progress.close()
    entries = {name: manifest["files"].get(name) or manifest["metadata"][name] for name in names}
    summary = {"out": storage.display(out), "split": split, "kind": kind.name, "examples": len(examples),
               "records": records, "skipped": len(skipped), "version_2_with_negative": version_2, "created": created,
               "files": {name: {"bytes": e["bytes"], "sha256": e["sha256"]} for name, e in entries.items()},
               "seconds": round(time.monotonic() - started, 3)}
    rows = (("out", summary["out"]), ("split", f"{split} ({kind.name}, SQuAD v{'2.0' if version_2 else '1.1'})"),
            ("examples", f"{len(examples):,}"), ("features", f"{records:,}"),
            ("skipped", f"{len(skipped):,}"),
            ("files", ", ".join(f"{name} ({human_bytes(e['bytes'])})" for name, e in entries.items())),
            ("seconds", f"{summary['seconds']:.2f}" + ("" if created else " (already complete)")))
    if skipped:  # a warning too: bertprep.create_squad (quiet by default) raises it, --json carries it
        summary["warnings"] = [f"{len(skipped):,} question(s) skipped, first {skipped[0]}"]
    warning_rows = [("warning", warning) for warning in summary.get("warnings", ())]
    return Summary("bertprep create-squad: done", summary, [*rows, *warning_rows], complete_before=not created)


def _show_skipped(skipped, quiet):
    """A line for each of the first skipped questions, on the command line only (as Progress.warn): a Python
    caller hears of them once, as the BertprepWarning bertprep.create_squad raises from the summary's warning;
    with `quiet=False` it heard the first twice, this line and that warning."""
    if quiet or not ON_COMMAND_LINE.get():
        return
    for line in skipped[:SHOWN_WARNINGS]:
        print(f"create-squad: warning: {line}", file=sys.stderr)
    if len(skipped) > SHOWN_WARNINGS:
        print(f"create-squad: warning: ... {len(skipped) - SHOWN_WARNINGS} more questions skipped", file=sys.stderr)

