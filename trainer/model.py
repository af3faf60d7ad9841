"""BERT for pretraining as Keras 3 layers: encoder, masked-LM head, next-sentence head.

The architecture of google-research/bert: post-LayerNorm Transformer encoder
with exact (erf) GELU, learned position and segment embeddings, a tanh pooler
on `[CLS]`; the masked-LM head is dense + GELU + LayerNorm whose output is
multiplied by the transposed word embeddings plus a bias; the next-sentence
head is a dense layer on the pooled output. Written with `keras.ops` only, so
it runs on the TensorFlow and the JAX backends.
"""

import contextlib

import keras
from keras import ops

from bertprep.errors import UsageError
from trainer import called_layers, dropout, embedding_lookup, gelu, last_layer, scan_layers
from trainer.attention import BertAttention
from trainer.config import (
    BertConfig,  # noqa: F401  (re-exported: the model's configuration)
    StepOptions,
)


def _init(config):
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _recomputed_in_backward(activation):
    """`activation` whose backward pass recomputes it from its input (JAX's checkpoint), the same values.
    Why: XLA's GPU compiler otherwise writes the GELU's derivative factor as a second [tokens, intermediate]
    array in the forward pass and reads it, with the input, in the backward; recomputed, the forward
    writes one array and the backward reads two (BERT-base at batch 256: 0.4 GB a layer less,
    scripts/gpu_step_traffic.py). TensorFlow keeps its own."""
    if keras.backend.backend() != "jax":
        return activation
    import jax

    return jax.checkpoint(activation)


def activation(hidden_act, options=StepOptions()):
    """The feed-forward's activation: hidden_act "gelu" is the exact (erf) GELU, as Hugging Face's, in the
    formula options.gelu names (trainer/gelu.py); "gelu_tanh" the tanh approximation that google-research/bert's
    modeling.py computes (its checkpoints are read with it, trainer/checkpoint/google.py)."""
    if hidden_act == "gelu_tanh":
        return _recomputed_in_backward(lambda v: keras.activations.gelu(v, approximate=True))
    if hidden_act == "gelu":
        return _recomputed_in_backward(lambda v: gelu.exact(v, options.gelu))
    raise ValueError(f"hidden_act: expected gelu or gelu_tanh, got {hidden_act!r}")


class TransformerLayer(keras.layers.Layer):
    """Self-attention and feed-forward blocks, each followed by residual + LayerNorm (post-LN).
    `options`: how the dropout masks are drawn (trainer/dropout.py)."""

    def __init__(self, config, options=StepOptions(), **kwargs):
        super().__init__(**kwargs)
        heads = config.num_attention_heads
        self.dropout_rng = options.dropout_rng
        self.attention = BertAttention(
            heads, config.hidden_size // heads, dropout=config.attention_probs_dropout_prob,
            kernel_initializer=_init(config), name="attention", dropout_rng=options.dropout_rng,
            kernel=options.attention, qkv_projection=options.qkv_projection)
        self.attention_dropout = keras.layers.Dropout(config.hidden_dropout_prob)
        self.attention_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="attention_layer_norm")
        self.intermediate = keras.layers.Dense(config.intermediate_size,
                                               activation=activation(config.hidden_act, options),
                                               kernel_initializer=_init(config), name="intermediate")
        self.output_dense = keras.layers.Dense(config.hidden_size, kernel_initializer=_init(config), name="output")
        self.output_dropout = keras.layers.Dropout(config.hidden_dropout_prob)
        self.output_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="output_layer_norm")

    def call(self, x, attention_mask, training=False, rows=None):
        """x [batch, seq, hidden] through the layer; with `rows` [batch, r] (trainer/last_layer.py) only those
        positions' outputs [batch, r, hidden], their queries attending to all of x (attention_mask then
        [batch, r, seq])."""
        query = x if rows is None else _gather_positions(x, rows)
        attended = self.attention(query, x, attention_mask=attention_mask, training=training)
        x = self.attention_layer_norm(
            query + dropout.apply(self.attention_dropout, attended, training, self.dropout_rng))
        h = self.output_dense(self.intermediate(x))
        return self.output_layer_norm(x + dropout.apply(self.output_dropout, h, training, self.dropout_rng))


