"""Benchmark `bertprep shard`: sentence splitting + sharding throughput and peak RSS.

    python scripts/bench_shard.py [--shared DIR] [--size-mb 100] [--workers 1 2]

Corpora: fixtures/bench/wt2.txt, and generated corpora of size/10 and size MB
(WikiText-2 documents repeated with their sentences rotated, in 8 files, so
the work can run in parallel). For each run: wall time, CPU time of the whole
process tree, MB/s per core (input bytes / CPU seconds), MB/s wall, and the
peak RSS of the largest process. The baseline, measured in the same run, is
blingfire's `text_to_sentences` alone on the same text in one call (the
splitter's ceiling): the ratio says how much of that speed the full stage
keeps. The peak RSS has no ratio, by design: no baseline process shards
these corpora here; it is read across the corpus sizes of the same run, where
it should stay flat (the stage streams its input).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared_fixtures import require_fixtures

REPO = Path(__file__).resolve().parents[1]
MEASURE = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
if subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode:
    sys.exit(1)  # the command's own message, without this wrapper's traceback after it
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kib": usage.ru_maxrss}))
"""


def generate(directory, documents, size_bytes, files=8):
    """Write ~size_bytes of blank-line separated documents over `files` files, deterministically."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = size_bytes // files
    for f in range(files):
        written = 0
        with open(directory / f"part-{f}.txt", "w", encoding="utf-8") as out:
            round_ = 0
            while written < per_file:
                for d, doc in enumerate(documents):
                    lines = doc.split("\n")
                    shift = (f * 7 + round_ * 3 + d) % len(lines)
                    block = "\n".join(lines[shift:] + lines[:shift]) + "\n\n"
                    out.write(block)
                    written += len(block.encode("utf-8"))
                    if written >= per_file:
                        break
                round_ += 1
    return directory


def measure(inputs, workers, scratch):
    out = scratch / f"out-{time.monotonic_ns()}"
    command = [sys.executable, "-m", "bertprep", "shard", "--input", *map(str, inputs), "--corpus", "bench",
               "--out", str(out), "--workers", str(workers), "--train-shards", "256", "--test-shards", "256", "--quiet"]
    result = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    if result.returncode:  # bertprep's own one-line message, not the measuring wrapper's traceback
        said = [line for line in result.stderr.splitlines() if line.startswith("bertprep")]
        said = said or result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]
        sys.exit(f"bench_shard.py: `bertprep shard` on {', '.join(map(str, inputs))} failed: {said[0]}")
    return json.loads(result.stdout)


def baseline_mb_s(text):
    import blingfire

    joined = text.replace("\n", "\u2029")
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        blingfire.text_to_sentences(joined)
        best = min(best, time.process_time() - start)
    return len(text.encode("utf-8")) / best / 1e6


def split_stage_mb_s(path):
    sys.path.insert(0, str(REPO))
    from bertprep.stages.shard import split_input

    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            start = time.process_time()
            # the stage's task without --eval-documents and without a manifest's digest
            split_input((0, str(path), os.path.join(tmp, "scratch.txt"), False, None))
            best = min(best, time.process_time() - start)
    return path.stat().st_size / best / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED") or str(REPO.parent / "shared"))
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    require_fixtures(parser, args.shared)
    if args.size_mb < 10:  # its tenth is a corpus too, and a 0 MB one has nothing to shard
        parser.error(f"--size-mb must be at least 10 (it also generates a corpus of a tenth of it), not {args.size_mb}")
    wt2 = Path(args.shared) / "fixtures/bench/wt2.txt"
    text = wt2.read_text(encoding="utf-8")
    documents = [d for d in text.split("\n\n") if d.strip()]
    base = baseline_mb_s(text)
    print(f"baseline: blingfire text_to_sentences alone on wt2.txt, one call: {base:.1f} MB/s per core")
    stage = split_stage_mb_s(wt2)
    print(f"wt2.txt pass 1 (read + split + scratch write) in-process, no start-up: {stage:.1f} MB/s per core "
          f"({stage / base:.2f} x baseline)")
    print(f"{'corpus':<22}{'MB':>8}{'workers':>8}{'wall s':>8}{'cpu s':>8}{'MB/s/core':>10}{'MB/s wall':>10}"
          f"{'vs base':>8}{'peak RSS':>10}")
    with tempfile.TemporaryDirectory(prefix="bench-shard-") as tmp:
        scratch = Path(tmp)
        corpora = [("wt2.txt", [wt2])]
        for mb in (args.size_mb // 10, args.size_mb):
            corpora.append((f"generated {mb} MB", [generate(scratch / f"gen{mb}", documents, mb * 1_000_000)]))
        for name, inputs in corpora:
            size = sum(p.stat().st_size for i in inputs for p in ([i] if i.is_file() else i.iterdir()))
            for workers in (args.workers if name != "wt2.txt" else [1]):
                m = measure(inputs, workers, scratch)
                per_core = size / m["cpu"] / 1e6
                print(f"{name:<22}{size / 1e6:>8.1f}{workers:>8}{m['wall']:>8.2f}{m['cpu']:>8.2f}{per_core:>10.2f}"
                      f"{size / m['wall'] / 1e6:>10.2f}{per_core / base:>8.2f}{m['maxrss_kib'] / 1024:>8.0f} MiB",
                      flush=True)


if __name__ == "__main__":
    main()
