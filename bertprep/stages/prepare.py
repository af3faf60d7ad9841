"""`bertprep prepare`: the common case in one command.

    bertprep prepare wikipedia bookcorpus --vocab bert-base-uncased --workdir W

runs, in order, the same commands you can run one by one:

    bertprep download wikipedia / bookcorpus      (hub parquet releases)
    bertprep shard --corpus <corpus>              (books_wiki_en_corpus for both)
    bertprep create --corpus <corpus> --seq 128 --pred 20
    bertprep create --corpus <corpus> --seq 512 --pred 80

and stops at the first that fails, with that stage's error and exit code.
Every stage resumes, so rerunning `prepare` after an interruption redoes
only what is missing. For anything else (the XML dump, a tarball, other
flags), run the stages yourself.
"""

import contextlib
import io
import json
import re

from bertprep.stages.create import LAYOUTS
from bertprep.engines import add_engine_arguments
from bertprep.errors import UsageError
from bertprep.progress import print_summary
from bertprep.workdir import add_workdir_argument

SOURCES = ("wikipedia", "bookcorpus")
DEFAULT_CONFIGS = "128/20,512/80"


def add_arguments(parser):
    parser.add_argument("sources", nargs="+", choices=SOURCES, metavar="SOURCE", help="wikipedia and/or bookcorpus")
    parser.add_argument("--vocab", required=True, help="vocab.txt, or a hub model id such as bert-base-uncased")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"seq/pred pairs to create (default {DEFAULT_CONFIGS})")
    parser.add_argument("--lang", default="en", help="Wikipedia language (default en)")
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--train-shards", type=int, default=256)
    parser.add_argument("--test-shards", type=int, default=256)
    parser.add_argument("--layout", choices=LAYOUTS, default="bertprep",
                        help="records layout of create: bertprep's (both formats) or NVIDIA's TFRecord tree under WORKDIR/tfrecord")
    add_engine_arguments(parser)
    add_workdir_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--json", action="store_true", help="print every stage's summary as one JSON object")


def parse_configs(value):
    configs = []
    for item in value.split(","):
        match = re.fullmatch(r"\s*(\d+)/(\d+)\s*", item)
        if not match:
            raise UsageError(f"--configs {value!r}: expected seq/pred pairs such as 128/20,512/80")
        configs.append((int(match[1]), int(match[2])))
    return configs


def corpus_name(sources, lang):
    corpora = {"wikipedia": f"wikicorpus_{lang}", "bookcorpus": "bookcorpus"}
    if set(sources) == set(SOURCES):
        if lang != "en":
            raise UsageError("wikipedia with bookcorpus is the English books_wiki_en_corpus: use --lang en")
        return "books_wiki_en_corpus"
    return corpora[sources[0]]


def stage_commands(args):
    """The argv of every stage, in order: [(label, argv)]."""
    sources = list(dict.fromkeys(args.sources))
    corpus = corpus_name(sources, args.lang)
    common = (["--workdir", args.workdir] if args.workdir else []) + (["--quiet"] if args.quiet else [])
    engine = ["--engine", args.engine] + (["--scheduler", args.scheduler] if args.scheduler else [])
    engine += ["--workers", str(args.workers)] if args.workers else []
    commands = []
    for source in sources:
        extra = ["--lang", args.lang] if source == "wikipedia" else []
        commands.append((f"download {source}", ["download", source, *extra, *common]))
    commands.append(("shard", ["shard", "--corpus", corpus, "--train-shards", str(args.train_shards),
                               "--test-shards", str(args.test_shards), *engine, *common]))
    for seq, pred in parse_configs(args.configs):
        commands.append((f"create {seq}/{pred}", [
            "create", "--corpus", corpus, "--vocab", args.vocab, "--seq", str(seq), "--pred", str(pred),
            "--dupe-factor", str(args.dupe_factor), "--layout", args.layout, *engine, *common]))
    return commands


def run(args):
    from bertprep.cli import main

    commands = stage_commands(args)  # flags are checked before anything runs
    summaries = {}
    for label, argv in commands:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            code = main([*argv, "--json"])
        if code != 0:
            return code  # the stage printed its own one-line error
        summaries[label] = json.loads(captured.getvalue())
    rows = []
    for label, summary in summaries.items():
        if label.startswith("create"):
            rows.append((label, f"{sum(summary['instances'].values()):,} instances in {summary['records_dir']}"))
        elif label == "shard":
            rows.append((label, f"{summary['documents']['training']:,} training / {summary['documents']['test']:,} test documents in {summary['out']}"))
        else:
            rows.append((label, "done"))
    if not args.quiet or args.json:
        print_summary("bertprep prepare: done", summaries, as_json=args.json, rows=rows)
    return 0
