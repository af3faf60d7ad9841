"""`bertprep tokenize --format megatron` against Megatron-Core itself: its IndexedDataset reads our files, its
IndexedDatasetBuilder writes the same bytes for the same ids, its BERTMaskedWordPieceDataset builds BERT samples
from them; and the stage's own promises (workers, resume, bad input, validate, inspect, the record formats'
choices unchanged)."""

import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import bertprep
from bertprep.cli import main
from bertprep.errors import DataError, UsageError
from bertprep.formats import codecs
from bertprep.stages.create import sample_paths
from bertprep.tokenization import LineTokenizer, load_vocab
from test_create import fail_after_writing

# Megatron-Core comes in through fixtures, when the first test here needs it, and the module's tests stay on one
# xdist worker: imported at collection, it cost every worker ~2 s of CPU (beyond the torch it imports), most of them
# for nothing.
pytestmark = pytest.mark.xdist_group("tokenize")


@pytest.fixture(scope="module")
def megatron_indexed():
    return pytest.importorskip("megatron.core.datasets.indexed_dataset")


@pytest.fixture(scope="module")
def torch(megatron_indexed):
    return pytest.importorskip("torch")

SEQUENCES = codecs.sequence_names()[0]
CORPUS, VOCAB = sample_paths()


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """The embedded sample corpus tokenized: (output directory, its summary)."""
    out = tmp_path_factory.mktemp("tokenized")
    summary = bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(out), engine=bertprep.EngineOptions(workers=1))
    return out / "sample_corpus", summary


def shards():
    """[(split, shard path)] of the sample corpus, in its order."""
    return [(split, os.path.join(CORPUS, split, name)) for split in ("training", "test")
            for name in sorted(os.listdir(os.path.join(CORPUS, split)))]


def expected_sequences(path, tokenizer):
    """(each kept line's ids, document indices) of a text shard, read here line by line: a blank line ends a
    document, a line that tokenizes to nothing is skipped, empty documents vanish."""
    sequences, documents, in_document = [], [0], False
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            ids = tokenizer.encode([line.strip()])[0].tolist() if line.strip() else []
            if ids:
                sequences.append(ids)
                in_document = True
            elif not line.strip() and in_document:
                documents.append(len(sequences))
                in_document = False
    if in_document:
        documents.append(len(sequences))
    return sequences, documents


def prefix_of(out, split, shard):
    return str(out / split / (os.path.splitext(os.path.basename(shard))[0] + "_text_sentence"))


def test_megatron_indexed_dataset_reads_every_sentence_and_document(tokenized, megatron_indexed):
    out, summary = tokenized
    tokenizer = LineTokenizer(load_vocab(VOCAB))
    total = 0
    for split, shard in shards():
        dataset = megatron_indexed.IndexedDataset(prefix_of(out, split, shard))
        sequences, documents = expected_sequences(shard, tokenizer)
        assert len(dataset) == len(sequences) and dataset.index.dtype == np.uint16  # 2,000 ids: Megatron's uint16
        assert [dataset[i].tolist() for i in range(len(dataset))] == sequences
        assert dataset.document_indices.tolist() == documents
        total += len(sequences)
    assert total == sum(c["sequences"] for c in summary["counts"].values()) == 454
    words = (out / "data-path.txt").read_text().split()  # Megatron's --data-path: weight prefix weight prefix ...
    assert words[1::2] == [prefix_of(out, split, shard) for split, shard in shards() if split == "training"]
    test_words = (out / "test-data-path.txt").read_text().split()
    assert test_words[1::2] == [prefix_of(out, split, shard) for split, shard in shards() if split == "test"]
    datasets = [megatron_indexed.IndexedDataset(p) for p in words[1::2] + test_words[1::2]]  # held: arrays map files
    words += test_words
    assert [int(w) for w in words[0::2]] == [int(d.sequence_lengths.sum()) for d in datasets]  # weights: tokens


# megatron-core 0.16.1's builder hands NumPy 2 a tensor through __array__ without `copy`: its warning, not ours.
@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")
@pytest.mark.parametrize("vocab_size", [2000, 65499, 65500, 100000])
def test_our_bytes_are_indexed_dataset_builders(tmp_path, vocab_size, megatron_indexed, torch):
    module = codecs.get(SEQUENCES).implementation
    dtype = module.optimal_dtype(vocab_size)
    assert dtype == megatron_indexed.DType.optimal_dtype(vocab_size)
    rng = np.random.default_rng(vocab_size)
    documents = [[rng.integers(0, vocab_size, rng.integers(1, 40)).tolist() for _ in range(rng.integers(1, 6))]
                 for _ in range(7)]
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype.type)
    for sentences in documents:
        builder.add_document(torch.tensor([i for s in sentences for i in s]), [len(s) for s in sentences])
    builder.finalize(str(tmp_path / "theirs.idx"))
    lengths = [len(s) for sentences in documents for s in sentences]
    ends = np.cumsum([0] + [len(sentences) for sentences in documents])
    tokens = np.array([i for sentences in documents for s in sentences for i in s], dtype=np.int64)
    module.write(str(tmp_path / "ours"), tokens, lengths, ends, dtype)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()


@pytest.fixture(scope="module")
def vocab_tokenizer(megatron_indexed):
    """Our vocab.txt as Megatron's BERT datasets ask a tokenizer (a MegatronLegacyTokenizer): its size, inverse
    vocab and special ids; vocab_tokenizer(path) makes one."""

    class VocabTokenizer(pytest.importorskip("megatron.core.datasets.megatron_tokenizer").MegatronLegacyTokenizer):
        def __init__(self, path):
            super().__init__(path)
            self._vocab = load_vocab(path)

        def tokenize(self, text):
            return LineTokenizer(self._vocab).encode([text])[0]

        @property
        def vocab(self):
            return self._vocab.ids

        @property
        def inv_vocab(self):
            return dict(enumerate(self._vocab.tokens))

        @property
        def vocab_size(self):
            return self._vocab.size

        cls = property(lambda self: self._vocab.id_of("[CLS]"))
        sep = property(lambda self: self._vocab.id_of("[SEP]"))
        mask = property(lambda self: self._vocab.id_of("[MASK]"))
        pad = property(lambda self: self._vocab.id_of("[PAD]"))

    return VocabTokenizer


