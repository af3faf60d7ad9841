"""SQuAD v1.1 / v2.0 in the layout NVIDIA's scripts expect.

    WORKDIR/download/squad/v1.1/{train-v1.1.json, dev-v1.1.json, evaluate-v1.1.py}
    WORKDIR/download/squad/v2.0/{train-v2.0.json, dev-v2.0.json, evaluate-v2.0.py}

The JSON files come from the SQuAD site, checked against their md5
(docs/reference-facts.md, "Sources: SQuAD files"), or with `--from-hub`
from `rajpurkar/squad` / `rajpurkar/squad_v2`, rebuilt into the same JSON
structure. Either way the example counts are
checked against the published ones. The evaluation scripts have no published
checksum; they are fetched if reachable and recorded as unverified.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from typing import ClassVar

from bertprep.atomic import atomic_write_bytes, hold
from bertprep.errors import DataError, UsageError
from bertprep.options import errors_name_fields, normalise_paths
from bertprep.stages.download import DownloadOptions
from bertprep.stages.download.http import SourceDownloads, check_url, fetch, join_url, mirror_base, read_checksum_list
from bertprep.stages.download.hub import hub_snapshot, iter_parquet_rows

DEFAULT_BASE_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
DEFAULT_EVAL_BASE_URL = "https://worksheets.codalab.org/rest/bundles"
BASE_URL_ENV = "BERTPREP_SQUAD_URL"
EVAL_BASE_URL_ENV = "BERTPREP_SQUAD_EVAL_URL"

# version -> [(split, file name, md5 of the original, examples)]
FILES = {
    "1.1": [
        ("train", "train-v1.1.json", "981b29407e0affa3b1b156f72073b945", 87_599),
        ("dev", "dev-v1.1.json", "3e85deb501d4e538b6bc56f786231552", 10_570),
    ],
    "2.0": [
        ("train", "train-v2.0.json", "62108c273c268d70893182d5cf8df740", 130_319),
        ("dev", "dev-v2.0.json", "246adae8b7002f8679c027697b0b7cf8", 11_873),
    ],
}
# The official evaluation scripts, as NVIDIA's SquadDownloader fetches them (CodaLab bundles).
EVAL_SCRIPTS = {
    "1.1": ("0xbcd57bee090b421c982906709c8c27e1", "evaluate-v1.1.py"),
    "2.0": ("0x6b567e1cf2e041ec80d7098f031c5c9e", "evaluate-v2.0.py"),
}
HUB_REPOS = {"1.1": ("rajpurkar/squad", "plain_text"), "2.0": ("rajpurkar/squad_v2", "squad_v2")}
HUB_SPLITS = {"train": "train", "dev": "validation"}
VERSIONS = ("1.1", "2.0", "all")


@errors_name_fields
@dataclass(frozen=True, kw_only=True, repr=False)  # DownloadOptions.__repr__: no secrets
class SquadOptions(DownloadOptions):
    """`squad_version` '1.1', '2.0' or 'all' from the SQuAD site (`base_url`: $BERTPREP_SQUAD_URL or the site),
    md5-checked (`checksums`: an md5sum-style list replacing the built-in md5s), with the evaluation scripts
    from `eval_base_url`; or with `from_hub` rebuilt from rajpurkar/squad[_v2] (`base_url`: the hub endpoint)."""

    source: ClassVar[str] = "squad"
    squad_version: str = "all"
    from_hub: bool = False
    eval_base_url: str | None = None
    checksums: str | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"squad_version": VERSIONS}  # check_types
    flag_fields: ClassVar[dict[str, str]] = {"version": "squad_version"}  # options.python_field_names

    def __post_init__(self):
        super().__post_init__()
        normalise_paths(self, "checksums")
        if self.eval_base_url is not None:
            check_url(self.eval_base_url, "--eval-base-url")
        if self.squad_version not in VERSIONS:
            raise UsageError(f"--version must be one of {', '.join(VERSIONS)}, not {self.squad_version!r}")


def count_examples(path):
    """Number of questions in a SQuAD JSON file; DataError if it is not SQuAD JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return sum(len(p["qas"]) for article in data["data"] for p in article["paragraphs"])
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not SQuAD JSON ({exc.__class__.__name__}: {exc})") from None


def run(options, workdir, progress):
    directory = os.path.join(workdir, "download", "squad")
    # held, as the other sources are: two runs into one workdir appended to one .part and left a file that
    # the manifest called verified
    with hold(directory, "bertprep download squad"):
        return _download(options, directory, progress)


