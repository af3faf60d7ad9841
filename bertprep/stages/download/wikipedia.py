"""Wikipedia: the hub's parquet release `wikimedia/wikipedia` (config
`<date>.<lang>`, columns id, url, title, text), or with `--dump` the XML dump
(`wikidump`). Either way the result is the formatted corpus
WORKDIR/formatted/wikicorpus_<lang>/ (NVIDIA's corpus name).
"""

import os
import re
from dataclasses import dataclass
from typing import ClassVar

from bertprep import storage
from bertprep.errors import UsageError
from bertprep.options import errors_name_fields
from bertprep.stages.download import DownloadOptions
from bertprep.stages.download.formatted import corpus_dir, format_parts
from bertprep.stages.download.http import SourceDownloads
from bertprep.stages.download.hub import hub_snapshot, iter_parquet_rows

REPO = "wikimedia/wikipedia"
DEFAULT_DATE = "20231101"
DATE = re.compile(r"\d{8}")
LANG = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


@errors_name_fields
@dataclass(frozen=True, kw_only=True, repr=False)  # DownloadOptions.__repr__: no secrets
class WikipediaOptions(DownloadOptions):
    """`lang` from the hub release of `date`, or with `dump` ('latest' or YYYYMMDD) the XML dump; `base_url` is
    the hub endpoint, with `dump` the dump site ($BERTPREP_WIKIDUMP_URL or https://dumps.wikimedia.org)."""

    source: ClassVar[str] = "wikipedia"
    lang: str = "en"
    date: str = DEFAULT_DATE
    dump: str | None = None

    def __post_init__(self):
        super().__post_init__()
        check_lang(self.lang)
        if not _matches(DATE, self.date):  # part of a glob of the hub's file names
            raise UsageError(f"--date: expected a hub release date YYYYMMDD such as {DEFAULT_DATE}, got {self.date!r}")
        if self.dump is not None and not (self.dump == "latest" or _matches(DATE, self.dump)):
            raise UsageError(f"--dump: expected 'latest' or a date YYYYMMDD, got {self.dump!r}")


def _matches(pattern, value):
    return isinstance(value, str) and pattern.fullmatch(value) is not None  # a str field takes a PathLike too


def check_lang(lang):
    """A UsageError unless `lang` is a Wikipedia language code (en, zh-min-nan, be-x-old, roa_rup): it is part
    of the hub's and the dump site's paths and of the corpus directory `wikicorpus_<lang>`, where
    'en/../../x' wrote outside the work directory."""
    if not _matches(LANG, lang):
        raise UsageError(f"--lang: expected a Wikipedia language code (lowercase letters and digits, joined by "
                         f"'-' or '_', such as en or zh-min-nan), got {lang!r}")


def _documents(local):
    return lambda: iter_parquet_rows(local, ["id", "title", "text"])


def run(options, workdir, progress):
    if options.dump:
        try:
            from bertprep.stages.download import wikidump
        except ModuleNotFoundError as exc:
            if exc.name != "mwparserfromhell":
                raise
            raise UsageError('--dump needs mwparserfromhell to strip wiki markup: pip install '
                             '"bertprep[download]"') from None
        return wikidump.run(options, workdir, progress)
    config = f"{options.date}.{options.lang}"
    commit, files = hub_snapshot(REPO, "main", [f"{config}/*.parquet"], options.base_url, progress.quiet,
                                 options.limits)
    hub_manifest(workdir, "wikipedia", REPO, "main", commit, files, progress)
    corpus = f"wikicorpus_{options.lang}"
    parts = [(path[: -len(".parquet")].replace("/", "-"), info["sha256"], _documents(local))
             for path, local, info in files]
    manifest = format_parts(workdir, corpus, {"repo": REPO, "config": config, "commit": commit}, parts, options.workers,
                            progress)
    documents = sum(f["documents"] for f in manifest["files"].values())
    size = sum(info["bytes"] for _p, _l, info in files)
    rows = [(f"{REPO} {config}", f"{len(files)} parquet files, {size:,} bytes, sha256 verified (commit {commit[:12]})"),
            ("formatted", f"{storage.display(corpus_dir(workdir, corpus))} ({documents:,} documents)")]
    return {"source": "wikipedia", "repo": REPO, "config": config, "commit": commit, "corpus": corpus,
            "documents": documents, "parquet_bytes": size}, rows


def hub_manifest(workdir, source, repo, revision, commit, files, progress):
    """Record the verified hub files (kept in the hub cache) in WORKDIR/download/<source>/manifest.json."""
    downloads = SourceDownloads(storage.join(workdir, "download", source), source, progress)
    downloads.manifest["files"] = {
        path: {"repo": repo, "commit": commit, "bytes": info["bytes"], "sha256": info["sha256"],
               "cached_at": os.path.realpath(local), "verified": ["size", "sha256"]}
        for path, local, info in files
    }
    downloads.set_info(repo=repo, revision=revision, commit=commit)
    return downloads
