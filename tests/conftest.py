import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_path():
    """The project's shared fixtures: $BERTPREP_SHARED, else `shared/` beside the checkout."""
    return Path(os.environ.get("BERTPREP_SHARED") or REPO.parent / "shared")


@pytest.fixture(scope="session")
def shared_dir():
    path = shared_path()
    if not (path / "fixtures").is_dir():
        pytest.fail(f"shared fixtures not found at {path} (set BERTPREP_SHARED)")
    return path


@pytest.fixture(scope="session")
def golden_dir(shared_dir):
    return shared_dir / "fixtures" / "golden"


def pytest_configure(config):
    """One persistent JAX compilation cache for the session: every JAX process of every module, on either
    xdist worker, reads what an earlier one compiled. Each compiles, besides its train step, the same few
    hundred small programs op by op (building the model, initializers) whatever the model's config: a
    trainer process of another config with the cache warm takes 13.6 s of CPU instead of 21.3 s. Made by
    the first process (xdist's controller, which starts the workers after this hook) and inherited by the
    workers and every process they start; removed at the end. Entries are written non-atomically: a
    process that reads one half written gets a warning from JAX and compiles instead."""
    if "BERTPREP_TEST_JAX_CACHE" not in os.environ:
        path = tempfile.mkdtemp(prefix="bertprep-test-jax-cache-")
        config.bertprep_jax_cache = path
        os.environ.update(BERTPREP_TEST_JAX_CACHE=path, JAX_COMPILATION_CACHE_DIR=path,
                          JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def pytest_unconfigure(config):
    path = getattr(config, "bertprep_jax_cache", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)
