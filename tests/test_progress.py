"""Progress on stderr: plain throttled lines off a terminal, a tqdm bar on one (a real
pseudo-terminal here), nothing with --quiet."""

import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from bertprep.progress import Progress

REPO = Path(__file__).resolve().parents[1]
RATE = r"[\d,]+"


def test_off_a_terminal_lines_keep_their_format_and_throttle():
    stream = io.StringIO()  # not a terminal, like a pipe or a CI log
    progress = Progress("create", total=3, unit="shards", stream=stream)  # 5 s between lines
    progress.note("resuming: 1 of 3 shards already complete")
    progress.advance(1, instances=1234)
    progress.advance(1, instances=1000, bytes=3 << 20)  # within 5 s of the last line: not printed
    progress.close()  # the final state, once
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == "create: resuming: 1 of 3 shards already complete"
    assert re.fullmatch(rf"create: 1/3 shards, 1,234 instances \({RATE} instances/s\), ETA \d+s, 0s",
                        lines[1]), lines[1]
    assert re.fullmatch(rf"create: 2/3 shards, 2,234 instances \({RATE} instances/s\), 3.0 MiB \([\d.]+ "
                        r"[KMGT]?i?B/s\), ETA \d+s, 0s", lines[2]), lines[2]


def test_off_a_terminal_without_total_and_every_interval():
    stream = io.StringIO()
    progress = Progress("download wikipedia", unit="files", stream=stream, interval=0)
    progress.advance(0, bytes=512)
    progress.advance(1)
    progress.close()
    assert [re.sub(r"\([^)]*\)", "(R)", line) for line in stream.getvalue().splitlines()] == [
        "download wikipedia: 0 files, 512 B (R), 0s",
        "download wikipedia: 1 files, 512 B (R), 0s",
        "download wikipedia: 1 files, 512 B (R), 0s",  # interval 0: close() prints the final state again
    ]


def test_quiet_prints_nothing():
    stream = io.StringIO()
    progress = Progress("shard", total=2, quiet=True, stream=stream, interval=0)
    progress.note("a note")
    progress.advance(2, documents=5)
    progress.close()
    assert stream.getvalue() == ""


def _read_all(fd):
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed
            return out
        if not data:
            return out
        out += data


def test_on_a_terminal_a_bar_is_drawn():
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w")
    assert stream.isatty()
    progress = Progress("create", total=4, unit="shards", stream=stream)
    progress.advance(1, instances=10)
    progress.note("a note")
    progress.advance(3, instances=30)
    progress.close()
    stream.close()
    screen = _read_all(master).decode()
    os.close(master)
    assert "create:   0%|" in screen and "| 0/4 [" in screen  # drawn when it starts
    assert "create: a note\r\n" in screen  # a note clears the bar and is printed on its own line
    final = screen.rsplit("\r", 2)[-2]  # the last frame, left on its line by close()
    assert final.startswith("create: 100%|") and "█" in final and "| 4/4 [" in final, final
    assert "40 instances (" in final


def _cli_on_a_terminal(*args):
    """Run `python -m bertprep ARGS` with stderr on a real pseudo-terminal; (stderr as drawn, stdout)."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "bertprep", *map(str, args)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=env, cwd=REPO)
    os.close(slave)
    screen = _read_all(master).decode()
    os.close(master)
    stdout = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, screen
    return screen, stdout


def test_cli_on_a_terminal_draws_a_bar_and_quiet_draws_nothing(tmp_path):
    screen, stdout = _cli_on_a_terminal("create", "--workdir", tmp_path / "a", "--dupe-factor", "1", "--json")
    # the embedded sample: 8 training shards and 1 test shard
    assert "create: 100%|" in screen and "| 9/9 [" in screen, screen
    assert json.loads(stdout)["shards_created"] == 9  # --json: the summary alone on stdout
    screen, stdout = _cli_on_a_terminal("create", "--workdir", tmp_path / "b", "--dupe-factor", "1", "--quiet")
    assert screen == "" and stdout == ""  # --quiet: no progress, no summary


def test_cli_off_a_terminal_prints_lines(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bertprep", "create", "--workdir", str(tmp_path), "--dupe-factor",
                             "1",
                             "--json"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("create: no --input: using the embedded sample corpus")
    assert re.fullmatch(rf"create: 9/9 shards, [\d,]+ instances \({RATE} instances/s\), \d+s", lines[-1]), lines
    assert "\r" not in result.stderr and "\033" not in result.stderr


def test_summary_rows_are_rounded_with_separators_and_without_empty_fields():
    from bertprep.progress import readable_rows

    summary = {"steps": 20, "pipeline": None, "mesh": None, "notes": "", "precision": "fp32", "vocab": False,
               "param_bytes_per_device": 9049688, "tokens": 74509, "final_learning_rate": 0.0,
               "mean_sequences_per_second": 109.5325667973183, "mean_tokens_per_second": 31290.82875789471,
               "last_mlm_accuracy": 0.0004506940688660537, "lr": 3e-05, "eval_loss": float("nan"),
               "arrays": [1, 2], "config": {"layers": 2}}
    assert readable_rows(summary) == [
        ("steps", "20"), ("precision", "fp32"), ("vocab", "False"), ("param_bytes_per_device", "8.6 MiB"),
        ("tokens", "74,509"), ("final_learning_rate", "0"), ("mean_sequences_per_second", "109.5"),
        ("mean_tokens_per_second", "31,291"), ("last_mlm_accuracy", "0.0004507"), ("lr", "3e-05"),
        ("eval_loss", "nan")]


def test_a_resumed_count_leaves_its_earlier_work_out_of_the_eta():
    stream = io.StringIO()
    progress = Progress("trainer", total=1000, unit="steps", stream=stream, initial=990)
    progress.start = progress.rate_start = progress.start - 10  # ten seconds for the first five steps of this run
    progress.advance(5, detail="loss 8.3072")
    assert stream.getvalue() == "trainer: 995/1000 steps, loss 8.3072, ETA 10s, 10s\n"


def test_after_a_rebase_the_eta_comes_from_the_steps_measured_since():
    """A 12 s run said "ETA 44s" at step 5: its second and third steps still compiled. The trainer rebases its
    count after them (trainer.pretraining.WARMUP_STEPS), so the ETA is the measured step time's."""
    stream = io.StringIO()
    progress = Progress("trainer", total=100, unit="steps", stream=stream, interval=0, initial=1)
    progress.start = progress.rate_start = progress.start - 20  # two compiling steps took 20 s
    progress.advance(2)
    assert stream.getvalue().splitlines()[-1] == "trainer: 3/100 steps, ETA 16m10s, 20s"
    progress.rebase()
    progress.start, progress.rate_start = progress.start - 1, progress.rate_start - 1  # then 10 steps in 1 s
    progress.advance(10)
    assert stream.getvalue().splitlines()[-1] == "trainer: 13/100 steps, ETA 8s, 21s"
