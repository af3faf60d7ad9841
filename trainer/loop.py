"""The training loop of pretraining and fine-tuning alike: dispatch steps, take their results, log,
evaluate, checkpoint.

    while (results := dispatcher.next_results(counts.step)) is not None:
        for result in results:            # in step order, each a dict of host floats
            counts.take(result)           # step, skipped steps, non-finite run
            meter.take(...)               # sequences, tokens, seconds (throughput, one way everywhere)
            log / evaluate / checkpoint   # when the step is due for them

The Dispatcher owns the asynchronous step results: it keeps a step (or --steps-per-call steps)
running on the devices while the host fetches the older ones' results, and only when the loop
needs them (a log line, an evaluation, a checkpoint, the timing warmup). Each step's results start
for the host as it is dispatched (Steps.send_to_host): a device runs its work in order, so a copy
asked for at the fetch would also wait for the step dispatched after them, and the time would be
counted one step late. Every step is still applied in order: when results are fetched changes no loss.
"""

import contextlib
import dataclasses
import time
from typing import Callable

from bertprep.errors import DataError

# Steps before throughput is measured: compilation and autotuning happen there.
TIMING_WARMUP_STEPS = 3
# A run whose loss is non-finite this many steps in a row is stopped.
MAX_NONFINITE_STEPS = 25


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When the loop does what: `total` optimizer steps, a log line every `log_every`, an evaluation
    every `eval_every` and a checkpoint every `checkpoint_every` (0: never) and at the end."""

    total: int
    log_every: int
    steps_per_call: int = 1
    eval_every: int = 0
    checkpoint_every: int = 0

    def logs(self, step):
        return step % self.log_every == 0 or step == self.total

    def evaluates(self, step):
        return bool(self.eval_every) and step % self.eval_every == 0

    def checkpoints(self, step):
        return bool(self.checkpoint_every) and (step % self.checkpoint_every == 0 or step == self.total)

    def boundary(self, step):
        """A step after which the devices must stop running ahead (its state is read or saved)."""
        return step == self.total or self.checkpoints(step) or self.evaluates(step)


class Dispatcher:
    """The steps dispatched whose results are still on the device, oldest first. `next_results`
    dispatches until results are due and returns them; `draws` counts the batches drawn."""

    def __init__(self, steps, batches, schedule, step, accumulation, draws=0):
        self.steps, self.batches, self.schedule, self.accumulation = steps, batches, schedule, accumulation
        self.started = step
        self.pending = []  # (handle, optimizer steps in it, when it was done or None: not known before its fetch)
        self.draws = draws  # a resumed run's earlier ones included

    def fetch_point(self, n):
        """Results are fetched when step n is to be logged or is a boundary, and after each of the
        first steps, whose time is not counted."""
        schedule = self.schedule
        return schedule.boundary(n) or n % schedule.log_every == 0 or n - self.started <= TIMING_WARMUP_STEPS + 1

    def next_results(self, step):
        """(results, done_at) of the oldest pending steps, once due: a list of dicts of host floats and
        the clock when the last of them was done, None where only their fetch tells; None when the run
        is done. `step`: the optimizer steps applied so far."""
        total = self.schedule.total
        while self.pending or step < total:
            projected = step + sum(n for _, n, _ in self.pending)  # once every pending step is applied
            dispatch = projected < total and not (self.pending and self.schedule.boundary(projected))
            if dispatch:
                self._dispatch(projected)
            # The newest call keeps the devices busy while the older ones' results come back.
            ready = self.pending[:-1] if dispatch else self.pending
            if not ready or (dispatch and not self.fetch_point(step + sum(n for _, n, _ in ready))):
                continue
            results, done_at = self.steps.fetch_all([handle for handle, _, _ in ready]), ready[-1][2]
            del self.pending[:len(ready)]  # `ready` may be the list itself
            return results, done_at
        return None

    def _dispatch(self, projected):
        """--steps-per-call steps in one call when no fetch point falls inside them."""
        calls = 1
        while (calls < self.schedule.steps_per_call and projected + calls < self.schedule.total
               and not self.fetch_point(projected + calls)):
            calls += 1
        device_batches = [self.steps.put(element(next(self.batches), self.accumulation)) for _ in range(calls)]
        handle = self.steps.train(device_batches[0]) if calls == 1 else self.steps.train_many(device_batches)
        self.steps.send_to_host(handle)
        self.pending.append((handle, calls, time.perf_counter() if self.steps.runs_when_dispatched else None))
        self.draws += calls


def element(batch, accumulation):
    """A step's element: the batch as [accumulation, rows per micro-batch, ...]."""
    return {k: v.reshape((accumulation, -1) + v.shape[1:]) for k, v in batch.items()}


