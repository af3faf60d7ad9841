"""`bertprep dedup`: remove exact and near-duplicate documents (and, on request, evaluation text) from
formatted corpora before they are sharded.

    OUT/<corpus>/<part>.jsonl     the kept documents of each input part, bytes as read
    OUT/<corpus>/manifest.json    a formatted corpus manifest, so `bertprep shard --input OUT/<corpus>` takes it
    OUT/manifest.json             what was removed and why, counts per corpus; marked "writing" while the
                                  parts are written
    OUT/pair_similarity.png       histogram of the candidate pairs' estimated Jaccard (with matplotlib)

Two passes over the inputs, each a pure task per input file on the engine, and between them the decision as
steps of their own on the same engine, each reading files the steps before it wrote to OUT/.partial/steps/
(a local directory or the bucket's prefix: on Dask every step runs on the workers with only that shared; a dry
run's steps go to a temporary directory, or OUT/.partial/dry-run on the user's Dask cluster). The memory of
any one process is bounded by `--memory` (MEMORY below), not by the corpus: what no step holds whole is sorted
in runs and merged from disk.

1. Fingerprint (`fingerprint_part`, a task per part): per document an xxh64 of its normalized text (NFC,
   case-folded, whitespace collapsed), a MinHash (datasketch 2's values, its permutations and arithmetic written
   here: `_permutation`, over the xxh32 of each word n-gram shingle, many documents at once in C, or in NumPy
   passes without the extension: `minhashes`), its LSH band keys (xxh64 of each band's values) and the evaluation
   n-grams it contains. A chunk of documents (`chunk_documents`: MEMORY / 2.1 KB at 128 permutations, what its
   arrays and their sorting take) goes to a file of its own (`write_arrays`): signatures and line numbers by
   document, and the chunk's sorted runs: its exact hashes and each band's keys, sorted with the document's index.
   A part's marker, written last, lists its chunks; the caller gets counts.
2. Exact (`exact_step`, one task): a k-way merge (`merged`) of every chunk's sorted hashes, a block of each run
   at a time; in each run of equal hashes every document but the first is an exact copy of the first.
3. Bands (`band_step`, a task per LSH band): the same merge of the band's keys. The documents (exact copies
   left out) sharing a key are candidate pairs, every pair of them as before; a pair is the band's only when no
   earlier band's keys bring it together (its keys are computed again from the two signatures), so each pair
   is counted and verified once without a global list. Signatures are read from the chunk files by document
   (neighbouring rows in one read), a batch of pairs at a time; a pair whose estimated Jaccard (the share of
   equal MinHash values) is at least the threshold is an edge: a band collision alone never removes a
   document. The band's file holds its edges and the histogram of every candidate's estimate (the plot). A group
   with more pairs than a batch (thousands of copies of one boilerplate) is verified a batch of pairs at a time,
   and of a document's edges in it only the first to each cluster of its earlier ones is kept
   (`large_group_edges`: the group's signatures compared a block at a time, not two copied rows a pair): the same
   decisions, in memory that grows with the group, not with its pairs.
4. Decision (`decide_step`, one task): the edges of all bands, by later then earlier document, joined in the
   stable order (corpus order on the command line, then the document's position in its corpus: part name,
   line) into connected components; each keeps its first document that is not removed as contaminated (a
   document holding evaluation n-grams is listed as contaminated, never as a duplicate, unless --report-only keeps
   it: there a duplicate holding them is removed and listed as the duplicate it is, its entry carrying its
   `evaluation_sets` too, and the contaminated counts are of every document holding evaluation n-grams, as without
   --report-only; an exact copy of a near copy is listed against that one's kept document, linked by it), so that
   no listed duplicate names as kept a document that was removed. It holds what grows with the duplicates
   (edges, the removed documents and their listing), never an array per document of the corpus; the removed
   documents' estimates against their kept ones are read from their signatures a batch of pairs at a time.
5. Write: each part without its removed lines. Before it, the decision is saved as OUT/manifest.json marked
   "writing"; a rerun after a kill takes the decision from there and keeps every part already under its final
   name (each is written whole, then renamed).

A rerun after a kill in steps 1-4 keeps each finished step's files (a part's marker, `exact`, a band's file;
each written whole) when STEPS/run.json names the same settings, inputs and version, and does only the rest; the steps'
directory goes once the output is complete. Nothing depends on the worker count, the engine or `--memory`:
the same decisions and bytes as deciding in one process over every document's arrays, which this was before.

MEMORY bounds a process's fingerprint chunk (pass 1; held to the machine's memory too), the blocks the merge
holds of the runs (a sixteenth of it over all runs, and what a batch makes of them about a quarter; 8 rows a run at
least, so a corpus of more than MEMORY / 2,048 B chunks takes more: there is no second merge level) and a batch of
pairs' signatures; the interpreter and libraries come on top, and what grows with the duplicates found (exact
copies' indices, verified pairs, the removed documents' listing).

The libraries are NumPy and xxhash (about 38 MiB with this module). What was taken from datasketch (its MinHash
permutations, its LSH bands' optimum) is computed here: importing it pulled in scipy, 81 MiB of RSS. The plot is
drawn by a child interpreter (`plot_similarities`): matplotlib would stay in this process for good.
"""

import array
import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import sys
import tempfile
import time
import unicodedata
from typing import Any

import numpy as np

from bertprep import __version__, storage
from bertprep.atomic import STEPS, atomic_open, hold, refuse_if_held, sha256_file, walk
from bertprep.engines import EngineOptions, machine_memory, open_engine
from bertprep.errors import ON_COMMAND_LINE, DataError, UsageError
from bertprep.folder import Folder
from bertprep.options import (
    Name,
    build_options,
    check_types,
    errors_name_fields,
    normalise_paths,
    parse_size,
    refuse_dangling_link,
    refuse_empty,
    refuse_overlap,
    written_in,
)
from bertprep.progress import Progress, Summary, human_bytes
from bertprep.stages.download.glue import is_glue_header
from bertprep.text_inputs import refuse_stream, unread_files_warning
from bertprep.workdir import (
    MANIFEST,
    check_corpus_name,
    file_matches,
    load_manifest,
    refuse_repeated_inputs,
    removed_warning,
    resolve_workdir,
    save_manifest,
    stage_dir,
)

try:
    from bertprep._native import minhash as _native_minhash
    from bertprep._native import ngram_xxh32 as _native_ngram_xxh32
except ImportError:  # extension not built: minhashes_numpy and ngram_hashes_python give the same values, slower
    _native_minhash = _native_ngram_xxh32 = None

PLOT = "pair_similarity.png"
FINGERPRINTS = "fingerprints"  # in STEPS: pass 1's chunk files and each part's marker
WRITING = "writing"  # in OUT/manifest.json while the parts are written (a killed run's decision, for its rerun)
MINHASH_SEED = 1
DEFAULT_MEMORY = Name("1G")  # a 2-core 24 GB machine's share per process, with room for the interpreter and libraries
WORD = re.compile(r"\w+")
# The largest --ngram and --decontaminate-ngram: 10**20 was the C extension's OverflowError (a traceback). A
# document shorter than the n-gram is its one shingle, so a larger one changes nothing (GPT-3's is 13).
MAX_NGRAM = 1 << 20
# The most MinHash permutations: 10**9 asked for gigabytes before the first document (killed, no message),
# 10**20 was NumPy's ValueError. Lee et al. (2022) used 9,000.
MAX_NUM_PERM = 1 << 14

# words per decontamination n-gram, as GPT-3's
DEFAULT_DECONTAMINATE_NGRAM = 13
# the near-duplicate search's defaults: words per MinHash shingle, permutations, estimated Jaccard
DEFAULT_NGRAM = 5
DEFAULT_NUM_PERM = 128
DEFAULT_THRESHOLD = 0.8


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class DedupOptions:
    """`bertprep dedup`'s flags: `input` (formatted corpus directories or .jsonl files, in order) or `corpus`
    (names under WORKDIR/formatted), `out` (None: WORKDIR/deduped), `ngram` (shingle words), `num_perm`,
    `threshold` (Jaccard), `bands` (None: the optimum datasketch's MinHashLSH picks for the threshold, computed
    here with NumPy: `optimal_bands`), `exact`/`near` (which duplicates to remove), `decontaminate` (squad, glue
    or evaluation files), `decontaminate_ngram`, `report_only` (list contaminated documents, keep them),
    `dry_run`, `memory` (bytes, or a size such as "64M": what one process holds of the corpus's fingerprints at
    most, beyond what the duplicates found take) and where the tasks run (`engine`)."""

    input: tuple[str, ...] | None = None
    corpus: tuple[str, ...] | None = None
    out: str | None = None
    ngram: int = DEFAULT_NGRAM
    num_perm: int = DEFAULT_NUM_PERM
    threshold: float = DEFAULT_THRESHOLD
    bands: int | None = None
    exact: bool = True
    near: bool = True
    decontaminate: tuple[str, ...] = ()
    decontaminate_ngram: int = DEFAULT_DECONTAMINATE_NGRAM
    report_only: bool = False
    dry_run: bool = False
    memory: int | Name = DEFAULT_MEMORY  # a size ("64M"), not a path: Name takes no path object
    engine: EngineOptions = EngineOptions()
    workdir: str | None = None

    def __post_init__(self):
        check_types(self)
        refuse_empty(self, "input", "corpus")
        normalise_paths(self, "input", "out", "workdir", "decontaminate", outputs=(written_in(self),),
                        folders=("workdir",))
        # `out` is not among the folders: dedup says its own line for an --out that is a file (dedup()). A link to
        # nothing there got past it and failed as dedup made it ("…/out: File exists", exit 1, after the inputs
        # were read): the line a directory output that is such a link gets, before any work
        if self.out is not None and storage.checks_locally(self.out):
            refuse_dangling_link("--out", self.out, self.out)
        if self.corpus is not None:
            object.__setattr__(self, "corpus", tuple(self.corpus))
        if self.input and self.corpus:
            raise UsageError("give --input or --corpus, not both")
        if self.ngram < 1 or self.decontaminate_ngram < 1:
            raise UsageError("--ngram and --decontaminate-ngram must be at least 1")
        for flag, value in (("--ngram", self.ngram), ("--decontaminate-ngram", self.decontaminate_ngram)):
            if value > MAX_NGRAM:
                raise UsageError(f"{flag} must be at most {MAX_NGRAM:,} words, not {value}")
        if self.num_perm < 2:
            raise UsageError("--num-perm must be at least 2")
        if self.num_perm > MAX_NUM_PERM:
            raise UsageError(f"--num-perm must be at most {MAX_NUM_PERM:,}, not {self.num_perm}")
        if not 0 < self.threshold <= 1:
            raise UsageError("--threshold must be in (0, 1]")
        if self.bands is not None and not 1 <= self.bands <= self.num_perm:
            raise UsageError(f"--bands must be in [1, --num-perm], not {self.bands}")
        if self.report_only and not self.decontaminate:
            raise UsageError("--report-only needs --decontaminate")
        # without a set it was taken without a word, and the summary's "0 contaminated" read as a check that found
        # nothing. The default (13) cannot be told from none and stays accepted, as shard's --test-fraction
        if self.decontaminate_ngram != DEFAULT_DECONTAMINATE_NGRAM and not self.decontaminate:
            raise UsageError(f"--decontaminate-ngram {self.decontaminate_ngram} needs --decontaminate (the "
                             "evaluation sets whose n-grams it sets)")
        # under --no-near they were taken without a word and changed nothing (exact duplicates are found by their
        # text's hash), as --decontaminate-ngram without a set: a default cannot be told from none and stays accepted
        if not self.near:
            for flag, value, default in (("--ngram", self.ngram, DEFAULT_NGRAM),
                                         ("--num-perm", self.num_perm, DEFAULT_NUM_PERM),
                                         ("--threshold", self.threshold, DEFAULT_THRESHOLD),
                                         ("--bands", self.bands, None)):
                if value != default:
                    raise UsageError(f"{flag} {value} has no effect with --no-near (it sets how near duplicates "
                                     "are found)")
        if not (self.exact or self.near or self.decontaminate):  # a run would copy the corpus as it is, exit 0
            raise UsageError("--no-exact and --no-near without --decontaminate leave nothing to remove")
        self.memory_bytes()

    def memory_bytes(self) -> int:
        """--memory in bytes."""
        return parse_size(self.memory, "--memory")

    def band_rows(self) -> tuple[int, int]:
        """(bands, rows per band)."""
        if self.bands is not None:
            return self.bands, self.num_perm // self.bands
        return optimal_bands(self.threshold, self.num_perm)


