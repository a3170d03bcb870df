"""The GPU tier (`make test-gpu`): what only a GPU shows (bf16 kernels, CUDA memory, NCCL, CPU
offload to another device), each test comparing two runs rather than only running one.

Every test here is marked `gpu` and needs CUDA; without it the tier is skipped. With
VLRL_GPU_TIER_ON_CPU=1 the same tests run on the CPU at the tiny shape: a check of the tier's
own logic (comparisons, tolerances' direction, bookkeeping), never a claim about CUDA.

Models are built locally with random weights (vlrl.models.tiny; nothing downloaded) at a mid-size
Qwen2.5-VL shape: Qwen's 151,936-token vocabulary and bf16 weights, so that bf16 rounding and
the float32 logits weigh as at real size, with 8 layers instead of 36 to keep the tier under
8 minutes on one H100/H200. One test runs Qwen2.5-VL-3B's own shape (test_plan_on_gpu.py).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from vlrl.models.build import TinySpec
from vlrl.models.tiny import QWEN_SCALE, tiny_checkpoint

ON_CPU = os.environ.get("VLRL_GPU_TIER_ON_CPU") == "1"
ROOT = Path(__file__).resolve().parents[2]


def pinned_transformers() -> str:
    """The transformers version constraints.txt pins: the one whose internals the tests pin down."""
    line = next(x for x in (ROOT / "constraints.txt").read_text().splitlines() if x.startswith("transformers=="))
    return line.split("==")[1].strip()


# Qwen2.5-VL's layout at ~0.3B parameters: its vocabulary (tied embeddings, as the 3B), GQA with
# two kv heads, a vision tower of 8 blocks of 512. bf16 weights.
MID = TinySpec(
    hidden_size=1024, num_layers=8, num_heads=8, intermediate_size=2816,
    **{**QWEN_SCALE, "vision_depth": 8, "vision_hidden": 512, "vision_heads": 8, "vision_intermediate": 1376,
       "max_pixels": 200704},
)  # fmt: skip
TINY_BF16 = TinySpec(dtype="bfloat16")


@pytest.fixture(scope="session")
def device() -> torch.device:
    if torch.cuda.is_available():
        # Comparisons with CPU runs in float32: no TF32 in matmuls or convolutions (the patch
        # embedding is a Conv3d, and cuDNN allows TF32 by default).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        import transformers

        if transformers.__version__ != pinned_transformers():  # a GPU machine's own, without .whl carried
            pytest.exit(
                f"transformers {transformers.__version__} is imported, the tier checks {pinned_transformers()}: "
                "carry .whl/ (make gpu-wheels, docs/gpu.md) so make test-gpu installs it",
                returncode=2,
            )
        return torch.device("cuda")
    if ON_CPU:
        return torch.device("cpu")
    pytest.skip("the GPU tier needs CUDA (make test-gpu); VLRL_GPU_TIER_ON_CPU=1 runs its logic on the CPU")


@pytest.fixture(scope="session")
def mid_checkpoint(device) -> Callable[[str], Path]:
    """The mid-size checkpoint of a model family, `arch` (the tiny one in bf16 on the CPU)."""
    return lambda arch: tiny_checkpoint(replace(TINY_BF16 if device.type == "cpu" else MID, arch=arch))


@pytest.fixture(scope="session")
def mid_model(mid_checkpoint) -> Path:
    """The mid-size Qwen2.5-VL checkpoint (the tiny one in bf16 on the CPU)."""
    return mid_checkpoint(MID.arch)


@pytest.fixture(autouse=True)
def fresh_memory(device):
    """Each test starts with the memory of the last one freed and the peak counter reset."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    yield
    gc.collect()
