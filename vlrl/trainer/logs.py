"""What a run reports as it goes: `RunLog.log`, the one call a training step makes, sends its
metrics to every tracker of report_to and moves the progress display."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from vlrl.config import TrainerConfig
from vlrl.trainer.trackers import TrackedRun, Tracker, open_trackers


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
    whole = int(round(seconds))
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
        self.console, self.label, self.total, self.every, self.fields, self.unit = console, label, total, every, fields, unit
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


class RunLog:
    """A run's reports, written by process 0 only (`enabled`): metrics.jsonl and samples.jsonl
    always, the trackers of `report_to`, and the progress. A tracker that fails mid-run (a
    full disk, a lost server) is switched off with a warning: metrics.jsonl keeps every step."""

    def __init__(self, run: TrackedRun, t: TrainerConfig, console: Console, enabled: bool):
        self.run, self.t, self.console, self.enabled = run, t, console, enabled
        self.trackers: dict[str, Tracker] = open_trackers(t.report_to, run) if enabled else {}
        self.progress: ProgressReport | None = None

    @contextmanager
    def showing_progress(self, label: str, fields: Sequence[str]) -> Iterator[None]:
        """While the loop runs: `fields` are the metrics that progress lines show."""
        enabled = self.enabled and self.t.progress
        t = self.t
        with ProgressReport(self.console, label, t.steps, self.run.resume_step, t.log_every, fields, "step", enabled) as report:
            self.progress = report
            try:
                yield
            finally:
                self.progress = None

    def log(self, metrics: Mapping[str, Any], samples: Sequence[Mapping[str, Any]] = ()) -> None:
        """One step: its metrics line (with "step") and the completions sampled for display."""
        step = int(metrics["step"])
        for name, tracker in list(self.trackers.items()):
            try:
                tracker.log_metrics(step, metrics)
                if samples:
                    tracker.log_samples(step, samples)
            except Exception as err:
                if name == "jsonl":
                    raise
                self.console.print(
                    f"warning: {name} failed at step {step} ({type(err).__name__}: {err}); it is off for the rest "
                    "of the run, metrics.jsonl has every step",
                    markup=False,
                    highlight=False,
                )
                del self.trackers[name]
        if self.progress is not None:
            self.progress.advance(1, metrics)

    def close(self) -> None:
        for tracker in self.trackers.values():
            tracker.close()
        self.trackers = {}
