"""`bertprep download <source>`: Wikipedia, BookCorpus, SQuAD, GLUE or pretrained BERT weights.

Every download is atomic (a `.part` file renamed when verified), resumable
(HTTP Range), retried with backoff on transient errors, verified against
the size and checksum the source publishes, and recorded in
WORKDIR/download/<source>/manifest.json. Pretraining corpora (wikipedia,
bookcorpus) are also extracted into WORKDIR/formatted/<corpus>/, which
`bertprep shard` reads by default; SQuAD and GLUE are fine-tuning data laid
out as NVIDIA's scripts expect; pretrained weights are unpacked into
WORKDIR/download/pretrained/<model>/.
"""

import dataclasses
import importlib
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from bertprep import storage
from bertprep.errors import UsageError, redact
from bertprep.options import (
    build_options,
    check_types,
    errors_name_fields,
    normalise_paths,
    require_at_least,
    set_field,
)
from bertprep.progress import Progress, Summary
from bertprep.stages.download.http import Limits, check_url
from bertprep.workdir import resolve_workdir

# source -> (module, its options class, one-line help)
SOURCES = {
    "wikipedia": ("bertprep.stages.download.wikipedia", "WikipediaOptions",
                  "Wikipedia: the hub's wikimedia/wikipedia parquet, or --dump XML"),
    "bookcorpus": ("bertprep.stages.download.bookcorpus", "BookcorpusOptions",
                   "BookCorpus: the hub's parquet export, or --tarball"),
    "squad": ("bertprep.stages.download.squad", "SquadOptions",
              "SQuAD v1.1/v2.0 JSON (md5-checked) and evaluation scripts"),
    "glue": ("bertprep.stages.download.glue", "GlueOptions", "GLUE tasks from nyu-mll/glue as the original TSV files"),
    "pretrained": ("bertprep.stages.download.pretrained", "PretrainedOptions",
                   "Google's released BERT checkpoints (sha256-checked) or a hub model"),
}

# The sources whose text is extracted in parallel (format_parts, the dump's extract): `workers` is theirs alone.
EXTRACTING = ("wikipedia", "bookcorpus")
DEFAULT_WORKERS = os.cpu_count() or 1


@errors_name_fields
@dataclass(frozen=True, kw_only=True)
class DownloadOptions:
    """What every source takes: the work directory, parallel extraction `workers` (None: one per core where the
    source extracts, wikipedia and bookcorpus; any other value is refused by the others), the `limits` on one
    connection, and `base_url`, the source's host or hub endpoint (None: its environment variable or default).
    Each source's options (`WikipediaOptions`, ...) add its own flags."""

    source: ClassVar[str]
    workdir: str | None = None
    workers: int | None = None
    limits: Limits = Limits()
    base_url: str | None = None

    def __post_init__(self):
        check_types(self)
        normalise_paths(self, "workdir", outputs=("workdir",), folders=("workdir",))
        storage.check_schemes(self.workdir)
        if self.base_url is not None:
            check_url(self.base_url, "--base-url")
        self._check_workers()
        # every source's, the hub's too (their client takes its own limits): `download("glue",
        # limits=Limits(stall=-1))` was accepted where the command line's --stall-timeout -1 is refused
        self.limits.check()

    def __repr__(self):
        # A mirror's base_url may carry user:password@ or ?token= (download sends them, http.request): a caller's
        # log line or a traceback names the options as an error line would (errors.redact); the fields keep them.
        # Each source's options class is made with repr=False, so that this one is theirs too.
        fields = ", ".join(f"{field.name}={getattr(self, field.name)!r}" for field in dataclasses.fields(self)
                           if field.repr)
        return redact(f"{type(self).__qualname__}({fields})")

    def _check_workers(self):
        """Refuse a `workers` given where the source runs none, and set one per core where it extracts and none
        was given. "Not given" is None, not the core count: `SquadOptions(workers=2)` passed on a 2-core machine
        and was refused on an 8-core one (DownloadOptions itself has no source)."""
        source = getattr(self, "source", None)
        if self.workers is not None:
            require_at_least("--workers", self.workers, 1)  # 0 and -3 quietly ran one worker
            if source is not None:
                refuse_unused_workers(source, self.workers)
        elif source in EXTRACTING:
            set_field(self, "workers", DEFAULT_WORKERS)


def refuse_unused_workers(source, workers):
    """A UsageError where `source` runs no workers (squad, glue, pretrained: nothing to extract) and `workers` were
    given: `download squad --workers 8` was taken and read nowhere, without a word."""
    if source not in EXTRACTING:
        raise UsageError(f"--workers {workers}: download {source} has no text to extract and runs no workers (only "
                         f"{' and '.join(EXTRACTING)} do); leave it out")


def options_class(source):
    """The options class of a source name (`SOURCES`)."""
    if source not in SOURCES:
        raise UsageError(f"unknown download source {source!r}; known: {', '.join(SOURCES)}")
    module, name, _help = SOURCES[source]
    return getattr(importlib.import_module(module), name)


def check_store_workdir(options, workdir):
    """A bucket's --workdir takes the corpora the hub publishes as parquet; what is fetched over HTTP (dumps,
    tarballs, SQuAD, GLUE, checkpoints) resumes into local .part files and is read back as local files."""
    over_http = options.source not in ("wikipedia", "bookcorpus") or getattr(options, "dump", None) or \
        getattr(options, "tarball", False)
    if not storage.appends(workdir) and over_http:
        raise UsageError(f"{storage.display(workdir)}: download {options.source} with these flags writes a local "
                         "work directory only; give a local --workdir, or for a corpus its hub release (no --dump "
                         "or --tarball), then `bertprep shard --input` from there into the bucket")


def download(source: "str | DownloadOptions", /, *, quiet: bool = True, **fields: Any) -> Summary:
    """Download one source, `download("squad", workdir=...)` or `download(SquadOptions(...))`; the summary
    `--json` prints. `quiet=False` shows progress on stderr."""
    cls = type(source) if isinstance(source, DownloadOptions) else options_class(source)
    options = build_options(cls, source if isinstance(source, DownloadOptions) else None, fields)
    workdir = resolve_workdir(options.workdir)
    check_store_workdir(options, workdir)
    storage.check_reachable(workdir)  # a missing bucket: its line before the hub is asked, not after a download
    progress = Progress(f"download {options.source}", unit="files", quiet=quiet)
    summary, rows = importlib.import_module(SOURCES[options.source][0]).run(options, workdir, progress)
    progress.close()
    summary["workdir"] = storage.display(workdir)
    return Summary(f"bertprep download {options.source}: done", summary,
                   rows=[*rows, ("workdir", storage.display(workdir))])
