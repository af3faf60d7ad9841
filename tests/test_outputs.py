"""Outputs under hostile conditions: temporaries where no reader globs, one-line operating-system
errors with nothing half-written, refused collisions, locks, damaged manifests, closed pipes."""

import contextlib
import errno
import gzip
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bertprep.atomic import atomic_open, staging_dir
from bertprep.cli import main
from bertprep.workdir import params_dirname
from stand_in_servers import REPO

TINY = "A first sentence.\nA second sentence.\n\nAnother document here.\nIt ends.\n"


def bertprep(*args, preexec_fn=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "bertprep", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, preexec_fn=preexec_fn, **kwargs)


def error_line(result, code):
    """The one line a failed command prints (and nothing else on stderr, no traceback)."""
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file())


def create_args(vocab, inputs, out, *extra):
    return ["create", "--input", *map(str, inputs), "--vocab", str(vocab), "--out", str(out), "--quiet",
            "--dupe-factor", "1", "--workers", "1", *extra]


@pytest.fixture
def tiny(tmp_path, golden_dir):
    good = tmp_path / "in" / "tiny.txt"
    good.parent.mkdir()
    good.write_text(TINY, encoding="utf-8")
    return good, golden_dir / "vocab.txt"


# -- temporaries ------------------------------------------------------------------------------


def test_the_temporary_is_in_the_trees_staging_directory_never_beside_its_file(tmp_path):
    root = tmp_path / "records"
    data_dir = root / "tfrecord" / "training"
    final = data_dir / ("x" * 246 + ".tfrecord")  # 255 bytes, the longest name a file system takes
    with atomic_open(final, staging=staging_dir(root)) as f:
        f.write(b"data")
        assert os.listdir(data_dir) == []  # what TensorFlow's `*` glob could see there, dot-files included
        (temp,) = os.listdir(root / ".partial")
        assert len(os.fsencode(temp)) <= 255 and temp.endswith(".partial")
    assert final.read_bytes() == b"data" and os.listdir(root / ".partial") == []
    with pytest.raises(ValueError), atomic_open(data_dir / "y.tfrecord", staging=staging_dir(root)) as f:
        f.write(b"half")
        raise ValueError("the writer failed")
    assert os.listdir(data_dir) == [final.name] and os.listdir(root / ".partial") == []


def test_a_lone_file_stages_beside_itself_and_tidies_up(tmp_path):
    with atomic_open(tmp_path / "report.json") as f:
        f.write(b"{}")
        assert os.listdir(tmp_path) == [".partial"]
    assert os.listdir(tmp_path) == ["report.json"]


def test_a_lone_file_survives_another_writer_tidying_the_staging_directory_away(tmp_path, monkeypatch):
    """Two lone writers of one directory (dedup's dry run: its steps in parallel): the other's last step removes
    the empty staging directory between this one's makedirs and open, which failed with "No such file or
    directory" naming the file."""
    from bertprep import atomic

    real = atomic.remove_stale_temps

    def other_writer_finishes(staging, path):
        real(staging, path)
        monkeypatch.setattr(atomic, "remove_stale_temps", real)  # once
        os.rmdir(staging)

    monkeypatch.setattr(atomic, "remove_stale_temps", other_writer_finishes)
    with atomic_open(tmp_path / "report.json") as f:
        f.write(b"{}")
    assert os.listdir(tmp_path) == ["report.json"]


def test_an_input_name_of_250_bytes_makes_records_under_the_255_byte_limit(tmp_path, tiny):
    good, vocab = tiny
    long_input = good.parent / ("a" * 246 + ".txt")
    long_input.write_text(TINY, encoding="utf-8")
    assert main(create_args(vocab, [long_input], tmp_path / "out", "--corpus", "long")) == 0
    (tfrecord,) = (tmp_path / "out").rglob("*.tfrecord")
    assert len(tfrecord.name.encode()) == 255


def test_temporaries_of_killed_runs_are_removed_and_staging_goes_away(tmp_path, tiny):
    good, vocab = tiny
    out = tmp_path / "out"
    argv = create_args(vocab, [good], out, "--corpus", "tiny")
    assert main(argv) == 0
    records = out / params_dirname(128, 20, 0.15, 12345, 1) / "tiny"
    complete = files_under(records)
    (records / ".partial").mkdir()
    (records / ".partial" / "tiny.tfrecord.4242-0a1b2c3d.partial").write_bytes(b"killed mid-write")
    (records / "tfrecord" / "training" / ".tmp-4242-tiny.tfrecord").write_bytes(b"an earlier version's temporary")
    assert main(argv) == 0
    assert files_under(records) == complete and not (records / ".partial").exists()


