"""A fine-tune leaves ready to use (issue 40): `trainer finetune --predict` writes what
google-research/bert's --do_predict writes, and `checkpoint convert` of the fine-tuned checkpoint gives
models that compute the same numbers in their own code: transformers' AutoModelForSequenceClassification
and AutoModelForQuestionAnswering (and pipeline("question-answering")), google-research/bert's own
modeling.BertModel + run_classifier.py's create_model under tf.compat.v1 (tests/google_bert_reference.py, with a
checkout of google-research/bert named by $BERTPREP_GOOGLE_BERT; else the outputs it computed from these
fine-tunes' exports, tests/data/google_finetune_heads).
One tiny MRPC and one tiny SQuAD fine-tune (TensorFlow backend) are shared by the module. The model uses
hidden_act gelu_tanh, the GELU Google's modeling.py computes, so every export computes the same function.
Bad input ends with one line and writes nothing."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.xdist_group("finetune_export")

from bertprep import formats  # noqa: E402
from bertprep.cli import main as bertprep_main  # noqa: E402
from bertprep.formats.schemas import GLUE  # noqa: E402
from conftest import shared_path  # noqa: E402
from test_trainer_data import golden_records  # noqa: E402
from trainer.cli import main  # noqa: E402
from trainer_checks import bert_config, xla_flags  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# google-research/bert's own model code, the oracle of the Google exports: a checkout of it (commit eedf571...)
# named by $BERTPREP_GOOGLE_BERT. Its code is not kept in this repository: without it the tests compare with what
# it computed from this module's exports (tests/data/google_finetune_heads, written by the tests with it and
# BERTPREP_WRITE_GOOGLE_GOLDEN=1; its README says how).
HAVE_GOOGLE_BERT = os.path.isfile(os.path.join(os.environ.get("BERTPREP_GOOGLE_BERT", ""), "modeling.py"))
GOOGLE_GOLDEN = os.path.join(HERE, "data", "google_finetune_heads")
CHECKS = os.path.join(HERE, "trainer_checks.py")
FEATURES = ("input_ids", "input_mask", "segment_ids")
MRPC_TRAIN, MRPC_TEST, SQUAD_QUESTIONS = 32, 24, 8
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def pretrained(golden_dir, tmp_path_factory):
    """The tiny model with 2 layers (dropout 0, Google's tanh GELU; the 2 layers of the fine-tunes whose outputs
    tests/data keeps from Google's code), 2 pretraining steps on the golden G1 records."""
    root = tmp_path_factory.mktemp("pretrained")
    records = golden_records(golden_dir, root / "records")
    assert main(["--format", "tfrecord", "--data", str(records), "--bert-config",
                 bert_config(root, 0.0, hidden_act="gelu_tanh", num_hidden_layers=2), "--steps", "2", "--batch-size",
                 "4", "--checkpoint-dir", str(root / "ckpt"), "--quiet"]) == 0
    return root / "ckpt"


def finetune(root, *argv, backend="tensorflow", fmt="tfrecord"):
    """`trainer finetune --predict` into root/out (checkpoint in root/ckpt); its JSON summary event. JAX runs
    in a process of its own, TensorFlow unimportable there."""
    log = root / "log.jsonl"
    argv = ["finetune", "--format", fmt, "--output-dir", str(root / "out"), "--checkpoint-dir",
            str(root / "ckpt"), "--log-json", str(log), "--predict", "--quiet", *argv]
    if backend == "tensorflow":
        assert main(argv) == 0
    else:
        env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1))
        result = subprocess.run([sys.executable, CHECKS, "--no-tensorflow", "trainer", *argv], capture_output=True,
                                text=True, cwd=os.path.dirname(HERE), env=env)
        assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in log.read_text().splitlines()][-1]


