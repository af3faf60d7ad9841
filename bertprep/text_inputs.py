"""Text shards as a stage's input: finding them (files, patterns, directories of training/ and test/
shards, in natural order), checking each, naming their corpus, and the tokenizer that reads them, built once
per process. `bertprep create` and `bertprep tokenize` read their inputs the same way through this module."""

import glob
import hashlib
import os
import re
from dataclasses import replace

from bertprep import storage
from bertprep.corpus import compressed_kind, is_wordpiece_vocab, json_object_line, jsonl_name, read_text, refuse_cr_only
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder, natural_key
from bertprep.formats import megatron
from bertprep.instances import MaskingVocab
from bertprep.tokenization import REQUIRED_TOKENS, LineTokenizer, load_vocab
from bertprep.workdir import MANIFEST, SPLITS, load_manifest, refuse_repeated_inputs, refuse_unlisted


def discover_inputs(values):
    """[(path, split)] for files, globs and directories; a directory's training/ and test/ are the splits. A file
    that two values name (a directory and one of its shards) is a usage error, not read once or twice."""
    found = []
    for value in values:
        place = Folder(value)  # a directory of shards, one shard, or a pattern
        if place.isdir():
            split_dirs = [s for s in SPLITS if place.isdir(s)]
            if split_dirs:
                globbed = set()
                for split in split_dirs:
                    files = sorted(place.glob(f"{split}/*.txt"), key=natural_key)
                    names = [f"{split}/{os.path.basename(f)}" for f in files]
                    globbed.update(names)
                    refuse_unlisted(place, names, "this stage")
                    found.extend((f, split, value) for f in files)
                refuse_missing_listed(place, globbed)
            else:
                files = sorted(place.glob("*.txt"), key=natural_key)
                found.extend((f, split_of(f), value) for f in files)
                if not files:
                    raise DataError(f"{place}: directory holds no *.txt shards (nor training/ or test/ "
                                    "subdirectories)")
        elif place.exists():
            found.append((value, split_of(value), value))
        elif glob.has_magic(value):  # a pattern is no folder: storage matches it whole, directories too
            files = sorted(storage.glob(value), key=natural_key)
            if not files:
                raise DataError(f"{place}: the pattern matches no file")
            found.extend((f, split_of(f), value) for f in files if storage.isfile(f))
        else:
            raise DataError(f"{place}: input not found")
    for path, _split, _value in found:
        refuse_manifest_as_shard(path)
        refuse_json_lines(path)
    refuse_repeated_inputs([(path, value) for path, _split, value in found])
    return [(storage.absolute(path), split) for path, split, _value in found]


def refuse_missing_listed(place, globbed):
    """A DataError naming the first file the manifest of the shard tree `place` (a Folder) lists that is not there
    (`globbed`: the names found, relative to it): a shard deleted, or not copied with the rest, was left out
    without a word, exit 0, where `bertprep shard` names it and an unlisted file is refused."""
    listed = (load_manifest(place) or {}).get("files") or {}
    missing = [name for name in sorted(listed, key=natural_key) if name not in globbed and not place.isfile(name)]
    if missing:
        raise DataError(f"{place.display(missing[0])}: listed in {place.display(MANIFEST)} but missing: this stage "
                        "would go on without it; rerun the stage that wrote it, or give the files you mean")


SHARDS_RULE = "an input directory's shards are the *.txt files of its training/ and test/, else its own *.txt"


# A hidden file named so (`.draft.txt`) is never read from a directory, as shard and dedup leave out an editor's
# or a copy's dot-file (macOS's `._wiki_training_0.txt`); it is named where a stage's inputs are, not skipped mute.
INPUT_SUFFIXES = (".txt", ".jsonl")
HIDDEN_RULE = "a hidden file (.name) never"


def is_hidden_input(name):
    """Whether `name` is a dot-file named as a text shard or a JSON-lines part: never read from a directory."""
    return name.startswith(".") and name.endswith(INPUT_SUFFIXES)


