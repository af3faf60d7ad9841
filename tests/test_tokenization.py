"""The C fast path for ASCII lines gives exactly HF's (= the reference's) tokens."""

import numpy as np
import pytest

from bertprep.corpus import read_text, split_documents
from bertprep.tokenization import LineTokenizer, load_vocab, _wordpiece

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
