"""bertprep/storage.py and the URL half of bertprep/atomic.py against a real S3 store (SeaweedFS,
tests/object_store.py): whole objects only, the lock object, complete directories, streamed reads, and
one-line errors without secrets."""

import json
import os
import socket
import subprocess
import sys

import pytest

from bertprep import atomic, storage
from bertprep.errors import DataError, UsageError, run_reporting_errors
from tests import object_store

pytestmark = pytest.mark.usefixtures("s3_bucket")


@pytest.fixture(params=["s3_bucket", "gcs_bucket"])
def bucket(request):
    """The same claims on S3 (SeaweedFS) and on GCS (its emulator): one code path through fsspec."""
    return request.getfixturevalue(request.param)


def test_local_paths_keep_what_os_path_gives(tmp_path):
    local = str(tmp_path / "a" / ".." / "b")
    assert storage.absolute("rel/x") == os.path.abspath("rel/x")
    assert storage.normpath(local) == os.path.normpath(local)
    assert storage.join(local, "c", "d") == os.path.join(local, "c", "d")
    assert not storage.is_url(local) and not storage.is_url(f"file://{local}")
    assert storage.local_path(f"file://{tmp_path}/x%20y") == f"{tmp_path}/x y"
    assert storage.absolute("s3://b/p//") == "s3://b/p"
    assert storage.normpath("s3://b/p/./q//r/../s") == "s3://b/p/q/s"
    assert storage.display("s3://KEY:SECRET@b/p?X-Amz-Signature=abc") == "s3://b/p"


def test_an_object_appears_only_whole(bucket):
    url = f"{bucket}/whole/big.bin"
    data = os.urandom(12 << 20)  # past s3fs's multipart threshold: parts, then one completion
    with atomic.atomic_open(url) as f:
        f.write(data[: 1 << 20])
        assert not storage.exists(url)  # nothing under the final name while it is written
        f.write(data[1 << 20:])
    assert storage.getsize(url) == len(data)
    assert storage.read_bytes(url) == data
    with pytest.raises(RuntimeError), atomic.atomic_open(f"{bucket}/whole/failed.bin") as f:
        f.write(b"half")
        raise RuntimeError("the writer fails")
    assert not storage.exists(f"{bucket}/whole/failed.bin")
    assert storage.listdir(f"{bucket}/whole") == ["big.bin"]
    assert not [n for n in os.listdir(storage.spool_dir()) if n.startswith("failed.bin")]


def test_a_stream_reads_exact_sizes_across_blocks(bucket):
    url = f"{bucket}/stream/lines.txt"
    text = "".join(f"line {i} é\n" for i in range(50_000))
    atomic.atomic_write_bytes(url, text.encode())
    with storage.ReadAhead(url, block_size=4096, depth=2) as f:
        head = f.read(10_000)  # more than two blocks: read(n) gives n, as a file does
        assert len(head) == 10_000 and head == text.encode()[:10_000]
        assert head + f.read() == text.encode()
    with storage.open(url, "r", encoding="utf-8") as f:
        assert f.readlines()[-1] == "line 49999 é\n"
    with storage.ReadAhead(url, block_size=4096, depth=2) as f:  # lines across blocks, in bytes as a file gives them
        assert f.readline(3) == b"lin" and f.readline() == b"e 0 \xc3\xa9\n"
        assert [f.readline(), *f] == text.encode().splitlines(keepends=True)[1:]
    assert storage.sha256(url) == __import__("hashlib").sha256(text.encode()).hexdigest()


def test_a_second_holder_is_refused_naming_the_first(s3_bucket):
    root = f"{s3_bucket}/held"
    lock = f"{root}/.partial/lock"
    with atomic.hold(root, "create") as staging:
        assert staging == f"{root}/.partial"
        holder = json.loads(storage.read_bytes(lock))
        assert (holder["command"], holder["pid"]) == ("create", os.getpid())
        with pytest.raises(DataError, match=rf"{root}: another run is writing here \(create, pid {os.getpid()} on "):
            with atomic.hold(root, "create"):
                pass
    assert not storage.exists(lock)


def _lock_of(root, pid, host):
    info = {"command": "create", "pid": pid, "host": host, "since": "2026-11-23T00:00:00+00:00"}
    atomic.atomic_write_bytes(f"{root}/.partial/lock", json.dumps(info).encode())


