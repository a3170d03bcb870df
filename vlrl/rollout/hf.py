"""The default rollout engine: sampling with the training policy itself, prompt prefix shared.

The prompt batch is run once (vision encoded once per image); its KV cache is repeated for
the n completions of each prompt and decoding continues from there. Vision special tokens
and the padded tail of the vocabulary are never sampled. Because it samples with the policy
object the trainer updates, there are no weights to push and its log-probs are the trainer's.

Only live rows are decoded (`rollout.hf.compact`): when completions stop, the rows still
running are gathered, their cache rows too, and the batch shrinks. Each step draws one uniform
per row of the whole batch, finished or not, and a live row takes its own: the random stream
is consumed as without compaction, so a row's tokens do not depend on which others still run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vlrl.models.batch import Prompt, collate
from vlrl.models.loading import core_model, family_of_model
from vlrl.models.memory import ModelShape, Workload, kv_cache_bytes
from vlrl.models.policy import SamplingFilter, prefill
from vlrl.rollout.base import Completion, EngineSetup, Generation, SamplingParams, banned_token_ids


def sample_categorical(
    probs: torch.Tensor, generator: torch.Generator | None = None, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """One token per row, drawn with probability `probs` (rows need not sum to 1) by inverting
    the CDF: one uniform per row (drawn here, or given as `uniforms` (R, 1)). torch.multinomial
    (and the exponential trick) draw a random number per vocabulary entry, which on CPU cost
    more than the tiny demo model's forward. Zero-probability tokens are never drawn: the first
    index whose CDF exceeds u is never one whose CDF equals its predecessor's."""
    cdf = probs.double().cumsum(dim=-1)
    if uniforms is None:
        uniforms = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device)
    # float32 uniforms (< 1 - 2**-24) scaled in float64 stay strictly below the total
    return torch.searchsorted(cdf, uniforms.double() * cdf[:, -1:], right=True).squeeze(1)


def stop_token_ids(generation_config, tokenizer) -> list[int]:
    """The ids that end a completion: the generation config's and the tokenizer's end tokens."""
    generation_eos = generation_config.eos_token_id
    stops = set(generation_eos if isinstance(generation_eos, list) else [generation_eos])
    stops.add(tokenizer.eos_token_id)
    return sorted(s for s in stops if s is not None)


@dataclass
class HFOptions:
    """rollout.hf: how the HF engine decodes."""

    # Decode only the rows still running: finished completions leave the batch (and the cache)
    compact: bool = True


