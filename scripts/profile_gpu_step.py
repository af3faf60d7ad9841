"""Where the JAX training step's device time goes, kernel by kernel: JAX's profiler over a few steps.

    python scripts/profile_gpu_step.py --data R128 [--model base] [--batch-size 256]
        [--precision mixed_bfloat16] [--steps 20] [--trace-steps 3] [--trainer-flag=--attention=xla ...] [--json]

One process builds the trainer's step as `python -m trainer` does (trainer.pretraining.build_steps on its
Devices, the TrainConfig of the flags), times `--steps` steps after two untimed ones, then traces
`--trace-steps` more with `jax.profiler.trace` and reads the trace back (jax.profiler.ProfileData). Each
kernel the device ran is put in a category by the Keras layer its HLO instruction came from (the `op_name`
metadata of the compiled step: attention, dropout, layer norm, feed-forward, masked-LM head, loss,
optimizer, ...) and by kind (matrix product or not). It prints the step time, the device's busy time per
step (the rest is the device waiting for the host), the categories and the top kernels, each in ms per step
and share of the busy time. XLA_FLAGS in the environment reach the step (to try XLA's own options).
Made for a GPU; on a CPU the trace has no device plane and only the times are printed.
No ratio against a baseline is printed, by design: it takes one step apart, and each figure is read as a share of
that same step's device busy time (printed beside it); two configurations are compared by running it once each
(--label), and ratios against a baseline step are printed by scripts/profile_train_step.py and
scripts/bench_attention.py.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# The first of these words found in a kernel's op_name names its category (order matters: a dropout
# inside attention is dropout; an optimizer's update is found by the optimizer's scope).
CATEGORIES = (("optimizer", ("optimizer", "adam", "lamb", "stateless_apply", "update")),
              ("dropout", ("dropout", "bernoulli", "threefry", "random_bits", "rng")),
              ("attention", ("attention",)),
              ("layer norm", ("layer_norm",)),
              ("feed-forward", ("intermediate", "/output/")),
              ("masked-LM head", ("masked_lm",)),
              ("loss", ("cross_entropy", "losses", "log_softmax", "objective")),
              ("embeddings", ("embedding",)),
              ("next sentence / pooler", ("next_sentence", "pooler")))
GEMM_KERNEL = re.compile(r"gemm|cublas|cutlass|xmma|nvjet|sm\d+_|matmul|dot", re.IGNORECASE)


def category(op_name):
    lowered = op_name.lower()
    for name, words in CATEGORIES:
        if any(word in lowered for word in words):
            return name
    return "other"


def kernel_category(op_name, kernel):
    """The category of a profiled kernel: its HLO op name's, or where the compiled text gives it none (our
    Pallas kernels, which the profiler names "bert_attention_forward" and "..._backward") its own name's.
    The H100's profile had put the two attention kernels, 8.6 ms a step, under "other"."""
    return category(op_name or kernel)


def kernel_key(name):
    """An HLO instruction's name as a kernel or the profiler names it ("fusion.12" and "fusion_12" alike)."""
    return re.sub(r"[.\-]", "_", name)


def op_names(hlo_text):
    """{kernel_key(instruction name): op_name metadata} of a compiled module's text."""
    found = {}
    for match in re.finditer(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{[^}]*op_name=\"([^\"]*)\"", hlo_text,
                             re.MULTILINE):
        found[kernel_key(match.group(1))] = match.group(2)
    return found


def op_of(names, kernel, hlo_op):
    """The op_name of a kernel's HLO instruction ("" where the compiled text has none)."""
    return names.get(kernel_key(hlo_op)) or names.get(kernel_key(kernel)) or ""


def short_op(op_name):
    """The last three parts of an op_name: enough to see which layer and operation."""
    return "/".join(op_name.split("/")[-3:])


def device_kernels(trace_dir):
    """[(kernel name, hlo_op, duration ns)] of every event on the device planes of the trace."""
    from jax.profiler import ProfileData

    paths = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        return []
    kernels = []
    for plane in ProfileData.from_file(paths[-1]).planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if "stream" not in line.name.lower():  # XLA's per-stream lines hold the kernels
                continue
            for event in line.events:
                stats = {key: value for key, value in event.stats}
                kernels.append((event.name, str(stats.get("hlo_op", "")), float(event.duration_ns)))
    return kernels


def build(args):
    """(steps, device batches) of the trainer for these flags."""
    import keras

    from trainer import compilation_cache, xla_gpu
    from trainer.cli import train_config
    from trainer.data import Records, RecordStream
    from trainer.library_logs import load_keras
    from trainer.pretraining import Devices, build_steps, model_config, set_precision, step_options, warmup_steps

    config = train_config(["--format", "ofrecord", "--data", args.data, "--model", args.model, "--batch-size",
                           str(args.batch_size), "--precision", args.precision, "--optimizer", args.optimizer,
                           "--steps", "1000", *args.trainer_flag])
    records = Records(args.data, "ofrecord")
    bert = model_config(config, records)
    xla_gpu.apply(config.gemm)
    load_keras()
    compilation_cache.enable(config.compilation_cache)
    keras.backend.clear_session()
    config, _ = set_precision(config, keras)
    options = step_options(config, keras, records.seq, bert)  # "auto" as `python -m trainer` makes it
    policy = f"{config.precision}, {options}, gemm {config.gemm}"
    keras.utils.set_random_seed(config.seed)
    devices = Devices(keras.backend.backend())
    _, _, steps = build_steps(config, devices, bert, records, warmup_steps(config.warmup, config.steps),
                              options=options)
    stream = RecordStream(records, "training", config.batch_size, config.seed).batches()
    batches = [steps.put({k: v[None] for k, v in next(stream).items()}) for _ in range(4)]
    return steps, batches, policy


