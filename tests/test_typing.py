"""The typed public API: every name `bertprep` and `trainer` export is annotated in one style, the packages'
stubs (bertprep/__init__.pyi, trainer/__init__.pyi: both load their names lazily, which a type checker
cannot follow) are what scripts/write_api_stubs.py writes from the code now, and mypy (configured in
pyproject.toml) passes both packages and README's Python block while refusing wrong types and names."""

import dataclasses
import inspect
import re
import subprocess
import sys

import pytest

from stand_in_servers import REPO
from test_python_api import readme_example

pytest.importorskip("mypy")

# A call mypy must refuse (line -> the words its error must hold), each of a kind a notebook user makes.
WRONG = {
    'bertprep.create(seq="128")': 'Argument "seq" to "create" has incompatible type "str"; expected "int"',
    'bertprep.CreateOptions(seq="128")': 'Argument "seq" to "CreateOptions" has incompatible type "str"',
    "bertprep.shard(train_shard=4)": 'Unexpected keyword argument "train_shard" for "shard"',
    'bertprep.download("glue", tasks=3)': 'No overload variant of "download" matches argument types "str", "int"',
    'bertprep.validate(paths=("records",), max_errors=2.5)': 'Argument "max_errors" to "validate" has incompatible',
    'trainer.train(trainer.TrainConfig(format="tfrecord", steps="20"))': 'Argument "steps" to "TrainConfig"',
    'trainer.finetune(trainer.TrainConfig(format="tfrecord"))': 'Argument 1 to "finetune" has incompatible type',
}

# Calls mypy must take, each of a kind a notebook makes and the stage runs (options.check_types): a pathlib.Path,
# a list where the options hold a tuple, one path for a tuple of them. The stubs gave each keyword the type the
# field holds (`tuple[str, ...]`, `str`), and mypy refused all three.
RIGHT = [
    'bertprep.create(input=[Path("sh")], vocab=Path("vocab.txt"), out=Path("records"), format=["tfrecord"])',
    'bertprep.shard(input="corpus.txt", corpus="c", out=Path("sharded"))',
    'bertprep.validate(paths=(Path("records"),), vocab=Path("vocab.txt"))',
    'bertprep.download("squad", workdir=Path("work"))',
]


def test_mypy_passes_the_packages_and_the_readme_block_and_refuses_wrong_calls(tmp_path):
    (tmp_path / "readme_block.py").write_text(readme_example() + "\n", encoding="utf-8")
    (tmp_path / "right.py").write_text("from pathlib import Path\n\nimport bertprep\n\n" + "\n".join(RIGHT) + "\n",
                                       encoding="utf-8")
    (tmp_path / "wrong.py").write_text("import bertprep\nimport trainer\n\n" + "\n".join(WRONG) + "\n",
                                       encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "bertprep",
                             "trainer", str(tmp_path / "readme_block.py"), str(tmp_path / "right.py"),
                             str(tmp_path / "wrong.py")],
                            capture_output=True, text=True, cwd=REPO)
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert result.returncode == 1, result.stdout + result.stderr
    assert all(line.startswith(str(tmp_path / "wrong.py")) for line in errors), result.stdout
    for number, (call, words) in enumerate(WRONG.items(), start=4):
        assert any(line.startswith(f"{tmp_path / 'wrong.py'}:{number}: error: ") and words in line
                   for line in errors), (call, result.stdout)


def test_the_stubs_are_what_the_code_declares():
    result = subprocess.run([sys.executable, "scripts/write_api_stubs.py", "--check"], capture_output=True,
                            text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def _unannotated(function):
    """The parameters (and "return") of `function` that carry no annotation."""
    signature = inspect.signature(function)
    missing = [name for name, param in signature.parameters.items()
               if name not in ("self", "cls") and param.annotation is param.empty]
    return missing + (["return"] if signature.return_annotation is signature.empty else [])


def _public_callables(value):
    """`value` itself if a function, else its public methods (and its constructor where not a dataclass's)."""
    if inspect.isfunction(value):
        return {"": inspect.unwrap(value)}
    methods = {name: member for name, member in vars(value).items()
               if inspect.isfunction(member) and not name.startswith("_")}
    if "__init__" in vars(value) and not dataclasses.is_dataclass(value):
        methods["__init__"] = value.__init__
    return methods


@pytest.mark.parametrize("package", ["bertprep", "trainer"])
def test_every_exported_name_is_fully_annotated(package):
    module = __import__(package)
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, str):
            continue
        for method, function in _public_callables(value).items():
            where = f"{package}.{name}{'.' + method if method else ''}"
            missing += [f"{where}: {param}" for param in _unannotated(function)]
    assert missing == []


def test_one_annotation_style():
    """`X | None`, not `Optional[X]` or `Union[...]` (the project needs Python 3.10, which reads `|`)."""
    old = [f"{path.relative_to(REPO)}:{number}" for package in ("bertprep", "trainer")
           for path in sorted(p for p in (REPO / package).rglob("*.py*") if p.suffix in (".py", ".pyi"))
           for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
           if re.search(r"\b(Optional|Union)\[", line)]
    assert old == []
