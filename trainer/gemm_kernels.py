"""The matrix products' kernels on an NVIDIA GPU: XLA's own choice, or cuBLAS alone.

By default XLA fuses some matrix products with the operations around them into Triton kernels and
autotunes each against cuBLAS while it compiles. For BERT-base on an H200 that made the step's first
compilation 7 s longer (29.6 against 22.2 s to the first step) for the same matrix-product time (26.8
against 26.4 ms a step: scripts/profile_gpu_step.py, docs/trainer.md), and ptxas reported register
spills in the Triton fusions (`gemm_fusion_dot_127`). `cublas` (the default) turns the Triton GEMM
fusions off (`--xla_gpu_enable_triton_gemm=false`); `xla` leaves XLA's choice. A flag of XLA_FLAGS
read once, when JAX's GPU backend starts: set before anything asks JAX for a device, and ignored on a
CPU. A user's own XLA_FLAGS that names the flag wins.
"""

import os

GEMM_KERNELS = ("cublas", "xla")
TRITON_GEMM = "--xla_gpu_enable_triton_gemm"


def xla_flags(choice, current):
    """XLA_FLAGS for `choice` given the `current` value: the Triton flag added for cublas unless the user
    named it already."""
    flags = current.split()
    if choice != "cublas" or any(f.startswith(TRITON_GEMM) for f in flags):
        return current
    return " ".join(flags + [f"{TRITON_GEMM}=false"])


def apply(choice, environ=os.environ):
    """Set XLA_FLAGS for `choice` in `environ` (before JAX's backend starts)."""
    environ["XLA_FLAGS"] = xla_flags(choice, environ.get("XLA_FLAGS", ""))
