"""AdamW, NVLAMB and Google's AdamWeightDecay (google-adam) against a NumPy (float64) reference, one and
several steps, fp32, tolerance 1e-6; their schedules."""

import os
import subprocess
import sys

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from trainer.optimizers import (  # noqa: E402
    AdamW,
    GoogleAdamW,
    GoogleSchedule,
    NVLamb,
    WarmupPolynomialDecay,
    clip_by_global_norm,
    make_optimizer,
)
from trainer_checks import xla_flags  # noqa: E402

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trainer_checks.py")

PEAK, WARMUP, TOTAL = 0.01, 2, 6
BETA1, BETA2, EPS, WD = 0.9, 0.999, 1e-6, 0.01


def reference_lr(step, power):
    """lr of update number n = step + 1 (NVIDIA's warmup then polynomial decay)."""
    n = step + 1
    if n <= WARMUP:
        return PEAK * n / WARMUP
    return PEAK * max(0.0, (TOTAL - n) / (TOTAL - WARMUP)) ** power


def google_reference_lr(step, warmup=WARMUP):
    """google-research/bert optimization.create_optimizer's lr at global_step `step` (0-based):
    polynomial_decay(power 1) over TOTAL steps, replaced by PEAK·step/warmup while step < warmup."""
    decayed = PEAK * (1 - min(step, TOTAL) / TOTAL)
    return PEAK * step / warmup if warmup and step < warmup else decayed


def reference(kind, weights, grads_per_step, decays, clip_norm=1.0):
    """Run the optimizer in NumPy float64: {name: w} after each step's grads {name: g}."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for step, grads in enumerate(grads_per_step):
        g = {k: x.astype(np.float64) for k, x in grads.items()}
        if kind in ("lamb", "google-adam"):  # NVLAMB's pre-normalization is clip_by_global_norm(1.0)
            norm = np.sqrt(sum(np.sum(x * x) for x in g.values()))
            g = {k: x * clip_norm / max(norm, clip_norm) for k, x in g.items()}
        t = step + 1
        lr = google_reference_lr(step) if kind == "google-adam" else reference_lr(step, 0.5 if kind == "lamb" else 1.0)
        for k in w:
            m[k] = BETA1 * m[k] + (1 - BETA1) * g[k]
            v[k] = BETA2 * v[k] + (1 - BETA2) * g[k] ** 2
            if kind == "google-adam":  # AdamWeightDecayOptimizer: no bias correction
                u = m[k] / (np.sqrt(v[k]) + EPS)
            else:
                u = (m[k] / (1 - BETA1**t)) / (np.sqrt(v[k] / (1 - BETA2**t)) + EPS)
            if decays[k]:
                u = u + WD * w[k]
            if kind == "lamb":
                wn, un = np.linalg.norm(w[k]), np.linalg.norm(u)
                ratio = wn / un if wn > 0 and un > 0 else 1.0
                w[k] = w[k] - lr * ratio * u
            else:
                w[k] = w[k] - lr * u
    return w


def layers_and_variables():
    dense = keras.layers.Dense(3, bias_initializer="zeros", name="dense")
    dense.build((None, 4))
    norm = keras.layers.LayerNormalization(name="layer_norm")
    norm.build((None, 3))
    variables = dense.trainable_variables + norm.trainable_variables
    return [dense, norm], variables


@pytest.mark.parametrize("kind, clip_norm", [("adam", None), ("lamb", None), ("google-adam", None),
                                             ("lamb", 4.0), ("google-adam", 4.0)])
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_matches_numpy_reference(kind, clip_norm, steps):
    rng = np.random.default_rng(7)
    _layers, variables = layers_and_variables()
    for var in variables:
        if var.path != "dense/bias":  # the bias stays zero: LAMB's ratio must then be 1
            var.assign(rng.normal(size=var.shape).astype("float32"))
    optimizer = make_optimizer(kind, PEAK, WARMUP, TOTAL, clip_norm)
    assert type(optimizer) is {"adam": AdamW, "lamb": NVLamb, "google-adam": GoogleAdamW}[kind]
    optimizer.build(variables)
    # Gradients of global norm about 14, 2, 7, 1.4, 9: above 1, some above and some below 4, so the clipping
    # to either matters (Adam without bias correction is blind to a scale shared by all steps).
    grads = [{var.path: (scale * rng.normal(size=var.shape)).astype("float32") for var in variables}
             for scale in (3.0, 0.5, 1.5, 0.3, 2.0)[:steps]]
    start = {var.path: np.array(var.numpy()) for var in variables}
    for step_grads in grads:
        optimizer.apply([keras.ops.convert_to_tensor(step_grads[var.path]) for var in variables], variables)
    decays = {"dense/kernel": True, "dense/bias": False, "layer_norm/gamma": False, "layer_norm/beta": False}
    assert {var.path for var in variables} == set(decays)
    expected = reference(kind, start, grads, decays, clip_norm or 1.0)
    for var in variables:
        np.testing.assert_allclose(var.numpy(), expected[var.path], rtol=1e-6, atol=1e-6, err_msg=var.path)
    assert int(optimizer.iterations.numpy()) == steps


def test_schedule_warmup_then_decay():
    for power in (1.0, 0.5):
        schedule = WarmupPolynomialDecay(PEAK, WARMUP, TOTAL, power)
        got = [float(schedule(step)) for step in range(TOTAL + 2)]
        np.testing.assert_allclose(got, [reference_lr(s, power) for s in range(TOTAL + 2)], rtol=1e-6, atol=1e-9)
    assert got[WARMUP - 1] == pytest.approx(PEAK) and got[TOTAL - 1] == 0.0


@pytest.mark.parametrize("warmup", [0, 1, WARMUP])
def test_google_schedule_starts_at_zero_and_decays_over_all_steps(warmup):
    """The first update of a warmup has lr 0; after it lr·(1 − s/N), s counted from 0 over all N steps,
    warmup included (NVIDIA's schedule decays over N − W steps from update number W + 1)."""
    got = [float(GoogleSchedule(PEAK, warmup, TOTAL)(step)) for step in range(TOTAL + 2)]
    expected = [google_reference_lr(step, warmup) for step in range(TOTAL + 2)]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    assert got[0] == (0.0 if warmup else pytest.approx(PEAK)) and got[TOTAL] == got[TOTAL + 1] == 0.0
    if warmup == WARMUP:  # step 2 (the third update): out of warmup, already decayed by 2/6
        assert got[:3] == pytest.approx([0.0, PEAK / 2, PEAK * 4 / 6])


def test_schedule_numbers_as_inputs_give_the_learning_rates_of_constants_bit_for_bit():
    """The JAX step takes the schedule's numbers as inputs (one program for every --lr, --warmup and --steps):
    compiled by XLA as the trainer compiles (its optimized code, in a process of its own: under the tests'
    fast compiles LLVM contracts a product with a constant into an FMA that it does not with an input), they
    give the learning rates that the numbers as constants give, bit for bit."""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(fast_compile=False))
    result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "check", "schedule_numbers_as_inputs"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


