"""What a model and its training take in memory, on paper: the model's shape counted on PyTorch's
meta device (no memory, no weights), a run's workload, and the activations one micro-batch
keeps. The parallelism strategies and rollout engines add their own terms to these
(`Strategy.memory`, `RolloutEngine.memory`); `vlrl plan` (vlrl/app/plan.py) puts them together.

Activation bytes per token of a transformer block with hidden size d and p parameters are
`b (4/3 p/d + 5/3 d) + 20 d` (b the compute dtype's size): the inputs each matmul keeps for
its backward, the attention's and SwiGLU's intermediates, RMSNorm's fp32 copies. Each
completion row's attention keeps its prompt's keys once more (the shared cache, repeated to
every head), and the patch embedding its pixel values; the output layer keeps nothing of the
vocabulary's size, holding one chunk's logits at a time (`ScoredChunks`: `activation_bytes`).
A layer of another kind is counted as a block of its dense parameters plus what its kind keeps
(`layer_extra_bytes`): a linear-attention layer (Qwen3.5) far more than its parameters say
(transformers' chunked gated delta rule), a mixture of experts what its routed tokens keep,
not a block of every expert's parameters.
bench/plan_vs_measured.py compares these with what autograd keeps on CPU, and the total with
the peaks measured on a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from vlrl.config import Config, ConfigError, StageLimits
from vlrl.models.blocks import unit_modules
from vlrl.models.build import SPECIAL_TOKENS
from vlrl.models.checkpoints import weights_root
from vlrl.models.families import family_for_model_type
from vlrl.models.loading import checkpoint_path, core_model, torch_dtype
from vlrl.models.lora import targeted_parameters
from vlrl.models.policy import CHUNK_TOKENS
from vlrl.models.tiny import SHAPES, build_model

GB = 1e9
BLOCK_D_COEF, BLOCK_P_COEF, NORM_BYTES = 5 / 3, 4 / 3, 20  # see the module docstring
TEXT_TOKENS = 64  # a prompt's text besides its image: system prompt, question, template


@dataclass(frozen=True)
class Block:
    """One repeated transformer block: how many, its parameters and hidden size."""

    count: int
    params: int  # on average over the blocks, experts' weights left out (`layer_extra_bytes`)
    hidden: int

    def token_bytes(self, b: int) -> float:
        """What autograd keeps per token of one block for the backward pass."""
        return b * (BLOCK_P_COEF * self.params / self.hidden + BLOCK_D_COEF * self.hidden) + NORM_BYTES * self.hidden


@dataclass(frozen=True)
class ModelShape:
    params: int
    trainable: int  # what the optimizer steps (LoRA: the adapters; model.freeze_vision: not the tower)
    upcast: int  # trainable weights held below fp32, which the optimizer steps in fp32 copies
    dtype_bytes: int  # the compute dtype's size
    trainable_bytes: int  # the size of a trained weight (LoRA's adapters: fp32)
    layers: Block  # the language model's decoder layers
    vision: Block  # the vision tower's blocks
    patches_per_token: int  # vision patches merged into one image token
    patch_values: int  # pixel values per patch (channels x frames x patch size squared)
    kv_width: int  # keys plus values per token per decoder layer (elements)
    kv_layers: int  # decoder layers that cache keys and values (Qwen3.5: one in four)
    state_bytes: int  # per sequence, the other layers' fixed-size states (Qwen3.5's linear attention)
    layer_extras: tuple[int, ...]  # per token, what each decoder layer keeps beyond a block's
    vocab: int
    context: int  # the longest sequence the config declares (max_position_embeddings)
    root_unit: int  # FSDP2's root unit: parameters outside every other unit (the vision tower)
    largest_unit: int  # FSDP2's largest other unit (a decoder layer, the embeddings)
    adapted: int = 0  # base weights LoRA adapts: the HF engine decodes with a merged copy of each
    float32_head: int = 0  # the output layer's weight, upcast for each of its products (model.lm_head_fp32)

    @property
    def kv_token_bytes(self) -> int:
        """Bytes of one token's keys and values in a KV cache, over every decoder layer that has them."""
        return self.kv_width * self.kv_layers * self.dtype_bytes

    def sequence_cache_bytes(self, tokens: int) -> int:
        """One sequence's cache at `tokens` tokens: keys and values, and the linear-attention
        layers' states (of fixed size)."""
        return tokens * self.kv_token_bytes + self.state_bytes


