"""Packing: how dense `bertprep pack` makes the rows, how fast it runs, and what it buys the trainer.

    python scripts/bench_pack.py [--shapes 128/20,512/80] [--k 3] [--train-shapes 512/80]
        [--steps 20] [--batch-size 8] [--model mini] [--tmp DIR]

Two corpora: short documents (every docstring of Python's standard library,
one document each, made here from the interpreter's own sources with `ast`)
and wt2 (fixtures/bench/wt2.txt, Wikipedia articles). For each corpus and
shape it runs `bertprep create` (dupe factor 5, 1 worker), then:
- the share of real tokens in the records;
- rows per sequence of `bertprep pack` (k 3), of first-fit decreasing with
  the same k over the same shards, and the lower bound max(Σlen/S, n/k);
- `bertprep pack` throughput: sequences/s of the whole command (1 worker,
  start-up included, both formats written);
- for the shapes in --train-shapes: the trainer's real sequences/s on the
  packed records and on the unpacked ones, in this run, same model, batch
  (rows), backend and steps (the first 3 steps, compilation, not timed).
  The runs alternate unpacked, packed, packed, unpacked (--repeat 2), so a
  load that drifts during the run weighs on both sides alike; each side's
  figure is the mean of its runs.
The pack throughput has no ratio, by design: no other tool packs bertprep's
records (first-fit decreasing is computed here for its rows, not timed), so
it is an absolute rate, read against `bertprep create`'s instances/s at the
same shape (scripts/bench_create.py), the pass that made the records and
that pack follows.
"""

import argparse
import ast
import glob
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertprep import formats  # noqa: E402
from bertprep.sentences import document_sentences  # noqa: E402
from bertprep.stages.pack import strategy  # noqa: E402
from bertprep.workdir import params_dirname  # noqa: E402

SHARED = os.environ.get("BERTPREP_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
FIXTURES = os.path.join(SHARED, "fixtures")


def docstring_corpus(path):
    """Every module, class and function docstring of the standard library, one document each."""
    root = sysconfig.get_paths()["stdlib"]
    documents = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d not in (
            "test", "tests", "site-packages", "idlelib", "lib2to3", "__pycache__") and not d.startswith("."))
        for name in sorted(f for f in files if f.endswith(".py")):
            try:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in [tree] + [n for n in ast.walk(tree)
                                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]:
                text = ast.get_docstring(node)
                if text:
                    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]
                    sentences = document_sentences("\n".join(paragraphs))
                    if sentences:
                        documents.append("\n".join(sentences))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(documents) + "\n")
    return len(documents)


def bertprep(*argv):
    result = subprocess.run([sys.executable, "-m", "bertprep", *map(str, argv)], capture_output=True, text=True,
                            cwd=REPO)
    if result.returncode:
        sys.exit(f"bertprep {argv[0]} failed: {result.stderr.strip()}")
    return result.stdout


def lengths_per_file(records_dir):
    files = sorted(glob.glob(os.path.join(records_dir, "ofrecord", "*", "part-*")))
    return [np.concatenate([(b["input_mask"] != 0).sum(axis=1) for b in formats.read_batches(f, 8192)])
            for f in files]


