"""Samples/s per core of bertprep's TFRecord and OFRecord readers next to tf.data, same run.

    python scripts/bench_loader.py [--records 20000] [--workers 4] [--repeat 3]

For 128/20 (golden G1) and 512/80 (golden G2), the records are repeated into
one file per format of about --records records. In a fresh process pinned to
one core per measurement, it times
`formats.read_batches` (batch 256) for each format, the trainer's shuffled
stream on top of it, and tf.data's `TFRecordDataset` + `parse_example`
(batch 256, one thread); then --workers processes, each reading its own copy,
for the aggregate rate. Prints each rate and its ratio to tf.data's.
Targets (issue 5): each reader >= 0.5x tf.data per core; >= 3.5x its
one-core rate with 4 workers (needs >= 4 cores).
"""

import argparse
import multiprocessing
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bertprep import formats  # noqa: E402
from bertprep.formats.schemas import PRETRAINING  # noqa: E402

SHAPES = {(128, 20): "G1", (512, 80): "G2"}
BATCH = 256


def shared_dir():
    return os.environ.get("BERTPREP_SHARED") or os.path.join(os.path.dirname(REPO), "shared")


def make_files(directory, golden, count):
    base = list(formats.read_records(os.path.join(shared_dir(), "fixtures", "golden", f"{golden}.tfrecord")))
    records = [base[i % len(base)] for i in range(count)]
    paths = {}
    for fmt in formats.FORMATS:
        paths[fmt] = os.path.join(directory, f"{golden}-{count}.{fmt}")
        formats.write_records(paths[fmt], records, fmt)
    return paths


def rate_reader(path, fmt):
    next(iter(formats.read_batches([path], BATCH, fmt)))  # a first batch, not timed: as tf.data's take(1) below
    start = time.perf_counter()
    n = sum(len(b["input_ids"]) for b in formats.read_batches([path], BATCH, fmt))
    return n / (time.perf_counter() - start)


def rate_stream(path, fmt):
    from trainer.data import Records, RecordStream

    with tempfile.TemporaryDirectory() as directory:  # the link only, removed after the run
        split = os.path.join(directory, fmt, "training")
        os.makedirs(split)
        os.symlink(path, os.path.join(split, "x.tfrecord" if fmt == "tfrecord" else "part-0"))
        records = Records(directory, fmt)
        stream = RecordStream(records, "training", BATCH, seed=1)
        total = stream.epoch_size // BATCH
        batches = stream.batches()
        next(batches)  # a first batch, not timed: as tf.data's take(1) below
        start = time.perf_counter()
        for _, _batch in zip(range(total), batches):
            pass
        return total * BATCH / (time.perf_counter() - start)


def rate_tf_data(path, seq, pred):
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    spec = {name: tf.io.FixedLenFeature([PRETRAINING.feature(name).size({"seq": seq, "pred": pred})],
                                        tf.float32 if name == "masked_lm_weights" else tf.int64)
            for name in PRETRAINING.names}
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    # no Python control flow to convert, and autograph would leave its generated module in the temp directory
    parse = tf.autograph.experimental.do_not_convert(lambda x: tf.io.parse_example(x, spec))
    dataset = tf.data.TFRecordDataset(path).batch(BATCH).map(parse)
    dataset = dataset.with_options(options)
    for _ in dataset.take(1):
        pass
    start = time.perf_counter()
    n = sum(int(b["input_ids"].shape[0]) for b in dataset)
    return n / (time.perf_counter() - start)


def _pin(core):
    os.sched_setaffinity(0, {core})


def best(fn, repeat, *args):
    """Best of `repeat` runs of fn(*args) in a fresh process pinned to one core (so no thread
    pool of an earlier measurement, e.g. TensorFlow's, competes for that core)."""
    context = multiprocessing.get_context("spawn")
    core = sorted(os.sched_getaffinity(0))[0]
    with context.Pool(1, initializer=_pin, initargs=(core,)) as pool:
        return max(pool.apply(fn, args) for _ in range(repeat))


def parallel_rate(paths, fmt, workers):
    """Aggregate samples/s of `workers` processes reading one file each, timed from outside."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        pool.map(rate_reader_count, [(paths[0], fmt)] * workers)  # start-up and imports, not timed
        start = time.perf_counter()
        counts = pool.map(rate_reader_count, [(p, fmt) for p in paths[:workers]])
        return sum(counts) / (time.perf_counter() - start)


def rate_reader_count(item):
    path, fmt = item
    return sum(len(b["input_ids"]) for b in formats.read_batches([path], BATCH, fmt))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000, help="records per file at 128/20 (512/80: a quarter)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    args = parser.parse_args()
    if args.records < 4 * BATCH:  # 512/80 reads a quarter, and the trainer's stream needs one whole batch
        parser.error(f"--records must be at least {4 * BATCH} (512/80 reads a quarter of them, and the trainer's "
                     f"stream needs a batch of {BATCH}), not {args.records}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cores = sorted(os.sched_getaffinity(0))
    native = formats.batches._native is not None
    print(f"cores available: {len(cores)}; bertprep C reader: {'yes' if native else 'no (pure Python)'}")
    with tempfile.TemporaryDirectory() as directory:
        rows = []
        for (seq, pred), golden in SHAPES.items():
            count = args.records if seq == 128 else args.records // 4
            paths = make_files(directory, golden, count)
            copies = {fmt: [paths[fmt]] + [os.path.join(directory, f"{golden}-copy{i}.{fmt}")
                                           for i in range(1, args.workers)]
                      for fmt in formats.FORMATS}
            for fmt in formats.FORMATS:
                for copy in copies[fmt][1:]:
                    os.link(paths[fmt], copy)
            parallel = {fmt: parallel_rate(copies[fmt], fmt, args.workers) for fmt in formats.FORMATS}
            baseline = best(rate_tf_data, args.repeat, paths["tfrecord"], seq, pred)
            rows.append((f"{seq}/{pred}", "tf.data TFRecord + parse_example (1 core)", baseline, 1.0))
            for fmt in formats.FORMATS:
                single = best(rate_reader, args.repeat, paths[fmt], fmt)
                rows.append((f"{seq}/{pred}", f"bertprep {fmt} read_batches (1 core)", single, single / baseline))
                stream = best(rate_stream, args.repeat, paths[fmt], fmt)
                rows.append((f"{seq}/{pred}", f"trainer stream {fmt}, shuffled (1 core)", stream, stream / baseline))
                rows.append((f"{seq}/{pred}", f"bertprep {fmt} read_batches, {args.workers} processes",
                             parallel[fmt], parallel[fmt] / baseline))
                rows.append((f"{seq}/{pred}", f"  scaling {args.workers} processes / 1 core", None,
                             parallel[fmt] / single))
    print(f"{'shape':<8} {'reader':<48} {'samples/s':>12} {'x tf.data':>10}")
    for shape, name, rate, ratio in rows:
        shown = f"{rate:12,.0f}" if rate is not None else " " * 12
        print(f"{shape:<8} {name:<48} {shown} {ratio:10.2f}")
    if len(cores) < args.workers:
        print(f"note: only {len(cores)} cores here, so {args.workers} processes share them; "
              f"the scaling target needs >= {args.workers} cores")


if __name__ == "__main__":
    main()
