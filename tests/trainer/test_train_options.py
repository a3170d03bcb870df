"""Each trainer option of the GRPO family runs end to end on the tiny model and does what it says."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.fixtures.shifted_engine import SHIFT
from tests.raised_logits import raised_logits
from tests.rollout.test_rollout_seam import make_trainer, one_update
from tests.trainer.test_train import tiny_overrides
from vlrl.algos.shaping import trust_bonus_code
from vlrl.config import ConfigError, load_config
from vlrl.models.batch import collate
from vlrl.models.policy import completion_logprobs
from vlrl.rollout import SamplingParams
from vlrl.trainer.rl import train

FIXTURES = Path(__file__).parent.parent / "fixtures"
BRIEF = f"{FIXTURES / 'toy_task.py'}:BriefGrounding"
CANNED = f"{FIXTURES.parent.parent / 'docs' / 'examples' / 'canned_engine.py'}:CannedEngine"
HALF = f"{FIXTURES / 'rl_fixtures.py'}:HalfCorrect"
# Sign advantages from the constant `half` reward (0.5): +1 for every completion, or -1 for every one.
ALL_CORRECT = {"algo.advantage": "sign", "algo.accuracy_reward": "half", "algo.accuracy_threshold": 0.5}
NONE_CORRECT = {**ALL_CORRECT, "algo.accuracy_strict": True}  # 0.5 > 0.5 is false


def run(tmp_path, data, task=BRIEF, **extra) -> list[dict]:
    values = {"task.name": task, "rollout.max_new_tokens": 10, "trainer.steps": 2, **extra}
    result = train(load_config(None, tiny_overrides(tmp_path / "run", data, **values)))
    return [json.loads(line) for line in result.metrics.read_text().splitlines()]


def test_several_updates_per_rollout_with_rollout_or_recomputed_old_logprobs(tmp_path, rec_data, tiny_qwen25):
    options = {"algo.num_iterations": 2, "algo.mini_batches": 2, "algo.beta": 0.0}
    from_rollout = run(tmp_path / "a", rec_data, **options)
    recomputed = run(tmp_path / "b", rec_data, **options, **{"algo.old_logprobs": "recompute"})
    assert [r["optimizer_steps"] for r in from_rollout] == [4.0, 4.0]
    # The rollout's log-probs are the policy's: both runs take the same steps.
    for a, b in zip(from_rollout, recomputed, strict=False):
        assert a["reward"] == b["reward"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-5)


def test_beta_zero_loads_no_reference_model(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    import vlrl.trainer.run as run_module

    loads = []
    original = run_module.load_model
    monkeypatch.setattr(run_module, "load_model", lambda *a, **k: loads.append(1) or original(*a, **k))
    rows = run(tmp_path, rec_data, **{"algo.beta": 0.0})
    assert len(loads) == 1 and "kl" not in rows[0]
    loads.clear()
    rows = run(tmp_path / "kl", rec_data, **{"algo.beta": 0.04})
    assert len(loads) == 2 and "kl" in rows[0]


def test_dynamic_sampling_drops_groups_without_spread_and_refills(tmp_path, rec_data, tiny_qwen25):
    task = f"{FIXTURES / 'rl_fixtures.py'}:HalfInformative"
    plain = run(tmp_path / "plain", rec_data, task=task, **{"trainer.prompts_per_step": 4, "trainer.steps": 3})
    assert any(r["frac_groups_zero_std"] > 0 for r in plain)
    options = {
        "trainer.prompts_per_step": 4,
        "trainer.steps": 3,
        "algo.dynamic_sampling": True,
        "algo.max_sampling_rounds": 2,
    }
    dynamic = run(tmp_path / "dapo", rec_data, task=task, **options)
    assert all(r["frac_groups_zero_std"] == 0 for r in dynamic)
    assert max(r["sampling_rounds"] for r in dynamic) == 2  # refilled, never beyond max_sampling_rounds


@pytest.mark.parametrize(("weight", "group"), [(1.0, 4), (1.4, 8)])
def test_dynamic_sampling_stops_after_max_sampling_rounds_and_trains_on_what_there_is(
    weight, group, tmp_path, rec_data, tiny_qwen25
):
    options = {"task.rewards": f"{{half: {weight}}}", "algo.dynamic_sampling": True, "algo.max_sampling_rounds": 3}
    (r,) = run(tmp_path, rec_data, task=HALF, **options, **{"trainer.steps": 1, "rollout.num_generations": group})
    # Every reward is 0.5 (0.7: a float32 std of eight is 6.4e-8, not 0): no group ever has a
    # spread, so all 3 rounds are drawn and the last is kept.
    assert r["sampling_rounds"] == 3 and r["frac_groups_zero_std"] == 1.0 and r["optimizer_steps"] == 1


@pytest.mark.parametrize(
    "options",
    [
        {"algo.loss": "cpgd", "algo.advantage": "cpgd", "algo.cpgd_weighting": "clip_filter"},
        {"algo.ratio_level": "sequence", "algo.aggregation": "token_mean", "algo.epsilon_high": 0.28},
        {"algo.advantage": "rloo", "algo.kl_estimator": "low_var", "algo.dual_clip": 3.0},
        {
            "algo.advantage": "sign",
            "algo.positive_weight": 0.1,
            "algo.accuracy_reward": "brevity",
            "algo.accuracy_threshold": 0.9,
        },
        {"algo.top_entropy_fraction": 0.2, "algo.aggregation": "seq_mean_token_sum_norm", "algo.advantage": "dr_grpo"},
        {"algo.advantage_std": "batch", "algo.kl_estimator": "k1"},
        {"algo.advantage": "reinforce_baseline", "algo.aggregation": "micro_token_mean", "algo.micro_batch_rows": 2},
        {"algo.loss": "cispo", "algo.epsilon_high": 5.0, "algo.mini_batches": 2, "algo.kl_bias_correction": True},
        {"algo.loss": "sapo", "algo.ratio_level": "sequence", "algo.kl_in": "returns", "algo.kl_estimator": "k1"},
        {"algo.loss": "vespo", "algo.aggregation": "token_mean", "algo.num_iterations": 2},
        {"algo.advantage": "opo", "algo.kl_in": "reward", "algo.kl_estimator": "k1"},
        {"algo.advantage": "reinforce_plus_plus", "algo.kl_in": "returns", "algo.kl_target": 0.01},
        {"algo.advantage": "passk", "algo.off_policy_mask": 0.5},
        {"algo.loss": "gmpo", "algo.epsilon": 0.4, "algo.epsilon_high": 0.4, "algo.mini_batches": 2},
        {"algo.loss": "kl_cov", "algo.kl_cov_ratio": 0.01, "algo.advantage": "gpg"},
        {"algo.loss": "reinforce", "algo.kl_in": "returns", "algo.advantage": "reinforce_plus_plus"},
        {"algo.replay.mode": "ssr", "algo.kl_in": "reward", "algo.kl_estimator": "k1", "algo.mini_batches": 2},
        {"algo.advantage": "optimal_token_baseline", "algo.kl_in": "returns", "algo.mini_batches": 2},
    ],
)
def test_loss_and_advantage_variants_train(tmp_path, rec_data, tiny_qwen25, options):
    rows = run(tmp_path, rec_data, **options)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["skipped_updates"] == 0 and r["grad_norm"] > 0 for r in rows)


def send_json(handler: BaseHTTPRequestHandler, body: dict) -> None:
    """A test server's 200 answer of `body` as JSON."""
    payload = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    handler.wfile.write(payload)


