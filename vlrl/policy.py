"""Forward passes that share each prompt's prefix among its completions.

The G completions of a prompt start with the same tokens and the same image. Peers run
the vision encoder and the prompt through the language model G times; here the prompt
batch is run once into a KV cache, the cache rows are repeated per completion, and only
the completion tokens are run on top. Gradients flow through the shared prefix, so the
loss and its gradient are those of G full forwards (tests pin this down).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from vlrl.modeling import core_model
from vlrl.prompting import PromptBatch


@dataclass
class Prefix:
    """A prompt batch run through the model: cache, next-token logits, next position."""

    cache: DynamicCache
    last_logits: torch.Tensor  # (B, V)
    next_position: torch.Tensor  # (B,) first position id of the completion
    attention_mask: torch.Tensor  # (B, P)


def rope_positions(model: torch.nn.Module, batch: PromptBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen-VL's 3D rope positions of the prompt (3, B, P) and each row's next position (B,)."""
    vlm = core_model(model).model
    # only what the prompt has: second_per_grid_ts (Qwen2.5-VL's frame times) is not Qwen2-VL's
    videos = {k: batch.vision[k] for k in ("video_grid_thw", "second_per_grid_ts") if k in batch.vision}
    positions, _ = vlm.get_rope_index(
        batch.input_ids,
        batch.mm_token_type_ids,
        image_grid_thw=batch.vision.get("image_grid_thw"),
        attention_mask=batch.attention_mask,
        **videos,
    )
    next_position = positions.amax(dim=(0, 2)) + 1
    return positions, next_position


def prefill(model: torch.nn.Module, batch: PromptBatch) -> Prefix:
    positions, next_position = rope_positions(model, batch)
    cache = DynamicCache(config=core_model(model).config)
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


def decode_positions(next_position: torch.Tensor, offset: int, length: int) -> torch.Tensor:
    """Text positions (3, R, length) continuing after the prompt."""
    steps = torch.arange(offset, offset + length, device=next_position.device)
    return (next_position[:, None] + steps[None, :]).unsqueeze(0).expand(3, -1, -1)


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
        position_ids=decode_positions(prefix.next_position[rows], 0, completion_ids.shape[1]),
        past_key_values=prefix.cache,
        use_cache=True,
    )
    return torch.cat([prefix.last_logits[rows].unsqueeze(1), out.logits[:, :-1]], dim=1)


def completion_logprobs(
    model: torch.nn.Module,
    batch: PromptBatch,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (R, T) of `completion_ids` where row r continues prompt `rows[r]` of `batch`.

    Logits are divided by the sampling temperature, as the distribution sampled from was.
    """
    logits = completion_logits(model, batch, rows, completion_ids, completion_mask) / temperature
    logp = selective_logprobs(logits, completion_ids)
    return logp, (entropy(logits) if with_entropy else None)
