"""The training loop's clock (trainer/loop.py's Meter): a lap is the time from when the steps before were done to
when the fetched ones were, less the evaluations and checkpoints in between. The runs' own lines are checked in
trainer_checks.assert_timed_steps_alike (every backend's resume test)."""

import time

import pytest

from trainer.loop import Meter


def test_a_lap_ends_when_its_steps_were_done_and_leaves_out_checkpoints():
    meter = Meter(0, counts_tokens=False)
    began = meter.clock
    with meter.not_training():  # a checkpoint, after the steps of the last lap were done
        time.sleep(0.05)
    # steps done 0.2 s after the checkpoint (the clock a backend that runs a step as it is dispatched gives)
    done_at = time.perf_counter() + 0.2
    end, seconds = meter.lap(done_at)
    assert end == done_at and meter.clock == done_at
    assert seconds == pytest.approx(done_at - began - 0.05, abs=0.02) and seconds < done_at - began - 0.045
    assert meter.excluded == []  # passed: not taken from a later lap


def test_a_checkpoint_after_the_fetched_steps_were_done_counts_in_the_next_lap_only():
    """A step dispatched ahead ran (on a CPU, as it was dispatched) before the checkpoint of the step before it:
    the checkpoint's time is left out of the lap that holds it, not of the one that ends first."""
    meter = Meter(0, counts_tokens=False)
    began = meter.clock
    done_first = time.perf_counter()
    time.sleep(0.01)
    with meter.not_training():
        time.sleep(0.05)
    _, first = meter.lap(done_first)
    assert first == done_first - began  # nothing left out of it
    assert len(meter.excluded) == 1
    done_second = time.perf_counter() + 0.1
    _, second = meter.lap(done_second)
    assert second == pytest.approx(done_second - done_first - 0.05, abs=0.02) and meter.excluded == []


def test_a_lap_never_runs_backwards():
    """A step found done at its dispatch after the step before was fetched (a fast device) takes no time, not a
    negative one."""
    meter = Meter(0, counts_tokens=False)
    end, seconds = meter.lap()
    assert meter.lap(end - 1.0) == (end, 0.0)
