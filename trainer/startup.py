"""Where a pretraining run's start went, up to its first step's results: the summary's
`seconds_to_first_step`, and with `--json` its `startup` phases.

The trainer marks its own phases on a clock: Keras and its backend imported, the backend's devices found
(under JAX on a GPU: CUDA and NVIDIA's libraries initialized), the model and its optimizer built (their
initial values drawn, or under JAX dispatched), the first step's results on the host. Under JAX, what JAX
did meanwhile comes from its public monitoring hooks (jax.monitoring): the seconds spent tracing Python into
jaxprs, lowering them to StableHLO, and compiling programs or reading them from the persistent cache
(trainer/compilation_cache.py), and how many programs each way. A trace nested in another (a jit called
inside the step) is counted once: the seconds are the union of the events' time spans. A profiler slows the
Python-heavy phases (scripts/bench_startup.py --phases; docs/trainer.md has a case); the clock costs a few
timestamps, so its figures are the run's own: the GPU check prints them.

The first run in a process counts from the process's start (Linux's /proc/self/stat; elsewhere from this
module's import, which leaves out the interpreter's own start, tens of milliseconds); a later run in the
same process (a notebook's, a test's) from its `trainer.train` call, and says so (`from`).
"""

import os
import time

TRACED = "/jax/core/compile/jaxpr_trace_duration"
LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILED = "/jax/core/compile/backend_compile_duration"  # a program compiled, or read from the persistent cache
CACHE_HIT = "/jax/compilation_cache/cache_hits"
SPANS = {TRACED: "traced_s", LOWERED: "lowered_s", COMPILED: "compiled_or_loaded_s"}

_runs_in_process = 0
_current = None  # the clock JAX's events go to: at most one run's at a time
_listening = False


def process_start():
    """time.perf_counter()'s reading when this process started (Linux: its start time in /proc, against
    the boot clock), else when this module loaded."""
    now_perf, now_boot = time.perf_counter(), time.clock_gettime(time.CLOCK_BOOTTIME)
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
        started_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks
    except (OSError, ValueError, IndexError, AttributeError):
        return _LOADED
    return now_perf - (now_boot - started_boot)


_LOADED = time.perf_counter()
PROCESS_START = process_start()


class StartupClock:
    """One run's start: `mark(phase)` as the trainer passes it, JAX's events while it runs, `first_results()`
    when they reach the host (`close()` where the run ends without); `figures()` for the summary."""

    def __init__(self):
        global _runs_in_process
        _runs_in_process += 1
        self.first_in_process = _runs_in_process == 1
        self.origin = PROCESS_START if self.first_in_process else time.perf_counter()
        self.marks = {}
        self.spans = {event: [] for event in SPANS}
        self.programs = 0
        self.from_cache = 0
        self.stopped = False

    def mark(self, phase):
        """`phase` reached now (the first time only)."""
        if not self.stopped:
            self.marks.setdefault(phase, time.perf_counter() - self.origin)

    def listen_to_jax(self):
        """Count JAX's tracing, lowering and compiling from now until `close()` (JAX must be imported)."""
        global _current
        _ensure_listeners()
        _current = self

    def first_results(self):
        """The first results are on the host: the start is over."""
        self.mark("first_step_s")
        self.close()

    def close(self):
        """No more marks, and JAX's events no longer counted for this run."""
        global _current
        self.stopped = True
        if _current is self:
            _current = None

    def figures(self):
        """{'from', phase seconds..., and under JAX the spans' seconds, 'programs', 'programs_from_cache'}."""
        figures = {"from": "process start" if self.first_in_process else "train() call", **self.marks}
        if any(self.spans.values()) or self.programs:
            figures.update({name: round(_union(self.spans[event]), 3) for event, name in SPANS.items()})
            figures.update(programs=self.programs, programs_from_cache=self.from_cache)
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}


def _union(spans):
    """Seconds covered by the (start, end) spans, overlaps counted once."""
    total, reached = 0.0, None
    for start, end in sorted(spans):
        if reached is None or start > reached:
            total += end - start
            reached = end
        elif end > reached:
            total += end - reached
            reached = end
    return total


def _on_span(event, start, end, **_):
    if _current is not None and event in SPANS:
        _current.spans[event].append((start, end))
        if event == COMPILED:
            _current.programs += 1


def _on_event(event, **_):
    if _current is not None and event == CACHE_HIT:
        _current.from_cache += 1


def _ensure_listeners():
    """JAX's listeners registered once a process (they stay: JAX keeps every listener it is given)."""
    global _listening
    if _listening:
        return
    import jax

    jax.monitoring.register_event_time_span_listener(_on_span)
    jax.monitoring.register_event_listener(_on_event)
    _listening = True
