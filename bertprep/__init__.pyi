"""bertprep's public names for type checkers and IDEs. Written by scripts/write_api_stubs.py: do not edit."""

import collections.abc
import typing
from typing import Literal, overload

from bertprep.engines import EngineOptions as EngineOptions
from bertprep.errors import BertprepWarning as BertprepWarning
from bertprep.progress import Summary as Summary
from bertprep.stages.convert import ConvertOptions as ConvertOptions
from bertprep.stages.create import CreateOptions as CreateOptions
from bertprep.stages.dedup import DedupOptions as DedupOptions
from bertprep.stages.download import DownloadOptions as DownloadOptions
from bertprep.stages.download.bookcorpus import BookcorpusOptions as BookcorpusOptions
from bertprep.stages.download.glue import GlueOptions as GlueOptions
from bertprep.stages.download.http import Limits as Limits
from bertprep.stages.download.pretrained import PretrainedOptions as PretrainedOptions
from bertprep.stages.download.squad import SquadOptions as SquadOptions
from bertprep.stages.download.wikipedia import WikipediaOptions as WikipediaOptions
from bertprep.stages.finetune_data.glue import CreateGlueOptions as CreateGlueOptions
from bertprep.stages.finetune_data.squad import CreateSquadOptions as CreateSquadOptions
from bertprep.stages.inspect import InspectOptions as InspectOptions
from bertprep.stages.pack import PackOptions as PackOptions
from bertprep.stages.prepare import PrepareOptions as PrepareOptions
from bertprep.stages.shard import ShardOptions as ShardOptions
from bertprep.stages.tokenize import TokenizeOptions as TokenizeOptions
from bertprep.stages.validate import Report as Report
from bertprep.stages.validate import ValidateOptions as ValidateOptions
from bertprep.stages.vocab import VocabOptions as VocabOptions

__version__: str

def convert(
    options: ConvertOptions | None = None,
    /,
    *,
    src: str,
    dst: str,
    to: str,
) -> Summary: ...

def create(
    options: CreateOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: tuple[str, ...] | None = ...,
    vocab: str | None = ...,
    out: str | None = ...,
    corpus: str | None = ...,
    seq: int = ...,
    pred: int = ...,
    dupe_factor: int | None = ...,
    masking: str = ...,
    seed: int = ...,
    seed_per_shard: bool = ...,
    masked_lm_prob: float = ...,
    short_seq_prob: float = ...,
    whole_word_mask: bool = ...,
    lower_case: bool = ...,
    format: tuple[str, ...] | str | None = ...,
    layout: str = ...,
    min_parts: int = ...,
    eval_samples: int | None = ...,
    engine: EngineOptions = ...,
    workdir: str | None = ...,
) -> Summary: ...

def create_glue(
    options: CreateGlueOptions | None = None,
    /,
    *,
    quiet: bool = True,
    vocab: str,
    out: str,
    lower_case: bool = ...,
    format: tuple[str, ...] = ...,
    task: str,
    data_dir: str,
    split: tuple[str, ...] | None = ...,
    seq: int = ...,
) -> Summary: ...

def create_squad(
    options: CreateSquadOptions | None = None,
    /,
    *,
    quiet: bool = True,
    vocab: str,
    out: str,
    lower_case: bool = ...,
    format: tuple[str, ...] = ...,
    input: str,
    split: str | None = ...,
    doc_stride: int = ...,
    max_query: int = ...,
    seq: int = ...,
) -> Summary: ...

def dedup(
    options: DedupOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: tuple[str, ...] | None = ...,
    corpus: tuple[str, ...] | None = ...,
    out: str | None = ...,
    ngram: int = ...,
    num_perm: int = ...,
    threshold: float = ...,
    bands: int | None = ...,
    exact: bool = ...,
    near: bool = ...,
    decontaminate: tuple[str, ...] = ...,
    decontaminate_ngram: int = ...,
    report_only: bool = ...,
    dry_run: bool = ...,
    memory: int | str = ...,
    engine: EngineOptions = ...,
    workdir: str | None = ...,
) -> Summary: ...

