"""What a new user sees of `python -m trainer` and `trainer checkpoint`: no start-up lines of TensorFlow,
absl, XLA or CUDA, the summary once, unless the user chose the libraries' log level."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKPOINTS = Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared") / "fixtures" / "checkpoints"
LIBRARY_MARKERS = re.compile(r"^[IWEF]0000 |cuInit|oneDNN|absl|This TensorFlow binary|cuda_|cudart|XLA|"
                             r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ", re.MULTILINE)


def new_user_run(*argv, **environ):
    """A run with none of the libraries' log variables set (a pytest process may have set them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    env.update(environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "trainer", *argv], capture_output=True, text=True, cwd=REPO,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])  # Keras imports TensorFlow under JAX too, to seed it
def test_first_run_prints_no_library_lines_and_one_summary(backend):
    result = new_user_run("--format", "ofrecord", "--steps", "5", "--batch-size", "8", "--log-every", "2",
                          KERAS_BACKEND=backend)
    assert not LIBRARY_MARKERS.findall(result.stdout + result.stderr), result.stderr
    assert result.stdout.count("trainer: done") == 1
    assert "summary step" not in result.stderr
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines()[1:])
    assert rows["steps"] == "5" and "pipeline" not in rows and "mesh" not in rows
    assert re.fullmatch(r"[\d,]+(\.\d+)?", rows["mean_sequences_per_second"]), rows
    assert float(rows["seconds_to_first_step"]) > 0, rows  # trainer/startup.py's clock, either backend
    assert [line.split(":")[0] for line in result.stderr.splitlines() if line.startswith("train step")] == [
        "train step 2", "train step 4", "train step 5"]


def test_checkpoint_commands_print_no_library_lines(tmp_path):
    convert = ["checkpoint", "convert", str(CHECKPOINTS / "google_tiny"), "--to", "hf", "--vocab",
               str(CHECKPOINTS.parent / "golden" / "vocab.txt")]  # reads it with TensorFlow
    result = new_user_run(*convert, str(tmp_path / "hf"))
    assert not LIBRARY_MARKERS.findall(result.stdout + result.stderr), result.stderr
    assert "notes" not in result.stdout  # empty: left out


# Which start-up lines TensorFlow prints depends on the CPU (its "oneDNN" notice appears on some x86-64 CPUs and not
# on others), so what is asserted is the project's own part: a library line written to the stderr descriptor while
# the libraries load is left out, unless the user chose a level, and then it passes through and the level stays
# the user's.
LEAVE_OUT = """
import os, sys
from trainer import library_logs
with library_logs.library_lines_left_out():
    os.write(2, b"2026-11-23 13:05:00.123456: I tensorflow/core/util/port.cc:153] a library line\\n")
    os.write(2, b"our own line\\n")
    print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
"""


@pytest.mark.parametrize("chosen", [None, "0", "1"])
def test_library_lines_are_left_out_unless_the_user_chose_a_level(chosen):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    env.update(PYTHONPATH=str(REPO), **({"TF_CPP_MIN_LOG_LEVEL": chosen} if chosen else {}))
    result = subprocess.run([sys.executable, "-c", LEAVE_OUT], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "our own line" in result.stderr
    assert ("a library line" in result.stderr) == (chosen is not None), result.stderr
    assert result.stdout.strip() == (chosen or "2")  # the user's level is not overridden


# `python -m trainer` in a process of its own (its __main__, run as `-m` runs it), then the modules it imported; a
# Python session's trainer.train keeps them (tests/test_trainer_levers.py, the run without TensorFlow).
OPTIONAL = ("IPython", "matplotlib", "pandas", "sklearn")
LEAN_RUN = """
import runpy, sys
sys.argv = ["trainer", "--format", "ofrecord", "--steps", "1", "--batch-size", "8", "--quiet"]
try:
    runpy.run_module("trainer", run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print(sorted(n for n in %r if n in sys.modules))
import matplotlib.pyplot, pandas, IPython  # importable afterwards
print("imported")
""" % (OPTIONAL,)


def test_trainer_processes_load_keras_without_the_packages_it_imports_for_apis_they_never_call():
    import importlib.util

    # [all]: plot, columnar's datasets; [test]: the notebook kernel's tests
    assert all(importlib.util.find_spec(n) for n in ("matplotlib", "pandas", "IPython"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    env.update(PYTHONPATH=str(REPO), KERAS_BACKEND="jax")
    lean = subprocess.run([sys.executable, "-c", LEAN_RUN], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300)
    assert lean.returncode == 0, lean.stderr[-3000:]
    assert lean.stdout.split("\n")[-3:] == ["[]", "imported", ""], lean.stdout[-2000:]
