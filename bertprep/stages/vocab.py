"""`bertprep vocab`: a WordPiece vocab.txt trained on the user's own corpus.

The text rules are BERT's BasicTokenizer (HF `tokenizers`' BertNormalizer and
BertPreTokenizer, the pair bertprep/tokenization.py tokenizes with): clean
text, a token per CJK ideograph, punctuation split, and for uncased (the
default) lower case + accent stripping. The words are then trained into
WordPiece pieces by `tokenizers`' WordPiece trainer.

The file has Google's layout, that of bert-base-uncased's vocab.txt:
[PAD] at 0, [unused0]..[unused98] at 1..99, [UNK] [CLS] [SEP] [MASK] at
100..103, the remaining [unused99].. slots after them (994 slots by
default, so the corpus's characters start at 999 as Google's do), then the
characters, their "##" forms and the trained pieces. With fewer than 99
slots the four tokens move down to follow them ([UNK] at 1 with --unused 0).

Determinism: the stock trainer gives the "##" character tokens ids while
iterating a hash map (huggingface/tokenizers#1794), so equal-count merges
break ties differently from run to run. As scripts/make_sample_vocab.py
does, a first pass computes the alphabet (the LIMIT_ALPHABET most frequent
characters, ties by code point) and the "##" forms the trainer would make,
and they are handed to it after the special tokens in code point order:
every id is then fixed before training and the same inputs, in the same
order (command-line order, a directory's files sorted), give the same bytes.

Inputs: each file once (an input named twice is refused, as shard refuses
it: read twice, its words counted twice); text is UTF-8, a line with a few
invalid bytes decoded with U+FFFD and counted (a summary warning, as shard
does), but a file whose bytes are binary (a NUL byte, or a gzip, zip, bz2,
xz or zstd header) is refused before training. `out` is the vocab.txt file
to write: an existing directory or a path ending in a separator is refused.
"""

import dataclasses
import hashlib
import os
import time
from collections import Counter
from typing import Any

from bertprep import storage
from bertprep.atomic import atomic_open, hold_file, sha256_file
from bertprep.corpus import refuse_binary, refuse_json_lines_named_otherwise
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.options import (
    build_options,
    check_types,
    errors_name_fields,
    nearest_existing,
    normalise_paths,
    refuse_dangling_file_link,
    refuse_dangling_link,
    refuse_overlap,
    set_field,
)
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.stages.shard import (
    COMBINED,
    input_files,
    iter_input_documents,
    refuse_manifest_as_input,
    refuse_vocab_file,
    resolve_inputs,
)
from bertprep.text_inputs import refuse_stream
from bertprep.tokenization import CUT_POINT
from bertprep.workdir import MANIFEST, load_manifest, refuse_repeated_inputs, resolve_workdir, stage_dir

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")  # after [PAD] and the first unused slots
UNUSED_BEFORE_SPECIALS = 99  # Google's [unused0]..[unused98] sit between [PAD] and [UNK]
GOOGLE_UNUSED = 994  # [unused0]..[unused993] in bert-base-uncased's vocab.txt
LIMIT_ALPHABET = 1000  # characters kept (the most frequent), as HF's BertWordPieceTokenizer keeps
MIN_FREQUENCY = 2  # a pair seen fewer times is never merged (HF's BertWordPieceTokenizer default)
PREFIX = "##"
CHUNK_CHARS = 1 << 20  # the first pass normalizes this much text at once
# The largest --vocab-size. The tokenizers trainer reserves about 45 bytes a slot before it reads anything, so
# 10**8 asked 4.4 GB and 10**11 aborted the process (a Rust OOM), 10**22 overflowed its u64 (a traceback);
# 2**20 reserves about 47 MB and is far past any BERT vocab (bert-base 30,522; mBERT 119,547; XLM-R 250,002).
MAX_VOCAB_SIZE = 1 << 20


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class VocabOptions:
    """`bertprep vocab`'s flags: `input` (formatted corpus or shard directories with a manifest, or .jsonl/.txt
    files, in order), `corpus` (names under WORKDIR/formatted, read after `input`), `out` (None:
    WORKDIR/vocab/vocab.txt), `vocab_size` (lines of vocab.txt, special tokens and unused slots included),
    `unused` ([unused] slots) and `cased` (keep case and accents)."""

    input: tuple[str, ...] = ()
    corpus: tuple[str, ...] = ()
    out: str | None = None
    vocab_size: int = 30522
    unused: int = GOOGLE_UNUSED
    cased: bool = False
    workdir: str | None = None

    def __post_init__(self):
        check_types(self)
        for name in ("input", "corpus"):  # one path or name is a list of one, not of its characters
            value = getattr(self, name)
            set_field(self, name, (value,) if isinstance(value, (str, os.PathLike)) else tuple(value or ()))
        normalise_paths(self, "input", "out", "workdir")
        if self.out is not None and self.out.endswith(tuple(filter(None, ("/", os.sep, os.altsep)))):
            raise UsageError(f"--out {storage.display(self.out)}: ends in a separator (a directory); give the "
                             f"vocab.txt file to write, such as {storage.display(self.out)}vocab.txt")
        if self.unused < 0:
            raise UsageError(f"--unused must be at least 0, not {self.unused}")
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise UsageError(f"--vocab-size {self.vocab_size}: at most {MAX_VOCAB_SIZE:,} (BERT vocabs are 30,522 "
                             "to 250,002 entries)")
        reserved = 1 + len(SPECIAL_TOKENS) + self.unused
        if self.vocab_size < reserved:
            raise UsageError(f"--vocab-size {self.vocab_size} is below the {reserved} special tokens and unused "
                             f"slots ([PAD], [UNK], [CLS], [SEP], [MASK] and --unused {self.unused})")


