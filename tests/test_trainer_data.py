"""The trainer's data: finding records, a seeded endless stream that reopens at any position."""

import glob
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from bertprep import formats
from bertprep.errors import DataError, UsageError
from bertprep.formats.schemas import PRETRAINING
from trainer.config import BertConfig, TrainConfig
from trainer.data import Records, RecordStream, full_batches
from trainer.pretraining import Log, evaluation_batches

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def golden_records(golden_dir, root, parts=1):
    """A `bertprep create`-style directory holding G1 (1,373 instances, 128/20) in both formats,
    split into `parts` files per format, plus G3 as the test split."""
    corpus = root / "params" / "corpus"
    records = list(formats.read_records(golden_dir / "G1.tfrecord"))
    for fmt in formats.FORMATS:
        for i in range(parts):
            name = f"corpus_training_{i}.tfrecord" if fmt == "tfrecord" else f"part-{i}"
            formats.write_records(corpus / fmt / "training" / name, records[i::parts], fmt)
        test_name = "corpus_test_0.tfrecord" if fmt == "tfrecord" else "part-0"
        (corpus / fmt / "test").mkdir(parents=True)
        shutil.copy(golden_dir / f"G3.{fmt}", corpus / fmt / "test" / test_name)
    return corpus


@pytest.fixture(scope="module")
def records_dir(golden_dir, tmp_path_factory):
    return golden_records(golden_dir, tmp_path_factory.mktemp("records"), parts=3)


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_finds_both_formats_and_shapes(records_dir):
    for fmt in formats.FORMATS:
        for data_dir in (records_dir, records_dir.parent, records_dir.parent.parent):
            records = Records(str(data_dir), fmt)
            assert (records.seq, records.pred) == (128, 20)
            assert len(records.files["training"]) == 3 and len(records.files["test"]) == 1
            assert sum(records.count(p) for p in records.files["training"]) == 1373


def test_missing_records_is_a_data_error(tmp_path):
    (tmp_path / "tfrecord" / "training").mkdir(parents=True)
    with pytest.raises(DataError, match="no ofrecord training records"):
        Records(str(tmp_path), "ofrecord")


@pytest.mark.parametrize("feature, column, value, said", [
    ("input_ids", 2, 40000, "is not a token id of the vocab of 30522 (0..30521)"),
    ("segment_ids", 5, 2, "is not a segment id of the model's type_vocab_size 2 (0..1)"),
])
def test_an_id_beyond_the_model_is_refused_where_no_manifest_names_the_vocab(golden_dir, tmp_path, feature, column,
                                                                             value, said):
    """Records without a manifest (none names their vocab): an id beyond the model's embeddings, or a segment id
    2, was trained on without a word, the step's gather reading another row (JAX clamps the index); the
    pretraining and fine-tuning streams now check each chunk against the model, as finetune's eval and predict
    splits before training."""
    records = list(formats.read_records(golden_dir / "G1.tfrecord"))[:40]
    records[7] = dict(records[7], **{feature: [*records[7][feature][:column], value,
                                                *records[7][feature][column + 1:]]})
    path = tmp_path / "tfrecord" / "training" / "corpus_training_0.tfrecord"
    formats.write_records(path, records, "tfrecord")
    stream = RecordStream(Records(str(tmp_path), "tfrecord"), "training", 8, seed=1,
                          model=BertConfig.sized("tiny", vocab_size=30522))
    with pytest.raises(DataError) as error:
        next(stream.batches())
    assert str(error.value) == f"{path}: row 7: {feature}[{column}]: {value} {said}"
    assert next(RecordStream(Records(str(tmp_path), "tfrecord"), "training", 8, seed=1).batches())  # no model