# -- operating-system errors: one line naming the path, exit 1, nothing half-written ----------


def stage_args(stage, tiny, golden_dir, records, out):
    """A command line of `stage` writing `out` (its output flag or argument) from small real inputs."""
    good, vocab = tiny
    squad, glue = golden_dir.parent / "finetune" / "squad" / "v1.1", golden_dir.parent / "finetune" / "glue"
    return {"shard": ["shard", "--input", good, "--out", out, "--corpus", "tiny"],
            "create": create_args(vocab, [good], out),
            "tokenize": ["tokenize", "--input", good, "--vocab", vocab, "--out", out],
            "pack": ["pack", records, "--out", out],
            "dedup": ["dedup", "--input", good.with_suffix(".jsonl"), "--out", out],
            "convert": ["convert", golden_dir / "G2.tfrecord", out, "--to", "ofrecord"],
            "create-squad": ["create-squad", "--input", next(squad.glob("dev*.json")), "--vocab", vocab, "--out", out],
            "create-glue": ["create-glue", "--task", "MRPC", "--data-dir", glue / "MRPC", "--vocab", vocab,
                            "--out", out],
            "validate --json": ["validate", golden_dir / "G2.tfrecord", "--json", out],
            "validate --plot": ["validate", golden_dir / "G2.tfrecord", "--plot", out]}[stage]


def records_read_by(stage, tiny, tmp_path):
    """The records directory pack and convert read (create's, of the tiny corpus); a path the others ignore."""
    good, vocab = tiny
    records = tmp_path / "records"
    if stage in ("pack", "convert"):
        assert main([*create_args(vocab, [good], records), "--corpus", "tiny"]) == 0
        records = next(records.glob("*/tiny"))
    return records


@pytest.mark.parametrize("stage", ["shard", "create", "tokenize", "pack", "dedup", "convert", "create-squad",
                                   "create-glue", "validate --json", "validate --plot"])
def test_out_under_a_regular_file_is_one_usage_line(tmp_path, tiny, golden_dir, stage):
    """Every stage ended an output under a regular file with the system's `…/afile/records: Not a directory`,
    exit 1, naming neither the flag nor the file in the way (validate's reports only after every check). It is
    one usage line naming both (options.refuse_file_above), before anything is read or made."""
    good, vocab = tiny
    good.with_suffix(".jsonl").write_text('{"text": "A first sentence. A second one."}\n', encoding="utf-8")
    records = tmp_path / "records"
    if stage == "pack":
        assert main([*create_args(vocab, [good], records), "--corpus", "tiny"]) == 0
        records = next(records.glob("*/tiny"))
    blocker = tmp_path / "afile"
    blocker.write_text("a file")
    before = files_under(tmp_path)
    out = blocker / "in2" / "records"
    line = error_line(bertprep(*stage_args(stage, tiny, golden_dir, records, out), "--quiet"), 2)
    flag = {"convert": "dst", "validate --json": "--json", "validate --plot": "--plot"}.get(stage, "--out")
    assert line == f"bertprep {stage.split()[0]}: error: {flag} {out}: {blocker} is a file, not a directory"
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("stage", ["shard", "create", "tokenize", "pack", "convert", "create-squad", "create-glue"])
def test_out_that_is_a_regular_file_is_one_usage_line(tmp_path, tiny, golden_dir, stage):
    """A stage writing a directory (a tree, for convert) given `--out afile` ended with the system's
    `…/afile: Not a directory` (or `…/afile/<params>: …`), exit 1, create-squad's after every question was read
    and tokenized. It is one usage line now, before anything is read, and afile is left as it was."""
    records = records_read_by(stage, tiny, tmp_path)
    out = tmp_path / "afile"
    out.write_text("a file")
    argv = stage_args(stage, tiny, golden_dir, records, out)
    if stage == "convert":
        argv[1] = records
    line = error_line(bertprep(*argv, "--quiet"), 2)
    flag = "dst" if stage == "convert" else "--out"
    assert line == f"bertprep {stage}: error: {flag} {out}: is a file, not a directory"
    assert out.read_text() == "a file"