class Scores(BaseHTTPRequestHandler):
    """A thinking scorer's HTTP endpoint: 0.5 for every item, after `server.delay` seconds, or
    an error when `server.broken`."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(getattr(self.server, "delay", 0.0))
        if getattr(self.server, "broken", False):
            self.send_response(500)
            self.end_headers()
            return
        send_json(self, {"scores": [0.5] * len(body["items"])})

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("broken", [False, True])
def test_trust_grpo_with_an_http_scorer_survives_its_failures(tmp_path, rec_data, tiny_qwen25, broken):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scores)
    server.broken = broken
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/score"
        rows = run(
            tmp_path,
            rec_data,
            **{"algo.trust.scorer": url, "algo.accuracy_reward": "brevity", "algo.accuracy_threshold": 0.95},
        )
    finally:
        server.shutdown()
    # Each step's own count: its 2 prompts x 4 completions when the server fails (not a running total)
    assert [r["thinking_failures"] for r in rows] == [8.0 * broken, 8.0 * broken]


def test_trust_grpo_with_a_local_judge_model(tmp_path, rec_data, tiny_qwen25, capsys):
    rows = run(
        tmp_path, rec_data, **{"algo.trust.scorer": "judge:tiny:qwen2_5_vl", "algo.trust.judge_max_new_tokens": 4}
    )
    assert [r["step"] for r in rows] == [1, 2]  # an untrained judge rarely answers a number: scored 0, counted
    assert all("thinking_failures" in r for r in rows)
    # no algo.accuracy_reward, and the toy task's total sums three rewards: the run says so at its start
    assert "warning: algo.trust reads each answer's outcome as a [0, 1] accuracy" in capsys.readouterr().out


def test_a_step_draws_prompts_per_step_prompts_of_num_generations_completions(tmp_path, rec_data, tiny_qwen25):
    trainer = make_trainer(
        tmp_path, rec_data, engine="hf", **{"trainer.prompts_per_step": 3, "rollout.num_generations": 2}
    )
    groups, rounds, _ = trainer.collect(step=1)
    assert rounds == 1 and [len(g.completions) for g in groups] == [2, 2, 2]


@pytest.mark.parametrize(
    "option", [{"rollout.top_k": 1}, {"rollout.top_p": 1e-6}, {"rollout.min_p": 1.0}], ids=["top_k", "top_p", "min_p"]
)
def test_a_top_k_top_p_or_min_p_of_one_token_samples_the_greedy_completion_every_time(
    option, tmp_path, rec_data, tiny_qwen25
):
    """rollout.top_k, rollout.top_p and rollout.min_p reach the engine: keeping one token per
    step, each of the G completions is the greedy one (where, unfiltered at temperature 1, they
    differ)."""
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **option)
    source = trainer.sources[0]
    groups, _ = trainer.generate_groups([(source.task, s) for s in source.train.samples[:2]], step=1)
    prompts = [g.prompt for g in groups]
    greedy = trainer.engine.generate(prompts, SamplingParams(n=1, max_new_tokens=10, temperature=0.0))
    for group, best in zip(groups, greedy, strict=True):
        assert [c.token_ids for c in group.completions] == [best.completions[0].token_ids] * 4
    free = trainer.engine.generate(prompts, SamplingParams(n=4, max_new_tokens=10), torch.Generator().manual_seed(0))
    assert all(len({tuple(c.token_ids) for c in g.completions}) > 1 for g in free)


@pytest.mark.parametrize("advantage", ["grpo", "remax"])
def test_rollout_max_rows_decodes_a_step_in_calls_of_at_most_that_many_rows(
    tmp_path, rec_data, tiny_qwen25, monkeypatch, advantage
):
    """Two prompts of 4 completions at rollout.max_rows=4: one prompt a call, its group whole
    (ReMax's 5 rows a prompt: in pieces of 4 and 1, its greedy row first); the step's groups are
    the same size, and nothing is logged as halved."""
    from vlrl.rollout.hf import HFEngine

    calls = []
    real = HFEngine.generate
    monkeypatch.setattr(
        HFEngine,
        "generate",
        lambda self, p, params, *a: calls.append((len(p), params.n, params.greedy)) or real(self, p, params, *a),
    )
    rows = run(tmp_path, rec_data, **{"rollout.max_rows": 4, "trainer.steps": 1, "algo.advantage": advantage})
    each = [(1, 4, 0)] if advantage == "grpo" else [(1, 4, 1), (1, 1, 0)]
    assert calls == each * 2 and "rollout_rows" not in rows[0]
    assert rows[0]["completion_length"] > 0
    with pytest.raises(ConfigError, match=r"rollout.max_rows must be >= 0, got -1"):
        load_config(None, ["rollout.max_rows=-1"])


def test_rollout_repetition_penalty_samples_what_the_engine_samples_with_it_and_keeps_the_policys_logprobs(
    tmp_path, rec_data, tiny_qwen25
):
    """rollout.repetition_penalty reaches the engine: a step's completions are the ones the
    engine samples with that penalty from the same generator state (and not the ones it samples
    without), and their log-probs are the unpenalized policy's, as TRL's old log-probs are."""
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **{"rollout.repetition_penalty": 3.0})
    source = trainer.sources[0]
    state = trainer.run.generator.get_state()
    groups, _ = trainer.generate_groups([(source.task, s) for s in source.train.samples[:2]], step=1)
    prompts = [g.prompt for g in groups]

    def sampled(penalty: float) -> list[list[list[int]]]:
        trainer.run.generator.set_state(state)
        params = SamplingParams(n=4, max_new_tokens=10, repetition_penalty=penalty)
        return [
            [c.token_ids for c in g.completions]
            for g in trainer.engine.generate(prompts, params, trainer.run.generator)
        ]

    tokens = [[c.token_ids for c in g.completions] for g in groups]
    assert tokens == sampled(3.0) and tokens != sampled(1.0)
    (first, *_), model = groups[0].completions, trainer.run.model
    ids, mask = torch.tensor([first.token_ids]), torch.ones(1, len(first.token_ids))
    with torch.no_grad():
        policy = completion_logprobs(
            model, collate([groups[0].prompt], trainer.run.pad_id), torch.tensor([0]), ids, mask
        )
    torch.testing.assert_close(torch.tensor([first.logprobs]), policy.logp, rtol=1e-4, atol=1e-5)


def test_a_repetition_penalty_is_part_of_the_draw_the_trainer_computes_for_an_engine_of_its_own(
    tmp_path, rec_data, tiny_qwen25
):
    """An engine with its own copy of the policy (vLLM; here the seam's test engine) reports the
    log-probs of what it drew from, penalty included: the trainer computes that draw, penalty
    included (SamplingFilter.repetition_penalty: tests/models/test_policy.py by hand,
    tests/vllm_engine against vLLM), to measure and correct the two's mismatch."""
    trainer = make_trainer(tmp_path / "run", rec_data, **{"rollout.repetition_penalty": 1.2})
    assert trainer.updater.sampler is not None and trainer.updater.sampler.repetition_penalty == 1.2


@pytest.mark.parametrize("min_new", [0, 3])
def test_rollout_min_new_tokens_keeps_every_completion_going_that_long(tmp_path, rec_data, tiny_qwen25, min_new):
    """rollout.min_new_tokens reaches the engine: where the policy all but ends at once, a
    step's completions end at their first token, or at the first token after min_new_tokens."""
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **{"rollout.min_new_tokens": min_new})
    source = trainer.sources[0]
    with raised_logits(trainer.run.model, trainer.engine.stop_ids, 30.0):
        groups, _ = trainer.generate_groups([(source.task, s) for s in source.train.samples[:2]], step=1)
    assert [len(c.token_ids) for g in groups for c in g.completions] == [min_new + 1] * 8


def test_min_new_tokens_is_part_of_the_draw_the_trainer_computes_for_an_engine_of_its_own(
    tmp_path, rec_data, tiny_qwen25
):
    """An engine with its own copy of the policy (vLLM; here the seam's test engine, whose
    log-probs are SHIFT above those of what it drew from) reports the log-probs of its draw,
    end tokens banned before min_new_tokens: the trainer's draw bans the same ids (the engines'
    end tokens) before the same length, so the mismatch it measures is the shift alone (the
    tiny model's end tokens hold about 2e-3 of the mass: left out of the first two tokens'
    draw, the mismatch moves by about 4e-4). SamplingFilter.stops: tests/models/test_policy.py
    by hand, tests/vllm_engine against vLLM."""
    trainer = make_trainer(tmp_path / "run", rec_data, **{"rollout.min_new_tokens": 2})
    _, stats = one_update(trainer)
    assert stats["rollout/logp_diff"] == pytest.approx(SHIFT, abs=1e-5)
    with pytest.raises(ConfigError, match=r"rollout.min_new_tokens must be >= 0, got -1"):
        load_config(None, ["rollout.min_new_tokens=-1"])
    for limits, says in ((["rollout.max_new_tokens=8"], r"below max_new_tokens \(8\)"),
                         (['rollout.stages=[{steps: 2, max_new_tokens: 4}, {}]'], r"below a stage's max_new_tokens \(4\)")):  # fmt: skip
        with pytest.raises(
            ConfigError, match=r"rollout.min_new_tokens \(8\) must be " + says + ": no completion could end"
        ):
            load_config(None, ["rollout.min_new_tokens=8", *limits])


def test_the_overlong_penalty_ramps_over_the_last_overlong_buffer_tokens(tmp_path, rec_data, tiny_qwen25):
    """DAPO's soft overlong punishment on completions of several lengths (canned answers):
    0 up to L_max - buffer tokens, then (L_max - buffer - L) / buffer x penalty."""
    answers = ["no", "left of it", "one two three four five six", "<answer>[1, 2, 3, 4]</answer>"]
    options = {"rollout.canned.answers": json.dumps(answers), "algo.overlong_buffer": 6, "algo.overlong_penalty": 2.0}
    trainer = make_trainer(tmp_path, rec_data, engine=CANNED, **options)
    source = trainer.sources[0]
    (group,) = trainer.generate_groups([(source.task, source.train.samples[0])], step=1)[0]
    lengths = [len(c.token_ids) for c in group.completions]
    assert len(set(lengths)) >= 3 and max(lengths) == 10  # max_new_tokens
    expected = [min(0.0, (10 - 6 - n) / 6 * 2.0) for n in lengths]
    assert group.shaping["overlong"].tolist() == pytest.approx(expected) and min(expected) == -2.0
    assert group.reward.tolist() == pytest.approx([t + e for t, e in zip(group.scores.total, expected, strict=True)])


@pytest.mark.parametrize("fraction, shuffled", [(0.25, 1), (0.75, 3)])
def test_t_grpo_samples_its_share_of_the_group_on_the_shuffled_frames(
    fraction, shuffled, tmp_path, rec_data, tiny_qwen25
):
    """algo.temporal.shuffled_fraction of the G = 4 completions are drawn for each prompt's
    shuffled-frame variant (Video-R1's T-GRPO), and scored."""
    options = {"task.name": f"{FIXTURES / 'rl_fixtures.py'}:OrderedGrounding", "algo.temporal.enabled": True,
               "algo.temporal.shuffled_fraction": fraction}  # fmt: skip
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **options)
    drawn = []
    generate = trainer.engine.generate
    trainer.engine.generate = lambda prompts, params, generator=None: (
        drawn.append(params.n) or generate(prompts, params, generator)
    )
    source = trainer.sources[0]
    accuracy = trainer.temporal_contrast([(source.task, s) for s in source.train.samples[:2]], {}, trainer.sampling(1))
    assert drawn == [shuffled] and [len(a) for a in accuracy] == [shuffled, shuffled]


