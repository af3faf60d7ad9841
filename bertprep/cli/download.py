"""`bertprep download <source>` on the command line: each source's flags, its options from them, the summary."""

from bertprep.cli.options import print_summary
from bertprep.options import field_names
from bertprep.progress import add_output_arguments
from bertprep.stages.download import EXTRACTING, SOURCES, download, options_class
from bertprep.stages.download.bookcorpus import (
    DEFAULT_LINES_PER_DOCUMENT,
    DEFAULT_TARBALL_URL,
    TARBALL,
    TARBALL_MD5,
    TARBALL_URL_ENV,
)
from bertprep.stages.download.http import Limits
from bertprep.stages.download.pretrained import BASE_URL_ENV as PRETRAINED_URL_ENV
from bertprep.stages.download.pretrained import DEFAULT_BASE_URL as PRETRAINED_URL
from bertprep.stages.download.pretrained import RELEASES
from bertprep.stages.download.squad import BASE_URL_ENV, DEFAULT_BASE_URL, DEFAULT_EVAL_BASE_URL, EVAL_BASE_URL_ENV
from bertprep.stages.download.wikipedia import DEFAULT_DATE
from bertprep.workdir import add_workdir_argument


def add_arguments(parser):
    sub = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
    for name, (_module, _options, help_text) in SOURCES.items():
        source_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_workdir_argument(source_parser)
        # None: not given, the options' one per core (squad, glue and pretrained run none: a value given is refused)
        source_parser.add_argument("--workers", type=int, default=None,
                                   help="parallel extraction workers (default: all cores)" if name in EXTRACTING else
                                   f"not used by {name}, which has no text to extract, and refused (wikipedia and "
                                   "bookcorpus extract theirs on --workers)")
        add_limit_arguments(source_parser)
        add_output_arguments(source_parser)
        SOURCE_ARGUMENTS[name](source_parser)


def add_wikipedia_arguments(parser):
    parser.add_argument("--lang", default="en", help="language code (default: en)")
    parser.add_argument("--date", default=DEFAULT_DATE, help=f"hub release date (default: {DEFAULT_DATE})")
    parser.add_argument("--dump", metavar="latest|YYYYMMDD",
                        help="download this XML dump from the Wikimedia dump site instead of the hub's parquet release")
    parser.add_argument("--base-url",
                        help="hub endpoint (default: $HF_ENDPOINT or https://huggingface.co); with --dump, "
                             "the dump site (default: $BERTPREP_WIKIDUMP_URL or https://dumps.wikimedia.org)")


def add_bookcorpus_arguments(parser):
    parser.add_argument("--tarball", action="store_true",
                        help=f"download the original {TARBALL} instead of the hub's parquet export")
    parser.add_argument("--lines-per-document", type=int, default=DEFAULT_LINES_PER_DOCUMENT,
                        help=f"lines per pseudo-document (default: {DEFAULT_LINES_PER_DOCUMENT}; the release has no "
                             "book boundaries)")
    parser.add_argument("--base-url",
                        help=f"hub endpoint (default: $HF_ENDPOINT); with --tarball, the directory holding "
                             f"{TARBALL} (default: ${TARBALL_URL_ENV} or {DEFAULT_TARBALL_URL})")
    parser.add_argument("--md5",
                        help="md5 of the tarball at a mirror that repacked it (default: the original's, "
                             f"{TARBALL_MD5})")


def add_squad_arguments(parser):
    parser.add_argument("--version", dest="squad_version", choices=["1.1", "2.0", "all"], default="all",
                        help="SQuAD version(s) (default: all)")
    parser.add_argument("--from-hub", action="store_true",
                        help="rebuild the JSON files from rajpurkar/squad[_v2] on the hub instead of the SQuAD site")
    parser.add_argument("--base-url", help=f"SQuAD JSON base URL (default: ${BASE_URL_ENV} or {DEFAULT_BASE_URL}); "
                                           "with --from-hub, the hub endpoint (default: $HF_ENDPOINT)")
    parser.add_argument("--eval-base-url",
                        help=f"evaluation scripts base URL (default: ${EVAL_BASE_URL_ENV} or {DEFAULT_EVAL_BASE_URL})")
    parser.add_argument("--checksums", metavar="FILE",
                        help="md5sum-style list replacing the built-in md5s (for a mirror that republishes the files)")


def add_glue_arguments(parser):
    parser.add_argument("--tasks", default="all",
                        help="all, or a comma-separated list such as CoLA,MRPC,MNLI (default: all)")
    parser.add_argument("--base-url", help="hub endpoint (default: $HF_ENDPOINT or https://huggingface.co)")


def add_pretrained_arguments(parser):
    parser.add_argument("--model", required=True, metavar="NAME",
                        help=f"a Google release ({', '.join(RELEASES)}; NVIDIA's names such as bert_base_uncased "
                             "also work) or a hub model id such as bert-base-uncased")
    parser.add_argument("--base-url",
                        help=f"Google release base URL (default: ${PRETRAINED_URL_ENV} or {PRETRAINED_URL}); "
                             "for a hub id, the hub endpoint (default: $HF_ENDPOINT)")
    parser.add_argument("--checksums", metavar="FILE",
                        help="sha256sum-style list of the unpacked files (and optionally <release>.zip) replacing "
                             "the built-in sha256s, for a mirror that republishes the files")


def add_limit_arguments(parser):
    default = Limits()
    parser.add_argument("--stall-timeout", type=float, default=default.stall, metavar="SECONDS",
                        help=f"resume a download that receives no byte for this long (default: {default.stall:g})")
    parser.add_argument("--deadline", type=float, default=default.deadline, metavar="SECONDS",
                        help=f"resume a connection still transferring after this long; 0: no deadline "
                             f"(default: {default.deadline:g})")


SOURCE_ARGUMENTS = {"wikipedia": add_wikipedia_arguments, "bookcorpus": add_bookcorpus_arguments,
                    "squad": add_squad_arguments, "glue": add_glue_arguments, "pretrained": add_pretrained_arguments}


def options(args):
    """The source's options (WikipediaOptions, ...) from the flags of the same names."""
    cls = options_class(args.source)
    flags = vars(args)
    values = {name: flags[name] for name in field_names(cls) if name in flags}
    # checked for every source: the hub's take their own limits, and took a bad value without a word
    return cls(**values, limits=Limits(stall=args.stall_timeout, deadline=args.deadline).check())


def run(args):
    print_summary(download(options(args), quiet=args.quiet), args)
    return 0
