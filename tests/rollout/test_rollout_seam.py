"""The trainer through the RolloutEngine seam: an engine that does not share the policy gets
the policy's weights after every update, its log-probs are recomputed, corrected and
compared, and entropies come from the trainer when the engine has none."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from rich.console import Console

from tests.fixtures.shifted_engine import SHIFT
from vlrl.algos.losses import rollout_importance_weights
from vlrl.config import load_config
from vlrl.models.loading import checkpoint_layout, full_weights
from vlrl.rollout.base import Completion, Generation, completion_rows
from vlrl.trainer.batch import RolloutBatch
from vlrl.trainer.rl import RLTrainer

FIXTURES = Path(__file__).parent.parent / "fixtures"
SHIFTED = f"{FIXTURES / 'shifted_engine.py'}:ShiftedEngine"
BRIEF = f"{FIXTURES / 'toy_task.py'}:BriefGrounding"


def test_completion_rows_pad_each_completion_and_keep_their_shape_when_there_are_none():
    first = Generation([Completion([5, 6, 7], "", False, [-0.1, -0.2, -0.3], [1.0, 2.0, 3.0])])
    second = Generation(
        [Completion([8], "", True, [-0.4], [4.0]), Completion([9, 2], "", False, [-0.5, -0.6], [5.0, 6.0])]
    )
    r = completion_rows([first, second], pad_id=0)
    assert r.rows.tolist() == [0, 1, 1] and r.truncated.tolist() == [False, True, False]
    assert r.ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 2, 0]]
    assert r.mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert torch.equal(r.logprobs, torch.tensor([[-0.1, -0.2, -0.3], [-0.4, 0, 0], [-0.5, -0.6, 0]]))
    assert r.entropies.tolist() == [[1, 2, 3], [4, 0, 0], [5, 6, 0]]
    no_entropy = Generation([Completion([5], "", False, [-0.1], None)])
    assert completion_rows([first, no_entropy], pad_id=0).entropies is None  # the trainer computes them
    none = completion_rows([], pad_id=0)  # a process whose prompts all failed still takes part
    assert [tuple(t.shape) for t in (none.ids, none.mask, none.logprobs, none.entropies)] == [(0, 1)] * 4


def test_importance_weights_follow_trls_four_modes():
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    engine = torch.tensor([[-1.5, -1.0, -0.5], [-1.0, -3.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the last token is padding
    e = math.exp
    token = torch.tensor([[e(0.5), e(-1.0), 1.0], [1.0, e(2.0), 1.0]])
    w = rollout_importance_weights(trainer, engine, mask, "token_truncate", clip_min=0.5, clip_max=3.0)
    torch.testing.assert_close(w, token.clamp(0.5, 3.0))
    w = rollout_importance_weights(trainer, engine, mask, "token_mask", clip_min=0.5, clip_max=3.0)
    torch.testing.assert_close(w, torch.tensor([[e(0.5), 0.0, 1.0], [1.0, 0.0, 1.0]]))
    # sequences: the product of their real tokens' ratios, e(-0.5) and e(2.0)
    w = rollout_importance_weights(trainer, engine, mask, "sequence_truncate", clip_max=3.0)
    torch.testing.assert_close(w, torch.tensor([[e(-0.5)], [3.0]]))
    w = rollout_importance_weights(trainer, engine, mask, "sequence_mask", clip_max=3.0)
    torch.testing.assert_close(w, torch.tensor([[e(-0.5)], [0.0]]))


def make_trainer(tmp_path, data, engine=SHIFTED, **extra) -> RLTrainer:
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.dtype": "float32",
        "model.max_pixels": 50176,
        "data.train": str(data),
        "task.name": BRIEF,
        "rollout.engine": engine,
        "rollout.num_generations": 4,
        "rollout.max_new_tokens": 10,
        "trainer.output_dir": str(tmp_path),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 2,
        "trainer.lr": 1e-2,
        "trainer.progress": False,
        "algo.beta": 0.0,
        **extra,
    }
    return RLTrainer(load_config(None, [f"{k}={v}" for k, v in values.items()]), Console(quiet=True))


def test_the_engine_gets_the_policys_weights_after_every_update(tmp_path, rec_data, tiny_qwen25):
    """As its checkpoint stores them: Qwen2.5-VL's language model named `model.`, as on disk."""
    trainer = make_trainer(tmp_path, rec_data)
    engine = trainer.engine
    start = {k: v.clone() for k, v in checkpoint_layout(trainer.run.model, full_weights(trainer.run.model))}
    assert any(k.startswith("model.layers.") for k in start)
    assert len(engine.pushed) == 1 and engine.pushed[0].keys() == start.keys()
    assert all(torch.equal(engine.pushed[0][k], v) for k, v in start.items())
    trainer.train()
    assert engine.calls == ["sync", "generate", "sleep", "sync", "wake", "generate", "sleep", "sync", "wake", "close"]
    final = dict(checkpoint_layout(trainer.run.model, full_weights(trainer.run.model)))
    assert all(torch.equal(engine.pushed[-1][k], v) for k, v in final.items())
    assert any(not torch.equal(start[k], final[k]) for k in final)  # the policy moved, the engine followed


