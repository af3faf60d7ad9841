"""trainer.checkpoint: Google's own checkpoint and outputs (google_tiny, written by
google-research/bert's run_pretraining.py) and transformers' (hf_tiny) reproduced by `checkpoint
run` under TensorFlow and JAX; conversions read back by TensorFlow and by transformers itself;
pretraining and fine-tuning start from Google's weights; bad checkpoints end with one line."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from bertprep import formats  # noqa: E402
from bertprep.formats.schemas import GLUE  # noqa: E402
from trainer.cli import main  # noqa: E402
from trainer_checks import xla_flags  # noqa: E402

# The module's fixtures (checkpoints converted, run) are made once, on one worker.
pytestmark = pytest.mark.xdist_group("checkpoints")

from conftest import shared_path  # noqa: E402

# The golden vocab (uncased, 30,522 tokens): the fixtures' checkpoints were trained with it; an export to
# Hugging Face carries its tokenizer.
GOLDEN_VOCAB = ["--vocab", str(shared_path() / "fixtures" / "golden" / "vocab.txt")]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Each project's names for the four outputs, and ours.
EXPECTED = {
    "google_tiny": {"sequence_output": "sequence_output", "pooled_output": "pooled_output",
                    "mlm_logits": "prediction_logits", "nsp_logits": "seq_relationship_logits"},
    "hf_tiny": {"sequence_output": "last_hidden_state", "pooled_output": "pooler_output",
                "mlm_logits": "prediction_logits", "nsp_logits": "seq_relationship_logits"},
}
TOLERANCE = 1e-5  # google_tiny is nearly input-independent: its README's typical bugs move outputs 1e-4+


@pytest.fixture(scope="session")
def fixtures(shared_dir):
    return shared_dir / "fixtures" / "checkpoints"


def expected(fixtures, name):
    return {ours: np.load(fixtures / name / "expected" / f"{theirs}.npy") for ours, theirs in EXPECTED[name].items()}


def assert_outputs_equal(got, want, tolerance=TOLERANCE):
    """All four arrays; MLM logits on the 5 positions the fixtures saved."""
    assert set(got) == set(want)
    for name, value in want.items():
        ours = got[name][:, :value.shape[1]] if name == "mlm_logits" else got[name]
        assert ours.dtype == np.float32 and ours.shape == value.shape, name
        np.testing.assert_allclose(ours, value, rtol=0, atol=tolerance, err_msg=name)


def run_outputs(src, inputs, out):
    assert main(["checkpoint", "run", str(src), "--inputs", str(inputs), "--out", str(out), "--quiet"]) == 0
    with np.load(out) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.parametrize("name,src", [("google_tiny", "google_tiny/bert_model.ckpt"), ("google_tiny", "google_tiny"),
                                      ("hf_tiny", "hf_tiny")])
def test_run_reproduces_their_outputs_on_tensorflow(fixtures, tmp_path, name, src):
    got = run_outputs(fixtures / src, fixtures / "inputs.jsonl", tmp_path / "out.npz")
    assert got["mlm_logits"].shape == (3, 20, 30522)
    assert_outputs_equal(got, expected(fixtures, name))


@pytest.mark.heavy  # a JAX process compiling both models: ~30 s on 2 cores
def test_run_reproduces_their_outputs_on_jax(fixtures, tmp_path):
    """A JAX-only process (TensorFlow not imported by Keras) for both fixtures."""
    script = textwrap.dedent(f"""
        import sys
        from trainer.cli import main
        for name in ("google_tiny", "hf_tiny"):
            code = main(["checkpoint", "run", "{fixtures}/" + name, "--inputs", "{fixtures}/inputs.jsonl",
                         "--out", "{tmp_path}/" + name + ".npz", "--quiet"])
            assert code == 0, code
        import keras
        assert keras.backend.backend() == "jax"
    """)
    # Fast compiles: a forward pass per model, whose outputs keep the fixtures' tolerance.
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=REPO, XLA_FLAGS=xla_flags())
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("google_tiny", "hf_tiny"):
        with np.load(tmp_path / f"{name}.npz") as npz:
            assert_outputs_equal({k: npz[k] for k in npz.files}, expected(fixtures, name))


@pytest.fixture(scope="module")
def google_as_hf(fixtures, tmp_path_factory):
    out = tmp_path_factory.mktemp("convert") / "hf"
    assert main(["checkpoint", "convert", str(fixtures / "google_tiny"), str(out), "--to", "hf", *GOLDEN_VOCAB,
                 "--quiet"]) == 0
    return out


def test_convert_to_hf_loads_in_transformers_with_googles_outputs(fixtures, google_as_hf):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, info = transformers.BertForPreTraining.from_pretrained(str(google_as_hf), output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    model.eval()
    rows = [json.loads(line) for line in (fixtures / "inputs.jsonl").read_text().splitlines()]
    tensor = {k: torch.tensor([r[k] for r in rows]) for k in ("input_ids", "input_mask", "segment_ids")}
    with torch.no_grad():
        out = model(input_ids=tensor["input_ids"], attention_mask=tensor["input_mask"],
                    token_type_ids=tensor["segment_ids"], output_hidden_states=True)
        pooled = model.bert.pooler(out.hidden_states[-1])
    positions = np.array([r["masked_lm_positions"][:5] for r in rows])
    got = {"sequence_output": out.hidden_states[-1].numpy(), "pooled_output": pooled.numpy(),
           "mlm_logits": np.take_along_axis(out.prediction_logits.numpy(), positions[:, :, None], axis=1),
           "nsp_logits": out.seq_relationship_logits.numpy()}
    assert_outputs_equal(got, expected(fixtures, "google_tiny"))


def test_convert_to_google_is_read_by_tensorflow_by_googles_names(fixtures, tmp_path):
    import tensorflow as tf

    out = tmp_path / "google"
    assert main(["checkpoint", "convert", str(fixtures / "google_tiny"), str(out), "--to", "google", "--quiet"]) == 0
    source = dict(tf.train.list_variables(str(fixtures / "google_tiny" / "bert_model.ckpt")))
    assert dict(tf.train.list_variables(str(out / "bert_model.ckpt"))) == source
    reader = tf.train.load_checkpoint(str(out / "bert_model.ckpt"))
    original = tf.train.load_checkpoint(str(fixtures / "google_tiny" / "bert_model.ckpt"))
    assert all(np.array_equal(reader.get_tensor(n), original.get_tensor(n)) for n in source)
    assert json.loads((out / "bert_config.json").read_text()) == json.loads(
        (fixtures / "google_tiny" / "bert_config.json").read_text())
    assert_outputs_equal(run_outputs(out, fixtures / "inputs.jsonl", tmp_path / "o.npz"),
                         expected(fixtures, "google_tiny"))


@pytest.mark.parametrize("to", ["bertprep", "hf"])
def test_hf_round_trips_keep_transformers_outputs(fixtures, tmp_path, to):
    out = tmp_path / to
    (tmp_path / "src").mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(fixtures / "hf_tiny" / name, tmp_path / "src" / name)
    vocab = Path(GOLDEN_VOCAB[1]).read_bytes()
    (tmp_path / "src" / "vocab.txt").write_bytes(vocab)
    assert main(["checkpoint", "convert", str(tmp_path / "src"), str(out), "--to", to, "--quiet"]) == 0
    assert (out / "vocab.txt").read_bytes() == vocab  # the vocab beside the checkpoint travels along
    assert_outputs_equal(run_outputs(out, fixtures / "inputs.jsonl", tmp_path / "o.npz"), expected(fixtures, "hf_tiny"))


def test_inspect_json(fixtures, capsys):
    assert main(["checkpoint", "inspect", str(fixtures / "google_tiny" / "bert_model.ckpt"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "google" and report["variables"] == 46 and report["parameters"] == 4_433_468
    assert report["config"]["hidden_size"] == 128 and report["heads"]


def test_pretraining_from_google_starts_at_googles_loss(fixtures, golden_dir, tmp_path):
    """One step on a batch of all 16 records (order cannot matter) from google_tiny, dropout off: the
    first loss is the one Google's heads give on those records (from `checkpoint run`, equal to Google's
    outputs above), not random init's ~10.4."""
    records = list(formats.read_records(golden_dir / "G1.tfrecord"))[:16]
    data = tmp_path / "records" / "tfrecord" / "training"
    formats.write_records(data / "part_0.tfrecord", records, "tfrecord")
    log = tmp_path / "log.jsonl"
    assert main(["--format", "tfrecord", "--data", str(tmp_path / "records"), "--init-checkpoint",
                 str(fixtures / "google_tiny"), "--dropout", "0", "--steps", "1", "--batch-size", "16",
                 "--log-every", "1", "--log-json", str(log), "--quiet"]) == 0
    first = [json.loads(line) for line in log.read_text().splitlines() if '"train"' in line][0]
    got = run_outputs(fixtures / "google_tiny", data / "part_0.tfrecord", tmp_path / "o.npz")
    ids = np.array([r["masked_lm_ids"] for r in records])
    weights = np.array([r["masked_lm_weights"] for r in records], np.float64)
    labels = np.array([r["next_sentence_labels"][0] for r in records])

    def nll(logits, label):
        logits = logits.astype(np.float64)
        top = logits.max(-1, keepdims=True)
        log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
        return log_z - np.take_along_axis(logits, label[..., None], -1)[..., 0]

    mlm = (nll(got["mlm_logits"], ids) * weights).sum() / (weights.sum() + 1e-5)
    nsp = nll(got["nsp_logits"], labels).mean()
    assert 6 < mlm + nsp < 8.5
    assert first["loss"] == pytest.approx(mlm + nsp, abs=2e-4)


