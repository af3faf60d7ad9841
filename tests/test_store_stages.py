"""The record stages on a real object store (SeaweedFS, the `s3_bucket` fixture): pack, validate, convert,
inspect, create-squad/create-glue and --vocab read and write `s3://` URLs; what they write to the bucket is
byte for byte what the same run writes on local disk (manifests: with the URL in place of the local path);
reruns redo only what is missing; a held prefix, a bucket that is not there, a refused secret and a scheme
nothing handles each end in one line naming the URL, with nothing written."""

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from bertprep import formats
from bertprep.cli import main
from bertprep.stages.download.glue import task_outputs
from test_create import golden_argv, only_records_dir, output_files
from test_outputs import bertprep, error_line
from test_validate_text import DOC_A, DOC_B, DOC_C, _glue_file, _squad, shard_dir

# The module's runs on disk and in the bucket are made once, on one worker.
pytestmark = pytest.mark.xdist_group("store_stages")

FORMATS = "tfrecord,ofrecord,parquet,hdf5"


def store():
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def objects(url):
    """{key relative to url: bytes} of every object under the prefix `url`."""
    fs, prefix = store(), url.split("://", 1)[1].rstrip("/")
    return {key[len(prefix) + 1:]: fs.cat_file(key) for key in fs.find(prefix)}


def run_json(*argv):
    """(exit code, the JSON summary) of an in-process CLI run with --json --quiet."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*map(str, argv), "--json", "--quiet"])
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else None


def printed(*argv):
    """What an in-process CLI run that succeeds prints on stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(map(str, argv))) == 0
    return out.getvalue()