def special_layout(unused):
    """[PAD], the first unused slots, [UNK] [CLS] [SEP] [MASK], the other slots: Google's order."""
    slots = [f"[unused{i}]" for i in range(unused)]
    head = min(unused, UNUSED_BEFORE_SPECIALS)
    return ["[PAD]", *slots[:head], *SPECIAL_TOKENS, *slots[head:]]


# -- inputs -----------------------------------------------------------------------


def resolve_vocab_inputs(workdir, inputs, corpora):
    """The input files in a fixed order: each --input's, then each --corpus's formatted parts. A directory
    must hold a finished stage's manifest."""
    if not inputs and not corpora:
        raise UsageError("give --input (corpus directories or .jsonl/.txt files) or --corpus NAME")
    named = []  # [(file, the --input value that named it)]
    for path in inputs:
        if (folder := Folder(path)).isdir():
            require_manifest(folder)
        else:  # `--input <(zcat …)` (/dev/fd/63) or a FIFO: no regular file, was "no such file" (input_files asks not)
            refuse_stream(path)
        named += [(f, path) for f in input_files(path)]
    refuse_repeated_inputs(named)  # shard's message: read twice, a file's words counted twice
    files = [f for f, _path in named]
    seen = {storage.normpath(f): None for f in files}  # normalised file -> the --corpus that read it (None: --input)
    formatted = Folder(stage_dir(workdir, "formatted"))
    for name in corpora:
        found = resolve_inputs(workdir, None, name)[1]  # shard's messages for a corpus that is not there
        for f in found:
            if (key := storage.normpath(f)) in seen:
                how = ("--corpus given twice" if seen[key] == name else f"also by --corpus {seen[key]}") if seen[key] \
                    else "also by --input"
                raise UsageError(f"--corpus {name}: {storage.display(f)} named twice ({how}); give each input file "
                                 "once")
            seen[key] = name
        files += found
        parts = (name,) if formatted.isdir(name) else COMBINED[name]
        for part in parts:
            require_manifest(formatted.folder(part))
    return files


def refuse_file_above(out):
    """A UsageError where a folder `out` would be written in is a file (an object on a store: its DataError):
    vocab writes its one file at the end, so `--out corpus.txt/vocab.txt` failed with "Not a directory" only
    after the whole corpus had been read twice and trained on. `out` itself a symbolic link to nothing is
    refused too (options.refuse_dangling_file_link)."""
    if not storage.reads_in_place(out):
        storage.check_reachable(out)  # a missing bucket, refused credentials: else found at the upload, after training
        storage.refuse_writing_under_an_object(os.path.dirname(out))
        return
    refuse_dangling_file_link("--out", out, out)  # the rename replaced such a link with the vocab
    place = nearest_existing(out, exists=os.path.lexists)
    refuse_dangling_link("--out", out, place)
    if place and not os.path.isdir(place):  # "": a relative path under the current directory
        raise UsageError(f"--out {storage.display(out)}: {place} is a file, not a directory to write the vocab in")


def refuse_json_object_lines(path):
    """refuse_json_lines_named_otherwise, for vocab: its braces, quotes and keys ("text" once a document) were
    trained into the vocab, exit 0."""
    refuse_json_lines_named_otherwise(path, "words of the vocab")


def require_manifest(folder):
    """Nothing when the Folder holds a finished stage's manifest; else a DataError naming it."""
    if load_manifest(folder) is None:
        raise DataError(f"{folder}: no {MANIFEST} (not a finished `bertprep download` or "
                        "`bertprep shard` output); give its .jsonl/.txt files instead")


