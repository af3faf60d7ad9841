"""download -> shard -> create into an S3 bucket (SeaweedFS, tests/object_store.py): the same bytes as on local
disk, resume after a SIGKILL and after the server died, the lock object, a Dask cluster that shares nothing
but the bucket, and one-line errors for bad URLs (issue 33)."""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from stand_in_servers import REPO, StandInServer, ok, one_line_error, parquet_bytes, run_cli

# The module's pipeline (download to validate, on disk and in the bucket) is built once, on one worker.
pytestmark = pytest.mark.xdist_group("store_pipeline")

RECORDS = "records/lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_2/" \
          "wikicorpus_en"
CREATE_FLAGS = ("--dupe-factor", "2", "--format", "tfrecord,ofrecord,parquet,hdf5", "--quiet")
PACKED = "packed/lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_2_packed3/" \
         "wikicorpus_en"
SHARD_FLAGS = ("--train-shards", "6", "--test-shards", "2", "--quiet")
TRAINING_SHARDS = 6
SHARDS = 8  # 6 training + 2 test


def articles(corpus, lines_per_article=12):
    """The golden corpus as a wikimedia/wikipedia parquet file: every 12 sentences an article."""
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    chunks = [lines[i:i + lines_per_article] for i in range(0, len(lines), lines_per_article)]
    return parquet_bytes({"id": [str(i) for i in range(len(chunks))],
                          "url": [f"https://en.wikipedia.org/wiki?curid={i}" for i in range(len(chunks))],
                          "title": [f"Article {i}" for i in range(len(chunks))],
                          "text": ["\n".join(chunk) for chunk in chunks]})


def s3():
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)  # the AWS_* variables s3_bucket set


def key(url):
    return url.split("://", 1)[1]


def bucket_tree(url):
    """{relative key: bytes} of every object under `url` (hidden ones, .partial/ included)."""
    fs, prefix = s3(), key(url)
    return {path[len(prefix) + 1:]: fs.cat_file(path) for path, info in fs.find(prefix, detail=True).items()
            if info["type"] == "file"}  # SeaweedFS keeps emptied directories, and s3fs lists them


def local_tree(root):
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rooted(tree, *roots):
    """`tree` with each root (a work directory's path or URL) inside a manifest replaced by ROOT."""
    def plain(name, data):
        if not name.endswith("manifest.json"):
            return data
        for root in roots:
            data = data.replace(str(root).encode(), b"ROOT")
        return data

    return {name: plain(name, data) for name, data in tree.items()}


def stage_args(stage, workdir, vocab):
    return {"shard": ("shard", "--workdir", workdir, *SHARD_FLAGS),
            "create": ("create", "--workdir", workdir, "--vocab", vocab, *CREATE_FLAGS),
            "pack": ("pack", f"{workdir}/{RECORDS}", "--out", f"{workdir}/packed", "--workers", "1", "--quiet"),
            "validate": ("validate", f"{workdir}/{RECORDS}", f"{workdir}/{PACKED}", "--quiet")}[stage]


@contextlib.contextmanager
def wikipedia_on_a_stand_in_hub(golden_dir):
    """A stand-in hub serving the golden corpus as the wikimedia/wikipedia parquet release."""
    with StandInServer() as hub:
        hub.add_hub_dataset("wikimedia/wikipedia",
                            {"20231101.en/train-00000-of-00001.parquet": articles(golden_dir / "corpus.txt")})
        yield hub


@pytest.fixture(scope="module")
def pipeline(s3_bucket, golden_dir, tmp_path_factory):
    """The chain (download, shard, create, pack of create's records, validate of both) run once on local disk
    and once in the bucket, from the same stand-in hub and hub cache: the --json summaries (validate's report)."""
    root = tmp_path_factory.mktemp("store-pipeline")
    vocab = golden_dir / "vocab.txt"
    runs = {"local": root / "work", "bucket": f"{s3_bucket}/work"}
    summaries = {}
    with wikipedia_on_a_stand_in_hub(golden_dir) as hub:
        for name, workdir in runs.items():
            summaries[name] = [ok(run_cli("download", "wikipedia", "--workdir", workdir, "--workers", "1", "--json",
                                          server=hub, hf_home=root / "hf"))]
            summaries[name] += [ok(run_cli(*stage_args(stage, workdir, vocab), "--json")) for stage in
                                ("shard", "create", "pack", "validate")]
    return {"runs": runs, "summaries": summaries, "vocab": vocab, "bucket": s3_bucket, "root": root}


