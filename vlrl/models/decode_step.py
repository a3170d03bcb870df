"""A Qwen language model's forward of tokens that continue a KV cache, without transformers' module
machinery: one decoding step (one token per row: the HF engine's dynamic loop, and its static
step through rollout/static.py's LeanStaticStep, which makes the rope tables and the mask without
looking at the host), or a completion's tokens on top of its prompt's cache (the update's
forwards, models/policy.py: model.lean_forward).

A decoding step feeds one token per row through the language model. transformers spends most
of such a step, at small sizes, outside the arithmetic: building the attention mask, the rope
tables of three position sections, output dataclasses, hooks and config look-ups around ~700
tensor operations. On this project's 2-core CPU a whole decoding step (forward and draw) of the
step bench's tiny model takes 2.0-2.1 ms with this step against 3.5-3.6 ms through the model's
forward (docs/performance.md); the decoding loop was over half of that bench's RL step.

`DecodeStep` calls the same kernels in the same order on the same weights as transformers'
SDPA path, so its logits and cache equal transformers' bit for bit (tests/models/
test_decode_step.py, on the CPU in float32 and bfloat16). Two things make it shorter:
- rope: during decoding every section of Qwen's multimodal position is the same text position
  (`ModelFamily.decode_positions`), so the step takes that position (R,) and looks up the one
  table, computed once for every position as transformers computes it; `rotate_half(x) * sin`
  is `x` with its halves swapped times sin with its first half negated (exact: negation
  commutes with rounding);
- attention: the mask is the rows' padding (one query token: nothing is in its future), and
  SDPA gets what transformers' `sdpa_attention_forward` gives it at one query token: no mask
  and grouped heads when no row is padded, else the mask with the query heads packed per key
  head. Several tokens per row get what it gives them over a longer cache: the causal mask
  over cache and tokens, and the key and value heads repeated per query head.

The update's forwards of completion tokens (the reference's, the old policy's, the policy's with
gradients; SFT's) go through it too (`lean_forward`), which saves transformers' per-call work
there as well: up to a few percent of the update at the demo's sizes (docs/performance.md).
Under autograd the same kernels record the same graph; a model whose decoder layers recompute
their activations in the backward pass (trainer.gradient_checkpointing: their `forward`
replaced) takes its own forward there.

A plain `nn.Linear` without hooks is computed as its forward computes it, `F.linear` of its own
weight and bias; any other linear layer is called as a module, so whatever wraps it (LoRA
adapters, merged or not: models/lora.py; a hook) computes as in the model's own forward. Which
is which, and each layer's modules, are looked up once a rollout (`Layer`, `DecodeStep.refresh`),
not at every call: at the tiny model's size those look-ups cost a good share of the step (the
engine's `generate` 0.86-0.94 of the time without them: bench/decode_step_vs_revision.py).

Layers of other kinds are called as the model calls them: Qwen3-VL MoE's experts
(`feed_forward`) and Qwen3.5's linear attention (`Layer.mixer`: its gated delta net reads and
writes its states in the cache itself); Qwen3.5's attention, with an output gate, a rope over a
quarter of each head and RMSNorms scaled by one plus their weight (`norm_of`), is computed here
as its forward computes it.

What it cannot stand in for is said by `decode_step_refusal`; the engine then calls the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import Cache
from transformers.integrations.sdpa_attention import repeat_kv

from vlrl.models.base import ModelFamily
from vlrl.models.loading import core_model, family_of_model, fsdp_sharded


def unusual_layers(model: torch.nn.Module) -> list[str]:
    """The language model's layers other than full attention over a key-value cache with a dense
    MLP, by kind (Qwen3.5: linear_attention; Qwen3-VL MoE: experts); [] when there are none.
    The lean step calls both as the model calls them (`Layer.of`, `feed_forward`); the static
    step holds both (rollout/static.py: linear attention's states in place, experts where they
    are routed on the device)."""
    text = core_model(model).config.get_text_config()
    kinds = sorted(set(getattr(text, "layer_types", None) or ["full_attention"]) - {"full_attention"})
    return [*kinds, "experts"] if getattr(text, "num_experts", 0) else kinds


def decode_step_refusal(model: torch.nn.Module) -> str:
    """Why `DecodeStep` cannot decode `model` as its own forward does ("": it can)."""
    core = core_model(model)
    text = core.config.get_text_config()
    language_model = getattr(getattr(core, "model", None), "language_model", None)
    if language_model is None or not hasattr(core, "lm_head"):
        return "it is not a *ForConditionalGeneration with a language_model and an lm_head"
    if core.config._attn_implementation != "sdpa":
        return f"its attention is {core.config._attn_implementation!r}; the step computes SDPA's"
    if text.rope_parameters.get("rope_type", "default") != "default":
        return f"its rope is {text.rope_parameters['rope_type']!r}, whose tables change with the length"
    if getattr(text, "attention_dropout", 0.0):
        return "its attention has dropout"
    family = family_of_model(model)
    if type(family).decode_positions is not ModelFamily.decode_positions:
        return f"{family.label}'s decoding positions are its own; the step takes every section as one"
    if fsdp_sharded(model):
        return "FSDP2 gathers its weights in the forwards of the modules this step does not call"
    return ""


class ModelStep:
    """A decoding step through the model's own forward: what `DecodeStep` stands in for, with
    the same call."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, cache: Cache
    ) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
            past_key_values=cache, use_cache=True,
        )  # fmt: skip
        return out.logits[:, -1]

    def refresh(self) -> None:
        """Nothing of the model is kept here."""


