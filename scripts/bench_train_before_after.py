"""The trainer's step now and at a baseline commit, TensorFlow and JAX, in one invocation.

    python scripts/bench_train_before_after.py [--baseline d687fc1^1] [--model mini] [--batch 8]
        [--data RECORDS_DIR] [--precision fp32] [--iterations 8 --skip 2 --runs 2] [--json]

Four configurations: {this tree, the baseline ref} x {KERAS_BACKEND=tensorflow, jax}, each run a
fresh process of trainer.benchmark's worker (`python -m trainer`'s own run, timed as
scripts/bench_train_peers.py times ours: the clock when each iteration's results reached the host,
throughput = batch x (iterations - skip) / (t[iterations] - t[skip]), median over runs), on the same
records, model, batch and precision (AdamW, dropout 0.1, one device). The baseline's code is
`git archive`d into a cache directory (its C core built there once) and run with PYTHONPATH pointed
at it. The runs are interleaved (run 1 of all four, then run 2 ..., the order reversed every other
run) so that a change in the machine's load falls on all alike. Printed: seq/s per configuration and
the ratios TensorFlow / JAX (now, before) and now / before (per backend), the latter also as "per
matmul": every run divided by its own process's large-matmul rate (worker --peak), which follows the
load of the moment, so these ratios are the steadier ones on a shared machine (not across backends,
whose matmul rates differ). The load average at start
and end is printed with them. Default data: the embedded sample records (128/20), the model at
vocab 30,522 (--vocab-size) so the masked-LM head has its real size.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench_train_peers import run_once  # noqa: E402
from trainer.benchmark import method  # noqa: E402
from trainer.config import BertConfig  # noqa: E402

BACKENDS = ("tensorflow", "jax")
TREES = ("now", "before")


def baseline_tree(ref, quiet):
    """The tree of `ref` in a cache directory named by its commit, extracted and built once."""
    script = os.path.splitext(os.path.basename(sys.argv[0]))[0]  # bench_startup and gpu_step_traffic call this too
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=REPO, capture_output=True,
                            text=True)
    if commit.returncode != 0:
        raise SystemExit(f"{script}: error: {ref}: not a commit of {REPO}")
    commit = commit.stdout.strip()
    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bertprep",
                        "baseline-trees")
    tree = os.path.join(root, commit)
    if os.path.isdir(tree):
        return tree, commit
    os.makedirs(root, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=root)
    if not quiet:
        print(f"extracting {ref} ({commit[:12]}) to {tree} and building its C core", file=sys.stderr)
    try:  # a failed or interrupted extraction leaves no copy of the tree behind
        archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", partial], input=archive, check=True)
        if not os.path.isdir(os.path.join(partial, "trainer")):  # else this tree's trainer would run its bertprep
            raise SystemExit(f"{script}: error: {ref} ({commit[:12]}) has no trainer/: there is no trainer of it "
                             "to measure")
        # The C core is optional; a baseline without it would read records more slowly than this tree. A commit
        # from before it (no setup.py) is run as it was, in Python.
        if os.path.isfile(os.path.join(partial, "setup.py")):
            build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=partial,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            # optional=True in setup.py: a compiler that fails leaves exit 0 and no module, and the baseline
            # would then run in Python against this tree's C core
            built = glob.glob(os.path.join(partial, "bertprep", "_native*.so"))
            if build.returncode != 0 or (not built and glob.glob(os.path.join(REPO, "bertprep", "_native*.so"))):
                said = [line for line in build.stderr.splitlines() if "failed" in line or "error" in line.lower()]
                said = said or build.stderr.strip().splitlines()[-1:] or [f"exit {build.returncode}"]
                said = said[0].split(": Command ")[0].strip()[:300]  # not the compiler's whole command line
                raise SystemExit(f"{script}: error: {ref} ({commit[:12]}): its C core did not build, where this "
                                 f"tree's is built, so it would run in Python ({said})")
        os.rename(partial, tree)  # whole or absent
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return tree, commit


def load_average():
    return [round(x, 2) for x in os.getloadavg()]


def ratio(a, b):
    return a / b if a and b else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="d687fc1^1", help="git ref of the code before (default: before issue 21)")
    p.add_argument("--data", help="ofrecord records (default: the embedded sample, 128/20)")
    p.add_argument("--model", default="mini")
    p.add_argument("--vocab-size", type=int, default=30522)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--skip", type=int, default=2)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--backends", default=",".join(BACKENDS), help="to time only one: tensorflow or jax")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if args.iterations <= args.skip:
        p.error("--iterations must exceed --skip")
    from trainer.data import Records
    from trainer.pretraining import sample_records

    data = os.path.abspath(args.data or sample_records())
    records = Records(data, "ofrecord")
    config = BertConfig.sized(args.model, vocab_size=max(args.vocab_size, records.vocab_size or 0),
                              hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    trees = {"now": REPO}
    trees["before"], commit = baseline_tree(args.baseline, args.quiet)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "trainer", "bertprep"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    scratch = tempfile.mkdtemp(prefix="bench-before-after-")
    backends = [b for b in BACKENDS if b in args.backends.split(",")]
    configurations = [(tree, backend) for backend in backends for tree in TREES]
    found = {c: {"throughputs": [], "peaks": [], "error": None} for c in configurations}
    load_start = load_average()
    for run in range(1, args.runs + 1):
        for tree, backend in configurations if run % 2 else configurations[::-1]:
            entry = found[(tree, backend)]
            if entry["error"]:
                continue
            log = os.path.join(scratch, f"{tree}-{backend}-run{run}.log")
            try:
                times, peak = run_once(f"ours-{backend}", config, data, args.batch, args.precision, args.iterations,
                                       None, scratch, log, repo=trees[tree])
            except RuntimeError as exc:
                entry["error"] = str(exc)
                print(f"{tree} {backend} run {run}: failed: {exc} (log {log})", file=sys.stderr)
                continue
            entry["throughputs"].append(method.throughput(times, args.batch, args.skip))
            entry["peaks"].append(peak)
            if not args.quiet:
                print(f"run {run}/{args.runs} {tree:<6} {backend:<10} {entry['throughputs'][-1]:8.2f} seq/s, "
                      f"matmul {peak / 1e9:.1f} GFLOP/s, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    load_end = load_average()
    if not any(entry["error"] for entry in found.values()):  # the logs a failure names stay; else nothing does
        shutil.rmtree(scratch, ignore_errors=True)
    rows = {}
    for (tree, backend), entry in found.items():
        per_matmul = [t / (k / 1e9) for t, k in zip(entry["throughputs"], entry["peaks"])]
        rows[f"{tree}-{backend}"] = {"tree": tree, "backend": backend, "median": method.median(entry["throughputs"]),
                                     "throughputs": entry["throughputs"], "peak_flops": entry["peaks"],
                                     "per_matmul_gflops": method.median(per_matmul), "error": entry["error"]}

    def ratios(key):
        value = {name: row[key] for name, row in rows.items()}
        pairs = {"tensorflow/jax now": ("now-tensorflow", "now-jax"),
                 "tensorflow/jax before": ("before-tensorflow", "before-jax"),
                 "now/before tensorflow": ("now-tensorflow", "before-tensorflow"),
                 "now/before jax": ("now-jax", "before-jax")}
        # Per matmul across backends would divide by two frameworks' different matmul rates.
        return {name: ratio(value.get(a), value.get(b)) for name, (a, b) in pairs.items()
                if key == "median" or name.startswith("now/before")}

    result = {"now": head + (" + uncommitted changes to the code" if dirty else ""),
              "before": f"{args.baseline} ({commit[:12]})",
              "model": args.model, "vocab_size": config.vocab_size, "shape": f"{records.seq}/{records.pred}",
              "batch": args.batch, "precision": args.precision, "dropout": args.dropout,
              "iterations": args.iterations, "skip": args.skip, "runs": args.runs,
              "cores": len(os.sched_getaffinity(0)),
              "load_average_start": load_start, "load_average_end": load_end, "rows": rows,
              "ratios_seq_per_s": ratios("median"), "ratios_per_matmul": ratios("per_matmul_gflops")}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"now {result['now']}; before {result['before']}")
    print(f"model {args.model} (vocab {config.vocab_size}), {result['shape']}, batch {args.batch}, {args.precision}, "
          f"dropout {args.dropout}, AdamW, 1 device; {args.iterations} iterations, first {args.skip} skipped; "
          f"median of {args.runs} interleaved runs; {result['cores']} cores")
    print(f"load average (1/5/15 min) at start {load_start}, at end {load_end}")
    print(f"{'tree':<7}{'backend':<11}{'seq/s':>8}  {'runs':<20}{'seq/s per matmul GFLOP/s':>26}")
    for row in rows.values():
        if row["median"] is None:
            print(f"{row['tree']:<7}{row['backend']:<11}failed: {row['error']}")
            continue
        runs = " ".join(f"{t:.2f}" for t in row["throughputs"])
        print(f"{row['tree']:<7}{row['backend']:<11}{row['median']:8.2f}  {runs:<20}{row['per_matmul_gflops']:26.4f}")
    print(f"{'ratio':<24}{'seq/s':>8}{'per matmul':>12}")
    for name, value in result["ratios_seq_per_s"].items():
        steady = result["ratios_per_matmul"].get(name)
        print(f"{name:<24}" + "".join(f"{v:>8.2f}    " if v else f"{'-':>8}    " for v in (value, steady)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
