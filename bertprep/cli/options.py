"""Options the CLI modules build alike from a parsed command line (the only place that reads a Namespace)."""

from bertprep.engines import EngineOptions


def engine_options(args):
    """--engine, --workers and --scheduler (engines.add_engine_arguments) as EngineOptions."""
    return EngineOptions(args.engine, args.workers, args.scheduler)
