"""Tiny local checkpoints built from the real transformers classes.

Nothing may be downloaded from a model hub, so tests and the demo use complete local
checkpoints written here: a tiny model of any family (config, safetensors), a small byte-level
BPE tokenizer trained locally with Qwen's pre-tokenizer and special tokens, the family's chat
template, image and video processors. `from_pretrained(path)` loads them like the real ones.
A build is a pure function of its spec, the code that builds it and the versions of torch,
transformers and tokenizers, and is cached by a hash of all of them. What is particular to
a family (its config, its processor) is its adapter's (`ModelFamily.build_tiny_model`,
vlrl/models/); what they share is here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import torch

from vlrl.config import ConfigError
from vlrl.models.build import TinySpec, build_tokenizer
from vlrl.models.families import family_class, tiny_spec

# Real checkpoints' shapes with random weights and the tiny tokenizer (its padded vocabulary
# as large as Qwen's): memory and speed at full size with nothing downloaded. Parameter counts
# equal the real checkpoints' (tests/models/test_tiny.py).
QWEN_SCALE = dict(
    vocab_size=151936,
    rope_theta=1e6,
    vision_depth=32,
    vision_hidden=1280,
    vision_heads=16,
    num_kv_heads=2,
    min_pixels=3136,
    max_pixels=12845056,
    dtype="bfloat16",
    tie_embeddings=True,
    mrope_section=(16, 24, 24),  # Qwen2-VL's and Qwen2.5-VL's config.json
    max_positions=128000,  # Qwen2.5-VL's
)


def qwen_scale(**fields) -> TinySpec:
    """A real checkpoint's shape: QWEN_SCALE with `fields` over it."""
    return TinySpec(**{**QWEN_SCALE, **fields})


SHAPES = {
    "qwen2.5-vl-3b": qwen_scale(
        hidden_size=2048, num_layers=36, num_heads=16, intermediate_size=11008, vision_intermediate=3420
    ),
    "qwen2.5-vl-7b": qwen_scale(
        hidden_size=3584, num_layers=28, num_heads=28, intermediate_size=18944, vision_intermediate=3420,
        num_kv_heads=4, vocab_size=152064, tie_embeddings=False,
    ),
    "qwen2-vl-2b": qwen_scale(
        arch="qwen2_vl", hidden_size=1536, num_layers=28, num_heads=12, intermediate_size=8960,
        vision_intermediate=5120, max_positions=32768,
    ),
    # Qwen3-VL-8B-Instruct: the family's vision tower (27 blocks of 1152, deepstack at 8/16/24)
    # and Qwen3-8B's text model.
    "qwen3-vl-8b": qwen_scale(
        arch="qwen3_vl", hidden_size=4096, num_layers=36, num_heads=32, intermediate_size=12288, num_kv_heads=8,
        rope_theta=5e6, vision_depth=27, vision_hidden=1152, vision_intermediate=4304, tie_embeddings=False,
        mrope_section=(24, 20, 20), max_positions=262144,
    ),
    # Qwen3-VL-30B-A3B-Instruct: the same vision tower and Qwen3-30B-A3B's text model, 128 experts
    # in every layer, 8 of them a token (its intermediate_size, 6144, sizes no layer: none is dense)
    "qwen3-vl-30b-a3b": qwen_scale(
        arch="qwen3_vl_moe", hidden_size=2048, num_layers=48, num_heads=32, head_dim=128, num_kv_heads=4,
        intermediate_size=6144, experts=128, experts_per_token=8, expert_intermediate=768, rope_theta=5e6,
        vision_depth=27, vision_hidden=1152, vision_intermediate=4304, tie_embeddings=False, mrope_section=(24, 20, 20),
        max_positions=262144,
    ),
    # Qwen3.5-27B: 64 hybrid layers (three gated-delta-net, then one gated full attention), 16 key
    # and 48 value heads of 128 in the linear ones; the vision tower is Qwen3-VL's without deepstack.
    # Text sizes from the model's config.json as THUDM/slime's scripts/models/qwen3.5-27B.sh and
    # its readers quote them; no MTP layer (transformers builds none).
    "qwen3.5-27b": qwen_scale(
        arch="qwen3_5", hidden_size=5120, num_layers=64, num_heads=24, head_dim=256, num_kv_heads=4,
        intermediate_size=17408, linear_key_heads=16, linear_value_heads=48, linear_head_dim=128,
        vocab_size=248320, rope_theta=1e7, vision_depth=27, vision_hidden=1152, vision_intermediate=4304,
        tie_embeddings=False, mrope_section=(11, 11, 10), max_positions=262144,
    ),
    # Qwen3.5-35B-A3B: the same layers 2,048 wide, 40 of them, every MLP 256 experts of 512 (8 a
    # token) beside a shared one of 512 (slime's scripts/models/qwen3.5-35B-A3B.sh)
    "qwen3.5-35b-a3b": qwen_scale(
        arch="qwen3_5_moe", hidden_size=2048, num_layers=40, num_heads=16, head_dim=256, num_kv_heads=2,
        intermediate_size=512, experts=256, experts_per_token=8, expert_intermediate=512, linear_key_heads=16,
        linear_value_heads=32, linear_head_dim=128, vocab_size=248320, rope_theta=1e7, vision_depth=27,
        vision_hidden=1152, vision_intermediate=4304, tie_embeddings=False, mrope_section=(11, 11, 10),
        max_positions=262144,
    ),
}  # fmt: skip


