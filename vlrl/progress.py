"""Progress on a terminal (a bar) and in files or pipes (a plain line every few steps), for
training steps, evaluated samples and validated records alike."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
    )


def duration(seconds: float) -> str:
    """7.2 -> '7s', 65 -> '1m05s', 3725 -> '1h02m05s'."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class ProgressReport:
    """A loop's progress. On a terminal, a live bar. Elsewhere (nohup, SLURM, a log file) a
    bar is drawn only when it closes, so a plain line is printed every `every` ticks, on the
    first and on the last: the mean of each of `fields` over the ticks since the previous
    line, the seconds per step (or samples per second) over them, and the time left at the
    rate of this session. A tick is one `advance` call: a training step, an eval batch."""

    def __init__(
        self,
        console: Console,
        label: str,
        total: int,
        done: int = 0,
        every: int = 10,
        fields: Sequence[str] = (),
        unit: str = "step",
        enabled: bool = True,
    ):
        self.console, self.label, self.total, self.every, self.fields, self.unit = (
            console,
            label,
            total,
            every,
            fields,
            unit,
        )
        self.live = enabled and console.is_terminal
        self.lines = enabled and not console.is_terminal
        self.done = self.start_done = self.line_done = done
        self.ticks = self.line_ticks = done  # a resumed run's lines fall on the same steps
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.bar: Progress | None = None

    def __enter__(self) -> ProgressReport:
        self.start = self.line_time = time.perf_counter()
        if self.live:
            self.bar = progress_bar(self.console, True)
            self.bar.start()
            self.bar_task = self.bar.add_task(self.label, total=self.total, completed=self.done, status="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def advance(self, n: int = 1, metrics: Mapping[str, Any] | None = None) -> None:
        self.done += n
        self.ticks += 1
        values = {f: float(metrics[f]) for f in self.fields if metrics and isinstance(metrics.get(f), (int, float))}
        if self.bar is not None:
            self.bar.update(self.bar_task, advance=n, status=" ".join(f"{k} {v:.3f}" for k, v in values.items()))
        if not self.lines:
            return
        for key, value in values.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + 1
        first = self.done - n == self.start_done
        if first or self.ticks % self.every == 0 or self.done >= self.total:
            self.console.print(self.line(), markup=False, highlight=False)

    def line(self) -> str:
        now = time.perf_counter()
        position = f"step {self.done}/{self.total}" if self.unit == "step" else f"{self.done}/{self.total}"
        parts = [f"{self.label} {position}"]
        parts += [f"{key} {self.sums[key] / self.counts[key]:.4g}" for key in self.fields if self.counts.get(key)]
        seconds = now - self.line_time
        if self.unit == "step":
            parts.append(f"{seconds / max(1, self.ticks - self.line_ticks):.3g} s/step")
        else:
            parts.append(f"{(self.done - self.line_done) / max(seconds, 1e-9):.3g} {self.unit}s/s")
        elapsed = now - self.start
        if self.done >= self.total:
            parts.append(f"done in {duration(elapsed)}")
        else:
            rate = (self.done - self.start_done) / max(elapsed, 1e-9)
            parts.append(f"ETA {duration((self.total - self.done) / rate)}")
        self.sums, self.counts = {}, {}
        self.line_time, self.line_ticks, self.line_done = now, self.ticks, self.done
        return " | ".join(parts)
