"""Under data parallelism a stop signal to one process stops every process after the same step."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, checkpoint_steps, copy_run, logged_steps, tiny_run
from rich.console import Console

from tests.parallel.test_distributed import TORCHRUN, torchrun_env
from vlrl.config import load_config
from vlrl.parallel.distributed import Processes


def worker_with_rank(launcher: int, rank: int) -> int | None:
    """The pid of the launcher's child process whose RANK is `rank`, once it is running."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    for pid in map(int, children):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return pid
    return None


class SignalledElsewhere(Processes):
    """One process of several, as its collectives see it: another process received SIGTERM."""

    def max(self, value: int) -> int:
        return max(value, int(signal.SIGTERM))


def test_a_signal_that_another_process_received_stops_this_one_after_the_same_step(tmp_path, finished_run):
    from vlrl.trainer.rl import RLTrainer

    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 10})
    trainer = RLTrainer(load_config(None, overrides), Console(quiet=True))
    trainer.run.procs = SignalledElsewhere()  # this process got no signal itself
    result = trainer.train()
    assert result.stopped_by == signal.SIGTERM and result.steps_done == 3
    assert checkpoint_steps(run_dir) == [2, 3]


@pytest.mark.slow  # two processes under torchrun: ~20 s on two cores
def test_sigterm_to_one_process_stops_both_after_the_same_step(tmp_path, rec_data, tiny_qwen25):
    run_dir = tmp_path / "sft"
    env = torchrun_env(tmp_path)
    launcher = subprocess.Popen(
        [*TORCHRUN, "-m", "vlrl.cli", "sft", *tiny_run(run_dir, rec_data, "sft", **{"sft.steps": 1000})],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while len(logged_steps(run_dir / "metrics.jsonl")) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, (
                launcher.stdout.read() if launcher.poll() else ""
            )
            time.sleep(0.05)
        os.kill(worker_with_rank(launcher.pid, 1), signal.SIGTERM)  # process 1 only: process 0 gets no signal
        out, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    steps = logged_steps(run_dir / "metrics.jsonl")
    stopped = re.findall(r"stopped by SIGTERM after step (\d+)", out)
    assert len(stopped) == 2 and set(stopped) == {str(steps[-1])}, out[-3000:]  # both, after the same step
    assert checkpoint_steps(run_dir) == [steps[-1]] and steps == list(range(1, steps[-1] + 1))
    assert f'File "{ROOT / "vlrl"}' not in out  # no traceback from vlrl (torchrun reports the exit status 143)
