"""`bertprep dedup`: remove exact and near-duplicate documents (and, on request, evaluation text) from
formatted corpora before they are sharded.

    OUT/<corpus>/<part>.jsonl     the kept documents of each input part, bytes as read
    OUT/<corpus>/manifest.json    a formatted corpus manifest, so `bertprep shard --input OUT/<corpus>` takes it
    OUT/manifest.json             what was removed and why, counts per corpus; marked "writing" while the
                                  parts are written
    OUT/pair_similarity.png       histogram of the candidate pairs' estimated Jaccard (with matplotlib)

Two passes over the inputs, each a pure task per input file on the engine:

1. Fingerprint: per document an xxh64 of its normalized text (NFC, case-folded, whitespace collapsed), a
   MinHash (datasketch, xxh32 of each word n-gram shingle), its LSH band keys (xxh64 of each band's values)
   and the evaluation n-grams it contains. This process holds them as one array each, about 0.6 KB per
   document, never a Python object per document.
2. Write: each part without its removed lines. Before it, the decision is saved as OUT/manifest.json marked
   "writing"; a rerun after a kill takes the decision from there (pass 1 is not done again) and keeps every
   part already under its final name (each is written whole, then renamed).

Between them, in this process and in the stable order (corpus order on the command line, then the
document's position in its corpus: part name, line), a document is removed when an earlier document has
the same exact hash, or when it is in a near-duplicate cluster that starts earlier: clusters are connected
by pairs that share an LSH band AND whose estimated Jaccard (the share of equal MinHash values) is at least
the threshold, so a band collision alone never removes a document. The first document of each cluster is
kept. Nothing depends on the worker count or the engine.
"""

import array
import dataclasses
import json
import os
import re
import sys
import time
import unicodedata
from typing import Any

import numpy as np

from bertprep import __version__, storage
from bertprep.atomic import atomic_open, hold, sha256_file, walk
from bertprep.engines import EngineOptions, open_engine
from bertprep.errors import DataError, UsageError
from bertprep.options import build_options, check_types, errors_name_fields, normalise_paths, refuse_overlap
from bertprep.progress import Progress, Summary
from bertprep.workdir import (
    MANIFEST,
    check_corpus_name,
    file_matches,
    load_manifest,
    resolve_workdir,
    save_manifest,
    stage_dir,
)

PLOT = "pair_similarity.png"
WRITING = "writing"  # in OUT/manifest.json while the parts are written (a killed run's decision, for its rerun)
MINHASH_SEED = 1
WORD = re.compile(r"\w+")


@errors_name_fields
@dataclasses.dataclass(frozen=True)
class DedupOptions:
    """`bertprep dedup`'s flags: `input` (formatted corpus directories or .jsonl files, in order) or `corpus`
    (names under WORKDIR/formatted), `out` (None: WORKDIR/deduped), `ngram` (shingle words), `num_perm`,
    `threshold` (Jaccard), `bands` (None: datasketch's optimum for the threshold), `exact`/`near` (which
    duplicates to remove), `decontaminate` (squad, glue or evaluation files), `decontaminate_ngram`,
    `report_only` (list contaminated documents, keep them), `dry_run` and where the tasks run (`engine`)."""

    input: tuple[str, ...] | None = None
    corpus: tuple[str, ...] | None = None
    out: str | None = None
    ngram: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    bands: int | None = None
    exact: bool = True
    near: bool = True
    decontaminate: tuple[str, ...] = ()
    decontaminate_ngram: int = 13
    report_only: bool = False
    dry_run: bool = False
    engine: EngineOptions = EngineOptions()
    workdir: str | None = None

    def __post_init__(self):
        check_types(self)
        normalise_paths(self, "input", "out", "workdir")
        if self.corpus is not None:
            object.__setattr__(self, "corpus", tuple(self.corpus))
        object.__setattr__(self, "decontaminate", tuple(os.fspath(d) for d in self.decontaminate))
        if self.input and self.corpus:
            raise UsageError("give --input or --corpus, not both")
        if self.ngram < 1 or self.decontaminate_ngram < 1:
            raise UsageError("--ngram and --decontaminate-ngram must be at least 1")
        if self.num_perm < 2:
            raise UsageError("--num-perm must be at least 2")
        if not 0 < self.threshold <= 1:
            raise UsageError("--threshold must be in (0, 1]")
        if self.bands is not None and not 1 <= self.bands <= self.num_perm:
            raise UsageError(f"--bands must be in [1, --num-perm], not {self.bands}")
        if self.report_only and not self.decontaminate:
            raise UsageError("--report-only needs --decontaminate")

    def band_rows(self) -> tuple[int, int]:
        """(bands, rows per band)."""
        if self.bands is not None:
            return self.bands, self.num_perm // self.bands
        from datasketch.lsh import _optimal_param

        return _optimal_param(self.threshold, self.num_perm, 0.5, 0.5)


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


