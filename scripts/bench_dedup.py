"""`bertprep dedup` against datatrove's MinHash dedup on the same corpus, measured in this run.

    python scripts/bench_dedup.py [--rounds 6] [--workers 1] [--bands 16] [--show 20]
    # datatrove is for this benchmark only, not in any extra:  pip install datatrove==0.10.1

The corpus: wt2.txt (BERTPREP_SHARED or ../shared beside the checkout) cut into 12-line documents, then
--rounds rounds of planted copies of all of them (exact, sentences shuffled, 5%/1% of words changed, truncated,
halves swapped; tests/dedup_corpus.py), each round with its own seed. Both sides shingle the same word 5-grams
(datatrove is given bertprep's words as its tokenizer, its own normalisation off) and use the same LSH bands
(datasketch's optimum for 128 permutations at 0.8: 9 bands of 13 rows, or --bands); each keeps its own MinHash.
datatrove removes on a band collision, bertprep only after the pair's estimate reaches 0.8.

Each side runs in its own process (--workers tasks on the local engine / datatrove's LocalPipelineExecutor),
after a warm-up run on 100 documents. Printed: documents/s per core, the ratio, memory per million documents
(peak RSS above the warmed-up process; with --workers 1 all of it is that process), and the share of documents
bertprep decides as datatrove does (removed or kept) three ways: datatrove as it runs; its clusters keeping
their first document, as bertprep does; its pairs whose true Jaccard (exact shingle sets) reaches 0.8. Then
both against the truth (every pair of an original's family at true Jaccard >= 0.8), each also on the "clear"
documents, those whose nearest twin is not within MARGIN of the threshold. --show N prints N disagreeing
documents per comparison with their true Jaccard and bertprep's estimate.
"""

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from dedup_corpus import KINDS, jaccard, plant, shingles, write_corpus, wt2_documents  # noqa: E402

NUM_PERM, THRESHOLD, NGRAM = 128, 0.8, 5
MARGIN = 0.05  # of the threshold: a document whose nearest twin is closer is not a clear case
BANDS = int(os.environ.get("BENCH_DEDUP_BANDS", 0)) or None  # --bands, passed on to the side processes


def shared_dir():
    return Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared")


def make_corpus(directory, rounds):
    """(corpus directory, its texts, the number of distinct originals): the originals, then the rounds."""
    documents = wt2_documents(shared_dir() / "fixtures" / "bench" / "wt2.txt", lines_per_document=12)
    texts = list(documents)
    for seed in range(rounds):
        texts += [text for _kind, _index, text in plant(documents, random.Random(seed))]
    return write_corpus(directory, texts), texts, len(documents)


def run_bertprep(corpus, work, workers):
    import bertprep

    bertprep.dedup(input=(str(corpus),), out=str(work / "out"), engine=bertprep.EngineOptions(workers=workers),
                   bands=BANDS)
    return lambda: bertprep_removed(work)


def bertprep_removed(work):
    """The removed ids and [kept id, removed id, estimate] of each, from bertprep's manifest."""
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    return sorted(e["line"] - 1 for e in manifest["removed"]), [[e["kept"]["line"] - 1, e["line"] - 1, e["estimate"]]
                                                                 for e in manifest["removed"]]


def bands_rows():
    from bertprep.stages.dedup import DedupOptions

    return DedupOptions(num_perm=NUM_PERM, threshold=THRESHOLD, bands=BANDS).band_rows()


def run_datatrove(corpus, work, workers):
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.text import TextNormConfig
    from datatrove.utils.word_tokenizers import WordTokenizer

    from bertprep.stages.dedup import normalized_words

    class Words(WordTokenizer):  # bertprep's shingle words, so both sides shingle the same 5-grams
        def word_tokenize(self, text):
            return normalized_words(text)

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            raise NotImplementedError

    bands, rows = bands_rows()
    # 32-bit shingle hashes as datasketch's; sha1 because datatrove 0.10.1's xxhash path passes str, which the
    # installed xxhash refuses ("Strings must be encoded before hashing")
    config = MinhashConfig(n_grams=NGRAM, num_buckets=bands, hashes_per_bucket=rows,
                           hash_config=HashConfig(precision=32, hash_fc="sha1"),
                           norm_config=TextNormConfig(lowercase=False, norm_whitespace=False,
                                                      remove_punctuation=False, norm_unicode_diacritics=False,
                                                      norm_numbers=False))
    read = lambda: JsonlReader(str(corpus), glob_pattern="*.jsonl", id_key="id")  # noqa: E731
    stages = [
        ([read(), MinhashDedupSignature(output_folder=str(work / "sigs"), config=config, language=Words())],
         workers),
        ([MinhashDedupBuckets(input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config)],
         bands),
        ([MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "ids"), config=config)], 1),
        ([read(), MinhashDedupFilter(input_folder=str(work / "ids"),
                                     exclusion_writer=JsonlWriter(str(work / "removed"), compression=None))], workers),
    ]
    for pipeline, tasks in stages:
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers,
                              logging_dir=str(work / "logs" / str(len(os.listdir(work))))).run()
    return lambda: datatrove_removed(work)