def _params(block: torch.nn.Module) -> int:
    return sum(p.numel() for p in block.parameters())


def _experts(layer: torch.nn.Module) -> torch.nn.Module | None:
    """A decoder layer's experts (Qwen3-VL MoE's, their weights as 3D parameters), if it has them."""
    return getattr(getattr(layer, "mlp", None), "experts", None)


def _dense_params(layer: torch.nn.Module) -> int:
    experts = _experts(layer)
    return _params(layer) - (_params(experts) if experts is not None else 0)


def _hidden(block: torch.nn.Module) -> int:
    """The block's width: the size of its widest normalization weight (Qwen3's layers
    normalize each head's queries and keys first, over head_dim, then the hidden state)."""
    weights = [getattr(module, "weight", None) for module in block.modules() if not isinstance(module, torch.nn.Linear)]
    widths = [w.numel() for w in weights if isinstance(w, torch.Tensor) and w.dim() == 1]
    if not widths:
        raise ValueError(f"{type(block).__name__} has no normalization layer to read its width from")
    return max(widths)


def model_shape(cfg: Config, shape: str | None = None) -> ModelShape:
    """The run's model, on the meta device: parameter counts by what holds them."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    if shape:
        config = shape_config(shape)
    else:
        config = AutoConfig.from_pretrained(weights_root(checkpoint_path(cfg.model)))
    # A plan is of GPUs, where model.dtype=auto is bfloat16, whatever the host planning it has.
    dtype = torch.bfloat16 if cfg.model.dtype == "auto" else torch_dtype(cfg.model.dtype)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    core = core_model(model)
    vision = core.get_encoder(modality="image")
    units = unit_modules(model)
    names = set(core._no_split_modules)
    layers = [modules[0] for modules in units if type(modules[0]).__name__ in names]
    blocks = [m for m in vision.modules() if type(m).__name__ in names]
    params = sum(p.numel() for p in model.parameters())
    frozen = sum(p.numel() for p in vision.parameters()) if cfg.model.freeze_vision else 0
    r = cfg.model.lora.r
    adapted = adapted_linears(model, cfg) if r > 0 else []
    trainable = (
        sum(r * (m.in_features + m.out_features) for m in adapted) + parameter_adapters(model, cfg)
        if r > 0
        else params - frozen
    )
    unit_params = [
        sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values()) for modules in units
    ]
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    linear = (getattr(text, "layer_types", None) or []).count("linear_attention")
    vision_config = config.vision_config
    merge = getattr(vision_config, "spatial_merge_size", 2)
    b = torch.finfo(dtype).bits // 8
    return ModelShape(
        params=params,
        trainable=trainable,
        upcast=trainable if b < 4 and cfg.model.lora.r == 0 and cfg.trainer.master_weights else 0,
        dtype_bytes=b,
        trainable_bytes=4 if cfg.model.lora.r > 0 else b,  # PEFT keeps adapters in fp32
        layers=Block(
            len(layers), round(sum(_dense_params(layer) for layer in layers) / len(layers)), _hidden(layers[0])
        ),
        vision=Block(len(blocks), _params(blocks[0]), _hidden(blocks[0])),
        patches_per_token=merge * merge,
        patch_values=vision_config.in_channels * vision_config.temporal_patch_size * vision_config.patch_size**2,
        kv_width=2 * text.num_key_value_heads * head_dim,
        kv_layers=len(layers) - linear,
        state_bytes=linear * linear_attention_state_bytes(text, b) if linear else 0,
        layer_extras=tuple(layer_extra_bytes(layer, text, b) for layer in layers),
        vocab=text.vocab_size,
        context=text.max_position_embeddings,
        root_unit=params - sum(unit_params),
        largest_unit=max(unit_params),
        adapted=sum(m.weight.numel() for m in adapted),
        float32_head=core.get_output_embeddings().weight.numel() if cfg.model.lm_head_fp32 and b < 4 else 0,
    )


def linear_attention_state_bytes(text, dtype_bytes: int) -> int:
    """One sequence's state in one gated-delta-net layer (Qwen3.5), as transformers keeps it: the
    convolution window over the queries, keys and values (its kernel's width, in the model's
    dtype) and the recurrent state, a key-by-value matrix per value head in float32."""
    channels = 2 * text.linear_num_key_heads * text.linear_key_head_dim
    channels += text.linear_num_value_heads * text.linear_value_head_dim
    recurrent = text.linear_num_value_heads * text.linear_key_head_dim * text.linear_value_head_dim
    return channels * text.linear_conv_kernel_dim * dtype_bytes + recurrent * 4


def layer_extra_bytes(layer: torch.nn.Module, text, dtype_bytes: int) -> int:
    """What a decoder layer keeps per token for its backward pass beyond a block of its dense
    parameters (`Block.token_bytes`): a linear-attention layer's rule, a mixture of experts'
    routed tokens (0 for a plain layer)."""
    extra = linear_attention_token_bytes(text, dtype_bytes) if hasattr(layer, "linear_attn") else 0
    if _experts(layer) is not None:
        extra += experts_token_bytes(text, dtype_bytes)
    return extra


def experts_token_bytes(text, dtype_bytes: int) -> int:
    """What a mixture of experts (Qwen3-VL MoE) keeps per token: for each of the k experts it is
    routed to, its input and output (hidden wide) and the expert's gate, up, activation and
    product (its intermediate width each), in the compute dtype, and the router's float32
    probabilities over the experts. Fitted to what autograd keeps of one layer on the CPU
    (transformers' grouped_mm, six shapes 256 to 1,024 wide, 16 to 128 experts, 2 to 8 routed;
    bfloat16 and float32): within 5% of each, where a block of every expert's parameters was
    2.1 to 2.7 times over and one of the routed experts' only 1.4 to 2.1 times short."""
    routed = text.num_experts_per_tok * (2 * text.hidden_size + 4 * text.moe_intermediate_size)
    return dtype_bytes * routed + 4 * text.num_experts


