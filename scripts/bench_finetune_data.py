#!/usr/bin/env python3
"""Benchmark `bertprep create-squad` against google-research/bert's own SQuAD conversion, run in the same invocation.

The input is the golden SQuAD v1.1 training set (fixtures/finetune/squad)
repeated until it holds at least --megabytes of JSON (question ids made
unique per copy). Both sides run as child processes pinned to one CPU:

  1. the reference: run_squad.py's read_squad_examples, the
     random.Random(12345) shuffle, convert_examples_to_features and
     FeatureWriter, loaded from a google-research/bert checkout under
     tensorflow.compat.v1 (its TensorFlow import is timed apart: it is not
     conversion work);
  2. `bertprep create-squad --format tfrecord`, the whole command (start-up
     included), and again with both formats.

Features/s of each, the ratio, and a check that both wrote the same
features (value for value; the reference's map order is TensorFlow's, not
stable, so bytes are compared through a decode) are printed.

    python scripts/bench_finetune_data.py --reference PATH/TO/google-research/bert [--megabytes 20] [--repeat 1]
    python scripts/bench_finetune_data.py --fetch        # clone google-research/bert into --cache first

The reference's code is never copied into this repository: it is read from
--reference, or cloned into --cache (default ~/.cache/bertprep/google-research-bert).
TensorFlow must be installed in the environment that runs this script.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared_fixtures import require_fixtures

REPO = Path(__file__).resolve().parents[1]
REFERENCE_URL = "https://github.com/google-research/bert"
REFERENCE_FILES = ("run_squad.py", "tokenization.py", "modeling.py", "optimization.py")

# Runs in a child process: loads the reference's modules under tensorflow.compat.v1 and converts one file.
REFERENCE_RUNNER = r"""
import json, os, random, sys, time, types
started = time.perf_counter()
import tensorflow.compat.v1 as tf
tf_import = time.perf_counter() - started
reference, vocab, source, out, seq, stride, query, version_2 = sys.argv[1:9]

def load(name):
    path = os.path.join(reference, name + ".py")
    with open(path, encoding="utf-8") as f:
        code = f.read().replace("import tensorflow as tf", "import tensorflow.compat.v1 as tf")
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(code, path, "exec"), module.__dict__)
    return module

for name in ("tokenization", "modeling", "optimization"):
    load(name)
run_squad = load("run_squad")
run_squad.FLAGS(["run_squad", "--version_2_with_negative=" + version_2])
tf.logging.set_verbosity(tf.logging.ERROR)
tokenizer = run_squad.tokenization.FullTokenizer(vocab_file=vocab, do_lower_case=True)
start, cpu_start = time.perf_counter(), time.process_time()
examples = run_squad.read_squad_examples(input_file=source, is_training=True)
random.Random(12345).shuffle(examples)
writer = run_squad.FeatureWriter(filename=out, is_training=True)
run_squad.convert_examples_to_features(examples=examples, tokenizer=tokenizer, max_seq_length=int(seq),
                                       doc_stride=int(stride), max_query_length=int(query), is_training=True,
                                       output_fn=writer.process_feature)
writer.close()
print(json.dumps({"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start,
                  "tf_import_seconds": tf_import,
                  "examples": len(examples), "features": writer.num_features}))
