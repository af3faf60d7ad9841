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

from bertprep.atomic import hold
from bertprep.stages.download.formatted import corpus_dir, format_parts, save_parts_manifest, write_part
from bertprep.stages.download.http import SourceDownloads, limits_from
from bertprep.stages.download.hub import hub_snapshot, iter_parquet_rows
from bertprep.stages.download.wikipedia import hub_manifest
from bertprep.errors import DataError, UsageError

REPO = "bookcorpus/bookcorpus"
REVISION = "refs/convert/parquet"
CORPUS = "bookcorpus"
TARBALL = "bookcorpus.tar.bz2"
TARBALL_MD5 = "5c906ede3c5265f8934b62c275a754bc"
DEFAULT_TARBALL_URL = "https://storage.googleapis.com/huggingface-nlp/datasets/bookcorpus"
TARBALL_URL_ENV = "BERTPREP_BOOKCORPUS_URL"
DEFAULT_LINES_PER_DOCUMENT = 500


def add_arguments(parser):
    parser.add_argument("--tarball", action="store_true", help=f"download the original {TARBALL} instead of the hub's parquet export")
    parser.add_argument("--lines-per-document", type=int, default=DEFAULT_LINES_PER_DOCUMENT,
                        help=f"lines per pseudo-document (default: {DEFAULT_LINES_PER_DOCUMENT}; the release has no book boundaries)")
    parser.add_argument("--base-url", help=f"hub endpoint (default: $HF_ENDPOINT); with --tarball, the directory holding "
                                           f"{TARBALL} (default: ${TARBALL_URL_ENV} or {DEFAULT_TARBALL_URL})")
    parser.add_argument("--md5", help=f"md5 of the tarball at a mirror that repacked it (default: the original's, {TARBALL_MD5})")


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


def run(args, workdir, progress):
    if args.lines_per_document < 1:
        raise UsageError("--lines-per-document must be at least 1")
    directory = corpus_dir(workdir, CORPUS)
    if args.tarball:
        base = (args.base_url or os.environ.get(TARBALL_URL_ENV) or DEFAULT_TARBALL_URL).rstrip("/")
        md5 = (args.md5 or TARBALL_MD5).lower()
        downloads = SourceDownloads(os.path.join(workdir, "download", "bookcorpus"), "bookcorpus", progress,
                                    limits_from(args))
        entry = downloads.get(f"{base}/{TARBALL}", TARBALL, checksums={"md5": md5})
        source = {"tarball": TARBALL, "md5": md5, "lines_per_document": args.lines_per_document}
        with hold(directory, "bertprep download") as staging:
            manifest = save_parts_manifest(directory, CORPUS, source, None)
            if manifest is None:
                stats = write_part(os.path.join(directory, "bookcorpus-tarball.jsonl"),
                                   tarball_documents(downloads.path(TARBALL), args.lines_per_document), staging)
                manifest = save_parts_manifest(directory, CORPUS, source, {"bookcorpus-tarball.jsonl": stats})
        what = (TARBALL, f"{entry['bytes']:,} bytes, md5 verified")
    else:
        commit, files = hub_snapshot(REPO, REVISION, ["plain_text/*.parquet"], args.base_url, args.quiet)
        hub_manifest(workdir, "bookcorpus", REPO, REVISION, commit, files, progress)
        parts = [(path[: -len(".parquet")].replace("/", "-"), f"{info['sha256']}/{args.lines_per_document}",
                  _parquet_documents(local, path, args.lines_per_document)) for path, local, info in files]
        source = {"repo": REPO, "revision": REVISION, "commit": commit, "lines_per_document": args.lines_per_document}
        manifest = format_parts(workdir, CORPUS, source, parts, args.workers, progress)
        size = sum(info["bytes"] for _p, _l, info in files)
        what = (f"{REPO}@{REVISION}", f"{len(files)} parquet files, {size:,} bytes, sha256 verified")
    documents = sum(f["documents"] for f in manifest["files"].values())
    rows = [what, ("formatted", f"{directory} ({documents:,} pseudo-documents of {args.lines_per_document} lines)")]
    return {"source": "bookcorpus", "corpus": CORPUS, "documents": documents, "formatted": directory}, rows
