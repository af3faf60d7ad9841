"""Pretrained BERT weights: Google's released checkpoints, or a model from the Hugging Face hub.

    WORKDIR/download/pretrained/<release>/{bert_config.json, bert_model.ckpt.*, vocab.txt}
    WORKDIR/download/pretrained/<hub id, "/" as "--">/{config.json, model.safetensors, vocab.txt}

A Google release (`uncased_L-12_H-768_A-12`, ...) is the zip google-research/bert
publishes, fetched resumably (`.part` + HTTP Range), unpacked into a staging
directory, each unpacked file checked against the sha256 NVIDIA's
`GooglePretrainedWeightDownloader.py` pins for it, and only then renamed to
`<release>/`; the zip is deleted once its files are in place. Google
publishes no size or checksum for the zips themselves, so the zip is
verified through its unpacked files (and the zip's own CRCs). The two
whole-word-masking releases are not in NVIDIA's table: nothing pins their
files, and the manifest says so (`"verified": []`).

Any other `--model` that is not shaped like a release name is a hub model id,
fetched with `huggingface_hub` (its cache; HF_ENDPOINT, HF_HOME,
HF_HUB_OFFLINE) and checked against the hub's checksum, which the cache keeps
as each blob's name: sha256 for LFS files, the git blob sha1 for small ones.
"""

import functools
import hashlib
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from typing import ClassVar

from bertprep.atomic import atomic_dir, hold, sha256_file
from bertprep.bert_config import BertConfig
from bertprep.errors import DataError, UsageError, redact
from bertprep.options import errors_name_fields, normalise_paths
from bertprep.stages.download import DownloadOptions
from bertprep.stages.download.http import (
    CHUNK,
    SourceDownloads,
    file_page_note,
    join_url,
    mirror_base,
    read_checksum_list,
)
from bertprep.stages.download.hub import (
    SHA256_HEX,
    _first_line,
    _remove_cached,
    bounded_hub,
    check_endpoint,
    damaged_copy_error,
    hub_failure,
)

DEFAULT_BASE_URL = "https://storage.googleapis.com/bert_models"
BASE_URL_ENV = "BERTPREP_PRETRAINED_URL"
CONFIG, VOCAB, INDEX, DATA, META = (
    "bert_config.json", "vocab.txt", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
    "bert_model.ckpt.meta",
)
RELEASE_FILES = (CONFIG, DATA, INDEX, META, VOCAB)
REQUIRED_FILES = (CONFIG, DATA, INDEX, VOCAB)  # what reading the checkpoint needs; the .meta graph is not
RELEASE_NAME = re.compile(r"^[a-z_]+_L-\d+_H-\d+_A-\d+$")
HUB_FILES = ("config.json", "vocab.txt")
HUB_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first the repository has


def _pins(config, data, index, meta, vocab):
    return {CONFIG: config, DATA: data, INDEX: index, META: meta, VOCAB: vocab}