@dataclass
class Draw:
    """One decoding step's sampling, for the rows still decoded: the token each draws from the
    temperature-scaled policy (bans, top-k, top-p applied), its log-prob and the entropy over
    the whole vocabulary. A finished row (not compacted away) takes the pad token."""

    params: SamplingParams
    sampler: SamplingFilter
    pad_id: int
    rows: int  # of the whole batch: one uniform each per step, whichever rows are decoded
    generator: torch.Generator | None

    def __call__(
        self, logits: torch.Tensor, index: torch.Tensor, finished: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`logits` (b, V) of the decoded rows, `index` (b,) the batch row each one is."""
        logits = logits.float()
        temperature = self.params.temperature
        if temperature > 0:
            logits = logits / temperature
        step_logp = torch.log_softmax(logits, dim=-1)
        allowed = self.sampler.apply(logits)
        if temperature > 0:
            uniforms = torch.rand(self.rows, 1, generator=self.generator, device=logits.device)
            choice = sample_categorical(torch.softmax(allowed, dim=-1), uniforms=uniforms[index])
        else:
            choice = allowed.argmax(dim=-1)
        choice = torch.where(finished, torch.full_like(choice, self.pad_id), choice)
        logp = step_logp.gather(1, choice[:, None]).squeeze(1)
        return choice, logp, -(step_logp.exp() * step_logp).sum(dim=-1)


class Record:
    """The completions as they are decoded: token, log-prob and entropy per batch row and step."""

    def __init__(self, rows: int, steps: int, pad_id: int, device: torch.device):
        self.tokens = torch.full((rows, steps), pad_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(rows, steps, device=device)
        self.entropies = torch.zeros(rows, steps, device=device)
        self.steps = 0  # columns written

    def write(self, index: torch.Tensor, choice: torch.Tensor, logp: torch.Tensor, entropy: torch.Tensor) -> None:
        self.tokens[index, self.steps] = choice
        self.logprobs[index, self.steps] = logp
        self.entropies[index, self.steps] = entropy
        self.steps += 1


class HFEngine:
    name = "hf"
    shares_policy = True
    gives_entropy = True
    Options = HFOptions
    options_key = "hf"

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        device: torch.device | None = None,
        options: HFOptions | None = None,
    ):
        """`device`: where the forwards compute; by default where the parameters are, which
        is not so under FSDP2 with CPU offload (`create` is told by the trainer)."""
        self.options = options or HFOptions()
        self.model = model
        self.device = device or next(model.parameters()).device
        self.family = family_of_model(model)
        self.tokenizer = tokenizer
        self.stop_ids = torch.tensor(stop_token_ids(core_model(model).generation_config, tokenizer))
        self.pad_id = tokenizer.pad_token_id  # fills rows that already stopped
        vocab = core_model(model).config.get_text_config().vocab_size
        self.banned = torch.zeros(vocab, dtype=torch.bool)
        self.banned[banned_token_ids(tokenizer, vocab, self.family.vision_tokens)] = True

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: HFOptions | None) -> tuple[float, float]:
        """Its KV cache while sampling, nothing during the update (it samples with the policy:
        whatever the strategy gathers for that is the strategy's)."""
        return kv_cache_bytes(shape, work), 0.0

    @classmethod
    def create(cls, setup: EngineSetup, options: HFOptions | None) -> HFEngine:
        model, device = setup.load_policy()
        return cls(model, setup.processor.tokenizer, device, options)

    def sync_weights(self, weights) -> None:
        """Nothing to do: this engine samples with the policy object the trainer updates."""

    def sleep(self) -> None:
        """Nothing to free: the engine holds no memory of its own between rollouts."""

    def wake(self) -> None:
        pass

    def close(self) -> None:
        """The policy belongs to the trainer: nothing to release."""

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        """params.n completions for each prompt, grouped by prompt."""
        device = self.device
        batch = collate(prompts, self.pad_id).to(device)
        prefix = prefill(self.model, batch)
        n = params.n
        prefix.cache.batch_repeat_interleave(n)
        rows = len(prompts) * n
        greedy = params.temperature == 0
        sampler = SamplingFilter(self.banned.to(device), 0 if greedy else params.top_k, 1.0 if greedy else params.top_p)
        draw = Draw(params, sampler, self.pad_id, rows, generator)
        record = Record(rows, params.max_new_tokens, self.pad_id, device)
        stop_ids = self.stop_ids.to(device)

        logits = prefix.last_logits.repeat_interleave(n, dim=0)
        next_position = prefix.next_position.repeat_interleave(n)
        attention_mask = batch.attention_mask.repeat_interleave(n, dim=0)
        index = torch.arange(rows, device=device)  # the batch row each decoded row is
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(params.max_new_tokens):
            choice, logp, entropy = draw(logits, index, finished)
            record.write(index, choice, logp, entropy)
            live = ~finished
            finished = finished | torch.isin(choice, stop_ids)
            running = int(finished.logical_not().sum())
            if running == 0 or step + 1 == params.max_new_tokens:
                break
            attention_mask = torch.cat([attention_mask, live.long()[:, None]], dim=1)
            if self.options.compact and running < len(index):
                keep = finished.logical_not().nonzero().squeeze(1)
                prefix.cache.batch_select_indices(keep)
                attention_mask, next_position, index, choice, finished = (
                    t[keep] for t in (attention_mask, next_position, index, choice, finished)
                )
            out = self.model(
                input_ids=choice[:, None],
                attention_mask=attention_mask,
                position_ids=self.family.decode_positions(next_position, step, 1),
                past_key_values=prefix.cache,
                use_cache=True,
            )
            logits = out.logits[:, -1]
        taken = slice(0, record.steps)
        return self._completions(record.tokens[:, taken], record.logprobs[:, taken], record.entropies[:, taken], n)

    def _completions(
        self, tokens: torch.Tensor, logprobs: torch.Tensor, entropies: torch.Tensor, n: int
    ) -> list[Generation]:
        stop_ids = set(self.stop_ids.tolist())
        groups: list[Generation] = []
        for row_tokens, row_logp, row_entropy in zip(
            tokens.tolist(), logprobs.tolist(), entropies.tolist(), strict=True
        ):
            is_stop = [t in stop_ids for t in row_tokens]
            length = is_stop.index(True) + 1 if any(is_stop) else len(row_tokens)
            ids = row_tokens[:length]
            completion = Completion(
                token_ids=ids,
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                truncated=not any(is_stop),
                logprobs=row_logp[:length],
                entropies=row_entropy[:length],
            )
            if not groups or len(groups[-1].completions) == n:
                groups.append(Generation([]))
            groups[-1].completions.append(completion)
        return groups
