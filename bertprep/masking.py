"""Dynamic masking: the masks of unmasked instances, drawn at load time from a key, not from a stream.

Records of the `unmasked` kind (`bertprep create --masking dynamic`) hold
[CLS] A [SEP] B [SEP] without masks. A loader masks each instance when it
reads it, with random numbers that are a pure function of (seed, epoch,
global instance index, position): a counter-based generator (SplitMix64's
finalizer over the key, the idea of Philox without its rounds), so an
instance gets the same mask in epoch e whatever the number of workers,
ranks or restarts, and a new one in epoch e + 1.

The rules are the reference's (create_masked_lm_predictions): candidates are
every token but [CLS] and [SEP] (a whole word with --whole-word-mask: a
token and the "##" pieces after it), taken in a random order until
num_to_predict = min(max_pred, max(1, round(len * masked_lm_prob))) are
masked, a whole word that would overflow the budget skipped; each masked
token becomes [MASK] 80% of the time, stays 10%, becomes a random vocab word
10%. The order is by a random key per candidate (the key of its first token)
instead of a shuffle, which draws the same uniform permutation.

`mask_instance`, one instance at a time in plain Python, is the
specification. `mask_batch`, what the loaders call, masks a batch with the
C core (bertprep._native.mask_batch) when it was built, else with NumPy
(`_mask_batch_numpy`); the tests hold both to `mask_instance` exactly.
"""

import dataclasses

import numpy as np

from bertprep import storage
from bertprep.errors import DataError

try:
    from bertprep._native import mask_batch as _native_mask_batch
except ImportError:  # extension not built: the NumPy form gives the same masks, slower
    _native_mask_batch = None

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
# Streams of the per-position random numbers.
ORDER, MASK_OR_NOT, KEEP_OR_RANDOM, RANDOM_WORD = range(4)


# ---------------------------------------------------------------- the plain-Python twin


def _mix(x):
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def instance_key(seed, epoch, index):
    """The 64-bit key of one instance in one epoch."""
    key = _mix((seed & _MASK64) ^ _GOLDEN)
    key = _mix((key + (epoch & _MASK64) * _GOLDEN) & _MASK64)
    return _mix((key + (index & _MASK64) * _GOLDEN) & _MASK64)


def uniform(key, position, stream):
    """The uniform number in [0, 1) of stream `stream` at `position` of the instance keyed `key`."""
    return (_mix((key + (position * 4 + stream + 1) * _GOLDEN) & _MASK64) >> 11) * 2.0 ** -53


def num_to_predict(length, max_predictions, masked_lm_prob):
    """The reference's budget: Python 3's round() (half to even) of length * prob, at least 1."""
    return min(max_predictions, max(1, int(round(length * masked_lm_prob))))


def mask_instance(tokens, key, max_predictions, masked_lm_prob, vocab, whole_word=False):
    """(masked tokens, positions ascending, labels) of one unpadded instance (a list of ids).

    `vocab` is a bertprep.instances.MaskingVocab (special ids, vocab_words ids, "##" flags).
    """
    candidates = []
    for index, token in enumerate(tokens):
        if token in (vocab.cls_id, vocab.sep_id):
            continue
        if whole_word and candidates and vocab.is_subword[token]:
            candidates[-1].append(index)
        else:
            candidates.append([index])
    candidates.sort(key=lambda word: (uniform(key, word[0], ORDER), word[0]))
    budget = num_to_predict(len(tokens), max_predictions, masked_lm_prob)
    output = list(tokens)
    positions = []
    for word in candidates:
        if len(positions) >= budget:
            break
        if len(positions) + len(word) > budget:
            continue
        for index in word:
            if uniform(key, index, MASK_OR_NOT) < 0.8:
                output[index] = vocab.mask_id
            elif uniform(key, index, KEEP_OR_RANDOM) >= 0.5:
                words = vocab.word_ids
                output[index] = int(words[int(uniform(key, index, RANDOM_WORD) * len(words))])
            positions.append(index)
    positions.sort()
    return output, positions, [tokens[p] for p in positions]