# release -> (directory under the base URL, NVIDIA's name, sha256 of each unpacked file or None).
# URLs and sha256s: NVIDIA DeepLearningExamples {TensorFlow,PyTorch}/LanguageModeling/BERT/data/
# GooglePretrainedWeightDownloader.py; the whole-word-masking URLs: google-research/bert README.md.
RELEASES = {
    "uncased_L-12_H-768_A-12": ("2018_10_18", "bert_base_uncased", _pins(
        "7b4e5f53efbd058c67cda0aacfafb340113ea1b5797d9ce6ee411704ba21fcbc",
        "58580dc5e0bf0ae0d2efd51d0e8272b2f808857f0a43a88aaf7549da6d7a8a84",
        "04c1323086e2f1c5b7c0759d8d3e484afbb0ab45f51793daab9f647113a0117b",
        "dd5682170a10c3ea0280c2e9b9a45fee894eb62da649bbdea37b38b0ded5f60e",
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3")),
    "uncased_L-24_H-1024_A-16": ("2018_10_18", "bert_large_uncased", _pins(
        "bfa42236d269e2aeb3a6d30412a33d15dbe8ea597e2b01dc9518c63cc6efafcb",
        "bc6b3363e3be458c99ecf64b7f472d2b7c67534fd8f564c0556a678f90f4eea1",
        "68b52f2205ffc64dc627d1120cf399c1ef1cbc35ea5021d1afc889ffe2ce2093",
        "6fcce8ff7628f229a885a593625e3d5ff9687542d5ef128d9beb1b0c05edc4a1",
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3")),
    "cased_L-12_H-768_A-12": ("2018_10_18", "bert_base_cased", _pins(
        "f11dfb757bea16339a33e1bf327b0aade6e57fd9c29dc6b84f7ddb20682f48bc",
        "734d5a1b68bf98d4e9cb6b6692725d00842a1937af73902e51776905d8f760ea",
        "517d6ef5c41fc2ca1f595276d6fccf5521810d57f5a74e32616151557790f7b1",
        "5f8a9771ff25dadd61582abb4e3a748215a10a6b55947cbb66d0f0ba1694be98",
        "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02")),
    "cased_L-24_H-1024_A-16": ("2018_10_18", "bert_large_cased", _pins(
        "7adb2125c8225da495656c982fd1c5f64ba8f20ad020838571a3f8a954c2df57",
        "6ff33640f40d472f7a16af0c17b1179ca9dcc0373155fb05335b6a4dd1657ef0",
        "ef42a53f577fbe07381f4161b13c7cab4f4fc3b167cec6a9ae382c53d18049cf",
        "d2ddff3ed33b80091eac95171e94149736ea74eb645e575d942ec4a5e01a40a1",
        "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02")),
    "multi_cased_L-12_H-768_A-12": ("2018_11_23", "bert_base_multilingual_cased", _pins(
        "e76c3964bc14a8bb37a5530cdc802699d2f4a6fddfab0611e153aa2528f234f0",
        "55b8a2df41f69c60c5180e50a7c31b7cdf6238909390c4ddf05fbc0d37aa1ac5",
        "7d8509c2a62b4e300feb55f8e5f1eef41638f4998dd4d887736f42d4f6a34b37",
        "95e5f1997e8831f1c31e5cf530f1a2e99f121e9cd20887f2dce6fe9e3343e3fa",
        "fe0fda7c425b48c516fc8f160d594c8022a0808447475c1a7c6d6479763f310c")),
    # NVIDIA calls it bert_large_multilingual_uncased, but it is a base-sized model (L-12, H-768).
    "multilingual_L-12_H-768_A-12": ("2018_11_03", "bert_large_multilingual_uncased", _pins(
        "49063bb061390211d2fdd108cada1ed86faa5f90b80c8f6fdddf406afa4c4624",
        "3cd83912ebeb0efe2abf35c9f1d5a515d8e80295e61c49b75c8853f756658429",
        "87c372c1a3b1dc7effaaa9103c80a81b3cbab04c7933ced224eec3b8ad2cc8e7",
        "27f504f34f02acaa6b0f60d65195ec3e3f9505ac14601c6a32b421d0c8413a29",
        "87b44292b452f6c05afa49b2e488e7eedf79ea4f4c39db6f2f4b37764228ef3f")),
    "chinese_L-12_H-768_A-12": ("2018_11_03", "bert_base_chinese", _pins(
        "7aaad0335058e2640bcb2c2e9a932b1cd9da200c46ea7b8957d54431f201c015",
        "756699356b78ad0ef1ca9ba6528297bcb3dd1aef5feadd31f4775d7c7fc989ba",
        "46315546e05ce62327b3e2cd1bed22836adcb2ff29735ec87721396edb21b82e",
        "c0f8d51e1ab986604bc2b25d6ec0af7fd21ff94cf67081996ec3f3bf5d823047",
        "45bbac6b341c319adc98a532532882e91a9cefc0329aa57bac9ae761c27b291c")),
    "wwm_uncased_L-24_H-1024_A-16": ("2019_05_30", None, None),
    "wwm_cased_L-24_H-1024_A-16": ("2019_05_30", None, None),
}
NVIDIA_NAMES = {nvidia: release for release, (_date, nvidia, _pins) in RELEASES.items() if nvidia}


@errors_name_fields
@dataclass(frozen=True, kw_only=True, repr=False)  # DownloadOptions.__repr__: no secrets
class PretrainedOptions(DownloadOptions):
    """`model`: a Google release (`RELEASES`, or NVIDIA's name such as bert_base_uncased) or a hub model id;
    `base_url`: the release base URL ($BERTPREP_PRETRAINED_URL or Google's), for a hub id the hub endpoint;
    `checksums`: a sha256sum-style list replacing the built-in sha256s (a mirror that republishes the files)."""

    source: ClassVar[str] = "pretrained"
    model: str
    checksums: str | None = None

    def __post_init__(self):
        super().__post_init__()
        normalise_paths(self, "checksums")
        resolve_model(self.model)


def known_models():
    return ", ".join(RELEASES)


def resolve_model(value):
    """('google', release) or ('hub', repo id); a name that is neither -> UsageError listing the releases."""
    name = value.strip()
    if name in RELEASES:
        return "google", name
    if name in NVIDIA_NAMES:
        return "google", NVIDIA_NAMES[name]
    hub_id = re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", name)
    if RELEASE_NAME.match(name) or re.fullmatch(r"bert_\w+", name) or not hub_id:
        raise UsageError(f"--model {value!r}: unknown model; known Google releases: {known_models()} "
                         "(or a hub model id such as bert-base-uncased)")
    return "hub", name


def run(options, workdir, progress):
    kind, name = resolve_model(options.model)
    if kind == "hub":
        check_endpoint(options.base_url)
    root = os.path.join(workdir, "download", "pretrained")
    downloads = SourceDownloads(root, "pretrained", progress, options.limits)
    with hold(root, "bertprep download pretrained") as staging:
        if kind == "google":
            pins = read_checksum_list(options.checksums, "sha256") if options.checksums else RELEASES[name][2]
            rows = _google_release(downloads, staging, name, pins, options.base_url)
        else:
            with bounded_hub(options.limits, progress.quiet):  # each hub request waits at most --stall-timeout
                rows = _hub_model(downloads, staging, name, options.base_url, progress.quiet)
    summary = {"source": "pretrained", "model": name, "directory": downloads.path(_dirname(name)),
               "files": {k: v for k, v in downloads.manifest["files"].items() if k.startswith(_dirname(name) + "/")}}
    return summary, rows


def _dirname(name):
    return name.replace("/", "--")


def _complete(downloads, dirname):
    """The manifest's entries of `dirname`/ when every one is on disk with its size; else None."""
    entries = {k: v for k, v in downloads.manifest["files"].items() if k.startswith(dirname + "/")}
    if not entries:
        return None
    for relpath, entry in entries.items():
        try:
            if os.path.getsize(downloads.path(relpath)) != entry["bytes"]:
                return None
        except OSError:
            return None
    return entries


def _rows(entries):
    return [(relpath, f"{entry['bytes']:,} bytes, " + (", ".join(entry["verified"]) or "no published checksum"))
            for relpath, entry in sorted(entries.items())]


def _record_dir(downloads, dirname, entries, **info):
    """Replace the manifest's entries under `dirname`/ with `entries` (relative to it) and note `info`."""
    for relpath in [k for k in downloads.manifest["files"] if k.startswith(dirname + "/")]:
        del downloads.manifest["files"][relpath]
    downloads.manifest["files"].update({f"{dirname}/{name}": entry for name, entry in entries.items()})
    downloads.set_info(**{dirname: info})


# -- Google releases -----------------------------------------------------------------


def _google_release(downloads, staging, release, pins, base_url):
    pins = dict(pins or {})
    zip_name = f"{release}.zip"
    zip_pin = pins.pop(zip_name, None)
    date = RELEASES[release][0]
    url = join_url(mirror_base(base_url, BASE_URL_ENV, DEFAULT_BASE_URL), date, zip_name)
    done = _complete(downloads, release)
    if done is not None and downloads.manifest["info"].get(release, {}).get("url") == redact(url):
        if downloads.progress is not None:
            downloads.progress.note(f"{release}: already downloaded and verified")
        return _rows(done)
    zip_entry = downloads.get(url, zip_name, checksums={"sha256": zip_pin} if zip_pin else None)
    zip_path = downloads.path(zip_name)
    try:
        with atomic_dir(downloads.path(release), staging) as tmp:
            entries = _unpack(zip_path, release, tmp, pins, downloads.progress)
    except DataError:
        os.unlink(zip_path)  # a rerun downloads it again rather than failing the same way
        downloads.forget(zip_name)
        raise
    _record_dir(downloads, release, entries, url=url, zip_bytes=zip_entry["bytes"], zip_sha256=zip_entry["sha256"])
    os.unlink(zip_path)  # its files are in place and verified; keeping it would double the disk used
    downloads.forget(zip_name)
    return _rows(_complete(downloads, release))


def _unpack(zip_path, release, out, pins, progress):
    """Extract the release's files from the zip into `out`, each checked against its pin; {name: entry}."""
    try:
        with zipfile.ZipFile(zip_path) as archive:
            members = {}
            for info in archive.infolist():
                name = os.path.basename(info.filename)  # the zip holds <release>/<file>; only the name is trusted
                if not info.is_dir() and name in RELEASE_FILES:
                    if name in members:
                        raise DataError(f"{zip_path}: {name} appears twice ({members[name].filename}, {info.filename})")
                    members[name] = info
            missing = [n for n in (*REQUIRED_FILES, *pins) if n not in members]
            if missing:
                raise DataError(f"{zip_path}: no {', '.join(dict.fromkeys(missing))} in the archive; "
                                f"a {release} release holds {', '.join(RELEASE_FILES)}; the download was deleted")
            entries = {}
            for name, info in sorted(members.items()):
                digest = _extract(archive, info, os.path.join(out, name), progress)
                expected = pins.get(name)
                if expected is not None and digest != expected:
                    raise DataError(f"{release}/{name}: sha256 mismatch: expected {expected} (pinned), got {digest}; "
                                    "nothing was kept and the download was deleted")
                entries[name] = {"bytes": info.file_size, "sha256": digest, "verified": ["sha256"] if expected else []}
            _check_bert_config(os.path.join(out, CONFIG), f"{release}/{CONFIG}")
            return entries
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise DataError(f"{zip_path}: not a readable zip archive ({_first_line(exc)}){file_page_note(zip_path)}; "
                        "the download was deleted") from None


def _check_bert_config(path, name):
    """A release is complete only with a config the trainer reads (by the rules it reads it with,
    bertprep.bert_config: JSON, a BERT's keys and sizes); a zip whose checksums were republished with a
    damaged config would otherwise be kept."""
    try:
        BertConfig.from_json_file(path, DataError)
    except DataError as exc:
        reason = str(exc).removeprefix(f"{path}: ")  # the staging path; `name` is what the user knows
        raise DataError(f"{name}: {reason}; nothing was kept and the download was deleted") from None


def _extract(archive, info, dest, progress):
    """Copy one member to `dest`; its sha256. A CRC error (BadZipFile) surfaces from the read."""
    digest = hashlib.sha256()
    with archive.open(info) as src, open(dest, "wb") as out:
        while chunk := src.read(CHUNK):
            out.write(chunk)
            digest.update(chunk)
    if progress is not None:
        progress.advance(1)
    return digest.hexdigest()


# -- hub models ------------------------------------------------------------------------


def _hub_model(downloads, staging, repo, endpoint, quiet):
    from huggingface_hub import constants
    from huggingface_hub.utils import disable_progress_bars

    if quiet:
        disable_progress_bars()
    dirname = _dirname(repo)
    where = endpoint or constants.ENDPOINT
    files = {}
    for filename in HUB_FILES:
        files[filename] = _hub_file(repo, filename, endpoint, where)
    for filename in HUB_WEIGHTS:
        local = _hub_file(repo, filename, endpoint, where, optional=True)
        if local is not None:
            files[filename] = local
            break
    else:
        offline = " (HF_HUB_OFFLINE=1: looked in the cache only)" if constants.HF_HUB_OFFLINE else ""
        raise DataError(f"{repo} at {where}: neither {' nor '.join(HUB_WEIGHTS)} found{offline}")
    commit = os.path.basename(os.path.dirname(files["config.json"]))
    done = _complete(downloads, dirname)
    if done is not None and downloads.manifest["info"].get(dirname, {}).get("commit") == commit:
        return _rows(done)
    entries = {}
    with atomic_dir(downloads.path(dirname), staging) as tmp:
        for filename, local in files.items():
            refetch = (None if constants.HF_HUB_OFFLINE  # offline, a damaged cached copy cannot be fetched again
                       else functools.partial(_hub_file, repo, filename, endpoint, where))
            entries[filename] = _verified_blob(repo, commit, filename, local, refetch)
            _link_or_copy(local, os.path.join(tmp, filename))
    _record_dir(downloads, dirname, entries, repo=repo, commit=commit, endpoint=where)
    return _rows(entries)


def _hub_file(repo, filename, endpoint, where, optional=False):
    """The cached path of `filename` in model `repo` (downloaded if needed); None if optional and absent."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    not_a_model = UsageError(f"--model {repo!r}: not a Google release (known: {known_models()}) "
                             f"and not a BERT model at {where} (no {filename})")
    try:
        return hf_hub_download(repo, filename, endpoint=endpoint)
    except RepositoryNotFoundError:
        raise not_a_model from None
    except LocalEntryNotFoundError as exc:  # (a subclass of EntryNotFoundError: caught first)
        # Online, the hub's answer is the cause: a bare 404 (no X-Error-Code) means no such file or model.
        status = getattr(getattr(exc.__cause__, "response", None), "status_code", None)
        if optional:
            return None
        if status == 404:
            raise not_a_model from None
        reason = _first_line(exc.__cause__ or exc)
        raise DataError(f"{repo}/{filename}: not reachable at {where} and not in the cache ({reason})") from None
    except EntryNotFoundError:
        if optional:
            return None
        raise not_a_model from None
    except Exception as exc:
        if not hub_failure(exc):
            raise
        raise DataError(f"{repo}/{filename} at {where}: {_first_line(exc)}") from None


def _verified_blob(repo, commit, filename, local, refetch=None):
    """{bytes, sha256, verified}: checked against the hub's checksum, kept as the cached blob's name. A damaged
    cached copy (a disk error, a copy killed mid-write) is removed and fetched once more with `refetch()` (None:
    offline, where it cannot be): it had ended every later download, kept in the cache."""
    problem, entry = _blob_check(repo, commit, filename, local)
    if problem is not None and refetch is not None:
        _remove_cached(local)
        local = refetch()
        problem, entry = _blob_check(repo, commit, filename, local)
    if problem is not None:
        raise damaged_copy_error(problem, local, offline=refetch is None)
    return entry


def _blob_check(repo, commit, filename, local):
    """(None, {bytes, sha256, verified}) of a cached file whose bytes are the hub's, else (the mismatch, None)."""
    blob = os.path.basename(os.path.realpath(local))
    sha256 = sha256_file(local)
    if SHA256_HEX.fullmatch(blob):  # an LFS file: the hub's sha256 of its content
        expected, got, kind = blob, sha256, "hub sha256"
    elif re.fullmatch(r"[0-9a-f]{40}", blob):  # a small file: its git blob id
        expected, got, kind = blob, _git_blob_sha1(local), "hub git sha1"
    else:
        raise DataError(f"{repo}@{commit}/{filename}: the hub published no checksum to verify it against")
    if got != expected:
        return f"{repo}@{commit}/{filename}: checksum mismatch: expected {expected} (published), got {got}", None
    return None, {"bytes": os.path.getsize(local), "sha256": sha256, "verified": [kind]}


def _git_blob_sha1(path):
    digest = hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _link_or_copy(src, dest):
    """A hard link to the cached blob (no second copy on disk) where the file system allows, else a copy."""
    try:
        os.link(os.path.realpath(src), dest)
    except OSError:
        shutil.copyfile(src, dest)
