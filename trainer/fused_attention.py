"""BERT's attention as one fused kernel, dropout included: `--attention fused` (JAX; Pallas, Triton on a GPU).

Why: Keras's attention with dropout is two matrix products around about ten XLA kernels over the
[batch, heads, seq, seq] probabilities (mask, softmax, dropout and their gradients): 13.7 ms of a 56.7 ms
BERT-base step at batch 256 on an H200 (docs/trainer.md), where PyTorch runs one fused kernel with
dropout. cuDNN's fused attention cannot take its dropout seed from the step (JAX passes it as a
compile-time int), so this is a kernel of our own, written with Pallas: a forward program takes a block of
queries of one (sequence, head) against all its keys (BERT's 128 tokens; at most 256), so the softmax needs
no online rescaling; a backward program takes a block of keys and walks the queries to sum their dk and dv,
then a block of queries and walks the keys to sum their dq (the Triton tutorial's flash-attention backward),
each tile's probabilities recomputed from the forward's log-sum-exp. Nothing of size seq x seq reaches
memory. How the work is cut (Tiles) changes the speed alone: the first version (a backward program per
whole (sequence, head), 8 warps) measured 13.7 ms a step on an H200, no faster than the einsum path.

Dropout's masks come from a counter-based hash inside the kernel: each probability (b, h, i, j) is kept
when 24 bits of lowbias32(lowbias32(i * seq + j ^ key) + key2) fall below keep x 2^24, the keys mixed from
the layer's two-word seed (its SeedGenerator, advanced once a call, so runs reproduce from --seed and
resume exactly) and b * heads + h. The backward pass recomputes the same bits. They are other masks than
threefry's or rbg's (trainer/dropout.py), with the same keep rate.

Values: scores and softmax in float32 whatever the inputs' dtype (Keras's einsum path, in mixed precision,
rounds the scores to bfloat16 first), products in the inputs' dtype with float32 sums. `reference` is the
same computation in plain jax.numpy, the test's oracle (tests/test_fused_attention.py runs the kernel in
Pallas's interpreter on the CPU); on a CPU the trainer runs the kernel interpreted too, so `--attention
fused` is a GPU lever, which `--attention auto` takes under JAX on a GPU (measured by scripts/gpu_check.sh
--lever and scripts/bench_attention.py).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from bertprep.errors import UsageError
from trainer.dropout import hash_keep, hash_keys

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


def attention(query, key, value, mask, seed, rate, scale, interpret=None, tiles=None):
    """softmax(scale x query key^T, masked) with dropout at `rate`, times value.

    query, key, value: [batch, seq, heads, head_dim] (Keras's MultiHeadAttention layout); mask: [batch, seq,
    seq] bool (True: the query attends to the key); seed: two integers (a SeedGenerator's state). Returns
    [batch, seq, heads, head_dim] in the query's dtype. `interpret`: run Pallas's interpreter (default: on
    a backend other than a GPU); `tiles`: how the kernels cut the work (Tiles; default TILES)."""
    if interpret is None:
        interpret = jax.default_backend() not in ("gpu", "cuda", "rocm")
    seed = jnp.asarray(seed).astype(jnp.uint32).reshape(2)
    return _fused(query, key, value, mask.astype(jnp.int8), seed, float(rate), float(scale), bool(interpret),
                  (tiles or TILES).fit(query.shape[1]))


def _keep(seed0, seed1, row, seq, rate, first=0, rows=None, first_key=0, keys=None):
    """[rows, keys] bool: which probabilities of the (sequence, head) numbered `row` dropout keeps, for the
    queries first .. first + rows - 1 against the keys first_key .. first_key + keys - 1 (all by default).
    Position (i, j)'s bits depend on i * seq + j alone, so any tiling draws the same mask."""
    rows = seq if rows is None else rows
    keys = seq if keys is None else keys
    queries = jnp.arange(rows, dtype=jnp.uint32)[:, None] + jnp.asarray(first).astype(jnp.uint32)
    columns = jnp.arange(keys, dtype=jnp.uint32)[None, :] + jnp.asarray(first_key).astype(jnp.uint32)
    return hash_keep(queries * jnp.uint32(seq) + columns, hash_keys(seed0, seed1, row), rate)


def _row(b, h, heads):
    return b.astype(jnp.uint32) * jnp.uint32(heads) + h.astype(jnp.uint32)


def _masked_scores(q, k, mask, scale):
    """scale x q k^T [rows, keys] in float32, NEGATIVE where `mask` is 0."""
    return jnp.where(mask != 0, plgpu.dot(q, k.T) * scale, NEGATIVE)


def _dropped(keep, x, rate):
    """Dropout's output (or its gradient's): x scaled by 1 / (1 - rate) where kept, else 0."""
    return jnp.where(keep, x * (1.0 / (1.0 - rate)), 0.0)


@dataclasses.dataclass(frozen=True)
class Tiles:
    """How the kernels cut the work, and Triton's launch settings for them: a GPU's speed, never the values.

    forward_rows: queries per forward program (each against all keys: no online softmax at <= MAX_SEQ).
    backward_block, backward_inner: a backward program takes `backward_block` keys, walking the queries in
    blocks of `backward_inner` to sum their dk and dv, then `backward_block` queries, walking the keys in
    blocks of `backward_inner` to sum their dq (the scheme of the Triton tutorial's and JAX's Pallas flash
    attention backward pass). warps and stages: Triton's num_warps and num_stages per kernel."""
    forward_rows: int = 64
    forward_warps: int = 4
    forward_stages: int = 2
    backward_block: int = 32
    backward_inner: int = 32
    backward_warps: int = 4
    backward_stages: int = 2

    def fit(self, seq):
        """These tiles for `seq` tokens: no block longer than the sequence, and no forward tile of more
        scores than `forward_rows` x 128 (the size measured; at 256 tokens, half the rows)."""
        rows = max(16, min(self.forward_rows, seq, self.forward_rows * 128 // seq))
        return dataclasses.replace(self, forward_rows=rows,
                                   backward_block=min(self.backward_block, seq),
                                   backward_inner=min(self.backward_inner, seq))


TILES = Tiles()  # in the trainer on an H200: 1.07x the einsum path's step (docs/trainer.md); no swept tiling beat it


def _forward_kernel(seed_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, lse_ref, *, rate, scale, heads):
    """One block of queries of one (sequence, head) against all its keys: output and log-sum-exp."""
    b, h, block = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    scores = _masked_scores(q, k, mask_ref[...], scale)
    top = jnp.max(scores, axis=1)
    exp = jnp.exp(scores - top[:, None])
    total = jnp.sum(exp, axis=1)
    p = exp * (1.0 / total)[:, None]
    if rate > 0:
        rows, seq = q.shape[0], k.shape[0]
        keep = _keep(seed_ref[0], seed_ref[1], _row(b, h, heads), seq, rate, block * rows, rows)
        p = _dropped(keep, p, rate)
    o_ref[...] = plgpu.dot(p.astype(v.dtype), v).astype(o_ref.dtype)
    lse_ref[...] = top + jnp.log(total)


def _gradient_tile(q, k, v, do, lse, delta, mask, keep, rate, scale):
    """(dropped probabilities, score gradient) of one [queries, keys] tile: the probabilities recomputed
    from the forward's log-sum-exp; softmax's gradient p (dp - sum_j p dp), where sum_j p dp = sum_j
    dropped d_dropped = rowsum(do * o) = delta."""
    p = jnp.exp(_masked_scores(q, k, mask, scale) - lse[:, None])
    d_dropped = plgpu.dot(do, v.T)
    if keep is None:
        dropped, dp = p, d_dropped
    else:
        dropped, dp = _dropped(keep, p, rate), _dropped(keep, d_dropped, rate)
    return dropped, p * (dp - delta[:, None]) * scale


def _backward_kernel(seed_ref, q_ref, k_ref, v_ref, mask_ref, do_ref, lse_ref, delta_ref, *out_refs,
                     rate, scale, heads, block, inner):
    """Program t of a (sequence, head): dk and dv of its keys t*block.., walking the queries in blocks of
    `inner`; then dq of its queries t*block.., walking the keys in blocks of `inner` (float32 sums).
    `out_refs`: dq's, dk's and dv's blocks, or the whole packed [batch, seq, 3 x heads, head_dim] gradient."""
    b, h, t = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    seq, head_dim = k_ref.shape
    row = _row(b, h, heads)
    mine = pl.ds(t * block, block)

    def store(slot, value):  # slot 0, 1, 2: the query's, key's, value's gradient
        if len(out_refs) == 3:
            out_refs[slot][...] = value.astype(out_refs[slot].dtype)
        else:
            out_refs[0][b, mine, slot * heads + h, :] = value.astype(out_refs[0].dtype)

    def keep(first, rows, first_key, keys):
        return _keep(seed_ref[0], seed_ref[1], row, seq, rate, first, rows, first_key, keys) if rate > 0 else None

    k, v = k_ref[mine, :], v_ref[mine, :]

    def key_side(i, sums):
        dk, dv = sums
        queries = pl.ds(i * inner, inner)
        q, do = q_ref[queries, :], do_ref[queries, :]
        dropped, ds = _gradient_tile(q, k, v, do, lse_ref[queries], delta_ref[queries], mask_ref[queries, mine],
                                     keep(i * inner, inner, t * block, block), rate, scale)
        return dk + plgpu.dot(ds.T.astype(q.dtype), q), dv + plgpu.dot(dropped.T.astype(do.dtype), do)

    zeros = jnp.zeros((block, head_dim), jnp.float32)
    dk, dv = jax.lax.fori_loop(0, seq // inner, key_side, (zeros, zeros))
    store(1, dk)
    store(2, dv)

    q, do, lse, delta = q_ref[mine, :], do_ref[mine, :], lse_ref[mine], delta_ref[mine]

    def query_side(j, dq):
        keys = pl.ds(j * inner, inner)
        k, v = k_ref[keys, :], v_ref[keys, :]
        _, ds = _gradient_tile(q, k, v, do, lse, delta, mask_ref[mine, keys], keep(t * block, block, j * inner, inner),
                               rate, scale)
        return dq + plgpu.dot(ds.astype(k.dtype), k)

    store(0, jax.lax.fori_loop(0, seq // inner, query_side, zeros))


def _call(kernel, grid, in_specs, out_specs, out_shape, interpret, name, warps, stages):
    return pl.pallas_call(kernel, grid=grid, in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                          compiler_params=plgpu.CompilerParams(num_warps=warps, num_stages=stages),
                          interpret=interpret, name=name)


def _whole(seq, head_dim, offset=0):
    """A (sequence, head)'s [seq, head_dim] rows (of head `offset` + h of the array), the mask's [seq, seq] and
    its [seq] statistics, over a (batch, heads, block) grid."""
    return (pl.BlockSpec((None, seq, None, head_dim), lambda b, h, i: (b, 0, offset + h, 0)),
            pl.BlockSpec((None, seq, seq), lambda b, h, i: (b, 0, 0)),
            pl.BlockSpec((None, None, seq), lambda b, h, i: (b, h, 0)))


SEED = pl.BlockSpec((2,), lambda b, h, i: (0,))


def _rows(rows, head_dim, offset=0):
    return pl.BlockSpec((None, rows, None, head_dim), lambda b, h, i: (b, i, offset + h, 0))


def _forward(q, k, v, mask, seed, rate, scale, interpret, tiles, heads=None, offsets=(0, 0, 0)):
    """(output, log-sum-exp). q, k, v: [batch, seq, heads, head_dim] arrays, or one packed array three times
    with `heads` and the `offsets` of its query, key and value heads."""
    batch, seq, _, head_dim = q.shape
    heads = heads or q.shape[2]
    rows = tiles.forward_rows
    kernel = functools.partial(_forward_kernel, rate=rate, scale=scale, heads=heads)
    return _call(kernel, (batch, heads, seq // rows),
                 [SEED, _rows(rows, head_dim, offsets[0]), _whole(seq, head_dim, offsets[1])[0],
                  _whole(seq, head_dim, offsets[2])[0], pl.BlockSpec((None, rows, seq), lambda b, h, i: (b, i, 0))],
                 [_rows(rows, head_dim), pl.BlockSpec((None, None, rows), lambda b, h, i: (b, h, i))],
                 [jax.ShapeDtypeStruct((batch, seq, heads, head_dim), q.dtype),
                  jax.ShapeDtypeStruct((batch, heads, seq), "float32")],
                 interpret, "bert_attention_forward", tiles.forward_warps, tiles.forward_stages)(seed, q, k, v, mask)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8))
def _fused(q, k, v, mask, seed, rate, scale, interpret, tiles):
    return _forward(q, k, v, mask, seed, rate, scale, interpret, tiles)[0]


def _fused_forward(q, k, v, mask, seed, rate, scale, interpret, tiles):
    o, lse = _forward(q, k, v, mask, seed, rate, scale, interpret, tiles)
    return o, (q, k, v, mask, seed, o, lse)


def _backward(q, k, v, mask, seed, o, lse, do, rate, scale, interpret, tiles, heads=None, offsets=None):
    """(dq, dk, dv) of separate q, k, v; with `heads` and `offsets` (one packed array three times), the packed
    [batch, seq, 3 x heads, head_dim] gradient, each program writing its rows of the three."""
    batch, seq, _, head_dim = q.shape
    heads = heads or q.shape[2]
    do = do.astype(q.dtype)
    delta = jnp.einsum("bqhd,bqhd->bhq", do, o, preferred_element_type=jnp.float32)  # one XLA reduction
    _, whole_mask, statistic = _whole(seq, head_dim)
    block = tiles.backward_block
    kernel = functools.partial(_backward_kernel, rate=rate, scale=scale, heads=heads, block=block,
                               inner=tiles.backward_inner)
    sources = [_whole(seq, head_dim, offset)[0] for offset in offsets or (0, 0, 0)]
    if offsets is None:
        out_specs, out_shape = [_rows(block, head_dim)] * 3, [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)]
    else:
        out_specs, out_shape = [pl.BlockSpec()], [jax.ShapeDtypeStruct(q.shape, q.dtype)]  # the whole array
    return _call(kernel, (batch, heads, seq // block),
                 [SEED, *sources, whole_mask, _whole(seq, head_dim)[0], statistic, statistic], out_specs, out_shape,
                 interpret, "bert_attention_backward", tiles.backward_warps, tiles.backward_stages)(
        seed, q, k, v, mask, do, lse, delta)


def _fused_backward(rate, scale, interpret, tiles, residuals, do):
    q, k, v, mask, seed, o, lse = residuals
    dq, dk, dv = _backward(q, k, v, mask, seed, o, lse, do, rate, scale, interpret, tiles)
    return dq, dk, dv, None, None


_fused.defvjp(_fused_forward, _fused_backward)


def attention_packed(qkv, mask, seed, rate, scale, interpret=None, tiles=None):
    """attention() of the queries, keys and values side by side in one [batch, seq, 3 x heads, head_dim] array
    (the query's heads, then the key's, then the value's: the three projections as one matrix product). The
    kernels read each from its place, and the backward pass writes the gradient packed the same way, so
    one matrix product takes it back through the three projections (instead of three, and the sum of
    their input gradients). The same values as attention(), up to the products' summation order."""
    if interpret is None:
        interpret = jax.default_backend() not in ("gpu", "cuda", "rocm")
    seed = jnp.asarray(seed).astype(jnp.uint32).reshape(2)
    return _fused_packed(qkv, mask.astype(jnp.int8), seed, float(rate), float(scale), bool(interpret),
                         (tiles or TILES).fit(qkv.shape[1]))


def _offsets(qkv):
    heads = qkv.shape[2] // 3
    return heads, (0, heads, 2 * heads)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _fused_packed(qkv, mask, seed, rate, scale, interpret, tiles):
    heads, offsets = _offsets(qkv)
    return _forward(qkv, qkv, qkv, mask, seed, rate, scale, interpret, tiles, heads, offsets)[0]


def _fused_packed_forward(qkv, mask, seed, rate, scale, interpret, tiles):
    heads, offsets = _offsets(qkv)
    o, lse = _forward(qkv, qkv, qkv, mask, seed, rate, scale, interpret, tiles, heads, offsets)
    return o, (qkv, mask, seed, o, lse)


def _fused_packed_backward(rate, scale, interpret, tiles, residuals, do):
    qkv, mask, seed, o, lse = residuals
    heads, offsets = _offsets(qkv)
    (dqkv,) = _backward(qkv, qkv, qkv, mask, seed, o, lse, do, rate, scale, interpret, tiles, heads, offsets)
    return dqkv, None, None


_fused_packed.defvjp(_fused_packed_forward, _fused_packed_backward)


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
