"""Hostile input to the checkpoint half of the trainer (issue 30), one or more tests per class: a
real heads-less BERT (transformers' own `BertModel`, saved without the `bert.` prefix) through
`checkpoint run`, every `convert` and `finetune`; `checkpoint run --inputs` values that must be
refused, never truncated or wrapped; config files that are not a BERT's; a directory holding two
kinds of checkpoint; fine-tuning with nothing to score; the temporaries of killed writers;
`download pretrained` of a release whose config is damaged. Bad input ends with one line, exit 1
(data) or 2 (usage), nothing under the output's name."""

import contextlib
import copy
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bertprep import formats  # noqa: E402
from bertprep.atomic import temp_path  # noqa: E402
from bertprep.formats.schemas import GLUE  # noqa: E402
from stand_in_servers import StandInServer, looks_complete, one_line_error, run_cli  # noqa: E402
from test_checkpoints import TOLERANCE, run_outputs  # noqa: E402
from test_download_pretrained import RELEASE, ZIP_PATH, release_files, sha256sums, zip_of  # noqa: E402, F401
from trainer.checkpoint import convert as checkpoint_convert  # noqa: E402
from trainer.checkpoint import read as read_checkpoint  # noqa: E402
from trainer.checkpoint import task_heads  # noqa: E402
from trainer.cli import main  # noqa: E402

# The module's checkpoints and model are built once, on one worker.
pytestmark = pytest.mark.xdist_group("hostile_checkpoints")

from conftest import shared_path  # noqa: E402

# The golden vocab (uncased, 30,522 tokens): the fixtures' checkpoints were trained with it; an export to
# Hugging Face carries its tokenizer.
GOLDEN_VOCAB = ["--vocab", str(shared_path() / "fixtures" / "golden" / "vocab.txt")]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADLESS_OUTPUTS = {"sequence_output", "pooled_output"}
# Google's modeling.py computes the tanh GELU: an exact-GELU model converted to Google's form moves ~2e-5.
GOOGLE_GELU_TOLERANCE = 1e-4


@pytest.fixture(scope="session")
def checkpoints(shared_dir):
    return shared_dir / "fixtures" / "checkpoints"


@pytest.fixture(scope="session")
def input_rows(checkpoints):
    return [json.loads(line) for line in (checkpoints / "inputs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def bert_model(checkpoints, input_rows, tmp_path_factory):
    """transformers' own BertModel of hf_tiny's config (seeded random init), saved by save_pretrained
    (safetensors, names without `bert.`), a copy whose file also holds the `embeddings.position_ids`
    buffer (as transformers < 4.31 saved it, as many hub BERTs have it), and transformers' outputs on
    the fixture inputs."""
    root = tmp_path_factory.mktemp("bert_model")
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "max_position_embeddings", "type_vocab_size", "initializer_range")})
    torch.manual_seed(30)
    model = transformers.BertModel(config).eval()
    model.save_pretrained(root / "saved")
    assert not any(name.startswith("bert.") for name in _safetensors_names(root / "saved"))
    from safetensors.torch import save_file

    (root / "with_buffer").mkdir()
    shutil.copy(root / "saved" / "config.json", root / "with_buffer" / "config.json")
    state = {name: value.contiguous() for name, value in model.state_dict().items()}
    save_file(dict(state, **{"embeddings.position_ids": model.embeddings.position_ids.contiguous()}),
              str(root / "with_buffer" / "model.safetensors"), metadata={"format": "pt"})
    torch.manual_seed(30)
    no_pooler = transformers.BertModel(config, add_pooling_layer=False).eval()
    no_pooler.save_pretrained(root / "no_pooler")
    assert not any(".pooler." in name or name.startswith("pooler.") for name in _safetensors_names(root / "no_pooler"))
    return {"saved": root / "saved", "with_buffer": root / "with_buffer", "outputs": _transformers_outputs(
        model, input_rows), "no_pooler": root / "no_pooler", "no_pooler_outputs": _transformers_outputs(
        no_pooler, input_rows)}


def _safetensors_names(directory):
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), "np") as f:
        return list(f.keys())


def _transformers_outputs(model, rows):
    tensor = {k: torch.tensor([r[k] for r in rows]) for k in ("input_ids", "input_mask", "segment_ids")}
    with torch.no_grad():
        out = model(input_ids=tensor["input_ids"], attention_mask=tensor["input_mask"],
                    token_type_ids=tensor["segment_ids"])
    pooled = {} if out.pooler_output is None else {"pooled_output": out.pooler_output.numpy()}
    return {"sequence_output": out.last_hidden_state.numpy(), **pooled}


def assert_headless_outputs(got, want, tolerance=TOLERANCE, names=HEADLESS_OUTPUTS):
    assert set(got) == set(names)
    for name in names:
        assert got[name].dtype == np.float32
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=tolerance, err_msg=name)


# ---------------------------------------------------------------- class 7: a real heads-less checkpoint


@pytest.mark.parametrize("copy_name", ["saved", "with_buffer"])
def test_run_of_a_transformers_bertmodel_gives_transformers_outputs(bert_model, checkpoints, tmp_path, copy_name):
    got = run_outputs(bert_model[copy_name], checkpoints / "inputs.jsonl", tmp_path / "o.npz")
    assert_headless_outputs(got, bert_model["outputs"])


@pytest.mark.heavy  # a JAX process compiling two models: ~25 s on 2 cores
def test_run_of_transformers_bertmodels_on_jax(bert_model, checkpoints, tmp_path):
    """A JAX-only process (Keras never imports TensorFlow) runs the heads-less BertModel, with and without
    its pooler, to transformers' outputs."""
    script = textwrap.dedent("""
        import sys
        from trainer.cli import main
        inputs, out = sys.argv[1], sys.argv[2]
        for src, name in zip(sys.argv[3::2], sys.argv[4::2]):
            code = main(["checkpoint", "run", src, "--inputs", inputs, "--out", f"{out}/{name}.npz", "--quiet"])
            assert code == 0, code
        import keras
        assert keras.backend.backend() == "jax" and "tensorflow" not in sys.modules, keras.backend.backend()
    """)
    copies = ("saved", "no_pooler")
    done = subprocess.run([sys.executable, "-c", script, str(checkpoints / "inputs.jsonl"), str(tmp_path),
                           *(str(item) for name in copies for item in (bert_model[name], name))],
                          env=dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=REPO), capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for name, want, names in (("saved", bert_model["outputs"], HEADLESS_OUTPUTS),
                              ("no_pooler", bert_model["no_pooler_outputs"], {"sequence_output"})):
        with np.load(tmp_path / f"{name}.npz") as npz:
            assert_headless_outputs({k: npz[k] for k in npz.files}, want, names=names)


