"""On PYTHONPATH (`without_tensorflow_env`), TensorFlow is unimportable in every Python process started,
workers included: a JAX host as the GPU recipe's, which has none. The processes a test cannot start
through `trainer_checks.py --no-tensorflow` (trainer.benchmark's workers) then skip its import, ~2 s of CPU
each: under JAX, Keras imports TensorFlow only to seed it, where it is installed."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import trainer_checks  # noqa: E402

trainer_checks.block_imports(["tensorflow"])