"""


def reference_dir(args):
    if args.reference:
        path = Path(args.reference)
    else:
        path = Path(args.cache).expanduser()
        if not (path / "run_squad.py").is_file():
            if not args.fetch:
                sys.exit(f"no reference at {path}: pass --reference PATH (a google-research/bert checkout) or --fetch")
            subprocess.run(["git", "clone", "--depth", "1", REFERENCE_URL, str(path)], check=True)
    missing = [name for name in REFERENCE_FILES if not (path / name).is_file()]
    if missing:
        sys.exit(f"{path}: not a google-research/bert checkout (missing {', '.join(missing)})")
    return path


def repeated_squad(source, megabytes, target):
    """The SQuAD file repeated until it holds at least `megabytes` MB of JSON; returns (path, copies)."""
    data = json.loads(source.read_text(encoding="utf-8"))
    size = len(source.read_bytes())
    copies = max(1, -(-int(megabytes * 1e6) // size))
    articles = []
    for copy in range(copies):
        for article in data["data"]:
            paragraphs = [{**p, "qas": [{**qa, "id": f"{qa['id']}_{copy}"} for qa in p["qas"]]}
                          for p in article["paragraphs"]]
            articles.append({**article, "paragraphs": paragraphs})
    target.write_text(json.dumps({"version": data.get("version", "1.1"), "data": articles}), encoding="utf-8")
    return target, copies


def one_core():
    """A preexec_fn pinning the child (and its threads) to one CPU, where the OS allows it."""
    def pin():
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return pin


def child_env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1",
               TF_NUM_INTEROP_THREADS="1", RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def timed(command):
    """(CompletedProcess, wall seconds, CPU seconds of the child and its threads) of one pinned child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=child_env(), preexec_fn=one_core(),
                            check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_reference(reference, vocab, source, out, flags):
    command = [sys.executable, "-c", REFERENCE_RUNNER, str(reference), str(vocab), str(source), str(out),
               *map(str, flags), "false"]
    result, wall, _cpu = timed(command)
    if result.returncode != 0:
        sys.exit(f"reference failed:\n{result.stderr[-3000:]}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return {**figures, "wall": wall}


def run_ours(vocab, source, out, flags, fmt):
    seq, stride, query = flags
    command = [sys.executable, "-m", "bertprep", "create-squad", "--input", str(source), "--vocab", str(vocab),
               "--out", str(out), "--split", "train", "--seq", str(seq), "--doc-stride", str(stride),
               "--max-query", str(query), "--format", fmt, "--json", "--quiet"]
    result, wall, cpu = timed(command)
    if result.returncode != 0:
        sys.exit(f"bertprep create-squad failed:\n{result.stderr[-3000:]}")
    summary = json.loads(result.stdout)
    return {"wall": wall, "cpu": cpu, "examples": summary["examples"], "features": summary["records"]}


def same_features(ours, theirs):
    """Whether two TFRecord files hold the same features in the same order, value for value."""
    sys.path.insert(0, str(REPO))
    from bertprep import formats

    count = 0
    for a, b in zip(formats.read_records(ours), formats.read_records(theirs), strict=True):
        if sorted(a) != sorted(b) or any(a[name].tolist() != b[name].tolist() for name in a):
            return False, count
        count += 1
    return True, count


def word_tokenization_cpu(source, vocab):
    """CPU seconds to tokenize every word occurrence of the input, and only its distinct words (what we do).

    Repeating one file makes every word recur, which the per-word cache turns
    into less work than on real data: the difference bounds that advantage.
    """
    sys.path.insert(0, str(REPO))
    from bertprep.stages.finetune_data.common import load_tokenizer
    from bertprep.stages.finetune_data.squad import read_examples

    tokenizer = load_tokenizer(str(vocab), True)
    _examples, paragraphs, _skipped, _v2 = read_examples(str(source), True)
    words = [word for paragraph in paragraphs for word in paragraph.words]
    figures = {}
    for label, texts in (("every occurrence", words), ("distinct", list(dict.fromkeys(words)))):
        started = time.process_time()
        tokenizer.encode(texts)
        figures[label] = (len(texts), time.process_time() - started)
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", help="a google-research/bert checkout (run_squad.py, tokenization.py, ...)")
    parser.add_argument("--fetch", action="store_true", help=f"clone {REFERENCE_URL} into --cache if it is not there")
    parser.add_argument("--cache", default="~/.cache/bertprep/google-research-bert")
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED") or str(REPO.parent / "shared"))
    parser.add_argument("--megabytes", type=float, default=20.0, help="JSON size of the repeated input (default 20)")
    parser.add_argument("--seq", type=int, default=384)
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--max-query", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side (median reported)")
    parser.add_argument("--tmp", default=None, help="where inputs and outputs go, e.g. /dev/shm")
    args = parser.parse_args()
    require_fixtures(parser, args.shared)
    reference = reference_dir(args)
    fixtures = Path(args.shared) / "fixtures"
    vocab = fixtures / "golden" / "vocab.txt"
    flags = (args.seq, args.doc_stride, args.max_query)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        tmp = Path(tmp)
        source, copies = repeated_squad(fixtures / "finetune/squad/v1.1/train-v1.1.json", args.megabytes,
                                        tmp / "train-v1.1.json")
        theirs, ours_tf, ours_both = [], [], []
        for i in range(args.repeat):
            theirs.append(run_reference(reference, vocab, source, tmp / f"reference-{i}.tf_record", flags))
            ours_tf.append(run_ours(vocab, source, tmp / f"ours-tf-{i}", flags, "tfrecord"))
            ours_both.append(run_ours(vocab, source, tmp / f"ours-both-{i}", flags, "tfrecord,ofrecord"))
        equal, compared = same_features(tmp / "ours-tf-0" / "train.tf_record", tmp / "reference-0.tf_record")
        words = word_tokenization_cpu(source, vocab)
    features = theirs[0]["features"]

    def median(runs, key):
        return statistics.median(r[key] for r in runs)

    rows = [
        ("reference conversion (TF import excluded)", median(theirs, "seconds"), median(theirs, "cpu_seconds")),
        (f"reference process, whole (TF import {theirs[0]['tf_import_seconds']:.1f} s)", median(theirs, "wall"), None),
        ("bertprep create-squad --format tfrecord, whole", median(ours_tf, "wall"), median(ours_tf, "cpu")),
        ("bertprep create-squad, both formats, whole", median(ours_both, "wall"), median(ours_both, "cpu")),
    ]
    print(f"SQuAD v1.1 golden train set x{copies} ({copies * 144:,} questions, {features:,} features), "
          f"{args.seq}/{args.doc_stride}/{args.max_query}, one CPU per process, median of {args.repeat}, "
          f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f}), files under "
          f"{args.tmp or tempfile.gettempdir()}")
    print(f"{'run':<52} {'wall s':>8} {'features/s':>11} {'CPU s':>8} {'features/CPU s':>15}")
    for label, wall, cpu in rows:
        cpu_columns = f"{cpu:>8.2f} {features / cpu:>15,.0f}" if cpu else f"{'':>8} {'':>15}"
        print(f"{label:<52} {wall:>8.2f} {features / wall:>11,.0f} {cpu_columns}")
    reference, tf_only, both = rows[0], rows[2], rows[3]
    print(f"speed vs the reference's conversion, one core, wall: {reference[1] / tf_only[1]:.1f}x TFRecord only, "
          f"{reference[1] / both[1]:.1f}x both formats; CPU time: {reference[2] / tf_only[2]:.1f}x and "
          f"{reference[2] / both[2]:.1f}x (target >= 10x; ours include start-up, the reference's exclude it)")
    (all_words, all_cpu), (distinct, distinct_cpu) = words["every occurrence"], words["distinct"]
    print(f"word tokenization, in this process: every occurrence ({all_words:,} words) {all_cpu:.2f} CPU s, "
          f"distinct words only ({distinct:,}, what create-squad does) {distinct_cpu:.2f} CPU s; with the difference "
          "added to ours (input without repeats), CPU time: "
          f"{reference[2] / (tf_only[2] + all_cpu - distinct_cpu):.1f}x")
    print(f"same features as the reference: {'yes' if equal else 'NO'} ({compared:,} compared)")
    if not equal or any(r["features"] != features for r in ours_tf + ours_both):
        sys.exit(1)


if __name__ == "__main__":
    main()