def test_stream_is_seeded_shuffled_and_reopens_at_any_record(records_dir):
    records = Records(str(records_dir), "ofrecord")
    stream = RecordStream(records, "training", batch_size=64, seed=5, window=300)
    first = take(stream.batches(), 30)  # 1,920 records: crosses windows, files and an epoch
    again = take(RecordStream(records, "training", batch_size=64, seed=5, window=300).batches(), 30)
    for a, b in zip(first, again):
        for name in PRETRAINING.names:
            np.testing.assert_array_equal(a[name], b[name])
    other_seed = next(RecordStream(records, "training", batch_size=64, seed=6, window=300).batches())
    assert not np.array_equal(first[0]["input_ids"], other_seed["input_ids"])
    # One epoch holds every record exactly once, not in file order.
    epoch = np.concatenate([b["input_ids"] for b in first])[:1373]
    file_order = np.concatenate([b["input_ids"] for b in formats.read_batches(records.files["training"], 1373)])
    assert sorted(map(bytes, epoch)) == sorted(map(bytes, file_order))
    assert not np.array_equal(epoch, file_order)
    # Reopening at batch k gives the batches the uninterrupted stream gave from k on.
    for k in (1, 7, 21, 25):
        resumed = take(stream.batches(k * 64), 30 - k)
        for a, b in zip(first[k:], resumed):
            for name in PRETRAINING.names:
                np.testing.assert_array_equal(a[name], b[name])


def test_workers_read_disjoint_files(records_dir):
    records = Records(str(records_dir), "tfrecord")
    shares = [RecordStream(records, "training", 10, seed=1, worker_index=w, num_workers=3) for w in range(3)]
    assert sorted(f for s in shares for f in s.files) == records.files["training"]
    assert sum(s.epoch_size for s in shares) == 1373
    with pytest.raises(UsageError, match="cannot be split across 4 workers"):
        RecordStream(records, "training", 10, seed=1, worker_index=0, num_workers=4)