def test_t_grpo_shuffles_each_visit_in_an_order_of_its_own_drawn_from_the_runs_generator(
    tmp_path, rec_data, tiny_qwen25
):
    """Video-R1 draws torch.randperm at every visit: the task's seed (7 for every sample here) is
    mixed with a draw from the run's generator, so two samples, and one sample's two visits,
    get orders of their own, and a run with the same seed draws the same ones."""
    options = {"task.name": f"{FIXTURES / 'rl_fixtures.py'}:ShuffledGrounding", "algo.temporal.enabled": True}

    def visits(workdir):
        trainer = make_trainer(workdir, rec_data, engine="hf", **options)
        seeds = []
        render = trainer.render
        trainer.render = lambda task, sample, decoded=None: seeds.append(sample.shuffle_frames) or render(task, sample)
        items = [(trainer.sources[0].task, s) for s in trainer.sources[0].train.samples[:2]]
        for _ in range(2):
            trainer.temporal_contrast(items, {}, trainer.sampling(1))
        return seeds

    seeds = visits(tmp_path / "a")
    assert len(seeds) == len(set(seeds)) == 4 and 7 not in seeds
    assert visits(tmp_path / "b") == seeds


# With one pass over each rollout the ratio is 1, so the policy loss of a token is -A, and the
# logged loss follows from the advantages, the KL and the token weights by hand.
def test_the_kl_term_is_added_times_beta_and_the_overlong_penalty_joins_the_reward(tmp_path, rec_data, tiny_qwen25):
    options = {"algo.beta": 0.5, "algo.aggregation": "token_mean", "trainer.lr": 1e-2}
    rows = run(
        tmp_path,
        rec_data,
        task=HALF,
        **ALL_CORRECT,
        **options,
        **{"algo.overlong_buffer": 9, "algo.overlong_penalty": 2.0},
    )
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-7)  # the policy is still the reference
    assert rows[1]["kl"] > 1e-3
    for r in rows:
        assert r["correct_frac"] == 1.0  # what the advantages count as correct (algo.accuracy_reward)
        assert r["loss"] == pytest.approx(-1.0 + 0.5 * r["kl"], abs=1e-6)  # token mean of -A + beta kl
        # DAPO from L_max - 9 = 1 token: (1 - L) / 9 * 2 on every completion (all have 1..10 tokens).
        assert r["reward/overlong"] == pytest.approx(-2.0 * (r["completion_length"] - 1) / 9, abs=1e-6)
        assert r["reward"] == pytest.approx(r["reward/format"] + r["reward/brevity"] + r["reward/overlong"], abs=1e-6)