def build_model(spec: TinySpec, tokenizer):
    return family_class(spec.arch)().build_tiny_model(spec, tokenizer)


def build_processor(spec: TinySpec, tokenizer):
    return family_class(spec.arch)().build_tiny_processor(spec, tokenizer)


SPEC_FILE = "vlrl_tiny_spec.json"  # marks a folder as a tiny checkpoint, which a rebuild may replace


def write_tiny_checkpoint(out: str | Path, spec: TinySpec, device: str = "cpu", replace: bool = True) -> Path:
    """Build the checkpoint for `spec` into `out`, replacing atomically a tiny checkpoint (or an
    empty folder) there; anything else there is refused, never deleted. `device` only speeds up
    building large shapes; weights drawn on a GPU differ from the CPU's. With replace=False (the
    cache) a checkpoint another process put at `out` meanwhile is kept and this build dropped:
    it is the same build, and that process, or a third, may be reading it."""
    out = Path(out).resolve()  # '.' and '..' by their names
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not (out / SPEC_FILE).is_file()):
        raise ConfigError(
            f"{out} exists and is not a tiny checkpoint (no {SPEC_FILE}): it is left as it is; give a new folder"
        )
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = build_tokenizer(spec, family_class(spec.arch).chat_template)
        with torch.device(device):
            model = build_model(spec, tokenizer)
        model.to(getattr(torch, spec.dtype)).save_pretrained(tmp)
        build_processor(spec, tokenizer).save_pretrained(tmp)
        (tmp / SPEC_FILE).write_text(json.dumps(dataclasses.asdict(spec), indent=1) + "\n")
        if replace and out.exists():
            shutil.rmtree(out)
        try:
            os.rename(tmp, out)  # fails on a folder that is not empty
        except OSError:
            if replace or not (out / SPEC_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def builder_sources(arch: str) -> list[Path]:
    """The files a tiny build of `arch` is written by: this module, models/build.py, and the
    modules of the family's adapter and of its bases (a plugin's too). An edit to any of them is
    a new cache key, so that no cache serves a build the code no longer makes."""
    modules = {sys.modules[__name__], sys.modules[TinySpec.__module__]}  # models/build.py
    modules |= {sys.modules[cls.__module__] for cls in family_class(arch).__mro__[:-1]}  # all but object
    return sorted(Path(module.__file__) for module in modules)


def cache_key(spec: TinySpec) -> str:
    """The cache key: the family, and a hash of the spec, the builder's sources and the versions
    of the libraries whose classes, initialization and file formats the build is made of."""
    import tokenizers
    import transformers

    digest = hashlib.sha256(json.dumps(dataclasses.asdict(spec), sort_keys=True).encode())
    for library in (torch, transformers, tokenizers):
        digest.update(f"{library.__name__}=={library.__version__}\n".encode())
    for path in builder_sources(spec.arch):
        digest.update(path.read_bytes())
    return f"{spec.arch}-{digest.hexdigest()[:12]}"


def cache_dir() -> Path:
    return Path(os.environ.get("VLRL_CACHE", Path.home() / ".cache" / "vlrl"))


def tiny_checkpoint(spec: TinySpec | None = None) -> Path:
    """Path of the cached checkpoint for `spec`, building it on first use."""
    spec = spec or TinySpec()
    path = cache_dir() / "tiny" / cache_key(spec)
    if not (path / SPEC_FILE).is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_checkpoint(path, spec, replace=False)  # two test processes may build it at once
    return path


def resolve_tiny(path: str) -> str:
    """'tiny:qwen2_5_vl' -> the cached checkpoint's path; any other path unchanged."""
    return str(tiny_checkpoint(tiny_spec(path))) if path.startswith("tiny:") else path