def one_update(trainer: RLTrainer, seed: int = 0):
    """Generate a batch, then one update of it from fixed advantages; the loss and the stats."""
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:2]
    torch.manual_seed(seed)
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=1)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    advantages = torch.linspace(-0.5, 1, len(batch.prompt_index))  # a loss far from 0
    start = {n: p.detach().clone() for n, p in trainer.run.model.named_parameters()}
    stats, _ = trainer.update(batch, advantages)
    with torch.no_grad():
        for n, p in trainer.run.model.named_parameters():
            p.copy_(start[n])
    return batch, stats


def test_mismatch_is_measured_and_corrected_by_importance_weights(tmp_path, rec_data, tiny_qwen25):
    plain = make_trainer(tmp_path / "a", rec_data, **{"algo.rollout_correction.enabled": False})
    batch, none = one_update(plain)
    assert batch.rollout_logprobs is not None and batch.entropy is None
    # the engine's log-probs are SHIFT above the trainer's: |diff| = SHIFT, KL(engine || trainer) by k3
    assert none["rollout/logp_diff"] == pytest.approx(SHIFT, abs=1e-5)
    assert none["rollout/kl"] == pytest.approx(math.exp(-SHIFT) + SHIFT - 1, abs=1e-6)
    corrected = make_trainer(tmp_path / "b", rec_data, **{"algo.rollout_correction.mode": "token_truncate"})
    _, truncated = one_update(corrected)
    # every token's weight is exp(-SHIFT): the loss is scaled by it
    assert truncated["loss"] == pytest.approx(none["loss"] * math.exp(-SHIFT), rel=1e-4)
    assert truncated["rollout/is_weight"] == pytest.approx(math.exp(-SHIFT), rel=1e-5)
    masked = make_trainer(
        tmp_path / "c",
        rec_data,
        **{"algo.rollout_correction.mode": "sequence_mask", "algo.rollout_correction.clip_min": 0.9},
    )
    _, dropped = one_update(masked)  # every sequence's ratio is exp(-SHIFT x length) < 0.9: all masked
    assert dropped["loss"] == 0.0 and dropped["rollout/is_weight"] == 0.0
    capped = make_trainer(
        tmp_path / "d",
        rec_data,
        **{"algo.rollout_correction.mode": "token_truncate", "algo.rollout_correction.clip_max": 0.5},
    )
    _, halved = one_update(capped)  # every token's weight exp(-SHIFT) = 0.905, truncated to clip_max
    assert halved["loss"] == pytest.approx(none["loss"] * 0.5, rel=1e-4) and halved["rollout/is_weight"] == 0.5


@pytest.mark.parametrize(("engine", "warned"), [("ShiftedEngine", False), ("ApartEngine", True)])
def test_an_engine_whose_log_probs_are_a_nat_from_the_trainers_is_said_once_not_to_sample_the_policy(
    tmp_path, rec_data, tiny_qwen25, engine, warned
):
    """0.1 nat a token apart is kernels rounding otherwise (or this fixture's shift), 1 nat is
    another model: the run says so once, at the first step, and goes on."""
    import io

    out = io.StringIO()
    trainer = make_trainer(tmp_path, rec_data, engine=f"{FIXTURES / 'shifted_engine.py'}:{engine}")
    trainer.console = Console(file=out, width=400)
    trainer.train()
    said = out.getvalue()
    assert said.count("it is not sampling from the policy") == (1 if warned else 0)
    assert not warned or "1.00 nats a token from the trainer's" in said
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2  # both steps ran


def test_old_logprobs_are_the_trainers_when_the_engine_is_another(tmp_path, rec_data, tiny_qwen25):
    """Several updates per rollout: the ratio's old log-probs must be the trainer's, not the
    shifted engine's, so the update equals the one with the HF engine (whose log-probs are
    the trainer's own)."""
    options = {"algo.num_iterations": 2, "algo.mini_batches": 2, "algo.rollout_correction.enabled": False}
    _, hf = one_update(make_trainer(tmp_path / "hf", rec_data, engine="hf", **options))
    _, shifted = one_update(make_trainer(tmp_path / "shifted", rec_data, **options))
    assert shifted["loss"] == pytest.approx(hf["loss"], rel=1e-4, abs=1e-6)
    assert shifted["clip_high_frac"] == pytest.approx(hf["clip_high_frac"], abs=1e-6)


def test_top_entropy_tokens_come_from_the_trainer_when_the_engine_gives_no_entropy(tmp_path, rec_data, tiny_qwen25):
    options = {"algo.top_entropy_fraction": 0.3, "algo.rollout_correction.enabled": False}
    _, hf = one_update(make_trainer(tmp_path / "hf", rec_data, engine="hf", **options))
    _, shifted = one_update(make_trainer(tmp_path / "shifted", rec_data, **options))
    _, everything = one_update(make_trainer(tmp_path / "all", rec_data, **{"algo.rollout_correction.enabled": False}))
    assert shifted["entropy"] > 0
    assert shifted["loss"] == pytest.approx(hf["loss"], rel=1e-4, abs=1e-6)  # the same tokens were selected
    assert shifted["loss"] != pytest.approx(everything["loss"], rel=1e-3)
