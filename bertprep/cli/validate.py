"""`bertprep validate PATH [PATH2]`: the flags of `bertprep.validate` (bertprep/stages/validate), its report
printed (the table, or JSON on stdout or into a file); exit 0 when the dataset is sound, 1 when a check fails."""

import json

from bertprep.errors import UsageError
from bertprep.stages.validate import ValidateOptions, validate
from bertprep.stages.validate.report import JSON_MAGIC, check_report_place


def add_arguments(parser):
    path = parser.add_argument("path", metavar="PATH",
                               help="records directory or file, text shard directory, downloads directory, or a "
                                    "`bertprep tokenize` directory or .bin/.idx (Megatron's indexed dataset)")
    parser.add_argument("path2", metavar="PATH2", nargs="?",
                        help="a second dataset (validated too; compared with --compare)")
    parser.add_argument("--vocab", help="vocab.txt: ids must be below its size; [CLS]/[SEP]/[MASK] ids from it "
                                        "(default: the manifest's vocab, else BERT's 101/102/103 and no size bound)")
    parser.add_argument("--compare", action="store_true",
                        help="prove PATH and PATH2 (or PATH's TFRecord and OFRecord files) hold the same instances in "
                             "order (two tokenize outputs: the same sequences and documents)")
    parser.add_argument("--json", nargs="?", const="-", metavar="REPORT",
                        help="write the full report as JSON to REPORT (no value: to stdout instead of the table)")
    parser.add_argument("--plot", metavar="PNG",
                        help="draw the length histogram, mask rate by position and NSP balance")
    parser.add_argument("--max-errors", type=int, default=20, help="findings listed (all are counted; default 20)")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes checking files in parallel (default: one per core)")
    parser.add_argument("--min-parts", type=int, default=1,
                        help="OFRecord parts a directory must have: OneFlow needs as many as reader ranks (default 1)")
    parser.add_argument("--masked-lm-prob", type=float, default=None,
                        help="masked_lm_prob the records were made with (default: the manifest's, else 0.15)")
    parser.add_argument("--whole-word-mask", action="store_const", const=True, default=None,
                        help="records were made with whole-word masking: fewer predictions are allowed")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress (the report still prints: it is what was asked for)")
    # `validate --json R`: --json takes R as its REPORT, and argparse said "the following arguments are required:
    # PATH" of a command that names one. PATH is optional to argparse and checked in options(); the usage line
    # stays the one argparse writes for a required PATH.
    parser.usage = parser.format_usage().removeprefix("usage: ").rstrip("\n").replace(parser.prog, "%(prog)s", 1)
    path.nargs, path.required = "?", False


def options(args) -> ValidateOptions:
    if args.path is None:
        if args.json not in (None, "-"):
            raise UsageError(f"--json took {args.json} as its REPORT file, leaving no PATH: give PATH first "
                             f"(bertprep validate {args.json} --json) or a REPORT file after --json")
        raise UsageError("the following arguments are required: PATH")
    checked = ValidateOptions(tuple(p for p in (args.path, args.path2) if p is not None), vocab=args.vocab,
                              compare=args.compare, plot=args.plot, max_errors=args.max_errors,
                              workers=args.workers, min_parts=args.min_parts, masked_lm_prob=args.masked_lm_prob,
                              whole_word_mask=args.whole_word_mask)
    if args.json not in (None, "-"):
        check_report_place("--json", args.json, checked.paths, JSON_MAGIC)
    return checked


def run(args) -> int:
    report = validate(options(args), quiet=args.quiet)
    if args.json == "-":
        report.print(as_json=True)
    else:
        if args.json:
            from bertprep.atomic import atomic_write_bytes

            atomic_write_bytes(args.json, (json.dumps(report.fields, indent=1, sort_keys=True) + "\n").encode())
        report.print()
    return 0 if report.sound else 1
