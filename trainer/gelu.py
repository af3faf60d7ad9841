"""The exact GELU's formula: which expression of x·Φ(x) (Φ the normal distribution) the model computes.

Keras's JAX backend computes BERT's exact GELU as jax.nn.gelu does, 0.5·x·erfc(-x/√2); TensorFlow's
backend and PyTorch (Hugging Face's BertIntermediate) as 0.5·x·(1 + erf(x/√2)). The same function, other
last bits. What differs is what XLA makes of them for a GPU: erf is one HLO instruction, which its GPU
emitter computes as a float32 rational approximation; erfc is expanded into a float32 expression of some
40 operations, two exponentials and two divisions among them, in the forward pass and again where the
backward pass recomputes the GELU (trainer/model.py). Compiled for an H100 without one (a [32768, 768] x
[768, 3072] bfloat16 product, its GELU and their gradients, by JAX 0.10.2's XLA), the erfc form's program
holds 86 float32 operations over the [32768, 3072] array, the erf form's 2 (the erf and a conversion); the
whole BERT-base step at batch 256 (scripts/gpu_step_traffic.py --save-hlo) 2,064 float32 instructions over
[256, 128, 3072] arrays and 44 exponentials against 48 and 18, in the same 1,205 kernels moving the same
83.53 GB. On the H100 (docs/trainer.md) the feed-forward's two GELU kernels took 8.8 ms of a 56.8 ms step,
two to three times what their bytes need at its memory bandwidth. Below |x/√2| = 1, where most inputs are,
JAX's erfc is 1 - erf: the two formulas give the same bits there (the tests' losses agree to the bit).

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
