"""Stopping a run cleanly on SIGTERM (what SLURM and Kubernetes send before preemption) or SIGINT (Ctrl-C).

The first signal asks the run to stop after the step in flight: the loop finishes that step,
checkpoints it and returns; `vlrl train` / `vlrl sft` then exit with status 128 + the signal's
number (130 for SIGINT, 143 for SIGTERM), the status a shell reports for a process that the
signal ended. A rerun resumes from that checkpoint, so no finished step is lost.

A second signal exits at once (status 128 + its number): checkpoints are written atomically,
so the last one stays intact. Launchers forward the signal they receive to their workers
(torchrun does), and a terminal's Ctrl-C reaches the workers too, so a worker can get one
request twice within milliseconds: a repeat within REPEAT_WINDOW_S counts as the same request.

Under data parallelism the processes agree at every step's end on the largest signal number
any of them received (`Processes.max`), so all of them stop after the same step.

A signal the process was started with ignored stays ignored, as Python itself leaves SIGINT
when it starts that way: a job that a script puts in the background (`vlrl train &`) or
`nohup`/`setsid` detaches is meant to outlive a Ctrl-C at the terminal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_WINDOW_S = 1.0


class Diverged(RuntimeError):
    """The run cannot go on: its updates, or its policy's log-probs, are no longer finite. Going
    on would repeat the same skipped updates or sample noise, and resuming from the same
    checkpoint repeats the run exactly, so the message names the step, the last checkpoint that
    holds finite weights and what to change."""


class Unwritable(RuntimeError):
    """The run's logs cannot be written (a full disk, a quota, a lost mount): the run stops at
    once, its last checkpoint intact, and the message names the file, the step and that
    checkpoint. A rerun resumes from it and drops a line the failed write tore."""


def os_failure(err: OSError) -> str:
    """An OSError as one line: the file it names, then why (a full disk, a quota)."""
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}"


def ignored(signum: int) -> bool:
    """Whether `signum` is ignored (SIG_IGN), as a process started in the background inherits it."""
    return signal.getsignal(signum) == signal.SIG_IGN


def exit_status(signum: int) -> int:
    return 128 + signum


class Terminated(KeyboardInterrupt):
    """SIGTERM outside a training loop: the command ends as after Ctrl-C, what it made and did
    not fill removed (`run.removed_if_unused`: a stopped `vlrl eval` leaves no output directory)."""


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """While entered (main thread only, SIGTERM not ignored), SIGTERM raises `Terminated` (a training loop's
    `StopSignals` takes it over there)."""
    if threading.current_thread() is not threading.main_thread() or ignored(signal.SIGTERM):
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StopSignals:
    """While entered (main thread only), SIGINT and SIGTERM set `received` instead of ending the
    process; `received` is the first signal's number, 0 while none came."""

    def __init__(self, checkpoints: Path):
        self.checkpoints = checkpoints  # named in the message of an immediate exit
        self.received = 0
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                if not ignored(sig):
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if not self.received:
            self.received, self._first_at = signum, now
            _say(f"{name}: stopping after the step in flight, which is checkpointed; send it again to stop at once")
        elif now - self._first_at > REPEAT_WINDOW_S:
            _say(f"{name} again: stopping now; the last checkpoint in {self.checkpoints} is intact")
            os._exit(exit_status(signum))


def _say(message: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"\n{message}\n")
    sys.stderr.flush()
