"""scripts/suite_cpu.py's hook, run as its .pth runs it (at a process's start, with the log variable set),
in processes of its own here rather than through a .pth in the shared environment: a JAX process's record
names the function it compiled and tells a compile from a read of the compilation cache; a process whose
file sizes are capped writes nothing and prints nothing; the summary adds the records up by kind."""

import json
import os
import resource
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import suite_cpu  # noqa: E402

# Compiles `double`, then, its in-memory caches cleared, reads it from the persistent cache.
COMPILE_THEN_READ = """
import jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", {cache!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
def double(x):
    return x * 2
for _ in range(2):
    assert float(jax.jit(double)(jnp.float32(3))) == 6.0
    jax.clear_caches()
"""


def run_with_hook(code, log, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env.update(BERTPREP_SUITE_CPU_LOG=str(log), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", suite_cpu.HOOK + code], env=env, capture_output=True, text=True,
                          timeout=300, **kwargs)


def records(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_jax_process_records_what_it_compiled_and_what_it_read(tmp_path):
    pytest.importorskip("jax")
    log = tmp_path / "processes.jsonl"
    result = run_with_hook(COMPILE_THEN_READ.format(cache=str(tmp_path / "cache")), log)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    (record,) = records(log)
    assert "jax" in record["imported"] and record["cpu"] > 0
    double = record["compile"]["by_name"]["jit(double)"]
    assert (double["compiled"], double["read_from_cache"]) == (1, 1) and double["lower"] > 0 and double["backend"] > 0
    programs = [figures for name, figures in record["compile"]["by_name"].items() if name.startswith("jit(")]
    assert record["compile"]["cache_hits"] == sum(p["read_from_cache"] for p in programs)  # the scalar's conversion too
    assert record["compile"]["programs"] == sum(p["compiled"] + p["read_from_cache"] for p in programs)


def test_a_process_with_capped_file_sizes_writes_no_record_and_prints_nothing(tmp_path):
    log = tmp_path / "processes.jsonl"
    log.write_text("x" * 100)  # past the cap below: appending to it would fail
    cap = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10))  # noqa: E731
    result = run_with_hook("print('ran')", log, preexec_fn=cap)
    assert (result.returncode, result.stdout, result.stderr) == (0, "ran\n", "")
    assert log.read_text() == "x" * 100


def test_the_summary_adds_the_records_up_by_kind_and_by_function():
    def record(cpu, imported=(), worker=None, test="t", by_name=None):
        compile_s = {"trace": 1.0, "lower": 2.0, "backend": 3.0, "programs": 4, "cache_hits": 1,
                     "by_name": by_name or {}} if "jax" in imported else {}
        return {"cpu": cpu, "imported": list(imported), "worker": worker, "test": test, "compile": compile_s}

    def program(compiled, read, trace, lower, backend):
        return {"compiled": compiled, "read_from_cache": read, "trace": trace, "lower": lower, "backend": backend}

    f_then_g = {"jit(f)": program(0, 1, 0.5, 0.5, 0.5), "jit(g)": program(1, 0, 0.0, 0.1, 0.1)}
    found = suite_cpu.summary([
        record(100.0, ("tensorflow", "jax"), worker="gw0", test=None, by_name={"jit(f)": program(1, 0, 0.0, 1.0, 2.0)}),
        record(50.0, ("jax",), by_name=f_then_g),
        record(20.0, ("tensorflow",)), record(1.0)], top=2)
    assert found["cpu_s"] == 171.0 and found["processes"] == 4
    assert {k: (v["processes"], v["cpu_s"], v["jax_compile_s"]) for k, v in found["by_kind"].items()} == {
        "test workers": (1, 100.0, 6.0), "jax": (1, 50.0, 6.0), "tensorflow": (1, 20.0, 0.0), "other": (1, 1.0, 0.0)}
    assert found["jax_compile"] == {"trace": 2.0, "lower": 4.0, "backend": 6.0, "programs": 8, "cache_hits": 2}
    assert found["jax_programs"] == [
        {"name": "jit(f)", "compiled": 1, "read_from_cache": 1, "trace": 0.5, "lower": 1.5, "backend": 2.5},
        {"name": "jit(g)", "compiled": 1, "read_from_cache": 0, "trace": 0.0, "lower": 0.1, "backend": 0.1}]
    assert [row["cpu_s"] for row in found["costliest"]] == [100.0, 50.0]


def test_two_runs_at_once_in_one_environment_each_keep_their_hook(tmp_path):
    """Worktrees share one venv: a run that ends while another is under way leaves the other's .pth in place, and
    the other's later processes still log (one record each: the hook runs once however many .pth files run it)."""
    site_dir, first, second = (tmp_path / name for name in ("site-packages", "first", "second"))
    for directory in (site_dir, first, second):
        directory.mkdir()
    log = tmp_path / "processes.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["BERTPREP_SUITE_CPU_LOG"] = str(log)
    start = [sys.executable, "-c", "import site, sys; site.addsitedir(sys.argv[1])", str(site_dir)]
    with suite_cpu.hook_installed(str(site_dir), str(first)):
        with suite_cpu.hook_installed(str(site_dir), str(second)):
            both = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60)
        after = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60)
        assert len(list(site_dir.iterdir())) == 1
    assert (both.returncode, both.stderr, after.returncode, after.stderr) == (0, "", 0, "")
    assert len(records(log)) == 2
    assert list(site_dir.iterdir()) == []
