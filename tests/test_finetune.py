"""`python -m trainer finetune` on CPU from a tiny pretraining checkpoint: SQuAD (records and eval
metadata from create-squad) and MRPC (the reference's golden records, converted to OFRecord by
`bertprep convert`) learn in both formats with identical losses; SQuAD 2.0 writes and scores null
odds; two devices give one device's results under either backend; the embedded-sample path runs;
bad input ends with one line."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tensorflow")
# One xdist worker runs the module (--dist loadgroup): the pretrained checkpoint is made once.
pytestmark = pytest.mark.xdist_group("finetune")

from bertprep import formats  # noqa: E402
from bertprep.cli import main as bertprep_main  # noqa: E402
from bertprep.formats.schemas import GLUE  # noqa: E402
from test_trainer_data import golden_records  # noqa: E402
from trainer import metrics  # noqa: E402
from trainer.cli import main  # noqa: E402
from trainer_checks import OPTIMIZED_TENSORFLOW, bert_config, losses, xla_flags  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = os.path.join(REPO, "tests", "trainer_checks.py")
# Small enough to memorize in a few dozen steps: learning shows on the records trained on.
SQUAD_QUESTIONS = 16
MRPC_RECORDS = 32


@pytest.fixture(scope="module")
def pretrained(golden_dir, tmp_path_factory):
    """A pretraining checkpoint of the trainer: the tiny model, 2 steps on the golden G1 records."""
    root = tmp_path_factory.mktemp("pretrained")
    records = golden_records(golden_dir, root / "records")
    checkpoint_dir = root / "ckpt"
    assert main(["--format", "tfrecord", "--data", str(records), "--bert-config", bert_config(root, 0.0),
                 "--steps", "2", "--batch-size", "4", "--checkpoint-dir", str(checkpoint_dir), "--quiet"]) == 0
    return checkpoint_dir


@pytest.fixture(scope="module")
def squad_dir(shared_dir, golden_dir, tmp_path_factory):
    """create-squad's train and eval splits (both formats, eval metadata) of the same few questions of the
    golden SQuAD v1.1 training JSON, so the eval split scores what was learned."""
    root = tmp_path_factory.mktemp("squad")
    dataset = json.loads((shared_dir / "fixtures" / "finetune" / "squad" / "v1.1" / "train-v1.1.json").read_text())
    kept, questions = [], 0
    for article in dataset["data"]:
        paragraphs = [p for p in article["paragraphs"] if len(p["context"].split()) <= 130]
        if paragraphs and questions < SQUAD_QUESTIONS:
            kept.append(dict(article, paragraphs=paragraphs))
            questions += sum(len(p["qas"]) for p in paragraphs)
    source = root / "train-small.json"
    source.write_text(json.dumps(dict(dataset, data=kept)))
    for split in ("train", "eval"):
        assert bertprep_main(["create-squad", "--input", str(source), "--split", split, "--vocab",
                              str(golden_dir / "vocab.txt"), "--out", str(root / "data"), "--seq", "128",
                              "--doc-stride", "64", "--max-query", "24", "--quiet"]) == 0
    return root / "data"


@pytest.fixture(scope="module")
def mrpc_dir(shared_dir, tmp_path_factory):
    """The first records of google-research/bert's own MRPC training TFRecord as train and eval split (no
    manifest, as for files copied by hand), and `bertprep convert`'s OFRecord of them."""
    data = tmp_path_factory.mktemp("mrpc")
    golden = shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_train_seq128.tfrecord"
    records = list(formats.read_records(golden))[:MRPC_RECORDS]
    for split in ("train", "eval"):
        formats.write_records(data / f"{split}.tf_record", records, "tfrecord", kind=GLUE)
        assert bertprep_main(["convert", str(data / f"{split}.tf_record"), str(data / f"{split}.of_record-0"),
                              "--to", "ofrecord", "--quiet"]) == 0
    return data