def test_bertmodel_converts_to_every_kind_and_back(bert_model, checkpoints, tmp_path):
    """--to hf (loaded by transformers' BertModel: nothing missing, its outputs), --to bertprep, --to google
    (TensorFlow reads Google's names; gelu_tanh there) and from that back to hf: the same weights."""
    src = bert_model["saved"]
    assert _convert_fails(src, tmp_path / "labelled", "--labels", "a,b", code=2) == (
        f"trainer checkpoint: error: --labels: {src / 'model.safetensors'} holds no task head; labels name a "
        "fine-tuned classifier's outputs")
    for to in ("hf", "bertprep", "google"):
        assert main(["checkpoint", "convert", str(src), str(tmp_path / to), "--to", to, *GOLDEN_VOCAB, "--quiet"]) == 0
        tolerance = GOOGLE_GELU_TOLERANCE if to == "google" else TOLERANCE
        got = run_outputs(tmp_path / to, checkpoints / "inputs.jsonl", tmp_path / f"{to}.npz")
        assert_headless_outputs(got, bert_model["outputs"], tolerance)
    loaded, info = transformers.BertModel.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    rows = [json.loads(line) for line in (checkpoints / "inputs.jsonl").read_text().splitlines()]
    assert_headless_outputs(_transformers_outputs(loaded.eval(), rows), bert_model["outputs"])

    import tensorflow as tf

    google_names = {name for name, _shape in tf.train.list_variables(str(tmp_path / "google" / "bert_model.ckpt"))}
    assert "bert/embeddings/word_embeddings" in google_names and not any(n.startswith("cls/") for n in google_names)
    assert main(["checkpoint", "convert", str(tmp_path / "google"), str(tmp_path / "back"), "--to", "hf",
                 *GOLDEN_VOCAB, "--quiet"]) == 0
    from safetensors.numpy import load_file

    original, back = load_file(src / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert {f"bert.{name}" for name in original} == set(back)
    assert all(np.array_equal(value, back[f"bert.{name}"]) for name, value in original.items())


@pytest.mark.parametrize("cls", ["BertForSequenceClassification", "BertForQuestionAnswering"])
def test_a_transformers_fine_tune_keeps_its_head_through_convert(checkpoints, input_rows, tmp_path, cls):
    """transformers' own fine-tuned classes: their head (classifier.*, qa_outputs.*) was skipped as not BERT's, so
    `convert --to hf` wrote a BertModel and `--to google` the encoder alone (exit 0, a note). The head now travels,
    with config.json's labels and task: to hf again (a classifier), and through Google's names back to hf (SQuAD's
    head, which needs no labels; a Google classifier names none, so its --to hf is refused in one line unless
    --labels names them)."""
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "max_position_embeddings", "type_vocab_size", "initializer_range")}, finetuning_task="sentiment",
        **({"id2label": {0: "negative", 1: "neutral", 2: "positive"}} if cls.endswith("Classification") else {}))
    torch.manual_seed(31)
    model = getattr(transformers, cls)(config).eval()
    model.save_pretrained(tmp_path / "saved")
    shutil.copy(shared_path() / "fixtures" / "golden" / "vocab.txt", tmp_path / "saved" / "vocab.txt")
    tensor = {k: torch.tensor([r[k] for r in input_rows]) for k in ("input_ids", "input_mask", "segment_ids")}

    def logits(model):
        with torch.no_grad():
            out = model(input_ids=tensor["input_ids"], attention_mask=tensor["input_mask"],
                        token_type_ids=tensor["segment_ids"])
        return np.stack([out.logits]) if cls.endswith("Classification") else np.stack([out.start_logits,
                                                                                       out.end_logits])

    assert main(["checkpoint", "convert", str(tmp_path / "saved"), str(tmp_path / "google"), "--to", "google",
                 "--quiet"]) == 0
    if cls.endswith("Classification"):
        assert main(["checkpoint", "convert", str(tmp_path / "saved"), str(tmp_path / "hf"), "--to", "hf",
                     "--quiet"]) == 0
        assert json.loads((tmp_path / "hf" / "config.json").read_text())["id2label"] == {
            "0": "negative", "1": "neutral", "2": "positive"}
        err = _convert_fails(tmp_path / "google", tmp_path / "hf-from-google")
        assert err == (f"trainer checkpoint: error: {tmp_path / 'google' / 'bert_model.ckpt'}: a fine-tuned classifier "
                       "head of 3 outputs, and the checkpoint names no labels: Hugging Face's config names every "
                       "label (id2label); name them with --labels, in id order")
        for labels, said in (("negative,positive", "--labels negative,positive: 3 different non-empty labels "),
                             ("a,a,b", "--labels a,a,b: 3 different non-empty labels ")):
            assert _convert_fails(tmp_path / "google", tmp_path / "hf-from-google", "--labels", labels, code=2
                                  ).startswith(f"trainer checkpoint: error: {said}expected, one for each output")
        # named on the command line, the labels make Google's classifier a Hugging Face one again
        assert main(["checkpoint", "convert", str(tmp_path / "google"), str(tmp_path / "hf-from-google"), "--to",
                     "hf", "--labels", "negative, neutral,positive", "--quiet"]) == 0
        assert json.loads((tmp_path / "hf-from-google" / "config.json").read_text())["id2label"] == {
            "0": "negative", "1": "neutral", "2": "positive"}
        summary = checkpoint_convert(str(tmp_path / "google"), str(tmp_path / "hf-named"), "hf",
                                     labels=("negative", "neutral", "positive"))
        named = "classifier head, 3 outputs (labels negative, neutral, positive)"
        assert named in summary["task_head"] and named in summary["notes"], summary  # was "(labels not known)"
        back = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path / "hf-from-google"))
        np.testing.assert_allclose(logits(back.eval()), logits(model), rtol=0, atol=GOOGLE_GELU_TOLERANCE)
        tolerance = TOLERANCE
    else:  # Google's modeling.py reads "gelu" as its tanh GELU: the model through Google's form moves ~2e-5
        assert _convert_fails(tmp_path / "google", tmp_path / "hf", "--labels", "start,end", code=2) == (
            f"trainer checkpoint: error: --labels: {tmp_path / 'google' / 'bert_model.ckpt'} holds a squad head; "
            "labels name a fine-tuned classifier's outputs")
        assert main(["checkpoint", "convert", str(tmp_path / "google"), str(tmp_path / "hf"), "--to", "hf",
                     "--quiet"]) == 0
        tolerance = GOOGLE_GELU_TOLERANCE
    again, info = getattr(transformers, cls).from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    np.testing.assert_allclose(logits(again.eval()), logits(model), rtol=0, atol=tolerance)


@pytest.mark.parametrize("cls", ["BertForSequenceClassification", "BertForQuestionAnswering"])
def test_run_of_a_fine_tune_gives_its_heads_logits_as_transformers_does(checkpoints, input_rows, tmp_path, cls):
    """`checkpoint run` of a fine-tuned model read its task head and left it out: sequence_output and pooled_output
    alone, nothing said, so a classifier's predictions could not be had from it. Now its head runs too, with
    transformers' names: a classifier's `logits`, SQuAD's `start_logits` and `end_logits`, within TOLERANCE of
    transformers' own (its model, saved by save_pretrained and read here)."""
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "max_position_embeddings", "type_vocab_size")},
        **({"id2label": {0: "a", 1: "b", 2: "c"}} if cls.endswith("Classification") else {}))
    torch.manual_seed(5)
    model = getattr(transformers, cls)(config).eval()
    model.save_pretrained(tmp_path / "saved")
    tensor = {k: torch.tensor([r[k] for r in input_rows]) for k in ("input_ids", "input_mask", "segment_ids")}
    with torch.no_grad():
        out = model(input_ids=tensor["input_ids"], attention_mask=tensor["input_mask"],
                    token_type_ids=tensor["segment_ids"])
    got = run_outputs(tmp_path / "saved", checkpoints / "inputs.jsonl", tmp_path / "o.npz")
    names = ["logits"] if cls.endswith("Classification") else ["start_logits", "end_logits"]
    assert set(names) < set(got), sorted(got)
    for name in names:
        np.testing.assert_allclose(got[name], getattr(out, name).numpy(), rtol=0, atol=TOLERANCE)


