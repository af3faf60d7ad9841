"""Regenerate bertprep/data/sample_vocab.txt from the shards of bertprep/data/sample_corpus/ (training, then test).

This is the exact code used to build the shipped sample vocabulary: a BERT-style
uncased WordPiece vocab (lower-casing + accent stripping) trained with the
Hugging Face `tokenizers` library, vocab_size=2000, min_frequency=1,
limit_alphabet=1000, special tokens [PAD] [UNK] [CLS] [SEP] [MASK] (so [PAD] is
id 0) and the "##" continuation prefix.

Usage (from the repository root):

    python scripts/make_sample_vocab.py            # rewrite the shipped vocab
    python scripts/make_sample_vocab.py --check    # fail if it would change

Determinism: the stock `tokenizers` BPE/WordPiece trainer is NOT deterministic
across processes (huggingface/tokenizers issue #1794): it assigns ids to the
"##"-prefixed character tokens while iterating a hash map of word counts, and
those ids break ties between equally frequent merges, so both the order and the
set of tokens change from run to run. We work around it without patching the
library: the normalizer and pre-tokenizer of the same BertWordPieceTokenizer
compute the exact initial alphabet (sorted by code point, as the trainer itself
sorts it) and the exact set of "##c" tokens (sorted), and we pass them to the
trainer after the five real special tokens. They are then already known when
training starts, get fixed ids in the same layout a normal run produces
(specials, alphabet, ##-alphabet, merges), and every run is byte-identical.
Only vocab.txt is written, so their "special" status on the in-memory trainer
object never leaks into the shipped file.
"""

import argparse
import os
import sys
import tempfile

from tokenizers import BertWordPieceTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bertprep", "data")
# The corpus is its shards in order: training 0..7, then test (the documents of the one file they were cut from).
CORPUS = os.path.join(DATA, "sample_corpus")
VOCAB = os.path.join(DATA, "sample_vocab.txt")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def initial_tokens(tok, lines, prefix="##"):
    """The alphabet and "##"-alphabet the trainer would create, in a fixed order."""
    norm = tok._tokenizer.normalizer
    pre = tok._tokenizer.pre_tokenizer
    alphabet, continuing = set(), set()
    for line in lines:
        for word, _ in pre.pre_tokenize_str(norm.normalize_str(line)):
            alphabet.update(word)
            continuing.update(word[1:])
    if len(alphabet) > 1000:
        raise SystemExit("alphabet larger than limit_alphabet; the workaround assumes nothing is dropped")
    return sorted(alphabet, key=ord) + [prefix + c for c in sorted(continuing, key=ord)]


def build_vocab_text(corpus_path=CORPUS):
    """Train the WordPiece vocab on the corpus; return vocab.txt content."""
    lines = []
    for split in ("training", "test"):
        directory = os.path.join(corpus_path, split)
        for name in sorted(os.listdir(directory), key=lambda n: int(n.rsplit("_", 1)[1].split(".")[0])):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                lines += [line for line in f.read().split("\n") if line.strip()]
    tok = BertWordPieceTokenizer(
        lowercase=True,
        strip_accents=None,  # follows lowercase: accents are stripped
        clean_text=True,
        handle_chinese_chars=True,
    )
    initial = initial_tokens(tok, lines)
    tok.train_from_iterator(
        lines,
        vocab_size=2000,
        min_frequency=1,
        limit_alphabet=1000,
        special_tokens=SPECIAL + initial,
        wordpieces_prefix="##",
        show_progress=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = tok.save_model(tmp)[0]  # writes <tmp>/vocab.txt, ordered by id
        with open(path, encoding="utf-8") as f:
            text = f.read()
    tokens = text.split("\n")
    if tokens[: len(SPECIAL)] != SPECIAL:
        raise SystemExit(f"special tokens not at ids 0..4: {tokens[:5]}")
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the shipped vocab differs")
    ap.add_argument("--out", default=VOCAB, help="output path (default: the shipped sample_vocab.txt)")
    args = ap.parse_args(argv)
    text = build_vocab_text()
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print("sample vocab up to date" if same else "sample vocab differs from a fresh build")
        return 0 if same else 1
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {args.out}: {len(text.splitlines())} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
