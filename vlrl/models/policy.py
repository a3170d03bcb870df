"""Forward passes that share each prompt's prefix among its completions.

The G completions of a prompt start with the same tokens and the same image. Peers run
the vision encoder and the prompt through the language model G times; here the prompt
batch is run once into a KV cache, the cache rows are repeated per completion, and only
the completion tokens are run on top. Gradients flow through the shared prefix, so the
loss and its gradient are those of G full forwards (tests pin this down).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from transformers import Cache

from vlrl.models.batch import PromptBatch
from vlrl.models.loading import core_model, family_of_model

if TYPE_CHECKING:
    pass


@dataclass
class Prefix:
    """A prompt batch run through the model: cache, next-token logits, next position."""

    cache: Cache
    last_logits: torch.Tensor  # (B, V)
    next_position: torch.Tensor  # (B,) first position id of the completion
    attention_mask: torch.Tensor  # (B, P)


def prefill(model: torch.nn.Module, batch: PromptBatch) -> Prefix:
    """The prompts run once: rope positions and the cache as the model's family makes them."""
    family = family_of_model(model)
    positions, next_position = family.rope_positions(core_model(model), batch)
    cache = family.new_cache(core_model(model))
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
        **batch.vision,
    )
    return Prefix(cache, out.logits[:, -1], next_position, batch.attention_mask)


def selective_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids] row by row, without materialising a second (R, T, V) tensor."""
    out = []
    for row_logits, row_ids in zip(logits, ids, strict=True):
        row_logits = row_logits.float()
        out.append(row_logits.gather(-1, row_ids[:, None]).squeeze(-1) - torch.logsumexp(row_logits, dim=-1))
    return torch.stack(out)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logp = torch.log_softmax(logits.float(), dim=-1)
        return -(logp.exp() * logp).sum(-1)


def completion_logits(
    model: torch.nn.Module,
    batch: PromptBatch,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """Next-token logits (R, T, V) for each token of `completion_ids`, where row r continues
    prompt `rows[r]` of `batch`: the prompts run once, their cache rows shared per completion."""
    prefix = prefill(model, batch)
    prefix.cache.batch_select_indices(rows)
    attention_mask = torch.cat([prefix.attention_mask[rows], completion_mask.to(prefix.attention_mask.dtype)], dim=1)
    out = model(
        input_ids=completion_ids,
        attention_mask=attention_mask,
        position_ids=family_of_model(model).decode_positions(prefix.next_position[rows], 0, completion_ids.shape[1]),
        past_key_values=prefix.cache,
        use_cache=True,
    )
    return torch.cat([prefix.last_logits[rows].unsqueeze(1), out.logits[:, :-1]], dim=1)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Logits with everything outside the top k, and outside the smallest set holding top_p of
    the mass, set to -inf."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens before it already hold top_p of the mass.
        drop_sorted = (probs.cumsum(dim=-1) - probs) > top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@dataclass(frozen=True)
class SamplingFilter:
    """What a rollout engine removes from the policy's (temperature-scaled) distribution before
    it draws: banned ids (vision tokens, the padded vocabulary tail), then top-k / top-p."""

    banned: torch.Tensor  # (V,) bool
    top_k: int = 0
    top_p: float = 1.0

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        allowed = logits.masked_fill(self.banned.to(logits.device), float("-inf"))
        return filter_top_k_top_p(allowed, self.top_k, self.top_p)


class TokenLogprobs(NamedTuple):
    logp: torch.Tensor  # (R, T) under the temperature-scaled policy, over the whole vocabulary
    entropy: torch.Tensor | None  # (R, T) of each step's distribution, when asked
    sampled: torch.Tensor | None  # (R, T) under the distribution an engine draws from (SamplingFilter), no grad


def completion_logprobs(
    model: torch.nn.Module,
    batch: PromptBatch,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    sampler: SamplingFilter | None = None,
) -> TokenLogprobs:
    """Log-probs (R, T) of `completion_ids` where row r continues prompt `rows[r]` of `batch`.

    Logits are divided by the sampling temperature, as the distribution sampled from was. With
    a `sampler`, also the log-probs an engine that renormalizes over what it may draw reports
    (vLLM): the trainer's value to compare the engine's with.
    """
    logits = completion_logits(model, batch, rows, completion_ids, completion_mask) / temperature
    logp = selective_logprobs(logits, completion_ids)
    sampled = None
    if sampler is not None:
        with torch.no_grad():
            sampled = torch.stack(
                [
                    selective_logprobs(sampler.apply(row.float())[None], ids[None])[0]
                    for row, ids in zip(logits, completion_ids, strict=True)
                ]
            )
    return TokenLogprobs(logp, entropy(logits) if with_entropy else None, sampled)