# Shingles hashed into a MinHash at a time: datasketch permutes a batch as one (num_perm, batch) uint64 array,
# so one 50 MB line (8 million shingles) took 8 GB at once (issue 39). The minimum over the pieces is the
# minimum over the whole: the same signature, for 64 MiB at most (128 permutations).
SHINGLE_BATCH = 1 << 16


def ngram_hashes(words, n):
    import xxhash

    count = max(len(words) - n + 1, 1)
    return np.fromiter((xxhash.xxh64_intdigest(g) for start in range(0, count, SHINGLE_BATCH)
                        for g in ngrams(words, n, start, start + SHINGLE_BATCH)), np.uint64)


# -- inputs ------------------------------------------------------------------------


def resolve_inputs(workdir, options):
    """[(corpus name, [part paths])] in the command line's order."""
    if options.input:
        paths = list(options.input)
    else:
        formatted = stage_dir(workdir, "formatted")
        names = options.corpus or (sorted(storage.listdir(formatted)) if storage.isdir(formatted) else [])
        if not names:
            raise UsageError(f"{storage.display(formatted)}: no formatted corpus (run `bertprep download` first or "
                             "give --input)")
        paths = [storage.join(formatted, name) for name in names]
    corpora = []
    for path in paths:
        if storage.isdir(path):
            if not storage.isfile(storage.join(path, MANIFEST)):
                raise DataError(f"{storage.display(path)}: no {MANIFEST}: not a formatted corpus (expected the "
                                "directory `bertprep download` writes)")
            parts = sorted(storage.join(root, name) for root, _dirs, names in walk(path) for name in names
                           if name.endswith(".jsonl") and not name.startswith("."))
            names = [os.path.basename(p) for p in parts]
            if len(set(names)) != len(names):  # the output corpus is flat, as `bertprep download` writes them
                twice = sorted(n for n in names if names.count(n) > 1)[0]
                raise UsageError(f"--input {storage.display(path)}: two parts named {twice} in its subdirectories")
            corpora.append((os.path.basename(storage.normpath(path)), [storage.absolute(p) for p in parts]))
        elif storage.isfile(path) and path.endswith(".jsonl"):
            corpora.append((os.path.basename(path)[:-len(".jsonl")], [storage.absolute(path)]))
        else:
            raise storage.not_found(path, UsageError(f"--input {storage.display(path)}: not a formatted corpus "
                                                     "directory or .jsonl file"))
    names = [check_corpus_name(name) for name, _parts in corpora]
    if len(set(names)) != len(names):
        raise UsageError(f"--input: two inputs named {sorted(n for n in names if names.count(n) > 1)[0]!r}")
    return corpora


# -- evaluation sets ---------------------------------------------------------------


