"""The trainer on an object store (issue 33), against a real SeaweedFS (tests/object_store.py): records read
from `s3://` stream as they do from disk; a run trains from `s3://` records, checkpoints to `s3://` and
resumes from there with the losses and weights of the same run on local disk; `trainer finetune` takes its
data, init checkpoint and checkpoint directory from `s3://`; a bucket that does not exist is one line."""

import contextlib
import io
import json
import os

import numpy as np
import pytest

from bertprep import storage
from bertprep.atomic import COMPLETE, remove_directory
from bertprep.cli import main as bertprep_main
from bertprep.errors import DataError
from test_store_stages import objects
from test_trainer_data import golden_records
from trainer.data import Records, RecordStream

# One xdist worker runs the module (--dist loadgroup): its runs share the bucket and the checkpoints.
pytestmark = pytest.mark.xdist_group("store_trainer")

FORMATS = ("tfrecord", "ofrecord", "hdf5", "parquet")


def upload_tree(local, url):
    """Every file under the local directory `local` to the same relative key under `url`."""
    for directory, _dirs, files in os.walk(local):
        for name in files:
            path = os.path.join(directory, name)
            storage.upload(path, storage.join(url, os.path.relpath(path, local)))
    return url


def state_arrays(path):
    """The arrays of a checkpoint's state.npz (a local path or a URL)."""
    with storage.local_copy(storage.join(path, "state.npz")) as local, np.load(local) as npz:
        return {name: npz[name] for name in npz.files}


@pytest.fixture(scope="module")
def created(s3_bucket, tmp_path_factory):
    """`bertprep create` of the embedded sample (every record format, masked as the records are read) on
    local disk, and the same tree uploaded to the bucket: (local directory, URL)."""
    pytest.importorskip("h5py")
    pytest.importorskip("pyarrow")
    from bertprep.stages.create import sample_paths

    out = tmp_path_factory.mktemp("created")
    corpus, vocab = sample_paths()
    assert bertprep_main(["create", "--input", corpus, "--vocab", vocab, "--out", str(out), "--seq", "64",
                          "--pred", "10", "--workers", "1", "--corpus", "s", "--quiet", "--masking", "dynamic",
                          "--dupe-factor", "1", "--format", ",".join(FORMATS)]) == 0
    return str(out), upload_tree(out, f"{s3_bucket}/created")


