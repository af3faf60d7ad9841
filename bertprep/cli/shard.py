"""`bertprep shard` on the command line: the flags, ShardOptions from them, and the summary printed."""

from bertprep.cli.options import engine_options, print_summary
from bertprep.engines import add_engine_arguments
from bertprep.progress import add_output_arguments
from bertprep.stages.shard import BALANCES, ShardOptions, shard
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    add_workdir_argument(parser)
    parser.add_argument("--input", nargs="+", action="extend", metavar="DIR_OR_FILE",
                        help="formatted corpus directories or .jsonl/.txt files (default: WORKDIR/formatted/<corpus>)")
    parser.add_argument("--out", help="output directory (default: WORKDIR/sharded/<corpus>)")
    parser.add_argument("--corpus", help="corpus name used for the directory and file names (default: the only "
                                         "formatted corpus; books_wiki_en_corpus combines bookcorpus and "
                                         "wikicorpus_en)")
    parser.add_argument("--train-shards", type=int, default=256, help="training shards (default: 256)")
    parser.add_argument("--test-shards", type=int, default=256, help="test shards (default: 256)")
    parser.add_argument("--balance", choices=tuple(BALANCES), default="size",
                        help="size: largest document first into the lightest shard (default); count: every shard of "
                        "a split holds the same number of documents, ±1 (LDDL's balance), bytes balanced within that")
    parser.add_argument("--test-fraction", type=float, default=None,
                        help="share of documents in the test split (default: 0.1; not with --eval-documents)")
    parser.add_argument("--eval-documents", type=int, metavar="N",
                        help="a fixed held-out evaluation set: N documents drawn by --eval-seed are the test split "
                        "(instead of --test-fraction's), and every training document that is an exact or near "
                        "duplicate of one (bertprep dedup's tests, default threshold) is dropped and listed")
    parser.add_argument("--eval-seed", type=int, default=None,
                        help="seed of the --eval-documents draw (default: 12345; only with --eval-documents)")
    add_engine_arguments(parser)
    add_output_arguments(parser)


def options(args):
    return ShardOptions(input=args.input, out=args.out, corpus=args.corpus, train_shards=args.train_shards,
                        test_shards=args.test_shards, balance=args.balance, test_fraction=args.test_fraction,
                        eval_documents=args.eval_documents, eval_seed=args.eval_seed, engine=engine_options(args),
                        workdir=args.workdir)


def run(args):
    print_summary(shard(options(args), quiet=args.quiet), args)
    return 0
