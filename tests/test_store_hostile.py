"""Hostile paths and stores (issue 39), against the real SeaweedFS (`s3_bucket`, authentication on) and a silent
socket on 127.0.0.1: a secret in a URL (right or wrong) or a signed query is refused before any client sees it
and appears in nothing printed, written locally or stored; an endpoint that accepts the connection and never
answers ends the command in one line naming it, within the bound the settings give; every URL form that would
send the output elsewhere (no bucket, a fragment, `..`, a host on file://, memory://, an upper-case or unknown
scheme) is one line, exit 2, with nothing written."""

import contextlib
import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertprep.cli import main
from bertprep.errors import redact
from object_store import SeaweedFS
from stand_in_servers import silent_endpoint

pytestmark = pytest.mark.xdist_group("store_hostile")

REPO = Path(__file__).resolve().parents[1]

KEY, SECRET = SeaweedFS.ACCESS_KEY, SeaweedFS.SECRET_KEY
WRONG_SECRET = "Wr0ngSecretThatMustNeverShow"


def run(argv, cwd):
    """(exit code, stdout + stderr) of an in-process CLI run in the directory `cwd`."""
    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    finally:
        os.chdir(previous)
    return code, out.getvalue() + err.getvalue()


def bucket_keys(s3_bucket):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    return sorted(fs.find(s3_bucket.removeprefix("s3://")))


def stage_argvs(url, local, golden_dir):
    """Every stage given the URL `url` where it reads or writes (the rest local)."""
    corpus, vocab = golden_dir / "corpus.txt", golden_dir / "vocab.txt"
    return {
        "validate": ["validate", url],
        "inspect": ["inspect", url],
        "create in": ["create", "--input", url, "--vocab", vocab, "--out", local / "c", "--quiet"],
        "create out": ["create", "--input", corpus, "--vocab", vocab, "--out", url, "--quiet"],
        "create vocab": ["create", "--input", corpus, "--vocab", url, "--out", local / "c", "--quiet"],
        "dedup out": ["dedup", "--input", golden_dir, "--out", url, "--quiet"],
        "dedup in": ["dedup", "--input", url, "--out", local / "d", "--quiet"],
        "shard": ["shard", "--input", url, "--out", local / "s", "--quiet"],
        "vocab": ["vocab", "--input", url, "--out", local / "v.txt", "--quiet"],
        "pack": ["pack", url, "--out", local / "p", "--quiet"],
        "convert": ["convert", "--to", "ofrecord", url, local / "x"],
    }


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "cwd").mkdir()
    return tmp_path


def assert_nothing_written(workspace, s3_bucket, before):
    written = [p for p in workspace.rglob("*") if p.name != "cwd"]
    assert written == [], written
    assert bucket_keys(s3_bucket) == before


def secret_free(text, *secrets):
    return not any(secret in text for secret in secrets)


@pytest.mark.parametrize("secret", [SECRET, WRONG_SECRET], ids=["right-secret", "wrong-secret"])
def test_credentials_in_a_url_are_refused_and_never_printed_or_stored(s3_bucket, workspace, golden_dir, secret):
    before = bucket_keys(s3_bucket)
    url = f"s3://{KEY}:{secret}@{s3_bucket.removeprefix('s3://')}/in"
    for name, argv in stage_argvs(url, workspace, golden_dir).items():
        code, printed = run(argv, workspace / "cwd")
        assert code == 2 and len(printed.strip().splitlines()) == 1, (name, printed)
        assert "credentials in a URL are refused" in printed, (name, printed)
        assert secret_free(printed, secret, f"{KEY}:"), (name, printed)
    assert_nothing_written(workspace, s3_bucket, before)


def test_the_trainer_refuses_credentials_in_a_url_without_printing_them(s3_bucket, tmp_path):
    url = f"s3://{KEY}:{WRONG_SECRET}@{s3_bucket.removeprefix('s3://')}/records"
    argv = [sys.executable, "-m", "trainer", "--format", "ofrecord", "--data", url, "--steps", "1"]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert result.returncode == 2 and secret_free(result.stdout + result.stderr, WRONG_SECRET), result.stderr
    assert "credentials in a URL are refused" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("query", ["?X-Amz-Signature=5ec7e75ec7e7&X-Amz-Credential=AKIAABCDEFGHIJKLMNOP",
                                   "?token=5ec7e75ec7e7"])
