"""`bertprep shard`: documents -> sentences -> balanced training/test text shards.

    WORKDIR/sharded/<corpus>/training/<corpus>_training_<i>.txt
    WORKDIR/sharded/<corpus>/test/<corpus>_test_<i>.txt
    WORKDIR/sharded/<corpus>/manifest.json

Shards are in the reference input format: UTF-8, one sentence per line, a
blank line after each document. Two streaming passes, so memory holds one
document per worker plus a few integers per document, never the corpus:

1. Split (parallel over input files): each document's sentences go to a
   scratch file; per document we keep its size, sentence count and a
   64-bit BLAKE2b hash of its sentences.
2. Assign and write (parallel over shards): the test split is the
   round(fraction * documents) documents with the smallest hashes; each
   split is balanced by "largest document first into the lightest shard"
   (`--balance count`: the same, each shard taking only its equal share of
   documents, ±1, as LDDL balances its shards);
   every shard then copies its documents from the scratch files in input
   order.

With `--eval-documents N` the test split is instead N documents drawn by `--eval-seed` over the documents
in input order, and pass 1 also keeps each document's `bertprep dedup` fingerprint (its exact hash and a
128-value MinHash, about 0.5 KiB per document), so that training documents that duplicate an evaluation
document are dropped before pass 2.

Documents are never split across shards. The assignment depends only on
the documents (their hashes, sizes and input order), not on the number of
workers, so the same input gives the same bytes.

A rerun replaces the shards its `--out` holds only where shard wrote them:
its manifest lists them, or a killed run's claim does (saved in `.partial/`
before that run changed anything). Any other file named as this corpus's
shards, or another stage's manifest there, is refused before any work: with
no manifest, a user's file and a killed run's shard look alike.

Inputs: formatted parts (`.jsonl`, one {"title", "text"} per line, as
`bertprep download` writes them) or text files (`.txt`, blank-line separated
documents, one paragraph or sentence per line). Text input that is not
valid UTF-8 is decoded with U+FFFD replacement and counted; documents left
with no sentence (markup-only pages, blank texts) are dropped and counted.
"""

import contextlib
import dataclasses
import functools
import hashlib
import heapq
import os
import tempfile
import time
from typing import Any, ClassVar

import numpy as np

from bertprep import __version__, storage
from bertprep.atomic import STEPS, atomic_open, hold, refuse_if_held, sha256_file
from bertprep.corpus import is_wordpiece_vocab, refuse_binary, refuse_cr_only, refuse_json_lines_named_otherwise
from bertprep.engines import EngineOptions, open_engine
from bertprep.errors import DataError, UsageError
from bertprep.folder import Folder
from bertprep.options import (
    build_options,
    check_types,
    errors_name_fields,
    normalise_paths,
    refuse_empty,
    refuse_overlap,
    written_in,
)
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.records_manifest import file_digests
from bertprep.text_inputs import INPUT_SUFFIXES, refuse_stream, unread_files_warning
from bertprep.workdir import (
    MANIFEST,
    SPLITS,
    check_corpus_name,
    file_matches,
    load_manifest,
    other_inputs_warning,
    other_settings_warning,
    read_claim,
    refuse_names_outside,
    refuse_repeated_inputs,
    refuse_unlisted,
    removed_warning,
    resolve_workdir,
    save_manifest,
    setting_changes,
    stage_dir,
    write_claim,
)

# Corpora made of several formatted sources, as NVIDIA names them.
COMBINED = {"books_wiki_en_corpus": ("bookcorpus", "wikicorpus_en")}
SCRATCH = "split"  # in the staging directory: pass 1's per-input sentence files
# Scratch objects in a bucket (Dask, output URL) are read by ranged requests: documents of one shard closer than
# SCRATCH_GAP bytes share a request of at most SCRATCH_BLOCK bytes, SCRATCH_BATCH requests at a time.
SCRATCH_GAP = 1 << 20
SCRATCH_BLOCK = 64 << 20
SCRATCH_BATCH = 8
# In the staging directory's STEPS, which a killed run leaves: the names under --out a run may write or remove,
# saved before it changes any, so that its rerun can tell that run's shards, which no manifest lists, from a
# user's files of the same names.
CLAIM = "shard-names.json"


DEFAULT_TEST_FRACTION = 0.1
DEFAULT_EVAL_SEED = 12345


def chosen_test_fraction(options):
    """The share of documents chosen for the test split: --test-fraction, else 0.1. A run with --eval-documents
    (which takes none) records 0.1 in its manifest's params, as it always did: create names its records after it."""
    return DEFAULT_TEST_FRACTION if options.test_fraction is None else options.test_fraction


