"""Selective sample replay in the RL loop (`algo.replay`, VL-Rethinker's SSR): the buffer of
rows with a non-zero advantage, the rows a step trains on (vlrl/algos/replay.py chooses them),
and the buffer's state in checkpoints.

A row keeps what its update needs from when it was sampled: the rendered prompt (token ids and
the processor's vision tensors; the images themselves are dropped, only engines read them),
the completion (token ids, the engine's log-probs and entropies), its advantage, the old
log-probs of the policy that sampled it (the ratio's denominator, never recomputed, as
VL-Rethinker's stored `action_log_probs`), and its difficulty weight. A replayed row is
trained with these, not with anything of the step that replays it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vlrl.algos.replay import Selection, effective, filter_selection, ssr_selection
from vlrl.config import ReplayConfig
from vlrl.models.batch import Prompt
from vlrl.rollout import Completion
from vlrl.trainer.batch import RolloutBatch
from vlrl.trainer.update import OldLogprobs


@dataclass
class ReplayRow:
    prompt: Prompt  # shared by the rows of one group
    completion: Completion
    advantage: float
    old_logp: torch.Tensor  # (L,) the sampling policy's log-probs, as the update's ratio takes them
    old_sampled: torch.Tensor | None  # (L,) of what a foreign engine draws from, at that policy
    old_entropy: torch.Tensor | None  # (L,) from a trainer forward, where the update selects tokens by it
    weight: float | None  # algo.difficulty's weight of its group
    step: int  # the step that sampled it


@dataclass
class PromptRows:
    """One prompt's rows in a trained batch: what a RolloutBatch takes of a group."""

    prompt: Prompt
    completions: list[Completion]


@dataclass
class Carried:
    """What the trained rows bring from when they were sampled, instead of this step's."""

    old: OldLogprobs
    row_weights: torch.Tensor | None


@dataclass
class Trained:
    """The rows a step trains on, as the update takes them, and the replay's statistics."""

    batch: RolloutBatch
    advantages: torch.Tensor
    carried: Carried | None  # None: the step's own rows, trained as without replay
    stats: dict[str, float]


def engine_free(prompt: Prompt) -> Prompt:
    """The prompt as the trainer's forwards read it (its images and frames are the engines')."""
    return Prompt(prompt.input_ids, prompt.mm_token_type_ids, prompt.vision, prompt.text)


def step_rows(
    batch: RolloutBatch, advantages: torch.Tensor, old: OldLogprobs, row_weights: torch.Tensor | None, step: int
) -> list[ReplayRow]:
    """A step's rows (prompt-major, as the batch's) with what each needs to be trained later."""
    prompts = [engine_free(g.prompt) for g in batch.groups]
    completions = [c for g in batch.groups for c in g.completions]

    def cut(values: torch.Tensor | None, r: int, length: int) -> torch.Tensor | None:
        return None if values is None else values[r, :length].clone()

    rows = []
    for r, completion in enumerate(completions):
        length = len(completion.token_ids)
        rows.append(
            ReplayRow(
                prompts[int(batch.prompt_index[r])], completion, float(advantages[r]), cut(old.logp, r, length),
                cut(old.sampled, r, length), cut(old.entropy, r, length),
                None if row_weights is None else float(row_weights[r]), step,
            )
        )  # fmt: skip
    return rows


def padded(values: Sequence[torch.Tensor | None], width: int) -> torch.Tensor | None:
    """Per-token values right-padded with zeros to (rows, width), or None if any row lacks them."""
    if any(v is None for v in values):
        return None
    out = torch.zeros(len(values), width)
    for i, v in enumerate(values):
        out[i, : len(v)] = v
    return out


def assemble(rows: list[ReplayRow], pad_id: int, trainers: bool) -> tuple[RolloutBatch, torch.Tensor, Carried]:
    """Rows as a batch: rows of one prompt side by side (its prefix computed once), each with
    its stored advantage, old log-probs and weight. `trainers`: the old log-probs are the
    trainer's (else the engine's own, which shares the policy)."""
    by_prompt: dict[int, list[ReplayRow]] = {}
    for row in rows:
        by_prompt.setdefault(id(row.prompt), []).append(row)
    ordered = [row for group in by_prompt.values() for row in group]
    groups = [PromptRows(group[0].prompt, [row.completion for row in group]) for group in by_prompt.values()]
    batch = RolloutBatch.from_groups(groups, pad_id)  # type: ignore[arg-type]  (the prompt and completions of a group)
    width = batch.completion_mask.shape[1]
    old = OldLogprobs(
        padded([r.old_logp for r in ordered], width) if ordered else torch.zeros(0, width),
        trainers,
        padded([r.old_sampled for r in ordered], width) if ordered else None,
        padded([r.old_entropy for r in ordered], width) if ordered else None,
    )
    weights = [r.weight for r in ordered]
    row_weights = None if not ordered or None in weights else torch.tensor(weights, dtype=torch.float32)
    return batch, torch.tensor([r.advantage for r in ordered], dtype=torch.float32), Carried(old, row_weights)


