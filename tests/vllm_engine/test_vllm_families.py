"""The vLLM engine on every model family vLLM's CPU build runs here: the prompts it is given
have the HF processor's token counts, and its log-probs are the HF forward's. What it cannot
run is refused with the reason: Qwen3.5 in float32 (the CPU kernel of its linear attention
takes bfloat16 only), the mixtures of experts on the CPU (pushed expert weights are not
repacked; their checkpoints load), Qwen3-VL and Qwen3.5 videos."""

from __future__ import annotations

import copy
import gc

import pytest
import torch

from tasks.refcoco import RefCOCO
from tasks.video_qa import VideoQA
from tests.vllm_engine.conftest import reference_logprobs
from vlrl.config import ConfigError
from vlrl.data.records import load_split
from vlrl.models.families import model_family, tiny_spec
from vlrl.models.loading import checkpoint_layout, frame_spec, full_weights, load_model, load_processor
from vlrl.models.prompting import render_prompt
from vlrl.models.tiny import tiny_checkpoint
from vlrl.rollout import EngineSetup, SamplingParams, choose_engine

# family build, dtype, log-prob tolerance: float32 as the HF forward to rounding; bfloat16 (what
# Qwen3.5's CPU kernel takes) on both sides, where the two implementations round differently:
# 1.4e-3 apart here, and 1.6e-2 when the HF side's decoding positions are shifted by one.
# Qwen2.5-VL's image prompts are test_vllm_engine.py's; Qwen2-VL's video goes the same way.
FAMILIES = {
    "qwen2_vl-h32": ("float32", 1e-5),
    "qwen3_vl": ("float32", 1e-5),
    "qwen3_5": ("bfloat16", 5e-3),
}


def config(vllm_config, name: str, dtype: str):
    path = tiny_checkpoint(tiny_spec(f"tiny:{name}"))
    video = "{max_frames: 4, min_pixels: 3136, max_pixels: 12544}"
    return vllm_config(
        **{"model.path": str(path), "model.dtype": dtype, "model.max_pixels": 50176, "model.video": video}
    )


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def setup(request, vllm_config, rec_data, video_qa_data):
    name = request.param
    dtype, tolerance = FAMILIES[name]
    cfg = config(vllm_config, name, dtype)
    processor = load_processor(cfg.model)
    model = load_model(cfg.model).eval()
    engine = choose_engine("vllm", cfg.rollout.options).build(
        EngineSetup(
            cfg.model,
            cfg.model.path,
            processor,
            cfg.trainer.seed,
            lambda: pytest.fail("vLLM must not load the HF policy"),
        )
    )
    task, videos = RefCOCO(), VideoQA()
    samples = load_split(rec_data, task.build_sample, frame_spec(cfg.model)).samples[:2]
    prompts = [render_prompt(processor, task.messages(s), s, cfg.model) for s in samples]
    clip = next(s for s in videos.load(video_qa_data, frame_spec(cfg.model)).samples if s.video)
    video = render_prompt(processor, videos.messages(clip), clip, cfg.model)
    yield engine, model, processor, prompts, video, tolerance
    del engine
    gc.collect()


def test_prompt_token_counts_equal_the_hf_processor(setup):
    from vllm import SamplingParams as VLLMSampling

    engine, _, _, prompts, video, _ = setup
    if not engine.on_vllm.video_refusal:
        prompts = [*prompts, video]
    outputs = engine.llm.generate([engine.request(p) for p in prompts], VLLMSampling(max_tokens=1), use_tqdm=False)
    assert [len(o.prompt_token_ids) for o in outputs] == [len(p) for p in prompts]


def test_sampled_logprobs_equal_the_hf_forward(setup):
    engine, model, processor, prompts, video, tolerance = setup
    if not engine.on_vllm.video_refusal:
        prompts = [*prompts, video]
    generations = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=8), torch.Generator().manual_seed(0))
    assert sum(len(g.completions) for g in generations) == 2 * len(prompts)
    reference, sampled = reference_logprobs(model, processor, prompts, generations, 1.0)
    torch.testing.assert_close(sampled, reference, rtol=0, atol=tolerance)


def test_pushed_weights_are_the_ones_sampled_with(setup):
    """The policy's full weights, pushed as the trainer pushes them after an update, load under
    vLLM's names for the family: the log-probs of what it samples then are the changed HF
    model's, to the family's tolerance and the rounding of the dtype (a log-prob of -6.6 was
    6.7e-3 apart in bfloat16), and ten times closer to them than to the unchanged one's. Log-probs, not greedy tokens:
    Qwen3.5's bfloat16 kernels round otherwise than HF's, and on 2026-12-02 a near-tie turned
    one greedy token of twelve."""
    engine, model, processor, prompts, _, tolerance = setup
    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in changed.named_parameters():
            if "layers" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=generator).to(p.dtype))
    try:
        engine.sync_weights(checkpoint_layout(changed, full_weights(changed)))
        generations = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=6), torch.Generator().manual_seed(0))
    finally:
        engine.sync_weights(checkpoint_layout(model, full_weights(model)))
    reference, sampled = reference_logprobs(changed, processor, prompts, generations, 1.0)
    torch.testing.assert_close(sampled, reference, rtol=torch.finfo(model.dtype).eps, atol=tolerance)
    unchanged, _ = reference_logprobs(model, processor, prompts, generations, 1.0)
    off = lambda logprobs: (logprobs - sampled).abs().mean()  # noqa: E731
    assert off(unchanged) > 10 * off(reference)