@pytest.mark.parametrize("stage", ["shard", "create", "pack", "dedup", "convert", "validate --json"])
def test_out_under_a_dangling_link_is_one_usage_line(tmp_path, tiny, golden_dir, stage):
    """`--out link/sub` where `link` is a symbolic link to nothing passed the output check (os.path.exists
    passes over such a link) and the stage stopped when it made its folder: `bertprep shard: error:
    …/link/sub: No such file or directory` (`--out link`: `…/link: File exists`), exit 1, naming neither the
    flag nor the link. It is one usage line naming both now (options.refuse_dangling_link), before anything is
    read or made, as the trainer's check_output_place has refused it; a directory output that is the link
    itself too (dedup's `--out link` was still `…/link: File exists`, exit 1, after its inputs were read)."""
    records = records_read_by(stage, tiny, tmp_path)
    tiny[0].with_suffix(".jsonl").write_text('{"text": "A first sentence. A second one."}\n', encoding="utf-8")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    before = files_under(tmp_path)
    flag = {"convert": "dst", "validate --json": "--json"}.get(stage, "--out")
    for out in (link / "sub", link) if stage != "validate --json" else (link / "sub",):
        argv = stage_args(stage, tiny, golden_dir, records, out)
        if stage == "convert":
            argv[1], argv[-1] = records, "parquet"  # a tree (its output is a directory) of no Parquet yet
        line = error_line(bertprep(*argv, "--quiet"), 2)
        assert line == (f"bertprep {stage.split()[0]}: error: {flag} {out}: {link} is a symbolic link to "
                        f"{tmp_path / 'nowhere'}, which does not exist: nothing can be made under it")
    assert files_under(tmp_path) == before and os.readlink(link) == str(tmp_path / "nowhere")


@pytest.mark.parametrize("argv", [["create"], ["tokenize"], ["shard", "--corpus", "c"], ["dedup"],
                                  ["prepare", "wikipedia"], ["download", "squad"]])
def test_workdir_under_a_regular_file_is_one_usage_line(tmp_path, tiny, argv):
    """Without --out a stage writes under --workdir (download and prepare always do): a --workdir under a
    regular file ended with `…/afile/w: Not a directory`, exit 1, prepare's only after it had tried the network.
    It is a usage line naming --workdir now; a --workdir the run does not write in (--out given) is not
    checked, as before."""
    good, vocab = tiny
    blocker = tmp_path / "afile"
    blocker.write_text("a file")
    workdir = blocker / "w"
    extra = ["--vocab", vocab] if argv[0] in ("tokenize", "prepare") else []
    line = error_line(bertprep(*argv, *extra, "--workdir", workdir, "--quiet"), 2)
    assert line == f"bertprep {argv[0]}: error: --workdir {workdir}: {blocker} is a file, not a directory"
    assert blocker.read_text() == "a file"
    if argv[0] == "create":
        assert main([*create_args(vocab, [good], tmp_path / "out"), "--workdir", str(workdir)]) == 0


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory nobody can write, root included: a read-only tmpfs, else /sys where the OS refuses root."""
    mountpoint = tmp_path / "ro"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mountpoint)],
                             capture_output=True).returncode == 0
    if mounted:
        yield mountpoint
        subprocess.run(["umount", str(mountpoint)], check=True)
        return
    try:
        os.mkdir("/sys/bertprep-probe")
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            yield Path("/sys")
            return
        raise
    os.rmdir("/sys/bertprep-probe")
    pytest.skip("no read-only directory on this machine: cannot mount tmpfs and /sys is writable")


def test_out_in_a_read_only_directory(read_only_dir, tiny):
    good, vocab = tiny
    line = error_line(bertprep(*create_args(vocab, [good], read_only_dir / "records")), 1)
    assert line.startswith(f"bertprep create: error: {read_only_dir}/records")
    assert line.endswith((": Read-only file system", ": Permission denied"))


def limit_file_size(limit):
    """For a child process: files stop growing at `limit` bytes (EFBIG, "File too large"), as on a full quota."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing the process
    return apply


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_write_that_fails_midway_leaves_nothing(golden_dir, tmp_path, workers):
    shards = tmp_path / "in" / "training"
    shards.mkdir(parents=True)
    documents = (golden_dir / "corpus.txt").read_text(encoding="utf-8").strip("\n").split("\n\n")
    for i in range(2):
        (shards / f"s{i}.txt").write_text("\n\n".join(documents[i::2]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = bertprep(*create_args(golden_dir / "vocab.txt", [shards.parent], out, "--workers", workers),
                      preexec_fn=limit_file_size(64 * 1024))
    line = error_line(result, 1)
    assert line.startswith(f"bertprep create: error: {out}/") and line.endswith(": File too large")
    assert ".partial" not in line  # the output's own name, not its temporary's
    assert files_under(out) == []  # no record file, no temporary, no manifest vouching for anything


@pytest.fixture
def small_filesystem(tmp_path):
    """A 256 KiB tmpfs: writing more fails with ENOSPC, as on a full disk."""
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mountpoint)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs CAP_SYS_ADMIN): {mount.stderr.decode().strip()}")
    yield mountpoint
    subprocess.run(["umount", str(mountpoint)], check=True)


