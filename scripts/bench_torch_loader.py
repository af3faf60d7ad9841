"""Samples/s per core of the PyTorch loader with dynamic masking next to bertprep's static reader, same run;
and length binning's real-token fraction at 512 on short documents.

    python scripts/bench_torch_loader.py [--copies 40] [--repeat 3] [--seconds 1] [--json]

The corpus is the embedded sample corpus's training shards repeated --copies times (documents
repeat; speed does not care). In one invocation it creates, with --dupe-factor
1, static records and dynamic (unmasked) records at 128/20, then times in a
fresh process pinned to one core, as samples per CPU second of passes run
for --seconds of CPU time (best of --repeat runs, the three taking turns,
after one untimed pass of each: the process's first pass imports, loads
the C core and reads the records from disk, up to 25x slower than the
next on the development machine, and was timed in the first run, the only
one at --repeat 1):
  - bertprep's static reader: formats.read_batches, batch 256 (the baseline);
  - bertprep.torch.BertRecords over the static records (shuffled, tensors);
  - bertprep.torch.BertRecords over the dynamic records (shuffled, masked per
    batch, tensors; each pass a new epoch: new order, new masks).
Masking uses the C core when it was built (python setup.py build_ext
--inplace), else NumPy; the figures say which, and also give the loader
with NumPy masking and masking alone (each path) over pre-decoded batches.
It prints each rate and its ratio to the baseline (issue 22's target: the
dynamic loader >= 0.5x), and how many such cores give 24,000 samples/s (an
8-GPU host's need). Then it creates records at 512/80 from the same corpus,
whose documents are short, and prints the real-token fraction of the batches
without binning and with --bin-size 32, 64 and 128.
"""

import argparse
import contextlib
import glob
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertprep import formats  # noqa: E402
from bertprep.binning import bin_width, bins_of  # noqa: E402
from bertprep.cli import main as bertprep_main  # noqa: E402
from bertprep.stages.create import sample_paths  # noqa: E402

BATCH = 256
HOST_TARGET = 24000  # samples/s an 8-GPU host needs (issue 22)


def make_records(directory, copies, seq, pred, masking):
    corpus, vocab = sample_paths()
    text = os.path.join(directory, "corpus.txt")
    if not os.path.exists(text):
        body = ""
        for shard in sorted(glob.glob(os.path.join(corpus, "training", "*.txt"))):
            with open(shard, encoding="utf-8") as f:
                body += f.read().rstrip("\n") + "\n\n"
        with open(text, "w", encoding="utf-8") as f:
            f.write(body * copies)
    out = os.path.join(directory, f"{masking}-{seq}")
    assert bertprep_main(["create", "--input", text, "--vocab", vocab, "--out", out, "--seq", str(seq),
                          "--pred", str(pred), "--dupe-factor", "1", "--masking", masking, "--format", "tfrecord",
                          "--workers", "1", "--corpus", "bench", "--min-parts", "1", "--quiet"]) == 0
    found, = glob.glob(os.path.join(out, "*", "bench"))
    return found


def _timed_passes(one_pass, seconds):
    """Samples per CPU second of the process over passes run until `seconds` of CPU time: CPU time, not
    wall time, so that other work on a shared machine slows the figure less."""
    samples, start = 0, time.process_time()
    epoch = 0
    while True:
        samples += one_pass(epoch)
        epoch += 1
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return samples / elapsed


def rate_static_reader(directory, seconds):
    path, = glob.glob(os.path.join(directory, "tfrecord", "training", "*.tfrecord"))
    return _timed_passes(lambda epoch: sum(len(b["input_ids"]) for b in formats.read_batches([path], BATCH,
                                                                                            "tfrecord")), seconds)


def rate_torch(directory, seconds, numpy_masking=False):
    import torch

    torch.set_num_threads(1)
    from bertprep import masking
    from bertprep.torch import BertRecords

    dataset = BertRecords(directory, BATCH, seed=1)

    def one_epoch(epoch):  # each epoch its own order (and masks, for dynamic records)
        dataset.set_epoch(epoch)
        return sum(len(b["input_ids"]) for b in dataset)

    with _masking_path(masking, numpy_masking):
        return _timed_passes(one_epoch, seconds)


@contextlib.contextmanager
def _masking_path(masking, numpy_masking):
    """With numpy_masking, what a machine without the C core runs; the pool's process is reused, so undone after."""
    built = masking._native_mask_batch
    if numpy_masking:
        masking._native_mask_batch = None
    try:
        yield
    finally:
        masking._native_mask_batch = built


def rate_torch_numpy_masking(directory, seconds):
    return rate_torch(directory, seconds, numpy_masking=True)


def rate_masking_alone(directory, seconds, numpy_masking=False):
    """Samples/s of DynamicMasking.apply alone, over the epoch's batches decoded beforehand."""
    from bertprep import masking
    from bertprep.torch import BertRecords

    dataset = BertRecords(directory, BATCH, seed=1)
    batches = [(dataset.index.decode(p), p) for p in dataset.batches_of_rank()]
    apply = dataset.index.masking.apply
    with _masking_path(masking, numpy_masking):
        return _timed_passes(lambda epoch: sum(len(apply(b, epoch, p)["input_ids"]) for b, p in batches), seconds)


def rate_masking_alone_numpy(directory, seconds):
    return rate_masking_alone(directory, seconds, numpy_masking=True)


def _pin(core):
    os.sched_setaffinity(0, {core})