def datatrove_removed(work):
    """The removed ids and the band-collision pairs, from datatrove's outputs."""
    removed = []
    for path in sorted((work / "removed").glob("*.jsonl")):
        removed += [int(json.loads(line)["id"]) for line in path.open()]
    # its band-collision pairs (file, document, file, document; one input file, so a document is its id)
    pairs = np.concatenate([np.fromfile(path, "<u4").reshape(-1, 4)[:, [1, 3]]
                            for path in sorted((work / "buckets").glob("*.dups"))])
    return sorted(removed), np.unique(np.sort(pairs, axis=1), axis=0).tolist()


def side(name, corpus, work, workers):
    """Run one side in this process after a warm-up run on the corpus's first 50 documents and near copies;
    prints as JSON its seconds, removed ids, pairs and its peak RSS above what the warm-up left."""
    run = run_bertprep if name == "bertprep" else run_datatrove
    warm = Path(work) / "warm"
    with open(Path(corpus) / "part-0000.jsonl", encoding="utf-8") as f:
        texts = [json.loads(next(f))["text"] for _ in range(50)]
    write_corpus(warm / "corpus", texts + [text.rsplit(" ", 1)[0] for text in texts])  # near copies: all code runs
    run(warm / "corpus", warm, workers)()
    baseline = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    start = time.perf_counter()
    results = run(Path(corpus), Path(work), workers)
    seconds = time.perf_counter() - start
    peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    removed, pairs = results()  # read after the peak is taken: the benchmark's reading is not the side's memory
    print(json.dumps({"seconds": seconds, "removed": removed, "pairs": pairs, "rss_growth": peak * 1024 - baseline}))


def measure(name, corpus, work, workers):
    work.mkdir()
    with open(work / "stderr.txt", "w+b") as stderr:  # datatrove logs every step: kept unless it fails
        child = subprocess.run([sys.executable, __file__, "--side", name, str(corpus), str(work), str(workers)],
                               stdout=subprocess.PIPE, stderr=stderr, env=dict(os.environ, PYTHONPATH=str(REPO)))
        if child.returncode:
            stderr.seek(0)
            sys.exit(f"{name} failed (status {child.returncode}):\n{stderr.read().decode()[-3000:]}")
    return json.loads(child.stdout.decode().strip().splitlines()[-1])


def removed_by_clusters(pairs, documents):
    """The documents removed when `pairs` link clusters and each cluster keeps its first document."""
    root = list(range(documents))

    def find(doc):
        while root[doc] != doc:
            root[doc] = root[root[doc]]
            doc = root[doc]
        return doc

    for a, b in pairs:
        a, b = find(a), find(b)
        root[max(a, b)] = min(a, b)
    return {doc for doc in range(documents) if find(doc) != doc}


def origin(doc, originals):
    """(kind, original) of a document of make_corpus: an original, or a planted copy of one."""
    if doc < originals:
        return "original", doc
    index = (doc - originals) % originals
    return KINDS[index % len(KINDS)], index


def show_disagreements(label, ours, theirs, texts, originals, estimates, count):
    """Print up to `count` documents on which the two sides differ: what the document is, its true 5-gram
    Jaccard with its original, and bertprep's estimate against the twin it kept."""
    for doc in sorted(ours ^ theirs)[:count]:
        kind, original = origin(doc, originals)
        side = "bertprep only" if doc in ours else "datatrove only"
        kept, estimate = estimates.get(doc, (None, None))
        print(f"  {label}: document {doc} ({kind} of {original}) removed by {side}: true Jaccard with its original "
              f"{jaccard(texts[original], texts[doc]):.3f}; bertprep's estimate against kept {kept}: {estimate}")


def agreement(label, ours, theirs, clear, documents, names=("bertprep", "datatrove")):
    """Print the share of documents both decide alike, overall and on the `clear` ones."""
    print(f"{label:46} {1 - len(ours ^ theirs) / documents:.4f} of documents decided alike, "
          f"{1 - len((ours ^ theirs) & clear) / len(clear):.4f} of the clear ones (removed by {names[1]} only "
          f"{len(theirs - ours):,}, by {names[0]} only {len(ours - theirs):,})")