def test_inspect_of_a_fine_tune_lists_its_task_head_as_convert_counts_it(checkpoints, tmp_path, capsys):
    """`checkpoint inspect` of a fine-tuned classifier listed the model's variables alone: "variables: 39" and no
    output_weights / output_bias, where `convert`'s summary of the same checkpoint says 41, while its "parameters"
    counted the head's; its task head was only in the notes. Now every variable is listed, the head last, and
    `task_head` says what it is, as convert's summary does."""
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size")}, id2label={0: "no", 1: "yes"})
    torch.manual_seed(3)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "saved")
    assert main(["checkpoint", "inspect", str(tmp_path / "saved"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    summary = checkpoint_convert(tmp_path / "saved", tmp_path / "ours", "bertprep")
    assert report["variables"] == summary["variables"] == 41 == len(report["variable_shapes"])
    assert report["variable_shapes"][-2:] == [{"name": "output_weights", "shape": [2, 128]},
                                              {"name": "output_bias", "shape": [2]}]
    assert report["parameters"] == sum(np.prod(v["shape"]) for v in report["variable_shapes"])
    assert report["task_head"] == summary["task_head"] == "GLUE classifier head, 2 outputs (labels no, yes)"
    assert main(["checkpoint", "inspect", str(tmp_path / "ours")]) == 0  # the text form, of our own kind
    out = capsys.readouterr().out.splitlines()
    assert "variables: 41" in out and "task_head: GLUE classifier head, 2 outputs (labels no, yes)" in out
    assert out[-2:] == ["  output_weights (2, 128)", "  output_bias (2,)"]


@pytest.mark.parametrize("cls", ["BertForTokenClassification", "BertForMultipleChoice"])
def test_a_token_or_multiple_choice_head_is_not_taken_for_a_sentence_classifier(checkpoints, tmp_path, capsys, cls):
    """transformers' token classifier and multiple-choice model keep their head as `classifier.*` too: it was
    read as BertForSequenceClassification's, so `convert --to hf` of a BertForTokenClassification (no pooler)
    wrote a BertForSequenceClassification of its labels, whose pooler transformers then drew at random, exit 0,
    and a BertForMultipleChoice's one score was a one-output classifier (--to google: run_classifier.py's
    variables). config.json's architectures says which head it is: it is now left out, with a note, and the
    encoder converted."""
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size")}, num_labels=5)
    getattr(transformers, cls)(config).save_pretrained(tmp_path / "saved")
    capsys.readouterr()  # transformers' progress bar
    vocab = str(shared_path() / "fixtures" / "golden" / "vocab.txt")
    assert main(["checkpoint", "convert", str(tmp_path / "saved"), str(tmp_path / "hf"), "--to", "hf", "--vocab",
                 vocab, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "task_head" not in summary
    assert (f"classifier.bias and classifier.weight: the head of a {cls} (config.json's architectures), "
            f"{task_heads.OTHER_HF_CLASSIFIERS[cls]}, not a sentence classifier's: not read as a task head, and not "
            "converted (the encoder is)") in summary["notes"]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertModel"] and "id2label" not in config
    assert main(["checkpoint", "convert", str(tmp_path / "saved"), str(tmp_path / "google"), "--to", "google",
                 "--quiet"]) == 0
    assert read_checkpoint(str(tmp_path / "google")).task_head is None  # no run_classifier.py output_weights


def test_a_multi_label_classifier_stays_multi_label_through_convert(checkpoints, tmp_path, capsys):
    """A transformers classifier of problem_type multi_label_classification (a sigmoid for each label) was exported
    as single_label_classification, exit 0, so pipeline("text-classification") scored it with a softmax: every
    score another (0.504, 0.477, 0.460 became 0.366, 0.328, 0.306). Its problem_type now goes into --to hf's
    config.json, and through our state.json's settings to a later --to hf; --to google, whose variables cannot
    hold it, says so in a note."""
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size")}, problem_type="multi_label_classification",
        id2label={0: "neg", 1: "neu", 2: "pos"})
    torch.manual_seed(5)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "saved")
    shutil.copy(shared_path() / "fixtures" / "golden" / "vocab.txt", tmp_path / "saved" / "vocab.txt")
    summary = checkpoint_convert(str(tmp_path / "saved"), str(tmp_path / "ours"), "bertprep")
    assert summary["task_head"] == "GLUE classifier head, 3 outputs (multi-label: labels neg, neu, pos)"
    for src, out in (("saved", "hf"), ("ours", "hf-from-ours")):
        assert main(["checkpoint", "convert", str(tmp_path / src), str(tmp_path / out), "--to", "hf", "--quiet"]) == 0
        assert json.loads((tmp_path / out / "config.json").read_text())["problem_type"] == "multi_label_classification"

    def scores(directory):
        classify = transformers.pipeline("text-classification", model=str(directory), top_k=None)
        (rows,) = classify(["The cat sat on the mat."])  # one text: its scores of every label
        return {row["label"]: row["score"] for row in rows}

    expected = scores(tmp_path / "saved")
    capsys.readouterr()
    for out in ("hf", "hf-from-ours"):
        assert scores(tmp_path / out) == pytest.approx(expected, abs=1e-6)
    # Google's variables hold no problem_type: the export says what it loses (it said nothing)
    summary = checkpoint_convert(str(tmp_path / "saved"), str(tmp_path / "google"), "google")
    assert ("the classifier head is multi-label (a sigmoid for each label): Google's run_classifier.py scores it "
            "with a softmax, and its variables record neither that nor the labels") in summary["notes"]


def test_labels_for_a_google_export_which_holds_none_are_refused_before_reading(checkpoints, tmp_path, capsys):
    """`convert CLS out --to google --labels neg,pos` of a classifier wrote Google's variables, which name no
    labels, exit 0, its summary's task_head saying `(labels neg, pos)`: the flag had no effect."""
    hf_config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    config = transformers.BertConfig(**{key: hf_config[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
        "max_position_embeddings", "type_vocab_size")}, num_labels=2)
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "cls")
    capsys.readouterr()  # transformers' progress bar
    out = tmp_path / "google"
    assert main(["checkpoint", "convert", str(tmp_path / "cls"), str(out), "--to", "google", "--labels", "neg,pos",
                 "--vocab", str(shared_path() / "fixtures" / "golden" / "vocab.txt")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "trainer checkpoint: error: --labels neg,pos: --to google writes no labels (run_classifier.py's variables and "
        "bert_config.json name none): give them with --to hf or --to bertprep"]
    assert not out.exists()


def _convert_fails(src, out, *extra, code=1):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["checkpoint", "convert", str(src), str(out), "--to", "hf", *extra]) == code
    assert not os.path.exists(out)
    (line,) = err.getvalue().strip().splitlines()
    return line


def _mrpc(shared_dir, directory, splits=("train", "eval")):
    golden = shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_train_seq128.tfrecord"
    for split in splits:
        formats.write_records(directory / f"{split}.tf_record", list(formats.read_records(golden))[:16], "tfrecord",
                              kind=GLUE)
    return directory


@pytest.mark.heavy  # a fine-tuning run: 17 s alone on 2 cores, over 20 s beside other work
def test_finetune_from_a_transformers_bertmodel_and_run_its_encoder(bert_model, checkpoints, shared_dir, tmp_path,
                                                                   capfd):
    """Every encoder variable loaded; the fine-tuned checkpoint (a classifier, no pretraining heads) is
    heads-less too: `checkpoint run` gives its encoder's outputs, and its classifier's logits (MRPC's 2)."""
    code = main(["finetune", "--task", "mrpc", "--data", str(_mrpc(shared_dir, tmp_path / "mrpc")), "--format",
                 "tfrecord", "--init-checkpoint", str(bert_model["saved"]), "--steps", "2", "--batch-size", "8",
                 "--output-dir", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "tuned"), "--json"])
    captured = capfd.readouterr()
    assert code == 0, captured.err[-2000:]
    # 5 embedding variables, 16 per layer, the pooler's 2: the whole encoder.
    assert f"39 encoder variables from {bert_model['saved'] / 'model.safetensors'}" in captured.err
    assert json.loads(captured.out)["eval_examples"] == 16
    got = run_outputs(tmp_path / "tuned", checkpoints / "inputs.jsonl", tmp_path / "tuned.npz")
    assert set(got) == HEADLESS_OUTPUTS | {"logits"} and got["pooled_output"].shape == (3, 128)
    assert got["logits"].shape == (3, 2) and np.isfinite(got["sequence_output"]).all()


def test_run_of_a_bertmodel_without_pooler_gives_its_sequence_output_and_says_so(bert_model, checkpoints, tmp_path,
                                                                               capsys):
    """A BertModel made with add_pooling_layer=False (as sentence encoders are exported): its encoder
    runs, transformers' last_hidden_state; no pooled_output, said once in the summary."""
    for as_json in (True, False):
        out = tmp_path / f"{as_json}.npz"
        assert main(["checkpoint", "run", str(bert_model["no_pooler"]), "--inputs", str(checkpoints / "inputs.jsonl"),
                     "--out", str(out), *(["--json"] if as_json else [])]) == 0
        printed = capsys.readouterr().out
        said = "none: the checkpoint has no pooler (bert/pooler/dense)"
        assert (json.loads(printed)["pooled_output"] == said) if as_json else printed.count(said) == 1, printed
        with np.load(out) as npz:
            assert_headless_outputs({k: npz[k] for k in npz.files}, bert_model["no_pooler_outputs"],
                                    names={"sequence_output"})


def test_bertmodel_without_pooler_converts_to_every_kind_as_it_is(bert_model, checkpoints, tmp_path):
    """--to hf is a BertModel without pooler that transformers loads as one (nothing missing, nothing
    unexpected, its outputs); --to bertprep and --to google run to the same sequence output; none gains a
    pooler, each convert says there is none."""
    from trainer.checkpoint import convert

    for to in ("hf", "bertprep", "google"):
        summary = convert(str(bert_model["no_pooler"]), str(tmp_path / to), to, vocab=GOLDEN_VOCAB[1])
        assert "no pooler (bert/pooler/dense): a BertModel saved without one" in summary["notes"], summary
        tolerance = GOOGLE_GELU_TOLERANCE if to == "google" else TOLERANCE
        got = run_outputs(tmp_path / to, checkpoints / "inputs.jsonl", tmp_path / f"{to}.npz")
        assert_headless_outputs(got, bert_model["no_pooler_outputs"], tolerance, names={"sequence_output"})
    assert not any("pooler" in name for name in _safetensors_names(tmp_path / "hf"))
    loaded, info = transformers.BertModel.from_pretrained(str(tmp_path / "hf"), add_pooling_layer=False,
                                                          output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    rows = [json.loads(line) for line in (checkpoints / "inputs.jsonl").read_text().splitlines()]
    assert_headless_outputs(_transformers_outputs(loaded.eval(), rows), bert_model["no_pooler_outputs"],
                            names={"sequence_output"})


@pytest.fixture(scope="module")
def no_eval_finetune(bert_model, shared_dir, tmp_path_factory):
    """One fine-tuning run for two tests (each TensorFlow run compiles its steps: 7 s of CPU): from the
    BertModel without pooler at lr 1e-12 (its fresh pooler, its encoder still transformers'), on MRPC records
    without eval records and --no-eval (a run with nothing to score). The first test that asks runs it,
    inside its own capfd or capsys (the trainer's lines the tests read are Python's, which either captures):
    `run(capture)` is {"code", "out", "err"} of the run."""
    root = tmp_path_factory.mktemp("no_eval_finetune")
    argv = ["finetune", "--task", "mrpc", "--data", str(_mrpc(shared_dir, root / "mrpc", splits=("train",))),
            "--format", "tfrecord", "--init-checkpoint", str(bert_model["no_pooler"]), "--steps", "1",
            "--batch-size", "8", "--lr", "1e-12", "--output-dir", str(root / "out"), "--checkpoint-dir",
            str(root / "tuned"), "--no-eval", "--json"]
    done = {}

    def run(capture):
        if not done:
            capture.readouterr()  # what the test printed before: not the run's
            code = main(argv)
            captured = capture.readouterr()
            done.update(code=code, out=captured.out, err=captured.err)
        return done

    return types.SimpleNamespace(run=run, tuned=root / "tuned")


@pytest.mark.heavy  # a fine-tuning run: 17 s alone on 2 cores, over 20 s beside other work
def test_finetune_from_a_bertmodel_without_pooler_starts_the_pooler_fresh_and_says_so(bert_model, checkpoints,
                                                                                      no_eval_finetune, tmp_path,
                                                                                      capfd):
    """As transformers' BertForSequenceClassification.from_pretrained does (the pooler among its missing
    keys, initialized): the encoder's 37 variables loaded, the pooler fresh, one line saying so. At lr 1e-12
    the tuned encoder is still transformers' (its sequence output), with a pooler now."""
    _model, info = transformers.BertForSequenceClassification.from_pretrained(str(bert_model["no_pooler"]),
                                                                              output_loading_info=True)
    assert {key for key in info["missing_keys"] if "pooler" in key} == {"bert.pooler.dense.weight",
                                                                         "bert.pooler.dense.bias"}
    captured = no_eval_finetune.run(capfd)
    assert captured["code"] == 0, captured["err"][-2000:]
    weights = bert_model["no_pooler"] / "model.safetensors"
    assert f"37 encoder variables from {weights}" in captured["err"]
    said = [line for line in captured["err"].splitlines() if "no pooler" in line]
    assert said == [(f"trainer: {weights} has no pooler (bert/pooler/dense): the pooler starts from its random "
                     "initialization, as transformers starts a BertModel saved without one")], said
    got = run_outputs(no_eval_finetune.tuned, checkpoints / "inputs.jsonl", tmp_path / "tuned.npz")
    assert got["pooled_output"].shape == (3, 128)
    np.testing.assert_allclose(got["sequence_output"], bert_model["no_pooler_outputs"]["sequence_output"], rtol=0,
                               atol=TOLERANCE)


@pytest.mark.heavy  # a pretraining step: 14 s alone on 2 cores, over 20 s beside other work
def test_pretraining_from_a_bertmodel_without_pooler_starts_heads_and_pooler_fresh(bert_model, golden_dir, tmp_path,
                                                                                    capfd):
    """`python -m trainer --init-checkpoint`: its 37 encoder variables loaded, the heads and the pooler
    (next-sentence prediction needs it) from random, said on the line that says what was loaded."""
    formats.write_records(tmp_path / "records" / "tfrecord" / "training" / "part_0.tfrecord",
                          list(formats.read_records(golden_dir / "G1.tfrecord"))[:8], "tfrecord")
    code = main(["--format", "tfrecord", "--data", str(tmp_path / "records"), "--init-checkpoint",
                 str(bert_model["no_pooler"]), "--steps", "1", "--batch-size", "8", "--log-every", "1"])
    err = capfd.readouterr().err
    assert code == 0, err[-2000:]
    weights = bert_model["no_pooler"] / "model.safetensors"
    assert f"trainer: initialized 37 variables from hf checkpoint {weights} (no pretraining heads or pooler in it: " \
           "they start from random); no pooler (bert/pooler/dense): a BertModel saved without one" in err.splitlines()


# ---------------------------------------------------------------- class 1, 2, 4, 6: checkpoint run --inputs


def _edited(rows, line, field, edit):
    rows = copy.deepcopy(rows)
    edit(rows[line - 1], field)
    return rows


def _set(index, value):
    def edit(row, field):
        row[field][index] = value
    return edit


def _drop_last(row, field):
    row[field] = row[field][:-1]


def _remove(row, field):
    del row[field]


# (name, line, field, edit, what the message says besides the file, line and field)
BAD_VALUES = [
    ("fraction", 2, "input_ids", _set(3, 101.5), "input_ids[3] is 101.5, expected an integer"),
    ("negative", 2, "input_ids", _set(3, -1), "input_ids[3] is -1, expected an integer from 0 to 2147483647"),
    ("beyond int32", 3, "input_ids", _set(4, 2 ** 40), "input_ids[4] is 1099511627776"),
    ("beyond int64", 3, "input_ids", _set(4, 2 ** 70), "input_ids[4] is 1180591620717411303424"),
    ("a string", 1, "segment_ids", _set(0, "0"), 'segment_ids[0] is "0", expected an integer'),
    ("a bool", 1, "input_mask", _set(0, True), "input_mask[0] is true, expected an integer"),
    ("vocab", 3, "input_ids", _set(2, 30522), "input_ids[2] is 30522, expected less than the checkpoint's "
                                               "vocab_size 30522"),
    ("segment 2", 3, "segment_ids", _set(5, 2), "segment_ids[5] is 2, expected less than the checkpoint's "
                                                "type_vocab_size 2"),
    ("mask 2", 1, "input_mask", _set(5, 2), "input_mask[5] is 2, expected an integer from 0 to 1"),
    ("position past the sequence", 1, "masked_lm_positions", _set(0, 128),
     "masked_lm_positions[0] is 128, expected less than the sequence length 128"),
    ("lengths disagree", 2, "input_mask", _drop_last, "input_mask has 127 values, expected 128 as line 1's input_ids"),
    ("rows disagree", 3, "input_ids", _drop_last, "input_ids has 127 values, expected 128 as line 1's input_ids"),
    ("one line without positions", 2, "masked_lm_positions", _remove,
     "no masked_lm_positions, which line 1 has (give them on every input or on none)"),
    ("no input_ids", 3, "input_ids", _remove, "no input_ids"),
]


@pytest.mark.parametrize("name,line,field,edit,said", BAD_VALUES, ids=[case[0] for case in BAD_VALUES])
def test_run_refuses_inputs_naming_file_line_field_and_value(checkpoints, input_rows, tmp_path, capsys,
                                                             name, line, field, edit, said):
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text("".join(json.dumps(row) + "\n" for row in _edited(input_rows, line, field, edit)))
    err = _run_fails(capsys, checkpoints / "hf_tiny", inputs, tmp_path / "o.npz")
    assert err == f"trainer checkpoint: error: {inputs}: line {line}: {said}" or (
        err.startswith(f"trainer checkpoint: error: {inputs}: line {line}: ") and said in err), err


def test_run_refuses_an_unknown_field(checkpoints, input_rows, tmp_path, capsys):
    """A misspelt masked_lm_positions on every line was ignored: exit 0, the outputs without mlm_logits and
    nsp_logits. The fixture's other fields (masked_lm_ids, next_sentence_labels: a pretraining record's) are not
    refused."""
    inputs = tmp_path / "inputs.jsonl"
    rows = [{("masked_lm_position" if key == "masked_lm_positions" else key): value for key, value in row.items()}
            for row in input_rows]
    inputs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    err = _run_fails(capsys, checkpoints / "hf_tiny", inputs, tmp_path / "o.npz")
    assert err == (f'trainer checkpoint: error: {inputs}: line 1: unknown field "masked_lm_position" (expected '
                   "input_ids, input_mask, segment_ids, masked_lm_positions; a bertprep record's other fields, such "
                   "as masked_lm_ids, are ignored)")


# (file name, content, what the message says after the file). Without the .jsonl name, a file that
# starts with "[" may be a record file (its first byte is a length's): only "{" and white space are sniffed.
NOT_RECORDS = [("inputs.jsonl", "\n\n   \n", "no inputs"), ("inputs", "\n\n   \n", "no inputs"),
               ("inputs.jsonl", "[1, 2, 3]\n", "line 1: expected a JSON object of input_ids, input_mask, segment_ids, "
                                               "got list [1, 2, 3]"),
               ("inputs", '{"input_ids": [1]}\n7\n', "line 2: expected a JSON object")]


@pytest.mark.parametrize("name,content,said", NOT_RECORDS)
def test_run_reads_json_lines_as_json_lines(checkpoints, tmp_path, capsys, name, content, said):
    """Not as a record file ("truncated data (0 of 746809378126704987 bytes)")."""
    inputs = tmp_path / name
    inputs.write_text(content)
    err = _run_fails(capsys, checkpoints / "hf_tiny", inputs, tmp_path / "o.npz")
    assert err.startswith(f"trainer checkpoint: error: {inputs}: {said}"), err


@pytest.mark.parametrize("name", ["records", "inputs.jsonl"])
def test_run_of_a_directory_as_inputs_is_a_usage_error_naming_the_flag(checkpoints, tmp_path, capsys, name):
    """A records directory (`create`'s output, a fine-tuning directory) given to --inputs was OSError's words, exit 1:
    `records: Is a directory`."""
    inputs = tmp_path / name
    inputs.mkdir()
    shutil.copy(checkpoints / "inputs.jsonl", inputs / "inputs.jsonl")
    err = _run_fails(capsys, checkpoints / "hf_tiny", inputs, tmp_path / "o.npz", code=2)
    assert err == (f"trainer checkpoint: error: --inputs {inputs}: is a directory; name one file: JSON lines "
                   "(input_ids, input_mask, segment_ids) or a records file")
    # A file that is not there named the file in OSError's words, not the flag: `nope: No such file or directory`.
    err = _run_fails(capsys, checkpoints / "hf_tiny", tmp_path / "nope.jsonl", tmp_path / "o.npz", code=2)
    assert err == f"trainer checkpoint: error: --inputs {tmp_path / 'nope.jsonl'}: no such file"
    # A records directory's manifest (pretty-printed JSON) was read as JSON lines: "line 1: not JSON: Expecting ...".
    (inputs / "manifest.json").write_text(json.dumps({"stage": "create-glue", "files": {}}, indent=1))
    err = _run_fails(capsys, checkpoints / "hf_tiny", inputs / "manifest.json", tmp_path / "o.npz", code=2)
    assert err == (f"trainer checkpoint: error: --inputs {inputs / 'manifest.json'}: a stage's manifest, not inputs; "
                   "name one file: JSON lines (input_ids, input_mask, segment_ids) or a records file")


@pytest.mark.parametrize("value", ["0", "-4"])
def test_run_batch_size_must_be_positive(checkpoints, tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        main(["checkpoint", "run", str(checkpoints / "hf_tiny"), "--inputs", str(checkpoints / "inputs.jsonl"),
              "--out", str(tmp_path / "o.npz"), "--batch-size", value])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err == [
        f"trainer checkpoint run: error: argument --batch-size: expected a positive integer, got {value}"]
    assert not os.path.exists(tmp_path / "o.npz")


def _run_fails(capsys, src, inputs, out, code=1):
    got = main(["checkpoint", "run", str(src), "--inputs", str(inputs), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert got == code and len(err) == 1, err
    assert not os.path.exists(out) and not os.path.exists(os.path.join(os.path.dirname(out), ".partial"))
    return err[0]


# ---------------------------------------------------------------- class 4, 6: config files


def _hf_copy(checkpoints, directory, **changes):
    directory.mkdir()
    os.symlink(checkpoints / "hf_tiny" / "model.safetensors", directory / "model.safetensors")
    config = json.loads((checkpoints / "hf_tiny" / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(dict(config, **changes)))
    return directory


def _google_copy(checkpoints, directory, config):
    directory.mkdir()
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"):
        os.symlink(checkpoints / "google_tiny" / name, directory / name)
    (directory / "bert_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return directory


BAD_CONFIGS = [
    ("num_attention_heads", 0, "num_attention_heads is 0, expected a positive integer"),
    ("num_attention_heads", 3, "hidden_size 128 is not a multiple of num_attention_heads 3"),
    ("num_hidden_layers", 0, "num_hidden_layers is 0, expected a positive integer"),
    ("num_hidden_layers", -1, "num_hidden_layers is -1, expected a positive integer"),
    ("hidden_size", 128.0, "hidden_size is 128.0, expected a positive integer"),
    ("hidden_dropout_prob", 1.5, "hidden_dropout_prob is 1.5, expected a probability in [0, 1)"),
    ("initializer_range", float("inf"), "initializer_range is inf, expected a positive number"),  # ±inf weights
]


@pytest.mark.parametrize("key,value,said", BAD_CONFIGS, ids=[f"{k}={v}" for k, v, _ in BAD_CONFIGS])
def test_a_config_that_is_not_a_berts_is_one_line_exit_1_in_either_kind(checkpoints, tmp_path, capsys,
                                                                        key, value, said):
    """The same bad value in Hugging Face's config.json and Google's bert_config.json: exit 1 both,
    the file and the field named (not a variable blamed, not a traceback)."""
    hf = _hf_copy(checkpoints, tmp_path / "hf", **{key: value})
    google_config = json.loads((checkpoints / "google_tiny" / "bert_config.json").read_text())
    google = _google_copy(checkpoints, tmp_path / "google", dict(google_config, **{key: value}))
    for src, config in ((hf, hf / "config.json"), (google, google / "bert_config.json")):
        assert _inspect_fails(capsys, src) == f"trainer checkpoint: error: {config}: {said}"


def test_a_config_that_is_a_json_list_or_not_json(checkpoints, tmp_path, capsys):
    hf = _hf_copy(checkpoints, tmp_path / "hf")
    (hf / "config.json").write_text("[1, 2]")
    assert _inspect_fails(capsys, hf) == (f"trainer checkpoint: error: {hf / 'config.json'}: expected a JSON object "
                                          "of Hugging Face config keys, got list")
    google = _google_copy(checkpoints, tmp_path / "google", "{not json")
    assert _inspect_fails(capsys, google).startswith(
        f"trainer checkpoint: error: {google / 'bert_config.json'}: cannot read a BERT config: ")


def test_googles_multilingual_config_keys_are_read_past(checkpoints, tmp_path, capsys):
    """multi_cased_L-12_H-768_A-12's bert_config.json describes its pooler and script direction too."""
    config = json.loads((checkpoints / "google_tiny" / "bert_config.json").read_text())
    google = _google_copy(checkpoints, tmp_path / "google", dict(
        config, directionality="bidi", pooler_fc_size=128, pooler_num_attention_heads=2, pooler_num_fc_layers=3,
        pooler_size_per_head=64, pooler_type="first_token_transform"))
    assert main(["checkpoint", "inspect", str(google), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == dict(config, hidden_act="gelu_tanh")


def _inspect_fails(capsys, src, code=1):
    got = main(["checkpoint", "inspect", str(src)])
    err = capsys.readouterr().err.strip().splitlines()
    assert got == code and len(err) == 1, err
    return err[0]


# ---------------------------------------------------------------- class 2: ambiguity


def test_a_directory_with_a_google_and_a_hugging_face_checkpoint_is_a_usage_error(checkpoints, tmp_path, capsys):
    both = _google_copy(checkpoints, tmp_path / "both", (checkpoints / "google_tiny" / "bert_config.json").read_text())
    for name in ("config.json", "model.safetensors"):
        os.symlink(checkpoints / "hf_tiny" / name, both / name)
    err = _inspect_fails(capsys, both, code=2)
    assert err == (f"trainer checkpoint: error: {both}: holds both a Google checkpoint (bert_model.ckpt) and a Hugging "
                   "Face checkpoint (config.json with model.safetensors or pytorch_model.bin): which one is meant? "
                   f"Move one of them out, or name the Google one by its prefix {both / 'bert_model.ckpt'}")
    assert main(["checkpoint", "inspect", str(both / "bert_model.ckpt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "google"


def test_finetune_without_eval_records_is_an_error_unless_no_eval(checkpoints, shared_dir, no_eval_finetune, tmp_path,
                                                                  capsys):
    data = _mrpc(shared_dir, tmp_path / "mrpc", splits=("train",))
    common = ["finetune", "--task", "mrpc", "--data", str(data), "--format", "tfrecord", "--init-checkpoint",
              str(checkpoints / "hf_tiny"), "--steps", "1", "--batch-size", "8", "--output-dir", str(tmp_path / "out")]
    assert main(common) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: {data}: no tfrecord eval records (eval.tf_record) to score: add them, or give --no-eval "
        "to train without scores"]
    # --no-eval: the module's run of 1 step on records without eval records (from the BertModel without pooler).
    captured = no_eval_finetune.run(capsys)
    assert captured["code"] == 0, captured["err"][-2000:]
    summary = json.loads(captured["out"])
    assert summary["steps"] == 1 and not any(key.startswith("eval_") for key in summary)


# ---------------------------------------------------------------- class 5: left behind


def _dead_pid():
    """The pid of a process that was SIGKILLed (and reaped)."""
    process = subprocess.Popen(["sleep", "60"])
    process.send_signal(signal.SIGKILL)
    process.wait()
    return process.pid


def _planted_temp(staging, final, pid, directory):
    """A temporary of `final` in `staging` as a writer with `pid` names it (bertprep.atomic.temp_path)."""
    name = os.path.basename(temp_path(staging, final)).replace(f".{os.getpid()}-", f".{pid}-")
    path = staging / name
    if directory:
        path.mkdir(parents=True)
        (path / "state.npz").write_bytes(b"half")
    else:
        staging.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
    return path


def test_the_next_writer_removes_what_a_killed_writer_left(checkpoints, tmp_path):
    """convert's output directory and run's .npz: a killed writer's temporary of that output goes, the
    .partial/ with it; a live writer's stays."""
    staging = tmp_path / ".partial"
    stale_dir = _planted_temp(staging, tmp_path / "out", _dead_pid(), directory=True)
    stale_file = _planted_temp(staging, tmp_path / "o.npz", _dead_pid(), directory=False)
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), str(tmp_path / "out"), "--to", "bertprep",
                 "--quiet"]) == 0
    assert not stale_dir.exists() and stale_file.exists()  # another output's: its own writer clears it
    assert main(["checkpoint", "run", str(tmp_path / "out"), "--inputs", str(checkpoints / "inputs.jsonl"), "--out",
                 str(tmp_path / "o.npz"), "--quiet"]) == 0
    assert not staging.exists()

    # A writer on another host sharing this file system: its pid means nothing here, its flock does.
    live = _planted_temp(staging, tmp_path / "again", _dead_pid(), directory=False)
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), str(tmp_path / "again"), "--to",
                     "bertprep", "--quiet"]) == 0
    assert live.exists()


# `checkpoint convert` SIGKILLed once its writer has written the output's files into the staging directory.
KILLED_CONVERT = """
import os, signal, sys
from trainer.checkpoint import hf
write = hf.write
def write_then_die(checkpoint, directory):
    write(checkpoint, directory)
    os.kill(os.getpid(), signal.SIGKILL)
hf.write = write_then_die
from trainer.cli import main
main(["checkpoint", "convert", *sys.argv[1:], "--to", "hf", "--uncased"])
"""


def test_a_sigkilled_convert_leaves_nothing_after_the_rerun(checkpoints, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    argv = [str(checkpoints / "hf_tiny"), str(tmp_path / "out"), *GOLDEN_VOCAB]
    killed = subprocess.run([sys.executable, "-c", KILLED_CONVERT, *argv], env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "out").exists()
    (left,) = os.listdir(tmp_path / ".partial")
    assert left.startswith("out.") and left.endswith(".partial")  # what the killed writer left
    rerun = subprocess.run([sys.executable, "-m", "trainer", "checkpoint", "convert", *argv, "--to", "hf", "--quiet"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["out"]


# ---------------------------------------------------------------- class 3: download pretrained


@pytest.mark.parametrize("config,said", [(b"{not json", "cannot read a BERT config: "),
                                         (b"[1, 2]", "expected a JSON object of bert_config.json keys, got list"),
                                         (b'{"num_hidden_layers": 0}', "num_hidden_layers is 0, expected a positive "
                                                                       "integer")])
def test_a_release_whose_config_is_not_a_berts_is_not_kept(release_files, tmp_path, config, said):  # noqa: F811
    """Its files match the (republished) checksums: the config is read before the release is complete."""
    files = dict(release_files, **{"bert_config.json": config})
    with StandInServer() as server:
        server.add_file(ZIP_PATH, zip_of(files))
        result = run_cli("download", "pretrained", "--model", RELEASE, "--workdir", tmp_path / "w", "--base-url",
                         server.url + "/bert_models", "--checksums", sha256sums(tmp_path, files))
    line = one_line_error(result)
    assert line.startswith(f"bertprep download: error: {RELEASE}/bert_config.json: {said}") and line.endswith(
        "; nothing was kept and the download was deleted"), line
    root = tmp_path / "w" / "download" / "pretrained"
    assert looks_complete(root) == ["manifest.json"] and not (root / RELEASE).exists()
    assert json.loads((root / "manifest.json").read_text())["files"] == {}


# ---------------------------------------------------------------- issue 57 class 8: what to fix, and when


@pytest.mark.parametrize("lost", ["state.json", "state.npz"])
def test_a_checkpoint_that_lost_a_file_names_the_file(checkpoints, tmp_path, capsys, lost):
    """A ckpt-<step>/ is renamed into place whole: one that lost a file was damaged since. Read as the run's
    directory, as itself, or resumed, it is named with the file, not "expected a ckpt-<step>/" while that
    directory is there, nor passed over for the one before."""
    from bertprep.errors import DataError
    from trainer import run_state

    run = tmp_path / "run"
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), str(run / "ckpt-00000002"), "--to",
                 "bertprep", "--quiet"]) == 0
    shutil.copytree(run / "ckpt-00000002", run / "ckpt-00000001")
    (run / "ckpt-00000002" / lost).unlink()
    said = (f"{run / 'ckpt-00000002'}: incomplete checkpoint: no {lost} ({run_state.FILES[lost]}): restore it, or "
            "remove that directory (the checkpoint before it, if any, is then the newest)")
    for src in (run, run / "ckpt-00000002"):
        assert _inspect_fails(capsys, src) == f"trainer checkpoint: error: {said}"
    with pytest.raises(DataError) as raised:  # --resume
        run_state.load_latest(str(run))
    assert str(raised.value) == said
    shutil.rmtree(run / "ckpt-00000002")
    assert main(["checkpoint", "inspect", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(run / "ckpt-00000001")


LOST_FILES = [  # kind, the file lost, what is said after "DIR: "
    ("hf", "model.safetensors", "config.json of a Hugging Face checkpoint without its weights (model.safetensors or "
                                "pytorch_model.bin)"),
    ("hf", "config.json", "model.safetensors of a Hugging Face checkpoint without its config.json (the model's size)"),
    ("google", "bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001 of a Google checkpoint without its "
                                        "bert_model.ckpt.index (the list of its variables)"),
    ("bertprep", "state.npz", "state.json of a checkpoint of this trainer without its state.npz (the weights)"),
]


@pytest.mark.parametrize("kind,lost,said", LOST_FILES, ids=[f"{kind}-{lost}" for kind, lost, _ in LOST_FILES])
def test_a_checkpoint_directory_that_lost_a_file_names_it(checkpoints, tmp_path, capsys, kind, lost, said):
    """A Hugging Face directory, a Google one or a `convert --to bertprep` copy (named anything, not ckpt-<step>)
    that lost one of its files, as a copy or download cut short leaves it, was 'not a checkpoint this trainer reads
    (expected a ckpt-<step>/ ..., a Hugging Face directory with config.json and model.safetensors ...)', as if it
    were some other folder, the missing file unnamed; now the file is named, exit 1, nothing written."""
    sources = {"hf": checkpoints / "hf_tiny", "google": checkpoints / "google_tiny"}
    src = tmp_path / kind
    if kind == "bertprep":
        assert main(["checkpoint", "convert", str(sources["hf"]), str(src), "--to", "bertprep", "--quiet"]) == 0
        (src / lost).unlink()
    else:
        src.mkdir()
        for path in sources[kind].iterdir():
            if path.is_file() and path.name != lost:
                os.symlink(path, src / path.name)
    said = f"trainer checkpoint: error: {src}: {said}: copied or downloaded in part? Restore it, or name a whole " \
           "checkpoint"
    assert _inspect_fails(capsys, src) == said
    if kind == "google":  # named by its prefix too
        assert _inspect_fails(capsys, src / "bert_model.ckpt") == said.replace(f"{src}:", f"{src / 'bert_model.ckpt'}:")
    assert _convert_fails(src, tmp_path / "out") == said


def test_a_hugging_face_directory_of_sharded_weights_says_they_are_not_read(checkpoints, tmp_path, capsys):
    """config.json beside weights saved in shards (model.safetensors.index.json, model-00001-of-00002.safetensors:
    save_pretrained's max_shard_size) was 'not a checkpoint this trainer reads'; it is not told to restore a file
    that was never lost either, but what to do."""
    src = tmp_path / "sharded"
    src.mkdir()
    os.symlink(checkpoints / "hf_tiny" / "config.json", src / "config.json")
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    assert _inspect_fails(capsys, src) == (
        f"trainer checkpoint: error: {src}: config.json of a Hugging Face checkpoint whose weights are in "
        "model.safetensors.index.json, which this trainer does not read: save the model with transformers' "
        "save_pretrained as one model.safetensors")


OUTPUTS = [  # flag, what is there already, what is said
    ("--output-dir", "file", "is a file; name a directory"),
    ("--checkpoint-dir", "file", "is a file; name a directory"),
    ("--tensorboard-dir", "file", "is a file; name a directory"),
    ("--checkpoint-dir", "under a file", "{file} is a file: nothing can be made under it"),
    # a link to nothing was "{link} is a file: nothing can be made under it", which it is not
    ("--checkpoint-dir", "under a dangling link", "{link} is a symbolic link to {tmp}/nowhere, which does not "
                                                  "exist: nothing can be made under it"),
    ("--checkpoint-dir", "a dangling link", "{link} is a symbolic link to {tmp}/nowhere, which does not exist: "
                                            "nothing can be made under it"),
    ("--log-json", "directory", "is a directory; name a file"),
    ("--log-json", "no directory", "no directory {tmp}/nowhere"),
    # the append wrote at the link's target (its folder here exists), or failed after training where it was missing
    ("--log-json", "a dangling link", "{link} is a symbolic link to {tmp}/nowhere, which does not exist: name a "
                                      "file, or a link to an existing one"),
]


# Pretraining has no --output-dir: that case is fine-tuning's alone.
OUTPUT_CASES = [(command, *case) for command in ("finetune", "pretraining") for case in OUTPUTS
                if not (command == "pretraining" and case[0] == "--output-dir")]


@pytest.mark.parametrize("command,flag,there,said", OUTPUT_CASES,
                         ids=[f"{c}-{f}-{t}" for c, f, t, _ in OUTPUT_CASES])
def test_an_output_that_cannot_be_written_is_refused_before_training(checkpoints, shared_dir, tmp_path, capsys,
                                                                     monkeypatch, command, flag, there, said):
    """Fine-tuning writes --output-dir and --checkpoint-dir after its last step: an output that cannot be made
    failed only then. Every output of either run is checked first (a trained step here fails the test)."""
    import trainer.finetuning
    import trainer.pretraining

    def trained(*_args, **_kwargs):
        raise AssertionError("a step was trained before the output was checked")

    monkeypatch.setattr(trainer.finetuning, "train_loop", trained)
    monkeypatch.setattr(trainer.pretraining, "train_loop", trained)
    file = tmp_path / "taken"
    file.write_text("not a directory")
    (tmp_path / "logs").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    out = {"file": file, "under a file": file / "sub", "directory": tmp_path / "logs",
           "no directory": tmp_path / "nowhere" / "log.jsonl", "under a dangling link": link / "sub",
           "a dangling link": link}[there]
    argv = (["finetune", "--task", "mrpc", "--data", str(_mrpc(shared_dir, tmp_path / "mrpc")), "--format",
             "tfrecord", "--init-checkpoint", str(checkpoints / "hf_tiny"), "--steps", "1", "--batch-size", "8"]
            if command == "finetune" else ["--format", "ofrecord", "--model", "tiny", "--steps", "1", "--batch-size",
                                           "4"])
    assert main([*argv, flag, str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: {flag} {out}: {said.format(file=file, tmp=tmp_path, link=link)}"]
    assert file.read_text() == "not a directory"
    assert not os.path.lexists(tmp_path / "nowhere") and os.readlink(link) == str(tmp_path / "nowhere")


@pytest.mark.parametrize("argv, said", [
    (["--log-json", "same", "--tensorboard-dir", "same"], "--tensorboard-dir same"),
    (["--log-json", "same", "--tensorboard-dir", "same/tb"], "--tensorboard-dir same/tb"),
    (["--log-json", "ck/tensorboard", "--checkpoint-dir", "ck"], "--checkpoint-dir's TensorBoard directory "
                                                                 "ck/tensorboard"),
    (["finetune", "--task", "mrpc", "--data", "mrpc", "--format", "tfrecord", "--log-json", "o", "--output-dir",
      "o"], "--output-dir o"),
])
def test_a_log_json_where_a_directory_output_goes_is_refused_before_anything(tmp_path, capsys, monkeypatch, argv,
                                                                            said):
    """The log file is opened before the directories are made: the run stopped once the devices had started,
    `same: File exists` (exit 1), leaving an empty log file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    pretraining = [] if argv[0] == "finetune" else ["--format", "ofrecord", "--data", "records", "--steps", "1"]
    assert main([*argv, *pretraining]) == 2
    log = argv[argv.index("--log-json") + 1]
    assert capsys.readouterr().err.splitlines() == [
        f"trainer: error: --log-json {log}: {said} would be a directory at or under that file; name another "
        "--log-json"]
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_checkpoint_runs_out_is_checked_before_the_model_runs(checkpoints, tmp_path, capsys, monkeypatch):
    import trainer.checkpoint.run

    monkeypatch.setattr(trainer.checkpoint.run, "outputs", lambda *a: pytest.fail("the model ran"))
    (tmp_path / "o.npz").mkdir()
    code = main(["checkpoint", "run", str(checkpoints / "hf_tiny"), "--inputs", str(checkpoints / "inputs.jsonl"),
                 "--out", str(tmp_path / "o.npz")])
    assert (code, capsys.readouterr().err.strip()) == (
        2, f"trainer checkpoint: error: --out {tmp_path / 'o.npz'}: is a directory; name a file")


# ---------------------------------------------------------------- probes of 2026-11-28 (third)


@pytest.mark.parametrize("beside", ["bert_config.json", "bert_model.ckpt.index", "vocab.txt"])
def test_run_refuses_an_out_that_is_a_file_its_google_prefix_reads(checkpoints, tmp_path, capsys, monkeypatch,
                                                                   beside):
    """The checkpoint named by its prefix: --out was compared with the prefix alone, so `--out
    dir/bert_config.json` ran the model and wrote its .npz over the config it had read (exit 0)."""
    import trainer.checkpoint.run

    monkeypatch.setattr(trainer.checkpoint.run, "outputs", lambda *a: pytest.fail("the model ran"))
    google = _google_copy(checkpoints, tmp_path / "google",
                          (checkpoints / "google_tiny" / "bert_config.json").read_text())
    (google / "vocab.txt").write_text("[PAD]\n")
    out = google / beside
    before = out.read_bytes()
    code = main(["checkpoint", "run", str(google / "bert_model.ckpt"), "--inputs", str(checkpoints / "inputs.jsonl"),
                 "--out", str(out)])
    assert (code, capsys.readouterr().err.strip()) == (
        2, f"trainer checkpoint: error: --out {out} is the input {out}: the run would overwrite or delete what it "
           "reads; write the output elsewhere")
    assert out.read_bytes() == before


def test_run_refuses_an_out_not_named_npz(checkpoints, tmp_path, capsys):
    """`checkpoint run --out records/manifest.json` (a slip for another folder's file) wrote the .npz archive over
    that manifest, exit 0, and every stage then called the records damaged: the name must end in .npz."""
    (tmp_path / "records").mkdir()
    manifest = tmp_path / "records" / "manifest.json"
    manifest.write_text("{}")
    for out, stem in ((manifest, "manifest"), (tmp_path / "outputs", "outputs")):
        code = main(["checkpoint", "run", str(checkpoints / "hf_tiny"), "--inputs", str(checkpoints / "inputs.jsonl"),
                     "--out", str(out)])
        assert (code, capsys.readouterr().err.strip()) == (
            2, f"trainer checkpoint: error: --out {out}: not a .npz name: the outputs are a NumPy .npz archive; "
               f"name the file so, such as {stem}.npz")
    assert manifest.read_text() == "{}" and not (tmp_path / "outputs").exists()


def test_finetune_refuses_a_log_json_that_is_its_init_checkpoints_config(checkpoints, tmp_path, capsys):
    """--log-json is appended to: naming the config beside a Google prefix (or an NVIDIA .pt) was accepted."""
    google = _google_copy(checkpoints, tmp_path / "google",
                          (checkpoints / "google_tiny" / "bert_config.json").read_text())
    config = google / "bert_config.json"
    before = config.read_bytes()
    assert main(["finetune", "--task", "mrpc", "--data", str(tmp_path / "mrpc"), "--format", "tfrecord",
                 "--init-checkpoint", str(google / "bert_model.ckpt"), "--log-json", str(config)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer: error: --log-json {config} is the input {config}: the run would overwrite or delete what it reads; "
        "write the output elsewhere"]
    assert config.read_bytes() == before


@pytest.mark.parametrize("to", ["bertprep", "google"])
def test_convert_refuses_a_vocab_beside_the_checkpoint_larger_than_its_embeddings(checkpoints, tmp_path, capsys, to):
    """A vocab.txt of more tokens than the model has rows (ids it has no embedding for) was copied into the
    output, a tokenizer_config.json vouching for it, exit 0; only --to hf refused it."""
    hf = _hf_copy(checkpoints, tmp_path / "hf")
    vocab = hf / "vocab.txt"
    vocab.write_bytes((shared_path() / "fixtures" / "golden" / "vocab.txt").read_bytes() + b"extra\n")
    out = tmp_path / "out"
    assert main(["checkpoint", "convert", str(hf), str(out), "--to", to, "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer checkpoint: error: {vocab}: 30,523 tokens, the model's vocab_size is 30,522: not this model's vocab"]
    assert sorted(os.listdir(tmp_path)) == ["hf"]


@pytest.mark.parametrize("to,vocab", [("bertprep", False), ("google", False), ("hf", False), ("hf", True)])
def test_convert_refuses_an_empty_vocab_beside_the_checkpoint_and_says_what_to_do(checkpoints, tmp_path, capsys, to,
                                                                                   vocab):
    """An empty vocab.txt beside the checkpoint (a copy cut short) was copied by --to bertprep and --to google, a
    tokenizer_config.json vouching for it, exit 0; --to hf refused it (`vocab lacks [UNK], …`, no remedy), and with
    --vocab refused the --vocab instead (`not the vocab … was trained with (… 0 tokens, 30,522 in --vocab): leave
    --vocab out`): each message sent the user to the other. Now every kind refuses it, naming it and the way out."""
    hf = _hf_copy(checkpoints, tmp_path / "hf")
    (hf / "vocab.txt").write_bytes(b"")
    extra = GOLDEN_VOCAB if vocab else []
    assert main(["checkpoint", "convert", str(hf), str(tmp_path / "out"), "--to", to, *extra, "--quiet"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer checkpoint: error: {hf / 'vocab.txt'}: vocab lacks [UNK], [SEP], [PAD], [CLS], [MASK] (a BERT vocab "
        f"needs [CLS], [SEP], [MASK], [UNK], [PAD]): the vocab.txt beside {hf / 'model.safetensors'} is no BERT "
        "vocab; put back the one it was trained with, or remove it and give --vocab FILE"]
    assert sorted(os.listdir(tmp_path)) == ["hf"]
    (hf / "vocab.txt").unlink()  # the way out it names
    assert main(["checkpoint", "convert", str(hf), str(tmp_path / "out"), "--to", to, *GOLDEN_VOCAB, "--quiet"]) == 0


def test_a_tf_state_file_naming_a_checkpoint_that_is_gone_names_both(checkpoints, tmp_path, capsys):
    """A training directory whose `checkpoint` file names model.ckpt-100 after its files were deleted (a
    rotation, a partial copy): TensorFlow's "Unsuccessful TensorSliceReader constructor" of the .index, the
    state file that named it not said."""
    run = _google_copy(checkpoints, tmp_path / "run", (checkpoints / "google_tiny" / "bert_config.json").read_text())
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"):
        (run / name).rename(run / name.replace("bert_model.ckpt", "model.ckpt-5"))
    (run / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-100"\n'
                                    'all_model_checkpoint_paths: "model.ckpt-5"\n')
    assert _inspect_fails(capsys, run) == (
        f"trainer checkpoint: error: {run / 'checkpoint'}: model_checkpoint_path names {run / 'model.ckpt-100'}, "
        "which has no .index file (deleted or moved?): name a checkpoint prefix that is there")
    assert main(["checkpoint", "inspect", str(run / "model.ckpt-5"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(run / "model.ckpt-5")


@pytest.mark.parametrize("edit, said", [
    (lambda state: state["settings"]["model"].update(bogus=1), "settings.model: unknown key 'bogus' (known: "
                                                                 "vocab_size, hidden_size, num_hidden_layers, "),
    (lambda state: state.update(settings=[]), "no settings.model object (expected the model's config: "
                                              "bert_config.json keys)"),
    (lambda state: state["settings"].update(model="tiny"), "no settings.model object"),
])
def test_a_state_json_whose_model_config_is_not_one_names_the_file_and_field(checkpoints, tmp_path, capsys, edit,
                                                                              said):
    """It was Python's words under the directory's name: `ckpt-…: unreadable checkpoint: TypeError:
    BertConfig.__init__() got an unexpected keyword argument 'bogus'` (or `list indices must be integers`)."""
    checkpoint = tmp_path / "ckpt-00000001"
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), str(checkpoint), "--to", "bertprep",
                 "--quiet"]) == 0
    state = json.loads((checkpoint / "state.json").read_text())
    edit(state)
    (checkpoint / "state.json").write_text(json.dumps(state))
    assert _inspect_fails(capsys, checkpoint).startswith(
        f"trainer checkpoint: error: {checkpoint / 'state.json'}: {said}")


@pytest.mark.parametrize("name, damage, said", [
    ("state.npz", lambda data: data[:len(data) // 2], "BadZipFile: File is not a zip file"),
    ("state.json", lambda data: b"{", "JSONDecodeError: Expecting property name enclosed in double quotes"),
])
def test_a_damaged_file_of_our_checkpoint_is_named(checkpoints, tmp_path, capsys, name, damage, said):
    """A state.npz cut short or a state.json not JSON was said under the checkpoint directory alone
    (`DIR: unreadable checkpoint: BadZipFile: File is not a zip file`): which file was not said."""
    checkpoint = tmp_path / "ours"
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), str(checkpoint), "--to", "bertprep",
                 "--quiet"]) == 0
    (checkpoint / name).write_bytes(damage((checkpoint / name).read_bytes()))
    assert _inspect_fails(capsys, checkpoint).startswith(
        f"trainer checkpoint: error: {checkpoint / name}: unreadable checkpoint: {said}")


def test_two_spellings_of_one_variable_with_other_values_are_refused(checkpoints, tmp_path, capsys):
    """A state dict holding one variable twice (pytorch-pretrained-bert's LayerNorm `gamma` beside today's `weight`,
    `module.` or `bert.` with and without) kept the later one and dropped the other in silence: convert exited 0.
    Equal copies lose nothing and are read."""
    from safetensors.numpy import load_file, save_file

    state = load_file(str(checkpoints / "hf_tiny" / "model.safetensors"))
    name = "bert.encoder.layer.0.output.LayerNorm.weight"
    for case, extra in (("equal", {"module." + name: state[name]}),
                        ("differ", {name.replace("weight", "gamma"): state[name] + 1})):
        (tmp_path / case).mkdir()
        shutil.copy(checkpoints / "hf_tiny" / "config.json", tmp_path / case)
        save_file(dict(state, **extra), str(tmp_path / case / "model.safetensors"))
    assert main(["checkpoint", "inspect", str(tmp_path / "equal"), "--json"]) == 0
    capsys.readouterr()
    assert main(["checkpoint", "convert", str(tmp_path / "differ"), str(tmp_path / "out"), "--to", "google"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"trainer checkpoint: error: {tmp_path / 'differ' / 'model.safetensors'}: variables "
                   f"{name.replace('weight', 'gamma')} and {name} are both {name} and their values differ: which one "
                   "is meant? Keep one of them"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["one index", "one variable"])
def test_two_entries_of_one_index_or_variable_in_our_state_npz_are_refused(checkpoints, tmp_path, capsys, case):
    """state.npz names each model variable `model/trainable/<index>/<path>`: two entries of one index, or one
    variable under two indices with other values, kept the later one in silence (convert exited 0)."""
    checkpoint = tmp_path / "ckpt-00000001"
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), str(checkpoint), "--to", "bertprep",
                 "--quiet"]) == 0
    with np.load(checkpoint / "state.npz") as npz:
        arrays = {name: npz[name] for name in npz.files}
    first = sorted(arrays)[3]
    index, variable = first.split("/")[2], first.split("/", 3)[3]
    extra = f"model/trainable/{index}/bert/extra" if case == "one index" else f"model/trainable/9999/{variable}"
    arrays[extra] = arrays[first] + 1
    np.savez(checkpoint / "state.npz", **arrays)
    said = f"both carry index {index} of model/trainable" if case == "one index" else \
        f"are both {variable} and their values differ"
    assert main(["checkpoint", "convert", str(checkpoint), str(tmp_path / "out"), "--to", "google"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer checkpoint: error: {checkpoint / 'state.npz'}: entries {first} and {extra} {said}: which one is "
        "meant? Keep one of them"]
    assert not (tmp_path / "out").exists()


def test_variables_not_of_bert_name_the_same_one_the_file_holds_every_run(checkpoints, tmp_path):
    """The unknown names were taken from a set, so the one named moved with PYTHONHASHSEED (`bert.foo5.bar`, then
    `bert.foo4.bar`), and it was the name with `bert.` added, which the file does not hold."""
    from safetensors.numpy import load_file, save_file

    state = load_file(str(checkpoints / "hf_tiny" / "model.safetensors"))
    (tmp_path / "hf").mkdir()
    shutil.copy(checkpoints / "hf_tiny" / "config.json", tmp_path / "hf")
    save_file(dict(state, **{f"foo{i}.bar": state["cls.predictions.bias"] for i in range(6)}),
              str(tmp_path / "hf" / "model.safetensors"))
    said = set()
    for seed in ("0", "1", "2", "3"):
        result = subprocess.run([sys.executable, "-m", "trainer", "checkpoint", "inspect", str(tmp_path / "hf")],
                                capture_output=True, text=True, cwd=REPO,
                                env=dict(os.environ, PYTHONPATH=REPO, PYTHONHASHSEED=seed))
        said.add(one_line_error(result))
    assert said == {f"trainer checkpoint: error: {tmp_path / 'hf' / 'model.safetensors'}: variable foo0.bar is not "
                    "part of BERT: another architecture?"}


@pytest.mark.parametrize("out, said", [("new/.", "new does not exist, so new/. names no directory that can be made; "
                                                 "name it new"),
                                       ("new/../x", "new does not exist, so new/../x names no directory that can be "
                                                    "made; name it x")])
def test_convert_to_a_dot_after_a_missing_directory_is_refused_before_reading(checkpoints, tmp_path, capsys,
                                                                               monkeypatch, out, said):
    """The rename to `new/.` found no `new` once the whole checkpoint had been converted: `new/.: No such file or
    directory`, exit 1. `.` and `..` after a directory that is there are taken as before."""
    monkeypatch.chdir(tmp_path)
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), out, "--to", "bertprep", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"trainer checkpoint: error: the output {out}: {said}"]
    assert os.listdir(tmp_path) == []
    (tmp_path / "there").mkdir()
    assert main(["checkpoint", "convert", str(checkpoints / "hf_tiny"), "./there/.././made", "--to", "bertprep",
                 "--quiet"]) == 0
    assert sorted(os.listdir(tmp_path / "made")) == ["state.json", "state.npz"]


@pytest.mark.parametrize("out, tail", [("new/", "/"), ("new/.", "/."), ("o.npz/", "/")])
def test_checkpoint_runs_out_named_as_a_directory_is_refused_before_the_model_runs(checkpoints, tmp_path, capsys,
                                                                                    monkeypatch, out, tail):
    """A file output ending in '/' or '/.' passed the check (abspath drops them): the model ran, then the write
    failed, `new/: Not a directory` (`new/.: Device or resource busy`), exit 1, an empty new/ left behind."""
    import trainer.checkpoint.run

    monkeypatch.setattr(trainer.checkpoint.run, "outputs", lambda *a: pytest.fail("the model ran"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "o.npz").write_bytes(b"kept")
    code = main(["checkpoint", "run", str(checkpoints / "hf_tiny"), "--inputs", str(checkpoints / "inputs.jsonl"),
                 "--out", out])
    assert (code, capsys.readouterr().err.strip()) == (
        2, f"trainer checkpoint: error: --out {out}: names a directory (it ends in '{tail}'); name a file")
    assert sorted(os.listdir(tmp_path)) == ["o.npz"]
