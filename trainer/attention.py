"""The attention kernel: how a layer's scaled dot-product attention is computed.

Keras's MultiHeadAttention chooses: without attention dropout (`--dropout 0`, or at inference) it calls
`ops.dot_product_attention`, which under JAX on an NVIDIA GPU is cuDNN's fused (flash) attention (4.7
ms a step for BERT-base at batch 256 on an H200, forward and backward); with BERT's attention dropout
it computes the scores with einsum, a masked softmax, dropout on the probabilities and a second einsum,
which XLA fuses around the two matrix products. cuDNN's fused attention can drop out too, but JAX takes
its seed as a compile-time constant (jax._src.cudnn.fused_attention_stablehlo: `seed: int`), which
would drop the same positions at every step: so BERT's attention dropout keeps the einsum path.

`BertAttention` is that path as Keras writes it (the same operations, so the same values), with the
probabilities' dropout masks drawn by trainer/dropout.py's generator; or, with `--attention fused` (JAX;
what `auto`, the default, takes on a GPU where the kernel fits the run),
trainer/fused_attention.py's one Pallas kernel for the whole of it, dropout included, forward and backward.

The query, key and value projections (`HeadsProjection`) multiply as one [hidden, heads x size] matrix
and add their bias as a vector of heads x size: the same products and sums as Keras's EinsumDense
("abc,cde->abde" plus a [heads, size] bias), the same values on the CPU, but a shape XLA's GPU compiler
puts the bias add into the matrix product's epilogue for, where the [heads, size] bias made it write the
bias broadcast to the whole output first and read it back as the product's addend (three [batch, seq,
hidden] arrays written and read a layer; scripts/gpu_step_traffic.py).

With the fused kernel, `--qkv-projection packed` multiplies the three projections as one [hidden, 3 x
hidden] matrix (their kernels side by side, read from the same variables) and the kernel reads the query,
key and value heads from that one output, and writes their gradients back packed the same way: the backward
pass then takes one matrix product back to the layer's input, where the three products' input gradients were
three products and their sum over [batch, seq, hidden] (compiled for an H100, the BERT-base step moved 77.5
GB instead of 83.5 in 977 kernels instead of 1,205; docs/trainer.md). The same variables, checkpoints and
values up to the products' summation order; `separate`, the default, is Keras's three.
"""

import keras
from keras import ops

from trainer import dropout


class HeadsProjection(keras.layers.EinsumDense):
    """EinsumDense "abc,cde->abde" with a [d, e] bias, computed as a 2-D product and a vector bias."""

    def call(self, inputs, training=None):
        hidden, heads, size = self.kernel.shape
        flat = ops.matmul(inputs, ops.reshape(self.kernel, (hidden, heads * size)))
        if self.bias is not None:
            flat = ops.add(flat, ops.reshape(self.bias, (heads * size,)))
        return ops.reshape(flat, (*ops.shape(inputs)[:-1], heads, size))


class BertAttention(keras.layers.MultiHeadAttention):
    """keras.layers.MultiHeadAttention (the same variables and values) whose attention-probability
    dropout draws its masks with `dropout_rng` (trainer/dropout.py), or whose attention is one fused
    kernel (`kernel` "fused": trainer/fused_attention.py, JAX)."""

    def __init__(self, *args, dropout_rng="threefry", kernel="einsum", qkv_projection="separate", **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout_rng = dropout_rng
        self.kernel = kernel
        self.qkv_projection = qkv_projection

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        # Keras's build made them EinsumDense layers; the same layers (variables, paths) compute as 2-D products.
        for projection in (self._query_dense, self._key_dense, self._value_dense):
            projection.__class__ = HeadsProjection

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None, attention_mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False):
        if (self.kernel == "fused" and self.qkv_projection == "packed" and query is value and key is None
                and query_mask is None and value_mask is None and key_mask is None
                and not (return_attention_scores or use_causal_mask or self._use_gate)):
            return self._output_dense(self._packed(query, attention_mask, training))
        return super().call(query, value, key, query_mask, value_mask, key_mask, attention_mask,
                            return_attention_scores, training, use_causal_mask)

    def _packed(self, inputs, attention_mask, training):
        """Self-attention with the query, key and value projections as one matrix product (the module
        docstring says why); their variables read side by side, in the compute dtype."""
        from trainer import fused_attention

        projections = (self._query_dense, self._key_dense, self._value_dense)
        hidden, heads, size = self._query_dense.kernel.shape
        kernel = ops.concatenate([ops.reshape(p.kernel, (hidden, heads * size)) for p in projections], axis=1)
        packed = ops.matmul(inputs, kernel)
        if self._use_bias:
            packed = ops.add(packed, ops.concatenate([ops.reshape(p.bias, (heads * size,)) for p in projections]))
        packed = ops.reshape(packed, (*ops.shape(inputs)[:-1], 3 * heads, size))
        attention_mask, seed, rate = self._kernel_arguments(
            inputs, inputs, self._compute_attention_mask(inputs, inputs, attention_mask=attention_mask), training)
        return fused_attention.attention_packed(packed, attention_mask, seed, rate, self._inverse_sqrt_key_dim)

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        # the fused kernel's score tiles are square: the last layer's rows (trainer/last_layer.py) take einsum
        if (self.kernel == "fused" and not (return_attention_scores or use_causal_mask)
                and query.shape[1] == key.shape[1]):
            return self._fused(query, key, value, attention_mask, training), None
        if self.dropout_rng == "threefry" or not training or self._dropout == 0 or use_causal_mask:
            return super()._compute_attention(query, key, value, attention_mask, training,
                                              return_attention_scores, use_causal_mask)
        query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        scores = self._masked_softmax(ops.einsum(self._dot_product_equation, key, query), attention_mask)
        dropped = dropout.apply(self._dropout_layer, scores, training, self.dropout_rng)
        return ops.einsum(self._combine_equation, dropped, value), scores

    def _fused(self, query, key, value, attention_mask, training):
        """The fused kernel on [batch, seq, heads, head_dim] query, key and value."""
        from trainer import fused_attention

        attention_mask, seed, rate = self._kernel_arguments(query, key, attention_mask, training)
        return fused_attention.attention(query, key, value, attention_mask, seed, rate,
                                         self._inverse_sqrt_key_dim)

    def _kernel_arguments(self, query, key, attention_mask, training):
        """(mask, seed, dropout rate) of a fused kernel's call: the mask all True where none is given; the
        dropout keyed by this layer's dropout seed state (advanced once a training call, as Keras's Dropout
        does)."""
        rate = self._dropout if training else 0.0
        seed = self._dropout_layer.seed_generator.next() if rate > 0 else ops.zeros((2,), "uint32")
        if attention_mask is None:
            attention_mask = ops.ones((ops.shape(query)[0], ops.shape(query)[1], ops.shape(key)[1]), "bool")
        return attention_mask, seed, rate
