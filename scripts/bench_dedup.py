"""`bertprep dedup` against datatrove's MinHash dedup on the same corpora, side by side, measured in this run.

    python scripts/bench_dedup.py [--documents 100000 1000000] [--copies 0.09] [--workers 1] [--memory 64M]
                                  [--bands 16] [--show 20]
    # datatrove is for this benchmark only, not in any extra:  pip install datatrove==0.10.1 orjson

The corpora: --documents documents each, made of wt2.txt's lines (BERTPREP_SHARED or ../shared beside the
checkout): each original is 12 lines drawn at random (seeded), and a share --copies of the documents are planted
copies of a random earlier original, one each (exact, sentences shuffled, 5%/1% of words changed, truncated,
halves swapped in turn; tests/dedup_corpus.py). Both sides shingle the same word 5-grams (datatrove is given
bertprep's words as its tokenizer, its own normalisation off) and use the same LSH bands (those datasketch's
MinHashLSH picks for 128 permutations at 0.8, computed by bertprep: 9 bands of 13 rows, or --bands); each keeps its
own MinHash. datatrove's side imports bertprep.stages.dedup for both: its peak RSS holds what that imports (before
2026-11-25 that was datasketch and scipy too, about 40 MiB). datatrove removes on a
band collision, bertprep only after the pair's estimate reaches 0.8.

Each side runs in its own process (--workers tasks on the local engine / datatrove's LocalPipelineExecutor),
after a warm-up run on 100 documents. Printed per corpus: documents/s per core, the ratio, each side's peak RSS
per process (the largest of its processes', imports included) and its growth above the warmed-up process, and
each side's recall and precision against the truth: the documents removed when every pair at a true Jaccard
(exact shingle sets, no MinHash) >= 0.8 links a cluster that keeps its first document. The true Jaccard is
computed for every planted pair and every pair either side linked; the other pairs are two random draws of 12 of
wt2's 18,030 lines, far below 0.8. Recall and precision are given on all documents and on the "clear" ones,
those whose nearest twin is not within MARGIN of the threshold. --show N prints N documents per comparison that
the two sides decide differently, with their true Jaccard and bertprep's estimate.
"""

import argparse
import importlib.util
import json
import os
import random
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

from dedup_corpus import KINDS, jaccard, planted_copy, shingles, write_corpus  # noqa: E402

NUM_PERM, THRESHOLD, NGRAM = 128, 0.8, 5
MARGIN = 0.05  # of the threshold: a document whose nearest twin is closer is not a clear case
BANDS = int(os.environ.get("BENCH_DEDUP_BANDS", 0)) or None  # --bands, passed on to the side processes
MEMORY = os.environ.get("BENCH_DEDUP_MEMORY")  # --memory, likewise
LINES_PER_DOCUMENT = 12


def shared_dir():
    return Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared")


def make_corpus(directory, documents, copies, seed=0):
    """(corpus directory, its texts, {planted copy: its original}): originals of LINES_PER_DOCUMENT random wt2
    lines, a share `copies` of the documents planted copies of an earlier original, each original copied once."""
    lines = [line for line in open(shared_dir() / "fixtures" / "bench" / "wt2.txt", encoding="utf-8").read()
             .splitlines() if line.strip()]
    rng = random.Random(seed)
    texts, original_of, uncopied = [], {}, []
    for doc in range(documents):
        if uncopied and rng.random() < copies:
            original = uncopied.pop(rng.randrange(len(uncopied)))
            texts.append(planted_copy(texts[original], KINDS[len(original_of) % len(KINDS)], rng))
            original_of[doc] = original
        else:
            texts.append("\n".join(rng.sample(lines, LINES_PER_DOCUMENT)))
            uncopied.append(doc)
    return write_corpus(directory, texts), texts, original_of


def run_bertprep(corpus, work, workers):
    import bertprep

    bertprep.dedup(input=(str(corpus),), out=str(work / "out"), engine=bertprep.EngineOptions(workers=workers),
                   bands=BANDS, **({"memory": MEMORY} if MEMORY else {}))
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


