"""The vision tower's attention: transformers' SDPA call per chunk against vlrl's call per chunk length.

Qwen2.5-VL's vision tower attends within each 112-pixel window in 28 of its 32 layers and within
each image in the other 4; with SDPA, transformers calls it once per window or image and reads
the chunk lengths off the device in every layer. models/vision_attention.py
(`model.vision_attention: grouped`, the default) calls it once per distinct chunk length. This
builds the tower at Qwen2.5-VL-3B's depth, windows and full-attention layers, with random
weights, gives both forwards the same weights and `--images` images of `--size` pixels (patches
as Qwen's processor sizes them, with `--sizes-vary` each image 28 pixels (two patches) narrower
than the one before, as a batch of photographs of different shapes), times the tower's forward
and its forward with backward (the tower training, as in the RL update), the two sides taking
turns within each round, and prints one JSON line: medians, ratios, the SDPA calls of a forward
on each side, and the largest difference of their features.

On the CPU the default width is small (`--hidden 64`), so the tower's many small calls show as
they do on a GPU, where each costs its launch and Python; `--hidden 1280 --heads 16
--intermediate 3420` is the 3B tower itself (for a GPU).

    python bench/vision_attention.py                      # 16 COCO-sized images, CPU, narrow tower
    python bench/vision_attention.py --device cuda --dtype bfloat16 --hidden 1280 --heads 16 --intermediate 3420
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from patch_embed import alternated  # noqa: E402

from vlrl.models.vision_attention import grouped_vision_attention  # noqa: E402

PATCH, MERGE, TEMPORAL, WINDOW = 14, 2, 2, 112  # Qwen2.5-VL's vision tower


def grid_of(width: int, height: int) -> list[int]:
    """(frames, patch rows, patch columns) of an image as Qwen's processor resizes it."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    h, w = smart_resize(height, width, factor=PATCH * MERGE, min_pixels=3136, max_pixels=12845056)
    return [1, h // PATCH, w // PATCH]


def sdpa_calls(run) -> int:
    """How many times `run` calls SDPA (both sides call it through torch.nn.functional)."""
    functional, original, count = torch.nn.functional, torch.nn.functional.scaled_dot_product_attention, [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    functional.scaled_dot_product_attention = counted
    try:
        run()
    finally:
        functional.scaled_dot_product_attention = original
    return count[0]


def main(argv: list[str] | None = None) -> None:
    from transformers import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=128)
    parser.add_argument("--images", type=int, default=16, help="images per forward (the recipe's prompts a step)")
    parser.add_argument("--size", default="640x480", help="each image's WIDTHxHEIGHT in pixels (COCO's usual)")
    parser.add_argument("--sizes-vary", action="store_true", help="each image 28 pixels narrower than the one before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="calls timed per round and side")
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    width, height = (int(v) for v in args.size.lower().split("x"))
    grids = [grid_of(width - (28 * i if args.sizes_vary else 0), height) for i in range(args.images)]
    config = Qwen2_5_VLVisionConfig(
        depth=args.depth, hidden_size=args.hidden, intermediate_size=args.intermediate, num_heads=args.heads,
        out_hidden_size=args.hidden, fullatt_block_indexes=list(range(7, args.depth, 8)) or [args.depth - 1], window_size=WINDOW,
        patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    chunks = Qwen2_5_VisionTransformerPretrainedModel._from_config(config).to(device, dtype)
    grouped = copy.deepcopy(chunks)
    if grouped_vision_attention(grouped) != args.depth:  # else both sides would time transformers' loop
        raise SystemExit("the tower's attention modules were not replaced (vlrl/models/vision_attention.py)")
    grid = torch.tensor(grids, device=device)
    patches = int(grid.prod(dim=1).sum())
    x = torch.randn(patches, 3 * TEMPORAL * PATCH * PATCH, device=device, dtype=dtype)

    def forward(tower):
        with torch.no_grad():
            return tower(x, grid_thw=grid).pooler_output

    def forward_backward(tower):
        tower(x, grid_thw=grid).pooler_output.float().square().mean().backward()
        tower.zero_grad(set_to_none=True)

    sides, passes = {"chunks": chunks, "grouped": grouped}, {"forward": forward, "forward_backward": forward_backward}
    ms = {name: round(value, 2) for name, value in alternated(sides, passes, device, args.rounds, args.repeats).items()}
    calls = {side: sdpa_calls(lambda t=tower: forward(t)) for side, tower in sides.items()}
    report = {
        "benchmark": "vision_attention",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "tower": {"depth": args.depth, "hidden": args.hidden, "heads": args.heads, "intermediate": args.intermediate},
        "images": args.images,
        "patches": patches,
        "sdpa_calls_per_forward": calls,
        **{f"{name}_ms": value for name, value in ms.items()},
        **{f"{name}_grouped_over_chunks": round(ms[f"grouped_{name}"] / ms[f"chunks_{name}"], 3) for name in passes},
        "max_abs_difference": float((forward(chunks).float() - forward(grouped).float()).abs().max()),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