def chosen_eval_seed(options):
    """The seed of the --eval-documents draw: --eval-seed, else 12345."""
    return DEFAULT_EVAL_SEED if options.eval_seed is None else options.eval_seed


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """`bertprep shard`'s flags: `input` (corpus directories or .jsonl/.txt files; None: WORKDIR/formatted/<corpus>),
    `out` (None: WORKDIR/sharded/<corpus>), `corpus` (None: the only formatted corpus, or the --input directory's
    name), the shard counts, `balance` ('size' or 'count'), `test_fraction` (None: 0.1, and none with
    --eval-documents), `eval_documents` (None: the test split is chosen by hash; N: N documents chosen by `eval_seed`
    (None: 12345; only with `eval_documents`) instead, their duplicates dropped from training) and where the tasks
    run (`engine`)."""

    input: tuple[str, ...] | None = None
    out: str | None = None
    corpus: str | None = None
    train_shards: int = 256
    test_shards: int = 256
    balance: str = "size"
    test_fraction: float | None = None
    eval_documents: int | None = None
    eval_seed: int | None = None
    engine: EngineOptions = EngineOptions()
    workdir: str | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}  # check_types; set below BALANCES, which is below the class

    def __post_init__(self):
        check_types(self)
        refuse_empty(self, "input")
        normalise_paths(self, "input", "out", "workdir", outputs=(written_in(self),), folders=("out", "workdir"))
        storage.check_schemes(self.out, self.workdir, *(self.input or ()))
        if self.train_shards < 1 or self.test_shards < 1:
            raise UsageError("--train-shards and --test-shards must be at least 1")
        if self.test_fraction is not None and not 0 <= self.test_fraction < 1:
            raise UsageError("--test-fraction must be in [0, 1)")
        if self.balance not in BALANCES:
            raise UsageError(f"--balance must be one of {', '.join(BALANCES)}, not {self.balance!r}")
        if self.eval_documents is not None and self.eval_documents < 1:
            raise UsageError(f"--eval-documents must be at least 1, not {self.eval_documents}")
        # the draw is the test split: a --test-fraction was ignored without a word, exit 0 (the default's value too)
        if self.eval_documents is not None and self.test_fraction is not None:
            raise UsageError(f"--test-fraction {self.test_fraction} is not used with --eval-documents "
                             f"{self.eval_documents} (the evaluation set is the test split): give one of them")
        if self.eval_seed is not None and self.eval_seed < 0:  # numpy's generator takes no negative seed (a
            raise UsageError(f"--eval-seed must be at least 0, not {self.eval_seed}")  # traceback from inside it)
        if self.eval_seed is not None and self.eval_documents is None:  # seeds nothing else: was ignored, exit 0
            raise UsageError(f"--eval-seed {self.eval_seed} is only used with --eval-documents (it draws the "
                             "evaluation set; the test split of --test-fraction is chosen by hash, with no seed): "
                             "give --eval-documents N, or no --eval-seed")


# -- inputs -----------------------------------------------------------------------


def resolve_inputs(workdir, inputs, corpus):
    """(corpus name, sorted input files, the paths they were found in: --input's, else the formatted corpora's)."""
    if inputs:
        for path in inputs:  # a pipe was "no such file or directory" (or asked for --corpus first): create's refusal
            if not Folder(path).isdir():
                refuse_stream(path)
        if corpus is None:
            if len(inputs) == 1 and Folder(inputs[0]).isdir():
                corpus = os.path.basename(storage.normpath(inputs[0]))
            else:
                raise UsageError("--corpus is required with several --input paths or a file input")
        paths = inputs
    else:
        formatted = Folder(stage_dir(workdir, "formatted"))
        available = formatted.subfolders()
        if not available:  # a missing bucket or refused credentials: its line, not "formatted corpora: none"
            formatted.check_reachable()
        if corpus is None:
            if len(available) != 1:
                found = ", ".join(available) or "none"
                raise UsageError(f"{formatted}: choose a corpus with --corpus or give --input (formatted corpora: "
                                 f"{found})")
            corpus = available[0]
        parts = COMBINED.get(corpus, (corpus,)) if corpus not in available else (corpus,)
        missing = [p for p in parts if p not in available]
        if missing:
            raise UsageError(f"{formatted}: no formatted corpus {', '.join(missing)} (run `bertprep download` first "
                             "or give --input)")
        paths = [formatted.path(p) for p in parts]
    named = [(f, path) for path in paths for f in input_files(path)]
    refuse_repeated_inputs(named)
    return check_corpus_name(corpus), [f for f, _path in named], paths


def listed_digests(files):
    """{normalised path: sha256} of the input files whose directory's manifest (a formatted or deduplicated
    corpus's) lists them: split_input checks each as it reads it."""
    digests = {}
    for directory in sorted({os.path.dirname(storage.normpath(f)) for f in files}):
        corpus = Folder(directory)
        digests.update(file_digests(load_manifest(corpus), corpus))
    return digests


def input_files(path):
    """The absolute input files of one --input: a directory's .jsonl/.txt files (sorted), or the file itself.
    A file the directory's manifest lists that is not there is named (a deleted part read as "no input"). A file
    given is asked refuse_stream by the caller, before it asks anything else (shard's --corpus question), and
    not again here; each file found in a directory is asked here."""
    given = Folder(path)  # a directory of inputs, or one input file
    if given.isdir():
        listed = ((load_manifest(given) or {}).get("files") or {})
        missing = sorted(name for name in listed if not given.isfile(name))
        if missing:
            raise DataError(f"{given.display(missing[0])}: listed in {given.display(MANIFEST)} but missing (rerun "
                            "the stage that wrote it)")
        found = [f for f in given.files() if _is_input_name(os.path.basename(f))]
        for directory in sorted({storage.normpath(path), *(os.path.dirname(storage.normpath(f)) for f in found)}):
            refuse_tokenize_output(path, directory)
        if not found:
            raise UsageError(f"{given}: no .jsonl or .txt input files")
        refuse_unlisted(given, [given.relpath(f) for f in found], "shard")  # a shard tree lists test/..., training/...
        for f in found:  # a FIFO named part.txt: its binary check waited for a writer for ever
            refuse_stream(f)
        return [storage.absolute(f) for f in found]
    if given.isfile():
        refuse_tokenize_output(path, os.path.dirname(storage.normpath(path)) or ".")
        return [storage.absolute(path)]
    raise given.not_found(UsageError(f"--input {given}: no such file or directory"))