def family_jaccards(texts, originals):
    """{(a, b): true 5-gram Jaccard} of every pair among an original and its planted copies, by exact shingle
    sets (no MinHash); the corpus's other pairs are wt2's distinct passages, far below the threshold."""
    family = {}
    for doc in range(len(texts)):
        family.setdefault(origin(doc, originals)[1], []).append(doc)
    sets = [shingles(text) for text in texts]
    return {(a, b): len(sets[a] & sets[b]) / len(sets[a] | sets[b])
            for members in family.values() for i, a in enumerate(members) for b in members[i + 1:]}


def compare(results, texts, originals, show):
    """Print the agreement of bertprep's removed documents with datatrove's, three ways, and with the truth."""
    documents = len(texts)
    true = family_jaccards(texts, originals)
    nearest = np.zeros(documents)  # each document's highest true Jaccard with another
    for (a, b), value in true.items():
        nearest[a], nearest[b] = max(nearest[a], value), max(nearest[b], value)
    clear = set(np.flatnonzero(np.abs(nearest - THRESHOLD) >= MARGIN).tolist())
    print(f"clear      {len(clear):,} documents whose nearest twin is not within {MARGIN} of the threshold; the other "
          f"{documents - len(clear):,} are where a {NUM_PERM}-value estimate (sd {(0.16 / NUM_PERM) ** 0.5:.3f} at "
          f"{THRESHOLD}) decides by chance")
    ours, theirs = set(results["bertprep"]["removed"]), set(results["datatrove"]["removed"])
    estimates = {doc: (kept, estimate) for kept, doc, estimate in results["bertprep"]["pairs"]}
    collisions = [tuple(pair) for pair in results["datatrove"]["pairs"]]
    true_collisions = [(a, b) for a, b in collisions
                       if (true[a, b] if (a, b) in true else jaccard(texts[a], texts[b])) >= THRESHOLD]
    truth = removed_by_clusters([pair for pair, value in true.items() if value >= THRESHOLD], documents)
    comparisons = {
        "datatrove as it runs (any band collision)": theirs,
        "datatrove's clusters, first document kept": removed_by_clusters(collisions, documents),
        f"datatrove's pairs at true Jaccard >= {THRESHOLD}": removed_by_clusters(true_collisions, documents),
    }
    for label, removed in comparisons.items():
        agreement(label, ours, removed, clear, documents)
        show_disagreements(label, ours, removed, texts, originals, estimates, show)
    agreement(f"the truth (all pairs at true Jaccard >= {THRESHOLD})", ours, truth, clear, documents,
              ("bertprep", "the truth"))
    agreement("datatrove as it runs against the truth", theirs, truth, clear, documents, ("datatrove", "the truth"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of planted copies (default: 6)")
    parser.add_argument("--workers", type=int, default=1, help="tasks at once on each side (default: 1)")
    parser.add_argument("--bands", type=int, help="LSH bands on both sides (default: bertprep's default)")
    parser.add_argument("--show", type=int, default=0, help="print this many disagreeing documents per comparison")
    parser.add_argument("--side", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return side(*args.side[:3], int(args.side[3]))
    if args.bands:
        os.environ["BENCH_DEDUP_BANDS"] = str(args.bands)
        globals()["BANDS"] = args.bands
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus, texts, originals = make_corpus(tmp / "corpus", args.rounds)
        documents = len(texts)
        print(f"corpus: {documents:,} documents ({os.path.getsize(corpus / 'part-0000.jsonl') / 1e6:.1f} MB), "
              f"{NGRAM}-gram shingles, {NUM_PERM} permutations, bands x rows {bands_rows()}, workers {args.workers}")
        results = {name: measure(name, corpus, tmp / name, args.workers) for name in ("bertprep", "datatrove")}
        shutil.rmtree(corpus)
    rates = {}
    for name, r in results.items():
        rates[name] = documents / r["seconds"] / args.workers
        print(f"{name:9}  {r['seconds']:7.2f} s  {rates[name]:9,.0f} documents/s per core  "
              f"{len(r['removed']):6,} removed  memory {r['rss_growth'] / documents * 1e6 / 2**30:5.2f} GiB per "
              f"million documents ({r['rss_growth'] / documents:,.0f} bytes each: peak RSS above the warmed-up "
              "process)")
    print(f"ratio      {rates['bertprep'] / rates['datatrove']:.2f}x datatrove's documents/s per core")
    compare(results, texts, originals, args.show)


if __name__ == "__main__":
    main()