def best_interleaved(runs, repeat, seconds):
    """{name: best rate of `repeat` runs of fn(directory, seconds)} for runs {name: (fn, directory)}, the
    names taking turns (A B C A B C ...) so that a busy spell of the machine hits all of them. Each fn first
    runs one pass untimed (0 seconds: _timed_passes stops after one), so that no timed run pays the pool
    process's cold start: its imports, the C core's load, the records' first read from disk."""
    context = multiprocessing.get_context("spawn")
    core = sorted(os.sched_getaffinity(0))[0]
    rates = {name: 0.0 for name in runs}
    with context.Pool(1, initializer=_pin, initargs=(core,)) as pool:
        for fn, directory in runs.values():
            pool.apply(fn, (directory, 0.0))
        for _ in range(repeat):
            for name, (fn, directory) in runs.items():
                rates[name] = max(rates[name], pool.apply(fn, (directory, seconds)))
    return rates


def real_token_fractions(directory, bin_sizes):
    """{label: real tokens / positions fed} over one epoch of batches of BATCH, unbinned and per bin size."""
    from bertprep.torch import RecordIndex, epoch_batches

    index = RecordIndex(directory)
    lengths, seq = index.lengths(), index.dims["seq"]
    # Every record counts (drop_last False): a bin's short last batch is padded like the others.
    plain = epoch_batches(len(index), BATCH, 1, 0, drop_last=False)
    fractions = {"unbinned": _fraction(lengths, plain, lambda batch: seq)}
    for size in bin_sizes:
        batches = epoch_batches(len(index), BATCH, 1, 0, lengths, size, drop_last=False)
        fractions[f"--bin-size {size}"] = _fraction(
            lengths, batches, lambda batch: bin_width(bins_of(lengths[batch], size).max(), size, seq))
    return fractions, float(lengths.mean()), len(index)


def _fraction(lengths, batches, width_of):
    real = sum(int(lengths[b].sum()) for b in batches)
    fed = sum(len(b) * width_of(b) for b in batches)
    return real / fed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40, help="times the sample corpus is repeated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds of passes per run")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    if args.copies < 1:
        parser.error(f"--copies must be at least 1, not {args.copies}")
    cores = len(os.sched_getaffinity(0))
    from bertprep import masking

    native_masking = masking._native_mask_batch is not None
    directory = tempfile.mkdtemp(prefix="bench-torch-")
    try:
        static = make_records(directory, args.copies, 128, 20, "static")
        dynamic = make_records(directory, args.copies, 128, 20, "dynamic")
        records = sum(1 for _ in formats.iter_payloads(glob.glob(os.path.join(static, "tfrecord", "training", "*"))[0]))
        if records < BATCH:  # the loaders drop a short last batch: nothing to time
            parser.error(f"--copies {args.copies} makes {records} records at 128/20, fewer than one batch of "
                         f"{BATCH}; give --copies {-(-BATCH * args.copies // records)} or more")
        rates = best_interleaved({"baseline": (rate_static_reader, static), "torch_static": (rate_torch, static),
                                  "torch_dynamic": (rate_torch, dynamic),
                                  "torch_dynamic_numpy": (rate_torch_numpy_masking, dynamic),
                                  "masking_alone": (rate_masking_alone, dynamic),
                                  "masking_alone_numpy": (rate_masking_alone_numpy, dynamic)},
                                 args.repeat, args.seconds)
        baseline, torch_static, torch_dynamic = rates["baseline"], rates["torch_static"], rates["torch_dynamic"]
        long = make_records(directory, args.copies, 512, 80, "dynamic")
        fractions, mean_length, long_records = real_token_fractions(long, (32, 64, 128))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    figures = {
        "records_128": records, "cores_available": cores,
        "static_reader_per_core": baseline, "torch_static_per_core": torch_static,
        "torch_dynamic_per_core": torch_dynamic, "torch_dynamic_vs_static_reader": torch_dynamic / baseline,
        "masking": "C core" if native_masking else "NumPy (C core not built)",
        "torch_dynamic_numpy_masking_per_core": rates["torch_dynamic_numpy"],
        "masking_alone_per_core": rates["masking_alone"], "masking_alone_numpy_per_core": rates["masking_alone_numpy"],
        "cores_for_24000": HOST_TARGET / torch_dynamic,
        "records_512": long_records, "mean_length_512": mean_length, "real_token_fraction_512": fractions,
    }
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(f"128/20, {records:,} records, batch {BATCH}, one pinned core, samples per CPU second, best of "
          f"{args.repeat} runs of {args.seconds:g} s after one untimed pass each:")
    print(f"  {'bertprep static reader (read_batches)':<52} {baseline:10,.0f} samples/s  1.00x")
    print(f"  {'bertprep.torch, static records':<52} {torch_static:10,.0f} samples/s  {torch_static / baseline:.2f}x")
    print(f"  {'bertprep.torch, dynamic masking (' + figures['masking'] + ')':<52} {torch_dynamic:10,.0f} samples/s  "
          f"{torch_dynamic / baseline:.2f}x")
    numpy_rate = rates["torch_dynamic_numpy"]
    print(f"  {'bertprep.torch, dynamic masking in NumPy':<52} {numpy_rate:10,.0f} samples/s  "
          f"{numpy_rate / baseline:.2f}x")
    for key, label in (("masking_alone", figures["masking"]), ("masking_alone_numpy", "NumPy")):
        print(f"  {'masking alone (DynamicMasking.apply), ' + label:<52} {rates[key]:10,.0f} samples/s  "
              f"{BATCH / rates[key] * 1e3:.2f} ms per batch")
    print(f"  cores for {HOST_TARGET:,} samples/s (8-GPU host) with dynamic masking: {HOST_TARGET / torch_dynamic:.1f}")
    print(f"512/80, {long_records:,} records of mean length {mean_length:.0f} (short documents), "
          f"real tokens / positions fed:")
    for label, fraction in fractions.items():
        print(f"  {label:<16} {fraction:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
