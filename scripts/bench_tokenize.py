"""Benchmark `bertprep tokenize --format megatron` against Megatron-LM's `tools/preprocess_data.py` on the same text.

    python scripts/bench_tokenize.py --megatron-lm /tmp/mlm-export [--text wt2.txt] [--vocab vocab.txt] [--repeat 3]

`--megatron-lm` is a directory holding Megatron-LM's `tools/` and `megatron/` (an export of its source, e.g.
`git archive <tag> tools megatron | tar -x -C DIR`; never part of this repository); its `megatron` package is put
first on PYTHONPATH, so preprocess_data runs with the megatron.core of that same tree.

Both read the same sentences: the text (one sentence a line, a blank line between documents, what `bertprep
shard` writes) is given to bertprep as one shard, and to preprocess_data as JSON lines, one a document, whose
"text" is the list of its lines. preprocess_data takes a list as the document's sentences already split, so
it runs without --split-sentences (NLTK's punkt model, which --split-sentences loads, cannot be downloaded
here) and writes what --split-sentences would for text whose splitter returns its lines. Its tokenizer is
BertWordPieceLowerCase (BertWordPieceCase with --cased) on the same vocab.txt.

Each runs as a child process with 1 worker; its wall time and the CPU time of its whole process tree
(start-up included) are measured, and sequences/s per core is sequences / CPU seconds; a line gives bertprep's
sequences/s per core and wall as multiples of Megatron-LM's (the medians'). The two outputs are
then read back and compared sentence by sentence: the share of sentences whose ids are identical, and
whether the document boundaries and the bytes are.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_shard import MEASURE

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared")  # as tests/conftest.py finds it


def documents(text):
    """The text's documents as lists of stripped non-blank lines."""
    found, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line.strip())
        elif current:
            found.append(current)
            current = []
    return found + ([current] if current else [])


def timed(command, env=None):
    result = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True,
                            env={**os.environ, **(env or {})})
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_ours(shard_dir, vocab, out, cased):
    command = [sys.executable, "-m", "bertprep", "tokenize", "--input", str(shard_dir), "--vocab", str(vocab),
               "--out", str(out), "--corpus", "bench", "--workers", "1", "--quiet"]
    return timed(command + (["--no-lower-case"] if cased else []), {"PYTHONPATH": str(REPO)})


def run_theirs(megatron_lm, jsonl, vocab, prefix, cased):
    command = [sys.executable, str(megatron_lm / "tools" / "preprocess_data.py"), "--input", str(jsonl),
               "--output-prefix", str(prefix), "--tokenizer-type",
               "BertWordPieceCase" if cased else "BertWordPieceLowerCase", "--vocab-file", str(vocab),
               "--workers", "1", "--log-interval", "100000000"]
    return timed(command, {"PYTHONPATH": str(megatron_lm)})


def compare(ours, theirs):
    """(identical sentences, sentences, same document indices, same bytes) of two indexed datasets."""
    sys.path.insert(0, str(REPO))
    from bertprep.formats import codecs

    codec = codecs.get(codecs.sequence_names()[0])
    a, b = codec.read_sequences(str(ours)), codec.read_sequences(str(theirs))
    same = sum(a.sequence(i).tolist() == b.sequence(i).tolist() for i in range(min(len(a.lengths), len(b.lengths))))
    bytes_equal = all(Path(str(ours) + s).read_bytes() == Path(str(theirs) + s).read_bytes() for s in (".bin", ".idx"))
    return same, max(len(a.lengths), len(b.lengths)), a.document_indices.tolist() == b.document_indices.tolist(), \
        bytes_equal


def median_times(runs):
    """(wall seconds, CPU seconds) of runs, each the median."""
    return statistics.median(r["wall"] for r in runs), statistics.median(r["cpu"] for r in runs)


def ratio_line(ours, theirs):
    """bertprep's speed as a multiple of Megatron-LM's, from each side's (wall, CPU) seconds: both wrote the same
    sentences, so the ratio of sequences/s is the inverse ratio of the seconds."""
    (our_wall, our_cpu), (their_wall, their_cpu) = ours, theirs
    return (f"bertprep / Megatron-LM: {their_cpu / our_cpu:.1f}x sequences/s per core, "
            f"{their_wall / our_wall:.1f}x wall")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron-lm", type=Path, required=True,
                        help="an export of Megatron-LM's tools/ and megatron/")
    parser.add_argument("--text", type=Path, default=SHARED / "fixtures" / "bench" / "wt2.txt")
    parser.add_argument("--vocab", type=Path, default=SHARED / "fixtures" / "golden" / "vocab.txt")
    parser.add_argument("--cased", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (args.megatron_lm / "tools" / "preprocess_data.py").is_file():  # before bertprep's runs, not after
        parser.error(f"--megatron-lm {args.megatron_lm}: no tools/preprocess_data.py there (an export of "
                     "Megatron-LM's tools/ and megatron/, as docs/benchmarks.md makes it)")
    text = args.text.read_text(encoding="utf-8")
    docs = documents(text)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        shard_dir = scratch / "shards" / "training"
        shard_dir.mkdir(parents=True)
        (shard_dir / "bench_training_0.txt").write_text(text, encoding="utf-8")
        jsonl = scratch / "docs.jsonl"
        jsonl.write_text("".join(json.dumps({"text": doc}) + "\n" for doc in docs), encoding="utf-8")
        ours, theirs = [], []
        for run in range(args.repeat):  # alternated, so drift in the machine's speed hits both
            ours.append(run_ours(shard_dir.parent, args.vocab, scratch / f"ours{run}", args.cased))
            theirs.append(run_theirs(args.megatron_lm, jsonl, args.vocab, scratch / f"theirs{run}", args.cased))
        ours_prefix = scratch / "ours0" / "bench" / "training" / "bench_training_0_text_sentence"
        same, total, documents_equal, bytes_equal = compare(ours_prefix, scratch / "theirs0_text_document")
    lines = sum(map(len, docs))
    print(f"bertprep tokenize vs Megatron-LM preprocess_data on {args.text.name} ({len(text.encode()) / 1e6:.1f} MB, "
          f"{len(docs):,} documents, {lines:,} sentence lines), {args.vocab.name}, "
          f"{'cased' if args.cased else 'uncased'}, 1 worker each, median of {args.repeat}")
    print(f"{'':28}{'wall s':>8}{'CPU s':>8}{'seq/s per core':>16}{'seq/s wall':>12}")
    medians = {}
    for label, runs in (("bertprep tokenize", ours), ("Megatron-LM preprocess_data", theirs)):
        wall, cpu = medians[label] = median_times(runs)
        print(f"{label:<28}{wall:>8.2f}{cpu:>8.2f}{total / cpu:>16,.0f}{total / wall:>12,.0f}")
    print(ratio_line(medians["bertprep tokenize"], medians["Megatron-LM preprocess_data"]))
    print(f"identical ids: {same:,} of {total:,} sentences ({same / total:.2%}); document indices "
          f"{'equal' if documents_equal else 'differ'}; .bin/.idx bytes {'identical' if bytes_equal else 'differ'}")


if __name__ == "__main__":
    main()
