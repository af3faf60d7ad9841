"""Every use of a Keras name that is not public API (keras.src, an underscored attribute), in one place,
each with why the public API does not do: a Keras upgrade that moves one breaks here, and only here.
Checked against Keras 3.15."""

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
