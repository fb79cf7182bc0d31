"""``tensorgauge run --live``: a terminal view that redraws as the run is recorded
(rich): cores busy (overall and per CPU), memory, GPUs, the current phase and
the step rate. Only on a terminal; elsewhere the run is recorded quietly.

The job's own output, passed through the monitor (:mod:`tensorgauge.monitoring.job_output`),
scrolls above the panel: its complete lines are printed above it (:meth:`LiveView.job_lines`), the
line it is still writing (a progress bar) is drawn as the panel's first line (:meth:`LiveView.job_partial`)."""

from __future__ import annotations

import re

from rich.console import Console, Group
from rich.live import Live
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from tensorgauge.live.state import LiveState
from tensorgauge.model import Event, RunRecord, Sample, shown_metrics
from tensorgauge.render.text import safe
from tensorgauge.units import format_bytes, format_quantity, format_seconds

BAR_WIDTH = 30


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    fraction = min(max(fraction, 0.0), 1.0)
    full = int(round(fraction * width))
    return "[green]" + "█" * full + "[/green]" + "[dim]" + "·" * (width - full) + "[/dim]"


ON_THEIR_OWN_ROWS = ("cores_busy", "rss_bytes", "mem_used_bytes")  # with bars; the other shown metrics: one row


class _JobLine:
    """The line the job is writing, read when the panel is drawn (four times a second)."""

    def __init__(self) -> None:
        self.text = ""

    def __rich__(self):
        if not self.text:
            return Group()
        return Text.from_ansi(self.text, no_wrap=True, overflow="ellipsis")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline


class _Plain:
    """Lines without escape sequences as one segment, their control characters dropped: 0.7 us a line
    where a rich Text costs 12 (a job printing 100,000 lines)."""

    def __init__(self, text: str):
        self.text = _CONTROL.sub("", text)

    def __rich_console__(self, console, options):
        yield Segment(self.text + "\n")


class LiveView:
    """An :class:`~tensorgauge.monitoring.monitor.Exporter` to the terminal, drawn from the run's start."""

    def __init__(self, console: Console):
        self.console = console
        self.state = LiveState()
        self.run_id, self.cores_allowed = "", 1.0
        self.live: Live | None = None
        self.job_line = _JobLine()

    def start(self, record: RunRecord) -> None:
        self.run_id = record.run_id
        self.cores_allowed = float((record.env.get("host") or {}).get("cores_allowed") or 1)
        self.live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def observe(self, sample: Sample | None, events: list[Event]) -> None:
        self.state.update(sample, events)
        if self.live is not None:
            self.live.update(self.render())

    def close(self, timeout: float | None = None) -> None:
        if self.live is not None:
            self.live.stop()

    def job_lines(self, lines: list[str]) -> None:
        """The job's complete lines, printed above the panel (one print, one redraw, for the batch)."""
        self.job_line.text = ""
        text = "\n".join(lines)
        self.console.print(Text.from_ansi(text) if "\x1b" in text else _Plain(text), soft_wrap=True)

    def job_partial(self, text: str) -> None:
        self.job_line.text = text

    def render(self):
        s = self.state.sample
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        table.add_row("run", f"{self.run_id}  {format_seconds(self.state.now)}")
        if s is None:
            return Group(self.job_line, table)
        busy = s.cores_busy or 0.0
        table.add_row("cores", f"{_bar(busy / max(self.cores_allowed, 1e-9))} {busy:.2f} of {self.cores_allowed:g}")
        if s.cpu_percent:
            table.add_row("CPUs", " ".join(f"{p:3.0f}%" for p in s.cpu_percent[:32]))
        memory = f"RSS {format_bytes(s.rss_bytes)}"
        if s.mem_available_bytes is not None and s.mem_used_bytes is not None:
            total = s.mem_used_bytes + s.mem_available_bytes
            memory = f"{_bar(s.mem_used_bytes / total)} machine {format_bytes(s.mem_used_bytes)} used; " + memory
        table.add_row("memory", memory)
        others = [f"{m.label} {format_quantity(getattr(s, m.name), m.unit)}" for m in shown_metrics()
                  if m.name not in ON_THEIR_OWN_ROWS and getattr(s, m.name) is not None]
        if others:
            table.add_row("also", safe(" · ".join(others)))
        for g in s.gpus:
            table.add_row(f"GPU {g.index}", f"{_bar((g.util_percent or 0) / 100)} {g.util_percent or 0:.0f}% · "
                                            f"{format_bytes(g.memory_used_bytes)} of {format_bytes(g.memory_total_bytes)}")
        table.add_row("phase", safe(self.state.phase_path) or "[dim]outside any phase[/dim]")
        if self.state.steps_total:
            last = format_seconds(self.state.last_step_seconds)
            table.add_row("steps", f"{self.state.steps_total} · {self.state.step_rate:.1f}/s · last {last}")
        return Group(self.job_line, table)