def iter_lines(paths, stats, progress=None):
    """The corpus's non-blank lines, file by file in the given order (`progress` advanced per file)."""
    for path in paths:
        text_file = not path.endswith(".jsonl")
        for text in iter_input_documents(path, stats):
            if text_file and "\0" in text:  # past refuse_binary's head: still a binary file
                raise DataError(f"{storage.display(path)}: binary data (a NUL byte), expected UTF-8 text")
            yield from (piece for line in text.split("\n") if line.strip() for piece in line_pieces(line))
        if progress is not None:
            progress.advance(1, bytes=storage.getsize(path))


def line_pieces(line):
    """`line` cut into pieces of CHUNK_CHARS characters or a little more where BasicTokenizer always ends a word
    (tokenization.CUT_POINT: at white space, which goes, or before a CJK ideograph, its own word): the same
    words, while the normalizer and the trainer keep an alignment per byte of what they are given at once: a
    22 MB line of 3 million words took 1.9 GB, 317 MB as lines of 100 words. A line of Chinese or Japanese
    text has few spaces or none, and was given whole."""
    start = 0
    while len(line) - start > CHUNK_CHARS and (cut := CUT_POINT.search(line, start + CHUNK_CHARS)):
        yield line[start:cut.start()]
        start = cut.end() if cut.group().isspace() else cut.start()
    yield line[start:]


def iter_chunks(lines, size=CHUNK_CHARS):
    """The lines joined by newlines into strings of about `size` characters: normalizing and splitting a
    chunk gives the words of its lines, as a newline is white space to BasicTokenizer."""
    chunk, chars = [], 0
    for line in lines:
        chunk.append(line)
        chars += len(line) + 1
        if chars >= size:
            yield "\n".join(chunk)
            chunk, chars = [], 0
    if chunk:
        yield "\n".join(chunk)


# -- training ---------------------------------------------------------------------


def bert_tokenizer(cased):
    """An untrained WordPiece tokenizer with BasicTokenizer's text rules."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from bertprep.tokenization import MAX_INPUT_CHARS_PER_WORD, bert_normalizer

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tokenizer.normalizer = bert_normalizer(lower_case=not cased)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def initial_alphabet(tokenizer, lines):
    """(alphabet, "##" forms, the warning for the characters left out or None), the first two in code point order:
    the characters the trainer keeps (the LIMIT_ALPHABET most frequent, ties by code point) and the "##" tokens it
    makes for those seen inside a word."""
    counts, inner = Counter(), set()
    for chunk in iter_chunks(lines):
        words = [word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(
            chunk))]
        counts.update("".join(words))
        inner.update("".join(word[1:] for word in words))
    ranked = sorted(counts, key=lambda c: (-counts[c], ord(c)))
    alphabet = sorted(ranked[:LIMIT_ALPHABET], key=ord)
    return alphabet, [PREFIX + c for c in alphabet if c in inner], left_out_warning(ranked, counts)


def left_out_warning(ranked, counts):
    """The summary's warning for the characters past LIMIT_ALPHABET, or None: none of them is in the vocab, so a
    word holding one tokenizes to [UNK]; a corpus of 3,000 CJK characters gave a vocab of 1,005 tokens, the
    summary saying only "the corpus has no more pairs to merge"."""
    left = ranked[LIMIT_ALPHABET:]
    if not left:
        return None
    share = sum(counts[c] for c in left) / sum(counts.values())
    return (f"{len(left):,} of the corpus's {len(ranked):,} characters left out (only the {LIMIT_ALPHABET:,} most "
            f"frequent are kept, as HF's BertWordPieceTokenizer keeps them): {share:.2%} of its characters, and a "
            f"word holding one tokenizes to [UNK] (the most frequent left out: {' '.join(left[:5])})")


def train(tokenizer, lines, specials, alphabet, vocab_size):
    """The trained vocab's tokens in id order. The alphabet and its "##" forms come as special tokens, so
    their ids are fixed before training; `initial_alphabet` with a limit of its own size keeps the trainer
    from adding any other character."""
    from tokenizers import trainers

    chars = [t for t in alphabet if not t.startswith(PREFIX)]
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=MIN_FREQUENCY, show_progress=False,
                                        special_tokens=[*specials, *alphabet], limit_alphabet=len(chars),
                                        initial_alphabet=chars, continuing_subword_prefix=PREFIX)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    ids = tokenizer.get_vocab(with_added_tokens=False)
    return sorted(ids, key=ids.get)


# -- the command ------------------------------------------------------------------


def vocab(options: VocabOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Train a WordPiece vocab.txt (`VocabOptions`, or its fields as keywords) and write it atomically; the
    summary `--json` prints (the inputs' sha256s and the settings with the vocab's own sha256).
    `quiet=False` shows progress on stderr."""
    import tokenizers  # noqa: F401  (first, as ever: a missing package is said before any check)

    options = build_options(VocabOptions, options, fields)
    storage.refuse_read_only("--out" if options.out else "--workdir", options.out or options.workdir)
    workdir = resolve_workdir(options.workdir)
    inputs = resolve_vocab_inputs(workdir, options.input, options.corpus)
    out = storage.absolute(options.out or stage_dir(workdir, "vocab", "vocab.txt"))
    refuse_overlap(out, [*(options.input or ()), *inputs])
    if storage.isdir(out):
        raise UsageError(f"--out {storage.display(out)}: is a directory; give the vocab.txt file to write, such as "
                         f"{storage.display(storage.join(out, 'vocab.txt'))}")
    refuse_file_above(out)
    if os.path.basename(storage.normpath(out)) == MANIFEST:  # it replaced a stage's: "damaged" to every stage then
        raise UsageError(f"--out {storage.display(out)}: the name of a stage's manifest, which every stage reads as "
                         "one; name the vocab file otherwise, such as vocab.txt")
    for path in inputs:
        refuse_manifest_as_input(path)  # `--input OUT/*` of a stage's output: its manifest was read as corpus text
        refuse_binary(path)
        refuse_json_object_lines(path)
        refuse_vocab_file(path)
    with hold_file(out, "bertprep vocab"):  # before the corpus is read twice: a second run into it is refused now
        return _vocab(options, inputs, out, quiet)