def finetune(tmp_path, name, *argv):
    """Run `trainer finetune` in this process; return (exit code, JSON log events)."""
    log = tmp_path / f"{name}.jsonl"
    code = main(["finetune", "--output-dir", str(tmp_path / name), "--log-json", str(log), "--quiet", *argv])
    return code, [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def finetune_both_formats(tmp_path, task, data, pretrained, *argv):
    """The same run on TFRecord and OFRecord: identical losses (the JSON events of each returned)."""
    runs = {}
    for fmt in formats.FORMATS:
        code, runs[fmt] = finetune(tmp_path, fmt, "--task", task, "--data", str(data), "--format", fmt,
                                   "--init-checkpoint", str(pretrained), "--batch-size", "16", "--lr", "2e-3",
                                   "--log-every", "10", *[a.replace("{fmt}", fmt) for a in argv])
        assert code == 0
    assert losses(runs["tfrecord"]) == losses(runs["ofrecord"])
    return runs


def test_squad_learns_in_both_formats(pretrained, squad_dir, tmp_path):
    runs = finetune_both_formats(tmp_path, "squad", squad_dir, pretrained, "--steps", "50")
    train = losses(runs["tfrecord"])
    assert train[-1] < train[0] / 2
    summary = runs["tfrecord"][-1]
    assert summary["event"] == "summary" and summary["steps"] == 50
    # A span drawn at random almost never matches; the model answers many of the questions it saw.
    assert summary["eval_exact_match"] > 10 and summary["eval_f1"] > summary["eval_exact_match"]
    predictions = json.loads((tmp_path / "tfrecord" / "predictions.json").read_text())
    dataset = json.loads(open(json.loads((squad_dir / "manifest.json").read_text())["source"]["eval"]["path"]).read())
    questions = [qa["id"] for article in dataset["data"] for p in article["paragraphs"] for qa in p["qas"]]
    assert list(predictions) == questions and summary["eval_examples"] == len(questions)
    assert metrics.squad_v1_scores(dataset["data"], predictions)["exact_match"] == summary["eval_exact_match"]
    assert not (tmp_path / "tfrecord" / "null_odds.json").exists()


def test_squad_2_writes_null_odds_and_scores_them(shared_dir, golden_dir, pretrained, tmp_path):
    """SQuAD 2.0: predictions.json and null_odds.json, scored as evaluate-v2.0.py --na-prob-file scores them."""
    dataset = json.loads((shared_dir / "fixtures" / "finetune" / "squad" / "v2.0" / "dev-v2.0.json").read_text())
    source = tmp_path / "dev-v2.0.json"
    source.write_text(json.dumps(dict(dataset, data=dataset["data"][:3])))
    for split in ("train", "eval"):
        assert bertprep_main(["create-squad", "--input", str(source), "--split", split, "--vocab",
                              str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "data"), "--seq", "128",
                              "--doc-stride", "64", "--max-query", "24", "--format", "tfrecord", "--quiet"]) == 0
    code, events = finetune(tmp_path, "out", "--task", "squad", "--data", str(tmp_path / "data"), "--format",
                            "tfrecord", "--init-checkpoint", str(pretrained), "--steps", "3", "--batch-size", "8")
    assert code == 0
    summary = events[-1]
    predictions = json.loads((tmp_path / "out" / "predictions.json").read_text())
    null_odds = json.loads((tmp_path / "out" / "null_odds.json").read_text())
    assert list(predictions) == list(null_odds) and summary["eval_examples"] == len(predictions)
    scores = metrics.squad_v2_scores(json.loads(source.read_text())["data"], predictions, null_odds)
    assert {f"eval_{k}": v for k, v in scores.items()}.items() <= summary.items()
    assert summary["eval_HasAns_total"] + summary["eval_NoAns_total"] == summary["eval_total"]


def test_mrpc_learns_in_both_formats(pretrained, mrpc_dir, tmp_path, capsys):
    runs = finetune_both_formats(tmp_path, "mrpc", mrpc_dir, pretrained, "--steps", "40",
                                 "--checkpoint-dir", str(tmp_path / "ckpt-{fmt}"))
    train = losses(runs["tfrecord"])
    assert train[-1] < train[0] / 2
    summary = runs["tfrecord"][-1]
    labels = [int(r["label_ids"][0]) for r in formats.read_records(mrpc_dir / "eval.tf_record")]
    majority = max(np.mean(labels), 1 - np.mean(labels))
    assert summary["eval_examples"] == MRPC_RECORDS and summary["eval_accuracy"] >= 0.9 > majority, summary
    assert 0 < summary["eval_f1_positive"] <= 1
    # run_classifier.py's eval_results.txt: a `name = value` line per score, sorted, with global_step; the same
    # figures as the summary's. It was not written: --output-dir stayed empty where --predict was not given.
    lines = (tmp_path / "tfrecord" / "eval_results.txt").read_text().splitlines()
    scores = {k: v for k, v in summary.items() if k.startswith("eval_")} | {"global_step": 40}
    assert lines == [f"{name} = {scores[name]}" for name in sorted(scores)], lines
    assert lines[:3] == [f"eval_accuracy = {summary['eval_accuracy']}", f"eval_examples = {MRPC_RECORDS}",
                         f"eval_f1_positive = {summary['eval_f1_positive']}"], lines
    # The fine-tuned state is saved whole: encoder, classifier head, optimizer.
    (name,) = [n for n in os.listdir(tmp_path / "ckpt-tfrecord") if n.startswith("ckpt-")]
    with np.load(tmp_path / "ckpt-tfrecord" / name / "state.npz") as state:
        assert any(key.endswith("bert/classifier/kernel") for key in state.files)
        assert not any("masked_lm" in key for key in state.files)
    # Pretraining's --resume of it was `damaged checkpoint state (no int "draws"); remove the checkpoint to resume
    # from the one before`, exit 1, once the model was built: advice that deleted the fine-tuned model.
    capsys.readouterr()
    code = main(["--format", "tfrecord", "--steps", "2", "--checkpoint-dir",
                 str(tmp_path / "ckpt-tfrecord"), "--resume", "--quiet"])
    assert (code, capsys.readouterr().err.strip().splitlines()) == (2, [
        f"trainer: error: --resume: {tmp_path / 'ckpt-tfrecord' / name} is a fine-tuned checkpoint (trainer finetune "
        "--task MRPC), not a pretraining run's: --resume continues a pretraining run; name another --checkpoint-dir"])


