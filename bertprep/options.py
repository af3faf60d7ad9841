"""What the stage functions share about their options (issue 31's stage API).

A stage function takes a frozen options object or the same values as keywords,
`shard(ShardOptions(corpus="wiki"))` or `shard(corpus="wiki")`; paths may be
strings or `os.PathLike` (a notebook's `pathlib.Path`) and are kept as strings,
a `file://` URL as its local path.
"""

import dataclasses
import functools
import numbers
import os
import re
import types
import typing

from bertprep import storage
from bertprep.errors import ON_COMMAND_LINE, BertprepError, UsageError


def errors_name_fields(cls):
    """Class decorator for an options dataclass: a UsageError its `__post_init__` raises names the flags the
    command line has (`--layout must be ...`); raised for a Python caller, each `--flag` that is one of the
    object's fields is written as that field, `CreateOptions.layout must be ...`. On a command line
    (run_reporting_errors) the flags stay."""
    post_init = cls.__post_init__

    @functools.wraps(post_init)
    def __post_init__(self):
        try:
            post_init(self)
        except UsageError as exc:
            _name_fields(exc, self)
            raise

    cls.__post_init__ = __post_init__
    return cls


_P = typing.ParamSpec("_P")
_R = typing.TypeVar("_R")


def run_errors_name_fields(cls: type) -> typing.Callable[[typing.Callable[_P, _R]], typing.Callable[_P, _R]]:
    """Decorator for a function that runs as an options object of `cls` says (trainer.train, trainer.finetune): an
    error it raises while it runs names the fields, as errors_name_fields does for the checks made when the
    object is built (trainer.finetune's `--checkpoint-dir ck: holds 1 checkpoint(s) of an earlier run` named a flag
    to a caller who set FinetuneConfig.checkpoint_dir). On a command line the flags stay."""

    def decorate(function: typing.Callable[_P, _R]) -> typing.Callable[_P, _R]:
        @functools.wraps(function)
        def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return function(*args, **kwargs)
            except BertprepError as exc:  # a DataError's remedy names flags too
                _name_fields(exc, cls)
                raise

        return run

    return decorate


def _name_fields(exc, options):
    """`exc`'s message with the flags that are fields of `options` written as the fields (python_field_names),
    for a Python caller: not while a command line runs."""
    if not ON_COMMAND_LINE.get() and exc.args and isinstance(exc.args[0], str):
        exc.args = (python_field_names(exc.args[0], options), *exc.args[1:])


def python_field_names(message, options):
    """`message` with each `--flag` that is a field of `options` (an options object or class) written
    `Class.field` (and argparse's "argument --flag:" as "Class.field:"), and each `--no-flag` of a field
    `flag` written `Class.flag=False` (a Python caller has no --no-near: "DedupOptions.threshold 0.5 has no
    effect with --no-near" named a flag beside a field). A flag spelled other than its field is in the class's
    `flag_fields` (SquadOptions' --version is squad_version: "--version must be one of ..." stayed a flag). A
    command quoted in backticks keeps its flags: a remedy such as "`bertprep create --input X`" is run as written."""
    cls = options if isinstance(options, type) else type(options)
    fields = {field.name for field in dataclasses.fields(cls)}
    renamed = getattr(cls, "flag_fields", {})

    def field_named(match):
        if match.group(1) is None:  # a `command line` quoted whole: its flags are a command's
            return match.group(0)
        name = renamed.get(match.group(1), match.group(1).replace("-", "_"))
        if name in fields:
            return f"{cls.__name__}.{name}"
        negated = name.removeprefix("no_")
        return f"{cls.__name__}.{negated}=False" if negated != name and negated in fields else match.group(0)

    message = re.sub(r"^argument (--[a-z][a-z0-9-]*):", r"\1:", message)
    return re.sub(r"`[^`]*`|(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)", field_named, message)


