"""Bytes on disk per record format, and what a dupe factor of 1 saves over 5.

    python scripts/bench_formats.py [--corpus fixtures/bench/wt2.txt] [--seq 128] [--pred 20] [--json] [--quiet]

Runs `bertprep create` on the corpus (fixtures/bench/wt2.txt by default,
Wikipedia articles, the golden vocab) once with --dupe-factor 5 and once with
--dupe-factor 1, each writing TFRecord, OFRecord, HDF5 and Parquet from the
same instances, and prints each format's bytes with its ratio to TFRecord at
the same dupe factor, then each format's dupe-1 bytes as a share of its
dupe-5 bytes. Byte counts are deterministic: a rerun prints the same figures.

Dynamic masking (a fresh mask each epoch from dupe-1 data) is not in this
branch: dupe 1 here is static masked records, one copy; unmasked dynamic
records would be somewhat smaller still (no masked_lm_* features).
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


def create(corpus, vocab, out, seq, pred, dupe):
    """{format: bytes} and the instance count of one `bertprep create` run."""
    command = [sys.executable, "-m", "bertprep", "create", "--input", corpus, "--vocab", vocab, "--out", out,
               "--seq", str(seq), "--pred", str(pred), "--dupe-factor", str(dupe), "--format", ",".join(FORMATS),
               "--json", "--quiet"]
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    if proc.returncode != 0:
        sys.exit(f"bertprep create failed: {proc.stderr.strip()}")
    summary = json.loads(proc.stdout)
    (manifest,) = [os.path.join(root, "manifest.json") for root, _dirs, files in os.walk(out) if "manifest.json" in files]
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
        for dupe in (5, 1):
            if not args.quiet:
                print(f"create --dupe-factor {dupe} ...", file=sys.stderr)
            sizes, instances = create(args.corpus, args.vocab, os.path.join(tmp, f"d{dupe}"), args.seq, args.pred, dupe)
            figures["runs"][f"dupe{dupe}"] = {"instances": instances, "bytes": sizes,
                                              "vs_tfrecord": {f: round(sizes[f] / sizes["tfrecord"], 3) for f in FORMATS}}
    runs = figures["runs"]
    figures["dupe1_vs_dupe5"] = {f: round(runs["dupe1"]["bytes"][f] / runs["dupe5"]["bytes"][f], 3) for f in FORMATS}
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    print(f"{os.path.basename(args.corpus)}, seq {args.seq}, pred {args.pred}: bytes on disk (ratio to TFRecord)")
    print(f"{'format':10}" + "".join(f"{'dupe ' + str(d) + ' (' + format(runs[f'dupe{d}']['instances'], ',') + ')':>26}"
                                     for d in (5, 1)) + f"{'dupe 1 / dupe 5':>18}")
    for fmt in FORMATS:
        cells = "".join(f"{runs[f'dupe{d}']['bytes'][fmt]:>18,} ({runs[f'dupe{d}']['vs_tfrecord'][fmt]:.3f})"
                        for d in (5, 1))
        print(f"{fmt:10}{cells}{figures['dupe1_vs_dupe5'][fmt]:>18.3f}")


if __name__ == "__main__":
    main()