def assert_same_tree(roots, relative):
    """The objects under the bucket root's `relative` are the files under the local root's, byte for byte;
    manifests with the bucket root's URL read as the local root's path."""
    local, stored = roots.local / relative, objects(f"{roots.url}/{relative}")
    files = {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    assert sorted(stored) == sorted(files)
    for name, data in files.items():
        if name.endswith("manifest.json"):
            assert stored[name].decode().replace(roots.url, str(roots.local)) == data.decode(), name
        else:
            assert stored[name] == data, name


@dataclasses.dataclass
class Roots:
    local: Path  # the local run's root
    url: str  # the bucket run's root
    records: str  # under each: the create output (G1 in four formats)
    packed: str  # where pack --out <root>/packed writes
    params: str  # the records' parameters directory


@pytest.fixture(scope="module")
def roots(s3_bucket, golden_dir, tmp_path_factory):
    """A local root and a bucket root, each holding the same create output."""
    local = tmp_path_factory.mktemp("local")
    assert main(golden_argv(golden_dir, local / "records", "G1", "--format", FORMATS)) == 0
    records = only_records_dir(local / "records")
    params = records.parent.name
    url = f"{s3_bucket}/run"
    store().put(str(local / "records"), f"{url.split('://')[1]}/records", recursive=True)
    relative = str(records.relative_to(local))
    assert output_files(records) == {k: v for k, v in objects(f"{url}/{relative}").items() if k != "manifest.json"}
    return Roots(local, url, relative, f"packed/{params}_packed3/{records.name}", params)


@pytest.fixture(scope="module")
def packed(roots):
    """pack run on both, with the summaries."""
    local, url = roots.local, roots.url
    return {where: run_json("pack", f"{root}/{roots.records}", "--out", f"{root}/packed", "--workers", "2")
            for where, root in (("local", local), ("bucket", url))}


def test_pack_writes_the_local_bytes_to_the_bucket(roots, packed):
    url = roots.url
    assert packed["local"][0] == packed["bucket"][0] == 0
    assert packed["bucket"][1]["records_dir"] == f"{url}/{roots.packed}"
    assert_same_tree(roots, roots.packed)
    manifest = json.loads(objects(f"{url}/{roots.packed}")["manifest.json"])
    assert manifest["source"]["records_dir"] == f"{url}/{roots.records}"  # the URL where a local run records its path


def test_pack_rerun_restores_a_missing_object(roots, packed):
    url = roots.url
    store().rm_file(f"{url}/{roots.packed}/tfrecord/training/corpus.tfrecord".split("://")[1])
    code, summary = run_json("pack", f"{url}/{roots.records}", "--out", f"{url}/packed")
    assert code == 0 and summary["shards_packed"] == 1
    assert_same_tree(roots, roots.packed)


def test_pack_rerun_into_the_bucket_rewrites_nothing(roots, packed):
    url = roots.url
    prefix = f"{url}/{roots.packed}".split("://")[1]

    def versions():
        return {key: (info["LastModified"], info["ETag"]) for key, info in
                store().find(prefix, detail=True).items()}

    before = versions()
    time.sleep(1.1)  # LastModified has whole seconds: a rewrite would show
    code, summary = run_json("pack", f"{url}/{roots.records}", "--out", f"{url}/packed")
    assert code == 0 and summary["shards_packed"] == 0
    assert versions() == before  # every shard object and the manifest left as they were


def test_validate_reads_a_bucket_tree_as_a_local_one(roots, packed):
    local, url = roots.local, roots.url
    reports = {where: run_json("validate", f"{root}/{roots.records}", f"{root}/{roots.packed}")
               for where, root in (("local", local), ("bucket", url))}
    assert reports["local"][0] == reports["bucket"][0] == 0
    assert reports["bucket"][1]["sound"] and len(reports["bucket"][1]["datasets"]) == 2
    as_local = json.dumps(reports["bucket"][1]).replace(url, str(local))
    assert json.loads(as_local) == reports["local"][1]


def test_validate_names_the_object_of_a_problem(roots):
    local, url = roots.local, roots.url
    damaged = bytearray((local / roots.records / "tfrecord/training/corpus.tfrecord").read_bytes())
    damaged[100] ^= 0xFF
    target = f"{url}/damaged/tfrecord/training/corpus.tfrecord"
    store().pipe_file(target.split("://")[1], bytes(damaged))
    code, report = run_json("validate", f"{url}/damaged")
    assert code == 1 and not report["sound"]
    assert report["findings"][0]["file"] == target and "CRC" in report["findings"][0]["message"]


def test_validate_reads_text_shards_and_downloads_in_the_bucket(roots):
    """A text tree (shards with a bad line, a SQuAD download its manifest vouches for, a GLUE file a row short)
    gives the bucket the local report, its findings naming the objects."""
    local = roots.local / "text"
    shard_dir(local / "sharded", [DOC_A + DOC_B, DOC_B.encode() + b"caf\xe9\n\n"], [DOC_C])
    squad = local / "download/squad/v1.1/dev-v1.1.json"
    squad.parent.mkdir(parents=True)
    squad.write_text(json.dumps(_squad(10_570)))
    listed = {"files": {"v1.1/dev-v1.1.json": {"sha256": hashlib.sha256(squad.read_bytes()).hexdigest()}}}
    (local / "download/squad/manifest.json").write_text(json.dumps(listed))
    (local / "download/glue/RTE").mkdir(parents=True)
    header = {name: layout[0] for name, _split, layout in task_outputs("RTE")}["dev.tsv"]
    _glue_file(local / "download/glue/RTE/dev.tsv", header, 276, len(header))
    url = f"{roots.url}/text"
    store().put(str(local), url.split("://")[1], recursive=True)
    for tree in ("sharded", "download"):
        (code, report), (local_code, local_report) = (run_json("validate", f"{root}/{tree}") for root in (url, local))
        assert code == local_code == 1
        assert json.loads(json.dumps(report).replace(url, str(local))) == local_report
        assert report["findings"] and all(f["file"].startswith(f"{url}/{tree}/") for f in report["findings"])
    assert [f["message"] for f in report["findings"]] == ["276 examples, GLUE RTE dev.tsv has 277"]


def test_convert_tree_and_file_to_the_bucket(roots):
    local, url = roots.local, roots.url
    for root in (local, url):
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["convert", f"{root}/{roots.records}/tfrecord", f"{root}/converted", "--to", "ofrecord"]) == 0
            assert main(["convert", f"{root}/{roots.records}/ofrecord/training/part-0", f"{root}/one/corpus.parquet",
                         "--to", "parquet"]) == 0
    assert_same_tree(roots, "converted")
    assert_same_tree(roots, "one")


