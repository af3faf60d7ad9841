"""The compilation cache: JAX's persistent cache of compiled XLA programs, on by default.

A trainer process compiles a few programs before its first step (the variables' initial values, the
step, the matrix product of the benchmark's peak); for BERT-base on a GPU the step alone takes 20-30 s
to compile. With the cache, a second process that builds the same programs (the same model, batch,
precision, devices and flags: JAX's cache key) loads them from disk instead: a rerun, the next
configuration of `trainer.benchmark` that shares a program, a test that trains the same tiny model
again. It lives in the user's cache directory (`$XDG_CACHE_HOME` or ~/.cache, then
bertprep/jax-compilation-cache/<host>), one folder per processor model and instruction set, since a
program compiled for one CPU may not run on another (a home directory shared by several machines);
at most 4 GiB, the least recently used programs evicted first. `--no-compilation-cache` or
BERTPREP_COMPILATION_CACHE=0 turns it off; BERTPREP_COMPILATION_CACHE_DIR (or JAX's own
JAX_COMPILATION_CACHE_DIR) puts it elsewhere; trainer.benchmark's workers inherit both. TensorFlow's
XLA functions are not cached (TensorFlow has no such cache by default).
"""

import hashlib
import os

VARIABLE = "BERTPREP_COMPILATION_CACHE"
DIR_VARIABLE = "BERTPREP_COMPILATION_CACHE_DIR"
MAX_BYTES = 4 * 2**30
OFF = ("0", "off", "false", "no")
ON = ("1", "on", "true", "yes", "")


def wanted(flag_enabled=True, environ=os.environ):
    """The cache is on unless the flag or BERTPREP_COMPILATION_CACHE turns it off. Another value is refused: it
    had left the cache on without a word (`disabled`, `none`)."""
    value = environ.get(VARIABLE, "1").strip().lower()
    if value not in OFF + ON:
        from bertprep.errors import UsageError

        raise UsageError(f"{VARIABLE}={environ[VARIABLE]!r}: expected {', '.join(OFF)} (off) or "
                         f"{', '.join(ON[:-1])} (on)")
    return flag_enabled and value not in OFF


def directory(environ=os.environ):
    """Where the programs go: BERTPREP_COMPILATION_CACHE_DIR, JAX_COMPILATION_CACHE_DIR, else the user's cache
    folder for this processor."""
    from trainer.config import user_cache

    given = environ.get(DIR_VARIABLE) or environ.get("JAX_COMPILATION_CACHE_DIR")
    return given or user_cache("jax-compilation-cache", host_fingerprint(), environ=environ)


def check_directory(environ=os.environ):
    """A UsageError naming the variable (or the default folder) where the cache's folder cannot be made or
    written: JAX warned, in two lines for every program it compiled, and ran without its cache (a file given as
    the folder: "Error reading persistent compilation cache entry ... File exists")."""
    from bertprep.errors import UsageError
    from trainer.config import check_output_place

    named = next((name for name in (DIR_VARIABLE, "JAX_COMPILATION_CACHE_DIR") if environ.get(name)), None)
    try:
        check_output_place(named or "the compilation cache's folder", directory(environ), directory=True)
    except UsageError as exc:
        raise UsageError(f"{exc} (or {VARIABLE}=0: no cache)") from None


def host_fingerprint():
    """A short name for this processor: its model and instruction-set flags (Linux's /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
    except OSError:
        import platform

        lines = [platform.machine(), platform.processor()]
    described = "".join(sorted(set(lines)))
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def enable(flag_enabled=True):
    """Turn JAX's persistent cache on (unless turned off) before the first compilation: every program
    is cached, however short its compilation. Returns the folder, or None when off. A no-op under
    TensorFlow (JAX not imported)."""
    import sys

    if "jax" not in sys.modules or not wanted(flag_enabled):
        return None
    import jax

    check_directory()
    path = directory()
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path
