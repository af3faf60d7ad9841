"""`bertprep vocab` on the command line: the flags, VocabOptions from them, and the summary printed."""

from bertprep.cli.options import print_summary
from bertprep.progress import add_output_arguments
from bertprep.stages.vocab import GOOGLE_UNUSED, MAX_VOCAB_SIZE, VocabOptions, vocab
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    add_workdir_argument(parser)
    parser.add_argument("--input", nargs="+", action="extend", default=[], metavar="DIR_OR_FILE",
                        help="formatted corpus or shard directories (with their manifest.json) or .jsonl/.txt "
                             "files, read in this order")
    parser.add_argument("--corpus", nargs="+", action="extend", default=[], metavar="NAME",
                        help="formatted corpora under WORKDIR/formatted, read after --input")
    parser.add_argument("--out", help="the vocab.txt file to write, not a directory (default: WORKDIR/vocab/vocab.txt)")
    parser.add_argument("--vocab-size", type=int, default=30522,
                        help="lines of vocab.txt, special tokens and unused slots included (default: 30522; at most "
                             f"{MAX_VOCAB_SIZE:,})")
    parser.add_argument("--unused", type=int, default=GOOGLE_UNUSED,
                        help=f"[unused] slots, placed as Google places them (default: {GOOGLE_UNUSED}, as in "
                             "bert-base-uncased)")
    parser.add_argument("--cased", action="store_true",
                        help="keep case and accents (then create with --no-lower-case)")
    add_output_arguments(parser)


def options(args):
    return VocabOptions(input=args.input, corpus=args.corpus, out=args.out, vocab_size=args.vocab_size,
                        unused=args.unused, cased=args.cased, workdir=args.workdir)


def run(args):
    print_summary(vocab(options(args), quiet=args.quiet), args)
    return 0