def test_a_full_disk(golden_dir, small_filesystem):
    out = small_filesystem / "records"
    result = bertprep(*create_args(golden_dir / "vocab.txt", [golden_dir / "corpus.txt"], out))
    line = error_line(result, 1)
    assert line.startswith(f"bertprep create: error: {out}/") and line.endswith(": No space left on device")
    assert files_under(out) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_reports_and_conversions_to_a_full_device(golden_dir):
    line = error_line(bertprep("validate", golden_dir / "G2.tfrecord", "--json", "/dev/full", "--quiet"), 1)
    assert line == "bertprep validate: error: /dev/full: No space left on device"
    line = error_line(bertprep("convert", golden_dir / "G2.tfrecord", "/dev/full", "--to", "ofrecord", "--quiet"), 1)
    assert line == "bertprep convert: error: /dev/full: No space left on device"




# -- exit 0 only when nothing is lost or misplaced ---------------------------------------------


def test_two_inputs_that_would_write_the_same_file_are_refused(tmp_path, tiny):
    good, vocab = tiny
    twin = tmp_path / "other" / "tiny.txt"
    twin.parent.mkdir()
    twin.write_text(TINY + "\nA third document.\nShort.\n", encoding="utf-8")
    out = tmp_path / "out"
    line = error_line(bertprep(*create_args(vocab, [good, twin], out)), 2)
    assert f"{good} and {twin} would both be written to" in line and line.endswith("tiny.tfrecord: rename one of them")
    assert not out.exists()


def test_convert_refuses_colliding_names_and_empty_inputs(golden_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "part-0").write_bytes((golden_dir / "G2.ofrecord").read_bytes())
    (src / "part-0.tfrecord").write_bytes((golden_dir / "G2.tfrecord").read_bytes())
    line = error_line(bertprep("convert", src, tmp_path / "dst", "--to", "tfrecord", "--quiet"), 2)
    assert (f"{src / 'part-0'} and {src / 'part-0.tfrecord'} would both be written to "
            f"{tmp_path / 'dst' / 'part-0.tfrecord'}: rename one of them") in line
    (src / "part-0.tfrecord").unlink()
    (src / "part-1").write_bytes(b"")
    line = error_line(bertprep("convert", src, tmp_path / "dst", "--to", "tfrecord", "--quiet"), 1)
    assert line.startswith(f"bertprep convert: error: {src / 'part-1'}: empty file, no records to convert")
    line = error_line(bertprep("convert", src / "part-1", tmp_path / "one", "--to", "ofrecord", "--quiet"), 1)
    assert "empty file" in line
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_convert_refuses_an_output_named_for_another_format(golden_dir, tmp_path):
    """`convert a.tfrecord b.tfrecord --to parquet` wrote Parquet under a TFRecord name, exit 0; every reader
    (convert too) went by the name: `b.tfrecord: record 0 at byte 0: length CRC mismatch`."""
    src = golden_dir / "G2.tfrecord"
    for name, to, title, wanted in (("b.tfrecord", "parquet", "TFRecord", "*.parquet"),
                                    ("part-3", "hdf5", "OFRecord", "*.hdf5"),
                                    ("b.hdf5", "tfrecord", "HDF5", "*.tfrecord"),
                                    ("b.bin", "ofrecord", "Megatron-Core", "part-<i>")):
        line = error_line(bertprep("convert", src, tmp_path / name, "--to", to, "--quiet"), 2)
        assert line == (f"bertprep convert: error: {tmp_path / name}: the name says {title}, but --to {to} writes "
                        f"{title_of(to)}: readers take a file's format from its name and would read it as {title}; "
                        f"name it {wanted}")
    assert os.listdir(tmp_path) == []
    for name, to in (("b.parquet", "parquet"), ("b.bin", "tfrecord"), ("plain", "hdf5"), ("b.tf_record", "tfrecord")):
        assert bertprep("convert", src, tmp_path / name, "--to", to, "--quiet").returncode == 0, name
        assert bertprep("convert", tmp_path / name, tmp_path / f"{name}.back.tfrecord", "--to", "tfrecord",
                        "--quiet").returncode == 0  # read back by its name, or its bytes
        assert (tmp_path / f"{name}.back.tfrecord").read_bytes() == src.read_bytes()