# -- what a run's settings cannot do ---------------------------------------------------

# A near duplicate halfway between --threshold and 1 that becomes a candidate less often than this is missed
# more often than found: the bands decide recall long before the threshold does (`--bands 1` of 128 rows finds
# a pair of Jaccard 0.9 once in 700,000). The default bands find it 93 times in 100 at 0.8.
LOW_RECALL = 0.5


def candidate_chance(jaccard, bands, rows):
    """The chance that a pair of this Jaccard shares at least one of `bands` LSH bands of `rows` values."""
    return 1 - (1 - jaccard ** rows) ** bands


def settings_warnings(options, machine_bytes):
    """Warnings on settings that run but do not do what was asked: bands that miss most near duplicates, a
    --memory beyond this machine's `machine_bytes` (None: unknown; a Dask scheduler's workers are elsewhere)."""
    warnings = []
    bands, rows = options.band_rows()
    middle = (1 + options.threshold) / 2
    if options.near and candidate_chance(middle, bands, rows) < LOW_RECALL:
        warnings.append(f"--bands {bands} ({rows} MinHash values a band) makes a pair of Jaccard {middle:.2f} a "
                        f"candidate with a chance of {candidate_chance(middle, bands, rows):.2g}: most near "
                        "duplicates will not be found; leave --bands out (the optimum for --threshold) or give more")
    memory = options.memory_bytes()
    floor = MIN_CHUNK * chunk_bytes_per_document(options.num_perm, bands)
    # under --no-near too: pass 1 makes every chunk's signatures and band keys all the same (they were taken
    # without a word there, the run holding and taking as long as with near)
    if memory < floor:
        warnings.append(f"--memory {options.memory} is less than a chunk of {MIN_CHUNK} documents needs "
                        f"({human_bytes(floor)}): the run takes that, in many small chunks (slower); give at least "
                        f"{human_bytes(floor)}")
    if machine_bytes and memory > machine_bytes and not options.engine.scheduler:
        warnings.append(f"--memory {options.memory} is more than this machine's {human_bytes(machine_bytes)}: a run "
                        "is held to what its corpus needs, and one that needs more than the machine has will be "
                        "killed; give at most what a process may take")
    return warnings


# -- text --------------------------------------------------------------------------


def normalized_words(text):
    """NFC, case-folded words (punctuation and whitespace dropped)."""
    return WORD.findall(unicodedata.normalize("NFC", text).casefold())