def source_manifest_hash_named(tree):
    """A workdir's tree with the packed manifest's sha256 of create's manifest (which names the run's root, so
    differs between runs) replaced by a name."""
    name, digest = f"{PACKED}/manifest.json", hashlib.sha256(tree[f"{RECORDS}/manifest.json"]).hexdigest().encode()
    assert digest in tree[name]
    return {**tree, name: tree[name].replace(digest, b"SOURCE_MANIFEST_SHA256")}


def test_download_shard_create_pack_into_the_bucket_give_the_local_bytes_and_validate_alike(pipeline):
    local, bucket = pipeline["runs"]["local"], pipeline["runs"]["bucket"]
    expected = local_tree(local)
    assert len([name for name in expected if name.startswith(RECORDS)]) == 4 * SHARDS + 1
    assert len([name for name in expected if name.startswith(PACKED)]) == 4 * SHARDS + 1
    assert sorted(bucket_tree(bucket)) == sorted(expected)  # no lock, no .partial/, nothing else left
    assert rooted(source_manifest_hash_named(bucket_tree(bucket)), bucket) == \
        rooted(source_manifest_hash_named(expected), local)
    create, pack, validate = pipeline["summaries"]["bucket"][2:]
    assert create["records_dir"] == f"{bucket}/{RECORDS}" and create["shards_created"] == SHARDS
    assert pack["records_dir"] == f"{bucket}/{PACKED}"
    assert validate["sound"] and validate["paths"] == [f"{bucket}/{RECORDS}", f"{bucket}/{PACKED}"]
    assert [dataset["kind"] for dataset in validate["datasets"]] == ["pretraining", "packed"]
    assert json.loads(json.dumps(validate).replace(bucket, str(local))) == pipeline["summaries"]["local"][4]


def test_a_second_run_into_the_bucket_is_already_complete(pipeline):
    bucket, vocab = pipeline["runs"]["bucket"], pipeline["vocab"]
    before = bucket_tree(bucket)
    shard = run_cli(*[arg for arg in stage_args("shard", bucket, vocab) if arg != "--quiet"])  # its summary
    assert shard.returncode == 0 and "is already complete" in shard.stdout, shard.stdout + shard.stderr
    create = ok(run_cli(*stage_args("create", bucket, vocab), "--json"))
    assert create["shards_created"] == 0 and create["shards"] == SHARDS
    assert bucket_tree(bucket) == before


def test_an_object_of_the_listed_size_but_other_bytes_is_redone(pipeline):
    bucket, vocab = pipeline["runs"]["bucket"], pipeline["vocab"]
    before = bucket_tree(bucket)
    changed = f"{RECORDS}/tfrecord/training/wikicorpus_en_training_0.tfrecord"
    s3().pipe_file(key(f"{bucket}/{changed}"), before[changed][::-1])  # what a store without rename could hold
    create = ok(run_cli(*stage_args("create", bucket, vocab), "--json"))
    assert create["shards_created"] == 1
    assert bucket_tree(bucket) == before


