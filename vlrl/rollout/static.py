"""The HF engine's static-shape decoding step (`rollout.hf.static_cache`), and its CUDA graphs.

Every tensor a decoding step reads or writes is allocated once per batch shape: the KV cache
(preallocated to the prompt plus the completion, as transformers' StaticCache is), the
attention mask (the prompt's padding, then ones: causality hides the slots not written yet),
the rope positions (advanced in place: Qwen's multimodal positions continue from the prompt's
largest one, every section together), the input tokens and the completions being written. A
step is then one fixed sequence of kernels: the forward of the last tokens, the draw (vlrl's
own, `hf.Draw`: the same distribution, uniforms and log-probs as the dynamic loop) and its
bookkeeping, with no host synchronization. The host looks every `check_every` steps, to stop
when every row has, to compact the live rows into the next smaller batch-size bucket, and to
widen the window of the cache the step attends over.

A mixture of experts (Qwen3-VL MoE) takes the step where transformers routes its tokens on the
device (`experts_refusal`); the lean step calls its experts as the model does.

A hybrid model's linear-attention layers (Qwen3.5's gated delta net) keep, instead of keys and
values, a convolution window and a recurrent state of fixed size per row, which transformers'
one-token step reads off the cache and writes back in place: the step keeps them in buffers of
the batch's rows, a bucket a view of their first rows, compacted as the keys and values are
(`RowsStateLayer`). The lean step calls those layers as the model does, on the same buffers.

The window (`rollout.hf.smallest_window`): a step attends over the cache's first slots, the
fewest of `smallest_window` doubling (or all of them) that hold every slot written before the
host looks again, not over the whole cache. The slots past it are not written yet, so
attention gives them no weight either way; reading them is the cost. The cache holds the
longest completion's slots (the recipe's 2,048) while most rows stop far sooner (issue 25
counts a median of about 366 tokens in the recipe's completions), and at 128 rows of
Qwen2.5-VL-3B every 1,000 slots are 4.7 GB of keys and values a step, 1 ms of an H200's
bandwidth, against 1.3 ms for the weights. Bit for bit on the CPU at the default's widths
(tests/rollout/test_hf_engine.py); a GPU's attention kernel works through the keys in tiles
of 64 or 128, so a window of whole tiles leaves out only tiles it would have masked whole
(read, not yet checked on a GPU).

On CUDA (`rollout.hf.cuda_graphs`) each bucket's step at each window is captured once as a CUDA
graph and replayed. A replay reads the tensors the capture saw, by address:
- the parameters: the optimizer updates them in place, so a graph captured before an update
  samples from the updated weights when replayed after it (tests/gpu/test_decoding_graphs.py);
  under FSDP2 the gathered weights are new tensors at every gathering, and FSDP2's root
  pre-forward makes its all-gather streams wait on the compute stream at every forward, which
  would fork them into a capture that never joins them (read in torch's _fsdp_state.py, not
  tried on a GPU), so graphs are off there;
- the sampling generator, registered with each graph (`register_generator_state`): a replay
  advances its Philox offset as the eager step does, so seeds keep their meaning;
- this module's buffers, kept for the next `generate` of the same shape until the engine sleeps.

The random stream ends where the dynamic loop's does: the steps run past the last stop (at most
`check_every - 1`) draw uniforms the dynamic loop would not, so the generator is set back to the
last check and advanced by the steps that loop takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo.config as dynamo_config
import torch.fx.experimental._config as fx_config
from transformers import Cache
from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin, LinearAttentionLayer, StaticLayer

from vlrl.models.decode_step import DecodeStep, ModelStep, unusual_layers
from vlrl.models.loading import core_model
from vlrl.rollout.decoding import Draw, Record, first_stops

CACHE_GRANULE = 128  # cache lengths are rounded up to this, so nearby prompt lengths share buffers and graphs
WARMUP_STEPS = 2  # eager steps on the capture stream before a bucket's capture (lazy CUDA initialization)
# Slots the buffers hold past the cache's length, which no window reaches: a window is then never
# a whole buffer, so a compiled step, which guards on whether its inputs are contiguous, takes
# every window alike, the whole cache's included (it compiled again when the window became it)
UNREACHED_SLOTS = 16


def static_refusal(model: torch.nn.Module, device: torch.device) -> str:
    """Why `model`, computing on `device`, cannot take the static step ("": it can)."""
    implementation = core_model(model).config._attn_implementation
    if implementation not in ("sdpa", "eager"):  # FlashAttention reads the padding mask alone
        return (
            f"its attention is {implementation!r}, which would attend to the slots not written yet (the step's "
            "mask holds them; SDPA's and eager attention's causal mask hides them)"
        )
    kinds = unusual_layers(model)
    attention = [kind for kind in kinds if kind not in ("experts", "linear_attention")]
    if attention:
        return f"its layers include {', '.join(attention)}, whose cache is neither keys and values in fixed slots nor a state"
    return experts_refusal(model, device) if "experts" in kinds else ""


def experts_refusal(model: torch.nn.Module, device: torch.device) -> str:
    """Why a mixture of experts (Qwen3-VL MoE) cannot take the static step ("": it can).
    transformers' `grouped_mm` experts (its default where torch has grouped_mm) sort the
    token-expert pairs, count them per expert with histc and multiply at those offsets on the
    device ("histc instead of bincount to avoid cuda graph issues", integrations/moe.py), and
    `batched_mm` gathers each pair's weights: neither reads anything back. The eager loop picks
    each expert's tokens with nonzero(), and grouped_mm below compute capability 8.0 falls back
    to a loop over offsets read on the host: both would wait for the device inside a step."""
    implementation = core_model(model).config.get_text_config()._experts_implementation
    if implementation not in ("grouped_mm", "batched_mm"):
        return (
            f"its experts' implementation {implementation!r} is not one that routes tokens on the device "
            "(grouped_mm, batched_mm); transformers' eager loop picks them with nonzero(), a host synchronization"
        )
    if implementation == "grouped_mm" and device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
        return "its experts' grouped_mm falls back below compute capability 8.0 to a loop reading their offsets on the host"
    return ""


def compiled_experts_refusal(model: torch.nn.Module) -> str:
    """Why the compiled static step's CUDA graphs cannot hold `model`'s experts ("": they can).
    Under torch.compile transformers' grouped_mm takes bfloat16 weights only; in another dtype
    it multiplies each expert's tokens in a loop over offsets read on the host
    (`_can_use_grouped_mm`, `_grouped_mm_fallback` in integrations/moe.py), which a capture
    cannot hold. batched_mm reads nothing back, compiled or not."""
    if "experts" not in unusual_layers(model):
        return ""
    if core_model(model).config.get_text_config()._experts_implementation != "grouped_mm":
        return ""
    dtype = next(core_model(model).model.language_model.parameters()).dtype
    if dtype == torch.bfloat16:
        return ""
    return (
        f"its experts' weights are {dtype}: compiled, transformers' grouped_mm takes bfloat16 only and otherwise "
        "loops over offsets read on the host, which a CUDA graph cannot capture (model.dtype=bfloat16, or "
        "rollout.hf.cuda_graphs=false)"
    )


def cache_length(prompt: int, max_new_tokens: int) -> int:
    """Slots for the prompt and every completion token but the last (never fed back), rounded up."""
    return -(-(prompt + max_new_tokens - 1) // CACHE_GRANULE) * CACHE_GRANULE


def buckets(rows: int, smallest: int) -> list[int]:
    """Batch sizes the step runs at, largest first: the whole batch, then powers of two down to
    `smallest` (live rows are compacted into the smallest bucket that holds them)."""
    sizes, size = {rows}, 1
    while size < rows:
        if size >= smallest:
            sizes.add(size)
        size *= 2
    return sorted(sizes, reverse=True)


def windows(length: int, smallest: int) -> list[int]:
    """Widths of the cache the step attends over, smallest first: `smallest` slots doubling
    while below the cache's `length`, then `length` (only it when `smallest` is 0)."""
    sizes, size = [], smallest
    while 0 < size < length:
        sizes.append(size)
        size *= 2
    return [*sizes, length]