def unread_files_warning(values, inputs, shown=3, rule=SHARDS_RULE, read_otherwise=None, roots=(), files=()):
    """A warning naming the files under the input directories among `values` that no input of `inputs` (what
    discover_inputs found: [(path, split)]) is: a .md beside the shards, a subdirectory's files, a .txt beside
    training/ were left out without a word (convert names what it leaves); None where there are none. Manifests
    are no input, nor other dot-files (`.DS_Store`); a hidden .txt or .jsonl is named. `rule` says which files a
    directory's inputs are; `read_otherwise(name)`, where given, tells a file name another reader takes (validate's
    record files beside its shards). `roots`: directories whose own files are named too, not their
    subdirectories' (validate's shard tree root, beside its training/ and test/ among `values`); `files`: more
    files named where unread (validate's files named as shards in folders that create and tokenize do not read)."""
    read = {storage.absolute_normpath(path) for path, _split in inputs}
    listings = [next(storage.walk(root), (root, [], [])) for root in roots if Folder(root).isdir()]
    listings += [listing for value in values if Folder(value).isdir() for listing in storage.walk(value)]
    unread = [storage.join(directory, name) for directory, _dirs, names in listings for name in names
              if name != MANIFEST and (not name.startswith(".") or is_hidden_input(name))
              and not (read_otherwise and read_otherwise(name))
              and storage.absolute_normpath(storage.join(directory, name)) not in read]
    unread += [path for path in files if path not in unread and storage.absolute_normpath(path) not in read]
    if not unread:
        return None
    more = f" and {len(unread) - shown} more" if len(unread) > shown else ""
    if any(is_hidden_input(os.path.basename(path)) for path in unread):
        rule = f"{rule}; {HIDDEN_RULE}"
    return f"not read: {', '.join(storage.display(path) for path in unread[:shown])}{more} ({rule})"


# A pattern reads the files it matches (discover_inputs): a directory it matches is named, not read.
PATTERN_RULE = "a pattern's directories never: give such a directory to --input on its own"


def unread_inputs_warning(values, inputs):
    """unread_files_warning of create's and tokenize's --input `values`, naming too the files under the directories
    a pattern among them matches: `--input 'data/*'` left data/wiki/'s shards out without a word, exit 0, where the
    shell's own expansion of data/* gives data/wiki as a directory, which is read."""
    matched = [match for value in values if not Folder(value).exists() and glob.has_magic(value)
               for match in storage.glob(value) if Folder(match).isdir()]
    return unread_files_warning([*values, *matched], inputs, rule=f"{SHARDS_RULE}; {PATTERN_RULE}" if matched
                                else SHARDS_RULE)


def refuse_manifest_as_shard(path):
    """A UsageError for a stage's manifest.json given as a text shard: `create --input SHARDED/*` (or the file
    named) read the shard manifest's JSON as sentences and wrote records of it, exit 0 (shard and vocab refuse it
    as corpus text alike)."""
    if os.path.basename(storage.normpath(path)) == MANIFEST:
        raise UsageError(f"--input {storage.display(path)}: a stage's manifest, not a text shard: give the shard "
                         "directory or its .txt files")


def refuse_json_lines(path):
    """A UsageError for a JSON-lines corpus given where text shards are read: each line's JSON was tokenized as
    one sentence, braces, quotes and escaped newlines included, and written as training data without a word. The
    remedy is a command in backticks, which a Python caller's message keeps as written (python_field_names): bare,
    it read "bertprep shard TokenizeOptions.input X"."""
    if os.path.basename(storage.normpath(path)).endswith(".jsonl"):
        raise UsageError(f"{storage.display(path)}: a JSON-lines corpus (one document a line, as download and dedup "
                         "write): this stage reads text shards (a sentence a line, documents apart by a blank line); "
                         f"shard it first: `bertprep shard --input {storage.display(path)}`")


def refuse_json_object_lines(text, path):
    """refuse_json_lines of a JSON-lines corpus not named .jsonl (found by its first non-blank line, a JSON
    object): `tokenize --input corpus.json`, Megatron-LM's naming of such a corpus, tokenized each object's
    braces, keys and escapes as a sentence, its documents as one, exit 0."""
    if (number := json_object_line(text)) is not None:
        raise UsageError(f"{storage.display(path)}:{number}: a JSON object, as a JSON-lines corpus holds (one document "
                         "a line): this stage reads text shards (a sentence a line, documents apart by a blank "
                         f"line); rename it {jsonl_name(path)} and shard it first: `bertprep shard --input "
                         f"{jsonl_name(path)}`")


def split_of(path):
    """The split a stage reads the text shard `path` in: its folder's (training/ or test/), else training; its name
    says none (a `c_test_0.txt` elsewhere is a training shard; validate counts it so too)."""
    parent = os.path.basename(os.path.dirname(storage.absolute(path)))
    return parent if parent in SPLITS else "training"


def input_roots(inputs):
    """The directories the inputs come from, a split directory's parent in its place."""
    directories = {os.path.dirname(p) for p, _ in inputs}
    return {os.path.dirname(d) if os.path.basename(d) in SPLITS else d for d in directories}


def corpus_name(inputs):
    """The name of the one directory the inputs come from (a split directory's parent), else "corpus"."""
    directories = input_roots(inputs)
    if len(directories) == 1:
        name = os.path.basename(directories.pop())
        if name:
            return name
    return "corpus"


