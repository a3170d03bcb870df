"""A checkpoint that cannot be written (a full disk) leaves the previous one intact and says so."""

from __future__ import annotations

import errno

import pytest
import torch
from conftest import checkpoint_steps, copy_run

import vlrl.trainer.checkpoint as checkpoint_module
from vlrl.cli import main
from vlrl.config import load_config
from vlrl.trainer.checkpoint import STATE_FILE, load_trainer_state
from vlrl.trainer.rl import train

# What a real full disk raises (a fault-injection audit on a 30 MB tmpfs, 2026-12-03): the OS's
# error, safetensors' and tokenizers' own, and torch.save's failed write.
FULL_DISK = [
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    (Exception("No space left on device (os error 28)"), "Exception: No space left on device (os error 28)"),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0"), "RuntimeError: [enforce fail"),
]


@pytest.mark.parametrize(("raised", "said"), FULL_DISK, ids=["OSError", "Exception", "RuntimeError"])
def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(
    tmp_path, finished_run, capsys, monkeypatch, raised, said
):
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 4, "trainer.save_every": 1})
    real_save = torch.save

    def disk_fills_up(obj, path, *args, **kwargs):
        if str(path).endswith(STATE_FILE):
            with open(path, "wb") as handle:
                handle.write(b"PK\x03\x04 half a file")
            raise raised
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", disk_fills_up)
    assert main(["train", *overrides]) == 2
    out = capsys.readouterr().out
    previous = run_dir / "checkpoints" / "step-0000002"
    assert "error:" in out and said in out and f"{previous} is intact" in " ".join(out.split())
    assert "Traceback" not in out
    assert checkpoint_steps(run_dir) == [2]
    assert not list((run_dir / "checkpoints").glob(".tmp-*"))  # the partial write gave its space back
    assert load_trainer_state(previous)["step"] == 2

    monkeypatch.setattr(checkpoint_module.torch, "save", real_save)  # space again: the run goes on from step 2
    train(load_config(None, overrides))
    assert checkpoint_steps(run_dir)[-1] == 4


def test_a_checkpoint_is_committed_after_the_logs_of_its_steps_are_on_the_disk(tmp_path, finished_run, monkeypatch):
    """metrics.jsonl is flushed each step, fsynced at each checkpoint: after a power loss a
    checkpoint never stands without its steps' lines (a resume keeps lines up to its step)."""
    import os

    _, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3, "trainer.save_every": 1})
    synced, at_commit = [], []
    real_fsync, real_commit = os.fsync, checkpoint_module.commit_checkpoint

    def fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def commit(checkpoints, tmp, step, keep_last):
        at_commit.append((step, synced.count("metrics.jsonl")))
        return real_commit(checkpoints, tmp, step, keep_last)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(checkpoint_module, "commit_checkpoint", commit)
    train(load_config(None, overrides))
    assert at_commit == [(3, 1)]  # resumed at step 2: one step, one checkpoint, its line synced first
