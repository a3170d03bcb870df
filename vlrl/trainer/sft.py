"""Cold-start SFT: teach the model the task's answer format (and answers) before RL.

The targets are the task's own ideal completions, rendered in the model's coordinate frame
(`Task.target`), so the cold start speaks exactly the language the rewards read. Same data,
config, checkpoints and resume as RL; the schedule lives under `sft.` in the config.
"""

from __future__ import annotations

import hashlib
import math
import time

import torch
from rich.console import Console

from vlrl.algos.losses import token_weights
from vlrl.config import Config, ModelConfig
from vlrl.models.batch import Prompt, collate
from vlrl.models.lora import adapters_dropping_out
from vlrl.models.policy import completion_logprobs
from vlrl.models.prompting import render_prompts, render_usable
from vlrl.parallel.distributed import Processes
from vlrl.tasking.sources import check_held_out, task_sources
from vlrl.trainer.batch import padded_tokens, padding_share, unpadded_tokens, update_micro_batches
from vlrl.trainer.run import Run, RunResult, base_model_path, finished_run


def target_ids(tokenizer, text: str, end: list[int] | None = None) -> list[int]:
    """The target's tokens followed by `end` (the end-of-turn token by default), so the model
    learns to stop; that token once, where the target ends with it already (Perception-R1
    counting's, which its format requires)."""
    end = end or [tokenizer.eos_token_id]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [*ids, *end[1:]] if ids and ids[-1] == end[0] else [*ids, *end]


def template_turn_end(processor, model: ModelConfig) -> list[int]:
    """The tokens the chat template writes after an assistant's answer (ChatML: `<|im_end|>`
    and a line break), which TRL's SFTTrainer trains as the completion's end; the end-of-turn
    token alone without a template (model.chat_template none)."""
    tokenizer = processor.tokenizer
    if model.chat_template == "none":
        return [tokenizer.eos_token_id]
    marker = "\x00answer\x00"
    messages = [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                {"role": "assistant", "content": [{"type": "text", "text": marker}]}]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False, **model.chat_template_kwargs)
    return tokenizer(text.rpartition(marker)[2], add_special_tokens=False)["input_ids"]


def after_prefill(target: str, prefill: str) -> str:
    """The target as the model goes on from what the chat template already wrote of the answer
    (`Prompt.prefill`): a target that opens with it (`<think>`, which Qwen3-VL-Thinking's and
    Qwen3.5's templates open for the model) is trained from there, not with the tag twice; any
    other target as it is."""
    for head in dict.fromkeys((prefill, prefill.strip())):
        if head and target.startswith(head):
            return target[len(head) :]
    return target