@pytest.fixture
def single_process_group(tmp_path, torch):
    """Megatron's sample index is built by rank 0 of a process group: a group of one, on CPU (gloo)."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                                         world_size=1)
    yield
    torch.distributed.destroy_process_group()


def is_run_of(tokens, document):
    """Whether `tokens` occur as one contiguous run in `document` (a flat list of ids)."""
    n = len(tokens)
    return any(document[i:i + n] == tokens for i in range(len(document) - n + 1))


def test_bert_masked_wordpiece_dataset_builds_samples_from_our_files(tokenized, tmp_path, single_process_group,
                                                                    megatron_indexed, vocab_tokenizer):
    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset, BERTMaskedWordPieceDatasetConfig
    from megatron.core.datasets.utils import Split

    out, _ = tokenized
    tokenizer = vocab_tokenizer(VOCAB)
    config = BERTMaskedWordPieceDatasetConfig(
        random_seed=1234, sequence_length=64, split="1,0,0", path_to_cache=str(tmp_path / "cache"),
        tokenizer=tokenizer, masking_probability=0.15, short_sequence_probability=0.1, masking_max_ngram=1,
        masking_do_full_word=False, masking_do_permutation=False, masking_use_longer_ngrams=False,
        masking_use_geometric_distribution=False, classification_head=True)
    split, shard = shards()[0]
    prefix = prefix_of(out, split, shard)
    indexed = megatron_indexed.IndexedDataset(prefix)
    dataset = BERTMaskedWordPieceDataset(indexed, prefix, np.arange(len(indexed.document_indices) - 1), 100,
                                         Split.train, config)
    documents = [[i for s in range(a, b) for i in indexed[s].tolist()]
                 for a, b in zip(indexed.document_indices[:-1], indexed.document_indices[1:])]
    assert len(dataset) > 10
    masked = 0
    for index in range(len(dataset)):
        sample = dataset[index]
        real = int(sample["padding_mask"].sum())
        text = sample["text"][:real].copy()
        loss = np.flatnonzero(sample["loss_mask"])
        masked += len(loss)
        text[loss] = sample["labels"][loss]  # the ids before masking
        types = sample["types"][:real]
        separators = np.flatnonzero(text == tokenizer.sep)
        assert text[0] == tokenizer.cls and text[-1] == tokenizer.sep and types[0] == 0 and types[-1] == 1
        boundary = int(np.argmax(types == 1))
        assert text[boundary - 1] == tokenizer.sep and boundary - 1 in separators
        a, b = text[1:boundary - 1].tolist(), text[boundary:-1].tolist()
        assert a and b and (types[:boundary] == 0).all() and (types[boundary:] == 1).all()
        # A and B are runs of one document's sentences (Megatron trims either end of the longer to fit).
        assert any(is_run_of(a, d) and is_run_of(b, d) for d in documents), index
        if not sample["truncated"]:
            assert any(is_run_of(b + a if sample["is_random"] else a + b, d) for d in documents), index
        assert ((loss > 0) & (loss < real - 1)).all() and not np.isin(loss, [0, boundary - 1, real - 1]).any()
    assert masked > 0


def test_megatrons_dataset_builder_takes_data_path_txt_as_its_data_path(tokenized, tmp_path, single_process_group,
                                                                        vocab_tokenizer):
    """What `--data-path $(cat data-path.txt)` gives Megatron: its own parser and BlendedMegatronDatasetBuilder."""
    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset, BERTMaskedWordPieceDatasetConfig
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.utils import get_blend_from_list

    out, summary = tokenized
    prefixes, weights = get_blend_from_list((out / "data-path.txt").read_text().split())
    assert len(prefixes) == 8 and sum(weights) == summary["counts"]["training"]["tokens"]
    config = BERTMaskedWordPieceDatasetConfig(
        random_seed=1234, sequence_length=64, blend=(prefixes, weights), split="100,0,0",
        path_to_cache=str(tmp_path / "cache"), tokenizer=vocab_tokenizer(VOCAB), masking_probability=0.15,
        short_sequence_probability=0.1, masking_max_ngram=1, masking_do_full_word=False,
        masking_do_permutation=False, masking_use_longer_ngrams=False, masking_use_geometric_distribution=False,
        classification_head=True)
    train, valid, test = BlendedMegatronDatasetBuilder(BERTMaskedWordPieceDataset, [200, 0, 0], lambda: True,
                                                       config).build()
    assert len(train) >= 200 and valid is None and test is None
    samples = [train[i] for i in range(0, 200, 20)]
    assert all(s["text"][0] == config.tokenizer.cls and s["loss_mask"].sum() > 0 for s in samples)


def test_workers_give_the_same_bytes_and_a_rerun_resumes(tokenized, tmp_path):
    out, _ = tokenized
    again = bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path),
                              engine=bertprep.EngineOptions(workers=2))
    assert not again.complete_before
    ours = tmp_path / "sample_corpus"
    names = sorted(p.relative_to(out) for p in out.rglob("*.[bi][id][nx]"))
    assert len(names) == 18 and names == sorted(p.relative_to(ours) for p in ours.rglob("*.[bi][id][nx]"))
    assert all((out / name).read_bytes() == (ours / name).read_bytes() for name in names)
    manifest = json.loads((ours / "manifest.json").read_text())
    assert manifest["vocab"]["size"] == 2000 and manifest["dtype"] == "uint16"
    entry = manifest["files"][str(names[0])]
    assert entry["bytes"] == (ours / names[0]).stat().st_size and len(entry["sha256"]) == 64
    (ours / names[0]).write_bytes(b"")  # damaged: the rerun redoes that shard only
    rerun = bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path))
    assert rerun["shards_tokenized"] == 1 and (ours / names[0]).read_bytes() == (out / names[0]).read_bytes()
    assert bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path)).complete_before


def test_a_rerun_from_moved_inputs_keeps_the_files_and_names_the_new_place(tmp_path):
    """Shards moved with their text unchanged are complete (their sha256), and the rerun kept the manifest's
    entries naming the old place: a resumed run's manifest said other than a fresh run's from the new place
    (create's follow_moved_inputs, now tokenize's too). Nothing is rewritten."""
    shutil.copytree(CORPUS, tmp_path / "before")
    args = {"corpus": "c", "vocab": VOCAB, "engine": bertprep.EngineOptions(workers=1)}
    bertprep.tokenize(input=(str(tmp_path / "before"),), out=str(tmp_path / "out"), **args)
    (tmp_path / "before").rename(tmp_path / "after")
    assert bertprep.tokenize(input=(str(tmp_path / "after"),), out=str(tmp_path / "out"), **args).complete_before
    bertprep.tokenize(input=(str(tmp_path / "after"),), out=str(tmp_path / "fresh"), **args)
    resumed, fresh = (json.loads((tmp_path / name / "c" / "manifest.json").read_text()) for name in ("out", "fresh"))
    assert resumed["files"] == fresh["files"]
    assert all(entry["source"].startswith(str(tmp_path / "after")) for entry in resumed["files"].values())


def test_an_empty_shard_is_one_line_naming_it_and_nothing_is_written(tmp_path):
    shard = tmp_path / "in" / "training" / "empty_training_0.txt"
    shard.parent.mkdir(parents=True)
    shard.write_text("\n\n")
    with pytest.raises(DataError, match=f"^{shard}: no documents"):
        bertprep.tokenize(input=(str(tmp_path / "in"),), vocab=VOCAB, out=str(tmp_path / "out"))
    assert not list((tmp_path / "out").rglob("*.bin")) and not list((tmp_path / "out").rglob("*.idx"))


def test_a_failed_rerun_leaves_no_data_path_txt_of_the_earlier_run(tmp_path):
    """The rerun removed a shard's files and rewrote another, then failed on a third: data-path.txt still named
    the removed prefix and the rewritten one's old weight. It is written last, so a failed run leaves none."""
    training = tmp_path / "in" / "training"
    training.mkdir(parents=True)
    text = open(os.path.join(CORPUS, "training", sorted(os.listdir(os.path.join(CORPUS, "training")))[0])).read()
    (training / "s_0.txt").write_text(text)
    (training / "s_1.txt").write_text(text)
    args = {"input": (str(tmp_path / "in"),), "vocab": VOCAB, "out": str(tmp_path / "out")}
    bertprep.tokenize(**args)
    data_path = tmp_path / "out" / "in" / "data-path.txt"
    assert data_path.read_text().count("_text_sentence") == 2
    (training / "s_0.txt").unlink()
    (training / "s_1.txt").write_text(text + "\nOne more document here.\n")
    (training / "s_2.txt").write_text("\x01\n")
    with pytest.raises(DataError, match="s_2.txt: no documents"):
        bertprep.tokenize(**args)
    assert not data_path.exists()
    (training / "s_2.txt").unlink()
    bertprep.tokenize(**args)
    assert data_path.read_text().split()[1].endswith("s_1_text_sentence")


def test_validate_fails_a_run_that_did_not_finish(tmp_path):
    """A run that failed (or was killed) after its first shards left a manifest listing them and no data-path.txt:
    validate read the pairs there and said SOUND, exit 0. The manifest of a finished run records its data path."""
    training = tmp_path / "in" / "training"
    training.mkdir(parents=True)
    text = open(os.path.join(CORPUS, "training", sorted(os.listdir(os.path.join(CORPUS, "training")))[0])).read()
    (training / "s_0.txt").write_text(text)
    (training / "s_1.txt").write_text("\x01\n")
    args = {"input": (str(tmp_path / "in"),), "vocab": VOCAB, "out": str(tmp_path / "out"),
            "engine": bertprep.EngineOptions(workers=1)}
    with pytest.raises(DataError, match="s_1.txt: no documents"):
        bertprep.tokenize(**args)
    out = tmp_path / "out" / "in"
    assert list(out.rglob("s_0_text_sentence.idx")) and not (out / "data-path.txt").exists()
    run = subprocess.run([sys.executable, "-m", "bertprep", "validate", str(out)], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout
    assert (f"  {out}/manifest.json: written by a `bertprep tokenize` run that did not finish (killed or failed before "
            "it wrote data-path.txt): rerun it with the same --input and --out to finish; the shards it wrote are "
            "kept\n") in run.stdout
    (training / "s_1.txt").write_text(text)
    bertprep.tokenize(**args)
    assert bertprep.validate(paths=(str(out),)).sound


def test_validate_names_the_listed_pairs_that_are_gone(tmp_path):
    """A shard's .bin and .idx lost (a partial copy, a deleted file) while the manifest and data-path.txt list them:
    validate read the pairs left and said SOUND, and of a directory with none left "nothing to validate"."""
    bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path), engine=bertprep.EngineOptions(workers=1))
    copy = tmp_path / "sample_corpus"  # made here: a copy's data-path.txt names the place it was copied from
    prefix = prefix_of(copy, *shards()[3])
    os.remove(prefix + ".bin")
    os.remove(prefix + ".idx")
    report = bertprep.validate(paths=(str(copy),))
    assert not report.sound and report["checks"]["sequence_manifest"]["failures"] == 2
    assert [(f["file"], f["message"]) for f in report["findings"]] == [
        (prefix + suffix, "listed in manifest.json but missing") for suffix in (".bin", ".idx")]
    assert bertprep.validate(paths=(prefix_of(copy, *shards()[0]) + ".idx",)).sound  # one pair: only it is read
    for path in [*copy.rglob("*.bin"), *copy.rglob("*.idx")]:
        path.unlink()
    run = subprocess.run([sys.executable, "-m", "bertprep", "validate", str(copy / "test")], capture_output=True,
                         text=True)
    assert run.returncode == 1 and run.stderr == ""
    assert f"  {prefix_of(copy, *shards()[-1])}.idx: listed in manifest.json but missing\n" in run.stdout
    assert "sequence_manifest      2 failing" in run.stdout


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_validate_fails_data_path_txt_of_another_place(tmp_path, how):
    """tokenize's lists hold absolute prefixes: an output moved (or copied) since had lists naming where it was,
    which Megatron could not open (or read from the other copy), and validate said SOUND. The lists must name this
    directory's pairs; rerunning tokenize with the new --out rewrites them and keeps the shards."""
    import shutil

    args = {"input": (CORPUS,), "vocab": VOCAB, "engine": bertprep.EngineOptions(workers=1)}
    bertprep.tokenize(out=str(tmp_path / "first"), **args)
    (shutil.move if how == "moved" else shutil.copytree)(tmp_path / "first", tmp_path / "second")
    out = tmp_path / "second" / "sample_corpus"
    run = subprocess.run([sys.executable, "-m", "bertprep", "validate", str(out)], capture_output=True, text=True)
    assert run.returncode == 1 and "sequence_manifest      2 failing" in run.stdout
    assert (f"  {out}/data-path.txt: names {prefix_of(tmp_path / 'first' / 'sample_corpus', *shards()[0])}, no "
            f"training dataset of {out} (moved or copied here since tokenize wrote the list?): rerun `bertprep "
            f"tokenize` with --out {tmp_path / 'second'} to rewrite it; its finished shards are kept\n") in run.stdout
    assert f"  {out}/test-data-path.txt: names {tmp_path / 'first'}" in run.stdout
    assert bertprep.tokenize(out=str(tmp_path / "second"), **args).complete_before
    assert bertprep.validate(paths=(str(out),)).sound
    (out / "data-path.txt").write_text(" ".join((out / "data-path.txt").read_text().split()[2:]) + "\n")
    (out / "test-data-path.txt").unlink()
    findings = [(f["file"], f["message"]) for f in bertprep.validate(paths=(str(out),))["findings"]]
    assert findings == [(f"{out}/data-path.txt", "lists 7 of the 8 training datasets the manifest lists"),
                        (f"{out}/test-data-path.txt", "missing (tokenize writes it last, the test prefixes for "
                         "Megatron's --valid-data-path): rerun `bertprep tokenize` with the same --input and --out to "
                         "write it")]