def mrpc_run(shared_dir, pretrained, root, backend="tensorflow", fmt="tfrecord"):
    """google-research/bert's own MRPC records: train and eval split the first training records, the test
    split (predict.tf_record, or OFRecord's test.of_record-0) the first test records; fine-tuned 10 steps
    with --predict."""
    glue = shared_dir / "fixtures" / "finetune" / "glue"
    train = list(formats.read_records(glue / "MRPC_train_seq128.tfrecord"))[:MRPC_TRAIN]
    test = list(formats.read_records(glue / "MRPC_test_seq128.tfrecord"))[:MRPC_TEST]
    names = {"tfrecord": ("train.tf_record", "eval.tf_record", "predict.tf_record"),
             "ofrecord": ("train.of_record-0", "eval.of_record-0", "test.of_record-0")}[fmt]
    for name, records in zip(names, (train, train, test)):
        formats.write_records(root / "data" / name, records, fmt, kind=GLUE)
    summary = finetune(root, "--task", "mrpc", "--data", str(root / "data"), "--init-checkpoint", str(pretrained),
                       "--steps", "10", "--batch-size", "16", "--lr", "2e-3", backend=backend, fmt=fmt)
    return root, summary, test


@pytest.fixture(scope="module")
def mrpc(shared_dir, pretrained, tmp_path_factory):
    return mrpc_run(shared_dir, pretrained, tmp_path_factory.mktemp("mrpc"))


@pytest.fixture(scope="module")
def squad(shared_dir, golden_dir, pretrained, tmp_path_factory):
    """create-squad's train and eval split of a few questions of the golden SQuAD v1.1 JSON, fine-tuned
    3 steps with --predict."""
    root = tmp_path_factory.mktemp("squad")
    dataset = json.loads((shared_dir / "fixtures" / "finetune" / "squad" / "v1.1" / "train-v1.1.json").read_text())
    kept, questions = [], 0
    for article in dataset["data"]:
        paragraphs = [p for p in article["paragraphs"] if len(p["context"].split()) <= 100]
        if paragraphs and questions < SQUAD_QUESTIONS:
            kept.append(dict(article, paragraphs=paragraphs[:1]))
            questions += len(paragraphs[0]["qas"])
    dataset = dict(dataset, data=kept)
    (root / "train-small.json").write_text(json.dumps(dataset))
    for split in ("train", "eval"):
        assert bertprep_main(["create-squad", "--input", str(root / "train-small.json"), "--split", split, "--vocab",
                              str(golden_dir / "vocab.txt"), "--out", str(root / "data"), "--seq", "128",
                              "--doc-stride", "64", "--max-query", "24", "--format", "tfrecord", "--quiet"]) == 0
    summary = finetune(root, "--task", "squad", "--data", str(root / "data"), "--init-checkpoint", str(pretrained),
                       "--steps", "3", "--batch-size", "8", "--lr", "2e-3")
    return root, summary, dataset


def convert(checkpoint_dir, out, to):
    """`checkpoint convert`; the golden vocab given where the fine-tune's records name none (Google's MRPC
    records, made with uncased BERT's vocab, come without a manifest)."""
    vocab = ["--vocab", str(shared_path() / "fixtures" / "golden" / "vocab.txt")]
    assert main(["checkpoint", "convert", str(checkpoint_dir), str(out), "--to", to, *vocab, "--quiet"]) == 0
    return out


def torch_inputs(records):
    return {"input_ids": torch.tensor(np.stack([r["input_ids"] for r in records]), dtype=torch.long),
            "attention_mask": torch.tensor(np.stack([r["input_mask"] for r in records]), dtype=torch.long),
            "token_type_ids": torch.tensor(np.stack([r["segment_ids"] for r in records]), dtype=torch.long)}


def test_predict_writes_test_results_tsv(mrpc):
    root, summary, test = mrpc
    lines = (root / "out" / "test_results.tsv").read_text().splitlines()
    assert len(lines) == len(test) == summary["predict_examples"]
    probabilities = np.array([[float(v) for v in line.split("\t")] for line in lines])
    assert probabilities.shape == (len(test), 2) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-6)
    assert np.ptp(probabilities[:, 0]) > 1e-3  # the examples differ: not one line repeated


def test_mrpc_hf_export_gives_test_results(mrpc, tmp_path):
    hf_export_gives_test_results(*mrpc, tmp_path)
    card = (tmp_path / "hf" / "README.md").read_text()  # its eval scores in the model card's model-index
    accuracy = json.loads(next(p for p in (mrpc[0] / "ckpt").glob("ckpt-*/state.json")).read_text())[
        "evaluation"]["accuracy"]
    assert accuracy == mrpc[1]["eval_accuracy"]
    assert "pipeline_tag: text-classification\n" in card and "      name: MRPC\n      type: glue\n" in card
    assert f"    - type: accuracy\n      value: {json.dumps(accuracy)}\n" in card