def evaluation_files(workdir, name):
    """[(set label, [item texts])]: one per dev/test file of the `squad` or `glue` download in WORKDIR (its
    training files are not evaluation text), or a SQuAD JSON / GLUE TSV / text file."""
    if name in ("squad", "glue"):
        directory = storage.join(workdir, "download", name)
        files = sorted(storage.join(root, f) for root, _d, names in walk(directory) for f in names
                       if f.endswith((".json", ".tsv")) and f != MANIFEST
                       and not f.startswith("train")) if storage.isdir(directory) else []
        if not files:
            raise UsageError(f"--decontaminate {name}: no dev/test file in {storage.display(directory)} (run "
                             f"`bertprep download {name}` first)")
        return [(f"{name}/{storage.relpath(path, directory)}", file_items(path)) for path in files]
    storage.require(name, "file", UsageError(f"--decontaminate {storage.display(name)}: not squad, glue or a file"))
    return [(os.path.basename(name), file_items(name))]


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
        rows = (line.split("\t") for line in text.splitlines()[1:] if line.strip())
        return [text for text in ("\n".join(f for f in row if " " in f.strip()) for row in rows) if text]
    if path.endswith(".txt"):
        return [block for block in re.split(r"\n\s*\n", text) if block.strip()]
    raise DataError(f"{storage.display(path)}: expected a SQuAD .json, GLUE .tsv or .txt evaluation file, "
                    f"not {os.path.splitext(path)[1] or 'a file without extension'}")


def squad_items(path, text):
    """Every distinct context of a SQuAD JSON file (its questions are asked of it)."""
    try:
        data = json.loads(text)["data"]
        contexts = [p["context"] for article in data for p in article["paragraphs"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{storage.display(path)}: expected SQuAD JSON (data[].paragraphs[].context), not this "
                        f"({type(exc).__name__}: {exc})") from None
    if not all(isinstance(c, str) for c in contexts):
        raise DataError(f"{storage.display(path)}: data[].paragraphs[].context: expected strings")
    return list(dict.fromkeys(contexts))


def evaluation_ngrams(workdir, options):
    """(set labels, sorted n-gram hashes, (set index, item index) of each hash, items per set)."""
    sets, hashes, owners, counts = [], [], [], []
    for label, items in (entry for name in options.decontaminate for entry in evaluation_files(workdir, name)):
        sets.append(label)
        counts.append(len(items))
        for item, text in enumerate(items):
            # per line: a GLUE pair's two sentences never run on into each other in training text
            h = np.concatenate([ngram_hashes(normalized_words(line), options.decontaminate_ngram)
                                for line in text.split("\n")])
            hashes.append(h)
            owners.append(np.full((len(h), 2), (len(sets) - 1, item), np.int64))
    if not hashes:
        return sets, np.zeros(0, np.uint64), np.zeros((0, 2), np.int64), counts
    hashes, owners = np.concatenate(hashes), np.concatenate(owners)
    order = np.argsort(hashes, kind="stable")
    return sets, hashes[order], owners[order], counts


# -- pass 1: fingerprints ----------------------------------------------------------


def fingerprint(text, words, ngram, num_perm):
    """(xxh64 of the normalized text, MinHash values of its word n-gram shingles as uint32): what exact and
    near duplicates are found by (`bertprep shard --eval-documents` checks its training documents with it)."""
    import datasketch
    import xxhash

    minhash = datasketch.MinHash(num_perm=num_perm, seed=MINHASH_SEED, hashfunc=xxhash.xxh32_intdigest)
    for start in range(0, max(len(words) - ngram + 1, 1), SHINGLE_BATCH):
        minhash.update_batch(ngrams(words, ngram, start, start + SHINGLE_BATCH))
    return xxhash.xxh64_intdigest(normalized_text(text).encode("utf-8")), minhash.hashvalues.astype(np.uint32)


def fingerprint_part(task):
    """Per document of one part: exact hash, MinHash values, LSH band keys, line number; and {document index in
    the part: evaluation n-grams found} for the documents holding any (pure)."""
    path, ngram, num_perm, (bands, rows), eval_hashes, eval_ngram = task
    from bertprep.stages.download.formatted import iter_documents

    # packed as they come (8 bytes a hash, 512 a signature), not a Python object per document
    exact, signatures, contaminated, lines = array.array("Q"), bytearray(), {}, array.array("q")
    for number, doc in iter_documents(path):
        text = doc["text"]
        words = normalized_words(text)
        exact_hash, signature = fingerprint(text, words, ngram, num_perm)
        if eval_hashes.size:
            found = np.unique(ngram_hashes(words, eval_ngram))
            found = found[np.isin(found, eval_hashes)]
            if found.size:
                contaminated[len(exact)] = found
        exact.append(exact_hash)
        signatures += signature.tobytes()
        lines.append(number)
    signatures = np.frombuffer(signatures, np.uint32).reshape(-1, num_perm)
    return (path, np.frombuffer(exact, np.uint64), signatures, band_keys(signatures, bands, rows), contaminated,
            np.frombuffer(lines, np.int64), storage.getsize(path))


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
        docs, column = members[order], column[order]
        starts = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])
        ends = np.r_[starts[1:], len(column)]
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