class MaskedLMHead(keras.layers.Layer):
    """Dense + GELU + LayerNorm, then logits against the (tied) word embeddings plus a bias."""

    def __init__(self, config, word_embeddings, options=StepOptions(), **kwargs):
        super().__init__(**kwargs)
        self.word_embeddings = word_embeddings
        self.transform = keras.layers.Dense(config.hidden_size, activation=activation(config.hidden_act, options),
                                            kernel_initializer=_init(config), name="transform")
        self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="layer_norm")
        self.vocab_size = config.vocab_size

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(self.word_embeddings.input_dim,), initializer="zeros", name="bias")

    def call(self, x):
        x = self.layer_norm(self.transform(x))
        embeddings = ops.cast(self.word_embeddings.embeddings, x.dtype)
        logits = ops.matmul(x, ops.transpose(embeddings)) + ops.cast(self.bias, x.dtype)
        # The padded vocabulary's extra columns are cut off: the loss sees the real vocabulary only.
        return logits if self.vocab_size == self.word_embeddings.input_dim else logits[..., :self.vocab_size]


class BertEncoder(keras.Model):
    """The encoder the pretrainer and the fine-tuning models share: embeddings, Transformer layers,
    pooler. `encode` returns the sequence output [batch, seq, hidden]; `pool` the tanh pooler on its
    [CLS] [batch, hidden] (a model that never pools, SQuAD's, is made `with_pooler=False`).
    Every model is named "bert", so the encoder's variable paths are the same in all of them and a
    pretraining checkpoint loads into a task model by path."""

    def __init__(self, config, with_pooler=True, pad_vocab=1, options=StepOptions(), **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.options = options  # how the step computes: embedding gradients, dropout's generator
        self.padded_vocab = padded_vocab_size(config.vocab_size, pad_vocab)
        # One initializer object for the embeddings, the pooler and the pretraining heads that use it: an
        # unseeded Keras initializer takes its seed when created, and pretraining's draws stay as they were.
        self.initializer = init = _init(config)
        self.word_embeddings = keras.layers.Embedding(
            self.padded_vocab, config.hidden_size, name="word_embeddings",
            embeddings_initializer=(init if self.padded_vocab == config.vocab_size
                                    else _ZeroPadded(init, config.vocab_size)))
        self.position_embeddings = keras.layers.Embedding(config.max_position_embeddings, config.hidden_size,
                                                          embeddings_initializer=init, name="position_embeddings")
        self.segment_embeddings = keras.layers.Embedding(config.type_vocab_size, config.hidden_size,
                                                         embeddings_initializer=init, name="segment_embeddings")
        self.embeddings_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="embeddings_layer_norm")
        self.embeddings_dropout = keras.layers.Dropout(config.hidden_dropout_prob)
        self.encoder_layers = [TransformerLayer(config, options, name=f"layer_{i}")
                               for i in range(config.num_hidden_layers)]
        self.pooler = (keras.layers.Dense(config.hidden_size, activation="tanh", kernel_initializer=init, name="pooler")
                       if with_pooler else None)

    def call(self, inputs, training=False):
        """The encoder alone (a checkpoint without pretraining heads): its sequence output and, with a
        pooler, the pooled [CLS]. Build it by calling it: Keras names the variables a call creates under
        the model's name ("bert/word_embeddings/..."), as the checkpoint name table has them; `encode`
        called directly would create them unprefixed."""
        sequence = self.encode(inputs, training=training)
        return {"sequence_output": sequence, **({"pooled_output": self.pool(sequence)} if self.pooler else {})}

    def encode(self, inputs, training=False):
        x = self.embed(inputs, training=training)
        return self.run_layers(self.encoder_layers, x, sequence_attention_mask(inputs["input_mask"]), training)

    def run_layers(self, layers, x, attention_mask, training):
        """x through `layers` (all of the encoder's, or all but the last: BertPretrainer.encode_rows)."""
        if not layers:
            return x
        if self.options.scan_layers:  # one traced layer, run by a loop (trainer/scan_layers.py)
            return scan_layers.run(layers, x, attention_mask, training)
        # one traced layer, called once per layer: the unrolled program (trainer/called_layers.py)
        return called_layers.run(layers, x, attention_mask, training)

    def embed(self, inputs, training=False):
        """The Transformer layers' input [batch, seq, hidden] (trainer/pipeline_parallel.py runs the layers apart)."""
        input_ids = inputs["input_ids"]
        positions = inputs.get("positions")
        if positions is None:  # one sequence per row
            positions = ops.arange(ops.shape(input_ids)[1])[None]
        gradient = self.options.embedding_gradient
        x = (embedding_lookup.embed(self.word_embeddings, input_ids, gradient)
             + embedding_lookup.embed(self.position_embeddings, positions, gradient)
             + embedding_lookup.embed(self.segment_embeddings, inputs["segment_ids"], gradient))
        return dropout.apply(self.embeddings_dropout, self.embeddings_layer_norm(x), training, self.options.dropout_rng)

    def pool(self, sequence_output, cls_positions=None):
        """The pooled [CLS]: the row's first token [batch, hidden], or each packed sequence's
        (`cls_positions` [batch, k]) [batch, k, hidden]."""
        return self.pooler(sequence_output[:, 0] if cls_positions is None
                           else _gather_positions(sequence_output, cls_positions))