def test_file_urls_are_the_local_paths(roots, packed, tmp_path):
    """file://PATH is PATH: the same bytes where PATH would put them (a file:// tree once landed elsewhere)."""
    local = roots.local
    with contextlib.redirect_stdout(io.StringIO()):
        for src, dst in ((local / roots.records / "tfrecord", tmp_path / "plain"),
                         (f"file://{local / roots.records / 'tfrecord'}", f"file://{tmp_path / 'url'}")):
            assert main(["convert", str(src), str(dst), "--to", "ofrecord", "--quiet"]) == 0
    assert output_files(tmp_path / "url") == output_files(tmp_path / "plain") != {}
    code, _summary = run_json("pack", f"file://{local / roots.records}", "--out", f"file://{tmp_path / 'packed'}")
    packed_by_path = roots.local / roots.packed
    assert code == 0 and output_files(tmp_path / roots.packed) == output_files(packed_by_path)
    assert (tmp_path / roots.packed / "manifest.json").read_bytes() == (packed_by_path / "manifest.json").read_bytes()


def test_inspect_reads_an_object_with_a_vocab_url(roots, golden_dir):
    local, url = roots.local, roots.url
    store().put_file(str(golden_dir / "vocab.txt"), f"{url}/vocab.txt".split("://")[1])
    shown = {}
    for where, root, vocab in (("local", local, golden_dir / "vocab.txt"), ("bucket", url, f"{url}/vocab.txt")):
        for name in ("ofrecord/training/part-0", "hdf5/training/corpus.hdf5"):
            shown[where, name] = printed("inspect", f"{root}/{roots.records}/{name}", "--num", "2", "--vocab", vocab)
    for name in ("ofrecord/training/part-0", "hdf5/training/corpus.hdf5"):
        assert "tokens: [CLS]" in shown["bucket", name]
        assert shown["bucket", name].replace(url, str(local)) == shown["local", name]


def test_inspect_masks_unmasked_objects_as_the_loaders_do(roots, golden_dir):
    """--epoch reads the records directory's manifest and its vocab from the bucket."""
    local, url = roots.local, roots.url
    assert main(golden_argv(golden_dir, local / "dynamic", "G1", "--masking", "dynamic")) == 0
    records = only_records_dir(local / "dynamic")
    store().put(str(local / "dynamic"), f"{url}/dynamic".split("://")[1], recursive=True)
    store().put_file(str(golden_dir / "vocab.txt"), f"{url}/vocab.txt".split("://")[1])
    relative = f"{records.relative_to(local)}/tfrecord/training/corpus.tfrecord"
    shown = [printed("inspect", f"{root}/{relative}", "--epoch", "1", "--num", "2", "--vocab", vocab)
             for root, vocab in ((local, golden_dir / "vocab.txt"), (url, f"{url}/vocab.txt"))]
    assert "masked as in epoch 1" in shown[1]
    assert shown[1].replace(url, str(local)) == shown[0]


