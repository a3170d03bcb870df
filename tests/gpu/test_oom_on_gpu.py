"""trainer.halve_on_oom against a real CUDA out-of-memory: the caching allocator capped between the
peaks of one update at two budgets, so that the larger fails and the smaller fits. The update
at the larger budget then goes on at the smaller one (tests/trainer/test_oom.py checks on the CPU
that the step so redone equals one taken at that budget, with torch's error raised by hand).
Likewise a rollout capped between its peaks in one call and in two goes on in two."""

from __future__ import annotations

import gc
import math

import pytest
import torch
from rich.console import Console

from data_prep.refcoco import write_synthetic_rec
from tasks.refcoco import RefCOCO
from tests.gpu.runs import rl_overrides
from vlrl.config import ModelConfig, load_config
from vlrl.data.records import load_split
from vlrl.models.loading import frame_spec, load_model, load_processor
from vlrl.models.prompting import render_prompt
from vlrl.rollout import SamplingParams
from vlrl.rollout.hf import HFEngine
from vlrl.rollout.parts import RolloutRows
from vlrl.trainer.batch import RolloutBatch, update_micro_batches
from vlrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.gpu


def test_an_update_that_runs_the_gpu_out_of_memory_goes_on_at_half_the_budget(device, mid_model, tmp_path):
    if device.type != "cuda":
        pytest.skip(
            "a cap on memory is CUDA's caching allocator's (tests/trainer/test_oom.py runs the logic on the CPU)"
        )
    data = write_synthetic_rec(tmp_path / "rec.json", size=16, seed=2)
    options = {"trainer.prompts_per_step": 16}  # ~9,000 tokens: the two budgets' activations ~1 GB apart
    trainer = RLTrainer(load_config(None, rl_overrides(mid_model, data, tmp_path / "run", **options)), Console())
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:16]
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=1)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    advantages = torch.linspace(-1.0, 1.0, len(batch.prompt_index))
    shape = (batch.prompt_index.tolist(), [len(p) for p in batch.prompts], batch.lengths())
    whole = len(batch.prompts) * max(shape[1]) + len(shape[2]) * max(shape[2])  # the step in one micro-batch
    assert len(update_micro_batches(*shape, whole)) == 1 and len(update_micro_batches(*shape, whole // 2)) > 1

    def peak(budget: int) -> int:
        """The most memory the update allocates at `budget` (weights, optimizer state, activations).
        The first update makes AdamW's state: `peak` is measured after one."""
        trainer.run.budget.tokens = budget
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        trainer.update(batch, advantages)
        return torch.cuda.max_memory_allocated(device)

    peak(whole // 2)  # AdamW's state made
    half, full = peak(whole // 2), peak(whole)
    # The cap is on the memory the allocator reserves, which fragmentation keeps above what it
    # allocates: the half budget gets most of the room between the two peaks.
    assert full - half > 2**29, (
        f"the update's peak at {whole} tokens ({full:,} B) is not 512 MB above half's ({half:,})"
    )
    cap = half + 3 * (full - half) // 4
    gc.collect()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total)  # the current device's (an index, not "cuda")
    try:
        stats, skipped = trainer.update(batch, advantages)  # at `whole`, which the cap leaves no room for
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert trainer.run.budget.tokens == whole // 2, f"peaks {half:,} and {full:,} B, capped at {cap:,}"
    assert skipped == 0 and math.isfinite(stats["loss"])


def test_a_rollout_that_runs_the_gpu_out_of_memory_goes_on_in_parts_of_half_its_rows(device, mid_model, tmp_path):
    """The HF engine (static step in CUDA graphs) capped between the peaks of one rollout of 16
    prompts x 16 completions in one call and in two: the call fails (wherever: prefill, a
    bucket's capture, a decoding step) and is made again in parts of half its rows, each prompt
    with its whole group (tests/rollout/test_parts.py checks on the CPU what the parts sample)."""
    if device.type != "cuda":
        pytest.skip("a cap on memory is CUDA's caching allocator's (tests/rollout/test_parts.py runs the logic)")
    data = write_synthetic_rec(tmp_path / "rec.json", size=16, seed=2)
    cfg = ModelConfig(path=str(mid_model), dtype="auto", max_pixels=200704)
    processor = load_processor(cfg)
    engine = HFEngine(load_model(cfg, device=device).eval(), processor.tokenizer, device)
    task = RefCOCO()
    prompts = [
        render_prompt(processor, task.messages(s), s, cfg)
        for s in load_split(data, task.build_sample, frame_spec(cfg)).samples
    ]
    params = SamplingParams(n=16, max_new_tokens=512)
    rows = len(prompts) * params.n

    def peak(limit: int | None) -> int:
        """The most memory one rollout allocates at `limit` rows a call, its buffers made anew."""
        engine.sleep()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        RolloutRows(rows=limit).generate(engine, prompts, params, torch.Generator(device).manual_seed(0))
        return torch.cuda.max_memory_allocated(device)

    peak(rows // 2)  # kernels and workspaces made
    half, full = peak(rows // 2), peak(None)
    assert full - half > 2**28, f"the rollout's peak in one call ({full:,} B) is not 256 MB above two calls' ({half:,})"
    cap = half + 3 * (full - half) // 4
    engine.sleep()
    gc.collect()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    torch.cuda.set_per_process_memory_fraction(cap / total)
    recovering = RolloutRows(halve_on_oom=True, warn=print)
    try:
        groups = recovering.generate(engine, prompts, params, torch.Generator(device).manual_seed(0))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    # the cap holds the memory the allocator reserves (graph pools, fragmentation), which its
    # peaks allocated do not count: the half may fail too and a quarter go on
    assert recovering.rows is not None and recovering.rows <= rows // 2, (
        f"peaks {half:,} and {full:,} B, capped at {cap:,}"
    )
    assert [len(g.completions) for g in groups] == [params.n] * len(prompts)
