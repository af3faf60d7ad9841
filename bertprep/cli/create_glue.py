"""`bertprep create-glue --task T --data-dir DIR --vocab V --out DIR`: the flags of `bertprep.create_glue`
(bertprep/stages/finetune_data/glue.py), its summary printed."""

from bertprep.cli.options import print_summary
from bertprep.cli.records_flags import add_common_arguments, common_fields
from bertprep.stages.finetune_data.glue import SPLITS, TASKS, CreateGlueOptions, create_glue


def add_arguments(parser):
    parser.add_argument("--task", required=True, help=f"GLUE task: {', '.join(TASKS)}")
    parser.add_argument("--data-dir", required=True, help="the task's TSV directory, e.g. WORKDIR/download/glue/MRPC")
    parser.add_argument("--split", choices=SPLITS, action="append",
                        help="train, dev or test (repeat for several; default all three)")
    add_common_arguments(parser, seq=128)


def options(args) -> CreateGlueOptions:
    return CreateGlueOptions(task=args.task, data_dir=args.data_dir, split=tuple(args.split) if args.split else None,
                       **common_fields(args))


def run(args) -> int:
    print_summary(create_glue(options(args), quiet=args.quiet), args)
    return 0
