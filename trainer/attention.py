"""The attention kernel: how a layer's scaled dot-product attention is computed.

Keras's MultiHeadAttention chooses: without attention dropout (`--dropout 0`, or at inference) it calls
`ops.dot_product_attention`, which under JAX on an NVIDIA GPU is cuDNN's fused (flash) attention (4.7
ms a step for BERT-base at batch 256 on an H200, forward and backward); with BERT's attention dropout
it computes the scores with einsum, a masked softmax, dropout on the probabilities and a second einsum,
which XLA fuses around the two matrix products. cuDNN's fused attention can drop out too, but JAX takes
its seed as a compile-time constant (jax._src.cudnn.fused_attention_stablehlo: `seed: int`), which
would drop the same positions at every step: so BERT's attention dropout keeps the einsum path.

`BertAttention` is that path as Keras writes it (the same operations, so the same values), with the
probabilities' dropout masks drawn by trainer/dropout.py's generator.
"""

import keras
from keras import ops

from trainer import dropout


class BertAttention(keras.layers.MultiHeadAttention):
    """keras.layers.MultiHeadAttention (the same variables and values) whose attention-probability
    dropout draws its masks with `dropout_rng` (trainer/dropout.py)."""

    def __init__(self, *args, dropout_rng="threefry", **kwargs):
        super().__init__(*args, **kwargs)
        self.dropout_rng = dropout_rng

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        if self.dropout_rng == "threefry" or not training or self._dropout == 0 or use_causal_mask:
            return super()._compute_attention(query, key, value, attention_mask, training,
                                              return_attention_scores, use_causal_mask)
        query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        scores = self._masked_softmax(ops.einsum(self._dot_product_equation, key, query), attention_mask)
        dropped = dropout.apply(self._dropout_layer, scores, training, self.dropout_rng)
        return ops.einsum(self._combine_equation, dropped, value), scores