def test_validate_of_an_output_copied_under_whitespace_advises_a_rerun_that_can_run(tmp_path):
    """An output copied to `my runs/`: validate advised `rerun bertprep tokenize with --out …/my runs`, which
    tokenize refuses (a prefix with whitespace, that no data-path.txt can list). Now it says to move the folder."""
    import shutil

    args = {"input": (CORPUS,), "vocab": VOCAB, "engine": bertprep.EngineOptions(workers=1)}
    bertprep.tokenize(out=str(tmp_path / "first"), **args)
    shutil.copytree(tmp_path / "first", tmp_path / "my runs")
    out = tmp_path / "my runs" / "sample_corpus"
    messages = [f["message"] for f in bertprep.validate(paths=(str(out),))["findings"]]
    assert len(messages) == 2 and all(message.endswith(
        f"(moved or copied here since tokenize wrote the list?): {out} holds whitespace, which no data-path.txt can "
        "list (it is read as words): move the folder to a path without whitespace, then rerun `bertprep tokenize` "
        "with --out there to rewrite it; its finished shards are kept") for message in messages)
    with pytest.raises(UsageError, match="holds whitespace"):  # the rerun advised before
        bertprep.tokenize(out=str(tmp_path / "my runs"), **args)


def test_validate_of_data_path_txt_reads_the_pairs_it_names(tmp_path):
    """`bertprep validate DIR/data-path.txt` read the list as a text shard: "SOUND … 1 docs / 1 sentences in 1
    shards" whatever it named. It now reads the pairs it names and checks the list as validate of DIR does."""
    import shutil

    bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path / "first"),
                      engine=bertprep.EngineOptions(workers=1))
    listed = tmp_path / "first" / "sample_corpus" / "data-path.txt"
    report = bertprep.validate(paths=(str(listed),))
    assert report.sound and not report["text_shards"]
    assert [(s["sequences"], len(s["files"])) for s in report["sequences"]] == [(392, 8)]
    test_list = bertprep.validate(paths=(str(listed.with_name("test-data-path.txt")),))
    assert test_list.sound and test_list["sequences"][0]["sequences"] == 62
    shutil.move(tmp_path / "first", tmp_path / "second")
    moved = tmp_path / "second" / "sample_corpus" / "data-path.txt"
    run = subprocess.run([sys.executable, "-m", "bertprep", "validate", str(moved)], capture_output=True, text=True)
    assert run.returncode == 1 and "sequence_manifest      1 failing" in run.stdout
    assert f"  {moved}: names {listed.parent}/training/" in run.stdout


def _validate_compare(*paths):
    return subprocess.run([sys.executable, "-m", "bertprep", "validate", *map(str, paths), "--compare", "--quiet"],
                          capture_output=True, text=True)


def test_validate_compare_of_two_tokenize_runs(tokenized, tmp_path):
    """`validate --compare A B` of two tokenize outputs ended "--compare: no record files of a common format to
    compare", exit 2: the way to prove two runs (other workers, engines, places) wrote the same data was none. It
    compares them as it compares two create outputs: one stream a side (training, then test), every sequence's ids
    and every document boundary, exit 0 when equal, 1 with the first difference named in both files."""
    out, _summary = tokenized
    bertprep.tokenize(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path / "two"), engine=bertprep.EngineOptions(workers=2))
    run = _validate_compare(out, tmp_path / "two" / "sample_corpus")
    assert (run.returncode, run.stderr) == (0, ""), run.stdout + run.stderr
    assert "compare megatron vs megatron: equal (454 sequences in " in run.stdout
    report = bertprep.validate(paths=(str(out), str(tmp_path / "two" / "sample_corpus")), compare=True)
    assert report.sound and report["compare"][0]["sequences"] == 454 and report["compare"][0]["equal"]
    changed = tmp_path / "changed"
    shutil.copytree(CORPUS, changed)
    second = changed / "training" / os.path.basename(shards()[1][1])
    lines = second.read_text(encoding="utf-8").split("\n")
    row = next(i for i, line in enumerate(lines) if line.strip())
    lines[row] = "zzzz " + lines[row]  # the first sentence of the second shard gets one more word in front
    second.write_text("\n".join(lines), encoding="utf-8")
    bertprep.tokenize(input=(str(changed),), corpus="sample_corpus", vocab=VOCAB, out=str(tmp_path / "other"),
                      engine=bertprep.EngineOptions(workers=1))
    other = tmp_path / "other" / "sample_corpus"
    first = len(megatron_lengths(prefix_of(out, *shards()[0])))
    run = _validate_compare(out, other)
    assert (run.returncode, run.stderr) == (1, ""), run.stdout + run.stderr
    a, b = (prefix_of(side, *shards()[1]) + ".bin" for side in (out, other))
    first_id = int(codecs.get(SEQUENCES).read_sequences(prefix_of(out, *shards()[1])).tokens[0])
    line = f"compare megatron vs megatron: sequence {first:,}: ids[0]: {first_id} vs "
    assert line in run.stdout and f"({a} sequence 0, document 0 vs {b} sequence 0, document 0)\n" in run.stdout
    assert "  FAILED compare                1 failing\n" in run.stdout


def test_validate_compare_names_a_document_boundary_and_the_longer_side(tokenized, tmp_path):
    """The same sentences in other documents differ (Megatron's samples never cross a document), as does one side
    ending first."""
    out, _summary = tokenized
    joined = tmp_path / "joined"
    shutil.copytree(CORPUS, joined)
    shard = joined / "training" / os.path.basename(shards()[0][1])
    text = shard.read_text(encoding="utf-8")
    shard.write_text(text.replace("\n\n", "\n", 1), encoding="utf-8")  # its first two documents made one
    bertprep.tokenize(input=(str(joined),), corpus="sample_corpus", vocab=VOCAB, out=str(tmp_path / "j"),
                      engine=bertprep.EngineOptions(workers=1))
    other = tmp_path / "j" / "sample_corpus"
    boundary = int(megatron_documents(prefix_of(out, *shards()[0]))[1])
    run = _validate_compare(out, other)
    assert run.returncode == 1, run.stdout + run.stderr
    a, b = (prefix_of(side, *shards()[0]) + ".idx" for side in (out, other))
    assert (f"compare megatron vs megatron: sequence {boundary:,}: a document starts here in A, not in B ({a} "
            f"sequence {boundary:,}, document 1 vs {b} sequence {boundary:,}, document 0)\n") in run.stdout
    run = _validate_compare(out / "training", out)
    assert run.returncode == 1
    total = sum(len(megatron_lengths(prefix_of(out, *shard))) for shard in shards() if shard[0] == "training")
    assert (f"compare megatron vs megatron: sequence {total:,}: only B has it ({prefix_of(out, *shards()[-1])}.bin "
            f"sequence 0, document 0); the other ends after {total:,} sequences\n") in run.stdout


def test_validate_compare_of_a_tokenize_output_and_records_says_what_each_holds(tokenized, golden_dir, capsys):
    """A tokenize output against records was "--compare: no record files of a common format to compare", of a
    directory of records: it now says which side holds what, exit 2."""
    out, _summary = tokenized
    records = golden_dir / "G1.tfrecord"
    for a, b, holds in ((out, records, "token sequences (`bertprep tokenize`), {b} records"),
                        (records, out, "records, {b} token sequences (`bertprep tokenize`)")):
        assert main(["validate", str(a), str(b), "--compare", "--quiet"]) == 2
        assert capsys.readouterr().err == (f"bertprep validate: error: --compare: {a} holds {holds.format(b=b)}: "
                                           "nothing to compare them by; compare two tokenize outputs, or two records "
                                           "directories\n")


def test_validate_compare_of_two_pairs_given_as_files_reads_no_record_file(tokenized, tmp_path, golden_dir):
    """`validate A.idx B.bin --compare` (one pair of each run) also read each file as OFRecord, the format its
    bytes were sniffed as: "compare ofrecord vs ofrecord: instance 0: A cannot be read: ….idx: record 0: at byte 0:
    truncated data (6958 of … bytes)" beside the sequences' "equal", exit 1; and a text shard beside a record
    file was "B cannot be read: … not a record file". Only the sequences are compared now."""
    out, _summary = tokenized
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    a, b = prefix_of(out, *shards()[0]) + ".idx", prefix_of(copy, *shards()[0]) + ".bin"
    run = _validate_compare(a, b)
    assert (run.returncode, run.stderr) == (0, ""), run.stdout + run.stderr
    assert [line for line in run.stdout.splitlines() if line.startswith("compare ")] == [
        f"compare megatron vs megatron: equal ({len(megatron_lengths(prefix_of(out, *shards()[0]))):,} sequences in "
        f"{len(megatron_documents(prefix_of(out, *shards()[0]))) - 1:,} documents)"]
    run = _validate_compare(golden_dir / "G1.tfrecord", shards()[0][1])  # a text shard: no record file either
    assert (run.returncode, run.stdout) == (2, "") and run.stderr == (
        f"bertprep validate: error: --compare: {golden_dir / 'G1.tfrecord'} holds records, {shards()[0][1]} text "
        "shards (`bertprep shard`): nothing to compare them by; compare two tokenize outputs, or two records "
        "directories\n")