@pytest.fixture(scope="module")
def finetune_runs(roots, shared_dir, golden_dir):
    """create-glue (MRPC) and create-squad (v1.1 dev) from bucket inputs and --vocab to the bucket, and locally."""
    local, url = roots.local, roots.url
    finetune = shared_dir / "fixtures" / "finetune"
    fs = store()
    fs.put(str(finetune / "glue/MRPC"), f"{url}/in/MRPC".split("://")[1], recursive=True)
    fs.put_file(str(finetune / "squad/v1.1/dev-v1.1.json"), f"{url}/in/dev-v1.1.json".split("://")[1])
    fs.put_file(str(golden_dir / "vocab.txt"), f"{url}/vocab.txt".split("://")[1])
    inputs = {"local": (finetune / "glue/MRPC", finetune / "squad/v1.1/dev-v1.1.json", golden_dir / "vocab.txt"),
              "bucket": (f"{url}/in/MRPC", f"{url}/in/dev-v1.1.json", f"{url}/vocab.txt")}
    runs = {}
    for where, root in (("local", local), ("bucket", url)):
        glue, squad, vocab = inputs[where]
        runs[where, "glue"] = run_json("create-glue", "--task", "mrpc", "--data-dir", glue, "--vocab", vocab,
                                       "--out", f"{root}/glue", "--seq", "128")
        runs[where, "squad"] = run_json("create-squad", "--input", squad, "--vocab", vocab, "--out",
                                        f"{root}/squad", "--seq", "128", "--doc-stride", "32", "--max-query", "24")
    return runs, inputs


def _manifest_as_local(data, inputs, url, local):
    """A bucket run's manifest with its URLs (inputs, vocab, output) read as the local run's paths."""
    text = data.decode()
    for bucket_path, local_path in zip(inputs["bucket"], inputs["local"]):
        text = text.replace(str(bucket_path), str(local_path))
    return text.replace(url, str(local)).encode()


def test_finetune_records_from_and_to_the_bucket(roots, finetune_runs):
    local, url = roots.local, roots.url
    runs, inputs = finetune_runs
    assert {code for code, _summary in runs.values()} == {0}
    for task in ("glue", "squad"):
        stored = objects(f"{url}/{task}")
        files = {p.name: p.read_bytes() for p in (local / task).iterdir() if p.is_file()}
        assert sorted(stored) == sorted(files)
        for name, data in files.items():
            got = _manifest_as_local(stored[name], inputs, url, local) if name == "manifest.json" else stored[name]
            assert got == data, (task, name)
        manifest = json.loads(stored["manifest.json"])
        assert manifest["vocab"]["path"] == f"{url}/vocab.txt"


def test_finetune_rerun_keeps_matching_objects_and_redoes_the_rest(roots, finetune_runs):
    local, url = roots.local, roots.url
    runs, inputs = finetune_runs
    glue, _squad, vocab = inputs["bucket"]
    argv = ("create-glue", "--task", "mrpc", "--data-dir", glue, "--vocab", vocab, "--out", f"{url}/glue",
            "--seq", "128")
    code, summary = run_json(*argv)
    assert code == 0 and not any(split["created"] for split in summary["splits"].values())
    # an object of the recorded size but other bytes (what a partial rewrite could leave) is not trusted
    key = f"{url}/glue/eval.tf_record".split("://")[1]
    data = bytearray(store().cat_file(key))
    data[-1] ^= 0xFF
    store().pipe_file(key, bytes(data))
    code, summary = run_json(*argv)
    assert code == 0 and [s for s, split in summary["splits"].items() if split["created"]] == ["dev"]
    assert store().cat_file(key) == (local / "glue/eval.tf_record").read_bytes()


def test_readers_stream_records_from_the_bucket(roots, tmp_path):
    from bertprep import hf
    from bertprep.torch import BertLoader

    local, url = roots.local, roots.url
    from_bucket, from_disk = list(BertLoader(f"{url}/{roots.records}", 64)), list(BertLoader(local / roots.records, 64))
    assert len(from_bucket) == len(from_disk) > 1
    for a, b in zip(from_bucket, from_disk):
        assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in b)
    for name in ("tfrecord/training/corpus.tfrecord", "ofrecord/training/part-0", "hdf5/training/corpus.hdf5"):
        streamed = list(formats.read_batches(f"{url}/{roots.records}/{name}", 256))
        read = list(formats.read_batches(local / roots.records / name, 256))
        assert len(streamed) == len(read) > 1
        assert all(np.array_equal(a[k], b[k]) for a, b in zip(streamed, read) for k in b)
    dataset = hf.load(f"{url}/{roots.records}", cache_dir=tmp_path / "a")["train"]
    expected = hf.load(local / roots.records, cache_dir=tmp_path / "b")["train"]
    assert len(dataset) == len(expected) > 0 and dataset[:5] == expected[:5]
    inside = hf.load(f"{url}/{roots.records}/tfrecord/training", cache_dir=tmp_path / "c")["train"]
    # the records directory's manifest, found above (its parameters); the whole directory is read as Parquet
    assert inside.info.description.split("; ")[1] == dataset.info.description.split("; ")[1]


