"""Bytes on disk per record format, and what a dupe factor of 1 saves over 5.

    python scripts/bench_formats.py [--corpus fixtures/bench/wt2.txt] [--seq 128] [--pred 20] [--json] [--quiet]

Runs `bertprep create` on the corpus (fixtures/bench/wt2.txt by default,
Wikipedia articles, the golden vocab) once with --dupe-factor 5 and once with
--dupe-factor 1, each writing TFRecord, OFRecord, HDF5 and Parquet from the
same instances, and prints each format's bytes with its ratio to TFRecord at
the same dupe factor, then each format's dupe-1 bytes as a share of its
dupe-5 bytes. Byte counts are deterministic: a rerun prints the same figures.

Then a third run, `create --masking dynamic` (dupe factor 1, the unmasked
kind: no masked_lm_* features; the loaders draw a fresh mask each epoch),
and each format's dynamic bytes as a share of its static dupe-5 bytes: what
dynamic masking stores instead of five statically masked copies.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BERTPREP_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
FIXTURES = os.path.join(SHARED, "fixtures")
FORMATS = ("tfrecord", "ofrecord", "hdf5", "parquet")


RUNS = {"dupe5": (5, "static"), "dupe1": (1, "static"), "dynamic1": (1, "dynamic")}


def create(corpus, vocab, out, seq, pred, dupe, masking):
    """{format: bytes} and the instance count of one `bertprep create` run."""
    command = [sys.executable, "-m", "bertprep", "create", "--input", corpus, "--vocab", vocab, "--out", out,
               "--seq", str(seq), "--pred", str(pred), "--dupe-factor", str(dupe), "--masking", masking,
               "--format", ",".join(FORMATS), "--json", "--quiet"]
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    if proc.returncode != 0:
        sys.exit(f"bertprep create failed: {proc.stderr.strip()}")
    summary = json.loads(proc.stdout)
    (manifest,) = [os.path.join(root, "manifest.json") for root, _dirs, files in os.walk(out)
                   if "manifest.json" in files]
    with open(manifest) as f:
        files = json.load(f)["files"]
    sizes = {fmt: sum(entry["bytes"] for entry in files.values() if entry["format"] == fmt) for fmt in FORMATS}
    return sizes, sum(summary["instances"].values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=os.path.join(FIXTURES, "bench", "wt2.txt"))
    parser.add_argument("--vocab", default=os.path.join(FIXTURES, "golden", "vocab.txt"))
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--pred", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args()
    figures = {"corpus": args.corpus, "seq": args.seq, "pred": args.pred, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (dupe, masking) in RUNS.items():
            if not args.quiet:
                print(f"create --dupe-factor {dupe} --masking {masking} ...", file=sys.stderr)
            sizes, instances = create(args.corpus, args.vocab, os.path.join(tmp, name), args.seq, args.pred, dupe,
                                      masking)
            figures["runs"][name] = {"instances": instances, "bytes": sizes,
                                     "vs_tfrecord": {f: round(sizes[f] / sizes["tfrecord"], 3) for f in FORMATS}}
    runs = figures["runs"]
    for name in ("dupe1", "dynamic1"):
        figures[f"{name}_vs_dupe5"] = {f: round(runs[name]["bytes"][f] / runs["dupe5"]["bytes"][f], 3)
                                       for f in FORMATS}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{os.path.basename(args.corpus)}, seq {args.seq}, pred {args.pred}: bytes on disk (ratio to TFRecord)")
    labels = {"dupe5": "dupe 5", "dupe1": "dupe 1", "dynamic1": "dynamic, dupe 1"}
    print(f"{'format':10}" + "".join(f"{labels[n] + ' (' + format(runs[n]['instances'], ',') + ')':>28}" for n in RUNS)
          + f"{'dupe 1 / dupe 5':>18}{'dynamic / dupe 5':>18}")
    for fmt in FORMATS:
        cells = "".join(f"{runs[n]['bytes'][fmt]:>20,} ({runs[n]['vs_tfrecord'][fmt]:.3f})" for n in RUNS)
        print(f"{fmt:10}{cells}{figures['dupe1_vs_dupe5'][fmt]:>18.3f}{figures['dynamic1_vs_dupe5'][fmt]:>18.3f}")


if __name__ == "__main__":
    main()