def first_batches(data, fmt):
    """A stream's first 6 batches, 6 more reopened at record 100, its epoch size and its training files."""
    records = Records(data, fmt)
    stream = RecordStream(records, "training", 8, seed=1, window=64)
    return ([b for _, b in zip(range(6), stream.batches(0))] + [b for _, b in zip(range(6), stream.batches(100))],
            stream.epoch_size, records.files["training"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_stream_from_the_bucket_as_from_disk(created, fmt):
    """Found, counted (by the manifest, URLs as its keys) and streamed from `s3://` (read ahead; HDF5 and
    Parquet from a local copy): the batches of the local tree, from the start and reopened mid-stream."""
    local, url = created
    (mine, size, files), (theirs, local_size, local_files) = first_batches(url, fmt), first_batches(local, fmt)
    assert size == local_size and [f.rsplit("/", 1)[1] for f in files] == [os.path.basename(f) for f in local_files]
    assert all(f.startswith(url + "/") for f in files)
    for a, b in zip(mine, theirs, strict=True):
        assert a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def test_a_bucket_that_does_not_exist_or_refused_credentials_are_one_line(s3_bucket, capsys):
    """The store's reason, where fsspec's isdir says only False; no credential in the line."""
    from object_store import client_environment
    from trainer.cli import main

    def error(*argv):
        code = main([*argv, "--quiet"])
        (line,) = capsys.readouterr().err.splitlines()
        return code, line

    assert error("--format", "tfrecord", "--data", "s3://no-such-bucket-33/records") == (
        1, "trainer: error: s3://no-such-bucket-33/records: The specified bucket does not exist")
    assert error("finetune", "--task", "mrpc", "--format", "tfrecord", "--data", "s3://no-such-bucket-33/mrpc") == (
        1, "trainer: error: s3://no-such-bucket-33/mrpc: The specified bucket does not exist")
    assert error("--format", "tfrecord", "--data", f"{s3_bucket}/nothing-here") == (
        1, f"trainer: error: {s3_bucket}/nothing-here: no such directory")
    with client_environment({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}):
        code, line = error("--format", "tfrecord", "--data", f"{s3_bucket}/records")
    assert code == 1 and line.startswith(f"trainer: error: {s3_bucket}/records: access denied (check the store's "
                                         "credentials)")
    assert "not-the-secret" not in line and os.environ["AWS_SECRET_ACCESS_KEY"] not in line


def test_a_checkpoint_without_its_complete_object_is_not_listed(s3_bucket, tmp_path):
    """A checkpoint whose upload was cut short (its COMPLETE object, uploaded last, missing) is not taken."""
    from trainer import run_state

    directory = f"{s3_bucket}/partial-checkpoints"
    for step in (1, 2):
        run_state.save(directory, step, {"w": np.full(2, step)}, {"draws": step, "settings": {}}, keep=5)
    storage.remove(f"{directory}/ckpt-00000002/{COMPLETE}")
    assert [step for step, _ in run_state.list_checkpoints(directory)] == [1]
    path, arrays, state = run_state.load_latest(directory)
    assert path == f"{directory}/ckpt-00000001" and state["draws"] == 1 and list(arrays["w"]) == [1, 1]


@pytest.mark.parametrize("kind, name", [("hf", ""), ("google", "bert_model.ckpt")])
def test_other_projects_checkpoints_read_from_the_bucket_as_from_disk(shared_dir, s3_bucket, kind, name):
    """An --init-checkpoint URL of a Hugging Face directory or a Google prefix: read from a copy of its
    directory, the same weights as from disk, named by its URL; a URL with nothing there is one line."""
    if kind == "google":
        pytest.importorskip("tensorflow")
    from trainer import checkpoint

    local = shared_dir / "fixtures" / "checkpoints" / f"{kind}_tiny"
    url = upload_tree(local, f"{s3_bucket}/checkpoints/{kind}_tiny")
    mine, theirs = checkpoint.read(storage.join(url, name)), checkpoint.read(str(local / name))
    assert (mine.kind, mine.path) == (theirs.kind, theirs.path.replace(str(local), url))
    assert mine.weights.keys() == theirs.weights.keys()
    for key, value in theirs.weights.items():
        np.testing.assert_array_equal(mine.weights[key], value, err_msg=key)
    with pytest.raises(DataError, match=rf"^{url}/nothing: no such checkpoint \(no object or directory there\)$"):
        checkpoint.read(f"{url}/nothing")


def convert(src, out, to, *flags):
    """(exit code, the one-line error) of `trainer checkpoint convert SRC OUT --to TO`, in this process."""
    from trainer.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["checkpoint", "convert", str(src), str(out), "--to", to, *flags])
    return code, err.getvalue()


def test_convert_to_the_bucket_writes_the_local_bytes_complete_object_last(shared_dir, s3_bucket, tmp_path):
    """A Hugging Face checkpoint converted into `s3://`: the objects are the local convert's files byte for byte
    (state.npz too: np.savez's zip entries carry no write time), and the `.complete` object, uploaded after them,
    lists every one; the trainer reads the bucket's copy as the local one."""
    from trainer import checkpoint

    src = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"
    for to in ("hf", "bertprep"):
        local, url = tmp_path / to, f"{s3_bucket}/converted/{to}"
        vocab = ("--vocab", str(shared_dir / "fixtures" / "golden" / "vocab.txt"))  # hf_tiny's, which it lacks
        assert convert(src, local, to, *vocab, "--quiet") == convert(src, url, to, *vocab, "--quiet") == (0, "")
        files = {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}
        stored = objects(url)
        assert sorted(stored) == sorted([*files, COMPLETE])
        sizes = {name: len(data) for name, data in stored.items() if name != COMPLETE}
        assert json.loads(stored[COMPLETE]) == {"files": sizes}
        assert {name: stored[name] for name in files} == files
        mine, theirs = checkpoint.read(url), checkpoint.read(str(local))
        assert mine.kind == theirs.kind and mine.path == theirs.path.replace(str(local), url)
        assert all(np.array_equal(mine.weights[k], v) for k, v in theirs.weights.items())
    assert not list(tmp_path.glob(".partial")) and not os.path.exists("s3:")  # nothing staged on local disk


def test_convert_into_a_used_prefix_or_a_missing_bucket_is_one_line_with_nothing_written(shared_dir, s3_bucket):
    src = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"
    used = f"{s3_bucket}/used"
    storage.upload(str(src / "config.json"), f"{used}/config.json")
    code, err = convert(src, used, "hf")
    assert (code, err) == (2, f"trainer checkpoint: error: {used}: exists; convert writes a new directory\n")
    assert sorted(objects(used)) == ["config.json"]
    code, err = convert(src, "s3://no-such-bucket-33/converted", "hf")
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("trainer checkpoint: error: s3://no-such-bucket-33/converted") and "bucket" in err, err


# ---------------------------------------------------------------- training (TensorFlow)


# Each step costs about 0.3 s of CPU at the tests' fast-compile XLA flags; what is compared (the bucket's run
# with the local one, a resumed run with the uninterrupted one) holds at any length: 6 steps, not 20.
STEPS, EVERY = 6, 3


def ckpt(step):
    return f"ckpt-{step:08d}"


@pytest.fixture(scope="module")
def runs(s3_bucket, golden_dir, tmp_path_factory):
    """STEPS steps with a checkpoint every EVERY (dropout on) on local disk, and the same from `s3://` records
    into an `s3://` checkpoint directory; then the bucket's last checkpoint removed and the run resumed from
    step EVERY there. {name: (JSON log events, checkpoint directory, stderr)}."""
    pytest.importorskip("tensorflow")
    from test_trainer import train

    root = tmp_path_factory.mktemp("runs")
    records = golden_records(golden_dir, root / "records", parts=2)
    data = upload_tree(records, f"{s3_bucket}/records")
    common = ["--steps", str(STEPS), "--batch-size", "4", "--optimizer", "adam", "--warmup", "2", "--checkpoint-every",
              str(EVERY), "--keep-checkpoints", "5"]
    done = {}

    def run(name, data, checkpoint_dir, *extra):
        code, events = train(root, data, *common, "--checkpoint-dir", checkpoint_dir, *extra, name=name, dropout=0.1)
        assert code == 0
        done[name] = (events, checkpoint_dir)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(root / "cache"))  # where the bucket runs' TensorBoard scalars go
        run("local", records, str(root / "ckpt"))
        bucket_checkpoints = f"{s3_bucket}/ckpt"
        run("bucket", data, bucket_checkpoints)
        remove_directory(f"{bucket_checkpoints}/{ckpt(STEPS)}")
        run("resumed", data, bucket_checkpoints, "--resume")
    done["tensorboard"] = root / "cache" / "bertprep" / "tensorboard" / "s3" / s3_bucket.split("://")[1] / "ckpt"
    return done