def test_mask_truncated_drops_truncated_completions_and_the_lr_follows_its_schedule(tmp_path, rec_data, tiny_qwen25):
    options = {"algo.beta": 0.0, "algo.mask_truncated": True, "algo.aggregation": "seq_mean_token_sum_norm"}
    schedule = {
        "rollout.max_new_tokens": 4,
        "trainer.lr_schedule": "linear",
        "trainer.warmup_steps": 2,
        "trainer.steps": 3,
    }
    rows = run(tmp_path, rec_data, task=HALF, **NONE_CORRECT, **options, **schedule)
    for r in rows:
        assert r["correct_frac"] == 0.0 and r["truncated_frac"] > 0
        # A = -1: kept tokens / (rows x L_max); a truncated row holds L_max tokens, none kept.
        assert r["loss"] == pytest.approx(r["completion_length"] / 4 - r["truncated_frac"], abs=1e-6)
    # The lr each step s (0-based) trained at: warmup s / 2 for s < 2 (from 0, as transformers'
    # and verl's), then linear from 1 at s = 2, reaching 0 at s = 3, after the last of 3 steps.
    assert [r["lr"] for r in rows] == pytest.approx([0.0, 5e-4, 1e-3])


def test_the_schedule_counts_steps_not_the_optimizer_steps_within_them(tmp_path, rec_data, tiny_qwen25):
    """Two optimizer steps per step (algo.mini_batches): a linear schedule over 4 steps still
    trains at 1, 3/4, 1/2 and 1/4 of trainer.lr (it reached 0 at step 2, leaving 2 steps untrained)."""
    options = {"trainer.lr_schedule": "linear", "trainer.steps": 4, "algo.mini_batches": 2, "algo.beta": 0.0}
    rows = run(tmp_path, rec_data, **options)
    assert [r["optimizer_steps"] for r in rows] == [2.0] * 4
    assert [r["lr"] for r in rows] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])


@pytest.fixture
def update_lrs(monkeypatch) -> list[float]:
    """The lr of every optimizer step the test's runs take, in order."""
    from vlrl.trainer.run import Run

    lrs: list[float] = []
    original = Run.optimizer_step
    monkeypatch.setattr(
        Run,
        "optimizer_step",
        lambda self, finite: lrs.append(self.optimizer.param_groups[0]["lr"]) or original(self, finite),
    )
    return lrs


def test_a_schedule_per_optimizer_step_moves_at_every_update_and_warms_up_in_updates(
    tmp_path, rec_data, tiny_qwen25, update_lrs
):
    """lr_schedule_per: optimizer_step (OpenRLHF, transformers' Trainer): 2 steps of 2 updates
    are a linear schedule of 4 positions with 1 of warmup: 0, then 1, 2/3, 1/3 of trainer.lr,
    each update at its own; a step logs its first update's."""
    options = {"trainer.lr_schedule": "linear", "trainer.warmup_steps": 1, "algo.mini_batches": 2, "algo.beta": 0.0}
    rows = run(tmp_path, rec_data, **options, **{"trainer.lr_schedule_per": "optimizer_step"})
    assert update_lrs == pytest.approx([0.0, 1e-3, 1e-3 * 2 / 3, 1e-3 / 3])
    assert [r["lr"] for r in rows] == pytest.approx([0.0, 1e-3 * 2 / 3])


def test_a_resumed_run_goes_on_with_the_per_update_schedule_where_it_stopped(
    tmp_path, rec_data, tiny_qwen25, update_lrs
):
    """4 steps of 2 updates straight through train at 0, then 1 - (p - 1) / 7 of trainer.lr
    at update p; a run stopped after step 2 and resumed to 4 trains its last 4 updates at the
    same lrs (the checkpoint counts updates, not steps)."""
    options = {"trainer.lr_schedule": "linear", "trainer.warmup_steps": 1, "trainer.lr_schedule_per": "optimizer_step"}
    options |= {"algo.mini_batches": 2, "algo.beta": 0.0, "trainer.save_every": 1}
    run(tmp_path / "straight", rec_data, **options, **{"trainer.steps": 4})
    assert update_lrs == pytest.approx([0.0] + [1e-3 * (1 - (p - 1) / 7) for p in range(1, 8)])
    straight = list(update_lrs)
    run(tmp_path / "stopped", rec_data, **options, **{"trainer.steps": 2})
    update_lrs.clear()
    run(tmp_path / "stopped", rec_data, **options, **{"trainer.steps": 4})
    assert update_lrs == pytest.approx(straight[4:])


