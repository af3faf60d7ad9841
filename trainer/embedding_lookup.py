"""How a token's embedding row is looked up, and how the rows' gradients reach the table.

The gradient of a lookup (`take`) is a scatter-add of one row per token into the table. On a GPU, XLA
emits it as atomic adds, and a row that many tokens of the batch share is added to by all of them in
turn: the segment table's two rows take every token, the [PAD] row of the word table every padding
token. On an H200 (BERT-base, batch 256, mixed_bfloat16) these two scatters took 93 of the step's 153
ms of device time (scripts/profile_gpu_step.py, docs/trainer.md).

`sorted` (JAX) sums each row's gradients before they reach the table: the tokens sorted by id, a
segmented sum over each run of equal ids (an associative scan), then one store per distinct id, so no
two writes go to one row. The sums are the same up to float32 rounding (another order of additions;
the atomic adds' order was not fixed either). `scatter` is Keras's own `take` and its gradient, and the
only one under TensorFlow (whose gradient of a gather, made dense by an unsorted segment sum, was not
measured on a GPU here).
"""

import functools

import keras
from keras import ops

EMBEDDING_GRADIENTS = ("scatter", "sorted")


def lookup(table, ids, gradient="scatter"):
    """table[ids] ([*ids.shape, width]) in the table's dtype; `gradient`: one of EMBEDDING_GRADIENTS."""
    if gradient == "sorted" and keras.backend.backend() == "jax":
        # The variable's value (inside a stateless call, the value it is mapped to), as JAX takes it.
        return _sorted_take()(ops.convert_to_tensor(table), ops.cast(ids, "int32"))
    return ops.take(table, ids, axis=0)


def embed(layer, ids, gradient="scatter"):
    """What the keras.layers.Embedding `layer` returns for `ids` (its own call with `scatter`): the row
    looked up in the float32 table, then cast to the layer's compute dtype."""
    if gradient == "scatter" or not layer.built:  # the symbolic call that builds the model builds the layer
        return layer(ids)
    return ops.cast(lookup(layer.embeddings, ids, gradient), layer.compute_dtype)


@functools.cache
def _sorted_take():
    """jnp.take(table, ids, axis=0) whose gradient is a sorted segment sum (made once, JAX imported)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def take(table, ids):
        return jnp.take(table, ids, axis=0)

    def forward(table, ids):
        return take(table, ids), (table, ids)

    def backward(residuals, grad):
        table, ids = residuals
        rows, width = table.shape
        flat_ids = ids.reshape(-1)
        order = jnp.argsort(flat_ids)
        sorted_ids = flat_ids[order]
        sums, _ = jax.lax.associative_scan(_run_sum, (grad.reshape(-1, width)[order], sorted_ids))
        last_of_run = jnp.append(sorted_ids[1:] != sorted_ids[:-1], True)
        # One store per distinct id; the other positions get distinct indices past the table, dropped.
        target = jnp.where(last_of_run, sorted_ids, rows + jnp.arange(flat_ids.shape[0], dtype=sorted_ids.dtype))
        table_grad = jnp.zeros((rows, width), grad.dtype).at[target].set(sums, mode="drop", unique_indices=True)
        return table_grad, None

    take.defvjp(forward, backward)
    return take


def _run_sum(a, b):
    """The segmented sum's operator on sorted ids: (sum of the run that ends the span, its id). Spans a
    and b are adjacent; when their last ids differ, no element of a has b's id (the ids are sorted)."""
    import jax.numpy as jnp

    (sum_a, id_a), (sum_b, id_b) = a, b
    return jnp.where((id_a == id_b)[:, None], sum_a + sum_b, sum_b), id_b
