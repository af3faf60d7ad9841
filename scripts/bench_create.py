#!/usr/bin/env python3
"""Benchmark `bertprep create` against google-research/bert's create_pretraining_data.py.

Runs the real command line as child processes on fixtures/bench/wt2.txt at
128/20, dupe factor 5, seed 12345, and prints wall time, instances/s and peak
RSS for:
  0. with --reference DIR (a google-research/bert checkout; default
     $BERTPREP_GOOGLE_BERT), the reference script itself on the whole corpus,
     run in this invocation under the installed TensorFlow's tf.compat.v1, and
     what is equal between its file and ours: every feature of every record,
     and the bytes. Without it the ratio uses the figures measured on
     2026-11-21 (19.4 s, 676 MiB, 25,500 instances), labelled as such;
  1. one worker on the whole corpus;
  2. the same corpus cut into 4 shards with 1 worker and with N workers
     (default 2), and the speed-up between the two, measured in this run;
     with --copies K each shard holds its quarter K times, so start-up
     (~0.3 s of imports) stops dominating a 1-second job.
Each configuration runs --repeat times (median wall, max RSS).

    python scripts/bench_create.py [--shared ../shared] [--workers 2] [--repeat 3] [--copies 1]
                                   [--engine local|dask] [--tmp DIR] [--reference DIR]

With --engine dask the 4-shard runs also run on the local engine, and the
ratio of the two engines' wall times is printed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared_fixtures import require_fixtures

REFERENCE_SECONDS = 19.4  # measured 2026-11-21, median of 3 on a 2-core machine of this kind (no --reference)
REFERENCE_RSS_MIB = 676
REFERENCE_INSTANCES = 25_500


def run_create(args, out):
    """Run one `bertprep create`; return (wall seconds, peak RSS MiB of the largest process, summary)."""
    command = [sys.executable, "-m", "bertprep", "create", *args, "--out", str(out), "--json", "--quiet"]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"bertprep create failed: {stderr.decode()}")
    # ru_maxrss of RUSAGE_CHILDREN: the largest of the waited-for descendants (KiB on Linux).
    import resource

    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, peak_mib, json.loads(stdout)


# The reference as written, its `import tensorflow as tf` given tf.compat.v1 (tf.flags, tf.gfile, tf.python_io).
_REFERENCE_RUNNER = """import runpy, sys
import tensorflow.compat.v1 as tf
sys.modules["tensorflow"] = tf
sys.path.insert(0, sys.argv[1])
sys.argv = [sys.argv[1] + "/create_pretraining_data.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_reference(bert_dir, corpus, vocab, out, seq, pred, repeat):
    """create_pretraining_data.py on `corpus` `repeat` times: (median wall s, max peak RSS MiB)."""
    flags = [f"--input_file={corpus}", f"--output_file={out}", f"--vocab_file={vocab}", "--do_lower_case=True",
             f"--max_seq_length={seq}", f"--max_predictions_per_seq={pred}", "--masked_lm_prob=0.15",
             "--random_seed=12345", "--dupe_factor=5"]
    walls, peaks = [], []
    for _ in range(repeat):
        code = ("import resource,subprocess,sys,time,json;t=time.perf_counter();"
                f"r=subprocess.run([sys.executable,'-c',{_REFERENCE_RUNNER!r},{str(bert_dir)!r},*{flags!r}],"
                "capture_output=True);w=time.perf_counter()-t;"
                "sys.exit(r.stderr.decode()[-3000:]) if r.returncode else None;"
                "print(json.dumps([w,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024]))")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        if result.returncode != 0:
            sys.exit(f"the reference failed: {result.stderr}")
        wall, peak = json.loads(result.stdout)
        walls.append(wall)
        peaks.append(peak)
    return statistics.median(walls), max(peaks)


def compare_with_reference(reference_file, our_dir):
    """(records, records whose every feature equals the reference's, byte-identical file) of our TFRecord output
    of the whole corpus (its parts in order) against the reference's one file."""
    from bertprep import formats

    ours = sorted(Path(our_dir).rglob("*.tfrecord"))
    theirs = list(formats.read_records(reference_file))
    mine = [record for path in ours for record in formats.read_records(path)]
    equal = sum(1 for a, b in zip(theirs, mine) if a.keys() == b.keys() and all(
        list(a[key]) == list(b[key]) for key in a))
    same_bytes = len(ours) == 1 and ours[0].read_bytes() == Path(reference_file).read_bytes()
    return len(theirs), len(mine), equal, same_bytes


_SPIN = "s=0\nfor i in range(6_000_000): s+=i*i"


def machine_scaling(workers):
    """What N processes gain over one on this machine: a pure CPU loop run alone, then N at once.

    Virtual CPUs that are hyperthreads of one core, or throttled, gain far less
    than N; no N-worker job can beat this ceiling here.
    """
    def wall(n):
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(n)]
        for proc in procs:
            proc.wait()
        return time.perf_counter() - start

    alone = min(wall(1) for _ in range(2))
    together = min(wall(workers) for _ in range(2))
    return workers * alone / together


