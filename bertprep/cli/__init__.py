"""`bertprep` command line: one subcommand per pipeline stage.

The layers (docs/architecture.md): this package parses; `bertprep/cli/<stage>.py`
exposes `add_arguments(parser)` and `run(args) -> int`, which builds the stage's
frozen options from the Namespace, calls the stage function
(`bertprep.stages.<stage>`, re-exported as `bertprep.<stage>`) and prints its
`Summary`; nothing below this package sees a Namespace. (Stages not yet moved
keep `add_arguments`/`run` in their own module.) A module is imported only
when its subcommand runs, so `bertprep create` never pays for the imports of
`download` or `validate`.
"""

import argparse
import importlib
import sys

from bertprep import __version__
from bertprep.errors import run_reporting_errors

# subcommand -> (module, one-line help)
COMMANDS = {
    "download": ("bertprep.cli.download", "fetch Wikipedia, BookCorpus, SQuAD or GLUE with checksums and resume"),
    "dedup": ("bertprep.cli.dedup", "remove exact and near-duplicate documents and evaluation text from formatted "
                                    "corpora"),
    "shard": ("bertprep.cli.shard", "sentence-split documents into balanced training/test text shards"),
    "vocab": ("bertprep.cli.vocab", "train a WordPiece vocab.txt on your corpus, in Google's BERT layout"),
    "tokenize": ("bertprep.cli.tokenize", "tokenize text shards into Megatron-Core's indexed dataset (.bin/.idx)"),
    "create": ("bertprep.cli.create", "create masked-LM records (TFRecord and OFRecord) like google-research/bert"),
    "pack": ("bertprep.cli.pack", "pack pretraining records into rows of up to k sequences (MLPerf packed layout)"),
    "validate": ("bertprep.cli.validate", "check a dataset for everything that breaks training"),
    "prepare": ("bertprep.cli.prepare", "download, shard and create (128/20 and 512/80) in one command"),
    "inspect": ("bertprep.cli.inspect",
                "decode and show records of a record file (TFRecord, OFRecord, HDF5, Parquet)"),
    "convert": ("bertprep.cli.convert",
                "convert record files losslessly between TFRecord, OFRecord, HDF5 and Parquet"),
    "create-squad": ("bertprep.cli.create_squad",
                     "SQuAD JSON -> fine-tuning records like google-research/bert run_squad.py"),
    "create-glue": ("bertprep.cli.create_glue",
                    "GLUE TSV -> fine-tuning records like google-research/bert run_classifier.py"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse's own usage errors: one line, exit 2, as for ours.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _is_help_only(argv):
    return not argv or argv[0] in ("-h", "--help", "--version")


def build_parser(only=None):
    parser = _Parser(prog="bertprep", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"bertprep {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            importlib.import_module(module_name).add_arguments(command_parser)
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = None if _is_help_only(argv) else argv[0]
    if command is not None and command not in COMMANDS:
        command = None
    parser = build_parser(only=command or "")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    return run_reporting_errors(f"bertprep {args.command}", lambda: module.run(args) or 0)
