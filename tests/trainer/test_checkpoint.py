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


def test_a_kept_lora_checkpoint_keeps_its_runs_base_and_either_run_can_move_or_go(tmp_path):
    """An RL run started from another run's LoRA checkpoint keeps the adapter and, inside it,
    that run's kept base (an SFT checkpoint's full weights), so deleting the other runs stops
    nothing; and a LoRA run moved elsewhere reads its adapters' base from its own RUN/base
    (the adapters record it by absolute path). A base that is nowhere is said so."""
    import json
    import shutil

    from vlrl.config import ConfigError
    from vlrl.models.checkpoints import lora_base, weights_root
    from vlrl.trainer.checkpoint import STATE_FILE

    def adapter(directory, base):
        directory.mkdir(parents=True)
        (directory / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
        (directory / "adapter_model.safetensors").write_bytes(b"an adapter")
        (directory / STATE_FILE).write_bytes(b"the trainer's state: not a model file")
        return directory

    full = tmp_path / "sft" / "checkpoints" / "step-0000001"
    full.mkdir(parents=True)
    (full / "config.json").write_text("{}")
    assert keep_base(full, tmp_path / "a" / "base") == ""  # run A, LoRA, from the SFT checkpoint
    a = adapter(tmp_path / "a" / "checkpoints" / "step-0000002", tmp_path / "a" / "base")
    kept = tmp_path / "b" / "base"
    assert keep_base(a, kept) == ""  # run B from A's adapter: its base kept inside
    assert sorted(p.name for p in kept.rglob("*")) == [
        "adapter_config.json", "adapter_model.safetensors", "base", "config.json"]  # fmt: skip
    assert os.path.samefile(kept / "base" / "config.json", full / "config.json")
    assert lora_base(str(kept)) == str(tmp_path / "a" / "base")  # A's, while it is there
    shutil.rmtree(tmp_path / "a")
    shutil.rmtree(tmp_path / "sft")
    assert lora_base(str(kept)) == str(kept / "base") and weights_root(str(kept)) == str(kept / "base")
    b = adapter(tmp_path / "b" / "checkpoints" / "step-0000003", kept)  # B's adapter, on its RUN/base
    (tmp_path / "b").rename(tmp_path / "moved")
    moved = tmp_path / "moved" / "checkpoints" / b.name
    assert weights_root(str(moved)) == str(tmp_path / "moved" / "base" / "base")
    shutil.rmtree(tmp_path / "moved" / "base")
    with pytest.raises(ConfigError, match=f"^{moved} is a LoRA checkpoint whose base model {kept} .* is not there"):
        lora_base(str(moved))


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


def test_only_a_folder_named_step_and_seven_digits_is_a_checkpoint(tmp_path):
    for name in ("step-0000003", "step-0000004.bak", "step-00000005", "step-6", "old-step-0000007"):
        (tmp_path / name).mkdir()
    assert list_checkpoints(tmp_path) == [tmp_path / "step-0000003"]


def test_a_checkpoint_is_flushed_whole_before_its_rename_and_its_folder_after_it(tmp_path, monkeypatch):
    """The files and the staging folder reach the disk before the rename makes the checkpoint
    visible, and the checkpoints folder (which holds the rename) after it: a power loss never
    leaves a step-NNNNNNN folder whose files are not all there."""
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", str(src), str(dst)))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    model = TinySaver()
    final = save_checkpoint(tmp_path, 1, model, model, {"step": 1}, keep_last=2)
    monkeypatch.undo()
    (commit,) = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == str(final)]
    staging = events[commit][1]
    before = {e[1] for e in events[:commit] if e[0] == "fsync"}
    assert {f"{staging}/{name}" for name in ("weights.pt", "trainer_state.pt", "trainer_state.json")} | {
        staging
    } <= before
    assert ("fsync", str(tmp_path)) in events[commit + 1 :]
    assert sorted(p.name for p in final.iterdir()) == ["trainer_state.json", "trainer_state.pt", "weights.pt"]


def test_the_random_generators_a_checkpoint_keeps_give_the_same_draws_once_restored(tmp_path):
    """Python's, numpy's (with the second normal of a pair it holds back), torch's and the
    sampler's: what a resumed run draws is what the uninterrupted run drew."""
    import random

    import numpy as np

    from vlrl.trainer.checkpoint import restore_rng, rng_state

    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    generator = torch.Generator().manual_seed(4)
    np.random.randn(1)  # numpy draws normals in pairs: the second is held for the next call
    assert np.random.get_state()[3] == 1
    torch.save(rng_state(generator), tmp_path / "rng.pt")

    def draws():
        return (
            [random.random() for _ in range(3)],
            np.random.randn(3).tolist(),
            torch.rand(3).tolist(),
            torch.rand(3, generator=generator).tolist(),
        )

    first = draws()
    draws()  # the run goes on, then stops
    restore_rng(torch.load(tmp_path / "rng.pt", weights_only=True), generator)
    assert draws() == first


