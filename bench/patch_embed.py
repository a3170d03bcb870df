"""The vision tower's patch embedding: transformers' Conv3d against vlrl's matrix product.

models/patch_embed.py computes Qwen's patch embedding (a Conv3d whose stride is its kernel) as
`F.linear` of the flattened patches and a view of the same weight (`model.patch_embedding:
linear`, the default). This times both on the same patches and weight, forward and forward with
backward (the weight's gradient, as when the vision tower trains), the two taking turns within
each round, and prints one JSON line with the medians and the largest difference of their
outputs.

    python bench/patch_embed.py                                   # the tiny model's tower, CPU
    python bench/patch_embed.py --shape qwen2.5-vl-3b --device cuda --dtype bfloat16 --patches 16384
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

# (patch size, temporal patch size, input channels, embedding width) of the towers compared
SHAPES = {"tiny": (14, 2, 3, 32), "qwen2.5-vl-3b": (14, 2, 3, 1280)}


def timed(run, device: torch.device, repeats: int) -> float:
    """Seconds per call of `run`, over `repeats` calls."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / repeats


def alternated(sides: dict, passes: dict, device: torch.device, rounds: int, repeats: int) -> dict[str, float]:
    """Median milliseconds per call of each pass (`passes`: name -> run(side)) on each side
    (`sides`: name -> what a pass runs on), keyed SIDE_PASS: each pass once on each side as
    warm-up (kernels chosen, memory allocated), then `rounds` rounds in which the sides take
    turns, each pass timed over `repeats` calls."""
    times: dict[str, list[float]] = {f"{side}_{name}": [] for side in sides for name in passes}
    for subject in sides.values():
        for run in passes.values():
            run(subject)
    for _ in range(rounds):
        for side, subject in sides.items():
            for name, run in passes.items():
                times[f"{side}_{name}"].append(timed(lambda r=run, s=subject: r(s), device, repeats))
    return {name: round(statistics.median(values) * 1000, 4) for name, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionPatchEmbed

    from vlrl.models.patch_embed import linear_patch_embedding

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--patches", type=int, default=256, help="patches per call (the tiny demo's 4 images: 256)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=50, help="calls timed per round and side")
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    patch, temporal, channels, width = SHAPES[args.shape]
    torch.manual_seed(0)
    conv = Qwen2_5_VisionPatchEmbed(patch, temporal, channels, width).to(device, dtype)
    product = copy.deepcopy(conv)
    if linear_patch_embedding(product) != 1:  # else both sides would time the convolution
        raise SystemExit(f"{type(product).__name__} is not computed as a product (vlrl/models/patch_embed.py)")
    x = torch.randn(args.patches, channels * temporal * patch * patch, device=device, dtype=dtype)
    upstream = torch.randn(args.patches, width, device=device, dtype=dtype)

    def forward(embed):
        with torch.no_grad():
            return embed(x)

    def forward_backward(embed):
        embed(x).backward(upstream)
        embed.proj.weight.grad = None

    sides, passes = {"conv": conv, "linear": product}, {"forward": forward, "forward_backward": forward_backward}
    ms = alternated(sides, passes, device, args.rounds, args.repeats)
    report = {
        "benchmark": "patch_embed",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "shape": args.shape,
        "dtype": args.dtype,
        "patches": args.patches,
        **{f"{name}_ms": value for name, value in ms.items()},
        **{f"{name}_speedup": round(ms[f"conv_{name}"] / ms[f"linear_{name}"], 2) for name in passes},
        "max_abs_difference": float((forward(conv) - forward(product)).abs().max()),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
