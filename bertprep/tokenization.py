"""WordPiece tokenization identical to google-research/bert's FullTokenizer.

HF `tokenizers`' BERT pipeline (BertNormalizer: clean text, CJK split,
lower-case + accent strip; BertPreTokenizer: whitespace + punctuation split;
greedy longest-match WordPiece) gives the reference's tokens, provided
WordPiece splits words of up to 200 characters as the reference does (HF's
default of 100 would turn 101–200 character words into [UNK]).

A very long line is tokenized in pieces (`cut_line`): HF tokenizers keeps
about 150 bytes per character of a line while it works on it, so one 50 MB
line took 7.6 GB.
"""

import hashlib
import itertools
import os
import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from bertprep import storage
from bertprep.corpus import read_text, refuse_cr_only
from bertprep.errors import DataError

try:
    import bertprep._wordpiece as _wordpiece
except ImportError:  # extension not built: every line goes through HF tokenizers
    _wordpiece = None

REQUIRED_TOKENS = ("[CLS]", "[SEP]", "[MASK]", "[UNK]")
MAX_INPUT_CHARS_PER_WORD = 200  # the reference's value, not HF's default 100
# Lines longer than this are tokenized in pieces of about this many characters.
# Small pieces also keep one non-ASCII character from sending a whole long
# line to HF tokenizers: the pieces without one take the C path.
MAX_PIECE_CHARS = 1 << 10
# HF tokenizers gets lines in batches of at most this many characters, so its
# working memory stays near 150 MB whatever the lines.
MAX_BATCH_CHARS = 1 << 20
# The reference's _is_chinese_char: each of these becomes a token of its own.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
# Where BasicTokenizer always ends a token, whatever surrounds the place:
# ASCII white space (it splits there; white space is never removed or merged)
# and before a CJK ideograph (it puts spaces around each one first).
CUT_POINT = re.compile("[ \t\n\r" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES) + "]")


def cut_line(line, max_chars=MAX_PIECE_CHARS):
    """`line` as pieces of at least `max_chars` characters (the last may be shorter) that tokenize separately
    into the line's tokens: each cut is at the first cut point past `max_chars`. A stretch without one
    (a single enormous word) stays whole.
    """
    pieces, start = [], 0
    while len(line) - start > max_chars:
        match = CUT_POINT.search(line, start + max_chars)
        if match is None:
            break
        pieces.append(line[start:match.start()])
        start = match.start()
    pieces.append(line[start:])
    return pieces


@dataclass(frozen=True)
class Vocab:
    """A vocab.txt read as the reference reads it: one id per line, so the id space is the number of
    lines; a token on several lines maps to its last line's id (the reference fills a dict line by line)."""

    path: str
    sha256: str
    tokens: tuple  # tokens[i]: the token on line i, the token of id i
    ids: dict  # token -> id, the last line winning for a repeated token

    @property
    def size(self):
        """Ids run from 0 to size - 1, whatever the repeats: what an embedding table must hold."""
        return len(self.tokens)

    @cached_property
    def words(self):
        """The reference's `vocab_words`: its dict's keys, each token once, in first-line order."""
        return tuple(self.ids)

    def id_of(self, token):
        return self.ids[token]

    def duplicates(self):
        """{token: [1-based line numbers]} of every token on more than one line."""
        lines = {}
        for number, token in enumerate(self.tokens, 1):
            lines.setdefault(token, []).append(number)
        return {token: numbers for token, numbers in lines.items() if len(numbers) > 1}

    def duplicates_warning(self, shown=3):
        """One line naming the repeated tokens and their lines, or None when every line is distinct."""
        repeats = self.duplicates()
        if not repeats:
            return None
        listed = "; ".join(f"{token!r} on lines {', '.join(map(str, numbers))}"
                           for token, numbers in list(repeats.items())[:shown])
        more = f" and {len(repeats) - shown} more" if len(repeats) > shown else ""
        return (f"{self.path}: {len(repeats)} token(s) on more than one line ({listed}{more}): each gets its last "
                f"line's id, as the reference's load_vocab does; ids run to {self.size - 1} ({self.size} lines)")

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