def linear_attention_token_bytes(text, dtype_bytes: int) -> int:
    """What one gated-delta-net layer (Qwen3.5) keeps per token for its backward pass beyond what
    a block of its parameters and width keeps (`Block.token_bytes`): transformers' chunked gated
    delta rule (its PyTorch fallback, which runs where flash-linear-attention is not installed)
    keeps about ten float32 and ten compute-dtype tensors of the heads' width per token, five
    matrices of its 64-token chunk per token and head, and a key-by-value state per chunk and
    head in float32. Fitted to what autograd keeps of one layer on the CPU (seven widths, 256 to
    1,024 wide, 8 to 32 value heads of 32 to 128; bfloat16 and float32): within 2% of each, where
    `Block.token_bytes` alone was 2.5 to 4.3 times short."""
    heads, width = text.linear_num_value_heads, (text.linear_key_head_dim + text.linear_value_head_dim) / 2
    chunk = 64  # transformers' torch_chunk_gated_delta_rule
    per_chunk = 4 * heads * text.linear_key_head_dim * text.linear_value_head_dim
    return round(heads * width * (10 * 4 + 10 * dtype_bytes) + 5 * 4 * heads * chunk + per_chunk / chunk)


def adapted_linears(model: torch.nn.Module, cfg: Config) -> list[torch.nn.Linear]:
    """The language model's Linears load_model puts adapters on, targeted as the model's family
    targets them."""
    family = family_for_model_type(model.config.model_type)
    target = re.compile(family.lora_target(cfg.model.lora.target_modules))
    return [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and target.match(name)]


def parameter_adapters(model: torch.nn.Module, cfg: Config) -> int:
    """The adapter weights model.lora.target_parameters adds: for each parameter it names (a
    mixture's fused experts x in x out, as PEFT's ParamWrapper reads it), r x experts x (in + out)."""
    shapes = [p.shape for _, p in targeted_parameters(model, cfg.model.lora.target_parameters)]
    return sum(cfg.model.lora.r * (s[0] if len(s) == 3 else 1) * (s[-2] + s[-1]) for s in shapes)


def shape_config(name: str):
    """The transformers config of a vlrl.models.tiny shape, built without a tokenizer."""
    if name not in SHAPES:
        raise ConfigError(f"vlrl plan --shape {name!r}: unknown; known shapes: {', '.join(SHAPES)}")

    class SpecialIds:  # build_model reads the special tokens' ids; any distinct ids do here
        def convert_tokens_to_ids(self, token: str) -> int:
            return SPECIAL_TOKENS.index(token)

    with torch.device("meta"):
        return build_model(SHAPES[name], SpecialIds()).config


