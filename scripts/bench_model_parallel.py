"""Tensor parallelism (--model-parallel K) on 4 devices: sequences/s and bytes per device for K = 1, 2, 4,
and the largest model each K fits into a per-device memory budget.

    python scripts/bench_model_parallel.py [--model small] [--global-batch 16] [--steps 10] [--repeats 2]
        [--budget-gib 16] [--data RECORDS_DIR --format ofrecord]

Runs under KERAS_BACKEND=jax on 4 devices: with no accelerator, 4 CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=4 is set unless XLA_FLAGS is).

1. Measured: the trainer at the same global batch for K = 1, 2, 4 (mesh 4x1,
   2x2, 1x4; fp32, dropout 0), each K `--repeats` times in turn, the best
   steady-state sequences/s kept; with `param_bytes_per_device` (parameters and
   optimizer state on one device, read from the arrays). Ratios are against
   K = 1 in the same run.
2. Computed from the layout (trainer/parallel.py), not measured: for widths
   with 64-wide heads, intermediate 4H, 512 positions and the uncased vocab
   (30,522) padded to a multiple of 128 as Megatron-LM pads it (30,592, so it
   splits for any K up to 128), the most layers whose fp32 parameters,
   gradients and two Adam moments (16 bytes per parameter before sharding)
   fit the budget on each device, and the widest model of 24 and of 48 layers
   (the depths OneFlow's pipelined BERT trains) that fits. Activations are
   not counted.
"""

import argparse
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("KERAS_BACKEND", "jax")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertprep.errors import UsageError  # noqa: E402
from trainer.cli import train_config  # noqa: E402
from trainer.config import BertConfig  # noqa: E402

KS = (1, 2, 4)
BUDGET_KS = (1, 2, 4, 8)
DEPTHS = (24, 48)
WIDTHS = (768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192)
PADDED_VOCAB = 30592  # 30,522 rounded up to a multiple of 128


def measure(trainer_argv, k, global_batch, devices):
    """(sequences/s, param_bytes_per_device, mesh shape) of one trainer run with K = k."""
    import trainer

    per_replica = global_batch * k // devices
    summary = trainer.train(train_config(trainer_argv + ["--model-parallel", str(k),
                                                         "--batch-size", str(per_replica)])).to_dict()
    return summary["mean_sequences_per_second"], summary["param_bytes_per_device"], summary["mesh"]["shape"]


def traced(width, layers):
    from trainer import parallel

    config = BertConfig(vocab_size=PADDED_VOCAB, hidden_size=width, num_hidden_layers=layers,
                        num_attention_heads=width // 64, intermediate_size=4 * width)
    return parallel.abstract_variables(config, 128, 20)


def largest_models(budget):
    """{k: [(width, most layers that fit, or None where k does not split the width), ...]} and
    {width: (parameters of 1 layer, of 2 layers)}. Bytes and parameters grow linearly with the layers
    (all alike), so the traces of 1 and 2 layers give each line exactly."""
    from trainer import parallel

    fits = {k: [] for k in BUDGET_KS}
    lines = {}
    for width in WIDTHS:
        one, two = traced(width, 1), traced(width, 2)
        lines[width] = tuple(sum(v.size for v in trainable.values()) for trainable, _ in (one, two))
        for k in BUDGET_KS:
            try:
                parallel.check_splits(*one, k)
            except UsageError:
                fits[k].append((width, None))
                continue
            bytes_one, bytes_two = (parallel.layout_bytes_per_device(*t, k, gradients=True) for t in (one, two))
            fits[k].append((width, max((budget - (2 * bytes_one - bytes_two)) // (bytes_two - bytes_one), 0)))
    return fits, lines


def parameters(width, layers, one_layer, two_layers):
    return one_layer + (layers - 1) * (two_layers - one_layer)


def bench_arguments(description, axis, extra=()):
    """(this script's arguments, the trainer's argv) for a benchmark over `axis` (K or S); `extra`:
    more (flag, type, default, help) of its own."""
    bench = argparse.ArgumentParser(description=description,
                                    epilog="Other arguments go to the trainer (python -m trainer --help).")
    bench.add_argument("--global-batch", type=int, default=16, help=f"sequences per step for every {axis} (default 16)")
    for flag, kind, default, text in extra:
        bench.add_argument(flag, type=kind, default=default, help=text)
    bench.add_argument("--repeats", type=int, default=2, help=f"runs per {axis}, best kept (default 2)")
    bench.add_argument("--budget-gib", type=float, default=16.0, help="per-device memory for part 2 (default 16)")
    own, rest = bench.parse_known_args()
    defaults = ["--format", "ofrecord", "--steps", "10", "--optimizer", "adam"]
    if "--model" not in rest and "--bert-config" not in rest:
        defaults += ["--model", "small"]
    return own, defaults + rest + ["--dropout", "0", "--log-every", "1000", "--quiet"]


def main():
    own, trainer_argv = bench_arguments(__doc__.splitlines()[0], "K")

    import jax
    import keras

    devices = jax.device_count()
    print(f"backend {keras.backend.backend()}; {devices} {jax.devices()[0].platform} devices, {os.cpu_count()} cores; "
          f"trainer {' '.join(trainer_argv)}; global batch {own.global_batch}; best of {own.repeats}")
    best = {}
    for _ in range(own.repeats):
        for k in KS:
            rate, nbytes, shape = measure(trainer_argv, k, own.global_batch, devices)
            if k not in best or rate > best[k][0]:
                best[k] = (rate, nbytes, shape)
    base_rate, base_bytes, _ = best[1]
    print(f"{'K':>2} {'mesh batch x model':>19} {'sequences/s':>12} {'x K=1':>6} {'bytes/device':>14} {'x K=1':>6}")
    for k in KS:
        rate, nbytes, shape = best[k]
        print(f"{k:>2} {shape['batch']:>11} x {shape['model']:<5} {rate:12,.1f} {rate / base_rate:6.2f} "
              f"{nbytes:14,} {nbytes / base_bytes:6.3f}")

    fits, lines = largest_models(int(own.budget_gib * 2**30))
    print(f"\nmost layers per width within {own.budget_gib:g} GiB per device, computed from the layout (fp32 "
          f"parameters, gradients, Adam moments; no activations; vocab {PADDED_VOCAB:,}; 64-wide heads; "
          "-: K does not divide the heads):")
    print(f"{'K':>2}  " + " ".join(f"{w:>5}" for w in WIDTHS)
          + "".join(f"   widest at {depth} layers" for depth in DEPTHS))
    for k in BUDGET_KS:
        widest = []
        for depth in DEPTHS:
            width = max((w for w, n in fits[k] if n is not None and n >= depth), default=None)
            widest.append("none" if width is None else
                          f"{depth} x {width} ({parameters(width, depth, *lines[width]) / 1e9:.2f} B)")
        print(f"{k:>2}  " + " ".join(f"{'-' if n is None else n:>5}" for _, n in fits[k])
              + "".join(f"   {text:>22}" for text in widest))


if __name__ == "__main__":
    main()