def normalized_text(text):
    """NFC, case-folded, whitespace collapsed: what two exact duplicates share."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def ngrams(words, n, start=0, stop=None):
    """The word n-grams as bytes (a text shorter than n words: itself, so it still has a shingle); with
    `start`/`stop`, those n-grams only (a slice of the list, never the whole list in memory)."""
    if len(words) < n:
        return [" ".join(words).encode("utf-8")] if words and start == 0 else []
    stop = len(words) - n + 1 if stop is None else min(stop, len(words) - n + 1)
    return [" ".join(words[i:i + n]).encode("utf-8") for i in range(start, stop)]


# Shingles hashed into a MinHash at a time: datasketch permuted a batch as one (num_perm, batch) uint64 array,
# so one 50 MB line (8 million shingles) took 8 GB at once (issue 39). The minimum over the pieces is the
# minimum over the whole: the same signature, for 64 MiB at most (128 permutations).
SHINGLE_BATCH = 1 << 16


def ngram_hashes(words, n, bits=64):
    """The xxh64 (`bits` 32: xxh32, a MinHash's shingles) of each word n-gram, a slice of them at a time. The
    xxh32 of a MinHash's shingles comes from bertprep._native's C loop where it is built (the same values as
    `ngram_hashes_python`, without a str join and an xxhash call per shingle: docs/benchmarks.md)."""
    if bits == 32 and _native_ngram_xxh32 is not None:
        return np.frombuffer(_native_ngram_xxh32(words, n), np.uint32)
    return ngram_hashes_python(words, n, bits)


def ngram_hashes_python(words, n, bits=64):
    """ngram_hashes in Python: the twin of bertprep._native.ngram_xxh32 for `bits` 32."""
    import xxhash

    digest, dtype = (xxhash.xxh64_intdigest, np.uint64) if bits == 64 else (xxhash.xxh32_intdigest, np.uint32)
    count = max(len(words) - n + 1, 1)
    return np.fromiter((digest(g) for start in range(0, count, SHINGLE_BATCH)
                        for g in ngrams(words, n, start, start + SHINGLE_BATCH)), dtype)


# -- inputs ------------------------------------------------------------------------


def resolve_inputs(workdir, options):
    """([(corpus name, [part paths])] in the command line's order, the input paths they came from)."""
    if options.input:
        paths = list(options.input)
    else:
        formatted = stage_dir(workdir, "formatted")
        storage.check_reachable(formatted)  # a missing bucket, refused credentials: not "no formatted corpus"
        names = options.corpus or (sorted(storage.listdir(formatted)) if storage.isdir(formatted) else [])
        if not names:
            raise UsageError(f"{storage.display(formatted)}: no formatted corpus (run `bertprep download` first or "
                             "give --input)")
        for name in options.corpus or ():  # named as --corpus, not as the --input path it was joined to
            if not storage.isdir(storage.join(formatted, check_corpus_name(name))):
                raise UsageError(f"{storage.display(formatted)}: no formatted corpus {name} (run `bertprep download` "
                                 "first or give --input)")
        paths = [storage.join(formatted, name) for name in names]
    corpora, named = [], []  # named: [(part, the --input that named it)]
    for path in paths:
        if storage.isdir(path):
            if not storage.isfile(storage.join(path, MANIFEST)):
                raise DataError(f"{storage.display(path)}: no {MANIFEST}: not a formatted corpus (expected the "
                                "directory `bertprep download` writes)")
            parts = sorted(storage.join(root, name) for root, _dirs, names in walk(path) for name in names
                           if name.endswith(".jsonl") and not name.startswith("."))
            if not parts:  # its text in .txt files, say: "0 documents", an empty corpus written, exit 0
                raise DataError(f"{storage.display(path)}: no .jsonl part in it: not a formatted corpus (expected the "
                                "directory `bertprep download` writes)")
            names = [os.path.basename(p) for p in parts]
            if len(set(names)) != len(names):  # the output corpus is flat, as `bertprep download` writes them
                twice = sorted(n for n in names if names.count(n) > 1)[0]
                raise UsageError(f"--input {storage.display(path)}: two parts named {twice} in its subdirectories")
            for part in parts:  # a FIFO named part.jsonl: hashed, then read again, as a pipe is (refuse_stream)
                refuse_stream(part)
            corpora.append((os.path.basename(storage.normpath(path)), [storage.absolute(p) for p in parts]))
        elif storage.isfile(path) and path.endswith(".jsonl"):
            corpora.append((os.path.basename(path)[:-len(".jsonl")], [storage.absolute(path)]))
        else:  # `--input <(zcat …)` (/dev/fd/63) or a FIFO: no regular file, was "not a formatted corpus directory"
            refuse_stream(path, flag="--input")
            raise storage.not_found(path, UsageError(f"--input {storage.display(path)}: not a formatted corpus "
                                                     "directory or .jsonl file"))
        named += [(part, path) for part in corpora[-1][1]]
    # a part read as two corpora (`--input c1 c1/part0.jsonl`) was each one's exact copy: both outputs emptied
    refuse_repeated_inputs(named)
    names = [input_corpus_name(name, path, options) for (name, _parts), path in zip(corpora, paths)]
    if len(set(names)) != len(names):
        raise UsageError(f"--input: two inputs named {sorted(n for n in names if names.count(n) > 1)[0]!r}")
    return corpora, paths


def input_corpus_name(name, path, options):
    """`name`, the corpus (its folder under --out) of the input `path`, when it is a corpus name; else one line
    naming the --input it came from (`--input wiki.v2.jsonl` said `--corpus 'wiki.v2': ...`, a flag not given)."""
    try:
        return check_corpus_name(name)
    except UsageError:
        if not options.input:
            raise
        raise UsageError(f"--input {storage.display(path)}: its corpus name {name!r} (its folder under --out) may use "
                         "letters, digits, '_' and '-' only: rename it") from None


# -- evaluation sets ---------------------------------------------------------------


DOWNLOADED_SETS = ("squad", "glue")  # --decontaminate names read from WORKDIR/download/<name>


def evaluation_source(workdir, name):
    """What --decontaminate `name` reads: WORKDIR/download/<name> for squad and glue, else the file it names."""
    return storage.join(workdir, "download", name) if name in DOWNLOADED_SETS else name


def evaluation_set_paths(workdir, name):
    """[(set label, path)]: one per dev/test file of the `squad` or `glue` download in WORKDIR (its training files
    are not evaluation text), or the SQuAD JSON / GLUE TSV / text file `name`."""
    if name in DOWNLOADED_SETS:
        directory = evaluation_source(workdir, name)
        files = sorted(storage.join(root, f) for root, _d, names in walk(directory) for f in names
                       if f.endswith((".json", ".tsv")) and f != MANIFEST
                       and not f.startswith("train")) if storage.isdir(directory) else []
        if not files:
            raise UsageError(f"--decontaminate {name}: no dev/test file in {storage.display(directory)} (run "
                             f"`bertprep download {name}` first)")
        return [(f"{name}/{storage.relpath(path, directory)}", path) for path in files]
    if storage.isdir(name):
        raise not_an_evaluation_file(name, "a directory; give the evaluation files in it")
    refuse_stream(name, "evaluation file", flag="--decontaminate")  # `<(zcat dev.txt.gz)` (/dev/fd/63), a FIFO
    storage.require(name, "file", not_an_evaluation_file(name, "no such file; give evaluation files"))
    return [(os.path.basename(name), name)]


def not_an_evaluation_file(name, what):
    """A UsageError for --decontaminate `name`, neither a set name nor a file (`what` it is, and what to give),
    saying what it takes: a directory (`--decontaminate data/glue/`), a path not there, or a set's name misspelt
    (`SQuAD`, `squad/`) were all "not squad, glue or a file", which told neither where squad is read from nor
    that a directory is not taken."""
    named = os.path.basename(name.rstrip("/")).lower()
    sets = (f"{named} (lower-case, alone) for the dev/test files of WORKDIR/download/{named}"
            if named in DOWNLOADED_SETS else "squad or glue for the dev/test files of WORKDIR/download/squad or glue")
    return UsageError(f"--decontaminate {storage.display(name)}: {what} by path (SQuAD .json, GLUE .tsv or .txt), "
                      f"or {sets}")


def evaluation_digests(workdir, options):
    """{set label: sha256 of its file}, part of a run's settings: a rerun after an evaluation file changed (a
    fresh download, an edited .txt) was "already complete", or resumed a killed run's steps, with the old file's
    findings. Empty without --decontaminate (manifests as before)."""
    return {label: sha256_file(path) for name in options.decontaminate
            for label, path in evaluation_set_paths(workdir, name)}


def evaluation_files(workdir, name):
    """[(set label, [item texts])]: one per dev/test file of the `squad` or `glue` download in WORKDIR (its
    training files are not evaluation text), or a SQuAD JSON / GLUE TSV / text file."""
    sets = evaluation_set_paths(workdir, name)
    if name in DOWNLOADED_SETS:
        return [(label, downloaded_items(name, path)) for label, path in sets]
    ((label, path),) = sets
    items = file_items(path)
    if not items:  # a run against nothing reported "items 0, found 0", as a clean corpus does
        raise DataError(f"--decontaminate {storage.display(name)}: no evaluation text in it (empty, blank, or no "
                        "text field): nothing to decontaminate against")
    return [(label, items)]


def downloaded_items(name, path):
    """The items of a dev/test file of the `squad` or `glue` download. One without any (a header alone, a download
    cut short) was checked against as "0 of 0 items found in training", exit 0, as a clean corpus reads."""
    items = file_items(path)
    if not items:
        raise DataError(f"--decontaminate {name}: {storage.display(path)}: no evaluation text in it (empty, blank, "
                        f"or no text field): run `bertprep download {name}` again, or give its other files by path")
    return items


def file_items(path):
    try:
        with storage.open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise DataError(f"{storage.display(path)}: byte {exc.start}: expected a SQuAD JSON, GLUE TSV or UTF-8 text "
                        "file, found bytes that are not UTF-8") from None
    if path.endswith(".json"):
        return squad_items(path, text)
    if path.endswith(".tsv"):
        # a row's text fields (those with a space: not ids, labels or scores), one per line
        lines = text.splitlines()
        rows = (line.split("\t") for line in lines[1 if lines and is_glue_header(lines[0]) else 0:] if line.strip())
        return [text for text in ("\n".join(f for f in row if " " in f.strip()) for row in rows) if text]
    if path.endswith(".txt"):
        return [block for block in re.split(r"\n\s*\n", text) if block.strip()]
    raise DataError(f"{storage.display(path)}: expected a SQuAD .json, GLUE .tsv or .txt evaluation file, "
                    f"not {os.path.splitext(path)[1] or 'a file without extension'}")


def squad_items(path, text):
    """Every distinct context of a SQuAD JSON file (its questions are asked of it)."""
    try:
        data = json.loads(text.removeprefix("\ufeff"))["data"]  # past a byte-order mark, as create-squad reads it
        contexts = [p["context"] for article in data for p in article["paragraphs"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{storage.display(path)}: expected SQuAD JSON (data[].paragraphs[].context), not this "
                        f"({type(exc).__name__}: {exc})") from None
    if not all(isinstance(c, str) for c in contexts):
        raise DataError(f"{storage.display(path)}: data[].paragraphs[].context: expected strings")
    return list(dict.fromkeys(contexts))


def evaluation_ngrams(workdir, options):
    """((set labels, sorted n-gram hashes, (set index, item index) of each hash, items per set), warnings): one
    warning per set with items shorter than --decontaminate-ngram words."""
    sets, hashes, owners, counts, warnings = [], [], [], [], []
    n = options.decontaminate_ngram
    for label, items in (entry for name in options.decontaminate for entry in evaluation_files(workdir, name)):
        if label in sets:  # the report is keyed by label: a/dev.txt's findings were replaced by b/dev.txt's
            raise UsageError(f"--decontaminate: two evaluation sets named {label!r} (the report names a set by its "
                             "file name): give each once, or rename one")
        sets.append(label)
        counts.append(len(items))
        short = 0
        for item, text in enumerate(items):
            # per line: a GLUE pair's two sentences never run on into each other in training text
            lines = [normalized_words(line) for line in text.split("\n")]
            h = np.concatenate([ngram_hashes(words, n) for words in lines])
            hashes.append(h)
            owners.append(np.full((len(h), 2), (len(sets) - 1, item), np.int64))
            short += max(map(len, lines)) < n
        if short:
            warnings.append(short_items_warning(label, short, len(items), n))
    if not hashes:
        return (sets, np.zeros(0, np.uint64), np.zeros((0, 2), np.int64), counts), warnings
    hashes, owners = np.concatenate(hashes), np.concatenate(owners)
    order = np.argsort(hashes, kind="stable")
    return (sets, hashes[order], owners[order], counts), warnings


def short_items_warning(label, short, items, n):
    """An item of fewer than n words has no n-gram: its one shingle (all its words) is found only in a training
    document of exactly those words, so a corpus that quotes it inside longer text is not reported: said."""
    return (f"--decontaminate {label}: {short} of {items} items are shorter than --decontaminate-ngram {n} words: "
            "they are found only in a training document of exactly their words, not inside a longer one; give a "
            "smaller --decontaminate-ngram to check them")


# -- files of the steps ------------------------------------------------------------
#
# A step's file is a JSON header (what arrays it holds, where) and the arrays' bytes: a reader takes rows of one
# array by a ranged read (a seek locally), so a run of a sorted column is read a block at a time.

MAGIC = b"bertprep-arrays1"


def write_arrays(folder, name, arrays, staging=None):
    """Write the named NumPy `arrays` to `name` in `folder`, whole or not at all."""
    arrays = {key: np.ascontiguousarray(value) for key, value in arrays.items()}
    header, offset = {}, 0
    for key, value in arrays.items():
        header[key] = [offset, value.dtype.str, list(value.shape)]
        offset += value.nbytes
    encoded = json.dumps(header).encode()
    with folder.atomic_open(name, "wb", staging) as f:
        f.write(MAGIC + len(encoded).to_bytes(8, "little") + encoded)
        for value in arrays.values():
            f.write(memoryview(value).cast("B"))


class Arrays:
    """A file write_arrays wrote, read an array's rows at a time."""

    def __init__(self, folder, name):
        self.folder, self.name = folder, name
        head = folder.read_range(name, 0, len(MAGIC) + 8)
        if head[:len(MAGIC)] != MAGIC:
            raise DataError(f"{folder.display(name)}: not a file of a bertprep dedup step")
        size = int.from_bytes(head[len(MAGIC):], "little")
        self.header = json.loads(folder.read_range(name, len(head), size))
        self.base = len(head) + size

    def length(self, key):
        return self.header[key][2][0]

    def row_bytes(self, key):
        _offset, dtype, shape = self.header[key]
        return np.dtype(dtype).itemsize * int(np.prod(shape[1:], dtype=np.int64))

    def rows(self, key, start=0, stop=None):
        offset, dtype, shape = self.header[key]
        dtype, row = np.dtype(dtype), self.row_bytes(key)
        stop = shape[0] if stop is None else min(stop, shape[0])
        if stop <= start:
            return np.zeros((0, *shape[1:]), dtype)
        data = self.folder.read_range(self.name, self.base + offset + start * row, (stop - start) * row)
        return np.frombuffer(data, dtype).reshape(-1, *shape[1:])


# -- pass 1: fingerprints ----------------------------------------------------------


def fingerprint(text, words, ngram, num_perm):
    """(xxh64 of the normalized text, MinHash values of its word n-gram shingles as uint32): what exact and
    near duplicates are found by (`bertprep shard --eval-documents` checks its training documents with it)."""
    shingles = ngram_hashes(words, ngram, bits=32)
    return exact_hash(text), minhashes(shingles, [len(shingles)], num_perm)[0]


def exact_hash(text):
    """What two exact duplicates share: the xxh64 of the normalized text."""
    import xxhash

    return xxhash.xxh64_intdigest(normalized_text(text).encode("utf-8"))


def minhashes(shingles, counts, num_perm):
    """(documents, num_perm) uint32: the MinHash values of documents whose shingles' xxh32 are `shingles`,
    `counts[i]` of them document i's, in order: those of datasketch's MinHash (seed MINHASH_SEED, hashfunc xxh32),
    its permutations drawn once (`_permutation`), for many documents at once: a datasketch object per document
    was three quarters of a short document's fingerprint. The C loop of bertprep._native where it is built (no
    (shingles, num_perm) array; 25 times the NumPy twin's speed on wt2, docs/benchmarks.md), else
    `minhashes_numpy`: the same values."""
    shingles, counts = np.ascontiguousarray(shingles, np.uint32), np.ascontiguousarray(counts, np.int64)
    if _native_minhash is None:
        return minhashes_numpy(shingles, counts, num_perm)
    a, b = _affine32(num_perm)
    values = np.empty((len(counts), num_perm), np.uint32)
    _native_minhash(shingles, counts, a, b, values)
    return values


def minhashes_numpy(shingles, counts, num_perm):
    """minhashes' values in NumPy passes over (shingles, num_perm) slices of permuted values, a minimum.reduceat
    by document each (the twin of bertprep._native.minhash)."""
    permute, empty = _permutation(num_perm)
    shingles, counts = np.asarray(shingles, np.uint32), np.asarray(counts, np.int64)
    values = np.full((len(counts), num_perm), empty)
    ends = np.cumsum(counts)  # a slice's documents from these, not an int64 per shingle (16 MiB at --memory 64M)
    step = max(1, MINHASH_CELLS // num_perm)
    for start in range(0, len(shingles), step):  # (shingles, num_perm) values at a time
        docs = np.searchsorted(ends, np.arange(start, min(start + step, len(shingles))), "right")
        firsts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
        least = np.minimum.reduceat(permute(shingles[start:start + step]), firsts, axis=0)
        values[docs[firsts]] = np.minimum(values[docs[firsts]], least)
    return values.astype(np.uint32, copy=False)  # already uint32 (EMPTY_MINHASH's): no copy


MINHASH_CELLS = 1 << 21  # shingles times permutations permuted at a time: 8 MiB of uint32


# MinHash and LSH banding as datasketch 2 computes them, written here so that no process of `bertprep dedup`
# imports datasketch: it pulls in scipy (for `_optimal_param`'s integrals), 81 MiB of RSS for `import
# datasketch` against 25 MiB for NumPy (docs/benchmarks.md). tests/test_dedup.py compares both with datasketch.
# The values are datasketch 2's default scheme, "affine32", whatever datasketch is installed or not (before,
# an installed datasketch < 2 gave its "legacy" scheme's values, other decisions).

FMIX32 = (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16)  # MurmurHash3's 32-bit finalizer: shift, multiply, shift, ...
EMPTY_MINHASH = np.uint32(0xFFFFFFFF)  # a MinHash of no shingle: datasketch's initial hashvalues


@functools.cache
def _affine32(num_perm):
    """(a, b): the uint32 parameters of datasketch's MinHash(num_perm, seed=MINHASH_SEED) permutations, drawn by a
    RandomState of the seed as datasketch 2's "affine32" draws them, a's for every permutation first (a odd)."""
    draw = np.random.RandomState(MINHASH_SEED)
    a = draw.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = draw.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


@functools.cache
def _permutation(num_perm):
    """(the permutations of datasketch's MinHash(num_perm, seed=MINHASH_SEED) as a function of shingle hashes
    (uint32) to their (shingles, num_perm) uint32 values, the value of no shingle). datasketch 2's "affine32":
    each permutation is h -> a * fmix32(h) + b mod 2^32 (uint32 arithmetic wraps), `_affine32`'s a and b."""
    a, b = _affine32(num_perm)

    def permute(hashes):
        values = _fmix32(np.asarray(hashes, np.uint32))[:, None] * a
        values += b  # in place: one (shingles, num_perm) array, not two
        return values

    return permute, EMPTY_MINHASH


def _fmix32(hashes):
    shift1, multiply1, shift2, multiply2, shift3 = (np.uint32(c) for c in FMIX32)
    hashes = (hashes ^ (hashes >> shift1)) * multiply1
    hashes = (hashes ^ (hashes >> shift2)) * multiply2
    return hashes ^ (hashes >> shift3)


@functools.cache
def optimal_bands(threshold, num_perm):
    """(bands, rows) that datasketch's MinHashLSH picks for `threshold` and `num_perm` (its `_optimal_param`
    with equal weights): of every b bands of r rows (b * r <= num_perm), the least mean of the false positive
    area (the chance 1 - (1 - s^r)^b that a pair of Jaccard s shares a band, over s in [0, threshold]) and the
    false negative area (the chance it does not, over [threshold, 1]); the first in (b, r) order on a tie.
    datasketch integrates with scipy's quad, pair by pair; here both areas come from one closed form for all
    pairs at once (_band_error): at --num-perm 16384, 1.7 s against datasketch's 30 s
    (scripts/bench_dedup_bands.py); Gauss-Legendre quadrature, before, grew as num_perm^2 log num_perm."""
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    return pairs[int(np.argmin(_band_error(np.array(pairs, np.float64), threshold)))]


def _band_error(pairs, threshold):
    """Each (b, r) pair's mean of its false positive and false negative areas (optimal_bands). With u = s^r,
    the integral of (1 - s^r)^b over [0, t] is B_x(1/r, b + 1) / r at x = t^r (the incomplete beta function),
    so with W the integral over [0, 1] and I = I_x(1/r, b + 1) its regularized form, the false positive area is
    t - W * I, the false negative area W * (1 - I), and their mean (t + W * (1 - 2 * I)) / 2."""
    bands, rows = pairs[:, 0], pairs[:, 1]
    a, b = 1 / rows, bands + 1
    whole = np.exp(_log_beta(a, b)) / rows
    if threshold >= 1:
        below = np.ones(len(pairs))
    else:
        below = _regularized_incomplete_beta(a, b, np.full(len(pairs), float(threshold)) ** rows)
    return 0.5 * (threshold + whole * (1 - 2 * below))


_log_gamma = np.frompyfunc(math.lgamma, 1, 1)


def _log_beta(a, b):
    """log B(a, b) for a <= 1 < b. lgamma(b) - lgamma(a + b) directly loses 1e-11 of B at b = 16,385 (each
    near 1.4e5), enough to reorder two bands' nearly equal errors, so for b >= 20 the difference is taken whole:
    Stirling's series, whose next term is below 1e-17 there."""
    large = np.maximum(b, 20.0)
    with_series = ((large - 0.5) * np.log1p(a / large) + a * np.log(large + a) - a
                   + _stirling_tail(large + a) - _stirling_tail(large))
    direct = (_log_gamma(a + b) - _log_gamma(b)).astype(np.float64)
    return _log_gamma(a).astype(np.float64) - np.where(b >= 20, with_series, direct)


def _stirling_tail(z):
    """log Gamma(z) - ((z - 1/2) log z - z + log(2 pi) / 2), to the term in z^-9."""
    inverse, square = 1 / z, 1 / (z * z)
    return inverse * (1 / 12 - square * (1 / 360 - square * (1 / 1260 - square * (1 / 1680 - square / 1188))))


def _regularized_incomplete_beta(a, b, x):
    """I_x(a, b) for arrays with a <= 1 < b and 0 <= x < 1 (Numerical Recipes' betai: its continued fraction
    where it converges fast, x < (a + 1) / (a + b + 2), and I_x(a, b) = 1 - I_(1-x)(b, a) elsewhere).
    scipy.special.betainc is this, but scipy costs a dedup process 50-60 MiB (pyproject.toml, the curate
    extra)."""
    log_beta = _log_beta(a, b)
    flip = x > (a + 1) / (a + b + 2)
    a, b, x = np.where(flip, b, a), np.where(flip, a, b), np.where(flip, 1 - x, x)
    with np.errstate(divide="ignore"):  # x = 0 (t^r below the smallest double): log 0 = -inf, the factor 0
        front = np.exp(a * np.log(x) + b * np.log1p(-x) - log_beta) / a
    part = front * _beta_continued_fraction(a, b, x)
    return np.where(flip, 1 - part, part)


def _beta_continued_fraction(a, b, x, tiny=1e-300):
    """The continued fraction of I_x(a, b) by Lentz's method, every element until each has converged to a
    double's precision (a few hundred terms at b = 16,385, the largest --num-perm plus one)."""
    c, d = np.ones_like(x), 1 / _away_from_zero(1 - (a + b) * x / (a + 1), tiny)
    fraction, converged = d.copy(), np.zeros(x.shape, bool)
    for m in range(1, 100_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 / _away_from_zero(1 + numerator * d, tiny)
            c = _away_from_zero(1 + numerator / c, tiny)
            fraction = np.where(converged, fraction, fraction * c * d)
        converged |= np.abs(c * d - 1) < 1e-16
        if converged.all():
            return fraction
    raise ArithmeticError("the incomplete beta function's continued fraction did not converge")


def _away_from_zero(values, tiny):
    return np.where(np.abs(values) < tiny, tiny, values)


def chunk_documents(memory, num_perm, bands, part_bytes=None):
    """Documents in one chunk of pass 1: its signatures, hash and band-key runs, and the copies sorting makes;
    never more than a part of `part_bytes` can hold (issue 57: the signatures' array is made for the chunk at
    once, so `--memory 100G` on a one-document part asked NumPy for 24 GiB and ended in a MemoryError)."""
    per_chunk = max(MIN_CHUNK, memory // chunk_bytes_per_document(num_perm, bands))
    return per_chunk if part_bytes is None else min(per_chunk, max(1, part_bytes // MIN_DOCUMENT_BYTES + 1))


MIN_CHUNK = 32  # documents: a smaller --memory still takes this many a chunk


def chunk_bytes_per_document(num_perm, bands):
    """A document's share of a pass-1 chunk's memory: its MinHash values, hash and band keys, and sorting's
    copies."""
    return 3 * (4 * num_perm + 16 * (bands + 1) + 32)


# The shortest line a formatted part's document can be: {"text":""} and its newline. A part holds at most its
# bytes / this many documents, which bounds a chunk whatever --memory says.
MIN_DOCUMENT_BYTES = len(b'{"text":""}\n')


def fingerprint_part(task):
    """Fingerprint one part into STEPS/fingerprints (pure; a part already done is not done again): per chunk of
    documents a file (_Chunk) of its MinHash values, line numbers, evaluation n-grams found and the sorted runs
    the decision merges. Returns the part's marker, written last: {documents, chunk starts, bytes}."""
    path, index, work, ngram, num_perm, (bands, rows), eval_hashes, eval_ngram, memory, staging = task
    from bertprep.stages.download.formatted import iter_documents

    marker = _marker_name(index)
    if work.isfile(marker):
        return json.loads(work.read_bytes(marker))
    # held to this machine's memory too, as the warning of a --memory beyond it says: the chunk's signatures'
    # array is made at once, and --memory 1T on a part of 1 GB asked NumPy for 42.7 GiB (a MemoryError traceback)
    memory = min(memory, machine_memory() or memory)
    per_chunk, starts, documents = chunk_documents(memory, num_perm, bands, storage.getsize(path)), [], 0
    chunk = _Chunk(num_perm, memory, per_chunk)
    for number, doc in iter_documents(path):
        text = doc["text"]
        words = normalized_words(text)
        if eval_hashes.size:
            found = np.unique(ngram_hashes(words, eval_ngram))
            found = found[in_sorted(found, eval_hashes)]
            if found.size:
                chunk.found[len(chunk.exact)] = found
        chunk.add(exact_hash(text), ngram_hashes(words, ngram, bits=32), number)
        documents += 1
        if len(chunk.exact) == per_chunk:
            chunk.write(work, _chunk_name(index, len(starts)), bands, rows, staging)
            starts.append(documents - per_chunk)
            chunk = _Chunk(num_perm, memory, per_chunk)
    if len(chunk.exact):
        chunk.write(work, _chunk_name(index, len(starts)), bands, rows, staging)
        starts.append(documents - len(chunk.exact))
    result = {"documents": documents, "starts": starts, "bytes": storage.getsize(path)}
    work.atomic_write_bytes(marker, json.dumps(result).encode(), staging)
    return result


def in_sorted(values, ordered):
    """Whether each of `values` is in the ascending array `ordered`, by a binary search each. np.isin sorted the
    two together on every call: per document against every evaluation n-gram, 2,000 documents took 215 s of CPU
    against 2,000 paragraphs of evaluation text (256,000 n-grams), a cost of corpus times evaluation set."""
    if not len(ordered):
        return np.zeros(len(values), bool)
    at = np.searchsorted(ordered, values)
    return ordered[np.minimum(at, len(ordered) - 1)] == values


def _marker_name(part):
    """A part's marker in STEPS, written last: the part's fingerprints are complete."""
    return f"{FINGERPRINTS}/{part:05d}.json"


def _resumed_parts(steps, parts):
    """The indices of `parts` whose markers a killed run left in `steps`: fingerprinted before this run."""
    names = set(steps.listdir(FINGERPRINTS)) if steps.isdir(FINGERPRINTS) else set()
    return {index for index in range(parts) if os.path.basename(_marker_name(index)) in names}


def _chunk_name(part, chunk):
    return f"{FINGERPRINTS}/{part:05d}-{chunk:05d}"


class _Chunk:
    """One chunk of a part's fingerprints as they come: packed (8 bytes a hash, 4 a MinHash value), not a Python
    object per document. The signatures' array is made once for the chunk's `documents` (its pages taken as rows
    are written): a bytearray grown a pass at a time was at times copied whole (3 MiB less at the peak of a
    100k-document run with --memory 64M)."""

    def __init__(self, num_perm, memory, documents):
        self.exact, self.lines, self.found = array.array("Q"), array.array("q"), {}
        self.signatures, self.done = np.empty((documents, num_perm), np.uint32), 0  # rows with their values
        self.num_perm, self.pending = num_perm, max(1, memory // 32)  # shingle hashes held for a MinHash pass
        self.shingles, self.counts = array.array("I"), array.array("q")

    def add(self, exact, shingles, line):
        self.exact.append(exact)
        self.lines.append(line)
        self.shingles.frombytes(shingles.tobytes())
        self.counts.append(len(shingles))
        if len(self.shingles) >= self.pending:
            self._minhash()

    def _minhash(self):
        """The MinHash values of the documents added since the last time, at once."""
        values = minhashes(np.frombuffer(self.shingles, np.uint32), self.counts, self.num_perm)
        self.signatures[self.done:self.done + len(values)] = values
        self.done += len(values)
        self.shingles, self.counts = array.array("I"), array.array("q")

    def write(self, work, name, bands, rows, staging):
        """The chunk's file: `signatures` and `lines` by document, `exact`/`exact_docs` and each band's
        `keys<band>`/`docs<band>` sorted by hash or key (documents as indices in the chunk, stably), and the
        evaluation n-grams found (`found_docs`, `found_sizes`, `found_hashes`)."""
        self._minhash()
        exact = np.frombuffer(self.exact, np.uint64)
        signatures = self.signatures[:self.done]
        arrays = {"signatures": signatures, "lines": np.frombuffer(self.lines, np.int64)}
        order = np.argsort(exact, kind="stable")
        arrays["exact"], arrays["exact_docs"] = exact[order], order
        keys = band_keys(signatures, bands, rows)
        for band in range(bands):
            order = np.argsort(keys[:, band], kind="stable")
            arrays[f"keys{band}"], arrays[f"docs{band}"] = keys[order, band], order
        docs = sorted(self.found)
        arrays["found_docs"] = np.array(docs, np.int64)
        arrays["found_sizes"] = np.array([len(self.found[d]) for d in docs], np.int64)
        arrays["found_hashes"] = np.concatenate([self.found[d] for d in docs]) if docs else np.zeros(0, np.uint64)
        write_arrays(work, name, arrays, staging)


# -- deciding what goes -------------------------------------------------------------


def band_keys(signatures, bands, rows):
    """(documents, bands) uint64: each LSH band's MinHash values packed into one int (xxh64 of their bytes).
    Two documents share a band when they share its key; a 64-bit collision only adds a pair to verify."""
    import xxhash

    keys = np.empty((len(signatures), bands), np.uint64)
    for band in range(bands):
        block = np.ascontiguousarray(signatures[:, band * rows:(band + 1) * rows])
        keys[:, band] = np.fromiter((xxhash.xxh64_intdigest(row) for row in block), np.uint64, len(block))
    return keys


def band_groups(keys, members):
    """Per band, each group of two or more of `members` (ascending document indices) sharing its key, ascending."""
    for band in range(keys.shape[1]):
        column = keys[members, band]
        order = np.argsort(column, kind="stable")
        yield from key_groups(column[order], members[order])


def key_groups(keys, docs):
    """The documents of each run of two or more equal `keys` (sorted), in their order."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    shared = ends - starts > 1
    for start, end in zip(starts[shared].tolist(), ends[shared].tolist()):
        yield docs[start:end]


def pair_estimates(signatures, first, second, chunk=4096):
    """Each pair's estimated Jaccard: the share of equal MinHash values of documents first[i] and second[i]."""
    shares = np.empty(len(first))
    for start in range(0, len(first), chunk):  # in chunks: two (chunk, num_perm) copies at a time
        part = slice(start, start + chunk)
        shares[part] = (signatures[first[part]] == signatures[second[part]]).mean(axis=1)
    return shares


class Fingerprints:
    """Pass 1's files of every part, read by document: a document is its index in the stable order (the
    parts' documents one after another)."""

    def __init__(self, work, markers):
        self.work = work
        self.offsets = np.cumsum([0] + [m["documents"] for m in markers])
        self.chunks = []  # (file name, first document, documents)
        for part, marker in enumerate(markers):
            ends = [*marker["starts"][1:], marker["documents"]]
            for index, (start, end) in enumerate(zip(marker["starts"], ends)):
                self.chunks.append((_chunk_name(part, index), int(self.offsets[part]) + start, end - start))
        self.firsts = np.array([first for _name, first, _size in self.chunks], np.int64)
        self._files = {}

    def file(self, index):
        if index not in self._files:
            self._files[index] = Arrays(self.work, self.chunks[index][0])
        return self._files[index]

    def runs(self, key, docs, memory):
        """A _Run per chunk of its sorted column `key` (documents in `docs`), read in blocks that together
        take a sixteenth of `memory`: a batch of `merged` holds them, their concatenation, its order and the
        sorted copies, about 3.5 times as much (with a quarter, a band step's worker grew from 38 to 67 MiB
        between 100k and 400k short documents at --memory 64M, more than pass 1 took)."""
        block = max(8, memory // (16 * 16 * max(1, len(self.chunks))))
        return [_Run(self.file(i), key, docs, first, block) for i, (_name, first, _size) in enumerate(self.chunks)]

    def rows(self, key, docs):
        """The rows of `key` (signatures or lines) of the documents `docs`, in their order: near rows read at once."""
        unique, inverse = np.unique(np.asarray(docs, np.int64), return_inverse=True)
        chunk_of = np.searchsorted(self.firsts, unique, "right") - 1
        blocks = []
        for index in np.unique(chunk_of).tolist():
            local = unique[chunk_of == index] - self.chunks[index][1]
            gap = max(1, GAP_BYTES // self.file(index).row_bytes(key))
            for span in np.split(local, np.flatnonzero(np.diff(local) > gap) + 1):
                blocks.append(self.file(index).rows(key, int(span[0]), int(span[-1]) + 1)[span - span[0]])
        if not blocks:
            return self.file(0).rows(key, 0, 0) if self.chunks else np.zeros(0)
        return np.concatenate(blocks)[inverse.ravel()]

    def found(self):
        """{document: evaluation n-gram hashes it holds}."""
        found = {}
        for index, (_name, first, _size) in enumerate(self.chunks):
            arrays = self.file(index)
            docs = arrays.rows("found_docs")
            if docs.size:
                hashes = np.split(arrays.rows("found_hashes"), np.cumsum(arrays.rows("found_sizes"))[:-1])
                found.update(zip((docs + first).tolist(), hashes))
        return found


# Bytes between two wanted rows that Fingerprints.rows reads rather than asking twice: a ranged read of an object
# costs what reading about this much does (a few ms), and a chunk's rows are at most a third of --memory.
GAP_BYTES = 1 << 20


class _Run:
    """A sorted run of (key, document) of one chunk, `block` rows read at a time."""

    def __init__(self, arrays, key, docs, first, block):
        self.arrays, self.key, self.docs_key, self.first, self.block = arrays, key, docs, first, block
        self.at, self.size = 0, arrays.length(key)
        self.keys, self.docs = np.zeros(0, np.uint64), np.zeros(0, np.int64)

    def load(self):
        stop = min(self.at + self.block, self.size)
        self.keys = np.concatenate([self.keys, self.arrays.rows(self.key, self.at, stop)])
        self.docs = np.concatenate([self.docs, self.arrays.rows(self.docs_key, self.at, stop) + self.first])
        self.at = stop


def merged(runs):
    """The rows of sorted `runs` (k-way merge) in batches sorted by key then document; the rows of one key are
    never split between two batches. Each run holds about two blocks at a time."""
    runs = [run for run in runs if run.size]
    while runs:
        for run in runs:
            if not len(run.keys) and run.at < run.size:
                run.load()
        live = [run for run in runs if run.at < run.size]
        bound = min(run.keys[-1] for run in live) if live else None  # no row still unread is below it
        keys, docs = [], []
        for run in runs:
            cut = len(run.keys) if bound is None else int(np.searchsorted(run.keys, bound, "left"))
            keys.append(run.keys[:cut])
            docs.append(run.docs[:cut])
            run.keys, run.docs = run.keys[cut:], run.docs[cut:]
        keys, docs = np.concatenate(keys), np.concatenate(docs)
        order = np.lexsort((docs, keys))
        yield keys[order], docs[order]
        for run in live:
            if run.keys[-1] == bound:  # all it holds is the bound's key: on to its next block
                run.load()
        runs = [run for run in runs if len(run.keys) or run.at < run.size]


EXACT = "exact"
HISTOGRAM_BINS = 50  # of the plot of the candidate pairs' estimates


def exact_step(task):
    """STEPS/exact: each document with an earlier one of the same exact hash (`docs`, ascending) and that first
    one (`twins`), from a merge of every chunk's sorted hashes (pure; done once)."""
    work, markers, memory, staging = task
    if work.isfile(EXACT):
        return
    removed, twins = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for keys, docs in merged(Fingerprints(work, markers).runs("exact", "exact_docs", memory)):
        for group in key_groups(keys, docs):
            removed.append(group[1:])
            twins.append(np.full(len(group) - 1, group[0]))
    removed, twins = np.concatenate(removed), np.concatenate(twins)
    order = np.argsort(removed)
    write_arrays(work, EXACT, {"docs": removed[order], "twins": twins[order]}, staging)


def _band_name(band):
    return f"bands/{band:04d}"


def band_step(task):
    """STEPS/bands/<band>: the candidate pairs this band is the first to bring together (documents sharing its
    key, exact copies left out), verified: the histogram of their estimates, their count, and as edges
    (`earlier`, `later`, `shares`, by later then earlier) those at or above the threshold (pure; done once)."""
    work, markers, band, (_bands, rows), num_perm, threshold, exact, memory, staging = task
    if work.isfile(_band_name(band)):
        return
    fingerprints = Fingerprints(work, markers)
    copies = Arrays(work, EXACT).rows("docs") if exact else np.zeros(0, np.int64)
    batch = max(1024, memory // (64 * num_perm))  # pairs verified at a time: two signatures each, read and copied
    pending, edges = [], [(np.zeros(0, np.int64),) * 2 + (np.zeros(0),)]
    histogram, count = np.zeros(HISTOGRAM_BINS, np.int64), 0

    def check(earlier, later):
        """The band's verified edges of these pairs (by later then earlier, as given), counting every candidate."""
        nonlocal histogram, count
        signatures, first, second = pair_signatures(fingerprints, earlier, later)
        if band:  # a pair sharing an earlier band's key is that band's
            keys = band_keys(signatures, band, rows)
            mine = ~(keys[first] == keys[second]).any(axis=1)
            earlier, later, first, second = earlier[mine], later[mine], first[mine], second[mine]
        shares = pair_estimates(signatures, first, second)
        histogram += np.histogram(shares, bins=HISTOGRAM_BINS, range=(0, 1))[0]
        count += len(shares)
        verified = shares >= threshold
        return earlier[verified], later[verified], shares[verified]

    def verify():
        edges.append(check(*(np.concatenate(side) for side in zip(*pending))))
        pending.clear()

    size = 0
    for keys, docs in merged(fingerprints.runs(f"keys{band}", f"docs{band}", memory)):
        if copies.size:
            keep = ~in_sorted(docs, copies)
            keys, docs = keys[keep], docs[keep]
        for group in key_groups(keys, docs):
            if len(group) * (len(group) - 1) // 2 > batch:  # its pairs at once would pass --memory: a batch at a time
                if pending:
                    verify()
                    size = 0
                # its pairs share signatures (the group's, read once): compared a block at a time, as many pairs
                # as their comparisons (a byte a MinHash value and band, and the block's arrays) fit in a quarter
                # of --memory
                found, candidates, pairs = large_group_edges(
                    group, fingerprints.rows("signatures", group), band, rows, threshold,
                    max(batch, memory // (4 * (num_perm + band + 64))))
                edges.extend(found)
                histogram += candidates
                count += pairs
                continue
            first, second = np.triu_indices(len(group), 1)
            pending.append((group[first], group[second]))
            size += len(first)
            if size >= batch:
                verify()
                size = 0
    if pending:
        verify()
    earlier, later, shares = (np.concatenate(side) for side in zip(*edges))
    order = np.lexsort((earlier, later))
    write_arrays(work, _band_name(band), {"earlier": earlier[order], "later": later[order], "shares": shares[order],
                                          "histogram": histogram, "pairs": np.array([count], np.int64)}, staging)


def large_group_edges(group, signatures, band, rows, threshold, batch):
    """([(earlier, later, shares)] edges, the histogram of the candidates' estimates, their count) of a band key's
    `group` (ascending documents, `signatures` their rows) too large for its pairs to be held at once (thousands of
    copies of one boilerplate: N * (N - 1) / 2 pairs, 1 GB at 4,000 documents with --memory 16M), as `check` in
    band_step gives them: every pair not sharing an earlier band's key counted, each later document with all of
    its earlier ones. The group's signatures are compared with each other a block of about `batch` pairs at a time
    (a pair's estimate is its count of equal values: the histogram is of those counts), not read and copied
    by pair: the time is still that of N * (N - 1) / 2 pairs, but of a comparison of their values each (the
    command took 43 s of CPU for 8,000 copies, before, 8.8 s now: docs/reliability.md). Of a document's edges only
    the first (earliest) to each cluster that the group's edges among the earlier documents form are kept:
    decide_step's components, each document's earliest verified pair and the clusters it joins are those of every
    edge (near_clusters), and the edges kept grow with the group, not with its pairs."""
    size, num_perm = signatures.shape
    equal_values = equal_counts(signatures, batch)
    shared_keys = equal_counts(band_keys(signatures, band, rows), batch) if band else None
    parent = np.arange(size)  # each member's cluster in the group as a tree whose root is its first member
    counts, found = np.zeros(num_perm + 1, np.int64), []  # counts: candidates by their number of equal values
    # the fewest equal values of a verified pair: its estimate (pair_estimates' share of them) at the threshold
    least = int(np.argmax(np.arange(num_perm + 1) / num_perm >= threshold))
    later = 1
    while later < size:
        # rows * (later + rows) pairs at most `batch`: the block's later documents against every one before its end
        stop = min(size, later + max(1, int((math.sqrt(later * later + 4 * batch) - later) / 2)))
        candidate = np.arange(stop)[None, :] < np.arange(later, stop)[:, None]
        if band:  # a pair sharing an earlier band's key is that band's
            candidate &= shared_keys(later, stop) == 0
        if candidate.sum() * 8 >= candidate.size:
            equal = equal_values(later, stop)
        else:  # most pairs are an earlier band's (copies of one page share every band): their values are not compared
            equal, (first, second) = np.zeros(candidate.shape, np.int64), np.nonzero(candidate)
            equal[first, second] = np.count_nonzero(signatures[first + later] == signatures[second], axis=1)
        counts += np.bincount(equal[candidate], minlength=num_perm + 1)
        verified = candidate & (equal >= least)
        for row in range(stop - later):
            earlier = np.flatnonzero(verified[row])
            if earlier.size:
                labels, firsts = np.unique(_roots(parent, earlier), return_index=True)
                parent[labels] = parent[later + row] = labels[0]
                earlier = earlier[firsts]
                found.append((group[earlier], np.full(len(earlier), group[later + row]),
                              equal[row, earlier] / num_perm))
        later = stop
    histogram = np.histogram(np.arange(num_perm + 1) / num_perm, bins=HISTOGRAM_BINS, range=(0, 1), weights=counts)[0]
    return found, histogram.astype(np.int64), int(counts.sum())


def equal_counts(values, batch):
    """A function (start, stop) -> the (stop - start, stop) counts of equal columns of `values`' rows start..stop
    against its rows 0..stop (the diagonal's aside). Where the classes of equal values shared by two or more rows
    are few, each row is the indicator of its classes and the counts are a product of those (BLAS, exact in
    float32: at most 16,384 ones a row); else every value is compared, a byte each (`batch` pairs at a time)."""
    columns = []
    for column in values.T:
        _values, inverse, sizes = np.unique(column, return_inverse=True, return_counts=True)
        shared = sizes[inverse.ravel()] > 1  # a value of one row alone is equal to no other row's
        columns.append((np.flatnonzero(shared), (np.cumsum(sizes > 1) - 1)[inverse.ravel()[shared]],
                        int(np.count_nonzero(sizes > 1))))
    width = sum(classes for _rows, _ids, classes in columns)
    # the indicators at most 16 bytes a pair of a block (the comparisons take a byte a value); many classes: compared
    if width > 4 * values.shape[1] or len(values) * width * 4 > 16 * batch:
        return lambda start, stop: np.count_nonzero(values[start:stop, None, :] == values[None, :stop, :], axis=2)
    indicators, offset = np.zeros((len(values), width), np.float32), 0
    for rows, ids, classes in columns:
        indicators[rows, ids + offset] = 1
        offset += classes
    return lambda start, stop: (indicators[start:stop] @ indicators[:stop].T).astype(np.int64)


def _roots(parent, members):
    """The roots of `members` in the forest `parent` (an array of each member's parent), their paths shortened."""
    roots = parent[members]
    while True:
        up = parent[roots]
        if (up == roots).all():
            parent[members] = roots
            return roots
        roots = up


def decide_step(task):
    """The decision from the steps' files: (removed listing, candidate pairs, their estimates' histogram,
    evaluation report). Holds what is proportional to the duplicates (edges, removed documents), not the corpus."""
    work, markers, corpora, bands, (exact, near, report_only), evaluation, memory, num_perm = task
    fingerprints = Fingerprints(work, markers)
    sets, eval_hashes, eval_owners, counts = evaluation
    contaminated, report = contamination(fingerprints.found() if sets else {}, eval_hashes, eval_owners, sets,
                                         counts)
    # removed as contaminated whatever else they are, so that no duplicate is listed against one of them as kept
    gone = set() if report_only else set(contaminated)
    removed = {}
    histogram, pairs = np.zeros(HISTOGRAM_BINS, np.int64), 0
    if near:
        edges = []
        for band in range(bands):
            arrays = Arrays(work, _band_name(band))
            edges.append([arrays.rows(key) for key in ("earlier", "later", "shares")])
            histogram += arrays.rows("histogram")
            pairs += int(arrays.rows("pairs")[0])
        earlier, later, shares = (np.concatenate(side) for side in zip(*edges))
        order = np.lexsort((earlier, later))
        batch = max(1, memory // (64 * num_perm))  # as band_step's (two signatures a pair, read and copied)
        removed.update(near_clusters(fingerprints, earlier[order], later[order], shares[order], batch, gone))
    if exact:
        removed.update(exact_copies(Arrays(work, EXACT), removed, gone))
    named = sorted(set(removed) | set(contaminated) | {r[1] for r in removed.values()}
                   | {r[3][0] for r in removed.values() if r[3]})
    lines = dict(zip(named, fingerprints.rows("lines", named).tolist())) if named else {}
    part_of = dict(zip(named, (np.searchsorted(fingerprints.offsets, named, "right") - 1).tolist()))
    parts = [(name, os.path.basename(p)) for name, ps in corpora for p in ps]

    def position(doc):
        corpus, part = parts[part_of[doc]]
        return {"corpus": corpus, "part": part, "line": int(lines[doc])}

    listing = []
    for doc in sorted(set(removed) | set(contaminated)):
        entry = position(doc)
        if doc in removed:
            reason, twin, estimate, via = removed[doc]
            entry.update(reason=reason, estimate=estimate, kept=position(twin))
            if via:
                entry["linked_by"] = dict(position(via[0]), estimate=via[1])
            if doc in contaminated:  # --report-only: removed as a duplicate, and the report of contamination names it
                entry["evaluation_sets"] = contaminated[doc]
        else:
            entry.update(reason="contaminated", evaluation_sets=contaminated[doc])
        listing.append(entry)
    return listing, pairs, histogram, report


def exact_copies(copies, near, gone):
    """{document: ("exact", twin, 1.0, None)} from STEPS/exact's `copies`, but for a copy whose twin is a near
    copy in `near` (exact copies are left out of the bands): ("near", the twin's kept one, the twin's estimate,
    (twin, 1.0)), listed as its twin is, not against the twin that was removed. A copy in `gone` (removed as
    contaminated) is left out: its twin is too, the same words holding the same evaluation n-grams."""
    removed = {}
    for doc, twin in zip(copies.rows("docs").tolist(), copies.rows("twins").tolist()):
        if doc in gone:
            continue
        if twin in near:
            _reason, kept, estimate, _link = near[twin]
            removed[doc] = ("near", kept, estimate, (twin, 1.0))
        else:
            removed[doc] = ("exact", twin, 1.0, None)
    return removed


def near_clusters(fingerprints, earlier, later, shares, batch, gone=frozenset()):
    """{document: ("near", kept, estimate, link)} from the verified pairs (`earlier`, `later`, by later then
    earlier): the connected components, each keeping its first document not in `gone` (removed as contaminated:
    the cluster of a contaminated first document named it as kept; those in `gone` are left out). `link` is
    (document, estimate) of the pair that put a document in its cluster when that is not the kept one."""
    root, link = {}, {}
    # each document, in order, joins the clusters of the earlier ones it verifies with: the earliest root keeps them
    bounds = np.flatnonzero(np.r_[True, later[1:] != later[:-1], True]).tolist() if later.size else []
    for start, end in zip(bounds[:-1], bounds[1:]):
        doc = int(later[start])
        roots = sorted({_find(root, other) for other in earlier[start:end].tolist()})
        root[doc] = roots[0]
        for other_root in roots[1:]:
            root[other_root] = roots[0]
            link[other_root] = (doc, None)  # the pair's estimate: below, with the others' signatures
        link[doc] = (int(earlier[start]), float(shares[start]))  # its first verified pair
    cluster = {doc: _find(root, doc) for doc in sorted(root)}
    keeper = {}  # {cluster's root: its first document not gone}
    for doc in sorted({*cluster, *cluster.values()} - gone):
        keeper.setdefault(cluster.get(doc, doc), doc)
    kept = {doc: keeper[first] for doc, first in cluster.items() if doc not in gone and keeper[first] != doc}
    # the estimates not known from the bands' files: each removed document with its kept one, and with the document
    # that linked two clusters; a batch of pairs' signatures at a time (all of them at once were 111 MiB at 1M)
    unknown = [doc for doc in kept if link[doc][0] != kept[doc] and link[doc][1] is None]
    pairs = np.array([(kept[doc], doc) for doc in kept] + [(link[doc][0], doc) for doc in unknown], np.int64)
    estimates = batched_estimates(fingerprints, pairs.reshape(-1, 2), batch).tolist()
    to_kept, linked = dict(zip(kept, estimates)), dict(zip(unknown, estimates[len(kept):]))
    removed = {}
    for doc, first in kept.items():
        via = link[doc] if link[doc][0] != first else None
        if via and via[1] is None:
            via = (via[0], linked[doc])
        removed[doc] = ("near", first, round(to_kept[doc], 4), via and (via[0], round(via[1], 4)))
    return removed


def batched_estimates(fingerprints, pairs, batch):
    """The estimated Jaccard of each of `pairs` ((pairs, 2) documents), their signatures read `batch` pairs at a
    time."""
    shares = np.empty(len(pairs))
    for start in range(0, len(pairs), batch):
        shares[start:start + batch] = pair_estimates(*pair_signatures(fingerprints, pairs[start:start + batch, 0],
                                                                      pairs[start:start + batch, 1]))
    return shares


def pair_signatures(fingerprints, earlier, later):
    """(the signatures of the documents of the pairs (`earlier[i]`, `later[i]`), each read once, and each pair's
    two rows in them)."""
    docs = np.unique(np.r_[earlier, later])
    return fingerprints.rows("signatures", docs), np.searchsorted(docs, earlier), np.searchsorted(docs, later)


def _find(root, doc):
    """The root of `doc`'s cluster (a document never joined is its own)."""
    while root.get(doc, doc) != doc:
        root[doc] = root.get(root[doc], root[doc])
        doc = root[doc]
    return doc


def contamination(found, eval_hashes, eval_owners, sets, counts):
    """Documents holding evaluation n-grams {doc: [set names]} and per set {items, found}."""
    documents, items_found = {}, [set() for _ in sets]
    for doc, hashes in sorted(found.items()):
        lo = np.searchsorted(eval_hashes, hashes, "left")
        hi = np.searchsorted(eval_hashes, hashes, "right")
        owners = np.concatenate([eval_owners[a:b] for a, b in zip(lo.tolist(), hi.tolist())])
        for index, item in {tuple(o) for o in owners.tolist()}:
            items_found[index].add(item)
        documents[doc] = sorted({sets[i] for i in set(owners[:, 0].tolist())})
    report = {name: {"items": counts[i], "found_in_training": len(items_found[i])} for i, name in enumerate(sets)}
    return documents, report


# -- pass 2: write -----------------------------------------------------------------


def write_part(task):
    """Copy a part's lines but the removed ones (line numbers, 1-based), or keep the copy that a killed run of
    the same decision completed (_start_writing removed any other); returns its manifest entry."""
    source, path, staging, drop = task
    drop = set(drop)
    if not storage.renames(path):
        # an object is uploaded whole too, but a store cannot say by whom: kept only with the bytes due
        with storage.open(source, "rb") as f:
            entry = _tally(_kept_lines(f, drop))
        if file_matches(path, entry):
            return path, entry
    elif os.path.isfile(path):
        with open(path, "rb") as f:
            return path, _tally(f)
    with storage.open(source, "rb") as f, atomic_open(path, "wb", staging) as out:
        return path, _tally(_kept_lines(f, drop), out)


def _kept_lines(part, drop):
    """The lines of the open `part` (bytes) but the blank ones and those numbered in `drop` (1-based)."""
    return (line for number, line in enumerate(part, 1) if number not in drop and line.strip())


def _tally(lines, out=None):
    """The manifest entry of a part made of `lines` (bytes), writing them to `out` when given."""
    import hashlib

    digest, size, count = hashlib.sha256(), 0, 0
    for line in lines:
        if out is not None:
            out.write(line)
        digest.update(line)
        size += len(line)
        count += 1
    return {"documents": count, "bytes": size, "sha256": digest.hexdigest()}


def plot_similarities(histogram, path, threshold, staging):
    """A PNG histogram of the candidate pairs' estimates (`histogram`: pairs per bin of HISTOGRAM_BINS over
    [0, 1]), when matplotlib is installed (the `plot` extra). Drawn by a child interpreter (`_plot_child`):
    importing matplotlib takes some 40 MiB that this process (a notebook's too) would hold to its end, more
    than all else it holds before reading a document (docs/benchmarks.md). Drawn here where no child can be."""
    job = {"path": sys.path, "histogram": histogram.tolist(), "threshold": threshold}
    png = _plot_child(job)
    if png is False:
        png = similarity_png(job)
    if png is None:
        return None
    with atomic_open(path, "wb", staging) as out:
        out.write(png)
    return os.path.basename(path)


NO_MATPLOTLIB = 3  # the child's exit status where matplotlib is not installed
# A child that has not drawn in this long (it takes about half a second) is killed, and the plot drawn here: no
# wait of the command is unbounded.
PLOT_CHILD_TIMEOUT_S = 120
# The child: this process's sys.path before anything else is imported, so it draws with the same bertprep
PLOT_CHILD = ("import json, sys; job = json.loads(sys.stdin.read()); sys.path[:] = job['path']; "
              "from bertprep.stages.dedup import similarity_png; png = similarity_png(job); "
              f"sys.stdout.buffer.write(png) if png else sys.exit({NO_MATPLOTLIB})")


def _plot_child(job):
    """similarity_png(job) from a child interpreter given this one's sys.path; False where there is no child
    (no sys.executable), it failed or it did not end within PLOT_CHILD_TIMEOUT_S: drawn here then, which raises
    what the child met."""
    if not sys.executable:
        return False
    import subprocess

    try:
        child = subprocess.run([sys.executable, "-c", PLOT_CHILD], input=json.dumps(job).encode(), capture_output=True,
                               timeout=PLOT_CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False
    if child.returncode == NO_MATPLOTLIB:
        return None
    return child.stdout if child.returncode == 0 else False


def similarity_png(job):
    """The PNG bytes of plot_similarities' histogram (`job`: its histogram and threshold), or None without
    matplotlib."""
    try:  # a Figure of its own, not pyplot: a notebook's backend is left as it is
        from matplotlib.figure import Figure
    except ImportError:
        return None
    import io

    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    edges = np.linspace(0, 1, HISTOGRAM_BINS + 1)
    axes.hist(edges[:-1], bins=edges, weights=np.array(job["histogram"], np.int64))
    axes.axvline(job["threshold"], color="red", linestyle="--", label=f"threshold {job['threshold']}")
    axes.set_xlabel("estimated Jaccard of LSH candidate pairs")
    axes.set_ylabel("pairs")
    axes.legend()
    png = io.BytesIO()
    figure.savefig(png, format="png", metadata={"Software": None})
    return png.getvalue()


# -- the command -------------------------------------------------------------------


def dedup(options: DedupOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Deduplicate (and decontaminate) formatted corpora (`DedupOptions`, or its fields as keywords); the
    summary `--json` prints. A complete output of the same inputs and settings is left as it is."""
    options = build_options(DedupOptions, options, fields)
    workdir = resolve_workdir(options.workdir)
    corpora, input_paths = resolve_inputs(workdir, options)
    given_out = options.out or stage_dir(workdir, "deduped")
    out = storage.absolute(given_out)
    if storage.isfile(out):  # was the OSError "OUT: Not a directory" (exit 1), after the evaluation sets were read
        # named as given, as every other stage's --out is (it showed the absolute path)
        raise UsageError(f"--out {storage.display(given_out)}: is a file; give the directory to write the corpora "
                         "to")
    # squad and glue are read from WORKDIR/download: compared as names, `--out .` "held the input squad"
    evaluation_paths = [evaluation_source(workdir, d) for d in options.decontaminate]
    refuse_overlap(out, [*(options.input or ()), *(p for _name, parts in corpora for p in parts), *evaluation_paths])
    params = {"ngram": options.ngram, "num_perm": options.num_perm, "threshold": options.threshold,
              "bands_rows": list(options.band_rows()), "exact": options.exact, "near": options.near,
              "decontaminate": [storage.display(d) for d in options.decontaminate],
              "decontaminate_ngram": options.decontaminate_ngram,
              # the values of datasketch 2's MinHash ("affine32"), computed here; manifests name them as before
              "report_only": options.report_only, "minhash": f"datasketch xxh32 seed {MINHASH_SEED}",
              "exact_hash": "xxh64 of NFC casefold whitespace-collapsed text"}
    refuse_if_held(out)  # before every input and evaluation file is hashed (minutes for a large corpus)
    digests = evaluation_digests(workdir, options)
    if digests:  # what the evaluation files held: a changed file is other settings, not a complete output
        params["decontaminate_sha256"] = digests
    input_list = [{"corpus": name, "path": storage.display(p), "bytes": storage.getsize(p), "sha256": sha256_file(p)}
                  for name, parts in corpora for p in parts]
    # a bad evaluation file stops before anything is written
    evaluation, evaluation_warnings = evaluation_ngrams(workdir, options)
    earlier = check_output_parts(out, corpora, load_manifest(out))  # before the work, as the checks above
    warnings = settings_warnings(options, machine_memory()) + evaluation_warnings
    # a corpus's text in a .txt beside its parts was left out without a word, as tokenize and create say
    unread = unread_files_warning(input_paths, [(part, None) for _name, parts in corpora for part in parts],
                                  rule="a corpus directory's documents are the *.jsonl parts under it")
    warnings += [unread] if unread else []
    # a Python caller hears of them once, as the BertprepWarning bertprep.dedup raises (Progress.warn)
    for warning in warnings if ON_COMMAND_LINE.get() and not quiet else []:
        print(f"dedup: warning: {warning}", file=sys.stderr)
    if options.dry_run:
        with _dry_run_steps(out, options.engine) as (steps, staging), open_engine(options.engine) as engine:
            manifest = _decide(options, engine, evaluation, corpora, input_list, params, quiet, steps, staging)[0]
        return _summary("bertprep dedup: dry run, nothing written", manifest, out, warnings=warnings)
    with hold(out, "bertprep dedup") as staging:
        previous = load_manifest(out)
        if _is_complete(previous, out, params, input_list):
            return _summary(f"bertprep dedup: {storage.display(out)} is already complete", previous, out,
                            complete_before=True, warnings=warnings)
        if earlier:  # said, not silent (issue 57)
            warnings.append(removed_warning(earlier))
            for relative in earlier:
                storage.remove(storage.join(out, relative))
            remove_empty_folders(out, earlier)
        with open_engine(options.engine) as engine:  # one engine (one Dask cluster) for both passes
            if _is_resumable(previous, params, input_list):
                manifest = previous  # a killed run's decision: pass 1 is not done again, its written parts kept
                if not quiet:
                    print(f"dedup: resuming the run that was writing {storage.display(out)}", file=sys.stderr)
            else:
                steps = _open_steps(Folder(staging).folder(STEPS), params, input_list, staging)
                manifest, histogram = _decide(options, engine, evaluation, corpora, input_list, params, quiet,
                                              steps, staging)
                _start_writing(out, corpora, manifest, histogram, options.threshold, staging)
            _write(engine, corpora, _drops(manifest["removed"], corpora, options.report_only), out, staging,
                   manifest)
        del manifest[WRITING]
        _save_manifest(out, manifest, staging)
        Folder(staging).remove_tree(STEPS)
    return _summary("bertprep dedup: done", manifest, out, warnings=warnings)


def check_output_parts(out, corpora, previous):
    """The .jsonl files in this run's output corpus folders (OUT/<corpus>/) that it does not write, which an
    earlier dedup into OUT wrote (its manifest's inputs or files name them): to be removed, and said. Any other
    .jsonl there is refused: `bertprep shard --input OUT/<corpus>` reads every part of the folder, and read a
    stray file into training with the deduplicated ones (issue 57). Another stage's manifest in OUT is refused:
    the files it lists were removed as an earlier dedup's, and the manifest replaced."""
    if previous is not None and previous.get("stage") != "dedup":
        raise DataError(f"{storage.display(storage.join(out, MANIFEST))}: a manifest of bertprep "
                        f"{previous.get('stage') or 'another tool'}, not of dedup: dedup would replace it and remove "
                        "the files it lists; choose another --out")
    previous = previous or {}
    earlier = {f"{entry.get('corpus')}/{os.path.basename(entry.get('path', ''))}"
               for entry in previous.get("inputs") or () if isinstance(entry, dict)} | set(previous.get("files") or ())
    removed = []
    for name, parts in corpora:
        folder = Folder(storage.join(out, name))
        mine = {os.path.basename(p) for p in parts}
        for part in sorted(folder.names_in()) if folder.isdir() else ():
            if not part.endswith(".jsonl") or part.startswith(".") or part in mine:
                continue
            if f"{name}/{part}" not in earlier:
                raise UsageError(f"--out {storage.display(out)}: {folder.display(part)} is no part of this run nor "
                                 "of an earlier dedup into it: `bertprep shard` would read it with the deduplicated "
                                 "parts; remove it or choose another --out")
            removed.append(f"{name}/{part}")
    return removed + earlier_corpora(out, {name for name, _parts in corpora}, earlier)


def remove_empty_folders(out, removed):
    """OUT/<corpus>/ of the `removed` files, where nothing is left in it (a store has no folders to remove)."""
    for corpus in sorted({relative.split("/")[0] for relative in removed}):
        storage.remove_if_empty(storage.join(out, corpus))


def earlier_corpora(out, names, earlier):
    """The parts and corpus manifests an earlier dedup into OUT wrote for corpora that this run does not write:
    a rerun with fewer inputs left OUT/<dropped>/ whole, manifest and all, and `bertprep shard --input OUT/*`
    read it with this run's corpora. Only what that run's manifest listed (and the corpus manifest it wrote)."""
    dropped = sorted({entry.split("/")[0] for entry in earlier if "/" in entry} - names)
    files = sorted(entry for entry in earlier if entry.split("/")[0] in dropped)
    files += [f"{corpus}/{MANIFEST}" for corpus in dropped]
    return [relative for relative in files if storage.exists(storage.join(out, relative))]


@contextlib.contextmanager
def _dry_run_steps(out, engine):
    """(Folder, staging) for a dry run's steps, removed after: a temporary directory, so OUT is not made; on the
    user's Dask cluster, whose workers may share only OUT, OUT/.partial/dry-run (held as a run holds OUT)."""
    if not engine.scheduler:
        with tempfile.TemporaryDirectory(prefix="bertprep-dedup-") as steps:
            yield Folder(steps), None
        return
    with hold(out, "bertprep dedup --dry-run") as staging:
        steps = Folder(staging).folder("dry-run")
        try:
            yield steps, staging
        finally:
            steps.remove_tree()


RUN = "run.json"  # in STEPS: the settings, inputs and version its files are of


def _open_steps(steps, params, input_list, staging):
    """`steps` (OUT/.partial/steps), keeping what a killed run of the same settings, inputs and bertprep version
    finished there."""
    run = json.dumps({"params": params, "inputs": input_list, "version": __version__}, sort_keys=True).encode()
    if not steps.isfile(RUN) or steps.read_bytes(RUN) != run:
        steps.remove_tree()
        steps.atomic_write_bytes(RUN, run, staging)
    return steps


def _is_complete(manifest, out, params, input_list):
    if (not manifest or WRITING in manifest or manifest.get("params") != params
            or manifest.get("inputs") != input_list):
        return False
    return all(file_matches(storage.join(out, relpath), entry) for relpath, entry in manifest["files"].items())


def _is_resumable(manifest, params, input_list):
    """Whether `manifest` is the decision of a run of these settings and inputs killed while writing parts."""
    return bool(manifest) and WRITING in manifest and manifest.get("params") == params and \
        manifest.get("inputs") == input_list


def _start_writing(out, corpora, manifest, histogram, threshold, staging):
    """Remove what an earlier run left under the names this one writes, draw the plot, and save the manifest
    marked as writing: from then on a part under its final name is complete and of this decision (written
    whole, then renamed), so a rerun after a kill keeps it and skips pass 1."""
    stale = [storage.join(out, MANIFEST)]  # first: nothing may look complete while parts are rewritten
    for name, parts in corpora:
        stale += [storage.join(out, name, MANIFEST)] + [storage.join(out, name, os.path.basename(p)) for p in parts]
    for path in stale:
        storage.remove(path)
    if histogram.any() and plot_similarities(histogram, storage.join(out, PLOT), threshold, staging):
        manifest["plot"] = PLOT
    manifest[WRITING] = "the parts are being written; those under their final names are complete"
    _save_manifest(out, manifest, staging)


def _save_manifest(out, manifest, staging):
    """save_manifest's bytes, encoded a piece at a time: the listing of removed documents (about 1 KB each) is
    never one string in memory."""
    with atomic_open(storage.join(out, MANIFEST), "wb", staging) as f:
        for chunk in json.JSONEncoder(indent=1, sort_keys=True).iterencode(manifest):
            f.write(chunk.encode())
        f.write(b"\n")


def _drops(listing, corpora, report_only):
    """{part path: the line numbers it loses}: the listed documents (contaminated ones unless --report-only)."""
    path_of = {(name, os.path.basename(p)): p for name, parts in corpora for p in parts}
    drops = {p: [] for _name, parts in corpora for p in parts}
    for entry in listing:
        if entry["reason"] != "contaminated" or not report_only:
            drops[path_of[entry["corpus"], entry["part"]]].append(entry["line"])
    return drops


def _decide(options, engine, evaluation, corpora, input_list, params, quiet, steps, staging):
    """(manifest without files, the candidate pairs' histogram of estimates): pass 1, then the steps on the
    engine (exact, one per band, the decision), each reading the files of those before it in `steps`."""
    start = time.monotonic()
    sets, eval_hashes, eval_owners, counts = evaluation
    parts = [p for _name, ps in corpora for p in ps]
    # a killed run's fingerprinted parts: counted from the start, not as done now (a resumed run's rate and its
    # documents and bytes were of work it did not do)
    resumed = _resumed_parts(steps, len(parts))
    progress = Progress("dedup", total=len(parts), unit="parts", quiet=quiet, initial=len(resumed))
    memory, (bands, rows) = options.memory_bytes(), options.band_rows()
    tasks = [(p, index, steps, options.ngram, options.num_perm, (bands, rows), eval_hashes,
              options.decontaminate_ngram, memory, staging) for index, p in enumerate(parts)]
    markers = [None] * len(parts)
    for index, marker in engine.run_indexed(fingerprint_part, tasks, describe=lambda t: t[0]):
        markers[index] = marker
        if index not in resumed:
            progress.advance(1, bytes=marker["bytes"], documents=marker["documents"])
    progress.close()
    markers = [{"documents": m["documents"], "starts": m["starts"]} for m in markers]
    if options.exact:
        _run_all(engine, exact_step, [(steps, markers, memory, staging)])
    if options.near:
        _run_all(engine, band_step, [(steps, markers, band, (bands, rows), options.num_perm, options.threshold,
                                      options.exact, memory, staging) for band in range(bands)])
    task = (steps, markers, corpora, bands, (options.exact, options.near, options.report_only),
            (sets, eval_hashes, eval_owners, counts), memory, options.num_perm)
    listing, pairs, histogram, report = _run_all(engine, decide_step, [task])[0]
    drops = _drops(listing, corpora, options.report_only)
    per_corpus = corpus_counts(corpora, dict(zip(parts, (m["documents"] for m in markers))), listing, drops)
    manifest = {"tool": "bertprep", "version": __version__, "stage": "dedup", "params": params,
                "inputs": input_list, "corpora": per_corpus, "removed": listing, "evaluation": report,
                "candidate_pairs": pairs, "seconds": round(time.monotonic() - start, 3)}
    return manifest, histogram


def corpus_counts(corpora, documents, listing, drops):
    """{corpus: its documents (`documents`: by part), exact and near copies, contaminated documents and kept ones}
    from one pass over the removed `listing`: a pass per corpus was 73 s of a run's 265 s with 2,000 .jsonl files
    as --input (each its own corpus) and 80,000 documents removed."""
    counts = {name: {"documents": sum(documents[p] for p in parts), "exact": 0, "near": 0, "contaminated": 0}
              for name, parts in corpora}
    for entry in listing:
        tally = counts[entry["corpus"]]
        if entry["reason"] in ("exact", "near"):
            tally[entry["reason"]] += 1
        # every document holding evaluation n-grams, a --report-only duplicate too (listed as one, with its sets)
        tally["contaminated"] += "evaluation_sets" in entry
    for name, parts in corpora:
        counts[name]["kept"] = counts[name]["documents"] - sum(len(drops[p]) for p in parts)
    return counts


def _run_all(engine, function, tasks):
    """[function(task) for task in tasks] on the engine, in the tasks' order."""
    results = [None] * len(tasks)
    for index, result in engine.run_indexed(function, tasks, describe=lambda t: function.__name__):
        results[index] = result
    return results


def _write(engine, corpora, drops, out, staging, manifest):
    tasks, owners = [], []
    for name, parts in corpora:
        directory = storage.join(out, name)
        storage.makedirs(directory)
        for part in parts:
            tasks.append((part, storage.join(directory, os.path.basename(part)), staging, sorted(drops[part])))
            owners.append(name)
    files = {name: {} for name, _parts in corpora}
    for index, (path, entry) in engine.run_indexed(write_part, tasks, describe=lambda t: t[0]):
        files[owners[index]][os.path.basename(path)] = dict(entry, source=storage.display(tasks[index][0]))
    for name, entries in files.items():
        from bertprep.stages.download.formatted import FORMAT

        save_manifest(storage.join(out, name), {"tool": "bertprep", "version": __version__, "stage": "format",
                                                "corpus": name, "source": "bertprep dedup", "format": FORMAT,
                                                "files": dict(sorted(entries.items()))})
    manifest["files"] = {f"{name}/{part}": entry for name, entries in files.items()
                         for part, entry in sorted(entries.items())}


def _summary(title_or_prefix, manifest, out, complete_before=False, warnings=()):
    corpora = manifest["corpora"]
    fields = {"out": storage.display(out), "corpora": corpora, "evaluation": manifest["evaluation"],
              "documents": sum(c["documents"] for c in corpora.values()),
              "kept": sum(c["kept"] for c in corpora.values()),
              "exact": sum(c["exact"] for c in corpora.values()),
              "near": sum(c["near"] for c in corpora.values()),
              "contaminated": sum(c["contaminated"] for c in corpora.values()),
              "candidate_pairs": manifest["candidate_pairs"]}
    rows = [(name, f"{c['documents']:,} documents, {c['kept']:,} kept ({c['exact']:,} exact, {c['near']:,} near, "
                   f"{c['contaminated']:,} contaminated)") for name, c in corpora.items()]
    rows += [(f"eval {name}", f"{r['found_in_training']:,} of {r['items']:,} items found in training")
             for name, r in manifest["evaluation"].items()]
    rows.append(("output", storage.display(out)))
    if warnings:  # absent otherwise: today's --json
        fields["warnings"] = list(warnings)
        rows += [("warning", warning) for warning in warnings]
    return Summary(title_or_prefix, fields, rows=tuple(rows), complete_before=complete_before)
