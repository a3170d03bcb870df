"""Memory on paper (`vlrl plan`): what one GPU holds for a run, per parallelism strategy.

Everything comes from the model's config (a local checkpoint's config.json, or a shape of
vlrl.testing.SHAPES) instantiated on PyTorch's meta device (no memory, no weights) and the run's
config. A step has three phases, and the peak is the largest:

- rollout: the resting state (weights, fp32 master weights, AdamW's two moments, the KL
  reference) plus the rollout engine (the HF engine's KV cache for this GPU's rows, with the
  policy's full weights gathered under FSDP2; vLLM's gpu_memory_utilization share);
- update: the resting state plus gradients, one micro-batch's activations at
  `token_budget` (with or without gradient checkpointing) and, under FSDP2, the units
  gathered around the one being computed;
- optimizer step: the resting state plus fp32 gradients and the temporaries of AdamW's
  foreach kernels (about one fp32 copy of what it steps).

Activation bytes per token of a transformer block with hidden size d and p parameters are
`b (4/3 p/d + 5/3 d) + 20 d` (b the compute dtype's size): the inputs each matmul keeps for
its backward, the attention's and SwiGLU's intermediates, RMSNorm's fp32 copies. Each
completion row's attention keeps its prompt's keys once more (the shared cache, repeated to
every head), the patch embedding its pixel values, and log-softmax a float32 copy of every
completion token's logits (`activation_bytes`). bench/plan_vs_measured.py compares these with
what autograd keeps on CPU, and the total with the one GPU peak measured (README, Performance).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from vlrl.config import Config

GB = 1e9
BLOCK_D_COEF, BLOCK_P_COEF, NORM_BYTES = 5 / 3, 4 / 3, 20  # see the module docstring
TEXT_TOKENS = 64  # a prompt's text besides its image: system prompt, question, template


@dataclass(frozen=True)
class Block:
    """One repeated transformer block: how many, its parameters and hidden size."""

    count: int
    params: int
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
    vocab: int
    root_unit: int  # FSDP2's root unit: parameters outside every other unit (the vision tower)
    largest_unit: int  # FSDP2's largest other unit (a decoder layer, the embeddings)


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

    from vlrl.modeling import checkpoint_path, core_model, torch_dtype, weights_root
    from vlrl.parallel.fsdp2 import unit_modules

    if shape:
        config = shape_config(shape)
    else:
        config = AutoConfig.from_pretrained(weights_root(checkpoint_path(cfg.model)))
    dtype = torch_dtype(cfg.model.dtype)
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
    trainable = lora_params(model, cfg) if cfg.model.lora.r > 0 else params - frozen
    unit_params = [sum(p.numel() for p in {id(p): p for m in modules for p in m.parameters()}.values()) for modules in units]
    text = config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    vision_config = config.vision_config
    merge = getattr(vision_config, "spatial_merge_size", 2)
    b = torch.finfo(dtype).bits // 8
    return ModelShape(
        params=params,
        trainable=trainable,
        upcast=trainable if b < 4 and cfg.model.lora.r == 0 and cfg.trainer.master_weights else 0,
        dtype_bytes=b,
        trainable_bytes=4 if cfg.model.lora.r > 0 else b,  # PEFT keeps adapters in fp32
        layers=Block(len(layers), sum(p.numel() for p in layers[0].parameters()), _hidden(layers[0])),
        vision=Block(len(blocks), sum(p.numel() for p in blocks[0].parameters()), _hidden(blocks[0])),
        patches_per_token=merge * merge,
        patch_values=vision_config.in_channels * vision_config.temporal_patch_size * vision_config.patch_size**2,
        kv_width=2 * text.num_key_value_heads * head_dim,
        vocab=text.vocab_size,
        root_unit=params - sum(unit_params),
        largest_unit=max(unit_params),
    )


def lora_params(model: torch.nn.Module, cfg: Config) -> int:
    """Parameters of the adapters load_model adds: r (in + out) per targeted language-model
    Linear, targeted as the model's family targets them."""
    from vlrl.models import family_for_model_type

    family = family_for_model_type(model.config.model_type)
    target = re.compile(family.lora_target(cfg.model.lora.target_modules))
    r = cfg.model.lora.r
    return sum(
        r * (m.in_features + m.out_features) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and target.match(name)
    )


def shape_config(name: str):
    """The transformers config of a vlrl.testing shape, built without a tokenizer."""
    from vlrl.config import ConfigError
    from vlrl.testing.tiny import SHAPES, SPECIAL_TOKENS, build_model

    if name not in SHAPES:
        raise ConfigError(f"vlrl plan --shape {name!r}: unknown; known shapes: {', '.join(SHAPES)}")

    class SpecialIds:  # build_model reads the special tokens' ids; any distinct ids do here
        def convert_tokens_to_ids(self, token: str) -> int:
            return SPECIAL_TOKENS.index(token)

    with torch.device("meta"):
        return build_model(SHAPES[name], SpecialIds()).config