def test_finetune_from_google_loads_every_encoder_variable(fixtures, shared_dir, tmp_path, capfd):
    golden = shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_train_seq128.tfrecord"
    for split in ("train", "eval"):
        formats.write_records(tmp_path / "mrpc" / f"{split}.tf_record", list(formats.read_records(golden))[:16],
                              "tfrecord", kind=GLUE)
    code = main(["finetune", "--task", "mrpc", "--data", str(tmp_path / "mrpc"), "--format", "tfrecord",
                 "--init-checkpoint", str(fixtures / "google_tiny" / "bert_model.ckpt"), "--steps", "2",
                 "--batch-size", "8", "--output-dir", str(tmp_path / "out"), "--json"])
    assert code == 0
    # 5 embedding variables, 16 per layer, the pooler's 2: all of Google's encoder.
    assert f"39 encoder variables from {fixtures / 'google_tiny' / 'bert_model.ckpt'}" in capfd.readouterr().err


# ---------------------------------------------------------------- bad input


def _google_copy(fixtures, directory, config_changes=None, drop=None):
    """google_tiny re-saved by TensorFlow's writer, `drop` left out, its config changed."""
    import tensorflow as tf

    directory.mkdir()
    config = json.loads((fixtures / "google_tiny" / "bert_config.json").read_text())
    (directory / "bert_config.json").write_text(json.dumps(dict(config, **(config_changes or {}))))
    reader = tf.train.load_checkpoint(str(fixtures / "google_tiny" / "bert_model.ckpt"))
    names = sorted(n for n in reader.get_variable_to_shape_map() if n != drop)
    tf.raw_ops.SaveV2(prefix=str(directory / "bert_model.ckpt"), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[reader.get_tensor(n) for n in names])
    return directory


