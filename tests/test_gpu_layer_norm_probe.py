"""scripts/gpu_layer_norm_probe.py: its formulations of a layer norm are Keras's layer norm (forward and
gradients; the hand-written backward is the gradient), and its target gains a cuDNN version once. (The
compilation for a GPU needs JAX's CUDA plugin, which the suite's environment has not.)"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import gpu_layer_norm_probe  # noqa: E402

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
# In a process of its own: the formulations are Keras's under JAX, and this worker's Keras may have another backend.
AGREE = """
import sys
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp, numpy as np
import gpu_layer_norm_probe
rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(1.0, 3.0, (64, 768)), jnp.float32)
gamma = jnp.asarray(rng.normal(1.0, 0.1, 768), jnp.float32)
beta = jnp.asarray(rng.normal(0.0, 0.1, 768), jnp.float32)
dy = jnp.asarray(rng.normal(0.0, 1.0, (64, 768)), jnp.float32)
results = {name: jax.vjp(f, x, gamma, beta) for name, f in gpu_layer_norm_probe.formulations().items()}
y, vjp = results.pop("keras")
grads = vjp(dy)
assert set(results) == {"xla pattern, autodiff", "xla pattern, by hand"}, results
for name, (other_y, other_vjp) in results.items():
    np.testing.assert_allclose(other_y, y, rtol=1e-5, atol=1e-5, err_msg=name)
    for mine, keras_grad, what in zip(other_vjp(dy), grads, ("dx", "dgamma", "dbeta")):
        np.testing.assert_allclose(mine, keras_grad, rtol=1e-4, atol=1e-4, err_msg=f"{name} {what}")
print("agree")
"""


def test_each_formulation_is_kerass_layer_norm_forward_and_backward():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", AGREE, SCRIPTS], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "agree", done.stderr[-3000:]


def test_the_target_gains_a_cudnn_version_once(tmp_path):
    spec = tmp_path / "spec.txtpb"
    spec.write_text('platform_name: "CUDA"\n')
    with_version = gpu_layer_norm_probe.target_with_cudnn(str(spec))
    assert with_version.count("dnn_version_info") == 1
    spec.write_text(with_version)
    assert gpu_layer_norm_probe.target_with_cudnn(str(spec)) == with_version