def candidate_pairs(keys, members, documents):
    """(earlier, later): the pairs of `members` that share an LSH band, each once, by later then earlier document."""
    codes = [group[j] * documents + group[i] for group in band_groups(keys, members)
             for i, j in [np.triu_indices(len(group), 1)]]
    codes = np.unique(np.concatenate(codes)) if codes else np.zeros(0, np.int64)
    return codes % documents, codes // documents


def find_duplicates(exact, signatures, keys, options):
    """{document: (reason, kept twin, estimate, link)} and every candidate pair's estimate, in the stable order.

    Near duplicates form clusters: the connected components of the pairs that share an LSH band AND have an
    estimated Jaccard >= the threshold; each keeps its first document. `link` is (document, estimate) of the
    pair that put a document in its cluster when that is not the kept one."""
    removed, documents = {}, len(exact)
    eligible = np.arange(documents)
    if options.exact:
        twins = np.unique(exact, return_index=True, return_inverse=True)[1:]
        twins = twins[0][twins[1].ravel()]  # each document's first document with its exact hash
        for doc in np.flatnonzero(twins != eligible).tolist():
            removed[doc] = ("exact", int(twins[doc]), 1.0, None)
        eligible = np.flatnonzero(twins == eligible)  # an exact copy is left out: its twin stands for it
    if not options.near:
        return removed, np.zeros(0)
    earlier, later = candidate_pairs(keys, eligible, documents)
    shares = pair_estimates(signatures, earlier, later)
    verified = shares >= options.threshold
    earlier, later, verified_shares = earlier[verified], later[verified], shares[verified]
    root, link = {}, {}
    # each document, in order, joins the clusters of the earlier ones it verifies with: the earliest root keeps them
    bounds = np.flatnonzero(np.r_[True, later[1:] != later[:-1], True]).tolist() if later.size else []
    for start, end in zip(bounds[:-1], bounds[1:]):
        doc = int(later[start])
        roots = sorted({_find(root, other) for other in earlier[start:end].tolist()})
        root[doc] = roots[0]
        for other_root in roots[1:]:
            root[other_root] = roots[0]
            link[other_root] = (doc, float(np.mean(signatures[doc] == signatures[other_root])))
        link[doc] = (int(earlier[start]), float(verified_shares[start]))  # its first verified pair
    for doc in sorted(root):
        kept = _find(root, doc)
        if kept != doc:
            estimate = round(float(np.mean(signatures[kept] == signatures[doc])), 4)
            via = link[doc] if link[doc][0] != kept else None
            removed[doc] = ("near", kept, estimate, via and (via[0], round(via[1], 4)))
    return removed, shares


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


def plot_similarities(estimates, path, threshold, staging):
    """A PNG histogram of the verified pairs' estimates, when matplotlib is installed (the `plot` extra)."""
    try:  # a Figure of its own, not pyplot: a notebook's backend is left as it is
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    axes.hist(estimates, bins=50, range=(0, 1))
    axes.axvline(threshold, color="red", linestyle="--", label=f"threshold {threshold}")
    axes.set_xlabel("estimated Jaccard of LSH candidate pairs")
    axes.set_ylabel("pairs")
    axes.legend()
    with atomic_open(path, "wb", staging) as out:
        figure.savefig(out, format="png", metadata={"Software": None})
    return os.path.basename(path)