@pytest.mark.parametrize("layout", ["bertprep", "nvidia"])
def test_prepare_with_a_bucket_workdir_gives_the_local_bytes(s3_bucket, golden_dir, tmp_path, layout):
    """`prepare` (download from the stand-in hub, shard, create) with --workdir s3://...: the local run's tree,
    in either records layout."""
    runs = {"local": tmp_path / "work", "bucket": f"{s3_bucket}/prepared-{layout}"}
    summaries = {}
    with wikipedia_on_a_stand_in_hub(golden_dir) as hub:
        for name, workdir in runs.items():
            summaries[name] = ok(run_cli("prepare", "wikipedia", "--vocab", golden_dir / "vocab.txt", "--workdir",
                                         workdir, "--configs", "64/10", "--dupe-factor", "1", "--train-shards", "2",
                                         "--test-shards", "1", "--workers", "1", "--layout", layout, "--json",
                                         server=hub, hf_home=tmp_path / "hf"))
    expected = local_tree(runs["local"])
    records = "records/" if layout == "bertprep" else "tfrecord/"
    # bertprep's: TFRecord and OFRecord of 3 shards and a manifest; NVIDIA's: its TFRecord tree and a manifest
    assert len([name for name in expected if name.startswith(records)]) == {"bertprep": 7, "nvidia": 4}[layout]
    assert rooted(bucket_tree(runs["bucket"]), runs["bucket"]) == rooted(expected, runs["local"])
    assert summaries["bucket"]["create 64/10"]["records_dir"].startswith(f"{runs['bucket']}/{records}")


def test_file_urls_are_local_paths(pipeline, tmp_path):
    local = pipeline["runs"]["local"]
    out = tmp_path / "out"
    ok(run_cli("create", "--input", f"file://{local}/sharded/wikicorpus_en", "--vocab", f"file://{pipeline['vocab']}",
               "--out", f"file://{out}", *CREATE_FLAGS))
    records = RECORDS.removeprefix("records/")
    expected = {name.removeprefix("records/"): data for name, data in local_tree(local).items()
                if name.startswith(RECORDS)}
    got = local_tree(out)
    assert got.keys() == expected.keys() and got == expected, records


def test_a_url_scheme_with_no_filesystem_is_a_usage_line(pipeline, tmp_path):
    for argv in (("create", "--input", "nosuch://bucket/shards", "--vocab", pipeline["vocab"], "--out", tmp_path),
                 ("shard", "--input", tmp_path, "--corpus", "c", "--out", "nosuch://bucket/sharded"),
                 ("download", "wikipedia", "--workdir", "nosuch://bucket/work")):
        line = one_line_error(run_cli(*argv), code=2)
        assert "nosuch://bucket/" in line and "unknown URL scheme nosuch://" in line, line
    assert not list(tmp_path.iterdir())


def test_a_missing_bucket_or_a_wrong_secret_is_one_line_and_writes_nothing(pipeline):
    local, bucket = pipeline["runs"]["local"], pipeline["bucket"]
    shards = f"{local}/sharded/wikicorpus_en"
    line = one_line_error(run_cli("create", "--input", shards, "--vocab", pipeline["vocab"], "--out",
                                  "s3://no-such-bucket-33/records", *CREATE_FLAGS))
    assert line.startswith("bertprep create: error: s3://no-such-bucket-33/records/") and "bucket" in line, line
    before = bucket_tree(bucket)
    secret = "wrong-secret-3f9a"
    for argv in (("create", "--input", shards, "--vocab", pipeline["vocab"], "--out", f"{bucket}/denied",
                  *CREATE_FLAGS),
                 ("shard", "--input", f"{bucket}/work/sharded/wikicorpus_en", "--corpus", "c", "--out", local / "x")):
        line = one_line_error(run_cli(*argv, env={"AWS_SECRET_ACCESS_KEY": secret}))
        assert f"{bucket}/" in line and "access denied (check the store's credentials)" in line, line
        assert secret not in line
    assert bucket_tree(bucket) == before and not (local / "x").exists()


def test_a_second_run_into_a_held_prefix_is_refused_naming_the_holder(pipeline):
    from bertprep.atomic import hold

    out = f"{pipeline['bucket']}/held"
    with hold(f"{out}/{RECORDS.removeprefix('records/')}", "bertprep create"):
        line = one_line_error(run_cli("create", "--input", f"{pipeline['runs']['bucket']}/sharded/wikicorpus_en",
                                      "--vocab", pipeline["vocab"], "--out", out, *CREATE_FLAGS))
    assert f"another run is writing here (bertprep create, pid {os.getpid()} on " in line, line
    assert line.startswith(f"bertprep create: error: {out}/"), line
    assert list(bucket_tree(out)) == []  # the holder's lock is gone with it; the refused run wrote nothing