class RowsLayer(StaticLayer):
    """One layer's preallocated keys and values for `rows` rows, decoded at a leading slice of
    them and of their slots (`narrow`): compacted rows are moved to the front, so a bucket is a
    view, not a copy, and so is a window of the slots.
    Every layer writes its token at the slot `length` holds, one tensor shared by the layers and
    advanced once a step by the loop (`StaticDecoding.step`): StaticLayer's `update` makes the
    slot's index and advances a length of its own in each layer, five kernels a layer where
    this one's are its two copies (a replayed step pays for every kernel, however small)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: torch.Tensor):
        super().__init__(max_cache_len=keys.shape[2])
        self.all_keys, self.all_values = keys, values
        self.keys, self.values = keys, values
        self.cumulative_length = length  # (): the slot the next token is written to, shared, advanced in place
        self.slot = length.view(1)  # as the index of a copy
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """The step's keys and values (rows, heads, 1, head_dim) written at the shared slot."""
        self.keys.index_copy_(2, self.slot, key_states)
        self.values.index_copy_(2, self.slot, value_states)
        return self.keys, self.values

    def narrow(self, rows: int, window: int) -> None:
        """Decode the first `rows` rows over the first `window` slots (what transformers' mask
        of a static cache spans, `get_mask_sizes`, for the model's own forward)."""
        self.keys, self.values = self.all_keys[:rows, :, :window], self.all_values[:rows, :, :window]
        self.max_cache_len = window

    def fill(self, prefilled: CacheLayerMixin, prompt: int) -> None:
        """The prefill's keys and values, in the first `prompt` slots of every row."""
        self.all_keys[:, :, :prompt] = prefilled.keys
        self.all_values[:, :, :prompt] = prefilled.values

    def gather(self, live: torch.Tensor, window: int) -> None:
        """Rows `live` moved to the front, the first `window` slots of each (none past it is written)."""
        n = len(live)
        self.all_keys[:n, :, :window] = self.all_keys[live, :, :window]
        self.all_values[:n, :, :window] = self.all_values[live, :, :window]

    @classmethod
    def like(cls, prefilled: CacheLayerMixin, rows: int, slots: int, length: torch.Tensor) -> RowsLayer:
        keys, values = prefilled.keys, prefilled.values
        return cls(
            keys.new_zeros(rows, keys.shape[1], slots, keys.shape[3]),
            values.new_zeros(rows, values.shape[1], slots, values.shape[3]),
            length,
        )