def sts_b_tsv(directory, rows):
    """STS-B's GLUE layout: index genre filename year old_index source1 source2 sentence1 sentence2 [score]."""
    directory.mkdir(parents=True, exist_ok=True)
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]
    words = (Path(shared_path()) / "fixtures" / "golden" / "corpus.txt").read_text(encoding="utf-8").split()
    for split, count in (("train", rows), ("dev", rows), ("test", rows // 2)):
        lines = ["\t".join(header + (["score"] if split != "test" else []))]
        for i in range(count):
            a, b = " ".join(words[i * 7:i * 7 + 9]), " ".join(words[i * 5 + 3:i * 5 + 11])
            score = [f"{(i * 37 % 51) / 10:.3f}"] if split != "test" else []
            lines.append("\t".join([str(i), "main-news", "x", "2012", str(i), "none", "none", a, b] + score))
        (directory / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_sts_b_predicts_one_value_per_line_and_exports_a_regression_head(pretrained, golden_dir, tmp_path):
    """STS-B (regression): --predict writes one value per test example, as run_classifier.py's
    --do_predict line of a one-label model; the HF export is a regression BertForSequenceClassification
    giving those values within 1e-4."""
    sts_b_tsv(tmp_path / "STS-B", 24)
    assert bertprep_main(["create-glue", "--task", "STS-B", "--data-dir", str(tmp_path / "STS-B"), "--vocab",
                          str(golden_dir / "vocab.txt"), "--out", str(tmp_path / "data"), "--format", "tfrecord",
                          "--quiet"]) == 0
    summary = finetune(tmp_path, "--task", "sts-b", "--data", str(tmp_path / "data"), "--init-checkpoint",
                       str(pretrained), "--steps", "4", "--batch-size", "8", "--lr", "2e-3")
    lines = (tmp_path / "out" / "test_results.tsv").read_text().splitlines()
    assert len(lines) == 12 == summary["predict_examples"] and all("\t" not in line for line in lines)
    ours = np.array([float(line) for line in lines])
    assert np.ptp(ours) > 1e-4  # the examples differ
    out = convert(tmp_path / "ckpt", tmp_path / "hf", "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and config["num_labels"] == 1
    assert config["problem_type"] == "regression"
    test = list(formats.read_records(tmp_path / "data" / "predict.tf_record"))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    with torch.no_grad():
        values = model(**torch_inputs(test)).logits.numpy()[:, 0]
    assert np.abs(values - ours).max() < TOLERANCE


@pytest.mark.heavy
def test_mrpc_jax_fine_tune_hf_export_gives_its_test_results(shared_dir, pretrained, tmp_path):
    """JAX, and the OFRecord test part."""
    root, _, test = mrpc_run(shared_dir, pretrained, tmp_path / "jax", backend="jax", fmt="ofrecord")
    assert len((root / "out" / "test_results.tsv").read_text().splitlines()) == len(test)
    hf_export_gives_test_results(root, None, test, tmp_path)


def hf_export_gives_test_results(root, _, test, tmp_path):
    out = convert(root / "ckpt", tmp_path / "hf", "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "0", "1": "1"} and config["problem_type"] == "single_label_classification"
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    with torch.no_grad():
        probabilities = torch.softmax(model(**torch_inputs(test)).logits, dim=-1).numpy()
    ours = np.loadtxt(root / "out" / "test_results.tsv", delimiter="\t")
    assert np.abs(probabilities - ours).max() < TOLERANCE


def google_reference(out, records, head, tmp_path):
    """The outputs of google-research/bert's own model code restored from the Google export `out`."""
    np.savez(tmp_path / "inputs.npz", **{name: np.stack([r[name] for r in records]) for name in FEATURES})
    result = subprocess.run([sys.executable, os.path.join(HERE, "google_bert_reference.py"), "--checkpoint",
                             str(out / "bert_model.ckpt"), "--inputs", str(tmp_path / "inputs.npz"), "--head", head,
                             "--labels", "2", "--out", str(tmp_path / "google.npz")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(tmp_path / "google.npz") as google:
        return dict(google)


def google_outputs(out, records, head, tmp_path):
    """What google-research/bert's model code computes from the Google export `out`: run here where
    $BERTPREP_GOOGLE_BERT names its checkout (and kept as the golden with BERTPREP_WRITE_GOOGLE_GOLDEN=1),
    else the golden it computed from this module's fine-tune, once `out` is checked to hold every variable,
    by name and shape, that its graph restored then (so it restores into that graph)."""
    golden = os.path.join(GOOGLE_GOLDEN, f"{head}.npz")
    if HAVE_GOOGLE_BERT:
        outputs = google_reference(out, records, head, tmp_path)
        if os.environ.get("BERTPREP_WRITE_GOOGLE_GOLDEN") == "1":
            np.savez(golden, **outputs)
        return outputs
    import tensorflow as tf

    with np.load(golden) as saved:
        outputs = dict(saved)
    exported = {name: list(shape) for name, shape in tf.train.list_variables(str(out / "bert_model.ckpt"))}
    for name, shape in json.loads(str(outputs["variables"])):
        assert exported.get(name) == shape, f"{name} {shape}: {exported.get(name)} in the export"
    return outputs


def assert_equal_to_googles(google, ours):
    gap = np.abs(google - ours).max()
    assert gap < TOLERANCE, (f"{gap:.2e} from google-research/bert's outputs" + (
        "" if HAVE_GOOGLE_BERT else " (the golden: if this module's fine-tune changed on purpose, write it again "
                                    "as tests/data/google_finetune_heads/README.md says)"))


def test_mrpc_google_export_restores_into_run_classifier(mrpc, tmp_path):
    root, _, test = mrpc
    out = convert(root / "ckpt", tmp_path / "google", "google")
    probabilities = google_outputs(out, test, "classifier", tmp_path)["probabilities"]
    assert_equal_to_googles(probabilities, np.loadtxt(root / "out" / "test_results.tsv", delimiter="\t"))


@pytest.mark.heavy
def test_squad_google_export_restores_into_run_squad(squad, tmp_path):
    root = squad[0]
    out = convert(root / "ckpt", tmp_path / "google", "google")
    records = list(formats.read_records(root / "data" / "eval.tf_record"))
    google, ours = google_outputs(out, records, "squad", tmp_path), our_span_logits(root / "ckpt", records)
    for name in ("start_logits", "end_logits"):
        assert_equal_to_googles(google[name], ours[name])


def our_span_logits(checkpoint_dir, records):
    """Start and end logits of the fine-tuned SQuAD model as this trainer builds it (heads.BertForSpans)."""
    import keras

    from trainer.checkpoint.ours import read_arrays
    from trainer.checkpoint.run import assign
    from trainer.heads import BertForSpans
    from trainer.model import symbolic_inputs, variables_initialized_together

    config, weights, path = read_arrays(str(checkpoint_dir))
    keras.config.set_dtype_policy("float32")
    model = BertForSpans(config, name="bert")
    with variables_initialized_together():
        model(symbolic_inputs(1, len(records[0]["input_ids"])))
    assign(model, weights, path)
    outputs = model({name: np.stack([r[name] for r in records]).astype(np.int32) for name in FEATURES})
    return {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}


def with_tokenizer(out, vocab):
    """The export, with a tokenizer where the converter has written none (vocab.txt and its casing)."""
    if not (out / "vocab.txt").exists():
        shutil.copyfile(vocab, out / "vocab.txt")
    if not (out / "tokenizer_config.json").exists():
        (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                               "do_lower_case": True, "model_max_length": 128}))
    return out


def test_squad_hf_export_gives_our_logits_and_answers(squad, golden_dir, tmp_path):
    root, summary, dataset = squad
    assert summary["predict_examples"] == summary["eval_examples"] > 0
    assert (root / "out" / "predictions.json").exists() and (root / "out" / "nbest_predictions.json").exists()
    out = convert(root / "ckpt", tmp_path / "hf", "hf")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForQuestionAnswering"]
    records = list(formats.read_records(root / "data" / "eval.tf_record"))
    ours = our_span_logits(root / "ckpt", records)
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = model(**torch_inputs(records))
    assert np.abs(theirs.start_logits.numpy() - ours["start_logits"]).max() < TOLERANCE
    assert np.abs(theirs.end_logits.numpy() - ours["end_logits"]).max() < TOLERANCE
    paragraph = dataset["data"][0]["paragraphs"][0]
    answer = answer_question(with_tokenizer(out, golden_dir / "vocab.txt"), paragraph["qas"][0]["question"],
                             paragraph["context"])
    assert answer and answer in paragraph["context"]


def answer_question(directory, question, context):
    """pipeline("question-answering")'s answer where transformers still has that pipeline (it left in
    version 5); else the same steps by hand: AutoTokenizer's pair encoding with offsets, the model's
    best span of context tokens (start <= end, at most 30 tokens), its characters of the context."""
    from transformers.pipelines import SUPPORTED_TASKS

    if "question-answering" in SUPPORTED_TASKS:
        return transformers.pipeline("question-answering", model=str(directory))(question=question,
                                                                                 context=context)["answer"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(directory).eval()
    encoded = tokenizer(question, context, truncation="only_second", max_length=128, return_offsets_mapping=True,
                        return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0].tolist()
    in_context = [i for i, segment in enumerate(encoded.sequence_ids(0)) if segment == 1]
    with torch.no_grad():
        outputs = model(**encoded)
    start, end = outputs.start_logits[0], outputs.end_logits[0]
    spans = [(s, e) for s in in_context for e in in_context if s <= e < s + 30]
    best = max(spans, key=lambda span: start[span[0]] + end[span[1]])
    return context[offsets[best[0]][0]:offsets[best[1]][1]]


def test_exports_go_back_into_finetune_as_init_checkpoint(mrpc, tmp_path):
    """What --init-checkpoint reads of each export is the fine-tuned encoder and pooler (the head is set aside)."""
    from trainer.finetuning import read_pretraining_checkpoint

    root = mrpc[0]
    _, encoder, _ = read_pretraining_checkpoint(str(root / "ckpt"))
    for to in ("hf", "google", "bertprep"):
        _, weights, _ = read_pretraining_checkpoint(str(convert(root / "ckpt", tmp_path / to, to)))
        assert weights.keys() == encoder.keys() and "bert/pooler/kernel" in weights
        assert max(float(np.abs(weights[k] - encoder[k]).max()) for k in encoder) == 0
    # The bertprep form keeps the head and its task: converted to hf again, it is the same classifier.
    again = json.loads((convert(tmp_path / "bertprep", tmp_path / "hf-again", "hf") / "config.json").read_text())
    assert again["architectures"] == ["BertForSequenceClassification"] and again["finetuning_task"] == "MRPC"


def one_line_error(capsys, argv, code):
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_predict_without_test_records_is_one_line(mrpc, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train", "eval"):
        shutil.copyfile(mrpc[0] / "data" / f"{name}.tf_record", data / f"{name}.tf_record")
    err = one_line_error(capsys, ["finetune", "--task", "mrpc", "--data", str(data), "--format", "tfrecord",
                                  "--output-dir", str(tmp_path / "out"), "--predict"], 2)
    assert "predict.tf_record" in err and not (tmp_path / "out").exists()


def test_predict_on_records_of_another_task_is_one_line(mrpc, shared_dir, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(mrpc[0] / "data", data)
    shutil.copyfile(shared_dir / "fixtures" / "finetune" / "squad" / "v1.1_dev_seq128_stride32_query24.tfrecord",
                    data / "predict.tf_record")
    err = one_line_error(capsys, ["finetune", "--task", "mrpc", "--data", str(data), "--format", "tfrecord",
                                  "--output-dir", str(tmp_path / "out"), "--predict"], 1)
    assert "predict.tf_record" in err and not (tmp_path / "out").exists()


def test_convert_without_labels_is_one_line(mrpc, tmp_path, capsys):
    """A fine-tuned checkpoint whose state.json names no task: Hugging Face's config cannot name its labels."""
    (name,) = [n for n in os.listdir(mrpc[0] / "ckpt") if n.startswith("ckpt-")]
    checkpoint = tmp_path / name
    shutil.copytree(mrpc[0] / "ckpt" / name, checkpoint)
    state = json.loads((checkpoint / "state.json").read_text())
    state["settings"] = {"model": state["settings"]["model"]}
    (checkpoint / "state.json").write_text(json.dumps(state))
    err = one_line_error(capsys, ["checkpoint", "convert", str(checkpoint), str(tmp_path / "hf"), "--to", "hf"], 1)
    assert "labels" in err and not (tmp_path / "hf").exists()
    assert not [n for n in os.listdir(tmp_path) if n not in (name,)]  # no staging left either
