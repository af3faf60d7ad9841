"""The `--shared` folder the benchmark scripts read their fixtures from, checked once for all of them."""

from pathlib import Path


def require_fixtures(parser, shared):
    """parser.error (one usage line, exit 2) where `shared` holds no fixtures/: a wrong --shared or
    BERTPREP_SHARED was a traceback from deep inside the script's first read."""
    if not (Path(shared) / "fixtures").is_dir():
        parser.error(f"--shared {shared}: no fixtures/ there (the shared fixtures' folder: give --shared DIR "
                     "or set BERTPREP_SHARED)")