def refuse_tokenize_output(given, directory):
    """A UsageError where `directory`, under or of the --input `given`, is a `bertprep tokenize` output: its
    data-path.txt lists were read as corpus text (`shard --input WORKDIR/tokenized` sharded the prefixes they
    name, exit 0), or refused as "not listed in its manifest … remove it", which said nothing of what it was."""
    manifest = load_manifest(directory)
    if manifest and manifest.get("stage") == "tokenize":
        raise UsageError(f"--input {storage.display(given)}: {storage.display(directory)} is a `bertprep tokenize` "
                         "output (token ids and the --data-path lists naming them), not corpus text: give the text "
                         "shards it was tokenized from")


def refuse_non_text(path):
    """A UsageError for a stage's manifest.json given as an input file, and vocab's DataError for a compressed
    file or one with a NUL in its first 64 KiB: each was sentence-split into training text (the binary one
    decoded with U+FFFD, a progress note that --quiet hid), exit 0, as `shard --input OUT/*` of a dedup output
    read OUT/manifest.json and OUT/pair_similarity.png with the deduplicated corpora; vocab's UsageError for a
    JSON-lines corpus not named .jsonl and for a WordPiece vocab."""
    refuse_manifest_as_input(path)
    if not path.endswith(".jsonl"):  # JSON lines hold no raw NUL: their reader names a bad line
        refuse_binary(path)
        # `--input corpus.json` (Megatron-LM's naming) was sharded as text: JSON split into sentences, exit 0
        refuse_json_lines_named_otherwise(path, "sentences of the shards")
        refuse_vocab_file(path)


VOCAB_LINE_HEAD = 4096  # bytes of a line read at a time by refuse_vocab_file


def refuse_vocab_file(path):
    """A UsageError for a WordPiece vocab among the inputs (corpus.is_wordpiece_vocab): `--input 'data/*.txt'`
    beside an earlier vocab.txt trained its 30,522 tokens as words ("unused0", "##s" as "#", "#", "s"), exit 0.
    Read only until a line of text: a corpus's first. shard's too: a vocab.txt in an --input directory was
    sharded as a document of 30,522 sentences, exit 0."""
    from bertprep.tokenization import REQUIRED_TOKENS

    if path.endswith(".jsonl"):
        return
    with storage.open(path, "rb") as f:
        # a line's head at a time: no vocab token is that long, and a corpus's one huge line is not read whole
        heads = iter(lambda: f.readline(VOCAB_LINE_HEAD), b"")
        if is_wordpiece_vocab((raw.decode("utf-8", errors="replace") for raw in heads), REQUIRED_TOKENS):
            raise UsageError(f"{storage.display(path)}: a WordPiece vocab (a token a line, "
                             f"{' '.join(REQUIRED_TOKENS)} among them), not corpus text: keep it out of the inputs (a "
                             "pattern or a directory matched it?)")


def refuse_manifest_as_input(path):
    """A UsageError for a stage's manifest.json given as an input file (shard and vocab read it as text)."""
    if os.path.basename(storage.normpath(path)) == MANIFEST:
        raise UsageError(f"--input {storage.display(path)}: a stage's manifest, not corpus text: give the corpus "
                         "directory or its .jsonl/.txt files")


# What input_files reads of a directory, as the warning naming the rest says it.
SHARD_INPUTS_RULE = "an input directory's inputs are the .jsonl and .txt files under it"


def _is_input_name(name):
    return name.endswith(INPUT_SUFFIXES) and not name.startswith(".")  # not a hidden file an editor left


def iter_text_documents(path, stats, sha256=None):
    """Blank-line separated documents of a text file, as strings of paragraph lines."""
    lines = []
    first, non_blank = None, 0
    with storage.open(path, "rb", sha256=sha256) as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                stats["invalid_utf8_lines"] += 1
                stats.setdefault("first_invalid_utf8", f"{storage.display(path)}:{number}")
            if line.strip():
                lines.append(line.strip())
                first, non_blank = first or line.strip(), non_blank + 1
            elif lines:
                yield "\n".join(lines)
                lines = []
    if non_blank == 1:  # every document on one line, as create, tokenize and create-glue refuse it
        refuse_cr_only(first, path, "text input is UTF-8, one sentence or paragraph per line")
    if lines:
        yield "\n".join(lines)


def iter_input_documents(path, stats, sha256=None):
    if path.endswith(".jsonl"):
        from bertprep.stages.download.formatted import iter_documents

        for _number, doc in iter_documents(path, sha256):
            yield doc["text"]
    else:
        yield from iter_text_documents(path, stats, sha256)


# -- pass 1: split -----------------------------------------------------------------


