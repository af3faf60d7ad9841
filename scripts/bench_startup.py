"""Seconds from a `python -m trainer` process's start to its first step, cold and warm, per set of flags.

    python scripts/bench_startup.py --records R [--model base] [--batch-size 8] [--precision amp]
        [--variant=FLAGS ...] [--warm-flags=FLAGS] [--baseline REF] [--backend jax] [--phases] [--json]

For each variant (the first, by default none, is the baseline; with --baseline REF the baseline is the
first variant run by the code of commit REF, extracted and built as scripts/bench_train_before_after.py
does): one run on an empty compilation cache
folder of its own (cold), then one on the cache it filled (warm); 3 steps, a log line each. Printed per
variant: the seconds to the model built (the first "trainer:" line) and to "train step 1", cold and warm,
and each as a ratio to the baseline's, then where each start went by the trainer's own clock (its
summary's `startup`, trainer/startup.py: imports, model built, first step, and the seconds JAX traced,
lowered, compiled or loaded; unprofiled; "—" for code from before the clock). With --phases, one more
warm run of each variant runs under cProfile, and where its start-up went is printed: the seconds spent in
gpu_check.PHASES (the imports, JAX's backends starting, the model built, the step traced, lowered, compiled
or loaded from the cache, and its first results fetched); cProfile slows Python-heavy phases, so these are
shares, not the timings above.
With --warm-flags=FLAGS (say --warm-flags="--seed 2"), each warm run adds FLAGS to its variant's: a start
that finds the cache another run filled, one that differs from it in FLAGS. A variant's "{checkpoint}" is
replaced by a checkpoint this tree's trainer makes first (the same model, one step, a cache of its own), so
--variant="--init-checkpoint {checkpoint}" measures a start from a checkpoint.
On a CPU the step's compilation is the CPU's: a GPU's is measured by scripts/gpu_check.sh --lever.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_check import (  # noqa: E402
    FIRST_STEP,
    first_time,
    logged_startup,
    phase_seconds,
    stamped_run,
    start_up_argv,
    startup_line,
    startup_log,
)

MODEL_BUILT = re.compile(r"^trainer: \d+ device")


def timed_run(args, flags, cache, tree=REPO, profile=None):
    """(seconds to the first "trainer:" line, seconds to "train step 1", the trainer's own start-up figures or
    None) of one run (under cProfile writing to `profile`, where given: the same run, so that a warm cache holds
    its programs)."""
    log_json = startup_log(cache)
    argv = start_up_argv(args.records, args.model, args.batch_size, args.precision, flags, profile, log_json)
    env = dict(os.environ, PYTHONUNBUFFERED="1", KERAS_BACKEND=args.backend, BERTPREP_COMPILATION_CACHE_DIR=cache,
               PYTHONPATH=os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")])))
    status, lines, seconds = stamped_run(argv, env, cwd=tree)
    first = first_time(FIRST_STEP, lines, seconds)
    if status != 0 or first is None:
        raise SystemExit(f"bench_startup: {' '.join(flags) or 'baseline'} failed: {''.join(lines[-5:]).strip()}")
    return first_time(MODEL_BUILT, lines, seconds), first, logged_startup(log_json)


def made_checkpoint(args, scratch):
    """A checkpoint of one step of args.model, made by this tree's trainer on a compilation cache of its own (so
    that it warms no variant's): what a variant's "{checkpoint}" stands for."""
    folder = os.path.join(scratch, "checkpoint")
    timed_run(args, ["--checkpoint-dir", folder], os.path.join(scratch, "checkpoint-cache"))
    shutil.rmtree(os.path.join(scratch, "checkpoint-cache"), ignore_errors=True)
    return folder


def variant_flags(flags, checkpoint):
    """A variant's flags as the trainer's arguments, "{checkpoint}" replaced by `checkpoint`."""
    return [checkpoint if flag == "{checkpoint}" else flag for flag in flags.split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", required=True, help="ofrecord records (bertprep create)")
    p.add_argument("--model", default="base")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--precision", default="amp")
    p.add_argument("--backend", default="jax")
    p.add_argument("--variant", action="append", default=None, metavar="FLAGS",
                   help="trainer flags of a variant, as --variant=--scan-layers (repeatable; the first is the "
                        "baseline; default: '' and '--scan-layers')")
    p.add_argument("--warm-flags", default="", metavar="FLAGS",
                   help="flags only the warm runs add, as --warm-flags='--seed 2': a start on a cache that another "
                        "run filled")
    p.add_argument("--baseline", metavar="REF", help="run the first variant at commit REF too, as the baseline")
    p.add_argument("--phases", action="store_true",
                   help="also profile one warm run per variant and print where its start-up went")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.records = os.path.abspath(args.records)  # the runs start in the tree they run (cwd), not the caller's folder
    variants = args.variant or ([""] if args.baseline else ["", "--scan-layers"])
    runs = [(flags, REPO, "") for flags in variants]
    if args.baseline:
        from bench_train_before_after import baseline_tree

        tree, commit = baseline_tree(args.baseline, quiet=False)
        runs.insert(0, (variants[0], tree, f"{args.baseline} ({commit[:12]}) "))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        checkpoint = made_checkpoint(args, scratch) if any("{checkpoint}" in flags.split() for flags in variants) \
            else None
        for i, (flags, tree, label) in enumerate(runs):
            cache = os.path.join(scratch, str(i))
            argv = variant_flags(flags, checkpoint)
            cold = timed_run(args, argv, cache, tree)
            warm = timed_run(args, argv + args.warm_flags.split(), cache, tree)
            phases = None
            if args.phases:
                profile = os.path.join(scratch, f"{i}.prof")
                timed_run(args, argv + args.warm_flags.split(), cache, tree, profile)
                phases = phase_seconds(profile)
            shutil.rmtree(cache, ignore_errors=True)
            flags = f"{label}{flags}" if label else (f"this tree {flags}".strip() if args.baseline else flags)
            rows.append({"flags": flags, "built_cold_s": cold[0], "first_step_cold_s": cold[1],
                         "built_warm_s": warm[0], "first_step_warm_s": warm[1], "cold_startup": cold[2],
                         "warm_startup": warm[2], "warm_phases_s": phases})
            print(f"bench_startup: {flags or 'baseline'} done", file=sys.stderr, flush=True)
    base = rows[0]
    for row in rows:
        for key in ("first_step_cold_s", "first_step_warm_s"):
            row[key[:-2] + "_ratio"] = row[key] / base[key]
    if args.json:
        print(json.dumps({"model": args.model, "batch_size": args.batch_size, "precision": args.precision,
                          "backend": args.backend, "warm_flags": args.warm_flags, "rows": rows}))
        return 0
    print(f"python -m trainer --model {args.model} --batch-size {args.batch_size} --precision {args.precision} "
          f"(KERAS_BACKEND={args.backend}); seconds from the process's start"
          + (f"; the warm runs add {args.warm_flags}" if args.warm_flags else ""))
    print(f"{'code, flags':<28}{'built cold':>11}{'1st step cold':>15}{'ratio':>7}{'built warm':>12}"
          f"{'1st step warm':>15}{'ratio':>7}")
    for r in rows:
        print(f"{(r['flags'] or '(baseline)')[:28]:<28}{r['built_cold_s']:>11.1f}{r['first_step_cold_s']:>15.1f}"
              f"{r['first_step_cold_ratio']:>7.2f}{r['built_warm_s']:>12.1f}{r['first_step_warm_s']:>15.1f}"
              f"{r['first_step_warm_ratio']:>7.2f}")
    print("where each start went, by the trainer's clock (trainer/startup.py; seconds from the process's start):")
    for r in rows:
        for kind in ("cold", "warm"):
            print(f"  {(r['flags'] or '(baseline)')[:28]:<28} {kind}: {startup_line(r[f'{kind}_startup'])}")
    for r in rows:
        if r["warm_phases_s"] is not None:
            print(f"where a warm start went, under cProfile ({r['flags'] or 'baseline'}; one phase may call another):")
            for name, seconds in r["warm_phases_s"].items():
                print(f"  {name:<44}{'—' if seconds is None else format(seconds, '.2f') + ' s':>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
