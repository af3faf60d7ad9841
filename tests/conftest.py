import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The tests compile many small XLA programs (JAX train steps, TensorFlow's jit_compile'd gradients) and
# run each a few steps: LLVM's optimization passes cost more time than they save (a JAX trainer process
# of 3 steps: 16.5 s -> 12.2 s). Set here, before anything imports TensorFlow or JAX, so this process and
# every process the tests start (they inherit os.environ; jax_env adds its device count) compile alike.
# Only code generation is cheaper: XLA's HLO passes (fusion, all-reduce combining) run as before, and
# every comparison the tests make is between runs compiled the same way.
FAST_COMPILE_XLA_FLAGS = ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *FAST_COMPILE_XLA_FLAGS]).strip()


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


@pytest.fixture(scope="module")
def jax_compilation_cache(tmp_path_factory):
    """One persistent XLA cache for a module's JAX processes (`pytestmark = pytest.mark.usefixtures(...)`):
    each run compiles the same model (about 20 s on 2 cores), so later runs take seconds."""
    cache = tmp_path_factory.mktemp("jax-cache")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    yield
    del os.environ["JAX_COMPILATION_CACHE_DIR"]
