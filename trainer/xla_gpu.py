"""XLA's GPU options the trainer sets: which kernels do the matrix products (`--gemm`).

A flag of XLA_FLAGS, read once, when JAX's GPU backend starts: `apply` sets it before anything asks JAX
for a device; a CPU ignores it; a user's own XLA_FLAGS that names the flag already is left as it is.

By default XLA fuses some matrix products with the operations around them into Triton kernels and
autotunes each against cuBLAS while it compiles. For BERT-base on an H200 that made the step's first
compilation 7 s longer (29.6 against 22.2 s to the first step) for the same matrix-product time (26.8
against 26.4 ms a step: scripts/profile_gpu_step.py, docs/trainer.md), and ptxas reported register
spills in the Triton fusions (`gemm_fusion_dot_127`). `cublas` (the default) turns the Triton GEMM
fusions off; `xla` leaves XLA's choice.

Not set: `--xla_gpu_enable_llvm_module_compilation_parallelism`, which the XLA of JAX 0.10 knows and the
XLA of JAX 0.11.2 refuses ("Unknown flag in XLA_FLAGS", a fatal error at the backend's start: seen on
the H200). A flag a version does not know stops the process, so only flags in use on both are set.
"""

import os

GEMM_KERNELS = ("cublas", "xla")
TRITON_GEMM = "--xla_gpu_enable_triton_gemm"


def xla_flags(gemm, current):
    """XLA_FLAGS for `gemm` (GEMM_KERNELS) given the `current` value: the Triton flag added for cublas
    unless the current value names it."""
    flags = current.split()
    if gemm != "cublas" or any(f == TRITON_GEMM or f.startswith(TRITON_GEMM + "=") for f in flags):
        return current
    return " ".join(flags + [f"{TRITON_GEMM}=false"])


def apply(gemm, environ=os.environ):
    """Set XLA_FLAGS in `environ` (before JAX's backend starts)."""
    environ["XLA_FLAGS"] = xla_flags(gemm, environ.get("XLA_FLAGS", ""))
