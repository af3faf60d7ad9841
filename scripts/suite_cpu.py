"""Where the test suite's CPU goes: every Python process a pytest run starts, by kind, and JAX's compile share.

    python scripts/suite_cpu.py [--json] [--top N] -- -n 2 --dist loadgroup [pytest arguments]

The suite is CPU-bound on a 2-core machine (two xdist workers, each starting trainer processes), so its
time is the sum of the CPU its processes spend. This runs pytest with a startup hook in every Python process
of this interpreter's environment (a .pth file in its site-packages, removed at the end, whatever happens):
at exit each process appends its CPU time (its own, not its children's), which of TensorFlow, JAX and torch
it imported, the test that started it (PYTEST_CURRENT_TEST, which subprocesses inherit) and, where JAX was
imported, the seconds its compile events report (jax.monitoring: tracing, lowering to MLIR, XLA's backend
compile), by the name of the function compiled, and which programs came from the compilation cache. Then one
table: processes, CPU seconds and share by kind (the two xdist workers, which run TensorFlow's trainer tests in
process, are a kind of their own), JAX's compile seconds, the functions that cost most to compile, and the
processes that cost most. A process killed by a signal, ending in os._exit or with its file sizes capped (a
test's), writes nothing; non-Python processes (the S3 server) are not counted. The figures vary from run to run
like the suite's time does.
"""

import argparse
import collections
import contextlib
import json
import os
import site
import subprocess
import sys
import tempfile

# Runs at the start of every Python process of the environment (from the .pth file) while the log variable
# is set; the JAX listener is registered when jax.monitoring is first imported, so a process that never
# imports JAX does not import it for this.
HOOK = r'''
import atexit, json, os, resource, sys, time

_log, _started = os.environ["BERTPREP_SUITE_CPU_LOG"], time.time()
_compile = {"trace": 0.0, "lower": 0.0, "backend": 0.0, "programs": 0, "cache_hits": 0, "by_name": {}}
_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
           "/jax/core/compile/backend_compile_duration": "backend"}
_read_from_cache = [False]  # set by a cache hit, taken by the backend compile it happened in


def _listen(event, seconds, fun_name=None, **_):
    if event in _EVENTS:
        key = _EVENTS[event]
        _compile[key] += seconds
        program = _compile["by_name"].setdefault(str(fun_name), {
            "compiled": 0, "read_from_cache": 0, "trace": 0.0, "lower": 0.0, "backend": 0.0})
        program[key] += seconds
        if key == "backend":
            _compile["programs"] += 1
            program["read_from_cache" if _read_from_cache[0] else "compiled"] += 1
            _read_from_cache[0] = False


def _hit(event, **_):  # recorded inside the backend compile it spares, before that one's duration
    if event == "/jax/compilation_cache/cache_hits":
        _compile["cache_hits"] += 1
        _read_from_cache[0] = True


class _AfterJaxMonitoring:
    def find_spec(self, name, path=None, target=None):
        if name != "jax.monitoring":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.register_event_duration_secs_listener(_listen)
            module.register_event_listener(_hit)
        spec.loader.exec_module = exec_module
        return spec


def _write():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    record = {"cpu": usage.ru_utime + usage.ru_stime, "wall": time.time() - _started,
              "imported": [m for m in ("tensorflow", "jax", "torch") if m in sys.modules],
              "worker": os.environ.get("PYTEST_XDIST_WORKER"), "test": os.environ.get("PYTEST_CURRENT_TEST"),
              "compile": _compile}
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return  # a test capped this process's file sizes: the record could be cut short, or fail and print
    try:
        with open(_log, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
    except OSError:  # the record is lost; the process's own output and exit status are not changed
        pass


if not hasattr(sys, "_bertprep_suite_cpu"):  # once, however many times site reads the .pth file
    sys._bertprep_suite_cpu = True
    sys.meta_path.insert(0, _AfterJaxMonitoring())
    atexit.register(_write)
'''
PTH_PREFIX = "zz_bertprep_suite_cpu_"  # and a name of the run's own: see hook_installed
KINDS = ("test workers", "tensorflow", "jax", "torch", "other")
PHASES = ("trace", "lower", "backend")


def kind(record):
    if record["worker"] and record["test"] is None:
        return "test workers"
    return next((m for m in ("tensorflow", "jax", "torch") if m in record["imported"]), "other")


def compile_seconds(figures):
    """Tracing, lowering and XLA's seconds of a process's (or a function's) compile figures."""
    return sum(figures.get(phase, 0) for phase in PHASES)