def records_of(pipeline):
    """The bucket run's records tree (its manifest names the bucket's shards as sources)."""
    return {name.removeprefix(RECORDS + "/"): data for name, data in bucket_tree(pipeline["runs"]["bucket"]).items()
            if name.startswith(RECORDS)}


def start_create(pipeline, out, *extra):
    argv = [sys.executable, "-m", "bertprep", "create", "--input",
            f"{pipeline['runs']['bucket']}/sharded/wikicorpus_en", "--vocab", str(pipeline["vocab"]), "--out", out,
            *CREATE_FLAGS, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def wait_for_first_shard(process, manifest_url, timeout=120):
    """Return once the run has recorded a finished shard in its manifest (it is mid-run then), with its processes
    stopped (SIGSTOP). It runs in slices of 0.1 s between looks: on a busy machine this process could wait for the
    CPU while the run wrote all but one of its 33 objects (a CI run did, 2026-11-25)."""
    fs, deadline = s3(), time.monotonic() + timeout
    while True:
        os.killpg(process.pid, signal.SIGSTOP)
        fs.invalidate_cache()
        # the manifest is saved before the first shard too (marked "writing"): wait for one it lists
        if fs.exists(key(manifest_url)) and json.loads(fs.cat(key(manifest_url)))["files"]:
            return
        exited = process.poll() is not None
        if exited or time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):  # not left stopped behind a failed test
                os.killpg(process.pid, signal.SIGKILL)
            assert not exited, process.communicate()
            raise AssertionError("no shard finished in time")
        os.killpg(process.pid, signal.SIGCONT)
        time.sleep(0.1)


def assert_only_whole_objects(out, expected):
    """Every object a reader lists under `out` is complete: the bytes of the finished run's object of that
    name (the manifest: a subset of its entries, each listing that object). Staging holds only the lock and the
    run's claim of the names it writes (a rerun takes an object it uploaded and did not list yet for its own)."""
    listed = bucket_tree(out)
    records = {name.removeprefix(RECORDS.removeprefix("records/") + "/"): data for name, data in listed.items()}
    for name, data in records.items():
        if name == "manifest.json":
            files = json.loads(data)["files"]
            assert 0 < len(files) < len(expected) - 1, "the run was not stopped mid-run"
            assert all(json.loads(expected["manifest.json"])["files"][f] | {"first_instance": 0} ==
                       entry | {"first_instance": 0} for f, entry in files.items())
        elif name == ".partial/steps/create-names.json":
            assert set(json.loads(data)) <= set(expected) - {"manifest.json"}, data
        elif name.startswith(".partial/"):
            assert name == ".partial/lock", name
        else:
            assert data == expected[name], f"{name} is listed but not whole"
    return records


def test_sigkill_mid_create_then_a_rerun_redoes_only_what_is_missing(pipeline):
    out = f"{pipeline['bucket']}/killed"
    records_dir = f"{out}/{RECORDS.removeprefix('records/')}"
    expected = records_of(pipeline)
    process = start_create(pipeline, out, "--workers", "1")
    wait_for_first_shard(process, f"{records_dir}/manifest.json")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    left = assert_only_whole_objects(out, expected)
    assert ".partial/lock" in left  # a killed run cannot remove its lock: the rerun takes it over (same host, dead)
    done = len(json.loads(left["manifest.json"])["files"]) // 4
    # the rerun names its inputs by a glob over the bucket: the same shards, so the finished ones are kept
    rerun = ok(run_cli("create", "--input", f"{pipeline['runs']['bucket']}/sharded/wikicorpus_en/t*/*_[0-9].txt",
                       "--vocab", pipeline["vocab"], "--out", out, *CREATE_FLAGS[:-1], "--json"))
    assert rerun["shards_created"] == SHARDS - done
    assert bucket_tree(records_dir) == expected


def _enter_a_directory_of_its_own():
    os.chdir(tempfile.mkdtemp(prefix="dask-worker-"))
    return os.getcwd()