def test_a_dead_local_holders_lock_is_taken_over_another_hosts_is_not(s3_bucket):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root = f"{s3_bucket}/killed"
    _lock_of(root, int(dead.stdout), socket.gethostname())
    with atomic.hold(root, "shard"):
        assert json.loads(storage.read_bytes(f"{root}/.partial/lock"))["command"] == "shard"
    other = f"{s3_bucket}/elsewhere"
    _lock_of(other, 1, "another-host")
    with pytest.raises(DataError, match=rf"on another-host.*leaves {other}/.partial/lock: remove it then"):
        with atomic.hold(other, "create"):
            pass
    assert json.loads(storage.read_bytes(f"{other}/.partial/lock"))["host"] == "another-host"


def test_a_directory_is_complete_only_with_its_marker_and_replaces_the_older(bucket):
    url = f"{bucket}/checkpoints/step-10"
    with atomic.atomic_dir(url, None) as directory:
        with open(os.path.join(directory, "old.bin"), "wb") as f:
            f.write(b"old")
    with atomic.atomic_dir(url, None) as directory:
        os.makedirs(os.path.join(directory, "sub"))
        with open(os.path.join(directory, "sub", "weights.bin"), "wb") as f:
            f.write(b"new")
    assert atomic.directory_complete(url)
    assert storage.listdir(url) == [".complete", "sub"] and storage.listdir(f"{url}/sub") == ["weights.bin"]
    assert json.loads(storage.read_bytes(f"{url}/.complete")) == {"files": {"sub/weights.bin": 3}}
    assert not atomic.directory_complete(f"{bucket}/checkpoints/step-20")


