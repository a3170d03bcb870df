"""Forward passes that share each prompt's prefix among its completions.

The G completions of a prompt start with the same tokens and the same image. Peers run
the vision encoder and the prompt through the language model G times; here the prompt
batch is run once into a KV cache, the cache rows are repeated per completion, and only
the completion tokens are run on top. Gradients flow through the shared prefix, so the
loss and its gradient are those of G full forwards (tests pin this down).

The update never holds the vocabulary for all its tokens: the completion forward's output
layer scores its hidden states `CHUNK_TOKENS` tokens at a time (each chunk's logits recomputed
in the backward pass and made into their gradient in place: ScoredChunks), keeping per token
only what the update uses (the sampled token's log-prob, and the entropy and the sampling
distribution's log-prob when asked). At Qwen's 151,936-token vocabulary, float32 logits cost
0.6 MB a token: 10 GB for a micro-batch of 16,384 tokens, and as much again for their gradient.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from transformers import Cache

from vlrl.models.batch import PromptBatch
from vlrl.models.decode_step import lean_forward
from vlrl.models.float32_head import computes_in_float32
from vlrl.models.loading import core_model, family_of_model

CHUNK_TOKENS = 1024  # tokens whose logits are held at once in the update (0.6 GB of float32 at Qwen's vocabulary)


@dataclass
class Prefix:
    """A prompt batch run through the model: cache, next-token logits, next position."""

    cache: Cache
    last_logits: torch.Tensor  # (B, V)
    next_position: torch.Tensor  # (B,) first position id of the completion
    attention_mask: torch.Tensor  # (B, P)


def prefill(model: torch.nn.Module, batch: PromptBatch) -> Prefix:
    """The prompts run once: rope positions and the cache as the model's family makes them (the
    positions computed once per prompt: models/batch.py)."""
    family = family_of_model(model)
    kept = batch.kept_rope()
    if kept is None:
        positions, next_position = family.rope_positions(core_model(model), batch)
        batch.keep_rope(positions, next_position)
    else:
        positions, next_position = kept
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


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Each row's entropy of softmax(logits), with gradient where it is taken (algo.entropy_coef)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def completion_forward(
    model: torch.nn.Module,
    batch: PromptBatch,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    score: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] | None = None,
    lean: bool = True,
) -> tuple[Prefix, torch.Tensor]:
    """The prompts run once, their cache rows shared per completion (row r continues prompt
    `rows[r]` of `batch`), then the completions on top: the prefix and the completion forward's
    logits, or `score(output layer, last hidden states)` when given. The completions run through
    the lean step of models/decode_step.py where the model allows it and `lean` (model.lean_forward;
    its kernels, bit for bit), else through the model's forward."""
    prefix = prefill(model, batch)
    prefix.cache.batch_select_indices(rows)
    attention_mask = torch.cat([prefix.attention_mask[rows], completion_mask.to(prefix.attention_mask.dtype)], dim=1)
    positions = family_of_model(model).decode_positions(prefix.next_position[rows], 0, completion_ids.shape[1])
    step = lean_forward(model) if lean else None
    if step is not None:
        hidden = step.hidden(completion_ids, attention_mask, positions, prefix.cache)
        return prefix, step.lm_head(hidden) if score is None else score(step.lm_head, hidden)
    with output_layer_returns(model, score) if score is not None else contextlib.nullcontext():
        out = model(
            input_ids=completion_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            past_key_values=prefix.cache,
            use_cache=True,
        )
    return prefix, out.logits


