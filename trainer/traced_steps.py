"""The traced-step cache: the JAX train step's traced program kept beside the compilation cache.

JAX's persistent cache (trainer/compilation_cache.py) skips XLA's compile of a program it has seen, but
its key is the lowered program, so every process first traces the step (Keras's layers and the
optimizer, in Python) and lowers it to StableHLO at every start, warm or cold. Here the first run
exports the step (jax.export: the traced and lowered program, serialized) into
<compilation cache>/traced-steps/, under a key of everything that shapes its tracing; a later run with
the same key reads it and calls it inside a jit of its own, so it neither traces nor lowers the model
(BERT-base on a 2-core CPU: the warm start's tracing and lowering 4.2 s before, 2.4 s after, the rest
being the model's symbolic build and its initial values; docs/trainer.md, "The traced-step cache").
Every run, the first one too, calls the exported program, so a warm run and a cold one compute alike:
the losses are those of the step jitted directly, bit for bit on the CPU (the export wraps the very
program the jit would lower; tests/trainer_checks.py compares them).

The key holds the code (the sources of the trainer and bertprep packages, JAX's, jaxlib's, Keras's and
NumPy's versions), the run's description (its settings that reach the step: the model's configuration,
the levers, the optimizer, the precision; pretraining.traced_step_description), Keras's and JAX's global
settings, the devices, and the step's arguments (tree, shapes, dtypes, layouts). The learning-rate
schedule's numbers are arguments (optimizers._ScheduleOfNumbers), so --steps, --lr and --warmup share
a program (no program may branch in Python on a number it takes as an input); batches of several widths
(binned records) have a program each (steps.JaxSteps._traced_step). A file that cannot be read is exported
again, a step that cannot be exported runs as the plain jit, after a line saying so; at most MAX_FILES are
kept, the least recently used removed first. It is on where the compilation cache is (`--no-compilation-cache` or
BERTPREP_COMPILATION_CACHE=0 turn both off), under JAX on one device in one process (a mesh of several
devices or processes, and the pipeline's steps, trace as before).
"""

import hashlib
import os
import pathlib
import sys

FOLDER = "traced-steps"
SUFFIX = ".jax-exported"
MAX_FILES = 200
FORMAT = 1  # bump when what a file holds, or what the key covers, changes
# Beside JAX, jaxlib, Keras and NumPy: what else decides how the step is lowered (the GPU plugins lower the
# fused attention's kernels; Keras asks cuDNN's version whether to take its flash attention).
LOWERING_DISTRIBUTIONS = ("ml_dtypes", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
                          "jax-cuda13-pjrt", "jax-rocm7-plugin", "jax-rocm7-pjrt", "libtpu", "nvidia-cudnn-cu12",
                          "nvidia-cudnn-cu13")


def step_with_traced_program(jitted, arguments, folder, description, **jit_options):
    """A function equal to `jitted` (a jax.jit of the train step) called on arguments like `arguments`: the
    exported program read from `folder` where an earlier run left one under this key, else exported now and
    left there; jitted with `jit_options` (donation, output layouts) as `jitted` was."""
    import jax

    path = pathlib.Path(folder) / (key(description, arguments) + SUFFIX)
    exported = _read(path)
    if exported is None:
        try:
            exported = jax.export.export(jitted, disabled_checks=[_any_custom_call()])(*arguments)
            serialized = exported.serialize()
        except Exception as error:  # noqa: BLE001 - a cache: the run goes on as without it, and says so
            first_line = (str(error).strip().splitlines() or [""])[0][:200]
            print(f"trainer: note: the train step could not be exported for the traced-step cache "
                  f"({type(error).__name__}: {first_line}); it is traced at every start", file=sys.stderr)
            return jitted
        _write(path, serialized)

    def call(*args):
        return exported.call(*args)

    call.__name__ = exported.fun_name  # JAX names the program after it: jit(_train_step), as before
    return jax.jit(call, **jit_options)


def _any_custom_call():
    # Export refuses custom calls whose compatibility JAX does not promise across versions (the fused
    # attention's Triton kernels, cuDNN's): a file here is read only by the same versions, on this host.
    import jax

    return jax.export.DisabledSafetyCheck.custom_call("ALL")


def _read(path):
    import jax

    try:
        serialized = path.read_bytes()
        exported = jax.export.deserialize(bytearray(serialized))
    except Exception:  # noqa: BLE001 - missing, truncated or foreign: exported again, as if absent
        return None
    try:
        os.utime(path)  # recently used: the last to go
    except OSError:  # another user's file, a read-only folder: read all the same
        pass
    return exported


def _write(path, serialized):
    """Whole or not at all (bertprep.atomic: a concurrent run, a benchmark's other worker, reads a whole file or
    none; a killed writer's temporary is removed by the next writer); then the least recently used files past
    MAX_FILES removed. A folder that cannot be written leaves the run as it is: the file only saves a later
    run's tracing."""
    from bertprep.atomic import atomic_write_bytes, remove_stale_temps, staging_dir

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(staging_dir(path.parent), path)
        atomic_write_bytes(path, serialized)
        _evict(path.parent)
    except OSError:
        pass


def _evict(folder):
    """The least recently used files past MAX_FILES."""
    files = sorted(folder.glob("*" + SUFFIX), key=_used_at)
    for old in files[:max(0, len(files) - MAX_FILES)]:
        old.unlink(missing_ok=True)


def _used_at(path):
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def key(description, arguments):
    """The file's name: a SHA-256 of everything that shapes the step's tracing (the module's docstring)."""
    digest = hashlib.sha256()
    for part in (str(FORMAT), code(), description, _global_settings(), _devices(), _argument_types(arguments)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


_code_digest = None  # computed once, by the run's start (pretraining.train): the code this process imported


def code():
    """The versions of the libraries that trace the step and a digest of this project's sources (an edited
    checkout traces anew)."""
    global _code_digest
    if _code_digest is None:
        import importlib
        import importlib.metadata

        import jax
        import jaxlib
        import keras
        import numpy

        digest = hashlib.sha256()
        for package in ("trainer", "bertprep"):
            root = pathlib.Path(importlib.import_module(package).__file__).parent
            for source in sorted(root.rglob("*.py")):
                digest.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes() + b"\0")
        versions = [jax.__version__, jaxlib.__version__, keras.__version__, numpy.__version__, sys.version]
        for distribution in LOWERING_DISTRIBUTIONS:
            try:
                versions.append(f"{distribution} {importlib.metadata.version(distribution)}")
            except importlib.metadata.PackageNotFoundError:
                pass
        _code_digest = " ".join(versions) + " " + digest.hexdigest()
    return _code_digest


def _global_settings():
    """Keras's global dtype settings and JAX's configuration (its cache settings apart: where the cache is
    says nothing of what is traced)."""
    import jax
    import keras

    settings = sorted((name, repr(value)) for name, value in jax.config.values.items() if "cache" not in name)
    return repr((keras.config.floatx(), keras.config.dtype_policy().name, keras.config.epsilon(), settings))


def _devices():
    import jax

    devices = jax.devices()
    return repr([(d.platform, d.device_kind, d.id) for d in devices]
                + [jax.process_count(), devices[0].client.platform_version])


def _argument_types(arguments):
    import jax

    leaves, tree = jax.tree.flatten(arguments)
    return repr(tree) + repr([(repr(jax.typeof(leaf)), repr(leaf.sharding)) for leaf in leaves])
