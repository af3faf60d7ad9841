"""`bertprep vocab`: a WordPiece vocab.txt of the user's corpus in Google's layout, which bertprep's tokenizer
reads exactly as HF's BertTokenizerFast does, the same bytes on every run, and `create` takes it."""

import contextlib
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from bertprep.stages.vocab import VocabOptions, vocab
from bertprep.tokenization import LineTokenizer, load_vocab
from stand_in_servers import ok, one_line_error, run_cli

SAMPLE = pathlib.Path(__file__).resolve().parents[1] / "bertprep" / "data" / "sample_corpus"


def sample_files():
    return sorted(str(p) for p in SAMPLE.rglob("*.txt"))


def corpus_lines(paths):
    return [line.strip() for path in paths for line in pathlib.Path(path).read_text(encoding="utf-8").split("\n")
            if line.strip()]


@pytest.fixture(scope="module")
def sample_vocab(tmp_path_factory):
    """The sample corpus's vocab with Google's default 994 unused slots."""
    out = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab(input=sample_files(), out=out, vocab_size=1400)
    return out


def test_special_tokens_sit_where_googles_do(sample_vocab, golden_dir):
    tokens = sample_vocab.read_text(encoding="utf-8").split("\n")[:-1]
    google = (golden_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(tokens) == 1400 and len(set(tokens)) == 1400
    assert tokens[:999] == google[:999]  # [PAD], [unused0..98], [UNK] [CLS] [SEP] [MASK] at 100..103, [unused99..993]
    assert not tokens[999].startswith("[")


def test_fewer_unused_slots_move_the_special_tokens_down(tmp_path):
    out = tmp_path / "vocab.txt"
    vocab(input=sample_files(), out=out, vocab_size=300, unused=3)
    assert out.read_text(encoding="utf-8").split("\n")[:9] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]",
                                                               "[UNK]", "[CLS]", "[SEP]", "[MASK]", "!"]


@pytest.mark.parametrize("cased", [False, True])
def test_bertprep_tokenizes_as_bert_tokenizer_fast_does(tmp_path, shared_dir, golden_dir, cased):
    from transformers import BertTokenizerFast

    # wt2 for size; the golden corpus for accents, CJK, control and zero-width characters and an emoji
    inputs = [str(shared_dir / "fixtures" / "bench" / "wt2.txt"), str(golden_dir / "corpus.txt")]
    out = tmp_path / "vocab.txt"
    vocab(input=inputs, out=out, vocab_size=4000, cased=cased)
    lines = corpus_lines(inputs)
    ours, counts = LineTokenizer(load_vocab(out), lower_case=not cased).encode(lines)
    # transformers 5 names the file `vocab` and silently ignores `vocab_file` (a 5-token default vocab)
    hf = BertTokenizerFast(vocab=str(out), do_lower_case=not cased)
    assert len(hf.get_vocab()) == 4000
    # the golden corpus's 101-200 character word: the reference (and bertprep) split words up to 200 characters,
    # HF's default makes [UNK] of those over 100
    hf.backend_tokenizer.model.max_input_chars_per_word = 200
    theirs = [hf.encode(line, add_special_tokens=False) for line in lines]
    assert counts.tolist() == [len(ids) for ids in theirs]
    assert ours.tolist() == [i for ids in theirs for i in ids]
    assert hf.unk_token_id == 100 and hf.mask_token_id == 103


def test_the_cli_twice_and_the_python_call_write_the_same_bytes(tmp_path):
    args = ("vocab", "--input", *sample_files(), "--vocab-size", "1200", "--unused", "10", "--json")
    first = ok(run_cli(*args, "--out", tmp_path / "a.txt"))
    second = ok(run_cli(*args, "--out", tmp_path / "b.txt", "--quiet"))
    summary = vocab(VocabOptions(input=tuple(sample_files()), out=str(tmp_path / "c.txt"), vocab_size=1200,
                                 unused=10))
    assert VocabOptions(input=sample_files()[0]).input == (sample_files()[0],)
    data = (tmp_path / "a.txt").read_bytes()
    assert data == (tmp_path / "b.txt").read_bytes() == (tmp_path / "c.txt").read_bytes()
    stable = lambda s: {k: v for k, v in s.items() if k not in ("out", "seconds")}  # noqa: E731
    assert stable(first) == stable(second) == stable(summary)
    assert first["inputs"][0]["sha256"] and first["tokens"] == 1200 and first["vocab_size"] == 1200
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt", "c.txt"]  # nothing staged is left