# -- the command -------------------------------------------------------------------


def dedup(options: DedupOptions | None = None, /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Deduplicate (and decontaminate) formatted corpora (`DedupOptions`, or its fields as keywords); the
    summary `--json` prints. A complete output of the same inputs and settings is left as it is."""
    options = build_options(DedupOptions, options, fields)
    workdir = resolve_workdir(options.workdir)
    corpora = resolve_inputs(workdir, options)
    out = storage.absolute(options.out or stage_dir(workdir, "deduped"))
    refuse_overlap(out, [*(options.input or ()), *(p for _name, parts in corpora for p in parts),
                         *options.decontaminate])
    params = {"ngram": options.ngram, "num_perm": options.num_perm, "threshold": options.threshold,
              "bands_rows": list(options.band_rows()), "exact": options.exact, "near": options.near,
              "decontaminate": [storage.display(d) for d in options.decontaminate],
              "decontaminate_ngram": options.decontaminate_ngram,
              "report_only": options.report_only, "minhash": f"datasketch xxh32 seed {MINHASH_SEED}",
              "exact_hash": "xxh64 of NFC casefold whitespace-collapsed text"}
    input_list = [{"corpus": name, "path": storage.display(p), "bytes": storage.getsize(p), "sha256": sha256_file(p)}
                  for name, parts in corpora for p in parts]
    evaluation = evaluation_ngrams(workdir, options)  # a bad evaluation file stops before anything is written
    if options.dry_run:
        with open_engine(options.engine) as engine:
            manifest = _decide(options, engine, evaluation, corpora, input_list, params, quiet)[0]
        return _summary("bertprep dedup: dry run, nothing written", manifest, out)
    with hold(out, "bertprep dedup") as staging:
        previous = load_manifest(out)
        if _is_complete(previous, out, params, input_list):
            return _summary(f"bertprep dedup: {storage.display(out)} is already complete", previous, out,
                            complete_before=True)
        with open_engine(options.engine) as engine:  # one engine (one Dask cluster) for both passes
            if _is_resumable(previous, params, input_list):
                manifest = previous  # a killed run's decision: pass 1 is not done again, its written parts kept
                if not quiet:
                    print(f"dedup: resuming the run that was writing {storage.display(out)}", file=sys.stderr)
            else:
                manifest, estimates = _decide(options, engine, evaluation, corpora, input_list, params, quiet)
                _start_writing(out, corpora, manifest, estimates, options.threshold, staging)
            _write(engine, corpora, _drops(manifest["removed"], corpora, options.report_only), out, staging,
                   manifest)
        del manifest[WRITING]
        _save_manifest(out, manifest, staging)
    return _summary("bertprep dedup: done", manifest, out)


def _is_complete(manifest, out, params, input_list):
    if (not manifest or WRITING in manifest or manifest.get("params") != params
            or manifest.get("inputs") != input_list):
        return False
    return all(file_matches(storage.join(out, relpath), entry) for relpath, entry in manifest["files"].items())


def _is_resumable(manifest, params, input_list):
    """Whether `manifest` is the decision of a run of these settings and inputs killed while writing parts."""
    return bool(manifest) and WRITING in manifest and manifest.get("params") == params and \
        manifest.get("inputs") == input_list


def _start_writing(out, corpora, manifest, estimates, threshold, staging):
    """Remove what an earlier run left under the names this one writes, draw the plot, and save the manifest
    marked as writing: from then on a part under its final name is complete and of this decision (written
    whole, then renamed), so a rerun after a kill keeps it and skips pass 1."""
    stale = [storage.join(out, MANIFEST)]  # first: nothing may look complete while parts are rewritten
    for name, parts in corpora:
        stale += [storage.join(out, name, MANIFEST)] + [storage.join(out, name, os.path.basename(p)) for p in parts]
    for path in stale:
        storage.remove(path)
    if len(estimates) and plot_similarities(estimates, storage.join(out, PLOT), threshold, staging):
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


def _decide(options, engine, evaluation, corpora, input_list, params, quiet):
    """(manifest without files, every candidate pair's estimate)."""
    start = time.monotonic()
    sets, eval_hashes, eval_owners, counts = evaluation
    parts = [p for _name, ps in corpora for p in ps]
    progress = Progress("dedup", total=len(parts), unit="parts", quiet=quiet)
    tasks = [(p, options.ngram, options.num_perm, options.band_rows(), eval_hashes, options.decontaminate_ngram)
             for p in parts]
    results = [None] * len(parts)
    for index, result in engine.run_indexed(fingerprint_part, tasks, describe=lambda t: t[0]):
        results[index] = result
        progress.advance(1, bytes=result[6], documents=len(result[1]))
    progress.close()
    result = None  # the last part's arrays: _gather frees each part once copied
    part_of, exact, signatures, keys, lines, found = _gather(results, options)
    removed, estimates = find_duplicates(exact, signatures, keys, options)
    del signatures, keys
    contaminated, report = contamination(found, eval_hashes, eval_owners, sets, counts)
    corpus_of = {p: name for name, ps in corpora for p in ps}
    listing = []

    def position(doc):
        path = parts[part_of[doc]]
        return {"corpus": corpus_of[path], "part": os.path.basename(path), "line": int(lines[doc])}

    for doc in sorted(set(removed) | set(contaminated)):
        entry = position(doc)
        if doc in removed:
            reason, twin, estimate, via = removed[doc]
            entry.update(reason=reason, estimate=estimate, kept=position(twin))
            if via:
                entry["linked_by"] = dict(position(via[0]), estimate=via[1])
        else:
            entry.update(reason="contaminated", evaluation_sets=contaminated[doc])
        listing.append(entry)
    drops = _drops(listing, corpora, options.report_only)
    per_corpus = {}
    documents = np.bincount(part_of, minlength=len(parts)).tolist()
    for name, ps in corpora:
        docs = sum(n for p, n in zip(parts, documents) if corpus_of[p] == name)
        mine = [e for e in listing if e["corpus"] == name]
        per_corpus[name] = {"documents": docs, **{k: sum(e["reason"] == k for e in mine)
                                                  for k in ("exact", "near", "contaminated")}}
        per_corpus[name]["kept"] = docs - sum(len(drops[p]) for p in ps)
    manifest = {"tool": "bertprep", "version": __version__, "stage": "dedup", "params": params,
                "inputs": input_list, "corpora": per_corpus, "removed": listing, "evaluation": report,
                "candidate_pairs": len(estimates), "seconds": round(time.monotonic() - start, 3)}
    return manifest, estimates


def _gather(results, options):
    """The parts' fingerprints as one array each, in the stable order: (part index, exact hash, MinHash values,
    band keys, line number) per document and {document: evaluation n-grams found}. Each part's arrays are
    released once copied, so memory holds the corpus's fingerprints once, not twice."""
    sizes = [len(r[1]) for r in results]
    total, bands = sum(sizes), options.band_rows()[0]
    part_of = np.repeat(np.arange(len(results), dtype=np.int32), sizes)
    if len(results) == 1:  # the only part's arrays are the corpus's: no copy
        _path, exact, signatures, keys, found, lines, _bytes = results.pop()
        return part_of, exact, signatures, keys, lines, found
    exact, lines = np.empty(total, np.uint64), np.empty(total, np.int64)
    signatures = np.empty((total, options.num_perm), np.uint32)
    keys = np.empty((total, bands), np.uint64)
    found, offset = {}, 0
    for index, size in enumerate(sizes):
        end = offset + size
        _path, exact[offset:end], signatures[offset:end], keys[offset:end], part_found, lines[offset:end], _bytes = \
            results[index]
        results[index] = None
        found.update((offset + doc, hashes) for doc, hashes in part_found.items())
        offset = end
    return part_of, exact, signatures, keys, lines, found


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


def _summary(title_or_prefix, manifest, out, complete_before=False):
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
    return Summary(title_or_prefix, fields, rows=tuple(rows), complete_before=complete_before)
