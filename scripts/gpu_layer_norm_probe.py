"""Would XLA run BERT's layer norms on cuDNN? Compiled for an H100 here, without one.

    .gpu-compile/bin/python scripts/gpu_layer_norm_probe.py [--target H100_SPEC] [--rows 32768]

XLA has a rewrite (`--xla_gpu_enable_cudnn_layer_norm`, off by default) that replaces a layer norm's
forward and backward graphs by cuDNN's kernels: one kernel each way instead of XLA's reductions and
elementwise fusions, which took 3.2 ms of the BERT-base step on the H100 (docs/trainer.md). It matches
patterns, not meaning. For each formulation of one layer norm over [rows, 768] (its forward, and its
backward by JAX's autodiff or written by hand as XLA's pattern expects it), in bfloat16 and float32
activations, this compiles the forward and the vector-Jacobian product for the GPU with the rewrite on
and prints which cuDNN norm kernels the program holds, and the kernels and gigabytes it moves
(scripts/gpu_step_traffic.py's reading of the optimized program). The target is
scripts/gpu_specs/h100_sxm.txtpb with a cuDNN version added (the rewrite needs one to be known).

What it showed with JAX 0.10.2 (2026-11-26, docs/trainer.md): Keras's formula is matched in neither pass
(its variance is jnp.var); XLA's pattern (E[x^2] - E[x]^2 over sums times 1/n) gets cuDNN's forward; the
backward only with float32 activations: cuDNN wants X at least as wide as the scale and DY, and the
rewrite wants DX of X's type, so bfloat16 activations with float32 LayerNorm parameters keep XLA's
backward. Kernels, not time: what cuDNN's would save is a GPU's to measure.
"""

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

EPS = 1e-12
HIDDEN = 768


def formulations():
    """{name: layer_norm(x, gamma, beta) -> y of x's dtype}, computing in float32."""
    import jax
    import jax.numpy as jnp
    import keras

    def keras_formula(x, gamma, beta):
        return keras.ops.cast(keras.ops.layer_normalization(x, gamma, beta, -1, EPS), x.dtype)

    def xla_pattern_forward(x32, gamma, beta):
        n = x32.shape[-1]
        mean = jnp.sum(x32, -1, keepdims=True) * (1.0 / n)
        var_eps = jnp.sum(x32 * x32, -1, keepdims=True) * (1.0 / n) - mean * mean + EPS
        norm_factor = jax.lax.rsqrt(var_eps)
        center = x32 - mean
        return center * norm_factor * gamma + beta, (center, var_eps, norm_factor)

    def xla_pattern(x, gamma, beta):
        return xla_pattern_forward(x.astype(jnp.float32), gamma, beta)[0].astype(x.dtype)

    @jax.custom_vjp
    def xla_pattern_by_hand(x, gamma, beta):
        return xla_pattern(x, gamma, beta)

    def forward(x, gamma, beta):
        y, (center, var_eps, norm_factor) = xla_pattern_forward(x.astype(jnp.float32), gamma, beta)
        return y.astype(x.dtype), (x, gamma, center, var_eps, norm_factor)

    def backward(saved, dy):
        # The gradient as XLA's matcher spells it: DX = F1 + F2 - sum(F1 + F2) / n, F1 = XCenter * F0 *
        # DNormFactor * 2 / n, F2 = NormFactor * scale * DY, F0 = sum(XCenter * scale * DY).
        x, gamma, center, var_eps, norm_factor = saved
        n = x.shape[-1]
        dy32 = dy.astype(jnp.float32)
        rows = tuple(range(x.ndim - 1))
        scale_dy = gamma * dy32
        f0 = jnp.sum(center * scale_dy, -1, keepdims=True)
        f1 = center * (f0 * ((norm_factor / var_eps) * -0.5) * (2.0 / n))
        f2 = norm_factor * scale_dy
        dx = f1 + f2 + (jnp.sum(-f1, -1, keepdims=True) + jnp.sum(-f2, -1, keepdims=True)) * (1.0 / n)
        return dx.astype(x.dtype), jnp.sum(center * norm_factor * dy32, rows), jnp.sum(dy32, rows)

    xla_pattern_by_hand.defvjp(forward, backward)
    return {"keras": keras_formula, "xla pattern, autodiff": xla_pattern, "xla pattern, by hand": xla_pattern_by_hand}


def compiled(function, dtype, rows, device):
    """The optimized program of the forward and its vector-Jacobian product, compiled for `device`."""
    import jax
    import jax.numpy as jnp

    def forward_and_backward(x, gamma, beta, dy):
        y, vjp = jax.vjp(function, x, gamma, beta)
        return y, vjp(dy)

    def spec(shape, of=jnp.float32):
        return jax.ShapeDtypeStruct(shape, of, sharding=device)

    args = (spec((rows, HIDDEN), dtype), spec((HIDDEN,)), spec((HIDDEN,)), spec((rows, HIDDEN), dtype))
    return jax.jit(forward_and_backward).trace(*args).lower(lowering_platforms=("cuda",)).compile().as_text()


def target_with_cudnn(path):
    """The target description with a cuDNN version (9.8), without which the rewrite stays off."""
    text = open(path, encoding="utf-8").read()
    return text if "dnn_version_info" in text else text + "dnn_version_info { major: 9 minor: 8 }\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=os.path.join(HERE, "gpu_specs", "h100_sxm.txtpb"))
    p.add_argument("--rows", type=int, default=256 * 128, help="tokens (default: batch 256 x 128)")
    args = p.parse_args()
    flag = "--xla_gpu_enable_cudnn_layer_norm=true"
    if flag not in os.environ.get("XLA_FLAGS", ""):  # read once a process, before JAX starts its backends
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies

    from gpu_step_traffic import step_kernels, summary

    try:
        topology = topologies.get_topology_desc(platform="cuda", target_config=target_with_cudnn(args.target),
                                                topology="1x1x1")
    except (NotImplementedError, RuntimeError) as e:
        raise SystemExit(f"gpu_layer_norm_probe: error: JAX cannot compile for CUDA here ({str(e).splitlines()[0]}); "
                         "run it with the Python of scripts/gpu_compile_prepare.sh") from None
    device = jax.sharding.SingleDeviceSharding(topology.devices[0])
    print(f"one layer norm over [{args.rows}, {HIDDEN}], forward and backward, compiled for {args.target} with {flag}")
    print(f"{'formulation':<24}{'activations':<13}{'cuDNN norm kernels':<32}{'kernels':>8}{'GB':>8}")
    for name, function in formulations().items():
        for dtype in (jnp.bfloat16, jnp.float32):
            text = compiled(function, dtype, args.rows, device)
            kinds = re.findall(r'"kind":"(LAYER_[A-Z_]+)"', text)
            moved = summary(step_kernels(text))
            print(f"{name:<24}{jnp.dtype(dtype).name:<13}{', '.join(kinds) or 'none':<32}{moved['kernels']:>8}"
                  f"{moved['gb']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