def test_convert_refuses_an_ofrecord_name_no_directory_reader_lists(golden_dir, tmp_path):
    """`convert a.tfrecord out/q.ofrecord --to ofrecord` wrote the file, exit 0, and `validate out` then said
    `out: nothing to validate (no record files, …)`: the readers of a folder list OFRecord files as part-<i>."""
    src = golden_dir / "G2.tfrecord"
    for name in ("q.ofrecord", "Q.OFRecord", "train.of_record"):
        line = error_line(bertprep("convert", src, tmp_path / name, "--to", "ofrecord", "--quiet"), 2)
        assert line == (f"bertprep convert: error: {tmp_path / name}: an OFRecord name that no reader of a directory "
                        "lists (they list part-<i>, and fine-tuning's <role>.of_record-<i>): validate, the loaders "
                        "and the trainer given its folder would not see it; name it part-<i>")
    assert os.listdir(tmp_path) == []
    # to another format the name is no claim (its bytes say TFRecord), and part-<i> is what the folder lists
    assert bertprep("convert", src, tmp_path / "q.ofrecord", "--to", "tfrecord", "--quiet").returncode == 0
    assert bertprep("convert", src, tmp_path / "part-0", "--to", "ofrecord", "--quiet").returncode == 0
    os.unlink(tmp_path / "q.ofrecord")
    assert bertprep("validate", tmp_path, "--quiet").returncode == 0  # the part is read from the folder


def title_of(fmt):
    return {"tfrecord": "TFRecord", "ofrecord": "OFRecord", "hdf5": "HDF5", "parquet": "Parquet"}[fmt]


def test_convert_refuses_a_megatron_file_as_records(golden_dir, tmp_path):
    """A tokenize output's .bin was read as TFRecord: `….bin: record 0 at byte 0: truncated data (118734 of
    563804012283890344 bytes)`, exit 1."""
    tokenized = tmp_path / "tok"
    assert bertprep("tokenize", "--input", golden_dir / "corpus.txt", "--vocab", golden_dir / "vocab.txt",
                    "--out", tokenized, "--quiet").returncode == 0
    for suffix in (".bin", ".idx"):
        (path,) = tokenized.rglob(f"*{suffix}")
        line = error_line(bertprep("convert", path, tmp_path / "out.parquet", "--to", "parquet", "--quiet"), 2)
        assert line == (f"bertprep convert: error: {path}: a Megatron-Core indexed dataset file (token sequences, "
                        "as tokenize writes them), not records: convert reads TFRecord, OFRecord, HDF5 and Parquet "
                        "record files")
    assert not (tmp_path / "out.parquet").exists()


def test_convert_of_one_file_to_a_name_ending_in_a_slash_is_a_usage_line(golden_dir, tmp_path):
    """`convert G2.tfrecord new/ --to parquet` failed as it wrote: `new/: Not a directory` (exit 1), of a
    directory that did not exist."""
    src = golden_dir / "G2.tfrecord"
    line = error_line(bertprep("convert", src, f"{tmp_path / 'new'}/", "--to", "parquet", "--quiet"), 2)
    assert line == (f"bertprep convert: error: {tmp_path / 'new'}/: names a directory (it ends in /), and {src} is "
                    "one file; give an output file name")
    assert os.listdir(tmp_path) == []


