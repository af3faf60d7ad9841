"""`bertprep tokenize` on the command line: the flags, TokenizeOptions from them, and the summary printed."""

from bertprep.cli.options import engine_options, print_summary
from bertprep.engines import add_engine_arguments
from bertprep.formats import codecs
from bertprep.progress import add_output_arguments
from bertprep.stages.tokenize import TokenizeOptions, tokenize
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    parser.add_argument("--input", nargs="+", action="extend", metavar="PATH",
                        help="text shards: files, globs, or a directory (its training/ and test/ subdirectories "
                             "become the two splits). Default: the shards under WORKDIR/sharded, else the embedded "
                             "sample corpus")
    parser.add_argument("--vocab", help="vocab.txt, or a hub model id such as bert-base-uncased")
    parser.add_argument("--out", help="output root, files under OUT/<corpus>/{training,test} "
                                      "(default: WORKDIR/tokenized)")
    parser.add_argument("--corpus", help="corpus name in the output path (default: from the input path)")
    parser.add_argument("--format", choices=codecs.sequence_names(), default=codecs.sequence_names()[0],
                        help="megatron: Megatron-Core's indexed dataset, <stem>_text_sentence.bin/.idx per shard "
                             "(default)")
    parser.add_argument("--no-lower-case", action="store_true", help="for cased vocabs")
    add_engine_arguments(parser)
    add_workdir_argument(parser)
    add_output_arguments(parser)


def options(args):
    return TokenizeOptions(input=args.input, vocab=args.vocab, out=args.out, corpus=args.corpus, format=args.format,
                           lower_case=not args.no_lower_case, engine=engine_options(args), workdir=args.workdir)


def run(args):
    print_summary(tokenize(options(args), quiet=args.quiet), args)
    return 0
