"""The HF engine's static step (on CUDA: replayed from CUDA graphs) against its dynamic loop,
side by side in one process (`rollout.hf.static_cache`, static.py). Prints one JSON line.

Both loops sample the same prompts with the same seeds, in turn within each round
(bench/lora_rollout.py's rounds); on the CPU they sample the same tokens (`same_tokens`;
tests/rollout/test_hf_engine.py), in bf16 on a GPU they may part where the two attend over a
different number of slots. `--arch` builds another family at the shape's sizes: Qwen3.5
(linear-attention states kept in the step's buffers) and Qwen3-VL MoE (experts routed on the
device) take the static step through their own forward, Qwen2.5-VL through the lean step. On
the CPU the static step runs eagerly, and slower: there it is the dynamic loop by default.

    python bench/static_vs_dynamic.py --shape tiny --device cpu --arch qwen3_5   # the script's check
    python bench/static_vs_dynamic.py --arch qwen3_5 --max-new-tokens 256       # a GPU, Qwen3.5 at 3B's sizes
"""

from __future__ import annotations

from lora_rollout import pair

VARIANTS = {
    "static": ["rollout.hf.static_cache=true"],
    "dynamic": ["rollout.hf.static_cache=false"],
}


def main(argv: list[str] | None = None) -> int:
    return pair(__doc__, argv, "static_vs_dynamic", VARIANTS, "static_over_dynamic")


if __name__ == "__main__":
    raise SystemExit(main())