def test_a_video_prompt_vllm_cannot_take_costs_only_its_sample(setup):
    engine, _, _, prompts, video, _ = setup
    if not engine.on_vllm.video_refusal:
        pytest.skip(f"{engine.family.label} videos run on vLLM (the tests above)")
    generations = engine.generate([prompts[0], video], SamplingParams(n=2, max_new_tokens=4))
    assert len(generations[0].completions) == 2 and not generations[0].rejected
    assert not generations[1].completions and engine.on_vllm.video_refusal in generations[1].rejected


@pytest.mark.parametrize(("name", "dtype", "reason"), [
    ("qwen3_vl_moe", "float32", "weights pushed after an update are not repacked"),
    ("qwen3_5", "float32", "takes bfloat16 only: set model.dtype=bfloat16"),
    ("qwen3_5_moe", "bfloat16", "weights pushed after an update are not repacked"),
])  # fmt: skip
def test_what_vllm_cannot_run_is_refused_before_it_starts(vllm_config, name, dtype, reason):
    cfg = config(vllm_config, name, dtype)
    family = model_family(cfg.model)
    with pytest.raises(ConfigError, match=f"cannot run {family.label} here: .*{reason}"):
        choose_engine("vllm", cfg.rollout.options).build(
            EngineSetup(cfg.model, cfg.model.path, load_processor(cfg.model), cfg.trainer.seed, lambda: None)
        )


# How far below the HF model's best logit vLLM's greedy token may fall: rounding, where two logits
# tie. bfloat16 rounds logits near 1-2 to 2**-7 = 0.0078, and Qwen3.5-MoE's tiny model has a top-two
# margin of exactly that (2026-12-02): two steps of it are allowed.
GREEDY_TIE = {"float32": 1e-4, "bfloat16": 2 * 2**-7}


@pytest.mark.slow  # a vLLM engine in a process of its own: 25 s each alone, 40 s in make test (2026-12-02)
@pytest.mark.parametrize(("name", "dtype"), [("qwen3_vl_moe", "float32"), ("qwen3_5_moe", "bfloat16")])
def test_vllm_loads_a_mixture_of_experts_as_saved_but_its_cpu_experts_lose_pushed_weights(name, dtype):
    """The checkpoint vlrl saves loads (Qwen3-VL MoE's experts in the released layout,
    models/qwen3_vl.py): vLLM's greedy tokens are the HF model's, ties to rounding aside. Pushing the very weights it
    loaded changes them: the CPU refusal's evidence (vllm.py, EXPERTS_ON_CPU); when a vLLM
    release keeps the tokens, lift it. In a process of its own: vLLM sets its parallel groups up
    once a process, without the experts' group when the first engine there has no experts."""
    import subprocess
    import sys

    script = LOAD_THEN_PUSH.format(name=name, dtype=dtype, tolerance=GREEDY_TIE[dtype])
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-2:] == ["loaded: the HF model's tokens", "pushed: tokens changed"]


LOAD_THEN_PUSH = """
import dataclasses

import torch
import vlrl.rollout.vllm as engine_module
from vllm import SamplingParams
from vlrl.config import load_config
from vlrl.models.families import tiny_spec
from vlrl.models.loading import checkpoint_layout, full_weights, load_model, load_processor
from vlrl.models.tiny import tiny_checkpoint

on_vllm = engine_module.ON_VLLM["{name}"]
engine_module.ON_VLLM["{name}"] = dataclasses.replace(on_vllm, refusal=lambda dtype, cuda: "")
path = tiny_checkpoint(tiny_spec("tiny:{name}"))
cfg = load_config(None, [f"model.path={{path}}", "model.dtype={dtype}"])
model = load_model(cfg.model).eval()
processor = load_processor(cfg.model)
options = engine_module.VLLMOptions(kv_cache_memory_bytes=64 << 20)
engine = engine_module.VLLMEngine(str(path), processor, cfg.model, options, 0)
texts = ["a red circle", "two squares"]
greedy = SamplingParams(max_tokens=8, temperature=0)
tokens = lambda: [list(o.outputs[0].token_ids) for o in engine.llm.generate(texts, greedy)]

def worst_gap(outputs):
    # The most any token vLLM chose falls below the HF model's best logit, the HF model fed the
    # same tokens: 0 for HF's own greedy tokens but where two logits tie to rounding.
    worst = 0.0
    for text, chosen in zip(texts, outputs):
        ids = processor.tokenizer(text).input_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids + chosen])).logits[0, len(ids) - 1 : -1].float()
        picked = logits.gather(-1, torch.tensor(chosen)[:, None]).squeeze(-1)
        worst = max(worst, float((logits.max(-1).values - picked).max()))
    return worst


before = tokens()
gap = worst_gap(before)
print("loaded: the HF model's tokens" if gap <= {tolerance} else f"loaded: other tokens {{before}}, {{gap}} below HF's best")
engine.sync_weights(checkpoint_layout(model, full_weights(model)))
print("pushed: tokens changed" if tokens() != before else "pushed: tokens kept")
engine.close()
"""
