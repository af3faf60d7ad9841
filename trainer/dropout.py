"""Dropout's random numbers: which generator draws the masks of the model's dropout layers.

A BERT-base step at batch 256 draws about 1.2 billion keep/drop decisions (the attention probabilities'
and three hidden dropouts a layer). Keras draws them with JAX's default generator, threefry: 20 rounds
of 32-bit arithmetic per pair of numbers, on the GPU's integer units. `rbg` draws them with XLA's own
RngBitGenerator (Philox on a GPU), as MaxText and t5x do for dropout; the key comes from the same
per-layer seed state as Keras's (the layer's SeedGenerator, advanced once a call), so a run is still
reproducible from --seed and resumes exactly. The two give other masks, not other statistics. rbg's
bits depend on how the array is laid out over devices, so a model split over devices draws other masks
than on one (threefry's do not). `threefry` is Keras's own `Dropout.call`.

Used through `apply(layer, x, training, generator)`: the model keeps its keras.layers.Dropout layers
(their seed states are checkpointed by path) and this module draws their masks.
"""

import keras

DROPOUT_RNGS = ("threefry", "rbg")


def apply(layer, inputs, training, generator="threefry"):
    """What the keras.layers.Dropout `layer` does to `inputs`, its masks drawn by `generator`."""
    if generator == "threefry" or not training or layer.rate == 0 or keras.backend.backend() != "jax":
        return layer(inputs, training=training)
    return _rbg_dropout(inputs, layer.rate, layer.seed_generator.next())


def _rbg_dropout(inputs, rate, seed):
    """Keras's JAX dropout (keep with probability 1 - rate, scale the kept by 1 / (1 - rate)) with an
    RngBitGenerator key made of the layer's two-word seed."""
    import jax
    import jax.numpy as jnp

    key = jax.random.wrap_key_data(jnp.concatenate([seed, seed]).astype(jnp.uint32), impl="rbg")
    keep_prob = 1.0 - rate
    mask = jax.random.bernoulli(key, p=keep_prob, shape=inputs.shape)
    return jax.lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))