def test_a_signed_query_is_refused_never_echoed_and_nothing_is_written(s3_bucket, workspace, golden_dir, query):
    before = bucket_keys(s3_bucket)
    for name, argv in stage_argvs(f"{s3_bucket}/p{query}", workspace, golden_dir).items():
        code, printed = run(argv, workspace / "cwd")
        assert code == 2 and len(printed.strip().splitlines()) == 1, (name, printed)
        assert "query string" in printed and secret_free(printed, "5ec7e75ec7e7", "AKIA"), (name, printed)
    assert_nothing_written(workspace, s3_bucket, before)


BAD_FORMS = {
    "s3://": "no bucket",
    "s3:///records": "no bucket",
    "{bucket}/h#frag": "fragment",
    "{bucket}/a/../records": "'..' segments",
    "{bucket}/./records": "'..' segments",
    "file://tmp/records": "names no host",
    "memory://records": "unsupported URL scheme memory://",
    "abfs://container/records": "unsupported URL scheme abfs://",
    "zz://bucket/records": "unknown URL scheme zz://",
    "S3://{name}/records": "lower case",
}


@pytest.mark.parametrize("form", list(BAD_FORMS))
def test_each_url_form_that_would_write_elsewhere_is_one_line_and_nothing_is_written(s3_bucket, workspace,
                                                                                     golden_dir, form):
    before = bucket_keys(s3_bucket)
    url = form.format(bucket=s3_bucket, name=s3_bucket.removeprefix("s3://"))
    for name, argv in stage_argvs(url, workspace, golden_dir).items():
        code, printed = run(argv, workspace / "cwd")
        assert code == 2 and len(printed.strip().splitlines()) == 1, (name, printed)
        assert BAD_FORMS[form] in printed, (name, printed)
    assert_nothing_written(workspace, s3_bucket, before)


QUIET_STAGES = ("validate", "create out", "dedup in")