@overload
def download(
    source: DownloadOptions,
    /,
    *,
    quiet: bool = True,
) -> Summary: ...
@overload
def download(
    source: Literal['wikipedia'],
    /,
    *,
    quiet: bool = True,
    workdir: str | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | None = ...,
    lang: str = ...,
    date: str = ...,
    dump: str | None = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['bookcorpus'],
    /,
    *,
    quiet: bool = True,
    workdir: str | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | None = ...,
    tarball: bool = ...,
    lines_per_document: int = ...,
    md5: str | None = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['squad'],
    /,
    *,
    quiet: bool = True,
    workdir: str | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | None = ...,
    squad_version: str = ...,
    from_hub: bool = ...,
    eval_base_url: str | None = ...,
    checksums: str | None = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['glue'],
    /,
    *,
    quiet: bool = True,
    workdir: str | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | None = ...,
    tasks: tuple[str, ...] | str = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['pretrained'],
    /,
    *,
    quiet: bool = True,
    workdir: str | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | None = ...,
    model: str,
    checksums: str | None = ...,
) -> Summary: ...

def inspect(
    options: InspectOptions | None = None,
    /,
    *,
    stream: typing.TextIO | None = None,
    file: str,
    vocab: str | None = ...,
    num: int = ...,
    skip: int = ...,
    json: bool = ...,
    epoch: int | None = ...,
) -> Summary: ...

def pack(
    options: PackOptions | None = None,
    /,
    *,
    quiet: bool = True,
    records_dir: str,
    max_per_pack: int = ...,
    out: str | None = ...,
    format: tuple[str, ...] | None = ...,
    engine: EngineOptions = ...,
) -> Summary: ...

def prepare(
    options: PrepareOptions | None = None,
    /,
    *,
    quiet: bool = True,
    run_stage: collections.abc.Callable[[str, collections.abc.Callable[[], Summary]], Summary] | None = None,
    sources: tuple[str, ...],
    vocab: str,
    configs: tuple[tuple[int, int], ...] | str = ...,
    lang: str = ...,
    dupe_factor: int = ...,
    train_shards: int = ...,
    test_shards: int = ...,
    layout: str = ...,
    engine: EngineOptions = ...,
    workdir: str | None = ...,
) -> Summary: ...

def shard(
    options: ShardOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: tuple[str, ...] | None = ...,
    out: str | None = ...,
    corpus: str | None = ...,
    train_shards: int = ...,
    test_shards: int = ...,
    balance: str = ...,
    test_fraction: float | None = ...,
    eval_documents: int | None = ...,
    eval_seed: int | None = ...,
    engine: EngineOptions = ...,
    workdir: str | None = ...,
) -> Summary: ...

def tokenize(
    options: TokenizeOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: tuple[str, ...] | None = ...,
    vocab: str | None = ...,
    out: str | None = ...,
    corpus: str | None = ...,
    format: str = ...,
    lower_case: bool = ...,
    engine: EngineOptions = ...,
    workdir: str | None = ...,
) -> Summary: ...

def validate(
    options: ValidateOptions | None = None,
    /,
    *,
    quiet: bool = True,
    paths: tuple[str, ...],
    vocab: str | None = ...,
    compare: bool = ...,
    plot: str | None = ...,
    max_errors: int = ...,
    workers: int | None = ...,
    min_parts: int = ...,
    masked_lm_prob: float | None = ...,
    whole_word_mask: bool | None = ...,
) -> Report: ...

def vocab(
    options: VocabOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: tuple[str, ...] = ...,
    corpus: tuple[str, ...] = ...,
    out: str | None = ...,
    vocab_size: int = ...,
    unused: int = ...,
    cased: bool = ...,
    workdir: str | None = ...,
) -> Summary: ...
