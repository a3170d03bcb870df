"""A model family written outside vlrl: Qwen2.5-VL checkpoints fine-tuned to answer in 0-1000
coordinates (docs/model_families.md). Everything else is Qwen2.5-VL's, so it derives from it.

    vlrl train --config configs/demo/refcoco.yaml model.family=docs/examples/qwen25_norm1000.py:Qwen25Norm1000
"""

from __future__ import annotations

from vlrl.models.families import family_class

Qwen25VL = family_class("qwen2_5_vl")


class Qwen25Norm1000(Qwen25VL):
    name = "qwen2_5_vl_norm1000"
    label = "Qwen2.5-VL (0-1000 answers)"
    coord_frame = "norm1000"
    tiny_builds = {}  # no tiny build of its own: model.path names a Qwen2.5-VL checkpoint
