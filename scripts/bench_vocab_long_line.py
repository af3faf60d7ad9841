"""Peak memory of `bertprep vocab` on one very long line, cut at spaces into pieces against whole.

    python scripts/bench_vocab_long_line.py [--mb 22] [--shared DIR]

The line is fixtures/bench/wt2.txt with its line breaks turned into spaces,
repeated to --mb MB (3 million words at 22 MB). Each configuration trains a
vocab in a fresh process and reports its peak RSS and seconds; the baseline,
run in the same invocation, is the same stage with `line_pieces` giving each
line whole (as before pieces existed). The two vocab files must be the same
bytes before anything is reported. The last line gives the pieces' peak RSS
and seconds each as a multiple of the baseline's.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, resource, sys, time
from bertprep.stages import vocab as vocab_module
line_file, out, mode = sys.argv[1:4]
if mode == "whole":
    vocab_module.line_pieces = lambda line: [line]
start = time.perf_counter()
vocab_module.vocab(input=line_file, out=out, vocab_size=30522)
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(line_file, out, mode):
    result = subprocess.run([sys.executable, "-c", CHILD, str(line_file), str(out), mode], capture_output=True,
                            text=True, cwd=REPO, check=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["sha256"] = hashlib.sha256(Path(out).read_bytes()).hexdigest()
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=22.0, help="length of the line in MB (default 22)")
    parser.add_argument("--shared", default=os.environ.get("BERTPREP_SHARED", str(REPO.parent / "shared")))
    args = parser.parse_args()
    text = (Path(args.shared) / "fixtures" / "bench" / "wt2.txt").read_text(encoding="utf-8").replace("\n", " ")
    size = int(args.mb * 1e6)
    with tempfile.TemporaryDirectory() as tmp:
        line_file = Path(tmp) / "one-line.txt"
        line_file.write_text((text * (size // len(text) + 1))[:size] + "\n", encoding="utf-8")
        pieces = run(line_file, Path(tmp) / "pieces.txt", "pieces")
        whole = run(line_file, Path(tmp) / "whole.txt", "whole")
    if pieces["sha256"] != whole["sha256"]:
        sys.exit("the vocab cut into pieces differs from the whole line's: nothing to compare")
    print(f"one line of {args.mb:g} MB, the same vocab ({pieces['sha256'][:12]})")
    for name, figures in (("whole (baseline)", whole), ("cut at spaces", pieces)):
        print(f"  {name:17} peak {figures['peak_mib']:8,.0f} MiB  {figures['seconds']:6.1f} s")
    print(f"  peak memory: {pieces['peak_mib'] / whole['peak_mib']:.2f}x the baseline; "
          f"seconds: {pieces['seconds'] / whole['seconds']:.2f}x the baseline")


if __name__ == "__main__":
    main()
