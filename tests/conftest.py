import os
import shutil
import tempfile
from pathlib import Path

import pytest

import early_waits
import object_store
from trainer_checks import freeze_survivors, xla_flags

REPO = Path(__file__).resolve().parents[1]

# Before any test module imports gcsfs, which reads it once: gcsfs 2026.x otherwise makes gcsfs.GCSFileSystem its
# ExtendedGcsFileSystem, which asks a bucket's layout over gRPC and TLS, and retries that for minutes against the
# GCS emulator (gcs_bucket). Nothing in the tests reaches a real (zonal) bucket.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
# Before any test imports TensorFlow, which reads them once: fast XLA compiles (trainer_checks'
# FAST_COMPILE_XLA_FLAGS, where the measurements are) for the workers' TensorFlow and every process they
# start; a JAX run of many steps takes them off again (xla_flags(fast_compile=False)).
os.environ["XLA_FLAGS"] = xla_flags()
# Before the workers start (xdist's controller imports this first, and they and every process they start inherit
# it): glibc's malloc asks for transparent huge pages (where the kernel's THP mode is madvise, as on Debian and
# Ubuntu). XLA's CPU steps allocate and free their large buffers (the logits over the vocab, the embedding's
# gradient) at every step, each time faulting in fresh 4 KiB pages: the trajectories' 30-step JAX run of hf_tiny
# took 1.5 million page faults and 18.0 s of CPU (4 s of it the kernel's), with huge pages 0.13 million and 15.2 s
# (scripts/bench_huge_pages.py; docs/trainer.md, "Tests"). A tunable glibc does not know, and other C libraries,
# ignore it; the user's own GLIBC_TUNABLES is kept.
os.environ.setdefault("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
# One cache of compiled XLA programs per test worker (trainer/compilation_cache.py), for every JAX process a test
# starts and the trainer runs in this one: most tests train the same tiny model, so a program one test compiled is
# loaded by the next. Per worker: sharing one between the two would be safe (the trainer gives JAX's cache a size
# limit, under which JAX reads and writes each entry holding a file lock on the folder, jax/_src/lru_cache.py), but
# measured no faster: the AMD VM's fresh-clone CI took 32 min 6 s of pytest with one shared cache (55f659e) and
# 30 min 8 s without (4ecab5a), within that VM's spread. Not the user's ~/.cache; removed when the worker ends.
WORKER_CACHE = tempfile.mkdtemp(prefix="bertprep-tests-compilation-cache-")
os.environ["BERTPREP_COMPILATION_CACHE_DIR"] = WORKER_CACHE
# The folder of the session's early waits (tests/early_waits.py), made by its first process (xdist's controller,
# which imports this before it starts the workers, so they inherit it) and removed by it.
EARLY_WAITS_MADE_HERE = early_waits.SHARED_FOLDER_VARIABLE not in os.environ
if EARLY_WAITS_MADE_HERE:
    os.environ[early_waits.SHARED_FOLDER_VARIABLE] = tempfile.mkdtemp(prefix="bertprep-tests-early-waits-")


def pytest_collection_finish(session):
    """Collected: the imports and test modules live as long as the worker. Frozen out of the garbage
    collector's reach (trainer_checks.freeze_survivors), they are not scanned again by every collection of
    the tests that train in this process (Keras's clear_session collects at each run). Then the selected tests'
    long waits begin (early_waits)."""
    freeze_survivors()
    early_waits.start(session)


def pytest_sessionfinish(session):
    early_waits.finish()
    shutil.rmtree(WORKER_CACHE, ignore_errors=True)
    if EARLY_WAITS_MADE_HERE:
        shutil.rmtree(os.environ[early_waits.SHARED_FOLDER_VARIABLE], ignore_errors=True)


def pytest_configure(config):
    """`--dist loadgroup` keeps a group's tests on one worker (they share costly fixtures) only under
    pytest < 9: pytest-xdist 3.8 names the groups by renaming item._nodeid, which pytest 9 no longer reads."""
    if config.getoption("dist", "no") == "loadgroup" and int(pytest.__version__.split(".")[0]) >= 9:
        raise pytest.UsageError(f"--dist loadgroup does not group tests under pytest {pytest.__version__}; "
                                "install the test extra (pip install -e \".[test]\"), which takes pytest < 9")


# The slowest modules first (`--durations` of a full run), so xdist hands out the long work units (a
# module's group) early and ends with short ones, instead of one worker training alone at the end.
SLOWEST_MODULES = ("test_trainer_pipeline.py", "test_trainer.py", "test_optimizer_trajectories.py", "test_finetune.py",
                   "test_trainer_jax.py", "test_trainer_model_parallel.py", "test_trainer_benchmark.py",
                   "test_checkpoints.py")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return SLOWEST_MODULES.index(name) if name in SLOWEST_MODULES else len(SLOWEST_MODULES)

    items.sort(key=rank)  # stable: a module's tests keep their order


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


# Object stores (tests/object_store.py, whose docstring says what each gives): a server per session, started by
# the first test that asks, and a new bucket per test module with the server's client variables in os.environ.
seaweedfs = object_store.server_fixture(object_store.SeaweedFS)
s3_bucket = object_store.bucket_fixture("seaweedfs", "s3")
gcs_emulator = object_store.server_fixture(object_store.GCSEmulator)
gcs_bucket = object_store.bucket_fixture("gcs_emulator", "gs")
