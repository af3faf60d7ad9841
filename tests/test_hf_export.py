"""A pretrained model leaves ready to use (issue 40): every checkpoint of a run carries the vocab and casing
its records were made with, and `checkpoint convert --to hf` writes the model with its tokenizer, so that
transformers' AutoTokenizer gives the ids `bertprep create` gave (uncased and cased), truncates a long input
instead of crashing the model, and `pipeline("fill-mask")` answers with real tokens. Before, the export had
no tokenizer: AutoTokenizer built a 5-token one and fill-mask returned empty strings, with no warning.
The cased run checkpoints into an s3:// bucket, so its export and a fine-tune from it read the tokenizer
from a URL checkpoint directory (two pretraining runs in all: the module stays under a minute)."""

import contextlib
import hashlib
import io
import json
import os

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tensorflow")

from bertprep.cli import main as bertprep_main  # noqa: E402
from bertprep.tokenization import LineTokenizer, load_vocab  # noqa: E402
from trainer.cli import main  # noqa: E402
from trainer_checks import bert_config  # noqa: E402

pytestmark = pytest.mark.xdist_group("hf_export")  # the module's two trained runs are made once


def trained(root, corpus, vocab, lower_case, checkpoint_dir=None):
    """Records of `corpus` made with `vocab`, 2 steps of the tiny model on them into `checkpoint_dir` (a
    path or URL; default root/ckpt), and that checkpoint directory converted --to hf (root/hf)."""
    records = root / "records"
    casing = [] if lower_case else ["--no-lower-case"]
    assert bertprep_main(["create", "--input", str(corpus), "--vocab", str(vocab), "--out", str(records), "--seq",
                          "64", "--pred", "10", "--dupe-factor", "1", "--workers", "1", "--quiet", *casing]) == 0
    data = next(p.parent for p in records.rglob("manifest.json"))
    size = len(load_vocab(str(vocab)).tokens)
    checkpoint_dir = checkpoint_dir or root / "ckpt"
    assert main(["--format", "tfrecord", "--data", str(data), "--bert-config", bert_config(root, 0.0, vocab_size=size),
                 "--steps", "2", "--batch-size", "4", "--checkpoint-dir", str(checkpoint_dir), "--quiet"]) == 0
    hf = root / "hf"
    assert main(["checkpoint", "convert", str(checkpoint_dir), str(hf), "--to", "hf", "--quiet"]) == 0
    return checkpoint_dir, hf


@pytest.fixture(scope="module")
def held_out(shared_dir):
    """Lines the records were not made from (WikiText-2 text; the records are of the golden corpus)."""
    lines = (shared_dir / "fixtures" / "bench" / "wt2.txt").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if len(line.split()) > 5][:400]


@pytest.fixture(scope="module")
def uncased(golden_dir, tmp_path_factory):
    return trained(tmp_path_factory.mktemp("uncased"), golden_dir / "corpus.txt", golden_dir / "vocab.txt", True)


@pytest.fixture(scope="module")
def cased(shared_dir, golden_dir, s3_bucket, tmp_path_factory):
    """A cased vocab of WikiText-2 (`bertprep vocab --cased`), records of the golden corpus made with it, the
    run checkpointing into an s3:// bucket (its checkpoint directory is that URL)."""
    root = tmp_path_factory.mktemp("cased")
    corpus = shared_dir / "fixtures" / "bench" / "wt2.txt"
    vocab = root / "vocab.txt"
    assert bertprep_main(["vocab", "--input", str(corpus), "--out", str(vocab), "--vocab-size", "3000", "--cased",
                          "--quiet"]) == 0
    return (*trained(root, golden_dir / "corpus.txt", vocab, False, f"{s3_bucket}/cased"), vocab)