# ---------------------------------------------------------------- the vectorised implementation


def _mix_np(x):
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def instance_keys(seed, epochs, indices):
    """instance_key for arrays of epochs and indices (uint64, wrapping as the twin's & 2**64 - 1); `epochs`
    may be one epoch for all."""
    golden = np.uint64(_GOLDEN)
    seed_key = _mix((seed & _MASK64) ^ _GOLDEN)
    with np.errstate(over="ignore"):
        if np.ndim(epochs) == 0:  # the loaders' case: the epoch's part once, in Python ints
            key = np.uint64(_mix((seed_key + (int(epochs) & _MASK64) * _GOLDEN) & _MASK64))
        else:
            key = _mix_np(np.uint64(seed_key) + np.asarray(epochs, np.int64).astype(np.uint64) * golden)
        return _mix_np(key + np.asarray(indices, np.int64).astype(np.uint64) * golden)


def _bits(keys, positions, stream):
    """The 64 random bits of uniform(key, position, stream), for keys and positions that broadcast together."""
    counters = (np.asarray(positions, np.uint64) * np.uint64(4) + np.uint64(stream + 1)) * np.uint64(_GOLDEN)
    with np.errstate(over="ignore"):
        return _mix_np(keys + counters)


def _uniforms_at(keys, positions, stream):
    return (_bits(keys, positions, stream) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def mask_batch(input_ids, input_mask, keys, max_predictions, masked_lm_prob, vocab, whole_word=False,
               use_native=None):
    """The pretraining features of a batch of unmasked instances, masked by their `keys` (N,) uint64.

    input_ids, input_mask: (N, seq) padded as written. Returns {input_ids,
    masked_lm_positions, masked_lm_ids, masked_lm_weights}: (N, seq) and
    (N, max_predictions), int64 and float32, the same values mask_instance gives.
    `use_native=None` uses the C core when it was built; False the NumPy form.
    """
    if use_native is None:
        use_native = _native_mask_batch is not None
    if not use_native:
        return _mask_batch_numpy(input_ids, input_mask, keys, max_predictions, masked_lm_prob, vocab, whole_word)
    tokens = np.ascontiguousarray(input_ids, np.int64)
    count = len(tokens)
    out = {"input_ids": np.empty_like(tokens),
           "masked_lm_positions": np.empty((count, max_predictions), np.int64),
           "masked_lm_ids": np.empty((count, max_predictions), np.int64),
           "masked_lm_weights": np.empty((count, max_predictions), np.float32)}
    _native_mask_batch(tokens, (np.asarray(input_mask) != 0).sum(axis=1, dtype=np.int64),
                       np.ascontiguousarray(keys, np.uint64), max_predictions, masked_lm_prob, whole_word,
                       vocab.cls_id, vocab.sep_id, vocab.mask_id, np.ascontiguousarray(vocab.word_ids, np.int32),
                       np.ascontiguousarray(vocab.is_subword, np.uint8), *out.values())
    return out


def _mask_batch_numpy(input_ids, input_mask, keys, max_predictions, masked_lm_prob, vocab, whole_word=False):
    """mask_batch in NumPy, a batch at a time: the path without the C core."""
    tokens = np.asarray(input_ids, np.int64)
    count, seq = tokens.shape
    lengths = (np.asarray(input_mask) != 0).sum(axis=1)
    columns = np.arange(seq)
    candidate = (columns[None, :] < lengths[:, None]) & (tokens != vocab.cls_id) & (tokens != vocab.sep_id)
    if whole_word:
        subword = np.asarray(vocab.is_subword, bool)[np.clip(tokens, 0, len(vocab.is_subword) - 1)]
        # A "##" piece joins the word before it when some candidate precedes it (the twin's candidates[-1]).
        earlier = np.zeros((count, seq), bool)
        earlier[:, 1:] = np.maximum.accumulate(candidate, axis=1)[:, :-1]
        starts = candidate & ~(subword & earlier)
    else:
        starts = candidate
    # A candidate's sort key: its uniform's 53 bits, then its position (the twin's (uniform, position) order),
    # one unique integer per candidate while the position fits beside the 53 bits; the rest sort last.
    position_bits = max(1, int(seq - 1).bit_length())
    uniform_bits = _bits(keys[:, None], columns[None, :], ORDER) >> np.uint64(11)
    if 53 + position_bits > 64:  # seq > 2048: no room for the position; sort by (start or not, bits, position)
        word_order = np.lexsort((np.broadcast_to(columns, (count, seq)), uniform_bits, ~starts), axis=1)
        order_keys = None
    else:
        order_keys = (uniform_bits << np.uint64(position_bits)) | columns.astype(np.uint64)[None, :]
        order_keys[~starts] = np.iinfo(np.uint64).max
    # NumPy rounds half to even, as Python 3's round() in the reference.
    budget = np.minimum(max_predictions, np.maximum(1, np.round(lengths * masked_lm_prob).astype(np.int64)))
    if whole_word:
        if order_keys is not None:
            word_order = np.argsort(order_keys, axis=1)
        positions = _slots(_whole_words(candidate, starts, word_order, budget), max_predictions)
    else:  # the `budget` smallest keys of each row, then in position order
        take = min(max_predictions, seq)
        # A key's low bits are its position: the smallest keys, sorted, name the positions in draw order.
        if order_keys is None:
            nearest = word_order[:, :take]
        else:
            nearest = (np.sort(order_keys, axis=1)[:, :take] & np.uint64((1 << position_bits) - 1)).astype(np.int64)
        used = np.arange(take)[None, :] < np.minimum(budget, starts.sum(1))[:, None]
        positions = np.full((count, max_predictions), seq, np.int64)
        positions[:, :take] = np.sort(np.where(used, nearest, seq), axis=1)
    used = positions < seq
    columns_used = np.minimum(positions, seq - 1)
    labels = np.take_along_axis(tokens, columns_used, 1)
    replace_mask = _uniforms_at(keys[:, None], columns_used, MASK_OR_NOT) < 0.8
    random_word = used & ~replace_mask & (_uniforms_at(keys[:, None], columns_used, KEEP_OR_RANDOM) >= 0.5)
    words = np.asarray(vocab.word_ids, np.int64)
    seen = np.where(replace_mask, vocab.mask_id, labels)
    row, slot = np.nonzero(random_word)
    uniforms = _uniforms_at(keys[row], columns_used[row, slot], RANDOM_WORD)
    seen[row, slot] = words[(uniforms * len(words)).astype(np.int64)]
    output = tokens.copy()
    row, slot = np.nonzero(used)
    output[row, positions[row, slot]] = seen[row, slot]
    return {"input_ids": output, "masked_lm_positions": np.where(used, positions, 0),
            "masked_lm_ids": np.where(used, labels, 0), "masked_lm_weights": used.astype(np.float32)}


def _slots(masked, max_predictions):
    """(N, max_predictions): each row's masked positions ascending, then seq (unused)."""
    count, seq = masked.shape
    positions = np.full((count, max_predictions), seq, np.int64)
    row, column = np.nonzero(masked)
    positions[row, np.arange(len(row)) - np.searchsorted(row, row)] = column
    return positions


def _whole_words(candidate, starts, word_order, budget):
    """(N, seq) bool: the tokens of the words taken greedily in key order, a word that overflows skipped."""
    count, seq = candidate.shape
    word_of = np.maximum.accumulate(np.where(starts, np.arange(seq)[None, :], -1), axis=1)  # each token's word
    word_length = np.zeros((count, seq), np.int64)
    rows = np.broadcast_to(np.arange(count)[:, None], (count, seq))
    np.add.at(word_length, (rows[candidate], word_of[candidate]), 1)
    sorted_lengths = np.take_along_axis(np.where(starts, word_length, 0), word_order, axis=1)
    taken = np.zeros((count, seq), bool)
    used = np.zeros(count, np.int64)
    for rank in range(seq):
        size = sorted_lengths[:, rank]
        if not size.any():
            break
        fits = (size > 0) & (used < budget) & (used + size <= budget)
        taken[:, rank] = fits
        used += np.where(fits, size, 0)
    chosen_start = np.zeros((count, seq), bool)
    np.put_along_axis(chosen_start, word_order, taken, axis=1)
    return candidate & np.take_along_axis(chosen_start, np.maximum(word_of, 0), axis=1)


# ---------------------------------------------------------------- a records directory's masking


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """How the loaders mask a directory of unmasked records: its manifest's parameters and vocab."""

    seed: int
    max_predictions: int
    masked_lm_prob: float
    whole_word: bool
    vocab: object  # bertprep.instances.MaskingVocab

    @classmethod
    def from_manifest(cls, manifest, where, vocab_path=None):
        """From a `create --masking dynamic` manifest; the vocab from `vocab_path`, else the one it names."""
        from bertprep.instances import MaskingVocab
        from bertprep.tokenization import load_vocab

        params = manifest.get("params") or {}
        missing = [key for key in ("seed", "max_predictions_per_seq", "masked_lm_prob") if key not in params]
        vocab_path = vocab_path or (manifest.get("vocab") or {}).get("path")
        if missing or not vocab_path:
            raise DataError(f"{where}: an unmasked dataset's manifest must name {', '.join(missing or ['its vocab'])} "
                            "(rerun `bertprep create --masking dynamic`)")
        if not storage.isfile(vocab_path):  # a URL too
            raise DataError(f"{where}: names the vocab {vocab_path}, which is not there: give the vocab.txt it was "
                            "made with (--vocab)")
        # Another vocab masked without a word: its [MASK] id and random replacement ids were put into records of
        # the manifest's ids (a vocab whose [MASK] is at 4 wrote 4, [unused3], where 103 belonged).
        recorded = (manifest.get("vocab") or {}).get("sha256")
        if isinstance(recorded, str) and (actual := storage.sha256(vocab_path)) != recorded:
            named = (manifest.get("vocab") or {}).get("path")
            given = "has changed since" if vocab_path == named else f"is another vocab (sha256 {actual[:12]}...)"
            raise DataError(f"{where}: made with the vocab {named} (sha256 {recorded[:12]}...), but {vocab_path} "
                            f"{given}: masking puts the vocab's [MASK] and random ids into the records, so it must "
                            "be theirs: give the vocab.txt they were made with")
        return cls(seed=int(params["seed"]), max_predictions=int(params["max_predictions_per_seq"]),
                   masked_lm_prob=float(params["masked_lm_prob"]), whole_word=bool(params.get("whole_word_mask")),
                   vocab=MaskingVocab.from_vocab(load_vocab(vocab_path)))

    def apply(self, batch, epochs, indices):
        """A batch of the unmasked kind ({name: (N, ...)}) as pretraining features, masked for `epochs`/`indices`."""
        keys = instance_keys(self.seed, epochs, indices)
        masked = mask_batch(batch["input_ids"], batch["input_mask"], keys, self.max_predictions,
                            self.masked_lm_prob, self.vocab, self.whole_word)
        dtype = np.asarray(batch["input_ids"]).dtype
        return {
            "input_ids": masked["input_ids"].astype(dtype, copy=False),
            "input_mask": batch["input_mask"],
            "segment_ids": batch["segment_ids"],
            "masked_lm_positions": masked["masked_lm_positions"].astype(dtype, copy=False),
            "masked_lm_ids": masked["masked_lm_ids"].astype(dtype, copy=False),
            "masked_lm_weights": masked["masked_lm_weights"],
            "next_sentence_labels": batch["next_sentence_labels"],
        }


def first_instances(manifest, corpus_dir):
    """{normalised file path: global index of its first instance} from a manifest's `first_instance` entries."""
    return {storage.normpath(storage.join(corpus_dir, relative)): int(entry["first_instance"])
            for relative, entry in (manifest.get("files") or {}).items()
            if isinstance(entry, dict) and "first_instance" in entry}
