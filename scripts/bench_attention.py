"""BERT's attention alone on one GPU: the fused kernel's tilings against the einsum path, in one invocation.

    python scripts/bench_attention.py [--batch 256] [--seq 128] [--heads 12] [--head-dim 64] [--dropout 0.1]
        [--sweep] [--iterations 20] [--json] [--out FILE]

Each variant is one jitted call of attention on [batch, seq, heads, head_dim] bfloat16 query, key and value
with a padded mask (each row a random length), timed after two warm-up calls (the first compiles) as the
median over 5 repeats of --iterations calls dispatched back to back (`timed`): the forward pass alone, and
forward and backward (jax.value_and_grad of a sum over the output). Variants:
- einsum: what trainer/attention.py's einsum path computes in mixed_bfloat16 (Keras's operations: bfloat16
  scores, masked softmax, dropout drawn by trainer/dropout.py's rbg generator, bfloat16 product with V),
  the baseline every ratio is against;
- fused: trainer/fused_attention.py with its default tiles (fused_attention.TILES), and with --sweep every
  tiling of SWEEP (forward rows, backward block and inner block, Triton's warps and stages);
- without dropout, for scale: cuDNN's flash attention (jax.nn.dot_product_attention, implementation
  "cudnn"; what Keras takes at --dropout 0) and JAX's own Pallas flash attention
  (jax.experimental.pallas.ops.gpu.attention.mha, segment ids for the padding).
A variant that cannot compile or run here is reported with its one-line error. Per call, and per step of a
12-layer model (x12). On a CPU the Pallas kernels run interpreted (use --batch 2 to try the script).
"""

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from trainer import dropout as trainer_dropout  # noqa: E402
from trainer import fused_attention  # noqa: E402

# (forward rows, warps, stages) and (backward block, inner, warps, stages) tried by --sweep.
FORWARD_SWEEP = [(64, 4, 2), (64, 8, 2), (128, 4, 2), (128, 8, 2), (64, 4, 1), (64, 4, 3), (32, 4, 2)]
BACKWARD_SWEEP = [(32, 32, 4, 2), (64, 32, 4, 2), (32, 64, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2),
                  (32, 128, 4, 2), (128, 64, 8, 2), (16, 64, 4, 2), (32, 32, 4, 1), (32, 32, 4, 3), (32, 32, 2, 2)]