@dataclass(frozen=True)
class DrawFilter:
    """The rollout's filters (rollout.top_k, top_p, min_p, repetition_penalty, min_new_tokens). An engine that
    draws from them and reports their log-probs (vLLM) has the update score each token under
    its draw as well (policy.SamplingFilter, in the chunk's forward), which holds copies of the
    chunk's float32 logits."""

    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0

    def entry_bytes(self, min_p_first: bool) -> int:
        """Bytes per logit that SamplingFilter.apply and the log-prob of its result hold at
        their peak (`min_p_first`: min-p before top-k and top-p, as vLLM applies it), counted
        from the code and measured on the CPU (tests/app/test_plan.py). The banned logits'
        float32 copy (and the penalized one it came from) are kept until it returns; with
        min_new_tokens each row's bans, a byte a logit, while they are applied; each
        filter holds its input (the banned logits, or the filter's before it, whose result
        replaces it) and its temporaries: top-k its mask and result (1 + 4), top-p its sorted
        logits, their int64 order, softmax and cumulative sum (4 + 8 + 4 + 4), min-p its
        softmax, mask and result (4 + 1 + 4). CUDA's sort may take a workspace besides, not
        counted."""
        filters = [(self.top_k > 0, 5), (self.top_p < 1, 20)]
        min_p = (self.min_p > 0, 9)
        filters = [min_p, *filters] if min_p_first else [*filters, min_p]
        held = 4 + 4 * (self.repetition_penalty != 1)
        peak = result = 0  # the bytes of the filter's result before the one running
        for on, temporaries in filters:
            if on:
                peak, result = max(peak, result + temporaries), 4
        return held + max(peak, int(self.min_new_tokens > 0))