class BertPretrainer(BertEncoder):
    """inputs: dict of input_ids, input_mask, segment_ids [batch, seq] and masked_lm_positions
    [batch, pred]; returns (masked-LM logits [batch, pred, vocab], next-sentence logits [batch, 2]),
    both float32 whatever the dtype policy.

    Packed rows (`bertprep pack`) add positions [batch, seq] (each token's place in its own sequence)
    and next_sentence_positions [batch, k] (each sequence's [CLS]); input_mask then numbers the
    sequences 1..k. Next-sentence logits are then [batch, k, 2], one per sequence."""

    def __init__(self, config, pad_vocab=1, options=StepOptions(), **kwargs):
        super().__init__(config, pad_vocab=pad_vocab, options=options, **kwargs)
        self.masked_lm = MaskedLMHead(config, self.word_embeddings, options=options, name="masked_lm")
        self.next_sentence = keras.layers.Dense(2, kernel_initializer=self.initializer, name="next_sentence")

    def call(self, inputs, training=False):
        if self.options.last_layer == "predicted":
            return self.heads_at_rows(self.encode_rows(inputs, training), inputs)
        return self.heads(self.encode(inputs, training=training), inputs)

    def heads(self, x, inputs):
        """(masked-LM, next-sentence) logits from the sequence output x."""
        pooled = self.pool(x, inputs.get("next_sentence_positions"))
        mlm_logits = self.masked_lm(_gather_positions(x, inputs["masked_lm_positions"]))
        return ops.cast(mlm_logits, "float32"), ops.cast(self.next_sentence(pooled), "float32")

    def encode_rows(self, inputs, training=False):
        """The last layer's outputs at the positions the heads read only, [batch, k + pred, hidden]
        (trainer/last_layer.py)."""
        *layers, last = self.encoder_layers
        x = self.run_layers(layers, self.embed(inputs, training=training),
                            sequence_attention_mask(inputs["input_mask"]), training)
        rows = last_layer.rows(inputs)
        return last(x, sequence_attention_mask(inputs["input_mask"], rows), training=training, rows=rows)

    def heads_at_rows(self, outputs, inputs):
        """heads() of encode_rows' outputs: the pooler on the [CLS] rows, the masked-LM head on the rest."""
        cls, masked = last_layer.split(outputs, inputs)
        return (ops.cast(self.masked_lm(masked), "float32"),
                ops.cast(self.next_sentence(self.pooler(cls)), "float32"))