def dropout_seed(seed: int, step: int, rank: int) -> int:
    """The seed of a step's adapter dropout masks on one process: a function of the step, so
    that a resumed run draws what an uninterrupted one did."""
    digest = hashlib.sha256(f"{seed}:{step}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # under 2**63, what torch.manual_seed takes


def backward_targets(
    run: Run,
    prompts: list[Prompt],
    ids: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    lengths: list[int],
    plan: list[list[int]],
) -> float:
    """Backward of the negative log-likelihood of this process's targets (`ids` where `mask`,
    each token weighted), micro-batch by micro-batch as `plan` groups the rows; its value."""
    total = 0.0
    for rows in run.strategy.micro_batches(plan):
        if not rows:  # this process has fewer micro-batches than another (FSDP2)
            run.strategy.idle_pass(run.model, run.pad_id, backward=True)
            continue
        rows_t = torch.tensor(rows)
        batch = collate([prompts[r] for r in rows], run.pad_id).to(run.device)
        local = torch.arange(len(rows), device=run.device)
        w = max(lengths[r] for r in rows)
        logp = completion_logprobs(
            run.model, batch, local, ids[rows_t, :w].to(run.device), mask[rows_t, :w].to(run.device),
            lean=run.lean_forward,
        ).logp  # fmt: skip
        loss = -(logp * weights[rows_t, :w].to(run.device)).sum()
        loss.backward()
        total += float(loss.detach())
    return total


def step_backward(
    run: Run,
    dropout: int,
    prompts: list[Prompt],
    ids: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    shape: tuple[list[int], list[int], list[int]],
) -> tuple[list[list[int]], float]:
    """`backward_targets` of a step's rows (`shape`: update_micro_batches') at the budget now,
    undone and done again at half of it where a micro-batch ran out of memory (trainer/budget.py);
    the micro-batches it ran and its value. `dropout` seeds the adapters' dropout of each attempt."""

    def plan() -> list[list[int]]:
        return update_micro_batches(*shape, run.budget.tokens)

    def attempt() -> tuple[list[list[int]], float]:
        planned = plan()
        with adapters_dropping_out(run.model, dropout):
            return planned, backward_targets(run, prompts, ids, mask, weights, shape[2], planned)

    return run.budget.attempt(attempt, lambda: run.strategy.discard_pass(run.model), plan)


def train_sft(cfg: Config, console: Console | None = None) -> RunResult:
    console = console or Console()
    t = cfg.sft
    if done := finished_run(t, "sft", console):
        return done
    base_model_path(cfg.model, t, "sft")  # a model that is not there is said before any data is written or read
    with Processes.from_env().main_first():  # process 0 writes missing synthetic data
        sources = task_sources(cfg, console)
    check_held_out(cfg, console, False, [s.task for s in sources])
    run = Run(cfg, t, "sft", sources, console)
    tokenizer = run.processor.tokenizer
    pad_id = run.pad_id
    end = template_turn_end(run.processor, cfg.model) if t.turn_end == "template" else None

    with run.running("sft", ("loss",)):
        for step in range(run.step + 1, t.steps + 1):
            t0 = time.perf_counter()
            items = [(sources[s].task, sources[s].train.samples[i]) for s, i in run.take(t.prompts_per_step)]
            jobs = [(task.messages(sample), sample) for task, sample in items]
            # a sample whose media fail is left out
            items, prompts, unusable = render_usable(items, render_prompts(run.processor, jobs, cfg.model))
            targets = [
                target_ids(tokenizer, after_prefill(task.target(s), p.prefill), end)
                for (task, s), p in zip(items, prompts, strict=True)
            ]
            width = max((len(ids) for ids in targets), default=1)
            ids = torch.full((len(targets), width), pad_id, dtype=torch.long)
            mask = torch.zeros(len(targets), width)
            for i, row in enumerate(targets):
                ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1.0
            tokens = run.procs.mean(float(mask.sum()))  # a process's share of the step's target tokens
            weights = token_weights(mask, "token_mean", width, tokens=tokens)
            lengths = [len(row) for row in targets]
            # one prompt a row: packed as the RL update's rows are, the fewer padded tokens of two orders
            shape = (list(range(len(items))), [len(p) for p in prompts], lengths)
            plan, loss_total = step_backward(
                run, dropout_seed(t.seed, step, run.procs.rank), prompts, ids, mask, weights, shape
            )
            lr = run.optimizer.param_groups[0]["lr"]  # this step's, before the schedule moves (lr_schedule_per)
            grad_norm, applied = run.optimizer_step(math.isfinite(loss_total))
            metrics = {
                "step": step,
                "loss": loss_total,
                "grad_norm": grad_norm,
                "lr": lr,
                "skipped_updates": run.skipped_updates + (not applied),
                "skipped_samples": run.report_unusable(step, unusable),
                "time_step": time.perf_counter() - t0,
            }
            if (padding := padding_share(padded_tokens(plan, *shape), unpadded_tokens(plan, *shape))) is not None:
                metrics["update_padding"] = padding
            if step == 1:
                metrics["data_skipped_records"] = sum(len(s.train.errors) for s in sources)
            metrics = run.procs.mean_metrics(metrics)
            # of the whole step, whatever the number of processes
            metrics["target_tokens"] = tokens * run.procs.world
            if tokens:
                metrics["perplexity"] = math.exp(min(metrics["loss"], 50.0))
            else:  # no usable sample on any process: no loss, rather than a perfect 0
                del metrics["loss"]
            run.log_step(metrics)  # metrics.jsonl, trackers, progress
            if run.end_step(step, int(not applied)):
                break
    return run.close()
