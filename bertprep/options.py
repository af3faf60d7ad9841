"""What the stage functions share about their options (issue 31's stage API).

A stage function takes a frozen options object or the same values as keywords,
`shard(ShardOptions(corpus="wiki"))` or `shard(corpus="wiki")`; paths may be
strings or `os.PathLike` (a notebook's `pathlib.Path`) and are kept as strings,
a `file://` URL as its local path.
"""

import dataclasses
import os

from bertprep import storage
from bertprep.errors import UsageError


def build_options(cls, options, fields):
    """`options` (an instance of `cls`), or a `cls` built from the keyword `fields`; not both."""
    if options is None:
        return cls(**fields)
    if not isinstance(options, cls):
        raise TypeError(f"expected {cls.__name__}, got {type(options).__name__}")
    if fields:
        raise TypeError(f"give a {cls.__name__} or its fields as keywords, not both ({', '.join(fields)})")
    return options


def normalise_paths(options, *names):
    """Set each named field of a frozen dataclass to a string path (a tuple of them for a list), `file://...`
    to its path, so that a stage joins, compares and names one spelling of it; None stays."""
    for name in names:
        value = getattr(options, name)
        for path in value if isinstance(value, (list, tuple)) else () if value is None else (value,):
            if isinstance(path, (str, os.PathLike)):
                storage.check_path(path)
        if isinstance(value, (list, tuple)):
            value = tuple(storage.local_path(v) for v in value)
        elif value is not None:
            value = storage.local_path(value)
        object.__setattr__(options, name, value)


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
    target = _comparable(out)
    for path in inputs:
        if path is None:
            continue
        source = _comparable(path)
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


def _comparable(path):
    path = os.fspath(path)
    if storage.is_url(path):
        return storage.normpath(storage.absolute(path))
    return os.path.realpath(storage.local_path(path))
