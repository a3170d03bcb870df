"""The HF engine's lean decoding step (models/decode_step.py, `rollout.hf.lean_step`) against
the model's own forward, side by side in one process. Prints one JSON line.

Both sample the same prompts with the same seeds, in turn within each round (bench/lora_rollout.py's
rounds), in whichever loop the device takes by default (on the CPU the dynamic loop, on CUDA the
static step in CUDA graphs, where the lean step is `static.LeanStaticStep`). The lean step is the
model's kernels in the model's order, so both sample the same tokens (`same_tokens`). `--arch`
builds another family at the shape's sizes: the lean step calls Qwen3-VL MoE's experts and
Qwen3.5's linear-attention layers as the model calls them. Where the lean step is refused
(`decode_step_refusal`: e.g. `model.attn_implementation=eager`) both sides are the model's,
and `lean_taken` says so.

    python bench/lean_vs_model.py --shape tiny --device cpu --arch qwen3_vl_moe   # the script's check
    python bench/lean_vs_model.py --max-new-tokens 256                            # a GPU at 3B's shape
"""

from __future__ import annotations

from lora_rollout import pair

VARIANTS = {
    "lean": ["rollout.hf.lean_step=true"],
    "model": ["rollout.hf.lean_step=false"],
}


def lean_taken(engines: dict) -> dict:
    """Whether the lean side decodes with the lean step (not where the model refuses it: both
    sides the model's); the model's side never does."""
    if engines["model"].lean:
        raise SystemExit("rollout.hf.lean_step=false did not reach the engine: it decodes with the lean step")
    return {"lean_taken": engines["lean"].lean}


def main(argv: list[str] | None = None) -> int:
    return pair(__doc__, argv, "lean_vs_model", VARIANTS, "lean_over_model", lean_taken)


if __name__ == "__main__":
    raise SystemExit(main())