class RowsStateLayer(LinearAttentionLayer):
    """One linear-attention layer's states (Qwen3.5's gated delta net: a convolution window and
    a recurrent state per row, of fixed size whatever the length) for `rows` rows, decoded at a
    leading slice of them as RowsLayer's keys and values are. transformers' one-token step
    reads the states off the layer and writes them in place (causal_conv1d_update's copy,
    LinearAttentionLayer.update_recurrent_state's), so into the bucket's view of these buffers:
    nothing is allocated or read back, and a CUDA graph replays it."""

    def __init__(self, conv: list[torch.Tensor], recurrent: list[torch.Tensor]):
        super().__init__(number_of_states=len(conv))
        self.all_conv, self.all_recurrent = conv, recurrent
        for i, window in enumerate(conv):
            self.conv_kernel_size[i] = window.shape[-1]
            self.is_conv_states_initialized[i] = self.is_recurrent_states_initialized[i] = True
            self.has_previous_state[i] = True  # the step's path: decoding from a state, not a prefill
        self.dtype, self.device = conv[0].dtype, conv[0].device

    def narrow(self, rows: int, window: int) -> None:
        """Decode the first `rows` rows (a state has no slots to window)."""
        for i in range(self.number_of_states):
            self.conv_states[i], self.recurrent_states[i] = self.all_conv[i][:rows], self.all_recurrent[i][:rows]

    def fill(self, prefilled: LinearAttentionCacheLayerMixin, prompt: int) -> None:
        for i in range(self.number_of_states):
            self.all_conv[i].copy_(prefilled.conv_states[i])
            self.all_recurrent[i].copy_(prefilled.recurrent_states[i])

    def gather(self, live: torch.Tensor, window: int) -> None:
        n = len(live)
        for i in range(self.number_of_states):
            self.all_conv[i][:n] = self.all_conv[i][live]
            self.all_recurrent[i][:n] = self.all_recurrent[i][live]

    @classmethod
    def like(cls, prefilled: LinearAttentionCacheLayerMixin, rows: int) -> RowsStateLayer:
        states = range(prefilled.number_of_states)
        return cls(
            [prefilled.conv_states[i].new_zeros(rows, *prefilled.conv_states[i].shape[1:]) for i in states],
            [prefilled.recurrent_states[i].new_zeros(rows, *prefilled.recurrent_states[i].shape[1:]) for i in states],
        )