def summary(records, top):
    by_kind = collections.defaultdict(lambda: {"processes": 0, "cpu_s": 0.0, "jax_compile_s": 0.0})
    for record in records:
        row = by_kind[kind(record)]
        row["processes"] += 1
        row["cpu_s"] += record["cpu"]
        row["jax_compile_s"] += compile_seconds(record["compile"])
    jax_records = [r for r in records if "jax" in r["imported"]]
    compile_s = {key: sum(r["compile"].get(key, 0) for r in jax_records)
                 for key in (*PHASES, "programs", "cache_hits")}
    by_name = collections.defaultdict(collections.Counter)
    for record in jax_records:
        for name, figures in record["compile"].get("by_name", {}).items():
            by_name[name].update(figures)
    programs = sorted(by_name.items(), key=lambda item: -compile_seconds(item[1]))[:top]
    costly = sorted(records, key=lambda r: -r["cpu"])[:top]
    return {"cpu_s": sum(r["cpu"] for r in records), "processes": len(records),
            "by_kind": {k: by_kind[k] for k in KINDS if k in by_kind}, "jax_compile": compile_s,
            "jax_cpu_s": sum(r["cpu"] for r in jax_records),
            "jax_programs": [{"name": name, **figures} for name, figures in programs],
            "costliest": [{"cpu_s": r["cpu"], "kind": kind(r), "test": r["test"]} for r in costly]}


def print_summary(found):
    total = found["cpu_s"] or 1.0
    print(f"{found['processes']} Python processes, {found['cpu_s']:.0f} s of CPU")
    for name, row in found["by_kind"].items():
        print(f"  {name:13s} {row['processes']:5d} processes {row['cpu_s']:8.0f} s  {100 * row['cpu_s'] / total:5.1f}%"
              f"  (JAX compiling {row['jax_compile_s']:.0f} s)")
    c, jax_cpu = found["jax_compile"], found["jax_cpu_s"] or 1.0
    spent = compile_seconds(c)
    print(f"processes that imported JAX: {spent:.0f} s of their {found['jax_cpu_s']:.0f} s compiling"
          f" ({100 * spent / jax_cpu:.0f}%):"
          f" tracing {c['trace']:.0f} s, lowering {c['lower']:.0f} s, XLA {c['backend']:.0f} s for"
          f" {c['programs']} programs ({c['cache_hits']} of them read from the compilation cache)")
    print("by function (a nested function's tracing counts in its caller's too): compiled, read from the cache,"
          " seconds tracing, lowering, in XLA (compiling or reading)")
    for row in found["jax_programs"]:
        print(f"  {row['compiled']:5d} {row['read_from_cache']:5d} {row['trace']:7.1f} {row['lower']:7.1f}"
              f" {row['backend']:7.1f}  {row['name'][:70]}")
    print("costliest processes:")
    for row in found["costliest"]:
        print(f"  {row['cpu_s']:7.1f} s  {row['kind']:12s} {(row['test'] or '')[:100]}")


@contextlib.contextmanager
def hook_installed(site_dir, scratch):
    """HOOK in `scratch`, and a .pth file in `site_dir` that runs it in every process of the environment whose
    log variable is set, removed at the end, whatever happens. The .pth has a name of this run's own: runs at
    once in one environment (worktrees sharing a venv) shared one name, so the first to end removed the other's
    file (whose later processes went uncounted) and the other then ended, after its whole pytest run, in
    `FileNotFoundError` on removing it. With a file each, a process runs the hook once (its guard) and logs to
    its own run's log."""
    hook = os.path.join(scratch, "hook.py")
    with open(hook, "w", encoding="utf-8") as out:
        out.write(HOOK)
    descriptor, pth = tempfile.mkstemp(prefix=PTH_PREFIX, suffix=".pth", dir=site_dir)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:  # .pth lines that start with "import" are run
        out.write("import os; os.environ.get('BERTPREP_SUITE_CPU_LOG') and exec(compile(open("
                  f"{hook!r}).read(), {hook!r}, 'exec'), {{'__name__': 'bertprep_suite_cpu_hook'}})\n")
    try:
        yield
    finally:
        os.remove(pth)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--top", type=int, default=10,
                        help="how many of the costliest processes and programs to list")
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        log = os.path.join(scratch, "processes.jsonl")
        with hook_installed(site.getsitepackages()[0], scratch):
            result = subprocess.run([sys.executable, "-m", "pytest", *args.pytest_args],
                                    env=dict(os.environ, BERTPREP_SUITE_CPU_LOG=log))
        with open(log, encoding="utf-8") as lines:
            records = [json.loads(line) for line in lines]
    found = summary(records, args.top)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print_summary(found)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