def completion_logits(
    model: torch.nn.Module,
    batch: PromptBatch,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    lean: bool = True,
) -> torch.Tensor:
    """Next-token logits (R, T, V) for each token of `completion_ids`, where row r continues
    prompt `rows[r]` of `batch`: the prompts run once, their cache rows shared per completion."""
    prefix, logits = completion_forward(model, batch, rows, completion_ids, completion_mask, lean=lean)
    return torch.cat([prefix.last_logits[rows].unsqueeze(1), logits[:, :-1]], dim=1)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Logits with everything outside the top k, and outside the smallest set holding top_p of
    the mass, set to -inf."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        # transformers' TopPLogitsWarper (and vLLM's apply_top_k_top_p) step for step: sorted
        # ascending, the least probable tokens holding at most 1 - top_p of the mass dropped, the
        # most probable kept. The same sort keeps the same one of tied tokens, and the sum from
        # the bottom rounds as theirs does over a large vocabulary.
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        drop_sorted = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        drop_sorted[..., -1:].fill_(False)  # in place: no tensor made of a Python value (a host copy)
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def filter_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Logits with every token less probable than min_p x the most probable one set to -inf:
    transformers' MinPLogitsWarper and vLLM's MinPLogitsProcessor (the most probable token is
    always kept, as their min_tokens_to_keep=1 keeps it)."""
    if min_p <= 0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))


@dataclass(frozen=True)
class SamplingFilter:
    """What a rollout engine removes from the policy's (temperature-scaled) distribution before
    it draws: banned ids (vision tokens, the padded vocabulary tail), then top-k / top-p and
    min-p, in transformers' order (generate's warpers) or, `min_p_first`, in vLLM's. Before
    them, given the ids each row has seen (its prompt's and its completion's so far:
    `SeenTokens.ids`), their logits penalized by `repetition_penalty`, as vLLM's draw does. The
    HF engine's draw penalizes before it scales by the temperature (`Draw`), so its filter
    carries no penalty. Given each row's position in its completion, the `stops` are banned
    before `min_new_tokens` tokens (transformers' MinNewTokensLengthLogitsProcessor, vLLM's
    min_tokens), with the other bans."""

    banned: torch.Tensor  # (V,) bool
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    min_p_first: bool = False
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    stops: torch.Tensor | None = None  # (V,) bool: the ids that end a completion, with min_new_tokens

    @property
    def reads_history(self) -> bool:
        """Whether a row's draw depends on what it holds so far (`SeenTokens`)."""
        return self.repetition_penalty != 1 or self.min_new_tokens > 0

    def apply(
        self, logits: torch.Tensor, seen: torch.Tensor | None = None, position: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`logits` (N, V) filtered; `seen` (N, S) the ids each row had seen, `position` (N,) or
        () where each row is in its completion, when the filter reads them (`reads_history`)."""
        if seen is not None and self.repetition_penalty != 1:
            logits = penalized(logits, seen, self.repetition_penalty)
        allowed = self.unbanned(logits, position)
        if self.min_p_first:
            return filter_top_k_top_p(filter_min_p(allowed, self.min_p), self.top_k, self.top_p)
        return filter_min_p(filter_top_k_top_p(allowed, self.top_k, self.top_p), self.min_p)

    def unbanned(self, logits: torch.Tensor, position: torch.Tensor | None = None) -> torch.Tensor:
        """`logits` with the banned ids, and before min_new_tokens the stops, at -inf: what a
        greedy decode takes the argmax of (transformers' processors apply there, its warpers,
        temperature, top-k, top-p and min-p, do not)."""
        banned = self.banned.to(logits.device)
        if position is not None and self.min_new_tokens:
            banned = banned | (self.stops.to(logits.device) & (position < self.min_new_tokens)[..., None])  # type: ignore[union-attr]
        return logits.masked_fill(banned, float("-inf"))


def repetition_penalty(logits: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' and vLLM's rule for a seen token's logit: divided by `penalty` if positive,
    multiplied if negative. It keeps the sign, so temperature-scaled logits take it alike."""
    return torch.where(logits < 0, logits * penalty, logits / penalty)


def penalized(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """`logits` (N, V) with each row's `seen` ids (N, S; an id may repeat) penalized. A copy."""
    out = logits.clone()
    out.scatter_(1, seen, repetition_penalty(out.gather(1, seen), penalty))  # repeats write alike
    return out


@dataclass(frozen=True)
class SeenTokens:
    """For a draw that reads a row's history (`SamplingFilter.reads_history`), what each scored
    token's row had seen before it: its prompt's ids and its completion's before the token
    (how many: its position). Kept per row (the prompt's distinct ids: its image's thousand
    pads are one), each chunk's (n, S) ids made when it is scored."""

    prompt: torch.Tensor  # (R, P) each row's prompt's distinct ids, first, then -1
    completion: torch.Tensor  # (R, T) its completion's ids
    row: torch.Tensor  # (N,) each scored token's row
    position: torch.Tensor  # (N,) and its position in the completion

    @classmethod
    def of(cls, batch: PromptBatch, rows: torch.Tensor, completion_ids: torch.Tensor) -> SeenTokens:
        """Every token of `completion_ids` (R, T), row by row; row r continues prompt `rows[r]`."""
        held = batch.input_ids[rows].masked_fill(batch.attention_mask[rows] == 0, -1).sort(dim=1).values
        repeat = torch.zeros_like(held, dtype=torch.bool)
        repeat[:, 1:] = held[:, 1:] == held[:, :-1]
        distinct = held.masked_fill(repeat, -1).sort(dim=1, descending=True).values  # ids first, then -1
        prompt = distinct[:, : max(int((distinct >= 0).sum(1).max()), 1)]
        R, T = completion_ids.shape
        device = completion_ids.device
        grid_rows = torch.arange(R, device=device)[:, None].expand(R, T)
        grid_positions = torch.arange(T, device=device)[None].expand(R, T)
        return cls(prompt.to(device), completion_ids, grid_rows.reshape(-1), grid_positions.reshape(-1))

    def select(self, which: torch.Tensor) -> SeenTokens:
        """The tokens `which` picks (a mask or index over the N), in its order."""
        return SeenTokens(self.prompt, self.completion, self.row[which], self.position[which])

    def part(self, part: slice, penalty: bool) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The tokens of `part`: the ids they had seen (a repetition penalty reads them:
        `penalty`, else None) and their positions."""
        return self.ids(part) if penalty else None, self.position[part]

    def ids(self, part: slice) -> torch.Tensor:
        """(n, P + T) the ids the tokens of `part` had seen (the prompt's, the completion's before
        each); a slot that holds none repeats the prompt's first id."""
        row, position = self.row[part], self.position[part]
        before = torch.arange(self.completion.shape[1], device=row.device)[None] < position[:, None]
        prompt = self.prompt[row]
        seen = torch.cat([prompt, self.completion[row].masked_fill(~before, -1)], dim=1)
        return torch.where(seen < 0, prompt[:, :1], seen)


class TokenLogprobs(NamedTuple):
    logp: torch.Tensor  # (R, T) under the temperature-scaled policy, over the whole vocabulary
    entropy: torch.Tensor | None  # (R, T) of each step's distribution, when asked (with gradient)
    sampled: torch.Tensor | None  # (R, T) under the distribution an engine draws from (SamplingFilter), no grad
    sum_pi_squared: torch.Tensor | None = None  # (R, T) each step's sum of squared probabilities, when asked, no grad


@dataclass(frozen=True)
class TokenScorer:
    """What the update keeps of each token's logits, as columns: the token's log-prob under the
    temperature-scaled policy and each step's entropy when asked (both with gradient), then the
    token's log-prob under the distribution an engine draws from, and each step's sum of squared
    probabilities (algo.advantage=optimal_token_baseline), when asked (without)."""

    temperature: float
    with_entropy: bool
    sampler: SamplingFilter | None
    chunk_tokens: int = CHUNK_TOKENS
    float32_product: bool = False  # the output layer's product in float32 (models/float32_head.py)
    with_sum_pi_squared: bool = False

    def product_dtype(self, hidden: torch.Tensor) -> torch.dtype:
        return torch.float32 if self.float32_product else hidden.dtype

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """The temperature-scaled logits in float32, the distribution the columns are of: upcast,
        then divided, as the engines' draw does (divided in bfloat16 they would be rounded again,
        up to 0.05 nats a token at 0.7 over Qwen's vocabulary). x / 1 is x: no division at 1."""
        logits = logits.float()
        return logits if self.temperature == 1 else logits / self.temperature

    def extras(
        self,
        scaled: torch.Tensor,
        ids: torch.Tensor,
        lse: torch.Tensor,
        seen: torch.Tensor | None = None,
        position: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        out = [entropy(scaled)] if self.with_entropy else []
        with torch.no_grad():
            if self.sampler is not None:
                allowed = self.sampler.apply(scaled, seen, position)
                out.append(allowed.gather(-1, ids[:, None]).squeeze(-1) - torch.logsumexp(allowed, dim=-1))
            if self.with_sum_pi_squared:  # verl's calculate_sum_pi_squared_from_logits, lse(2z) - 2 lse(z)
                out.append(torch.exp(torch.logsumexp(2 * scaled, dim=-1) - 2 * lse))
        return out

    def score(
        self, scaled: torch.Tensor, ids: torch.Tensor, seen: SeenTokens | None = None, part: slice = slice(None)
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """From scaled logits (N, V) of tokens `ids` (N,): each token's log-normalizer, its
        log-prob, and the extra columns (the engine's draw reading the history of the tokens
        `part` of `seen` picks, when given)."""
        lse = torch.logsumexp(scaled, dim=-1)
        history = (None, None) if seen is None else seen.part(part, self.sampler.repetition_penalty != 1)  # type: ignore[union-attr]
        return lse, scaled.gather(-1, ids[:, None]).squeeze(-1) - lse, self.extras(scaled, ids, lse, *history)

    def of_logits(self, logits: torch.Tensor, ids: torch.Tensor, seen: SeenTokens | None = None) -> torch.Tensor:
        """(N, columns) from logits (N, V) of tokens `ids` (N,), which had seen `seen`'s."""
        _, logp, extras = self.score(self.scaled(logits), ids, seen)
        return torch.stack([logp, *extras], dim=-1)

    def of_hidden(
        self, head: torch.nn.Module, hidden: torch.Tensor, ids: torch.Tensor, seen: SeenTokens | None = None
    ) -> torch.Tensor:
        """(N, columns) from the last hidden states (N, H) through the output layer `head`,
        `chunk_tokens` tokens at a time (ScoredChunks)."""
        scorer = replace(self, float32_product=True) if computes_in_float32(head) else self
        logp, ent, others = ScoredChunks.apply(hidden, head.weight, head.bias, ids, scorer, seen)
        columns = [logp[:, None], ent[:, None], others] if self.with_entropy else [logp[:, None], others]
        return torch.cat(columns, dim=-1)

    def split(self, columns: torch.Tensor) -> TokenLogprobs:
        """The columns by name, in `extras`' order after the log-prob's."""
        asked = (self.with_entropy, self.sampler is not None, self.with_sum_pi_squared)
        taken = iter(columns.unbind(-1)[1:])
        return TokenLogprobs(columns[..., 0], *(next(taken) if on else None for on in asked))


def chunks(n: int, size: int) -> list[slice]:
    """`size` tokens at a time; one chunk even of no tokens (FSDP2 sees the output layer's call)."""
    return [slice(start, start + size) for start in range(0, max(n, 1), size)]


class ScoredChunks(torch.autograd.Function):
    """The output layer and the columns of TokenScorer, a chunk of tokens at a time in the
    forward pass and again in the backward pass: never more than one chunk's logits at once,
    and nothing of the vocabulary's size kept from one pass to the other. The backward pass
    recomputes a chunk's logits and turns them into their gradient in place (softmax, times
    minus the log-prob's gradient, plus it at the token's id; with the entropy's gradient g_H,
    also softmax times -g_H (log-softmax + H)): what autograd computes through gather,
    logsumexp and the entropy, without the copies it makes of the chunk at each operation (on
    the CPU, a chunk's columns and gradients are autograd's bit for bit, or to float32 rounding
    with the entropy's: tests/models/test_policy.py). Liger-Kernel's fused linear log-prob does
    the same in Triton; this needs no dependency. The output layer runs once per chunk for all
    the columns, and once more in the backward."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, ids, scorer: TokenScorer, seen: SeenTokens | None = None):
        ctx.set_materialize_grads(False)  # an entropy no loss reads has no gradient to add
        logp = hidden.new_empty(len(ids), dtype=torch.float32)
        lse = torch.empty_like(logp)  # each token's log-normalizer: what the backward pass needs
        extras = []
        dtype = scorer.product_dtype(hidden)
        w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
        for part in chunks(len(ids), scorer.chunk_tokens):
            scaled = scorer.scaled(torch.nn.functional.linear(hidden[part].to(dtype), w, b))
            lse[part], logp[part], extra = scorer.score(scaled, ids[part], seen, part)
            if extra:
                extras.append(torch.stack(extra, dim=-1))
        columns = torch.cat(extras) if extras else logp.new_zeros(len(ids), 0)
        ent = columns[:, 0].contiguous() if scorer.with_entropy else logp.new_zeros(len(ids))
        ctx.save_for_backward(hidden, weight, bias, ids, lse, ent)
        ctx.scorer = scorer
        others = columns[:, 1:] if scorer.with_entropy else columns
        ctx.mark_non_differentiable(others)
        return logp, ent, others

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy, _grad_others):
        hidden, weight, bias, ids, lse, ent = ctx.saved_tensors
        scorer = ctx.scorer
        wants_hidden, wants_weight, wants_bias = ctx.needs_input_grad[:3]
        dtype = scorer.product_dtype(hidden)  # what the product ran in, and its gradients sum in
        w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
        grad_hidden = torch.empty_like(hidden) if wants_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=dtype) if wants_weight else None
        grad_bias = torch.zeros_like(bias, dtype=dtype) if wants_bias else None
        if grad_logp is None:
            grad_logp = torch.zeros_like(lse)
        for part in chunks(len(ids), scorer.chunk_tokens):
            h, y, g = hidden[part].to(dtype), ids[part], grad_logp[part]
            grad = scorer.scaled(torch.nn.functional.linear(h, w, b))
            grad.sub_(lse[part, None])  # log-softmax
            if grad_entropy is None:
                grad.exp_().mul_(-g[:, None])  # logsumexp's gradient: -g softmax
            else:  # and the entropy's: -g_H softmax (log-softmax + H)
                by_entropy = (grad + ent[part, None]).mul_(-grad_entropy[part, None])
                grad.exp_().mul_(by_entropy.sub_(g[:, None]))
            grad.scatter_add_(-1, y[:, None], g[:, None])  # gather's: g at the token
            if scorer.temperature != 1:  # through the scaling
                grad.div_(scorer.temperature)
            grad = grad.to(dtype)  # and .float()
            if wants_hidden:
                grad_hidden[part] = grad.mm(w)  # cast to the hidden states' dtype
            if wants_weight:
                grad_weight.add_(grad.t().mm(h))
            if wants_bias:
                grad_bias.add_(grad.sum(0))
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        grad_bias = None if grad_bias is None else grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None


@contextlib.contextmanager
def output_layer_returns(
    model: torch.nn.Module, score: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
) -> Iterator[None]:
    """While entered, the model's output layer returns `score(layer, hidden states)` instead of
    logits: still one call of the layer per forward, so FSDP2 gathers and reduces it as ever."""
    head = core_model(model).get_output_embeddings()
    head.forward = lambda hidden: score(head, hidden)  # an instance attribute: the class's is back on delete
    try:
        yield
    finally:
        del head.forward


def completion_logprobs(
    model: torch.nn.Module,
    batch: PromptBatch,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    sampler: SamplingFilter | None = None,
    chunk_tokens: int | None = None,
    lean: bool = True,
    with_sum_pi_squared: bool = False,
) -> TokenLogprobs:
    """Log-probs (R, T) of `completion_ids` where row r continues prompt `rows[r]` of `batch`
    (0 where `completion_mask` is: padding is not scored).

    Logits are divided by the sampling temperature, as the distribution sampled from was. With
    a `sampler`, also the log-probs an engine that renormalizes over what it may draw reports
    (vLLM): the trainer's value to compare the engine's with; `with_sum_pi_squared`, each step's
    sum of squared probabilities (Optimal Token Baseline's). The vocabulary is held for
    `chunk_tokens` tokens at a time (None: `CHUNK_TOKENS`); 0 holds the logits of every token at
    once (the reference the tests compare with). `lean`: the completions through the lean step
    where the model allows it (`completion_forward`).
    """
    chunk_tokens = CHUNK_TOKENS if chunk_tokens is None else chunk_tokens
    scorer = TokenScorer(temperature, with_entropy, sampler, chunk_tokens, with_sum_pi_squared=with_sum_pi_squared)
    history = sampler is not None and sampler.reads_history
    seen = SeenTokens.of(batch, rows, completion_ids) if history else None  # row-major: (R, T) flattened
    if chunk_tokens <= 0:  # the full logits, a row upcast at a time
        logits = completion_logits(model, batch, rows, completion_ids, completion_mask, lean)
        columns = torch.stack(
            [
                scorer.of_logits(row, ids, None if seen is None else seen.select(seen.row == r))
                for r, (row, ids) in enumerate(zip(logits, completion_ids, strict=True))
            ]
        )
        return scorer.split(columns.masked_fill(~completion_mask.bool()[..., None], 0.0))
    real = completion_mask[:, 1:].bool()  # the tokens scored from the completion forward
    later = None if seen is None else seen.select(torch.cat([torch.zeros_like(real[:, :1]), real], 1).reshape(-1))

    def score(head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        scored = scorer.of_hidden(head, hidden[:, :-1][real], completion_ids[:, 1:][real], later)
        out = scored.new_zeros(*real.shape, scored.shape[-1])
        out[real] = scored
        return out

    prefix, scored = completion_forward(model, batch, rows, completion_ids, completion_mask, score, lean)
    firsts = None if seen is None else seen.select(seen.position == 0)
    first = scorer.of_logits(prefix.last_logits[rows], completion_ids[:, 0], firsts)  # (R, columns)
    return scorer.split(torch.cat([first[:, None], scored], dim=1))
