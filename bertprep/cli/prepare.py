"""`bertprep prepare` on the command line: the flags, PrepareOptions from them, each stage's error under its name."""

from bertprep.cli.options import engine_options, print_summary
from bertprep.engines import add_engine_arguments
from bertprep.errors import run_reporting_errors
from bertprep.progress import QUIET_HELP
from bertprep.stages.create import LAYOUTS
from bertprep.stages.prepare import DEFAULT_CONFIGS, SOURCES, PrepareOptions, prepare
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    parser.add_argument("sources", nargs="+", choices=SOURCES, metavar="SOURCE", help="wikipedia and/or bookcorpus")
    parser.add_argument("--vocab", required=True, help="vocab.txt, or a hub model id such as bert-base-uncased")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help=f"seq/pred pairs to create (default {DEFAULT_CONFIGS})")
    parser.add_argument("--lang", default="en", help="Wikipedia language (default en)")
    parser.add_argument("--dupe-factor", type=int, default=5, help="as create's (default 5)")
    parser.add_argument("--train-shards", type=int, default=256, help="as shard's (default 256)")
    parser.add_argument("--test-shards", type=int, default=256, help="as shard's (default 256)")
    parser.add_argument("--layout", choices=LAYOUTS, default="bertprep",
                        help="records layout of create: bertprep's (both formats; the default) or NVIDIA's TFRecord "
                             "tree under WORKDIR/tfrecord")
    add_engine_arguments(parser)
    add_workdir_argument(parser)
    parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("--json", action="store_true", help="print every stage's summary as one JSON object")


def options(args):
    return PrepareOptions(sources=args.sources, vocab=args.vocab, configs=args.configs, lang=args.lang,
                          dupe_factor=args.dupe_factor, train_shards=args.train_shards, test_shards=args.test_shards,
                          layout=args.layout, engine=engine_options(args), workdir=args.workdir)


class _StageFailed(Exception):
    """A stage ended with `code`; its one-line error is printed already."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _run_reporting(label, call):
    # `bertprep shard: error: ...`, as when the stage runs by itself, rather than `bertprep prepare: error: ...`
    summaries = []
    code = run_reporting_errors(f"bertprep {label.split()[0]}", lambda: summaries.append(call()) or 0)
    if code != 0:
        raise _StageFailed(code)
    return summaries[0]


def run(args):
    try:
        summary = prepare(options(args), quiet=args.quiet, run_stage=_run_reporting)
    except _StageFailed as failed:
        return failed.code
    print_summary(summary, args)
    return 0