def test_mrpc_from_googles_checkpoint_with_googles_optimizer(shared_dir, mrpc_dir, tmp_path, capsys):
    """google-research/bert's run_classifier.py recipe: its own checkpoint (google_tiny) and create_optimizer
    (--optimizer google-adam): the run says which optimizer it uses, its lr starts at 0."""
    google_tiny = shared_dir / "fixtures" / "checkpoints" / "google_tiny"
    log = tmp_path / "log.jsonl"
    assert main(["finetune", "--task", "mrpc", "--data", str(mrpc_dir), "--format", "tfrecord", "--init-checkpoint",
                 str(google_tiny), "--optimizer", "google-adam", "--lr", "1e-3", "--steps", "4", "--warmup", "2",
                 "--batch-size", "8", "--log-every", "1", "--log-json", str(log), "--output-dir",
                 str(tmp_path / "out")]) == 0
    assert "; fp32; google-adam lr 0.001" in capsys.readouterr().err
    events = [json.loads(line) for line in log.read_text().splitlines()]
    rates = [e["learning_rate"] for e in events if e["event"] == "train"]
    np.testing.assert_allclose(rates, [0.0, 5e-4, 5e-4, 2.5e-4], rtol=1e-6)  # lr·s/W, then lr·(1 − s/N)
    assert events[-1]["eval_examples"] == MRPC_RECORDS and all(np.isfinite(losses(events)))