def high_water(pid):
    """The peak RSS in bytes of process `pid` since it started its program (VmHWM). Not ru_maxrss: that carries
    over exec the peak of the process it was forked from (this benchmark's own, holding every text)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class ChildrenPeak:
    """The highest VmHWM of this process's children (a side's worker processes), sampled every 50 ms."""

    def __init__(self):
        import threading

        self.peak, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        import psutil

        while not self._done.wait(0.05):
            for child in psutil.Process().children(recursive=True):
                try:
                    self.peak = max(self.peak, high_water(child.pid))
                except OSError:
                    pass  # ended meanwhile

    def stop(self):
        self._done.set()
        self._thread.join()
        return self.peak


def side(name, corpus, work, workers):
    """Run one side in this process after a warm-up run on the corpus's first 50 documents and near copies;
    prints as JSON its seconds, removed ids, pairs, its peak RSS per process and that above what the warm-up
    left."""
    run = run_bertprep if name == "bertprep" else run_datatrove
    warm = Path(work) / "warm"
    with open(Path(corpus) / "part-0000.jsonl", encoding="utf-8") as f:
        texts = [json.loads(next(f))["text"] for _ in range(50)]
    write_corpus(warm / "corpus", texts + [text.rsplit(" ", 1)[0] for text in texts])  # near copies: all code runs
    run(warm / "corpus", warm, workers)()
    baseline = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    children = ChildrenPeak()
    start = time.perf_counter()
    results = run(Path(corpus), Path(work), workers)
    seconds = time.perf_counter() - start
    peak = max(high_water("self"), children.stop())
    removed, pairs = results()  # read after the peak is taken: the benchmark's reading is not the side's memory
    print(json.dumps({"seconds": seconds, "removed": removed, "pairs": pairs, "rss_peak": peak,
                      "rss_growth": peak - baseline}))


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


def show_disagreements(label, ours, theirs, texts, original_of, estimates, count):
    """Print up to `count` documents on which the two sides differ: what the document is, its true 5-gram
    Jaccard with its original, and bertprep's estimate against the twin it kept."""
    for doc in sorted(ours ^ theirs)[:count]:
        side = "bertprep only" if doc in ours else "datatrove only"
        kept, estimate = estimates.get(doc, (None, None))
        what = (f"copy of {original_of[doc]}, true Jaccard {jaccard(texts[original_of[doc]], texts[doc]):.3f}"
                if doc in original_of else "an original")
        print(f"  {label}: document {doc} ({what}) removed by {side}; bertprep's estimate against kept {kept}: "
              f"{estimate}")


def scores(label, removed, truth, clear):
    """Print the recall and precision of `removed` against `truth`, overall and on the `clear` documents."""
    def share(part, whole):
        return len(part) / len(whole) if whole else 1.0

    print(f"  {label:10} recall {share(removed & truth, truth):.4f} "
          f"({share(removed & truth & clear, truth & clear):.4f} clear)  "
          f"precision {share(removed & truth, removed):.4f} "
          f"({share(removed & truth & clear, removed & clear):.4f} clear)  removed {len(removed):,}")


