"""Progress on stderr and the end-of-run summary every stage prints.

On a terminal, progress is a tqdm bar (count, rate and ETA, with the named
counters after it); in a Jupyter kernel with ipywidgets, tqdm's notebook widget
(what `tqdm.auto` picks there). Anywhere else (a pipe, a CI log, a file, a
kernel without ipywidgets) it is a plain line every few seconds, the same line
format as always, so logs stay readable and greppable. --quiet silences both. The summary is a short table
on stdout, or one JSON object with --json, for scripts.
"""

import html
import io
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from tqdm import tqdm

from bertprep.errors import ON_COMMAND_LINE, redact

# What --quiet means, for every command alike (their summary is what they did; validate's report and
# inspect's listing are what was asked for, and print even then).
QUIET_HELP = "no progress and no summary (--json prints the summary even then)"

# Seconds between plain progress lines where no `interval` is given (a bar redraws every 0.2 s). Module-level so
# that a test can shorten it and see a stage's lines mid-run, with no run that lasts this long.
LINE_INTERVAL_S = 5.0


def add_output_arguments(parser):
    parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("--json", action="store_true", help="print the final summary as JSON on stdout")


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _duration(seconds):
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _terminal_size(stream):
    try:
        return tuple(os.get_terminal_size(stream.fileno()))
    except (AttributeError, ValueError, OSError):
        return (0, 0)


class _Bar(tqdm):
    # No monitor thread: stages fork worker processes while a bar is open.
    monitor_interval = 0


def _notebook_bar():
    """tqdm's Jupyter widget bar where this process is a Jupyter kernel that has ipywidgets, else None.
    (tqdm.auto's own test, without its TqdmWarning where ipywidgets is missing: lines serve there.)"""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        if shell is None or "IPKernelApp" not in shell.config:
            return None
        import ipywidgets  # noqa: F401  (the widget needs it)
        from tqdm.notebook import tqdm as notebook_tqdm
    except Exception:  # no IPython, an IPython without a kernel, no ipywidgets: plain lines
        return None
    return type("_NotebookBar", (notebook_tqdm,), {"monitor_interval": 0})


class Progress:
    """Counts work done out of `total` (units such as shards) plus named counters.

        p = Progress("create", total=len(shards), unit="shards", quiet=args.quiet)
        p.advance(1, instances=1234)   # rate shown for each counter
        p.close()

    On a terminal a tqdm bar is redrawn at most every `interval` seconds
    (0.2 by default), in a Jupyter kernel (stream left to stderr) a widget bar;
    elsewhere `line()` is printed every `interval` seconds (LINE_INTERVAL_S, 5, by default) and
    once more at `close()`.
    """

    def __init__(self, label, total=None, unit="items", quiet=False, stream=None, interval=None, initial=0):
        self.label = label
        self.total = total
        self.unit = unit
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval if interval is not None else (0.2 if self.tty else LINE_INTERVAL_S)
        self.done = self.initial = initial  # work done before this run (a resumed one): not in its rate
        self.counters = {}
        self.detail = ""
        self.start = self.rate_start = time.monotonic()  # rate_start: where the ETA's rate is counted from (rebase)
        self._last = 0.0
        self._last_done = None
        self._bar = None
        notebook_bar = _notebook_bar() if stream is None and not quiet else None
        if notebook_bar is not None:
            self.tty, self.interval = True, interval if interval is not None else 0.2  # a bar, not lines
            self._bar = notebook_bar(total=total, desc=label, unit=f" {unit}", mininterval=self.interval,
                                     miniters=0, leave=True, initial=initial)
        elif self.tty and not quiet:
            # Follow the terminal's size, unless it reports none (a pseudo-terminal nobody sized):
            # tqdm would then draw nothing at all.
            sized = min(_terminal_size(self.stream)) > 0
            # miniters=0: a call that adds only to the counters (advance(0, bytes=...)) may redraw too.
            self._bar = _Bar(total=total, desc=label, unit=f" {unit}", file=self.stream, mininterval=self.interval,
                             miniters=0, dynamic_ncols=sized, ncols=None if sized else 80, nrows=None if sized else 24,
                             leave=True, initial=initial)

    @property
    def elapsed(self):
        return time.monotonic() - self.start

    def rebase(self):
        """Rates and the ETA from now on count only the work done from here (what came before was warmup:
        a trainer's first steps compile); the counters are kept."""
        self.rate_start, self.initial = time.monotonic(), self.done
        if self._bar is not None:
            self._bar.start_t, self._bar.initial = self._bar._time(), self._bar.n

    def advance(self, n=1, detail=None, **counters):
        """`detail`, a short text such as the latest loss, is shown after the counters until replaced."""
        self.done += n
        self.detail = self.detail if detail is None else detail
        for key, value in counters.items():
            self.counters[key] = self.counters.get(key, 0) + value
        if self._bar is not None:
            if counters or detail is not None:
                self._bar.set_postfix_str(", ".join(self._counter_parts()), refresh=False)
            self._bar.update(n)
        else:
            self._maybe_print()

    def note(self, message):
        self.write(f"{self.label}: {message}")

    def warn(self, message):
        """A note of a warning the stage's summary lists: shown on the command line only. A Python caller hears
        of it once, as the BertprepWarning the `bertprep` stage function raises from the summary; with
        `quiet=False` it was printed twice, this note and that warning."""
        if ON_COMMAND_LINE.get():
            self.note(message)

    def write(self, line):
        """A line of its own on the stream, above the bar on a terminal; never a credential (errors.redact: a note
        names URLs, and a URL may carry a token)."""
        if self.quiet:
            return
        line = redact(line)
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def line(self):
        """The plain progress line written where stderr is not a terminal."""
        elapsed = max(self.elapsed, 1e-9)
        parts = [f"{self.done}/{self.total} {self.unit}" if self.total is not None else f"{self.done} {self.unit}"]
        parts += self._counter_parts()
        if self.total and self.initial < self.done < self.total:
            measured = max(time.monotonic() - self.rate_start, 1e-9)
            parts.append(f"ETA {_duration(measured / (self.done - self.initial) * (self.total - self.done))}")
        parts.append(_duration(elapsed))
        return f"{self.label}: " + ", ".join(parts)

    def _counter_parts(self):
        elapsed = max(self.elapsed, 1e-9)
        parts = []
        for key, value in self.counters.items():
            shown = human_bytes(value) if key == "bytes" else f"{value:,}"
            rate = human_bytes(value / elapsed) + "/s" if key == "bytes" else f"{value / elapsed:,.0f} {key}/s"
            parts.append(f"{shown} {key if key != 'bytes' else ''}".rstrip() + f" ({rate})")
        return parts + [self.detail] if self.detail else parts

    def _maybe_print(self, force=False):
        if self.quiet:
            return
        now = time.monotonic()
        if (force and self.done != self._last_done) or now - self._last >= self.interval:
            self._last = now
            self._last_done = self.done
            print(self.line(), file=self.stream, flush=True)

    def close(self):
        if not self.tty:
            self._maybe_print(force=True)
        elif self._bar is not None:
            if self.counters or self.detail:
                self._bar.set_postfix_str(", ".join(self._counter_parts()), refresh=False)
            self._bar.close()  # draws the final state and leaves it on its own line
            self._bar = None


