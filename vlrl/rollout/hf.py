"""The default rollout engine: sampling with the training policy itself, prompt prefix shared.

The prompt batch is run once (vision encoded once per image); its KV cache is repeated for
the n completions of each prompt and decoding continues from there. Vision special tokens
and the padded tail of the vocabulary are never sampled. Because it samples with the policy
object the trainer updates, there are no weights to push and its log-probs are the trainer's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vlrl.models.batch import Prompt, collate
from vlrl.models.loading import core_model, family_of_model
from vlrl.models.memory import ModelShape, Workload, kv_cache_bytes
from vlrl.models.policy import SamplingFilter, prefill
from vlrl.rollout.base import Completion, EngineSetup, Generation, SamplingParams, banned_token_ids


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row, drawn with probability `probs` (rows need not sum to 1) by inverting
    the CDF: one uniform per row. torch.multinomial (and the exponential trick) draw a random
    number per vocabulary entry, which on CPU cost more than the tiny demo model's forward.
    Zero-probability tokens are never drawn: the first index whose CDF exceeds u is never one
    whose CDF equals its predecessor's."""
    cdf = probs.double().cumsum(dim=-1)
    # float32 uniforms (< 1 - 2**-24) scaled in float64 stay strictly below the total
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device).double()
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1)


def stop_token_ids(generation_config, tokenizer) -> list[int]:
    """The ids that end a completion: the generation config's and the tokenizer's end tokens."""
    generation_eos = generation_config.eos_token_id
    stops = set(generation_eos if isinstance(generation_eos, list) else [generation_eos])
    stops.add(tokenizer.eos_token_id)
    return sorted(s for s in stops if s is not None)


class HFEngine:
    name = "hf"
    shares_policy = True
    gives_entropy = True
    Options = None
    options_key = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer, device: torch.device | None = None):
        """`device`: where the forwards compute; by default where the parameters are, which
        is not so under FSDP2 with CPU offload (`create` is told by the trainer)."""
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
    def memory(shape: ModelShape, work: Workload, options: None) -> tuple[float, float]:
        """Its KV cache while sampling, nothing during the update (it samples with the policy:
        whatever the strategy gathers for that is the strategy's)."""
        return kv_cache_bytes(shape, work), 0.0

    @classmethod
    def create(cls, setup: EngineSetup, options: None) -> HFEngine:
        model, device = setup.load_policy()
        return cls(model, setup.processor.tokenizer, device)

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
        logits = prefix.last_logits.repeat_interleave(n, dim=0)
        next_position = prefix.next_position.repeat_interleave(n)
        attention_mask = batch.attention_mask.repeat_interleave(n, dim=0)
        rows = logits.shape[0]
        greedy = params.temperature == 0
        sampler = SamplingFilter(self.banned.to(device), 0 if greedy else params.top_k, 1.0 if greedy else params.top_p)
        stop_ids = self.stop_ids.to(device)

        tokens, logprobs, entropies = [], [], []
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(params.max_new_tokens):
            logits = logits.float()
            if params.temperature > 0:
                logits = logits / params.temperature
            step_logp = torch.log_softmax(logits, dim=-1)
            allowed = sampler.apply(logits)
            if params.temperature > 0:
                choice = sample_categorical(torch.softmax(allowed, dim=-1), generator)
            else:
                choice = allowed.argmax(dim=-1)
            choice = torch.where(finished, torch.full_like(choice, self.pad_id), choice)
            tokens.append(choice)
            logprobs.append(step_logp.gather(1, choice[:, None]).squeeze(1))
            entropies.append(-(step_logp.exp() * step_logp).sum(dim=-1))
            live = ~finished
            finished = finished | torch.isin(choice, stop_ids)
            if bool(finished.all()) or step + 1 == params.max_new_tokens:
                break
            attention_mask = torch.cat([attention_mask, live.long()[:, None]], dim=1)
            out = self.model(
                input_ids=choice[:, None],
                attention_mask=attention_mask,
                position_ids=self.family.decode_positions(next_position, step, 1),
                past_key_values=prefix.cache,
                use_cache=True,
            )
            logits = out.logits[:, -1]
        return self._completions(
            torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1), n
        )

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