def measure(label, args, repeat, workdir):
    walls, peaks = [], []
    summary = None
    for i in range(repeat):
        out = Path(workdir) / f"{label}-{i}"
        # A fresh interpreter per measurement so RSS is that run's alone.
        code = (
            "import json,resource,sys;sys.path[:0]=" + json.dumps(sys.path) + ";"
            "from bench_create import run_create;"
            f"print(json.dumps(run_create({json.dumps(args)}, {json.dumps(str(out))})))"
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent)
        if result.returncode != 0:
            sys.exit(result.stderr)
        wall, peak, summary = json.loads(result.stdout)
        walls.append(wall)
        peaks.append(peak)
    instances = sum(summary["instances"].values())
    wall = statistics.median(walls)
    return {"label": label, "wall_s": wall, "walls": walls, "peak_rss_mib": max(peaks), "instances": instances,
            "instances_per_s": instances / wall}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED")
                        or str(Path(__file__).resolve().parents[2] / "shared"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--copies", type=int, default=1,
                        help="repeat each shard's quarter K times (a larger multi-shard job)")
    parser.add_argument("--engine", default="local", help="local or dask (dask needs the distributed extra)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--pred", type=int, default=20)
    parser.add_argument("--tmp", default=None, help="where inputs and outputs go, e.g. /dev/shm to take the disk out")
    parser.add_argument("--reference", default=os.environ.get("BERTPREP_GOOGLE_BERT"),
                        help="a google-research/bert checkout: run its create_pretraining_data.py in this invocation "
                             "(default $BERTPREP_GOOGLE_BERT)")
    args = parser.parse_args()
    require_fixtures(parser, args.shared)
    if args.reference and not (Path(args.reference) / "create_pretraining_data.py").is_file():
        parser.error(f"--reference {args.reference}: no create_pretraining_data.py there (a google-research/bert "
                     "checkout; $BERTPREP_GOOGLE_BERT is the default)")
    fixtures = Path(args.shared) / "fixtures"
    corpus = fixtures / "bench" / "wt2.txt"
    vocab = fixtures / "golden" / "vocab.txt"
    common = ["--vocab", str(vocab), "--seq", str(args.seq), "--pred", str(args.pred), "--dupe-factor", "5", "--seed",
              "12345"]
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        shards = Path(tmp) / "wt2" / "training"
        shards.mkdir(parents=True)
        documents = corpus.read_text(encoding="utf-8").strip("\n").split("\n\n")
        for i in range(4):  # contiguous quarters: each shard keeps whole documents
            part = documents[i * len(documents) // 4:(i + 1) * len(documents) // 4]
            (shards / f"wt2_training_{i}.txt").write_text("\n\n".join(part * args.copies) + "\n", encoding="utf-8")
        sharded = ["--input", str(shards.parent), *common]
        one = measure("1 worker, whole corpus", ["--input", str(corpus), "--workers", "1", *common], args.repeat, tmp)
        if args.reference:
            reference_file = Path(tmp) / "reference.tfrecord"
            reference_s, reference_rss = run_reference(args.reference, corpus, vocab, reference_file, args.seq,
                                                       args.pred, args.repeat)
            equality = compare_with_reference(reference_file, Path(tmp) / "1 worker, whole corpus-0")
        four_1 = measure(f"1 worker, 4 shards x{args.copies}", [*sharded, "--workers", "1"], args.repeat, tmp)
        four_n = measure(f"{args.workers} workers, 4 shards x{args.copies}", [*sharded, "--workers", str(args.workers)],
                         args.repeat, tmp)
        rows = [one, four_1, four_n]
        if args.engine != "local":
            on_engine = measure(f"{args.engine}, {args.workers} workers, 4 shards x{args.copies}",
                                [*sharded, "--workers", str(args.workers), "--engine", args.engine], args.repeat, tmp)
            rows.append(on_engine)
    print(f"bertprep create on {corpus.name} ({corpus.stat().st_size / 1e6:.1f} MB), {args.seq}/{args.pred}, dupe 5, "
          f"seed 12345, {os.cpu_count()} cores, median of {args.repeat}, files under "
          f"{args.tmp or tempfile.gettempdir()}")
    print(f"{'configuration':<28} {'wall s':>8} {'inst/s':>9} {'peak RSS MiB':>13} {'instances':>10}")
    for row in rows:
        print(f"{row['label']:<28} {row['wall_s']:>8.2f} {row['instances_per_s']:>9,.0f} {row['peak_rss_mib']:>13.0f} "
              f"{row['instances']:>10,}")
    if args.reference:
        from importlib.metadata import version  # not `import tensorflow`: its start-up lines

        theirs, mine, equal, same_bytes = equality
        print(f"{'reference, this run':<28} {reference_s:>8.2f} {theirs / reference_s:>9,.0f} {reference_rss:>13.0f} "
              f"{theirs:>10,}")
        print(f"equal to the reference's file: {equal:,} of {theirs:,} records in every feature ({mine:,} ours); "
              f"bytes {'identical' if same_bytes else 'not identical'} (TensorFlow {version('tensorflow')}, "
              f"protobuf {version('protobuf')})")
    elif (args.seq, args.pred) == (128, 20):
        reference_s = REFERENCE_SECONDS
        print(f"reference, 2026-11-21        {REFERENCE_SECONDS:>8.2f} "
              f"{REFERENCE_INSTANCES / REFERENCE_SECONDS:>9,.0f} {REFERENCE_RSS_MIB:>13.0f} {REFERENCE_INSTANCES:>10,}")
    megabytes = corpus.stat().st_size / 1e6 * args.copies
    print(f"throughput, 1 worker on 4 shards x{args.copies}: {megabytes / four_1['wall_s']:.2f} MB of text per second "
          f"per core ({args.seq}/{args.pred}, dupe 5, start-up included)")
    if args.reference or (args.seq, args.pred) == (128, 20):
        print(f"speed vs reference, 1 worker: {reference_s / one['wall_s']:.1f}x (target >= 10x, <= 1.9 s); "
              f"peak RSS {one['peak_rss_mib']:.0f} MiB (target <= 170 MiB)")
    ceiling = machine_scaling(args.workers)
    print(f"{args.workers} workers vs 1 worker on 4 shards x{args.copies}: {four_1['wall_s'] / four_n['wall_s']:.2f}x "
          f"(target >= 1.8x); this machine's ceiling, {args.workers} processes of a pure CPU loop vs 1: {ceiling:.2f}x")
    if args.engine != "local":
        print(f"{args.engine} engine vs local engine, {args.workers} workers on 4 shards x{args.copies}: "
              f"{on_engine['wall_s'] / four_n['wall_s']:.2f}x the wall time (target <= 1.15x)")
    if (args.seq, args.pred) == (128, 20) and one["instances"] != REFERENCE_INSTANCES:
        print(f"WARNING: {one['instances']} instances, the reference makes {REFERENCE_INSTANCES}")


if __name__ == "__main__":
    main()