@dataclass(frozen=True)
class StaticPlan:
    """How the static loop runs (rollout.hf's options, settled for the device and the model)."""

    compact: bool
    graphs: bool
    check_every: int
    smallest_bucket: int
    smallest_window: int  # slots of the narrowest window attended over (0: the whole cache)
    lean: bool  # the forward is `LeanStaticStep`, else the model's own (`ModelStep`)
    compiled: bool  # the forward through torch.compile (`compiled_forward`)


class LeanStaticStep(DecodeStep):
    """models/decode_step.py's lean step over the static buffers, with no host synchronization:
    the rope tables made once for every slot (a position never passes its token's slot: Qwen's
    positions after an image run behind the tokens' indices), and the mask the rows' padding
    and the slots written so far, this token's included, read off the loop's `length` on the
    device (the slot every layer writes to). That is the mask transformers makes for a static cache, and SDPA gets the query
    heads packed per key head as from transformers' SDPA path: the model's forward on these
    buffers, bit for bit (tests/rollout/test_hf_engine.py), in fewer operators. A step replayed
    from a CUDA graph pays for each kernel however small (on an H200 the 3B step took 8.6 ms
    against 1.3 ms of weights to read: docs/performance.md), so a layer runs what it must and
    no more: the mask made a float one once a step (`additive_mask`; SDPA would convert a
    boolean one in every layer), the query and key heads rotated together, the cache written at
    one slot all layers share (`RowsLayer`). `python bench/static_step_operators.py` counts 31
    operators a layer and 13 around the layers at the dispatcher, 1,129 a step at 36 layers,
    against 37 and 12 and a boolean mask converted in each layer before (1,344 and 36 masks);
    not measured on a GPU yet."""

    def __init__(self, model: torch.nn.Module, slots: int, length: torch.Tensor):
        super().__init__(model)
        self.length = length  # (): `StaticDecoding.length`, advanced in place
        self.slots = torch.arange(slots, device=length.device)
        self.cos, self.sin = self.rope_table(self.slots, self.language_model.embed_tokens.weight.dtype)

    def hidden(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, cache: Cache
    ) -> torch.Tensor:
        x = self.language_model.embed_tokens(input_ids)
        position = positions[0]  # (R, 1): every section is the text position while decoding
        cos, sin = self.cos[position].unsqueeze(1), self.sin[position].unsqueeze(1)
        slots = self.slots[: attention_mask.shape[1]]  # the window's
        written = slots <= self.length  # the slot this token is written to, and before
        return self.through_layers(x, cos, sin, (attention_mask.bool() & written)[:, None, None, :], cache)


def compiled_forward(forward: LeanStaticStep | ModelStep):
    """`forward` through torch.compile (`rollout.hf.compile_step`): the draw stays eager (a
    generator argument is not compiled), the forward's elementwise kernels (norms, rope,
    residuals, the MLP's activation) are fused.

    What the compiled code reads and when it compiles (tests/rollout/test_compiled_step.py):
    - the weights are inputs of the compiled graph, not constants, so it reads them where the
      optimizer updates them in place;
    - sizes are symbolic from the first compilation, so one serves every bucket, window and
      cache length (torch specializes a size of 1: a bucket of one row would compile once more);
    - compilations are kept by torch with the forward's code, holding none of this step's
      buffers: the step of a later rollout, made after the engine slept, reuses them;
    - sizes that are equal by chance when it compiles (a window as wide as the cache, 128 rows
      and a 128-wide head) are not taken to be one size (torch's "duck sizing"), which the
      next bucket or window would break, compiling again;
    - the model's numbers (each layer's head width, heads per key head, attention scale, norm
      epsilon) are constants: made symbols, as `dynamic=True` makes every number it reads,
      their guards' simplification took most of the compilation (Qwen2.5-VL's tiny model: 42
      s from a cold cache, then 28 s from a warm one, against 14 and 2.8 s; 2026-12-02, 2-core
      AMD EPYC) and restarted it once;
    - each bucket's first steps at a window are warm-up steps run before their capture
      (`WARMUP_STEPS`), so a compilation never runs inside a CUDA graph's capture."""
    compiled = torch.compile(forward, dynamic=True)

    def run(*args: Any) -> torch.Tensor:
        with (  # read when a compilation starts
            fx_config.patch(use_duck_shape=False),
            dynamo_config.patch(specialize_int=True, specialize_float=True),
        ):
            return compiled(*args)

    return run


