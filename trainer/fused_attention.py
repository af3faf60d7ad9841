"""BERT's attention as one fused kernel, dropout included: `--attention fused` (JAX; Pallas, Triton on a GPU).

Why: Keras's attention with dropout is two matrix products around about ten XLA kernels over the
[batch, heads, seq, seq] probabilities (mask, softmax, dropout and their gradients): 13.7 ms of a 56.7 ms
BERT-base step at batch 256 on an H200 (docs/trainer.md), where PyTorch runs one fused kernel with
dropout. cuDNN's fused attention cannot take its dropout seed from the step (JAX passes it as a
compile-time int), so this is a kernel of our own, written with Pallas: a forward program takes 64 queries of
one (sequence, head) against all its keys (BERT's 128 tokens; at most 256), so the softmax needs no online
rescaling; a backward program takes a whole (sequence, head) and walks its queries in blocks of 64,
recomputing their probabilities from the forward's log-sum-exp. Nothing of size seq x seq reaches memory.

Dropout's masks come from a counter-based hash inside the kernel: each probability (b, h, i, j) is kept
when 24 bits of lowbias32(lowbias32(i * seq + j ^ key) + key2) fall below keep x 2^24, the keys mixed from
the layer's two-word seed (its SeedGenerator, advanced once a call, so runs reproduce from --seed and
resume exactly) and b * heads + h. The backward pass recomputes the same bits. They are other masks than
threefry's or rbg's (trainer/dropout.py), with the same keep rate.

Values: scores and softmax in float32 whatever the inputs' dtype (Keras's einsum path, in mixed precision,
rounds the scores to bfloat16 first), products in the inputs' dtype with float32 sums. `reference` is the
same computation in plain jax.numpy, the test's oracle (tests/test_fused_attention.py runs the kernel in
Pallas's interpreter on the CPU); on a CPU the trainer runs the kernel interpreted too, so `--attention
fused` is a GPU lever (its speed measured by scripts/gpu_check.sh --lever).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from bertprep.errors import UsageError

MAX_SEQ = 256
NEGATIVE = -1e30  # a masked score: exp() of it less the row's max is 0 in float32


def supports(seq, head_dim):
    """Whether the kernel takes these shapes: Triton's tiles are powers of two, the score tile at most
    MAX_SEQ square."""
    def power_of_two(n):
        return n >= 16 and n & (n - 1) == 0

    return power_of_two(seq) and seq <= MAX_SEQ and power_of_two(head_dim)


def check_shapes(seq, hidden_size, heads):
    """A one-line UsageError where `--attention fused` cannot take the run's records and model."""
    if not supports(seq, hidden_size // heads):
        raise UsageError(f"--attention fused: takes sequences of 16 to {MAX_SEQ} tokens and heads of 16 or more "
                         f"dimensions, each a power of two; these records have {seq} tokens, the model's heads "
                         f"{hidden_size // heads} dimensions (use --attention einsum)")


def attention(query, key, value, mask, seed, rate, scale, interpret=None):
    """softmax(scale x query key^T, masked) with dropout at `rate`, times value.

    query, key, value: [batch, seq, heads, head_dim] (Keras's MultiHeadAttention layout); mask: [batch, seq,
    seq] bool (True: the query attends to the key); seed: two integers (a SeedGenerator's state). Returns
    [batch, seq, heads, head_dim] in the query's dtype. `interpret`: run Pallas's interpreter (default: on
    a backend other than a GPU)."""
    if interpret is None:
        interpret = jax.default_backend() not in ("gpu", "cuda", "rocm")
    seed = jnp.asarray(seed).astype(jnp.uint32).reshape(2)
    return _fused(query, key, value, mask.astype(jnp.int8), seed, float(rate), float(scale), bool(interpret))


def _lowbias32(x):
    """Chris Wellons's lowbias32 integer hash on uint32 (full avalanche in two multiplies)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _keep(seed0, seed1, row, seq, rate, first=0, rows=None):
    """[rows, seq] bool: which probabilities of the (sequence, head) numbered `row` dropout keeps, for the
    queries first .. first + rows - 1 (all `seq` by default)."""
    rows = seq if rows is None else rows
    key = _lowbias32(seed0 ^ _lowbias32(row * jnp.uint32(0x9E3779B9) + seed1))
    key2 = _lowbias32(key + seed1)
    queries = jnp.arange(rows, dtype=jnp.uint32)[:, None] + jnp.asarray(first).astype(jnp.uint32)
    counter = queries * jnp.uint32(seq) + jnp.arange(seq, dtype=jnp.uint32)[None, :]
    bits = _lowbias32(_lowbias32(counter ^ key) + key2)
    threshold = np.uint32(round((1.0 - rate) * (1 << 24)))
    return (bits >> 8) < threshold


def _row(b, h, heads):
    return b.astype(jnp.uint32) * jnp.uint32(heads) + h.astype(jnp.uint32)


def _masked_scores(q, k, mask, scale):
    """scale x q k^T [rows, seq] in float32, NEGATIVE where `mask` is 0."""
    return jnp.where(mask != 0, plgpu.dot(q, k.T).astype(jnp.float32) * scale, NEGATIVE)


def _dropped(keep, x, rate):
    """Dropout's output (or its gradient's): x scaled by 1 / (1 - rate) where kept, else 0."""
    return jnp.where(keep, x * (1.0 / (1.0 - rate)), 0.0)


def _probabilities(q, k, mask, scale):
    """(softmax of the masked scores [rows, seq] float32, its log-sum-exp [rows])."""
    scores = _masked_scores(q, k, mask, scale)
    top = jnp.max(scores, axis=1)
    exp = jnp.exp(scores - top[:, None])
    total = jnp.sum(exp, axis=1)
    return exp / total[:, None], top + jnp.log(total)


ROWS = 64  # queries per program (forward) and per block (backward): [64, seq] float32 tiles, half the registers


def _forward_kernel(seed_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, lse_ref, *, rate, scale, heads):
    """One block of queries of one (sequence, head) against all its keys: output and log-sum-exp."""
    b, h, block = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    p, lse = _probabilities(q, k, mask_ref[...], scale)
    if rate > 0:
        rows, seq = q.shape[0], k.shape[0]
        keep = _keep(seed_ref[0], seed_ref[1], _row(b, h, heads), seq, rate, block * rows, rows)
        p = _dropped(keep, p, rate)
    o_ref[...] = plgpu.dot(p.astype(v.dtype), v).astype(o_ref.dtype)
    lse_ref[...] = lse


def _backward_kernel(seed_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, lse_ref, do_ref, dq_ref, dk_ref, dv_ref, *,
                     rate, scale, heads):
    """dq, dk, dv of one (sequence, head), walking its queries in blocks of ROWS (dk and dv summed
    over the blocks in float32): per block the probabilities are recomputed from the forward's log-sum-exp,
    and the same dropout bits."""
    b, h = pl.program_id(0), pl.program_id(1)
    seq, head_dim = k_ref.shape
    rows = min(ROWS, seq)
    k, v = k_ref[...], v_ref[...]
    row = _row(b, h, heads)

    def block(i, sums):
        dk, dv = sums
        first = i * rows
        queries = pl.ds(first, rows)
        q, do = q_ref[queries, :], do_ref[queries, :]
        scores = _masked_scores(q, k, mask_ref[queries, :], scale)
        p = jnp.exp(scores - lse_ref[queries][:, None])  # the forward's probabilities, from its log-sum-exp
        d_dropped = plgpu.dot(do, v.T).astype(jnp.float32)
        if rate > 0:
            keep = _keep(seed_ref[0], seed_ref[1], row, seq, rate, first, rows)
            dropped, dp = _dropped(keep, p, rate), _dropped(keep, d_dropped, rate)
        else:
            dropped, dp = p, d_dropped
        # softmax's gradient: p (dp - sum_j p dp); sum_j p dp = sum_j dropped d_dropped = rowsum(do * o).
        delta = jnp.sum(do.astype(jnp.float32) * o_ref[queries, :].astype(jnp.float32), axis=1)
        ds = p * (dp - delta[:, None]) * scale
        dq_ref[queries, :] = plgpu.dot(ds.astype(k.dtype), k).astype(dq_ref.dtype)
        return (dk + plgpu.dot(ds.T.astype(q.dtype), q).astype(jnp.float32),
                dv + plgpu.dot(dropped.T.astype(do.dtype), do).astype(jnp.float32))

    zeros = jnp.zeros((seq, head_dim), jnp.float32)
    dk, dv = jax.lax.fori_loop(0, seq // rows, block, (zeros, zeros))
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _specs(seq, head_dim, rows=None):
    """The kernels' blocks over a (batch, heads[, query block]) grid: whole sequences, or `rows` queries
    (the forward's query-side tiles, mask rows and log-sum-exp) of the program's block."""
    whole = pl.BlockSpec((None, seq, None, head_dim), lambda b, h, *_: (b, 0, h, 0))
    if rows is None:
        return {"seed": pl.BlockSpec((2,), lambda b, h: (0,)), "keys": whole, "queries": whole,
                "mask": pl.BlockSpec((None, seq, seq), lambda b, h: (b, 0, 0)),
                "lse": pl.BlockSpec((None, None, seq), lambda b, h: (b, h, 0))}
    return {"seed": pl.BlockSpec((2,), lambda b, h, i: (0,)), "keys": whole,
            "queries": pl.BlockSpec((None, rows, None, head_dim), lambda b, h, i: (b, i, h, 0)),
            "mask": pl.BlockSpec((None, rows, seq), lambda b, h, i: (b, i, 0)),
            "lse": pl.BlockSpec((None, None, rows), lambda b, h, i: (b, h, i))}


def _call(kernel, grid, in_specs, out_specs, out_shape, interpret, name):
    return pl.pallas_call(kernel, grid=grid, in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                          compiler_params=plgpu.CompilerParams(num_warps=8, num_stages=1), interpret=interpret,
                          name=name)


def _forward(q, k, v, mask, seed, rate, scale, interpret):
    batch, seq, heads, head_dim = q.shape
    rows = min(ROWS, seq)
    specs = _specs(seq, head_dim, rows)
    kernel = functools.partial(_forward_kernel, rate=rate, scale=scale, heads=heads)
    o, lse = _call(kernel, (batch, heads, seq // rows),
                   [specs["seed"], specs["queries"], specs["keys"], specs["keys"], specs["mask"]],
                   [specs["queries"], specs["lse"]],
                   [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((batch, heads, seq), "float32")],
                   interpret, "bert_attention_forward")(seed, q, k, v, mask)
    return o, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _fused(q, k, v, mask, seed, rate, scale, interpret):
    return _forward(q, k, v, mask, seed, rate, scale, interpret)[0]


def _fused_forward(q, k, v, mask, seed, rate, scale, interpret):
    o, lse = _forward(q, k, v, mask, seed, rate, scale, interpret)
    return o, (q, k, v, mask, seed, o, lse)


def _fused_backward(rate, scale, interpret, residuals, do):
    q, k, v, mask, seed, o, lse = residuals
    batch, seq, heads, head_dim = q.shape
    specs = _specs(seq, head_dim)
    kernel = functools.partial(_backward_kernel, rate=rate, scale=scale, heads=heads)
    dq, dk, dv = _call(kernel, (batch, heads),
                       [specs["seed"], specs["queries"], specs["keys"], specs["keys"], specs["mask"], specs["queries"],
                        specs["lse"], specs["queries"]],
                       [specs["queries"], specs["keys"], specs["keys"]],
                       [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)],
                       interpret, "bert_attention_backward")(seed, q, k, v, mask, o, lse, do.astype(q.dtype))
    return dq, dk, dv, None, None


_fused.defvjp(_fused_forward, _fused_backward)


def reference(query, key, value, mask, seed, rate, scale):
    """The kernel's computation in plain jax.numpy (the same masks, float32 scores): the tests' oracle."""
    batch, seq, heads, _ = query.shape
    seed = jnp.asarray(seed).astype(jnp.uint32).reshape(2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", query, key, preferred_element_type=jnp.float32) * scale
    scores = jnp.where(mask[:, None] != 0, scores, NEGATIVE)
    p = jax.nn.softmax(scores, axis=-1)
    if rate > 0:
        rows = (jnp.arange(batch, dtype=jnp.uint32)[:, None] * jnp.uint32(heads)
                + jnp.arange(heads, dtype=jnp.uint32)[None, :])
        keep = jax.vmap(jax.vmap(lambda row: _keep(seed[0], seed[1], row, seq, rate)))(rows)
        p = jnp.where(keep, p / (1.0 - rate), 0.0)
    return jnp.einsum("bhqk,bkhd->bqhd", p.astype(value.dtype), value,
                      preferred_element_type=jnp.float32).astype(query.dtype)
