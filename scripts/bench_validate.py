#!/usr/bin/env python3
"""Benchmark `bertprep validate` at 128/20 against the target of ≥ 50,000 records/s per core.

Builds a dataset from the golden G1 records (128/20) repeated --copies times
per file, in --files TFRecord files and as many OFRecord parts, then measures
in this run:
  1. every record check + statistics on one file, one process (CPU seconds,
     best of --repeat), with the native decoder when built and with the NumPy
     fallback path;
  2. the baseline: the project's pure-Python codec (`formats.read_records`),
     decoding only, on the first 5,000 records;
  3. the whole command line (`bertprep validate DIR`) with --workers 1 and N.

    python scripts/bench_validate.py [--shared ../shared] [--copies 36] [--files 4] [--workers 2]
"""

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared_fixtures import require_fixtures

TARGET = 50_000  # records/s per core at 128/20 (issue 4)


def build(directory, golden, copies, files):
    """Each file: a golden G1 file (1,373 records) repeated `copies` times, byte for byte."""
    for fmt, relative in (("tfrecord", "tfrecord/training/bench_training_{i}.tfrecord"),
                          ("ofrecord", "ofrecord/training/part-{i}")):
        data = (golden / f"G1.{fmt}").read_bytes() * copies
        for i in range(files):
            path = directory / relative.format(i=i)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def per_core(path, fmt, repeat):
    """Records/s of every check and statistic on one file, by CPU time (best of `repeat`)."""
    from bertprep.stages.validate.records import RecordSpec, scan_file

    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        report = scan_file(str(path), fmt, "training", RecordSpec(vocab_size=30522))
        best = min(best, time.process_time() - start)
    assert report.failed_records == 0
    return report.records / best


def pure_python_decode(path, count=5000):
    from bertprep import formats

    start = time.process_time()
    n = sum(1 for _ in itertools.islice(formats.read_records(str(path)), count))
    return n / (time.process_time() - start)


def cli(directory, workers):
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "bertprep", "validate", str(directory), "--quiet",
                             "--workers", str(workers)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bertprep validate failed:\n{result.stdout}{result.stderr}")
    return wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED")
                        or Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--copies", type=int, default=36,
                        help="copies of G1's 1,373 records per file (default 36: 49,428)")
    parser.add_argument("--files", type=int, default=4, help="files per format")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    require_fixtures(parser, args.shared)
    golden = Path(args.shared) / "fixtures" / "golden"
    import bertprep.stages.validate.decode as decode

    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        directory = Path(tmp)
        build(directory, golden, args.copies, args.files)
        records = 1373 * args.copies
        total = 2 * args.files * records
        tf_file = directory / "tfrecord" / "training" / "bench_training_0.tfrecord"
        of_file = directory / "ofrecord" / "training" / "part-0"
        baseline = pure_python_decode(of_file)
        print(f"dataset: {args.files} TFRecord files + {args.files} OFRecord parts of {records:,} records (128/20)")
        print(f"baseline: pure-Python codec, decode only        {baseline:>10,.0f} records/s per core")
        native = decode._native_decode is not None
        rows = []
        for label in (["native decoder"] if native else []) + ["NumPy fallback"]:
            if label == "NumPy fallback":
                decode._native_decode = decode._native_crc32c = None
            for fmt, path in (("tfrecord", tf_file), ("ofrecord", of_file)):
                rate = per_core(path, fmt, args.repeat)
                rows.append(rate)
                print(f"validate, all checks + statistics, {label:<14} {fmt}: {rate:>10,.0f} records/s per core "
                      f"({rate / baseline:.0f}× baseline, {rate / TARGET:.2f}× the {TARGET:,} target)")
        if not native:
            print("(bertprep._native is not built: only the NumPy path was measured)")
        one = cli(directory, 1)
        many = cli(directory, args.workers)
        print(f"command line, {total:,} records: --workers 1 {one:.2f} s ({total / one:,.0f} records/s), "
              f"--workers {args.workers} {many:.2f} s ({total / many:,.0f} records/s), speed-up {one / many:.2f}×")


if __name__ == "__main__":
    main()
