"""Seconds `dedup` spends choosing its LSH bands, against datasketch choosing them, at large --num-perm.

    python scripts/bench_dedup_bands.py [--num-perm 1024 4096 16384] [--threshold 0.8]

The baseline, run in the same invocation and process, is datasketch's own `_optimal_param` (scipy's quad, pair
by pair), which `bertprep.stages.dedup.optimal_bands` reproduces without scipy; each must pick the same (bands,
rows) before anything is reported. Needs the `test` extra (datasketch).
"""

import argparse
import time

from datasketch.lsh import _optimal_param

from bertprep.stages.dedup import optimal_bands


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-perm", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--threshold", type=float, default=0.8)
    args = parser.parse_args()
    print(f"{'num_perm':>8} {'bands x rows':>13} {'datasketch s':>13} {'bertprep s':>11} {'ratio':>7}")
    for num_perm in args.num_perm:
        theirs, their_seconds = timed(_optimal_param, args.threshold, num_perm, 0.5, 0.5)
        ours, our_seconds = timed(optimal_bands.__wrapped__, args.threshold, num_perm)
        if tuple(ours) != tuple(theirs):
            raise SystemExit(f"num_perm {num_perm}: bertprep picked {ours}, datasketch {theirs}")
        print(f"{num_perm:>8} {f'{ours[0]} x {ours[1]}':>13} {their_seconds:>13.2f} {our_seconds:>11.2f} "
              f"{their_seconds / our_seconds:>6.1f}x")


if __name__ == "__main__":
    main()
