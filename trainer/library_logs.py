"""TensorFlow's, XLA's and absl's lines, left out of the trainer's stderr; and which Keras backend loads.

Importing TensorFlow writes "oneDNN custom operations are on", "Could not find
cuda drivers" and absl's "All log messages before absl::InitializeLog()"
notice (twice: two of its libraries log on their own), and its first look for
GPUs "failed call to cuInit" on a machine without a GPU driver. absl writes
them to the stderr file descriptor whatever TF_CPP_MIN_LOG_LEVEL says, so
they are caught there: while the libraries load, stderr goes to a temporary
file, and what it received is written back without the libraries' log lines
(a Python warning or traceback in between stays). A user who set one of
USER_LEVEL_VARIABLES chose what to see: then nothing is left out.

Later lines: XLA's GPU backend is a plugin that JAX loads when it first looks
for devices, after the imports, and the plugin reads TF_CPP_MIN_LOG_LEVEL
when it loads: with no level set it printed 13-70 INFO lines a run on an H200
("XLA service ... initialized", "Loaded cuDNN", ptxas's register spills). So
the level stays at 2 for the rest of the process, marked as ours
(OUR_LEVEL_MARK), so that a process started later does not take it for the
user's choice.

`import keras` also imports scikit-learn, matplotlib's pyplot, pandas and
IPython where they are installed (for its scikit-learn wrappers, image
galleries, DataFrame inputs and a saved file's notebook display, none of
which the trainer uses): on the H100 machine of
the GPU check, which has them, scikit-learn alone (scipy.stats under it) was
1.7 s of a warm start profiled by cProfile (20.8 s under it, 13.9 s without;
the trainer-warm.prof of scripts/gpu_check.sh --phases, read with pstats).
The trainer's own processes
(`python -m trainer`, trainer.benchmark's workers) leave them out of Keras's
import (`lean_process`); a Python session that calls trainer.train keeps
Keras whole, since its user may want those APIs. Left out means Keras finds
them missing, as on a host without them; importing them afterwards works.
"""

import contextlib
import os
import re
import sys
import tempfile

USER_LEVEL_VARIABLES = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE")
QUIET_LEVEL = "2"  # INFO and WARNING left out: errors still show
OUR_LEVEL_MARK = "BERTPREP_SET_TF_CPP_MIN_LOG_LEVEL"  # set beside the level when this module set it
# absl's (and glog's) line "E0000 00:00:1795438641.915367    4182 cuda_platform.cc:52] ...", TensorFlow's
# own "2026-11-23 13:05:00.123456: I tensorflow/...", and absl's notice before its first line.
LIBRARY_LINE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
                          r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
                          r"|WARNING: All log messages before absl::InitializeLog\(\) is called")


_depth = 0  # library_lines_left_out() inside itself does nothing more
KERAS_OPTIONAL_IMPORTS = ("sklearn", "matplotlib", "pandas", "IPython")
_lean = False  # lean_process() was called: Keras loads without KERAS_OPTIONAL_IMPORTS


def user_chose_level(environ=os.environ):
    if environ.get(OUR_LEVEL_MARK) is not None and environ.get(OUR_LEVEL_MARK) == environ.get("TF_CPP_MIN_LOG_LEVEL"):
        return any(name in environ for name in USER_LEVEL_VARIABLES if name != "TF_CPP_MIN_LOG_LEVEL")
    return any(name in environ for name in USER_LEVEL_VARIABLES)


# Taken when the CLI starts, before anything imports JAX: `import jax` sets TF_CPP_MIN_LOG_LEVEL itself.
USER_CHOSE_LEVEL = user_chose_level()


def without_library_lines(text):
    return "".join(line for line in text.splitlines(keepends=True) if not LIBRARY_LINE.match(line))


@contextlib.contextmanager
def library_lines_left_out():
    """Inside, the stderr file descriptor goes to a temporary file; on leaving, its lines less the libraries'
    go to stderr. TF_CPP_MIN_LOG_LEVEL 2 meanwhile (TensorFlow reads it once, at its first line) leaves out
    TensorFlow's own INFO and WARNING lines, such as the instruction sets it was not built for."""
    global _depth
    if _depth or USER_CHOSE_LEVEL:
        yield
        return
    _depth += 1
    keep_quiet()
    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    try:
        yield
    finally:
        _depth -= 1
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        kept = without_library_lines(held.read().decode("utf-8", "replace"))
        held.close()
        sys.stderr.write(kept)
        sys.stderr.flush()


def keep_quiet(environ=os.environ):
    """TF_CPP_MIN_LOG_LEVEL at QUIET_LEVEL from now on, marked as ours (an earlier `import jax` may have set
    it to 1: that is not the user's choice either); nothing where the user chose a level."""
    if not user_chose_level(environ):
        environ["TF_CPP_MIN_LOG_LEVEL"] = environ[OUR_LEVEL_MARK] = QUIET_LEVEL