def test_clip_by_global_norm_is_tensorflows():
    """Scaled to norm 1.0 above it, untouched below it; every gradient NaN when the norm is not finite
    (tf.clip_by_global_norm's rule), so a step with an infinite gradient changes nothing (fp16 skips)."""
    grads = [np.array([3.0, 0.0], "float32"), np.array([[4.0]], "float32")]
    clipped = [np.asarray(g) for g in clip_by_global_norm([keras.ops.convert_to_tensor(g) for g in grads], 1.0)]
    np.testing.assert_allclose(clipped[0], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(clipped[1], [[0.8]], rtol=1e-6)
    small = [np.asarray(g) for g in clip_by_global_norm([keras.ops.convert_to_tensor(g) for g in grads], 10.0)]
    np.testing.assert_array_equal(small[0], grads[0])
    infinite = clip_by_global_norm([keras.ops.convert_to_tensor(np.array([np.inf, 1.0], "float32"))] + grads[1:], 1.0)
    assert all(np.isnan(np.asarray(g)).all() for g in infinite)


def test_weight_decay_exclusions_follow_bert():
    from trainer.config import BertConfig
    from trainer.model import build_model, is_excluded_from_weight_decay

    config = BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16)
    model = build_model(config, seq=16, pred=3)
    excluded = {v.path for v in model.trainable_variables if is_excluded_from_weight_decay(v)}
    decayed = {v.path for v in model.trainable_variables} - excluded
    assert all(p.endswith(("/bias", "/gamma", "/beta")) for p in excluded)
    assert all(p.endswith(("/kernel", "/embeddings")) for p in decayed)
    assert "bert/masked_lm/bias" in excluded and "bert/word_embeddings/embeddings" in decayed
