"""Every use of a Keras name that is not public API (keras.src, an underscored attribute), in one place,
each with why the public API does not do: a Keras upgrade that moves one breaks here, and only here.
Checked against Keras 3.15."""

import contextlib

from keras import random
from keras.src.backend.common import global_state


def take_uninitialized_variables():
    """The variables created inside `keras.StatelessScope(initialize_variables=False)` and not yet
    initialized, and Keras's list of them emptied. Keras keeps that list in its global state under a
    name with no public accessor; model.variables_initialized_together initializes them all in one
    compiled program instead of one program per initializer."""
    variables = global_state.get_global_attribute("uninitialized_variables") or []
    global_state.set_global_attribute("uninitialized_variables", [])
    return variables


def forget_uninitialized_variables():
    """Keras's list emptied (after a failure inside the scope): later scopes start clean."""
    global_state.set_global_attribute("uninitialized_variables", [])


def initialize_variable(variable, value):
    """A deferred variable given its initial value: what Keras's own deferred initialization does
    with the draw (`Variable._initialize`), and its initializer dropped so it is not drawn again.
    The public `assign` refuses a variable that has no value yet."""
    variable._initialize(value)
    variable._initializer = None


def initial_value(variable):
    """A deferred variable's initial value, drawn now: what Keras does on reading its `value`, from the
    initializer it keeps under a private name until the variable has a value."""
    return variable._initializer(variable.shape, dtype=variable.dtype)


def is_seed_state(variable):
    """Whether `variable` is a SeedGenerator's state (a dropout layer's seed): Keras names it so and has no
    public way to ask. Its initializer returns [seed, 0] with the seed held in a closure."""
    return variable.path.rsplit("/", 1)[-1] == "seed_generator_state"


def seeded_initializers(variables):
    """The random initializers (with an int seed, Keras's `seed` attribute) behind the deferred `variables`, each
    once: a variable's own, or one a wrapper of ours holds as `initializer` (model._ZeroPadded). Only seeds
    that a uint32 holds, as Keras's JAX backend converts them."""
    found = {}
    for variable in variables:
        initializer = variable._initializer
        while initializer is not None:
            seed = getattr(initializer, "seed", None)
            if isinstance(seed, int) and 0 <= seed < 2**32:
                found[id(initializer)] = initializer
            initializer = getattr(initializer, "initializer", None)
    return list(found.values())


@contextlib.contextmanager
def seeds_given(initializers, seeds):
    """Inside, `initializers` draw with the keys [seeds[i], 0] (traced values): Keras's draw_seed takes an int
    seed as a constant of the program, or a SeedGenerator, whose next() it calls; each initializer's int is put
    back on leaving. The key is the one an int seed gives ([seed, 0] as uint32), so the draws are the same."""
    import jax.numpy as jnp

    kept = [initializer.seed for initializer in initializers]
    try:
        for initializer, seed in zip(initializers, seeds):
            initializer.seed = _GivenKey(jnp.stack([seed, jnp.zeros((), seed.dtype)]))
        yield
    finally:
        for initializer, seed in zip(initializers, kept):
            initializer.seed = seed


class _GivenKey(random.SeedGenerator):
    """A SeedGenerator whose next() is a given key, made without SeedGenerator.__init__ (which would create a
    state variable): the one kind of seed object besides an int that Keras's draw_seed accepts."""

    def __new__(cls, key):
        given = object.__new__(cls)
        given.key = key
        return given

    def __init__(self, key):
        pass

    def next(self, ordered=True):
        return self.key


def variable_index(optimizer, variable):
    """The index of `variable` in the optimizer's own lists (its slots are kept in that order): Keras's
    optimizers find it with `_get_variable_index` (by the variable's key), which has no public name."""
    return optimizer._get_variable_index(variable)


def stored_value(variable):
    """The variable's value as stored, not autocast: inside a StatelessScope the value the scope maps it to,
    else its own (None while a deferred variable has none yet). `variable.value` casts to the autocast
    scope's dtype, which would round LayerNorm's float32 parameters to bfloat16 under mixed precision when
    trainer/scan_layers.py stacks them; Keras exposes the scope's mapping only through keras.src."""
    from keras.src.backend.common.stateless_scope import get_stateless_scope, in_stateless_scope

    if in_stateless_scope():
        value = get_stateless_scope().get_current_value(variable)
        if value is not None:
            return value
    return variable._value


def leave_tensorflow_unimported():
    """Keras's lazy handle on TensorFlow marked unavailable, where it is not imported yet: its
    `available`, which keras.utils.set_random_seed asks (to seed tf.random whatever the backend), would
    import TensorFlow, over a second of a JAX process's start (trainer/library_logs.load_keras). Only
    `available` is answered: code that uses the handle still imports TensorFlow. There is no public switch."""
    import sys

    from keras.src.utils import module_utils

    if "tensorflow" not in sys.modules and module_utils.tensorflow.module is None:
        module_utils.tensorflow._available = False
