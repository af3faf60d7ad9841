"""BookCorpus: the hub's parquet export of `bookcorpus/bookcorpus` (revision
`refs/convert/parquet`, one `text` line per row), or with `--tarball` the
original `bookcorpus.tar.bz2` (books_large_p1.txt, books_large_p2.txt).

That release has no book boundaries: it is ~74 million sentences in book
order. Documents are therefore pseudo-documents of `--lines-per-document`
consecutive lines (default 500, about 7,000 words — the order of a chapter),
counted from the start of each source file, so the grouping is
deterministic and independent of how the work is split. A document never
mixes two files. What this loses against real book boundaries: a few
next-sentence pairs across a chunk boundary, and random "next" sentences
that may come from the same book.
"""

import os
import tarfile
from dataclasses import dataclass
from typing import ClassVar

from bertprep import storage
from bertprep.atomic import hold
from bertprep.errors import DataError, UsageError
from bertprep.options import errors_name_fields
from bertprep.stages.download import DownloadOptions
from bertprep.stages.download.formatted import corpus_dir, format_parts, save_parts_manifest, write_part
from bertprep.stages.download.http import SourceDownloads, join_url, mirror_base
from bertprep.stages.download.hub import hub_snapshot, iter_parquet_rows
from bertprep.stages.download.wikipedia import hub_manifest

REPO = "bookcorpus/bookcorpus"
REVISION = "refs/convert/parquet"
CORPUS = "bookcorpus"
TARBALL = "bookcorpus.tar.bz2"
TARBALL_MD5 = "5c906ede3c5265f8934b62c275a754bc"
DEFAULT_TARBALL_URL = "https://storage.googleapis.com/huggingface-nlp/datasets/bookcorpus"
TARBALL_URL_ENV = "BERTPREP_BOOKCORPUS_URL"
DEFAULT_LINES_PER_DOCUMENT = 500


@errors_name_fields
@dataclass(frozen=True, kw_only=True, repr=False)  # DownloadOptions.__repr__: no secrets
class BookcorpusOptions(DownloadOptions):
    """The hub's parquet export, or with `tarball` the original bookcorpus.tar.bz2 (`md5` for a mirror that
    repacked it); `base_url` is the hub endpoint, with `tarball` the directory holding it
    ($BERTPREP_BOOKCORPUS_URL or Google's). `lines_per_document`: lines per pseudo-document."""

    source: ClassVar[str] = "bookcorpus"
    tarball: bool = False
    lines_per_document: int = DEFAULT_LINES_PER_DOCUMENT
    md5: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.lines_per_document < 1:
            raise UsageError("--lines-per-document must be at least 1")


def group_lines(lines, per_document, name):
    """Consecutive lines -> pseudo-documents {"id", "title", "text"}."""
    buffer, start = [], 0
    for number, line in enumerate(lines):
        line = line.strip()
        if line:
            buffer.append(line)
        if (number + 1) % per_document == 0:
            yield {"id": f"{name}:{start}", "title": f"{name} lines {start}-{number}", "text": "\n".join(buffer)}
            buffer, start = [], number + 1
    if buffer:
        yield {"id": f"{name}:{start}", "title": f"{name} lines {start}-", "text": "\n".join(buffer)}


def _parquet_documents(local, path, per_document):
    return lambda: group_lines((row["text"] or "" for row in iter_parquet_rows(local, ["text"])), per_document, path)


def tarball_documents(path, per_document):
    """Stream the text members of the tarball (never unpacked to disk) as pseudo-documents."""
    try:
        with tarfile.open(path, "r|bz2") as archive:
            for member in archive:
                if member.isfile() and member.name.endswith(".txt"):
                    lines = (raw.decode("utf-8", errors="replace") for raw in archive.extractfile(member))
                    yield from group_lines(lines, per_document, os.path.basename(member.name))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{path}: corrupt archive ({exc})") from None


def run(options, workdir, progress):
    per_document = options.lines_per_document
    directory = corpus_dir(workdir, CORPUS)
    if options.tarball:
        url = join_url(mirror_base(options.base_url, TARBALL_URL_ENV, DEFAULT_TARBALL_URL), TARBALL)
        md5 = (options.md5 or TARBALL_MD5).lower()
        downloads = SourceDownloads(os.path.join(workdir, "download", "bookcorpus"), "bookcorpus", progress,
                                    options.limits)
        entry = downloads.get(url, TARBALL, checksums={"md5": md5})
        source = {"tarball": TARBALL, "md5": md5, "lines_per_document": per_document}
        with hold(directory, "bertprep download") as staging:
            manifest = save_parts_manifest(directory, CORPUS, source, None)
            if manifest is None:
                stats = write_part(os.path.join(directory, "bookcorpus-tarball.jsonl"),
                                   tarball_documents(downloads.path(TARBALL), per_document), staging)
                manifest = save_parts_manifest(directory, CORPUS, source, {"bookcorpus-tarball.jsonl": stats})
        what = (TARBALL, f"{entry['bytes']:,} bytes, md5 verified")
    else:
        commit, files = hub_snapshot(REPO, REVISION, ["plain_text/*.parquet"], options.base_url, progress.quiet,
                                     options.limits)
        hub_manifest(workdir, "bookcorpus", REPO, REVISION, commit, files, progress)
        parts = [(path[: -len(".parquet")].replace("/", "-"), f"{info['sha256']}/{per_document}",
                  _parquet_documents(local, path, per_document)) for path, local, info in files]
        source = {"repo": REPO, "revision": REVISION, "commit": commit, "lines_per_document": per_document}
        manifest = format_parts(workdir, CORPUS, source, parts, options.workers, progress)
        size = sum(info["bytes"] for _p, _l, info in files)
        what = (f"{REPO}@{REVISION}", f"{len(files)} parquet files, {size:,} bytes, sha256 verified")
    documents = sum(f["documents"] for f in manifest["files"].values())
    shown = storage.display(directory)
    rows = [what, ("formatted", f"{shown} ({documents:,} pseudo-documents of {per_document} lines)")]
    return {"source": "bookcorpus", "corpus": CORPUS, "documents": documents, "formatted": shown}, rows
