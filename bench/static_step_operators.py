"""How many operators one static decoding step runs (rollout/static.py's lean step), per layer
and around the layers, as torch's dispatcher sees them (views left out). Prints one JSON line.

A step replayed from a CUDA graph pays for each kernel, however small: on an H200 the 3B step
took 8.6 ms against 1.3 ms of weights to read (docs/performance.md), so the count is what the
eager step can cut without fusing kernels. The dispatcher sees a composite operator as one: a
linear layer is one (cuBLAS's product with its bias), and SDPA is counted with what it does
before its kernel, which is to turn a boolean mask into a float one (`sdpa_boolean_masks`: three
kernels a call on CUDA, torch's attention.cpp `convert_boolean_attn_mask`). The tiny model
(float32, CPU) has 2 layers; a layer's count does not depend on its width, so
`at_36_layers` is Qwen2.5-VL-3B's step (its 36 layers). To compare with a revision, run this
file with PYTHONPATH at a worktree of it.

    python bench/static_step_operators.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from data_prep.refcoco import write_synthetic_rec  # noqa: E402
from tasks.refcoco import RefCOCO  # noqa: E402
from vlrl.config import ModelConfig  # noqa: E402
from vlrl.data.records import load_split  # noqa: E402
from vlrl.models import decode_step  # noqa: E402
from vlrl.models.loading import frame_spec, load_model, load_processor  # noqa: E402
from vlrl.models.prompting import render_prompt  # noqa: E402
from vlrl.rollout import SamplingParams  # noqa: E402
from vlrl.rollout.hf import HFEngine, HFOptions  # noqa: E402
from vlrl.rollout.static import LeanStaticStep  # noqa: E402

LAYERS_3B = 36
IGNORED = {"aten::detach", "aten::alias", "aten::lift_fresh"}


class Operators(TorchDispatchMode):
    """Counts the operators dispatched (views left out) and the boolean masks SDPA is given."""

    def __init__(self):
        super().__init__()
        self.count = self.boolean_masks = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not func.is_view and func._schema.name not in IGNORED:
            self.count += 1
        if func._schema.name == "aten::scaled_dot_product_attention":
            mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
            self.boolean_masks += isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
        return func(*args, **kwargs)


def main() -> None:
    cfg = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=12544)
    processor, model = load_processor(cfg), load_model(cfg).eval()
    with tempfile.TemporaryDirectory() as tmp:
        data = write_synthetic_rec(Path(tmp) / "rec.json", size=4, seed=0)
        task = RefCOCO()
        samples = load_split(data, task.build_sample, frame_spec(cfg)).samples
        prompts = [render_prompt(processor, task.messages(s), s, cfg) for s in samples]
    seen: dict[str, Operators] = {}
    forward, layers, mask = LeanStaticStep.__call__, LeanStaticStep.through_layers, decode_step.additive_mask

    def counted(name, method):
        def run(*args, **kwargs):
            seen[name] = Operators()
            with seen[name]:
                return method(*args, **kwargs)

        return run

    LeanStaticStep.__call__ = counted("forward", forward)
    LeanStaticStep.through_layers = counted("layers", layers)
    decode_step.additive_mask = counted("mask", mask)  # made in through_layers, once for all the layers
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=True))
    engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4), torch.Generator().manual_seed(0))
    LeanStaticStep.__call__, LeanStaticStep.through_layers, decode_step.additive_mask = forward, layers, mask
    n = len(model.model.language_model.layers)
    final_norm = 6  # through_layers' last RMSNorm in float32: pow, mean, add, rsqrt, mul, mul
    per_layer = (seen["layers"].count - seen["mask"].count - final_norm) / n
    around = seen["forward"].count - per_layer * n
    print(json.dumps({
        "benchmark": "static_step_operators",
        "model": "tiny qwen2_5_vl, float32, cpu",
        "layers": n,
        "per_layer": per_layer,
        "around_layers": around,
        "sdpa_boolean_masks_per_layer": seen["forward"].boolean_masks / n,
        f"at_{LAYERS_3B}_layers": per_layer * LAYERS_3B + around,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
