"""bertprep: BERT pretraining data, exact, fast, resumable, verifiable.

Every stage is a function with typed, frozen options, returning its summary (what `--json` prints)::

    import bertprep
    bertprep.download("squad", workdir="work")
    bertprep.shard(input=("corpus.txt",), out="work/sharded")
    bertprep.create(input=("work/sharded",), vocab="vocab.txt", seq=128, pred=20, out="work/records")
    bertprep.validate(paths=("work/records",))

A call is `stage(options)` or `stage(**fields)`; `quiet=False` shows progress on stderr as the command
does. Bad options or data raise `bertprep.errors.UsageError` / `DataError` with the command's one-line
message; what the summary lists under "warnings" is also raised as a `BertprepWarning` (Python's
`warnings`: shown once in a notebook or script whatever `quiet` says; `warnings.simplefilter("error",
bertprep.BertprepWarning)` makes them errors). A summary shows itself as its table (`repr`) and as
HTML in a notebook. The names load on first use, so `import bertprep` stays cheap.
"""

import functools
import importlib
import warnings

__version__ = "0.1.0"

# public name -> the module that defines it (bertprep/stages/: one module or package per stage)
_EXPORTS = {
    **dict.fromkeys(("download", "DownloadOptions"), "bertprep.stages.download"),
    "WikipediaOptions": "bertprep.stages.download.wikipedia",
    "BookcorpusOptions": "bertprep.stages.download.bookcorpus",
    "SquadOptions": "bertprep.stages.download.squad",
    "GlueOptions": "bertprep.stages.download.glue",
    "PretrainedOptions": "bertprep.stages.download.pretrained",
    "Limits": "bertprep.stages.download.http",
    **dict.fromkeys(("dedup", "DedupOptions"), "bertprep.stages.dedup"),
    **dict.fromkeys(("shard", "ShardOptions"), "bertprep.stages.shard"),
    **dict.fromkeys(("vocab", "VocabOptions"), "bertprep.stages.vocab"),
    **dict.fromkeys(("tokenize", "TokenizeOptions"), "bertprep.stages.tokenize"),
    **dict.fromkeys(("create", "CreateOptions"), "bertprep.stages.create"),
    **dict.fromkeys(("pack", "PackOptions"), "bertprep.stages.pack"),
    **dict.fromkeys(("validate", "ValidateOptions", "Report"), "bertprep.stages.validate"),
    **dict.fromkeys(("prepare", "PrepareOptions"), "bertprep.stages.prepare"),
    **dict.fromkeys(("inspect", "InspectOptions"), "bertprep.stages.inspect"),
    **dict.fromkeys(("convert", "ConvertOptions"), "bertprep.stages.convert"),
    **dict.fromkeys(("create_squad", "CreateSquadOptions"), "bertprep.stages.finetune_data.squad"),
    **dict.fromkeys(("create_glue", "CreateGlueOptions"), "bertprep.stages.finetune_data.glue"),
    "EngineOptions": "bertprep.engines",
    "Summary": "bertprep.progress",
    "BertprepWarning": "bertprep.errors",
}
# The stage functions: their summaries' warnings are raised as BertprepWarning (the CLI calls the stage
# modules directly and prints its own lines).
_STAGES = {"download", "dedup", "shard", "vocab", "tokenize", "create", "pack", "validate", "prepare", "inspect",
           "convert", "create_squad", "create_glue"}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertprep' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _STAGES:
        value = _python_facing(value, "".join(part.capitalize() for part in name.split("_")) + "Options")
    globals()[name] = value  # once loaded, a plain attribute
    return value


def _python_facing(stage, options_name):
    """`stage`, whose summary's "warnings" are also raised as BertprepWarning, and whose errors found
    while it runs name its options' fields (`VocabOptions.vocab_size`) where the command line's name flags."""
    from bertprep.errors import ON_COMMAND_LINE, BertprepError, BertprepWarning, UsageError
    from bertprep.options import python_field_names

    module = importlib.import_module(stage.__module__)
    options_class = getattr(module, options_name)

    @functools.wraps(stage)
    def call(*args, **kwargs):
        # The options' booleans are type-checked (options.check_types); `quiet` is the call's own: quiet="yes"
        # was taken as true and "" as false (issue 57)
        if "quiet" in kwargs and not isinstance(kwargs["quiet"], bool):
            raise UsageError(f"bertprep.{stage.__name__}: quiet must be True or False, got "
                             f"{type(kwargs['quiet']).__name__} {kwargs['quiet']!r}")
        try:
            summary = stage(*args, **kwargs)
        except BertprepError as exc:  # a DataError's remedy too: "no such file (...; pass --split to ...)"
            if not ON_COMMAND_LINE.get() and exc.args and isinstance(exc.args[0], str):
                exc.args = (python_field_names(exc.args[0], _called_class(module, options_class, args)), *exc.args[1:])
            raise
        if not ON_COMMAND_LINE.get():
            _name_fields_in_warnings(summary, _called_class(module, options_class, args))
        for message in _listed_warnings(stage, summary):
            warnings.warn(f"bertprep.{stage.__name__}: {message}", BertprepWarning, stacklevel=2)
        return summary

    return call


def _name_fields_in_warnings(summary, options_class):
    """The summary's warnings (and its printed rows' copies) with the fields of `options_class` for the flags, as
    a Python caller's errors name them: `bertprep.dedup(memory="100G")` was warned of "--memory 100G", a flag
    it never gave. The command line's summary keeps its flags (the CLI calls the stage, not this wrapper)."""
    from bertprep.options import python_field_names

    if not hasattr(summary, "get") or not summary.get("warnings"):
        return
    named = {message: python_field_names(message, options_class) for message in summary["warnings"]}
    summary["warnings"] = [named[message] for message in summary["warnings"]]
    if getattr(summary, "rows", None):
        summary.rows = [(label, named.get(value, value) if isinstance(value, str) else value)
                        for label, value in summary.rows]


def _called_class(module, options_class, args):
    """The options class whose fields a call's errors name: that of the options object given, or of the download
    source named (`module.options_class`). download's is DownloadOptions, whose fields lack each source's own:
    `download("pretrained", model=...)` said `--model 'x': not a Google release`, and WikipediaOptions' workdir
    was DownloadOptions'."""
    given = args[0] if args else None
    if isinstance(given, options_class):
        return type(given)
    if options_class.__name__ == "DownloadOptions" and isinstance(given, str) and given in module.SOURCES:
        return module.options_class(given)
    return options_class


def _listed_warnings(stage, summary):
    """The warnings `stage`'s summary lists; prepare's, those of each stage it ran, after its label ("create
    128/20: ..."): its stages print them only on the command line (Progress.warn)."""
    if not hasattr(summary, "get"):
        return []
    if stage.__name__ == "prepare":
        return [f"{label}: {message}" for label, fields in summary.items() for message in fields.get("warnings", ())]
    return list(summary.get("warnings") or ())


def __dir__():
    return sorted(__all__)
