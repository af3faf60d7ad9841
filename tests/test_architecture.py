"""The rules of docs/architecture.md that a reading of the source can check: imports run one way,
the trainer imports bertprep and bertprep never the trainer (not even lazily, inside a function)."""

import ast
import pathlib

BERTPREP = pathlib.Path(__file__).resolve().parent.parent / "bertprep"


def _imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def test_bertprep_never_imports_the_trainer():
    importing = sorted(f"{path.relative_to(BERTPREP.parent)}: {module}" for path in BERTPREP.rglob("*.py")
                       for module in _imported_modules(path) if module == "trainer" or module.startswith("trainer."))
    assert importing == []