def _one_line(command):
    """What run_reporting_errors prints for `command`, and its exit code."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_reporting_errors("bertprep", command)
    return code, err.getvalue()


def test_store_errors_are_one_line_naming_the_url_without_secrets(s3_bucket, seaweedfs):
    code, line = _one_line(lambda: storage.listdir("s3://no-such-bucket-here/x"))
    assert code == 1 and line == "bertprep: error: s3://no-such-bucket-here/x: The specified bucket does not exist\n"
    with pytest.raises(UsageError, match=r"^zz://a/b: unknown URL scheme zz://"):
        storage.exists("zz://a/b")
    env = {**seaweedfs.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-0123"}
    with object_store.client_environment(env):
        code, line = _one_line(lambda: storage.getsize(f"{s3_bucket}/whole/big.bin"))
    assert code == 1 and line.startswith(f"bertprep: error: {s3_bucket}/whole/big.bin: access denied")
    assert "not-the-secret" not in line and line.count("\n") == 1


def test_a_missing_bucket_is_named_in_the_same_words_on_every_store(bucket):
    """gcsfs names a missing bucket by its request's path: `validate gs://no-such-bucket/x` said `not found:
    b/no-such-bucket/o`, where S3 says what is missing."""
    url = f"{bucket.split('://')[0]}://no-such-bucket-here/x"
    for check in (storage.check_reachable, storage.listdir):
        code, line = _one_line(lambda: check(url))  # noqa: B023 (called at once)
        assert (code, line) == (1, f"bertprep: error: {url}: The specified bucket does not exist\n"), check


def test_create_reads_text_shards_from_the_hub_as_from_disk(tmp_path):
    """hf:// (read): huggingface_hub's HfFileSystem against the stand-in hub, the same records as from disk."""
    from tests.stand_in_servers import StandInServer, run_cli

    sample = os.path.join(os.path.dirname(atomic.__file__), "data", "sample_corpus")
    vocab = os.path.join(os.path.dirname(atomic.__file__), "data", "sample_vocab.txt")
    files = {}
    for split in ("training", "test"):
        for name in sorted(os.listdir(os.path.join(sample, split))):
            with open(os.path.join(sample, split, name), "rb") as f:
                files[f"sample_corpus/{split}/{name}"] = f.read()
    with StandInServer() as server:
        server.add_hub_dataset("someone/shards", files)
        common = ["create", "--vocab", vocab, "--seq", 64, "--pred", 10, "--quiet"]
        hub = run_cli(*common, "--input", "hf://datasets/someone/shards/sample_corpus", "--out", tmp_path / "hub",
                      server=server)
        local = run_cli(*common, "--input", sample, "--out", tmp_path / "local", server=server)
    assert (hub.returncode, hub.stderr) == (0, "") and (local.returncode, local.stderr) == (0, "")
    written = {p.relative_to(tmp_path / "local"): p.read_bytes() for p in (tmp_path / "local").rglob("*.tfrecord")}
    assert written and all((tmp_path / "hub" / rel).read_bytes() == data for rel, data in written.items())


def test_a_prefetched_object_is_the_stream_open_returns(s3_bucket, tmp_path):
    urls = [f"{s3_bucket}/prefetch/{i}.bin" for i in range(3)]
    for i, url in enumerate(urls):
        atomic.atomic_write_bytes(url, bytes([i]) * 100_000)
    storage.prefetch(urls[0])
    storage.prefetch(urls[0])  # asked twice: one stream
    started = storage._PREFETCHED[urls[0]]
    with storage.open(urls[0], "rb") as f:
        assert f is started and f.read() == b"\0" * 100_000
    for url in urls:  # more than PREFETCH_LIMIT ahead: the oldest unopened one is closed and forgotten
        storage.prefetch(url)
    assert list(storage._PREFETCHED) == urls[-storage.PREFETCH_LIMIT:]
    assert storage.read_bytes(urls[2]) == b"\2" * 100_000 and urls[2] not in storage._PREFETCHED
    storage.prefetch(str(tmp_path / "local.bin"))  # a local path: nothing to start
    assert str(tmp_path / "local.bin") not in storage._PREFETCHED


@pytest.mark.parametrize("workers", [1, 2])
def test_a_refused_background_upload_ends_create_in_one_line_listing_only_whole_objects(s3_bucket, golden_dir,
                                                                                        tmp_path, workers):
    """create's objects are uploaded by the engine's process while the next shard is built (in this process
    with one worker, beside the pool with two): an object the store refuses still ends the run with one line
    naming it, exit 1; the manifest lists only objects that are there whole, and no lock or temporary stays.
    SeaweedFS refuses a key part over 255 bytes: the output of a shard whose name (254 bytes) the disk took."""
    from test_outputs import REPO, error_line

    long_stem = "s" * 250
    shards = tmp_path / "shards"
    shards.mkdir()
    for stem in ("a", long_stem):
        (shards / f"{stem}.txt").write_text((golden_dir / "corpus.txt").read_text(encoding="utf-8"), encoding="utf-8")
    spool, out = tmp_path / "spool", f"{s3_bucket}/refused-{workers}"
    result = subprocess.run(
        [sys.executable, "-m", "bertprep", "create", "--input", shards, "--vocab", golden_dir / "vocab.txt", "--out",
         out, "--dupe-factor", "1", "--format", "tfrecord,ofrecord", "--workers", str(workers), "--quiet"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "BERTPREP_SPOOL": str(spool)})
    line = error_line(result, 1)
    assert line.startswith(f"bertprep create: error: {out}/") and line.endswith(f"/tfrecord/training/{long_stem}"
                                                                               ".tfrecord: Your key is too long."), line
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)  # the AWS_* variables s3_bucket set
    stored = {key: info for key, info in fs.find(out.split("://", 1)[1], detail=True).items() if info["type"] == "file"}
    assert not [key for key in stored if key.endswith("/.partial/lock") or long_stem in key], sorted(stored)
    for manifest in [key for key in stored if key.endswith("/manifest.json")]:
        records = manifest.rsplit("/", 1)[0]
        for relative, entry in json.loads(fs.cat_file(manifest))["files"].items():
            assert long_stem not in relative
            assert storage.sha256(f"s3://{records}/{relative}") == entry["sha256"], relative
    assert os.listdir(spool) == []


def test_a_missing_object_is_named_by_its_url_on_every_store(bucket):
    """gcsfs names a missing object by its request: reading `gs://B/dir/x.tfrecord` said `gs://B/dir/x.tfrecord:
    not found: b/B/o/dir%2Fx.tfrecord`, the JSON API's path (and S3 `s3://B/dir/x.tfrecord: not found:
    B/dir/x.tfrecord`, the key again): now the URL as given, once, on both stores."""
    url = f"{bucket}/no-such-dir/x.tfrecord"
    for read in (lambda: storage.read_bytes(url), lambda: storage.open(url, "rb").read(4)):
        assert _one_line(read) == (1, f"bertprep: error: {url}: not found\n")  # noqa: B023 (called at once)
