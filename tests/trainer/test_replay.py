"""algo.replay in the RL loop: replayed rows train with the advantage and old log-probs stored
when they were sampled (the loss checked by hand against the policy's log-probs), the buffer
is part of the checkpoint so that a resumed run equals an unstopped one, and bad options are
refused by key."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from tests.trainer.test_train import metrics, tiny_overrides
from vlrl.algos.replay import effective
from vlrl.config import ConfigError, load_config
from vlrl.trainer.batch import RolloutBatch
from vlrl.trainer.replay import ReplayBuffer
from vlrl.trainer.rl import RLTrainer, train

FIXTURES = Path(__file__).parent.parent / "fixtures"
HALF = f"{FIXTURES / 'rl_fixtures.py'}:HalfInformative"  # odd ids: groups with no spread


def replay_overrides(run_dir: Path, data: Path, **extra) -> list[str]:
    values = {
        "task.name": HALF,
        "trainer.prompts_per_step": 4,
        "algo.replay.mode": "ssr",
        "algo.replay.keep_fraction": 0.75,  # more rows than a step's effective ones: the buffer fills in
        **extra,
    }
    return tiny_overrides(run_dir, data, **values)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, rec_data, tiny_qwen25):
    run_dir = tmp_path_factory.mktemp("replay")
    extra = {"algo.beta": 0.0, "trainer.max_grad_norm": 1e9}
    return RLTrainer(load_config(None, replay_overrides(run_dir, rec_data, **extra)), Console(quiet=True))


def rollout(trainer: RLTrainer, step: int, n: int = 4):
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:n]
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=step)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    rewards = torch.stack([g.reward for g in groups])
    adv = (rewards - rewards.mean(dim=1, keepdim=True)).view(-1)  # A = r - mean, as VL-Rethinker's group_sft
    return groups, batch, adv


def test_replayed_rows_train_with_their_stored_advantage_and_old_logprobs(trainer):
    trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
    groups, batch, adv = rollout(trainer, step=1)
    trainer.replayed(groups, batch, adv, 1)  # step 1's effective rows join the buffer
    kept = list(trainer.replay.rows)
    assert kept and all(r.step == 1 for r in kept)
    assert [r.advantage for r in kept] == adv[effective(adv)].tolist()  # the effective rows', as sampled
    # Stored values the current step could not recompute: distinctive advantages and difficulty
    # weights, and old log-probs 0.05 below the sampling policy's on every second row (ratio e^0.05 there).
    for i, row in enumerate(kept):
        row.advantage = [0.3, -0.7, 1.1, -0.2][i % 4]
        row.weight = [1.0, 0.5, 2.0][i % 3]
        if i % 2:
            row.old_logp = row.old_logp - 0.05
    # a step where nothing is informative: every trained row is a replayed one
    groups, batch, _ = rollout(trainer, step=2)
    trained = trainer.replayed(groups, batch, torch.zeros(len(batch.prompt_index)), 2)
    assert trained.stats["replay/current_rows"] == 0 and trained.stats["replay/replayed_rows"] == 12
    assert trained.stats["replay/effective_frac"] == 0.0 and trained.stats["replay/buffer_size"] == len(kept)
    stored = {(float(torch.tensor(r.advantage)), r.weight) for r in kept}  # each row's pair, as float32
    assert set(zip(trained.advantages.tolist(), trained.carried.row_weights.tolist(), strict=True)) <= stored
    # by hand: seq_mean_token_mean of -min(r A, clip(r, 0.8, 1.2) A), r = exp(logp - stored old)
    logp = trainer.updater.logprobs_no_grad(trainer.run.model, trained.batch).logp
    mask = trained.batch.completion_mask
    ratio = torch.exp(logp - trained.carried.old.logp) * mask
    a, w = trained.advantages[:, None], trained.carried.row_weights[:, None]
    per_token = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.2) * a) * w * mask
    expected = float((per_token.sum(dim=1) / mask.sum(dim=1)).mean())
    start = {n: p.detach().clone() for n, p in trainer.run.model.named_parameters()}
    stats, _ = trainer.update(trained.batch, trained.advantages, 2, trained.carried)
    with torch.no_grad():
        for n, p in trainer.run.model.named_parameters():
            p.copy_(start[n])
    assert stats["loss"] == pytest.approx(expected, rel=1e-5)
    recomputed = float(((-a * w * mask).sum(dim=1) / mask.sum(dim=1)).mean())  # the old log-probs recomputed: ratio 1
    assert abs(stats["loss"] - recomputed) > 1e-3


@pytest.mark.parametrize("engine_logprobs", [True, False])
def test_stored_old_logprobs_take_one_forward_at_most(trainer, monkeypatch, engine_logprobs):
    """An engine sharing the policy that gives no entropies (top-entropy selection needs a
    trainer forward): that one forward also gives the old log-probs where the engine gave none;
    where it gave them, they are what the rows store, as without the entropy."""
    monkeypatch.setattr(trainer.cfg.algo, "top_entropy_fraction", 0.5)
    trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
    groups, batch, adv = rollout(trainer, step=1)
    batch = dataclasses.replace(
        batch, entropy=None, rollout_logprobs=batch.rollout_logprobs if engine_logprobs else None
    )
    forwards, forward = [], trainer.updater.logprobs_no_grad

    def counted(*args, **kwargs):
        forwards.append(kwargs)
        return forward(*args, **kwargs)

    monkeypatch.setattr(trainer.updater, "logprobs_no_grad", counted)
    trainer.replayed(groups, batch, adv, 1)
    assert len(forwards) == 1
    monkeypatch.undo()
    before = trainer.updater.logprobs_no_grad(trainer.run.model, batch, with_entropy=True)
    expected = batch.rollout_logprobs if engine_logprobs else before.logp
    for row in trainer.replay.rows:
        r = next(i for i, c in enumerate(c for g in batch.groups for c in g.completions) if c is row.completion)
        n = len(row.completion.token_ids)
        assert torch.equal(row.old_logp, expected[r, :n]) and torch.equal(row.old_entropy, before.entropy[r, :n])


def test_the_buffer_comes_back_from_its_state_as_it_was(trainer):
    """Every field of every row, through torch.save and a weights_only load (a checkpoint's
    way), each prompt shared by its rows again; the stored difficulty weights included."""
    trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
    groups, batch, adv = rollout(trainer, step=1)
    trainer.replayed(groups, batch, adv, 1)
    rows = list(trainer.replay.rows)
    for i, row in enumerate(rows):
        row.weight, row.old_sampled = 0.5 + i, row.old_logp - 1.0
    saved = io.BytesIO()
    torch.save(trainer.replay.state_dict(), saved)
    saved.seek(0)
    restored = ReplayBuffer(trainer.cfg.algo.replay)
    restored.load_state_dict(torch.load(saved, weights_only=True))
    assert restored.rows.maxlen == trainer.replay.rows.maxlen and len(restored.rows) == len(rows)
    for a, b in zip(rows, restored.rows, strict=True):
        assert (a.completion, a.advantage, a.weight, a.step) == (b.completion, b.advantage, b.weight, b.step)
        for x, y in ((a.old_logp, b.old_logp), (a.old_sampled, b.old_sampled), (a.old_entropy, b.old_entropy)):
            assert (x is None and y is None) or torch.equal(x, y)
        assert torch.equal(a.prompt.input_ids, b.prompt.input_ids) and a.prompt.text == b.prompt.text
        assert all(torch.equal(a.prompt.vision[k], b.prompt.vision[k]) for k in a.prompt.vision)
    assert len({id(r.prompt) for r in restored.rows}) == len({id(r.prompt) for r in rows})  # each prompt shared again


def test_the_buffer_hands_the_rule_every_replay_option(trainer, monkeypatch):
    """What reaches the selection rule (tested against the public code and by hand in
    tests/algos/test_replay_selection.py) is the configured options, none left at its default."""
    import vlrl.trainer.replay as buffer_module

    chosen = {"keep_fraction": 0.25, "buffer_size": 3, "positive_fraction": 0.3, "positive_reward": 0.4,
              "alpha": 2.0, "eps": 0.01}  # fmt: skip
    trainer.replay = ReplayBuffer(dataclasses.replace(trainer.cfg.algo.replay, **chosen))
    seen, rule = [], buffer_module.ssr_selection

    def spy(*args):
        seen.append(args[3:8])
        return rule(*args)

    monkeypatch.setattr(buffer_module, "ssr_selection", spy)
    groups, batch, adv = rollout(trainer, step=1)
    trainer.replayed(groups, batch, adv, 1)
    assert seen == [(int(0.25 * len(adv)), 0.3, 0.4, 2.0, 0.01)]
    assert trainer.replay.rows.maxlen == 3


def test_filter_mode_trains_on_the_steps_effective_rows_only(trainer):
    trainer.cfg.algo.replay.mode = "filter"
    try:
        trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
        groups, batch, adv = rollout(trainer, step=1)
        trained = trainer.replayed(groups, batch, adv, 1)
    finally:
        trainer.cfg.algo.replay.mode = "ssr"
    assert 0 < int(effective(adv).sum()) < len(adv)  # some groups with spread, some without
    assert len(trained.advantages) == len(adv) and bool(effective(trained.advantages).all())
    assert trained.stats["replay/replayed_rows"] == 0 and trainer.replay.rows is None


def test_a_step_with_nothing_informative_ever_trains_on_its_own_rows(trainer):
    trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
    groups, batch, _ = rollout(trainer, step=1)
    zeros = torch.zeros(len(batch.prompt_index))
    trained = trainer.replayed(groups, batch, zeros, 1)  # VL-Rethinker's loop never ends here
    assert trained.batch is batch and trained.carried is None and trained.stats["replay/unfiltered"] == 1.0


@pytest.fixture
def one_thread():
    """Bitwise-equal runs: with two CPU threads, two runs with replayed rows already differ in
    the last bits at step 2, before any stop (run to run, with or without a resume); with one
    thread they are equal, so the test sees what the resume changes and nothing else."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_resumed_run_replays_the_buffer_it_saved(tmp_path, rec_data, tiny_qwen25, one_thread):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(load_config(None, replay_overrides(straight, rec_data, **{"trainer.steps": 4, "trainer.save_every": 2})))
    train(load_config(None, replay_overrides(resumed, rec_data, **{"trainer.steps": 2, "trainer.save_every": 2})))
    assert (resumed / "checkpoints" / "step-0000002" / "replay-process-00000.pt").is_file()
    train(load_config(None, replay_overrides(resumed, rec_data, **{"trainer.steps": 4, "trainer.save_every": 2})))
    rows = metrics(straight)
    assert metrics(resumed) == rows
    assert any(r["replay/replayed_rows"] > 0 for r in rows[2:])  # the resumed steps did replay saved rows
    assert {"replay/effective_frac", "replay/buffer_size", "replay/current_rows"} <= rows[0].keys()
    a = load_file(straight / "checkpoints" / "step-0000004" / "model.safetensors")
    b = load_file(resumed / "checkpoints" / "step-0000004" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.replay.mode=ssb", r"algo\.replay\.mode must be one of 'off', 'filter', 'ssr'"),
        ("algo.replay.keep_fraction=0", r"algo\.replay\.keep_fraction must be in \(0, 1\]"),
        ("algo.replay.buffer_size=-1", r"algo\.replay\.buffer_size, positive_fraction and eps must be >= 0"),
        ("algo.replay.alpha=0", r"algo\.replay\.alpha must be > 0"),
        ("algo.replay.size=3", r"unknown key 'algo\.replay\.size'"),
    ],
)
def test_bad_replay_options_are_refused_by_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_assembled_rows_keep_their_own_advantage_old_logprobs_and_weight_when_prompts_interleave():
    """Rows drawn in the order p1, p2, p1, p2 are batched prompt by prompt (p1's two, then
    p2's), and each batch row carries the advantage, old log-probs and weight stored with its
    own completion, whatever the order they were drawn in."""
    from vlrl.models.batch import Prompt
    from vlrl.rollout import Completion
    from vlrl.trainer.replay import ReplayRow, assemble

    p1 = Prompt(torch.tensor([1, 2]), torch.zeros(2, dtype=torch.long), {}, "one")
    p2 = Prompt(torch.tensor([3, 4, 5]), torch.zeros(3, dtype=torch.long), {}, "two")

    def row(prompt, tokens, advantage, weight):
        old = torch.tensor([-advantage] * len(tokens))  # distinctive per row
        return ReplayRow(prompt, Completion(tokens, "x", False), advantage, old, None, None, weight, 1)

    drawn = [
        row(p1, [10, 11], 0.5, 1.0),
        row(p2, [20], -0.25, 2.0),
        row(p1, [30], 0.75, 3.0),
        row(p2, [40, 41], 1.5, 4.0),
    ]
    batch, advantages, carried = assemble(drawn, pad_id=0, trainers=False)
    assert batch.prompt_index.tolist() == [0, 0, 1, 1]
    assert batch.completion_ids.tolist() == [[10, 11], [30, 0], [20, 0], [40, 41]]
    assert advantages.tolist() == [0.5, 0.75, -0.25, 1.5]
    assert carried.row_weights.tolist() == [1.0, 3.0, 2.0, 4.0]
    assert carried.old.logp.tolist() == [[-0.5, -0.5], [-0.75, 0.0], [0.25, 0.0], [-1.5, -1.5]]
    assert carried.old.trainers is False