def build_options(cls, options, fields):
    """`options` (an instance of `cls`), or a `cls` built from the keyword `fields`; not both."""
    if options is None:
        unknown = [name for name in fields if name not in field_names(cls)]
        if unknown:  # Python's own TypeError, with the field a command line's flag is where it is not one
            raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}"
                            f"{_flag_hint(cls, unknown[0])}")
        return cls(**fields)
    if not isinstance(options, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(options).__name__}{_as_keywords(cls, options)}")
    if fields:
        raise TypeError(f"give a {cls.__name__} or its fields as keywords, not both ({', '.join(fields)})")
    return options


def _as_keywords(cls, given):
    """For a path given where the options go (`bertprep.pack("records/x")`, as the command line takes it): the
    call with its field as a keyword; "expected PackOptions, got str" said neither which nor how."""
    if not isinstance(given, (str, os.PathLike)):
        return ""
    names = [f.name for f in dataclasses.fields(cls)]
    field = next((name for name in ("input", "records_dir", "file", "paths", "src", "data_dir") if name in names),
                 names[0])
    stage = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__.removesuffix("Options")).lower()
    return (f" {short_repr(given)}: a stage takes its options object or its fields as keywords, as "
            f"bertprep.{stage}({field}=...)")


def _flag_hint(cls, name):
    """Where the flag that `name` spells is set in `cls` (an options dataclass), "" where no flag is: `workers`
    (--workers) is the `engine` field's EngineOptions(workers=...), `no_lower_case` is lower_case=False."""
    fields = {field.name: field for field in dataclasses.fields(cls)}
    engine = fields.get("engine")
    if engine is not None and dataclasses.is_dataclass(engine.default) and name in field_names(type(engine.default)):
        return f" (--{name.replace('_', '-')} is engine=bertprep.EngineOptions({name}=...))"
    negated = fields.get(name.removeprefix("no_")) if name.startswith("no_") else None
    if negated is not None and negated.default is True:
        return f" (--{name.replace('_', '-')} is {negated.name}=False)"
    return ""


def normalise_paths(options, *names, flags=True, outputs=(), folders=()):
    """Set each named field of a frozen dataclass to a string path (a tuple of them for a list), `file://...`
    to its path, so that a stage joins, compares and names one spelling of it; None stays. An empty path is
    refused (`convert "" out` reported the output "inside the input"), named as the command line's flag
    (`--out`; `flags=False` for fields the command line takes as positional arguments, named as themselves)
    or, for a Python caller, as the field (`DedupOptions.out`). The fields named in `outputs` (among `names`)
    are places the stage writes: one under a regular file is refused (refuse_file_above), and so is one of
    `folders` (the outputs that are directories) that is a file itself."""
    for name in names:
        value = getattr(options, name)
        for path in value if isinstance(value, (list, tuple)) else () if value is None else (value,):
            if isinstance(path, (str, os.PathLike)):
                refuse_empty_path(_field_label(options, name, flags), path)
                storage.check_path(path)
        if isinstance(value, (list, tuple)):
            value = tuple(storage.local_path(v) for v in value)
        elif value is not None:
            value = storage.local_path(value)
        object.__setattr__(options, name, value)
    refuse_files_above(options, *outputs, flags=flags, folders=folders)


def written_in(options):
    """The field naming where a stage with `out` and `workdir` fields writes: "out", or "workdir" without an out
    (its output's default lies under the work directory)."""
    return "out" if options.out is not None else "workdir"


def refuse_files_above(options, *names, flags=True, folders=(), files=()):
    """refuse_file_above for each named output field of `options` (those in `folders` directories, those in
    `files` files), named as normalise_paths names it."""
    for name in names:
        refuse_file_above(_field_label(options, name, flags), getattr(options, name), folder=name in folders,
                          file=name in files)