@pytest.fixture(scope="module")
def quiet_endpoint_runs(tmp_path_factory, golden_dir):
    """stage -> (endpoint, exit code, stderr, seconds from the start until it ended): each of QUIET_STAGES run
    against one silent endpoint, all at once (each waits out its own timeouts; one after another they idled a worker
    ~20 s)."""
    with silent_endpoint() as endpoint:
        env = {**os.environ, "PYTHONPATH": str(REPO), "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY,
               "AWS_SECRET_ACCESS_KEY": SECRET, "BERTPREP_STORE_CONNECT_TIMEOUT": "1",
               "BERTPREP_STORE_READ_TIMEOUT": "1", "BERTPREP_STORE_RETRIES": "1"}
        started, processes = time.monotonic(), {}
        for stage in QUIET_STAGES:
            argv = stage_argvs("s3://quiet-bucket/records", tmp_path_factory.mktemp("quiet"), golden_dir)[stage]
            processes[stage] = subprocess.Popen([sys.executable, "-m", "bertprep", *map(str, argv)], env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs = {}
        try:
            for stage, process in processes.items():
                _out, err = process.communicate(timeout=120)
                runs[stage] = (endpoint, process.returncode, err, time.monotonic() - started)
        finally:
            for process in processes.values():  # none is left running if one did not end in time
                process.kill()
    return runs


@pytest.mark.parametrize("stage", QUIET_STAGES)
def test_an_endpoint_that_never_answers_ends_in_one_line_naming_it_within_the_bound(quiet_endpoint_runs, stage):
    endpoint, returncode, stderr, took = quiet_endpoint_runs[stage]
    lines = stderr.strip().splitlines()
    assert returncode == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "s3://quiet-bucket/" in lines[0] and endpoint.removeprefix("http://") in lines[0], lines[0]
    assert "timeout" in lines[0].lower(), lines[0]
    # 2 attempts of s3fs x 2 of botocore x 1 s, plus backoff and start-up: far below the 120 s limit
    assert took < 60, took


@pytest.mark.parametrize("value", ["soon", "-1", "0"])
def test_a_store_limit_that_is_not_a_number_is_one_usage_line(s3_bucket, workspace, value, monkeypatch):
    monkeypatch.setenv("BERTPREP_STORE_READ_TIMEOUT", value)
    code, printed = run(["validate", f"{s3_bucket}/records"], workspace / "cwd")
    assert code == 2 and printed.strip() == (f"bertprep validate: error: BERTPREP_STORE_READ_TIMEOUT={value!r}: "
                                             "expected a number of seconds > 0"), printed


def test_redaction_takes_out_every_kind_of_secret(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "my-own-hub-token")
    text = redact('Invalid bucket name "KEY:SECRET@bucket": GET https://u:pw@h/b?X-Amz-Signature=abc123&'
                  'X-Amz-Credential=AKIAABCDEFGHIJKLMNOP%2F&list-type=2 (Authorization: Bearer eyJ.x-y) '
                  'hf_abcdefghijklmnopqrstuvwxyz my-own-hub-token')
    for secret in ("SECRET", "u:pw", "abc123", "AKIAABCDEFGHIJKLMNOP", "eyJ.x-y", "hf_abcdefghijklmnopqrstuvwxyz",
                   "my-own-hub-token"):
        assert secret not in text, (secret, text)
    assert "list-type=2" in text and "https://h/b" in text  # what is not a secret stays


def test_url_checks_run_before_anything_local_is_made(tmp_path):
    """`--out s3://` (no bucket) used to write a local ./s3:/ tree and exit 0."""
    code, printed = run(["create", "--out", "s3://", "--seq", "128", "--pred", "20", "--quiet"], tmp_path)
    assert code == 2 and "no bucket" in printed, printed
    assert list(Path(tmp_path).iterdir()) == []


@pytest.mark.parametrize("url", ["hf://", "hf:///", "hf://datasets", "hf://datasets/", "hf://gpt2",
                                 "hf://datasets//name/x.parquet"])
def test_an_hf_url_with_no_repository_is_one_usage_line(tmp_path, url, monkeypatch):
    """huggingface_hub answered these with a ValueError or NotImplementedError traceback ('Access to buckets and
    repositories lists is not implemented'), before any request."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for argv in (["inspect", url], ["validate", url], ["convert", url, str(tmp_path / "o.parquet"), "--to", "parquet"]):
        code, printed = run(argv, tmp_path)
        assert code == 2 and printed.endswith(f": {url}: no repository (expected hf://datasets/OWNER/NAME/PATH)\n"), \
            (argv, printed)


def test_an_hf_url_with_no_hub_to_reach_is_one_line(tmp_path):
    """huggingface_hub's client is httpx: a hub it cannot reach (offline, a closed HF_ENDPOINT) was an
    httpx2.ConnectError traceback of 100 lines from `inspect`, and the same from bertprep.torch's loader."""
    from tests.stand_in_servers import run_cli, run_python

    with socket.create_server(("127.0.0.1", 0)) as closed:
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    url = "hf://datasets/someone/records/x.tfrecord"
    result = run_cli("inspect", url, env={"HF_ENDPOINT": endpoint}, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "") and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"bertprep inspect: error: {url}: ") and result.stderr.count("\n") == 1
    code = ("from bertprep.torch import BertLoader\ntry:\n    BertLoader('hf://datasets/someone/records', 8)\n"
            "except OSError as exc:\n    print(type(exc).__name__, exc.filename)\n")
    result = run_python(code, env={"HF_ENDPOINT": endpoint}, cwd=tmp_path)
    assert result.stdout == "OSError hf://datasets/someone/records/manifest.json\n", result.stderr


