"""The RL loop of the GRPO family: rollout, reward, advantage, update, log — top to bottom in `train`."""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from rich.console import Console

from vlrl.algos.advantages import advantages as compute_advantages
from vlrl.algos.losses import KL_ESTIMATORS, high_entropy_mask, kl_k3, policy_loss, rollout_importance_weights, token_weights
from vlrl.algos.shaping import length_bonus, overlong_penalty, temporal_bonus, trust_bonus
from vlrl.config import Config, ConfigError
from vlrl.datasets import load_task_split, task_sources
from vlrl.eval.harness import evaluate
from vlrl.modeling import core_model, family_of_model, load_model
from vlrl.policy import SamplingFilter, TokenLogprobs, completion_logprobs, completion_rows
from vlrl.prompting import Prompt, UnusableSample, collate, render_prompt, render_usable
from vlrl.rollout import Completion, SamplingParams, make_engine
from vlrl.rollout.base import banned_token_ids
from vlrl.sample import Sample
from vlrl.scoring import Scores, score
from vlrl.task import Task
from vlrl.trainer.distributed import Processes
from vlrl.trainer.run import Run, RunResult
from vlrl.trainer.thinking import make_scorer
from vlrl.vision.video import Video


@dataclass
class Group:
    """One prompt's G completions, scored: the unit that advantages are computed over."""

    task: Task
    sample: Sample
    prompt: Prompt
    completions: list[Completion]
    scores: Scores
    reward: torch.Tensor  # (G,) the task's weighted reward plus shaping terms
    correct: torch.Tensor  # (G,) bool, by algo.accuracy_reward >= (or >, accuracy_strict) algo.accuracy_threshold
    shaping: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (G,) terms added to the reward


@dataclass
class RolloutBatch:
    """Groups flattened into rows, prompt-major (row = group * G + g)."""

    groups: list[Group]
    prompt_index: torch.Tensor  # (R,) which group's prompt each row continues
    completion_ids: torch.Tensor  # (R, T) right-padded
    completion_mask: torch.Tensor  # (R, T) 1 on real tokens
    rollout_logprobs: torch.Tensor | None  # (R, T) sampled tokens' log-probs from the engine, if it gives them
    entropy: torch.Tensor | None  # (R, T) the engine's distributions' entropy, if it gives them
    truncated: torch.Tensor  # (R,) hit max_new_tokens without stopping

    @classmethod
    def from_groups(cls, groups: list[Group], pad_id: int) -> RolloutBatch:
        r = completion_rows(groups, pad_id)
        return cls(groups, r.rows, r.ids, r.mask, r.logprobs, r.entropies, r.truncated)

    @property
    def prompts(self) -> list[Prompt]:
        return [g.prompt for g in self.groups]

    def lengths(self) -> list[int]:
        return self.completion_mask.sum(dim=1).long().tolist()


def micro_batches(
    prompt_index: Sequence[int], prompt_lengths: Sequence[int], row_lengths: Sequence[int], token_budget: int
) -> list[list[int]]:
    """Positions grouped into micro-batches whose padded size (prompts x longest prompt + rows x
    longest completion) stays within `token_budget`; rows of one prompt stay together when
    they fit, so its prefix is computed once. A single row always forms a micro-batch."""
    batches: list[list[int]] = []
    rows: list[int] = []
    prompts: set[int] = set()
    longest_prompt = longest_row = 0
    for position, (p, length) in enumerate(zip(prompt_index, row_lengths, strict=True)):
        new_prompts = prompts | {p}
        new_longest_prompt = max(longest_prompt, prompt_lengths[p])
        new_longest_row = max(longest_row, length)
        cost = len(new_prompts) * new_longest_prompt + (len(rows) + 1) * new_longest_row
        if rows and cost > token_budget:
            batches.append(rows)
            rows, prompts, longest_prompt, longest_row = [], set(), 0, 0
            new_prompts, new_longest_prompt, new_longest_row = {p}, prompt_lengths[p], length
        rows.append(position)
        prompts, longest_prompt, longest_row = new_prompts, new_longest_prompt, new_longest_row
    if rows:
        batches.append(rows)
    return batches


