"""XLA's GPU options the trainer sets: which kernels do the matrix products (`--gemm`), and whether XLA
times their candidate algorithms while it compiles (`--gemm-autotune`).

A flag of XLA_FLAGS, read once, when JAX's GPU backend starts: `apply` sets it before anything asks JAX
for a device; a CPU ignores it; a user's own XLA_FLAGS that names the flag already is left as it is.

By default XLA fuses some matrix products with the operations around them into Triton kernels and
autotunes each against cuBLAS while it compiles. For BERT-base on an H200 that made the step's first
compilation 7 s longer (29.6 against 22.2 s to the first step) for the same matrix-product time (26.8
against 26.4 ms a step: scripts/profile_gpu_step.py, docs/trainer.md), and ptxas reported register
spills in the Triton fusions (`gemm_fusion_dot_127`). `cublas` (the default) turns the Triton GEMM
fusions off; `xla` leaves XLA's choice. `cublaslt` turns them off and XLA's cuBLASLt path on
(`--xla_gpu_enable_cublaslt`), whose GEMMs can take a bias add (and a tanh-approximated GELU, which BERT's
exact GELU is not) into their epilogue instead of a kernel of their own: the attention projections' bias
adds and their gradients' sums are about 7.6 ms of the step's 53.3 ms of device time on the H200
(docs/trainer.md). Not yet measured on a GPU; the flag is in the XLA of JAX 0.10.2 (its library's
strings), not checked in 0.11's.

While it compiles, XLA by default (autotune level 4) runs each matrix product's candidate cuBLAS algorithms
on the GPU and keeps the fastest. On the H200 that is 11.6 s of the first step with an empty compilation
cache (BERT-base amp, batch 256: 38.8 s to the first step with it, 27.2 s without; 13.7 and 11.4 s with
the cache filled) for 4% of the throughput (4,355 against 4,181 sequences/s): scripts/gpu_check.sh
--lever "noautotune=XLA_FLAGS=--xla_gpu_autotune_level=0", 2026-11-26. `--gemm-autotune off` sets level 0
(cuBLAS's own heuristic choice) for runs where starting matters more than the last 4%; on (the default)
leaves XLA's.

Not set: `--xla_gpu_enable_llvm_module_compilation_parallelism`, which the XLA of JAX 0.10 knows and the
XLA of JAX 0.11.2 refuses ("Unknown flag in XLA_FLAGS", a fatal error at the backend's start: seen on
the H200). A flag a version does not know stops the process, so only flags in use on both are set.
"""

import os

GEMM_KERNELS = ("cublas", "cublaslt", "xla")
GEMM_AUTOTUNE = ("on", "off")
TRITON_GEMM = "--xla_gpu_enable_triton_gemm"
CUBLASLT = "--xla_gpu_enable_cublaslt"
AUTOTUNE_LEVEL = "--xla_gpu_autotune_level"


def xla_flags(gemm, current, autotune="on"):
    """XLA_FLAGS for `gemm` (GEMM_KERNELS) and `autotune` (GEMM_AUTOTUNE) given the `current` value: the
    Triton flag off for cublas and cublaslt, cuBLASLt on for cublaslt, the autotune level 0 for off, each
    unless the current value names it."""
    flags = current.split()

    def named(flag):
        return any(f == flag or f.startswith(flag + "=") for f in flags)

    wanted = ([f"{TRITON_GEMM}=false"] if gemm in ("cublas", "cublaslt") else []) + (
        [f"{CUBLASLT}=true"] if gemm == "cublaslt" else []) + ([f"{AUTOTUNE_LEVEL}=0"] if autotune == "off" else [])
    added = [flag for flag in wanted if not named(flag.split("=")[0])]
    return " ".join(flags + added) if added else current


def apply(gemm, environ=os.environ, autotune="on"):
    """Set XLA_FLAGS in `environ` (before JAX's backend starts)."""
    environ["XLA_FLAGS"] = xla_flags(gemm, environ.get("XLA_FLAGS", ""), autotune)
