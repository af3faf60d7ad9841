#!/usr/bin/env python3
"""Write bertprep/__init__.pyi and trainer/__init__.pyi: the packages' public names as a type checker and an
IDE see them (both packages load their names lazily, through a module `__getattr__` a checker cannot read).

A stage function takes its options object or the options' fields as keywords, `bertprep.create(seq=128)`;
its code says `**fields`, so the stub spells each field out as a keyword of its own, with the types the options
dataclass's check takes for it (render_given: a path as a `str` or an `os.PathLike`, a tuple as any sequence):
`bertprep.create(seq="128")` is then an error under mypy, `vocab=Path(...)` is not, and both complete in an IDE. The
field lists come from the dataclasses, so they are written once; tests/test_typing.py fails when a stub
differs from what this script writes now (run it after changing an options class or a stage's signature).

    python scripts/write_api_stubs.py           # rewrite both stubs
    python scripts/write_api_stubs.py --check   # exit 1, naming the stubs that are out of date
"""

import argparse
import collections.abc
import dataclasses
import inspect
import sys
import types
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bertprep  # noqa: E402
import bertprep.options  # noqa: E402

HEADER = ('"""{package}\'s public names for type checkers and IDEs. Written by scripts/write_api_stubs.py: '
          'do not edit."""\n')


def render(annotation, names, imports):
    """`annotation` (a typing object) as stub text: the package's own exported names by their short name, other
    classes by their dotted path (recording the `import` it needs in `imports`)."""
    if annotation is type(None) or annotation is None:
        return "None"
    if annotation is Ellipsis:
        return "..."
    if annotation is typing.Any:
        imports.add("from typing import Any")
        return "Any"
    if isinstance(annotation, typing.NewType):  # bertprep.options.Name: a caller passes a plain str
        return render(annotation.__supertype__, names, imports)
    if isinstance(annotation, list):  # a Callable's parameter list
        return "[" + ", ".join(render(a, names, imports) for a in annotation) + "]"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(render(a, names, imports) for a in args)
    if origin is typing.Literal:
        imports.add("from typing import Literal")
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is collections.abc.Callable:
        params, result = args
        return f"{render(origin, names, imports)}[{render(list(params), names, imports)}, " \
               f"{render(result, names, imports)}]"
    if origin is not None:
        return f"{render(origin, names, imports)}[{', '.join(render(a, names, imports) for a in args)}]"
    if annotation in names:
        return names[annotation]
    module = annotation.__module__
    if module == "builtins":
        return annotation.__qualname__
    imports.add(f"import {module}")
    return f"{module}.{annotation.__qualname__}"


def render_given(annotation, names, imports, named=False):
    """A field's `annotation` as a stage function's keyword takes it: what options.check_types conforms to the
    field's type, not the type the field holds after. A path (`str`) is `str | os.PathLike[str]` and a tuple of
    items any sequence of them, of paths or names one item too (`input="corpus.txt"`, `input=[Path("a")]`): the
    stubs said `tuple[str, ...]`, so a notebook's `bertprep.create(input=[path], vocab=Path("vocab.txt"))`, which
    runs, was three mypy errors. A field that takes one of some names (`named`: in the class's `choices`) is said
    to take a `str` alone, as `layout`, not a path."""
    return " | ".join(dict.fromkeys(_given(annotation, names, imports, named)))


def _given(annotation, names, imports, named):
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return [part for arm in args for part in _given(arm, names, imports, named)]
    if annotation is str and not named:
        imports.add("import os")
        return ["str", "os.PathLike[str]"]
    if origin in (tuple, list) and (origin is list or args[-1:] == (Ellipsis,)):
        imports.add("import collections.abc")
        items = _given(args[0], names, imports, named)
        one = items if args[0] in (str, bertprep.options.Name) else []
        return [f"collections.abc.Sequence[{' | '.join(items)}]", *one]
    return [render(annotation, names, imports)]


def stage_stub(name, stage, options_class, names, imports):
    """`def name(...)`: the stage's own parameters, its `**fields` replaced by the options' fields as keywords.
    download's fields depend on the source: one overload per source (its Literal name), one for an options
    object."""
    hints = typing.get_type_hints(stage)
    params = [p for p in inspect.signature(stage).parameters.values() if p.kind is not p.VAR_KEYWORD]
    result = render(hints["return"], names, imports)

    def signature(first, fields_of):
        parts = []
        for param in params:
            shown = first if param is params[0] and first else render(hints[param.name], names, imports)
            default = "" if param.default is param.empty else f" = {param.default!r}"
            parts.append(f"{param.name}: {shown}{default}")
            if param is params[0]:
                parts.append("/")
                if len(params) > 1 or fields_of:
                    parts.append("*")
        field_hints = typing.get_type_hints(fields_of) if fields_of else {}
        for field in dataclasses.fields(fields_of) if fields_of else ():
            required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
            if field.init:
                named = field.name in getattr(fields_of, "choices", {})
                parts.append(f"{field.name}: {render_given(field_hints[field.name], names, imports, named)}"
                             + ("" if required else " = ..."))
        return f"def {name}(\n" + "".join(f"    {part},\n" for part in parts) + f") -> {result}: ..."

    if name != "download":
        return signature(None, options_class) + "\n"
    from bertprep.stages.download import SOURCES
    from bertprep.stages.download import options_class as source_options

    imports.add("from typing import overload")
    stubs = [signature(f"{names[options_class]}", None)]
    for source in SOURCES:
        imports.add("from typing import Literal")
        stubs.append(signature(f"Literal[{source!r}]", source_options(source)))
    return "".join(f"@overload\n{stub}\n" for stub in stubs)


def bertprep_stub():
    exports = {name: getattr(bertprep, name) for name in bertprep.__all__ if name != "__version__"}
    classes = {value: name for name, value in exports.items() if isinstance(value, type)}
    imports = set()
    lines = [f"from {bertprep._EXPORTS[name]} import {name} as {name}" for name in sorted(classes.values())]
    stubs = []
    for name in sorted(bertprep._STAGES):
        stage = inspect.unwrap(exports[name])
        options_name = "".join(part.capitalize() for part in name.split("_")) + "Options"
        stubs.append(stage_stub(name, stage, exports[options_name], classes, imports))
    typing_names = sorted(line.rpartition(" ")[2] for line in imports if line.startswith("from typing"))
    modules = sorted(line for line in imports if line.startswith("import "))
    typing_line = [f"from typing import {', '.join(typing_names)}"] if typing_names else []
    return "\n".join([HEADER.format(package="bertprep"), *modules, *typing_line, "", *sorted(lines), "",
                      "__version__: str", "", *stubs])


def trainer_stub():
    import trainer

    lines = [f"from {trainer._EXPORTS[name]} import {name} as {name}" for name in sorted(trainer.__all__)]
    return "\n".join([HEADER.format(package="trainer"), *lines, ""])


STUBS = {REPO / "bertprep" / "__init__.pyi": bertprep_stub, REPO / "trainer" / "__init__.pyi": trainer_stub}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a stub is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, make in STUBS.items():
        text = make()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{path.relative_to(REPO)}: {'out of date' if args.check else 'written'}")
    if args.check and stale:
        print("run: python scripts/write_api_stubs.py", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