def sequence_attention_mask(input_mask, query_positions=None):
    """[batch, seq, seq]: the keys each query attends to. input_mask is 0 for padding, else the number
    of the token's sequence in its row (always 1 unpacked): a real token attends to the real tokens
    of its own sequence only. Padding attends to every real token, as in unpacked BERT, so that no
    query is masked entirely (fused attention kernels turn such rows into NaN). With `query_positions`
    [batch, r], those queries' rows only: [batch, r, seq]."""
    mask = ops.cast(input_mask, "int32")
    queries = mask if query_positions is None else ops.take_along_axis(mask, ops.cast(query_positions, "int32"), 1)
    query, key = queries[:, :, None], mask[:, None, :]
    return (key > 0) & ((query == key) | (query == 0))


def _gather_positions(x, positions):
    """x[b, positions[b, p]] for every b, p: [batch, pred, hidden]."""
    batch, seq, hidden = ops.shape(x)
    positions = ops.cast(positions, "int32")
    flat_positions = positions + ops.arange(batch, dtype="int32")[:, None] * seq
    picked = ops.take(ops.reshape(x, (-1, hidden)), ops.reshape(flat_positions, (-1,)), axis=0)
    return ops.reshape(picked, (batch, ops.shape(positions)[1], hidden))


def padded_vocab_size(vocab_size, multiple):
    """--pad-vocab: the embedding rows, a multiple of `multiple` (NVIDIA pads 30,522 to 30,528)."""
    return -(-vocab_size // multiple) * multiple


class _ZeroPadded(keras.initializers.Initializer):
    """The real rows drawn as without padding (the same draws), the padding rows zero: they are
    never looked up, their logits are cut off, so they stay zero and NVLAMB's norms are unchanged."""

    def __init__(self, initializer, rows):
        self.initializer = initializer
        self.rows = rows

    def __call__(self, shape, dtype=None):
        real = self.initializer((self.rows,) + tuple(shape[1:]), dtype=dtype)
        return ops.concatenate([real, ops.zeros((shape[0] - self.rows,) + tuple(shape[1:]), real.dtype)], axis=0)


def build_model(config, seq, pred, batch=2, pad_vocab=1, options=StepOptions(), assigned=None):
    """Create the model and its variables (a call on symbolic inputs of these shapes); `pad_vocab`:
    embedding rows rounded up to a multiple of it; `options`: how its step computes (StepOptions);
    `assigned(model)`: the paths of the variables a checkpoint assigns next, which are not drawn."""
    if seq > config.max_position_embeddings:
        raise UsageError(f"records have sequence length {seq} but the model has only "
                         f"{config.max_position_embeddings} positions (max_position_embeddings)")
    model = BertPretrainer(config, pad_vocab=pad_vocab, options=options, name="bert")
    with variables_initialized_together() as not_drawn:
        model(symbolic_inputs(batch, seq, pred))
        if assigned is not None:
            not_drawn.update(assigned(model))
    return model


def symbolic_inputs(batch, seq, pred=None):
    """The encoder's inputs (and masked_lm_positions, given `pred`) as int32 KerasTensors: a call on them
    creates a model's variables without computing anything."""
    shapes = {"input_ids": (batch, seq), "input_mask": (batch, seq), "segment_ids": (batch, seq)}
    if pred is not None:
        shapes["masked_lm_positions"] = (batch, pred)
    return {name: keras.KerasTensor(shape, "int32") for name, shape in shapes.items()}


_deferring = None  # while variables are deferred: the paths of those not to draw (the outermost's set)


@contextlib.contextmanager
def variables_initialized_together():
    """Variables created inside get their initial values on leaving, under JAX from one compiled program
    (where a Keras distribution is set, laid out as it says). Eagerly, JAX compiles each initializer and
    each op of a build call as a program of its own: about 140 for BERT (JAX_LOG_COMPILES=1 lists
    them), on a CPU or a GPU alike. The draws are the same values. Used nested, the outermost
    initializes. TensorFlow runs its eager ops without compiling: there,
    variables start as created.

    Yields a set: the paths added to it are of variables that a checkpoint assigns right after, which
    start as zeros instead of being drawn. A fine-tuning run's encoder, BERT-base's 110M draws, came
    from its checkpoint anyway, and their program was most of the initial values' compile."""
    global _deferring
    if keras.backend.backend() != "jax":
        yield set()  # nothing deferred: every variable has its draw already
        return
    if _deferring is not None:
        yield _deferring
        return
    from trainer import keras_internals

    _deferring = not_drawn = set()
    try:
        with keras.StatelessScope(initialize_variables=False):  # variables are created uninitialized
            yield not_drawn
        _initialize(keras_internals.take_uninitialized_variables(), not_drawn)
    finally:
        _deferring = None
        keras_internals.forget_uninitialized_variables()


def _initialize(variables, not_drawn=frozenset()):
    import jax

    if not variables:
        return

    distribution = keras.distribution.distribution()
    shardings = None if distribution is None else [
        distribution.get_variable_layout(v).backend_layout for v in variables]
    initial_values, arguments = _draws_of_given_seeds(variables, not_drawn)

    from trainer.keras_internals import initialize_variable

    if jax.default_backend() == "cpu":
        values = jax.jit(initial_values, out_shardings=shardings)(*arguments)
    else:
        values = _drawn_on_host_cpu(initial_values, arguments, shardings)
    for variable, value in zip(variables, values):
        initialize_variable(variable, value)


def _draws_of_given_seeds(variables, not_drawn=frozenset()):
    """(initial_values(seeds, states), its arguments): the variables' initial values as a function of their
    random initializers' seeds and of the dropout layers' seed states, which would otherwise be constants of
    the program. So the program is one for every --seed: a run with another seed reads it from the
    compilation cache instead of compiling it again (BERT-base's: about 10 s on a 2-core CPU). The draws are
    the same values (threefry of the same key, whether a constant or an argument)."""
    import numpy as np

    from trainer import keras_internals

    seeded = keras_internals.seeded_initializers([v for v in variables if v.path not in not_drawn])
    is_state = [keras_internals.is_seed_state(variable) for variable in variables]
    # [seed, 0] each, as NumPy arrays: an argument of the program wherever it runs (the host's CPU under a GPU),
    # unless the build is itself traced (parallel.abstract_variables' eval_shape), where they are its tracers
    states = [_concrete(keras_internals.initial_value(variable))
              for variable, state in zip(variables, is_state) if state]

    def initial_values(seeds, states):  # an uninitialized variable's value is its initializer's draw
        given = iter(states)
        with keras_internals.seeds_given(seeded, seeds):
            return [next(given) if state else ops.zeros(variable.shape, variable.dtype)
                    if variable.path in not_drawn else variable.value for variable, state in zip(variables, is_state)]

    return initial_values, (np.asarray([initializer.seed for initializer in seeded], np.uint32), states)


def _concrete(value):
    import jax
    import numpy as np

    return value if isinstance(value, jax.core.Tracer) else np.asarray(value)


def _drawn_on_host_cpu(initial_values, arguments, shardings):
    """The draws compiled for and run on the host's CPU, then put where the variables live. On a GPU the
    same program took most of a minute to compile for BERT-base on an H200 (ptxas over some 200
    random-number fusions: the first "trainer:" line came 58 s after the start, 13 s after this; docs/trainer.md,
    "The step on one GPU, measured"), on the CPU a few seconds. The random bits are the same (threefry is
    integer arithmetic); the float transforms of them may round otherwise in a last bit than the GPU's would."""
    import jax
    import numpy as np

    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        drawn = [np.asarray(value) for value in jax.jit(initial_values)(*arguments)]
    if shardings is None:
        return [jax.device_put(value, jax.devices()[0]) for value in drawn]
    # make_array_from_callback: each process puts its own devices' shards (a mesh may span hosts).
    return [jax.make_array_from_callback(value.shape, sharding, lambda index, value=value: value[index])
            for value, sharding in zip(drawn, shardings)]


def is_excluded_from_weight_decay(variable):
    """BERT's exclusions: LayerNorm parameters and biases."""
    path = variable.path
    return "layer_norm" in path or path.rsplit("/", 1)[-1] == "bias"