class StaticDecoding:
    """The buffers of one batch shape (rows x cache length), the step that runs on them, and
    the loop that runs the steps."""

    def __init__(
        self, model: torch.nn.Module, prefill_cache: Cache, length: int, draw: Draw, record: Record,
        stop_ids: torch.Tensor, plan: StaticPlan,
    ):  # fmt: skip
        rows, device = draw.rows, stop_ids.device
        held = length + UNREACHED_SLOTS
        self.length = torch.zeros((), dtype=torch.long, device=device)  # the slot the next token is written to
        self.forward = LeanStaticStep(model, held, self.length) if plan.lean else ModelStep(model)
        self.run_forward = compiled_forward(self.forward) if plan.compiled else self.forward
        self.draw, self.record, self.stop_ids, self.plan = draw, record, stop_ids, plan
        self.rows, self.device = rows, device
        self.layers: list[RowsLayer | RowsStateLayer] = [
            RowsStateLayer.like(layer, rows)
            if isinstance(layer, LinearAttentionCacheLayerMixin)
            else RowsLayer.like(layer, rows, held, self.length)
            for layer in prefill_cache.layers
        ]
        self.cache = Cache(layers=self.layers)
        self.mask = torch.ones(rows, held, dtype=torch.long, device=device)
        # (3, rows, 1), laid out row-major: a bucket's view has the same strides at every size,
        # so that a compiled forward does not tie its stride to the bucket's size (a recompilation)
        self.positions = torch.zeros(rows, 3, 1, dtype=torch.long, device=device).transpose(0, 1)
        self.advance = torch.zeros_like(self.positions)  # the positions' change per token
        self.ids = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.index = torch.zeros(rows, dtype=torch.long, device=device)  # the batch row each decoded row is
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.sizes = buckets(rows, plan.smallest_bucket) if plan.compact else [rows]
        self.windows = windows(length, plan.smallest_window)
        self.bucket, self.window = rows, length
        self.prompt = 0  # the current batch's prompt slots
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # by (bucket, window)
        self.warm_steps: dict[tuple[int, int], int] = {}  # eager steps each ran before its capture
        self.captures = 0  # graphs captured, over this object's life
        # of the current batch (DecodeStats): forwards, their rows, the slots each row attended over
        self.forwards = self.row_steps = self.attended_slots = 0
        self.pool = torch.cuda.graph_pool_handle() if plan.graphs else None
        self.stream = torch.cuda.Stream(device) if plan.graphs else None

    # -- a new batch ----------------------------------------------------------------------------
    def start(
        self, prefill_cache: Cache, attention_mask: torch.Tensor, positions: torch.Tensor, advance: torch.Tensor
    ) -> None:
        """Fill the buffers for a new batch of this shape: the prefill's keys and values (moved:
        the prefill's cache is emptied), the prompts' padding, the first decoding positions
        (3, rows, 1) and their change per token."""
        prompt = attention_mask.shape[1]
        # the lean step looks the model's parts up again (a hook added since the last batch
        # counts, as in the dynamic loop); a graph already captured replays what it captured
        self.forward.refresh()
        for layer, filled in zip(self.layers, prefill_cache.layers, strict=True):
            layer.fill(filled, prompt)
        self.length.fill_(prompt)
        prefill_cache.reset()
        self.mask[:, :prompt] = attention_mask
        self.mask[:, prompt:] = 1
        self.positions.copy_(positions)
        self.advance.copy_(advance)
        self.index.copy_(torch.arange(self.rows, device=self.device))
        self.finished.zero_()
        self.record.clear()
        self.prompt = prompt
        self.forwards = self.row_steps = self.attended_slots = 0
        self.narrow(self.rows, self.windows[-1])

    def narrow(self, bucket: int, window: int) -> None:
        self.bucket, self.window = bucket, window
        for layer in self.layers:
            layer.narrow(bucket, window)

    def widen(self, slots: int) -> None:
        """Attend over the narrowest window that holds the first `slots` slots."""
        window = min(size for size in self.windows if size >= slots)
        if window != self.window:
            self.narrow(self.bucket, window)

    def compact(self, bucket: int) -> None:
        """Move the live rows to the front and decode the first `bucket` rows from now on; the
        rows past the live ones are fillers: finished, writing to the record's spare row. Of
        the cache, the window moves: every slot written so far is in it, and a slot past it is
        written before it is read."""
        live = self.finished[: self.bucket].logical_not().nonzero().squeeze(1)
        n = len(live)
        for layer in self.layers:
            layer.gather(live, self.window)
        for buffer in (self.mask, self.ids, self.index, self.finished):
            buffer[:n] = buffer[live]
        self.positions[:, :n] = self.positions[:, live]
        self.index[n:bucket] = self.rows  # the record's spare row
        self.finished[n:bucket] = True
        self.narrow(bucket, self.window)

    # -- one step -------------------------------------------------------------------------------
    def sample(self, logits: torch.Tensor) -> None:
        """Draw the current bucket's next tokens from `logits`, record them, feed them next."""
        b = self.bucket
        index, finished = self.index[:b], self.finished[:b]
        choice, logp, entropy = self.draw(logits, index, finished)
        self.record.write(index, choice, logp, entropy)
        finished.logical_or_((choice[:, None] == self.stop_ids).any(1))
        self.ids[:b, 0] = choice

    def step(self) -> None:
        """The forward of the last tokens at the current bucket and window, then the draw."""
        b = self.bucket
        logits = self.run_forward(self.ids[:b], self.mask[:b, : self.window], self.positions[:, :b], self.cache)
        self.length.add_(1)
        self.positions.add_(self.advance)
        self.sample(logits)

    def run(self, steps: int) -> None:
        """`steps` steps at the current bucket and window: eager, or replays of their CUDA graph
        (captured after a few eager steps on the capture stream, the first time they run)."""
        if not self.plan.graphs:
            for _ in range(steps):
                self.step()
            return
        shape = (self.bucket, self.window)
        graph = self.graphs.get(shape)
        if graph is None:  # warm-up steps add up over runs: check_every may be smaller
            warm = self.warm_steps.get(shape, 0)
            warmup = min(WARMUP_STEPS - warm, steps)
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                for _ in range(warmup):
                    self.step()
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            self.warm_steps[shape] = warm + warmup
            steps -= warmup
            if steps == 0:
                return
            graph = self.graphs[shape] = self.capture()
        for _ in range(steps):
            graph.replay()

    def capture(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        if self.draw.generator is not None:  # the device's default generator is registered by every capture
            graph.register_generator_state(self.draw.generator)
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            self.step()
        self.captures += 1
        return graph

    # -- the loop -------------------------------------------------------------------------------
    def decode(self, first_logits: torch.Tensor) -> int:
        """Decode from the prefill's next-token logits; returns the number of steps the dynamic
        loop takes (the record holds them), the generator left where that loop leaves it."""
        steps = self.record.tokens.shape[1]
        self.sample(first_logits)
        done = 1
        mark = (done, self.random_state())
        while done < steps:
            running = int(self.finished[: self.bucket].logical_not().sum())  # the host looks
            if running == 0:
                break
            fit = min(size for size in self.sizes if size >= running)
            if fit < self.bucket:
                self.compact(fit)
            mark = (done, self.random_state())
            count = min(self.plan.check_every, steps - done)
            self.widen(self.prompt + done - 1 + count)  # the slots written so far and by these steps
            self.run(count)
            done += count
            self.forwards += count
            self.row_steps += count * self.bucket
            self.attended_slots += count * self.bucket * self.window
        stopped, at = first_stops(self.record.tokens[: self.rows, :done], self.stop_ids)
        taken = int(at.max()) + 1 if bool(stopped.all()) else done
        if taken < done:
            self.rewind(mark, taken)
        return taken

    def generator(self) -> torch.Generator:
        if self.draw.generator is not None:
            return self.draw.generator
        if self.device.type == "cuda":
            return torch.cuda.default_generators[self.device.index or torch.cuda.current_device()]
        return torch.default_generator

    def random_state(self) -> torch.Tensor | None:
        return self.generator().get_state() if self.draw.params.temperature > 0 else None

    def rewind(self, mark: tuple[int, torch.Tensor | None], taken: int) -> None:
        """Set the generator back to the last check (`mark`: steps done then, its state) and
        draw the uniforms of the steps up to `taken`: the steps past the last stop drew more."""
        at, state = mark
        if state is None:  # greedy: nothing drawn
            return
        self.generator().set_state(state)
        for _ in range(taken - at):
            torch.rand(self.rows, 1, generator=self.draw.generator, device=self.device)
