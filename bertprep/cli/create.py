"""`bertprep create` on the command line: the flags, CreateOptions from them, and the summary printed."""

from bertprep.cli.options import engine_options, print_summary
from bertprep.engines import add_engine_arguments
from bertprep.progress import add_output_arguments
from bertprep.stages.create import LAYOUTS, MASKINGS, NVIDIA_CYCLE_LENGTH, CreateOptions, create
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    parser.add_argument(
        "--input", nargs="+", action="extend", metavar="PATH",
        help="text shards: files, globs, or a directory (its training/ and test/ subdirectories become "
        "the two splits). Default: the shards under WORKDIR/sharded, else the embedded sample corpus",
    )
    parser.add_argument("--vocab", help="vocab.txt, or a hub model id such as bert-base-uncased")
    parser.add_argument("--out", help="records root (default: WORKDIR/records)")
    parser.add_argument("--corpus", help="corpus name in the output path (default: from the input path)")
    parser.add_argument("--seq", type=int, default=128, help="max_seq_length (default 128)")
    parser.add_argument("--pred", type=int, default=20, help="max_predictions_per_seq (default 20)")
    parser.add_argument("--dupe-factor", type=int, default=None,
                        help="passes over the data with different masks (default 5; 1 with --masking dynamic)")
    parser.add_argument(
        "--masking", choices=MASKINGS, default="static",
        help="static: masks drawn here, as the reference (default); dynamic: unmasked instances, which the "
        "loaders mask per epoch from a key (seed, epoch, instance index): a new mask each epoch, see "
        "docs/dynamic-masking.md",
    )
    parser.add_argument("--seed", type=int, default=12345,
                        help="random seed of every shard (default 12345, as NVIDIA's bertPrep)")
    parser.add_argument("--seed-per-shard", action="store_true",
                        help="derive a distinct seed per shard from --seed and the shard's name")
    parser.add_argument("--masked-lm-prob", type=float, default=0.15,
                        help="share of each instance's tokens masked, at most --pred (default 0.15)")
    parser.add_argument("--short-seq-prob", type=float, default=0.1,
                        help="share of instances cut to a random shorter length (default 0.1)")
    parser.add_argument("--whole-word-mask", action="store_true",
                        help="mask a word's WordPiece tokens together, as the reference's do_whole_word_mask")
    parser.add_argument("--no-lower-case", action="store_true", help="for cased vocabs")
    parser.add_argument("--format", default=None,
                        help="comma-separated: tfrecord, ofrecord, hdf5 (NVIDIA's PyTorch layout), parquet (one column "
                             "per feature) (default tfrecord,ofrecord; tfrecord with --layout nvidia)")
    parser.add_argument(
        "--layout", choices=LAYOUTS, default="bertprep",
        help="bertprep: OUT/<params>/<corpus>/{tfrecord,ofrecord}/{training,test} (default); nvidia: the TFRecord tree "
        "NVIDIA's scripts read, OUT/tfrecord/<params>_shard_<N>_test_split_<P>/<corpus>/{training,test} "
        "(OUT defaults to WORKDIR; needs shards from `bertprep shard`)",
    )
    parser.add_argument(
        "--min-parts", type=int, default=NVIDIA_CYCLE_LENGTH,
        help=f"warn when fewer training files are written (default {NVIDIA_CYCLE_LENGTH}: NVIDIA's TF2 reader "
        "interleaves 8 files; OneFlow needs one part per reader rank, so use your GPU count if larger)",
    )
    parser.add_argument("--eval-samples", type=int, metavar="K",
                        help="write exactly K test instances (MLPerf's fixed evaluation set is 10,000): the first K "
                        "of the test shards in input order, the same for any worker count; fewer is an error")
    add_engine_arguments(parser)
    add_workdir_argument(parser)
    add_output_arguments(parser)


def options(args):
    return CreateOptions(
        input=args.input, vocab=args.vocab, out=args.out, corpus=args.corpus, seq=args.seq, pred=args.pred,
        dupe_factor=args.dupe_factor, masking=args.masking, seed=args.seed, seed_per_shard=args.seed_per_shard,
        masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob, whole_word_mask=args.whole_word_mask,
        lower_case=not args.no_lower_case, format=args.format, layout=args.layout, min_parts=args.min_parts,
        eval_samples=args.eval_samples,
        engine=engine_options(args), workdir=args.workdir,
    )


def run(args):
    print_summary(create(options(args), quiet=args.quiet), args)
    return 0
