"""Input text shards → tokenized documents (the reference's reading rules).

Reference input format: one sentence per line, a blank line between
documents. Lines end at "\\n" only (the reference reads with readline) and are
`strip()`ped; an empty line starts a new document; a line whose tokens are
empty is skipped without ending the document; empty documents are dropped.
"""

import json
import os
import re

import numpy as np

from bertprep import storage
from bertprep.errors import DataError, UsageError
from bertprep.instances import Corpus

# What a compressed or archive file starts with: vocab, shard, tokenize and create read text, and these decode to
# U+FFFD "words". bz2's "BZh" is followed by its block size and a block's (or the empty stream's) magic, so text
# saying "BZh" is text.
BINARY_MAGIC = ((re.compile(rb"\x1f\x8b"), "a gzip file"), (re.compile(rb"PK(\x03\x04|\x05\x06)"), "a zip file"),
                (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "a bz2 file"),
                (re.compile(rb"\xfd7zXZ\x00"), "an xz file"), (re.compile(rb"\x28\xb5\x2f\xfd"), "a zstd file"))


def compressed_kind(head):
    """"a gzip file" (…) where `head`, a file's first bytes, opens with a compressed or archive file's header."""
    return next((what for magic, what in BINARY_MAGIC if magic.match(head)), None)


BINARY_HEAD = 1 << 16  # the bytes of each input read for a header or a NUL before training


def read_text(path, expected="input must be UTF-8 text, one sentence per line"):
    """The file decoded as strict UTF-8; an error names the file, line and column."""
    try:
        with storage.open(path, "rb") as f:  # a URL too (streamed)
            raw = f.read()
    except OSError as exc:
        raise DataError(f"{storage.display(path)}: cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        where = f"{storage.display(path)}:{line}"
        raise DataError(f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {column}); "
                        f"{expected}") from None


def ends_lines_in_cr_alone(text):
    """Whether `text` (str or bytes) holds a carriage return before its last line break and no LF there."""
    cr, lf = ("\r", "\n") if isinstance(text, str) else (b"\r", b"\n")
    end = len(text)
    while end and text[end - 1:end] in (cr, lf):  # its line breaks at the end; no copy of a shard's text
        end -= 1
    return text.find(lf, 0, end) < 0 and text.find(cr, 0, end) >= 0


def refuse_cr_only(text, path, expected):
    """A DataError for a file whose lines end in a carriage return alone (classic Mac OS): only "\\n" ends a line,
    as the reference's readline reads it, so its rows or sentences ran into one line, and the rows after a
    headerless CoLA file's first were lost without a word. The reference's reading of it is no data to keep
    (one row of merged fields, one sentence of the whole shard): refused, not read otherwise. A CR inside an
    LF file is still read as the reference reads it."""
    if ends_lines_in_cr_alone(text):
        raise DataError(f"{storage.display(path)}: its lines end in a carriage return alone (CR, classic Mac OS "
                        f"line endings), which ends no line; {expected}, lines ending in LF or CRLF")


def split_documents(text):
    """(stripped non-empty lines, document number of each line), in file order."""
    lines = []
    document_of_line = []
    document = 0
    for line in text.split("\n"):
        line = line.strip()
        if line:
            lines.append(line)
            document_of_line.append(document)
        else:
            document += 1
    return lines, document_of_line


def tokenize_corpus(text, tokenizer):
    """Tokenize a shard's text (with a LineTokenizer) into a Corpus of non-empty documents and sentences."""
    lines, document_of_line = split_documents(text)
    tokens, lengths = tokenizer.encode(lines)
    kept = lengths > 0  # a line that tokenizes to nothing does not end its document
    line_documents = np.asarray(document_of_line, dtype=np.int64)[kept]
    sentence_lengths = lengths[kept]
    sentence_starts = np.zeros(len(sentence_lengths) + 1, dtype=np.int64)
    np.cumsum(sentence_lengths, out=sentence_starts[1:])
    # A document starts at each sentence whose document number differs from the previous one's.
    new_document = np.ones(len(line_documents), dtype=bool)
    new_document[1:] = line_documents[1:] != line_documents[:-1]
    document_starts = np.append(np.flatnonzero(new_document), len(line_documents)).astype(np.int64)
    return Corpus(tokens=tokens, sentence_starts=sentence_starts, document_starts=document_starts)


UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16's byte-order marks, little- and big-endian


def refuse_binary(path):
    """A DataError naming `path` when its first bytes are a compressed or archive file's header or hold a NUL:
    decoded with U+FFFD they made a vocab (and shards) of noise, with only a progress note saying so."""
    with storage.open(path, "rb") as f:
        head = f.read(BINARY_HEAD)
    kind = compressed_kind(head)
    if kind is not None:
        raise DataError(f"{storage.display(path)}: binary data ({kind}?), expected UTF-8 text: decompress it first")
    if head.startswith(UTF16_MARKS) and b"\0" in head:  # Notepad's "Unicode": its NULs were called binary data
        raise DataError(f"{storage.display(path)}: UTF-16 text (its byte-order mark {head[:2].hex(' ').upper()}), "
                        "expected UTF-8 text: convert it first (iconv -f UTF-16 -t UTF-8)")
    if (nul := head.find(b"\0")) >= 0:
        raise DataError(f"{storage.display(path)}: binary data (a NUL byte at offset {nul:,}), expected UTF-8 text")


def json_object_line(text):
    """The number of `text`'s first non-blank line where that line is a JSON object, else None: a JSON-lines corpus
    named otherwise (Megatron-LM's preprocess_data reads `--input corpus.json`, a JSON object a line), which a
    reader of text takes for sentences, braces, keys and escapes included."""
    body = text[1:] if text.startswith("\ufeff") else text  # the reader of JSON lines skips a byte-order mark
    stripped = body.lstrip()
    if not stripped.startswith("{"):  # no JSON parse of a long line of text
        return None
    end = stripped.find("\n")
    try:
        value = json.loads(stripped if end < 0 else stripped[:end])
    except ValueError:
        return None
    return body.count("\n", 0, len(body) - len(stripped)) + 1 if isinstance(value, dict) else None


def json_object_line_of_file(path):
    """json_object_line of the file `path`, reading no further than its first non-blank line."""
    with storage.open(path, "rb") as f:
        number = 0
        while raw := f.readline(BINARY_HEAD):  # a line's head first: a 50 MB line of text is not read whole
            number += raw.endswith(b"\n")
            if not raw.strip():
                continue
            if not raw.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
                return None
            found = json_object_line((raw + f.readline()).decode("utf-8", errors="replace"))
            return None if found is None else number + (not raw.endswith(b"\n"))
    return None


def refuse_json_lines_named_otherwise(path, would_be):
    """A UsageError for a JSON-lines corpus not named .jsonl (its first non-blank line a JSON object): only that
    name is read as JSON lines, so `--input corpus.json` (Megatron-LM's naming) was read as text, its braces,
    quotes and keys taken for `would_be` (a stage's words: "words of the vocab"), exit 0."""
    if not path.endswith(".jsonl") and (number := json_object_line_of_file(path)) is not None:
        raise UsageError(f"{storage.display(path)}:{number}: a JSON object, as a JSON-lines corpus holds (one "
                         "document a line), but only a .jsonl file is read as JSON lines: read as text, its braces "
                         f"and keys would be {would_be}; rename it {jsonl_name(path)}")


def is_wordpiece_vocab(lines, required):
    """True when `lines` are a WordPiece vocab's: each one token (no line of two words, no blank line but at the
    end) and every token of `required` ([UNK] [CLS] [SEP] [MASK]) among them. Stops at the first line that is no
    vocab's, a corpus's first blank line or sentence, so a stage may ask it of every input before reading any.
    One test for every stage that reads text (tokenize and create's shards, vocab's corpus): the two tests it
    replaces differed (a vocab whose file ended in a blank line was corpus text to vocab; a list of a token a line
    that held the four was no shard to tokenize even where other lines held sentences)."""
    missing, blank = set(required), False
    for line in lines:
        words = line.split(None, 1)  # two words at most: a corpus's 22 MB line split whole was 4 million strings
        if not words:
            blank = True
            continue
        if blank or len(words) != 1:
            return False
        missing.discard(words[0])
    return not missing


def jsonl_name(path):
    """The name a JSON-lines corpus `path` is read as one by: its extension .jsonl."""
    return os.path.splitext(storage.display(path))[0] + ".jsonl"