def test_top_entropy_fraction_trains_on_that_share_and_max_grad_norm_clips(tmp_path, rec_data, tiny_qwen25):
    options = {"algo.beta": 0.0, "algo.top_entropy_fraction": 0.2, "algo.aggregation": "token_mean"}
    (r,) = run(tmp_path, rec_data, task=HALF, **{**ALL_CORRECT, "algo.accuracy_threshold": 0.6}, **options,
               **{"trainer.steps": 1, "trainer.max_grad_norm": 1e-12})  # fmt: skip
    assert r["correct_frac"] == 0.0  # 0.5 < 0.6: A = -1
    tokens = round(r["completion_length"] * 8)
    assert abs(r["loss"] - 0.2) <= 2 / tokens  # the top 20% of tokens by entropy, A = -1 each
    # The gradient clipped to norm 1e-12: Adam's first step, lr g / (|g| + 1e-8), moves nothing visibly.
    before = load_file(tiny_qwen25 / "model.safetensors")
    after = load_file(tmp_path / "run" / "checkpoints" / "step-0000001" / "model.safetensors")
    assert max(float((after[name] - before[name]).abs().max()) for name in before) < 1e-6


def test_weight_decay_shrinks_the_weights_when_nothing_else_moves_them(tmp_path, rec_data, tiny_qwen25):
    options = {
        "task.rewards": "{half: 1.0}",
        "algo.advantage": "dr_grpo",
        "algo.beta": 0.0,
        "trainer.weight_decay": 0.1,
    }
    run(tmp_path, rec_data, task=HALF, **options, **{"trainer.steps": 1, "trainer.lr": 1e-2})
    # Equal rewards: advantages and gradients are 0, so AdamW only decays, w (1 - lr wd).
    before = load_file(tiny_qwen25 / "model.safetensors")
    after = load_file(tmp_path / "run" / "checkpoints" / "step-0000001" / "model.safetensors")
    for name in before:
        torch.testing.assert_close(after[name], before[name] * (1 - 1e-2 * 0.1), rtol=1e-6, atol=0, msg=name)


# Every completion is correct, ordered or shuffled: order "helped" (acc 1 >= mu x acc 1) for
# mu <= 1, and T-GRPO adds alpha to each; for mu > 1 it did not, and adds nothing.
@pytest.mark.parametrize("mu, temporal", [(0.0, 0.25), (1.5, 0.0)])
def test_trust_temporal_and_length_terms_join_each_completions_reward(mu, temporal, tmp_path, rec_data, tiny_qwen25):
    task = f"{FIXTURES / 'rl_fixtures.py'}:OrderedGrounding"
    options = {
        "trainer.steps": 1,
        "algo.accuracy_reward": "brevity",
        "algo.accuracy_threshold": 0.0,  # every completion correct
        "algo.trust.scorer": f"{FIXTURES / 'rl_fixtures.py'}:thinking_length",
        "algo.temporal.enabled": True,
        "algo.temporal.alpha": 0.25,
        "algo.temporal.mu": mu,
        "algo.length_control.enabled": True,
        "algo.length_control.min_tokens": 1,
        "algo.length_control.max_tokens": 10,
        "algo.length_control.bonus": 0.15,
    }
    (r,) = run(tmp_path, rec_data, task=task, **options)
    assert r["reward/temporal"] == pytest.approx(temporal) and r["reward/length"] == pytest.approx(0.15)
    parts = ("format", "iou", "brevity", "temporal", "length", "thinking")
    assert r["reward"] == pytest.approx(sum(r[f"reward/{p}"] for p in parts), abs=1e-6)
    # The first group, completion by completion: Trust-GRPO's code variant on the scorer's values
    # and the accuracy reward, at step 1 with T = 12000 (the code variant's default).
    logged = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    thinking = torch.tensor([min(1.0, len(s["completion"]) / 100) for s in logged], dtype=torch.float64)
    outcome = torch.tensor([s["rewards"]["brevity"] for s in logged], dtype=torch.float64)
    bonus = trust_bonus_code(thinking, outcome, 0.3, 1, 12000.0).tolist()
    assert any(b > 0 for b in bonus)
    for sample, b in zip(logged, bonus, strict=True):
        base = sum(sample["rewards"][p] for p in ("format", "iou", "brevity"))
        assert sample["reward"] == pytest.approx(base + temporal + 0.15 + b, abs=1e-5)