class Meter:
    """Throughput, one way everywhere: the real sequences and tokens (a packed row holds several)
    trained on, over the time of the steps after the first TIMING_WARMUP_STEPS; for the run and
    for the window since the last log line. A lap is the time from when the steps before were done
    to when the fetched ones were, less evaluations and checkpoints; its steps share it."""

    def __init__(self, started_step, counts_tokens):
        self.started = started_step
        self.counts_tokens = counts_tokens
        self.trained = {"sequences": 0.0, "tokens": 0.0}
        self.timed = _empty_totals()
        self.window = _empty_totals()
        self.clock = time.perf_counter()  # when the steps of the last lap were done
        self.excluded = []  # (start, end) of the evaluations and checkpoints the laps have not passed yet

    def lap(self, done_at=None):
        """(when the fetched steps were done, the seconds they took); `done_at` None: now, as they
        have just reached the host."""
        end = max(self.clock, time.perf_counter() if done_at is None else done_at)
        excluded = sum(max(0.0, min(stop, end) - max(start, self.clock)) for start, stop in self.excluded)
        self.excluded = [(start, stop) for start, stop in self.excluded if stop > end]
        seconds, self.clock = end - self.clock - excluded, end
        return end, seconds

    @contextlib.contextmanager
    def not_training(self):
        """Evaluation and checkpoints are not training time."""
        start = time.perf_counter()
        yield
        self.excluded.append((start, time.perf_counter()))

    def take(self, step, result, seconds):
        """An applied step's work (after it, `step` steps are applied) and its share of the time."""
        work = {"sequences": result["sequences"], "tokens": result.get("tokens", 0.0)}
        for key in work:
            self.trained[key] += work[key]
        if step - self.started > TIMING_WARMUP_STEPS:
            for totals in (self.timed, self.window):
                totals["seconds"] += seconds
                totals["steps"] += 1
                totals["sequences"] += work["sequences"]
                totals["tokens"] += work["tokens"]

    def rates(self, totals):
        """{sequences_per_second, tokens_per_second (where counted)} of `totals`, None untimed."""
        seconds = totals["seconds"]
        rates = {"sequences_per_second": totals["sequences"] / seconds if seconds else None}
        if self.counts_tokens:
            rates["tokens_per_second"] = totals["tokens"] / seconds if seconds else None
        return rates

    def take_window(self):
        """The window's rates, and a new window begun."""
        rates = self.rates(self.window)
        self.window = _empty_totals()
        return rates


def _empty_totals():
    return {"sequences": 0.0, "tokens": 0.0, "seconds": 0.0, "steps": 0}


@dataclasses.dataclass
class Counts:
    """The loop's state besides time: steps applied and skipped, the non-finite run, the loss sums
    since the last log line, the last result and the values of the first and last log lines."""

    step: int
    sum_keys: tuple
    skipped: int = 0
    nonfinite_run: int = 0
    window_steps: int = 0
    window: dict = dataclasses.field(default_factory=dict)
    last: dict | None = None
    first_logged: dict | None = None
    last_logged: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.new_window()

    def new_window(self):
        """Loss sums begin again after a log line."""
        self.window = dict.fromkeys(self.sum_keys, 0.0)
        self.window_steps = 0

    def take(self, result):
        """A step's result; a non-finite loss this many steps in a row ends the run (stop_if_stuck)."""
        if result["applied"]:
            self.step += 1
            for k in self.sum_keys:
                self.window[k] += result[k]
            self.window_steps += 1
        else:
            self.skipped += 1
        self.nonfinite_run = 0 if result["finite"] else self.nonfinite_run + 1
        stop_if_stuck(self.nonfinite_run, self.step, result)
        self.last = result


