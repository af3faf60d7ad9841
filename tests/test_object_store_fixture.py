"""The object-store fixtures themselves (tests/object_store.py), driven with s3fs directly: what every
object-storage test relies on, and the exception classes the storage layer translates."""

import errno
import os
import subprocess
import sys
import time

import pytest
import s3fs


def loopback_listeners(pid):
    """(address, port) of every TCP socket process `pid` listens on, from /proc (no `ss` needed)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}") if os.path.islink(f"/proc/{pid}/fd/{fd}") else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    listeners = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    address, port = fields[1].split(":")
                    listeners.append((address, int(port, 16)))
    return listeners


def test_every_port_is_on_loopback_and_one_of_the_chosen(seaweedfs):
    deadline = time.monotonic() + 10  # S3 answers before the admin server (started last) listens
    while len(listeners := loopback_listeners(seaweedfs.process.pid)) < len(seaweedfs.ports):
        assert time.monotonic() < deadline, listeners
        time.sleep(0.1)
    assert sorted(port for _, port in listeners) == sorted(seaweedfs.ports.values())
    assert {address for address, _ in listeners} == {"0100007F"}  # 127.0.0.1, little-endian hex


def test_put_get_list_size_and_a_ranged_read(s3_bucket):
    fs = s3fs.S3FileSystem()  # from the environment the fixture set
    fs.pipe_file(f"{s3_bucket}/dir/a.txt", b"hello object store")
    assert fs.cat_file(f"{s3_bucket}/dir/a.txt") == b"hello object store"
    assert fs.cat_file(f"{s3_bucket}/dir/a.txt", start=6, end=12) == b"object"
    assert fs.ls(f"{s3_bucket}/dir", detail=False) == [f"{s3_bucket}/dir/a.txt".removeprefix("s3://")]
    assert fs.size(f"{s3_bucket}/dir/a.txt") == 18


def test_a_subprocess_sees_the_bucket_through_the_environment(s3_bucket):
    s3fs.S3FileSystem().pipe_file(f"{s3_bucket}/from-parent", b"42")
    read = subprocess.run([sys.executable, "-c", f"import s3fs; print(s3fs.S3FileSystem().cat_file('{s3_bucket}/"
                           "from-parent').decode())"], capture_output=True, text=True, timeout=60)
    assert read.stdout.strip() == "42", read.stderr


def test_a_multipart_put_round_trips_and_create_mode_refuses_to_replace_it(s3_bucket, tmp_path):
    fs = s3fs.S3FileSystem()
    local = tmp_path / "twelve-mib"
    local.write_bytes(os.urandom(12 << 20))  # over s3fs's 2 x 5 MiB single-PUT limit: a multipart upload
    fs.put_file(str(local), f"{s3_bucket}/big")
    assert fs.size(f"{s3_bucket}/big") == 12 << 20
    assert fs.cat_file(f"{s3_bucket}/big") == local.read_bytes()

    other = tmp_path / "other"
    other.write_bytes(os.urandom(12 << 20))
    with pytest.raises(OSError) as refused:  # If-None-Match: * on complete_multipart_upload
        fs.put_file(str(other), f"{s3_bucket}/big", mode="create")
    assert refused.value.errno == errno.EINVAL and "pre-conditions" in str(refused.value)
    assert fs.cat_file(f"{s3_bucket}/big") == local.read_bytes()
    uploads = fs.call_s3("list_multipart_uploads", Bucket=s3_bucket.removeprefix("s3://"))
    assert not uploads.get("Uploads")  # s3fs aborted the refused upload


def test_create_mode_refuses_a_second_write_with_einval_not_file_exists(s3_bucket):
    fs = s3fs.S3FileSystem()
    fs.pipe_file(f"{s3_bucket}/lock", b"first", mode="create")
    with pytest.raises(OSError) as refused:
        fs.pipe_file(f"{s3_bucket}/lock", b"second", mode="create")
    assert type(refused.value) is OSError and refused.value.errno == errno.EINVAL
    assert refused.value.__cause__.response["Error"]["Code"] == "PreconditionFailed"
    assert fs.cat_file(f"{s3_bucket}/lock") == b"first"


def test_a_wrong_secret_is_refused_with_permission_error(seaweedfs, s3_bucket):
    wrong = seaweedfs.filesystem(secret="not-the-secret")
    with pytest.raises(PermissionError):
        wrong.ls(s3_bucket)
    with pytest.raises(PermissionError):
        wrong.pipe_file(f"{s3_bucket}/never", b"x")
    with pytest.raises(PermissionError):
        s3fs.S3FileSystem(anon=True, skip_instance_cache=True).ls(s3_bucket)
    assert not s3fs.S3FileSystem().exists(f"{s3_bucket}/never")


def test_a_missing_bucket_or_key_is_file_not_found(s3_bucket):
    fs = s3fs.S3FileSystem()
    with pytest.raises(FileNotFoundError, match="bucket does not exist"):
        fs.pipe_file("s3://no-such-bucket/x", b"x")  # not made on upload: -s3.autoCreateBucket=false
    with pytest.raises(FileNotFoundError):
        fs.ls("s3://no-such-bucket")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{s3_bucket}/no-such-key")


def test_objects_survive_a_kill_and_restart_on_the_same_ports(seaweedfs, s3_bucket):
    fs = s3fs.S3FileSystem()
    fs.pipe_file(f"{s3_bucket}/durable", b"still here")
    ports = dict(seaweedfs.ports)
    seaweedfs.kill()
    seaweedfs.start()
    assert seaweedfs.ports == ports
    assert fs.cat_file(f"{s3_bucket}/durable") == b"still here"