def refuse_stream(path, what="input", flag=None):
    """A UsageError for a local input that is no regular file: a shard is read here, then again to tokenize it, and
    `--input <(zcat wiki.txt.gz)` (a pipe, /dev/fd/63) held nothing the second time: `no documents (every line is
    blank or tokenizes to nothing)`, exit 1, of a pipe full of text. Asked of the path, never opened: a FIFO that
    no one writes would wait for ever. shard, vocab and dedup (its inputs and --decontaminate files) ask it too, of
    a file given and of each one found in a directory given. `what` names the input as the stage reads it (create
    and tokenize: "shard"): "reads each shard" was said of vocab's corpus and dedup's evaluation file too. `flag`,
    where given, leads the line as it leads the stage's other refusals of that value (dedup's `--input X: …`)."""
    local = storage.local_path(path) if storage.reads_in_place(path) else None
    if local is not None and os.path.exists(local) and not os.path.isfile(local):
        named = f"{flag} {storage.display(path)}" if flag else storage.display(path)
        if os.path.isdir(local):  # a folder named as a shard (training/x.txt/): it was called a pipe or a device
            raise UsageError(f"{named}: a directory, not a regular file: give the files in it, or rename it")
        raise UsageError(f"{named}: not a regular file (a pipe, as <(zcat …) gives, or a device): "
                         f"this stage reads each {what} more than once; write it to a file first")


def check_input(path):
    """sha256 of a shard, after checking it is UTF-8 text, no Megatron index, has lines ending in LF, and holds a
    non-blank line (errors name file and line)."""
    # A Megatron index is its magic and then small integers, which decode as UTF-8: `tokenize --input X.idx` (its
    # own output) tokenized "MMIDIDX" as a sentence, exit 0. Read before decoding: a longer index failed as "not
    # valid UTF-8 … column 279". The record formats' first bytes are no UTF-8.
    refuse_stream(path, "shard")
    try:
        with storage.open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        head = b""  # read_text says why it cannot be read
    if (kind := compressed_kind(head)) is not None:  # was "not valid UTF-8 (byte 0x8b at column 2)" of a .txt.gz
        raise DataError(f"{storage.display(path)}: binary data ({kind}?), expected UTF-8 text: decompress it first")
    if head[:len(megatron.MAGIC)] == megatron.MAGIC:
        raise DataError(f"{storage.display(path)}: a Megatron index (.idx, as tokenize writes), not text: this stage "
                        "reads text shards (a sentence a line, documents apart by a blank line)")
    if (index := megatron_index_beside(path)) is not None:
        raise DataError(f"{storage.display(path)}: the token ids of a Megatron indexed dataset (.bin, as tokenize "
                        f"writes; its index {storage.display(index)} beside it), not text: this stage reads text "
                        "shards (a sentence a line, documents apart by a blank line)")
    text = read_text(path)
    refuse_nul(text, path)
    refuse_json_object_lines(text, path)
    refuse_data_path_list(text, path)
    refuse_vocab_file(text, path)
    refuse_cr_only(text, path, "input must be UTF-8 text, one sentence per line")  # the shard was one sentence
    if not text.strip():
        raise DataError(f"{storage.display(path)}: no documents (the file is empty or blank)")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def refuse_nul(text, path):
    """A DataError naming the file, line and column of `text`'s first NUL: a NUL is valid UTF-8 but no text, and
    the tokenizer drops it, so a UTF-16 shard (ASCII letters each followed by a NUL) was tokenized into its words
    while its blank lines, "\\0" alone, ended no document: two documents became one, exit 0. shard and vocab
    refuse a NUL as binary data already."""
    if (nul := text.find("\0")) >= 0:
        line = text.count("\n", 0, nul) + 1
        column = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise DataError(f"{storage.display(path)}:{line}: binary data (a NUL byte at column {column}: UTF-16 text?), "
                        "expected UTF-8 text, one sentence per line")


DATA_PATH_LIST = re.compile(rf"\s*(?:\d+\s+\S+{megatron.SENTENCE_LEVEL}(?:\s+|\Z))+")


def refuse_data_path_list(text, path):
    """A DataError for a --data-path list of a tokenize output (data-path.txt, test-data-path.txt, or a copy):
    its words are "<tokens> <prefix>" pairs, each prefix a Megatron one (`<stem>_text_sentence`). Such a list
    is text, so `tokenize --input OUT/wiki/data-path.txt` (or 'OUT/wiki/*.txt') tokenized its numbers and paths as
    a sentence, exit 0, as `.bin`/`.idx` files are refused above; vocab and inspect refuse it already."""
    if not DATA_PATH_LIST.fullmatch(text):  # fails at a shard's first words: no copy of its text
        return
    raise DataError(f"{storage.display(path)}: the --data-path list of a `bertprep tokenize` output (\"<tokens> "
                    "<prefix>\" pairs), not text: this stage reads text shards (a sentence a line, documents apart by "
                    "a blank line); give the shards the prefixes were tokenized from")


