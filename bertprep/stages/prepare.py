"""`bertprep prepare`: the common case in one command.

    bertprep prepare wikipedia bookcorpus --vocab bert-base-uncased --workdir W

runs, in order, the same commands you can run one by one:

    bertprep download wikipedia / bookcorpus      (hub parquet releases)
    bertprep shard --corpus <corpus>              (books_wiki_en_corpus for both)
    bertprep create --corpus <corpus> --seq 128 --pred 20
    bertprep create --corpus <corpus> --seq 512 --pred 80

and stops at the first that fails, with that stage's error and exit code.
Every stage resumes, so rerunning `prepare` after an interruption redoes
only what is missing. For anything else (the XML dump, a tarball, other
flags), run the stages yourself.
"""

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from bertprep.engines import EngineOptions
from bertprep.errors import ON_COMMAND_LINE, UsageError
from bertprep.options import build_options, check_types, errors_name_fields, normalise_paths, refuse_empty, set_field
from bertprep.progress import Summary
from bertprep.stages.create import LAYOUTS, CreateOptions, create
from bertprep.stages.download import download, options_class
from bertprep.stages.download.wikipedia import check_lang
from bertprep.stages.shard import ShardOptions, shard

SOURCES = ("wikipedia", "bookcorpus")
DEFAULT_CONFIGS = "128/20,512/80"


@errors_name_fields
@dataclass(frozen=True)
class PrepareOptions:
    """`bertprep prepare`'s flags: the `sources` (wikipedia and/or bookcorpus), the `vocab` of create, its
    `configs` ('128/20,512/80' or ((128, 20), (512, 80)); a tuple of pairs after __post_init__), the Wikipedia
    `lang`, and the flags passed on to shard and create, which __post_init__ checks as each stage's options
    would (before any stage runs)."""

    sources: tuple[str, ...]
    vocab: str
    configs: tuple[tuple[int, int], ...] | str = DEFAULT_CONFIGS
    lang: str = "en"
    dupe_factor: int = 5
    train_shards: int = 256
    test_shards: int = 256
    layout: str = "bertprep"
    engine: EngineOptions = EngineOptions()
    workdir: str | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"layout": LAYOUTS}  # check_types

    def __post_init__(self):
        check_types(self)
        normalise_paths(self, "vocab", "workdir", outputs=("workdir",), folders=("workdir",))
        sources = (self.sources,) if isinstance(self.sources, str) else tuple(self.sources)
        for source in sources:
            if source not in SOURCES:
                raise UsageError(f"unknown source {source!r}: prepare takes {' and/or '.join(SOURCES)}")
        if not sources:
            raise UsageError(f"no source: prepare takes {' and/or '.join(SOURCES)}")
        set_field(self, "sources", tuple(dict.fromkeys(sources)))
        if self.layout not in LAYOUTS:
            raise UsageError(f"--layout must be one of {', '.join(LAYOUTS)}, not {self.layout!r}")
        check_lang(self.lang)  # it names the corpus directory, wikicorpus_<lang>
        corpus_name(self.sources, self.lang)
        if isinstance(self.configs, str):
            set_field(self, "configs", tuple(parse_configs(self.configs)))
        refuse_empty(self, "configs")  # the parser refuses an empty --configs; () created no records, "done"
        refuse_repeated_configs(self.configs)
        # Every stage's flags, checked now rather than as each stage starts (after hours of downloads), named as
        # flags, which this class's errors_name_fields names as its own fields for a Python caller.
        on_command_line = ON_COMMAND_LINE.set(True)
        try:
            stage_calls(self)
        finally:
            ON_COMMAND_LINE.reset(on_command_line)

    @property
    def corpus(self):
        return corpus_name(self.sources, self.lang)


def parse_configs(value):
    configs = []
    for item in value.split(","):
        match = re.fullmatch(r"\s*(\d+)/(\d+)\s*", item)
        if not match:
            raise UsageError(f"--configs {value!r}: expected seq/pred pairs such as 128/20,512/80")
        configs.append((int(match[1]), int(match[2])))
    return configs


def refuse_repeated_configs(configs):
    """A UsageError for a seq/pred pair given twice: its create ran twice under one label ("create 128/20"), the
    second finding the records made and the summary keeping one of them."""
    repeated = next((pair for number, pair in enumerate(configs) if pair in configs[:number]), None)
    if repeated:
        raise UsageError(f"--configs {repeated[0]}/{repeated[1]} is given twice: give each seq/pred pair once")


def corpus_name(sources, lang):
    corpora = {"wikipedia": f"wikicorpus_{lang}", "bookcorpus": "bookcorpus"}
    if set(sources) == set(SOURCES):
        if lang != "en":
            raise UsageError("wikipedia with bookcorpus is the English books_wiki_en_corpus: use --lang en")
        return "books_wiki_en_corpus"
    return corpora[sources[0]]


@dataclass(frozen=True)
class StageCall:
    """One stage of a prepare run: `function` (download, shard or create) and its `options`. Every stage's options
    are built, and so its flags checked, before the first stage runs: built as each stage started, a bad
    --train-shards or --configs ended the run after the downloads, which take hours for Wikipedia."""

    label: str
    function: Callable[..., Summary]
    options: object

    def __call__(self, quiet=True):
        return self.function(self.options, quiet=quiet)


def stage_calls(options):
    """Every stage of the run, in order, its options checked."""
    corpus = options.corpus
    calls = []
    for source in options.sources:
        extra = {"lang": options.lang} if source == "wikipedia" else {}
        calls.append(StageCall(f"download {source}", download, options_class(source)(workdir=options.workdir, **extra)))
    calls.append(StageCall("shard", shard, ShardOptions(
        corpus=corpus, train_shards=options.train_shards, test_shards=options.test_shards, engine=options.engine,
        workdir=options.workdir)))
    for seq, pred in options.configs:
        try:
            create_options = CreateOptions(corpus=corpus, vocab=options.vocab, seq=seq, pred=pred,
                                           dupe_factor=options.dupe_factor, layout=options.layout,
                                           engine=options.engine, workdir=options.workdir)
        except UsageError as exc:
            if "--seq" not in str(exc) and "--pred" not in str(exc):
                raise
            raise UsageError(f"--configs {seq}/{pred}: {exc}") from None  # the pair as given: prepare has no --seq
        calls.append(StageCall(f"create {seq}/{pred}", create, create_options))
    return calls


def prepare(options: PrepareOptions | None = None, /, *, quiet: bool = True,
            run_stage: Callable[[str, Callable[[], Summary]], Summary] | None = None, **fields: Any) -> Summary:
    """Download, shard and create in one call (`PrepareOptions`, or its fields as keywords); the summary `--json`
    prints: every stage's summary under its label. The first stage that fails raises its error and nothing after it
    runs. `run_stage(label, call)` runs each stage (default: `call()`), for a caller that reports a stage's error
    under the stage's name, as the CLI does."""
    options = build_options(PrepareOptions, options, fields)
    summaries = {}
    for call in stage_calls(options):
        run = functools.partial(call, quiet)
        summaries[call.label] = (run() if run_stage is None else run_stage(call.label, run)).fields
    rows = []
    for label, summary in summaries.items():
        if label.startswith("create"):
            rows.append((label, f"{sum(summary['instances'].values()):,} instances in {summary['records_dir']}"))
        elif label == "shard":
            rows.append((label,
                         f"{summary['documents']['training']:,} training / {summary['documents']['test']:,} test "
                         f"documents in {summary['out']}"))
        else:
            rows.append((label, "done"))
    return Summary("bertprep prepare: done", summaries, rows=rows)
