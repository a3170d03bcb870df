"""Helpers of the reliability suite: `vlrl` as a real process, tiny run settings, log readers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELD_TASK = f"{Path(__file__).parent / 'held_task.py'}:HeldGrounding"


def tiny_run(run_dir: Path, data: Path, section: str = "trainer", **extra) -> list[str]:
    """Overrides for a run of the tiny model that takes a fraction of a second a step."""
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.dtype": "float32",
        "model.max_pixels": 12544,
        "data.train": str(data),
        "task.name": "refcoco",
        "rollout.num_generations": 2,
        "rollout.max_new_tokens": 8,
        f"{section}.output_dir": str(run_dir),
        f"{section}.prompts_per_step": 2,
        f"{section}.steps": 3,
        f"{section}.lr": 1e-3,
        f"{section}.progress": False,
        f"{section}.save_every": 100,
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def logged_steps(path: Path) -> list[int]:
    if not path.is_file():
        return []
    return [json.loads(line)["step"] for line in path.read_text().split("\n") if line.strip()]


def checkpoint_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*"))


def _signals_as_at_a_terminal() -> None:
    """SIGINT and SIGTERM at their defaults in the child: a suite started in the background by a
    script (`make test &`) has SIGINT ignored, which vlrl, rightly, would keep (stops.py)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


class VlrlProcess:
    """`python -m vlrl.cli ARGS` in its own process, as a user or a scheduler starts it."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None):
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vlrl.cli", *args],
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_signals_as_at_a_terminal,
        )

    def wait_for(self, condition, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                raise AssertionError(f"vlrl exited ({self.proc.returncode}) before the condition held:\n{out}\n{err}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError("timed out waiting for the run")
            time.sleep(0.05)

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"vlrl did not exit within {timeout} s:\n{out}\n{err}") from None
        return self.proc.returncode, out, err


@pytest.fixture
def vlrl_process(tmp_path):
    started: list[VlrlProcess] = []

    def start(args: list[str], env: dict[str, str] | None = None) -> VlrlProcess:
        process = VlrlProcess(args, tmp_path, env)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.communicate()


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, rec_data, tiny_qwen25) -> tuple[Path, list[str]]:
    """A two-step RL run with a checkpoint at step 2, and the overrides that made it (read-only:
    tests that change it work on a copy)."""
    from vlrl.config import load_config
    from vlrl.trainer.rl import train

    run_dir = tmp_path_factory.mktemp("finished") / "run"
    overrides = tiny_run(run_dir, rec_data, **{"trainer.steps": 2, "trainer.save_every": 2})
    train(load_config(None, overrides))
    return run_dir, overrides


def copy_run(finished: tuple[Path, list[str]], dest: Path, **changes) -> tuple[Path, list[str]]:
    """A copy of a finished run in `dest`, and its overrides pointed there (with `changes`)."""
    import shutil

    run_dir, overrides = finished
    shutil.copytree(run_dir, dest)
    values = dict(item.split("=", 1) for item in overrides)
    values.update({"trainer.output_dir": str(dest), **{k: str(v) for k, v in changes.items()}})
    return dest, [f"{k}={v}" for k, v in values.items()]
