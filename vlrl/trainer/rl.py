"""The RL loop: rollout, reward, advantage, update, log — read it top to bottom in `train`."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from rich.console import Console

from vlrl.algos.advantages import ADVANTAGES
from vlrl.algos.losses import KL_ESTIMATORS, clipped_surrogate, token_weights
from vlrl.config import Config, ConfigError, to_dict
from vlrl.datasets import load_task_split
from vlrl.modeling import checkpoint_path, load_model, load_processor
from vlrl.policy import completion_logprobs
from vlrl.prompting import Prompt, collate, render_prompt
from vlrl.registry import make_task
from vlrl.rollout import Completion, HFRollout, SamplingParams
from vlrl.sample import Sample
from vlrl.scoring import Scores, score
from vlrl.trainer.checkpoint import list_checkpoints, load_trainer_state, restore_rng, rng_state, save_checkpoint
from vlrl.trainer.loader import IndexStream
from vlrl.trainer.logs import JsonlLog, drop_steps_after, progress_bar


@dataclass
class RunResult:
    run_dir: Path
    metrics: Path
    checkpoint: Path | None
    steps_done: int


@dataclass
class RolloutBatch:
    """B prompts with G completions each; rows are prompt-major (row = b * G + g)."""

    samples: list[Sample]
    prompts: list[Prompt]
    completions: list[Completion]
    prompt_index: torch.Tensor  # (R,) which prompt each row continues
    completion_ids: torch.Tensor  # (R, T) right-padded
    completion_mask: torch.Tensor  # (R, T) 1 on real tokens


def pad_completions(completions: Sequence[Completion], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(1, max(len(c.token_ids) for c in completions))
    ids = torch.full((len(completions), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(completions), length), dtype=torch.float32)
    for i, c in enumerate(completions):
        ids[i, : len(c.token_ids)] = torch.tensor(c.token_ids, dtype=torch.long)
        mask[i, : len(c.token_ids)] = 1.0
    return ids, mask


def micro_batches(
    prompt_index: Sequence[int], prompt_lengths: Sequence[int], row_lengths: Sequence[int], token_budget: int
) -> list[list[int]]:
    """Rows grouped into micro-batches whose padded size (prompts x longest prompt + rows x
    longest completion) stays within `token_budget`; rows of one prompt stay together when
    they fit, so its prefix is computed once. A single row always forms a micro-batch."""
    batches: list[list[int]] = []
    rows: list[int] = []
    prompts: set[int] = set()
    longest_prompt = longest_row = 0
    for row, (p, length) in enumerate(zip(prompt_index, row_lengths, strict=True)):
        new_prompts = prompts | {p}
        new_longest_prompt = max(longest_prompt, prompt_lengths[p])
        new_longest_row = max(longest_row, length)
        cost = len(new_prompts) * new_longest_prompt + (len(rows) + 1) * new_longest_row
        if rows and cost > token_budget:
            batches.append(rows)
            rows, prompts, longest_prompt, longest_row = [], set(), 0, 0
            new_prompts, new_longest_prompt, new_longest_row = {p}, prompt_lengths[p], length
        rows.append(row)
        prompts, longest_prompt, longest_row = new_prompts, new_longest_prompt, new_longest_row
    if rows:
        batches.append(rows)
    return batches


def lr_factor(step: int, cfg: Config) -> float:
    """Multiplier of trainer.lr at optimizer step `step` (0-based): warmup, then the schedule."""
    t = cfg.trainer
    if step < t.warmup_steps:
        return (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
    if t.lr_schedule == "linear":
        return max(0.0, 1.0 - progress)
    if t.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return 1.0


def rollout(
    engine: HFRollout, processor, task, samples: list[Sample], cfg: Config, generator: torch.Generator
) -> RolloutBatch:
    prompts = [render_prompt(processor, task.messages(s), s, cfg.model.min_pixels, cfg.model.max_pixels) for s in samples]
    params = SamplingParams(
        n=cfg.rollout.num_generations,
        max_new_tokens=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
    )
    groups = engine.generate(prompts, params, generator)
    completions = [c for group in groups for c in group]
    ids, mask = pad_completions(completions, engine.pad_id)
    prompt_index = torch.arange(len(samples)).repeat_interleave(cfg.rollout.num_generations)
    return RolloutBatch(samples, prompts, completions, prompt_index, ids, mask)


def update_policy(
    model: torch.nn.Module,
    reference: torch.nn.Module | None,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    cfg: Config,
    optimizer: torch.optim.Optimizer,
    pad_id: int,
) -> tuple[dict[str, float], bool]:
    """One optimizer step on the batch, in token-budgeted micro-batches. Returns (stats, applied):
    the step is skipped (not applied) when the loss or the gradient is not finite."""
    device = next(model.parameters()).device
    algo = cfg.algo
    weights = token_weights(batch.completion_mask, algo.aggregation, cfg.rollout.max_new_tokens)
    lengths = batch.completion_mask.sum(dim=1).long().tolist()
    plan = micro_batches(
        batch.prompt_index.tolist(), [len(p) for p in batch.prompts], lengths, cfg.trainer.token_budget
    )
    epsilon_high = algo.epsilon if algo.epsilon_high is None else algo.epsilon_high
    sums: dict[str, float] = defaultdict(float)
    optimizer.zero_grad(set_to_none=True)
    for rows in plan:
        rows_t = torch.tensor(rows)
        owners = batch.prompt_index[rows_t]
        prompt_ids = sorted(set(owners.tolist()))
        local = torch.tensor([prompt_ids.index(p) for p in owners.tolist()], device=device)
        prompts = collate([batch.prompts[p] for p in prompt_ids], pad_id).to(device)
        width = max(1, max(lengths[r] for r in rows))
        ids = batch.completion_ids[rows_t, :width].to(device)
        mask = batch.completion_mask[rows_t, :width].to(device)

        logp, token_entropy = completion_logprobs(
            model, prompts, local, ids, mask, cfg.rollout.temperature, with_entropy=True
        )
        old_logp = logp.detach()  # one update per rollout: the policy has not moved since sampling
        per_token, clipped = clipped_surrogate(logp, old_logp, advantages[rows_t].to(device), algo.epsilon, epsilon_high)
        if reference is not None:
            with torch.no_grad():
                ref_logp, _ = completion_logprobs(reference, prompts, local, ids, mask, cfg.rollout.temperature)
            kl = KL_ESTIMATORS[algo.kl_estimator](logp, ref_logp)
            per_token = per_token + algo.beta * kl
            sums["kl"] += float((kl.detach() * mask).sum())
        loss = (per_token * weights[rows_t, :width].to(device)).sum()
        loss.backward()
        sums["loss"] += float(loss.detach())
        sums["clip_frac"] += float((clipped.float() * mask).sum())
        sums["entropy"] += float((token_entropy * mask).sum())
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.trainer.max_grad_norm))
    applied = math.isfinite(sums["loss"]) and math.isfinite(grad_norm)
    if applied:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    n_tokens = float(batch.completion_mask.sum().clamp(min=1.0))
    stats = {
        "loss": sums["loss"],
        "grad_norm": grad_norm,
        "clip_frac": sums["clip_frac"] / n_tokens,
        "entropy": sums["entropy"] / n_tokens,
        "micro_batches": float(len(plan)),
    }
    if reference is not None:
        stats["kl"] = sums["kl"] / n_tokens
    return stats, applied


def step_metrics(scores: Scores, rewards: torch.Tensor, advantages: torch.Tensor, batch: RolloutBatch) -> dict[str, float]:
    lengths = batch.completion_mask.sum(dim=1)
    metrics = {
        "reward": float(rewards.mean()),
        "reward_std": float(rewards.std(dim=1).mean()) if rewards.shape[1] > 1 else 0.0,
        "frac_groups_zero_std": float((rewards.std(dim=1) == 0).float().mean()) if rewards.shape[1] > 1 else 1.0,
        "advantage_abs": float(advantages.abs().mean()),
        "completion_length": float(lengths.mean()),
        "completion_length_max": float(lengths.max()),
        "truncated_frac": sum(c.truncated for c in batch.completions) / len(batch.completions),
    }
    for name, values in scores.components.items():
        metrics[f"reward/{name}"] = sum(values) / len(values)
    for name, count in scores.failures.items():
        metrics[f"reward_failures/{name}"] = float(count)
    return metrics


def train(cfg: Config, console: Console | None = None) -> RunResult:
    console = console or Console()
    t = cfg.trainer
    run_dir = Path(t.output_dir)
    checkpoints_dir = run_dir / "checkpoints"
    resume_from = _resume_checkpoint(cfg, checkpoints_dir)

    # -- setup: task, data, model, optimizer (config errors surface before any model loads) ----
    task = make_task(cfg.task)
    base_path = checkpoint_path(cfg.model)
    if cfg.rollout.engine != "hf":
        raise ConfigError(f"config: rollout.engine {cfg.rollout.engine!r} is not available in this build; use 'hf'")
    split = load_task_split(task, cfg, "train", console)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    if split.errors:
        with open(run_dir / "skipped_records.txt", "w") as handle:
            handle.writelines(f"{err}\n" for err in split.errors)

    torch.manual_seed(t.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    processor = load_processor(cfg.model, base_path)
    model = load_model(cfg.model, str(resume_from) if resume_from else None, device).eval()
    reference = load_model(cfg.model, base_path, device).eval().requires_grad_(False) if cfg.algo.beta > 0 else None
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=t.lr, weight_decay=t.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    engine = HFRollout(model, processor.tokenizer)
    stream = IndexStream(len(split.samples), t.seed)
    generator = torch.Generator(device=device).manual_seed(t.seed)
    start, consecutive_nonfinite, skipped_updates = 0, 0, 0
    if resume_from:
        state = load_trainer_state(resume_from)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        stream.load_state_dict(state["stream"])
        restore_rng(state["rng"], generator)
        start, consecutive_nonfinite, skipped_updates = state["step"], state["consecutive_nonfinite"], state["skipped_updates"]
        console.print(f"resumed from {resume_from} (step {start})")
    metrics_path = run_dir / "metrics.jsonl"
    drop_steps_after(metrics_path, start)
    drop_steps_after(run_dir / "samples.jsonl", start)
    metrics_log, samples_log = JsonlLog(metrics_path), JsonlLog(run_dir / "samples.jsonl")
    last_checkpoint = resume_from
    G = cfg.rollout.num_generations

    with progress_bar(console, t.progress) as progress:
        bar = progress.add_task("train", total=t.steps, completed=start, status="")
        for step in range(start + 1, t.steps + 1):
            t0 = time.perf_counter()
            # 1. rollout: B prompts, G completions each
            samples = [split.samples[i] for i in stream.take(t.prompts_per_step)]
            batch = rollout(engine, processor, task, samples, cfg, generator)
            t1 = time.perf_counter()
            # 2. reward: every component kept, weighted sum is the reward
            group_samples = [s for s in samples for _ in range(G)]
            scores = score(task, [c.text for c in batch.completions], group_samples)
            rewards = torch.tensor(scores.total, dtype=torch.float32).view(len(samples), G)
            # 3. advantage, per group
            advantages = ADVANTAGES[cfg.algo.advantage](rewards, cfg.algo.std_eps).view(-1)
            t2 = time.perf_counter()
            # 4. update
            stats, applied = update_policy(model, reference, batch, advantages, cfg, optimizer, engine.pad_id)
            if applied:  # the schedule counts optimizer steps taken
                scheduler.step()
            consecutive_nonfinite = 0 if applied else consecutive_nonfinite + 1
            skipped_updates += 0 if applied else 1
            t3 = time.perf_counter()
            # 5. log and checkpoint
            metrics = {"step": step, **step_metrics(scores, rewards, advantages, batch), **stats}
            metrics.update(
                lr=optimizer.param_groups[0]["lr"],
                skipped_updates=skipped_updates,
                time_rollout=t1 - t0,
                time_reward=t2 - t1,
                time_update=t3 - t2,
                time_step=t3 - t0,
            )
            if step == 1:
                metrics["data_skipped_records"] = len(split.errors)
            metrics_log.write(metrics)
            if step % t.log_samples_every == 0 or step == 1:
                for i, completion in enumerate(batch.completions[:G]):
                    samples_log.write(
                        {"step": step, "id": samples[0].id, "completion": completion.text, "rewards": scores.row(i), "reward": scores.total[i]}
                    )
            progress.update(bar, advance=1, status=f"reward {metrics['reward']:.3f}")
            if consecutive_nonfinite >= t.max_consecutive_nonfinite:
                metrics_log.close()
                raise RuntimeError(
                    f"stopped at step {step}: {consecutive_nonfinite} consecutive updates had a non-finite loss or "
                    f"gradient (trainer.max_consecutive_nonfinite={t.max_consecutive_nonfinite}); no NaN weights were "
                    f"written; last good checkpoint: {last_checkpoint}"
                )
            if step % t.save_every == 0 or step == t.steps:
                state = {
                    "step": step,
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "stream": stream.state_dict(),
                    "rng": rng_state(generator),
                    "consecutive_nonfinite": consecutive_nonfinite,
                    "skipped_updates": skipped_updates,
                }
                last_checkpoint = save_checkpoint(checkpoints_dir, step, model, processor, state, t.keep_last)
    metrics_log.close()
    samples_log.close()
    return RunResult(run_dir, metrics_path, last_checkpoint, t.steps)


def _resume_checkpoint(cfg: Config, checkpoints_dir: Path) -> Path | None:
    resume = cfg.trainer.resume
    if resume == "":
        if list_checkpoints(checkpoints_dir):
            raise ConfigError(
                f"config: trainer.output_dir {cfg.trainer.output_dir} already holds checkpoints; "
                "set trainer.resume=auto to continue that run, or choose another output_dir"
            )
        return None
    if resume == "auto":
        found = list_checkpoints(checkpoints_dir)
        return found[-1] if found else None
    path = Path(resume)
    load_trainer_state(path)  # fails early, naming the path, if it is not a complete checkpoint
    return path