def test_every_checkpoint_carries_the_records_vocab_and_casing(uncased, golden_dir):
    checkpoint_dir, _hf = uncased
    (step,) = [p for p in checkpoint_dir.iterdir() if p.name.startswith("ckpt-")]
    assert (step / "vocab.txt").read_bytes() == (golden_dir / "vocab.txt").read_bytes()
    config = json.loads((step / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True
    assert config["vocab_sha256"] == hashlib.sha256((golden_dir / "vocab.txt").read_bytes()).hexdigest()
    state = json.loads((step / "state.json").read_text())
    (manifest, digest), = state["data"]["manifests"].items()
    assert digest == hashlib.sha256(open(manifest, "rb").read()).hexdigest()


def test_the_export_holds_what_save_pretrained_writes_and_a_model_card(uncased):
    _checkpoint_dir, hf = uncased
    assert sorted(os.listdir(hf)) == ["README.md", "config.json", "model.safetensors", "special_tokens_map.json",
                                      "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    config = json.loads((hf / "tokenizer_config.json").read_text())
    assert (config["tokenizer_class"], config["do_lower_case"], config["model_max_length"]) == \
        ("PreTrainedTokenizerFast", True, json.loads((hf / "config.json").read_text())["max_position_embeddings"])
    card = (hf / "README.md").read_text()
    front = card.split("---\n")[1]
    assert "library_name: transformers\n" in front and "pipeline_tag: fill-mask\n" in front and "- bert\n" in front
    assert '"optimizer": ' in card and "manifest.json`: sha256 `" in card


@pytest.mark.parametrize("which", ["uncased", "cased"])
def test_autotokenizer_gives_the_ids_bertprep_create_gave(which, request, held_out):
    from transformers import AutoTokenizer

    run = request.getfixturevalue(which)
    hf = run[1]
    tokenizer = AutoTokenizer.from_pretrained(str(hf))
    assert tokenizer.is_fast and len(tokenizer) == len(load_vocab(str(hf / "vocab.txt")).tokens)
    ours = LineTokenizer(load_vocab(str(hf / "vocab.txt")), lower_case=which == "uncased")
    tokens, counts = ours.encode(held_out)
    expected = np.split(tokens, np.cumsum(counts)[:-1])
    got = tokenizer(held_out, add_special_tokens=False)["input_ids"]
    differing = [line for line, a, b in zip(held_out, expected, got) if list(a) != b]
    assert not differing, differing[:3]
    if which == "cased":  # a capital kept: the cased vocab's ids differ from the lower-cased text's
        assert tokenizer("The")["input_ids"] != tokenizer("the")["input_ids"]


# Words around the limits: transformers' own WordPiece default (100 characters), the reference's and ours (200).
LONG_WORDS = [("international" * 16)[:length] for length in (100, 101, 150, 200, 201)]


@pytest.mark.parametrize("use_fast", [True, False])
def test_autotokenizer_splits_words_of_up_to_200_characters_as_create_does(uncased, use_fast):
    """transformers 5's BertTokenizer rebuilds its WordPiece from vocab.txt with a limit of 100 characters a
    word: a word of 101-200 characters, which `create` splits, was [UNK]. The export loads as written (use_fast
    False gives the same class in transformers 5: there is no slow tokenizer to ask for); the same words in a
    sentence pair keep BERT's segment ids."""
    from transformers import AutoTokenizer

    hf = uncased[1]
    tokenizer = AutoTokenizer.from_pretrained(str(hf), use_fast=use_fast)
    vocab = load_vocab(str(hf / "vocab.txt"))
    tokens, counts = LineTokenizer(vocab, lower_case=True).encode(LONG_WORDS)
    expected = [list(ids) for ids in np.split(tokens, np.cumsum(counts)[:-1])]
    unknown = vocab.id_of("[UNK]")
    assert [ids == [unknown] for ids in expected] == [False, False, False, False, True]  # ours: up to 200
    assert tokenizer(LONG_WORDS, add_special_tokens=False)["input_ids"] == expected
    pair = tokenizer("the city", LONG_WORDS[2])
    assert pair["token_type_ids"] == [0] * 4 + [1] * (len(expected[2]) + 1)


def test_a_long_input_is_truncated_by_the_tokenizer_not_the_model(uncased):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    hf = uncased[1]
    tokenizer = AutoTokenizer.from_pretrained(str(hf))
    limit = json.loads((hf / "config.json").read_text())["max_position_embeddings"]
    inputs = tokenizer(" ".join(["the city"] * 500), truncation=True, return_tensors="pt")  # ~1,000 tokens
    assert inputs["input_ids"].shape[1] == limit
    logits = AutoModelForMaskedLM.from_pretrained(str(hf))(**inputs).logits
    assert tuple(logits.shape) == (1, limit, tokenizer.vocab_size)


def test_fill_mask_answers_with_real_tokens(uncased):
    from transformers import pipeline

    hf = uncased[1]
    vocab = set(load_vocab(str(hf / "vocab.txt")).tokens)
    answers = pipeline("fill-mask", model=str(hf))("the [MASK] of the city was built in the north .")
    assert len(answers) == 5
    assert all(a["token_str"].strip() and a["token_str"].replace(" ", "") in vocab for a in answers), answers


def convert_line(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["checkpoint", "convert", *map(str, argv)])
    return code, err.getvalue().strip()


def test_without_a_known_vocab_the_export_is_refused_unless_one_is_given(shared_dir, golden_dir, tmp_path):
    hf_tiny = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"  # config.json + model.safetensors only
    code, line = convert_line(hf_tiny, tmp_path / "out", "--to", "hf")
    assert code == 2 and line.startswith("trainer checkpoint: error: ") and "no vocab.txt is known" in line
    assert "--vocab FILE" in line and len(line.splitlines()) == 1 and not (tmp_path / "out").exists()
    sample = os.path.join(os.path.dirname(os.path.dirname(__file__)), "bertprep", "data", "sample_vocab.txt")
    code, line = convert_line(hf_tiny, tmp_path / "out", "--to", "hf", "--vocab", sample)
    assert (code, line) == (2, f"trainer checkpoint: error: {sample}: 2,000 tokens, the model's vocab_size is "
                               "30,522: not this model's vocab")
    assert not (tmp_path / "out").exists()
    assert convert_line(hf_tiny, tmp_path / "out", "--to", "hf", "--vocab", golden_dir / "vocab.txt") == (0, "")
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True  # the golden vocab has no capitals: uncased


def test_a_vocab_without_pad_names_the_tokens_an_export_needs(shared_dir, golden_dir, tmp_path):
    """The export's tokenizer names [PAD] too (special_tokens_map.json): a --vocab without it was refused, once the
    weights had been converted, as `vocab lacks [PAD] (a BERT vocab needs [CLS], [SEP], [MASK], [UNK])`, a list
    without the token it lacked. The list now holds [PAD], and the check comes before the weights are written."""
    no_pad = tmp_path / "vocab.txt"
    no_pad.write_bytes((golden_dir / "vocab.txt").read_bytes().replace(b"[PAD]\n", b"[PAD0]\n", 1))
    code, line = convert_line(shared_dir / "fixtures" / "checkpoints" / "hf_tiny", tmp_path / "hf", "--to", "hf",
                              "--vocab", no_pad)
    assert (code, line) == (2, f"trainer checkpoint: error: {no_pad}: vocab lacks [PAD] (a BERT vocab needs [CLS], "
                               "[SEP], [MASK], [UNK], [PAD])")
    assert not (tmp_path / "hf").exists()


def test_a_checkpoints_vocab_smaller_than_the_model_is_padded_not_refused(shared_dir, held_out, tmp_path):
    """A model with more rows than its own vocab (records of a smaller vocab, a larger --bert-config): the
    export pads vocab.txt with [unused] tokens, so every id the model predicts is a token and the ids of
    text are the vocab's own; a --vocab of that size is still refused (above)."""
    import shutil

    from transformers import AutoTokenizer

    from trainer.checkpoint import convert

    src = tmp_path / "src"
    shutil.copytree(shared_dir / "fixtures" / "checkpoints" / "hf_tiny", src)  # vocab_size 30,522
    sample = os.path.join(os.path.dirname(os.path.dirname(__file__)), "bertprep", "data", "sample_vocab.txt")
    shutil.copyfile(sample, src / "vocab.txt")  # 2,000 tokens
    summary = convert(str(src), str(tmp_path / "hf"), "hf")
    assert "vocab.txt padded with 28,522 [unused] tokens" in summary["notes"]
    tokens = load_vocab(str(tmp_path / "hf" / "vocab.txt")).tokens
    assert len(tokens) == 30522 and tokens[:2000] == load_vocab(sample).tokens and tokens[2000] == "[unused0]"
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    ours, _counts = LineTokenizer(load_vocab(sample), lower_case=True).encode(held_out[:50])
    assert [i for line in tokenizer(held_out[:50], add_special_tokens=False)["input_ids"] for i in line] == list(ours)


def test_a_vocab_short_of_the_model_by_nvidias_padding_is_padded_too(shared_dir, golden_dir, tmp_path):
    """A --vocab a few tokens short of the model's rows (NVIDIA pads vocab_size to a multiple of 8: 30,522 tokens
    for 30,528 rows) was accepted and exported as it was, unlike the checkpoint's own vocab: vocab.txt and
    tokenizer.json held fewer tokens than the model's rows, so an id fill-mask ranks beyond them decoded to ''
    (convert_ids_to_tokens: None). It is padded with [unused] tokens as the checkpoint's own is."""
    from transformers import AutoTokenizer

    short = tmp_path / "vocab.txt"
    short.write_bytes(b"".join((golden_dir / "vocab.txt").read_bytes().splitlines(keepends=True)[:-1]))  # 30,521
    code, line = convert_line(shared_dir / "fixtures" / "checkpoints" / "hf_tiny", tmp_path / "hf", "--to", "hf",
                              "--vocab", short)
    assert (code, line) == (0, "")
    tokens = load_vocab(str(tmp_path / "hf" / "vocab.txt")).tokens
    assert len(tokens) == 30522 and tokens[:-1] == load_vocab(str(short)).tokens and tokens[-1] == "[unused994]"
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert len(tokenizer) == 30522 and tokenizer.convert_ids_to_tokens(30521) == "[unused994]"


def test_a_cased_vocab_exports_a_cased_tokenizer(cased):
    _checkpoint_dir, hf, vocab = cased
    assert (hf / "vocab.txt").read_bytes() == vocab.read_bytes()
    assert json.loads((hf / "tokenizer_config.json").read_text())["do_lower_case"] is False


def test_a_bucket_run_and_a_fine_tune_from_it_carry_the_tokenizer_on(cased, shared_dir, tmp_path):
    """The cased run checkpointed into an s3:// directory: its checkpoint there carries the records' vocab and
    casing as a local one does (and its export above came from there). Google's MRPC records come without a
    manifest (no vocab named): a fine-tune from that URL takes the --init-checkpoint's vocab and casing, and
    its export has a tokenizer without --vocab."""
    from bertprep import formats, storage
    from bertprep.formats.schemas import GLUE
    from trainer import run_state

    bucket, _hf, vocab = cased
    vocab = vocab.read_bytes()
    ((_step, step),) = run_state.list_checkpoints(bucket)
    assert storage.read_bytes(storage.join(step, "vocab.txt")) == vocab
    assert json.loads(storage.read_bytes(storage.join(step, "tokenizer_config.json")))["do_lower_case"] is False

    glue = shared_dir / "fixtures" / "finetune" / "glue"
    mrpc = tmp_path / "mrpc"
    size = len(load_vocab(str(cased[2])).tokens)  # the ids within the cased model's 3,000 rows
    records = [dict(r, input_ids=r["input_ids"] % size)
               for r in list(formats.read_records(glue / "MRPC_train_seq128.tfrecord"))[:16]]
    for name in ("train.tf_record", "eval.tf_record"):
        formats.write_records(mrpc / name, records, "tfrecord", kind=GLUE)
    assert main(["finetune", "--task", "mrpc", "--data", str(mrpc), "--format", "tfrecord", "--init-checkpoint",
                 bucket, "--steps", "1", "--batch-size", "8", "--no-eval", "--output-dir", str(tmp_path / "out"),
                 "--checkpoint-dir", str(tmp_path / "tuned"), "--quiet"]) == 0
    (step,) = [p for p in (tmp_path / "tuned").iterdir() if p.name.startswith("ckpt-")]
    assert (step / "vocab.txt").read_bytes() == vocab
    assert json.loads((step / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert convert_line(tmp_path / "tuned", tmp_path / "hf", "--to", "hf") == (0, "")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"]
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert "pipeline_tag: text-classification" in (tmp_path / "hf" / "README.md").read_text()


# ---------------------------------------------------------------- issue 57, class 4: what the checkpoint records


def _step(checkpoint_dir):
    (step,) = [p for p in checkpoint_dir.iterdir() if p.name.startswith("ckpt-")]
    return step


def test_an_export_keeps_to_the_vocab_and_casing_its_checkpoint_records(uncased, cased, golden_dir, tmp_path):
    """--cased of an uncased checkpoint made every capitalised word [UNK]; --vocab replaced the vocab the model
    was trained with. Both are refused naming what the checkpoint records; the same vocab and casing are taken."""
    from transformers import AutoTokenizer

    checkpoint_dir, step, out = uncased[0], _step(uncased[0]), tmp_path / "out"
    assert convert_line(checkpoint_dir, out, "--to", "hf", "--cased") == (
        2, f"trainer checkpoint: error: --cased: {step} was trained uncased (do_lower_case true in "
           f"{step / 'tokenizer_config.json'}): leave the flag out")
    assert convert_line(checkpoint_dir, out, "--to", "bertprep", "--cased")[0] == 2  # any kind it writes
    assert convert_line(checkpoint_dir, out, "--to", "hf", "--vocab", cased[2]) == (
        2, f"trainer checkpoint: error: --vocab {cased[2]}: not the vocab {step} was trained with "
           f"({step / 'vocab.txt'}: line 1032 is '[', 'A' in --vocab): leave --vocab out")
    assert not out.exists()
    assert convert_line(checkpoint_dir, out, "--to", "hf", "--vocab", golden_dir / "vocab.txt", "--uncased") == (0, "")
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer("The City")["input_ids"] == tokenizer("the city")["input_ids"]


def test_a_cased_tokenizer_over_a_vocab_without_capitals_is_refused_or_said(shared_dir, golden_dir, tmp_path):
    """--cased with the uncased golden vocab is refused; a checkpoint that records it was trained so is exported
    as it was trained (its ids are the model's), with a note naming both."""
    import shutil

    from transformers import AutoTokenizer

    from trainer.checkpoint import convert

    hf_tiny, vocab = shared_dir / "fixtures" / "checkpoints" / "hf_tiny", golden_dir / "vocab.txt"
    assert convert_line(hf_tiny, tmp_path / "out", "--to", "hf", "--vocab", vocab, "--cased") == (
        2, f"trainer checkpoint: error: --cased: {vocab} holds no capital letter, so a cased tokenizer makes every "
           "capitalised word [UNK]: give --uncased, or the cased vocab")
    src = tmp_path / "src"
    shutil.copytree(hf_tiny, src)
    shutil.copyfile(vocab, src / "vocab.txt")
    (src / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    summary = convert(str(src), str(tmp_path / "hf"), "hf")
    assert summary["lower_case"] is False and summary["notes"] == (
        f"{src / 'model.safetensors'} was trained cased (do_lower_case false in {src / 'tokenizer_config.json'}), "
        f"but {src / 'vocab.txt'} holds no capital letter, so a cased tokenizer makes every capitalised word [UNK]")
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert tokenizer("The", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id]


def test_a_google_export_keeps_the_casing_it_was_exported_with(shared_dir, golden_dir, tmp_path):
    """--to google wrote vocab.txt alone: a model given --uncased over a vocab with capitals came back cased (the
    vocab's own evidence) from its Google directory, in a later --to hf and for finetune's records check. It now
    carries tokenizer_config.json beside vocab.txt, as --to bertprep does, and every reader takes the casing there."""
    hf_tiny = shared_dir / "fixtures" / "checkpoints" / "hf_tiny"
    lines = (golden_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[2000] = lines[2000].capitalize()  # a capital: the vocab alone would say cased
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(lines), encoding="utf-8")
    assert convert_line(hf_tiny, tmp_path / "google", "--to", "google", "--vocab", vocab, "--uncased") == (0, "")
    config = json.loads((tmp_path / "google" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["vocab_sha256"] == hashlib.sha256(vocab.read_bytes()).hexdigest()
    assert convert_line(tmp_path / "google", tmp_path / "hf", "--to", "hf") == (0, "")
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"] is True


def _records_line(argv, capsys, monkeypatch):
    """`trainer ARGV`'s exit code and one stderr line; a trained step fails the test."""
    import trainer.finetuning
    import trainer.pretraining

    def trained(*_args, **_kwargs):
        raise AssertionError("a step was trained before the records were checked")

    monkeypatch.setattr(trainer.finetuning, "train_loop", trained)
    monkeypatch.setattr(trainer.pretraining, "train_loop", trained)
    code = main([*map(str, argv), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return code, lines[0]


def test_records_of_another_vocab_or_casing_than_the_checkpoint_are_refused(uncased, cased, shared_dir, golden_dir,
                                                                           tmp_path, capsys, monkeypatch):
    """create-glue's manifest and a pretraining manifest record the vocab and casing, a checkpoint its own:
    fine-tuning MRPC records of the cased vocab from the uncased checkpoint (their ids are other tokens to it),
    records made lower-cased from a checkpoint trained cased, or pretraining on from it with the cased records,
    ends in one line naming both, before any step."""
    import shutil

    checkpoint_dir, step = uncased[0], _step(uncased[0])
    mrpc = shared_dir / "fixtures" / "finetune" / "glue" / "MRPC"
    for name, vocab, casing in (("cased", cased[2], ["--no-lower-case"]), ("uncased", golden_dir / "vocab.txt", [])):
        assert bertprep_main(["create-glue", "--task", "mrpc", "--data-dir", str(mrpc), "--vocab", str(vocab),
                              "--out", str(tmp_path / name), "--seq", "64", "--quiet", *casing]) == 0
    finetune = ["finetune", "--task", "mrpc", "--format", "tfrecord", "--steps", "1", "--batch-size", "4",
                "--output-dir", tmp_path / "out", "--init-checkpoint"]
    assert _records_line([*finetune, checkpoint_dir, "--data", tmp_path / "cased"], capsys, monkeypatch) == (
        2, f"trainer: error: {tmp_path / 'cased' / 'manifest.json'}: records made with the vocab {cased[2]}, {step} "
           f"was trained with {step / 'vocab.txt'} (line 1032 is '[', 'A' in the records'): make the records "
           "with its vocab")
    trained_cased = tmp_path / "trained-cased"
    shutil.copytree(step, trained_cased)
    (trained_cased / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert _records_line([*finetune, trained_cased, "--data", tmp_path / "uncased"], capsys, monkeypatch) == (
        2, f"trainer: error: {tmp_path / 'uncased' / 'manifest.json'}: records made uncased, {trained_cased} was "
           f"trained cased (do_lower_case false in {trained_cased / 'tokenizer_config.json'}): make the records "
           "with --no-lower-case")
    records = next(p.parent for p in (cased[1].parent / "records").rglob("manifest.json"))
    code, line = _records_line(["--format", "tfrecord", "--data", records, "--init-checkpoint", checkpoint_dir,
                                "--steps", "1", "--batch-size", "4"], capsys, monkeypatch)
    assert code == 2 and line.startswith(f"trainer: error: {records / 'manifest.json'}: records made with the vocab ")
    assert f", {step} was trained with {step / 'vocab.txt'} (" in line


def test_resuming_with_records_of_another_vocab_than_the_checkpoint_carries_is_refused(uncased, golden_dir, tmp_path,
                                                                                       capsys, monkeypatch):
    """--resume compared the settings, whose model has the vocab's size only: records made with another vocab of
    that size (two tokens swapped) trained on as if their ids were the same tokens. Refused, naming both, before
    any step; the records the checkpoint was made from resume as before."""
    import shutil

    checkpoint_dir = tmp_path / "ckpt"
    shutil.copytree(uncased[0], checkpoint_dir)
    lines = (golden_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[2000], lines[2001] = lines[2001], lines[2000]
    swapped = tmp_path / "swapped-vocab.txt"
    swapped.write_text("\n".join(lines), encoding="utf-8")
    records = {}
    for name, vocab in (("swapped", swapped), ("same", golden_dir / "vocab.txt")):
        assert bertprep_main(["create", "--input", str(golden_dir / "corpus.txt"), "--vocab", str(vocab), "--out",
                              str(tmp_path / name), "--seq", "64", "--pred", "10", "--dupe-factor", "1", "--workers",
                              "1", "--quiet"]) == 0
        records[name] = next(p.parent for p in (tmp_path / name).rglob("manifest.json"))
    config = bert_config(tmp_path, 0.0, vocab_size=len(lines) - (lines[-1] == ""))
    resume = ["--format", "tfrecord", "--bert-config", config, "--steps", "2", "--batch-size", "4", "--checkpoint-dir",
              checkpoint_dir, "--resume"]
    step = _step(checkpoint_dir)
    code, line = _records_line([*resume, "--data", records["swapped"]], capsys, monkeypatch)
    assert code == 2 and line.startswith(
        f"trainer: error: {records['swapped'] / 'manifest.json'}: records made with the vocab {swapped}, {step} was "
        f"trained with {step / 'vocab.txt'} (line 2001 is "), line
    monkeypatch.undo()
    assert main([*map(str, resume), "--data", str(records["same"]), "--quiet"]) == 0  # all steps done already


def test_a_checkpoint_whose_vocab_was_replaced_is_refused(uncased, tmp_path):
    """Our checkpoints record their vocab's sha256 in tokenizer_config.json: a vocab.txt put in its place later
    (the same size, two tokens swapped) was taken for the model's own, by the export and every check."""
    import shutil

    checkpoint_dir = tmp_path / "ckpt"
    shutil.copytree(uncased[0], checkpoint_dir)
    step = _step(checkpoint_dir)
    lines = (step / "vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[2000], lines[2001] = lines[2001], lines[2000]
    (step / "vocab.txt").write_text("\n".join(lines), encoding="utf-8")
    code, line = convert_line(checkpoint_dir, tmp_path / "out", "--to", "hf")
    assert code == 1 and line.startswith(
        f"trainer checkpoint: error: {step / 'vocab.txt'}: not the vocab this checkpoint was trained with "
        f"({step / 'tokenizer_config.json'} records vocab_sha256 "), line
    assert line.endswith("put its vocab back") and not (tmp_path / "out").exists()
