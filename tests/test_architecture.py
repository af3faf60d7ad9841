"""The rules of docs/architecture.md that a reading of the source can check: imports run one way,
the trainer imports bertprep and bertprep never the trainer (not even lazily, inside a function), and no two
modules import each other, directly or round a circle, at the top or inside a function."""

import ast
import pathlib
import re

BERTPREP = pathlib.Path(__file__).resolve().parent.parent / "bertprep"
ROOT = BERTPREP.parent


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


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph():
    """{module: the project modules it imports anywhere in its source}; `from package import name` counts as
    the submodule `package.name` where there is one, else as the package."""
    paths = {_module_name(p): p for package in ("bertprep", "trainer") for p in (ROOT / package).rglob("*.py")}

    def known(name):
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                imported.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                imported.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else known(base)
                                for alias in node.names)
        graph[module] = imported - {None, module}
    return graph


def circles(graph):
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circles():
    graph = import_graph()
    assert len(graph) > 100 and "trainer.checkpoint.base" in graph["trainer.checkpoint.google"]  # it reads them
    assert circles(graph) == []


def test_an_import_circle_is_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


REFERENCE_FACTS = ROOT / "docs" / "reference-facts.md"


def _python_sources_but_this():
    for package in ("bertprep", "trainer", "tests", "scripts"):
        yield from (p for p in sorted((ROOT / package).rglob("*.py")) if p != pathlib.Path(__file__).resolve())


def test_code_cites_reference_facts_by_existing_heading():
    """Users never see the design notes kept outside the repository, so the code cites the reference-facts
    page instead: one whole citation to a line, naming a heading the page has, so that a renamed heading
    or a wrapped citation is caught here and not by a puzzled reader."""
    headings = set(re.findall(r"^## (.+)$", REFERENCE_FACTS.read_text(encoding="utf-8"), re.MULTILINE))
    problems = []
    for path in _python_sources_but_this():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if "DESIGN" + ".md" in line:
                problems.append(f"{where}: cites the design notes")
            cited = re.findall(r'docs/reference-facts\.md, "([^"]+)"', line)
            if line.count(REFERENCE_FACTS.name) != len(cited):
                problems.append(f"{where}: a citation without its quoted heading on the same line")
            problems += [f"{where}: no heading {name!r}" for name in cited if name not in headings]
    assert len(headings) > 10 and problems == []


# The storage layer: the one place that knows a local path from a URL (docs/architecture.md, "The layers").
STORAGE_LAYER = {"bertprep/storage.py", "bertprep/atomic.py"}


def test_only_the_storage_layer_asks_whether_a_path_is_a_url():
    """A step asks storage what it needs (renames, appends, reads_in_place, holds, ...), each answer written
    once with its reason, never `is_url`: a new store then changes storage.py, not the steps."""
    asking = []
    for package in ("bertprep", "trainer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)) in STORAGE_LAYER:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                called = node.func if isinstance(node, ast.Call) else None
                name = getattr(called, "attr", None) or getattr(called, "id", None)
                if name == "is_url":
                    asking.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert asking == []


def _format_names_outside_the_codecs(source, where):
    """`where:line` of each string that is a format's name in `source`, docstrings aside, and of each
    `columnar.CODECS`: a comparison, a default or a table keyed by format that belongs to the codec."""
    from bertprep.formats import codecs

    tree = ast.parse(source, where)
    docstrings = {id(body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  for body in [node.body] if body and isinstance(body[0], ast.Expr)}
    found = []
    for node in ast.walk(tree):
        named = isinstance(node, ast.Constant) and node.value in codecs.names() and id(node) not in docstrings
        membership = isinstance(node, ast.Attribute) and node.attr == "CODECS" and \
            getattr(node.value, "id", None) == "columnar"  # `fmt in columnar.CODECS`: is it columnar?
        if named or membership:
            found.append((node.lineno, f"{where}:{node.lineno}"))
    return [name for _, name in sorted(found)]


def test_only_the_codecs_name_formats():
    """Outside bertprep/formats/ a step asks the codec (codecs.get(fmt).framed, .task_file, .int_kinds,
    codecs.names()), never compares or spells a format's name: a new format is its module and its line in
    codecs._REGISTERED (docs/architecture.md, "How to add a format")."""
    found = []
    for package in ("bertprep", "trainer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(BERTPREP / "formats"):
                continue
            found += _format_names_outside_the_codecs(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == []


def test_a_format_name_outside_the_codecs_is_found():
    source = '"""Docstrings may say "tfrecord"."""\nif fmt == "ofrecord":\n    pass\nx = columnar.CODECS\n'
    assert _format_names_outside_the_codecs(source, "m.py") == ["m.py:2", "m.py:4"]
