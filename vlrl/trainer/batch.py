"""A step's scored groups, flattened into rows, and how the update walks them: token-budgeted
micro-batches of whole prompts, each prompt's prefix run once (`rows_logprobs`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vlrl.data.sample import Sample
from vlrl.models.batch import Prompt, collate
from vlrl.models.policy import SamplingFilter, TokenLogprobs, completion_logprobs
from vlrl.models.routing import RouterLogits
from vlrl.rollout import Completion
from vlrl.rollout.base import completion_rows
from vlrl.tasking.scoring import Scores
from vlrl.tasking.task import Task


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
    accuracy: torch.Tensor | None = None  # (G,) the task's correctness (Task.correct; None: it defines none)
    accuracy_failures: int = 0  # completions whose correctness could not be computed (scored 0)
    baseline: float | None = None  # algo.advantage=remax: the reward of the prompt's greedy completion


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

    def group_rows(self, group: int) -> list[int]:
        """The rows of one group's completions."""
        return (self.prompt_index == group).nonzero().flatten().tolist()


def mini_batch_rows(
    batch: RolloutBatch, parts: int, shuffle: str, seed: int, step: int, iteration: int
) -> list[list[int]]:
    """The rows of each of a pass's `parts` optimizer steps (algo.mini_batch_shuffle): whole groups
    in order, or every row in an order drawn from (seed, step), and the pass for every_pass."""
    if shuffle == "none":
        return [
            [r for g in chunk for r in batch.group_rows(int(g))]
            for chunk in np.array_split(np.arange(len(batch.groups)), parts)
        ]
    rng = np.random.default_rng([seed & 0xFFFFFFFF, step, iteration if shuffle == "every_pass" else 0])
    return [chunk.tolist() for chunk in np.array_split(rng.permutation(len(batch.prompt_index)), parts)]


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


def padded_tokens(
    plan: list[list[int]], prompt_index: Sequence[int], prompt_lengths: Sequence[int], row_lengths: Sequence[int]
) -> int:
    """The tokens a plan's forwards compute: per micro-batch, its prompts padded to the longest
    of them and its rows to the longest completion."""
    total = 0
    for rows in plan:
        prompts = {prompt_index[i] for i in rows}
        total += len(prompts) * max(prompt_lengths[p] for p in prompts) + len(rows) * max(row_lengths[i] for i in rows)
    return total


def unpadded_tokens(
    plan: list[list[int]], prompt_index: Sequence[int], prompt_lengths: Sequence[int], row_lengths: Sequence[int]
) -> int:
    """The tokens of a plan's micro-batches without their padding: each prompt once in every
    micro-batch it has rows in, and every row's completion."""
    return sum(
        sum(prompt_lengths[p] for p in {prompt_index[i] for i in rows}) + sum(row_lengths[i] for i in rows)
        for rows in plan
    )


def padding_share(computed: float, unpadded: float) -> float | None:
    """Of the tokens the forwards computed (`padded_tokens`), the share that was padding: the
    logged `update_padding` of RL's update and of SFT's step; None when none were computed."""
    return 1 - unpadded / computed if computed else None


def longest_first(
    prompt_index: Sequence[int], prompt_lengths: Sequence[int], row_lengths: Sequence[int], token_budget: int
) -> list[list[int]]:
    """`micro_batches` of the rows taken longest first, prompt and completion together (ties in
    their order): rows of like length together, so little padding, though a prompt's prefix may
    then run in several micro-batches. An RL step's prompts are often alike in length, so its
    completions decide; SFT's rows each have their own prompt, which is most of a row.
    Positions as given, ascending in each micro-batch."""
    order = sorted(range(len(row_lengths)), key=lambda i: -(prompt_lengths[prompt_index[i]] + row_lengths[i]))
    plan = micro_batches(
        [prompt_index[i] for i in order], prompt_lengths, [row_lengths[i] for i in order], token_budget
    )
    return [sorted(order[j] for j in rows) for rows in plan]


def update_micro_batches(
    prompt_index: Sequence[int], prompt_lengths: Sequence[int], row_lengths: Sequence[int], token_budget: int
) -> list[list[int]]:
    """The update's micro-batches (RL's and SFT's): of two packings within the budget, the one
    that computes fewer padded tokens, the first on a tie: in the rows' order (a step's come
    prompt-major, so each prompt's prefix runs once: `micro_batches`) or `longest_first`. The loss weighs every
    micro-batch by the whole step's counts, so which rows share one changes only the rounding.
    Why: completions of one prompt differ in length, and each group padded to its longest made
    the update compute up to three times its tokens (a random model at Qwen2.5-VL-3B's shape on
    an H200: a quarter of the completions at max_new_tokens and their median a third of it, so
    nearly every group of eight padded to the limit)."""
    plans = (
        micro_batches(prompt_index, prompt_lengths, row_lengths, token_budget),
        longest_first(prompt_index, prompt_lengths, row_lengths, token_budget),
    )
    return min(plans, key=lambda plan: padded_tokens(plan, prompt_index, prompt_lengths, row_lengths))


def rows_logprobs(
    model: torch.nn.Module,
    batch: RolloutBatch,
    rows: list[int],
    temperature: float,
    pad_id: int,
    device: torch.device,
    with_entropy: bool = False,
    sampler: SamplingFilter | None = None,
    lean: bool = True,
    router: RouterLogits | None = None,
    with_sum_pi_squared: bool = False,
) -> tuple[TokenLogprobs, int]:
    """Log-probs (len(rows), width) of the given rows' completions, prefixes shared per prompt
    (with each step's entropy, the sampling distribution's log-probs and each step's sum of
    squared probabilities, when asked), computed
    on `device` (the run's: under FSDP2's CPU offload the parameters are stored on the CPU);
    `lean`: through the lean step where the model allows it (model.lean_forward); a `router`
    records the routers over those forwards, for their load-balancing loss."""
    rows_t = torch.tensor(rows)
    owners = batch.prompt_index[rows_t].tolist()
    prompt_ids = sorted(set(owners))
    local = torch.tensor([prompt_ids.index(p) for p in owners], device=device)
    prompts = collate([batch.groups[p].prompt for p in prompt_ids], pad_id).to(device)
    width = max(1, int(batch.completion_mask[rows_t].sum(dim=1).max()))
    ids = batch.completion_ids[rows_t, :width].to(device)
    mask = batch.completion_mask[rows_t, :width].to(device)
    with router.over(prompts.attention_mask, local, mask) if router is not None else contextlib.nullcontext():
        scored = completion_logprobs(
            model, prompts, local, ids, mask, temperature, with_entropy, sampler,
            lean=lean, with_sum_pi_squared=with_sum_pi_squared,
        )  # fmt: skip
    return scored, width