def losses(events):
    return [(e["step"], e["loss"]) for e in events if e["event"] == "train"]


def test_trains_from_the_bucket_as_from_disk(runs):
    (local, local_dir), (bucket, bucket_dir) = runs["local"], runs["bucket"]
    assert len(losses(local)) == STEPS and losses(bucket) == losses(local)
    for name in (ckpt(EVERY), ckpt(STEPS)):
        mine, theirs = state_arrays(f"{bucket_dir}/{name}"), state_arrays(os.path.join(local_dir, name))
        assert mine.keys() == theirs.keys()
        for key in theirs:
            np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)


def test_resumes_from_the_bucket_to_the_local_runs_losses_and_weights(runs):
    (local, local_dir), (resumed, bucket_dir) = runs["local"], runs["resumed"]
    assert losses(resumed) == losses(local)[EVERY:]
    mine, theirs = state_arrays(f"{bucket_dir}/{ckpt(STEPS)}"), state_arrays(os.path.join(local_dir, ckpt(STEPS)))
    for key in theirs:
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)


def test_tensorboard_scalars_of_a_bucket_checkpoint_dir_stay_local_and_the_run_says_where(runs, s3_bucket, capsys,
                                                                                         monkeypatch, tmp_path):
    from trainer.config import TrainConfig
    from trainer.pretraining import Log

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert len([n for n in os.listdir(runs["tensorboard"]) if n.startswith("events.out.tfevents.")]) == 2
    assert not storage.exists(f"{s3_bucket}/ckpt/tensorboard")
    Log(TrainConfig(format="tfrecord", checkpoint_dir=f"{s3_bucket}/ckpt", steps=1), 1, enabled=True).close()
    (line,) = capsys.readouterr().err.splitlines()
    local = tmp_path / "bertprep" / "tensorboard" / "s3" / s3_bucket.split("://")[1] / "ckpt"
    assert line == (f"trainer: TensorBoard scalars in {local}: event files are appended to as the run goes, which "
                    f"{s3_bucket}/ckpt's store cannot do (--tensorboard-dir to choose)")


