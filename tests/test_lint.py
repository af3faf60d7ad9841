"""The code passes ruff with the configuration in pyproject.toml (issue 31: a linter the suite runs)."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINTED = ["bertprep", "trainer", "tests", "scripts", "docs"]  # docs: the notebook


def _ruff():
    # The ruff of the interpreter running the tests (the `test` extra installs it there), else one on PATH.
    beside_python = Path(sys.executable).parent / "ruff"
    found = str(beside_python) if beside_python.is_file() else shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[test]'"
    return found


def test_the_code_passes_ruff():
    result = subprocess.run([_ruff(), "check", "--no-cache", "--output-format", "concise", *LINTED],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff check found:\n{result.stdout}{result.stderr}"
