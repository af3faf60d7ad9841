"""`bertprep create-squad --input JSON --vocab V --out DIR`: the flags of `bertprep.create_squad`
(bertprep/stages/finetune_data/squad.py), its summary printed."""

from bertprep.cli.options import print_summary
from bertprep.cli.records_flags import add_common_arguments, common_fields
from bertprep.stages.finetune_data.squad import SPLITS, CreateSquadOptions, create_squad


def add_arguments(parser):
    parser.add_argument("--input", required=True, help="SQuAD JSON: train-v1.1.json, dev-v2.0.json, ...")
    parser.add_argument("--split", choices=SPLITS,
                        help="train (shuffled, with answers) or eval (with prediction metadata); "
                             "default from the file name: train-* or dev-*")
    parser.add_argument("--doc-stride", type=int, default=128, help="doc_stride (default 128)")
    parser.add_argument("--max-query", type=int, default=64, help="max_query_length (default 64)")
    add_common_arguments(parser, seq=384)


def options(args) -> CreateSquadOptions:
    return CreateSquadOptions(input=args.input, split=args.split, doc_stride=args.doc_stride, max_query=args.max_query,
                        **common_fields(args))


def run(args) -> int:
    print_summary(create_squad(options(args), quiet=args.quiet), args)
    return 0
