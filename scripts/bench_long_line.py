"""Time and peak memory of tokenizing one very long line, cut into pieces against whole.

    python scripts/bench_long_line.py [--mb 8] [--shared DIR]

The line is fixtures/bench/wt2.txt with its line breaks turned into spaces,
repeated to --mb MB (English prose with a non-ASCII character every few
hundred). Each configuration runs in a fresh process, which reports the
seconds `LineTokenizer.encode` took and how much its peak RSS grew during the
call. The baseline, measured in the same run, is the same tokenizer with
`max_piece_chars=None` (the line tokenized whole, as before pieces existed).
The two token lists are compared before anything is reported.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = r"""
import hashlib, json, resource, sys, time
from bertprep.tokenization import LineTokenizer, load_vocab
shared, megabytes, cut = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "cut"
text = open(f"{shared}/fixtures/bench/wt2.txt", encoding="utf-8").read().replace("\n", " ")
size = int(megabytes * 1e6)
line = (text * (size // len(text) + 1))[:size]
tokenizer = LineTokenizer(load_vocab(f"{shared}/fixtures/golden/vocab.txt"),
                          **({} if cut else {"max_piece_chars": None}))
tokenizer.warmed().encode(["warm up, é"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
tokens, counts = tokenizer.encode([line])
seconds = time.perf_counter() - start
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"seconds": seconds, "grown_mib": grown / 1024, "chars": len(line), "tokens": int(counts[0]),
                  "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()}))
"""


def run(shared, megabytes, mode):
    result = subprocess.run([sys.executable, "-c", CHILD, str(shared), str(megabytes), mode], capture_output=True,
                            text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=8.0, help="length of the line in MB (default 8)")
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED", str(REPO.parent / "shared")))
    args = parser.parse_args()
    whole = run(args.shared, args.mb, "whole")
    cut = run(args.shared, args.mb, "cut")
    if (cut["tokens"], cut["sha256"]) != (whole["tokens"], whole["sha256"]):
        sys.exit("the cut line's tokens differ from the whole line's")
    print(f"one line of {whole['chars']:,} characters from wt2.txt, {whole['tokens']:,} tokens (identical both ways)")
    for name, figures in (("baseline: whole line", whole), ("cut into pieces", cut)):
        print(f"{name:<22} {figures['seconds']:7.2f} s  peak RSS grew {figures['grown_mib']:7.0f} MiB")
    print(f"cut vs whole: {whole['seconds'] / cut['seconds']:.1f}x faster, "
          f"{whole['grown_mib'] / max(cut['grown_mib'], 1):.1f}x less memory")


if __name__ == "__main__":
    main()
