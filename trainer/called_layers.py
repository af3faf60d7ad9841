"""The Transformer layers traced once and called once per layer: the unrolled step's program, from one layer.

Unrolled as Keras writes it, tracing the step walks BERT-base's twelve layers through Keras twelve times and
lowers twelve copies of their forward and backward passes; XLA then compiles the whole. Under JAX, each
layer is instead a call of one jitted function of (x, mask, the layer's values, its seed states): JAX
traces and lowers it once (the jit's cache holds it for the other layers, whose values have the same
shapes) and its derivatives once, and the lowered program calls them twelve times. XLA inlines the calls
before it optimizes, so it compiles the unrolled program: the same kernels (compiled for an H100 by
scripts/gpu_step_traffic.py: 1,205 kernels and 83.53 GB a BERT-base step at batch 256 either way) and the
same losses within rounding, with less tracing and lowering (BERT-base on a 2-core CPU, under cProfile:
traced in 2.0 s against 3.6, lowered in 0.9 against 1.4; scripts/bench_startup.py --phases,
docs/benchmarks.md), which every start pays, warm cache or not.
Unlike --scan-layers (trainer/scan_layers.py), nothing runs as a loop.

The first layer is the template, called in a StatelessScope with each layer's values in turn, as
scan_layers does; each layer's advanced seed states are written back to it. Only while a step is traced
(an eager call would compile the jitted layer at every call) and where the layers can share a template
(scan_layers.layer_values); else, and under TensorFlow, the layers run one by one.
"""

import keras

from trainer import scan_layers


def run(layers, x, attention_mask, training):
    """x through `layers` (TransformerLayer, identical in structure), each a call of one jitted function
    where it can be (see the module's docstring), else one by one."""
    values = scan_layers.layer_values(layers) if _traced(x) else None
    if values is None:
        return scan_layers.one_by_one(layers, x, attention_mask, training)
    import jax

    one_layer = jax.jit(scan_layers.template_call(layers[0], training))
    for layer, trainable, seeds in zip(layers, *values):
        x, advanced = one_layer(x, attention_mask, trainable, seeds)
        for variable, value in zip(layer.non_trainable_variables, advanced):
            variable.assign(value)
    return x


def _traced(x):
    """Whether `x` is a value of a JAX trace (a step being compiled), not an array computed eagerly."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return isinstance(x, jax.core.Tracer)