def refuse_file_above(label, path, folder=False, file=False):
    """One UsageError line (exit 2), before anything is read, where a folder the output `path` would be written
    in is a regular file (a local path; a store's is the store's to refuse): `--out afile/in2` ended every stage
    with the system's "…/afile/in2: Not a directory", exit 1, naming neither the flag nor the file in the way
    (validate's --json only after every check). With `folder`, `path` is a directory to write in: a file there
    is refused too (`--out afile` was "…/afile: Not a directory", exit 1, create-squad's after every question).
    The trainer's check_output_place refuses more (a missing folder, an unwritable place) because its writers
    make no parents (--log-json's `open`) and write after training; a stage makes every folder above its
    output, and a store's path is the store's to check. Both find the file in the way by nearest_existing, and
    a symbolic link to nothing in the way (refuse_dangling_link). With `file`, `path` is the file to write: a
    symbolic link to nothing there is refused too (refuse_dangling_file_link); neither flag: it may be either
    (convert's dst before its source is known), and only the folders above it are checked."""
    storage.refuse_read_only(label, path)
    if path is None or not storage.checks_locally(path):
        return
    if folder and os.path.exists(storage.local_path(path)) and not os.path.isdir(storage.local_path(path)):
        raise UsageError(f"{label} {storage.display(path)}: is a file, not a directory")
    if folder:  # a directory to write in that is a link to nothing: making it fails as making one below it does
        refuse_dangling_link(label, path, storage.local_path(path))
    if file:
        refuse_dangling_file_link(label, path, storage.local_path(path))
    place = nearest_existing(storage.local_path(path), exists=os.path.lexists)
    refuse_dangling_link(label, path, place)
    if place and not os.path.isdir(place):
        raise UsageError(f"{label} {storage.display(path)}: {place} is a file, not a directory")


def refuse_dangling_link(label, path, place, then="nothing can be made under it"):
    """One UsageError line (exit 2) where `place`, the output `path` or the nearest existing folder above it
    (nearest_existing by os.path.lexists), is a symbolic link to nothing: os.path.exists passes over such a
    link, so `--out link/sub` passed the check and the stage stopped only when it made its folder, with the
    system's "…/link/sub: No such file or directory", exit 1, naming neither the flag nor the link. `then`
    ends the line: what cannot be done there."""
    if place and os.path.islink(place) and not os.path.exists(place):
        raise UsageError(f"{label} {storage.display(path)}: {place} is a symbolic link to {os.readlink(place)}, "
                         f"which does not exist: {then}")


def refuse_dangling_file_link(label, path, place):
    """refuse_dangling_link's line where `place`, the local file output `path` itself, is a symbolic link to
    nothing. The writers disagreed on such a link, and none said so: an atomic write's rename replaced the link
    with a file (vocab's --out, validate's --json and --plot, convert's dst, `trainer checkpoint run --out`),
    --log-json's append wrote at the link's target, or failed after training where the target's folder was
    missing. A link to an existing file is written as before."""
    refuse_dangling_link(label, path, place, then="name a file, or a link to an existing one")


def nearest_existing(path, exists=os.path.exists):
    """The nearest existing ancestor of the local `path`, where the output would be made: a file there is in
    the way. "" for a relative `path` none of whose folders exists (the current directory's). The one walk of
    the stages' checks (refuse_file_above, vocab's) and the trainer's (check_output_place); they pass
    os.path.lexists, to find a dangling link in the way (os.makedirs stops at one too; the trainer's check has
    always refused one)."""
    place = os.path.dirname(os.path.normpath(path))
    while place and not exists(place) and os.path.dirname(place) != place:
        place = os.path.dirname(place)
    return place


def _field_label(options, name, is_flag):
    """How an error names a field: `--flag` (or the positional argument's name) on a command line, else
    `Class.field`."""
    if not ON_COMMAND_LINE.get():
        return f"{type(options).__name__}.{name}"
    return "--" + name.replace("_", "-") if is_flag else name


def refuse_empty_path(label, path):
    """One UsageError line where `path` is "": the operating system reads it as no file, but a join or a
    comparison takes it for the current directory."""
    if os.fspath(path) == "":
        raise UsageError(f"{label}: an empty path names no file or directory")


def set_field(options, name, value):
    """What __post_init__ decides for a field of a frozen dataclass (a default that depends on others)."""
    object.__setattr__(options, name, value)


def field_names(cls):
    return [f.name for f in dataclasses.fields(cls)]


