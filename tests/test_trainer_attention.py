"""The model's two attention paths agree: Keras's MultiHeadAttention takes `keras.ops.dot_product_attention`
(fused kernels on GPUs) when its attention dropout is 0, and the explicit softmax path otherwise. With the
same weights and a batch with padding, both give the same logits within float32 tolerance, on the
TensorFlow backend (in this process) and on JAX (in a subprocess)."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from trainer_checks import TINY, xla_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check_attention_paths_agree(golden_dir):
    import keras

    from bertprep import formats
    from trainer.config import BertConfig
    from trainer.model import build_model

    records = list(formats.read_records(os.path.join(golden_dir, "G1.ofrecord")))[:6]
    inputs = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")  # the pretrainer's inputs
    batch = {name: np.stack([r[name] for r in records]).astype("int32") for name in inputs}
    assert (batch["input_mask"] == 0).any()  # padded keys must be masked out on both paths
    # Weights 10x BERT's initial scale, so attention is far from uniform and the logits far from 0.
    fused_config = BertConfig(**dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                     initializer_range=0.2))
    explicit_config = dataclasses.replace(fused_config, attention_probs_dropout_prob=0.1)
    fused = build_model(fused_config, 128, 20)
    explicit = build_model(explicit_config, 128, 20)
    # Keras's rule (MultiHeadAttention._compute_attention): dot_product_attention unless dropout > 0.
    assert fused.encoder_layers[0].attention._dropout == 0.0
    assert explicit.encoder_layers[0].attention._dropout == 0.1
    assert [v.path for v in fused.weights] == [v.path for v in explicit.weights]
    explicit.set_weights(fused.get_weights())
    fused_logits = [keras.ops.convert_to_numpy(x) for x in fused(batch, training=False)]
    explicit_logits = [keras.ops.convert_to_numpy(x) for x in explicit(batch, training=False)]
    assert np.abs(fused_logits[0]).max() > 1.0  # masked-LM logits
    for a, b in zip(fused_logits, explicit_logits):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-5)


def test_dot_product_attention_matches_the_explicit_path_tensorflow(golden_dir):
    pytest.importorskip("tensorflow")
    check_attention_paths_agree(str(golden_dir))


def test_dot_product_attention_matches_the_explicit_path_jax(golden_dir):
    pytest.importorskip("jax")
    # As the trainer's other JAX tests run: TensorFlow unimportable (a JAX host has none; not importing
    # it saves its start) and fast compiles (one forward pass, op by op): 12 s of CPU -> 8 s.
    code = ("import sys; sys.path.insert(0, 'tests'); import trainer_checks; trainer_checks.block_imports(); "
            f"import test_trainer_attention as t; t.check_attention_paths_agree({str(golden_dir)!r})")
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags())
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