# `trainer finetune` on `replicas` logical TensorFlow CPU devices.
TF_REPLICAS = textwrap.dedent("""
    import sys
    import tensorflow as tf
    replicas = int(sys.argv[1])
    if replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    from trainer.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def finetune_on_devices(tmp_path, backend, devices, *argv):
    """Run `trainer finetune` in a process with `devices` CPU devices; return the JSON log events."""
    name = f"{backend}-{devices}"
    log = tmp_path / f"{name}.jsonl"
    finetune_argv = ["finetune", "--output-dir", str(tmp_path / name), "--log-json", str(log), "--quiet", *argv]
    if backend == "tensorflow" and devices == 1:  # in this process: no TensorFlow to start again
        assert main(finetune_argv) == 0
        return [json.loads(line) for line in log.read_text().splitlines()]
    if backend == "jax":
        env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
                   XLA_FLAGS=xla_flags(devices))
        command = [sys.executable, CHECKS, "--no-tensorflow", "trainer", *finetune_argv]
    else:
        env, command = None, [sys.executable, "-c", TF_REPLICAS, str(devices), *finetune_argv]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_two_devices_match_one(pretrained, squad_dir, tmp_path, backend):
    """The same global batch on 1 and 2 devices (JAX with TensorFlow unimportable; TensorFlow's
    MirroredStrategy): the same losses, and the eval split (padded to the devices, then cut back)
    gives the same predictions."""
    common = ["--task", "squad", "--data", str(squad_dir), "--format", "ofrecord", "--init-checkpoint",
              str(pretrained), "--steps", "4", "--lr", "1e-3", "--log-every", "1"]
    one = finetune_on_devices(tmp_path, backend, 1, *common, "--batch-size", "6")
    two = finetune_on_devices(tmp_path, backend, 2, *common, "--batch-size", "3")
    assert [e["replicas"] for e in (one[-1], two[-1])] == [1, 2]
    np.testing.assert_allclose(losses(two), losses(one), rtol=1e-5)
    assert json.loads((tmp_path / f"{backend}-2" / "predictions.json").read_text()) == json.loads(
        (tmp_path / f"{backend}-1" / "predictions.json").read_text())


@pytest.mark.heavy
def test_without_init_checkpoint_a_sample_checkpoint_is_pretrained(mrpc_dir, tmp_path):
    # A process of its own with XLA's optimized code (OPTIMIZED_TENSORFLOW, as a user runs it; the user's cache is
    # tmp_path's): the sample pretraining's 20 steps of the tiny model cost more under the test processes' fast
    # compiles (conftest.py) than a process's start saves: measured, 29.5 s of CPU in this process, 20 s in its own.
    env = dict(os.environ, **OPTIMIZED_TENSORFLOW, XDG_CACHE_HOME=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "trainer", "finetune", "--task", "mrpc", "--data", str(mrpc_dir),
                             "--format", "ofrecord", "--steps", "2", "--batch-size", "4", "--json", "--output-dir",
                             str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pretraining the tiny model" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["steps"] == 2 and summary["init_checkpoint"].startswith(str(tmp_path / "cache"))
    assert summary["eval_examples"] == MRPC_RECORDS


def test_a_finetune_that_finds_the_sample_checkpoint_being_made_waits_for_it(pretrained, tmp_path, monkeypatch,
                                                                             capsys):
    """Two fine-tunings started together without --init-checkpoint: the second finds the first making the
    sample checkpoint (holding the cache's folder) and waits for it instead of failing or pretraining."""
    import shutil
    import threading
    import time
    from types import SimpleNamespace

    from bertprep.atomic import hold
    from trainer.finetuning import sample_checkpoint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "bertprep" / "finetune-sample-checkpoint" / "tiny-vocab-2000"
    held = threading.Event()

    def first_run():
        with hold(directory.parent, "trainer finetune"):
            held.set()
            time.sleep(1)
            for checkpoint in pretrained.glob("ckpt-*"):
                shutil.copytree(checkpoint, directory / checkpoint.name)

    thread = threading.Thread(target=first_run)
    thread.start()
    assert held.wait(60)
    config = SimpleNamespace(model="tiny", quiet=False)
    assert sample_checkpoint(config, SimpleNamespace(vocab_size=2000)) == str(directory)
    thread.join()
    assert sorted(p.name for p in directory.glob("ckpt-*")) == sorted(p.name for p in pretrained.glob("ckpt-*"))
    (waited,) = [line for line in capsys.readouterr().err.splitlines() if "waiting" in line]  # said once
    assert waited.startswith(f"trainer: waiting up to 300 s for another run making the sample checkpoint: "
                             f"{directory.parent}: another run is writing here (trainer finetune, pid {os.getpid()} "
                             "on "), waited


def test_bad_input_ends_with_one_line(pretrained, squad_dir, mrpc_dir, tmp_path, capsys):
    def error(*argv):
        code = main(["finetune", "--output-dir", str(tmp_path / "out"), "--quiet", *argv])
        lines = capsys.readouterr().err.strip().splitlines()
        return code, lines[-1]

    common = ["--init-checkpoint", str(pretrained), "--steps", "1", "--format", "tfrecord"]
    assert error("--task", "mrpc", "--data", str(squad_dir), *common) == (
        2, f"trainer: error: {squad_dir}: records of task squad, not MRPC (--task)")
    assert error("--task", "cola", "--data", str(tmp_path / "nowhere"), *common) == (
        1, f"trainer: error: {tmp_path / 'nowhere'}: no such directory")
    assert error("--task", "squad", "--data", str(mrpc_dir), *common) == (
        1, f"trainer: error: {mrpc_dir / 'train.tf_record'}: glue records, expected squad_train")
    not_a_checkpoint = tmp_path / "not-a-checkpoint"  # beside --output-dir: one inside it is refused first
    not_a_checkpoint.mkdir()
    code, line = error("--task", "mrpc", "--data", str(mrpc_dir), "--format", "tfrecord", "--init-checkpoint",
                       str(not_a_checkpoint))
    assert code == 1 and line.startswith(f"trainer: error: {not_a_checkpoint}: not a checkpoint this trainer reads "
                                         "(expected a ckpt-<step>/ or checkpoint directory of the trainer, a Google ")
    assert error("--task", "mrpc", "--data", str(mrpc_dir), "--format", "tfrecord", "--init-checkpoint",
                 str(tmp_path)) == (2, f"trainer: error: --output-dir {tmp_path / 'out'} is inside the input "
                                       f"{tmp_path}: the run would overwrite or delete what it reads; write the "
                                       "output elsewhere")
    assert error("--task", "glue-x", "--data", str(mrpc_dir), *common)[0] == 2
    # SQuAD answers need the eval metadata beside the eval records.
    broken = tmp_path / "squad-no-metadata"
    broken.mkdir()
    for name in ("train.tf_record", "eval.tf_record", "manifest.json"):
        (broken / name).write_bytes((squad_dir / name).read_bytes())
    code, line = error("--task", "squad", "--data", str(broken), *common)
    assert (code, line) == (1, f"trainer: error: {broken / 'eval.features.jsonl'}: missing: SQuAD answers need "
                               "the evaluation metadata create-squad writes")


def test_the_squad_dev_json_is_read_before_training(squad_dir, mrpc_dir, tmp_path, capsys):
    """A missing or damaged --eval-file (or manifest source) failed once every step had been trained, and a GLUE
    task ignored --eval-file: both are refused before the checkpoint is read (this one does not exist)."""
    def error(*argv):
        code = main(["finetune", "--format", "tfrecord", "--init-checkpoint", str(tmp_path / "no-checkpoint"),
                     "--steps", "1", "--output-dir", str(tmp_path / "out"), "--quiet", *argv])
        return code, capsys.readouterr().err.strip().splitlines()

    dev = tmp_path / "dev.json"
    assert error("--task", "squad", "--data", str(squad_dir), "--eval-file", str(dev)) == (1, [
        f"trainer: error: {dev}: cannot read the SQuAD dev JSON: [Errno 2] No such file or directory: '{dev}'"])
    dev.write_text("[]")
    assert error("--task", "squad", "--data", str(squad_dir), "--eval-file", str(dev), "--no-eval", "--predict") == (
        1, [f'trainer: error: {dev}: not SQuAD JSON (expected an object with a "data" list)'])
    assert error("--task", "mrpc", "--data", str(mrpc_dir), "--eval-file", str(dev)) == (2, [
        f"trainer: error: --eval-file {dev}: a SQuAD dev JSON, but --task MRPC scores the labels of its eval records"])
    assert not (tmp_path / "out").exists()


def test_a_scoring_flag_that_nothing_reads_is_refused_before_training(squad_dir, mrpc_dir, tmp_path, capsys):
    """--eval-file with --no-eval (and no --predict) and --null-score-diff-threshold of a GLUE task were taken and
    never read (refused before the checkpoint, which does not exist, is read)."""
    def error(*argv):
        code = main(["finetune", "--format", "tfrecord", "--init-checkpoint", str(tmp_path / "no-checkpoint"),
                     "--steps", "1", "--output-dir", str(tmp_path / "out"), "--quiet", *argv])
        return code, capsys.readouterr().err.strip().splitlines()

    dev = tmp_path / "dev.json"
    assert error("--task", "squad", "--data", str(squad_dir), "--eval-file", str(dev), "--no-eval") == (2, [
        f"trainer: error: --eval-file {dev}: not with --no-eval (nothing is scored or predicted)"])
    assert error("--task", "mrpc", "--data", str(mrpc_dir), "--null-score-diff-threshold", "1.5") == (2, [
        "trainer: error: --null-score-diff-threshold: SQuAD's, but --task MRPC has no null answer"])
    assert not (tmp_path / "out").exists()


def _glue_dir(shared_dir, directory, train, evaluation):
    """A data directory of the golden GLUE records `train` and `evaluation` (fixture names), no manifest."""
    directory.mkdir()
    glue = shared_dir / "fixtures" / "finetune" / "glue"
    for split, name in (("train", train), ("eval", evaluation)):
        (directory / f"{split}.tf_record").write_bytes((glue / f"{name}_seq128.tfrecord").read_bytes())
    return directory


def test_a_label_id_beyond_the_tasks_labels_is_one_line_before_training(shared_dir, tmp_path, capsys):
    """MNLI's eval records (labels 0..2) under --task mrpc trained and then failed the scoring with an IndexError
    (with --no-eval: exit 0), leaving an empty --output-dir; now refused before the checkpoint is read."""
    data = _glue_dir(shared_dir, tmp_path / "mixed", "MRPC_train", "MNLI_dev")
    out = tmp_path / "out"
    code = main(["finetune", "--task", "mrpc", "--format", "tfrecord", "--data", str(data), "--init-checkpoint",
                 str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
                 "--output-dir", str(out), "--quiet"])
    assert (code, capsys.readouterr().err.strip().splitlines()) == (
        1, [f"trainer: error: {data / 'eval.tf_record'}: row 0: label_ids 2, but MRPC has 2 labels (0..1)"])
    assert not out.exists()


@pytest.mark.parametrize("damage", ["id beyond the vocab", "segment id beyond the type vocab", "truncated"])
def test_predicted_records_are_read_whole_before_training(shared_dir, tmp_path, capsys, damage):
    """--predict's test split was checked by its first record alone: an id beyond the model's vocab (records
    without a manifest) or its type vocab was TensorFlow's gather traceback, a cut file one line, all once every
    step had been trained and --checkpoint-dir saved; now one line before training, nothing written."""
    data = _glue_dir(shared_dir, tmp_path / "glue", "MRPC_train", "MRPC_dev")
    test = list(formats.read_records(shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_test_seq128.tfrecord"))[:6]
    feature, index, value = {"id beyond the vocab": ("input_ids", 2, 40000), "truncated": ("input_ids", 2, 40000),
                             "segment id beyond the type vocab": ("segment_ids", 5, 2)}[damage]
    test[3] = dict(test[3], **{feature: [*test[3][feature][:index], value, *test[3][feature][index + 1:]]})
    formats.write_records(data / "predict.tf_record", test, "tfrecord", kind=GLUE)
    said = {"input_ids": "row 3: input_ids[2]: 40000 is not a token id of the vocab of 30522 (0..30521)",
            "segment_ids": "row 3: segment_ids[5]: 2 is not a segment id of the model's type_vocab_size 2 (0..1)"}[
        feature]
    if damage == "truncated":  # the last record cut short; the others' ids sound
        formats.write_records(data / "predict.tf_record", test[:3] + test[4:], "tfrecord", kind=GLUE)
        (data / "predict.tf_record").write_bytes((data / "predict.tf_record").read_bytes()[:-100])
        said = "record 4 at byte "
    code = main(["finetune", "--task", "mrpc", "--format", "tfrecord", "--data", str(data), "--init-checkpoint",
                 str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
                 "--predict", "--output-dir", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                 "--quiet"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and line.startswith(f"trainer: error: {data / 'predict.tf_record'}: {said}"), line
    assert damage != "truncated" or "truncated data" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()


def test_a_predicted_file_changed_since_its_manifest_is_named_before_training(shared_dir, golden_dir, tmp_path,
                                                                             capsys):
    """create-glue's test records, two swapped (the size kept): the manifest's sha256 was not checked where the
    eval and test splits are read, so they were predicted as they were, exit 0."""
    data = tmp_path / "mrpc"
    assert bertprep_main(["create-glue", "--task", "MRPC", "--data-dir", str(shared_dir / "fixtures" / "finetune" /
                          "glue" / "MRPC"), "--vocab", str(golden_dir / "vocab.txt"), "--out", str(data), "--format",
                          "ofrecord", "--quiet"]) == 0
    test = data / "test.of_record-0"
    size, records = test.stat().st_size, list(formats.read_records(test))
    formats.write_records(test, [records[1], records[0], *records[2:]], "ofrecord", kind=GLUE)
    assert test.stat().st_size == size
    code = main(["finetune", "--task", "mrpc", "--format", "ofrecord", "--data", str(data), "--init-checkpoint",
                 str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
                 "--predict", "--output-dir", str(tmp_path / "out"), "--quiet"])
    line = (capsys.readouterr().err.strip().splitlines() or [""])[-1]
    assert code == 1 and line.startswith(f"trainer: error: {test}: sha256 ") and line.endswith(
        "the file changed after it was written (rerun the stage that wrote it)"), line
    assert not (tmp_path / "out").exists()


def _prediction_run(shared_dir, squad_dir, tmp_path, capsys, task, *argv):
    """`finetune --predict` of a SQuAD or an MRPC directory (MRPC's with test records) into tmp_path/out and
    tmp_path/ckpt: (exit code, stderr's last line)."""
    if task == "squad":
        data = squad_dir
    else:
        data = _glue_dir(shared_dir, tmp_path / "glue", "MRPC_train", "MRPC_dev")
        (data / "predict.tf_record").write_bytes(
            (shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_test_seq128.tfrecord").read_bytes())
    code = main(["finetune", "--task", task, "--format", "tfrecord", "--data", str(data), "--init-checkpoint",
                 str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
                 "--predict", "--output-dir", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                 "--quiet", *argv])
    return code, (capsys.readouterr().err.strip().splitlines() or [""])[-1]


@pytest.mark.parametrize("task, written", [("squad", "predictions.json"), ("mrpc", "test_results.tsv"),
                                           ("mrpc", "eval_results.txt")])
def test_a_directory_where_a_prediction_file_goes_is_refused_before_training(shared_dir, squad_dir, tmp_path, capsys,
                                                                             task, written):
    """A directory named predictions.json (SQuAD's scoring) or test_results.tsv (--predict) in --output-dir: the
    write failed ('Is a directory') once every step had been trained and --checkpoint-dir saved."""
    out = tmp_path / "out"
    (out / written).mkdir(parents=True)
    assert _prediction_run(shared_dir, squad_dir, tmp_path, capsys, task) == (
        2, f"trainer: error: --output-dir {out}: {out / written} is a directory, where the run writes its {written} "
           "after training: move it, or give another --output-dir")
    assert not (tmp_path / "ckpt").exists() and os.listdir(out) == [written]


@pytest.mark.parametrize("task, written", [("squad", "nbest_predictions.json"), ("mrpc", "test_results.tsv"),
                                           ("mrpc", "eval_results.txt")])
def test_a_log_json_named_as_a_prediction_file_is_refused_before_training(shared_dir, squad_dir, tmp_path, capsys,
                                                                          task, written):
    """--log-json OUT/test_results.tsv (or a SQuAD prediction file) was accepted: the predictions replaced the log
    after training, exit 0, the log lost."""
    log = tmp_path / "out" / written
    log.parent.mkdir()  # --log-json's directory must be there
    assert _prediction_run(shared_dir, squad_dir, tmp_path, capsys, task, "--log-json", str(log)) == (
        2, f"trainer: error: --log-json {log}: the run writes its {written} there after training (--output-dir): "
           "name another --log-json")
    assert not (tmp_path / "ckpt").exists() and not os.listdir(tmp_path / "out")


def test_a_log_json_that_is_the_dev_json_is_refused_before_training(shared_dir, squad_dir, tmp_path, capsys):
    """--log-json naming the SQuAD dev JSON the manifest's source names (scored against after training) had the
    run's JSON lines appended to it: the scoring then said `cannot read the SQuAD dev JSON: Extra data`, exit 1,
    once every step had been trained, and the dev JSON stayed damaged. Now one line before training."""
    import shutil

    data = tmp_path / "squad"
    shutil.copytree(squad_dir, data)
    manifest = json.loads((data / "manifest.json").read_text())
    dev = tmp_path / "dev.json"
    shutil.copy(manifest["source"]["eval"]["path"], dev)
    manifest["source"]["eval"]["path"] = str(dev)
    (data / "manifest.json").write_text(json.dumps(manifest))
    before = dev.read_bytes()
    code = main(["finetune", "--task", "squad", "--format", "tfrecord", "--data", str(data), "--init-checkpoint",
                 str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
                 "--output-dir", str(tmp_path / "out"), "--log-json", str(dev), "--quiet"])
    assert (code, capsys.readouterr().err.strip().splitlines()) == (2, [
        f"trainer: error: --log-json {dev} is the input {dev}: the run would overwrite or delete what it reads; "
        "write the output elsewhere"])
    assert dev.read_bytes() == before and not (tmp_path / "out").exists()


def test_a_second_run_into_a_held_checkpoint_dir_is_refused(shared_dir, mrpc_dir, tmp_path, capsys):
    """Two fine-tunings into one --checkpoint-dir at once both trained, exit 0, and the last one's rotation (it
    keeps one checkpoint) deleted the other's fine-tuned model. The run now holds the directory, as pretraining
    does: a second run is refused while the first lasts (which is stopped here, not trained to its end)."""
    import time

    ck = tmp_path / "ck"
    run = ["finetune", "--task", "mrpc", "--data", str(mrpc_dir), "--format", "tfrecord", "--init-checkpoint",
           str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
           "--no-eval", "--checkpoint-dir", str(ck), "--quiet"]
    first = subprocess.Popen([sys.executable, "-m", "trainer", *run, "--output-dir", str(tmp_path / "one")],
                             cwd=tmp_path, env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # the lock, or (without one) the TensorBoard folder the run makes before its first step
        while not any(path.exists() for path in (ck / ".partial" / "lock", ck / "tensorboard")) and \
                first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        code = main([*run, "--output-dir", str(tmp_path / "two")])
        line = (capsys.readouterr().err.strip().splitlines() or [""])[-1]
        assert code == 1 and line.startswith(f"trainer: error: {ck}: another run is writing here (trainer finetune, "
                                             f"pid {first.pid} on "), line
        assert not (tmp_path / "two").exists()
    finally:
        first.kill()  # the kernel releases its lock
        first.communicate(timeout=120)


def test_a_second_run_into_a_held_output_dir_is_refused(shared_dir, mrpc_dir, tmp_path, capsys):
    """Two fine-tunings into one --output-dir at once (other --checkpoint-dirs) both ran, exit 0: each wrote its
    test_results.tsv or predictions.json there, the last one's kept, and both summaries named it. The run now
    holds --output-dir too; one whose --output-dir is its --checkpoint-dir holds it once (it does not refuse
    itself), and a second run into it is refused while the first lasts."""
    import time

    out = tmp_path / "out"
    run = ["finetune", "--task", "mrpc", "--data", str(mrpc_dir), "--format", "tfrecord", "--init-checkpoint",
           str(shared_dir / "fixtures" / "checkpoints" / "hf_tiny"), "--steps", "1", "--batch-size", "4",
           "--no-eval", "--output-dir", str(out), "--quiet"]
    first = subprocess.Popen([sys.executable, "-m", "trainer", *run, "--checkpoint-dir", str(out)], cwd=tmp_path,
                             env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / ".partial" / "lock").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        code = main([*run, "--checkpoint-dir", str(tmp_path / "two")])
        line = (capsys.readouterr().err.strip().splitlines() or [""])[-1]
        assert code == 1 and line.startswith(f"trainer: error: {out}: another run is writing here (trainer "
                                             f"finetune, pid {first.pid} on "), line
        assert not (tmp_path / "two").exists()
    finally:
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]  # held once, not refused by itself
    assert [name for name in os.listdir(out) if name.startswith("ckpt-")] == ["ckpt-00000001"]


def test_ofrecord_parts_are_read_in_the_order_of_their_index(shared_dir, tmp_path):
    """Twelve test parts were read as their names sort as text (0, 1, 10, 11, 2, ...): --predict's
    test_results.tsv, a line per test example in record order, came out of the examples' order unsaid."""
    from trainer.tasks import TaskData, task_named

    glue = shared_dir / "fixtures" / "finetune" / "glue"
    train = list(formats.read_records(glue / "MRPC_train_seq128.tfrecord"))[:8]
    for split in ("train", "eval"):
        formats.write_records(tmp_path / f"{split}.of_record-0", train, "ofrecord", kind=GLUE)
    test = list(formats.read_records(glue / "MRPC_test_seq128.tfrecord"))[:12]
    for index, record in enumerate(test):
        formats.write_records(tmp_path / f"test.of_record-{index}", [record], "ofrecord", kind=GLUE)
    files = TaskData(str(tmp_path), "ofrecord", task_named("mrpc")).files["test"]
    assert files == [str(tmp_path / f"test.of_record-{index}") for index in range(12)]


@pytest.mark.parametrize("field, value, said", [
    ("task", 5, "task: 5, expected a task name"),  # an AttributeError traceback
    ("labels", "01", "labels: '01', expected a list of distinct label names (strings)"),  # two labels: '0' and '1'
    ("labels", ["0", "0"], "labels: ['0', '0'], expected a list of distinct label names (strings)"),
    ("lower_case", "yes", "lower_case: 'yes', expected true or false"),  # taken for true
])
def test_a_task_manifests_own_fields_are_checked(shared_dir, tmp_path, field, value, said):
    """create-glue's and create-squad's fields that fine-tuning trusts, hand-edited, are one line naming them."""
    from bertprep.errors import DataError
    from trainer.tasks import TaskData, task_named

    data = _glue_dir(shared_dir, tmp_path / "glue", "MRPC_train", "MRPC_dev")
    (data / "manifest.json").write_text(json.dumps({"task": "MRPC", "labels": ["0", "1"], field: value}))
    with pytest.raises(DataError) as raised:
        TaskData(str(data), "tfrecord", task_named("mrpc"))
    assert str(raised.value) == f"{data / 'manifest.json'}: {said}"


def test_squad_eval_metadata_cut_short_is_named_before_training(squad_dir, tmp_path):
    """eval.features.jsonl is read once the training is done: one cut short (its manifest lists its bytes)
    failed after every step had been trained."""
    import shutil

    from bertprep.errors import DataError
    from trainer.tasks import TaskData, task_named

    data = tmp_path / "squad"
    shutil.copytree(squad_dir, data)
    size = (data / "eval.features.jsonl").stat().st_size
    with open(data / "eval.features.jsonl", "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(DataError) as raised:
        TaskData(str(data), "tfrecord", task_named("squad"))
    assert str(raised.value) == (f'{data / "manifest.json"}: metadata["eval.features.jsonl"].bytes: {size:,}, but '
                                 f'{data / "eval.features.jsonl"} holds {size // 2:,} bytes')


def test_a_task_directory_of_another_format_names_the_format_it_holds(shared_dir, tmp_path):
    """`finetune --format ofrecord` of a directory of train.tf_record said "no ofrecord training records
    (train.of_record-*)", as if it held none (fails on the old code: that line alone)."""
    from bertprep.errors import DataError
    from trainer.tasks import TaskData, task_named

    data = _glue_dir(shared_dir, tmp_path / "glue", "MRPC_train", "MRPC_dev")
    with pytest.raises(DataError) as raised:
        TaskData(str(data), "ofrecord", task_named("mrpc"))
    assert str(raised.value) == (f"{data}: no ofrecord training records (train.of_record-*), but tfrecord ones "
                                 "(train.tf_record): give --format tfrecord")

def test_the_training_stream_checks_every_label_id(shared_dir, tmp_path):
    """The training records' labels are checked chunk by chunk as they are read (beside the vocab), before
    the first step: MNLI's under --task mrpc trained silently with --no-eval."""
    from bertprep.errors import DataError
    from trainer.data import RecordStream
    from trainer.tasks import TaskData, task_named

    data = _glue_dir(shared_dir, tmp_path / "mixed", "MNLI_train", "MRPC_dev")
    stream = RecordStream(TaskData(str(data), "tfrecord", task_named("mrpc")), "train", 4, seed=1)
    with pytest.raises(DataError) as raised:
        next(stream.batches())
    assert str(raised.value) == f"{data / 'train.tf_record'}: row 1: label_ids 2, but MRPC has 2 labels (0..1)"
    # A task of three labels takes them.
    assert next(RecordStream(TaskData(str(data), "tfrecord", task_named("mnli")), "train", 4, seed=1).batches())