def refuse_vocab_file(text, path):
    """A UsageError for a WordPiece vocab given as a text shard (corpus.is_wordpiece_vocab): `tokenize --input
    'data/*.txt' --vocab data/vocab.txt`, a vocab kept beside the shards, tokenized its 30,522 tokens as sentences
    of one document into the training data, exit 0."""
    # Lazily: a shard's first sentence ends the test, and no list of its lines is made.
    lines = (match.group() for match in re.finditer(r"^.*$", text, re.MULTILINE))
    if is_wordpiece_vocab(lines, REQUIRED_TOKENS):
        raise UsageError(f"{storage.display(path)}: a WordPiece vocab (a token a line, {' '.join(REQUIRED_TOKENS)} "
                         "among them), not a text shard: keep it out of the inputs (a pattern or a directory of shards "
                         "matched it?)")


def megatron_index_beside(path):
    """The .idx beside `path` where `path` is the .bin of a Megatron indexed dataset (the index opens with its
    magic), else None. Its ids are no text, yet ids below 128 (uint16 or int32, the high bytes zero) decode as
    UTF-8: `tokenize --input 'OUT/corpus/training/*'` tokenized such a .bin as a sentence, exit 0; other ids were
    "not valid UTF-8 (byte 0x86 at column 9)", which said nothing of what the file is."""
    if not path.endswith(megatron.BIN):
        return None
    index = path[:-len(megatron.BIN)] + megatron.IDX
    if not storage.isfile(index):  # a shard that happens to end in .bin
        return None
    with storage.open(index, "rb") as f:
        return index if f.read(len(megatron.MAGIC)) == megatron.MAGIC else None


_TOKENIZERS: dict = {}  # (vocab path, its sha256, lower_case) -> (LineTokenizer, MaskingVocab), per process


def tokenizer_and_vocab(vocab_path, sha256, lower_case, vocab=None):
    """The tokenizer and masking vocab of the vocab file `vocab_path` whose bytes are `sha256` (the run's plan read
    it: `vocab`, else read here, in a worker), built once per process. Keyed by the bytes too: by path alone, a
    notebook's second tokenize or create after the vocab file was rewritten in place took the first call's
    tokenizer, writing the old vocab's ids under a manifest that named the new file's sha256. A file that changed
    since the plan read it is one line; the entries of a path's earlier bytes are dropped."""
    key = (vocab_path, sha256, lower_case)
    if key not in _TOKENIZERS:
        vocab = vocab or read_vocab(vocab_path)
        if vocab.sha256 != sha256:
            raise DataError(f"{storage.display(vocab_path)}: the vocab changed while the run read it (sha256 "
                            f"{vocab.sha256[:12]}…, not {sha256[:12]}…): rerun")
        for stale in [other for other in _TOKENIZERS if other[0] == vocab_path]:
            del _TOKENIZERS[stale]
        _TOKENIZERS[key] = (LineTokenizer(vocab, lower_case).warmed(), MaskingVocab.from_vocab(vocab))
    return _TOKENIZERS[key]


def read_vocab(path):
    """load_vocab of a vocab.txt path or URL (a Dask worker that sees no shared disk reads the bucket's), its
    path kept as given: a URL in display form."""
    vocab = load_vocab(path)
    return vocab if storage.reads_in_place(path) else replace(vocab, path=storage.display(path))


def casing_warning(vocab, lower_case):
    """The warning, naming both, when the case flag contradicts the vocab: `--no-lower-case` with an uncased
    vocab (no token holds a capital letter) makes every capitalised word [UNK] (issue 57: 17.5% [UNK], and
    validate said SOUND); lower-casing for a cased vocab never uses its capitalised tokens. None when they
    agree. Special tokens ([CLS], [unused0]) are not words and are left out."""
    cased = sum(1 for token in vocab.tokens if not token.startswith("[") and token != token.lower())
    if not lower_case and not cased:
        return (f"--no-lower-case with the uncased vocab {storage.display(vocab.path)} (no token holds a capital "
                "letter): every capitalised word becomes [UNK]; leave out --no-lower-case")
    if lower_case and cased > len(vocab.tokens) // 20:  # a few capitals (a symbol's) make no cased vocab
        return (f"lower-casing for the cased vocab {storage.display(vocab.path)} ({cased:,} tokens with capitals): "
                "they are never used; give --no-lower-case")
    return None
