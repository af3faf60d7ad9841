"""Speed of each `bertprep._native` function against its pure-Python twin, measured in this run.

    python scripts/bench_native.py [--repeat 5]

Inputs are the golden files and the benchmark corpus wt2.txt
(BERTPREP_SHARED or ../shared beside the checkout). Each line: the twin's time, the native time (best of --repeat),
and the ratio; the record lines also give records/s on one core. The last line compares `bertprep._wordpiece`
with HF tokenizers (one thread) on the ASCII lines of wt2.txt, which are the lines the C code tokenizes.
Native results are checked against the twin's before anything is timed.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["TOKENIZERS_PARALLELISM"] = "false"  # HF tokenizers on one thread, as the C tokenizer runs

from bertprep import formats  # noqa: E402
from bertprep.formats import crc32c as crc_module  # noqa: E402
from bertprep.formats.schemas import PRETRAINING  # noqa: E402

try:
    from bertprep import _native
except ImportError:
    sys.exit("bertprep._native is not built: python setup.py build_ext --inplace")


def best_time(function, repeat):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def compact_layout(records):
    """bertprep.instances.Instances' arrays rebuilt from decoded records (uint16 tokens)."""
    tokens, starts, a_lengths, positions, labels, mask_starts, labels_nsp = [], [0], [], [], [], [0], []
    for r in records:
        n = int(r["input_mask"].sum())
        m = int(r["masked_lm_weights"].sum())
        tokens.append(r["input_ids"][:n])
        starts.append(starts[-1] + n)
        a_lengths.append(int((r["segment_ids"][:n] == 0).sum()) - 2)
        positions.append(r["masked_lm_positions"][:m])
        labels.append(r["masked_lm_ids"][:m])
        mask_starts.append(mask_starts[-1] + m)
        labels_nsp.append(int(r["next_sentence_labels"][0]))
    return (np.concatenate(tokens).astype(np.uint16), np.array(starts, np.int64), np.array(a_lengths, np.int32),
            np.concatenate(positions).astype(np.uint16), np.concatenate(labels).astype(np.uint16),
            np.array(mask_starts, np.int64), np.array(labels_nsp, np.uint8))


def report(label, twin_seconds, native_seconds, records=None, twin="python", unit="records"):
    line = f"{label:<42} {twin} {twin_seconds * 1e3:9.1f} ms   native {native_seconds * 1e3:8.2f} ms   " \
           f"ratio {twin_seconds / native_seconds:7.1f}x"
    if records:
        line += f"   {records / native_seconds:10,.0f} {unit}/s native, {records / twin_seconds:8,.0f} {twin}"
    print(line)


