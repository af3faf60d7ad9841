"""Where a test's training run spends its CPU: the tests' TINY model, its fixed cost per run against its cost per step.

    python scripts/tiny_run_cost.py [--backend tensorflow|jax] [--optimized] [--few 3] [--many 23] [--json]

Most of the suite's time is the trainer's tests (README, "the suite's time"), each a few short runs of
tests/trainer_checks.TINY (one layer, hidden 64, Google's vocabulary of 30,522) under the test processes' fast
compiles (trainer_checks.FAST_COMPILE_XLA_FLAGS; --optimized: XLA's optimized code, as the long runs have). This
trains TINY on the embedded sample's records in one process, as a test worker does run after run: a run of
--few and one of --many steps, then both again. It prints each run's CPU seconds (this process's, all threads)
and wall seconds, then the baseline (the second --few run's CPU: what a short test's run costs) beside the cost
of one more step (from the second pair) and their ratio. A large ratio means a run is mostly its fixed cost
(the model built, the step traced and compiled or loaded): fewer or cheaper compiles would shorten the suite,
fewer steps would not; a small one means the steps are the cost. Under JAX the runs share one compilation
cache, as a test worker's do (tests/conftest.py): a run's step count is part of its programs, so the first
pair compiles and the second loads. The figures vary like the suite's do.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["tensorflow", "jax"], default="tensorflow")
    parser.add_argument("--optimized", action="store_true", help="XLA's optimized code, not the tests' fast compiles")
    parser.add_argument("--few", type=int, default=3)
    parser.add_argument("--many", type=int, default=23)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.few < 1 or args.many <= args.few:
        parser.error("--few and --many: 1 <= few < many")
    # Before Keras is imported: the backend and XLA's flags are read once.
    os.environ["KERAS_BACKEND"] = args.backend
    from trainer_checks import TINY, xla_flags

    os.environ["XLA_FLAGS"] = xla_flags(fast_compile=not args.optimized)
    if args.backend == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from bertprep.stages.create import create_sample_records
    from trainer.cli import main as train

    with tempfile.TemporaryDirectory() as scratch:
        records = create_sample_records(os.path.join(scratch, "records"))
        # JAX: one compilation cache for the process's runs, as each test worker has (tests/conftest.py).
        os.environ["BERTPREP_COMPILATION_CACHE_DIR"] = os.path.join(scratch, "jax-cache")
        config = os.path.join(scratch, "tiny.json")
        with open(config, "w", encoding="utf-8") as file:
            json.dump(TINY, file)
        runs = []
        for steps in (args.few, args.many, args.few, args.many):
            started, cpu = time.monotonic(), cpu_seconds()
            code = train(["--format", "tfrecord", "--data", str(records), "--bert-config", config,
                          "--steps", str(steps), "--batch-size", str(args.batch_size),
                          "--log-every", str(args.many + 1), "--quiet"])
            if code != 0:
                sys.exit(f"tiny_run_cost: the trainer exited with {code}")
            runs.append({"steps": steps, "cpu_s": round(cpu_seconds() - cpu, 2),
                         "wall_s": round(time.monotonic() - started, 2)})
    # The first two runs pay the imports, the backend's start-up and, under JAX, each program's first compile
    # (a run's step count is part of its compiled programs); the last two are what a later test's runs cost.
    few, many = runs[2]["cpu_s"], runs[3]["cpu_s"]
    per_step = (many - few) / (args.many - args.few)
    result = {"backend": args.backend, "compiles": "optimized" if args.optimized else "fast", "runs": runs,
              "baseline_cpu_s": round(few, 2), "cpu_s_per_step": round(per_step, 3),
              "baseline_over_step": round(few / per_step, 1) if per_step > 0 else None}
    if args.json:
        print(json.dumps(result))
        return
    for run in runs:
        print(f"{run['steps']:4d} steps: {run['cpu_s']:6.2f} s of CPU, {run['wall_s']:6.2f} s wall")
    print(f"{args.backend}, {result['compiles']} compiles, batch {args.batch_size}: a {args.few}-step run (the "
          f"baseline) {few:.2f} s of CPU, one more step {per_step:.3f} s; ratio {result['baseline_over_step']}x")


if __name__ == "__main__":
    main()