def test_inspect_of_data_path_txt_names_a_prefix_to_inspect(tokenized):
    """`inspect DIR/data-path.txt` said "not a record file (TFRecord, OFRecord, HDF5 or Parquet): it starts with text
    ('1234 /…')": what the list is, and what to inspect instead, was left to guess. validate reads the pairs it
    names; inspect shows one file, so it names the first prefix, exit 1 as before."""
    out, _summary = tokenized
    for name, split in (("data-path.txt", "training"), ("test-data-path.txt", "test")):
        run = subprocess.run([sys.executable, "-m", "bertprep", "inspect", str(out / name)], capture_output=True,
                             text=True)
        first = prefix_of(out, *next(shard for shard in shards() if shard[0] == split))
        assert (run.returncode, run.stdout, run.stderr) == (1, "", (
            f"bertprep inspect: error: {out / name}: the --data-path list of a `bertprep tokenize` output (\"<tokens> "
            f"<prefix>\" pairs), not a record file: inspect a prefix it names ({first})\n"))
        run = subprocess.run([sys.executable, "-m", "bertprep", "inspect", first, "-n", "1"], capture_output=True,
                             text=True)
        assert run.returncode == 0 and run.stdout.startswith(f"== {first}.idx (megatron, sequences) sequence 0 ")


def megatron_lengths(prefix):
    return codecs.get(SEQUENCES).read_sequences(prefix).lengths


def megatron_documents(prefix):
    return codecs.get(SEQUENCES).read_sequences(prefix).document_indices


