"""DAPO's dynamic sampling as verl's DAPO trainer does it (recipe/dapo/dapo_ray_trainer.py,
`RayDAPOTrainer.fit`, v0.6.1): each round generates a whole batch of `gen_batch_size` prompts
(algo.sampling_batch; its default, train_batch_size), keeps the groups whose metric has a spread
or that hold one completion, and once train_batch_size groups are kept trains the first of
them. `RLTrainer.collect` runs here over a stand-in data stream and sampler: prompt i's group
has a spread when `informative(i)`."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from tests.parallel.test_distributed import TwoProcesses
from vlrl.config import ConfigError, load_config
from vlrl.parallel.distributed import Processes
from vlrl.trainer.rl import RLTrainer


def collect(informative, prompts_per_step=4, group=8, **algo):
    stream = itertools.count()
    drawn: list[int] = []

    def draw(n):
        drawn.extend(items := [next(stream) for _ in range(n)])
        return items

    def generate_groups(items, step):
        rewards = [torch.tensor([1.0] + [0.0] * (group - 1)) if informative(i) else torch.zeros(group) for i in items]
        return [SimpleNamespace(prompt=i, reward=r) for i, r in zip(items, rewards, strict=True)], []

    trainer = SimpleNamespace(
        cfg=load_config(
            None, [f"trainer.prompts_per_step={prompts_per_step}", *(f"algo.{k}={v}" for k, v in algo.items())]
        ),
        run=SimpleNamespace(procs=Processes()),
        draw=draw,
        generate_groups=generate_groups,
    )
    groups, rounds, _ = RLTrainer.collect(trainer, step=0)
    return [g.prompt for g in groups], rounds, len(drawn)


def every_third(i):
    return i % 3 == 0


def test_each_round_draws_a_whole_batch_until_enough_groups_are_kept_and_the_first_are_trained():
    # verl: generation batches of 4 prompts, [0, 3] then [6] then [9] kept: 4 after 3 batches.
    # Refilling only the 2, then 1, missing prompts would train [0, 3, 6] after 4 rounds.
    assert collect(every_third, dynamic_sampling=True) == ([0, 3, 6, 9], 3, 12)
    # DAPO's recipe: generation batches of 3 x 4 prompts, one of them enough.
    assert collect(every_third, dynamic_sampling=True, sampling_batch=12) == ([0, 3, 6, 9], 1, 12)
    # more kept than the batch: the first 4 trained, as verl's batch[:traj_bsz]
    assert collect(lambda i: True, dynamic_sampling=True, sampling_batch=12) == ([0, 1, 2, 3], 1, 12)


def test_the_rounds_run_out_on_a_short_batch_or_on_the_last_round_when_nothing_had_a_spread():
    rare = collect(lambda i: i % 7 == 0, dynamic_sampling=True, max_sampling_rounds=3)
    assert rare == ([0, 7], 3, 12)  # verl raises; vlrl trains what it kept
    assert collect(lambda i: False, dynamic_sampling=True, max_sampling_rounds=3) == ([8, 9, 10, 11], 3, 12)


def test_a_group_of_one_completion_is_kept_as_verl_keeps_it():
    # verl keeps a group when std > 0 or len(metric_vals) == 1: a lone reward has no spread
    assert collect(lambda i: False, group=1, dynamic_sampling=True) == ([0, 1, 2, 3], 1, 4)


def test_without_dynamic_sampling_one_round_of_the_batch_is_trained_whatever_the_rewards():
    assert collect(lambda i: False) == ([0, 1, 2, 3], 1, 4)


def test_a_sampling_batch_is_refused_without_dynamic_sampling_or_below_zero():
    with pytest.raises(ConfigError, match=r"algo.sampling_batch is read only with algo.dynamic_sampling=true"):
        load_config(None, ["algo.sampling_batch=12"])
    with pytest.raises(ConfigError, match=r"algo.sampling_batch"):
        load_config(None, ["algo.dynamic_sampling=true", "algo.sampling_batch=-1"])


def test_a_sampling_batch_that_does_not_split_among_the_processes_is_refused(tmp_path, rec_data, monkeypatch):
    from vlrl.trainer import rl

    monkeypatch.setattr(rl, "Processes", TwoProcesses)
    overrides = ["model.path=tiny:qwen2_5_vl", f"data.train={rec_data}", "task.name=refcoco"]
    overrides += [f"trainer.output_dir={tmp_path / 'run'}", "algo.dynamic_sampling=true", "algo.sampling_batch=3"]
    with pytest.raises(ConfigError, match=r"algo.sampling_batch \(3\) must divide evenly among the 2 training"):
        rl.train(load_config(None, overrides))
    assert not (tmp_path / "run").exists()
