"""Qwen3.5's linear-attention layer (transformers' gated delta net) decoding one token per row:
the eager step against the same step through torch.compile, in turns, and how many times the
eager step passes the rows' recurrent states through memory. Prints one JSON line.

Without flash-linear-attention (not on the machines this project is lent) transformers' one-token
step is its PyTorch fallback: products, sums and copies over every row's recurrent state (a
key-by-value matrix per value head, in float32), each a pass through memory, where a fused kernel
reads and writes the state once. `state_reads` and `state_writes` count them at torch's
dispatcher: operators given or giving a tensor of the states' shape. The timings say what fusing
them saves: `rollout.hf.compile_step` compiles the static step's lean forward with these layers
whole (tests/rollout/test_compiled_step.py). Defaults: 1,024 wide, 16 key heads and 32 value heads
of 128 (Qwen3.5's linear attention), 16 rows; `max_abs_difference` compares the two sides' first
outputs from the same states.

    python bench/linear_attention_step.py
    python bench/linear_attention_step.py --device cuda --dtype bfloat16 --rows 128 --hidden 2048
"""

from __future__ import annotations

import argparse
import json

import torch
from patch_embed import alternated
from torch.utils._python_dispatch import TorchDispatchMode

PROMPT = 8  # tokens prefilled before the timed steps


OVERWRITES = {"aten::copy_", "aten::fill_", "aten::zero_"}  # their first argument is written, not read


class StatePasses(TorchDispatchMode):
    """Counts the tensors of `shape` operators read and write, views aside."""

    def __init__(self, shape: torch.Size):
        super().__init__()
        self.shape, self.reads, self.writes = shape, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            given = [*args[func._schema.name in OVERWRITES :], *(kwargs or {}).values()]
            self.reads += sum(isinstance(t, torch.Tensor) and t.shape == self.shape for t in given)
            made = out if isinstance(out, (tuple, list)) else [out]
            self.writes += sum(isinstance(t, torch.Tensor) and t.shape == self.shape for t in made)
        return out


def main(argv: list[str] | None = None) -> None:
    from transformers import DynamicCache
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--key-heads", type=int, default=16)
    parser.add_argument("--value-heads", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="steps timed per round and side")
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    config = Qwen3_5TextConfig(
        hidden_size=args.hidden, linear_num_key_heads=args.key_heads, linear_key_head_dim=args.head_dim,
        linear_num_value_heads=args.value_heads, linear_value_head_dim=args.head_dim,
        num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=128,
    )  # fmt: skip
    torch.manual_seed(0)
    layer = Qwen3_5GatedDeltaNet(config, 0).to(device, dtype).eval()
    prompt = torch.randn(args.rows, PROMPT, args.hidden, device=device, dtype=dtype)
    token = torch.randn(args.rows, 1, args.hidden, device=device, dtype=dtype)

    def prefilled() -> DynamicCache:
        cache = DynamicCache(config=config)
        layer(prompt, cache_params=cache)
        return cache

    with torch.no_grad():
        caches = {"eager": prefilled(), "compiled": prefilled()}
        steps = {"eager": layer, "compiled": torch.compile(layer)}
        first = {side: steps[side](token, cache_params=caches[side]) for side in steps}  # compiles
        state = caches["eager"].layers[0].recurrent_states[0]
        passes = StatePasses(state.shape)
        with passes:
            layer(token, cache_params=caches["eager"])
        times = alternated(
            {side: (steps[side], caches[side]) for side in steps},
            {"step": lambda side: side[0](token, cache_params=side[1])},
            device, args.rounds, args.repeats,
        )  # fmt: skip
    print(json.dumps({
        "benchmark": "linear_attention_step", "device": str(device), "dtype": args.dtype, "rows": args.rows,
        "hidden": args.hidden, "key_heads": args.key_heads, "value_heads": args.value_heads, "head_dim": args.head_dim,
        "state_bytes": state.numel() * state.element_size(),  # every row's, one layer
        "state_reads": passes.reads, "state_writes": passes.writes,
        "eager_ms": times["eager_step"], "compiled_ms": times["compiled_step"],
        "compiled_over_eager": round(times["compiled_step"] / times["eager_step"], 3),
        "max_abs_difference": (first["compiled"] - first["eager"]).abs().max().item(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
