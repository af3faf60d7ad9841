"""TensorFlow's, XLA's and absl's start-up lines, left out of the trainer's stderr.

Importing TensorFlow writes "oneDNN custom operations are on", "Could not find
cuda drivers" and absl's "All log messages before absl::InitializeLog()"
notice (twice: two of its libraries log on their own), and its first look for
GPUs "failed call to cuInit" on a machine without a GPU driver. absl writes
them to the stderr file descriptor whatever TF_CPP_MIN_LOG_LEVEL says, so
they are caught there: while the libraries load, stderr goes to a temporary
file, and what it received is written back without the libraries' log lines
(a Python warning or traceback in between stays). A user who set one of
USER_LEVEL_VARIABLES chose what to see: then nothing is left out.
"""

import contextlib
import os
import re
import sys
import tempfile

USER_LEVEL_VARIABLES = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE")
# absl's (and glog's) line "E0000 00:00:1795438641.915367    4182 cuda_platform.cc:52] ...", TensorFlow's
# own "2026-11-23 13:05:00.123456: I tensorflow/...", and absl's notice before its first line.
LIBRARY_LINE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
                          r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
                          r"|WARNING: All log messages before absl::InitializeLog\(\) is called")


_depth = 0  # library_lines_left_out() inside itself does nothing more


def user_chose_level(environ=os.environ):
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
    earlier_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")  # an earlier `import jax` sets one
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
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
        # Not handed to processes started later as if a user's choice.
        if earlier_level is None:
            del os.environ["TF_CPP_MIN_LOG_LEVEL"]
        else:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = earlier_level
        held.seek(0)
        kept = without_library_lines(held.read().decode("utf-8", "replace"))
        held.close()
        sys.stderr.write(kept)
        sys.stderr.flush()


def load_keras():
    """Import Keras (TensorFlow or JAX under it) and let TensorFlow look for GPUs, their start-up lines left
    out. Physical devices only: logical ones (the benchmark's CPU devices) can still be configured after.
    Under JAX, TensorFlow is imported too where it can be: keras.utils.set_random_seed, which
    training and fine-tuning call, imports it whatever the backend."""
    with library_lines_left_out():
        import keras

        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.list_physical_devices("GPU")
        else:
            with contextlib.suppress(ImportError):  # as Keras tries it
                import tensorflow  # noqa: F401
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