@dataclass(frozen=True)
class Workload:
    """What one micro-batch and one rollout hold, from the run's config."""

    gpus: int
    gpu_memory: float  # bytes
    token_budget: int
    image_tokens: int
    rows: int  # completions sampled per GPU per step
    max_new_tokens: int
    beta: float
    lora: bool
    engine: str
    engine_share: float  # vLLM: gpu_memory_utilization
    engine_sleeps: bool

    @classmethod
    def of(cls, cfg: Config, gpus: int, gpu_memory_gb: float, image_tokens: int) -> Workload:
        r = cfg.rollout
        return cls(
            gpus=gpus,
            gpu_memory=gpu_memory_gb * GB,
            token_budget=cfg.trainer.token_budget,
            image_tokens=image_tokens,
            rows=max(1, cfg.trainer.prompts_per_step // gpus) * r.num_generations,
            max_new_tokens=r.max_new_tokens,
            beta=cfg.algo.beta,
            lora=cfg.model.lora.r > 0,
            engine=r.engine,
            engine_share=r.vllm.gpu_memory_utilization,
            engine_sleeps=r.vllm.sleep,
        )

    @property
    def prompt_tokens(self) -> int:
        return self.image_tokens + TEXT_TOKENS


def activation_bytes(
    shape: ModelShape, prompts: int, prompt_length: int, rows: int, width: int, patches: int, checkpointing: bool,
    transient: bool = True,
) -> float:
    """What one micro-batch keeps for its backward pass: `prompts` prompts padded to
    `prompt_length` tokens, `rows` completions of `width` tokens continuing them, `patches`
    vision patches. `transient`: with what the forward holds at its end besides (the logits in
    the compute dtype and their temperature-scaled copy), for the peak."""
    b = shape.dtype_bytes
    prompt_tokens, completion_tokens = prompts * prompt_length, rows * width
    tokens = prompt_tokens + completion_tokens
    # log-softmax keeps a float32 copy of every completion token's logits (a float32 model
    # keeps its logits besides)
    logits = completion_tokens * shape.vocab * (4 + (4 if b == 4 else 0) + (2 * b if transient else 0))
    layer, block = shape.layers.token_bytes(b), shape.vision.token_bytes(b)
    row_prompts = rows * prompt_length * shape.layers.hidden * b  # each row's prompt keys, repeated to every head
    pixels = patches * shape.patch_values * b  # what the patch embedding keeps of its input
    if not checkpointing:
        lm = shape.layers.count * (tokens * layer + row_prompts)
        return lm + patches * shape.vision.count * block + pixels + logits
    # each block keeps its input (and each layer its keys and values, the shared prompt's cache);
    # the one being recomputed holds everything for a moment
    kept = tokens * shape.layers.count * b * (shape.layers.hidden + shape.kv_width)
    kept += patches * shape.vision.count * b * shape.vision.hidden
    return kept + max(tokens * layer + row_prompts, patches * block) + pixels + logits


def budget_activations(shape: ModelShape, work: Workload, checkpointing: bool) -> float:
    """One prompt and as many whole completions of max_new_tokens as fill the token budget
    (the long completions of an untrained model, or of a thinking one)."""
    length = work.prompt_tokens
    rows = max(1, (work.token_budget - length) // work.max_new_tokens)
    width = min(work.max_new_tokens, max(1, work.token_budget - length))
    patches = work.image_tokens * shape.patches_per_token
    return activation_bytes(shape, 1, length, rows, width, patches, checkpointing)


STRATEGIES = ("replicated", "fsdp2", "fsdp2 + cpu_offload")


def memory(shape: ModelShape, work: Workload, strategy: str, checkpointing: bool) -> dict[str, float]:
    """Bytes on one GPU by term, and each phase's total (`peak` the largest)."""
    replicated = strategy == "replicated"
    n = 1 if replicated else work.gpus
    offload = strategy.endswith("cpu_offload")
    b, T, P = shape.dtype_bytes, shape.trainable, shape.params
    stepped = 4 if shape.upcast else shape.trainable_bytes  # the optimizer's weights, gradients and moments
    resting = 0.0 if offload else 1.0  # offloaded: the sharded state lives in CPU memory
    terms = {
        "weights": P * b if replicated else resting * (P - T) * b / n,  # FSDP2: only frozen ones below fp32
        "master weights": shape.upcast * 4 if replicated else resting * T * stepped / n,
        "optimizer": resting * T * 2 * stepped / n,
        "reference": resting * P * b / n if work.beta > 0 and not work.lora else 0.0,
    }
    if replicated:  # the model's gradients in backward, moved onto the fp32 masters for the step
        grads_update, grads_step, gathered = T * shape.trainable_bytes, T * stepped, 0.0
    else:
        grads_update = grads_step = resting * T * stepped / n
        # the root unit for the whole forward and backward, the unit being computed and the next
        # (prefetched), and that unit's unsharded gradients with their fp32 reduce-scatter copy
        gathered = shape.root_unit * b + 2 * shape.largest_unit * b + shape.largest_unit * (b + 4)
    kv_cache = work.rows * (work.prompt_tokens + work.max_new_tokens) * shape.kv_width * shape.layers.count * b
    if work.engine == "vllm":
        engine = work.engine_share * work.gpu_memory
        during_update = 0.0 if work.engine_sleeps else engine
    else:  # the HF engine samples with the policy: its KV cache, the full weights gathered under FSDP2
        engine = kv_cache + (0.0 if replicated else P * b)
        during_update = 0.0
    base = sum(terms.values())
    terms["gradients"] = max(grads_update, grads_step)
    terms["gathered units"] = gathered
    terms["activations"] = budget_activations(shape, work, checkpointing)
    terms["rollout engine"] = engine
    phases = {
        "rollout": base + engine,
        "update": base + grads_update + gathered + terms["activations"] + during_update,
        "optimizer step": base + grads_step + resting * T * stepped / n + during_update,
    }
    terms.update(phases)
    terms["peak"] = max(phases.values())
    if offload:
        terms["cpu memory"] = ((P - T) * b + T * stepped * 4) / n  # weights, moments, gradients
    return terms


def plans(shape: ModelShape, work: Workload) -> list[tuple[str, bool, dict[str, float]]]:
    return [(s, ckpt, memory(shape, work, s, ckpt)) for s in STRATEGIES for ckpt in (False, True)]


def fits(terms: dict[str, float], work: Workload) -> bool:
    """Within 95% of the card: the allocator's fragmentation and the CUDA context take the rest."""
    return terms["peak"] <= 0.95 * work.gpu_memory

