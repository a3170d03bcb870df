"""What a run reports as it goes: `RunLog.log`, the one call a training step makes, sends its
metrics to every tracker of report_to and moves the progress display."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from rich.console import Console

from vlrl.config import TrainerConfig
from vlrl.progress import ProgressReport
from vlrl.trainer.trackers import TrackedRun, Tracker, open_trackers


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
        with ProgressReport(
            self.console, label, t.steps, self.run.resume_step, t.log_every, fields, "step", enabled
        ) as report:
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
                with suppress(Exception):  # its run shown as failed where it can still say so
                    tracker.close(failed=True)
        if self.progress is not None:
            self.progress.advance(1, metrics)

    def sync(self) -> None:
        """metrics.jsonl and samples.jsonl onto the disk (`JsonlLog.sync`), before a checkpoint."""
        if "jsonl" in self.trackers:
            self.trackers["jsonl"].sync()

    def close(self, failed: bool = False) -> None:
        """Every tracker closed (`failed`: an error ended the run); the others even if one fails to."""
        trackers, self.trackers = self.trackers, {}
        errors = []
        for tracker in trackers.values():
            try:
                tracker.close(failed=failed)
            except Exception as err:
                errors.append(err)
        if errors:
            raise errors[0]
