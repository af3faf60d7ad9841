"""Options the CLI modules build alike from a parsed command line (the only place that reads a Namespace)."""

from bertprep.engines import EngineOptions


def engine_options(args):
    """--engine, --workers, --scheduler and --worker-wait (engines.add_engine_arguments) as EngineOptions."""
    return EngineOptions(args.engine, args.workers, args.scheduler, args.worker_wait)


def print_summary(summary, args):
    """The stage's summary, unless --quiet alone (--json prints it even then), as create, pack, prepare,
    create-squad and create-glue have always done."""
    if not args.quiet or args.json:
        summary.print(as_json=args.json)
