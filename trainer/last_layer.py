"""The last Transformer layer on the positions the heads read: `--last-layer predicted`.

Pretraining's heads read the encoder's output at a few positions of each row: the masked-LM head at the
`pred` masked positions (20 of 128 at 128/20) and the next-sentence head at each sequence's [CLS]. Every
position's output in the last layer depends on all the layer's keys and values but only on its own query
row: attention, its output projection, the residual adds, both layer norms and the feed-forward network
are computed position by position. So the last layer can take its query rows at those positions only
(`rows`: [CLS] first, then the masked positions, k + pred of them) while its key and value projections
still run over the whole sequence: the same values at the positions read, and none of the others, which
nothing reads. For BERT-base at 128/20, the last layer's forward does 0.56 GFLOP a sequence instead of
1.86: the step does 5.6% fewer FLOPs (trainer/benchmark/method.py counts what the step computes), and the
last layer's elementwise work (dropout, layer norms, GELU) shrinks with its products.

What changes: the matrix products' shapes, so the summation order and the last bits of float32 results;
and, where dropout is on, the last layer's masks (drawn for [batch, k + pred, ...] arrays instead of
[batch, seq, ...]): another draw from the same distribution, not the same draw. Its attention is the
einsum path whatever --attention says (the fused kernel takes square score tiles; this one is [k + pred,
seq] a head, small). Not with --pipeline-stages (the stages run the layers and heads apart,
trainer/pipeline_parallel.py). "auto" is `all`, the whole layer, until a GPU measures what it gives.
"""

from keras import ops


def rows(inputs):
    """[batch, k + pred] int32: the positions the heads read, each sequence's [CLS] first (the row's first
    token, or packed rows' next_sentence_positions [batch, k]), then masked_lm_positions."""
    cls = inputs.get("next_sentence_positions")
    if cls is None:
        cls = ops.zeros((ops.shape(inputs["input_ids"])[0], 1), "int32")
    return ops.concatenate([ops.cast(cls, "int32"), ops.cast(inputs["masked_lm_positions"], "int32")], axis=1)


def split(outputs, inputs):
    """(the [CLS] outputs, the masked positions' outputs) of the last layer's `outputs` [batch, k + pred,
    hidden]: [batch, hidden] and [batch, pred, hidden] unpacked, [batch, k, hidden] and the same packed."""
    cls = inputs.get("next_sentence_positions")
    if cls is None:
        return outputs[:, 0], outputs[:, 1:]
    k = ops.shape(cls)[1]
    return outputs[:, :k], outputs[:, k:]