def test_a_huge_line_is_trained_in_pieces_cut_at_spaces(tmp_path, monkeypatch):
    """A 22 MB line of 3 million words went whole to the normalizer and the trainer, which keep an alignment per
    byte: 1.9 GB of memory, 317 MB as lines. Cut at spaces into pieces of CHUNK_CHARS (here 1,000), the same
    words: the same vocab as the text's own lines."""
    from bertprep.stages import vocab as vocab_module

    monkeypatch.setattr(vocab_module, "CHUNK_CHARS", 1000)
    lines = corpus_lines(sample_files())
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "one.txt").write_text(" ".join(lines) + "\n", encoding="utf-8")
    pieces = list(vocab_module.iter_lines([str(tmp_path / "one.txt")], {}))
    assert len(pieces) > 40 and max(map(len, pieces)) < 1000 + max(map(len, " ".join(lines).split()))
    for name in ("lines", "one"):
        vocab(input=str(tmp_path / f"{name}.txt"), out=str(tmp_path / f"{name}.vocab"), vocab_size=1200, unused=10)
    assert (tmp_path / "one.vocab").read_bytes() == (tmp_path / "lines.vocab").read_bytes()


def test_a_huge_line_without_spaces_is_cut_before_its_cjk_ideographs(tmp_path, monkeypatch):
    """A line of Chinese text has no spaces to cut at: it went whole to the normalizer and the trainer. Each
    ideograph is a word of its own (the normalizer puts spaces around it), so a cut before one keeps the words:
    the same vocab as the text's own lines, every line ending with an ideograph, so that joined they make the
    same words."""
    from bertprep.stages import vocab as vocab_module

    monkeypatch.setattr(vocab_module, "CHUNK_CHARS", 1000)
    ideographs = [chr(0x4E00 + i) for i in range(0, 3000, 7)]
    lines = ["".join(ideographs[(i * j) % len(ideographs)] for j in range(1, 40)) + ("abc" if i % 3 else "Dé") +
             ideographs[i % len(ideographs)] for i in range(1, 2000)]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "one.txt").write_text("".join(lines) + "\n", encoding="utf-8")
    pieces = list(vocab_module.iter_lines([str(tmp_path / "one.txt")], {}))
    assert len(pieces) > 40 and max(map(len, pieces)) <= 1000 + len("abc") and "".join(pieces) == "".join(lines)
    for name in ("lines", "one"):
        vocab(input=str(tmp_path / f"{name}.txt"), out=str(tmp_path / f"{name}.vocab"), vocab_size=1200, unused=10)
    assert (tmp_path / "one.vocab").read_bytes() == (tmp_path / "lines.vocab").read_bytes()


def test_create_takes_the_trained_vocab(tmp_path, sample_vocab):
    summary = ok(run_cli("create", "--input", SAMPLE, "--vocab", sample_vocab, "--out", tmp_path / "records",
                         "--dupe-factor", "1", "--format", "tfrecord", "--workers", "1", "--json", "--quiet"))
    assert all(count > 0 for count in summary["instances"].values()), summary
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "records").rglob("manifest.json")]
    assert manifests and all(m["vocab"]["sha256"] == load_vocab(sample_vocab).sha256 for m in manifests)
    assert {m["vocab"]["size"] for m in manifests} == {1400}


def test_a_vocab_size_below_the_special_tokens_is_a_usage_error(tmp_path):
    line = one_line_error(run_cli("vocab", "--input", *sample_files(), "--out", tmp_path / "v.txt", "--vocab-size",
                                  "998"), code=2)
    assert line == ("bertprep vocab: error: --vocab-size 998 is below the 999 special tokens and unused slots ([PAD], "
                    "[UNK], [CLS], [SEP], [MASK] and --unused 994)")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", ["no manifest", "empty corpus"])