def imports(name):
    """Whether the module `name` imports (TensorFlow's start-up lines: call it with them left out)."""
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def installed(name):
    """Whether the module `name` is found, without importing it (a process that loads no framework)."""
    import importlib.util

    return importlib.util.find_spec(name) is not None


def default_backend(environ=os.environ, available=imports):
    """KERAS_BACKEND, else the backend of the user's keras.json, else tensorflow where it is `available`
    (Keras's own default), else jax where it is; None where neither is (the caller says how to install one).
    By default TensorFlow is imported to see that it loads (Keras would import it next): call this with its
    start-up lines left out; `installed` finds the modules without loading them."""
    if environ.get("KERAS_BACKEND"):
        return environ["KERAS_BACKEND"]
    configured = _keras_json_backend(environ)
    # Keras writes keras.json with its default, tensorflow, the first time it loads: only another backend
    # there is a choice.
    if configured and configured != "tensorflow":
        return configured
    return next((backend for backend in ("tensorflow", "jax") if available(backend)), None)


def _keras_json_backend(environ):
    """The backend a user's keras.json names (KERAS_HOME, else ~/.keras), which Keras reads before its default."""
    import json

    path = os.path.join(environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras"), "keras.json")
    try:
        with open(path, encoding="utf-8") as f:
            backend = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        return None
    return backend if isinstance(backend, str) else None


def choose_backend(environ=os.environ):
    """Before Keras loads: KERAS_BACKEND set to default_backend() where unset (a host with JAX and no
    TensorFlow trains with JAX; `import keras` there would stop with "No module named 'tensorflow'"),
    or a UsageError saying how to install one."""
    from bertprep.errors import UsageError

    backend = default_backend(environ)
    if backend is None:
        raise UsageError("neither TensorFlow nor JAX is installed: pip install 'bertprep[train]' (TensorFlow) or "
                         "'bertprep[jax]' (JAX; on NVIDIA GPUs jax[cuda12] or jax[cuda13])")
    # Before Keras imports it: KERAS_BACKEND=foo was Keras's ValueError traceback, torch was imported (seconds,
    # CUDA's lines) only for the run to refuse it.
    if backend not in ("tensorflow", "jax"):
        where = "KERAS_BACKEND=" if environ.get("KERAS_BACKEND") else "keras.json's backend "
        raise UsageError(f"{where}{backend!r} is not supported (use tensorflow or jax)")
    environ["KERAS_BACKEND"] = backend
    return backend


def lean_process():
    """Called by the trainer's command-line processes before anything imports Keras: load_keras leaves
    KERAS_OPTIONAL_IMPORTS out of Keras's import (the module docstring says why)."""
    global _lean
    _lean = True


@contextlib.contextmanager
def optional_imports_left_out(names):
    """Inside, importing any of the top-level modules `names` not imported yet fails with ImportError, as
    where they are not installed (a None in sys.modules); on leaving they import again."""
    blocked = [name for name in names if name not in sys.modules]
    sys.modules.update(dict.fromkeys(blocked))
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def load_keras():
    """Import Keras (TensorFlow or JAX under it) and let TensorFlow look for GPUs, their start-up lines left
    out. Physical devices only: logical ones (the benchmark's CPU devices) can still be configured after.
    Under JAX, TensorFlow is not imported: keras.utils.set_random_seed, which training and fine-tuning
    call, would import it whatever the backend, to seed tf.random for tf.data pipelines that the trainer
    does not have (its readers are bertprep's). Left out, BERT-base's model is built 1.2-1.5 s sooner on a
    host that has it (scripts/bench_startup.py --baseline, docs/benchmarks.md "Trainer start-up")."""
    with library_lines_left_out(), optional_imports_left_out(KERAS_OPTIONAL_IMPORTS if _lean else ()):
        choose_backend()
        import keras

        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.list_physical_devices("GPU")
        else:
            from trainer import keras_internals

            keras_internals.leave_tensorflow_unimported()
    _tensorflow_logger_at_warning()
    return keras


def _tensorflow_logger_at_warning():
    """In an interactive session (a notebook's kernel, `python -i`: sys.ps1 is set) TensorFlow's Python
    logger starts at INFO and writes "INFO:tensorflow:Using MirroredStrategy with devices ..." into the
    cell's output; back to WARNING, as everywhere else, unless the user chose a level."""
    if USER_CHOSE_LEVEL or "tensorflow" not in sys.modules:
        return
    import logging

    from tensorflow.python.platform import tf_logging

    logger = tf_logging.get_logger()  # made now if not yet, so that it is not set to INFO later
    if logger.level < logging.WARNING:
        logger.setLevel(logging.WARNING)