Compute = Callable[[torch.Tensor], torch.Tensor]


def bound(module: torch.nn.Module) -> Compute:
    """What computes `module(x)`: a plain Linear without hooks as its forward computes it,
    `F.linear` of its own weight and bias (the tensors the optimizer steps in place), without
    the module call around it; any other module called as itself."""
    if type(module) is torch.nn.Linear and not (module._forward_hooks or module._forward_pre_hooks):
        weight, bias = module.weight, module.bias
        return lambda x: F.linear(x, weight, bias)
    return module


def norm_of(norm: torch.nn.Module, zero_centred: bool) -> Compute:
    """What computes Qwen's RMSNorm `norm(x)` as its forward computes it, normalized in float32:
    scaled by its weight in the input's dtype (Qwen2-VL to Qwen3-VL), or, `zero_centred`
    (Qwen3.5's weight, stored as the scale minus one), by one plus its weight in float32, then
    cast."""
    weight = norm.weight
    if zero_centred:
        eps = norm.eps
        return lambda x: (normalized(x.float(), eps) * (1.0 + weight.float())).type_as(x)
    eps = norm.variance_epsilon
    return lambda x: weight * normalized(x.float(), eps).to(x.dtype)


def normalized(h: torch.Tensor, eps: float) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


@dataclass(frozen=True)
class Attention:
    """A full-attention layer's parts as a decoding step uses them."""

    q: Compute  # Qwen3.5 (`gated`): each head's query, then its output gate
    k: Compute
    v: Compute
    head_norms: tuple[Compute, Compute] | None  # Qwen3's and Qwen3.5's RMSNorm over each head
    o: Compute
    head_dim: int
    groups: int  # query heads per key-value head
    scaling: float
    gated: bool  # the output times the sigmoid of its gate before `o` (Qwen3.5)

    @classmethod
    def of(cls, attn: torch.nn.Module, zero_centred: bool) -> Attention:
        heads = attn.config.num_attention_heads
        norms = tuple(norm_of(n, zero_centred) for n in (attn.q_norm, attn.k_norm)) if hasattr(attn, "q_norm") else None
        return cls(
            bound(attn.q_proj), bound(attn.k_proj), bound(attn.v_proj), norms, bound(attn.o_proj),
            attn.head_dim, attn.num_key_value_groups, attn.scaling,
            attn.q_proj.out_features == 2 * heads * attn.head_dim,
        )  # fmt: skip


@dataclass(frozen=True)
class Layer:
    """A decoder layer's parts as a decoding step uses them, looked up once (`of`)."""

    input_norm: Compute
    # full attention, or linear attention (Qwen3.5's gated delta net) called as the model calls it
    mixer: Attention | torch.nn.Module
    post_norm: Compute
    mlp: Compute

    @classmethod
    def of(cls, layer: torch.nn.Module, zero_centred: bool) -> Layer:
        mixer = Attention.of(layer.self_attn, zero_centred) if hasattr(layer, "self_attn") else layer.linear_attn
        return cls(
            norm_of(layer.input_layernorm, zero_centred), mixer,
            norm_of(layer.post_attention_layernorm, zero_centred), feed_forward(layer.mlp),
        )  # fmt: skip


