"""Time of `bertprep dedup` on one large group of near-duplicates (thousands of copies of one boilerplate page,
each with its own last word: every copy shares band keys with the others), measured in this run.

    python scripts/bench_dedup_large_group.py [--documents 2000 4000 8000] [--memory 1G] [--baseline DIR]

Each run is the command line (`python -m bertprep dedup ... --workers 1`) of this checkout, then of --baseline
(an older checkout, e.g. a `git archive` of an earlier commit) when given, on the same corpus; printed: the wall
time and the CPU time (the machine's load aside), the peak RSS of the process tree and what was removed, and with
--baseline whether the two outputs are the same bytes (every part, and manifest.json but its `seconds`) and the
ratios, baseline / this checkout, of the CPU and wall seconds.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from dedup_corpus import peak_rss, write_corpus  # noqa: E402


def boilerplate_corpus(directory, documents, words=60):
    """`documents` copies of one `words`-word page, each with its own last word."""
    base = " ".join(f"w{i}" for i in range(words))
    return write_corpus(directory, [f"{base} doc{i}" for i in range(documents)])


def output_of(out):
    """{relative path: bytes} of an output, manifest.json without its `seconds` (a run's time)."""
    files = {}
    for folder, _dirs, names in os.walk(out):
        for name in names:
            path = Path(folder) / name
            files[str(path.relative_to(out))] = path.read_bytes()
    manifest = json.loads(files.pop("manifest.json"))
    manifest.pop("seconds")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def children_cpu():
    """The CPU seconds (user and system) of this process's ended children: a run's, apart from the machine's load."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, nargs="+", default=[2000, 4000, 8000])
    parser.add_argument("--memory", default="1G")
    parser.add_argument("--baseline", help="an earlier bertprep checkout to run the same way")
    args = parser.parse_args()
    checkouts = [("this checkout", REPO)]
    if args.baseline:
        args.baseline = os.path.abspath(args.baseline)
        if not os.path.isfile(os.path.join(args.baseline, "bertprep", "__init__.py")):
            parser.error(f"--baseline {args.baseline}: not a bertprep checkout (no bertprep/__init__.py there)")
        checkouts.append(("baseline", Path(args.baseline)))
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # `python -m` puts the working directory before PYTHONPATH: a checkout there would be run
        for documents in args.documents:
            corpus = boilerplate_corpus(Path(tmp) / f"c{documents}", documents)
            outputs, times = [], []
            for label, checkout in checkouts:
                out = Path(tmp) / f"out-{documents}-{label.replace(' ', '-')}"
                os.environ["PYTHONPATH"] = str(checkout)
                start, cpu = time.perf_counter(), children_cpu()
                peak, run = peak_rss([sys.executable, "-m", "bertprep", "dedup", "--input", str(corpus), "--out",
                                      str(out), "--memory", args.memory, "--workers", "1", "--json", "--quiet"])
                seconds, cpu = time.perf_counter() - start, children_cpu() - cpu
                if run.returncode:
                    sys.exit(run.stderr)
                summary = json.loads(run.stdout)
                outputs.append(output_of(out))
                times.append((cpu, seconds))
                print(f"{documents:7,} copies  {label:14}  {seconds:7.1f} s ({cpu:6.1f} s of CPU)  "
                      f"peak RSS {peak / 2**20:5,.0f} MiB  "
                      f"{summary['near']:,} near, {summary['exact']:,} exact, "
                      f"{summary['candidate_pairs']:,} candidate pairs", flush=True)
            if len(outputs) == 2:
                print(f"{documents:7,} copies  same bytes (parts and manifest but `seconds`): "
                      f"{outputs[0] == outputs[1]}", flush=True)
                (cpu, seconds), (base_cpu, base_seconds) = times
                print(f"{documents:7,} copies  baseline / this checkout: {base_cpu / cpu:.1f}x CPU, "
                      f"{base_seconds / seconds:.1f}x wall", flush=True)
    os.chdir(here)


if __name__ == "__main__":
    main()