def test_an_object_that_is_also_a_prefix_is_named_not_read_as_a_directory(s3_bucket, workspace, golden_dir):
    """A store keeps `a.parquet` beside `a.parquet/b.parquet` (a write under an object's key is not refused as a
    local one is); convert took a.parquet for a directory, converted b.parquet alone and passed the object
    over, exit 0."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    base = s3_bucket.removeprefix("s3://") + "/both"
    fs.pipe({f"{base}/a.parquet": b"PAR1", f"{base}/a.parquet/b.parquet": b"PAR1"})
    before = bucket_keys(s3_bucket)
    url = f"{s3_bucket}/both/a.parquet"
    code, printed = run(["convert", "--to", "tfrecord", url, workspace / "x"], workspace / "cwd")
    assert code == 1 and printed == (f"bertprep convert: error: {url}: both an object and the prefix of other objects "
                                     f"({url}/...): read as a directory, the object would be passed over; move one "
                                     "of them\n"), printed
    assert_nothing_written(workspace, s3_bucket, before)


@pytest.mark.parametrize("under", ["", "/records"])
def test_a_stage_does_not_write_under_an_object(s3_bucket, workspace, golden_dir, under):
    """A store takes keys under an object's (`obj/records/...` beside `obj`), where a local write under a file
    fails: create wrote its records there, and every later reader of the object found a prefix too."""
    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True).pipe({s3_bucket.removeprefix("s3://") + "/obj": b"an object"})
    before = bucket_keys(s3_bucket)
    url = f"{s3_bucket}/obj{under}"
    for argv in (stage_argvs(url, workspace, golden_dir)["create out"],
                 ["shard", "--input", golden_dir / "corpus.txt", "--corpus", "c", "--out", url, "--quiet"]):
        code, printed = run(argv, workspace / "cwd")
        # the folder the stage holds: --out itself, or create's folder of its settings under it
        assert code == 1 and printed.startswith(f"bertprep {argv[0]}: error: {url}"), printed
        assert printed.count("\n") == 1 and printed.endswith(
            f": {s3_bucket}/obj is an object, so nothing can be written under it as a folder ({s3_bucket}/obj/...): "
            "its readers would find both an object and a prefix; write elsewhere, or move the object\n"), printed
        assert_nothing_written(workspace, s3_bucket, before)


def test_an_hf_output_is_refused_up_front_as_read_only(tmp_path, golden_dir, monkeypatch):
    """hf:// is read through huggingface_hub, never written: `create --out hf://datasets/x/y` did the whole run,
    then reached the hub client ("Cannot reach https://huggingface.co/api/datasets/x/y: offline mode is enabled",
    exit 1); online with a token its write would have been a commit to the hub. Every output of every stage, the
    trainer's and `checkpoint convert`'s, given as hf://, is one usage line before any work, nothing written."""
    from bertprep.errors import UsageError
    from trainer.checkpoint import convert
    from trainer.checkpoint.cli import main as checkpoint_main
    from trainer.config import FinetuneConfig, TrainConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub client, if reached, fails at once: no network
    corpus, vocab, hub = golden_dir / "corpus.txt", golden_dir / "vocab.txt", "hf://datasets/someone/out"
    finetune = golden_dir.parent / "finetune"
    records = tmp_path / "records"
    assert run(["create", "--input", corpus, "--vocab", vocab, "--out", records, "--format", "tfrecord",
                "--dupe-factor", "1", "--quiet"], tmp_path)[0] == 0
    records = next(next(records.iterdir()).iterdir())  # <out>/<settings>/<corpus>
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "One document."}\n{"text": "Another one."}\n')
    before = sorted(tmp_path.rglob("*"))
    argvs = {
        "--out": [["shard", "--input", corpus, "--corpus", "c"], ["create", "--input", corpus, "--vocab", vocab],
                  ["tokenize", "--input", corpus, "--vocab", vocab], ["dedup", "--input", docs],
                  ["vocab", "--input", corpus], ["pack", records],
                  ["create-squad", "--input", finetune / "squad/v1.1/dev-v1.1.json", "--vocab", vocab],
                  ["create-glue", "--task", "MRPC", "--data-dir", finetune / "glue/MRPC", "--vocab", vocab]],
        "--workdir": [["create", "--input", corpus, "--vocab", vocab], ["download", "wikipedia"],
                      ["prepare", "wikipedia", "--vocab", vocab]],
        "--json": [["validate", records]], "--plot": [["validate", records]], "dst": [["convert", "--to", "ofrecord",
                                                                                     records]],
    }
    for flag, commands in argvs.items():
        for argv in commands:
            argv = [*argv, hub] if flag == "dst" else [*argv, flag, hub]
            code, printed = run([*argv, "--quiet"] if argv[0] in ("shard", "create") else argv, tmp_path)
            assert (code, printed) == (2, f"bertprep {argv[0]}: error: {flag} {hub}: hf:// is read-only (bertprep "
                                          "reads the Hugging Face hub and never writes to it): write to a local path, "
                                          "s3:// or gs://\n"), (argv, printed)
    makers = {
        "TrainConfig.checkpoint_dir": lambda: TrainConfig(format="tfrecord", data=str(records), checkpoint_dir=hub),
        "FinetuneConfig.output_dir": lambda: FinetuneConfig(task="MRPC", data=str(records), format="tfrecord",
                                                            output_dir=hub),
        "the output": lambda: convert(str(tmp_path / "no-checkpoint"), hub, "hf"),
    }
    for name, make in makers.items():
        with pytest.raises(UsageError, match=f"^{name} {hub}: hf:// is read-only"):
            make()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = checkpoint_main(["run", str(tmp_path / "no-checkpoint"), "--inputs", str(docs), "--out", hub])
    assert (code, err.getvalue()) == (2, f"trainer checkpoint: error: --out {hub}: hf:// is read-only (bertprep reads "
                                         "the Hugging Face hub and never writes to it): write to a local path, s3:// "
                                         "or gs://\n")
    assert sorted(tmp_path.rglob("*")) == before