def split_input(task):
    """Sentence-split one input file into a scratch file; returns its per-document arrays."""
    from bertprep.sentences import document_sentences

    index, path, scratch, fingerprinted, sha256 = task
    stats = {"invalid_utf8_lines": 0, "empty_documents": 0, "input_bytes": storage.getsize(path)}
    sizes, sentence_counts, hashes, fingerprints = [], [], [], []
    with open(scratch, "wb") if storage.renames(scratch) else atomic_open(scratch, "wb") as out:
        for text in iter_input_documents(path, stats, sha256):
            if "\0" in text and not path.endswith(".jsonl"):  # past refuse_non_text's head: a binary file
                raise DataError(f"{storage.display(path)}: binary data (a NUL byte), expected UTF-8 text")
            sentences = document_sentences(text)
            if not sentences:
                stats["empty_documents"] += 1
                continue
            text = "\n".join(sentences) + "\n"
            data = text.encode("utf-8")
            out.write(data)
            sizes.append(len(data))
            sentence_counts.append(len(sentences))
            hashes.append(int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little"))
            if fingerprinted:
                fingerprints.append(eval_fingerprint(text))
    return (index, np.array(sizes, np.int64), np.array(sentence_counts, np.int64), np.array(hashes, np.uint64), stats,
            fingerprints)


# -- the fixed evaluation set (--eval-documents) -------------------------------------


@functools.cache
def dedup_defaults():
    """`bertprep dedup`'s default options (shingles, permutations, bands, threshold), built once."""
    from bertprep.stages.dedup import DedupOptions

    return DedupOptions()


def eval_fingerprint(text):
    """`bertprep dedup`'s exact hash and MinHash of a document, with its default shingles."""
    from bertprep.stages.dedup import fingerprint, normalized_words

    defaults = dedup_defaults()
    return fingerprint(text, normalized_words(text), defaults.ngram, defaults.num_perm)


def choose_eval(count, documents, seed):
    """Boolean mask of the `count` evaluation documents: a seeded draw over the documents in input order, so it
    depends on neither the worker count nor the engine."""
    if count >= documents:
        return None
    mask = np.zeros(documents, bool)
    mask[np.random.default_rng(seed).choice(documents, count, replace=False)] = True
    return mask


def eval_duplicates(fingerprints, eval_mask):
    """{training document: (reason, evaluation document, estimated Jaccard)} for every training document that is
    an exact or near duplicate of an evaluation document, by dedup's rules (a shared LSH band AND a verified
    estimate >= its default threshold; never a band collision alone)."""
    from bertprep.stages.dedup import band_groups, band_keys, pair_estimates

    defaults = dedup_defaults()
    exact = np.array([f[0] for f in fingerprints], np.uint64)
    signatures = np.stack([f[1] for f in fingerprints])
    evals = np.flatnonzero(eval_mask)
    exact_twin = {int(h): int(doc) for doc, h in zip(evals[::-1].tolist(), exact[evals[::-1]].tolist())}
    found = {doc: ("exact", exact_twin[h], 1.0) for doc, h in zip(np.flatnonzero(~eval_mask).tolist(),
                                                                   exact[~eval_mask].tolist()) if h in exact_twin}
    # every (training, evaluation) pair sharing a band, the training document not an exact copy
    pairs = [np.stack(np.meshgrid(group[~eval_mask[group]], group[eval_mask[group]], indexing="ij"), -1).reshape(-1, 2)
             for group in band_groups(band_keys(signatures, *defaults.band_rows()), np.arange(len(fingerprints)))]
    pairs = np.unique(np.concatenate(pairs), axis=0) if pairs else np.zeros((0, 2), np.int64)
    pairs = pairs[[doc not in found for doc in pairs[:, 0].tolist()]]
    shares = pair_estimates(signatures, pairs[:, 0], pairs[:, 1])
    # per training document its best evaluation twin (the first of the best), when that reaches the threshold
    order = np.lexsort((pairs[:, 1], -shares, pairs[:, 0]))
    best = order[np.r_[True, pairs[order[1:], 0] != pairs[order[:-1], 0]]] if len(order) else order
    for doc, twin, share in zip(pairs[best, 0].tolist(), pairs[best, 1].tolist(), shares[best].tolist()):
        if share >= defaults.threshold:
            found[doc] = ("near", twin, round(share, 4))
    return dict(sorted(found.items()))


# -- assignment -------------------------------------------------------------------


def choose_test(hashes, fraction):
    """Boolean mask of test documents: the round(fraction * n) smallest hashes (ties by position)."""
    n = len(hashes)
    count = int(round(fraction * n))
    if fraction > 0 and n >= 2:
        count = min(max(count, 1), n - 1)
    order = np.lexsort((np.arange(n), hashes))
    mask = np.zeros(n, bool)
    mask[order[:count]] = True
    return mask


def balance(sizes, shards):
    """Shard of each document: largest first into the lightest shard (ties: lower shard index)."""
    n = len(sizes)
    assignment = np.empty(n, np.int64)
    if n == 0:
        return assignment
    order = np.lexsort((np.arange(n), -sizes))
    heap = [(0, s) for s in range(shards)]
    for doc in order.tolist():
        load, shard = heap[0]
        assignment[doc] = shard
        heapq.heapreplace(heap, (load + int(sizes[doc]), shard))
    return assignment


def balance_count(sizes, shards):
    """Shard of each document: equal document counts (the first n % shards shards one more), and within that
    largest first into the lightest shard that still has room (ties: lower shard index)."""
    n = len(sizes)
    assignment = np.empty(n, np.int64)
    if n == 0:
        return assignment
    room = [n // shards + (1 if s < n % shards else 0) for s in range(shards)]
    order = np.lexsort((np.arange(n), -sizes))
    heap = [(0, s) for s in range(shards) if room[s]]
    for doc in order.tolist():
        load, shard = heap[0]
        assignment[doc] = shard
        room[shard] -= 1
        if room[shard]:
            heapq.heapreplace(heap, (load + int(sizes[doc]), shard))
        else:
            heapq.heappop(heap)
    return assignment


# --balance: how documents are spread over a split's shards, and what the manifest calls it
BALANCES = {"size": (balance, "largest-first into lightest shard"),
            "count": (balance_count, "equal document counts (±1), largest-first into lightest shard with room")}
ShardOptions.choices = {"balance": tuple(BALANCES)}


def shard_name(corpus, split, index):
    return f"{corpus}_{split}_{index}.txt"


# -- pass 2: write -----------------------------------------------------------------


def write_shard(task):
    """Copy the documents of one shard (input order) from the scratch files; returns its manifest entry."""
    path, staging, scratch_paths, files, offsets, sizes, sentences = task
    digest = hashlib.sha256()
    total = 0
    read = _local_documents if storage.reads_in_place(scratch_paths[0]) else _object_documents
    with atomic_open(path, "wb", staging) as out:
        for document in read(scratch_paths, files.tolist(), offsets.tolist(), sizes.tolist()):
            data = document + b"\n"
            out.write(data)
            digest.update(data)
            total += len(data)
    return {"documents": len(sizes), "sentences": int(sentences.sum()), "bytes": total, "sha256": digest.hexdigest()}


def _local_documents(scratch_paths, files, offsets, sizes):
    """The bytes of each document (files[i], offsets[i], sizes[i]) from local scratch files, in order."""
    current, handle = None, None
    try:
        for file_index, offset, size in zip(files, offsets, sizes):
            if file_index != current:
                if handle is not None:
                    handle.close()
                handle, current = open(scratch_paths[file_index], "rb"), file_index
            handle.seek(offset)
            yield handle.read(size)
    finally:
        if handle is not None:
            handle.close()


def _object_documents(scratch_paths, files, offsets, sizes):
    """_local_documents from scratch objects: a shard's documents are in input order, so each scratch object's
    run of them is read in merged ranged requests, front to back."""
    for first, last in _runs(files):
        starts = offsets[first:last]
        ends = [offset + size for offset, size in zip(starts, sizes[first:last])]
        yield from _ranged_reads(scratch_paths[files[first]], starts, ends)


def _runs(values):
    """(first, last + 1) of each run of equal consecutive values."""
    first = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[first]:
            yield first, i
            first = i


def _ranged_reads(url, starts, ends):
    """Bytes [start, end) of the object `url` for each ascending range, fetched as merged ranged requests."""
    from fsspec.utils import merge_offset_ranges

    fs, inner = storage.filesystem(url)
    _paths, block_starts, block_ends = merge_offset_ranges([inner] * len(starts), starts, ends, max_gap=SCRATCH_GAP,
                                                           max_block=SCRATCH_BLOCK, sort=False)
    document = 0
    for first in range(0, len(block_starts), SCRATCH_BATCH):
        batch = range(first, min(first + SCRATCH_BATCH, len(block_starts)))
        with storage.errors_named(url):
            blocks = fs.cat_ranges([inner] * len(batch), [block_starts[i] for i in batch],
                                   [block_ends[i] for i in batch], on_error="raise")
        for i, block in zip(batch, blocks):
            while document < len(starts) and ends[document] <= block_ends[i]:
                yield block[starts[document] - block_starts[i]:ends[document] - block_starts[i]]
                document += 1


def spread(sizes):
    sizes = np.asarray(sizes, np.float64)
    if sizes.size == 0:
        return {"shards": 0}
    mean = float(sizes.mean())
    return {"shards": int(sizes.size), "min_bytes": int(sizes.min()), "max_bytes": int(sizes.max()),
            "mean_bytes": round(mean),
            "spread_pct": round(100 * (sizes.max() - sizes.min()) / mean, 3) if mean else 0.0}


# -- the command ------------------------------------------------------------------


def shard(options: ShardOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Shard a corpus (`ShardOptions`, or its fields as keywords); the summary `--json` prints. `quiet=False`
    shows progress on stderr. A complete output of the same inputs and settings is left as it is
    (`complete_before`)."""
    options = build_options(ShardOptions, options, fields)
    workdir = resolve_workdir(options.workdir)
    corpus, inputs, places = resolve_inputs(workdir, options.input, options.corpus)
    # a notes.md or a .draft.txt beside the parts was left out without a word, as create and tokenize name theirs
    unread = unread_files_warning(places, [(path, None) for path in inputs], rule=SHARD_INPUTS_RULE)
    for path in inputs:
        refuse_non_text(path)
    out = Folder(storage.absolute(options.out or stage_dir(workdir, "sharded", corpus)))
    refuse_overlap(out.root, [*(options.input or ()), *inputs])
    refuse_if_held(out.root)  # before every input is hashed (minutes for a large corpus)
    from bertprep.sentences import splitter_version

    params = {"train_shards": options.train_shards, "test_shards": options.test_shards,
              "test_fraction": chosen_test_fraction(options), "splitter": splitter_version(),
              "balance": BALANCES[options.balance][1], "test_choice": "smallest blake2b-64 hashes"}
    if options.eval_documents is not None:  # absent otherwise: today's manifests stay complete

        params.update(test_choice="seeded draw (numpy default_rng) of --eval-documents in input order",
                      eval_documents=options.eval_documents, eval_seed=chosen_eval_seed(options),
                      eval_duplicates="dedup's exact hash and verified MinHash, threshold "
                                      f"{dedup_defaults().threshold}")
    # The content, not path and size: an input edited in place to the same size must be sharded again.
    input_list = [{"path": storage.display(p), "bytes": storage.getsize(p), "sha256": sha256_file(p)} for p in inputs]
    with hold(out.root, "bertprep shard") as staging:
        previous = load_manifest(out)
        if _is_complete(previous, out, params, input_list, corpus):
            summary, rows = _with_warnings(_summary(previous, out, 0.0), _rows(previous, out, 0.0),
                                           [unread] if unread else [])
            return Summary(f"bertprep shard: {out} is already complete", summary, rows=rows, complete_before=True)
        ours = _ours(out, staging, previous, corpus)  # before pass 1: a refusal costs no work
        progress = Progress("shard", total=len(inputs), unit="input files", quiet=quiet)
        start = time.monotonic()
        with scratch_directory(staging, options.engine) as scratch, open_engine(options.engine) as engine:
            manifest, removed, warnings = _shard(options, engine, corpus, inputs, input_list, out, staging, scratch,
                                                 params, progress, previous, ours)
        progress.close()
        seconds = time.monotonic() - start
        save_manifest(out, manifest)
        Folder(staging).remove_tree(STEPS)  # the claim: the manifest lists what is ours now
    warnings += [removed_warning(removed)] if removed else []
    summary, rows = _with_warnings(_summary(manifest, out, seconds), _rows(manifest, out, seconds),
                                   [unread, *warnings] if unread else warnings)
    return Summary(f"bertprep shard: {corpus} done", summary, rows=rows)


def _with_warnings(summary, rows, warnings):
    """The summary and its rows with `warnings` listed; neither changed where there are none (today's --json)."""
    if warnings:
        summary["warnings"] = warnings
        rows += [("warning", warning) for warning in warnings]
    return summary, rows


# Recorded in params only with --eval-documents: a run without it reads "none" in a replacing warning.
EVAL_PARAMS = ("eval_documents", "eval_seed", "eval_duplicates")
EVAL_FOLLOWS = {"test_fraction", "test_choice", "eval_duplicates"}  # what --eval-documents on or off changes
INPUTS_NAMED = 3  # a replacing warning names up to this many inputs, more as their folders and count


def _replacing_warnings(previous, params, input_list, corpus):
    """The warnings of a rerun that replaces the shards an earlier run wrote into `out` with other settings or
    from other inputs (in create's words): it resharded without a word, exit 0, and the earlier shards were gone.
    None where the earlier run wrote none or under another --corpus (the removal warning names those)."""
    if not previous or previous.get("corpus") != corpus or not previous.get("files"):
        return []
    warnings = []
    changes = _setting_changes(previous.get("params"), params)
    if changes:
        warnings.append(other_settings_warning("shards", "shard tree", changes))
    if _other_inputs(previous.get("inputs"), input_list):
        warnings.append(other_inputs_warning("shards", "shard tree", _described(previous["inputs"]),
                                             _described(input_list)))
    return warnings


def _setting_changes(before, now):
    """`name was A, now B` for each setting of the earlier run's params `before` that this run's `now` changes; a
    field an older version did not record is no change (as in create's). Where one run had --eval-documents and
    the other not, that is the change: the test choice and duplicate rule described follow from it, and the
    --test-fraction a run with it records is the default, which it does not use."""
    if not isinstance(before, dict):
        return []
    absent = dict.fromkeys(EVAL_PARAMS, "none")
    before, now = {**absent, **before}, {**absent, **now}
    eval_documents = (before["eval_documents"], now["eval_documents"])
    toggled = "none" in eval_documents and eval_documents[0] != eval_documents[1]
    return setting_changes(before, now, set(before) - (EVAL_FOLLOWS if toggled else set()))


def _other_inputs(before, now):
    """Whether the earlier run's inputs `before` (its manifest's list) were files at other paths with other
    content than this run's `now`. An input edited in place is resharded without a warning, as a rerun is for;
    the same content at other paths (a copied or moved corpus) gives the same shards."""
    if not isinstance(before, list) or not all(isinstance(entry, dict) for entry in before):
        return False  # a damaged or foreign manifest: nothing to compare

    def column(inputs, key):
        return [entry.get(key) for entry in inputs]

    return set(column(before, "path")) != set(column(now, "path")) and column(before, "sha256") != column(now, "sha256")


def _described(inputs):
    """A manifest's inputs for a warning: their paths, or past INPUTS_NAMED their folders and count."""
    paths = [str(entry.get("path")) for entry in inputs]
    if len(paths) <= INPUTS_NAMED:
        return ", ".join(paths)
    return f"{', '.join(sorted({os.path.dirname(path) for path in paths}))} ({len(paths)} files)"


def _is_shard_name(name, corpus, split):
    """Whether a file name in `split`/ is named as one of `corpus`'s shards, of this run or an earlier one."""
    return name.startswith(f"{corpus}_{split}_") and name.endswith(".txt")


def _shard_files(out, corpus):
    """The files under `out` named as `corpus`'s shards (split/name), whoever wrote them."""
    return [f"{split}/{name}" for split in SPLITS if out.isdir(split) for name in sorted(out.names_in(split))
            if _is_shard_name(name, corpus, split)]


def _ours(out, staging, previous, corpus):
    """The names under `out` that runs of shard wrote (its manifest's files, a killed run's claim), after refusing
    what this run would otherwise overwrite or delete unasked: another stage's manifest (shard removes the files it
    lists) and a file named as this corpus's shards that neither lists. Without a manifest a killed run's shards
    and a user's own files look alike, and deleting them as "an earlier run's" lost the user's."""
    if previous is not None and previous.get("stage") != "shard":
        raise DataError(f"{out.display(MANIFEST)}: a manifest of bertprep {previous.get('stage') or 'another tool'}, "
                        "not of shard: shard would remove the files it lists; choose another --out")
    refuse_names_outside(out, (previous or {}).get("files") or ())  # an earlier corpus's are removed by name
    ours = set((previous or {}).get("files") or ()) | read_claim(staging, CLAIM)
    refuse_unlisted(out, _shard_files(out, corpus), "shard would overwrite or remove it", ours=ours)
    return ours


def _take_over(out, staging, previous, ours, corpus, counts):
    """Claim the names this run may write (CLAIM, beside `ours`): `counts` {split: shards}, never more than the
    split's documents (each of --train-shards 10**9 was named: minutes and gigabytes, on a corpus of two
    documents); then remove the earlier manifest (nothing may look complete while shards are rewritten) and the
    shards an earlier run wrote under another --corpus; the names removed. Done once pass 1 is: a run that fails
    before leaves `out` as it was."""
    mine = {f"{split}/{shard_name(corpus, split, shard)}" for split, count in counts.items() for shard in range(count)}
    write_claim(staging, CLAIM, ours | mine)
    if previous is None:
        return []
    out.remove(MANIFEST)
    return _remove_another_corpus(out, previous, corpus)


def _remove_another_corpus(out, previous, corpus):
    """The shards an earlier run into `out` wrote under another --corpus name, removed (their names relative to
    `out`): a rerun as `--corpus b` was taken for complete and left `a`'s shards, and had it written b's beside
    them, readers of the folder would have read both."""
    if previous.get("corpus") == corpus:
        return []
    listed = [name for name in previous.get("files") or {} if out.isfile(name)]
    for name in listed:
        out.remove(name)
    return listed


@contextlib.contextmanager
def scratch_directory(staging, engine):
    """The Folder pass 1 writes its sentence files in: `staging`/split (cleared with the staging directory). For
    an output URL, whose staging is no directory: with Dask, whose workers may share nothing but the bucket,
    `staging`/split in the bucket (removed at the end, and at the start after a killed run); otherwise a local
    temporary in the spool directory."""
    scratch = Folder(staging).folder(SCRATCH)
    if scratch.renames:
        os.makedirs(scratch.root)  # a new directory: the run cleared its staging directory when it took hold
        yield scratch
    elif engine.engine == "dask":
        scratch.remove_tree()
        try:
            yield scratch
        finally:
            with contextlib.suppress(OSError):
                scratch.remove_tree()
    else:
        with tempfile.TemporaryDirectory(prefix="bertprep-shard-", dir=storage.spool_dir()) as directory:
            yield Folder(directory)


def _shard(options, engine, corpus, inputs, input_list, out, staging, scratch, params, progress, previous, ours):
    scratch_paths = [scratch.path(f"{i:06d}.txt") for i in range(len(inputs))]
    results = [None] * len(inputs)
    stats = {"invalid_utf8_lines": 0, "empty_documents": 0, "input_bytes": 0}
    # each input's first invalid line, the first of them named: the first to finish named a later input's
    firsts = [None] * len(inputs)
    fingerprinted = options.eval_documents is not None
    digests = listed_digests(inputs)
    split_tasks = [(i, path, scratch, fingerprinted, digests.get(storage.normpath(path)))
                   for i, (path, scratch) in enumerate(zip(inputs, scratch_paths))]
    for index, sizes, sentences, hashes, file_stats, prints in engine.run(split_input, split_tasks,
                                                                          describe=lambda t: t[1]):
        results[index] = (sizes, sentences, hashes, prints)
        firsts[index] = file_stats.pop("first_invalid_utf8", None)
        for key in stats:
            stats[key] += file_stats[key]
        progress.advance(1, bytes=file_stats["input_bytes"], documents=len(sizes))
    if first_invalid := next(filter(None, firsts), None):
        progress.note(f"{stats['invalid_utf8_lines']:,} line(s) with invalid UTF-8 decoded with U+FFFD (first: "
                      f"{first_invalid})")

    sizes = np.concatenate([r[0] for r in results])
    sentences = np.concatenate([r[1] for r in results])
    hashes = np.concatenate([r[2] for r in results])
    files = np.concatenate([np.full(len(r[0]), i, np.int64) for i, r in enumerate(results)])
    offsets = np.concatenate([np.cumsum(r[0]) - r[0] for r in results])
    if sizes.size == 0:
        raise DataError(f"{_named_inputs(inputs)}: no document with any sentence")
    if fingerprinted:
        test_mask, training_mask, eval_report = _eval_split(options, results, inputs, files, offsets)
    else:
        test_mask = choose_test(hashes, chosen_test_fraction(options))
        training_mask, eval_report = ~test_mask, None

    counts = {"training": min(options.train_shards, int(training_mask.sum())),
              "test": min(options.test_shards, int(test_mask.sum()))}
    # said as the earlier shards are replaced: a run that fails in pass 1 (too few documents) leaves them
    replacing = _replacing_warnings(previous, params, input_list, corpus)
    for warning in replacing:
        progress.warn(f"warning: {warning}")
    other_corpus = _take_over(out, staging, previous, ours, corpus, counts)
    tasks, names, earlier, fewer = [], [], [], []
    for split, mask, requested in (("training", training_mask, options.train_shards),
                                   ("test", test_mask, options.test_shards)):
        split_dir = out.folder(split)
        split_dir.makedirs()
        for name in split_dir.names_in():  # shards of an earlier run with other settings (_ours checked them)
            if _is_shard_name(name, corpus, split):
                split_dir.remove(name)
                earlier.append(f"{split}/{name}")
        docs = np.flatnonzero(mask)  # input order
        count = counts[split]
        empty_by_request = split == "test" and options.test_fraction == 0 and not fingerprinted
        # a warning in the summary, not a progress line that --quiet and --json never showed
        if count < requested and not empty_by_request:
            fewer.append(f"{split}: {len(docs)} document(s), so {count} shard(s) instead of the "
                         f"{requested} of --{'train' if split == 'training' else 'test'}-shards")
        assignment = BALANCES[options.balance][0](sizes[docs], count)
        for shard in range(count):
            chosen = docs[assignment == shard]
            path = split_dir.path(shard_name(corpus, split, shard))
            tasks.append((path, staging, scratch_paths, files[chosen], offsets[chosen], sizes[chosen],
                          sentences[chosen]))
            names.append((f"{split}/{shard_name(corpus, split, shard)}", split))
    # said, not silent (issue 57): the earlier run's shards past this run's counts are gone
    removed = sorted(set(earlier) - {name for name, _split in names})
    if removed:
        progress.note(f"removed {len(removed)} file(s) of an earlier run that this run does not write")
    written = {}
    for index, entry in engine.run_indexed(write_shard, tasks, describe=lambda t: t[0]):
        relpath, split = names[index]
        written[relpath] = dict(entry, split=split)
    return {
        **({"eval": eval_report} if eval_report else {}),
        "tool": "bertprep", "version": __version__, "stage": "shard", "corpus": corpus, "params": params,
        "inputs": input_list, "files": written,
        "documents": {s: int(sum(e["documents"] for e in written.values() if e["split"] == s)) for s in SPLITS},
        "dropped": {"empty_documents": stats["empty_documents"], "invalid_utf8_lines": stats["invalid_utf8_lines"]},
        "input_bytes": stats["input_bytes"],
        "spread": {s: spread([e["bytes"] for e in written.values() if e["split"] == s]) for s in SPLITS},
    }, sorted({*removed, *other_corpus}), [*replacing, *fewer]


def _named_inputs(inputs):
    """The first three inputs for a message, as shown (URLs without credentials)."""
    return ", ".join(map(storage.display, inputs[:3])) + (" ..." if len(inputs) > 3 else "")


def _eval_split(options, results, inputs, files, offsets):
    """(test mask, training mask, the manifest's "eval" entry) for --eval-documents: the seeded evaluation
    documents are the test split, and training loses every exact or near duplicate of one of them."""
    fingerprints = [f for r in results for f in r[3]]
    eval_mask = choose_eval(options.eval_documents, len(fingerprints), chosen_eval_seed(options))
    if eval_mask is None:
        raise DataError(f"{_named_inputs(inputs)}: --eval-documents {options.eval_documents} needs more documents "
                        f"than the {len(fingerprints)} with sentences (at least one must stay for training)")
    duplicates = eval_duplicates(fingerprints, eval_mask)
    first = np.concatenate([[0], np.cumsum([len(r[0]) for r in results])])

    def where(doc):  # a document's id: its input file and its number there (1-based, documents with sentences)
        return {"input": storage.display(inputs[files[doc]]), "document": int(doc - first[files[doc]] + 1)}

    dropped = [dict(where(doc), reason=reason, estimate=estimate, eval_twin=where(twin))
               for doc, (reason, twin, estimate) in sorted(duplicates.items())]
    training = ~eval_mask
    training[sorted(duplicates)] = False
    if not training.any():  # an output with no training split, exit 0: create then had nothing to train on
        raise DataError(f"{_named_inputs(inputs)}: --eval-documents {options.eval_documents} leaves no training "
                        f"document: each of the {len(fingerprints) - int(eval_mask.sum())} not drawn is an exact or "
                        "near duplicate of an evaluation document (dropped); give fewer --eval-documents or a "
                        "larger corpus")
    report = {"documents": int(eval_mask.sum()), "seed": chosen_eval_seed(options),
              "chosen": [where(doc) for doc in np.flatnonzero(eval_mask).tolist()],
              "dropped_training": len(dropped), "dropped": dropped}
    return eval_mask, training, report


def _is_complete(manifest, out, params, input_list, corpus):
    if (not manifest or manifest.get("stage") != "shard" or manifest.get("params") != params
            or manifest.get("inputs") != input_list or manifest.get("corpus") != corpus):
        return False
    return all(file_matches(out.path(relpath), entry) for relpath, entry in manifest.get("files", {}).items())


def _summary(manifest, out, seconds):
    summary = {k: manifest[k] for k in ("corpus", "documents", "dropped", "spread", "input_bytes")}
    summary.update(out=str(out), seconds=round(seconds, 3),
                   sentences=sum(e["sentences"] for e in manifest["files"].values()))
    summary["mb_per_s"] = round(manifest["input_bytes"] / seconds / 1e6, 2) if seconds else None
    if "eval" in manifest:  # --eval-documents only: today's --json otherwise
        report = manifest["eval"]
        summary["eval"] = {"documents": report["documents"], "seed": report["seed"],
                           "dropped_training": report["dropped_training"],
                           "dropped": [{k: d[k] for k in ("input", "document", "reason")} for d in report["dropped"]]}
    return summary


def _rows(manifest, out, seconds):
    rows = [("corpus", manifest["corpus"]),
            ("input", f"{len(manifest['inputs'])} file(s), {human_bytes(manifest['input_bytes'])}")]
    for split in SPLITS:
        s = manifest["spread"][split]
        if s["shards"]:
            rows.append((split, f"{manifest['documents'][split]:,} documents in {s['shards']} shards of "
                                f"{human_bytes(s['min_bytes'])}..{human_bytes(s['max_bytes'])} (spread "
                                f"{s['spread_pct']}% of mean)"))
        else:
            rows.append((split, "no documents"))
    rows.append(("sentences", f"{sum(e['sentences'] for e in manifest['files'].values()):,}"))
    dropped = manifest["dropped"]
    if dropped["empty_documents"] or dropped["invalid_utf8_lines"]:
        rows.append(("dropped",
                     f"{dropped['empty_documents']:,} empty documents; {dropped['invalid_utf8_lines']:,} lines with "
                     "invalid UTF-8 repaired"))
    if "eval" in manifest:
        report = manifest["eval"]
        ids = ", ".join(f"{os.path.basename(d['input'])}#{d['document']}" for d in report["dropped"][:10])
        more = " ..." if len(report["dropped"]) > 10 else ""
        rows.append(("eval set", f"{report['documents']:,} documents (seed {report['seed']}); "
                                 f"{report['dropped_training']:,} duplicate(s) dropped from training"
                                 f"{': ' + ids + more if ids else ''}"))
    if seconds:
        rows.append(("time", f"{seconds:.1f}s ({manifest['input_bytes'] / seconds / 1e6:.1f} MB/s)"))
    rows.append(("output", str(out)))
    return rows