def test_convert_of_a_directory_holding_a_tree_of_two_formats_is_refused(tmp_path, tiny):
    """`convert WORKDIR/records out` (create's --out, its tree a level or two below) converted the tree's TFRecord
    and OFRecord copies both: every record twice, exit 0."""
    good, vocab = tiny
    records = tmp_path / "records"
    assert bertprep(*create_args(vocab, [good], records)).returncode == 0
    (tree,) = [p.parent for p in records.rglob("manifest.json")]
    line = error_line(bertprep("convert", records, tmp_path / "out", "--to", "parquet", "--quiet"), 2)
    assert line == (f"bertprep convert: error: {records}: holds {tree}, a create output whose ofrecord and tfrecord "
                    f"files are the same records (converted together, each record would be written twice): convert "
                    f"{tree} on its own")
    assert not (tmp_path / "out").exists()
    assert bertprep("convert", tree, tmp_path / "out", "--to", "parquet", "--quiet").returncode == 0  # the tree


def test_convert_of_one_file_into_a_stages_output_folder_is_refused(tmp_path, tiny, golden_dir, capsys):
    """`convert x.tfrecord RECORDS/ofrecord/training/part-9 --to ofrecord` wrote a file the tree's manifest does not
    list, exit 0; every reader of the tree then refused it as unlisted. Beside the tree it is written."""
    good, vocab = tiny
    records = tmp_path / "records"
    assert main(create_args(vocab, [good], records)) == 0
    (tree,) = [p.parent for p in records.rglob("manifest.json")]
    before = files_under(records)
    src = golden_dir / "G2.tfrecord"
    for dst in (tree / "ofrecord" / "training" / "part-9", tree / "tfrecord" / "extra.tfrecord", tree / "x.parquet"):
        capsys.readouterr()
        assert main(["convert", str(src), str(dst), "--to", dst.suffix[1:] or "ofrecord", "--quiet"]) == 2
        assert capsys.readouterr().err == (f"bertprep convert: error: {dst}: inside the output of bertprep create "
                                           f"({tree / 'manifest.json'} lists its files, and would not list this one): "
                                           "write it elsewhere, or convert the whole folder\n")
    assert files_under(records) == before
    assert main(["convert", str(src), str(tmp_path / "part-9"), "--to", "ofrecord", "--quiet"]) == 0


def test_convert_of_a_directory_to_an_existing_file_is_a_usage_line(golden_dir, tmp_path):
    """`convert DIR x.parquet` (x.parquet a file) failed while holding its output: `x.parquet: Not a directory`,
    exit 1."""
    src, dst = tmp_path / "src", tmp_path / "x.parquet"
    src.mkdir()
    (src / "G2.tfrecord").write_bytes((golden_dir / "G2.tfrecord").read_bytes())
    dst.write_bytes(b"kept")
    line = error_line(bertprep("convert", src, dst, "--to", "parquet", "--quiet"), 2)
    assert line == f"bertprep convert: error: dst {dst}: is a file, not a directory"  # options.refuse_file_above
    assert dst.read_bytes() == b"kept" and sorted(os.listdir(tmp_path)) == ["src", "x.parquet"]


def test_convert_called_in_python_writes_what_the_command_writes(golden_dir, tmp_path, capsys):
    from bertprep.errors import UsageError
    from bertprep.stages.convert import ConvertOptions, convert

    src = tmp_path / "src"
    for name in ("G1", "G2"):
        (src / name).mkdir(parents=True)
        (src / name / f"{name}.tfrecord").write_bytes((golden_dir / f"{name}.tfrecord").read_bytes())
    assert main(["convert", str(src), str(tmp_path / "cli"), "--to", "ofrecord"]) == 0
    printed = capsys.readouterr().out
    summary = convert(ConvertOptions(str(src), str(tmp_path / "py"), "ofrecord"))
    assert capsys.readouterr() == ("", "")
    for name in ("G1", "G2"):  # OneFlow's key order: the golden OFRecord's bytes
        assert (tmp_path / "py" / name / "part-0").read_bytes() == (golden_dir / f"{name}.ofrecord").read_bytes()
        assert (tmp_path / "cli" / name / "part-0").read_bytes() == (golden_dir / f"{name}.ofrecord").read_bytes()
    lines = [f"{f['src']} -> {f['dst'].replace(str(tmp_path / 'py'), str(tmp_path / 'cli'))}: {f['records']} records"
             for f in summary["files"]]
    assert printed.splitlines() == [*lines, f"converted {summary['records']} records in 2 file(s) to ofrecord"]
    one = convert(src=golden_dir / "G1.ofrecord", dst=tmp_path / "one.tfrecord", to="tfrecord")
    assert one["records"] == 1373
    assert (tmp_path / "one.tfrecord").read_bytes() == (golden_dir / "G1.tfrecord").read_bytes()
    with pytest.raises(UsageError,
                       match=r"^ConvertOptions.to must be one of tfrecord, ofrecord, hdf5, parquet, not 'avro'$"):
        ConvertOptions(str(src), str(tmp_path / "x"), "avro")


