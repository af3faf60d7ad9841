"""`bertprep dedup` against datatrove's MinHash dedup on the same corpus, measured in this run.

    python scripts/bench_dedup.py [--rounds 6] [--workers 1]
    # datatrove is for this benchmark only, not in any extra:  pip install datatrove==0.10.1

The corpus: wt2.txt (BERTPREP_SHARED or ../shared beside the checkout) cut into 12-line documents, then
--rounds rounds of planted copies of all of them (exact, sentences shuffled, 5%/1% of words changed, truncated,
halves swapped; tests/dedup_corpus.py), each round with its own seed. Both sides use word 5-gram shingles
and the same LSH bands (datasketch's optimum for 128 permutations at 0.8: 9 bands of 13 rows); datatrove removes
on a band collision, bertprep only after the pair's estimate reaches 0.8. Each side runs in its own process
(--workers tasks on the local engine / datatrove's LocalPipelineExecutor); printed: documents/s per core,
the ratio, the share of documents on which both decide the same (removed or kept), the Jaccard of the two
removed sets, and peak RSS per million documents (the side's process and its children, as the OS reports).
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from dedup_corpus import plant, write_corpus, wt2_documents  # noqa: E402

NUM_PERM, THRESHOLD, NGRAM = 128, 0.8, 5
BANDS = int(os.environ.get("BENCH_DEDUP_BANDS", 0)) or None  # --bands, passed on to the side processes


def shared_dir():
    return Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared")


def make_corpus(directory, rounds):
    documents = wt2_documents(shared_dir() / "fixtures" / "bench" / "wt2.txt", lines_per_document=12)
    texts = list(documents)
    for seed in range(rounds):
        texts += [text for _kind, _index, text in plant(documents, random.Random(seed))]
    return write_corpus(directory, texts), len(texts)


def run_bertprep(corpus, work, workers):
    import bertprep

    bertprep.dedup(input=(str(corpus),), out=str(work / "out"), engine=bertprep.EngineOptions(workers=workers),
                   bands=BANDS)
    manifest = json.loads((work / "out" / "manifest.json").read_text())
    return sorted(e["line"] - 1 for e in manifest["removed"])


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
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Whitespace(WordTokenizer):  # datatrove's text is already simplified: no nltk/spaCy needed
        def word_tokenize(self, text):
            return text.split()

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            raise NotImplementedError

    bands, rows = bands_rows()
    # 32-bit shingle hashes as datasketch's; sha1 because datatrove 0.10.1's xxhash path passes str, which the
    # installed xxhash refuses ("Strings must be encoded before hashing")
    config = MinhashConfig(n_grams=NGRAM, num_buckets=bands, hashes_per_bucket=rows,
                           hash_config=HashConfig(precision=32, hash_fc="sha1"))
    read = lambda: JsonlReader(str(corpus), glob_pattern="*.jsonl", id_key="id")  # noqa: E731
    stages = [
        ([read(), MinhashDedupSignature(output_folder=str(work / "sigs"), config=config, language=Whitespace())],
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
    removed = []
    for path in sorted((work / "removed").glob("*.jsonl")):
        removed += [int(json.loads(line)["id"]) for line in path.open()]
    return sorted(removed)


def side(name, corpus, work, workers):
    """Run one side in this process; prints its seconds and removed ids as JSON."""
    start = time.perf_counter()
    removed = (run_bertprep if name == "bertprep" else run_datatrove)(Path(corpus), Path(work), workers)
    print(json.dumps({"seconds": time.perf_counter() - start, "removed": removed}))


def measure(name, corpus, work, workers):
    work.mkdir()
    child = subprocess.Popen([sys.executable, __file__, "--side", name, str(corpus), str(work), str(workers)],
                             stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(REPO)))
    out = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    if status:
        sys.exit(f"{name} failed (status {status})")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["max_rss_bytes"] = usage.ru_maxrss * 1024
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds of planted copies (default: 6)")
    parser.add_argument("--workers", type=int, default=1, help="tasks at once on each side (default: 1)")
    parser.add_argument("--bands", type=int, help="LSH bands on both sides (default: bertprep's default)")
    parser.add_argument("--side", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return side(*args.side[:3], int(args.side[3]))
    if args.bands:
        os.environ["BENCH_DEDUP_BANDS"] = str(args.bands)
        globals()["BANDS"] = args.bands
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus, documents = make_corpus(tmp / "corpus", args.rounds)
        print(f"corpus: {documents:,} documents ({os.path.getsize(corpus / 'part-0000.jsonl') / 1e6:.1f} MB), "
              f"{NGRAM}-gram shingles, {NUM_PERM} permutations, bands x rows {bands_rows()}, workers {args.workers}")
        results = {name: measure(name, corpus, tmp / name, args.workers) for name in ("bertprep", "datatrove")}
        shutil.rmtree(corpus)
    rates = {}
    for name, r in results.items():
        rates[name] = documents / r["seconds"] / args.workers
        print(f"{name:9}  {r['seconds']:7.2f} s  {rates[name]:9,.0f} documents/s per core  "
              f"{len(r['removed']):6,} removed  {r['max_rss_bytes'] / documents * 1e6 / 2**30:6.2f} GiB peak RSS "
              "per million documents")
    ours, theirs = set(results["bertprep"]["removed"]), set(results["datatrove"]["removed"])
    print(f"ratio      {rates['bertprep'] / rates['datatrove']:.2f}x datatrove's documents/s per core")
    print(f"agreement  {1 - len(ours ^ theirs) / documents:.4f} of documents decided alike; removed sets' "
          f"Jaccard {len(ours & theirs) / max(1, len(ours | theirs)):.4f}; removed by datatrove only "
          f"{len(theirs - ours):,}, by bertprep only {len(ours - theirs):,}")


if __name__ == "__main__":
    main()
