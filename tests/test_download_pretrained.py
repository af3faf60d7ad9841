"""`bertprep download pretrained`: Google's release zips and hub models, against the stand-in servers.

The zip served here has a release's real layout (`<release>/bert_config.json`, `bert_model.ckpt.*`,
`vocab.txt`) with google_tiny's checkpoint and the golden vocab in it. Its files are not Google's,
so each test that must get past the built-in sha256s names its own with `--checksums` (the flag a
mirror republishing the files uses); one test shows the built-in pins still reject these files.
"""

import hashlib
import io
import json
import zipfile

import pytest

from bertprep.errors import UsageError
from stand_in_servers import (
    StandInServer,
    looks_complete,
    ok,
    one_line_error,
    run_cli,
    run_python,
    same_apart_from_workdir,
)

RELEASE = "uncased_L-12_H-768_A-12"
ZIP_PATH = f"/bert_models/2018_10_18/{RELEASE}.zip"


@pytest.fixture(scope="session")
def release_files(shared_dir):
    google_tiny = shared_dir / "fixtures" / "checkpoints" / "google_tiny"
    files = {name: (google_tiny / name).read_bytes()
             for name in ("bert_config.json", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001")}
    files["vocab.txt"] = (shared_dir / "fixtures" / "golden" / "vocab.txt").read_bytes()
    return files


def zip_of(release_files):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{RELEASE}/", b"")
        for name, data in release_files.items():
            # Google's zips are deflated; the large tensor file is stored here only to keep the test fast.
            method = zipfile.ZIP_STORED if name.startswith("bert_model.ckpt.data") else zipfile.ZIP_DEFLATED
            archive.writestr(f"{RELEASE}/{name}", data, compress_type=method)
    return buffer.getvalue()


@pytest.fixture(scope="session")
def release_zip(release_files):
    return zip_of(release_files)


@pytest.fixture
def server(release_zip):
    with StandInServer() as s:
        s.add_file(ZIP_PATH, release_zip)
        yield s


def sha256sums(tmp_path, files, **replaced):
    path = tmp_path / "SHA256SUMS"
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()} | replaced
    path.write_text("".join(f"{digest}  {RELEASE}/{name}\n" for name, digest in sums.items()))
    return path


def test_release_is_resumed_unpacked_verified_and_its_vocab_creates_records(
        server, release_files, release_zip, golden_dir, tmp_path):
    server.drop_after[ZIP_PATH] = len(release_zip) // 2
    work = tmp_path / "w"
    args = ["download", "pretrained", "--model", RELEASE, "--workdir", work,
            "--checksums", sha256sums(tmp_path, release_files), "--json"]
    summary = ok(run_cli(*args, env={"BERTPREP_PRETRAINED_URL": server.url + "/bert_models"}))
    gets = [r for r in server.requests if r[:2] == ("GET", ZIP_PATH)]
    assert gets == [("GET", ZIP_PATH, None), ("GET", ZIP_PATH, f"bytes={len(release_zip) // 2}-")]
    model_dir = work / "download" / "pretrained" / RELEASE
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(release_files)
    for name, data in release_files.items():
        assert (model_dir / name).read_bytes() == data
        entry = summary["files"][f"{RELEASE}/{name}"]
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "verified": ["sha256"]}
    manifest = json.loads((work / "download" / "pretrained" / "manifest.json").read_text())
    assert manifest["info"][RELEASE] == {"url": server.url + ZIP_PATH, "zip_bytes": len(release_zip),
                                         "zip_sha256": hashlib.sha256(release_zip).hexdigest()}
    assert looks_complete(work / "download" / "pretrained") == ["manifest.json",
                                                                *(f"{RELEASE}/{n}" for n in sorted(release_files))]

    before = len(server.requests)
    ok(run_cli(*args, "--base-url", server.url + "/bert_models"))  # same URL, complete: nothing fetched again
    assert server.requests[before:] == []

    out = tmp_path / "records"
    ok(run_cli("create", "--input", golden_dir / "corpus.txt", "--vocab", model_dir / "vocab.txt",
               "--dupe-factor", "2", "--out", out, "--quiet"))
    made = [p for p in out.rglob("corpus.tfrecord") if "tfrecord" in p.parts]
    assert [p.read_bytes() for p in made] == [(golden_dir / "G1.tfrecord").read_bytes()]