def compare(results, texts, original_of, show):
    """Print each side's recall and precision against the truth, and how far the two sides agree."""
    documents = len(texts)
    linked = {tuple(sorted(pair[:2])) for pair in results["bertprep"]["pairs"]}
    linked |= {tuple(pair) for pair in results["datatrove"]["pairs"]}
    linked |= {(original, copy) for copy, original in original_of.items()}
    sets, true = {}, {}
    for a, b in sorted(linked):
        for doc in (a, b):
            if doc not in sets:
                sets[doc] = shingles(texts[doc])
        true[a, b] = len(sets[a] & sets[b]) / len(sets[a] | sets[b])
    nearest = np.zeros(documents)  # each document's highest true Jaccard with another
    for (a, b), value in true.items():
        nearest[a], nearest[b] = max(nearest[a], value), max(nearest[b], value)
    clear = set(np.flatnonzero(np.abs(nearest - THRESHOLD) >= MARGIN).tolist())
    truth = removed_by_clusters([pair for pair, value in true.items() if value >= THRESHOLD], documents)
    print(f"  truth      {len(truth):,} documents removed (every pair at true Jaccard >= {THRESHOLD}, first kept); "
          f"clear: {len(clear):,} of {documents:,} documents, nearest twin not within {MARGIN} of the threshold")
    ours, theirs = set(results["bertprep"]["removed"]), set(results["datatrove"]["removed"])
    scores("bertprep", ours, truth, clear)
    scores("datatrove", theirs, truth, clear)
    print(f"  agreement  {1 - len(ours ^ theirs) / documents:.4f} of documents decided alike "
          f"({1 - len((ours ^ theirs) & clear) / len(clear):.4f} of the clear ones)")
    estimates = {doc: (kept, estimate) for kept, doc, estimate in results["bertprep"]["pairs"]}
    show_disagreements("bertprep vs datatrove", ours, theirs, texts, original_of, estimates, show)
    show_disagreements("bertprep vs the truth", ours, truth, texts, original_of, estimates, show)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, nargs="+", default=[100_000],
                        help="documents per corpus, a corpus each (default: 100000)")
    parser.add_argument("--copies", type=float, default=0.09, help="share of planted copies (default: 0.09)")
    parser.add_argument("--workers", type=int, default=1, help="tasks at once on each side (default: 1)")
    parser.add_argument("--bands", type=int, help="LSH bands on both sides (default: bertprep's default)")
    parser.add_argument("--memory", help="bertprep's --memory (default: its default)")
    parser.add_argument("--show", type=int, default=0, help="print this many disagreeing documents per comparison")
    parser.add_argument("--side", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return side(*args.side[:3], int(args.side[3]))
    if importlib.util.find_spec("datatrove") is None:  # before minutes of bertprep's side, not after
        sys.exit("bench_dedup.py: datatrove is not installed; the benchmark's side of it needs "
                 "`pip install datatrove==0.10.1 orjson` (for this script only, not in any extra)")
    if args.bands:
        os.environ["BENCH_DEDUP_BANDS"] = str(args.bands)
        globals()["BANDS"] = args.bands
    if args.memory:
        os.environ["BENCH_DEDUP_MEMORY"] = args.memory
    print(f"{NGRAM}-gram shingles, {NUM_PERM} permutations, bands x rows {bands_rows()}, workers {args.workers}, "
          f"bertprep --memory {args.memory or 'default'}, planted copies {args.copies:.0%}")
    for documents in args.documents:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            corpus, texts, original_of = make_corpus(tmp / "corpus", documents, args.copies)
            print(f"\n{documents:,} documents ({os.path.getsize(corpus / 'part-0000.jsonl') / 1e6:.1f} MB)", flush=True)
            results = {name: measure(name, corpus, tmp / name, args.workers) for name in ("bertprep", "datatrove")}
            shutil.rmtree(corpus)
        rates = {}
        for name, r in results.items():
            rates[name] = documents / r["seconds"] / args.workers
            print(f"  {name:9}  {r['seconds']:8.2f} s  {rates[name]:7,.0f} documents/s per core  peak RSS per process "
                  f"{r['rss_peak'] / 2**20:6,.0f} MiB ({r['rss_growth'] / 2**20:6,.0f} MiB above the warmed-up "
                  "process)")
        print(f"  ratio      {rates['bertprep'] / rates['datatrove']:.2f}x datatrove's documents/s per core, "
              f"{results['bertprep']['rss_peak'] / results['datatrove']['rss_peak']:.2f}x its peak RSS per process")
        compare(results, texts, original_of, args.show)


if __name__ == "__main__":
    main()
