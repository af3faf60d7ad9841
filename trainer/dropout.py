"""Dropout's random numbers: which generator draws the masks of the model's dropout layers.

A BERT-base step at batch 256 draws about 1.2 billion keep/drop decisions (the attention probabilities'
and three hidden dropouts a layer). Keras draws them with JAX's default generator, threefry: 20 rounds
of 32-bit arithmetic per pair of numbers, on the GPU's integer units. `rbg` draws them with XLA's own
RngBitGenerator (Philox on a GPU), as MaxText and t5x do for dropout; the key comes from the same
per-layer seed state as Keras's (the layer's SeedGenerator, advanced once a call), so a run is still
reproducible from --seed and resumes exactly. The two give other masks, not other statistics. rbg's
bits depend on how the array is laid out over devices, so a model split over devices draws other masks
than on one (threefry's do not). `threefry` is Keras's own `Dropout.call`.

`hash` computes each element's bits where it is used: lowbias32 of lowbias32 of its position in the array
(row-major) mixed with the layer's seed state, kept when 24 of them fall below keep x 2^24, the counter
hash of the fused attention kernel (trainer/fused_attention.py). It is a function of the position, so XLA
fuses it into the kernel that applies the mask (which keeps a one-byte mask for the backward pass), where
rbg's generator is a kernel of its own that writes 4 bytes of bits an element, read back by a second that
writes the mask (BERT-base at batch 256 compiled for an H100: 5.7 GB a step less, scripts/gpu_step_traffic.py);
an element's bits depend on its position in the whole array, not on the devices holding it. Measured on an
H100 (BERT-base amp, batch 256): 1.03x rbg's sequences/s and 2.2 ms less a step in the profile, so `auto` takes
it under JAX on a GPU (docs/trainer.md). Arrays of 2^32 elements or more would repeat masks (a uint32 counter):
BERT's largest is batch x seq x hidden.

Used through `apply(layer, x, training, generator)`: the model keeps its keras.layers.Dropout layers
(their seed states are checkpointed by path) and this module draws their masks.
"""

import keras
import numpy as np

DROPOUT_RNGS = ("threefry", "rbg", "hash")


def apply(layer, inputs, training, generator="threefry"):
    """What the keras.layers.Dropout `layer` does to `inputs`, its masks drawn by `generator`."""
    if generator == "threefry" or not training or layer.rate == 0 or keras.backend.backend() != "jax":
        return layer(inputs, training=training)
    if generator == "hash":
        return _hash_dropout(inputs, layer.rate, layer.seed_generator.next())
    return _rbg_dropout(inputs, layer.rate, layer.seed_generator.next())


def lowbias32(x):
    """Chris Wellons's lowbias32 integer hash on uint32 arrays (full avalanche in two multiplies)."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def hash_keys(seed0, seed1, stream):
    """Two uint32 keys of a seed state's words for the numbered `stream` of masks it draws."""
    key = lowbias32(seed0 ^ lowbias32(stream * np.uint32(0x9E3779B9) + seed1))
    return key, lowbias32(key + seed1)


def hash_keep(counter, keys, rate):
    """bool: whether dropout at `rate` keeps the elements numbered `counter` (uint32) under `keys`."""
    key, key2 = keys
    bits = lowbias32(lowbias32(counter ^ key) + key2)
    return (bits >> 8) < np.uint32(round((1.0 - rate) * (1 << 24)))


def _hash_dropout(inputs, rate, seed):
    """Keras's dropout (keep with probability 1 - rate, scale the kept by 1 / (1 - rate)), each element's
    keep decided by hash_keep of its row-major position."""
    import jax.numpy as jnp

    seed = seed.astype(jnp.uint32)
    counter = jnp.arange(inputs.size, dtype=jnp.uint32).reshape(inputs.shape)
    return _kept(inputs, hash_keep(counter, hash_keys(seed[0], seed[1], np.uint32(0)), rate), rate)


def _rbg_dropout(inputs, rate, seed):
    """Keras's JAX dropout (keep with probability 1 - rate, scale the kept by 1 / (1 - rate)) with an
    RngBitGenerator key made of the layer's two-word seed."""
    import jax
    import jax.numpy as jnp

    key = jax.random.wrap_key_data(jnp.concatenate([seed, seed]).astype(jnp.uint32), impl="rbg")
    return _kept(inputs, jax.random.bernoulli(key, p=1.0 - rate, shape=inputs.shape), rate)


def _kept(inputs, keep, rate):
    """Dropout's output as Keras's JAX backend computes it: the kept elements divided by 1 - rate, the others 0."""
    import jax
    import jax.numpy as jnp

    return jax.lax.select(keep, inputs / (1.0 - rate), jnp.zeros_like(inputs))
