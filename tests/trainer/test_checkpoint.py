"""A checkpoint is complete or absent: an interrupted save never looks like a checkpoint."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from vlrl.parallel.distributed import Processes
from vlrl.trainer.checkpoint import CheckpointError, keep_base, list_checkpoints, write_checkpoint


class TinySaver(torch.nn.Module):
    """Enough of a strategy and a processor for write_checkpoint: its weights into a folder."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def save_pretrained(self, path):
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), path / "weights.pt")

    def save(self, path, main):
        self.save_pretrained(path)


def save_checkpoint(checkpoints, step, model, processor, state, keep_last):
    return write_checkpoint(checkpoints, step, state, model, processor, Processes(), torch.Generator(), keep_last)


def test_keep_last_prunes_the_oldest(tmp_path):
    model = TinySaver()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, model, {"step": step}, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-0000002", "step-0000003"]


def test_a_save_killed_midway_leaves_no_checkpoint_and_is_cleaned_up(tmp_path, monkeypatch):
    model = TinySaver()
    save_checkpoint(tmp_path, 1, model, model, {"step": 1}, keep_last=3)

    import vlrl.trainer.checkpoint as checkpoint

    real_save = torch.save

    def dies_writing_state(obj, path, *args, **kwargs):
        if str(path).endswith("trainer_state.pt"):
            raise KeyboardInterrupt  # the process is killed while writing the last file
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", dies_writing_state)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, model, model, {"step": 2}, keep_last=3)
    assert not (tmp_path / "step-0000002").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-0000001"]

    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    save_checkpoint(tmp_path, 2, model, model, {"step": 2}, keep_last=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-0000001", "step-0000002"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_kill_while_pruning_leaves_a_folder_the_next_save_sweeps(tmp_path, monkeypatch):
    """Pruning renames a checkpoint out of the way before deleting it: a kill midway left a step
    folder without its trainer state, which no listing saw and no save removed (keep_last broken)."""
    import shutil

    model = TinySaver()
    save_checkpoint(tmp_path, 1, model, model, {"step": 1}, keep_last=1)
    real_rmtree = shutil.rmtree

    def killed_midway(path, *args, **kwargs):
        (path / "trainer_state.pt").unlink()  # the first file deleted, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, model, model, {"step": 2}, keep_last=1)
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert not (tmp_path / "step-0000001").exists() and [p.name for p in list_checkpoints(tmp_path)] == ["step-0000002"]
    save_checkpoint(tmp_path, 3, model, model, {"step": 3}, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000003"]


def test_a_step_directory_that_lost_its_trainer_state_is_listed_so_that_resuming_names_it(tmp_path):
    """Only a complete save is renamed to step-NNNNNNN: one without its state was damaged since,
    and passing over it would resume from an earlier one (or none) and train over it."""
    (tmp_path / "step-0000005").mkdir()
    (tmp_path / ".tmp-step-0000006-123").mkdir()  # a save killed halfway: not a checkpoint
    (tmp_path / "step-0000007.txt").write_text("")
    assert list_checkpoints(tmp_path) == [tmp_path / "step-0000005"]


def test_a_base_kept_from_another_runs_checkpoint_is_its_model_files_linked_and_outlives_it(tmp_path, monkeypatch):
    model = TinySaver()
    checkpoint = save_checkpoint(tmp_path / "sft", 1, model, model, {"step": 1}, keep_last=1)
    (checkpoint / "rng-process-00001.pt").write_bytes(b"a process's generators")
    kept = tmp_path / "rl" / "base"
    kept.mkdir(parents=True)
    (kept / "stale.safetensors").write_bytes(b"an earlier start's")
    assert keep_base(checkpoint, kept) == ""
    assert sorted(p.name for p in kept.iterdir()) == ["weights.pt"]  # the model, not the trainer's state
    assert os.path.samefile(kept / "weights.pt", checkpoint / "weights.pt")  # a link: no space taken
    save_checkpoint(tmp_path / "sft", 2, model, model, {"step": 2}, keep_last=1)  # its run prunes it
    assert not checkpoint.exists() and torch.load(kept / "weights.pt")["w"].tolist() == [1.0, 1.0]

    def across_filesystems(*args):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", across_filesystems)
    other = list_checkpoints(tmp_path / "sft")[-1]
    assert keep_base(other, kept) == os.strerror(errno.EXDEV)
    assert sorted(p.name for p in kept.parent.iterdir()) == []  # nothing half-linked is left


def test_a_flush_that_fails_at_the_commit_is_one_error_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import vlrl.trainer.checkpoint as checkpoint

    model = TinySaver()
    first = save_checkpoint(tmp_path, 1, model, model, {"step": 1}, keep_last=1)

    def full_disk(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "_fsync_tree", full_disk)
    with pytest.raises(
        CheckpointError, match=f"step 2 .*No space left on device; the previous checkpoint {first} is intact"
    ):
        save_checkpoint(tmp_path, 2, model, model, {"step": 2}, keep_last=1)
    assert list_checkpoints(tmp_path) == [first] and not list(tmp_path.glob(".tmp-*"))
