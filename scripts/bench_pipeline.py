"""Pipeline parallelism (--pipeline-stages S) on 4 devices: sequences/s, bubble fraction and bytes per device
for S = 1, 2, 4, and the deepest model each S fits into a per-device memory budget.

    python scripts/bench_pipeline.py [--model small] [--global-batch 16] [--micro-batches 4] [--steps 10]
        [--repeats 2] [--budget-gib 16] [--data RECORDS_DIR --format ofrecord]

Runs under KERAS_BACKEND=jax on 4 devices: with no accelerator, 4 CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4 is set unless XLA_FLAGS is).

1. Measured: the trainer at the same global batch and --grad-accum (the
   micro-batches) for S = 1, 2, 4 (mesh stage x batch 1x4, 2x2, 4x1; fp32,
   dropout 0), each S `--repeats` times in turn, the best steady-state
   sequences/s kept; with `param_bytes_per_device` (all parameters and
   optimizer state on the fullest device) and the Transformer layers' share
   of it, read from the arrays. The bubble is the schedule's, (S-1)/(K+S-1).
   Ratios are against S = 1 in the same run. S = 1 is the unpipelined step.
2. Computed from the layout, not measured: for widths with 64-wide heads,
   intermediate 4H and the padded uncased vocab (as in
   bench_model_parallel.py), the most layers whose fp32 parameters,
   gradients and two Adam moments fit the budget on a device when the
   layers are split over S stages (embeddings and heads on every stage).
   Activations are not counted.
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("KERAS_BACKEND", "jax")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

from bench_model_parallel import PADDED_VOCAB, WIDTHS, bench_arguments, traced  # noqa: E402
from trainer.cli import train_config  # noqa: E402

STAGES = (1, 2, 4)
BUDGET_STAGES = (1, 2, 4, 8)


def measure(trainer_argv, s, global_batch, micro_batches, devices):
    """(sequences/s, param_bytes_per_device, layer bytes per device or None) of one run with S = s."""
    import trainer

    per_replica = global_batch * s // (devices * micro_batches)
    summary = trainer.train(train_config(trainer_argv + [
        "--pipeline-stages", str(s), "--batch-size", str(per_replica), "--grad-accum", str(micro_batches)])).to_dict()
    piped = summary["pipeline"]
    return (summary["mean_sequences_per_second"], summary["param_bytes_per_device"],
            piped["layer_bytes_per_device"] if piped else None)


def deepest_models(budget):
    """{s: [(width, most layers that fit), ...]}: embeddings and heads whole on every device, the
    layers' bytes divided over s stages (a stage holds whole layers)."""
    from trainer import parallel

    fits = {s: [] for s in BUDGET_STAGES}
    for width in WIDTHS:
        one, two = (parallel.layout_bytes_per_device(*traced(width, n), 1, gradients=True) for n in (1, 2))
        per_layer, outer = two - one, 2 * one - two
        for s in BUDGET_STAGES:
            fits[s].append((width, max((budget - outer) // per_layer, 0) * s))
    return fits


def main():
    own, trainer_argv = bench_arguments(__doc__.splitlines()[0], "S", [
        ("--micro-batches", int, 4, "--grad-accum for every S (default 4)")])

    import jax
    import keras

    from trainer.pipeline_parallel import bubble_fraction

    devices = jax.device_count()
    print(f"backend {keras.backend.backend()}; {devices} {jax.devices()[0].platform} devices, {os.cpu_count()} cores; "
          f"trainer {' '.join(trainer_argv)}; global batch {own.global_batch} in {own.micro_batches} "
          f"micro-batches; best of {own.repeats}")
    best = {}
    for _ in range(own.repeats):
        for s in STAGES:
            result = measure(trainer_argv, s, own.global_batch, own.micro_batches, devices)
            if s not in best or result[0] > best[s][0]:
                best[s] = result
    base_rate, base_bytes, _ = best[1]
    print(f"{'S':>2} {'bubble':>7} {'sequences/s':>12} {'x S=1':>6} {'bytes/device':>14} {'x S=1':>6} "
          f"{'layer bytes/device':>19}")
    for s in STAGES:
        rate, nbytes, layer_bytes = best[s]
        print(f"{s:>2} {bubble_fraction(s, own.micro_batches):7.3f} {rate:12,.1f} {rate / base_rate:6.2f} "
              f"{nbytes:14,} {nbytes / base_bytes:6.3f} {'-' if layer_bytes is None else f'{layer_bytes:,}':>19}")

    fits = deepest_models(int(own.budget_gib * 2**30))
    print(f"\nmost layers per width within {own.budget_gib:g} GiB per device, computed from the layout (fp32 "
          f"parameters, gradients, Adam moments; no activations; vocab {PADDED_VOCAB:,}; 64-wide heads; K = 1):")
    print(f"{'S':>2}  " + " ".join(f"{w:>5}" for w in WIDTHS))
    for s in BUDGET_STAGES:
        print(f"{s:>2}  " + " ".join(f"{n:>5}" for _, n in fits[s]))


if __name__ == "__main__":
    main()