def _vocab(options, inputs, out, quiet):
    """vocab() once its inputs and output are checked and the output held: train, write, summarize."""
    import tokenizers

    start = time.monotonic()
    progress = Progress("vocab", total=len(inputs), unit="input files", quiet=quiet)
    stats = {"invalid_utf8_lines": 0, "empty_documents": 0}
    tokenizer = bert_tokenizer(options.cased)
    alphabet, inner, left_out = initial_alphabet(tokenizer, iter_lines(inputs, stats, progress))
    progress.close()
    warnings = []  # in the summary, which --json prints under --quiet too (a progress note showed neither)
    if stats["invalid_utf8_lines"]:  # as shard does: decoded, counted and said, never skipped unsaid
        warnings.append(f"{stats['invalid_utf8_lines']:,} line(s) with invalid UTF-8 decoded with U+FFFD (first: "
                        f"{stats['first_invalid_utf8']})")
    warnings += [left_out] if left_out else []
    if not alphabet:
        raise DataError(f"{_named(inputs)}: no text to train a vocab on")
    specials = special_layout(options.unused)
    needed = len(specials) + len(alphabet) + len(inner)
    if needed > options.vocab_size:
        raise UsageError(f"--vocab-size {options.vocab_size}: the corpus needs {needed} entries before any merge "
                         f"({len(specials)} special tokens and unused slots, {len(alphabet)} characters, "
                         f"{len(inner)} {PREFIX} characters)")
    second_pass = dict.fromkeys(stats, 0)  # counted once, in the first pass (an empty dict failed on its key)
    tokens = train(tokenizer, iter_lines(inputs, second_pass), specials, alphabet + inner, options.vocab_size)
    data = "".join(token + "\n" for token in tokens).encode("utf-8")
    with atomic_open(out, "wb") as f:
        f.write(data)
    summary = {
        "out": storage.display(out), "tokens": len(tokens), "sha256": hashlib.sha256(data).hexdigest(),
        "vocab_size": options.vocab_size,
        "unused": options.unused, "cased": options.cased, "characters": len(alphabet),
        "limit_alphabet": LIMIT_ALPHABET, "min_frequency": MIN_FREQUENCY, "tokenizers": tokenizers.__version__,
        "invalid_utf8_lines": stats["invalid_utf8_lines"],
        "inputs": [{"path": storage.display(p), "bytes": storage.getsize(p), "sha256": sha256_file(p)}
                   for p in inputs],
        "seconds": round(time.monotonic() - start, 3),
    }
    if warnings:  # absent otherwise, as shard's
        summary["warnings"] = warnings
    return Summary("bertprep vocab: done", summary, rows=_rows(summary))


def _named(inputs):
    return f"{', '.join(map(storage.display, inputs[:3]))}{' ...' if len(inputs) > 3 else ''}"


def _rows(fields):
    short = "" if fields["tokens"] == fields["vocab_size"] else " (the corpus has no more pairs to merge)"
    return [("input", f"{len(fields['inputs'])} file(s), {human_bytes(sum(i['bytes'] for i in fields['inputs']))}"),
            ("tokens", f"{fields['tokens']:,} of --vocab-size {fields['vocab_size']:,}{short}"),
            ("layout", f"[PAD], {fields['unused']} [unused] slots, [UNK] [CLS] [SEP] [MASK] as Google's; "
                       f"{fields['characters']} characters; {'cased' if fields['cased'] else 'uncased'}"),
            *(("warning", warning) for warning in fields.get("warnings", ())),
            ("time", f"{fields['seconds']:.1f}s"), ("sha256", fields["sha256"]), ("output", fields["out"])]