def _download(options, directory, progress):
    versions = ["1.1", "2.0"] if options.squad_version == "all" else [options.squad_version]
    downloads = SourceDownloads(directory, "squad", progress, options.limits)
    md5s = read_checksum_list(options.checksums, "md5") if options.checksums else {}
    rows, warnings = [], []
    for version in versions:
        for split, name, md5, examples in FILES[version]:
            relpath = f"v{version}/{name}"
            if options.from_hub:
                entry = _from_hub(downloads, version, split, relpath, options.base_url, progress.quiet)
            else:
                url = join_url(mirror_base(options.base_url, BASE_URL_ENV, DEFAULT_BASE_URL), name)
                entry = downloads.get(url, relpath, checksums={"md5": md5s.get(name, md5)})
            _check_examples(downloads, relpath, entry, examples)
            rows.append((relpath, f"{entry['examples']:,} examples"))
        if not options.from_hub:
            row, warning = _eval_script(downloads, version, options.eval_base_url, progress)
            rows.append(row)
            warnings += [warning] if warning else []
    summary = {"source": "squad", "directory": downloads.directory, "files": downloads.manifest["files"]}
    if warnings:  # absent otherwise: today's --json; said to a --quiet --json run too
        summary["warnings"] = warnings
        rows += [("warning", warning) for warning in warnings]
    return summary, rows


def _check_examples(downloads, relpath, entry, expected):
    if "examples" not in entry:
        entry["examples"] = count_examples(downloads.path(relpath))
        downloads.record(relpath, entry)
    if entry["examples"] != expected:
        os.unlink(downloads.path(relpath))
        downloads.forget(relpath)
        raise DataError(f"{downloads.path(relpath)}: {entry['examples']:,} examples, expected {expected:,}; the file "
                        "was deleted")


def _eval_script(downloads, version, eval_base_url, progress):
    bundle, name = EVAL_SCRIPTS[version]
    base = mirror_base(eval_base_url, EVAL_BASE_URL_ENV, DEFAULT_EVAL_BASE_URL)
    relpath = f"v{version}/{name}"
    url = join_url(base, bundle, "contents", "blob", "")
    """((relpath, what), a warning or None): the script is unpublished-checksum extra, so a failure to fetch it
    is a warning in the summary, not an error."""
    if downloads.is_complete(relpath, url):
        return (relpath, "evaluation script (no published checksum)"), None
    try:
        fetched = fetch(url, downloads.path(relpath), progress=progress, retries=2, limits=downloads.limits)
        _check_python(downloads.path(relpath))
    except DataError as exc:
        return (relpath, "evaluation script not fetched (skipped)"), \
            f"{relpath}: not fetched ({exc}); SQuAD data is complete without it"
    downloads.record(relpath, {"url": url, "bytes": fetched.bytes, "sha256": fetched.sha256, "verified": []})
    return (relpath, "evaluation script (no published checksum)"), None


def _check_python(path):
    """A DataError, the file removed, unless it is Python source: with no checksum published, a mirror's error
    page served with 200 (HTML) was kept as evaluate-v1.1.py."""
    try:
        with open(path, "rb") as f:
            compile(f.read(), path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        os.unlink(path)
        raise DataError(f"not Python source ({type(exc).__name__}: {exc.msg if isinstance(exc, SyntaxError) else exc}"
                        "; an error page?), removed") from None


def _from_hub(downloads, version, split, relpath, endpoint, quiet):
    repo, config = HUB_REPOS[version]
    commit, files = hub_snapshot(repo, "main", [f"{config}/{HUB_SPLITS[split]}-*.parquet"], endpoint, quiet,
                                 downloads.limits)
    sources = {path: info["sha256"] for path, _local, info in files}
    entry = downloads.manifest["files"].get(relpath)
    if entry and entry.get("hub_files") == sources and os.path.exists(downloads.path(relpath)):
        return entry
    data = squad_json_from_rows(
        (row for _path, local, _info in files
         for row in iter_parquet_rows(local, ["id", "title", "context", "question", "answers"])),
        version,
    )
    payload = json.dumps(data, ensure_ascii=False).encode("utf-8")
    atomic_write_bytes(downloads.path(relpath), payload)
    examples = sum(len(p["qas"]) for article in data["data"] for p in article["paragraphs"])
    entry = {"repo": repo, "commit": commit, "hub_files": sources, "bytes": len(payload), "examples": examples,
             "sha256": hashlib.sha256(payload).hexdigest(), "verified": ["hub sha256"]}
    downloads.record(relpath, entry)
    return entry


def squad_json_from_rows(rows, version):
    """Rebuild SQuAD's nested JSON (articles -> paragraphs -> qas) from the hub's flat rows, in order."""
    articles = []
    for row in rows:
        if not articles or articles[-1]["title"] != row["title"]:
            articles.append({"title": row["title"], "paragraphs": []})
        paragraphs = articles[-1]["paragraphs"]
        if not paragraphs or paragraphs[-1]["context"] != row["context"]:
            paragraphs.append({"context": row["context"], "qas": []})
        answers = [{"text": t, "answer_start": s}
                   for t, s in zip(row["answers"]["text"], row["answers"]["answer_start"])]
        qa = {"answers": answers, "question": row["question"], "id": row["id"]}
        if version == "2.0":
            qa["is_impossible"] = not answers
        paragraphs[-1]["qas"].append(qa)
    return {"version": "v2.0" if version == "2.0" else "1.1", "data": articles}