def add_build_arguments(p, precision):
    """The arguments `build` reads (besides --trainer-flag): the records, model, batch size, precision
    (default `precision`) and optimizer; scripts/gpu_step_traffic.py builds its step with them too."""
    p.add_argument("--data", required=True, help="ofrecord records (bertprep create)")
    p.add_argument("--model", default="base")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", default=precision)
    p.add_argument("--optimizer", default="adam")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(p, precision="mixed_bfloat16")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--trace-steps", type=int, default=3)
    p.add_argument("--trainer-flag", action="append", default=[], help="a further `python -m trainer` flag")
    p.add_argument("--top", type=int, default=25, help="kernels listed")
    p.add_argument("--label", default="", help="a name for this variant in the output")
    p.add_argument("--save", help="also write the result as JSON to this file")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    started = time.perf_counter()
    steps, batches, policy = build(args)
    import jax

    built = time.perf_counter()
    steps.fetch(steps.train(batches[0]))
    compiled = time.perf_counter()
    steps.fetch(steps.train(batches[1]))
    times = []
    for i in range(args.steps):
        start = time.perf_counter()
        steps.fetch(steps.train(batches[i % len(batches)]))
        times.append(time.perf_counter() - start)
    step_seconds = statistics.median(times)
    with tempfile.TemporaryDirectory(prefix="profile-gpu-step-") as trace_dir:  # read here, then removed
        with jax.profiler.trace(trace_dir):
            for i in range(args.trace_steps):
                steps.fetch(steps.train(batches[i % len(batches)]))
        kernels = device_kernels(trace_dir)
    names = op_names(steps._train.lower(*steps.step_arguments(batches[0])).compile().as_text()) if kernels else {}
    per_step = args.trace_steps
    busy = sum(d for _, _, d in kernels) / per_step / 1e9
    by_category, by_kernel = {}, {}
    for kernel, hlo_op, ns in kernels:
        kind = "matmul" if GEMM_KERNEL.search(kernel) or GEMM_KERNEL.search(hlo_op) else "other"
        op_name = op_of(names, kernel, hlo_op)
        key = f"{kernel_category(op_name, kernel)} ({kind})"
        by_category[key] = by_category.get(key, 0.0) + ns / per_step / 1e9
        label = f"{kernel[:60]}  [{short_op(op_name)}]"
        by_kernel[label] = by_kernel.get(label, 0.0) + ns / per_step / 1e9
    mapped = sum(1 for kernel, hlo_op, _ in kernels if op_of(names, kernel, hlo_op))
    sample = sorted({(kernel[:60], hlo_op) for kernel, hlo_op, _ in kernels})[:12]
    result = {"label": args.label, "device": str(jax.devices()[0].device_kind), "policy": policy,
              "batch_size": args.batch_size, "flags": args.trainer_flag, "xla_flags": os.environ.get("XLA_FLAGS", ""),
              "build_s": built - started, "first_step_s": compiled - built, "step_ms": step_seconds * 1e3,
              "sequences_per_second": args.batch_size / step_seconds, "device_busy_ms": busy * 1e3,
              "kernels_per_step": len(kernels) / per_step, "kernels_with_op_name": mapped / max(len(kernels), 1),
              "sample_kernel_hlo_ops": sample,
              "categories_ms": dict(sorted(((k, v * 1e3) for k, v in by_category.items()), key=lambda kv: -kv[1])),
              "top_kernels_ms": dict(sorted(((k, v * 1e3) for k, v in by_kernel.items()),
                                            key=lambda kv: -kv[1])[:args.top])}
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.label or 'step'}: {result['device']} {policy} batch {args.batch_size} {' '.join(args.trainer_flag)}"
          f" XLA_FLAGS={result['xla_flags']!r}")
    print(f"  build {result['build_s']:.1f} s, first step {result['first_step_s']:.1f} s; "
          f"step {result['step_ms']:.1f} ms ({result['sequences_per_second']:,.0f} seq/s); "
          f"device busy {result['device_busy_ms']:.1f} ms/step in "
          f"{result['kernels_per_step']:.0f} kernels")
    for title, table in (("categories", result["categories_ms"]), ("top kernels", result["top_kernels_ms"])):
        print(f"  {title}:")
        for name, ms in table.items():
            print(f"    {ms:8.2f} ms {ms / max(result['device_busy_ms'], 1e-9):6.1%}  {name[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
