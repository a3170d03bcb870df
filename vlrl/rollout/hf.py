"""The default rollout engine: sampling with the training policy itself, prompt prefix shared.

The prompt batch is run once (vision encoded once per image); its KV cache is repeated for
the n completions of each prompt and decoding continues from there. Vision special tokens
and the padded tail of the vocabulary are never sampled. Because it samples with the policy
object the trainer updates, there are no weights to push and its log-probs are the trainer's.

Only live rows are decoded (`rollout.hf.compact`): when completions stop, the rows still
running are gathered, their cache rows too, and the batch shrinks. Each step draws one uniform
per row of the whole batch, finished or not, and a live row takes its own: the random stream
is consumed as without compaction, so a row's tokens do not depend on which others still run.

Two loops decode: the dynamic one here (each token written into cache slots reserved after the
prefill, `GrowingLayer`; the host looks after every step) and the static-shape step of
static.py (`rollout.hf.static_cache`, preallocated buffers, the host looks every `check_every`
steps; on CUDA captured in CUDA graphs, `rollout.hf.cuda_graphs`). Both give the same tokens
and random stream as decoding every row to the end, and its log-probs to float rounding
(tests/rollout/test_hf_engine.py). A model whose cache, layers or attention the static step
cannot hold (FlashAttention, which reads the padding mask alone; experts that pick their tokens
with nonzero(): `static.static_refusal`) decodes with the dynamic loop, and says so (`note`);
Qwen3.5's linear-attention states it holds (`static.RowsStateLayer`), and Qwen3-VL MoE's experts
routed on the device by transformers' grouped_mm.

Either loop's forward is the lean step of models/decode_step.py where the model allows it
(`rollout.hf.lean_step`): the model's own kernels, bit for bit, without transformers' per-step
machinery, which at the demo's sizes cost as much as the arithmetic (the static step's,
static.LeanStaticStep, also makes fewer kernels, each of which a CUDA graph's replay pays for).

A LoRA policy decodes with its adapters merged (`rollout.hf.merge_lora`, models/lora.py): each
adapted layer computes with W + s B A in a copy of W, one product instead of three, the base
weights never written. Its log-probs are then those of the merged weights, in the model's
dtype: not exactly the trainer's (`exact_logprobs` False), so the trainer treats them as it
treats another engine's (old log-probs recomputed when the policy moves, the difference
measured as rollout/logp_diff and corrected by algo.rollout_correction). It still samples with
the policy object itself (`shares_policy`): nothing to push.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import Cache
from transformers.cache_utils import DynamicLayer

from vlrl.config import ConfigError
from vlrl.models.batch import Prompt, PromptBatch, collate
from vlrl.models.decode_step import DecodeStep, ModelStep, decode_step_refusal
from vlrl.models.loading import core_model, family_of_model, fsdp_sharded, without_grad
from vlrl.models.lora import MergedLoRA, lora_linears
from vlrl.models.memory import ModelShape, Workload, kv_cache_bytes
from vlrl.models.policy import Prefix, SamplingFilter, prefill
from vlrl.rollout.base import Completion, EngineSetup, Generation, SamplingParams, banned_token_ids, vocab_mask
from vlrl.rollout.decoding import DecodeStats, Draw, Record
from vlrl.rollout.static import StaticDecoding, StaticPlan, cache_length, compiled_experts_refusal, static_refusal


class GrowingLayer(DynamicLayer):
    """A layer's keys and values at the front of buffers reserved for every token the dynamic
    loop will feed: a decoding step writes its token's slot in place, where DynamicLayer copies
    the whole cache into a longer one (`torch.cat`, every layer, every step: quadratic in the
    completion's length). Only what the loop calls is kept right: update, batch_select_indices."""

    def __init__(self, layer: DynamicLayer, slots: int):
        super().__init__()
        keys, values = layer.keys, layer.values
        self.length = keys.shape[2]
        self.all_keys = keys.new_empty(*keys.shape[:2], self.length + slots, keys.shape[3])
        self.all_values = values.new_empty(*values.shape[:2], self.length + slots, values.shape[3])
        self.all_keys[:, :, : self.length] = keys
        self.all_values[:, :, : self.length] = values
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.written()

    def written(self) -> None:
        self.keys, self.values = self.all_keys[:, :, : self.length], self.all_values[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[2]
        self.all_keys[:, :, self.length : end] = key_states
        self.all_values[:, :, self.length : end] = value_states
        self.length = end
        self.written()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.all_keys, self.all_values = self.all_keys[indices], self.all_values[indices]
        self.written()


def reserve(cache: Cache, slots: int) -> None:
    """Room for `slots` more tokens in each of `cache`'s attention layers (the others, Qwen3.5's
    recurrent states, are left as they are)."""
    cache.layers = [GrowingLayer(layer, slots) if type(layer) is DynamicLayer else layer for layer in cache.layers]


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
    # The static-shape step (preallocated cache, mask and positions; the host looks every
    # check_every steps). None: on CUDA. Models it cannot hold use the dynamic loop.
    static_cache: bool | None = None
    # Each batch-size bucket's static step captured as a CUDA graph and replayed. None: on CUDA
    # with the static step (off under FSDP2, whose gathered weights move between rollouts).
    cuda_graphs: bool | None = None
    check_every: int = 8  # static step: decoding steps between the host's looks (end, compaction)
    smallest_bucket: int = 8  # static step: batch sizes are the whole batch and powers of two down to this
    # static step: attend over the cache's first slots, this many doubling as they fill, not over
    # all of it (0: all of it; the slots past the window are not written yet: static.py)
    smallest_window: int = 128
    # A LoRA policy decodes with its adapters merged into copies of their weights (out of
    # place); its log-probs then differ from the trainer's by the merge's rounding, which the
    # trainer measures (rollout/logp_diff) and corrects (algo.rollout_correction).
    merge_lora: bool = True
    # The decoding forward by models/decode_step.py (the model's own kernels, bit for bit,
    # without transformers' per-step machinery) instead of the model's forward, in either loop
    # (the static step's: static.LeanStaticStep). None: wherever the model can take it
    # (`decode_step_refusal`).
    lean_step: bool | None = None
    # The static step (asked for by this on any device) with its forward compiled by
    # torch.compile: its small kernels fused, fewer for a CUDA graph's replay to pay for (the 3B
    # step took 8.6 ms against 1.3 ms of weights to read: docs/performance.md). One compilation
    # for every batch size and cache length, tens of seconds at the first rollout. Off by
    # default: its gain on a GPU is not measured yet. The compiled kernels round otherwise than
    # the trainer's, so the engine's log-probs are then not the trainer's own (`exact_logprobs`).
    compile_step: bool = False

    def validate(self, key: str) -> None:
        if self.check_every < 1 or self.smallest_bucket < 1:
            raise ConfigError(
                f"config: {key}.check_every and smallest_bucket must be >= 1, got "
                f"{self.check_every} and {self.smallest_bucket}"
            )
        if self.smallest_window < 0:
            raise ConfigError(
                f"config: {key}.smallest_window must be >= 0 (0: the whole cache), got {self.smallest_window}"
            )
        if self.cuda_graphs and self.static_cache is False:
            raise ConfigError(f"config: {key}.cuda_graphs captures the static step: it needs static_cache")
        if self.compile_step and self.static_cache is False:
            raise ConfigError(f"config: {key}.compile_step compiles the static step: it needs static_cache")


class HFEngine:
    name = "hf"
    shares_policy = True
    gives_entropy = True
    mixes_greedy = True  # SamplingParams.greedy: rows of the batch like any other
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
        self.lean, lean_note = self._lean()
        self.static_plan, self.note = self._plan()
        self.note = "; ".join(n for n in (self.note, lean_note) if n)
        self.decode_forward = DecodeStep(model) if self.lean else ModelStep(model)  # the dynamic loop's
        self._static: tuple[tuple, StaticDecoding] | None = None  # kept for the next batch of its shape
        adapted = hasattr(model, "peft_config") and lora_linears(model)
        self.lora = MergedLoRA(model) if self.options.merge_lora and adapted else None
        # merged weights, and compiled kernels, round otherwise than the trainer's forward
        self.exact_logprobs = self.lora is None and not (self.static_plan and self.static_plan.compiled)
        self.stats = DecodeStats()  # summed over every generate call
        self.tokenizer = tokenizer
        self.stop_ids = torch.tensor(stop_token_ids(core_model(model).generation_config, tokenizer))
        self.pad_id = tokenizer.pad_token_id  # fills rows that already stopped
        vocab = core_model(model).config.get_text_config().vocab_size
        self.stops = vocab_mask(self.stop_ids.tolist(), vocab)  # banned before min_new_tokens
        self.banned = vocab_mask(banned_token_ids(tokenizer, vocab, self.family.vision_tokens), vocab)

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: HFOptions | None) -> tuple[float, float]:
        """Its KV cache while sampling, and a LoRA policy's merged copies of the adapted weights
        (rollout.hf.merge_lora: freed when it sleeps); nothing during the update (it samples with
        the policy: whatever the strategy gathers for that is the strategy's)."""
        merged = shape.adapted * shape.dtype_bytes if (options or HFOptions()).merge_lora else 0
        return kv_cache_bytes(shape, work) + merged + shape.float32_head * 4, 0.0  # each step's upcast head

    @classmethod
    def create(cls, setup: EngineSetup, options: HFOptions | None) -> HFEngine:
        model, device = setup.load_policy()
        return cls(model, setup.processor.tokenizer, device, options)

    def sync_weights(self, weights) -> None:
        """Nothing to do: this engine samples with the policy object the trainer updates."""

    def _plan(self) -> tuple[StaticPlan | None, str]:
        """Which loop decodes (None: the dynamic one), and a note when the static step was asked
        for (or is the device's default) but the model cannot take it."""
        options, cuda = self.options, self.device.type == "cuda"
        # compile_step compiles the static step: asking for it asks for the step on any device
        wanted = (cuda or options.compile_step) if options.static_cache is None else options.static_cache
        if not wanted:
            return None, ""
        refusal = static_refusal(self.model, self.device)
        if refusal:
            return None, f"decodes with the dynamic loop, not the static step: {refusal}"
        sharded = fsdp_sharded(self.model)
        graphs = cuda and not sharded if options.cuda_graphs is None else options.cuda_graphs
        if graphs and not cuda:
            raise ConfigError(f"config: rollout.hf.cuda_graphs needs CUDA; the engine computes on {self.device}")
        if graphs and sharded:
            raise ConfigError(
                "config: rollout.hf.cuda_graphs cannot replay FSDP2's gathered weights (new tensors at every "
                "gathering); leave it unset under trainer.parallel=fsdp2"
            )
        if options.compile_step and sharded:
            raise ConfigError(
                "config: rollout.hf.compile_step has not been tried on FSDP2's gathered weights (new tensors at "
                "every gathering); leave it off under trainer.parallel=fsdp2"
            )
        if options.compile_step and graphs and (why := compiled_experts_refusal(self.model)):
            raise ConfigError(f"config: rollout.hf.compile_step in CUDA graphs: {why}")
        plan = StaticPlan(
            options.compact, graphs, options.check_every, options.smallest_bucket, options.smallest_window, self.lean,
            options.compile_step,
        )  # fmt: skip
        return plan, ""

    def _lean(self) -> tuple[bool, str]:
        """Whether either loop decodes with the lean step (the dynamic loop's `DecodeStep`, the
        static one's `LeanStaticStep`): where the model allows it, unless switched off; and a
        note when it was asked for but the model cannot take it."""
        asked = self.options.lean_step
        if asked is False:
            return False, ""
        why = decode_step_refusal(self.model)
        return not why, f"not the lean step: {why}" if asked and why else ""

    def sleep(self) -> None:
        """Free the static step's buffers and graphs, and the merged LoRA weights: the update
        has the memory."""
        self._static = None
        if self.lora is not None:
            self.lora.release()

    def wake(self) -> None:
        pass

    def close(self) -> None:
        """The policy belongs to the trainer: only the engine's own buffers to release."""
        self.sleep()

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        """params.n completions for each prompt, grouped by prompt."""
        with without_grad(self.model):
            return self._generate(prompts, params, generator)

    def _generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None
    ) -> list[Generation]:
        device = self.device
        batch = collate(prompts, self.pad_id).to(device)
        n = params.n
        rows = len(prompts) * n
        greedy = params.temperature == 0
        sampler = SamplingFilter(
            self.banned.to(device),
            *((0, 1.0, 0.0) if greedy else (params.top_k, params.top_p, params.min_p)),
            min_new_tokens=params.min_new_tokens,
            stops=self.stops.to(device),
        )
        draw = Draw(params, sampler, self.pad_id, rows, generator)
        decode = self._decode_dynamic if self.static_plan is None else self._decode_static
        stats = DecodeStats(calls=1)
        start = time.perf_counter()
        with self.lora.merged() if self.lora is not None else contextlib.nullcontext():
            prefix = prefill(self.model, batch)
            prefix.cache.batch_repeat_interleave(n)
            if device.type == "cuda":  # the times are the work's, not its launch's
                torch.cuda.synchronize(device)
            stats.prefill_s = time.perf_counter() - start
            tokens, logprobs, entropies = decode(prefix, batch, n, draw, stats)
        stats.decode_s = time.perf_counter() - start - stats.prefill_s  # both loops end looking at the tokens
        groups = self._completions(tokens, logprobs, entropies, n)
        stats.useful_row_steps = sum(max(len(c.token_ids) - 1, 0) for g in groups for c in g.completions)
        self.stats.add(stats)
        return groups

    def _decode_dynamic(
        self, prefix: Prefix, batch: PromptBatch, n: int, draw: Draw, stats: DecodeStats
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The loop whose batch shrinks as rows stop, the host looking after every step. The
        attention mask and the rope positions of every token fed are made once for the whole
        rollout, and a step takes views of them (it would concatenate a column and compute
        positions). The mask is ones after the prompt, as `generate` makes it: without
        compaction a stopped row is fed pad tokens, which only that row attends to, and what
        it draws after its stop is not kept."""
        rows, steps, device, compact = draw.rows, draw.params.max_new_tokens, self.device, self.options.compact
        self.decode_forward.refresh()  # the lean step looks the model's layers up again
        reserve(prefix.cache, steps - 1)  # the last token drawn is never fed back
        record = Record(rows, steps, self.pad_id, device)
        prompt_mask = batch.attention_mask
        draw.begin(batch.input_ids.repeat_interleave(n, dim=0), prompt_mask.repeat_interleave(n, dim=0))
        stop_ids = self.stop_ids.to(device)
        logits = prefix.last_logits.repeat_interleave(n, dim=0)
        width = prompt_mask.shape[1]
        mask = prompt_mask.new_ones(rows, width + steps - 1)
        mask[:, :width] = prompt_mask.repeat_interleave(n, dim=0)
        positions = self.family.decode_positions(prefix.next_position.repeat_interleave(n), 0, steps - 1)
        index = torch.arange(rows, device=device)  # the batch row each decoded row is
        # the decoded rows that stopped before this step, which draw the pad token: none when
        # the rows that stop are compacted away
        finished = None if compact else torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(steps):
            choice, logp, entropy = draw(logits, index, finished)
            record.write(index, choice, logp, entropy)
            stopped = torch.isin(choice, stop_ids)
            if finished is not None:
                finished = stopped = finished | stopped  # and the rows stopped before
            running = len(index) - int(stopped.sum())
            if running == 0 or step + 1 == steps:
                break
            if compact and running < len(index):
                keep = stopped.logical_not().nonzero().squeeze(1)
                prefix.cache.batch_select_indices(keep)
                mask, index, choice = (t[keep] for t in (mask, index, choice))
                positions = positions[:, keep]
            stats.forwards += 1
            stats.row_steps += len(index)
            logits = self.decode_forward(
                choice[:, None], mask[:, : width + step + 1], positions[:, :, step : step + 1], prefix.cache
            )
        return record.taken(step + 1)

    def _decode_static(
        self, prefix: Prefix, batch: PromptBatch, n: int, draw: Draw, stats: DecodeStats
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The static-shape step (static.py): buffers of this batch's shape, reused while the
        engine keeps them (until it sleeps), the live rows compacted into buckets."""
        rows, params, prompt_mask = draw.rows, draw.params, batch.attention_mask
        length = cache_length(prompt_mask.shape[1], params.max_new_tokens)
        shape = (rows, length, params, draw.generator)
        if self._static is None or self._static[0] != shape:
            self._static = None  # the old buffers go before the new ones are made
            decoding = StaticDecoding(
                self.model, prefix.cache, length, draw, Record(rows, params.max_new_tokens, self.pad_id, self.device),
                self.stop_ids.to(self.device), self.static_plan,
            )  # fmt: skip
            self._static = (shape, decoding)
        decoding = self._static[1]
        # the kept step's own draw (a captured step reads its buffers)
        decoding.draw.begin(batch.input_ids.repeat_interleave(n, dim=0), prompt_mask.repeat_interleave(n, dim=0))
        captures = decoding.captures
        next_position = prefix.next_position.repeat_interleave(n)
        positions = self.family.decode_positions(next_position, 0, 1)
        advance = self.family.decode_positions(next_position, 1, 1) - positions
        decoding.start(prefix.cache, prompt_mask.repeat_interleave(n, dim=0), positions, advance)
        taken = decoding.decode(prefix.last_logits.repeat_interleave(n, dim=0))
        stats.forwards, stats.row_steps = decoding.forwards, decoding.row_steps
        stats.attended_slots, stats.cache_slots = decoding.attended_slots, decoding.row_steps * length
        stats.captures = decoding.captures - captures
        return decoding.record.taken(taken)

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
