"""Wikipedia: the hub's parquet release `wikimedia/wikipedia` (config
`<date>.<lang>`, columns id, url, title, text), or with `--dump` the XML dump
(`wikidump`). Either way the result is the formatted corpus
WORKDIR/formatted/wikicorpus_<lang>/ (NVIDIA's corpus name).
"""

import os

from bertprep.errors import UsageError
from bertprep.stages.download.formatted import corpus_dir, format_parts
from bertprep.stages.download.http import SourceDownloads
from bertprep.stages.download.hub import hub_snapshot, iter_parquet_rows

REPO = "wikimedia/wikipedia"
DEFAULT_DATE = "20231101"


def add_arguments(parser):
    parser.add_argument("--lang", default="en", help="language code (default: en)")
    parser.add_argument("--date", default=DEFAULT_DATE, help=f"hub release date (default: {DEFAULT_DATE})")
    parser.add_argument("--dump", metavar="latest|YYYYMMDD",
                        help="download this XML dump from the Wikimedia dump site instead of the hub's parquet release")
    parser.add_argument("--base-url", help="hub endpoint (default: $HF_ENDPOINT or https://huggingface.co); with --dump, "
                                           "the dump site (default: $BERTPREP_WIKIDUMP_URL or https://dumps.wikimedia.org)")


def _documents(local):
    return lambda: iter_parquet_rows(local, ["id", "title", "text"])


def run(args, workdir, progress):
    if args.dump:
        try:
            from bertprep.stages.download import wikidump
        except ModuleNotFoundError as exc:
            if exc.name != "mwparserfromhell":
                raise
            raise UsageError('--dump needs mwparserfromhell to strip wiki markup: pip install "bertprep[download]"') from None
        return wikidump.run(args, workdir, progress)
    config = f"{args.date}.{args.lang}"
    commit, files = hub_snapshot(REPO, "main", [f"{config}/*.parquet"], args.base_url, args.quiet)
    hub_manifest(workdir, "wikipedia", REPO, "main", commit, files, progress)
    corpus = f"wikicorpus_{args.lang}"
    parts = [(path[: -len(".parquet")].replace("/", "-"), info["sha256"], _documents(local)) for path, local, info in files]
    manifest = format_parts(workdir, corpus, {"repo": REPO, "config": config, "commit": commit}, parts, args.workers, progress)
    documents = sum(f["documents"] for f in manifest["files"].values())
    size = sum(info["bytes"] for _p, _l, info in files)
    rows = [(f"{REPO} {config}", f"{len(files)} parquet files, {size:,} bytes, sha256 verified (commit {commit[:12]})"),
            ("formatted", f"{corpus_dir(workdir, corpus)} ({documents:,} documents)")]
    return {"source": "wikipedia", "repo": REPO, "config": config, "commit": commit, "corpus": corpus,
            "documents": documents, "parquet_bytes": size}, rows


def hub_manifest(workdir, source, repo, revision, commit, files, progress):
    """Record the verified hub files (kept in the hub cache) in WORKDIR/download/<source>/manifest.json."""
    downloads = SourceDownloads(os.path.join(workdir, "download", source), source, progress)
    downloads.manifest["files"] = {
        path: {"repo": repo, "commit": commit, "bytes": info["bytes"], "sha256": info["sha256"],
               "cached_at": os.path.realpath(local), "verified": ["size", "sha256"]}
        for path, local, info in files
    }
    downloads.set_info(repo=repo, revision=revision, commit=commit)
    return downloads