def test_tokenize_refuses_a_folder_of_another_stage(tmp_path):
    """`tokenize --out ROOT --corpus NAME` where ROOT/NAME is `bertprep shard`'s output took the shard manifest's
    files for an earlier run's: it deleted the text shards ("removed 3 file(s) of an earlier run") and replaced the
    manifest, exit 0. It is refused before anything is written, as shard and dedup refuse another stage's."""
    shards = tmp_path / "sharded" / "wiki"
    run = subprocess.run([sys.executable, "-m", "bertprep", "shard", "--input", CORPUS + "/training", "--out",
                          str(shards), "--train-shards", "2", "--test-shards", "1", "--quiet"], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    before = {p: p.read_bytes() for p in shards.rglob("*") if p.is_file()}
    (tmp_path / "other.txt").write_text("The cat sat.\n")
    run = subprocess.run([sys.executable, "-m", "bertprep", "tokenize", "--input", str(tmp_path / "other.txt"),
                          "--vocab", VOCAB, "--out", str(tmp_path / "sharded"), "--corpus", "wiki"],
                         capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr == (
        f"bertprep tokenize: error: {shards}/manifest.json: a manifest of bertprep shard, not of tokenize: tokenize "
        "would replace it and remove the files it lists; choose another --out or --corpus\n")
    assert {p: p.read_bytes() for p in shards.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("out", ["fresh", "made", "made_with_corpus"])
def test_a_failed_run_leaves_no_folder_it_made(tmp_path, out):
    """A run that fails once it holds its output (a shard that tokenizes to nothing) left OUT/<corpus>/, and OUT,
    behind empty, as if it had written something. The folders it made go again; one the user made stays."""
    training = tmp_path / "in" / "training"
    training.mkdir(parents=True)
    (training / "s_0.txt").write_text("\x01\n")
    root = tmp_path / "out"
    if out != "fresh":
        (root / "in" if out == "made_with_corpus" else root).mkdir(parents=True)
    with pytest.raises(DataError, match="s_0.txt: no documents"):
        bertprep.tokenize(input=(str(tmp_path / "in"),), vocab=VOCAB, out=str(root))
    left = sorted(p.relative_to(tmp_path).as_posix() for p in [root, *root.rglob("*")] if p.exists())
    assert left == {"fresh": [], "made": ["out"], "made_with_corpus": ["out", "out/in"]}[out]


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_files_of_an_input_directory_that_are_no_shards_are_named(tmp_path, stage):
    """A .md beside the shards, a subdirectory's .txt and a .txt beside training/ were left out without a word."""
    training = tmp_path / "mix" / "training"
    (training / "sub").mkdir(parents=True)
    text = open(os.path.join(CORPUS, "training", sorted(os.listdir(os.path.join(CORPUS, "training")))[0])).read()
    for name in ("a.txt", "b.md", "sub/e.txt"):
        (training / name).write_text(text)
    (tmp_path / "mix" / "d.txt").write_text(text)
    function = getattr(bertprep, stage)
    with pytest.warns(bertprep.BertprepWarning) as said:
        summary = function(input=(str(tmp_path / "mix"),), vocab=VOCAB, out=str(tmp_path / "out"))
    expected = (f"not read: {tmp_path / 'mix' / 'd.txt'}, {training / 'b.md'}, {training / 'sub' / 'e.txt'} (an input "
                "directory's shards are the *.txt files of its training/ and test/, else its own *.txt)")
    assert expected in summary["warnings"] and any(expected in str(w.message) for w in said)


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_directory_a_pattern_matches_is_named_not_read(tmp_path, stage):
    """`--input 'data/*'` read data/books.txt and left the shard tree data/wiki/ out without a word, exit 0 (the
    shell's own data/* gives data/wiki as a directory, which is read): a pattern reads the files it matches."""
    shutil.copytree(CORPUS, tmp_path / "data" / "wiki")
    shutil.copy(shards()[0][1], tmp_path / "data" / "books.txt")
    with pytest.warns(bertprep.BertprepWarning) as said:
        summary = getattr(bertprep, stage)(input=(str(tmp_path / "data" / "*"),), vocab=VOCAB,
                                           out=str(tmp_path / "out"))
    wiki = tmp_path / "data" / "wiki"
    expected = (f"not read: {wiki / 'test' / 'sample_corpus_test_0.txt'}, "
                f"{wiki / 'training' / 'sample_corpus_training_0.txt'}, "
                f"{wiki / 'training' / 'sample_corpus_training_1.txt'} and 6 more (an input directory's shards are "
                "the *.txt files of its training/ and test/, else its own *.txt; a pattern's directories never: give "
                f"such a directory to {stage.capitalize()}Options.input on its own)")  # a Python call's: a field
    assert summary["shards"] == 1
    assert expected in summary["warnings"] and any(expected in str(w.message) for w in said)


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_pipe_is_refused_as_no_regular_file(tmp_path, stage):
    """`--input <(cat shard)` was read for its sha256, then found empty by the tokenizer: `no documents (every line
    is blank or tokenizes to nothing)`, exit 1, of a pipe full of text; a FIFO no one writes waited for ever."""
    fifo = tmp_path / "f.txt"
    os.mkfifo(fifo)
    why = ("not a regular file (a pipe, as <(zcat …) gives, or a device): this stage reads each shard more than "
           "once; write it to a file first")
    command = (f"{sys.executable} -m bertprep {stage} --input <(cat {shards()[0][1]}) --vocab {VOCAB} "
               f"--out {tmp_path / 'out'} --quiet")
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    expected = rf"bertprep {stage}: error: /dev/fd/\d+: {re.escape(why)}\n"
    assert run.returncode == 2 and re.fullmatch(expected, run.stderr), run.stderr
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(fifo), "--vocab", VOCAB, "--out",
                          str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr) == (2, f"bertprep {stage}: error: {fifo}: {why}\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_directory_named_as_a_shard_is_called_a_directory(tmp_path, stage):
    """A folder training/extra.txt/ in a shard tree is found as a shard by its name, and was refused as "not a
    regular file (a pipe, as <(zcat …) gives, or a device)": it is neither."""
    shutil.copytree(CORPUS, tmp_path / "wiki")
    (tmp_path / "wiki" / "training" / "extra.txt").mkdir()
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(tmp_path / "wiki"), "--vocab", VOCAB,
                          "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, timeout=120)
    extra = tmp_path / "wiki" / "training" / "extra.txt"
    assert (run.returncode, run.stderr) == (2, f"bertprep {stage}: error: {extra}: a directory, not a regular file: "
                                               "give the files in it, or rename it\n")
    assert not (tmp_path / "out").exists()


# "each shard" was said of every stage's input, vocab's corpus and dedup's evaluation file too: each names its own
STREAM_WHY = ("not a regular file (a pipe, as <(zcat …) gives, or a device): this stage reads each input more than "
              "once; write it to a file first")


EVALUATION_WHY = STREAM_WHY.replace("each input", "each evaluation file")


@pytest.mark.parametrize("stage", ["shard", "vocab", "dedup"])
def test_a_pipe_is_refused_by_the_corpus_stages_as_by_create(tmp_path, stage):
    """`shard --input <(cat corpus.txt)` (and vocab's) ended "--input /dev/fd/63: no such file or directory", dedup's
    "not a formatted corpus directory or .jsonl file", of a pipe full of text; a FIFO the same: create's and
    tokenize's refusal now (text_inputs.refuse_stream), exit 2, nothing written, the FIFO never opened; dedup's
    line leads with --input, as its other refusals of an --input value do."""
    fifo = tmp_path / "f.jsonl"  # named as dedup's input, which a .txt is not
    os.mkfifo(fifo)
    out = tmp_path / "out" / ("vocab.txt" if stage == "vocab" else "")
    flags = f"--out {out} --quiet" + (" --corpus c" if stage == "shard" else "")
    flag = "--input " if stage == "dedup" else ""
    command = f"{sys.executable} -m bertprep {stage} --input <(printf 'One sentence.\\nTwo.\\n\\nThree.\\n') {flags}"
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    expected = rf"bertprep {stage}: error: {flag}/dev/fd/\d+: {re.escape(STREAM_WHY)}\n"
    assert run.returncode == 2 and re.fullmatch(expected, run.stderr), run.stderr
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(fifo), *flags.split()],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (2, f"bertprep {stage}: error: {flag}{fifo}: {STREAM_WHY}\n")
    assert sorted(os.listdir(tmp_path)) == ["f.jsonl"]


@pytest.mark.parametrize("stage", ["shard", "dedup"])
def test_a_fifo_in_an_input_directory_is_refused(tmp_path, stage):
    """A FIFO named as a part (b.txt; b.jsonl in dedup's formatted corpus) in an --input directory was opened (shard's
    binary check, dedup's hash) and waited for a writer for ever; it is refused as create refuses it, exit 2, before
    anything is written."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    suffix = ".jsonl" if stage == "dedup" else ".txt"
    if stage == "dedup":
        (corpus / "manifest.json").write_text("{}")
        (corpus / "a.jsonl").write_text('{"title": "a", "text": "One sentence. Two."}\n')
    else:
        shutil.copy(shards()[0][1], corpus / "a.txt")
    os.mkfifo(corpus / f"b{suffix}")
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(corpus), "--out",
                          str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (2, f"bertprep {stage}: error: {corpus / f'b{suffix}'}: {STREAM_WHY}\n")
    assert sorted(os.listdir(tmp_path)) == ["corpus"]


def test_a_pipe_is_refused_as_dedups_evaluation_set(tmp_path):
    """`dedup --decontaminate <(zcat dev.txt.gz)` (hashed, then read again) and a FIFO ended "--decontaminate
    /dev/fd/63: not squad, glue or a file", of a pipe full of text: create's refusal now, exit 2, nothing written;
    it names an evaluation file, not "each shard", and leads with --decontaminate as dedup's other lines of it do."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text("{}")
    (corpus / "a.jsonl").write_text('{"title": "a", "text": "One sentence here. Two sentences here."}\n')
    fifo = tmp_path / "dev.txt"
    os.mkfifo(fifo)
    flags = f"--input {corpus} --out {tmp_path / 'out'} --quiet --decontaminate"
    command = f"{sys.executable} -m bertprep dedup {flags} <(printf 'One sentence here.\\n')"
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    expected = rf"bertprep dedup: error: --decontaminate /dev/fd/\d+: {re.escape(EVALUATION_WHY)}\n"
    assert run.returncode == 2 and re.fullmatch(expected, run.stderr), run.stderr
    run = subprocess.run([sys.executable, "-m", "bertprep", "dedup", *flags.split(), str(fifo)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (2, f"bertprep dedup: error: --decontaminate {fifo}: {EVALUATION_WHY}\n")
    assert sorted(os.listdir(tmp_path)) == ["corpus", "dev.txt"]


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_hidden_shard_of_an_input_directory_is_named_not_read(tmp_path, stage):
    """`training/.draft.txt` was neither read nor named (the warning left every dot-file out); other dot-files
    (`.DS_Store`) are still no input to name."""
    training = tmp_path / "mix" / "training"
    training.mkdir(parents=True)
    text = open(os.path.join(CORPUS, "training", sorted(os.listdir(os.path.join(CORPUS, "training")))[0])).read()
    for name in ("a.txt", ".draft.txt"):
        (training / name).write_text(text)
    (training / ".DS_Store").write_bytes(b"\0")
    with pytest.warns(bertprep.BertprepWarning):
        summary = getattr(bertprep, stage)(input=(str(tmp_path / "mix"),), vocab=VOCAB, out=str(tmp_path / "out"))
    expected = (f"not read: {training / '.draft.txt'} (an input directory's shards are the *.txt files of its "
                "training/ and test/, else its own *.txt; a hidden file (.name) never)")
    assert [w for w in summary["warnings"] if w.startswith("not read")] == [expected]


def test_inspect_refuses_an_epoch_for_token_sequences(tokenized, capsys):
    """--epoch on a .bin/.idx was ignored: the plain sequences shown as if masked in that epoch."""
    from bertprep.cli import main

    out, _ = tokenized
    index = prefix_of(out, *shards()[0]) + ".idx"
    assert main(["inspect", index, "-n", "1", "--epoch", "3"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"--epoch: {index} holds token sequences, which Megatron masks "
                                                    "as it trains; only unmasked records (create --masking "
                                                    "dynamic) are masked at load time")


def test_validate_plots_the_sequences_lengths_and_documents(tokenized, tmp_path):
    """--plot of a tokenize output drew three empty panels labelled "no records", exit 0: it now draws the
    sequences by length and the documents by their count of sequences, from histograms the report carries."""
    out, _ = tokenized
    png = tmp_path / "report.png"
    report = bertprep.validate(paths=(str(out),), plot=str(png))
    (section,) = report["sequences"]
    lengths, documents = [], []
    for prefix in (f["prefix"] for f in section["files"]):
        data = codecs.get("megatron").read_sequences(prefix, {})
        lengths += data.lengths.tolist()
        documents += np.diff(data.document_indices).tolist()
    assert section["length_histogram"] == np.bincount(lengths).tolist()
    assert section["document_histogram"] == np.bincount(documents).tolist()
    assert sum(section["length_histogram"]) == section["sequences"] == 454
    from matplotlib.image import imread

    image = imread(png)
    assert image.shape[0] < 400 and (image[:, : image.shape[1] // 3, :3] < 0.5).mean() > 0.01  # a row of bars


def test_validate_and_inspect_find_what_megatron_would_misread(tokenized, tmp_path):
    out, _ = tokenized
    report = bertprep.validate(paths=(str(out),))
    assert report.sound and report["checks"]["sequences"]["status"] == "ok"
    assert report["sequences"][0]["sequences"] == 454
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    prefix = prefix_of(copy, *shards()[0])
    data = open(prefix + ".bin", "rb").read()
    open(prefix + ".bin", "wb").write(data[:-10])  # truncated
    report = bertprep.validate(paths=(str(copy),))
    assert not report.sound and report["findings"][0]["file"] == prefix + ".bin"
    assert "truncated" in report["findings"][0]["message"]
    with pytest.raises(DataError, match=f"^{prefix}.bin: .* \\(truncated\\)$"):
        bertprep.inspect(file=prefix + ".bin")
    index = bytearray(open(prefix_of(copy, *shards()[1]) + ".idx", "rb").read())
    index[34 + 4 * 5] += 1  # the 6th sequence's length: the offsets after it no longer add up
    open(prefix_of(copy, *shards()[1]) + ".idx", "wb").write(index)
    with pytest.raises(DataError, match="byte offset .* is not the sum of the lengths before it"):
        codecs.get(SEQUENCES).read_sequences(prefix_of(copy, *shards()[1]))
    index[34 + 4 * 5] -= 1
    index[9 + 8 + 1] += 1  # one sequence more than the index holds
    open(prefix_of(copy, *shards()[1]) + ".idx", "wb").write(index)
    report = bertprep.validate(paths=(prefix_of(copy, *shards()[1]) + ".idx",))
    assert not report.sound and report["findings"][0]["file"] == prefix_of(copy, *shards()[1]) + ".idx"
    assert "bytes, but its counts (" in report["findings"][0]["message"]
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(open(VOCAB).read() + "extra\n")
    report = bertprep.validate(paths=(str(out),), vocab=str(other_vocab))
    assert not report.sound and "tokenized with a vocab of 2,000 ids; --vocab has 2,001" in report["findings"][0][
        "message"]
    shown = bertprep.inspect(file=prefix_of(out, *shards()[0]) + ".idx", vocab=VOCAB, num=2, skip=1)
    assert [r["sequence"] for r in shown["records"]] == [1, 2] and shown["kind"] == "sequences"


def test_validate_of_a_pair_without_manifest_or_vocab_says_what_it_did_not_check(tokenized, tmp_path):
    """A pair copied out of its tokenize output (no manifest above it) and validated without --vocab: the table
    said `ok sequence_manifest … as the tokenize manifest lists them` and `ok sequences … every id below the vocab
    size`, neither of which was checked; the record checks say `skipped` for theirs."""
    out, _ = tokenized
    prefix = prefix_of(out, *shards()[0])
    for suffix in (".bin", ".idx"):
        shutil.copy(prefix + suffix, tmp_path)
    checks = bertprep.validate(paths=(str(tmp_path),))["checks"]
    assert checks["sequence_manifest"] == {
        "status": "skipped", "failures": 0,
        "description": "no tokenize manifest.json above the pairs (<out>/<corpus>/): nothing to match"}
    assert checks["sequences"]["status"] == "ok"
    assert checks["sequences"]["description"].endswith("; ids not checked against a vocab (no manifest, no --vocab: "
                                                       "see warnings)")
    checks = bertprep.validate(paths=(str(tmp_path),), vocab=VOCAB)["checks"]
    assert checks["sequences"]["description"].endswith("; every id below the vocab size")
    assert checks["sequence_manifest"]["status"] == "skipped"
    checks = bertprep.validate(paths=(str(out),))["checks"]  # the output itself: both checked
    assert [checks[name]["status"] for name in ("sequences", "sequence_manifest")] == ["ok", "ok"]
    assert checks["sequences"]["description"].endswith("; every id below the vocab size")
    # a data-path.txt that lists no pair (a test split alone) is still checked against the manifest beside it
    bertprep.tokenize(input=(os.path.join(CORPUS, "test"),), vocab=VOCAB, out=str(tmp_path / "test_only"))
    checks = bertprep.validate(paths=(str(tmp_path / "test_only" / "sample_corpus" / "data-path.txt"),))["checks"]
    assert checks["sequence_manifest"]["status"] == "ok"


def test_validate_refuses_the_record_flags_where_it_read_no_records(tokenized, tmp_path, capsys):
    """--masked-lm-prob, --whole-word-mask and --min-parts are read by the record checks alone: of a tokenize output
    (or text shards) they were SOUND, exit 0, the flag read by nothing. --vocab and --plot, by the record and the
    sequence checks alone."""
    out, _ = tokenized
    assert main(["validate", str(out), "--whole-word-mask", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep validate: error: --whole-word-mask applies to records, and {out} holds none (token sequences of "
        "`bertprep tokenize`): it had no effect; leave it out")
    assert main(["validate", CORPUS, "--masked-lm-prob", "0.3", "--min-parts", "4", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep validate: error: --masked-lm-prob, --min-parts apply to records, and {CORPUS} holds none (text "
        "shards): they had no effect; leave them out")
    with pytest.raises(UsageError, match=r"^ValidateOptions.min_parts applies to records, and "):
        bertprep.validate(paths=(str(out / "data-path.txt"),), min_parts=8)
    assert bertprep.validate(paths=(str(out),), min_parts=1).sound  # the default, as given
    # --vocab is read by the record and the sequence checks, never by the text shard checks
    assert main(["validate", CORPUS, "--vocab", VOCAB, "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep validate: error: --vocab applies to records and token sequences, and {CORPUS} holds none (text "
        "shards): it had no effect; leave it out")
    assert bertprep.validate(paths=(str(out),), vocab=VOCAB).sound
    # --plot draws the records' and the sequences' statistics: of text shards alone it drew a "no records" PNG
    png = tmp_path / "shards.png"
    assert main(["validate", CORPUS, "--plot", str(png), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bertprep validate: error: --plot applies to records and token sequences, and {CORPUS} holds none (text "
        "shards): it had no effect; leave it out")
    assert not png.exists()
    assert main(["validate", str(out), "--plot", str(png), "--quiet"]) == 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_validate_compare_of_a_dataset_with_itself_is_refused(tokenized, tmp_path, capsys):
    """`validate A A --compare` (or A/, a link to A, a pair's .bin and its .idx) said "equal", exit 0: a dataset is
    equal to itself, whatever PATH2 was meant to be. Records directories alike. Without --compare it is refused
    too (validate's _refuse_one_dataset_twice: each file was checked, each finding listed, twice)."""
    out, _ = tokenized
    (tmp_path / "link").symlink_to(out)
    prefix = prefix_of(out, *shards()[0])
    for a, b in ((out, out), (out, f"{out}/"), (out, tmp_path / "link"), (prefix + ".bin", prefix + ".idx")):
        assert main(["validate", str(a), str(b), "--compare", "--quiet"]) == 2
        assert capsys.readouterr().err.strip() == (f"bertprep validate: error: --compare: {a} and {b} are one "
                                                   "dataset, which is equal to itself: give two datasets to compare")
    with pytest.raises(UsageError, match=r"^ValidateOptions.compare: .* are one dataset"):
        bertprep.validate(paths=(str(out), str(out)), compare=True)
    with pytest.raises(UsageError, match=r" are one dataset: give it once"):  # without it: each finding twice
        bertprep.validate(paths=(str(out), str(out)))


def test_an_index_under_another_name_is_named_as_one(tokenized, tmp_path, capsys):
    """An .idx reached by a link named otherwise (or copied as X.IDX) was read as a TFRecord by inspect and validate:
    `record 0 at byte 0: truncated data (794 of 24844879419493709 bytes)`. A file that opens with Megatron's magic
    and is not named <prefix>.idx is now one line saying what it is."""
    out, _ = tokenized
    index = prefix_of(out, *shards()[0]) + ".idx"
    (tmp_path / "mydata").symlink_to(index)
    shutil.copy(index, tmp_path / "copy.IDX")
    for name in ("mydata", "copy.IDX"):
        for stage in ("inspect", "validate"):
            assert main([stage, str(tmp_path / name)]) == 1
            assert capsys.readouterr().err.strip() == (
                f"bertprep {stage}: error: {tmp_path / name}: a Megatron index (it opens with MMIDIDX), not named "
                "<prefix>.idx: an indexed dataset is read by its names, <prefix>.idx beside <prefix>.bin; give it by "
                "such a name")
    assert bertprep.inspect(file=index, num=1)["records"][0]["sequence"] == 0  # by its own name, as before


def test_the_record_formats_choices_are_unchanged():
    assert codecs.record_names() == ("tfrecord", "ofrecord", "hdf5", "parquet")
    assert SEQUENCES not in bertprep.formats.ALL_FORMATS and codecs.sequence_names() == (SEQUENCES,)
    assert codecs.of_file_name("x_text_sentence.idx") is None
    result = subprocess.run([sys.executable, "-m", "bertprep", "create", "--format", SEQUENCES, "--quiet"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"bertprep create: error: unknown --format {SEQUENCES!r} "
                                     "(choose from tfrecord, ofrecord, hdf5, parquet)")


def test_the_command_prints_its_summary_as_json(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bertprep", "tokenize", "--input", CORPUS, "--vocab", VOCAB,
                             "--out", str(tmp_path), "--workers", "1", "--quiet", "--json"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""
    summary = json.loads(result.stdout)
    assert summary["counts"]["training"] == {"documents": 36, "sequences": 392, "tokens": 11010}


def test_no_lower_case_tokenizes_as_create_does_for_cased_vocabs(tmp_path, megatron_indexed):
    split, shard = shards()[0]
    bertprep.tokenize(input=(shard,), vocab=VOCAB, out=str(tmp_path), corpus="cased", lower_case=False)
    dataset = megatron_indexed.IndexedDataset(prefix_of(tmp_path / "cased", split, shard))
    cased, _ = expected_sequences(shard, LineTokenizer(load_vocab(VOCAB), lower_case=False))
    assert [dataset[i].tolist() for i in range(len(dataset))] == cased
    assert cased != expected_sequences(shard, LineTokenizer(load_vocab(VOCAB)))[0]


def test_a_record_file_named_bin_is_still_read_as_records(golden_dir, tmp_path):
    """Only a .bin/.idx pair with Megatron's index is a sequence dataset: a TFRecord called `.bin` is records."""
    records = tmp_path / "records.bin"
    records.write_bytes((golden_dir / "G2.tfrecord").read_bytes())
    shown = bertprep.inspect(file=str(records), num=1)
    assert shown["kind"] == "pretraining" and shown["records"][0]["record"] == 0
    report = bertprep.validate(paths=(str(records),))
    assert "sequences" not in report.fields and "sequences" not in report["checks"] and report["datasets"]


def test_a_bucket_run_writes_the_local_bytes(s3_bucket, tokenized):
    """Inputs read from and files written to an object store (SeaweedFS's S3) through bertprep.storage."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    root = s3_bucket.split("://", 1)[1]
    fs.put(CORPUS, f"{root}/in/sample_corpus", recursive=True)
    summary = bertprep.tokenize(input=(f"{s3_bucket}/in/sample_corpus",), vocab=VOCAB, out=f"{s3_bucket}/out",
                                engine=bertprep.EngineOptions(workers=2))
    out, local = tokenized
    assert summary["counts"] == local["counts"] and summary["out"] == f"{s3_bucket}/out/sample_corpus"
    stored = {key[len(root) + len("/out/sample_corpus/"):]: fs.cat_file(key)
              for key in fs.find(f"{root}/out/sample_corpus")}
    files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert sorted(stored) == sorted(files)
    for name, data in files.items():
        if name.endswith(".txt"):  # the prefixes: the bucket's URLs where the local run's paths are
            assert stored[name].decode().replace(f"{s3_bucket}/out", str(out.parent)) == data.decode()
        elif name.endswith((".bin", ".idx")):
            assert stored[name] == data, name
    assert bertprep.tokenize(input=(f"{s3_bucket}/in/sample_corpus",), vocab=VOCAB,
                             out=f"{s3_bucket}/out").complete_before
    assert bertprep.validate(paths=(f"{s3_bucket}/out/sample_corpus",)).sound  # its data-path.txt names its URLs
    report = bertprep.validate(paths=(str(out), f"{s3_bucket}/out/sample_corpus"), compare=True)  # local vs bucket
    assert report.sound and report["compare"][0]["equal"] and report["compare"][0]["sequences"] == 454


def test_a_failed_run_leaves_no_shard_its_manifest_does_not_list(tmp_path, monkeypatch):
    """With --workers 2, a shard that failed (`no documents`) while another worker's shard was written and not yet
    handed back left that shard's .bin/.idx under their final names and no manifest (a first run): `validate`
    called the folder SOUND, and `--workers 1` left nothing. Played here in one process: a shard is written, then
    the run fails before its result is taken. What the manifest does not list goes, and the folders left empty."""
    import importlib

    stage = importlib.import_module("bertprep.stages.tokenize")
    message = "a shard: no documents (every line is blank or tokenizes to nothing)"
    fail_after_writing(monkeypatch, stage, "tokenize_shard", message)
    args = {"input": (CORPUS,), "vocab": VOCAB, "out": str(tmp_path / "out"),
            "engine": bertprep.EngineOptions(workers=1)}
    with pytest.raises(DataError, match="no documents"):
        bertprep.tokenize(**args)
    assert not (tmp_path / "out").exists()
    monkeypatch.undo()
    bertprep.tokenize(**args)  # a finished run into the folder, then a failed rerun that rewrites every shard
    fail_after_writing(monkeypatch, stage, "tokenize_shard", message)
    with pytest.raises(DataError, match="no documents"):
        bertprep.tokenize(**{**args, "lower_case": False})
    out = tmp_path / "out" / "sample_corpus"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]  # its shards forgotten, none left unlisted
    report = bertprep.validate(paths=(str(out),))
    assert not report.sound and "did not finish" in report["findings"][0]["message"]


def test_a_run_killed_before_its_manifest_is_saved_is_not_resumed_as_the_earlier_runs(tmp_path, monkeypatch):
    """A rerun with another vocab was stopped after it renamed a shard's files and before it saved their entries:
    the manifest still listed them with the earlier vocab's settings and sizes, and a third run with that vocab
    kept the other vocab's ids as complete (a vocab of the same size: the same bytes per shard). The entries of
    the shards a run rewrites go from the manifest before any of them is written."""
    lines = open(VOCAB, encoding="utf-8").read().split("\n")
    swapped = tmp_path / "swapped.txt"  # "the" and "of" trade ids: every shard has the same size, other bytes
    a, b = lines.index("the"), lines.index("of")
    lines[a], lines[b] = lines[b], lines[a]
    swapped.write_text("\n".join(lines), encoding="utf-8")
    args = {"input": (CORPUS,), "out": str(tmp_path / "out"), "engine": bertprep.EngineOptions(workers=1)}
    bertprep.tokenize(vocab=VOCAB, **args)
    out = tmp_path / "out" / "sample_corpus"
    first = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*.bin"))}
    save = bertprep.stages.tokenize.save_manifest
    ours = json.loads((out / "manifest.json").read_text())["files"]

    def killed_once_a_shard_is_written(directory, manifest):
        if any(entry not in ours.values() for entry in manifest["files"].values()):
            raise KeyboardInterrupt  # as a kill between the shard's rename and its manifest entry
        save(directory, manifest)

    monkeypatch.setattr(bertprep.stages.tokenize, "save_manifest", killed_once_a_shard_is_written)
    with pytest.raises(KeyboardInterrupt):
        bertprep.tokenize(vocab=str(swapped), **args)
    monkeypatch.undo()
    # the killed run wrote a shard (the others it was to rewrite, no longer listed, are gone)
    assert any((out / name).exists() and first[name] != (out / name).read_bytes() for name in first)
    rerun = bertprep.tokenize(vocab=VOCAB, **args)
    assert rerun["shards_tokenized"] >= 1
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*.bin"))} == first


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_the_manifest_is_saved_at_the_first_shard_the_end_and_before_an_error(tmp_path, monkeypatch, stage):
    """tokenize and create rewrote (and fsynced) their whole manifest after every finished shard: N shards wrote
    O(N²) bytes (2,000 tiny shards: 1.8 GB, 203 s of tokenize). The saves are paced now
    (workdir.PacedSaves); with the pace set past any run's length, a run of 12 shards saves at its first shard and
    at its end, where it saved after each. What the pace keeps: a run that fails at its last shard has saved
    the 11 it finished before raising, its rerun redoes the failed one only, and the files are a clean run's."""
    module = importlib.import_module(f"bertprep.stages.{stage}")
    saves, save = [], module.save_manifest
    monkeypatch.setattr(module, "save_manifest", lambda directory, manifest: (saves.append(len(manifest["files"])),
                                                                              save(directory, manifest)))
    monkeypatch.setattr(bertprep.workdir, "SAVE_EVERY_S", math.inf)
    training = tmp_path / "in" / "training"
    training.mkdir(parents=True)
    for i in range(12):
        (training / f"s_{i:02}.txt").write_text(f"The cat sat on the mat {i} times.\nIt was a good day.\n\n"
                                                "The dog ran in the park.\nThen it went home.\n")
    args = {"input": (str(tmp_path / "in"),), "vocab": VOCAB, "engine": bertprep.EngineOptions(workers=1)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create's "no test split"
        getattr(bertprep, stage)(out=str(tmp_path / "clean"), **args)
        assert len(saves) <= 3  # first shard, end of the loop, the finished manifest (13 before)
        (training / "s_11.txt").write_text("\x01\n")
        saves.clear()
        with pytest.raises(DataError, match="s_11.txt: no documents"):
            getattr(bertprep, stage)(out=str(tmp_path / "out"), **args)
        (listed,) = [json.loads(p.read_text())["files"] for p in (tmp_path / "out").rglob("manifest.json")]
        assert len(saves) == 2 and len(listed) == saves[-1] == 11 * saves[0]
        (training / "s_11.txt").write_text(f"The cat sat on the mat {11} times.\nIt was a good day.\n\n"
                                           "The dog ran in the park.\nThen it went home.\n")
        rerun = getattr(bertprep, stage)(out=str(tmp_path / "out"), **args)
    assert rerun[f"shards_{stage}d"] == 1
    clean, out = (next((tmp_path / name).rglob("manifest.json")).parent for name in ("clean", "out"))
    outputs = sorted(p.relative_to(clean) for p in clean.rglob("*") if p.is_file() and p.suffix != ".txt")
    assert len(outputs) == 1 + 12 * saves[0] and all((clean / p).read_bytes() == (out / p).read_bytes()
                                                     for p in outputs if p.name != "manifest.json")


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_manifest_naming_a_file_outside_its_folder_is_damaged(tmp_path, stage):
    """A manifest whose files named `../../notes.txt` (edited, or copied from another tool) had a rerun remove that
    file, outside the output, as an earlier run's file it no longer writes: a warning, exit 0, the file gone. Such
    a name makes the manifest damaged now, and nothing is removed."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "c.txt").write_text("The cat sat on the mat.\nIt was a good day.\n\nThe dog ran.\n")
    args = {"input": (str(tmp_path / "in"),), "vocab": VOCAB, "out": str(tmp_path / "out")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create's "no test split"
        getattr(bertprep, stage)(**args)
        (path,) = (tmp_path / "out").rglob("manifest.json")
        notes = (path.parent / ".." / ".." / "notes.txt").resolve()
        notes.write_text("mine")
        manifest = json.loads(path.read_text())
        manifest["files"]["../../notes.txt"] = next(iter(manifest["files"].values()))
        path.write_text(json.dumps(manifest))
        with pytest.raises(DataError, match=re.escape(f'{path}: damaged manifest (files["../../notes.txt"] names a '
                                                      "file outside its folder); remove it to redo this stage")):
            getattr(bertprep, stage)(**args)
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_megatron_index_is_no_text_shard(tmp_path, stage):
    """An .idx is its magic and then small integers, valid UTF-8 where they are below 128: tokenize (and create) of
    tokenize's own output tokenized "MMIDIDX" as a sentence, exit 0. A longer one was "not valid UTF-8"."""
    (tmp_path / "c.txt").write_text("The cat sat.\n")
    bertprep.tokenize(input=(str(tmp_path / "c.txt"),), vocab=VOCAB, out=str(tmp_path / "tokenized"))
    (index,) = (tmp_path / "tokenized").rglob("*.idx")
    with pytest.raises(DataError, match=f"^{index}: a Megatron index \\(.idx, as tokenize writes\\), not text"):
        getattr(bertprep, stage)(input=(str(index),), vocab=VOCAB, out=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_megatron_bin_is_no_text_shard(tmp_path, stage):
    """A .bin holds ids, two bytes each (uint16): ids below 128 decode as UTF-8 with a NUL between, which the
    tokenizer drops, so tokenize (and create) of tokenize's own .bin (`--input 'OUT/corpus/training/*'`) made
    sentences of those bytes, exit 0; other ids were "not valid UTF-8 (byte 0x86 at column 9)". A .bin whose .idx
    beside it opens with Megatron's magic is now named as such; a text shard named .bin is still read."""
    (tmp_path / "c.txt").write_text("the is in the to.\nto the is in.\n")  # ids below 128 in the sample vocab
    bertprep.tokenize(input=(str(tmp_path / "c.txt"),), vocab=VOCAB, out=str(tmp_path / "tokenized"))
    (data,) = (tmp_path / "tokenized").rglob("*.bin")
    assert max(data.read_bytes()) < 128  # the case that went through as text
    with pytest.raises(DataError, match=f"^{data}: the token ids of a Megatron indexed dataset \\(.bin, as tokenize "
                                        f"writes; its index {str(data)[:-4]}.idx beside it\\), not text: "):
        getattr(bertprep, stage)(input=(str(data),), vocab=VOCAB, out=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    shutil.copy(tmp_path / "c.txt", tmp_path / "text.bin")  # no index beside it: a shard
    getattr(bertprep, stage)(input=(str(tmp_path / "text.bin"),), vocab=VOCAB, out=str(tmp_path / "out"))


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_compressed_shard_is_named_as_one(tmp_path, stage):
    """A gzipped shard (corpora often come so) said "not valid UTF-8 (byte 0x8b at column 2)", as if the text were
    damaged; `vocab` named it already. Now both stages say what the file is, as vocab does."""
    import gzip
    import lzma

    text = open(os.path.join(CORPUS, "training", sorted(os.listdir(os.path.join(CORPUS, "training")))[0]),
                "rb").read()
    (tmp_path / "wiki.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "wiki.xz").write_bytes(lzma.compress(text))
    for name, kind in (("wiki.txt.gz", "a gzip file"), ("wiki.xz", "an xz file")):
        run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(tmp_path / name), "--vocab",
                              VOCAB, "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True)
        assert run.returncode == 1 and run.stderr == (
            f"bertprep {stage}: error: {tmp_path / name}: binary data ({kind}?), expected UTF-8 text: decompress it "
            "first\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_nul_in_a_shard_is_named_by_line(tmp_path, stage):
    """A NUL is valid UTF-8: a UTF-16 shard (no byte-order mark) of two documents was read as text, the tokenizer
    dropped its NULs, and its blank line ("\\0" alone) ended no document: one document, exit 0. shard and vocab
    refuse a NUL already; now these stages name the line, as a file that is not UTF-8 is named."""
    (tmp_path / "u16.txt").write_bytes("Hello world.\nSecond line.\n\nDoc two here.\n".encode("utf-16-le"))
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(tmp_path / "u16.txt"), "--vocab",
                          VOCAB, "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr == (
        f"bertprep {stage}: error: {tmp_path / 'u16.txt'}:1: binary data (a NUL byte at column 2: UTF-16 text?), "
        "expected UTF-8 text, one sentence per line\n")
    (tmp_path / "nul.txt").write_text("A sentence.\n\nAnother one with a \0 inside.\n")
    with pytest.raises(DataError, match=f"^{tmp_path / 'nul.txt'}:3: binary data \\(a NUL byte at column 20: "):
        getattr(bertprep, stage)(input=(str(tmp_path / "nul.txt"),), vocab=VOCAB, out=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_json_lines_corpus_named_otherwise_is_refused_naming_its_line(tmp_path, stage):
    """Megatron-LM's preprocess_data reads `--input corpus.json`, a JSON object a line: such a corpus given here
    was tokenized as text, each object's braces, keys and escapes a sentence and every document one, exit 0 (a
    .jsonl file was refused by its name only). A line of text that opens with a brace, no JSON object, is text."""
    given = tmp_path / "corpus.json"
    given.write_text("".join(json.dumps({"text": f"Document {i}.\nIts second sentence."}) + "\n" for i in range(3)))
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(given), "--vocab", VOCAB, "--out",
                          str(tmp_path / "out"), "--quiet"], capture_output=True, text=True)
    jsonl = tmp_path / "corpus.jsonl"
    assert run.returncode == 2 and run.stderr == (
        f"bertprep {stage}: error: {given}:1: a JSON object, as a JSON-lines corpus holds (one document a line): "
        "this stage reads text shards (a sentence a line, documents apart by a blank line); rename it "
        f"{jsonl} and shard it first: `bertprep shard --input {jsonl}`\n")
    assert not (tmp_path / "out").exists()
    (tmp_path / "brace.txt").write_text("{not json} but a sentence.\n")
    getattr(bertprep, stage)(input=(str(tmp_path / "brace.txt"),), vocab=VOCAB, out=str(tmp_path / "out"))


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_data_path_list_is_no_text_shard(tokenized, tmp_path, stage):
    """data-path.txt is text: `tokenize --input OUT/wiki/data-path.txt` (or 'OUT/wiki/*.txt', which matches it and
    test-data-path.txt) tokenized its weights and prefixes as a sentence, exit 0, as a .bin or .idx is refused;
    a copy of it elsewhere alike. A shard of numbers and words is still text."""
    out, _ = tokenized
    shutil.copy(out / "test-data-path.txt", tmp_path / "copy.txt")
    for given in (out / "data-path.txt", tmp_path / "copy.txt"):
        run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(given), "--vocab", VOCAB,
                              "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True)
        assert run.returncode == 1 and run.stderr == (
            f"bertprep {stage}: error: {given}: the --data-path list of a `bertprep tokenize` output (\"<tokens> "
            "<prefix>\" pairs), not text: this stage reads text shards (a sentence a line, documents apart by a "
            "blank line); give the shards the prefixes were tokenized from\n")
        assert not (tmp_path / "out").exists()
    (tmp_path / "apples.txt").write_text("12 apples and 3 pears.\n")
    getattr(bertprep, stage)(input=(str(tmp_path / "apples.txt"),), vocab=VOCAB, out=str(tmp_path / "out"))


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_vocab_beside_the_shards_is_no_text_shard(tmp_path, stage):
    """`--input 'data/*.txt' --vocab data/vocab.txt`: the pattern matched the vocab, a text file of a token a line,
    which was tokenized as one document of as many sentences as it has tokens into the training data, exit 0."""
    (tmp_path / "data").mkdir()
    shutil.copy(shards()[0][1], tmp_path / "data" / "a.txt")
    shutil.copy(VOCAB, tmp_path / "data" / "vocab.txt")
    run = subprocess.run([sys.executable, "-m", "bertprep", stage, "--input", str(tmp_path / "data" / "*.txt"),
                          "--vocab", str(tmp_path / "data" / "vocab.txt"), "--out", str(tmp_path / "out"), "--quiet"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr == (
        f"bertprep {stage}: error: {tmp_path / 'data' / 'vocab.txt'}: a WordPiece vocab (a token a line, [CLS] [SEP] "
        "[MASK] [UNK] among them), not a text shard: keep it out of the inputs (a pattern or a directory of shards "
        "matched it?)\n")
    assert not (tmp_path / "out").exists()
    (tmp_path / "data" / "vocab.txt").unlink()
    # Sentences beside the four tokens are text, with a blank line or without (corpus.is_wordpiece_vocab).
    (tmp_path / "data" / "b.txt").write_text("Tokens:\n[CLS]\n[SEP]\n[MASK]\n[UNK]\n\nAnother document.\n")
    (tmp_path / "data" / "c.txt").write_text("Tokens:\n[CLS]\n[SEP]\n[MASK]\n[UNK]\nThe same document.\n")
    getattr(bertprep, stage)(input=(str(tmp_path / "data"),), vocab=VOCAB, out=str(tmp_path / "out"))


@pytest.mark.parametrize("code, name, width", [(4, "int32", 4), (1, "uint8", 1)])
def test_a_changed_dtype_code_is_named(tokenized, tmp_path, code, name, width):
    """An .idx whose header's dtype code was changed (uint16 ids, code 4 or 1) was "sequence 1's byte offset 52 is
    not the sum of the lengths before it (104)": true, but no word of the dtype that made it so."""
    import shutil

    out, _ = tokenized
    shutil.copytree(out, tmp_path / "copy")
    prefix = prefix_of(tmp_path / "copy", *shards()[0])
    index = bytearray(open(prefix + ".idx", "rb").read())
    assert index[17] == 8  # uint16
    index[17] = code
    open(prefix + ".idx", "wb").write(index)
    message = (f"{prefix}.idx: dtype code {code} ({name}, {width}-byte ids), but its byte offsets are those of "
               "2-byte ids (int16, uint16): the header's dtype is wrong")
    run = subprocess.run([sys.executable, "-m", "bertprep", "inspect", prefix], capture_output=True, text=True)
    assert run.returncode == 1 and run.stderr == f"bertprep inspect: error: {message}\n"
    finding = bertprep.validate(paths=(prefix + ".idx",))["findings"][0]
    assert f"{finding['file']}: {finding['message']}" == message


def test_negative_ids_are_a_finding(tmp_path):
    """ids of a signed dtype below zero (uint16 ids of 32,768 and more under a header changed to int16, code 3):
    validate compared only the largest id with the vocab size and said SOUND, with --vocab or without."""
    from bertprep.formats import megatron

    prefix = str(tmp_path / "neg_text_sentence")
    megatron.write(prefix, np.array([5, -3, 7, 40000 - 65536, 2], dtype=np.int16), np.array([3, 2]),
                   np.array([0, 1, 2]), np.int16)
    for vocab in ((), ("--vocab", VOCAB)):
        run = subprocess.run([sys.executable, "-m", "bertprep", "validate", prefix + ".idx", *vocab, "--quiet"],
                             capture_output=True, text=True)
        assert run.returncode == 1, run.stdout + run.stderr
        assert (f"{prefix}.idx: record 0: ids: id -3 is negative (2 such ids; int16 ids: is the header's dtype "
                "wrong?)") in run.stdout + run.stderr


def test_inspect_with_another_vocab_than_the_ids_were_made_with_warns(tokenized, golden_dir, tmp_path):
    """`inspect --vocab OTHER` showed another vocab's words for the ids without a word, though the manifest
    beside them records the vocab's sha256 (tokenize's; create's two directories above its record files)."""
    import warnings

    bertprep.create(input=(CORPUS,), vocab=VOCAB, out=str(tmp_path), seq=64, pred=10, dupe_factor=1,
                    format=("tfrecord",), engine=bertprep.EngineOptions(workers=1))
    (records,) = tmp_path.glob("*/*/tfrecord/training/*_0.tfrecord")
    with pytest.warns(bertprep.BertprepWarning, match=rf"^bertprep.inspect: InspectOptions.vocab .*: not the vocab "
                                                      rf"{records.parents[2] / 'manifest.json'} says "):
        bertprep.inspect(file=str(records), vocab=str(golden_dir / "vocab.txt"), num=1)

    out, _ = tokenized
    prefix = prefix_of(out, *shards()[0])
    other = str(golden_dir / "vocab.txt")
    run = subprocess.run([sys.executable, "-m", "bertprep", "inspect", prefix + ".idx", "-n", "1", "--vocab", other],
                         capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout
    assert run.stderr.startswith(f"inspect: warning: --vocab {other}: not the vocab {out / 'manifest.json'} says "
                                 "these ids were made with ("), run.stderr
    assert run.stderr.strip().endswith("the tokens shown are another vocab's words") and run.stderr.count("\n") == 1
    with pytest.warns(bertprep.BertprepWarning, match=r"^bertprep.inspect: InspectOptions.vocab .*: not the vocab "):
        bertprep.inspect(file=prefix + ".idx", vocab=other, num=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the vocab it was made with: no warning
        assert "warnings" not in bertprep.inspect(file=prefix + ".idx", vocab=VOCAB, num=1)


@pytest.mark.parametrize("stage", ["tokenize", "create"])
def test_a_second_call_reads_a_vocab_rewritten_at_the_same_path(tmp_path, stage):
    """A process keeps each vocab's tokenizer (text_inputs.tokenizer_and_vocab), keyed by the vocab's path alone: a
    notebook's second bertprep.tokenize (or create) after the vocab file was rewritten in place, its tokens given
    other ids, took the first call's tokenizer and wrote the old ids, under a manifest naming the new file's
    sha256. It now writes what a vocab of the new bytes (here a copy at another path) gives."""
    lines = open(VOCAB, encoding="utf-8").read().splitlines()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fields = {"input": (CORPUS,), "engine": bertprep.EngineOptions(workers=1)}
    if stage == "create":
        fields.update(seq=64, pred=10, dupe_factor=1, format="tfrecord")
    function = getattr(bertprep, stage)
    function(vocab=vocab, out=tmp_path / "first", **fields)
    specials = [line for line in lines if line.startswith("[")]
    words = [line for line in lines if not line.startswith("[")]
    vocab.write_text("\n".join(specials + words[::-1]) + "\n", encoding="utf-8")  # the same tokens, other ids
    shutil.copy(vocab, tmp_path / "copy.txt")
    function(vocab=vocab, out=tmp_path / "second", **fields)
    function(vocab=tmp_path / "copy.txt", out=tmp_path / "fresh", **fields)

    def written(name):
        return {path.relative_to(tmp_path / name): path.read_bytes() for path in sorted((tmp_path / name).rglob("*"))
                if path.suffix in (".bin", ".tfrecord")}

    assert written("second") and written("second") == written("fresh") != written("first")
    from bertprep.text_inputs import tokenizer_and_vocab

    with pytest.raises(DataError, match=r"vocab\.txt: the vocab changed while the run read it \(sha256 "):
        tokenizer_and_vocab(str(vocab), "0" * 64, True)  # a worker's read of other bytes than the plan's