def refuse_vocab_directory(value):
    """A DataError where the vocab `value` is a local directory (a model's): "cannot read: Is a directory" was
    all it said; the vocab.txt inside is named where there is one."""
    if os.path.isdir(value):
        inside = os.path.join(value, "vocab.txt")
        raise DataError(f"{value}: a directory, not a vocab file" + (f": give {inside}" if os.path.isfile(inside)
                                                                     else " (it holds no vocab.txt)"))


def resolve_vocab_path(value):
    """A vocab.txt path, or a hub model id such as `bert-base-uncased` (its vocab.txt, cached)."""
    refuse_vocab_directory(value)
    if storage.exists(value):  # a local file or an object of a store (s3://, gs://, hf://, file://)
        return storage.local_path(value)
    looks_like_repo_id = value.count("/") <= 1 and not value.endswith(".txt") and not value.startswith((".", "/"))
    # `data/vocab.tx`, a typo under a local directory, is a path: asked of the hub it waited 25 s through its
    # retries offline (a line each) for "not resolvable as a hub model id (LocalEntryNotFoundError: …)".
    in_local_directory = "/" in value and os.path.isdir(value.split("/")[0])
    if not looks_like_repo_id or in_local_directory:  # nor is any URL ("://"): a missing bucket says so instead
        raise storage.not_found(value, DataError(f"{value}: vocab file not found"))
    from bertprep.stages.download.http import Limits
    from bertprep.stages.download.hub import bounded_hub

    # each request waits for a byte at most what a store's does (BERTPREP_STORE_READ_TIMEOUT; its usage line first):
    # huggingface_hub's retries of a hub that never answered waited 6.6 minutes whatever that said
    limits = Limits(stall=storage.store_limits()[1])
    try:
        from huggingface_hub import hf_hub_download

        with bounded_hub(limits, quiet=True):  # its retries' warnings are library lines: the error is ours, one
            return hf_hub_download(repo_id=value, filename="vocab.txt")
    except Exception as exc:  # hub errors come in many types; the message is what matters
        raise DataError(f"{value}: not a vocab file and not resolvable as a hub model id ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


def load_vocab(path, required=REQUIRED_TOKENS):
    """Read a vocab.txt the way the reference's `load_vocab` does and check it has the `required` tokens.

    create, validate, inspect and (through the manifest's size) the trainer all read a vocab here,
    so they agree on every id."""
    expected = "a vocab.txt is UTF-8, one token per line"
    text = read_text(path, expected=expected)
    refuse_cr_only(text, path, expected)  # one token of every line: "lacks [UNK]" of a vocab that has it
    lines = text.split("\n")  # readline() semantics: only "\n" ends a line
    if lines[-1] == "":
        lines.pop()
    tokens = tuple(line.strip() for line in lines)
    ids = {token: index
           for index, token in enumerate(tokens)}  # a repeated token keeps its first place, takes its last id
    missing = [t for t in required if t not in ids]
    if missing:
        # what the caller requires too: "lacks [PAD] (… needs [CLS], [SEP], [MASK], [UNK])" named a token not listed
        needed = ", ".join(dict.fromkeys((*REQUIRED_TOKENS, *required)))
        raise DataError(f"{path}: vocab lacks {', '.join(missing)} (a BERT vocab needs {needed})"
                        + _byte_order_mark_hint(tokens, missing))
    return Vocab(path=storage.display(storage.absolute(path)), sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                 tokens=tokens, ids=ids)


def _byte_order_mark_hint(tokens, missing):
    """Where the missing token is line 1's behind a UTF-8 byte-order mark, which the reference keeps in the token
    (as HF's BertTokenizer does): said, as the file's line 1 reads '[UNK]' in an editor and "lacks [UNK]" pointed
    nowhere."""
    if not tokens or not tokens[0].startswith("\ufeff") or tokens[0][1:].strip() not in missing:
        return ""
    return (f"; its line 1 is {tokens[0][1:].strip()} behind a UTF-8 byte-order mark (U+FEFF), which is read as "
            "part of the token: save the vocab without it")


def build_tokenizer(vocab, lower_case=True):
    """An HF `tokenizers.Tokenizer` that reproduces the reference's FullTokenizer.tokenize -> ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(
        models.WordPiece(
            vocab=dict(vocab.ids),
            unk_token="[UNK]",
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD,
        )
    )
    tokenizer.normalizer = bert_normalizer(lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def bert_normalizer(lower_case=True):
    """BasicTokenizer's text rules as HF's BertNormalizer: clean text, spaces around CJK ideographs, and for
    uncased lower case + accent stripping (strip_accents=None follows lowercase, as the reference ties them)."""
    from tokenizers import normalizers

    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                      lowercase=lower_case)


class LineTokenizer:
    """Token ids of many lines at once, as flat arrays.

    Pure-ASCII lines (most of English Wikipedia and BookCorpus) go through the
    exact C implementation in `bertprep._wordpiece`; any line with another
    character goes through HF tokenizers, which handles Unicode categories,
    CJK and accents. Tests check both give the reference's tokens.
    """

    def __init__(self, vocab, lower_case=True, use_native=None, max_piece_chars=MAX_PIECE_CHARS):
        self.vocab = vocab
        self.lower_case = lower_case
        self.use_native = (_wordpiece is not None) if use_native is None else use_native
        self.max_piece_chars = max_piece_chars  # None: never cut a line

    @cached_property
    def hf(self):
        return build_tokenizer(self.vocab, self.lower_case)

    @cached_property
    def _table(self):
        return _wordpiece.build(list(self.vocab.ids), list(self.vocab.ids.values()), self.vocab.id_of("[UNK]"),
                                self.lower_case)

    def warmed(self):
        """Build the lookup tables now (before forking workers, so they share them)."""
        if self.use_native:
            self._table  # noqa: B018 (cached_property)
        self.hf  # noqa: B018
        return self

    def encode(self, lines, batch_size=4096):
        """(tokens int32, counts int64): line i's ids are the next counts[i] tokens.

        Lines longer than `max_piece_chars` are cut (`cut_line`), their pieces
        tokenized like lines, and the pieces' counts summed back per line.
        """
        limit = self.max_piece_chars
        long_lines = [] if limit is None else [i for i, line in enumerate(lines) if len(line) > limit]
        if not long_lines:
            return self._encode_lines(lines, batch_size)
        pieces, pieces_per_line, start = [], np.ones(len(lines), dtype=np.int64), 0
        for index in long_lines:
            pieces += lines[start:index]
            cut = cut_line(lines[index], limit)
            pieces += cut
            pieces_per_line[index] = len(cut)
            start = index + 1
        pieces += lines[start:]
        tokens, piece_counts = self._encode_lines(pieces, batch_size)
        first_piece = np.cumsum(pieces_per_line) - pieces_per_line
        return tokens, np.add.reduceat(piece_counts, first_piece).astype(np.int64)

    def _encode_lines(self, lines, batch_size):
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
        all_tokens, all_counts = [np.zeros(0, np.int32)], [np.zeros(0, np.int64)]
        for batch in _batches(lines, batch_size, MAX_BATCH_CHARS):
            ids = [e.ids for e in self.hf.encode_batch(batch, add_special_tokens=False)]
            counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            all_counts.append(counts)
            all_tokens.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(counts.sum())))
        return np.concatenate(all_tokens), np.concatenate(all_counts)


def _batches(lines, max_lines, max_chars):
    """Consecutive slices of `lines`, each of at most `max_lines` lines and, unless one line is longer, `max_chars`
    characters."""
    start = chars = 0
    for index, line in enumerate(lines):
        if index > start and (index - start == max_lines or chars + len(line) > max_chars):
            yield lines[start:index]
            start, chars = index, 0
        chars += len(line)
    if start < len(lines):
        yield lines[start:]