def test_a_corpus_name_that_is_a_path_is_refused(tmp_path, tiny):
    good, vocab = tiny
    for corpus in (str(tmp_path / "elsewhere"), "../up", "a/b"):
        line = error_line(bertprep(*create_args(vocab, [good], tmp_path / "out", "--corpus", corpus)), 2)
        assert line == f"bertprep create: error: --corpus {corpus!r}: use letters, digits, '_' and '-' only"
    assert sorted(os.listdir(tmp_path)) == ["in"]


# -- concurrency and stale state ----------------------------------------------------------------

HOLDER = """
import sys
from bertprep.atomic import hold
with hold(sys.argv[1], "bertprep create"):
    print("holding", flush=True)
    sys.stdin.readline()
"""


@contextlib.contextmanager
def holder_process(root):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    try:
        assert proc.stdout.readline() == "holding\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_second_run_into_the_same_records_is_refused_with_the_holder(tmp_path, tiny):
    good, vocab = tiny
    out = tmp_path / "out"
    records = out / params_dirname(128, 20, 0.15, 12345, 1) / "tiny"
    argv = create_args(vocab, [good], out, "--corpus", "tiny")
    with holder_process(records) as holder:
        line = error_line(bertprep(*argv), 1)
        assert line.startswith(f"bertprep create: error: {records}: another run is writing here "
                               f"(bertprep create, pid {holder.pid} on {os.uname().nodename}, since ")
        assert line.endswith("); wait for it to finish or stop it")
        assert files_under(records) == [".partial/lock"]
        holder.stdin.write("done\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    assert main(argv) == 0


@pytest.mark.parametrize("stage", ["create", "tokenize"])
def test_a_held_output_is_refused_before_the_inputs_are_read(tmp_path, tiny, stage):
    """create and tokenize read every input whole (checked as UTF-8 text, hashed) before hold() found their output
    held by a live run: minutes for a large corpus, and an input's own error came before the refusal. The
    refusal comes first now (atomic.refuse_if_held, as dedup's): here before a gzip input is even looked at."""
    good, vocab = tiny
    (good.parent / "packed.txt").write_bytes(gzip.compress(TINY.encode()))
    out = tmp_path / "out"
    argv = {"create": create_args(vocab, [good.parent], out, "--corpus", "tiny"),
            "tokenize": ["tokenize", "--input", good.parent, "--vocab", vocab, "--out", out, "--corpus", "tiny"]}[stage]
    held = out / params_dirname(128, 20, 0.15, 12345, 1) / "tiny" if stage == "create" else out / "tiny"
    with holder_process(held) as holder:
        line = error_line(bertprep(*argv), 1)
    assert line.startswith(f"bertprep {stage}: error: {held}: another run is writing here "
                           f"(bertprep create, pid {holder.pid} on {os.uname().nodename}, since ")
    assert line.endswith("); wait for it to finish or stop it")
    line = error_line(bertprep(*argv), 1)  # free again: the input's own error
    assert line == (f"bertprep {stage}: error: {good.parent / 'packed.txt'}: binary data (a gzip file?), expected "
                    "UTF-8 text: decompress it first")


def test_a_held_shard_output_is_refused_before_the_inputs_are_hashed(tmp_path, tiny, monkeypatch):
    """shard hashed every input (sha256, for its manifest) before hold() found --out held by a live run."""
    import bertprep
    from bertprep.errors import HeldByAnotherRun
    from bertprep.stages import shard as shard_stage

    good, _vocab = tiny
    hashed = []
    real = shard_stage.sha256_file
    monkeypatch.setattr(shard_stage, "sha256_file", lambda path, *a, **k: hashed.append(path) or real(path, *a, **k))
    out = tmp_path / "out"
    with holder_process(out) as holder, pytest.raises(HeldByAnotherRun, match=(
            rf"^{out}: another run is writing here \(bertprep create, pid {holder.pid} on ")):
        bertprep.shard(input=good, out=out, corpus="tiny", train_shards=1, test_shards=1)
    assert hashed == []
    bertprep.shard(input=good, out=out, corpus="tiny", train_shards=1, test_shards=1)
    assert hashed and (out / "manifest.json").is_file()


@pytest.mark.parametrize("stage", ["create-squad", "create-glue"])
def test_a_held_fine_tuning_output_is_refused_before_the_input_is_read(tmp_path, golden_dir, stage):
    """create-squad read every question and tokenized every paragraph, create-glue read and checked every split,
    before hold() found --out held by a live run; an input's own error came first. The refusal comes first now."""
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "dev-v1.1.json").write_text("not JSON", encoding="utf-8")
    (tmp_path / "MRPC" / "dev.tsv").write_text("no header row\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = {"create-squad": ["create-squad", "--input", tmp_path / "dev-v1.1.json"],
            "create-glue": ["create-glue", "--task", "MRPC", "--data-dir", tmp_path / "MRPC", "--split", "dev"]}[stage]
    argv += ["--vocab", golden_dir / "vocab.txt", "--out", out, "--quiet"]
    with holder_process(out) as holder:
        line = error_line(bertprep(*argv), 1)
    assert line.startswith(f"bertprep {stage}: error: {out}: another run is writing here "
                           f"(bertprep create, pid {holder.pid} on {os.uname().nodename}, since ")
    line = error_line(bertprep(*argv), 1)  # free again: the input's own error
    assert "another run" not in line and "dev" in line


