"""Transparent huge pages for glibc's malloc: the same trainer run on the CPU without them and with them.

    python scripts/bench_huge_pages.py [--backend jax|tensorflow] [--steps 30] [--batch-size 14] [--repeat 2]
        [--optimizer adam] [--json] [-- TRAINER ARGUMENTS]

XLA's CPU step allocates and frees its large buffers at every step (the logits over the 30,522-word vocab, the
embedding's gradient); glibc gives them back to the kernel, and the next step faults their pages in again, 4 KiB
at a time. `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc 2.35 and later; an unknown tunable is ignored) makes
malloc ask for transparent huge pages (madvise), which the kernel gives where its THP mode
(/sys/kernel/mm/transparent_hugepage/enabled) is `madvise` or `always`. tests/conftest.py sets it for the test
processes. This trains Google's tiny model (2 layers, hidden 128: the trajectories' hf_tiny size) on the embedded
sample, --steps steps at --batch-size, in fresh processes, alternately without and with the variable, --repeat
times each, and prints each run's CPU (user and system), minor page faults and wall time, then the medians and the
ratio of CPU without to CPU with (above 1: the huge pages saved CPU). Nothing is cached between runs
(--no-compilation-cache), so each pays its imports and compiles alike. Arguments after `--` go to the trainer
after these (a later flag wins), for another run: the trajectories' is `-- --data RECORDS --init-checkpoint
HF_TINY --lr 1e-3 --warmup 5` (tests/test_optimizer_trajectories.py makes RECORDS; without --model then).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HUGE_PAGES = "glibc.malloc.hugetlb=1"


def thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="utf-8") as file:
            text = file.read()
    except OSError:
        return "unknown (no /sys/kernel/mm/transparent_hugepage)"
    return text[text.index("[") + 1:text.index("]")] if "[" in text else text.strip()


def one_run(argv, env):
    """CPU seconds (user, system), minor faults and wall seconds of one trainer process."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"bench_huge_pages: the trainer exited with {result.returncode}: {result.stderr[-2000:]}")
    return {"user_s": round(after.ru_utime - before.ru_utime, 2),
            "system_s": round(after.ru_stime - before.ru_stime, 2),
            "minor_faults": after.ru_minflt - before.ru_minflt, "wall_s": round(wall, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["jax", "tensorflow"], default="jax")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=14)
    parser.add_argument("--optimizer", default="adam", help="the trajectories' first (the trainer's default is lamb)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.steps < 1 or args.batch_size < 1 or args.repeat < 1:
        parser.error("--steps, --batch-size and --repeat must be at least 1")
    base = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    base.update(KERAS_BACKEND=args.backend, JAX_PLATFORMS="cpu", PYTHONPATH=REPO)
    envs = {"without": base, "with": {**base, "GLIBC_TUNABLES": HUGE_PAGES}}
    runs = {name: [] for name in envs}
    with tempfile.TemporaryDirectory() as scratch:
        model = [] if {"--init-checkpoint", "--bert-config", "--model"} & set(trainer_args) else ["--model", "tiny"]
        command = [sys.executable, "-m", "trainer", "--format", "tfrecord", *model, "--optimizer", args.optimizer,
                   "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--dropout", "0", "--warmup",
                   "1", "--log-every", str(args.steps), "--no-compilation-cache", "--quiet", *trainer_args]
        for repeat in range(args.repeat):
            for name, env in envs.items():  # each run a checkpoint directory of its own (a second is refused)
                ckpt = os.path.join(scratch, f"ckpt-{name}-{repeat}")
                runs[name].append(one_run([*command, "--checkpoint-dir", ckpt], env))
    cpu = {name: statistics.median(r["user_s"] + r["system_s"] for r in done) for name, done in runs.items()}
    result = {"backend": args.backend, "trainer_args": trainer_args, "optimizer": args.optimizer, "steps": args.steps,
              "batch_size": args.batch_size,
              "thp_mode": thp_mode(),
              "runs": runs, "median_cpu_s": cpu, "cpu_without_over_with": round(cpu["without"] / cpu["with"], 2)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    what = " ".join(trainer_args) if trainer_args else "Google's tiny model on the embedded sample"
    print(f"{what}, {args.backend}, {args.optimizer}, {args.steps} steps at batch {args.batch_size}, "
          f"THP mode {result['thp_mode']}:")
    for name, done in runs.items():
        for run in done:
            print(f"  {name:7} huge pages: {run['user_s']:6.2f} s user {run['system_s']:6.2f} s system "
                  f"{run['minor_faults']:>10,} minor faults {run['wall_s']:6.2f} s wall")
    print(f"median CPU: {cpu['without']:.2f} s without, {cpu['with']:.2f} s with: "
          f"{result['cpu_without_over_with']:.2f}x")


if __name__ == "__main__":
    main()