def feed_forward(mlp: torch.nn.Module) -> Compute:
    """What computes a decoder layer's `mlp(h)`: a dense gated MLP as its forward computes it,
    `down(act(gate(h)) * up(h))` of its projections (each `bound`); a mixture of experts (Qwen3-VL
    MoE's sparse block: its router and its experts, as transformers routes them) called as itself."""
    if not hasattr(mlp, "gate_proj"):
        return mlp
    gate, up, act, down = bound(mlp.gate_proj), bound(mlp.up_proj), mlp.act_fn, bound(mlp.down_proj)
    return lambda h: down(act(gate(h)) * up(h))


class DecodeStep:
    """Next-token logits of one token per row, the cache extended (the model's own forward
    at `input_ids` (R, 1), `attention_mask` (R, K) over cache and token, and rope `positions`
    (3, R, 1) of `ModelFamily.decode_positions`, whose sections are equal); `hidden` gives the
    last hidden states of any number of tokens per row."""

    def __init__(self, model: torch.nn.Module):
        core = core_model(model)
        self.language_model = core.model.language_model
        self.lm_head = core.lm_head
        self.zero_centred = family_of_model(model).zero_centred_norms
        rotary = self.language_model.rotary_emb
        self.inv_freq, self.rope_scaling = rotary.inv_freq, rotary.attention_scaling
        self.cos: torch.Tensor | None = None  # (P, head_dim) at positions 0..P-1: `rope_table`
        self.sin: torch.Tensor | None = None
        self.refresh()

    def refresh(self) -> None:
        """Each layer's parts looked up anew; the engine calls it before each rollout (a hook
        added, a module or a weight replaced since the last one count from there)."""
        self.layers = [Layer.of(layer, self.zero_centred) for layer in self.language_model.layers]
        self.norm = norm_of(self.language_model.norm, self.zero_centred)
        self.head = bound(self.lm_head)

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, cache: Cache
    ) -> torch.Tensor:
        return self.head(self.hidden(input_ids, attention_mask, positions, cache))[:, -1]

    def hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, cache: Cache
    ) -> torch.Tensor:
        """The language model's last hidden states (R, T, H), final norm applied, of `input_ids`
        (R, T) after the cache's tokens: `attention_mask` (R, K) over cache and tokens, rope
        `positions` (3, R, T) of `ModelFamily.decode_positions`. The cache is extended."""
        x = self.language_model.embed_tokens(input_ids)
        cos, sin = self.rope(positions[0], x.dtype)
        tokens = input_ids.shape[1]
        padding = None if tokens == 1 else attention_mask[:, -tokens:]
        return self.through_layers(x, cos, sin, attention_mask_of(attention_mask, tokens), cache, padding)

    def through_layers(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None, cache: Cache,
        padding: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """The decoder layers and the final norm over embedded tokens `x` (R, T, H), with their
        rope `cos` and `sin` (R, 1, T, rotated width) and SDPA's boolean `mask`, made a float one
        once for all of them (`additive_mask`); the cache is extended. Linear attention gets the
        tokens' own `padding` (R, T), which zeroes their input to its state, or None at one token
        (a decoded token is never padding): transformers' `create_recurrent_attention_mask`, but
        for the all-ones mask it leaves out, where the product by one changes no value and
        asking costs a read on the host."""
        mask = additive_mask(mask, x.dtype)
        for i, layer in enumerate(self.layers):
            h = layer.input_norm(x)
            if isinstance(layer.mixer, Attention):
                x = x + self.attention(layer.mixer, h, cos, sin, mask, cache, i)
            else:
                x = x + layer.mixer(hidden_states=h, cache_params=cache, attention_mask=padding)
            x = x + layer.mlp(layer.post_norm(x))
        return self.norm(x)

    def rope(self, position: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin (R, 1, T, head_dim) at each row's positions (R, T), looked up
        in tables of every position so far (a decoding step's rope is two gathers, not a dozen
        operations; the tables grow by doubling when a position passes their end)."""
        top = int(position.max())
        if self.cos is None or self.cos.dtype != dtype or top >= len(self.cos):
            size = max(top + 1, 2 * len(self.cos) if self.cos is not None else 256)
            self.cos, self.sin = self.rope_table(torch.arange(size, device=position.device), dtype)
        return self.cos[position].unsqueeze(1), self.sin[position].unsqueeze(1)

    def rope_table(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin (P, head_dim) at `positions` (P,), as transformers' rotary
        embedding computes them (position times inverse frequency in float32, cos and sin
        scaled, then cast)."""
        freqs = positions[:, None].float() * self.inv_freq
        cos, sin = freqs.cos() * self.rope_scaling, freqs.sin() * self.rope_scaling
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
        return cos.to(dtype), sin.to(dtype)

    @staticmethod
    def attention(
        layer: Attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
        mask: torch.Tensor | None, cache: Cache, index: int,
    ) -> torch.Tensor:  # fmt: skip
        rows, tokens, d = x.shape[0], x.shape[1], layer.head_dim
        q, k = layer.q(x), layer.k(x).view(rows, tokens, -1, d)
        if layer.gated:  # each head's query, then its gate (transformers' Qwen3.5 attention)
            q, gate = q.view(rows, tokens, -1, 2 * d).chunk(2, dim=-1)
            gate = gate.reshape(rows, tokens, -1)
        else:
            q = q.view(rows, tokens, -1, d)
        v = layer.v(x).view(rows, tokens, -1, d).transpose(1, 2)
        if layer.head_norms is not None:
            q, k = layer.head_norms[0](q), layer.head_norms[1](k)
        heads = q.shape[2]  # the query and key heads rotated together: one copy, then four kernels, not eight
        qk = rotate(torch.cat((q, k), dim=2).transpose(1, 2), cos, sin)
        q, k = qk[:, :heads], qk[:, heads:]
        k, v = cache.update(k, v, index)
        if tokens > 1:  # a mask, so the key and value heads repeated per query head
            k, v = repeat_kv(k, layer.groups), repeat_kv(v, layer.groups)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=layer.scaling)
            out = out.transpose(1, 2).reshape(rows, tokens, -1)
        else:
            if mask is None:
                out = F.scaled_dot_product_attention(q, k, v, scale=layer.scaling, enable_gqa=layer.groups > 1)
            else:
                packed = q.reshape(rows, -1, layer.groups, d)  # one key head's queries as one head's query tokens
                out = F.scaled_dot_product_attention(packed, k, v, attn_mask=mask, scale=layer.scaling)
            out = out.reshape(rows, -1, 1, d).transpose(1, 2).reshape(rows, 1, -1)
        return layer.o(out * torch.sigmoid(gate) if layer.gated else out)


def attention_mask_of(attention_mask: torch.Tensor, tokens: int) -> torch.Tensor | None:
    """What transformers gives SDPA as the mask of `tokens` query tokens per row after the
    cache (`attention_mask` (R, K) over cache and tokens): at one token the rows' padding (R, 1,
    1, K), None when no row is padded; at several, the causal mask and the padding (R, 1, T, K)."""
    if tokens == 1:
        return None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
    length = attention_mask.shape[1]
    causal = torch.ones(tokens, length, dtype=torch.bool, device=attention_mask.device).tril(length - tokens)
    return (causal & attention_mask.bool()[:, None, :])[:, None]


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask as SDPA turns it into a float one in every call before its kernel (0
    where attended, -inf elsewhere, in the queries' dtype): made once for all the layers, the
    same values, where each layer's SDPA would make it again (three kernels a layer on CUDA, and
    a replayed decoding step pays for every kernel, however small)."""
    return None if mask is None else torch.where(mask, 0.0, float("-inf")).to(dtype)


def lean_forward(model: torch.nn.Module) -> DecodeStep | None:
    """A lean step of `model` for one forward of completion tokens (models/policy.py), its parts
    looked up now; None where the model's own forward must run: what `decode_step_refusal` names,
    and, under autograd, decoder layers that recompute their activations (parallel/recompute.py
    replaces their `forward`, which the step does not call)."""
    if decode_step_refusal(model):
        return None
    layers = core_model(model).model.language_model.layers
    if torch.is_grad_enabled() and any("forward" in vars(layer) for layer in layers):
        return None
    return DecodeStep(model)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' `x * cos + rotate_half(x) * sin`, with `sin`'s first half negated: the
    halves swapped are x rolled by half its width (one kernel, where a flip of the halves
    takes three calls and a slower one). Where the tables are narrower than a head (Qwen3.5
    rotates a quarter of it), the rest passes unrotated, as transformers concatenates it."""
    width = cos.shape[-1]
    if width < x.shape[-1]:
        return torch.cat((rotate(x[..., :width], cos, sin), x[..., width:]), dim=-1)
    return x * cos + x.roll(width // 2, -1) * sin