def train_rate(data, args):
    """The trainer's steady-state real sequences/s on `data` (its summary, --json)."""
    argv = [sys.executable, "-m", "trainer", "--format", "ofrecord", "--data", data, "--model", args.model,
            "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--optimizer", "adam",
            "--log-every", str(args.steps), "--quiet", "--json"]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if result.returncode:
        sys.exit(f"trainer failed on {data}: {result.stderr.strip()[-2000:]}")
    summary = json.loads(result.stdout)
    return summary["mean_sequences_per_second"], summary["mean_tokens_per_second"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="128/20,512/80")
    parser.add_argument("--train-shapes", default="512/80", help="shapes to train on ('' for none)")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--model", default="mini")
    parser.add_argument("--repeat", type=int, default=2, help="trainer runs per side, in ABBA order")
    parser.add_argument("--tmp", default=None, help="where to write corpora and records (default: a temporary dir)")
    args = parser.parse_args()
    vocab = os.path.join(FIXTURES, "golden", "vocab.txt")
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        corpora = {"docstrings": os.path.join(tmp, "docstrings.txt"), "wt2": os.path.join(FIXTURES, "bench", "wt2.txt")}
        documents = docstring_corpus(corpora["docstrings"])
        print(f"docstrings: {documents:,} documents from {sysconfig.get_paths()['stdlib']} "
              f"({os.path.getsize(corpora['docstrings']) / 1e6:.1f} MB); wt2: 122 articles (2.2 MB)")
        backend = os.environ.get("KERAS_BACKEND", "tensorflow")
        print(f"k {args.k}; pack: 1 worker, both formats; trainer: {args.model}, batch {args.batch_size} rows, "
              f"{args.steps} steps ({backend}, CPU, {os.cpu_count()} cores)")
        print(f"{'corpus':<11}{'shape':<8}{'sequences':>10}{'real tokens':>12}{'pack':>8}{'FFD':>8}{'bound':>8}"
              f"{'pack seq/s':>12}{'train seq/s unpacked / packed':>32}{'speed-up':>10}")
        results = []
        for shape in args.shapes.split(","):
            seq, pred = shape.split("/")
            for corpus, text in corpora.items():
                out = os.path.join(tmp, "records")
                bertprep("create", "--input", text, "--vocab", vocab, "--out", out, "--seq", seq, "--pred", pred,
                         "--corpus", corpus, "--workers", "1", "--quiet")
                records = os.path.join(out, params_dirname(int(seq), int(pred), 0.15, 12345, 5), corpus)
                started = time.perf_counter()
                summary = json.loads(bertprep("pack", records, "--max-per-pack", args.k, "--workers", "1", "--json",
                                              "--quiet"))
                seconds = time.perf_counter() - started
                per_file = lengths_per_file(records)
                lengths = np.concatenate(per_file)
                ffd = sum(strategy.row_count(strategy.first_fit_decreasing(np.bincount(f, minlength=int(seq) + 1),
                                                                           int(seq), args.k)) for f in per_file)
                row = {"corpus": corpus, "shape": shape, "sequences": len(lengths),
                       "real_tokens": lengths.sum() / (len(lengths) * int(seq)), "ratio": summary["ratio"],
                       "ffd": ffd / len(lengths), "bound": summary["lower_bound_ratio"],
                       "pack_rate": len(lengths) / seconds}
                trained = ""
                if shape in args.train_shapes.split(","):
                    rates = {records: [], summary["records_dir"]: []}
                    for run in range(args.repeat):
                        for data in (list(rates) if run % 2 == 0 else list(rates)[::-1]):
                            rates[data].append(train_rate(data, args)[0])
                    unpacked, packed = (float(np.mean(r)) for r in rates.values())
                    row.update(unpacked=unpacked, packed=packed, runs={"unpacked": rates[records],
                                                                       "packed": rates[summary["records_dir"]]})
                    trained = f"{unpacked:>15,.1f} / {packed:<14,.1f}{packed / unpacked:>9.2f}x"
                results.append(row)
                print(f"{corpus:<11}{shape:<8}{row['sequences']:>10,}{row['real_tokens']:>12.1%}{row['ratio']:>8.3f}"
                      f"{row['ffd']:>8.3f}{row['bound']:>8.3f}{row['pack_rate']:>12,.0f}{trained}", flush=True)
    for r in results:
        if "runs" in r:
            print(f"{r['corpus']} {r['shape']} trainer runs, real sequences/s: unpacked "
                  + ", ".join(f"{x:.2f}" for x in r["runs"]["unpacked"]) + "; packed "
                  + ", ".join(f"{x:.2f}" for x in r["runs"]["packed"]))
    worse = [r for r in results if r["ratio"] > r["ffd"]]
    print(f"rows per sequence no worse than first-fit decreasing: {'yes' if not worse else 'NO: ' + str(worse)}")
    for r in results:
        if "packed" in r and r["corpus"] == "docstrings" and r["shape"].startswith("512"):
            verdict = "met" if r["packed"] / r["unpacked"] >= 2 else "NOT met"
            print(f"short documents at {r['shape']}: packed trains {r['packed'] / r['unpacked']:.2f}x the real "
                  f"sequences/s of unpacked (target >= 2x: {verdict})")


if __name__ == "__main__":
    main()
