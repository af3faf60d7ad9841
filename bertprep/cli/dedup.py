"""`bertprep dedup` on the command line: the flags, DedupOptions from them, and the summary printed."""

from bertprep.cli.options import engine_options, print_summary
from bertprep.engines import add_engine_arguments
from bertprep.progress import add_output_arguments
from bertprep.stages.dedup import (
    DEFAULT_DECONTAMINATE_NGRAM,
    DEFAULT_MEMORY,
    DEFAULT_NGRAM,
    DEFAULT_NUM_PERM,
    DEFAULT_THRESHOLD,
    DedupOptions,
    dedup,
)
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    add_workdir_argument(parser)
    parser.add_argument("--input", nargs="+", action="extend", metavar="DIR_OR_FILE",
                        help="formatted corpus directories or .jsonl files, in order (the first of a duplicate "
                             "cluster is kept)")
    parser.add_argument("--corpus", nargs="+", action="extend", metavar="NAME",
                        help="corpus names under WORKDIR/formatted, in order (default: all of them)")
    parser.add_argument("--out", help="output directory, one formatted corpus per input (default: WORKDIR/deduped)")
    parser.add_argument("--ngram", type=int, default=DEFAULT_NGRAM,
                        help="words per MinHash shingle (default: %(default)s)")
    parser.add_argument("--num-perm", type=int, default=DEFAULT_NUM_PERM,
                        help="MinHash permutations (default: %(default)s)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="estimated Jaccard at or above which a document is a near duplicate "
                             "(default: %(default)s)")
    parser.add_argument("--bands", type=int, default=None,
                        help="LSH bands (default: the optimum datasketch's MinHashLSH picks for --threshold and "
                        "--num-perm, computed with NumPy: 9 of 13 rows at 0.8 and 128). More bands find more near "
                        "duplicates for more candidate pairs to verify: 16 is the setting for recall at 0.8 "
                        "(docs/benchmarks.md)")
    parser.add_argument("--no-exact", dest="exact", action="store_false", help="keep exact duplicates")
    parser.add_argument("--no-near", dest="near", action="store_false",
                        help="keep near duplicates (exact deduplication only; --ngram, --num-perm, --threshold and "
                             "--bands are refused with it)")
    parser.add_argument("--decontaminate", nargs="+", action="extend", default=[], metavar="SET_OR_FILE",
                        help="remove training documents sharing an n-gram with these evaluation sets: squad, glue "
                             "(WORKDIR/download) or SQuAD .json / GLUE .tsv / .txt files (a .txt's evaluation items "
                             "are its paragraphs: lines up to a blank line)")
    parser.add_argument("--decontaminate-ngram", type=int, default=DEFAULT_DECONTAMINATE_NGRAM,
                        help="words per decontamination n-gram (default: 13, as GPT-3)")
    parser.add_argument("--report-only", action="store_true",
                        help="with --decontaminate: list contaminated documents in the manifest, keep them")
    parser.add_argument("--dry-run", action="store_true", help="report what would be removed, write nothing")
    parser.add_argument("--memory", default=DEFAULT_MEMORY, metavar="SIZE",
                        help="bytes (K, M, G suffixes: 64M) of the corpus's fingerprints any one process holds "
                             "at most; the sort spills sorted runs to OUT/.partial/ beyond it. Not bounded by it: "
                             "the interpreter and libraries, and what grows with the duplicates found (their "
                             "pairs, the removed documents' listing) (default: %(default)s)")
    add_engine_arguments(parser)
    add_output_arguments(parser)


def options(args):
    return DedupOptions(input=args.input, corpus=args.corpus, out=args.out, ngram=args.ngram, num_perm=args.num_perm,
                        threshold=args.threshold, bands=args.bands, exact=args.exact, near=args.near,
                        decontaminate=args.decontaminate, decontaminate_ngram=args.decontaminate_ngram,
                        report_only=args.report_only, dry_run=args.dry_run, memory=args.memory,
                        engine=engine_options(args), workdir=args.workdir)


def run(args):
    print_summary(dedup(options(args), quiet=args.quiet), args)
    return 0