class ReplayBuffer:
    """One process's buffer (each process keeps its own share, as each of VL-Rethinker's ranks
    does) and the choice of the rows each step trains on."""

    def __init__(self, cfg: ReplayConfig):
        self.cfg = cfg
        # FIFO of effective rows; its length is set at the first step with rows (buffer_size,
        # else half that step's rows: VL-Rethinker's deque(maxlen=len(items) // 2))
        self.rows: deque[ReplayRow] | None = None

    def select(
        self,
        batch: RolloutBatch,
        advantages: torch.Tensor,
        rewards: torch.Tensor,
        old: OldLogprobs,
        row_weights: torch.Tensor | None,
        step: int,
        generator: torch.Generator,
        pad_id: int,
    ) -> Trained:
        """This step's rows join the buffer (the effective ones), then the rule picks the rows to
        train on. Where it has none to give (nothing effective now or ever: VL-Rethinker's loop
        never ends there) the step trains on its own rows as they are."""
        cfg, fresh = self.cfg, step_rows(batch, advantages, old, row_weights, step)
        informative = effective(advantages).nonzero().flatten().tolist()
        selection: Selection | None
        if cfg.mode == "filter":
            selection = filter_selection(advantages, generator)
        else:
            if self.rows is None and fresh:
                self.rows = deque(maxlen=cfg.buffer_size or len(fresh) // 2)
            buffer = self.rows if self.rows is not None else deque(maxlen=0)
            buffer.extend(fresh[i] for i in informative)
            selection = ssr_selection(
                advantages, rewards, torch.tensor([r.advantage for r in buffer], dtype=torch.float64),
                int(cfg.keep_fraction * len(fresh)), cfg.positive_fraction, cfg.positive_reward, cfg.alpha, cfg.eps,
                generator,
            )  # fmt: skip
        stats = {
            "replay/effective_frac": len(informative) / len(fresh) if fresh else 0.0,
            "replay/buffer_size": float(len(self.rows or ())),
            "replay/unfiltered": float(selection is None),
        }
        if selection is None:
            stats |= {"replay/current_rows": float(len(fresh)), "replay/replayed_rows": 0.0}
            return Trained(batch, advantages, None, stats)
        stats |= {
            "replay/current_rows": float(len(selection.current)),
            "replay/replayed_rows": float(len(selection.replayed)),
        }
        chosen = [fresh[i] for i in selection.current] + [self.rows[i] for i in selection.replayed]  # type: ignore[index]
        trained, trained_advantages, carried = assemble(chosen, pad_id, old.trainers)
        return Trained(trained, trained_advantages, carried, stats)

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The buffer as tensors and plain values (weights_only-safe), each prompt once."""
        prompts: list[dict[str, Any]] = []
        index: dict[int, int] = {}
        rows = []
        for row in self.rows or ():
            if id(row.prompt) not in index:
                index[id(row.prompt)] = len(prompts)
                p = row.prompt
                prompts.append(
                    {
                        "input_ids": p.input_ids,
                        "mm_token_type_ids": p.mm_token_type_ids,
                        "vision": p.vision,
                        "text": p.text,
                    }
                )
            c = row.completion
            rows.append(
                {
                    "prompt": index[id(row.prompt)],
                    "token_ids": torch.tensor(c.token_ids, dtype=torch.long),
                    "text": c.text,
                    "truncated": c.truncated,
                    "logprobs": None if c.logprobs is None else torch.tensor(c.logprobs, dtype=torch.float64),
                    "entropies": None if c.entropies is None else torch.tensor(c.entropies, dtype=torch.float64),
                    "advantage": row.advantage,
                    "old_logp": row.old_logp,
                    "old_sampled": row.old_sampled,
                    "old_entropy": row.old_entropy,
                    "weight": row.weight,
                    "step": row.step,
                }
            )
        return {"capacity": -1 if self.rows is None else self.rows.maxlen, "prompts": prompts, "rows": rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        prompts = [
            Prompt(p["input_ids"], p["mm_token_type_ids"], dict(p["vision"]), p["text"]) for p in state["prompts"]
        ]
        if state["capacity"] < 0:
            self.rows = None
            return
        self.rows = deque(maxlen=state["capacity"])
        for r in state["rows"]:
            completion = Completion(
                r["token_ids"].tolist(), r["text"], r["truncated"],
                None if r["logprobs"] is None else r["logprobs"].tolist(),
                None if r["entropies"] is None else r["entropies"].tolist(),
            )  # fmt: skip
            self.rows.append(
                ReplayRow(
                    prompts[r["prompt"]], completion, r["advantage"], r["old_logp"], r["old_sampled"],
                    r["old_entropy"], r["weight"], r["step"],
                )
            )  # fmt: skip
