"""What the HF engine's two decoding loops share (the dynamic one in hf.py, the static-shape
one in static.py): one step's draw, and the record of the completions as they are decoded.

Both are written for a batch that shrinks: a decoded row knows which row of the whole batch
it is (`index`), draws the uniform of that row, and writes to that row of the record. A
filler row (the static loop pads a bucket with them) has index `rows`: it draws a uniform it
never uses and writes to the record's spare last row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vlrl.models.policy import SamplingFilter, repetition_penalty
from vlrl.rollout.base import SamplingParams


def sample_categorical(
    probs: torch.Tensor, generator: torch.Generator | None = None, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """One token per row, drawn with probability `probs` (rows need not sum to 1) by inverting
    the CDF: one uniform per row (drawn here, or given as `uniforms` (R, 1)). torch.multinomial
    (and the exponential trick) draw a random number per vocabulary entry, which on CPU cost
    more than the tiny demo model's forward. Zero-probability tokens are never drawn: the first
    index whose CDF exceeds u is never one whose CDF equals its predecessor's. Non-finite probs
    (a diverged policy: the trainer stops on its non-finite log-probs) still give an index inside
    the vocabulary, so that the step's lookup does not fail (on CUDA: a device-side assert)."""
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # in float64, as probs.double().cumsum() but in one call
    if uniforms is None:
        uniforms = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device)
    # float32 uniforms (< 1 - 2**-24) scaled in float64 stay strictly below the total
    drawn = torch.searchsorted(cdf, uniforms.double() * cdf[:, -1:], right=True).squeeze(1)
    return drawn.clamp_(max=probs.shape[-1] - 1)  # a NaN CDF is searched to its end


