"""The static step attending over a window of the KV cache against attending over all of it,
side by side in one process (`rollout.hf.smallest_window`, static.py). Prints one JSON line.

The HF engine's static step samples the same prompts with the same seeds with the window (the
default, 128 slots doubling as they fill) and over the whole cache (`smallest_window=0`), in
turn within each round (bench/lora_rollout.py's rounds). Same tokens (`same_tokens`): the slots
past the window are not written yet. A random model's completions run long (to
max_new_tokens), so the window saves least there: about half the slots early on, none at the
end; real completions end sooner and save more. On the CPU the step runs eagerly
(`rollout.hf.static_cache=true`); on CUDA the defaults, in CUDA graphs.

    python bench/cache_windows.py --shape tiny --device cpu     # CPU figures at the tiny model
    python bench/cache_windows.py --max-new-tokens 1024          # a GPU at Qwen2.5-VL-3B's shape
"""

from __future__ import annotations

from lora_rollout import pair

VARIANTS = {
    "windowed": ["rollout.hf.static_cache=true", "rollout.hf.smallest_window=128"],
    "whole_cache": ["rollout.hf.static_cache=true", "rollout.hf.smallest_window=0"],
}


def main(argv: list[str] | None = None) -> int:
    return pair(__doc__, argv, "cache_windows", VARIANTS, "windowed_over_whole_cache")


if __name__ == "__main__":
    raise SystemExit(main())
