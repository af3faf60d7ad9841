"""XLA's GPU options the trainer sets: which kernels do the matrix products, and compiling in parallel.

Both are flags of XLA_FLAGS, read once, when JAX's GPU backend starts: `apply` sets them before anything
asks JAX for a device; a CPU ignores them; a flag the user's own XLA_FLAGS names already is left as the
user set it.

- The matrix products (`--gemm`). By default XLA fuses some matrix products with the operations around
  them into Triton kernels and autotunes each against cuBLAS while it compiles. For BERT-base on an H200
  that made the step's first compilation 7 s longer (29.6 against 22.2 s to the first step) for the same
  matrix-product time (26.8 against 26.4 ms a step: scripts/profile_gpu_step.py, docs/trainer.md), and
  ptxas reported register spills in the Triton fusions (`gemm_fusion_dot_127`). `cublas` (the default)
  turns the Triton GEMM fusions off; `xla` leaves XLA's choice.
- Compiling in parallel. XLA compiles a program's LLVM module in one piece unless told to split it over
  its threads (`--xla_gpu_enable_llvm_module_compilation_parallelism`, off by default); the BERT-base
  step is some 2,000 kernels. On by default here; BERTPREP_XLA_PARALLEL_COMPILE=0 turns it off.
"""

import os

GEMM_KERNELS = ("cublas", "xla")
TRITON_GEMM = "--xla_gpu_enable_triton_gemm"
PARALLEL_COMPILE = "--xla_gpu_enable_llvm_module_compilation_parallelism"
PARALLEL_VARIABLE = "BERTPREP_XLA_PARALLEL_COMPILE"


def xla_flags(gemm, current, parallel_compile=True):
    """XLA_FLAGS for `gemm` (GEMM_KERNELS) and `parallel_compile` given the `current` value; a flag the
    current value names stays as it is."""
    flags = current.split()
    wanted = ([f"{TRITON_GEMM}=false"] if gemm == "cublas" else []) + (
        [f"{PARALLEL_COMPILE}=true"] if parallel_compile else [])
    for flag in wanted:
        if not any(f.startswith(flag.split("=")[0] + "=") or f == flag.split("=")[0] for f in flags):
            flags.append(flag)
    return " ".join(flags)


def apply(gemm, environ=os.environ):
    """Set XLA_FLAGS in `environ` (before JAX's backend starts)."""
    parallel = environ.get(PARALLEL_VARIABLE, "1").strip().lower() not in ("0", "off", "false", "no")
    environ["XLA_FLAGS"] = xla_flags(gemm, environ.get("XLA_FLAGS", ""), parallel)