def test_t_grpo_on_a_task_without_shuffled_videos_is_refused_before_the_model_loads(tmp_path, rec_data):
    cfg = load_config(None, tiny_overrides(tmp_path / "run", rec_data, **{"algo.temporal.enabled": True}))
    with pytest.raises(ConfigError, match="brief_grounding gives no shuffled variant"):
        train(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_a_decay_ends_at_lr_min_ratio_as_transformers_cosine_with_min_lr_does(schedule):
    """OpenRLHF (LMM-R1) decays its actor's lr by transformers' cosine_with_min_lr to 0.1 x lr."""
    from transformers.optimization import _get_cosine_schedule_with_warmup_lr_lambda as cosine

    from vlrl.config import TrainerConfig
    from vlrl.trainer.run import lr_factor

    t = TrainerConfig(steps=10, lr_schedule=schedule, lr_min_ratio=0.1)
    got = [lr_factor(s, t) for s in range(10)]
    if schedule == "cosine":
        want = [
            cosine(s, num_warmup_steps=0, num_training_steps=10, num_cycles=0.5, min_lr_rate=0.1) for s in range(10)
        ]
    else:
        want = [0.1 + 0.9 * (1 - s / 10) for s in range(10)]
    assert got == pytest.approx(want, abs=1e-12) and got[0] == 1.0 and got[-1] > 0.1


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("per", ["step", "optimizer_step"])
def test_a_schedule_with_warmup_is_transformers_position_for_position(schedule, per):
    """Warmup from 0, then the decay over the schedule's positions: steps, or steps x the
    updates of each (OpenRLHF hands transformers' scheduler its optimizer steps)."""
    from transformers import optimization as hf

    from vlrl.config import TrainerConfig
    from vlrl.trainer.run import lr_factor

    t = TrainerConfig(steps=6, lr_schedule=schedule, warmup_steps=4, lr_schedule_per=per)
    length = 6 * (3 if per == "optimizer_step" else 1)
    kinds = {
        "constant": lambda s: hf._get_constant_schedule_with_warmup_lr_lambda(s, num_warmup_steps=4),
        "linear": lambda s: hf._get_linear_schedule_with_warmup_lr_lambda(
            s, num_warmup_steps=4, num_training_steps=length
        ),
        "cosine": lambda s: hf._get_cosine_schedule_with_warmup_lr_lambda(
            s, num_warmup_steps=4, num_training_steps=length, num_cycles=0.5
        ),
    }
    got = [lr_factor(s, t, optimizer_steps_per_step=3) for s in range(length)]
    assert got == pytest.approx([kinds[schedule](s) for s in range(length)], abs=1e-12)


def test_a_resume_that_changes_the_steps_is_told_the_lr_it_resumes_with():
    """Linear over 4 steps, resumed at 4 with 8: step 5 trains at 0.5 x lr (the new schedule's),
    where the checkpoint's had reached 0; a schedule changed too is the checkpoint's own before;
    a constant lr moves nothing."""
    from vlrl.config import TrainerConfig
    from vlrl.trainer.run import resumed_schedule_note

    def steps(old, new=8):
        return {"trainer.steps": {"from": old, "to": new}}

    note = resumed_schedule_note(TrainerConfig(steps=8, lr_schedule="linear"), "trainer", steps(4), 4)
    assert note == (
        "trainer.steps changed from 4 to 8: the linear lr schedule now spans the new total, so step 5 trains at "
        "0.5 x trainer.lr, where the checkpoint's schedule was at 0 x"
    )
    assert resumed_schedule_note(TrainerConfig(steps=8), "trainer", steps(4), 4) is None
    assert resumed_schedule_note(TrainerConfig(steps=8, lr_schedule="linear"), "trainer", {}, 4) is None
    was_constant = {**steps(4), "trainer.lr_schedule": {"from": "constant", "to": "linear"}}
    assert "trains at 0.5 x trainer.lr, where the checkpoint's schedule was at 1 x" in resumed_schedule_note(
        TrainerConfig(steps=8, lr_schedule="linear"), "trainer", was_constant, 4
    )
    per_update = TrainerConfig(steps=8, lr_schedule="cosine", lr_schedule_per="optimizer_step")
    assert "step 3 trains at 0.854 x sft.lr, where the checkpoint's schedule was at 0.5 x" in resumed_schedule_note(
        per_update, "sft", {"sft.steps": {"from": 4, "to": 8}}, 2, optimizer_steps_per_step=2
    )


def test_a_run_no_longer_than_its_warmup_is_told_the_lr_it_reaches():
    from vlrl.config import TrainerConfig
    from vlrl.trainer.run import schedule_note

    assert schedule_note(TrainerConfig(steps=10, warmup_steps=9), "trainer") is None  # 1 at the last step
    note = schedule_note(TrainerConfig(steps=10, warmup_steps=10), "trainer")
    assert note == (
        "trainer.warmup_steps (10) is not less than trainer.steps (10): the learning rate reaches only 0.9 x "
        "trainer.lr at the last step"
    )
    note = schedule_note(TrainerConfig(steps=5, warmup_steps=20), "sft")
    assert note == (
        "sft.warmup_steps (20) is not less than sft.steps (5): the learning rate reaches only 0.2 x sft.lr at the "
        "last step"
    )
    per_update = TrainerConfig(steps=5, warmup_steps=20, lr_schedule_per="optimizer_step")
    assert schedule_note(per_update, "trainer", optimizer_steps_per_step=4) == (
        "trainer.warmup_steps (20) is not less than the run's 20 optimizer steps (trainer.steps x 4): the learning "
        "rate reaches only 0.95 x trainer.lr at the last update"
    )
    assert schedule_note(TrainerConfig(steps=5, warmup_steps=19, lr_schedule_per="optimizer_step"), "t", 4) is None


def test_adam_betas_step_the_policy_as_adamw_with_those_betas_does(tmp_path, rec_data, tiny_qwen25):
    """trainer.adam_betas (OpenRLHF's 0.9, 0.95): two optimizer steps of the run's optimizer on
    fixed gradients move the weights as torch's AdamW with those betas does (the first step is
    the same for any betas; the second is not), and a checkpoint's betas give way to the config's."""
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **{"trainer.adam_betas": "[0.5, 0.6]", "trainer.lr": 1e-3})
    run = trainer.run
    params = [p for p in run.params][:3]
    copies = [p.detach().clone().requires_grad_() for p in params]
    reference = torch.optim.AdamW(copies, lr=1e-3, betas=(0.5, 0.6), weight_decay=run.t.weight_decay)
    others = [p for p in run.params][3:]
    for scale in (1.0, -3.0):
        for p, c in zip(params, copies, strict=True):
            p.grad = torch.full_like(p, scale) * torch.linspace(0.1, 1.0, p.numel()).view_as(p)
            c.grad = p.grad.clone()
        for p in others:
            p.grad = None
        run.optimizer.step()
        reference.step()
    for p, c in zip(params, copies, strict=True):
        torch.testing.assert_close(p.detach(), c.detach(), rtol=1e-6, atol=1e-9)
    run.optimizer.param_groups[0]["betas"] = (0.9, 0.999)  # as a checkpoint of another setting would load
    run._apply_schedule()
    assert run.optimizer.param_groups[0]["betas"] == (0.5, 0.6)


