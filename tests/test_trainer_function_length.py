"""No function in trainer/ is longer than MAX_LINES (issue 31): a function that does one thing is read
at once. Checked on the source with `ast`, no import."""

import ast
import pathlib

MAX_LINES = 60
TRAINER = pathlib.Path(__file__).resolve().parent.parent / "trainer"


def test_no_trainer_function_is_over_60_lines():
    long = []
    for path in sorted(TRAINER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(TRAINER)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