def inputs(batch, seq, heads, head_dim, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(batch, seq, heads, head_dim)), jnp.bfloat16) for _ in range(3))
    lengths = rng.integers(seq // 4, seq + 1, size=batch)
    valid = np.arange(seq)[None, :] < lengths[:, None]
    mask = jnp.asarray(np.broadcast_to(valid[:, None, :], (batch, seq, seq)))  # BERT's: no query sees padding
    return q, k, v, mask, jnp.asarray(valid.astype(np.int32))


def einsum_attention(q, k, v, mask, seed, rate, scale):
    """trainer/attention.py's einsum path as Keras computes it in mixed_bfloat16 (rbg dropout)."""
    q = q * jnp.asarray(scale, q.dtype)
    scores = jnp.einsum("aecd,abcd->acbe", k, q)
    scores = jnp.where(mask[:, None], scores, jnp.asarray(-1e9, scores.dtype))
    p = jax.nn.softmax(scores, axis=-1)
    if rate > 0:
        p = trainer_dropout._rbg_dropout(p, rate, seed)
    return jnp.einsum("acbe,aecd->abcd", p, v)


def variants(args, segments):
    scale = args.head_dim ** -0.5
    rate = args.dropout
    out = {"einsum": lambda q, k, v, m, s: einsum_attention(q, k, v, m, s, rate, scale),
           "fused": lambda q, k, v, m, s: fused_attention.attention(q, k, v, m, s, rate, scale)}
    if args.sweep:
        base = fused_attention.TILES
        for rows, warps, stages in FORWARD_SWEEP:
            tiles = fused_attention.Tiles(rows, warps, stages, base.backward_block, base.backward_inner,
                                          base.backward_warps, base.backward_stages)
            out[f"fused fwd rows={rows} w={warps} s={stages}"] = _with_tiles(tiles, rate, scale)
        for block, inner, warps, stages in BACKWARD_SWEEP:
            tiles = fused_attention.Tiles(base.forward_rows, base.forward_warps, base.forward_stages, block, inner,
                                          warps, stages)
            out[f"fused bwd block={block} inner={inner} w={warps} s={stages}"] = _with_tiles(tiles, rate, scale)
    out["cudnn, no dropout"] = lambda q, k, v, m, s: jax.nn.dot_product_attention(
        q, k, v, mask=m[:, None], scale=scale, implementation="cudnn")

    def pallas_mha(q, k, v, m, s):
        from jax.experimental.pallas.ops.gpu import attention as pallas_attention
        return pallas_attention.mha(q, k, v, segments, sm_scale=scale)
    out["jax pallas mha, no dropout"] = pallas_mha
    return out


def _with_tiles(tiles, rate, scale):
    return lambda q, k, v, m, s: fused_attention.attention(q, k, v, m, s, rate, scale, tiles=tiles)


REPEATS = 5


def timed(function, arguments, iterations):
    """Seconds of one call: the median over REPEATS of `iterations` calls dispatched back to back and waited
    for once, divided by `iterations` (after two warm-up calls). Waiting for each call apart would add the
    host's round trip to every ~1 ms call: at 43629a6 this script did, and three runs of one tiling spread
    by 14% on the H200."""
    for _ in range(2):
        jax.block_until_ready(function(*arguments))
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        results = [function(*arguments) for _ in range(iterations)]
        jax.block_until_ready(results)
        times.append((time.perf_counter() - start) / iterations)
    return float(np.median(times))


def measure(name, attention, q, k, v, mask, seed, iterations):
    forward = jax.jit(lambda q, k, v: attention(q, k, v, mask, seed))
    both = jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(attention(q, k, v, mask, seed).astype(jnp.float32)),
                                      argnums=(0, 1, 2)))
    try:
        started = time.perf_counter()
        forward_s = timed(forward, (q, k, v), iterations)
        both_s = timed(both, (q, k, v), iterations)
        return {"name": name, "forward_ms": forward_s * 1e3, "forward_backward_ms": both_s * 1e3,
                "seconds": time.perf_counter() - started}
    except Exception as exc:  # a tiling Triton cannot compile here (shared memory, registers): report it
        return {"name": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--sweep", action="store_true", help="also every tiling of FORWARD_SWEEP and BACKWARD_SWEEP")
    p.add_argument("--only", default="", help="comma-separated variant names to run (default all)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", help="also write the results as JSON to this file")
    args = p.parse_args()
    q, k, v, mask, segments = inputs(args.batch, args.seq, args.heads, args.head_dim)
    seed = jnp.asarray([3, 7], jnp.uint32)
    rows = []
    for name, attention in variants(args, segments).items():
        if args.only and name not in args.only.split(","):
            continue
        rows.append(measure(name, attention, q, k, v, mask, seed, args.iterations))
        if not args.json:
            print(f"bench_attention: {name}: {_describe(rows[-1])}", file=sys.stderr, flush=True)
    base = next((r for r in rows if r["name"] == "einsum" and "error" not in r), None)
    for r in rows:
        if base and "error" not in r:
            r["forward_backward_vs_einsum"] = base["forward_backward_ms"] / r["forward_backward_ms"]
    report = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "shape": {
        "batch": args.batch, "seq": args.seq, "heads": args.heads, "head_dim": args.head_dim},
        "dropout": args.dropout, "tiles": dataclasses.asdict(fused_attention.TILES), "rows": rows}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"bench_attention: {report['device']}, [{args.batch}, {args.seq}, {args.heads}, {args.head_dim}] bfloat16, "
          f"dropout {args.dropout}; ms per call (x12: per step of a 12-layer model)")
    print(f"{'variant':<44}{'forward':>10}{'fwd+bwd':>10}{'fwd+bwd x12':>13}{'vs einsum':>11}")
    for r in rows:
        if "error" in r:
            print(f"{r['name'][:44]:<44}  {r['error'][:90]}")
            continue
        ratio = r.get("forward_backward_vs_einsum")
        print(f"{r['name'][:44]:<44}{r['forward_ms']:>10.3f}{r['forward_backward_ms']:>10.3f}"
              f"{12 * r['forward_backward_ms']:>13.2f}{'' if ratio is None else format(ratio, '.2f') + 'x':>11}")
    return 0


def _describe(row):
    if "error" in row:
        return row["error"]
    return f"forward {row['forward_ms']:.3f} ms, forward+backward {row['forward_backward_ms']:.3f} ms"


if __name__ == "__main__":
    sys.exit(main())
