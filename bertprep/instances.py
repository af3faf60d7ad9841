"""Masked-LM instances exactly as google-research/bert's create_pretraining_data.py makes them.

Pure functions: token ids in, instances out. One `random.Random(seed)` drives
every draw in the reference's order (docs/reference-facts.md, "Instance creation: the reference's traps"):
shuffle the documents; `dupe_factor` passes over all documents; finally shuffle all instances. The
readable algorithm below is the specification; `bertprep._native`, when
built, runs the same draws in C and must give identical instances (tests
compare the two on the golden corpus and the benchmark corpus).

Instances are held compactly, in arrays rather than Python objects per
token, because the final shuffle needs every instance of a shard at once.
"""

import random
from array import array
from dataclasses import dataclass

import numpy as np

try:
    from bertprep._native import create_instances as _native_create_instances
except ImportError:  # extension not built: the pure-Python path gives the same instances
    _native_create_instances = None


@dataclass(frozen=True)
class InstanceParams:
    max_seq_length: int
    max_predictions_per_seq: int
    dupe_factor: int = 5
    short_seq_prob: float = 0.1
    masked_lm_prob: float = 0.15
    whole_word_mask: bool = False


@dataclass(frozen=True)
class MaskingVocab:
    """What masking needs of the vocab: special ids, the `vocab_words` list as ids, and '##' flags."""

    cls_id: int
    sep_id: int
    mask_id: int
    word_ids: np.ndarray  # int32: id of each entry of the reference's vocab_words list
    is_subword: np.ndarray  # uint8 by id: token starts with "##"

    @classmethod
    def from_vocab(cls, vocab):
        return cls(
            cls_id=vocab.id_of("[CLS]"),
            sep_id=vocab.id_of("[SEP]"),
            mask_id=vocab.id_of("[MASK]"),
            word_ids=vocab.word_ids(),
            is_subword=vocab.subword_flags(),
        )

    @property
    def token_dtype(self):
        return np.uint16 if int(self.word_ids.max(initial=0)) < (1 << 16) else np.int32


@dataclass
class Corpus:
    """Documents as flat arrays: sentence s is tokens[sentence_starts[s]:sentence_starts[s+1]],
    document d is sentences document_starts[d] .. document_starts[d+1]-1. No document or
    sentence is empty."""

    tokens: np.ndarray  # int32
    sentence_starts: np.ndarray  # int64, n_sentences + 1
    document_starts: np.ndarray  # int64, n_documents + 1

    @property
    def num_documents(self):
        return len(self.document_starts) - 1

    def documents(self):
        """Nested lists (document -> sentence -> token ids), for the readable algorithm."""
        tokens = self.tokens.tolist()
        starts = self.sentence_starts.tolist()
        sentences = [tokens[a:b] for a, b in zip(starts, starts[1:])]
        bounds = self.document_starts.tolist()
        return [sentences[a:b] for a, b in zip(bounds, bounds[1:])]

    def reordered(self, document_order):
        """The corpus with its documents in `document_order` (flat arrays gathered, not copied per token)."""
        order = np.asarray(document_order, dtype=np.int64)
        doc_sentences = np.diff(self.document_starts)[order]
        sentence_index = _ranges(self.document_starts[order], doc_sentences)
        sentence_lengths = np.diff(self.sentence_starts)[sentence_index]
        tokens = self.tokens[_ranges(self.sentence_starts[sentence_index], sentence_lengths)]
        return Corpus(tokens, _starts(sentence_lengths), _starts(doc_sentences))


@dataclass
class Instances:
    """A shard's instances in final order, compactly.

    Instance i's output tokens ([CLS] A [SEP] B [SEP], masked, unpadded) are
    tokens[instance_starts[i]:instance_starts[i+1]]; A has a_lengths[i]
    tokens; its predictions are masked_positions/masked_labels[mask_starts[i]:
    mask_starts[i+1]], positions ascending.
    """

    tokens: np.ndarray
    instance_starts: np.ndarray  # int64
    a_lengths: np.ndarray  # int32
    masked_positions: np.ndarray  # uint16
    masked_labels: np.ndarray  # same dtype as tokens
    mask_starts: np.ndarray  # int64
    is_random_next: np.ndarray  # uint8

    def __len__(self):
        return len(self.a_lengths)

    @property
    def nbytes(self):
        return sum(getattr(self, f).nbytes for f in self.__dataclass_fields__)

    def record(self, i, seq, pred):
        """Instance i as the padded BERT features (what the reference writes)."""
        start, end = self.instance_starts[i], self.instance_starts[i + 1]
        n = end - start
        input_ids = np.zeros(seq, np.int64)
        input_ids[:n] = self.tokens[start:end]
        input_mask = np.zeros(seq, np.int64)
        input_mask[:n] = 1
        segment_ids = np.zeros(seq, np.int64)
        segment_ids[self.a_lengths[i] + 2:n] = 1
        m0, m1 = self.mask_starts[i], self.mask_starts[i + 1]
        positions = np.zeros(pred, np.int64)
        positions[: m1 - m0] = self.masked_positions[m0:m1]
        ids = np.zeros(pred, np.int64)
        ids[: m1 - m0] = self.masked_labels[m0:m1]
        weights = np.zeros(pred, np.float32)
        weights[: m1 - m0] = 1.0
        return {
            "input_ids": input_ids,
            "input_mask": input_mask,
            "segment_ids": segment_ids,
            "masked_lm_positions": positions,
            "masked_lm_ids": ids,
            "masked_lm_weights": weights,
            "next_sentence_labels": np.array([int(self.is_random_next[i])], np.int64),
        }


