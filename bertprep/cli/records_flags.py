"""The flags `create-squad` and `create-glue` share, and the `RecordsOptions` fields they give."""

from bertprep.formats import codecs
from bertprep.progress import add_output_arguments


def add_common_arguments(parser, seq):
    parser.add_argument("--vocab", required=True, help="vocab.txt, or a hub model id such as bert-base-uncased")
    parser.add_argument("--out", required=True, help="output directory (a later run for another split adds to it)")
    parser.add_argument("--seq", type=int, default=seq, help=f"max_seq_length (default {seq})")
    parser.add_argument("--no-lower-case", action="store_true", help="for cased vocabs")
    parser.add_argument("--format", default=",".join(codecs.finetuning_names()),
                        help=f"comma-separated: {', '.join(codecs.finetuning_names())} (default both)")
    add_output_arguments(parser)


def common_fields(args):
    """The shared options (bertprep.stages.finetune_data.common.RecordsOptions) and --seq, from the flags."""
    return {"vocab": args.vocab, "out": args.out, "seq": args.seq, "lower_case": not args.no_lower_case,
            "format": tuple(args.format.split(","))}

