"""The parts every tiny local checkpoint is built from: its spec, a small byte-level BPE
tokenizer trained locally with Qwen's pre-tokenizer and special tokens, the language model's
config keys every family shares, and the model drawn from a seed. Each family's adapter
assembles them into its own model and processor (`ModelFamily.build_tiny_model`); models/tiny.py
writes and caches the checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

# Qwen's special tokens, in Qwen's order (ids follow the BPE vocabulary here).
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2-VL / Qwen2.5-VL chat template, verbatim (the other families' are their adapters').
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: "
    "{% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2's pre-tokenizer split: digits one by one, words with their leading space.
PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


@dataclass(frozen=True)
class TinySpec:
    """Everything a tiny checkpoint is a function of."""

    arch: str = "qwen2_5_vl"  # the model family (vlrl/models/)
    bpe_vocab: int = 1024
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    # the attention heads' width (Qwen3-VL, Qwen3.5); 0: hidden_size // num_heads, the only one Qwen2(.5)-VL's attention takes
    head_dim: int = 0
    intermediate_size: int = 128
    # a mixture of experts (qwen3_vl_moe, qwen3_5_moe); 0: the tiny builds' 4 experts, 2 a token, half as wide
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    # Qwen3.5's linear-attention layers: key heads (0: num_heads), value heads (0: twice the key
    # heads) and the width of both (0: the tiny builds' 64, which vLLM's CPU kernel takes)
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_head_dim: int = 0
    vision_depth: int = 2
    vision_hidden: int = 32
    vision_heads: int = 2
    # Qwen's 1e6 leaves the height/width sections of mrope, at this head size, rotating by
    # ~1e-4 rad per image token: a tiny model then cannot tell where anything is in an image.
    # At 1.0 every section turns 1 rad per position and the model learns where objects are.
    rope_theta: float = 1.0
    min_pixels: int = 56 * 56
    max_pixels: int = 448 * 448
    seed: int = 0
    vocab_size: int = 0  # embedding rows; 0: the tokenizer's size rounded up to 64
    vision_intermediate: int = 0  # 0: twice vision_hidden
    dtype: str = "float32"  # of the saved weights
    tie_embeddings: bool = False  # the output layer shares the input embeddings (Qwen's small models)
    mrope_section: tuple[int, ...] = ()  # mrope's temporal, height, width split; (): mrope_sections'
    max_positions: int = 8192  # the context the config declares (vLLM's max_model_len unless one is given)

    @property
    def head_width(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads


# The synthetic scenes' words (data_prep/shapes.py), so that the demo's prompts tokenize into few tokens
CORPUS_COLORS = ("red", "green", "blue", "yellow", "purple", "orange")
CORPUS_SHAPES = ("circle", "square", "triangle")
CORPUS_SIZES = ("small", "large")


def _corpus() -> list[str]:
    """Text the tokenizer learns its merges from: prompts, answers and vocabulary of vlrl's tasks."""
    lines = [
        "You are a helpful assistant.",
        "system user assistant",
        "Please provide the bounding box coordinate of the region this sentence describes:",
        "First output the thinking process in <think> </think> tags and then output the final answer "
        "in <answer> </answer> tags. Output the final answer in JSON format.",
        "How many objects are there in the image? Count them and answer with a number.",
        "Locate every object of these categories and output their bounding boxes.",
        "The pieces of the image are shuffled. For each position give the original position.",
        "Click the button. Type the text. Scroll down. Answer with the letter of the option.",
        "What is written in the image? Read the text.",
        '<think> </think> <answer> </answer> {"bbox_2d": [ ], "label": ""} {"point_2d": [ ]}',
        '[{"action": "click", "point": [ ], "input_text": ""}]',
        "left of right of above below the small large",
    ]
    words = list(CORPUS_COLORS) + list(CORPUS_SHAPES) + list(CORPUS_SIZES)
    for i, color in enumerate(CORPUS_COLORS):
        for shape in CORPUS_SHAPES:
            for size in CORPUS_SIZES:
                lines.append(f"the {size} {color} {shape} left of the {words[i % len(words)]} square")
    lines += [
        f"[{a}, {b}, {c}, {d}]"
        for a, b, c, d in zip(range(0, 999, 7), range(5, 999, 11), range(9, 999, 13), range(3, 999, 17), strict=False)
    ]
    return lines * 4


def build_tokenizer(spec: TinySpec, chat_template: str = CHAT_TEMPLATE):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=spec.bpe_vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(model["vocab"])
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tokenizer.chat_template = chat_template
    return tokenizer


def special_token_ids(tokenizer) -> dict[str, int]:
    return {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}


def vocab_rows(spec: TinySpec, tokenizer) -> int:
    """Embedding rows: padded like Qwen's, so some ids are never text."""
    return spec.vocab_size or (len(tokenizer) + 63) // 64 * 64


def mrope_sections(rotary_dim: int) -> list[int]:
    """Temporal, height and width sections of mrope, summing to half the rotary dimension."""
    half = rotary_dim // 2
    return [half - 2 * (half // 3), half // 3, half // 3]


def text_config(spec: TinySpec, tokenizer, **rope: Any) -> dict[str, Any]:
    """The language model's config keys every family shares; `rope` adds to rope_parameters."""
    ids = special_token_ids(tokenizer)
    return dict(
        vocab_size=vocab_rows(spec, tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_positions,
        rope_parameters={
            "rope_type": "default",
            "mrope_section": list(spec.mrope_section) or mrope_sections(spec.head_width),
            "rope_theta": spec.rope_theta,
            **rope,
        },
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def instantiate(model_cls, spec: TinySpec, tokenizer, text: dict[str, Any], vision: dict[str, Any]):
    """`model_cls` with these text and vision configs, the vision tokens' ids and weights drawn
    from spec.seed, ending its completions as Qwen's do."""
    ids = special_token_ids(tokenizer)
    config = model_cls.config_class(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=spec.tie_embeddings,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(spec.seed)
    model = model_cls(config)
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    return model