def test_a_file_that_does_not_match_its_sha256_leaves_nothing(server, release_files, tmp_path):
    wrong = "0" * 64
    work = tmp_path / "w"
    result = run_cli("download", "pretrained", "--model", RELEASE, "--workdir", work, "--base-url",
                     server.url + "/bert_models",
                     "--checksums", sha256sums(tmp_path, release_files, **{"vocab.txt": wrong}))
    line = one_line_error(result)
    got = hashlib.sha256(release_files["vocab.txt"]).hexdigest()
    assert f"{RELEASE}/vocab.txt: sha256 mismatch: expected {wrong} (pinned), got {got}" in line
    root = work / "download" / "pretrained"
    assert looks_complete(root) == ["manifest.json"] and not (root / RELEASE).exists()
    assert json.loads((root / "manifest.json").read_text())["files"] == {}


def test_the_built_in_pins_reject_files_that_are_not_googles(server, release_files, tmp_path):
    server.add_file(ZIP_PATH, zip_of(release_files | {"bert_model.ckpt.meta": b"graph"}))  # every file the pins name
    result = run_cli("download", "pretrained", "--model", "bert_base_uncased", "--workdir", tmp_path / "w",
                     "--base-url", server.url + "/bert_models")
    line = one_line_error(result)
    # NVIDIA's pin for the real bert_config.json; the tiny one has another sha256.
    got = hashlib.sha256(release_files["bert_config.json"]).hexdigest()
    assert line.endswith(f"{RELEASE}/bert_config.json: sha256 mismatch: expected "
                         f"7b4e5f53efbd058c67cda0aacfafb340113ea1b5797d9ce6ee411704ba21fcbc (pinned), got {got}; "
                         "nothing was kept and the download was deleted")
    assert not (tmp_path / "w" / "download" / "pretrained" / RELEASE).exists()


def test_a_release_zip_without_a_file_the_pins_name_is_rejected(server, release_files, tmp_path):
    result = run_cli("download", "pretrained", "--model", RELEASE, "--workdir", tmp_path / "w",
                     "--base-url", server.url + "/bert_models")
    assert f"{RELEASE}.zip: no bert_model.ckpt.meta in the archive" in one_line_error(result)
    assert looks_complete(tmp_path / "w" / "download" / "pretrained") == ["manifest.json"]


def test_a_pinned_zip_checksum_is_checked_before_unpacking(server, release_files, tmp_path):
    sums = sha256sums(tmp_path, release_files)
    with open(sums, "a") as f:
        f.write(f"{'1' * 64}  {RELEASE}.zip\n")
    result = run_cli("download", "pretrained", "--model", RELEASE, "--workdir", tmp_path / "w",
                     "--base-url", server.url + "/bert_models", "--checksums", sums)
    assert f"sha256 mismatch: expected {'1' * 64} (published)" in one_line_error(result)
    assert looks_complete(tmp_path / "w" / "download" / "pretrained") == []


def test_an_html_page_served_for_the_zip_is_named_as_one(server, release_files, tmp_path):
    """A mirror's sign-in page served with 200 for the release zip was `not a readable zip archive (File is not a
    zip file)` and no more; it is named as an HTML page now."""
    server.add_file(ZIP_PATH, b"<!doctype html><html><body>Sign in to download</body></html>")
    result = run_cli("download", "pretrained", "--model", RELEASE, "--workdir", tmp_path / "w",
                     "--base-url", server.url + "/bert_models", "--checksums", sha256sums(tmp_path, release_files))
    assert one_line_error(result).endswith(f"{RELEASE}.zip: not a readable zip archive (File is not a zip file) (an "
                                           "HTML page: the server's error or sign-in page, not the file?); the "
                                           "download was deleted")


def test_a_corrupt_zip_is_one_line_and_deleted(server, release_files, release_zip, tmp_path):
    server.add_file(ZIP_PATH, release_zip[:1000] + b"\0" * (len(release_zip) - 1000))
    result = run_cli("download", "pretrained", "--model", RELEASE, "--workdir", tmp_path / "w",
                     "--base-url", server.url + "/bert_models", "--checksums", sha256sums(tmp_path, release_files))
    assert f"{RELEASE}.zip: not a readable zip archive" in one_line_error(result)
    assert looks_complete(tmp_path / "w" / "download" / "pretrained") == ["manifest.json"]