class Summary(dict[str, Any]):
    """What a stage function returns: the dict `--json` prints (so `summary["out"]` reads it, and
    `json.dumps(summary)` writes what `--json` does: as a Mapping that was no dict, it was "Object of type
    Summary is not JSON serializable"), with `title` and `rows` [(label, value)] the table printed without
    `--json` (None: the scalar fields), `complete_before` whether the output was already complete and nothing
    was done. `fields` is the summary itself, as a dict."""

    def __init__(self, title: str, fields: Mapping[str, Any], rows: Sequence[tuple[str, object]] | None = None,
                 complete_before: bool = False) -> None:
        super().__init__(fields)
        self.title = title
        self.rows = rows
        self.complete_before = complete_before

    @property
    def fields(self) -> dict[str, Any]:
        return self

    def print(self, as_json: bool = False, stream: TextIO | None = None) -> None:
        print_summary(self.title, self.fields, as_json=as_json, rows=self.rows, stream=stream)

    def __repr__(self):
        """The table `print()` shows (a REPL or notebook shows this, not the dict of every field)."""
        buffer = io.StringIO()
        self.print(stream=buffer)
        return buffer.getvalue().rstrip("\n")

    def _repr_html_(self):
        return html_table(self.title, self.rows if self.rows is not None else scalar_rows(self.fields))


def scalar_rows(fields):
    return [(key, value) for key, value in fields.items() if not isinstance(value, (dict, list))]


def text_table(title, rows):
    """`title` and `rows` [(label, value)] as the lines print_summary prints."""
    width = max((len(str(label)) for label, _ in rows), default=0)
    return "\n".join([title, *(f"  {str(label):<{width}}  {value}" for label, value in rows)])


def html_table(title, rows):
    """`title` and `rows` as a small HTML table: how a notebook shows a summary."""
    cells = "".join(f"<tr><th style=\"text-align:left\">{html.escape(str(label))}</th>"
                    f"<td style=\"text-align:left\">{html.escape(str(value))}</td></tr>" for label, value in rows)
    return f"<table><caption style=\"text-align:left\"><b>{html.escape(title)}</b></caption>{cells}</table>"


def readable(key, value):
    """A summary value for people: byte counts in KiB/MiB/..., integers with thousands separators,
    floats to four significant digits (whole above 1,000), None as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if "bytes" in key:
        return human_bytes(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isfinite(value) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def readable_rows(summary):
    """(label, readable value) of each of `summary`'s plain fields that holds something."""
    return [(key, readable(key, value)) for key, value in summary.items()
            if value not in (None, "") and not isinstance(value, (dict, list))]


def print_summary(title, summary, as_json=False, rows=None, stream=None):
    """Print `summary` (a JSON-able dict) as JSON, or `rows` [(label, value)] as a table."""
    stream = stream or sys.stdout
    if as_json:
        print(json.dumps(summary, indent=1, sort_keys=True), file=stream)
        return
    print(text_table(title, rows if rows is not None else scalar_rows(summary)), file=stream)
