r"""The exact GELU's formula: which expression of x·Φ(x) (Φ the normal distribution) the model computes.

Keras's JAX backend computes BERT's exact GELU as jax.nn.gelu does, 0.5·x·erfc(-x/√2); TensorFlow's
backend and PyTorch (Hugging Face's BertIntermediate) as 0.5·x·(1 + erf(x/√2)). The same function, other
last bits. What differs is what XLA makes of them for a GPU: erf is one HLO instruction, which its GPU
emitter computes as a float32 rational approximation; erfc is expanded into a float32 expression with
exponentials, divisions and selects, in the forward pass and again where the backward pass recomputes the
GELU (trainer/model.py). The BERT-base step at batch 256 compiled for an H100 without one
(`scripts/gpu_step_traffic.py --save-hlo DIR`, with and without --gelu erf; in each module, by JAX 0.10.2's
XLA, `grep -c '= f32\[256,128,3072\]'` and `grep -c ' exponential('`) holds 2,064 float32 instructions
over [256, 128, 3072] arrays and 44 exponentials with Keras's formula, 48 and 18 with erf, in the same
1,205 kernels moving the same 83.53 GB. On the H100 (docs/trainer.md) the feed-forward's two GELU kernels
took 8.8 ms of a 56.8 ms step (profile_gpu_step.py), moving their 12.1 GB (gpu_step_traffic.py) at 1.2-1.5
TB/s, under half of its 3.35 TB/s. Below |x/√2| = 1, where most inputs are, JAX's erfc is 1 - erf: the two
formulas give the same bits there (the tests' losses agree to the bit).

`keras`: Keras's own formula. `erf`: 0.5·x·(1 + erf(x/√2)) under JAX (TensorFlow's backend computes that
already). Not yet measured on a GPU, so `auto` is Keras's everywhere. The tanh approximation
(hidden_act gelu_tanh) is not touched.
"""

import keras
import numpy as np

GELU_FORMULAS = ("keras", "erf")


def exact(x, formula="keras"):
    """BERT's exact GELU of `x` by `formula` (GELU_FORMULAS), in x's dtype."""
    if formula == "keras" or keras.backend.backend() != "jax":
        return keras.activations.gelu(x, approximate=False)
    from jax import lax

    half = np.asarray(0.5, x.dtype)
    return half * x * (np.asarray(1.0, x.dtype) + lax.erf(x * np.asarray(np.sqrt(0.5), x.dtype)))
