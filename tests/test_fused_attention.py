"""trainer/fused_attention.py: the Pallas kernel (run by Pallas's interpreter on this CPU) against the same
computation in plain jax.numpy, its dropout masks, and what it asks of a GPU (lowered with jax.export); the
same counter hash drawing the hidden layers' masks (trainer/dropout.py, --dropout-rng hash)."""

import functools
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from bertprep.errors import UsageError  # noqa: E402
from trainer import fused_attention  # noqa: E402

SCALE = 0.3  # not a power of two: scaling before or after the product rounds otherwise
# float32 tolerances: on a GPU (the same tests run there, compiled by Triton) both the kernel's and XLA's
# float32 matrix products use TF32, rounded otherwise; on a CPU (Pallas's interpreter) they are float32.
ON_GPU = jax.default_backend() == "gpu"
FORWARD_TOLERANCE = dict(rtol=3e-3, atol=3e-3) if ON_GPU else dict(rtol=1e-5, atol=1e-6)
GRADIENT_TOLERANCE = dict(rtol=3e-3, atol=3e-3) if ON_GPU else dict(rtol=1e-4, atol=1e-5)
OTHER_TILES = fused_attention.Tiles(forward_rows=32, backward_block=64, backward_inner=16)


def inputs(batch=2, seq=32, heads=2, head_dim=16, dtype=jnp.float32, seed=0):
    """query, key, value and a mask of padded and packed rows: row 0 two sequences (tokens 1..20, 21..27 of
    every 32) and padding, row 1 one sequence of 13 of every 32 and padding (model.sequence_attention_mask's
    rule): at 128 tokens the valid keys reach the fourth block of 32."""
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(batch, seq, heads, head_dim)), dtype) for _ in range(3))
    numbers = np.zeros((batch, seq), np.int32)
    n = seq // 32
    numbers[0, :20 * n], numbers[0, 20 * n:27 * n], numbers[1, :13 * n] = 1, 2, 1
    query, key = numbers[:, :, None], numbers[:, None, :]
    mask = jnp.asarray((key > 0) & ((query == key) | (query == 0)))
    return q, k, v, mask


def loss(function, dropout, seed):
    def f(q, k, v, mask):
        out = function(q, k, v, mask, jnp.asarray(seed, jnp.int32), dropout, SCALE)
        return jnp.sum(jnp.sin(out.astype(jnp.float32)))
    return f


@pytest.mark.parametrize("dropout, seq, tiles", [(0.0, 32, None), (0.1, 32, None), (0.1, 128, None),
                                                 (0.1, 128, OTHER_TILES)])
def test_the_kernel_and_its_gradients_are_the_reference(dropout, seq, tiles):
    """seq 128: several blocks of queries and keys in each pass (4 x 4 of the default tiles; OTHER_TILES:
    a forward of 4 blocks, a backward of 2 key blocks walking 8 query blocks): any tiling, the same values."""
    q, k, v, mask = inputs(seq=seq)
    kernel = functools.partial(fused_attention.attention, tiles=tiles)
    out = kernel(q, k, v, mask, jnp.asarray([5, 9]), dropout, SCALE)
    want = fused_attention.reference(q, k, v, mask, jnp.asarray([5, 9]), dropout, SCALE)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), **FORWARD_TOLERANCE)
    got = jax.grad(loss(kernel, dropout, [5, 9]), argnums=(0, 1, 2))(q, k, v, mask)
    expected = jax.grad(loss(fused_attention.reference, dropout, [5, 9]), argnums=(0, 1, 2))(q, k, v, mask)
    for g, e in zip(got, expected):
        assert float(jnp.max(jnp.abs(e))) > 1e-3  # gradients that reach every input
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), **GRADIENT_TOLERANCE)