def stop_if_stuck(nonfinite_run, step, result):
    """A run whose loss stays non-finite ends with one line."""
    if nonfinite_run >= MAX_NONFINITE_STEPS:
        raise DataError(f"loss not finite for {nonfinite_run} steps in a row at step {step} "
                        f"(loss scale {result['loss_scale']:g}); lower --lr or use another --precision")


@dataclasses.dataclass
class Hooks:
    """What the loop calls besides the steps: `evaluate(step)` -> values to log, `checkpoint(step,
    draws)` (both when the Schedule says), `step_times` / `step_sequences` (lists, trainer.benchmark's:
    the clock when each step was done (Meter.lap), and its real sequences)."""

    evaluate: Callable | None = None
    checkpoint: Callable | None = None
    step_times: list | None = None
    step_sequences: list | None = None
    first_results: Callable | None = None  # called once, when the run's first results reach the host


def train_loop(steps, batches, schedule, log, accumulation=1, hooks=None, draws=0):
    """Train until `schedule.total` optimizer steps are applied; return (Counts, Meter). `batches`:
    host batches of accumulation x the micro-batch rows, `draws` of them drawn before (resumed)."""
    hooks = hooks or Hooks()
    objective = steps.objective
    counts = Counts(steps.iterations(), objective.sum_keys)
    dispatcher = Dispatcher(steps, batches, schedule, counts.step, accumulation, draws)
    meter = Meter(counts.step, counts_tokens="tokens" in objective.sum_keys)
    first_results = hooks.first_results
    while (fetched := dispatcher.next_results(counts.step)) is not None:
        results, done_at = fetched
        now, seconds = meter.lap(done_at)
        if first_results:
            first_results()
            first_results = None
        for result in results:
            if hooks.step_times is not None:
                hooks.step_times.append(now)
            if hooks.step_sequences is not None:
                hooks.step_sequences.append(result["sequences"])
            counts.take(result)
            log.bar(counts.step, f"loss {objective.metrics(counts.window)['loss']:.4f}" if counts.window_steps else "")
            if not result["applied"]:
                continue
            step = counts.step
            meter.take(step, result, seconds / len(results))
            if schedule.logs(step):
                log_train(log, counts, meter, objective, result)
            with meter.not_training():
                if hooks.evaluate and schedule.evaluates(step):
                    log.record("eval", hooks.evaluate(step), step)
                if hooks.checkpoint and schedule.checkpoints(step):
                    hooks.checkpoint(step, dispatcher.draws)
    return counts, meter


def log_train(log, counts, meter, objective, result):
    """The window's log line (loss, accuracies, learning rate, throughput), and a new window begun."""
    values = objective.metrics(counts.window)
    values.update(learning_rate=result["learning_rate"], loss_scale=result["loss_scale"], **meter.take_window(),
                  skipped_steps=counts.skipped)
    log.record("train", values, counts.step)
    counts.first_logged = counts.first_logged or values
    counts.last_logged = values
    counts.new_window()


def evaluate(steps, stream, eval_steps):
    """The objective's metrics over `eval_steps` batches of `stream`."""
    totals = dict.fromkeys(steps.objective.sum_keys, 0.0)
    for _, batch in zip(range(eval_steps), stream.batches(0)):
        sums = steps.evaluate(steps.put(element(batch, 1)))
        for k in totals:
            totals[k] += sums[k]
    return steps.objective.metrics(totals)