def test_reinforce_baseline_weighs_each_completion_by_the_tokens_the_update_trains(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """The lengths the trainer hands reinforce_baseline are each row's completion tokens, as the
    update's mask counts them, for completions of 1 to 10 tokens (canned answers)."""
    import vlrl.trainer.rl as rl

    seen, batches = [], []
    real_advantages, real_update = rl.compute_advantages, rl.RLTrainer.update
    monkeypatch.setattr(rl, "compute_advantages", lambda *a: seen.append(a[3]) or real_advantages(*a))
    monkeypatch.setattr(
        rl.RLTrainer, "update", lambda self, batch, *a, **k: batches.append(batch) or real_update(self, batch, *a, **k)
    )
    answers = ["no", "left of it", "one two three four five six", "<answer>[1, 2, 3, 4]</answer>"]
    options = {"algo.advantage": "reinforce_baseline", "rollout.canned.answers": json.dumps(answers)}
    run(tmp_path, rec_data, **{"rollout.engine": CANNED, **options})
    assert len(seen) == len(batches) == 2
    for lengths, batch in zip(seen, batches, strict=True):
        assert lengths.flatten().tolist() == batch.lengths() and len(set(batch.lengths())) >= 3


def spy_kl_in(monkeypatch) -> tuple[list, list]:
    """Each step's (updater, batch, sampled policy, KL) from Updater.reward_kl, and the
    advantages the step hands its update."""
    import vlrl.trainer.rl as rl
    from vlrl.trainer.update import Updater

    seen, given = [], []
    real_kl, real_update = Updater.reward_kl, rl.RLTrainer.update

    def reward_kl(self, batch, **options):
        sampled, kl = real_kl(self, batch, **options)
        seen.append((self, batch, sampled, kl))
        return sampled, kl

    monkeypatch.setattr(Updater, "reward_kl", reward_kl)
    monkeypatch.setattr(
        rl.RLTrainer,
        "update",
        lambda self, batch, adv, *a, **k: given.append(adv) or real_update(self, batch, adv, *a, **k),
    )
    return seen, given


@pytest.mark.parametrize("kl_in", ["reward", "returns"])
def test_the_kl_in_the_reward_is_the_sampling_policys_to_the_reference_and_leaves_the_loss(
    kl_in, tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """algo.kl_in: each token's k1 KL of the policy that sampled (the engine's log-probs, the
    trainer's own here) to the reference, ~0 on the first step and not on the second, taken off
    each completion's reward (summed, before dr_grpo centres it) or each token's return (from that
    token on, after), and left out of the loss: the loss is the token mean of -A (one pass: ratio 1)."""
    seen, given = spy_kl_in(monkeypatch)
    options = {"algo.advantage": "dr_grpo", "algo.beta": 0.5, "algo.kl_estimator": "k1", "algo.kl_in": kl_in}
    rows = run(tmp_path, rec_data, task=HALF, **options, **{"algo.aggregation": "token_mean", "trainer.lr": 1e-2})
    assert len(seen) == len(given) == len(rows) == 2
    for (updater, batch, sampled, kl), adv, row in zip(seen, given, rows, strict=True):
        ref = updater.reference_logprobs(batch)  # a frozen model: as at the step
        mask = batch.completion_mask
        torch.testing.assert_close(sampled.logp, batch.rollout_logprobs)
        torch.testing.assert_close(kl, (batch.rollout_logprobs - ref) * mask)
        reward = torch.cat([g.reward for g in batch.groups])
        if kl_in == "reward":
            penalised = reward - 0.5 * kl.sum(dim=1)
        else:
            penalised = reward
        rows_of_group = [batch.prompt_index == p for p in batch.prompt_index.tolist()]
        centred = penalised - torch.stack([penalised[r].mean() for r in rows_of_group])
        if kl_in == "reward":
            want = centred
            per_token = want[:, None] * mask
        else:
            want = per_token = (centred[:, None] - 0.5 * kl.flip(1).cumsum(1).flip(1)) * mask
        torch.testing.assert_close(adv, want)
        assert row["loss"] == pytest.approx(float(-(per_token * mask).sum() / mask.sum()), abs=1e-6)
        assert row["kl"] == pytest.approx(float(kl.sum() / mask.sum()), abs=1e-6)
    assert abs(rows[0]["kl"]) < 1e-4 and abs(rows[1]["kl"]) > 1e-3  # the reference, then the policy moved (k1: +-)


@pytest.mark.parametrize(
    ("options", "forwards"),
    [({"algo.kl_in": "reward"}, 2), ({"algo.advantage": "optimal_token_baseline", "algo.beta": 0.0}, 1)],
)
def test_the_kl_in_the_reward_shares_its_forward_of_the_sampling_policy_with_the_update(
    options, forwards, tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """With old log-probs recomputed and the policy moving within a step (two mini-batches), a
    step makes two no-gradient forwards, the sampling policy's and the reference's: the update
    takes the old log-probs the KL was computed from instead of a third. So does it those of the
    forward that gave optimal_token_baseline its energy (and no reference: one forward)."""
    from vlrl.trainer.update import Updater

    calls = []
    real = Updater.logprobs_no_grad
    monkeypatch.setattr(Updater, "logprobs_no_grad", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    options = {**options, "algo.old_logprobs": "recompute", "algo.mini_batches": 2, "trainer.steps": 1}
    run(tmp_path, rec_data, **options)
    assert len(calls) == forwards


def test_gdpo_takes_each_reward_component_and_shaping_term_apart_at_its_weight(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """algo.advantage=gdpo: what the trainer hands the advantages is, per completion, the sum of
    its task's components (format 1, brevity 0.5, half 0: their weights) and the overlong
    penalty (1), each normalised within its group (std unbiased, + 1e-4)."""
    import vlrl.trainer.rl as rl

    seen, batches = [], []
    real_advantages, real_update = rl.compute_advantages, rl.RLTrainer.update
    monkeypatch.setattr(rl, "compute_advantages", lambda *a: seen.append(a[0]) or real_advantages(*a))
    monkeypatch.setattr(
        rl.RLTrainer, "update", lambda self, batch, *a, **k: batches.append(batch) or real_update(self, batch, *a, **k)
    )
    weights = {"format": 1.0, "brevity": 0.5, "half": 0.0}
    options = {
        "algo.advantage": "gdpo",
        "algo.overlong_buffer": 9,
        **{f"task.rewards.{k}": v for k, v in weights.items()},
    }
    run(tmp_path, rec_data, task=HALF, **options)
    assert len(seen) == len(batches) == 2
    for rewards, batch in zip(seen, batches, strict=True):
        for group, row in zip(batch.groups, rewards, strict=True):
            parts = {**group.scores.components, "overlong": group.shaping["overlong"].tolist()}
            assert set(parts) == {*weights, "overlong"}
            want = torch.zeros(len(row))
            for name, values in parts.items():
                x = torch.tensor(values, dtype=torch.float32)
                want += {**weights, "overlong": 1.0}[name] * (x - x.mean()) / (x.std() + 1e-4)
            torch.testing.assert_close(row, want)
        assert float(rewards.std()) > 0


def test_the_adaptive_kl_coefficient_follows_the_steps_kl_and_resumes_where_it_was(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """algo.kl_target: step 1 takes beta; after each step the coefficient moves by verl's rule on
    the step's KL (each completion's token mean, averaged; ~0 at the reference: -20% x 8
    completions / horizon 20), and the next step takes it off the returns; a run resumed at
    step 2 goes on with the coefficient the uninterrupted run had at step 3."""
    seen, given = spy_kl_in(monkeypatch)
    options = {
        "algo.advantage": "dr_grpo", "algo.beta": 0.5, "algo.kl_estimator": "k1", "algo.kl_in": "returns",
        "algo.kl_target": 0.05, "algo.kl_horizon": 20, "trainer.lr": 1e-2, "trainer.save_every": 2,
    }  # fmt: skip
    rows = run(tmp_path, rec_data, task=HALF, **options, **{"trainer.steps": 3})
    coef = 0.5
    for (_, batch, _, kl), adv, row in zip(seen, given, rows, strict=True):
        assert row["kl_coef"] == pytest.approx(coef, rel=1e-6)
        mask = batch.completion_mask
        reward = torch.cat([g.reward for g in batch.groups])
        centred = reward - torch.stack([reward[batch.prompt_index == p].mean() for p in batch.prompt_index.tolist()])
        torch.testing.assert_close(adv, (centred[:, None] - coef * kl.flip(1).cumsum(1).flip(1)) * mask)
        current = float((kl.sum(1) / mask.sum(1)).mean())
        coef *= 1 + min(max(current / 0.05 - 1, -0.2), 0.2) * len(mask) / 20
    assert rows[1]["kl_coef"] == pytest.approx(0.5 * (1 - 0.2 * 8 / 20), rel=1e-4)  # 0.4: step 1's KL ~0
    (tmp_path / "run" / "metrics.jsonl").rename(tmp_path / "uninterrupted.jsonl")
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-0000003")  # the run resumes after step 2
    resumed = run(tmp_path, rec_data, task=HALF, **options, **{"trainer.steps": 3})
    assert resumed[-1]["step"] == 3 and resumed[-1]["kl_coef"] == pytest.approx(rows[2]["kl_coef"], rel=1e-9)


def test_the_adaptive_entropy_coefficient_resumes_where_it_was(tmp_path, rec_data, tiny_qwen25):
    """algo.entropy_target: a run resumed at step 2 applies at step 3 the coefficient the
    uninterrupted run applied (moved by the delta at every optimizer step, not restarted)."""
    options = {
        "algo.entropy_coef": 0.01, "algo.entropy_target": 100.0, "algo.entropy_coef_delta": 0.02,
        "algo.mini_batches": 2, "trainer.save_every": 2, "trainer.steps": 3,
    }  # fmt: skip
    rows = run(tmp_path, rec_data, **options)
    assert [r["entropy_coef"] for r in rows] == pytest.approx([0.015, 0.06, 0.1])  # 0, 0.03 | 0.05, 0.07 | ...
    (tmp_path / "run" / "metrics.jsonl").rename(tmp_path / "uninterrupted.jsonl")
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-0000003")  # the run resumes after step 2
    resumed = run(tmp_path, rec_data, **options)
    assert resumed[-1]["step"] == 3 and resumed[-1]["entropy_coef"] == pytest.approx(rows[2]["entropy_coef"])


@pytest.mark.parametrize("mixed", [True, False], ids=["among the sampled rows", "in a call of their own"])
def test_remax_takes_each_prompts_greedy_completions_reward_as_its_baseline(
    tmp_path, rec_data, tiny_qwen25, monkeypatch, mixed
):
    """algo.advantage=remax: each group's baseline is the reward of its prompt's greedy
    completion under the step's policy (decoded again here by a fresh engine from the starting
    model and scored by the task, overlong penalty included), and the advantages the update gets
    are the rewards less it (EasyR1's and verl's ReMax). The engine decodes the greedy rows among
    the sampled ones where it can (`mixes_greedy`), else in a call of their own."""
    import vlrl.trainer.rl as rl
    from vlrl.algos.shaping import overlong_penalty
    from vlrl.config import ModelConfig
    from vlrl.models.loading import load_model, load_processor
    from vlrl.rollout.hf import HFEngine
    from vlrl.tasking.scoring import score

    calls = []
    real_generate = HFEngine.generate
    monkeypatch.setattr(HFEngine, "mixes_greedy", mixed)
    monkeypatch.setattr(
        HFEngine, "generate", lambda self, p, params, *a: calls.append(params) or real_generate(self, p, params, *a)
    )

    seen, given = [], []
    real_advantages, real_update = rl.RLTrainer.step_advantages, rl.RLTrainer.update
    monkeypatch.setattr(
        rl.RLTrainer,
        "step_advantages",
        lambda self, groups, batch: seen.append(groups) or real_advantages(self, groups, batch),
    )
    monkeypatch.setattr(
        rl.RLTrainer,
        "update",
        lambda self, batch, adv, *a, **k: given.append(adv) or real_update(self, batch, adv, *a, **k),
    )
    options = {"algo.advantage": "remax", "algo.overlong_buffer": 6, "algo.overlong_penalty": 0.5, "trainer.steps": 1}
    rows = run(tmp_path, rec_data, **options)
    (groups,) = seen
    asked = [(p.n, p.greedy, p.temperature) for p in calls]
    assert asked == ([(5, 1, 1.0)] if mixed else [(4, 0, 1.0), (1, 0, 0.0)])  # G = 4
    assert [len(g.completions) for g in groups] == [4] * len(groups)  # the greedy rows are not the group's
    cfg = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=50176)
    processor = load_processor(cfg)
    engine = HFEngine(load_model(cfg).eval(), processor.tokenizer)
    greedy = engine.generate([g.prompt for g in groups], SamplingParams(n=1, max_new_tokens=10, temperature=0.0))
    for group, generation in zip(groups, greedy, strict=True):
        completion = generation.completions[0]
        expected = score(group.task, [group.prompt.prefill + completion.text], [group.sample]).total[0]
        expected += float(overlong_penalty(torch.tensor([len(completion.token_ids)]), 10, 6, 0.5)[0])
        assert group.baseline == pytest.approx(expected)
    rewards = torch.stack([g.reward for g in groups])
    baselines = torch.tensor([g.baseline for g in groups])
    torch.testing.assert_close(given[0], (rewards - baselines[:, None]).flatten())
    assert rows[0]["greedy_reward"] == pytest.approx(float(baselines.mean()))
