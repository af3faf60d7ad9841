"""The curation stages on a real object store (SeaweedFS, the `s3_bucket` fixture): `dedup` (corpora,
--decontaminate file and --out as `s3://` URLs) and `vocab` (--input and --out) write to the bucket byte for
byte what the same run writes on local disk (manifests: with the URL in place of the local path, timings
aside); a dedup rerun keeps the objects whose size and sha256 match and redoes the rest; a bucket that is not
there ends in one line naming the URL, with nothing written."""

import dataclasses
import json
import time
from pathlib import Path

import pytest

from dedup_corpus import planted_corpus
from test_dedup import squad_file
from test_outputs import bertprep, error_line
from test_store_pipeline import cluster_in_own_directories, tasks_done
from test_store_stages import objects, printed, run_captured, run_json, store
from test_vocab import SAMPLE

# The module's dedup runs on disk and in the bucket are made once, on one worker.
pytestmark = pytest.mark.xdist_group("store_curation")

MISSING_BUCKET = "s3://no-such-bucket-here"


@dataclasses.dataclass
class Roots:
    local: Path  # the local run's root
    url: str  # the bucket run's root, holding the same inputs under the same names


def key(url):
    return url.split("://", 1)[1]


def tree(root):
    """{path relative to root: bytes} of every file under a local directory."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_same_tree(roots, relative, stored_relative=None):
    """The objects under the bucket root's `relative` (or `stored_relative`) are the files under the local
    root's `relative`, byte for byte; manifests with the bucket root's URL read as the local root's path,
    their run times aside."""
    local, stored = tree(roots.local / relative), objects(f"{roots.url}/{stored_relative or relative}")
    assert sorted(stored) == sorted(local)
    for name, data in local.items():
        if name.endswith("manifest.json"):
            got = json.loads(stored[name].decode().replace(roots.url, str(roots.local)))
            want = json.loads(data)
            got.pop("seconds", None), want.pop("seconds", None)
            assert got == want, name
        else:
            assert stored[name] == data, name


@pytest.fixture(scope="module")
def roots(s3_bucket, shared_dir, tmp_path_factory):
    """A local root and a bucket root, each holding two planted corpora, a SQuAD dev file and a text file."""
    local = tmp_path_factory.mktemp("curation")
    a, b, _planted, texts = planted_corpus(local / "corpus", shared_dir / "fixtures" / "bench" / "wt2.txt",
                                           distinct=120, planted=60)
    squad_file(local / "dev.json", [texts[-1]])  # a distinct training document of b is evaluation text
    (local / "sample.txt").write_bytes(b"".join(p.read_bytes() for p in sorted(SAMPLE.rglob("*.txt"))))
    url = f"{s3_bucket}/curation"
    store().put(str(local), key(url), recursive=True)
    assert objects(url) == tree(local)
    return Roots(local, url)


def dedup_argv(root, out="deduped", engine=("--workers", "1")):
    return ("dedup", "--input", f"{root}/corpus/a", f"{root}/corpus/b", "--out", f"{root}/{out}",
            "--decontaminate", f"{root}/dev.json", *engine)


@pytest.fixture(scope="module")
def deduped(roots):
    """dedup run on both, with the summaries."""
    return {where: run_json(*dedup_argv(root)) for where, root in (("local", roots.local), ("bucket", roots.url))}


def test_dedup_writes_the_local_bytes_to_the_bucket(roots, deduped):
    (local_code, local), (code, summary) = deduped["local"], deduped["bucket"]
    assert local_code == code == 0
    assert summary["out"] == f"{roots.url}/deduped"
    assert summary["exact"] == local["exact"] > 0 and summary["near"] == local["near"] > 0
    assert summary["contaminated"] == local["contaminated"] == 1
    assert_same_tree(roots, "deduped")
    manifest = json.loads(objects(f"{roots.url}/deduped")["manifest.json"])
    assert manifest["inputs"][0]["path"] == f"{roots.url}/corpus/a/part-0000.jsonl"  # the URL where a path was
    assert manifest["params"]["decontaminate"] == [f"{roots.url}/dev.json"]


def test_dedup_rerun_keeps_matching_objects_and_redoes_the_rest(roots, deduped):
    out = f"{roots.url}/deduped"
    assert f"bertprep dedup: {out} is already complete" in printed(*dedup_argv(roots.url))
    # a run killed while writing parts: its manifest marked "writing", no corpus manifests, one part complete
    # and one of its recorded size but other bytes (what something else writing there could leave)
    manifest = json.loads(store().cat_file(key(f"{out}/manifest.json")))
    del manifest["files"]
    manifest["writing"] = "the parts are being written; those under their final names are complete"
    store().pipe_file(key(f"{out}/manifest.json"), json.dumps(manifest).encode())
    for name in ("a", "b"):
        store().rm_file(key(f"{out}/{name}/manifest.json"))
    damaged = bytearray(store().cat_file(key(f"{out}/b/part-0000.jsonl")))
    damaged[-2] ^= 0x01
    store().pipe_file(key(f"{out}/b/part-0000.jsonl"), bytes(damaged))
    kept = store().info(key(f"{out}/a/part-0000.jsonl"))["LastModified"]
    time.sleep(1.1)  # LastModified has whole seconds: a rewrite would show
    code, _summary = run_json(*dedup_argv(roots.url))
    assert code == 0
    assert store().info(key(f"{out}/a/part-0000.jsonl"), refresh=True)["LastModified"] == kept  # not rewritten
    assert_same_tree(roots, "deduped")


def test_dedup_on_dask_workers_that_share_only_the_bucket_writes_the_local_bytes(roots, deduped):
    """Every step's tasks on workers in directories of their own, given the bucket's URLs only: the local run's
    parts, plot and manifests."""
    from bertprep.stages.dedup import DedupOptions

    with cluster_in_own_directories() as cluster:
        code, summary = run_json(*dedup_argv(roots.url, "deduped-dask",
                                             ("--engine", "dask", "--scheduler", cluster.scheduler_address)))
        # on the workers: pass 1 and the writing (a task per part of each corpus), the exact copies, a task per
        # LSH band and the decision
        assert tasks_done(cluster) == 2 * 2 + 1 + DedupOptions().band_rows()[0] + 1
    assert code == 0 and summary["kept"] == deduped["local"][1]["kept"]
    assert_same_tree(roots, "deduped", "deduped-dask")


def test_dedup_takes_corpus_names_under_a_bucket_workdir(roots, deduped):
    workdir = f"{roots.url}/work"
    store().put(str(roots.local / "corpus"), key(f"{workdir}/formatted"), recursive=True)
    code, summary = run_json("dedup", "--workdir", workdir, "--corpus", "b", "a", "--dry-run", "--workers", "1")
    assert code == 0 and summary["out"] == f"{workdir}/deduped" and sorted(summary["corpora"]) == ["a", "b"]
    assert summary["documents"] == deduped["local"][1]["documents"]


def test_dedup_of_a_missing_bucket_is_one_line_with_nothing_written(roots):
    before = sorted(store().find(key(roots.url)))
    line = error_line(bertprep("dedup", "--input", f"{MISSING_BUCKET}/corpus/a", "--out", f"{roots.url}/d2"), 1)
    assert f"{MISSING_BUCKET}/corpus/a" in line and "bucket does not exist" in line
    line = error_line(bertprep("dedup", "--input", f"{roots.url}/corpus/a", "--out", f"{roots.url}/d2",
                               "--decontaminate", f"{MISSING_BUCKET}/dev.json"), 1)
    assert f"{MISSING_BUCKET}/dev.json" in line and "bucket does not exist" in line
    assert sorted(store().find(key(roots.url))) == before


def test_vocab_reads_and_writes_the_bucket_as_local_disk(roots):
    runs = {where: run_json("vocab", "--input", f"{root}/corpus/a", f"{root}/sample.txt", "--out",
                            f"{root}/vocab/vocab.txt", "--vocab-size", "1400")
            for where, root in (("local", roots.local), ("bucket", roots.url))}
    (local_code, local), (code, summary) = runs["local"], runs["bucket"]
    assert local_code == code == 0
    assert store().cat_file(key(f"{roots.url}/vocab/vocab.txt")) == (roots.local / "vocab/vocab.txt").read_bytes()
    assert summary["sha256"] == local["sha256"] and summary["out"] == f"{roots.url}/vocab/vocab.txt"
    inputs = [f"{roots.url}/corpus/a/part-0000.jsonl", f"{roots.url}/sample.txt"]
    assert [i["path"] for i in summary["inputs"]] == inputs


def test_vocab_of_a_missing_bucket_is_one_line_with_nothing_written(roots):
    line = error_line(bertprep("vocab", "--input", f"{MISSING_BUCKET}/sample.txt", "--out",
                               f"{roots.url}/v2/vocab.txt"), 1)
    assert f"{MISSING_BUCKET}/sample.txt" in line and "bucket does not exist" in line
    assert not store().exists(key(f"{roots.url}/v2/vocab.txt"))


def test_vocab_into_a_missing_bucket_fails_before_reading_the_corpus(s3_bucket, golden_dir):
    """`vocab --out` into a bucket that is not there read the corpus and trained on it (`vocab: 1/1 input
    files, ...`), then failed at the upload; the same line now comes before the corpus is read."""
    out = f"{MISSING_BUCKET}/vocab.txt"
    code, printed_out, err = run_captured("vocab", "--input", golden_dir / "corpus.txt", "--out", out)
    assert (code, printed_out) == (1, "")
    assert err == f"bertprep vocab: error: {out}: The specified bucket does not exist\n", err


def test_vocab_refuses_an_out_under_an_object(roots):
    """vocab writes its one file at the end, outside atomic.hold: `--out BUCKET/sample.txt/vocab.txt` trained and
    then put a key under the object sample.txt, whose readers then met both an object and a prefix."""
    out = f"{roots.url}/sample.txt/vocab.txt"
    line = error_line(bertprep("vocab", "--input", f"{roots.url}/corpus/a", "--out", out), 1)
    assert line.endswith(f"{roots.url}/sample.txt: {roots.url}/sample.txt is an object, so nothing can be written "
                         f"under it as a folder ({roots.url}/sample.txt/...): its readers would find both an object "
                         "and a prefix; write elsewhere, or move the object"), line
    assert not store().exists(key(out))


def test_shard_of_a_missing_bucket_is_one_line_with_nothing_written(roots):
    """The store's reason, exit 1, as vocab and dedup give for the same --input (not "no such file", exit 2)."""
    line = error_line(bertprep("shard", "--input", f"{MISSING_BUCKET}/corpus/a", "--corpus", "a", "--out",
                               f"{roots.url}/s2"), 1)
    assert line == f"bertprep shard: error: {MISSING_BUCKET}/corpus/a: The specified bucket does not exist"
    assert not store().exists(key(f"{roots.url}/s2"))