@pytest.mark.parametrize("dropout, seq", [(0.1, 32), (0.1, 128)])
def test_packed_query_key_and_value_give_the_separate_ones_values_and_gradients(dropout, seq):
    """--qkv-projection packed: the kernels read the query, key and value heads from one [batch, seq,
    3 x heads, head_dim] array and write its gradient packed the same way; the same values and gradients as
    the three arrays apart, to the bit."""
    q, k, v, mask = inputs(seq=seq, heads=4)
    packed = jnp.concatenate([q, k, v], axis=2)

    def apart(qkv, mask, seed, dropout, scale):
        return fused_attention.attention(*jnp.split(qkv, 3, axis=2), mask, seed, dropout, scale)

    def f(function):
        return lambda qkv: jnp.sum(jnp.sin(function(qkv, mask, jnp.asarray([5, 9]), dropout, SCALE)))

    out = fused_attention.attention_packed(packed, mask, jnp.asarray([5, 9]), dropout, SCALE)
    assert out.shape == q.shape
    np.testing.assert_array_equal(np.asarray(out), np.asarray(apart(packed, mask, jnp.asarray([5, 9]), dropout,
                                                                    SCALE)))
    gradient = jax.grad(f(fused_attention.attention_packed))(packed)
    np.testing.assert_array_equal(np.asarray(gradient), np.asarray(jax.grad(f(apart))(packed)))
    assert all(float(jnp.max(jnp.abs(part))) > 1e-3 for part in jnp.split(gradient, 3, axis=2))


def test_without_dropout_it_is_plain_masked_softmax_attention():
    q, k, v, mask = inputs()
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * SCALE
    p = jax.nn.softmax(jnp.where(mask[:, None], scores, -jnp.inf), axis=-1)
    want = jnp.einsum("bhqk,bkhd->bqhd", p, v)
    out = fused_attention.attention(q, k, v, mask, jnp.asarray([0, 0]), 0.0, SCALE)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), **FORWARD_TOLERANCE)


def test_bfloat16_inputs_give_bfloat16_close_to_float32():
    q, k, v, mask = inputs()
    low = [x.astype(jnp.bfloat16) for x in (q, k, v)]
    out = fused_attention.attention(*low, mask, jnp.asarray([1, 2]), 0.1, SCALE)
    want = fused_attention.reference(*low, mask, jnp.asarray([1, 2]), 0.1, SCALE)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(want, np.float32), rtol=2e-2, atol=2e-2)


def test_dropout_keeps_its_rate_and_each_seed_and_row_draws_its_own_mask():
    def keep(seed0, seed1, row, seq=256, rate=0.1):
        return np.asarray(fused_attention._keep(jnp.uint32(seed0), jnp.uint32(seed1), jnp.uint32(row), seq, rate))

    first = keep(1, 2, 0)
    rate = np.mean([keep(1, 2, row).mean() for row in range(16)])  # 1,048,576 draws: sd 0.0003
    assert abs(rate - 0.9) < 0.0015, rate
    assert abs(keep(1, 2, 0, rate=0.5).mean() - 0.5) < 0.01
    for other in (keep(1, 2, 1), keep(2, 2, 0), keep(1, 3, 0)):  # another row, another seed word
        assert 0.15 < np.mean(first != other) < 0.21  # as independent masks: 2 x 0.9 x 0.1 = 0.18
    assert np.array_equal(first, keep(1, 2, 0))
    # The rows' and columns' decisions are not correlated.
    assert abs(np.corrcoef(first[:-1].ravel(), first[1:].ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(first[:, :-1].ravel(), first[:, 1:].ravel())[0, 1]) < 0.02


def test_tiles_fit_the_sequence_and_keep_the_forward_tile_measured():
    tiles = fused_attention.Tiles()
    assert (tiles.fit(128).forward_rows, tiles.fit(256).forward_rows, tiles.fit(32).forward_rows) == (64, 32, 32)
    assert tiles.fit(16) == fused_attention.Tiles(forward_rows=16, backward_block=16, backward_inner=16)


def test_shapes_the_kernel_cannot_take_are_one_line_errors():
    fused_attention.check_shapes(128, 768, 12)
    fused_attention.check_shapes(256, 64, 2)
    for seq, hidden, heads in ((384, 768, 12), (512, 768, 12), (128, 96, 2), (8, 64, 2)):
        with pytest.raises(UsageError, match=rf"--attention fused: .* these records have {seq} tokens, the model's "
                                             rf"heads {hidden // heads} dimensions \(use --attention einsum\)"):
            fused_attention.check_shapes(seq, hidden, heads)


def test_on_a_gpu_it_is_two_triton_kernels_and_no_seq_by_seq_tensor():
    """Lowered for an NVIDIA GPU (jax.export, platforms cuda): the forward and the backward pass are each one
    Triton kernel, and no [batch, heads, seq, seq] array is left in the program (BERT-base's shapes)."""
    batch, seq, heads, head_dim = 4, 128, 12, 64
    q = jax.ShapeDtypeStruct((batch, seq, heads, head_dim), jnp.bfloat16)
    mask = jax.ShapeDtypeStruct((batch, seq, seq), jnp.bool_)
    seed = jax.ShapeDtypeStruct((2,), jnp.uint32)

    def step(q, k, v, mask, seed):
        def f(q, k, v):
            out = fused_attention.attention(q, k, v, mask, seed, 0.1, 0.125, interpret=False)
            return jnp.sum(out.astype(jnp.float32) ** 2)
        return jax.value_and_grad(f, argnums=(0, 1, 2))(q, k, v)

    triton = "__gpu$xla.gpu.triton"
    text = jax.export.export(jax.jit(step), platforms=["cuda"],
                             disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(triton)])(
        q, q, q, mask, seed).mlir_module()
    kernels = re.findall(r'name = "(bert_attention_\w+)"', text)
    assert sorted(kernels) == ["bert_attention_backward", "bert_attention_forward"]
    assert text.count(f"custom_call @{triton}") == 2
    assert f"{batch}x{heads}x{seq}x{seq}" not in text


