"""The caller's global random generators, left as the run found them.

A run seeds Python's `random` and NumPy's global generator (keras.utils.set_random_seed, which the trainer calls
with --seed so that Keras's initializers and dropout draw the same values on every run). Called from Python, in a
notebook or a script that had seeded those generators for its own use, `trainer.train` and `trainer.finetune` then
left them reseeded: `random.seed(7)` before a run and `random.random()` after it gave the value of seed 12345's
sequence instead. The run's own draws are unchanged; only what the caller sees afterwards is restored.
"""

import functools
import random
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import numpy as np

P = ParamSpec("P")
R = TypeVar("R")


def restores_caller_random_state(function: Callable[P, R]) -> Callable[P, R]:
    """`function`, with Python's and NumPy's global random states put back as they were when it returns or raises
    (typed, so that a type checker still sees `function`'s own signature)."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        python_state, numpy_state = random.getstate(), np.random.get_state()
        try:
            return function(*args, **kwargs)
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)

    return run