@contextlib.contextmanager
def cluster_in_own_directories():
    """A LocalCluster of two worker processes, each working in a temporary directory of its own, not this
    process's: a relative or client-side local path in a task would not be found there."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster, distributed.Client(cluster) as client:
        directories = client.run(_enter_a_directory_of_its_own)
        assert len(set(directories.values())) == 2 and os.getcwd() not in directories.values()
        yield cluster


def tasks_done(cluster):
    """How many tasks the cluster's workers have finished (the scheduler's count per task name)."""
    return sum(prefix.state_counts["memory"] for prefix in cluster.scheduler.task_prefixes.values())


def test_dask_workers_that_share_only_the_bucket_write_the_local_bytes(pipeline):
    from bertprep.stages.create import CreateOptions, plan

    bucket, done = pipeline["bucket"], pipeline["runs"]["bucket"]
    work, vocab = f"{bucket}/dask-work", f"{bucket}/vocab.txt"
    shards, out = f"{work}/sharded/wikicorpus_en", f"{work}/records"
    s3().put_file(str(pipeline["vocab"]), key(vocab))
    with cluster_in_own_directories() as cluster:
        on_cluster = ("--engine", "dask", "--scheduler", cluster.scheduler_address)
        ok(run_cli("shard", "--input", f"{done}/formatted/wikicorpus_en", "--out", shards, *SHARD_FLAGS, *on_cluster))
        ok(run_cli("create", "--input", shards, "--vocab", vocab, "--out", out, *CREATE_FLAGS, *on_cluster))
    assert bucket_tree(shards) == {name.removeprefix("sharded/wikicorpus_en/"): data
                                   for name, data in bucket_tree(done).items() if name.startswith("sharded/")}
    records = rooted(bucket_tree(f"{work}/{RECORDS}"), vocab, work)
    # HDF5 too: a dataset h5py created is closed at once, however long the workers' profiler holds its frames
    assert records == rooted(records_of(pipeline), pipeline["vocab"], done)
    # What the engine shipped to the workers: ShardTasks, every path in them a URL.
    tasks = plan(CreateOptions(input=(shards,), vocab=vocab, out=out, dupe_factor=2, format=CREATE_FLAGS[3]))[3]
    assert len(tasks) == SHARDS
    for task in tasks:
        for name in ("source", "records_dir", "vocab_path"):
            assert getattr(task, name).startswith(f"{work}/") or getattr(task, name) == vocab, (name, task)


@pytest.mark.heavy
def test_the_server_killed_mid_create_then_restarted_ends_in_the_same_bytes(pipeline, seaweedfs):
    out = f"{pipeline['bucket']}/crashed"
    records_dir = f"{out}/{RECORDS.removeprefix('records/')}"
    expected = records_of(pipeline)
    process = start_create(pipeline, out, "--workers", "1")
    wait_for_first_shard(process, f"{records_dir}/manifest.json")
    # Still stopped (wait_for_first_shard) while the server dies: the last shards could otherwise finish first.
    seaweedfs.kill()
    os.killpg(process.pid, signal.SIGCONT)
    try:
        _stdout, stderr = process.communicate(timeout=300)
    finally:
        seaweedfs.start()
        wait_until_readable(pipeline["runs"]["bucket"])
    lines = stderr.strip().splitlines()
    assert process.returncode == 1 and len(lines) == 1 and "Traceback" not in stderr, stderr
    # whichever object it was reading or writing when the server went: named, with the store's reason
    assert lines[0].startswith(f"bertprep create: error: {pipeline['bucket']}/") and "connect" in lines[0], lines[0]
    assert_only_whole_objects(out, expected)
    ok(run_cli("create", "--input", f"{pipeline['runs']['bucket']}/sharded/wikicorpus_en", "--vocab",
               pipeline["vocab"], "--out", out, *CREATE_FLAGS))
    assert bucket_tree(records_dir) == expected


def wait_until_readable(url, timeout=60):
    """SeaweedFS answers S3 requests a moment before its volume server is back: wait until the objects under
    `url` read again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return bucket_tree(url)
        except OSError:
            assert time.monotonic() < deadline, f"{url} is not readable {timeout}s after the restart"
            time.sleep(0.2)