def test_packed_on_a_gpu_reads_and_writes_the_packed_array_in_place():
    """Lowered for an NVIDIA GPU: the packed attention is the same two Triton kernels, each taking the one
    packed array (no slice of it copied out), and the backward kernel's one output is the packed gradient."""
    batch, seq, heads, head_dim = 4, 128, 12, 64
    qkv = jax.ShapeDtypeStruct((batch, seq, 3 * heads, head_dim), jnp.bfloat16)
    mask = jax.ShapeDtypeStruct((batch, seq, seq), jnp.bool_)
    seed = jax.ShapeDtypeStruct((2,), jnp.uint32)

    def step(qkv, mask, seed):
        def f(qkv):
            out = fused_attention.attention_packed(qkv, mask, seed, 0.1, 0.125, interpret=False)
            return jnp.sum(out.astype(jnp.float32) ** 2)
        return jax.value_and_grad(f)(qkv)

    triton = "__gpu$xla.gpu.triton"
    text = jax.export.export(jax.jit(step), platforms=["cuda"],
                             disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(triton)])(
        qkv, mask, seed).mlir_module()
    calls = [line for line in text.splitlines() if f"custom_call @{triton}" in line]
    assert len(calls) == 2
    packed = f"tensor<{batch}x{seq}x{3 * heads}x{head_dim}xbf16>"
    forward, backward = sorted(calls, key=lambda line: "bert_attention_backward" in line)
    for call in (forward, backward):  # "... : (operand types) -> result types" ends the line
        assert call.rsplit(") -> ", 1)[0].rsplit(": (", 1)[1].count(packed) == 3
    assert backward.rsplit(") -> ", 1)[1].split(" loc(")[0].strip() == packed
    assert "stablehlo.slice" not in text and "stablehlo.concatenate" not in text


def test_hashed_masks_keep_at_the_rate_and_follow_the_seed():
    """--dropout-rng hash (trainer/dropout.py): keeps 1 - rate of the elements, the kept scaled by
    1 / (1 - rate); the same seed state draws the same mask, another one another, with as many elements in
    common as two independent masks (0.81 at rate 0.1), and no row or column kept more than chance allows."""
    from trainer import dropout

    ones = jnp.ones((512, 1024), jnp.float32)

    def kept(seed):
        out = np.asarray(dropout._hash_dropout(ones, 0.1, jnp.array(seed, jnp.uint32)))
        np.testing.assert_allclose(out[out > 0], 1 / 0.9, rtol=1e-6)
        return out > 0

    mask = kept([1, 2])
    assert abs(mask.mean() - 0.9) < 0.002  # 524,288 draws: 3 standard deviations are 0.0012
    assert np.array_equal(kept([1, 2]), mask)
    assert abs((mask & kept([1, 3])).mean() - 0.81) < 0.003 and abs((mask & kept([2, 2])).mean() - 0.81) < 0.003
    assert np.abs(mask.mean(axis=1) - 0.9).max() < 0.05 and np.abs(mask.mean(axis=0) - 0.9).max() < 0.07