def _fails(capsys, src, out, *names):
    code = main(["checkpoint", "convert", str(src), str(out), "--to", "bertprep"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert all(name in err for name in names), err
    assert not os.path.exists(out) and not os.path.exists(os.path.join(os.path.dirname(out), ".partial"))
    return err


def test_missing_variable(fixtures, tmp_path, capsys):
    src = _google_copy(fixtures, tmp_path / "g", drop="bert/encoder/layer_1/output/dense/bias")
    _fails(capsys, src, tmp_path / "out", "bert_model.ckpt", "bert/encoder/layer_1/output/dense/bias")


def test_shape_not_matching_config(fixtures, tmp_path, capsys):
    src = _google_copy(fixtures, tmp_path / "g", {"intermediate_size": 256})
    _fails(capsys, src, tmp_path / "out", "bert_model.ckpt", "bert/encoder/layer_0/intermediate/dense/kernel", "256")


def test_vocab_rows_beyond_the_padding_are_refused(fixtures, tmp_path, capsys):
    """30,522 rows for a vocab_size of 30,512 are not its padding to a multiple of 8 (30,512): never
    truncated. (Padding is dropped and said so: test_nvidia_pt_with_padded_vocab_and_old_names.)"""
    src = _google_copy(fixtures, tmp_path / "g", {"vocab_size": 30512})
    err = _fails(capsys, src, tmp_path / "out", "bert/embeddings/word_embeddings", "30522", "30512")
    assert "padding" in err


def test_another_architecture(fixtures, tmp_path, capsys):
    src = tmp_path / "roberta"
    shutil.copytree(fixtures / "hf_tiny", src, ignore=shutil.ignore_patterns("expected"))
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(dict(config, model_type="roberta")))
    _fails(capsys, src, tmp_path / "out", "config.json", "roberta")
    src = _google_copy(fixtures, tmp_path / "deeper", {"num_hidden_layers": 1})
    _fails(capsys, src, tmp_path / "out2", "bert/encoder/layer_1/", "another architecture")


def test_our_checkpoint_with_layers_beyond_its_config(fixtures, tmp_path, capsys):
    """Our state.json with fewer layers than its state.npz holds is refused as a Google or Hugging Face config
    is: inspect, run and convert took the extra layers for task heads and made a shallower model unsaid."""
    ours = tmp_path / "ours"
    assert main(["checkpoint", "convert", str(fixtures / "hf_tiny"), str(ours), "--to", "bertprep"]) == 0
    state = json.loads((ours / "state.json").read_text())
    state["settings"]["model"]["num_hidden_layers"] = 1
    (ours / "state.json").write_text(json.dumps(state))
    capsys.readouterr()
    assert main(["checkpoint", "inspect", str(ours)]) == 1
    assert "bert/encoder/layer_1/" in capsys.readouterr().err
    _fails(capsys, ours, tmp_path / "out", str(ours), "bert/encoder/layer_1/", "(L1/H", "another architecture")


def test_a_bfloat16_safetensors_checkpoint_is_read_widened_exactly(fixtures, tmp_path):
    """transformers saves a bfloat16 model's safetensors as BF16, which NumPy has no dtype for: reading one was
    safetensors.numpy's "data type 'bfloat16' not understood" TypeError traceback."""
    from safetensors.numpy import load_file

    from trainer.checkpoint import read

    src = tmp_path / "bf16"
    src.mkdir()
    shutil.copy(fixtures / "hf_tiny" / "config.json", src)
    header, data = {}, b""
    for name, value in load_file(fixtures / "hf_tiny" / "model.safetensors").items():
        raw = (np.ascontiguousarray(value, "<f4").view("<u4") >> 16).astype("<u2").tobytes()  # the high halves
        header[name] = {"dtype": "BF16", "shape": list(value.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    (src / "model.safetensors").write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)
    got, full = read(str(src)).weights, read(str(fixtures / "hf_tiny")).weights
    assert set(got) == set(full)
    for name, value in full.items():
        assert got[name].dtype == np.float32
        np.testing.assert_array_equal(got[name], (value.view("<u4") & 0xFFFF0000).view("<f4"), err_msg=name)


def _with_non_finite(fixtures, directory, names):
    """hf_tiny copied to `directory`, a NaN in each of its tensors `names` but the last, an inf in that one."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(fixtures / "hf_tiny", directory, ignore=shutil.ignore_patterns("expected"))
    tensors = {name: value.copy() for name, value in load_file(directory / "model.safetensors").items()}
    for name in names:
        tensors[name].flat[-1] = np.inf if name == names[-1] else np.nan
    save_file(tensors, directory / "model.safetensors")
    return directory


def test_a_checkpoint_holding_nan_or_inf_is_warned_of_in_one_line(fixtures, tmp_path, capsys):
    """A diverged run's checkpoint (NaN or inf in its weights) was inspected, converted and run without a word,
    exit 0, its outputs NaN. Each command now says so in one stderr line naming three variables (in the model's
    order) and counting the rest, and still completes as before: exit 0, the conversion written, NaN and all;
    inspect --json and convert's summary list it under "warnings", a Python caller of convert hears it as a
    BertprepWarning. A finite checkpoint gets no line and no key."""
    import trainer.checkpoint
    from bertprep.errors import BertprepWarning

    src = _with_non_finite(fixtures, tmp_path / "nan", [
        "bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.output.LayerNorm.weight",
        "bert.encoder.layer.1.output.dense.bias", "bert.pooler.dense.weight",
        "bert.encoder.layer.0.attention.output.dense.bias"])
    said = (f"{src / 'model.safetensors'}: 5 of 46 variables hold NaN or inf values (a diverged run?): "
            "bert/embeddings/word_embeddings, bert/encoder/layer_0/attention/output/dense/bias, "
            "bert/encoder/layer_0/attention/output/LayerNorm/gamma and 2 more")
    assert main(["checkpoint", "inspect", str(src), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == f"trainer checkpoint: warning: {said}\n" and json.loads(out)["warnings"] == [said]
    assert main(["checkpoint", "convert", str(src), str(tmp_path / "out"), "--to", "bertprep", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == f"trainer checkpoint: warning: {said}\n" and json.loads(out)["warnings"] == [said]
    assert np.isnan(trainer.checkpoint.read(tmp_path / "out").weights["bert/embeddings/word_embeddings"]).any()
    with pytest.warns(BertprepWarning, match="^trainer.checkpoint.convert: .*5 of 46 variables hold NaN or inf"):
        assert trainer.checkpoint.convert(src, tmp_path / "out2", "google")["warnings"] == [said]
    assert main(["checkpoint", "inspect", str(fixtures / "hf_tiny"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "warnings" not in json.loads(out)


def test_checkpoint_run_warns_of_nan_before_its_nan_outputs(fixtures, tmp_path, capsys):
    """checkpoint run of a checkpoint holding NaN wrote NaN outputs without a word, exit 0: the warning line comes
    before the model runs, and the outputs are written as before."""
    src = _with_non_finite(fixtures, tmp_path / "nan", ["bert.pooler.dense.bias", "cls.seq_relationship.bias"])
    out = tmp_path / "out.npz"
    assert main(["checkpoint", "run", str(src), "--inputs", str(fixtures / "inputs.jsonl"), "--out", str(out),
                 "--quiet"]) == 0
    assert (f"trainer checkpoint: warning: {src / 'model.safetensors'}: 2 of 46 variables hold NaN or inf values (a "
            "diverged run?): bert/pooler/dense/bias, cls/seq_relationship/output_bias\n") in capsys.readouterr().err
    written = np.load(out)
    assert not np.isfinite(written["pooled_output"]).all() and not np.isfinite(written["nsp_logits"]).all()


# NaN in the last position's embedding (beyond the records' 128), inf in the next-sentence bias (no fine-tuning
# weight); one pretraining step takes both, its loss not finite (a skipped step, as the loop has them).
INITIAL_NON_FINITE = ["bert.embeddings.position_embeddings.weight", "cls.seq_relationship.bias"]
INITIAL_SAID = ("{}: 2 of 46 variables hold NaN or inf values (a diverged run?): bert/embeddings/position_embeddings, "
                "cls/seq_relationship/output_bias")


def test_pretraining_from_a_checkpoint_holding_nan_or_inf_warns_of_it_in_one_line(fixtures, golden_dir, tmp_path,
                                                                                 capsys):
    """`python -m trainer --init-checkpoint` of a diverged run's checkpoint started without a word: the line
    `trainer checkpoint` says, once, before the run and under --quiet, the summary's (and --log-json's)
    "warnings"; the run goes on as before. A finite checkpoint gets no line."""
    src = _with_non_finite(fixtures, tmp_path / "nan", INITIAL_NON_FINITE)
    said = INITIAL_SAID.format(src / "model.safetensors")
    formats.write_records(tmp_path / "records" / "tfrecord" / "training" / "part_0.tfrecord",
                          list(formats.read_records(golden_dir / "G1.tfrecord"))[:8], "tfrecord")
    log = tmp_path / "log.jsonl"
    assert main(["--format", "tfrecord", "--data", str(tmp_path / "records"), "--init-checkpoint", str(src),
                 "--steps", "1", "--batch-size", "8", "--log-every", "1", "--log-json", str(log), "--quiet",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == f"trainer: warning: {said}\n" and json.loads(out)["warnings"] == [said]
    assert json.loads(out)["steps"] == 1
    assert json.loads(log.read_text().splitlines()[-1])["warnings"] == [said]
    from trainer.checkpoint import read
    from trainer.pretraining import initial_checkpoint_warnings

    assert initial_checkpoint_warnings(read(str(fixtures / "hf_tiny"))) == () and capsys.readouterr().err == ""


def test_finetuning_from_a_checkpoint_holding_nan_or_inf_warns_of_it_in_one_line(fixtures, shared_dir, tmp_path,
                                                                                capsys):
    """`trainer finetune --init-checkpoint`: the same line, once, under --quiet, before the run, which goes on;
    the --json summary and --log-json's summary event list it under "warnings"."""
    src = _with_non_finite(fixtures, tmp_path / "nan", INITIAL_NON_FINITE)
    said = INITIAL_SAID.format(src / "model.safetensors")
    golden = shared_dir / "fixtures" / "finetune" / "glue" / "MRPC_train_seq128.tfrecord"
    formats.write_records(tmp_path / "mrpc" / "train.tf_record", list(formats.read_records(golden))[:8], "tfrecord",
                          kind=GLUE)
    log = tmp_path / "log.jsonl"
    assert main(["finetune", "--task", "mrpc", "--data", str(tmp_path / "mrpc"), "--format", "tfrecord",
                 "--init-checkpoint", str(src), "--steps", "1", "--batch-size", "8", "--no-eval", "--output-dir",
                 str(tmp_path / "out"), "--log-json", str(log), "--quiet", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == f"trainer: warning: {said}\n" and json.loads(out)["warnings"] == [said]
    assert json.loads(out)["steps"] == 1
    assert json.loads(log.read_text().splitlines()[-1])["warnings"] == [said]


def test_truncated_files(fixtures, tmp_path, capsys):
    src = tmp_path / "hf"
    shutil.copytree(fixtures / "hf_tiny", src, ignore=shutil.ignore_patterns("expected"))
    os.chmod(src / "model.safetensors", 0o644)
    data = (src / "model.safetensors").read_bytes()
    (src / "model.safetensors").write_bytes(data[: len(data) // 2])
    _fails(capsys, src, tmp_path / "out", "model.safetensors")
    google = tmp_path / "google"
    shutil.copytree(fixtures / "google_tiny", google, ignore=shutil.ignore_patterns("expected"))
    shard = google / "bert_model.ckpt.data-00000-of-00001"
    os.chmod(shard, 0o644)
    shard.write_bytes(shard.read_bytes()[:1000])
    _fails(capsys, google, tmp_path / "out", "bert_model.ckpt.data", "variable ")


def test_convert_to_a_place_under_a_file_is_one_usage_line(fixtures, tmp_path, capsys):
    """It was '<file>/.partial: Not a directory', exit 1, naming a path the user never gave, once the weights
    had been read."""
    (tmp_path / "afile").write_text("not a directory")
    out = tmp_path / "afile" / "out"
    assert main(["checkpoint", "convert", str(fixtures / "hf_tiny"), str(out), "--to", "bertprep"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trainer checkpoint: error: the output {out}: {tmp_path / 'afile'} is a file: nothing can be made under it"]


def test_convert_in_python_takes_path_objects_and_names_a_wrong_type(fixtures, tmp_path):
    """trainer.checkpoint.convert (README's Python API) with pathlib.Path arguments was a TypeError traceback
    ('PosixPath' + 'str'), and so was a None source."""
    from bertprep.errors import UsageError
    from trainer.checkpoint import convert

    assert convert(fixtures / "hf_tiny", tmp_path / "ours", "bertprep")["out"] == str(tmp_path / "ours")
    assert (tmp_path / "ours" / "state.npz").is_file()
    with pytest.raises(UsageError) as raised:
        convert(None, tmp_path / "out", "hf")
    assert str(raised.value) == "convert's src must be a str (or a path), got NoneType None"


def test_read_and_sniff_in_python_take_path_objects_and_name_a_wrong_type(fixtures):
    """trainer.checkpoint.read (and sniff, which it calls) with a pathlib.Path was a TypeError traceback from deep
    inside ('PosixPath' + 'str'), as convert's once was; another type was one too ('int' + 'str')."""
    from bertprep.errors import UsageError
    from trainer.checkpoint import hf, read, sniff

    assert sniff(fixtures / "hf_tiny") is hf
    checkpoint = read(fixtures / "hf_tiny")
    assert checkpoint.kind == "hf" and isinstance(checkpoint.path, str)
    assert str(fixtures / "hf_tiny") in checkpoint.path
    for function in (read, sniff):
        with pytest.raises(UsageError) as raised:
            function(5)
        assert str(raised.value) == f"{function.__name__}'s path must be a str (or a path), got int 5"


def test_read_inputs_in_python_takes_path_objects_and_names_a_wrong_type(fixtures, tmp_path):
    """trainer.checkpoint.run.read_inputs with a pathlib.Path was an AttributeError traceback ('PosixPath' object
    has no attribute 'endswith'), as read's path once was; a path object now reads as its string, its errors the
    same one line, and another type is one UsageError line naming the argument."""
    from bertprep.errors import DataError, UsageError
    from trainer.checkpoint.run import read_inputs

    given = fixtures / "inputs.jsonl"
    inputs, as_str = read_inputs(given), read_inputs(str(given))
    assert inputs.path == str(given) and inputs.places == as_str.places
    assert all(np.array_equal(inputs.arrays[key], as_str.arrays[key]) for key in as_str.arrays)
    (tmp_path / "none.jsonl").write_text("")
    with pytest.raises(DataError) as raised:
        read_inputs(tmp_path / "none.jsonl")
    assert str(raised.value) == f"{tmp_path / 'none.jsonl'}: no inputs"
    with pytest.raises(UsageError) as raised:
        read_inputs(5)
    assert str(raised.value) == "read_inputs's path must be a str (or a path), got int 5"


@pytest.mark.parametrize("labels", ["a,b", ("a", 1), {"a", "b"}, [Path("a"), Path("b")]])
def test_convert_in_python_refuses_labels_that_are_not_strings_in_a_list_before_reading(fixtures, tmp_path,
                                                                                         monkeypatch, labels):
    """A str was taken for one label ('a,b'), a path object's items for names: `labels` is a list or tuple of str,
    else one line naming it, before the checkpoint is read or anything written."""
    import trainer.checkpoint
    from bertprep.errors import UsageError

    monkeypatch.setattr(trainer.checkpoint, "read", lambda *a: pytest.fail("the checkpoint was read"))
    with pytest.raises(UsageError) as raised:
        trainer.checkpoint.convert(fixtures / "hf_tiny", tmp_path / "out", "hf", labels=labels)
    assert str(raised.value) == ("convert's labels must be a list or tuple of str (a classifier's labels in id "
                                 f"order), got {type(labels).__name__} {labels!r}")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, flag", [
    (["convert", "", "out", "--to", "hf"], "src"), (["convert", "{hf}", "", "--to", "bertprep"], "out"),
    (["inspect", ""], "src"), (["run", "{hf}", "--inputs", "", "--out", "o.npz"], "--inputs"),
    (["run", "{hf}", "--inputs", "i.jsonl", "--out", ""], "--out"),
    (["convert", "{hf}", "out", "--to", "hf", "--vocab", ""], "--vocab")])
def test_an_empty_path_is_one_usage_line_naming_it(fixtures, capsys, argv, flag):
    """'' read as no file (convert SRC '' read the checkpoint, then ': No such file or directory', exit 1) or
    as the current directory, as bertprep's stages refuse it."""
    with pytest.raises(SystemExit) as exit_:
        main(["checkpoint", *[a.replace("{hf}", str(fixtures / "hf_tiny")) for a in argv]])
    assert exit_.value.code == 2 and capsys.readouterr().err == (
        f"trainer checkpoint: error: {flag}: an empty path names no file or directory\n")


def test_unknown_path_kind(tmp_path, capsys):
    (tmp_path / "weights.h5").write_bytes(b"not a checkpoint")
    _fails(capsys, tmp_path / "weights.h5", tmp_path / "out", "weights.h5", "not a checkpoint")


@pytest.mark.parametrize("name, said", [
    ("hf_tiny/model.safetensors", "one file of a Hugging Face checkpoint (config.json with model.safetensors or "
                                  "pytorch_model.bin) in {d}/hf_tiny: name the directory {d}/hf_tiny"),
    ("hf_tiny/config.json", "one file of a Hugging Face checkpoint (config.json with model.safetensors or "
                            "pytorch_model.bin) in {d}/hf_tiny: name the directory {d}/hf_tiny"),
    ("google_tiny/bert_model.ckpt.index", "one file of the Google checkpoint {d}/google_tiny/bert_model.ckpt: name "
                                          "its prefix {d}/google_tiny/bert_model.ckpt (or its directory)"),
    ("google_tiny/bert_model.ckpt.data-00000-of-00001", "one file of the Google checkpoint "
                                                        "{d}/google_tiny/bert_model.ckpt: name its prefix "
                                                        "{d}/google_tiny/bert_model.ckpt (or its directory)"),
    ("google_tiny/bert_config.json", "one file of a Google checkpoint (bert_model.ckpt) in {d}/google_tiny: name "
                                     "the directory {d}/google_tiny")])
def test_a_file_of_a_checkpoint_names_what_to_give(fixtures, tmp_path, capsys, name, said):
    """A checkpoint's weights or config file given for the checkpoint (as most tools take model.safetensors or
    bert_model.ckpt.index) was 'not a checkpoint this trainer reads (expected ...)', the checkpoint beside it not
    said."""
    err = _fails(capsys, fixtures / name, tmp_path / "out")
    assert err == f"trainer checkpoint: error: {fixtures / name}: {said.format(d=fixtures)}\n"


def test_a_binary_file_named_checkpoint_is_not_googles_state_file(fixtures, tmp_path, capsys):
    """TensorFlow's text state file is named `checkpoint`; another tool's binary file of that name was a
    UnicodeDecodeError traceback whatever the directory held."""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "checkpoint").write_bytes(b"\xff\xfe\x80 not text")
    _fails(capsys, tmp_path / "other", tmp_path / "out", "other", "not a checkpoint this trainer reads")
    hf = tmp_path / "hf"
    shutil.copytree(fixtures / "hf_tiny", hf, ignore=shutil.ignore_patterns("expected"))
    (hf / "checkpoint").write_bytes(b"\xff\xfe\x80 not text")
    assert main(["checkpoint", "inspect", str(hf), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "hf"


def test_model_flag_disagreeing_with_the_checkpoint(fixtures, golden_dir, tmp_path, capsys):
    formats.write_records(tmp_path / "tfrecord" / "training" / "part_0.tfrecord",
                          list(formats.read_records(golden_dir / "G1.tfrecord"))[:2], "tfrecord")
    code = main(["--format", "tfrecord", "--data", str(tmp_path), "--init-checkpoint", str(fixtures / "google_tiny"),
                 "--model", "base"])
    err = capsys.readouterr().err
    assert code != 0 and "--model base" in err and "L2/H128/A2" in err and "L12/H768/A12" in err


@pytest.mark.parametrize("model", ["huge", "", ["tiny"]])
def test_check_size_flag_in_python_names_an_unknown_model_in_one_line(fixtures, model):
    """check_size_flag(checkpoint, model="huge") was a bare KeyError: 'huge' (the CLI's --model choices and
    TrainConfig refuse it before; a Python caller reached SIZES[model]); a list was a TypeError (unhashable)."""
    from bertprep.errors import UsageError
    from trainer.checkpoint import check_size_flag, read

    checkpoint = read(fixtures / "hf_tiny")
    check_size_flag(checkpoint, model="tiny")  # the checkpoint's size, and no model: no error, as before
    check_size_flag(checkpoint)
    with pytest.raises(UsageError) as raised:
        check_size_flag(checkpoint, model=model)
    assert str(raised.value) == ("check_size_flag's model must be one of tiny, mini, small, medium, base, large, or "
                                 f"None, got {type(model).__name__} {model!r}")


def test_nvidia_pt_with_padded_vocab_and_old_names(fixtures, tmp_path, capsys):
    """NVIDIA's PyTorch form: {"model": state dict} with `module.` and pytorch-pretrained-bert's
    LayerNorm gamma/beta, the vocab padded to 30,528 rows and the decoder stored: transformers' outputs."""
    torch = pytest.importorskip("torch")
    from safetensors.numpy import load_file

    state = {}
    for name, value in load_file(fixtures / "hf_tiny" / "model.safetensors").items():
        if name in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):
            value = np.concatenate([value, np.full((6, *value.shape[1:]), 7.0, np.float32)])
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        state["module." + name] = torch.from_numpy(value.copy())
    state["module.cls.predictions.decoder.weight"] = state["module.bert.embeddings.word_embeddings.weight"]
    torch.save({"model": state, "epoch": 3}, tmp_path / "ckpt_8601.pt")
    config = json.loads((fixtures / "hf_tiny" / "config.json").read_text())
    (tmp_path / "bert_config.json").write_text(json.dumps({k: config[k] for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
        "initializer_range")}))
    assert main(["checkpoint", "inspect", str(tmp_path / "ckpt_8601.pt"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "nvidia-pt" and any("dropped 6 padding rows" in n for n in report["notes"])
    assert_outputs_equal(run_outputs(tmp_path / "ckpt_8601.pt", fixtures / "inputs.jsonl", tmp_path / "o.npz"),
                         expected(fixtures, "hf_tiny"))


@pytest.mark.heavy  # two processes (huggingface_hub reads HF_HUB_OFFLINE when imported)
def test_hub_id_from_the_offline_cache(fixtures, tmp_path):
    """A hub id resolved by huggingface_hub in its cache, HF_HUB_OFFLINE=1 (no network is asked)."""
    pytest.importorskip("huggingface_hub")
    snapshot = tmp_path / "hub" / "models--bertprep--hf-tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(fixtures / "hf_tiny" / name, snapshot / name)
    (tmp_path / "hub" / "models--bertprep--hf-tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--bertprep--hf-tiny" / "refs" / "main").write_text("0" * 40)
    script = textwrap.dedent(f"""
        from trainer.cli import main
        raise SystemExit(main(["checkpoint", "run", "bertprep/hf-tiny", "--inputs", "{fixtures}/inputs.jsonl",
                               "--out", "{tmp_path}/o.npz", "--quiet"]))
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"), PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(tmp_path / "o.npz") as npz:
        assert_outputs_equal({k: npz[k] for k in npz.files}, expected(fixtures, "hf_tiny"))
    missing = subprocess.run([sys.executable, "-m", "trainer", "checkpoint", "inspect", "bertprep/not-cached"],
                             env=env, capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1 and "bertprep/not-cached" in missing.stderr.strip().splitlines()[-1]


def test_jax_only_install_says_tensorflow_is_needed_for_google_checkpoints(fixtures, tmp_path):
    """TensorFlow unimportable (as a JAX-only install): one line naming what to install; Hugging Face's
    files still convert."""
    checks = os.path.join(REPO, "tests", "trainer_checks.py")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, checks, "--no-tensorflow", "trainer", "checkpoint", "convert",
                           str(fixtures / "google_tiny"), str(tmp_path / "out"), "--to", "hf"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr.strip().splitlines()[-1] == (
        "trainer checkpoint: error: reading or writing a TF checkpoint (bert_model.ckpt) needs TensorFlow: "
        "pip install 'bertprep[train]' beside JAX")
    done = subprocess.run([sys.executable, checks, "--no-tensorflow", "trainer", "checkpoint", "convert",
                           str(fixtures / "hf_tiny"), str(tmp_path / "out"), "--to", "bertprep", "--quiet"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