def create_instances(corpus, params, vocab, seed, use_native=None):
    """All instances of one shard, in the order the reference writes them.

    `corpus` holds the shard's non-empty documents in file order; `seed` is
    the reference's --random_seed. `use_native=None` uses the C core when it
    was built.
    """
    rng = random.Random(seed)
    document_order = list(range(corpus.num_documents))
    rng.shuffle(document_order)  # the same permutation the reference's shuffle of the list makes
    corpus = corpus.reordered(document_order)
    if use_native is None:
        use_native = _native_create_instances is not None
    if use_native:
        return _create_native(corpus, params, vocab, rng)
    return _create_python(corpus.documents(), params, vocab, rng)


def _create_native(corpus, params, vocab, rng):
    result = _native_create_instances(
        rng.getstate(),
        np.ascontiguousarray(corpus.tokens, dtype=np.int32),
        np.ascontiguousarray(corpus.sentence_starts, dtype=np.int64),
        np.ascontiguousarray(corpus.document_starts, dtype=np.int64),
        params.max_seq_length,
        params.max_predictions_per_seq,
        params.dupe_factor,
        params.short_seq_prob,
        params.masked_lm_prob,
        bool(params.whole_word_mask),
        vocab.cls_id,
        vocab.sep_id,
        vocab.mask_id,
        np.ascontiguousarray(vocab.word_ids, dtype=np.int32),
        np.ascontiguousarray(vocab.is_subword, dtype=np.uint8),
        np.dtype(vocab.token_dtype).itemsize,
    )
    state, tokens, instance_starts, a_lengths, positions, labels, mask_starts, is_random_next = result
    rng.setstate(state)
    dtype = vocab.token_dtype
    return Instances(
        tokens=np.frombuffer(tokens, dtype=dtype),
        instance_starts=np.frombuffer(instance_starts, dtype=np.int64),
        a_lengths=np.frombuffer(a_lengths, dtype=np.int32),
        masked_positions=np.frombuffer(positions, dtype=np.uint16),
        masked_labels=np.frombuffer(labels, dtype=dtype),
        mask_starts=np.frombuffer(mask_starts, dtype=np.int64),
        is_random_next=np.frombuffer(is_random_next, dtype=np.uint8),
    )


# ---------------------------------------------------------------------------
# The reference algorithm, step for step (google-research/bert
# create_pretraining_data.py: create_training_instances,
# create_instances_from_document, create_masked_lm_predictions,
# truncate_seq_pair), on token ids instead of token strings.


def _create_python(documents, params, vocab, rng):
    collected = _InstanceCollector(vocab.token_dtype)
    for _ in range(params.dupe_factor):
        for document_index in range(len(documents)):
            _instances_from_document(documents, document_index, params, vocab, rng, collected.add)
    order = list(range(len(collected)))
    rng.shuffle(order)  # the reference's final rng.shuffle(instances)
    return collected.build(order)


