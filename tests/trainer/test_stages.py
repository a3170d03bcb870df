"""rollout.stages (Vision-R1's progressive thinking suppression): each step samples with its
stage's completion limit and group size, everything that reads them per step reads the stage's,
a resumed run picks the stage from its step, and bad schedules are refused by key."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rich.console import Console

from tests.trainer.test_train import metrics, tiny_overrides
from vlrl.algos.advantages import advantages as compute_advantages
from vlrl.algos.shaping import overlong_penalty
from vlrl.config import ConfigError, load_config
from vlrl.models.memory import Workload
from vlrl.rollout.hf import HFEngine
from vlrl.trainer.batch import RolloutBatch
from vlrl.trainer.rl import RLTrainer, train

# stage 1: step 1, 6 tokens x 2 completions; stage 2: from step 2, 9 tokens x 3 completions.
STAGES = "[{steps: 1, max_new_tokens: 6, num_generations: 2}, {max_new_tokens: 9, num_generations: 3}]"
LIMITS = {1: (6, 2), 2: (9, 3), 3: (9, 3)}


def staged(run_dir: Path, data: Path, **extra) -> list[str]:
    # rollout's own limits (12 tokens, 4 completions) are never a stage's: a step that reads them fails
    return tiny_overrides(run_dir, data, **{"rollout.stages": STAGES, **extra})


def test_the_stage_of_a_step_counts_steps_from_one_and_the_last_lasts_to_the_end():
    cfg = load_config(
        None,
        [
            "rollout.stages=[{steps: 100, max_new_tokens: 4096, num_generations: 16}, "
            "{steps: 100, max_new_tokens: 8192, num_generations: 8}, {max_new_tokens: 16384, num_generations: 4}]"
        ],
    )
    got = {s: cfg.rollout.limits(s) for s in (1, 100, 101, 200, 201, 10_000)}
    assert [(v.stage, v.max_new_tokens, v.num_generations) for v in got.values()] == [
        (0, 4096, 16), (0, 4096, 16), (1, 8192, 8), (1, 8192, 8), (2, 16384, 4), (2, 16384, 4),
    ]  # fmt: skip
    plain = load_config(None, ["rollout.max_new_tokens=77", "rollout.num_generations=5"])
    assert (plain.rollout.limits(1).max_new_tokens, plain.rollout.limits(9).num_generations) == (77, 5)
    # a stage that leaves a limit out keeps the section's
    partial = load_config(None, ["rollout.num_generations=5", "rollout.stages=[{steps: 2, max_new_tokens: 7}, {}]"])
    assert [(s.max_new_tokens, s.num_generations) for s in partial.rollout.stage_limits()] == [(7, 5), (1024, 5)]


@pytest.mark.parametrize(
    ("stages", "extra", "message"),
    [
        ("[{max_new_tokens: 8}, {max_new_tokens: 16}]", [], r"rollout\.stages\[0\]\.steps is missing"),
        ("[{steps: 5}, {steps: 5}]", [], r"rollout\.stages\[1\]\.steps \(5\): the last stage lasts to the end"),
        ("[{steps: 0}, {}]", [], r"rollout\.stages\[0\]\.steps must be > 0, got 0"),
        ("[{steps: 3, max_new_tokens: -1}, {}]", [], r"rollout\.stages\[0\]\.max_new_tokens must be > 0"),
        ("[{steps: 3}, {num_generations: 1}]", [], r"needs rollout\.stages\[1\]\.num_generations >= 2, got 1"),
        ("[{steps: 3, max_new_tokens: 64}, {}]", ["algo.overlong_buffer=100"], r"rollout\.stages\[0\]\.max_new_tokens \(64\)"),
        ("[{steps: 3, num_generations: 3}, {}]", ["algo.temporal.enabled=true", "algo.temporal.shuffled_fraction=0.2"],
         r"shuffled_fraction x rollout\.stages\[0\]\.num_generations"),
        ("[{steps: 3, length: 9}, {}]", [], r"unknown key 'rollout\.stages\[0\]\.length'"),
        ("[{steps: 2.5}, {}]", [], r"rollout\.stages\[0\]\.steps expects"),
        ("{steps: 3}", [], r"rollout\.stages expects a list"),
    ],
)  # fmt: skip
def test_bad_schedules_are_refused_by_key(stages, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"rollout.stages={stages}", *extra])


@pytest.fixture(scope="module")
def staged_trainer(tmp_path_factory, rec_data, tiny_qwen25):
    run_dir = tmp_path_factory.mktemp("stages")
    extra = {"algo.overlong_buffer": 3, "algo.beta": 0.0, "algo.aggregation": "seq_mean_token_sum_norm"}
    return RLTrainer(load_config(None, staged(run_dir, rec_data, **extra)), Console(quiet=True))


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_step_samples_scores_and_normalises_with_its_stages_limits(staged_trainer, step, monkeypatch):
    trainer = staged_trainer
    length, G = LIMITS[step]
    asked = []
    sample = HFEngine.generate
    monkeypatch.setattr(
        HFEngine, "generate", lambda self, p, params, g: asked.append(params) or sample(self, p, params, g)
    )
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:2]
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=step)
    assert [(p.n, p.max_new_tokens) for p in asked] == [(G, length)]  # the engine's sampling params
    assert [len(g.completions) for g in groups] == [G, G]  # completions per prompt
    lengths = [len(c.token_ids) for g in groups for c in g.completions]
    assert max(lengths) <= length and any(
        c.truncated and len(c.token_ids) == length for g in groups for c in g.completions
    )
    for g in groups:  # DAPO's overlong penalty ramps to the stage's limit
        group_lengths = torch.tensor([len(c.token_ids) for c in g.completions])
        assert torch.equal(g.shaping["overlong"], overlong_penalty(group_lengths, length, 3, 1.0))
    # seq_mean_token_sum_norm divides by rows x the stage's max_new_tokens; at ratio 1 and beta 0
    # the loss is -sum(A x tokens) / (rows x L)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    rewards = torch.stack([g.reward for g in groups])
    correct = torch.stack([g.correct for g in groups])
    adv = compute_advantages(rewards, correct, trainer.cfg.algo).view(-1)
    adv = adv + 0.1  # not summing to zero per group: the loss's scale shows
    start = {n: p.detach().clone() for n, p in trainer.run.model.named_parameters()}
    stats, _ = trainer.update(batch, adv, step)
    with torch.no_grad():
        for n, p in trainer.run.model.named_parameters():
            p.copy_(start[n])
    tokens = batch.completion_mask.sum(dim=1)
    expected = -float((adv * tokens).sum()) / (len(tokens) * length)
    assert stats["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_a_resumed_run_samples_with_the_stage_of_its_step(tmp_path, rec_data, tiny_qwen25):
    stages = "[{steps: 2, max_new_tokens: 6, num_generations: 2}, {max_new_tokens: 9, num_generations: 3}]"
    runs = {"straight": 4, "resumed": 2}
    for name, steps in runs.items():
        args = {"rollout.stages": stages, "trainer.steps": steps, "trainer.save_every": 2}
        train(load_config(None, tiny_overrides(tmp_path / name, rec_data, **args)))
    args = {"rollout.stages": stages, "trainer.steps": 4, "trainer.save_every": 2}
    train(load_config(None, tiny_overrides(tmp_path / "resumed", rec_data, **args)))  # from step 2's checkpoint
    straight, resumed = metrics(tmp_path / "straight"), metrics(tmp_path / "resumed")
    assert resumed == straight
    logged = [(r["stage"], r["max_new_tokens"], r["num_generations"]) for r in resumed]
    assert logged == [(1, 6, 2), (1, 6, 2), (2, 9, 3), (2, 9, 3)]
    assert all(r["completion_length_max"] <= r["max_new_tokens"] for r in resumed)


def test_the_memory_plan_takes_the_stage_whose_rollout_holds_the_most_tokens():
    ptst = load_config(
        None,
        [
            "trainer.prompts_per_step=8",
            "rollout.stages=[{steps: 100, max_new_tokens: 4096, num_generations: 16}, "
            "{steps: 100, max_new_tokens: 8192, num_generations: 8}, {max_new_tokens: 16384, num_generations: 4}]",
        ],
    )
    work = Workload.of(ptst, gpus=1, gpu_memory_gb=80, image_tokens=1000)  # 16 x 5160 > 8 x 9256 > 4 x 17448
    assert (work.rows, work.max_new_tokens) == (8 * 16, 4096)
    long = load_config(
        None, ["rollout.stages=[{steps: 5, max_new_tokens: 100, num_generations: 4}, {max_new_tokens: 4000}]"]
    )
    work = Workload.of(long, gpus=1, gpu_memory_gb=80, image_tokens=10)
    assert (work.rows, work.max_new_tokens) == (8 * 8, 4000)


def test_t_grpo_samples_its_shuffled_share_of_the_stages_group_at_the_stages_length(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    fixtures = Path(__file__).parent.parent / "fixtures"
    extra = {
        "task.name": f"{fixtures / 'rl_fixtures.py'}:OrderedGrounding",
        "algo.temporal.enabled": True,
        "algo.temporal.shuffled_fraction": 0.5,
    }
    trainer = RLTrainer(load_config(None, staged(tmp_path / "run", rec_data, **extra)), Console(quiet=True))
    asked = []
    sample = HFEngine.generate
    monkeypatch.setattr(
        HFEngine, "generate", lambda self, p, params, g: asked.append(params) or sample(self, p, params, g)
    )
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:1]
    for step in (1, 2):
        trainer.generate_groups([(task, s) for s in samples], step=step)
    # ordered then shuffled: stage 1 (6 tokens, 2 completions -> 1 shuffled), stage 2 (9, 3 -> 1)
    assert [(p.n, p.max_new_tokens) for p in asked] == [(2, 6), (1, 6), (3, 9), (1, 9)]


def test_a_run_says_its_stage_at_its_first_step_and_at_each_change_resumed_or_not(tmp_path, rec_data, capsys):
    said = {
        1: "step 1: stage 1 of 2 (rollout.stages), 6 new tokens, 2 completions per prompt",
        2: "step 2: stage 2 of 2 (rollout.stages), 9 new tokens, 3 completions per prompt",
        3: "step 3: stage 2 of 2 (rollout.stages), 9 new tokens, 3 completions per prompt",
    }
    run = tmp_path / "run"
    train(load_config(None, staged(run, rec_data, **{"trainer.steps": 2, "trainer.save_every": 1})))
    out = " ".join(capsys.readouterr().out.split())  # as one line, however the console wrapped it
    assert said[1] in out and said[2] in out and said[3] not in out
    train(load_config(None, staged(run, rec_data, **{"trainer.steps": 4, "trainer.save_every": 1})))
    out = " ".join(capsys.readouterr().out.split())
    assert said[3] in out and "step 4: stage" not in out