def test_bad_corpora_are_one_line_data_errors(tmp_path, case):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    if case == "no manifest":
        (corpus / "part.txt").write_text("Some text.\n", encoding="utf-8")
        given, expected = corpus, f"{corpus}: no manifest.json"
    else:
        given = corpus / "empty.txt"
        given.write_text("\n\n", encoding="utf-8")
        expected = f"{given}: no text to train a vocab on"
    out = tmp_path / "out" / "vocab.txt"
    line = one_line_error(run_cli("vocab", "--input", given, "--out", out), code=1)
    assert line.startswith(f"bertprep vocab: error: {expected}"), line
    assert not (tmp_path / "out").exists()


def test_a_formatted_corpus_by_name_trains_as_its_text_does(tmp_path):
    """--corpus reads WORKDIR/formatted/<name>'s .jsonl parts: documents holding the sample corpus's lines
    give the vocab its .txt shards give."""
    from bertprep.workdir import save_manifest

    formatted = tmp_path / "w" / "formatted" / "sample"
    formatted.mkdir(parents=True)
    documents = [d for path in sample_files() for d in pathlib.Path(path).read_text(encoding="utf-8").split("\n\n")]
    with open(formatted / "part-0.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"title": str(i), "text": d.strip()}) + "\n" for i, d in enumerate(documents))
    save_manifest(str(formatted), {"stage": "format", "corpus": "sample", "files": {}})
    by_name = tmp_path / "by_name.txt"
    args = ("vocab", "--workdir", tmp_path / "w", "--corpus", "sample", "--vocab-size", "1200", "--unused", "10")
    ok(run_cli(*args, "--out", by_name, "--quiet"))
    vocab(input=sample_files(), out=tmp_path / "by_text.txt", vocab_size=1200, unused=10)
    assert by_name.read_bytes() == (tmp_path / "by_text.txt").read_bytes()
    os.unlink(formatted / "manifest.json")  # a download that never finished
    line = one_line_error(run_cli(*args, "--out", tmp_path / "none.txt"), code=1)
    assert line.startswith(f"bertprep vocab: error: {formatted}: no manifest.json"), line
    assert not (tmp_path / "none.txt").exists()


def test_a_shard_directory_trains_as_its_text_does(tmp_path):
    """--input SHARD_DIR (README: `vocab --input bertprep-work/sharded/mine`) reads its training/ and test/
    shards, listed in its manifest as training/... and test/...: it was refused, every file "not listed"."""
    ok(run_cli("shard", "--input", *sample_files(), "--out", tmp_path / "sharded", "--corpus", "sample",
               "--train-shards", "2", "--test-shards", "1", "--workers", "1", "--quiet"))
    ok(run_cli("vocab", "--input", tmp_path / "sharded", "--out", tmp_path / "by_shards.txt", "--vocab-size", "1200",
               "--unused", "10", "--quiet"))
    shards = sorted(str(p) for p in (tmp_path / "sharded").rglob("*.txt"))
    assert len(shards) == 3
    vocab(input=shards, out=tmp_path / "by_files.txt", vocab_size=1200, unused=10)
    assert (tmp_path / "by_shards.txt").read_bytes() == (tmp_path / "by_files.txt").read_bytes()
    (tmp_path / "sharded" / "training" / "stray.txt").write_text("a file of another run\n")
    line = one_line_error(run_cli("vocab", "--input", tmp_path / "sharded", "--out", tmp_path / "none.txt"), code=1)
    assert line.startswith(f"bertprep vocab: error: {tmp_path}/sharded/training/stray.txt: not listed in"), line


def test_a_vocab_size_without_room_for_the_corpus_characters_is_refused(tmp_path):
    """Found while the stage runs: `bertprep.vocab` names the field, the command the flag."""
    import bertprep
    from bertprep.errors import UsageError

    with pytest.raises(UsageError, match=r"^VocabOptions.vocab_size 1000: the corpus needs \d+ entries before any "
                                         r"merge \(999 special tokens and unused slots, \d+ characters, "
                                         r"\d+ ## characters\)$"):
        bertprep.vocab(input=sample_files(), out=tmp_path / "v.txt", vocab_size=1000)
    assert os.listdir(tmp_path) == []


def tiny_corpus(path, extra=b""):
    """A few lines of a few words (a vocab of them trains in well under a second), then `extra`'s bytes."""
    words = ["alpha", "beta", "gamma", "delta", "running", "runner", "the", "cat", "sat", "mat"]
    text = "\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(8)) for i in range(40)) + "\n"
    path.write_bytes(text.encode("utf-8") + extra)
    return path


@pytest.mark.parametrize("size", ["99999999999", "9999999999999999999999"])
def test_a_huge_vocab_size_is_a_one_line_usage_error(tmp_path, size):
    """The tokenizers trainer reserves ~45 bytes a slot up front: 10**11 aborted the process (a Rust OOM, exit
    134), 10**22 was a traceback (OverflowError: int too big to convert)."""
    from bertprep.errors import UsageError
    from bertprep.stages.vocab import MAX_VOCAB_SIZE

    corpus = tiny_corpus(tmp_path / "tiny.txt")
    line = one_line_error(run_cli("vocab", "--input", corpus, "--out", tmp_path / "v.txt", "--vocab-size", size),
                          code=2)
    assert line == (f"bertprep vocab: error: --vocab-size {size}: at most 1,048,576 (BERT vocabs are 30,522 to "
                    "250,002 entries)")
    assert os.listdir(tmp_path) == ["tiny.txt"]
    with pytest.raises(UsageError, match=r"^VocabOptions.vocab_size 1048577: at most 1,048,576 "):
        VocabOptions(input=corpus, vocab_size=MAX_VOCAB_SIZE + 1)
    assert VocabOptions(input=corpus, vocab_size=MAX_VOCAB_SIZE).vocab_size == 1 << 20


def test_an_input_file_named_twice_is_refused(tmp_path):
    """It was read and counted once per naming (`--input tiny.txt tiny.txt ./tiny.txt`); shard, create and
    tokenize refuse it with this line."""
    from bertprep.errors import UsageError
    from bertprep.workdir import save_manifest

    corpus = tiny_corpus(tmp_path / "tiny.txt")
    line = one_line_error(run_cli("vocab", "--input", "tiny.txt", "tiny.txt", "./tiny.txt", "--out", "v.txt",
                                  "--vocab-size", "200", "--unused", "0", cwd=tmp_path), code=2)
    assert line == (f"bertprep vocab: error: --input {corpus}: named twice (--input 'tiny.txt' given twice); give "
                    "each input file once")
    with pytest.raises(UsageError, match=r"^--input .*tiny.txt: named twice \(by --input '.*tiny.txt' and by --input "
                                         r"'.*/\./tiny.txt'\); give each input file once$"):
        vocab(input=[str(corpus), f"{tmp_path}/./tiny.txt"], out=tmp_path / "v.txt", vocab_size=200, unused=0)
    formatted = tmp_path / "w" / "formatted" / "mine"
    formatted.mkdir(parents=True)
    (formatted / "part-0.jsonl").write_text(json.dumps({"title": "t", "text": "alpha beta gamma"}) + "\n")
    save_manifest(str(formatted), {"stage": "format", "corpus": "mine", "files": {}})
    for given in ({"corpus": ["mine", "mine"]}, {"input": [str(formatted)], "corpus": ["mine"]}):
        with pytest.raises(UsageError, match=r"^--corpus mine: .*part-0.jsonl named twice \((--corpus given twice|"
                                             r"also by --input)\); give each input file once$"):
            vocab(workdir=tmp_path / "w", out=tmp_path / "v.txt", vocab_size=200, unused=0, **given)
    assert not (tmp_path / "v.txt").exists()


def test_a_stages_manifest_given_as_input_is_refused(tmp_path):
    """`vocab --input SHARDED/training/* SHARDED/manifest.json` (a glob over a stage's output) read the manifest's
    JSON as corpus text and trained on its keys, exit 0; shard refuses it the same way."""
    ok(run_cli("shard", "--input", *sample_files(), "--out", tmp_path / "sharded", "--corpus", "sample",
               "--train-shards", "1", "--test-shards", "1", "--workers", "1", "--quiet"))
    manifest = tmp_path / "sharded" / "manifest.json"
    line = one_line_error(run_cli("vocab", "--input", *sorted((tmp_path / "sharded" / "training").iterdir()),
                                  manifest, "--out", tmp_path / "v.txt", "--vocab-size", "300", "--unused", "0",
                                  "--quiet"), code=2)
    assert line == (f"bertprep vocab: error: --input {manifest}: a stage's manifest, not corpus text: give the "
                    "corpus directory or its .jsonl/.txt files")
    assert not (tmp_path / "v.txt").exists()


@pytest.mark.parametrize("case", ["gzip", "random bytes", "nul past the head"])
def test_binary_input_is_refused_naming_the_file(tmp_path, case):
    """A gzip file or random bytes trained a vocab of U+FFFD noise, said only in a progress note (none under
    --quiet)."""
    import gzip
    import random

    if case == "gzip":
        given = tmp_path / "tiny.txt.gz"
        given.write_bytes(gzip.compress(tiny_corpus(tmp_path / "tiny.txt").read_bytes()))
        expected = f"{given}: binary data (a gzip file?), expected UTF-8 text: decompress it first"
    elif case == "random bytes":
        given = tmp_path / "noise.txt"
        given.write_bytes(bytes([7, 0]) + random.Random(0).randbytes(4000))
        expected = f"{given}: binary data (a NUL byte at offset 1), expected UTF-8 text"
    else:
        given = tiny_corpus(tmp_path / "late.txt", extra=b"x" * 70000 + b"\n\0\n")
        expected = f"{given}: binary data (a NUL byte), expected UTF-8 text"
    line = one_line_error(run_cli("vocab", "--input", given, "--out", tmp_path / "v.txt", "--vocab-size", "300",
                                  "--unused", "0", "--quiet"), code=1)
    assert line == f"bertprep vocab: error: {expected}"
    assert not (tmp_path / "v.txt").exists()


def test_a_json_lines_corpus_named_otherwise_is_refused_naming_its_line(tmp_path):
    """Only a .jsonl file is read as JSON lines: a JSON-lines corpus named corpus.json (Megatron-LM's naming) was
    read as text, so '"text"', braces and quotes became words of the vocab, exit 0. A line of text that opens with
    a brace, no JSON object, is still text."""
    given = tmp_path / "corpus.json"
    given.write_text("\n" + "".join(json.dumps({"text": f"Document {i} says something here."}) + "\n"
                                     for i in range(30)))
    line = one_line_error(run_cli("vocab", "--input", tiny_corpus(tmp_path / "tiny.txt"), given, "--out",
                                  tmp_path / "v.txt", "--vocab-size", "300", "--unused", "0", "--quiet"), code=2)
    assert line == (f"bertprep vocab: error: {given}:2: a JSON object, as a JSON-lines corpus holds (one document a "
                    "line), but only a .jsonl file is read as JSON lines: read as text, its braces and keys would be "
                    f"words of the vocab; rename it {tmp_path / 'corpus.jsonl'}")
    assert not (tmp_path / "v.txt").exists()
    given.rename(tmp_path / "corpus.jsonl")
    (tmp_path / "brace.txt").write_text("{not json} but a sentence.\n")
    ok(run_cli("vocab", "--input", tmp_path / "corpus.jsonl", tmp_path / "brace.txt", "--out", tmp_path / "v.txt",
               "--vocab-size", "300", "--unused", "0", "--quiet"))


def test_characters_past_the_alphabet_limit_are_a_summary_warning(tmp_path):
    """Only the 1,000 most frequent characters are kept: a corpus of 1,200 CJK characters (each its own word) gave
    a vocab without 200 of them, every word holding one [UNK], and the summary said only that the corpus had no
    more pairs to merge. The vocab's bytes are as before; the summary now says what was left out."""
    corpus = tmp_path / "cjk.txt"
    chars = [chr(0x4E00 + i) for i in range(1200)]  # the first 1,000 twice each, the last 200 once
    corpus.write_text("".join(" ".join(chars[i:i + 50]) + "\n" for i in range(0, 1000, 50)) * 2
                      + " ".join(chars[1000:]) + "\n", encoding="utf-8")
    summary = ok(run_cli("vocab", "--input", corpus, "--out", tmp_path / "v.txt", "--vocab-size", "3000", "--unused",
                         "0", "--quiet", "--json"))
    warning = ("200 of the corpus's 1,200 characters left out (only the 1,000 most frequent are kept, as HF's "
               "BertWordPieceTokenizer keeps them): 9.09% of its characters, and a word holding one tokenizes to "
               f"[UNK] (the most frequent left out: {' '.join(chars[1000:1005])})")
    assert summary["characters"] == 1000 and summary["warnings"] == [warning]
    assert chars[999] in load_vocab(str(tmp_path / "v.txt")).ids
    assert chars[1000] not in load_vocab(str(tmp_path / "v.txt")).ids
    assert "warnings" not in vocab(input=tiny_corpus(tmp_path / "tiny.txt"), out=tmp_path / "w.txt", vocab_size=200,
                                   unused=0)


def test_a_vocab_among_the_inputs_is_refused(tmp_path, golden_dir):
    """`--input 'data/*.txt'` beside an earlier vocab.txt trained its 30,522 tokens as words ("unused0", "#"),
    exit 0. A list of words a line that lacks the four tokens is still corpus text."""
    import shutil

    given = tmp_path / "old-vocab.txt"
    shutil.copy(golden_dir / "vocab.txt", given)
    line = one_line_error(run_cli("vocab", "--input", tiny_corpus(tmp_path / "tiny.txt"), given, "--out",
                                  tmp_path / "v.txt", "--vocab-size", "3000", "--unused", "0", "--quiet"), code=2)
    assert line == (f"bertprep vocab: error: {given}: a WordPiece vocab (a token a line, [CLS] [SEP] [MASK] [UNK] "
                    "among them), not corpus text: keep it out of the inputs (a pattern or a directory matched it?)")
    assert not (tmp_path / "v.txt").exists()
    # The test tokenize and create make of their shards (corpus.is_wordpiece_vocab): a vocab saved with a blank
    # line at its end was corpus text here and no shard there. CRLF line ends, too, are a vocab's.
    vocab_text = given.read_text()
    for name, text in (("blank-end.txt", vocab_text + "\n\n"), ("crlf.txt", vocab_text.replace("\n", "\r\n"))):
        (tmp_path / name).write_bytes(text.encode())
        line = one_line_error(run_cli("vocab", "--input", tmp_path / "tiny.txt", tmp_path / name, "--out",
                                      tmp_path / "v.txt", "--vocab-size", "3000", "--unused", "0", "--quiet"), code=2)
        assert line.startswith(f"bertprep vocab: error: {tmp_path / name}: a WordPiece vocab (a token a line")
    (tmp_path / "words.txt").write_text("alpha\nbeta\n[CLS]\ngamma\n")
    ok(run_cli("vocab", "--input", tmp_path / "tiny.txt", tmp_path / "words.txt", "--out", tmp_path / "v.txt",
               "--vocab-size", "300", "--unused", "0", "--quiet"))


def test_invalid_utf8_lines_are_a_summary_warning(tmp_path):
    """Text with a few bad bytes still trains (decoded with U+FFFD, as shard does), and --json (even with --quiet)
    and the Python summary say so: it was a progress note only."""
    corpus = tiny_corpus(tmp_path / "latin1.txt", extra="café au lait\n".encode("latin-1"))
    summary = ok(run_cli("vocab", "--input", corpus, "--out", tmp_path / "v.txt", "--vocab-size", "200", "--unused",
                         "0", "--quiet", "--json"))
    warning = f"1 line(s) with invalid UTF-8 decoded with U+FFFD (first: {corpus}:41)"
    assert summary["invalid_utf8_lines"] == 1 and summary["warnings"] == [warning]
    assert vocab(input=corpus, out=tmp_path / "w.txt", vocab_size=200, unused=0)["warnings"] == [warning]
    assert "warnings" not in vocab(input=tiny_corpus(tmp_path / "clean.txt"), out=tmp_path / "x.txt", vocab_size=200,
                                   unused=0)


@pytest.mark.parametrize("case", ["trailing separator", "existing directory"])
def test_an_out_naming_a_directory_is_refused(tmp_path, case):
    """--out is the vocab.txt file to write: `--out newdir/` wrote a FILE named newdir, an existing directory
    failed only after training ("Is a directory")."""
    corpus = tiny_corpus(tmp_path / "tiny.txt")
    out = tmp_path / "newdir"
    if case == "existing directory":
        out.mkdir()
        given, expected = out, f"--out {out}: is a directory; give the vocab.txt file to write, such as {out}/vocab.txt"
    else:
        given = f"{out}/"
        expected = (f"--out {out}/: ends in a separator (a directory); give the vocab.txt file to write, such as "
                    f"{out}/vocab.txt")
    line = one_line_error(run_cli("vocab", "--input", corpus, "--out", given, "--vocab-size", "200", "--unused", "0"),
                          code=2)
    assert line == f"bertprep vocab: error: {expected}"
    assert sorted(os.listdir(tmp_path)) == (["newdir", "tiny.txt"] if case == "existing directory" else ["tiny.txt"])
    assert not out.is_file()


HOLDER = """
import sys
from bertprep.atomic import hold_file
with hold_file(sys.argv[1], "bertprep vocab"):
    print("holding", flush=True)
    sys.stdin.readline()
"""


@contextlib.contextmanager
def child_running(script, out, ready):
    """A Python process running `script` on `out`, once it has printed the line `ready`; on leaving the block it is
    told to finish (a line on its stdin) and must exit 0. It is killed where the block failed first."""
    child = subprocess.Popen([sys.executable, "-c", script, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline() == ready
        yield child
        child.stdin.write("done\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()


def test_a_second_run_into_a_held_out_is_refused_before_reading(tmp_path):
    """vocab held nothing: two runs into one --out both read and trained to the end, the last rename won, and
    the other's summary named a sha256 that was not the file's, exit 0 both. A run holds its --out now; a
    second is refused with hold()'s line before it reads anything, and once the first is done it runs."""
    corpus = tiny_corpus(tmp_path / "tiny.txt")
    out = tmp_path / "new" / "vocab.txt"
    args = ("vocab", "--input", corpus, "--out", out, "--vocab-size", "200", "--unused", "0")
    with child_running(HOLDER, out, "holding\n") as holder:
        result = run_cli(*args)
        line = one_line_error(result, code=1)
        assert line.startswith(f"bertprep vocab: error: {out}: another run is writing here (bertprep vocab, pid "
                               f"{holder.pid} on ") and line.endswith("); wait for it to finish or stop it")
        assert result.stderr.count("\n") == 1, result.stderr  # before reading: no progress line
    summary = ok(run_cli(*args, "--json", "--quiet"))
    assert summary["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert os.listdir(out.parent) == ["vocab.txt"]  # no .partial left


WRITER = """
import sys
from bertprep.atomic import atomic_open, hold_file
with hold_file(sys.argv[1], "bertprep vocab"), atomic_open(sys.argv[1], "w") as f:
    f.write("[PAD]\\n")
    print("writing", flush=True)
    sys.stdin.readline()
"""


def test_another_stages_hold_of_the_folder_leaves_a_running_vocabs_lock_and_temporary(tmp_path):
    """A folder's `.partial/` is shared: `bertprep create --out D` (its hold clears killed runs' temporaries) removed
    the lock and the temporary of a `vocab --out D/vocab.txt` running then, so a second vocab run was let in and
    the first one's rename failed. What a live process holds stays; what a killed one left still goes."""
    from bertprep.atomic import hold

    out = tmp_path / "records" / "vocab.txt"
    with child_running(WRITER, out, "writing\n"):
        held = sorted(os.listdir(out.parent / ".partial"))
        assert len(held) == 2 and "vocab.txt.lock" in held and held[0].endswith(".partial")  # its temporary
        left = out.parent / ".partial" / "part-0.12345-0badc0de.partial"  # a killed run's temporary
        left.write_bytes(b"x")
        with hold(out.parent, "bertprep create"):
            assert sorted(os.listdir(out.parent / ".partial")) == ["lock", *held]
        assert sorted(os.listdir(out.parent / ".partial")) == held
        result = run_cli("vocab", "--input", tiny_corpus(tmp_path / "tiny.txt"), "--out", out, "--vocab-size", "200",
                         "--unused", "0")
        assert one_line_error(result, code=1).startswith(f"bertprep vocab: error: {out}: another run is writing here")
    assert out.read_text() == "[PAD]\n" and os.listdir(out.parent) == ["vocab.txt"]


def test_an_out_named_as_a_stages_manifest_is_refused(tmp_path):
    """`vocab --out SHARDED/manifest.json` replaced shard's manifest with the vocab, exit 0: every stage then
    refused the folder ("damaged manifest (not JSON ...)"). A vocab named manifest.json is refused first."""
    corpus = tiny_corpus(tmp_path / "tiny.txt")
    sharded = tmp_path / "sharded"
    assert run_cli("shard", "--input", corpus, "--out", sharded, "--corpus", "tiny", "--quiet").returncode == 0
    before = (sharded / "manifest.json").read_bytes()
    for out in (sharded / "manifest.json", tmp_path / "new" / "manifest.json"):
        result = run_cli("vocab", "--input", corpus, "--out", out, "--vocab-size", "200", "--unused", "0")
        assert one_line_error(result, code=2) == (f"bertprep vocab: error: --out {out}: the name of a stage's "
                                                  "manifest, which every stage reads as one; name the vocab file "
                                                  "otherwise, such as vocab.txt")
    assert (sharded / "manifest.json").read_bytes() == before and not (tmp_path / "new").exists()


def test_an_out_under_a_file_is_refused_before_training(tmp_path):
    """vocab writes its one file at the end: `--out corpus.txt/vocab.txt` read and trained on the whole corpus
    and then failed with "Not a directory" (exit 1, after a progress line)."""
    corpus = tiny_corpus(tmp_path / "tiny.txt")
    other = tiny_corpus(tmp_path / "other.txt")
    for out in (other / "vocab.txt", other / "new" / "vocab.txt"):
        result = run_cli("vocab", "--input", corpus, "--out", out, "--vocab-size", "200", "--unused", "0")
        line = one_line_error(result, code=2)
        assert line == f"bertprep vocab: error: --out {out}: {other} is a file, not a directory to write the vocab in"
        assert result.stderr.count("\n") == 1, result.stderr  # before reading: no progress line
    assert sorted(os.listdir(tmp_path)) == ["other.txt", "tiny.txt"]


def test_an_out_under_a_dangling_link_is_refused_before_training(tmp_path):
    """`--out link/sub/vocab.txt` where `link` is a symbolic link to nothing passed vocab's output check and
    failed with `bertprep vocab: error: …/link/sub/vocab.txt: No such file or directory`, exit 1, naming neither
    the flag nor the link."""
    corpus = tiny_corpus(tmp_path / "tiny.txt")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    out = link / "sub" / "vocab.txt"
    result = run_cli("vocab", "--input", corpus, "--out", out, "--vocab-size", "200", "--unused", "0")
    line = one_line_error(result, code=2)
    assert line == (f"bertprep vocab: error: --out {out}: {link} is a symbolic link to {tmp_path / 'nowhere'}, "
                    "which does not exist: nothing can be made under it")
    assert result.stderr.count("\n") == 1, result.stderr  # before reading: no progress line
    assert sorted(os.listdir(tmp_path)) == ["link", "tiny.txt"]
