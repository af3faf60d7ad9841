"""WordPiece tokenization identical to google-research/bert's FullTokenizer.

HF `tokenizers`' BERT pipeline (BertNormalizer: clean text, CJK split,
lower-case + accent strip; BertPreTokenizer: whitespace + punctuation split;
greedy longest-match WordPiece) gives the reference's tokens, provided
WordPiece splits words of up to 200 characters as the reference does (HF's
default of 100 would turn 101–200 character words into [UNK]).
"""

import hashlib
import os
from functools import cached_property
from dataclasses import dataclass

import numpy as np

from bertprep.corpus import read_text
from bertprep.errors import DataError

try:
    from bertprep import _wordpiece
except ImportError:  # extension not built: every line goes through HF tokenizers
    _wordpiece = None

REQUIRED_TOKENS = ("[CLS]", "[SEP]", "[MASK]", "[UNK]")
MAX_INPUT_CHARS_PER_WORD = 200  # the reference's value, not HF's default 100


@dataclass(frozen=True)
class Vocab:
    path: str
    sha256: str
    words: tuple  # in file order, duplicates collapsed the way the reference's OrderedDict does
    ids: dict  # token -> id (the last line wins for a repeated token, as in the reference)

    @property
    def size(self):
        return len(self.words)

    def id_of(self, token):
        return self.ids[token]

    def word_ids(self):
        """The id of every entry of the reference's `vocab_words` list, in order.

        The reference replaces a token with `vocab_words[randint(0, len - 1)]`,
        so random replacement draws an index into this array.
        """
        return np.array([self.ids[w] for w in self.words], dtype=np.int32)

    def subword_flags(self):
        """is_subword[id]: the token starts with '##' (joins the previous word under whole-word masking)."""
        flags = np.zeros(max(self.ids.values()) + 1, dtype=np.uint8)
        for word, index in self.ids.items():
            if word.startswith("##"):
                flags[index] = 1
        return flags


def resolve_vocab_path(value):
    """A vocab.txt path, or a hub model id such as `bert-base-uncased` (its vocab.txt, cached)."""
    if os.path.exists(value):
        return value
    looks_like_repo_id = value.count("/") <= 1 and not value.endswith(".txt") and not value.startswith((".", "/"))
    if not looks_like_repo_id:
        raise DataError(f"{value}: vocab file not found")
    try:
        from huggingface_hub import hf_hub_download

        return hf_hub_download(repo_id=value, filename="vocab.txt")
    except Exception as exc:  # hub errors come in many types; the message is what matters
        raise DataError(f"{value}: not a vocab file and not resolvable as a hub model id ({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def load_vocab(path):
    """Read a vocab.txt the way the reference's `load_vocab` does and check the special tokens."""
    text = read_text(path, expected="a vocab.txt is UTF-8, one token per line")
    lines = text.split("\n")  # readline() semantics: only "\n" ends a line
    if lines[-1] == "":
        lines.pop()
    ids = {}
    for index, line in enumerate(lines):
        ids[line.strip()] = index
    missing = [t for t in REQUIRED_TOKENS if t not in ids]
    if missing:
        raise DataError(f"{path}: vocab lacks {', '.join(missing)} (a BERT vocab needs {', '.join(REQUIRED_TOKENS)})")
    return Vocab(path=os.path.abspath(path), sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), words=tuple(ids), ids=ids)


def build_tokenizer(vocab, lower_case=True):
    """An HF `tokenizers.Tokenizer` that reproduces the reference's FullTokenizer.tokenize -> ids."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokenizer = Tokenizer(
        models.WordPiece(
            vocab=dict(vocab.ids),
            unk_token="[UNK]",
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lower_case
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


class LineTokenizer:
    """Token ids of many lines at once, as flat arrays.

    Pure-ASCII lines (most of English Wikipedia and BookCorpus) go through the
    exact C implementation in `bertprep._wordpiece`; any line with another
    character goes through HF tokenizers, which handles Unicode categories,
    CJK and accents. Tests check both give the reference's tokens.
    """

    def __init__(self, vocab, lower_case=True, use_native=None):
        self.vocab = vocab
        self.lower_case = lower_case
        self.use_native = (_wordpiece is not None) if use_native is None else use_native

    @cached_property
    def hf(self):
        return build_tokenizer(self.vocab, self.lower_case)

    @cached_property
    def _table(self):
        return _wordpiece.build(list(self.vocab.ids), list(self.vocab.ids.values()), self.vocab.id_of("[UNK]"), self.lower_case)

    def warmed(self):
        """Build the lookup tables now (before forking workers, so they share them)."""
        if self.use_native:
            self._table  # noqa: B018 (cached_property)
        self.hf  # noqa: B018
        return self

    def encode(self, lines, batch_size=4096):
        """(tokens int32, counts int64): line i's ids are the next counts[i] tokens."""
        if self.use_native:
            ascii_index = [i for i, line in enumerate(lines) if line.isascii()]
            if len(ascii_index) == len(lines):
                return self._encode_ascii(lines)
        else:
            ascii_index = []
        other_index = sorted(set(range(len(lines))) - set(ascii_index)) if ascii_index else list(range(len(lines)))
        ascii_tokens, ascii_counts = self._encode_ascii([lines[i] for i in ascii_index])
        other_tokens, other_counts = self._encode_hf([lines[i] for i in other_index], batch_size)
        # Interleave back into line order: gather from [ascii tokens | other tokens].
        counts = np.zeros(len(lines), dtype=np.int64)
        counts[ascii_index] = ascii_counts
        counts[other_index] = other_counts
        source_starts = np.zeros(len(lines), dtype=np.int64)
        source_starts[ascii_index] = np.cumsum(ascii_counts) - ascii_counts
        source_starts[other_index] = len(ascii_tokens) + np.cumsum(other_counts) - other_counts
        source = np.concatenate([ascii_tokens, other_tokens])
        run_starts = np.cumsum(counts) - counts
        gather = np.repeat(source_starts - run_starts, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        return source[gather], counts

    def _encode_ascii(self, lines):
        if not lines:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        tokens, counts = _wordpiece.tokenize(self._table, lines)
        return np.frombuffer(tokens, dtype=np.int32), np.frombuffer(counts, dtype=np.int32).astype(np.int64)

    def _encode_hf(self, lines, batch_size):
        ids = []
        for start in range(0, len(lines), batch_size):
            ids.extend(e.ids for e in self.hf.encode_batch(lines[start:start + batch_size], add_special_tokens=False))
        counts = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        tokens = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(counts.sum()))
        return tokens, counts
