"""Peak RSS of `bertprep dedup`'s processes against the corpus size (issue 42), measured in this run.

    python scripts/bench_dedup_memory.py [--documents 100000 400000] [--memory 64M] [--workers 2]
                                         [--baseline /path/to/an/older/checkout]

The corpora are tests/dedup_corpus.py's short_corpus (12-word documents in 4 parts, about 1% exact and 1% near
copies), as the heavy test `test_memory_does_not_grow_with_the_corpus` runs them. Each run is the command line
(`python -m bertprep dedup ... --num-perm 32`) of this checkout with --memory, then of --baseline (its code, no
--memory) when given; printed: the peak of the summed RSS of the command's process tree (its workers included,
sampled every 20 ms), the wall time and what it removed; with --baseline, after each corpus size, this checkout's
peak RSS and wall time as multiples of the baseline's. Without --baseline no ratio is printed: the figures are then
read against one another across --documents, the smallest corpus's peak being the one a larger corpus's should
stay near (issue 42: memory that does not grow with the corpus; the heavy test asserts within 1.25x).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from dedup_corpus import peak_rss, short_corpus  # noqa: E402


def ratio_line(documents, ours, baseline):
    """This checkout's peak RSS and wall time on one corpus as multiples of the baseline's, from (peak, seconds)."""
    return (f"{documents:9,} documents  this checkout / baseline: {ours[0] / baseline[0]:.2f}x peak RSS, "
            f"{ours[1] / baseline[1]:.2f}x wall")


def baseline_label(baseline):
    """The baseline's row label: its path, and its short revision when it is the top of a git checkout. A folder that
    is none (a `git archive` export) has no revision; one inside another checkout would show that checkout's."""
    found = subprocess.run(["git", "-C", baseline, "rev-parse", "--show-toplevel", "--short", "HEAD"],
                           capture_output=True, text=True)
    lines = found.stdout.splitlines()
    if found.returncode or len(lines) != 2 or not os.path.samefile(lines[0], baseline):
        return baseline
    return f"{baseline} ({lines[1]})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--memory", default="64M", help="this checkout's --memory (default: 64M)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--baseline", help="a checkout of an earlier bertprep to run the same way, without --memory")
    args = parser.parse_args()
    checkouts = [(f"this checkout, --memory {args.memory}", REPO, ("--memory", args.memory))]
    if args.baseline:
        # absolute: the runs' working directory is a temporary one, where a relative PYTHONPATH names nothing and
        # `python -m bertprep` would quietly run the installed bertprep as the "baseline"
        args.baseline = os.path.abspath(args.baseline)
        if not os.path.isfile(os.path.join(args.baseline, "bertprep", "__init__.py")):
            parser.error(f"--baseline {args.baseline}: not a bertprep checkout (no bertprep/__init__.py there)")
        checkouts.append((baseline_label(args.baseline), Path(args.baseline), ()))
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # `python -m` puts the working directory before PYTHONPATH: a checkout there would be run
        for documents in args.documents:
            corpus = short_corpus(Path(tmp) / f"short-{documents}", documents)
            figures = []  # (peak RSS, seconds) of each checkout, this one first
            for label, checkout, flags in checkouts:
                start = time.perf_counter()
                os.environ["PYTHONPATH"] = str(checkout)
                peak, run = peak_rss([sys.executable, "-m", "bertprep", "dedup", "--input", str(corpus), "--out",
                                      str(Path(tmp) / f"out-{documents}-{len(label)}"), "--num-perm", "32",
                                      "--workers", str(args.workers), "--json", "--quiet", *flags])
                if run.returncode:
                    sys.exit(run.stderr)
                summary = json.loads(run.stdout)
                figures.append((peak, time.perf_counter() - start))
                print(f"{documents:9,} documents  {label:40}  peak RSS {peak / 2**20:5,.0f} MiB  "
                      f"{figures[-1][1]:6.1f} s  {summary['exact']:,} exact, {summary['near']:,} near",
                      flush=True)
            if len(figures) == 2:
                print(ratio_line(documents, *figures), flush=True)
        os.chdir(here)


if __name__ == "__main__":
    main()