def test_a_batch_beyond_the_machines_memory_is_refused_before_any_record_is_read(records_dir, monkeypatch):
    """--grad-accum 200000 (6,400,000 records a step) read the records over and over for minutes, then stopped in a
    MemoryError traceback or was killed. Counted as read and gathered: 445 values of 8 bytes, twice, a record."""
    records = Records(str(records_dir), "tfrecord")
    sizes = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**18}  # a machine of 1 GiB
    monkeypatch.setattr(os, "sysconf", lambda name: sizes[name])
    RecordStream(records, "training", 2**30 // 7120, seed=1)  # 150,806 records fit
    with pytest.raises(UsageError) as refused:
        RecordStream(records, "training", 2**30 // 7120 + 1, seed=1)
    assert str(refused.value) == ("a step's batch of 150,807 records needs over 1.0 GiB, more than this machine's "
                                  "1.0 GiB of memory: give a smaller --batch-size (or --grad-accum)")


def test_a_bin_size_of_the_whole_sequence_is_refused(records_dir):
    """--bin-size 128 (or 512) of 128-token records makes one bin: every batch kept whole, the flag taken without
    effect. So did 121-127, whose bins' widths round up to 128 (fails on the old code: 127 taken)."""
    records = Records(str(records_dir), "tfrecord")
    stream = RecordStream(records, "training", 8, seed=1, bin_size=120)
    assert min(batch["input_ids"].shape[1] for batch, _ in zip(stream.batches(0), range(50))) == 120
    for bin_size in (128, 512):
        with pytest.raises(UsageError) as refused:
            RecordStream(records, "training", 8, seed=1, bin_size=bin_size)
        assert str(refused.value) == (f"--bin-size {bin_size}: the records' sequences are 128 tokens, one bin of "
                                      "them all: give a bin size below 128")
    for bin_size in (121, 127):
        with pytest.raises(UsageError) as refused:
            RecordStream(records, "training", 8, seed=1, bin_size=bin_size)
        assert str(refused.value) == (f"--bin-size {bin_size}: the records' sequences are 128 tokens and a bin's "
                                      "width is rounded up to a multiple of 8, so every bin keeps all 128 and no "
                                      "batch is cut: give a bin size of at most 120")


def run_trainer(*args):
    return subprocess.run([sys.executable, "-m", "trainer", *args], capture_output=True, text=True, cwd=REPO)


def test_an_evaluation_reads_each_test_record_at_most_once(records_dir, tmp_path, capsys):
    """--eval-steps past the test split's whole batches went round the split again, counting records twice: each
    evaluation now reads the whole batches there are (of every data worker's share, the fewest), and says so; a
    split without one whole batch is a usage error before anything compiles."""
    records = Records(str(records_dir), "ofrecord")
    assert full_batches(records, "test", 4) == 1206 // 4  # G3
    shares = [RecordStream(records, "training", 5, 0, worker_index=i, num_workers=3).epoch_size for i in range(3)]
    assert len(set(shares)) > 1 and full_batches(records, "training", 5, 3) == min(shares) // 5
    config = TrainConfig(format="ofrecord", data=str(records_dir), steps=2, eval_every=1, eval_steps=400)
    log = Log(config, config.steps, enabled=True)
    assert evaluation_batches(config, records, str(records_dir), 4, 1, log) == 301
    assert capsys.readouterr().err == (f"trainer: --eval-steps 400: {records_dir}: the ofrecord test split holds 301 "
                                       "batches of 4: each evaluation reads those 301\n")
    assert evaluation_batches(config, records, str(records_dir), 3, 1, log) == 400
    assert capsys.readouterr().err == ""
    with pytest.raises(UsageError) as refused:
        evaluation_batches(config, records, str(records_dir), 1207, 1, log)
    assert str(refused.value) == (f"--eval-every: {records_dir}: the ofrecord test split holds fewer records than one "
                                  "evaluation batch of 1207 (a smaller --batch-size, or more test records)")
    no_test = tmp_path / "no-test"
    shutil.copytree(records_dir / "ofrecord" / "training", no_test / "ofrecord" / "training")
    with pytest.raises(UsageError) as refused:  # was a note, "--eval-every ignored", that --quiet hid
        evaluation_batches(config, Records(str(no_test), "ofrecord"), str(no_test), 4, 1, log)
    assert str(refused.value) == (f"--eval-every 1: {no_test} holds no ofrecord test records to evaluate on "
                                  "(bertprep shard --test-fraction makes a test split)")


def test_cli_errors_are_one_line(records_dir, tmp_path):
    empty = run_trainer("--format", "ofrecord", "--data", str(tmp_path))
    assert empty.returncode == 1
    assert empty.stderr.strip().splitlines() == [
        f"trainer: error: {tmp_path}: no ofrecord training records "
        "(looked for [*/[*/]]/ofrecord/training/part-*)"]
    config = tmp_path / "bert_config.json"
    config.write_text('{"max_position_embeddings": 64}')
    short = run_trainer("--format", "tfrecord", "--data", str(records_dir), "--bert-config", str(config))
    assert short.returncode == 1
    assert short.stderr.strip().splitlines() == [
        f"trainer: error: {records_dir}: records have sequence length 128 but the model has 64 positions "
        "(max_position_embeddings)"]
    usage = run_trainer("--format", "tfrecord", "--resume")
    assert usage.returncode == 2 and usage.stderr.strip() == "trainer: error: --resume needs --checkpoint-dir"


def test_shape_and_vocab_come_from_the_create_manifest(tmp_path):
    from bertprep.stages.create import create_sample_records
    from trainer.config import BertConfig, TrainConfig
    from trainer.pretraining import model_config

    data_dir = create_sample_records(tmp_path, seq=64, pred=10, dupe_factor=1)
    records = Records(data_dir, "ofrecord")
    assert (records.seq, records.pred, records.vocab_size) == (64, 10, 2000)

    tiny = BertConfig.sized("tiny", vocab_size=2000)
    assert model_config(TrainConfig(format="ofrecord", model="tiny"), records) == tiny


def test_sample_records_wait_for_another_run_making_them(tmp_path):
    """Processes started together (a two-process job, parallel tests) all make the cached sample records:
    one that finds the directory held waits for the holder, for a bounded time, instead of failing."""
    import threading

    from bertprep.atomic import hold
    from bertprep.errors import HeldByAnotherRun
    from bertprep.stages.create import create_sample_records

    said = []

    def make(wait_s):
        return create_sample_records(tmp_path, seq=64, pred=10, dupe_factor=1, wait_s=wait_s, waiting=said.append)

    records_dir = make(0)
    with hold(records_dir, "other run"), pytest.raises(HeldByAnotherRun, match="another run is writing here "
                                                                                r"\(other run, pid "):
        make(0)

    held, released = threading.Event(), threading.Event()

    def other_run():
        with hold(records_dir, "other run"):
            held.set()
            time.sleep(1)
            released.set()

    thread = threading.Thread(target=other_run)
    thread.start()
    assert held.wait(60)
    assert make(30) == records_dir and released.is_set()
    thread.join()
    (error,) = said  # said once, naming the holder
    assert isinstance(error, HeldByAnotherRun) and "(other run, pid " in str(error)


def test_packed_rows_are_recognised_and_streamed_and_kinds_do_not_mix(records_dir, golden_dir, tmp_path):
    from bertprep.formats.schemas import PACKED
    from bertprep.stages.pack import strategy
    from bertprep.stages.pack.layout import pack_rows

    (instances,) = formats.read_batches(golden_dir / "G1.ofrecord", 1 << 20)
    members, _ = strategy.pack((instances["input_mask"] != 0).sum(axis=1),
                               (instances["masked_lm_weights"] != 0).sum(axis=1), 128, 20, 3)
    rows = pack_rows(instances, members, 3, 20)
    packed = tmp_path / "params_packed3" / "corpus"
    formats.write_records(packed / "ofrecord" / "training" / "part-0",
                          [{name: values[i] for name, values in rows.items()} for i in range(len(members))],
                          "ofrecord", PACKED)
    records = Records(str(packed), "ofrecord")  # no manifest: the kind comes from the first record
    assert records.packed and records.dims == {"seq": 128, "k": 3, "pred": 20} and records.pred == 23
    batch = next(RecordStream(records, "training", batch_size=32, seed=1).batches())
    assert set(batch) == set(PACKED.names) and batch["positions"].dtype == np.int32
    assert batch["next_sentence_weights"].dtype == np.float32 and batch["input_mask"].max() == 3
    shutil.copytree(records_dir, tmp_path / "params" / "corpus")
    with pytest.raises(DataError, match="packed records of seq 128, k 3, pred 20 differ from the other records' "
                                        "pretraining records of seq 128, pred 20"):
        Records(str(tmp_path), "ofrecord")


@pytest.mark.parametrize("state", ['[]', '{"step": 1, "draws": "one", "settings": {}}', '{"step": 1, "draws": 2}'])
def test_a_checkpoint_state_of_the_wrong_shape_is_damaged_not_a_traceback(tmp_path, state):
    from bertprep.atomic import hold
    from trainer import run_state

    with hold(tmp_path, "trainer"):  # as a training run holds its checkpoint directory
        path = run_state.save(tmp_path, 1, {"w": np.zeros(2)}, {"draws": 1, "settings": {}}, keep=2)
    (tmp_path / path / "state.json").write_text(state)
    with pytest.raises(DataError, match=r"state.json: damaged checkpoint state \(.+\); remove the checkpoint to resume "
                                        r"from the one before$"):
        run_state.load_latest(tmp_path)
    assert os.listdir(tmp_path) == ["ckpt-00000001"]  # written through .partial/, gone with the hold


def test_a_damaged_records_manifest_is_a_data_error(golden_dir, tmp_path):
    corpus = golden_records(golden_dir, tmp_path)
    (corpus / "manifest.json").write_text('{"vocab": ["size", 30522]}')
    with pytest.raises(DataError, match=r'manifest.json: damaged manifest \("vocab" is not a JSON object\)'):
        Records(corpus, "tfrecord")


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_stream_reads_hdf5_and_parquet_as_it_reads_tfrecord(tmp_path, masking):
    """The trainer's stream over the columnar formats of one `create` run: the same batches as from TFRecord,
    from the start and reopened mid-stream, masked alike for unmasked records; counts without the manifest too."""
    pytest.importorskip("h5py")
    pytest.importorskip("pyarrow")
    from bertprep.cli import main as bertprep_main
    from bertprep.stages.create import sample_paths

    corpus, vocab = sample_paths()
    assert bertprep_main(["create", "--input", corpus, "--vocab", vocab, "--out", str(tmp_path), "--seq", "64",
                          "--pred", "10", "--workers", "1", "--corpus", "s", "--quiet", "--masking", masking,
                          "--dupe-factor", "1", "--format", "tfrecord,hdf5,parquet"]) == 0
    (data_dir,) = glob.glob(os.path.join(str(tmp_path), "*", "s"))
    streams = {}
    for fmt in ("tfrecord", "hdf5", "parquet"):
        records = Records(data_dir, fmt)
        stream = RecordStream(records, "training", 8, seed=1, window=64)
        streams[fmt] = ([b for _, b in zip(range(12), stream.batches(0))],
                        [b for _, b in zip(range(12), stream.batches(100))], stream.epoch_size)
        path = records.files["training"][0]
        expected = records.count(path)
        records._manifest_counts.clear()
        assert records.count(path) == expected
    reference = streams.pop("tfrecord")
    for fmt, (first, reopened, epoch_size) in streams.items():
        assert epoch_size == reference[2]
        for mine, theirs in zip(first + reopened, reference[0] + reference[1]):
            assert mine.keys() == theirs.keys(), fmt
            assert all(mine[k].dtype == theirs[k].dtype and np.array_equal(mine[k], theirs[k]) for k in mine), fmt


def test_records_at_two_depths_below_data_are_refused_not_the_deeper_left_out(records_dir, tmp_path):
    """A --data holding one records directory a level below it (data/wiki) and another two levels below
    (data/params/books): the trainer read the shallowest alone and trained without the other's records, unsaid
    (fails on the old code: no error, books' files not among the training files). The records of one depth are
    all read, as before."""
    shutil.copytree(records_dir, tmp_path / "wiki")
    shutil.copytree(records_dir, tmp_path / "params" / "books")
    with pytest.raises(DataError, match=rf"^{tmp_path}/params/books: tfrecord records deeper below {tmp_path} than "
                                        rf"{tmp_path}/wiki's, which --data would read alone: give --data one "):
        Records(str(tmp_path), "tfrecord")
    shutil.rmtree(tmp_path / "params")
    shutil.copytree(records_dir, tmp_path / "books")
    assert len(Records(str(tmp_path), "tfrecord").files["training"]) == 6


def sample_tfrecords(out):
    """The TFRecord records directory of a `bertprep create` of the embedded sample corpus (64/10), under `out`."""
    from bertprep.cli import main as bertprep_main
    from bertprep.stages.create import sample_paths

    corpus, vocab = sample_paths()
    assert bertprep_main(["create", "--input", corpus, "--vocab", vocab, "--out", str(out), "--seq", "64",
                          "--pred", "10", "--workers", "1", "--corpus", "s", "--quiet", "--dupe-factor", "1",
                          "--format", "tfrecord"]) == 0
    (data_dir,) = glob.glob(os.path.join(str(out), "*", "s"))
    return data_dir


def test_a_manifest_count_the_file_does_not_hold_is_refused_as_the_file_is_read(golden_dir, tmp_path):
    """A manifest whose `instances` of a file was edited (its sha256 kept): the stream took the count as the
    file's, its epoch reckoned at 200 records where the files hold 231, so a resume (the stream reopened at a
    record by those counts) began elsewhere than the run it continued, without a word (fails on the old code: no
    error). Now the file, once read whole, is refused, naming it and both counts, as `bertprep validate` does."""
    import json

    data_dir = sample_tfrecords(tmp_path)
    manifest = json.loads(open(os.path.join(data_dir, "manifest.json")).read())
    name = sorted(k for k in manifest["files"] if "/training/" in k)[0]
    held = manifest["files"][name]["instances"]
    manifest["files"][name]["instances"] = 3
    with open(os.path.join(data_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    records = Records(data_dir, "tfrecord")
    stream = RecordStream(records, "training", 2, seed=1, window=4)
    with pytest.raises(DataError, match=rf"^{data_dir}/{name}: {held:,} records, its manifest.json says 3 "
                                        r"instances \(edited since `bertprep create` wrote it\? "):
        take(stream.batches(), sum(records.count(p) for p in records.files["training"]))


def test_a_folder_inside_a_records_directory_or_another_format_is_named_as_such(tmp_path):
    """--data at a records directory's tfrecord/ (or tfrecord/training/) said "no tfrecord training records
    (looked for [*/[*/]]/tfrecord/training/*.tfrecord)" of a folder holding them, and --format hdf5 of TFRecord
    records "no hdf5 training records", as if it held none (fails on the old code: those lines). Now each names
    what to give."""
    data_dir = sample_tfrecords(tmp_path)
    for inside in ("tfrecord", os.path.join("tfrecord", "training")):
        given = os.path.join(data_dir, inside)
        refused = run_trainer("--format", "tfrecord", "--data", given)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            f"trainer: error: {given}: a folder inside the records directory {data_dir}: give --data {data_dir} "
            "(its manifest.json is read with the records)"]
    refused = run_trainer("--format", "hdf5", "--data", str(tmp_path))
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"trainer: error: {tmp_path}: no hdf5 training records, but tfrecord ones: give --format tfrecord, or make "
        "hdf5 ones (bertprep create --format hdf5)"]


def test_workers_past_the_test_files_each_evaluate_the_whole_test_split(records_dir):
    """Two data workers (hosts) and one test file: the test split makes one share, and worker 1 asked for its own
    share of it, none, so record_streams raised "the test files of worker 1 hold no records" on that host before
    its first step, ending the run (fails on the old code: that DataError). With fewer test files than workers,
    every worker now evaluates the whole split: the same batches, each record once in every worker's sums."""
    import types

    from trainer.pretraining import record_streams

    records = Records(str(records_dir), "ofrecord")
    config = TrainConfig(format="ofrecord", data=str(records_dir), steps=2, batch_size=4, eval_every=1, eval_steps=3)
    log = Log(config, config.steps, enabled=False)
    streams = [record_streams(config, types.SimpleNamespace(local_replicas=1, worker_index=index, num_workers=2),
                              records, None, str(records_dir), log) for index in range(2)]
    assert [eval_steps for _, _, eval_steps in streams] == [3, 3]
    first, second = (next(eval_stream.batches()) for _, eval_stream, _ in streams)
    assert all(np.array_equal(first[name], second[name]) for name in first)


def test_a_test_split_of_other_records_is_refused_before_the_first_step(records_dir, tmp_path):
    """A test split of 64-token records beside training records of 128 (no manifest to list them) was read only
    at the first evaluation, --eval-every steps into the run, which ended there: `record 0 at byte 31: feature
    'input_ids': 64 values, expected 128` (fails on the old code: no error before it)."""
    sample = sample_tfrecords(tmp_path / "sample")
    mixed = tmp_path / "mixed" / "tfrecord"
    shutil.copytree(records_dir / "tfrecord" / "training", mixed / "training")
    shutil.copytree(os.path.join(sample, "tfrecord", "test"), mixed / "test")
    records = Records(str(mixed.parent), "tfrecord")
    config = TrainConfig(format="tfrecord", data=str(mixed.parent), steps=2, eval_every=1)
    with pytest.raises(DataError) as refused:
        evaluation_batches(config, records, str(mixed.parent), 4, 1, Log(config, config.steps, enabled=False))
    assert str(refused.value) == (f"{records.files['test'][0]}: record 0: pretraining records of seq 64, pred 10 "
                                  "differ from the other records' pretraining records of seq 128, pred 20 (point "
                                  "--data at one kind and shape)")
