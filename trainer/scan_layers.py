"""The Transformer layers as one loop: `--scan-layers` (JAX only), as MaxText's `scan_layers`.

Unrolled, the step's program holds every layer's operations once per layer: XLA compiles BERT-base's
twelve layers' forward and backward passes twelve times (on a GPU, some 1,200-1,500 kernels; most of the
~20 s a process spends compiling its step, docs/trainer.md), even though they are traced once
(trainer/called_layers.py, whose calls XLA inlines). Scanned, one layer is compiled once and run twelve
times by `jax.lax.scan` over the layers' variables stacked along a new first axis: the program is about
half the size on a CPU (BERT-base, tests) and its layer part one twelfth.

The variables stay each layer's own (checkpoints, optimizer slots and names do not change): the step
stacks their current values when it runs (a copy of the layers' weights, 340 MB for BERT-base in
float32, a fraction of a millisecond on a GPU) and the gradients come back per layer through the stack.
The first layer is the template: it is called, in a StatelessScope, with each layer's values in turn, its
seed states included, so every layer draws the dropout masks it draws unrolled, and the seeds each layer
advances are written back to that layer. Values are read as stored (float32 under mixed precision), not
autocast, so LayerNorm's float32 parameters stay float32 as unrolled. Losses equal the unrolled step's
within rounding (tests/test_trainer_jax.py); the order in which XLA sums may differ.

Not with --model-parallel or --pipeline-stages (their layouts and stages are per layer).
"""

import keras
from keras import ops

from trainer import keras_internals


def run(layers, x, attention_mask, training):
    """x through `layers` (TransformerLayer, identical in structure), scanned where it can be: under JAX with
    every layer built and every variable's value known (the model's first call builds the layers one by
    one, its variables still without values inside model.variables_initialized_together)."""
    values = layer_values(layers)
    if values is None:
        return one_by_one(layers, x, attention_mask, training)
    import jax

    trainable, seeds = values
    one_layer = template_call(layers[0], training)
    x, advanced = jax.lax.scan(lambda x, values: one_layer(x, attention_mask, *values), x,
                               (_stacked(trainable), _stacked(seeds)))
    for i, layer in enumerate(layers):
        for variable, values in zip(layer.non_trainable_variables, advanced):
            variable.assign(values[i])
    return x


def one_by_one(layers, x, attention_mask, training):
    for layer in layers:
        x = layer(x, attention_mask, training=training)
    return x


def layer_values(layers):
    """([each layer's trainable values], [each layer's seed states]) as stored, or None where the layers cannot
    run as one template: fewer than two, not all built, or a variable without a value yet."""
    trainable = [[keras_internals.stored_value(v) for v in layer.trainable_variables] for layer in layers]
    seeds = [[keras_internals.stored_value(v) for v in layer.non_trainable_variables] for layer in layers]
    if (len(layers) < 2 or not all(layer.built for layer in layers)
            or any(value is None for values in trainable + seeds for value in values)):
        return None
    return trainable, seeds


def template_call(template, training):
    """f(x, attention_mask, trainable values, seed states) -> (output, the seed states advanced): the template
    layer called (its __call__: autocast and casts as unrolled) with one layer's values."""
    def one_layer(x, attention_mask, layer_trainable, layer_seeds):
        mapping = [*zip(template.trainable_variables, layer_trainable),
                   *zip(template.non_trainable_variables, layer_seeds)]
        with keras.StatelessScope(state_mapping=mapping) as scope:
            y = template(x, attention_mask, training=training)
        return y, [scope.get_current_value(v) for v in template.non_trainable_variables]

    return one_layer


def _stacked(per_layer):
    """[[layer 0's values], [layer 1's], ...] -> [each variable's values of every layer, stacked on axis 0]."""
    return [ops.stack(values) for values in zip(*per_layer)]