def test_a_failed_write_names_the_latest_intact_checkpoint_and_the_reason_as_the_system_says_it(tmp_path, monkeypatch):
    import vlrl.trainer.checkpoint as checkpoint

    model = TinySaver()
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, model, {"step": step}, keep_last=3)
    real_save = torch.save

    def full_disk(obj, path, *args, **kwargs):
        if str(path).endswith("trainer_state.pt"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(tmp_path, 3, model, model, {"step": 3}, keep_last=3)
    assert str(caught.value) == (  # one process: no "process 0:" before the reason
        f"could not write the checkpoint of step 3 in {tmp_path}: No space left on device; "
        f"the previous checkpoint {tmp_path / 'step-0000002'} is intact"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0000001", "step-0000002"]  # no staging left


def test_a_checkpoints_folder_that_cannot_be_made_is_one_error_saying_why(tmp_path):
    (tmp_path / "checkpoints").write_text("a file where the folder goes")
    model = TinySaver()
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(tmp_path / "checkpoints", 1, model, model, {"step": 1}, keep_last=1)
    assert str(caught.value) == (
        f"could not write the checkpoint of step 1 in {tmp_path / 'checkpoints'}: File exists; "
        "the previous checkpoint (none yet) is intact"
    )


def test_saving_a_step_again_replaces_its_checkpoint(tmp_path):
    from vlrl.trainer.checkpoint import load_trainer_state

    model = TinySaver()
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, model, {"step": step, "timeline": "first"}, keep_last=3)
    save_checkpoint(tmp_path, 2, model, model, {"step": 2, "timeline": "rewound"}, keep_last=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-0000001", "step-0000002"]
    assert load_trainer_state(tmp_path / "step-0000002")["timeline"] == "rewound"


def test_a_base_kept_from_a_sharded_checkpoint_links_its_model_files_and_leaves_the_shards(tmp_path):
    """An FSDP2 checkpoint holds its DCP shards in a subfolder: neither flushing it nor keeping
    it as a base stops at that folder."""
    model = TinySaver()

    class ShardedSaver(TinySaver):
        def save(self, path, main):
            super().save(path, main)
            (path / "sharded").mkdir()
            (path / "sharded" / "__0_0.distcp").write_bytes(b"a shard")

    checkpoint = write_checkpoint(
        tmp_path / "sft", 1, {"step": 1}, ShardedSaver(), model, Processes(), torch.Generator(), 1
    )
    assert (checkpoint / "sharded" / "__0_0.distcp").read_bytes() == b"a shard"
    kept = tmp_path / "rl" / "base"
    assert keep_base(checkpoint, kept) == ""
    assert sorted(p.name for p in kept.iterdir()) == ["weights.pt"]


def test_a_process_state_file_that_is_not_plain_data_is_refused_unread_naming_it(tmp_path):
    from vlrl.trainer.checkpoint import load_process_state

    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "payload-ran"), "w"))

    torch.save({"buffer": Payload()}, tmp_path / "replay-process-00000.pt")
    (tmp_path / "replay-process-00001.pt").write_bytes(b"PK\x03\x04 half a file")
    for rank in (0, 1):
        path = tmp_path / f"replay-process-{rank:05d}.pt"
        with pytest.raises(CheckpointError, match=f"^{path} holds something other than tensors"):
            load_process_state(tmp_path, "replay", rank)
    assert not (tmp_path / "payload-ran").exists()
    assert load_process_state(tmp_path, "replay", 2) is None


def described_checkpoint(tmp_path, info: str):
    """A checkpoint folder whose trainer state is described by `info` (trainer_state.json)."""
    from vlrl.trainer.checkpoint import STATE_FILE

    checkpoint = tmp_path / "step-0000005"
    checkpoint.mkdir()
    torch.save({"step": 5}, checkpoint / STATE_FILE)
    (checkpoint / "trainer_state.json").write_text(info)
    return checkpoint


@pytest.mark.parametrize("info", ["[2]", '{"step": 5, "format": 1}'])
def test_a_trainer_state_of_another_format_is_refused_as_an_older_vlrls(tmp_path, info):
    from vlrl.trainer.checkpoint import load_trainer_state

    checkpoint = described_checkpoint(tmp_path, info)
    with pytest.raises(CheckpointError, match=f"older vlrl as a Python pickle.*model.path={checkpoint}$"):
        load_trainer_state(checkpoint)


@pytest.mark.parametrize("info", ["{not json", ""])
def test_a_trainer_state_description_that_does_not_read_is_named_as_damaged(tmp_path, info):
    """Not an older format: the file that does not read is named (a fault-injection audit found
    the message blaming trainer_state.pt as an old pickle)."""
    from vlrl.trainer.checkpoint import load_trainer_state

    checkpoint = described_checkpoint(tmp_path, info)
    with pytest.raises(CheckpointError, match=f"^{checkpoint}/trainer_state.json is damaged .*another checkpoint$"):
        load_trainer_state(checkpoint)


def test_a_process_other_than_the_first_keeps_its_own_random_generators_in_the_shared_checkpoint(tmp_path):
    from vlrl.trainer.checkpoint import STATE_FILE, load_process_rng, staging_dir

    class SecondProcess(Processes):
        """Process 1 of 2: process 0 made the staging folder and wrote its part without a failure."""

        def __init__(self, from_the_first):
            super().__init__(1, 2)
            self.from_the_first = from_the_first

        def gather(self, items):
            return [*self.from_the_first.pop(0), *items]

        def all_true(self, value):
            return value

    model = TinySaver()
    save_checkpoint(tmp_path, 1, model, model, {"step": 1}, keep_last=3)
    staging = staging_dir(tmp_path, 2)
    generator = torch.Generator().manual_seed(7)
    write_checkpoint(tmp_path, 2, {"step": 2}, model, model, SecondProcess([[str(staging)], []]), generator, 3)
    saved = load_process_rng(staging, 1)
    assert torch.equal(saved["sampler"], torch.Generator().manual_seed(7).get_state())
    assert (staging / "rng-process-00001.pt").is_file() and not (staging / STATE_FILE).exists()