def refuse_overlap(out, inputs, what="--out"):
    """A UsageError, before anything is touched, when the output `out` is one of `inputs`, lies inside one or
    holds one: the run would replace or delete what it reads (issue 39: `dedup --input X/formatted/part0 --out
    X/formatted` deleted its own input, then failed on it). Local paths are compared with symbolic links and
    `..` resolved; URLs by their normalised bucket and key."""
    target = storage.comparable(out)
    for path in inputs:
        if path is None:
            continue
        source = storage.comparable(path)
        if target == source:
            relation = "is"
        elif target.startswith(source.rstrip("/") + "/"):
            relation = "is inside"
        elif source.startswith(target.rstrip("/") + "/"):
            relation = "holds"
        else:
            continue
        raise UsageError(f"{what} {storage.display(out)} {relation} the input {storage.display(path)}: the run "
                         "would overwrite or delete what it reads; write the output elsewhere")


def refuse_empty(options, *names):
    """A UsageError when a named list field is given but empty. None is "not given" (the stage's default: the
    shards under WORKDIR, the embedded sample corpus); an empty list is a mistake, a pattern that matched
    nothing, which `bertprep.tokenize(input=())` took for "not given" and ran on the sample corpus (issue 57)
    where the command line, whose flags take one value or more, refuses it."""
    for name in names:
        value = getattr(options, name)
        if value is not None and len(value) == 0:
            raise UsageError(f"--{name.replace('_', '-')} is empty: give at least one value (did a pattern match "
                             "nothing?), or leave it out for the default")


def require_at_least(flag, value, least):
    """A UsageError `<flag> must be at least <least>, not <value>` (the options' own check of a count such as
    --workers, shared by EngineOptions and DownloadOptions); `value` is already of its type (check_types)."""
    if value < least:
        raise UsageError(f"{flag} must be at least {least}, not {value}")


def check_types(options):
    """One UsageError line naming `Class.field` for a field whose value is not of its annotated type, when the
    options object is built: a notebook's `CreateOptions(seq="128")` failed deep inside with "'<' not supported
    between 'str' and 'int'", `seq=128.5` inside the process pool, `seed="12345"` gave other records. Driven by
    the dataclass's own annotations: an int is an int (not a bool, not 128.0), a float takes ints, a bool is
    True or False, a path (str) takes os.PathLike, a tuple takes a list, and a single str or path given for a
    tuple of them is taken as one item (`input="ref/sh1"` is `("ref/sh1",)`, not its characters). A str field
    that takes one of some names (the class's `choices`: {field: its names}) is said to take them, not "a str
    (or a path)". The CLI builds these objects from values argparse has already typed, so its flags never meet
    this check."""
    cls = type(options)
    hints = typing.get_type_hints(cls)
    choices = getattr(cls, "choices", {})
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        # The names word a wrong type's message only: a str that is none of them is the class's own check, worded
        # with its flag on the command line (`--layout must be one of bertprep, nvidia, not 'x'`).
        conformed = check_argument(f"{cls.__name__}.{field.name}", value, hints[field.name], one_for_many=True,
                                   expected=_described_choices(choices.get(field.name), hints[field.name]))
        if conformed is not value:
            object.__setattr__(options, field.name, conformed)


def check_argument(label, value, annotation, choices=None, expected=None, one_for_many=False):
    """`value` as a field of type `annotation` keeps it (check_types' rules), or one UsageError line: `label must be
    <the type, described>, got <its type> <its repr>`, or `label must be one of <choices>, got ...` for a value
    that is not of the type or, of the type, none of `choices` (None passes where the annotation takes it), or
    `label must be <expected>` where the annotation's words would not say what it is. For the public functions'
    arguments that are no options field (bertprep.torch.BertLoader's). A str or path given for a tuple or list is
    refused, as no sequence of items (convert took labels="a,b" for one label, and a str's items are its
    characters), unless `one_for_many`: check_types takes it for the one item of a tuple of paths."""
    ok, conformed = _conform(value, annotation, one_for_many)
    if ok and choices and conformed is not None:  # a str that names nothing was kept: `choices` only worded
        ok = conformed in choices
    if not ok:
        described = expected or _described_choices(choices, annotation) or _describe(annotation)
        raise UsageError(f"{label} must be {described}, got {type(value).__name__} {short_repr(value)}")
    return conformed


