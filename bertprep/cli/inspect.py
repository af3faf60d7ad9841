"""`bertprep inspect FILE`: the flags of `bertprep.inspect` (bertprep/stages/inspect.py); the records are
printed on stdout as they are read."""

import argparse
import sys

from bertprep.stages.inspect import InspectOptions, inspect


def add_arguments(parser):
    parser.add_argument("file", help="a TFRecord, OFRecord, HDF5 or Parquet file (format detected), or a Megatron "
                                     ".bin/.idx of `bertprep tokenize` (its sequences)")
    parser.add_argument("--vocab", help="vocab.txt or hub model id, to show tokens")
    parser.add_argument("-n", "--num", type=int, default=3,
                        help="records to show (default 3; 0: none, only the file's format and kind)")
    parser.add_argument("--skip", type=int, default=0, help="records to skip first (default 0)")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    parser.add_argument("--epoch", type=integer, default=None,
                        help="unmasked records (create --masking dynamic): show each as the loaders mask it in epoch N")


def integer(text):
    """An --epoch value's integer (InspectOptions checks its range); anything else is a usage error, exit 2."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def options(args) -> InspectOptions:
    return InspectOptions(args.file, vocab=args.vocab, num=args.num, skip=args.skip, json=args.json,
                          epoch=args.epoch)


def run(args) -> int:
    summary = inspect(options(args), stream=sys.stdout)  # shown as read: the summary holds the same records
    for warning in summary.get("warnings", ()):  # after the records: stdout may be a pipe, stderr the terminal
        print(f"inspect: warning: {warning}", file=sys.stderr)
    return 0
