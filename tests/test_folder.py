"""bertprep.folder.Folder: one object for a folder, local or in a real S3 store (SeaweedFS), that a step
reads and writes by relative name without asking which it is."""

import hashlib

import pytest

from bertprep.errors import DataError
from bertprep.folder import Folder


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "tree")
    return f"{request.getfixturevalue('s3_bucket')}/{tmp_path.name}/tree"


def test_a_folder_writes_lists_reads_and_removes_alike_local_or_in_a_bucket(root, tmp_path):
    folder = Folder(root)
    assert not folder.exists()
    with pytest.raises(DataError, match="no records here"):
        folder.require("directory", DataError(f"{folder}: no records here"))
    folder.atomic_write_bytes("a/part-0", b"zero")
    with folder.atomic_open("a/part-1", "wb") as f:
        f.write(b"one")
    with folder.folder("a").atomic_open("notes.txt", "w") as f:
        f.write("text\n")
    folder.require("directory", DataError("unreachable"))
    assert folder.isdir("a") and folder.isfile("a", "part-0") and not folder.isfile("a")
    assert folder.glob("a/part-*") == [folder.path("a", "part-0"), folder.path("a", "part-1")]
    assert folder.listdir("a") == ["notes.txt", "part-0", "part-1"]
    assert folder.subfolders() == ["a"] and folder.subfolders("a") == [] and folder.subfolders("none") == []
    assert sorted(folder.names_in("a")) == folder.listdir("a")
    assert [(folder.relpath(top), sorted(files)) for top, _dirs, files in folder.walk("a")] == [
        ("a", ["notes.txt", "part-0", "part-1"])]
    assert folder.files() == [folder.path("a", name) for name in ("notes.txt", "part-0", "part-1")]
    assert folder.getsize("a/part-1") == 3 and folder.sha256("a/part-1") == hashlib.sha256(b"one").hexdigest()
    assert folder.folder("a", "part-1").getsize() == 3  # a Folder may name one file
    assert folder.read_bytes("a/part-1", sha256=hashlib.sha256(b"one").hexdigest()) == b"one"
    with pytest.raises(Exception, match="sha256"):
        folder.read_bytes("a/part-0", sha256=hashlib.sha256(b"other").hexdigest())
    with folder.open("a/notes.txt", "r") as f:
        assert f.read() == "text\n"
    local = tmp_path / "copied"
    folder.folder("a").download_files(str(local))
    assert sorted(p.name for p in local.iterdir()) == ["notes.txt", "part-0", "part-1"]
    assert (local / "part-1").read_bytes() == b"one"
    folder.remove("a/part-0")
    assert folder.glob("a/part-*") == [folder.path("a", "part-1")]
    folder.remove_tree("a")
    assert not folder.isfile("a", "part-1") and not folder.isfile("a", "notes.txt")
    folder.remove_tree("a")  # gone already is fine
    assert folder.renames == (not root.startswith("s3://"))
    assert folder.reads_in_place == (not root.startswith("s3://"))


def test_a_missing_bucket_is_the_stores_error_not_the_callers_not_found(s3_bucket):
    folder = Folder(s3_bucket + "-not-there/tree")
    with pytest.raises(OSError, match="-not-there") as raised:
        folder.require("directory", DataError("the caller's line"))
    assert "the caller's line" not in str(raised.value)
    with pytest.raises(OSError, match="-not-there"):
        raise folder.not_found(DataError("the caller's line"))
    with pytest.raises(OSError, match="-not-there"):
        folder.check_reachable()
    Folder(s3_bucket + "/not-written-yet").check_reachable()
    missing = DataError("the caller's line")
    assert Folder(s3_bucket + "/not-written-yet").not_found(missing) is missing


def test_a_folder_is_a_value_shown_without_credentials():
    assert Folder("work/records") == Folder("work/records")
    training = Folder("work/records").folder("tfrecord", "training")
    assert training.path("part-0") == "work/records/tfrecord/training/part-0"
    assert str(Folder("s3://bucket/records")) == "s3://bucket/records"
    assert str(Folder("s3://bucket/records?X-Amz-Signature=abc")) == "s3://bucket/records"


def test_of_takes_a_folder_as_it_is_and_a_path_as_the_folder_there():
    records = Folder("s3://bucket/records")
    assert Folder.of(records) is records
    assert Folder.of("s3://bucket/records") == records