@pytest.mark.heavy  # 30 s: two fine-tuning runs
def test_finetunes_from_bucket_data_and_checkpoint_as_from_disk(runs, shared_dir, s3_bucket, tmp_path, monkeypatch,
                                                               capsys):
    """`trainer finetune` with its data (google-research/bert's MRPC records), init checkpoint (the run's
    checkpoint directory: its newest complete checkpoint), output and checkpoint directories in the bucket:
    the local run's losses and scores."""
    from trainer import run_state
    from trainer.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    for split, golden in (("train", "train"), ("eval", "dev")):
        (mrpc / f"{split}.tf_record").write_bytes(
            (shared_dir / "fixtures" / "finetune" / "glue" / f"MRPC_{golden}_seq128.tfrecord").read_bytes())
    data = upload_tree(mrpc, f"{s3_bucket}/mrpc")
    places = {"local": (str(mrpc), runs["local"][1], str(tmp_path / "out"), str(tmp_path / "finetuned")),
              "bucket": (data, runs["resumed"][1], f"{s3_bucket}/out", f"{s3_bucket}/finetuned")}
    done = {}
    for name, (data_dir, init, out, checkpoint_dir) in places.items():
        log = tmp_path / f"{name}.jsonl"
        assert main(["finetune", "--task", "mrpc", "--data", data_dir, "--format", "tfrecord", "--init-checkpoint",
                     init, "--steps", "3", "--batch-size", "8", "--lr", "1e-3", "--log-every", "1", "--log-json",
                     str(log), "--output-dir", out, "--checkpoint-dir", checkpoint_dir, "--quiet", "--json"]) == 0
        events = [json.loads(line) for line in log.read_text().splitlines()]
        done[name] = (losses(events), events[-1], json.loads(capsys.readouterr().out))
    assert len(done["local"][0]) == 3 and done["bucket"][0] == done["local"][0]
    assert {k: v for k, v in done["bucket"][1].items() if "per_second" not in k} == {
        k: v for k, v in done["local"][1].items() if "per_second" not in k}
    assert done["bucket"][2]["init_checkpoint"] == f"{s3_bucket}/ckpt/{ckpt(STEPS)}"
    assert [step for step, _ in run_state.list_checkpoints(f"{s3_bucket}/finetuned")] == [3]


def test_an_output_in_a_missing_bucket_is_refused_when_the_config_is_built(s3_bucket):
    """Fine-tuning writes --output-dir (SQuAD's predictions) and --checkpoint-dir only after its last step and
    its scoring: in a bucket that is not there they failed then. Both configs now say the store's line when
    built, before any framework loads."""
    from trainer.config import FinetuneConfig, TrainConfig

    missing = "s3://no-such-bucket-here"
    for make, url in ((lambda: FinetuneConfig(task="SQuAD", data="records", format="tfrecord",
                                              output_dir=f"{missing}/squad"), f"{missing}/squad"),
                      (lambda: FinetuneConfig(task="MRPC", data="records", format="tfrecord",
                                              output_dir=f"{s3_bucket}/out", checkpoint_dir=f"{missing}/ck"),
                       f"{missing}/ck"),
                      (lambda: TrainConfig(format="tfrecord", checkpoint_dir=f"{missing}/ck"), f"{missing}/ck")):
        with pytest.raises(FileNotFoundError) as raised:
            make()
        assert str(raised.value) == f"[Errno 2] The specified bucket does not exist: '{url}'"


def test_a_fine_tuning_output_dir_in_a_bucket_is_held(shared_dir, s3_bucket, tmp_path, capsys):
    """--output-dir is held as --checkpoint-dir is, a bucket's by its lock object: two runs into one both wrote
    their test_results.tsv or predictions.json there, the last one's kept. A second run is refused before it
    reads anything, and the held prefix gets nothing else."""
    from bertprep.atomic import hold
    from trainer.cli import main

    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    for split in ("train", "eval"):
        (mrpc / f"{split}.tf_record").write_bytes(
            (shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_train_seq128.tfrecord").read_bytes())
    out = f"{s3_bucket}/held-out"
    with hold(out, "the test"):
        code = main(["finetune", "--task", "mrpc", "--data", str(mrpc), "--format", "tfrecord", "--init-checkpoint",
                     str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
                     "--output-dir", out, "--quiet"])
        line = (capsys.readouterr().err.strip().splitlines() or [""])[-1]
        assert code == 1 and line.startswith(f"trainer: error: {out}: another run is writing here (the test, pid "
                                             f"{os.getpid()} on "), line
        assert sorted(objects(out)) == [".partial/lock"]  # the test's lock alone: nothing written