@dataclass
class Draw:
    """One decoding step's sampling, for the rows decoded: the token each draws from the
    temperature-scaled policy (bans, top-k, top-p applied), or in a greedy call or row
    (SamplingParams.greedy) the argmax of its logits with the bans alone (`greedy`), its
    log-prob and the entropy over the whole vocabulary. A finished row (one not compacted away)
    takes the pad token."""

    params: SamplingParams
    sampler: SamplingFilter
    pad_id: int
    rows: int  # of the whole batch: one uniform each per step, whichever rows are decoded
    generator: torch.Generator | None
    # With a repetition penalty: (rows + 1, V) the tokens each row's prompt and completion hold
    # so far (the spare row a filler's), filled by `begin` in place, so a captured step reads it
    seen: torch.Tensor | None = field(default=None, init=False)
    # With SamplingParams.greedy: (rows + 1,) the rows decoded greedily, the first of each
    # prompt's n (the spare row not), made once, so a captured step reads it
    greedy_rows: torch.Tensor | None = field(default=None, init=False)
    # With SamplingParams.min_new_tokens: () the tokens each row has drawn so far (the rows start
    # together), advanced in place, so a captured step reads and counts it
    drawn: torch.Tensor | None = field(default=None, init=False)

    def begin(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> None:
        """A batch's start, (rows, width) each: with a repetition penalty, the tokens of each
        row's prompt (its real ones: the mask's) are the ones seen so far."""
        params, device = self.params, prompt_ids.device
        if params.greedy and self.greedy_rows is None:
            self.greedy_rows = torch.zeros(self.rows + 1, dtype=torch.bool, device=device)
            self.greedy_rows[: self.rows] = torch.arange(self.rows, device=device) % params.n < params.greedy
        if params.min_new_tokens:
            if self.drawn is None:
                self.drawn = torch.zeros((), dtype=torch.long, device=device)
            self.drawn.zero_()
        if params.repetition_penalty == 1:
            return
        vocab = len(self.sampler.banned)
        if self.seen is None:  # made once: a captured step reads this tensor
            self.seen = torch.zeros(self.rows + 1, vocab, dtype=torch.bool, device=prompt_ids.device)
        held = torch.zeros(self.rows, vocab + 1, dtype=torch.bool, device=prompt_ids.device)
        held.scatter_(1, prompt_ids.masked_fill(prompt_mask == 0, vocab), True)  # padding to the extra column
        self.seen[: self.rows] = held[:, :vocab]  # the spare row's (a filler's) are never kept

    def penalized(self, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """transformers' RepetitionPenaltyLogitsProcessor on the raw logits of rows `index`."""
        seen = self.seen[index]  # type: ignore[index]
        return torch.where(seen, repetition_penalty(logits, self.params.repetition_penalty), logits)

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        """A greedy decode's token from the (penalized) logits, unscaled and unfiltered but for
        the bans, as transformers' greedy search takes it: a temperature could merge logits one
        ulp apart, and top-p could drop the first of tied maxima."""
        return self.sampler.unbanned(logits, position=self.drawn).argmax(dim=-1)

    def __call__(
        self, logits: torch.Tensor, index: torch.Tensor, finished: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`logits` (b, V) of the decoded rows, `index` (b,) the batch row each one is,
        `finished` (b,) whether it stopped before (None: no decoded row has). A repetition
        penalty acts on the draw, before the temperature (as transformers' processors come
        before its warpers, and vLLM's penalties before its temperature); the log-probs and
        entropies are the policy's."""
        raw = logits.float()
        temperature = self.params.temperature
        scale = temperature > 0 and temperature != 1  # x / 1 is x
        logits = raw / temperature if scale else raw
        step_logp = torch.log_softmax(logits, dim=-1)
        drawn_from = raw if self.seen is None else self.penalized(raw, index)
        if temperature > 0:
            if self.seen is not None:  # else `logits` are the scaled draw's already
                logits = drawn_from / temperature if scale else drawn_from
            allowed = self.sampler.apply(logits, position=self.drawn)
            uniforms = torch.rand(self.rows, 1, generator=self.generator, device=logits.device)
            mine = uniforms[index.clamp(max=self.rows - 1)]  # a filler takes the last row's
            choice = sample_categorical(torch.softmax(allowed, dim=-1), uniforms=mine)
            if self.greedy_rows is not None:  # their uniforms drawn and not used: the others' stay theirs
                choice = torch.where(self.greedy_rows[index], self.greedy(drawn_from), choice)
        else:
            choice = self.greedy(drawn_from)
        if finished is not None:
            choice = choice.masked_fill(finished, self.pad_id)
        if self.seen is not None:
            self.seen[index, choice] = True
        if self.drawn is not None:
            self.drawn += 1
        logp = step_logp.gather(1, choice[:, None]).squeeze(1)
        return choice, logp, -(step_logp.exp() * step_logp).sum(dim=-1)


class Record:
    """The completions as they are decoded: token, log-prob and entropy per batch row and step,
    the column a device counter (so that a captured step writes where a replay is)."""

    def __init__(self, rows: int, steps: int, pad_id: int, device: torch.device):
        self.rows, self.pad_id = rows, pad_id
        self.tokens = torch.empty(rows + 1, steps, dtype=torch.long, device=device)  # + the spare row
        self.logprobs = torch.empty(rows + 1, steps, device=device)
        self.entropies = torch.empty(rows + 1, steps, device=device)
        self.column = torch.zeros((), dtype=torch.long, device=device)
        self.clear()

    def clear(self) -> None:
        self.tokens.fill_(self.pad_id)
        self.logprobs.zero_()
        self.entropies.zero_()
        self.column.zero_()

    def write(self, index: torch.Tensor, choice: torch.Tensor, logp: torch.Tensor, entropy: torch.Tensor) -> None:
        at = (index, self.column.expand_as(index))
        self.tokens.index_put_(at, choice)
        self.logprobs.index_put_(at, logp)
        self.entropies.index_put_(at, entropy)
        self.column.add_(1)

    def taken(self, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens, log-probs and entropies (rows, steps) of the first `steps` steps."""
        return tuple(t[: self.rows, :steps] for t in (self.tokens, self.logprobs, self.entropies))  # type: ignore[return-value]


@dataclass
class DecodeStats:
    """What the HF engine's decoding did, summed over its `generate` calls (bench/recipe_on_gpu.py
    reports milliseconds per step and the share of row-steps that made a token anyone kept)."""

    calls: int = 0
    prefill_s: float = 0.0  # the prompts' forward (vision included)
    decode_s: float = 0.0  # the decoding steps after it
    forwards: int = 0  # decoding forwards (one token per row each)
    row_steps: int = 0  # rows those forwards ran: live, finished not yet dropped, fillers
    useful_row_steps: int = 0  # of those, rows whose completion went on (a kept token per completion but its first)
    # the static step's: cache slots its rows attended over (its window), of the slots the cache holds
    attended_slots: int = 0
    cache_slots: int = 0
    captures: int = 0  # CUDA graphs captured

    def add(self, other: DecodeStats) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


def first_stops(tokens: torch.Tensor, stop_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first stop token: whether it has one (rows,) and its step (rows,)."""
    is_stop = (tokens[..., None] == stop_ids).any(-1)
    return is_stop.any(1), is_stop.int().argmax(1)
