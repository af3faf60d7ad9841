"""`bertprep download <source>`: Wikipedia, BookCorpus, SQuAD, GLUE or pretrained BERT weights.

Every download is atomic (a `.part` file renamed when verified), resumable
(HTTP Range), retried with backoff on transient errors, verified against
the size and checksum the source publishes, and recorded in
WORKDIR/download/<source>/manifest.json. Pretraining corpora (wikipedia,
bookcorpus) are also extracted into WORKDIR/formatted/<corpus>/, which
`bertprep shard` reads by default; SQuAD and GLUE are fine-tuning data laid
out as NVIDIA's scripts expect; pretrained weights are unpacked into
WORKDIR/download/pretrained/<model>/.
"""

import importlib
import os

from bertprep.stages.download.http import add_limit_arguments
from bertprep.progress import Progress, add_output_arguments, print_summary
from bertprep.workdir import add_workdir_argument, resolve_workdir

SOURCES = {
    "wikipedia": ("bertprep.stages.download.wikipedia", "Wikipedia: the hub's wikimedia/wikipedia parquet, or --dump XML"),
    "bookcorpus": ("bertprep.stages.download.bookcorpus", "BookCorpus: the hub's parquet export, or --tarball"),
    "squad": ("bertprep.stages.download.squad", "SQuAD v1.1/v2.0 JSON (md5-checked) and evaluation scripts"),
    "glue": ("bertprep.stages.download.glue", "GLUE tasks from nyu-mll/glue as the original TSV files"),
    "pretrained": ("bertprep.stages.download.pretrained", "Google's released BERT checkpoints (sha256-checked) or a hub model"),
}


def add_arguments(parser):
    sub = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
    for name, (module_name, help_text) in SOURCES.items():
        source_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_workdir_argument(source_parser)
        source_parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                                   help="parallel extraction workers (default: all cores)")
        add_limit_arguments(source_parser)
        add_output_arguments(source_parser)
        importlib.import_module(module_name).add_arguments(source_parser)


def run(args):
    workdir = resolve_workdir(args.workdir)
    progress = Progress(f"download {args.source}", unit="files", quiet=args.quiet)
    summary, rows = importlib.import_module(SOURCES[args.source][0]).run(args, workdir, progress)
    progress.close()
    summary["workdir"] = workdir
    print_summary(f"bertprep download {args.source}: done", summary, as_json=args.json, rows=rows + [("workdir", workdir)])
    return 0
