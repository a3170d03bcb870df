"""The parallelism seam's pieces that need no processes: sharded state read as data only, idle
micro-batches, which settings a resume may change, config checks."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from vlrl.config import ConfigError, TrainerConfig, load_config
from vlrl.parallel import make_strategy
from vlrl.parallel.distributed import Processes
from vlrl.parallel.fsdp2 import FSDP2
from vlrl.parallel.replicated import Replicated
from vlrl.parallel.sharded_state import load_sharded, save_sharded
from vlrl.trainer.history import resume_changes


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_sharded_state_round_trips_and_a_tampered_index_is_refused_unrun(tmp_path):
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "optimizer": {"w": {"step": torch.tensor(3.0)}}}
    save_sharded(state, tmp_path / "sharded")
    loaded = {"model": {"w": torch.zeros(2, 3)}, "optimizer": {"w": {"step": torch.tensor(0.0)}}}
    load_sharded(loaded, tmp_path / "sharded")
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["optimizer"]["w"]["step"] == 3

    with pytest.raises(TypeError, match="only tensors"):
        save_sharded({"model": {"lr": 0.1}}, tmp_path / "other")  # DCP would pickle it

    marker = tmp_path / "ran"
    (tmp_path / "sharded" / ".metadata").write_bytes(pickle.dumps(Payload(marker), protocol=2))
    pickle.loads(pickle.dumps(Payload(tmp_path / "live"), protocol=2))
    assert (tmp_path / "live").exists()  # the payload is real: unpickled, it runs
    with pytest.raises(ValueError, match=r"\.metadata is not a sharded-checkpoint index vlrl reads.*refusing it"):
        load_sharded(loaded, tmp_path / "sharded")
    assert not marker.exists()
    with pytest.raises(ValueError, match=r"holds no sharded state \(\.metadata is missing\)"):
        load_sharded(loaded, tmp_path / "other")


class Busier(Processes):
    """One process, as its collectives see it: another process planned three micro-batches."""

    def max(self, value: int) -> int:
        return max(value, 3)


def test_a_process_with_fewer_micro_batches_runs_empty_ones_only_when_forwards_are_collective():
    fsdp2 = FSDP2.__new__(FSDP2)  # micro_batches reads only the processes
    fsdp2.procs = Busier()
    assert fsdp2.micro_batches([[0, 1], [2]]) == [[0, 1], [2], []]
    assert Replicated(Busier(), TrainerConfig()).micro_batches([[0, 1], [2]]) == [[0, 1], [2]]


def test_a_resume_may_not_switch_strategy_and_older_checkpoints_were_replicated(tmp_path):
    saved = {"trainer": {"lr": 1.0}}  # written before trainer.parallel existed
    assert resume_changes({"trainer": {"lr": 1.0, "parallel": "replicated"}}, saved, "trainer", tmp_path) == {}
    with pytest.raises(ConfigError, match="trainer.parallel is 'fsdp2'.*that strategy's layout"):
        resume_changes({"trainer": {"lr": 1.0, "parallel": "fsdp2"}}, saved, "trainer", tmp_path)
    changes = resume_changes(
        {"trainer": {"parallel": "fsdp2", "gradient_checkpointing": True}},
        {"trainer": {"parallel": "fsdp2", "gradient_checkpointing": False}}, "trainer", tmp_path,
    )  # fmt: skip
    assert changes == {"trainer.gradient_checkpointing": {"from": False, "to": True}}


def test_a_strategys_options_are_checked_before_any_model_loads():
    # fsdp2's options in a replicated run's config are checked, and read by nobody
    assert make_strategy(load_config(None, ["sft.fsdp.cpu_offload=true"]).sft, "sft", Processes()).name == "replicated"
    with pytest.raises(ConfigError, match="sft.fsdp.cpu_offload expects true or false"):
        make_strategy(load_config(None, ["sft.fsdp.cpu_offload=7"]).sft, "sft", Processes())
    with pytest.raises(ConfigError, match=r"unknown key 'sft.fsdp3': the run's plugins \(replicated\) read nothing"):
        make_strategy(load_config(None, ["sft.fsdp3.cpu_offload=true"]).sft, "sft", Processes())
    with pytest.raises(ConfigError, match="config: sft.parallel 'fsdp3' is unknown; available: fsdp2, replicated"):
        make_strategy(load_config(None, ["sft.parallel=fsdp3"]).sft, "sft", Processes())
    with pytest.raises(ConfigError, match="trainer.fsdp.cpu_offload expects true or false"):
        make_strategy(
            load_config(None, ["trainer.parallel=fsdp2", "trainer.fsdp.cpu_offload=7"]).trainer, "trainer", Processes()
        )
    with pytest.raises(ConfigError, match="unknown key 'trainer.fsdp.offload'"):
        make_strategy(
            load_config(None, ["trainer.parallel=fsdp2", "trainer.fsdp.offload=true"]).trainer, "trainer", Processes()
        )


@pytest.mark.parametrize("strategy", [Replicated, FSDP2])
def test_each_strategy_steps_adamw_with_its_fused_kernel_as_the_hf_trainer_does(strategy):
    """One kernel per parameter (on a CPU the default steps each in ten small operations) and
    no temporaries of the parameters' size (`vlrl plan` counts none): AdamW's step all the same."""
    made = strategy.__new__(strategy)  # build_optimizer reads only the parameters
    weight = torch.nn.Parameter(torch.randn(8, 4, generator=torch.Generator().manual_seed(0)))
    start = weight.detach().clone()
    expected = start.clone().requires_grad_()
    made.parameters = [weight]
    optimizer = made.build_optimizer(lr=0.1, weight_decay=0.01)
    assert optimizer.param_groups[0]["fused"] is True
    reference = torch.optim.AdamW([expected], lr=0.1, weight_decay=0.01, foreach=False)
    for step in range(3):
        weight.grad = torch.randn(8, 4, generator=torch.Generator().manual_seed(step + 1))
        expected.grad = weight.grad.clone()
        optimizer.step()
        reference.step()
    assert not torch.equal(weight.detach(), start)
    assert torch.allclose(weight, expected, atol=1e-6)