def rows_logprobs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    rows: list[int],
    temperature: float,
    pad_id: int,
    device: torch.device,
    with_entropy: bool = False,
    sampler: SamplingFilter | None = None,
) -> tuple[TokenLogprobs, int]:
    """Log-probs (len(rows), width) of the given rows' completions, prefixes shared per prompt
    (with each step's entropy, and the sampling distribution's log-probs, when asked), computed
    on `device` (the run's: under FSDP2's CPU offload the parameters are stored on the CPU)."""
    rows_t = torch.tensor(rows)
    owners = batch.prompt_index[rows_t].tolist()
    prompt_ids = sorted(set(owners))
    local = torch.tensor([prompt_ids.index(p) for p in owners], device=device)
    prompts = collate([batch.groups[p].prompt for p in prompt_ids], pad_id).to(device)
    width = max(1, int(batch.completion_mask[rows_t].sum(dim=1).max()))
    ids = batch.completion_ids[rows_t, :width].to(device)
    mask = batch.completion_mask[rows_t, :width].to(device)
    return completion_logprobs(model, prompts, local, ids, mask, temperature, with_entropy, sampler), width


class RLTrainer:
    """Holds what the loop needs; `train` is the loop."""

    def __init__(self, cfg: Config, console: Console):
        self.cfg = cfg
        self.console = console
        procs = Processes.from_env()
        with procs.main_first():  # process 0 writes missing synthetic data, the others read it
            self.sources = task_sources(cfg, console)
        accuracy = cfg.algo.accuracy_reward
        for source in self.sources:
            if accuracy and accuracy not in source.task.reward_weights:
                raise ConfigError(
                    f"config: algo.accuracy_reward {accuracy!r} is not one of task {source.task.name!r}'s rewards: "
                    f"{', '.join(source.task.reward_weights)}"
                )
        self.run = Run(cfg, cfg.trainer, "trainer", self.sources, console)
        # beta = 0: no reference at all; LoRA: the policy with its adapters disabled is the reference.
        self.reference = (
            self.run.strategy.wrap_reference(
                load_model(cfg.model, self.run.base_path, self.run.strategy.load_device).eval().requires_grad_(False)
            )
            if cfg.algo.beta > 0 and cfg.model.lora.r == 0
            else None
        )
        self.samples_with_policy = False  # the engine asked for the policy: sampling runs inside strategy.gathered()

        def policy() -> tuple[torch.nn.Module, torch.device]:
            self.samples_with_policy = True
            return self.run.model, self.run.device

        self.engine = make_engine(cfg.rollout.engine, cfg, self.run.processor, self.run.base_path, policy)
        r = cfg.rollout
        vocab = core_model(self.run.model).config.get_text_config().vocab_size
        banned = torch.zeros(vocab, dtype=torch.bool)
        banned[banned_token_ids(self.run.processor.tokenizer, vocab, family_of_model(self.run.model).vision_tokens)] = True
        self.sampler = SamplingFilter(banned, r.top_k, r.top_p)  # what every engine draws from, as the trainer computes it
        if not self.engine.shares_policy:  # the run's weights: resumed, merged, rounded
            self.engine.sync_weights(self.run.strategy.full_weights())
            if cfg.algo.num_iterations > 1 or cfg.algo.mini_batches > 1:
                console.print(f"rollout engine {self.engine.name}: old log-probs come from a trainer forward (algo.old_logprobs=recompute)")
        if cfg.algo.top_entropy_fraction < 1 and not self.engine.gives_entropy:
            console.print(
                f"rollout engine {self.engine.name} gives no entropies: algo.top_entropy_fraction selects tokens by "
                "the entropy of a trainer forward (one more forward per step)"
            )
        self.thinking = make_scorer(cfg.algo.trust, cfg.model)
        self.sampling = SamplingParams(r.num_generations, r.max_new_tokens, r.temperature, r.top_p, r.top_k)
        self.unusable: list[UnusableSample] = []  # this step's samples left out: media that fail, prompts refused
        self.held_out: list[tuple[Task, str, list[Sample]]] = []
        if cfg.eval.every > 0 and procs.main:  # held-out splits, evaluated during training by process 0
            for source in self.sources:
                samples = load_task_split(source.task, cfg, "eval", console, path=source.eval_path or None).samples
                self.held_out.append((source.task, source.eval_path, samples[: cfg.eval.limit or None]))

    # -- 1-2. rollout and reward ---------------------------------------------------------------
    def sampling_weights(self) -> contextlib.AbstractContextManager[None]:
        """Where the engine samples: with the policy's weights gathered, if it samples with the
        policy (every process enters it at the same time)."""
        return self.run.strategy.gathered() if self.samples_with_policy else contextlib.nullcontext()

    def render(self, task: Task, sample: Sample, decoded: dict[str, Video] | None = None) -> Prompt:
        return render_prompt(self.run.processor, task.messages(sample), sample, self.cfg.model, decoded)

    def accuracy(self, scores: Scores) -> torch.Tensor:
        """The reward that says how right each completion is: algo.accuracy_reward, or the total."""
        name = self.cfg.algo.accuracy_reward
        return torch.tensor(scores.components[name] if name else scores.total, dtype=torch.float32)

    def generate_groups(self, items: list[tuple[Task, Sample]], step: int) -> list[Group]:
        """Render, sample G completions per prompt, score them, add the configured shaping terms."""
        algo, G = self.cfg.algo, self.cfg.rollout.num_generations
        decoded: dict[str, Video] = {}  # this step's videos, decoded once for both T-GRPO renders
        items, prompts, unusable = render_usable(items, lambda item: self.render(*item, decoded))
        self.unusable += unusable  # left out of the step: their media failed to decode
        if not items:
            return []
        generations = self.engine.generate(prompts, self.sampling, self.run.generator)
        shuffled_accuracy = self.temporal_contrast(items, decoded) if algo.temporal.enabled else [None] * len(items)
        groups = []
        for (task, sample), prompt, generation, shuffled in zip(items, prompts, generations, shuffled_accuracy, strict=True):
            if generation.rejected:  # left out of the step, as a sample whose media fail
                self.unusable.append(UnusableSample(sample.source, generation.rejected))
                continue
            group = generation.completions
            texts = [c.text for c in group]
            scores = score(task, texts, [sample] * G)
            reward = torch.tensor(scores.total, dtype=torch.float32)
            accuracy = self.accuracy(scores)
            correct = accuracy > algo.accuracy_threshold if algo.accuracy_strict else accuracy >= algo.accuracy_threshold
            lengths = torch.tensor([len(c.token_ids) for c in group])
            shaping: dict[str, torch.Tensor] = {}
            if algo.overlong_buffer > 0:
                shaping["overlong"] = overlong_penalty(
                    lengths, self.cfg.rollout.max_new_tokens, algo.overlong_buffer, algo.overlong_penalty
                )
            if self.thinking is not None:
                thinking = torch.tensor(self.thinking([sample] * G, texts))
                shaping["thinking"] = trust_bonus(thinking, accuracy, correct, algo.trust, step)
            if shuffled is not None:
                shaping["temporal"] = temporal_bonus(accuracy, shuffled, correct, algo.temporal.alpha, algo.temporal.mu)
            if algo.length_control.enabled:
                length = algo.length_control
                shaping["length"] = length_bonus(lengths, correct, length.min_tokens, length.max_tokens, length.bonus)
            for term in shaping.values():
                reward = reward + term
            groups.append(Group(task, sample, prompt, group, scores, reward, correct, shaping))
        return groups

    def temporal_contrast(self, items: list[tuple[Task, Sample]], decoded: dict[str, Video]) -> list[torch.Tensor | None]:
        """T-GRPO: the accuracy of a few completions on each prompt's shuffled-frame variant."""
        variants = [(i, task, task.temporal_variant(sample)) for i, (task, sample) in enumerate(items)]
        present = [(i, task, v) for i, task, v in variants if v is not None]
        out: list[torch.Tensor | None] = [None] * len(items)
        if not present:
            return out
        n = max(1, int(self.cfg.algo.temporal.shuffled_fraction * self.cfg.rollout.num_generations))
        params = SamplingParams(n, self.sampling.max_new_tokens, self.sampling.temperature, self.sampling.top_p, self.sampling.top_k)
        generations = self.engine.generate([self.render(task, v, decoded) for _, task, v in present], params, self.run.generator)
        for (i, task, variant), generation in zip(present, generations, strict=True):
            if not generation.rejected:  # else no contrast for this prompt (its ordered group is reported if refused)
                out[i] = self.accuracy(score(task, [c.text for c in generation.completions], [variant] * n))
        return out


    def draw(self, n: int) -> list[tuple[Task, Sample]]:
        """This process's share of the next n prompts of the run's task mixture."""
        return [(self.sources[s].task, self.sources[s].train.samples[i]) for s, i in self.run.take(n)]

    def collect(self, step: int) -> tuple[list[Group], int]:
        """B scored groups. With DAPO's dynamic sampling, groups whose rewards are all equal
        (zero advantage: nothing to learn) are dropped and the batch is refilled with new prompts."""
        algo, procs = self.cfg.algo, self.run.procs
        B = self.cfg.trainer.prompts_per_step // procs.world  # this process's share
        groups: list[Group] = []
        rounds = 0
        while rounds < (algo.max_sampling_rounds if algo.dynamic_sampling else 1):
            missing = B - len(groups)
            # Every process draws what the neediest one misses, so their data streams stay in step.
            most = procs.max(missing)
            if most == 0:
                break
            rounds += 1
            items = self.draw(most * procs.world)[:missing]
            new = self.generate_groups(items, step) if items else []
            if algo.dynamic_sampling:
                informative = [g for g in new if bool(g.reward.std() > 0)]
                if not groups and not informative and rounds == algo.max_sampling_rounds:
                    informative = new  # nothing informative at all: train on what there is
                new = informative
            groups.extend(new)
        return groups, rounds

    # -- 4. update -------------------------------------------------------------------------------
    def logprobs_no_grad(
        self, model: torch.nn.Module, batch: RolloutBatch, with_entropy: bool = False, sampled: bool = False
    ) -> TokenLogprobs:
        """(R, T) log-probs of every row under `model` without gradient (reference, old policy),
        with each step's entropy and the sampling distribution's log-probs when asked."""
        out = torch.zeros_like(batch.completion_mask)
        ent = torch.zeros_like(batch.completion_mask) if with_entropy else None
        samp = torch.zeros_like(batch.completion_mask) if sampled else None
        all_rows = list(range(len(batch.prompt_index)))
        with torch.no_grad():
            for positions in self.run.micro_batches(self.plan(batch, all_rows)):
                if not positions:  # this process has fewer micro-batches than another (FSDP2)
                    self.run.idle_pass(model, backward=False)
                    continue
                rows = [all_rows[p] for p in positions]
                stats, width = rows_logprobs(
                    model, batch, rows, self.cfg.rollout.temperature, self.run.pad_id, self.run.device, with_entropy,
                    self.sampler if sampled else None,
                )  # fmt: skip
                index = torch.tensor(rows)
                out[index, :width] = stats.logp.float().cpu()
                if ent is not None:
                    ent[index, :width] = stats.entropy.float().cpu()
                if samp is not None:
                    samp[index, :width] = stats.sampled.float().cpu()
        return TokenLogprobs(out, ent, samp)

    def reference_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        if self.reference is not None:
            return self.logprobs_no_grad(self.reference, batch).logp
        with self.run.model.disable_adapter():
            return self.logprobs_no_grad(self.run.model, batch).logp

    def plan(self, batch: RolloutBatch, rows: list[int]) -> list[list[int]]:
        lengths = batch.lengths()
        return micro_batches(
            [int(batch.prompt_index[r]) for r in rows],
            [len(p) for p in batch.prompts],
            [lengths[r] for r in rows],
            self.cfg.trainer.token_budget,
        )

    def update(self, batch: RolloutBatch, advantages: torch.Tensor) -> tuple[dict[str, float], int]:
        """num_iterations passes over the batch, each in mini_batches optimizer steps of whole
        groups, each step in token-budgeted micro-batches. Returns stats and skipped steps.

        Old log-probs (the policy that sampled, for the ratio) are the detached current ones
        while the policy has not moved since the rollout; after it moved, the rollout's when
        the engine shares the policy, else a trainer forward made before the first update
        (`algo.old_logprobs=recompute` forces that forward). An engine that does not share the
        policy has its sampling log-probs corrected by importance weights and compared with
        the trainer's (`rollout/*` metrics)."""
        algo, run = self.cfg.algo, self.run
        device = run.device
        loss_mask = batch.completion_mask.clone()
        if algo.mask_truncated:
            loss_mask[batch.truncated] = 0.0
        foreign = not self.engine.shares_policy
        policy_moves = algo.num_iterations > 1 or algo.mini_batches > 1
        recompute = policy_moves and (algo.old_logprobs == "recompute" or foreign)
        entropy_from_trainer = algo.top_entropy_fraction < 1 and batch.entropy is None
        # A foreign engine reports log-probs of what it draws from (bans, top-k/p renormalized):
        # the trainer computes the same quantity to compare and correct them with.
        sampler = self.sampler if foreign else None
        old = old_sampled = trainer_entropy = None
        if recompute or entropy_from_trainer:
            before = self.logprobs_no_grad(run.model, batch, entropy_from_trainer, sampled=recompute and foreign)
            old, old_sampled, trainer_entropy = (before.logp if recompute else None), before.sampled, before.entropy
        elif policy_moves:
            old = batch.rollout_logprobs
        # The old log-probs are the trainer's own unless they were taken from the rollout.
        old_is_trainers = old is None or recompute
        correct_rollout = foreign and algo.rollout_correction.enabled and batch.rollout_logprobs is not None
        entropy = batch.entropy if batch.entropy is not None else trainer_entropy
        selected = (
            high_entropy_mask(entropy, loss_mask, algo.top_entropy_fraction).float()
            if algo.top_entropy_fraction < 1
            else None
        )
        ref = self.reference_logprobs(batch) if algo.beta > 0 else None

        sums: dict[str, float] = defaultdict(float)
        skipped = 0
        group_rows = [[r for r in range(len(batch.prompt_index)) if int(batch.prompt_index[r]) == g] for g in range(len(batch.groups))]
        for iteration in range(algo.num_iterations):
            for chunk in np.array_split(np.arange(len(batch.groups)), algo.mini_batches):
                rows = [r for g in chunk for r in group_rows[g]]
                rows_t = torch.tensor(rows, dtype=torch.long)
                mask_rows = loss_mask[rows_t]
                weights = token_weights(
                    mask_rows,
                    algo.aggregation,
                    self.cfg.rollout.max_new_tokens,
                    rows=run.procs.mean(len(rows)),
                    tokens=run.procs.mean(float(mask_rows.sum())),
                )
                loss_total = 0.0
                for positions in run.micro_batches(self.plan(batch, rows)):
                    if not positions:  # this process has fewer micro-batches than another (FSDP2)
                        run.idle_pass(run.model, backward=True)
                        continue
                    micro = rows_t[positions]
                    stats, width = rows_logprobs(
                        run.model, batch, micro.tolist(), self.cfg.rollout.temperature, run.pad_id, device,
                        sampler=sampler if old is None else None,
                    )  # fmt: skip
                    logp = stats.logp
                    mask = loss_mask[micro, :width].to(device)
                    old_logp = logp.detach() if old is None else old[micro, :width].to(device)
                    terms = policy_loss(logp, old_logp, advantages[micro].to(device), mask, algo)
                    per_token = terms.per_token
                    if batch.rollout_logprobs is not None and old_is_trainers:
                        engine_logp = batch.rollout_logprobs[micro, :width].to(device)
                        # the trainer's value of what the engine reported, at the policy that sampled
                        if not foreign:
                            expected = old_logp
                        else:
                            expected = stats.sampled if old is None else old_sampled[micro, :width].to(device)
                        if iteration == 0:
                            real = batch.completion_mask[micro, :width].to(device)
                            diff = (expected - engine_logp).abs() * real
                            sums["mismatch_abs"] += float(diff.sum())
                            sums["mismatch_max"] = max(sums["mismatch_max"], float(diff.max()))
                            sums["mismatch_kl"] += float((kl_k3(engine_logp, expected) * real).sum())
                            sums["mismatch_tokens"] += float(real.sum())
                    if correct_rollout:
                        c = algo.rollout_correction
                        is_weights = rollout_importance_weights(
                            expected, engine_logp, mask, c.mode, c.clip_min, c.clip_max
                        )
                        per_token = per_token * is_weights
                        sums["is_weight"] += float((is_weights.expand_as(mask) * mask).sum())
                    if selected is not None:
                        per_token = per_token * selected[micro, :width].to(device)
                    if ref is not None:
                        kl = KL_ESTIMATORS[algo.kl_estimator](logp, ref[micro, :width].to(device))
                        per_token = per_token + algo.beta * kl
                        sums["kl"] += float((kl.detach() * mask).sum())
                    loss = (per_token * weights[positions, :width].to(device)).sum()
                    loss.backward()
                    loss_total += float(loss.detach())
                    sums["clip_low"] += float((terms.low_clipped.float() * mask).sum())
                    sums["clip_high"] += float((terms.high_clipped.float() * mask).sum())
                    sums["tokens"] += float(mask.sum())
                grad_norm, applied = run.optimizer_step(math.isfinite(loss_total))
                skipped += not applied
                sums["loss"] += loss_total
                sums["grad_norm"] += grad_norm
                sums["optimizer_steps"] += 1
        steps, tokens = sums["optimizer_steps"], max(1.0, sums["tokens"])
        stats = {
            "loss": sums["loss"] / steps,
            "grad_norm": sums["grad_norm"] / steps,
            "clip_low_frac": sums["clip_low"] / tokens,
            "clip_high_frac": sums["clip_high"] / tokens,
            "optimizer_steps": steps,
        }
        if ref is not None:
            stats["kl"] = sums["kl"] / tokens
        if sums["mismatch_tokens"]:
            n = sums["mismatch_tokens"]
            stats.update(
                {
                    "rollout/logp_diff": sums["mismatch_abs"] / n,
                    "rollout/logp_diff_max": sums["mismatch_max"],
                    "rollout/kl": sums["mismatch_kl"] / n,
                }
            )
        if correct_rollout:
            stats["rollout/is_weight"] = sums["is_weight"] / tokens
        if trainer_entropy is not None:
            stats["entropy"] = float((trainer_entropy * batch.completion_mask).sum() / batch.completion_mask.sum().clamp(min=1))
        return stats, skipped

    # -- 5. log ----------------------------------------------------------------------------------
    def step_metrics(self, groups: list[Group], batch: RolloutBatch, advantages: torch.Tensor) -> dict[str, float]:
        if not groups:  # every prompt of this process was skipped: nothing of its own to report
            return {}
        rewards = torch.stack([g.reward for g in groups])
        lengths = batch.completion_mask.sum(dim=1)
        metrics = {
            "reward_std": float(rewards.std(dim=1).mean()),
            "frac_groups_zero_std": float((rewards.std(dim=1) == 0).float().mean()),
            "advantage_abs": float(advantages.abs().mean()),
            "completion_length": float(lengths.mean()),
            "completion_length_max": float(lengths.max()),
            "truncated_frac": float(batch.truncated.float().mean()),
        }
        if batch.entropy is not None:
            metrics["entropy"] = float((batch.entropy * batch.completion_mask).sum() / batch.completion_mask.sum().clamp(min=1))
        metrics.update(reward_metrics(groups))
        if len(self.sources) > 1:  # a mixture: the same numbers per task
            for source in self.sources:
                mine = [g for g in groups if g.task is source.task]
                if mine:
                    metrics.update({f"{source.task.name}/{k}": v for k, v in reward_metrics(mine).items()})
        if self.thinking is not None:
            metrics["thinking_failures"] = float(self.thinking.failures)
        return metrics

    def evaluate_held_out(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for task, path, samples in self.held_out:
            result = evaluate(self.engine, self.run.processor, task, samples, self.cfg, path)
            prefix = f"eval/{task.name}/" if len(self.held_out) > 1 else "eval/"
            metrics.update({f"{prefix}{k}": v for k, v in result.metrics.items()})
            metrics[f"{prefix}skipped_samples"] = float(len(result.skipped))  # media that failed to decode
            metrics["time_eval"] = metrics.get("time_eval", 0.0) + result.seconds
        return metrics

    def train(self) -> RunResult:
        try:
            return self.loop()
        finally:
            self.engine.close()

    def loop(self) -> RunResult:
        cfg, run, t = self.cfg, self.run, self.cfg.trainer
        with run.stop_signals, run.logs.showing_progress("train", ("reward", "accuracy", "kl")):
            for step in range(run.step + 1, t.steps + 1):
                t0 = time.perf_counter()
                # 1-2. rollout and reward: B prompts (fewer if some media fail or the engine refuses
                # a prompt), G scored completions each
                self.unusable = []
                with self.sampling_weights():
                    groups, rounds = self.collect(step)
                self.engine.sleep()  # its memory is the update's until the next rollout
                t1 = time.perf_counter()
                # 3. advantages, per group
                advantages = torch.zeros(0)
                if groups:
                    rewards = torch.stack([g.reward for g in groups])
                    correct = torch.stack([g.correct for g in groups])
                    advantages = compute_advantages(rewards, correct, cfg.algo).view(-1)
                batch = RolloutBatch.from_groups(groups, run.pad_id)
                # 4. update (every process takes part, even one whose prompts were all skipped),
                # then the engine follows the new weights
                stats, skipped = self.update(batch, advantages)
                if not self.engine.shares_policy:
                    self.engine.sync_weights(run.strategy.full_weights())
                self.engine.wake()
                t2 = time.perf_counter()
                # 5. log and checkpoint
                metrics = {"step": step, **(self.step_metrics(groups, batch, advantages) if groups else {}), **stats}
                metrics["skipped_samples"] = run.report_unusable(step, self.unusable)
                metrics.update(
                    lr=run.optimizer.param_groups[0]["lr"],
                    skipped_updates=run.skipped_updates + skipped,
                    sampling_rounds=rounds,
                    time_rollout=t1 - t0,
                    time_update=t2 - t1,
                    time_step=t2 - t0,
                )
                if step == 1:
                    metrics["data_skipped_records"] = sum(len(s.train.errors) for s in self.sources)
                if run.device.type == "cuda":
                    metrics["gpu_peak_gb"] = torch.cuda.max_memory_allocated(run.device) / 2**30
                metrics = run.procs.mean_metrics(metrics)
                if cfg.eval.every > 0 and (step % cfg.eval.every == 0 or step == t.steps):
                    with self.sampling_weights():  # entered by every process; process 0 evaluates
                        metrics.update(self.evaluate_held_out())
                samples = []
                if groups and (step % t.log_samples_every == 0 or step == 1):
                    g = groups[0]
                    samples = [
                        {"id": g.sample.id, "completion": c.text, "rewards": g.scores.row(i), "reward": float(g.reward[i])}
                        for i, c in enumerate(g.completions)
                    ]
                run.logs.log(metrics, samples)  # metrics.jsonl, samples.jsonl, trackers, progress
                if run.end_step(step, skipped):
                    break
        return run.close()


def reward_metrics(groups: list[Group]) -> dict[str, float]:
    """Mean reward, accuracy, and each reward component and shaping term, over the groups."""
    out = {
        "reward": float(torch.cat([g.reward for g in groups]).mean()),
        "accuracy": float(torch.cat([g.correct for g in groups]).float().mean()),
    }
    for name in dict.fromkeys(k for g in groups for k in g.scores.components):
        values = [v for g in groups for v in g.scores.components.get(name, [])]
        out[f"reward/{name}"] = float(np.mean(values))
    for name in dict.fromkeys(k for g in groups for k in g.shaping):
        out[f"reward/{name}"] = float(torch.cat([g.shaping[name] for g in groups if name in g.shaping]).mean())
    return out


def train(cfg: Config, console: Console | None = None) -> RunResult:
    return RLTrainer(cfg, console or Console()).train()
