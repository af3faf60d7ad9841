"""What `bertprep tokenize` and `bertprep create` spend on their manifests when a corpus has many small shards.

    python scripts/bench_many_shards.py [--shards 2000 4000] [--stages tokenize create] [--workers 1] [--tmp DIR]
                                        [--baseline DIR]

Each stage runs in a process of its own (the Python API, `--workers 1` by default) on N tiny text shards (two
short documents each, under training/) with the embedded sample vocab, into a fresh output. An audit hook sees
every rename onto a manifest.json (atomic.atomic_open renames its fsynced temporary into place) and adds up the
bytes of the file renamed: the manifest's saves and the bytes they wrote. A line per stage and shard count gives
the wall seconds, the saves, the bytes written to the manifest and the manifest's final size; with --baseline (an
earlier checkout, e.g. a `git archive` of a commit with this checkout's bertprep/*.so copied in) the same run of
its code on the same shards follows, and a line of the ratios, baseline / this checkout.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKOUT = os.environ.get("BENCH_CHECKOUT", str(REPO))  # whose bertprep a measuring process runs
sys.path.insert(0, CHECKOUT)

import bertprep  # noqa: E402
from bertprep.stages.create import sample_paths  # noqa: E402

SAVES = {"count": 0, "bytes": 0}


def count_manifest_saves(event, args):
    """An audit hook: os.replace (event os.rename) of a temporary onto a manifest.json is one save."""
    if event == "os.rename" and os.path.basename(os.fsdecode(args[1])) == "manifest.json":
        SAVES["count"] += 1
        SAVES["bytes"] += os.path.getsize(args[0])


def write_shards(directory, count):
    """`count` tiny shards of two documents each under `directory`/training/."""
    training = Path(directory) / "training"
    training.mkdir(parents=True)
    for i in range(count):
        (training / f"many_training_{i}.txt").write_text(
            f"The cat {i} sat on the mat.\nIt was a good day.\n\nThe dog ran in the park {i} times.\nThen home.\n",
            encoding="utf-8")
    return directory


def measure(stage, shards, out, workers):
    """(wall seconds, saves, bytes saved, final manifest bytes) of one run of `stage`."""
    _, vocab = sample_paths()
    SAVES.update(count=0, bytes=0)
    start = time.perf_counter()
    getattr(bertprep, stage)(input=(str(shards),), vocab=vocab, out=str(out),
                             engine=bertprep.EngineOptions(workers=workers))
    wall = time.perf_counter() - start
    manifest = next(Path(out).rglob("manifest.json"))
    return wall, SAVES["count"], SAVES["bytes"], manifest.stat().st_size


def measure_in_a_process(checkout, stage, shards, out, workers):
    """measure() of `checkout`'s code, in a process of its own (its imports and memory apart from the other's)."""
    env = {**os.environ, "BENCH_CHECKOUT": str(checkout)}
    run = subprocess.run([sys.executable, __file__, "--measure", stage, str(shards), str(out), str(workers)],
                         env=env, capture_output=True, text=True, check=False)
    if run.returncode:
        sys.exit(f"{checkout}: {stage} failed:\n{run.stderr}")
    return json.loads(run.stdout.splitlines()[-1])


def main():
    if sys.argv[1:2] == ["--measure"]:  # a measuring process: one stage, one line of JSON
        stage, shards, out, workers = sys.argv[2:6]
        sys.addaudithook(count_manifest_saves)
        warnings.simplefilter("ignore")  # create's "no test split": these shards are training/ only
        print(json.dumps(measure(stage, shards, out, int(workers))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[2000, 4000])
    parser.add_argument("--stages", nargs="+", default=["tokenize", "create"], choices=["tokenize", "create"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--tmp", default=None, help="where the shards and outputs go (default: a temporary dir)")
    parser.add_argument("--baseline", help="an earlier bertprep checkout to run the same way")
    args = parser.parse_args()
    checkouts = [("this", REPO)]
    if args.baseline:
        if not os.path.isfile(os.path.join(args.baseline, "bertprep", "__init__.py")):
            parser.error(f"--baseline {args.baseline}: not a bertprep checkout (no bertprep/__init__.py there)")
        checkouts.append(("baseline", Path(args.baseline).resolve()))
    print(f"{'stage':<9} {'shards':>7} {'code':<9} {'wall s':>8} {'saves':>6} {'manifest bytes written':>23} "
          f"{'final':>10}")
    for count in args.shards:
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
            shards = write_shards(Path(tmp) / "many", count)
            for stage in args.stages:
                runs = {}
                for label, checkout in checkouts:
                    wall, saves, written, final = runs[label] = measure_in_a_process(
                        checkout, stage, shards, Path(tmp) / f"{stage}-{label}", args.workers)
                    print(f"{stage:<9} {count:>7,} {label:<9} {wall:>8.2f} {saves:>6,} {written:>23,} {final:>10,}",
                          flush=True)
                if "baseline" in runs:
                    (wall, _, written, _), (base_wall, _, base_written, _) = runs["this"], runs["baseline"]
                    print(f"{stage:<9} {count:>7,} baseline / this: {base_wall / wall:.1f}x wall, "
                          f"{base_written / written:.1f}x manifest bytes written", flush=True)


if __name__ == "__main__":
    main()