def _instances_from_document(documents, document_index, params, vocab, rng, emit):
    document = documents[document_index]
    max_num_tokens = params.max_seq_length - 3  # [CLS], [SEP], [SEP]
    # Drawn once per document pass, not per chunk.
    target_seq_length = max_num_tokens
    if rng.random() < params.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            a_end = 1
            if len(current_chunk) >= 2:
                a_end = rng.randint(1, len(current_chunk) - 1)
            tokens_a = [t for sentence in current_chunk[:a_end] for t in sentence]
            tokens_b = []
            if len(current_chunk) == 1 or rng.random() < 0.5:
                is_random_next = True
                target_b_length = target_seq_length - len(tokens_a)
                for _ in range(10):
                    random_document_index = rng.randint(0, len(documents) - 1)
                    if random_document_index != document_index:
                        break
                random_document = documents[random_document_index]
                random_start = rng.randint(0, len(random_document) - 1)
                for j in range(random_start, len(random_document)):
                    tokens_b.extend(random_document[j])
                    if len(tokens_b) >= target_b_length:
                        break
                # The segments after A were not used: "put them back" for the next chunk.
                i -= len(current_chunk) - a_end
            else:
                is_random_next = False
                for sentence in current_chunk[a_end:]:
                    tokens_b.extend(sentence)
            _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            tokens = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
            output, positions, labels = _masked_lm_predictions(tokens, params, vocab, rng)
            emit(output, len(tokens_a), positions, labels, is_random_next)
            current_chunk = []
            current_length = 0
        i += 1


def _masked_lm_predictions(tokens, params, vocab, rng):
    special = (vocab.cls_id, vocab.sep_id)
    candidates = []  # lists of positions; a whole word is one candidate under whole-word masking
    for index, token in enumerate(tokens):
        if token in special:
            continue
        if params.whole_word_mask and candidates and vocab.is_subword[token]:
            candidates[-1].append(index)
        else:
            candidates.append([index])
    rng.shuffle(candidates)

    output = list(tokens)
    # Python 3's round(): half to even, as in the reference.
    num_to_predict = min(params.max_predictions_per_seq, max(1, int(round(len(tokens) * params.masked_lm_prob))))
    word_ids = vocab.word_ids
    masked = []
    covered = set()
    for index_set in candidates:
        if len(masked) >= num_to_predict:
            break
        # A whole word that would overflow the budget is skipped, not truncated.
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(index in covered for index in index_set):
            continue
        for index in index_set:
            covered.add(index)
            if rng.random() < 0.8:
                replacement = vocab.mask_id
            elif rng.random() < 0.5:
                replacement = tokens[index]
            else:
                replacement = int(word_ids[rng.randint(0, len(word_ids) - 1)])
            output[index] = replacement
            masked.append((index, tokens[index]))
    masked.sort()
    return output, [p for p, _ in masked], [label for _, label in masked]


def _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b  # a tie trims B
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


class _InstanceCollector:
    """Appends instances to flat typed arrays (a few bytes per token, not Python objects)."""

    def __init__(self, token_dtype):
        code = "H" if token_dtype == np.uint16 else "i"
        self.token_dtype = token_dtype
        self.tokens = array(code)
        self.lengths = array("i")
        self.a_lengths = array("i")
        self.positions = array("H")
        self.labels = array(code)
        self.mask_counts = array("i")
        self.is_random_next = array("B")

    def __len__(self):
        return len(self.a_lengths)

    def add(self, tokens, a_length, positions, labels, is_random_next):
        self.tokens.extend(tokens)
        self.lengths.append(len(tokens))
        self.a_lengths.append(a_length)
        self.positions.extend(positions)
        self.labels.extend(labels)
        self.mask_counts.append(len(positions))
        self.is_random_next.append(is_random_next)

    def build(self, order):
        order = np.asarray(order, dtype=np.int64)
        lengths = np.frombuffer(self.lengths, dtype=np.int32).astype(np.int64)
        mask_counts = np.frombuffer(self.mask_counts, dtype=np.int32).astype(np.int64)
        token_index = _ranges(_starts(lengths)[:-1][order], lengths[order])
        mask_index = _ranges(_starts(mask_counts)[:-1][order], mask_counts[order])
        return Instances(
            tokens=np.frombuffer(self.tokens, dtype=self.token_dtype)[token_index],
            instance_starts=_starts(lengths[order]),
            a_lengths=np.frombuffer(self.a_lengths, dtype=np.int32)[order],
            masked_positions=np.frombuffer(self.positions, dtype=np.uint16)[mask_index],
            masked_labels=np.frombuffer(self.labels, dtype=self.token_dtype)[mask_index],
            mask_starts=_starts(mask_counts[order]),
            is_random_next=np.frombuffer(self.is_random_next, dtype=np.uint8)[order],
        )


def _starts(lengths):
    """Offsets [0, l0, l0+l1, ...] for consecutive runs of the given lengths."""
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return starts


def _ranges(starts, lengths):
    """Concatenation of range(s, s+l) for each (s, l): the gather index for reordering runs."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    run_starts = _starts(lengths)[:-1]
    return np.repeat(np.asarray(starts, dtype=np.int64) - run_starts, lengths) + np.arange(total, dtype=np.int64)
