"""The C fast path for ASCII lines gives exactly HF's (= the reference's) tokens, and a long
line cut into pieces gives exactly the tokens of the whole line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertprep.corpus import read_text, split_documents
from bertprep.tokenization import LineTokenizer, _wordpiece, cut_line, load_vocab

EDGE_LINES = [
    "a\x01b c\x7fd",  # control characters vanish and join their neighbours
    "x" * 200,  # the longest word the reference still splits
    "x" * 201,  # one longer: [UNK]
    "Hello,World!! (quoted) 'single' \"double\" a-b_c~d`e",
    "UPPER case-word's ZZQXJKW",  # no vocab match for a piece: the whole word is [UNK]
    "ab\tcd\x0bef\x0cgh\x1cij",
    "[CLS] [MASK] [SEP] [UNK]",  # text never yields special tokens
    "...---///",
    "ünïcödé and ascii mixed — dash",
]


@pytest.mark.skipif(_wordpiece is None, reason="C extension not built")
@pytest.mark.parametrize("lower_case", [True, False])
@pytest.mark.parametrize("corpus", ["golden/corpus.txt", "bench/wt2.txt"])
def test_native_ascii_path_matches_hf_tokenizers(shared_dir, corpus, lower_case):
    vocab = load_vocab(shared_dir / "fixtures" / "golden" / "vocab.txt")
    lines, _ = split_documents(read_text(shared_dir / "fixtures" / corpus))
    lines += EDGE_LINES
    fast_tokens, fast_counts = LineTokenizer(vocab, lower_case).encode(lines)
    hf_tokens, hf_counts = LineTokenizer(vocab, lower_case, use_native=False).encode(lines)
    assert np.array_equal(fast_counts, hf_counts)
    assert np.array_equal(fast_tokens, hf_tokens)


def test_words_of_101_to_200_characters_are_split_not_unk(golden_dir):
    vocab = load_vocab(golden_dir / "vocab.txt")
    tokens, counts = LineTokenizer(vocab, use_native=False).encode(["a" * 150])
    assert counts[0] > 1 and vocab.id_of("[UNK]") not in tokens


# Lines whose characters around every possible cut are of every kind: accents and combining marks,
# CJK ideographs beside punctuation, kana and Hangul (not cut points), Greek final sigma, control
# characters, non-ASCII spaces, surrogate-plane ideographs, a 200-character word next to an ideograph.
BOUNDARY_LINES = [
    "Le café a 中文字符和日本語のテキスト, naïve résumé! ¿Qué tal? Straße.",
    "ΟΔΟΣ ΟΔΟΣ σίσυφος ΣΊΣΥΦΟΣ. Ο ΣΟΦΟΣ",
    "a \u0301b c\u0301 \u0301\u0301d e\u0301\u0301 f",
    "x\x00y z\x1cw \ufffdv \x7f u\x1f \x0b t",
    "tab\tsep\rcr  double  space\t\t end",
    "中。文，字！ (括号) 「引号」“quotes”中—dash",
    "\uf900\uf901 \U00020000\U0002a6df\U0002f800 compat and extension B",
    "東京タワーとスカイツリー 한국어 텍스트 مرحبا بالعالم שלום สวัสดีครับ",
    "\u00a0nbsp\u2009thin\u3000ideographic\u202fnarrow \u2028line\u2029para",
    "x" * 200 + "中" + "y" * 201 + " " + "é" * 150 + "文",
    "don't stop—it's 3.14... e.g. U.S.A. $5,000 #hash @at 50% a&b <tag>",
    "hi 👋🏽 there 👨‍👩‍👧 family ǃKung",
    "ASCII only, here: cut at spaces, tabs\tand\rreturns.",
]


def test_cut_line_cuts_only_where_basic_tokenizer_splits():
    assert cut_line("aaa bbb ccc", 2) == ["aaa", " bbb", " ccc"]
    assert cut_line("aaa bbb ccc", 4) == ["aaa bbb", " ccc"]
    assert cut_line("中文字", 1) == ["中", "文", "字"]
    assert cut_line("ab中cd", 1) == ["ab", "中cd"]
    assert cut_line("x" * 10, 3) == ["x" * 10]  # no cut point: one word stays whole
    assert cut_line("a\x1cb\u00a0c\u3000dタワー", 1) == ["a\x1cb\u00a0c\u3000dタワー"]  # none of these is one
    assert cut_line("short", 100) == ["short"] and cut_line("", 1) == [""]
    line = " ".join(BOUNDARY_LINES)
    assert "".join(cut_line(line, 3)) == line


@pytest.mark.parametrize("use_native", [True, False] if _wordpiece is not None else [False])
@pytest.mark.parametrize("lower_case", [True, False])
def test_cut_lines_give_the_tokens_of_whole_lines(golden_dir, use_native, lower_case):
    vocab = load_vocab(golden_dir / "vocab.txt")
    lines = BOUNDARY_LINES + EDGE_LINES
    whole = LineTokenizer(vocab, lower_case, use_native, max_piece_chars=None).encode(lines)
    for max_chars in (1, 2, 3, 5, 8, 13):
        cut = LineTokenizer(vocab, lower_case, use_native, max_piece_chars=max_chars).encode(lines)
        assert np.array_equal(cut[1], whole[1]), max_chars
        assert np.array_equal(cut[0], whole[0]), max_chars


@pytest.mark.parametrize("corpus, max_chars",
                         [("golden/corpus.txt", 1), ("golden/corpus.txt", 40), ("bench/wt2.txt", 24)])
def test_cut_lines_give_the_tokens_of_whole_lines_on_the_golden_corpora(shared_dir, corpus, max_chars):
    vocab = load_vocab(shared_dir / "fixtures" / "golden" / "vocab.txt")
    lines, _ = split_documents(read_text(shared_dir / "fixtures" / corpus))
    assert max(map(len, lines)) > max_chars * 10  # most lines are cut, many several times
    whole = LineTokenizer(vocab, max_piece_chars=None).encode(lines)
    cut = LineTokenizer(vocab, max_piece_chars=max_chars).encode(lines)
    assert np.array_equal(cut[1], whole[1])
    assert np.array_equal(cut[0], whole[0])


LONG_LINE_PEAK = r"""
import json, resource, sys
from bertprep.tokenization import LineTokenizer, load_vocab
tokenizer = LineTokenizer(load_vocab(sys.argv[1])).warmed()
words = ["the", "river", "naive", "token", "ization", "x" * 40, "cafe,", "3.14"]
# ~8 MB of ASCII words with a few non-ASCII ones (as in the line that took 7.6 GB at 50 MB)
line = " ".join("río 中文" if i % 50_000 == 49_999 else words[i * 7 % len(words)] for i in range(800_000))
tokenizer.encode(["warm up a short line, é"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tokens, counts = tokenizer.encode([line, "a short line"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"chars": len(line), "tokens": int(counts[0]), "before_kib": before, "after_kib": after}))
"""


def test_a_long_line_is_tokenized_in_bounded_memory(golden_dir):
    # One line of a few MB: uncut, HF tokenizers held ~150 bytes per character of it (1.3 GiB here).
    result = subprocess.run([sys.executable, "-c", LONG_LINE_PEAK, str(golden_dir / "vocab.txt")], capture_output=True,
                            text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert result.returncode == 0, result.stderr
    peak = json.loads(result.stdout)
    assert peak["chars"] > 4_000_000 and peak["tokens"] > 800_000
    grown_mib = (peak["after_kib"] - peak["before_kib"]) / 1024
    assert grown_mib < 200, f"peak RSS grew by {grown_mib:.0f} MiB while tokenizing a {peak['chars']:,}-character line"


def test_a_repeated_vocab_line_takes_its_last_id_and_the_id_space_is_the_line_count(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\n[CLS]\nsat\n", encoding="utf-8")
    vocab = load_vocab(path)
    assert vocab.size == 10  # ids 0..9: an embedding table needs 10 rows, not 8 distinct tokens
    assert vocab.id_of("the") == 7 and vocab.id_of("[CLS]") == 8  # the reference's dict: the last line wins
    assert vocab.words == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat")  # its keys, first order
    assert vocab.tokens[5] == vocab.tokens[7] == "the"
    assert vocab.duplicates() == {"[CLS]": [3, 9], "the": [6, 8]}
    warning = vocab.duplicates_warning()
    assert warning.startswith(f"{path}: 2 token(s) on more than one line ('[CLS]' on lines 3, 9; 'the' on lines 6, 8)")
    assert warning.endswith("ids run to 9 (10 lines)")


def test_a_required_token_behind_a_byte_order_mark_is_named(tmp_path):
    """A vocab saved with a UTF-8 byte-order mark whose line 1 is [UNK] was refused as "vocab lacks [UNK]", the
    token an editor shows on line 1: the mark is part of the token, as the reference reads it, and now said."""
    from bertprep.errors import DataError

    path = tmp_path / "vocab.txt"
    path.write_text("\ufeff[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        load_vocab(path)
    assert str(caught.value) == (f"{path}: vocab lacks [UNK] (a BERT vocab needs [CLS], [SEP], [MASK], [UNK]); its "
                                 "line 1 is [UNK] behind a UTF-8 byte-order mark (U+FEFF), which is read as part of "
                                 "the token: save the vocab without it")
    path.write_text("\ufeff[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"vocab lacks \[UNK\] \(a BERT vocab needs \[CLS\], \[SEP\], \[MASK\], "
                                        r"\[UNK\]\)$"):
        load_vocab(path)