def _described_choices(choices, annotation):
    """"one of a, b" (", or None" where `annotation` takes None), or None without `choices`: `ConvertOptions(to=
    ["parquet"])` said "must be a str (or a path)", where `to` takes a format's name."""
    if not choices:
        return None
    return f"one of {', '.join(choices)}" + (", or None" if type(None) in typing.get_args(annotation) else "")


def short_repr(value):
    """repr(value), cut to 60 characters: a one-line error names a wrong argument without printing all of it."""
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _is_path(value):
    return isinstance(value, (str, os.PathLike))


# The annotation of a str that names something (a label, a key), not a file: `str` takes a path object, which as a
# label would be its repr's name.
Name = typing.NewType("Name", str)


def _conform(value, annotation, one_for_many=False):
    """(whether `value` is of `annotation`, the value as the field keeps it); `one_for_many` as check_argument's."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is typing.Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        exact = [arm for arm in args if _conform(value, arm, one_for_many) == (True, value)]
        for arm in exact or args:
            ok, conformed = _conform(value, arm, one_for_many)
            if ok:
                return True, conformed
        return False, value
    if annotation is Name:
        return isinstance(value, str), value
    if annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    # kept as Python's own int and float: a NumPy int64 stopped the settings' JSON ("not JSON serializable")
    if annotation is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return ok, int(value) if ok else value
    if annotation is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        return ok, float(value) if ok and not isinstance(value, (int, float)) else value  # an int stays an int
    if annotation is str:
        return _is_path(value), value
    if origin is list:  # as a tuple of its items' type, kept a list: list[str] took anything, "abc" too
        ok, conformed = _conform(value, tuple[args[0], ...], one_for_many)
        return ok, list(conformed) if ok else value
    if origin is tuple:
        return _conform_tuple(value, args, one_for_many)
    if isinstance(annotation, type):
        return isinstance(value, annotation), value
    return True, value  # an annotation this check does not read (a Callable, a Literal): the field's own check


def _conform_tuple(value, args, one_for_many):
    """_conform of a tuple[args]: a list or tuple whose items conform, or one path for a tuple of them where
    `one_for_many` (check_types' `input="ref/sh1"`, not its characters)."""
    if one_for_many and _is_path(value) and args and args[-1] is Ellipsis and _conform(value, args[0])[0]:
        return True, (value,)
    if not isinstance(value, (list, tuple)):
        return False, value
    item_types = [args[0]] * len(value) if args[-1:] == (Ellipsis,) else list(args)
    if len(item_types) != len(value):
        return False, value
    items = [_conform(item, kind, one_for_many) for item, kind in zip(value, item_types)]
    if not all(ok for ok, _ in items):
        return False, value
    return True, tuple(conformed for _, conformed in items)


def _describe(annotation):
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in args)
    if annotation is type(None):
        return "None"
    if annotation is str:
        return "a str (or a path)"
    if annotation is Name:
        return "a str"
    if origin is list:
        return "a list" + _describe(tuple[args[0], ...]).removeprefix("a tuple")
    if origin is tuple:
        if args[-1:] == (Ellipsis,):
            return f"a tuple of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}"
        return f"a tuple ({', '.join(_describe(a) for a in args)})"
    if isinstance(annotation, type):
        name = annotation.__name__
        return f"an {name}" if name[0] in "aeiouAEIOU" else f"a {name}"
    return str(annotation)


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text, flag):
    """Bytes of a size flag's value: an integer with an optional K, M, G or T suffix (powers of 1024), `64M`;
    a UsageError naming `flag` for anything else."""
    # a unit, then B or iB (64M, 64MB, 64MiB), or B alone: "64iB" was 64 bytes, its unit lost
    match = re.fullmatch(r"\s*(\d+)\s*(?:([KMGT])(?:i?B)?|B?)\s*", str(text), re.IGNORECASE)
    if not match or int(match[1]) == 0:
        raise UsageError(f"{flag} must be a positive size in bytes with an optional K, M, G or T suffix (64M), "
                         f"not {text!r}")
    return int(match[1]) * SIZE_UNITS[(match[2] or "").upper()]