def test_unknown_model_is_a_usage_error_listing_the_releases(tmp_path):
    line = one_line_error(run_cli("download", "pretrained", "--model", "uncased_L-6_H-512_A-8", "--workdir", tmp_path),
                          code=2)
    assert "unknown model" in line and "uncased_L-12_H-768_A-12" in line and "wwm_cased_L-24_H-1024_A-16" in line


def test_hub_model_id_gives_the_same_layout_and_is_served_from_cache_offline(shared_dir, golden_dir, tmp_path):
    hf_tiny = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"
    files = {"config.json": (hf_tiny / "config.json").read_bytes(),
             "model.safetensors": (hf_tiny / "model.safetensors").read_bytes(),
             "vocab.txt": (golden_dir / "vocab.txt").read_bytes()}
    hf_home = tmp_path / "hf"
    with StandInServer() as server:
        server.add_hub_model("bert-base-uncased", files)
        summary = ok(run_cli("download", "pretrained", "--model", "bert-base-uncased", "--workdir", tmp_path / "w",
                             "--json", server=server, hf_home=hf_home))
        server.add_hub_model("org/config-only", {"config.json": files["config.json"], "vocab.txt": files["vocab.txt"]})
        no_weights = run_cli("download", "pretrained", "--model", "org/config-only", "--workdir", tmp_path / "w",
                             server=server, hf_home=hf_home)
        missing = run_cli("download", "pretrained", "--model", "no-such-org/no-such-model", "--workdir", tmp_path / "w",
                          server=server, hf_home=hf_home)
    line = one_line_error(missing, code=2)
    assert "'no-such-org/no-such-model': not a Google release" in line and "uncased_L-12_H-768_A-12" in line
    assert "org/config-only at " in one_line_error(no_weights)
    assert "neither model.safetensors nor pytorch_model.bin" in no_weights.stderr
    assert not (tmp_path / "w" / "download" / "pretrained" / "org--config-only").exists()
    model_dir = tmp_path / "w" / "download" / "pretrained" / "bert-base-uncased"
    for name, data in files.items():
        assert (model_dir / name).read_bytes() == data
    verified = {name.split("/")[-1]: entry["verified"] for name, entry in summary["files"].items()}
    assert verified == {"config.json": ["hub git sha1"], "model.safetensors": ["hub sha256"],
                        "vocab.txt": ["hub sha256"]}
    # The server is gone: the cache serves an offline run into a fresh work directory.
    ok(run_cli("download", "pretrained", "--model", "bert-base-uncased", "--workdir", tmp_path / "w2", hf_home=hf_home,
               offline=True))
    cached_model = tmp_path / "w2" / "download" / "pretrained" / "bert-base-uncased" / "model.safetensors"
    assert cached_model.read_bytes() == files["model.safetensors"]
    uncached = run_cli("download", "pretrained", "--model", "bert-large-uncased", "--workdir", tmp_path / "w2",
                       hf_home=hf_home, offline=True)
    assert "bert-large-uncased/config.json: not reachable at" in one_line_error(uncached)


def test_a_hub_endpoint_with_a_password_is_in_no_manifest_or_summary(shared_dir, golden_dir, tmp_path):
    """`--base-url http://alice:S3cret@mirror` works (the hub client sends it), and the manifest recorded it
    as the endpoint, password and all."""
    files = {"config.json": (shared_dir / "fixtures" / "checkpoints" / "hf_tiny" / "config.json").read_bytes(),
             "model.safetensors": b"\0" * 64, "vocab.txt": (golden_dir / "vocab.txt").read_bytes()}
    with StandInServer() as server:
        server.add_hub_model("bert-base-uncased", files)
        endpoint = server.url
        result = run_cli("download", "pretrained", "--model", "bert-base-uncased", "--workdir", tmp_path / "w",
                         "--base-url", endpoint.replace("http://", "http://alice:S3cret@"), "--json",
                         hf_home=tmp_path / "hf")
    summary = ok(result)
    manifest = (tmp_path / "w" / "download" / "pretrained" / "manifest.json").read_text()
    assert json.loads(manifest)["info"]["bert-base-uncased"]["endpoint"] == endpoint
    assert "S3cret" not in manifest and "S3cret" not in json.dumps(summary) and "S3cret" not in result.stderr


