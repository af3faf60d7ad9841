"""`bertprep pack RECORDS_DIR`: the flags of `bertprep.pack` (bertprep/stages/pack), its summary printed."""

from bertprep.cli.options import engine_options, print_summary
from bertprep.engines import add_engine_arguments
from bertprep.progress import add_output_arguments
from bertprep.stages.pack import PackOptions, pack


def add_arguments(parser):
    parser.add_argument("records_dir", metavar="RECORDS_DIR",
                        help="a records directory of `bertprep create` (<params>/<corpus>, with its manifest.json)")
    parser.add_argument("--max-per-pack", type=int, default=3, metavar="K",
                        help="sequences per row at most (default 3, as MLPerf BERT)")
    parser.add_argument("--out", help="records root for <params>_packed<K>/<corpus> (default: beside <params>)")
    parser.add_argument("--format", help="comma-separated: tfrecord, ofrecord, hdf5 (MLPerf's packed layout), parquet "
                        "(default: the formats of the input)")
    add_engine_arguments(parser)
    add_output_arguments(parser)


def options(args) -> PackOptions:
    return PackOptions(args.records_dir, max_per_pack=args.max_per_pack, out=args.out,
                       format=tuple(args.format.split(",")) if args.format else None,  # "": the input's formats
                       engine=engine_options(args))


def run(args) -> int:
    print_summary(pack(options(args), quiet=args.quiet), args)
    return 0
