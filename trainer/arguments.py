"""The trainer's argparse pieces that its three command lines share (`python -m trainer`, `trainer checkpoint`,
`trainer.benchmark`): the one-line-error parser, the value types, the records-and-model arguments. Kept below
the CLIs so that none of them imports another for them."""

import argparse
import math

from trainer.config import PRETRAINING_FORMATS, SIZES, is_warmup


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (`prog: error: ...`) and exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def positive_number(text):
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def warmup(text):
    """A fraction of --steps (< 1) or a number of steps."""
    value = float(text)
    if not is_warmup(value):
        raise argparse.ArgumentTypeError(f"expected a fraction below 1 or a whole number of steps, got {text}")
    return value


def probability(text):
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text}")
    return value


def add_records_and_model_arguments(p):
    """--format, --data, --model | --bert-config, --dropout: shared with trainer.benchmark."""
    p.add_argument("--format", required=True, choices=PRETRAINING_FORMATS,
                   help="record format to read")
    p.add_argument("--data", help="records directory of `bertprep create` or `bertprep pack` "
                                  "(default: embedded sample records)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--model", choices=tuple(SIZES), default=None,
                      help="Google's BERT size, with the records' vocab (default: base; tiny on the embedded sample)")
    size.add_argument("--bert-config", help="Google's bert_config.json instead of --model")
    p.add_argument("--dropout", type=probability, default=None,
                   help="hidden and attention dropout (default: the model config's; 0 for exact comparisons)")