def test_a_held_prefix_refuses_a_second_run(roots):
    url = roots.url
    holder = {"command": "bertprep pack", "pid": 4242, "host": "elsewhere", "since": "2026-11-23T17:00:00+00:00"}
    lock = f"{url}/held/{roots.packed.split('/', 1)[1]}/.partial/lock"
    store().pipe_file(lock.split("://")[1], json.dumps(holder).encode() + b"\n")
    line = error_line(bertprep("pack", f"{url}/{roots.records}", "--out", f"{url}/held"), 1)
    assert "another run is writing here (bertprep pack, pid 4242 on elsewhere" in line and url in line
    assert sorted(objects(f"{url}/held")) == [f"{roots.packed.split('/', 1)[1]}/.partial/lock"]  # nothing else written


def test_bad_urls_end_in_one_line_with_nothing_written(roots):
    url = roots.url
    bucket = url.split("://")[1].split("/")[0]
    before = sorted(store().find(bucket))
    line = error_line(bertprep("validate", "nostore://bucket/records"), 2)
    assert line.startswith("bertprep validate: error: nostore://bucket/records: unknown URL scheme nostore://")
    line = error_line(bertprep("pack", f"{url}/{roots.records}", "--out", "s3://no-such-bucket-here/packed"), 1)
    assert "s3://no-such-bucket-here/" in line and "bucket does not exist" in line
    line = error_line(bertprep("validate", "s3://no-such-bucket-here/records"), 1)
    assert "s3://no-such-bucket-here/records" in line and "bucket does not exist" in line
    wrong = {**os.environ, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    result = bertprep("convert", f"{url}/{roots.records}/tfrecord", f"{url}/c2", "--to", "ofrecord", env=wrong)
    line = error_line(result, 1)
    assert f"{url}/{roots.records}/tfrecord" in line and "credentials" in line
    assert "not-the-secret" not in result.stderr
    assert sorted(store().find(bucket)) == before


def test_validate_checks_a_report_object_before_reading_the_records(roots):
    """`validate --json/--plot` into a bucket that is not there read every record first and failed at the end
    (exit 1, after hours on a large tree); and an object of another kind at the report's URL (the records'
    parquet file, a text) was replaced without a word, where a local file is refused, and a report under an
    object was written beside it as a prefix. All are now refused before any record is read, the object kept."""
    url, records = roots.url, f"{roots.url}/{roots.records}"
    for flag, name in (("--json", "r.json"), ("--plot", "r.png")):
        code, out, err = run_captured("validate", records, flag, f"s3://no-such-bucket-here/{name}")
        assert (code, out) == (1, "") and err == (f"bertprep validate: error: s3://no-such-bucket-here/{name}: The "
                                                  "specified bucket does not exist\n"), err
    other = f"{url}/notes/readme.txt"
    store().pipe_file(other.split("://")[1], b"not a report")
    for flag in ("--json", "--plot"):
        code, out, err = run_captured("validate", records, flag, other)
        assert (code, out) == (2, "") and err == (f"bertprep validate: error: {flag} {other}: exists and is not a "
                                                  "report validate wrote: it would be replaced; name a new file "
                                                  "(--json without a value prints the report on stdout)\n"), err
    assert store().cat_file(other.split("://")[1]) == b"not a report"
    for flag, name in (("--json", "r.json"), ("--plot", "r.png")):  # under the object: beside it, a prefix too
        code, out, err = run_captured("validate", records, flag, f"{other}/{name}")
        assert (code, out) == (1, "") and err == (
            f"bertprep validate: error: {other}: {other} is an object, so nothing can be written under it as a folder "
            f"({other}/...): its readers would find both an object and a prefix; write elsewhere, or move the "
            "object\n"), err
    assert sorted(objects(f"{url}/notes")) == ["readme.txt"]


def run_captured(*argv):
    """(exit code, stdout, stderr) of an in-process CLI run, its progress lines included."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(map(str, argv)))
    return code, out.getvalue(), err.getvalue()


def test_a_doubled_slash_in_a_url_names_the_same_objects(roots, golden_dir, tmp_path):
    """`s3://b//x` was the objects of `s3://b/x` to a read but nothing to a listing: bertprep.torch said "no
    tfrecord training records", create "the pattern matches no file", pack "not a records directory", where
    the comparisons of paths (normpath) took both for one place. Doubled slashes after the bucket now name the
    same objects everywhere."""
    from bertprep.torch import BertLoader

    bucket, rest = roots.url.split("://", 1)[1].split("/", 1)
    doubled = f"s3://{bucket}//{rest}//{roots.records}"
    assert len(BertLoader(doubled, 64)) == len(BertLoader(f"{roots.url}/{roots.records}", 64)) > 1
    store().pipe_file(f"{bucket}/{rest}/text/a.txt", b"One sentence here.\nAnother one follows.\n\nA new document.\n")
    runs = {}
    for name, text in (("single", f"{roots.url}/text/*.txt"), ("doubled", f"s3://{bucket}//{rest}//text/*.txt")):
        argv = ["create", "--input", text, "--vocab", golden_dir / "vocab.txt", "--out", tmp_path / name,
                "--format", "tfrecord", "--dupe-factor", "1", "--quiet"]
        assert main(list(map(str, argv))) == 0, name
        runs[name] = output_files(only_records_dir(tmp_path / name))
    assert runs["doubled"] == runs["single"] != {}


def test_the_torch_loader_names_a_missing_bucket(s3_bucket):
    """bertprep.torch.BertLoader over a bucket that is not there said `no manifest.json (give the directory
    bertprep create or pack wrote)`, as if the records were elsewhere in it; it is now the store's own error,
    as hf.load and the trainer's --data give it. A prefix the bucket does not hold still says no manifest.json."""
    from bertprep.errors import DataError
    from bertprep.torch import BertLoader

    with pytest.raises(FileNotFoundError) as raised:
        BertLoader("s3://no-such-bucket-here/records", 8)
    assert str(raised.value) == ("[Errno 2] The specified bucket does not exist: "
                                 "'s3://no-such-bucket-here/records'")
    with pytest.raises(DataError, match=r"^s3://\S+/nothing-here: no manifest\.json \(give the directory"):
        BertLoader(f"{s3_bucket}/nothing-here", 8)


def test_a_workdir_in_a_missing_bucket_is_named_before_any_work(s3_bucket, monkeypatch):
    """A --workdir in a bucket that is not there: `download`/`prepare` asked the hub first (and would have fetched
    a release before the first upload failed); `shard` said `choose a corpus with --corpus or give --input
    (formatted corpora: none)` and `dedup` `no formatted corpus`, sending the user to run download. Each now
    says the store's line first."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub, if asked, fails at once
    workdir = "s3://no-such-bucket-here/work"
    for argv, named in ((["download", "wikipedia"], workdir), (["shard"], f"{workdir}/formatted"),
                        (["dedup"], f"{workdir}/formatted"), (["dedup", "--corpus", "wiki"], f"{workdir}/formatted")):
        code, out, err = run_captured(*argv, "--workdir", workdir, "--quiet")
        assert (code, out, err) == (1, "", f"bertprep {argv[0]}: error: {named}: The specified bucket does not "
                                           "exist\n"), argv