def read_all(paths, batch_size, native):
    formats.batches._native = _native if native else None
    try:
        return sum(len(batch["input_ids"]) for batch in formats.read_batches(paths, batch_size))
    finally:
        formats.batches._native = _native


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    shared = Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared")
    golden = shared / "fixtures" / "golden"
    print(f"crc32c implementation: {_native.crc32c_implementation}; best of {args.repeat}")

    data = (golden / "G1.tfrecord").read_bytes()
    assert _native.crc32c(data) == crc_module._python_crc32c(data)
    report(f"crc32c ({len(data) / 1e6:.1f} MB)", best_time(lambda: crc_module._python_crc32c(data), 1),
           best_time(lambda: _native.crc32c(data), args.repeat))

    records = list(formats.read_records(golden / "G1.tfrecord"))
    layout = compact_layout(records)
    n = len(records)
    for fmt in ("tfrecord", "ofrecord"):
        expected = formats.encode_instances_python(fmt, 128, 20, *layout, 0, n)
        assert _native.encode_instances(fmt, 128, 20, *layout, 0, n) == expected
        report(f"encode_instances {fmt} ({n} records)",
               best_time(lambda: formats.encode_instances_python(fmt, 128, 20, *layout, 0, n), 1),
               best_time(lambda: _native.encode_instances(fmt, 128, 20, *layout, 0, n), args.repeat), n)

    features = formats.decoder_features(PRETRAINING, {"seq": 128, "pred": 20})
    for fmt in ("tfrecord", "ofrecord"):
        payloads = list(formats.iter_payloads(golden / f"G1.{fmt}"))
        outputs = [np.empty((n, length), np.float32 if is_float else np.int64) for _, is_float, length in features]
        twin = [np.empty_like(out) for out in outputs]
        _native.decode_batch(payloads, fmt, features, outputs)
        formats.decode_batch_python(payloads, fmt, features, twin)
        assert all(np.array_equal(a, b) for a, b in zip(outputs, twin))
        twin_seconds = best_time(lambda: formats.decode_batch_python(payloads, fmt, features, outputs), 1)
        report(f"decode_batch {fmt} ({n} records)", twin_seconds,
               best_time(lambda: _native.decode_batch(payloads, fmt, features, outputs), args.repeat), n)
        report(f"decode_bert_batch {fmt} ({n} records)", twin_seconds,
               best_time(lambda: _native.decode_bert_batch(payloads, fmt, 128, 20, *outputs), args.repeat), n)

    # instance creation on the benchmark corpus at 128/20, dupe 5
    # (docs/reference-facts.md, "Measured reference run on wt2")
    from bertprep import instances
    from bertprep.corpus import read_text, split_documents, tokenize_corpus
    from bertprep.tokenization import LineTokenizer, load_vocab

    vocab = load_vocab(golden / "vocab.txt")
    wt2 = read_text(shared / "fixtures" / "bench" / "wt2.txt")
    corpus = tokenize_corpus(wt2, LineTokenizer(vocab))
    masking = instances.MaskingVocab.from_vocab(vocab)
    params = instances.InstanceParams(128, 20, 5)
    made = {}

    def create(use_native):
        made[use_native] = instances.create_instances(corpus, params, masking, 12345, use_native=use_native)

    twin_seconds = best_time(lambda: create(False), 1)
    native_seconds = best_time(lambda: create(True), args.repeat)
    for field in made[False].__dataclass_fields__:
        assert np.array_equal(getattr(made[False], field), getattr(made[True], field)), field
    report(f"create_instances wt2 ({len(made[True])} instances)", twin_seconds, native_seconds, len(made[True]))
    layout = [getattr(made[True], f) for f in made[True].__dataclass_fields__]
    for fmt in ("tfrecord", "ofrecord"):
        count = len(made[True])
        report(f"encode_instances wt2 {fmt}", best_time(lambda: formats.encode_instances_python(
            fmt, 128, 20, *layout, 0, count), 1), best_time(lambda: _native.encode_instances(
            fmt, 128, 20, *layout, 0, count), args.repeat), count)

    # read_batches over a file of 10 copies of G1 (13,730 records), batch 256, as a loader reads it
    for fmt in ("tfrecord", "ofrecord"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"ten.{fmt}"
            path.write_bytes((golden / f"G1.{fmt}").read_bytes() * 10)
            count = read_all([path], 256, True)
            assert count == 10 * n
            report(f"read_batches {fmt} ({count} records)", best_time(lambda: read_all([path], 256, False), 1),
                   best_time(lambda: read_all([path], 256, True), args.repeat), count)

    # dedup's pass 1 on wt2's lines as 12-line documents: each document's 5-gram shingles hashed (xxh32), then
    # the documents' MinHash values (128 permutations) at once
    from bertprep.stages import dedup

    text_lines = [line for line in wt2.splitlines() if line.strip()]
    documents = [dedup.normalized_words(" ".join(text_lines[i:i + 12])) for i in range(0, len(text_lines), 12)]
    shingles = [dedup.ngram_hashes(words, 5, bits=32) for words in documents]
    assert all(np.array_equal(a, dedup.ngram_hashes_python(words, 5, bits=32)) for a, words in zip(shingles, documents))
    report(f"ngram_xxh32 wt2 ({len(documents)} documents)",
           best_time(lambda: [dedup.ngram_hashes_python(words, 5, bits=32) for words in documents], 1),
           best_time(lambda: [_native.ngram_xxh32(words, 5) for words in documents], args.repeat), len(documents),
           unit="documents")
    hashes, counts = np.concatenate(shingles), np.array([len(h) for h in shingles], np.int64)
    assert np.array_equal(dedup.minhashes(hashes, counts, 128), dedup.minhashes_numpy(hashes, counts, 128))
    report(f"minhash wt2 ({len(hashes):,} shingles)", best_time(lambda: dedup.minhashes_numpy(hashes, counts, 128), 1),
           best_time(lambda: dedup.minhashes(hashes, counts, 128), args.repeat), len(documents), twin="numpy",
           unit="documents")

    # WordPiece: the C tokenizer of ASCII lines against HF tokenizers on one thread, both from LineTokenizer
    lines = [line for line in split_documents(wt2)[0]
             if line.isascii()]
    native_tokenizer = LineTokenizer(vocab).warmed()
    hf_tokenizer = LineTokenizer(vocab, use_native=False).warmed()
    assert native_tokenizer.use_native
    for a, b in zip(native_tokenizer.encode(lines), hf_tokenizer.encode(lines)):
        assert np.array_equal(a, b)
    megabytes = sum(len(line) for line in lines) / 1e6
    hf_seconds = best_time(lambda: hf_tokenizer.encode(lines), 1)
    native_seconds = best_time(lambda: native_tokenizer.encode(lines), args.repeat)
    report(f"wordpiece wt2 ASCII lines ({megabytes:.1f} MB)", hf_seconds, native_seconds, twin="HF")
    print(f"{'':<42} HF {megabytes / hf_seconds:.2f} MB/s on one thread, native {megabytes / native_seconds:.1f} MB/s")


if __name__ == "__main__":
    main()
