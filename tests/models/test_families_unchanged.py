"""Qwen2-VL and Qwen2.5-VL behave exactly as before the model families became adapters.

The pinned values were computed by the code before the refactor (main at 779f6bd): the tiny
checkpoints' weights (so the demo's trajectory cannot move) and the bytes of rendered prompts
(text, token ids, modality types and every vision tensor) for image and video samples.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tasks.refcoco import RefCOCO
from tasks.video_qa import VideoQA
from vlrl.config import ModelConfig, VideoConfig
from vlrl.data.records import FrameSpec, load_split
from vlrl.models.families import tiny_spec
from vlrl.models.tiny import tiny_checkpoint

# sha256 of model.safetensors; the -h32 builds hold the same tensors under other head counts.
WEIGHTS = {
    "qwen2_5_vl": "3683e486c76d18b4587fa082828e1b73ee55964a3809fd8e85bb5762d78bb85d",
    "qwen2_vl": "7c276cf73e390ed890fe9eba42015d31bb61027419aea8e46f05024e0c024064",
    "qwen2_5_vl-h32": "3683e486c76d18b4587fa082828e1b73ee55964a3809fd8e85bb5762d78bb85d",
    "qwen2_vl-h32": "7c276cf73e390ed890fe9eba42015d31bb61027419aea8e46f05024e0c024064",
}
# Three RefCOCO prompts, then two motion clips each in order and shuffled (T-GRPO).
PROMPTS = {
    "qwen2_5_vl": ["8a463937fa049abe", "608009c8716413ba", "8408b32a823f3a42",
                   "2529ed04c7b36f47", "b5a96ea908f1ec1c", "64dfebf0a674a5eb", "575859b7ee02177f"],
    "qwen2_vl": ["8a463937fa049abe", "608009c8716413ba", "8408b32a823f3a42",
                 "3fb59648c1485e76", "f060b7397887a962", "d2c7b25294f9b9d9", "280b77b904c637fd"],
}  # fmt: skip

# Three SFT losses and three RL entropies of the refcoco demo config (the last test below).
TRAJECTORY = [
    [6.478041648864746, 6.471019744873047, 6.433827877044678],  # step 1 trains at lr 0 (warmup)
    [6.448943138122559, 6.448986053466797, 6.448932647705078],
]


@pytest.mark.parametrize("name", sorted(WEIGHTS))
def test_tiny_checkpoints_keep_their_weights(name):
    path = tiny_checkpoint(tiny_spec(f"tiny:{name}"))
    assert hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest() == WEIGHTS[name]


def prompt_digest(prompt) -> str:
    digest = hashlib.sha256(prompt.text.encode())
    for tensor in (prompt.input_ids, prompt.mm_token_type_ids):
        digest.update(tensor.numpy().tobytes())
    for key in sorted(prompt.vision):
        digest.update(key.encode())
        digest.update(prompt.vision[key].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def motion_data(tmp_path_factory) -> Path:
    from data_prep.video import write_synthetic_video_qa

    return write_synthetic_video_qa(tmp_path_factory.mktemp("motion") / "train.json", 8, seed=0)


@pytest.mark.parametrize("arch", sorted(PROMPTS))
def test_rendered_prompts_are_byte_identical(arch, rec_data, motion_data):
    from vlrl.models.loading import load_processor
    from vlrl.models.prompting import render_prompt

    video = VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544)
    model = ModelConfig(
        path=str(tiny_checkpoint(tiny_spec(f"tiny:{arch}"))), min_pixels=3136, max_pixels=50176, video=video
    )
    processor = load_processor(model)
    kind = "absolute" if arch == "qwen2_5_vl" else "norm1000"
    grounding = RefCOCO()
    samples = load_split(rec_data, grounding.build_sample, FrameSpec(kind, 3136, 50176)).samples[:3]
    digests = [prompt_digest(render_prompt(processor, grounding.messages(s), s, model)) for s in samples]
    task = VideoQA()
    clips = [
        s
        for s in task.load(motion_data, FrameSpec(kind, 3136, 50176)).samples
        if s.meta["problem_type"] == "multiple choice"
    ]
    for sample in clips[:2]:
        for variant in (sample, task.temporal_variant(sample)):
            digests.append(prompt_digest(render_prompt(processor, task.messages(variant), variant, model)))
    assert digests == PROMPTS[arch]


def test_a_short_demo_run_keeps_its_numbers(tmp_path, monkeypatch):
    """Three cold-start SFT steps (their losses), then three RL steps from a random start (the
    sampled completions' entropies: sampling, cache and rope positions all enter them). One
    thread, as when the numbers were pinned: sums over two threads differ in the last bits
    (seen: 6.448985 vs 6.448986), which a changed computation would exceed by far."""
    import json

    import torch

    from vlrl.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the run must not undo it

    config = Path(__file__).resolve().parents[2] / "configs" / "demo" / "refcoco.yaml"
    common = ["--config", str(config), f"data.train={tmp_path / 'train.json'}", f"data.eval={tmp_path / 'val.json'}",
              "data.synthetic=true", "data.synthetic_train_size=8", "eval.every=0", "trainer.progress=false", "sft.progress=false"]  # fmt: skip
    assert main(["sft", *common, f"sft.output_dir={tmp_path / 'sft'}", "sft.steps=3", "sft.prompts_per_step=2"]) == 0
    assert main(["train", *common, f"trainer.output_dir={tmp_path / 'rl'}", "trainer.steps=3",
                 "trainer.prompts_per_step=2", "rollout.num_generations=4", "rollout.max_new_tokens=16"]) == 0  # fmt: skip

    def read(run, key):
        return [json.loads(line)[key] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    monkeypatch.undo()
    torch.set_num_threads(threads)
    assert read("sft", "loss") == pytest.approx(TRAJECTORY[0], rel=1e-6)
    assert read("rl", "entropy") == pytest.approx(TRAJECTORY[1], rel=1e-6)