@dataclass(frozen=True)
class Workload:
    """What one micro-batch and one rollout hold, from the run's config."""

    gpus: int
    gpu_memory: float  # bytes
    token_budget: int
    image_tokens: int
    rows: int  # completions a GPU decodes in its largest rollout call (ReMax's greedy ones among them)
    max_new_tokens: int
    beta: float
    lora: bool
    entropy_bonus: bool = False  # algo.entropy_coef: the output layer's chunks hold more
    # rollout's filters where the update's forward scores a foreign engine's draw (none once the
    # policy moves within a step: old log-probs, and the draw's, then come from a forward without
    # gradients, and the update's forward scores only the policy's)
    draw: DrawFilter = DrawFilter()

    @classmethod
    def of(cls, cfg: Config, gpus: int, gpu_memory_gb: float, image_tokens: int) -> Workload:
        """The run's largest rollout call: with rollout.stages, the stage whose call holds the
        most tokens (rows x (prompt + max_new_tokens)), the longer one of equals. ReMax's greedy
        completion is one more row of each group (the engines decode it in the call that samples);
        rollout.max_rows splits a step's rows into calls (`call_rows`); a round of dynamic
        sampling samples algo.sampling_batch prompts where set."""
        prompts = max(1, cfg.prompts_per_round // gpus)
        greedy = int(cfg.algo.advantage == "remax")

        def rows_of(stage: StageLimits) -> int:
            return call_rows(prompts, stage.num_generations + greedy, cfg.rollout.max_rows)

        stage = max(
            cfg.rollout.stage_limits(),
            key=lambda s: (rows_of(s) * (image_tokens + TEXT_TOKENS + s.max_new_tokens), s.max_new_tokens),
        )
        r, algo = cfg.rollout, cfg.algo
        stays = algo.num_iterations == 1 and algo.mini_batches == 1  # not Updater.moves
        draw = DrawFilter(r.top_k, r.top_p, r.min_p, r.repetition_penalty, r.min_new_tokens) if stays else DrawFilter()
        return cls(
            gpus=gpus,
            gpu_memory=gpu_memory_gb * GB,
            token_budget=cfg.trainer.token_budget,
            image_tokens=image_tokens,
            rows=rows_of(stage),
            max_new_tokens=stage.max_new_tokens,
            beta=cfg.algo.beta,
            lora=cfg.model.lora.r > 0,
            entropy_bonus=cfg.algo.has_entropy_bonus,
            draw=draw,
        )

    @property
    def prompt_tokens(self) -> int:
        return self.image_tokens + TEXT_TOKENS


def call_rows(prompts: int, n: int, max_rows: int) -> int:
    """The rows of the largest engine call of a step's `prompts` x `n`, split as
    rollout/parts.py's `parts` splits it at most `max_rows` a call (0: one call): whole
    prompts while a group fits, else a group in pieces of `max_rows`."""
    if not max_rows or max_rows >= prompts * n:
        return prompts * n
    return max_rows // n * n if max_rows >= n else max_rows


def activation_bytes(
    shape: ModelShape,
    prompts: int,
    prompt_length: int,
    rows: int,
    width: int,
    patches: int,
    checkpointing: bool,
    transient: bool = True,
    entropy: bool = False,
    draw: int = 0,
) -> float:
    """What one micro-batch keeps for its backward pass: `prompts` prompts padded to
    `prompt_length` tokens, `rows` completions of `width` tokens continuing them, `patches`
    vision patches. `transient`: with what the forward holds at its end besides (the logits in
    the compute dtype and their temperature-scaled copy), for the peak; `entropy`: with the
    entropy bonus's chunk temporaries besides; `draw`: bytes per logit of a foreign engine's
    draw scored beside them (`DrawFilter.entry_bytes`, 0: none)."""
    b = shape.dtype_bytes
    prompt_tokens, completion_tokens = prompts * prompt_length, rows * width
    tokens = prompt_tokens + completion_tokens
    # the output layer scores CHUNK_TOKENS tokens at a time (models/policy.py's ScoredChunks):
    # each token's float32 log-normalizer is kept; a chunk's logits, their float32 copy and a
    # float32 temporary (softmax's, or its gradient's) are held for a moment; the entropy bonus
    # adds two float32 ones (its log-softmax and probabilities in the forward, its gradient's
    # term in the backward): counted from the code, not measured. A float32 output layer
    # (model.lm_head_fp32) gives float32 logits, no copy of them, and holds its weight upcast.
    # A foreign engine's draw is scored after those, beside the chunk's float32 logits.
    per_entry = (8 if shape.float32_head else b + 8) + (8 if entropy else 0)
    if draw:
        per_entry = max(per_entry, 4 + draw)
    logits = completion_tokens * 4 + (
        min(completion_tokens, CHUNK_TOKENS) * shape.vocab * per_entry + shape.float32_head * 4 if transient else 0
    )
    layer, block = shape.layers.token_bytes(b), shape.vision.token_bytes(b)
    row_prompts = rows * prompt_length * shape.layers.hidden * b  # each row's prompt keys, repeated to every head
    pixels = patches * shape.patch_values * b  # what the patch embedding keeps of its input
    if not checkpointing:
        lm = shape.layers.count * (tokens * layer + row_prompts) + tokens * sum(shape.layer_extras)
        return lm + patches * shape.vision.count * block + pixels + logits
    # each block keeps its input (and each layer its keys and values, the shared prompt's cache);
    # the one being recomputed holds everything for a moment
    kept = tokens * shape.layers.count * b * (shape.layers.hidden + shape.kv_width)
    kept += patches * shape.vision.count * b * shape.vision.hidden
    recomputed = tokens * (layer + max(shape.layer_extras, default=0)) + row_prompts
    return kept + max(recomputed, patches * block) + pixels + logits


def budget_activations(shape: ModelShape, work: Workload, checkpointing: bool, draw: int = 0) -> float:
    """One prompt and as many whole completions of max_new_tokens as fill the token budget
    (the long completions of an untrained model, or of a thinking one); `draw` as in
    `activation_bytes`."""
    length = work.prompt_tokens
    rows = max(1, (work.token_budget - length) // work.max_new_tokens)
    width = min(work.max_new_tokens, max(1, work.token_budget - length))
    patches = work.image_tokens * shape.patches_per_token
    return activation_bytes(
        shape, 1, length, rows, width, patches, checkpointing, entropy=work.entropy_bonus, draw=draw
    )


def kv_cache_bytes(shape: ModelShape, work: Workload) -> float:
    """The HF engine's cache for this GPU's rows, prompts and completions at full length: keys
    and values, and the linear-attention layers' states."""
    return work.rows * shape.sequence_cache_bytes(work.prompt_tokens + work.max_new_tokens)


@dataclass(frozen=True)
class StrategyMemory:
    """Bytes one GPU holds under a parallelism strategy (and CPU memory, when it offloads)."""

    weights: float
    master_weights: float
    optimizer: float  # AdamW's two moments
    reference: float  # the KL reference model
    gradients_update: float  # during backward
    gradients_step: float  # during the optimizer step
    gathered: float  # units gathered around the one computed (FSDP2)
    sampling_weights: float = 0.0  # held besides when an engine samples with the policy (FSDP2 gathers it)
    cpu_memory: float = 0.0

    @property
    def resting(self) -> float:
        return self.weights + self.master_weights + self.optimizer + self.reference