def test_the_buffer_holds_half_a_steps_rows_and_the_stats_count_them(trainer):
    """Without buffer_size the buffer keeps len(rows) // 2 rows (VL-Rethinker's
    deque(maxlen=len(items) // 2)); effective_frac is the step's share of effective rows; a step
    with nothing to select trains on its own rows, all counted as current."""
    trainer.replay = ReplayBuffer(dataclasses.replace(trainer.cfg.algo.replay, buffer_size=0))
    groups, batch, adv = rollout(trainer, step=1)
    trained = trainer.replayed(groups, batch, adv, 1)
    n = len(batch.prompt_index)
    assert trainer.replay.rows.maxlen == n // 2
    assert trained.stats["replay/effective_frac"] == int(effective(adv).sum()) / n
    trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
    unfiltered = trainer.replayed(groups, batch, torch.zeros(n), 1)
    assert unfiltered.stats["replay/current_rows"] == n and unfiltered.stats["replay/replayed_rows"] == 0


def test_replayed_rows_with_the_engines_old_logprobs_are_not_measured_as_a_mismatch(trainer):
    """The HF engine samples with the policy: a replayed row's stored old log-probs are the
    engine's own (not the trainer's), so, as without replay, no engine mismatch is logged."""
    trainer.replay = ReplayBuffer(trainer.cfg.algo.replay)
    groups, batch, adv = rollout(trainer, step=1)
    trainer.replayed(groups, batch, adv, 1)
    groups, batch, _ = rollout(trainer, step=2)
    trained = trainer.replayed(groups, batch, torch.zeros(len(batch.prompt_index)), 2)
    assert trained.carried is not None and trained.carried.old.trainers is False
    assert trained.batch.rollout_logprobs is not None
    start = {n: p.detach().clone() for n, p in trainer.run.model.named_parameters()}
    stats, _ = trainer.update(trained.batch, trained.advantages, 2, trained.carried)
    with torch.no_grad():
        for n, p in trainer.run.model.named_parameters():
            p.copy_(start[n])
    assert "rollout/logp_diff" not in stats