def test_a_killed_holder_releases_the_lock(tmp_path, tiny):
    good, vocab = tiny
    out = tmp_path / "out"
    records = out / params_dirname(128, 20, 0.15, 12345, 1) / "tiny"
    with holder_process(records) as holder:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert (records / ".partial" / "lock").exists()  # left behind, but no process holds it
    assert main(create_args(vocab, [good], out, "--corpus", "tiny")) == 0
    assert not (records / ".partial").exists()


@pytest.mark.parametrize("damage", ["[]", '{"files": []}', '{"files": {"x.tfrecord": 3}}', "{not json"])
def test_a_damaged_manifest_is_named_not_trusted(tmp_path, tiny, damage):
    good, vocab = tiny
    out = tmp_path / "out"
    argv = create_args(vocab, [good], out, "--corpus", "tiny")
    assert main(argv) == 0
    manifest = out / params_dirname(128, 20, 0.15, 12345, 1) / "tiny" / "manifest.json"
    manifest.write_text(damage)
    line = error_line(bertprep(*argv), 1)
    assert line.startswith(f"bertprep create: error: {manifest}: damaged manifest (")
    assert line.endswith("); remove it to redo this stage from scratch")
    manifest.unlink()
    assert main(argv) == 0


# -- a reader that stops early -----------------------------------------------------------------


def test_a_closed_pipe_ends_the_command_quietly(golden_dir, tmp_path, tiny):
    inspect = subprocess.Popen([sys.executable, "-m", "bertprep", "inspect", str(golden_dir / "G1.tfrecord"),
                                "-n", "1000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert inspect.stdout.readline().startswith(b"== ")  # `| head -1`
    inspect.stdout.close()
    assert inspect.wait(timeout=60) == 141 and inspect.stderr.read() == b""
    good, vocab = tiny
    for argv in (["convert", golden_dir / "G2.tfrecord", tmp_path / "g2", "--to", "ofrecord"],
                 [*create_args(vocab, [good], tmp_path / "out"), "--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "bertprep", *map(str, argv)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=REPO)
        proc.stdout.close()  # the reader is gone before the summary is written
        assert proc.wait(timeout=60) == 141 and proc.stderr.read() == b"", argv
