"""bertprep's public names for type checkers and IDEs. Written by scripts/write_api_stubs.py: do not edit."""

import collections.abc
import os
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
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    to: str,
) -> Summary: ...

def create(
    options: CreateOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = ...,
    vocab: str | os.PathLike[str] | None = ...,
    out: str | os.PathLike[str] | None = ...,
    corpus: str | os.PathLike[str] | None = ...,
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
    format: collections.abc.Sequence[str] | str | None = ...,
    layout: str = ...,
    min_parts: int = ...,
    eval_samples: int | None = ...,
    engine: EngineOptions = ...,
    workdir: str | os.PathLike[str] | None = ...,
) -> Summary: ...

def create_glue(
    options: CreateGlueOptions | None = None,
    /,
    *,
    quiet: bool = True,
    vocab: str | os.PathLike[str],
    out: str | os.PathLike[str],
    lower_case: bool = ...,
    format: collections.abc.Sequence[str] | str = ...,
    task: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    split: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = ...,
    seq: int = ...,
) -> Summary: ...

def create_squad(
    options: CreateSquadOptions | None = None,
    /,
    *,
    quiet: bool = True,
    vocab: str | os.PathLike[str],
    out: str | os.PathLike[str],
    lower_case: bool = ...,
    format: collections.abc.Sequence[str] | str = ...,
    input: str | os.PathLike[str],
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
    input: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = ...,
    corpus: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = ...,
    out: str | os.PathLike[str] | None = ...,
    ngram: int = ...,
    num_perm: int = ...,
    threshold: float = ...,
    bands: int | None = ...,
    exact: bool = ...,
    near: bool = ...,
    decontaminate: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = ...,
    decontaminate_ngram: int = ...,
    report_only: bool = ...,
    dry_run: bool = ...,
    memory: int | str = ...,
    engine: EngineOptions = ...,
    workdir: str | os.PathLike[str] | None = ...,
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
    workdir: str | os.PathLike[str] | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | os.PathLike[str] | None = ...,
    lang: str | os.PathLike[str] = ...,
    date: str | os.PathLike[str] = ...,
    dump: str | os.PathLike[str] | None = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['bookcorpus'],
    /,
    *,
    quiet: bool = True,
    workdir: str | os.PathLike[str] | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | os.PathLike[str] | None = ...,
    tarball: bool = ...,
    lines_per_document: int = ...,
    md5: str | os.PathLike[str] | None = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['squad'],
    /,
    *,
    quiet: bool = True,
    workdir: str | os.PathLike[str] | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | os.PathLike[str] | None = ...,
    squad_version: str = ...,
    from_hub: bool = ...,
    eval_base_url: str | os.PathLike[str] | None = ...,
    checksums: str | os.PathLike[str] | None = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['glue'],
    /,
    *,
    quiet: bool = True,
    workdir: str | os.PathLike[str] | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | os.PathLike[str] | None = ...,
    tasks: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = ...,
) -> Summary: ...
@overload
def download(
    source: Literal['pretrained'],
    /,
    *,
    quiet: bool = True,
    workdir: str | os.PathLike[str] | None = ...,
    workers: int | None = ...,
    limits: Limits = ...,
    base_url: str | os.PathLike[str] | None = ...,
    model: str | os.PathLike[str],
    checksums: str | os.PathLike[str] | None = ...,
) -> Summary: ...

def inspect(
    options: InspectOptions | None = None,
    /,
    *,
    stream: typing.TextIO | None = None,
    file: str | os.PathLike[str],
    vocab: str | os.PathLike[str] | None = ...,
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
    records_dir: str | os.PathLike[str],
    max_per_pack: int = ...,
    out: str | os.PathLike[str] | None = ...,
    format: collections.abc.Sequence[str] | str | None = ...,
    engine: EngineOptions = ...,
) -> Summary: ...

def prepare(
    options: PrepareOptions | None = None,
    /,
    *,
    quiet: bool = True,
    run_stage: collections.abc.Callable[[str, collections.abc.Callable[[], Summary]], Summary] | None = None,
    sources: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    vocab: str | os.PathLike[str],
    configs: collections.abc.Sequence[tuple[int, int]] | str | os.PathLike[str] = ...,
    lang: str | os.PathLike[str] = ...,
    dupe_factor: int = ...,
    train_shards: int = ...,
    test_shards: int = ...,
    layout: str = ...,
    engine: EngineOptions = ...,
    workdir: str | os.PathLike[str] | None = ...,
) -> Summary: ...

def shard(
    options: ShardOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = ...,
    out: str | os.PathLike[str] | None = ...,
    corpus: str | os.PathLike[str] | None = ...,
    train_shards: int = ...,
    test_shards: int = ...,
    balance: str = ...,
    test_fraction: float | None = ...,
    eval_documents: int | None = ...,
    eval_seed: int | None = ...,
    engine: EngineOptions = ...,
    workdir: str | os.PathLike[str] | None = ...,
) -> Summary: ...

def tokenize(
    options: TokenizeOptions | None = None,
    /,
    *,
    quiet: bool = True,
    input: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] | None = ...,
    vocab: str | os.PathLike[str] | None = ...,
    out: str | os.PathLike[str] | None = ...,
    corpus: str | os.PathLike[str] | None = ...,
    format: str = ...,
    lower_case: bool = ...,
    engine: EngineOptions = ...,
    workdir: str | os.PathLike[str] | None = ...,
) -> Summary: ...

def validate(
    options: ValidateOptions | None = None,
    /,
    *,
    quiet: bool = True,
    paths: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    vocab: str | os.PathLike[str] | None = ...,
    compare: bool = ...,
    plot: str | os.PathLike[str] | None = ...,
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
    input: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = ...,
    corpus: collections.abc.Sequence[str | os.PathLike[str]] | str | os.PathLike[str] = ...,
    out: str | os.PathLike[str] | None = ...,
    vocab_size: int = ...,
    unused: int = ...,
    cased: bool = ...,
    workdir: str | os.PathLike[str] | None = ...,
) -> Summary: ...