def test_release_function_gives_the_cli_files_and_summary(server, release_files, tmp_path):
    from bertprep.stages.download import download
    from bertprep.stages.download.pretrained import PretrainedOptions

    sums = sha256sums(tmp_path, release_files)
    by_cli = ok(run_cli("download", "pretrained", "--model", RELEASE, "--base-url", server.url + "/bert_models",
                        "--checksums", sums, "--workdir", tmp_path / "cli", "--json"))
    summary = download(PretrainedOptions(model=RELEASE, base_url=server.url + "/bert_models", checksums=str(sums),
                                         workdir=str(tmp_path / "py")))
    assert same_apart_from_workdir(summary, tmp_path / "py", by_cli, tmp_path / "cli")
    for name, data in release_files.items():
        assert (tmp_path / "py/download/pretrained" / RELEASE / name).read_bytes() == data
    with pytest.raises(UsageError, match="^PretrainedOptions.model 'uncased_L-6_H-512_A-8': unknown model"):
        download("pretrained", model="uncased_L-6_H-512_A-8", workdir=tmp_path / "py")


def test_errors_found_while_a_source_downloads_name_its_own_fields_for_a_python_caller(tmp_path):
    """download's errors were rewritten for DownloadOptions' fields, which lack each source's own: a hub id that
    is no model said `--model 'no-such-org/x': not a Google release`, and WikipediaOptions' workdir was
    `DownloadOptions.workdir`."""
    code = ("import bertprep, sys\n"
            "try:\n    bertprep.download('pretrained', model='no-such-org/x', workdir=sys.argv[1])\n"
            "except bertprep.errors.UsageError as exc:\n    print(exc)\n")
    with StandInServer() as server:
        printed = run_python(code.replace("sys.argv[1]", repr(str(tmp_path / "w"))), server=server,
                             hf_home=tmp_path / "hf")
    assert printed.stdout.startswith("PretrainedOptions.model 'no-such-org/x': not a Google release"), printed
    from bertprep import WikipediaOptions, download

    for call in (lambda: download("wikipedia", dump="latest", workdir="s3://bucket/w"),
                 lambda: download(WikipediaOptions(dump="latest", workdir="s3://bucket/w"))):
        with pytest.raises(UsageError, match=r"give a local WikipediaOptions\.workdir, .*no WikipediaOptions\.dump"):
            call()


def test_a_damaged_copy_of_a_hub_model_in_the_cache_is_downloaded_again(shared_dir, golden_dir, tmp_path):
    """A cached model file whose bytes went bad ended every later download of the model in `checksum mismatch ...;
    delete <blob> and rerun`, the damaged blob kept. It is now removed and fetched once more; offline the line says
    which file to delete; a hub that serves other bytes than it publishes leaves nothing damaged in the cache."""
    files = {"config.json": (shared_dir / "fixtures" / "checkpoints" / "hf_tiny" / "config.json").read_bytes(),
             "model.safetensors": b"\1" * 64, "vocab.txt": (golden_dir / "vocab.txt").read_bytes()}
    hf_home = tmp_path / "hf"
    with StandInServer() as server:
        server.add_hub_model("bert-base-uncased", files)
        args = ("download", "pretrained", "--model", "bert-base-uncased", "--quiet")
        ok(run_cli(*args, "--workdir", tmp_path / "w1", "--json", server=server, hf_home=hf_home))
        blob = next(p.resolve() for p in hf_home.rglob("model.safetensors"))
        blob.write_bytes(b"\2" * 64)
        offline = one_line_error(run_cli(*args, "--workdir", tmp_path / "w2", hf_home=hf_home, offline=True))
        assert offline.endswith(f"; the cached copy is damaged (HF_HUB_OFFLINE=1: not downloaded again): delete {blob} "
                                "and rerun online") and "model.safetensors: checksum mismatch: expected " in offline
        ok(run_cli(*args, "--workdir", tmp_path / "w3", "--json", server=server, hf_home=hf_home))
        assert blob.read_bytes() == files["model.safetensors"]
        assert (tmp_path / "w3/download/pretrained/bert-base-uncased/model.safetensors").read_bytes() == b"\1" * 64
        blob.write_bytes(b"\2" * 64)
        server.served_instead["/bert-base-uncased/resolve/main/model.safetensors"] = b"\2" * 64  # not what it publishes
        served = one_line_error(run_cli(*args, "--workdir", tmp_path / "w4", server=server, hf_home=hf_home))
    assert served.endswith(", again after a fresh download: the hub serves other bytes than it publishes (the copy was "
                           "removed from the cache)"), served
    assert not blob.exists()
