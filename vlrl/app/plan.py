"""Memory on paper (`vlrl plan`): what one GPU holds for a run, per parallelism strategy.

Everything comes from the model's config (a local checkpoint's config.json, or a shape of
vlrl.models.tiny.SHAPES) instantiated on PyTorch's meta device (no memory, no weights) and the run's
config. A step has three phases, and the peak is the largest:

- rollout: the resting state (weights, fp32 master weights, AdamW's two moments, the KL
  reference) plus the rollout engine (the HF engine's KV cache for this GPU's rows, and
  Qwen3.5's linear-attention states, with the policy's full weights gathered under FSDP2;
  vLLM's gpu_memory_utilization share, which it refuses to start in when its weights and one
  sequence's cache do not fit: `engine_refusal`);
- update: the resting state plus gradients, one micro-batch's activations at
  `token_budget` (with or without gradient checkpointing; with an engine whose log-probs are
  of its filtered draw, vLLM's, the copies of a chunk's logits that scoring the draw makes)
  and, under FSDP2, the units gathered around the one being computed;
- optimizer step: the resting state plus fp32 gradients (AdamW steps with its fused kernel,
  in place: nothing of the parameters' size besides; its foreach kernels, before, held about
  one fp32 copy of what they stepped).

Each registered strategy says what it holds (`Strategy.memory`, for each of its
`plan_variants`) and the engine what it does (`RolloutEngine.memory`); the model's shape, the
workload and the activations are vlrl/models/memory.py's. bench/plan_vs_measured.py compares
the terms with what the processes hold on CPU, tests/gpu/ the peaks with a GPU's.
"""

from __future__ import annotations

from typing import Any

from vlrl import plugins
from vlrl.models.memory import ModelShape, StrategyMemory, Workload, budget_activations
from vlrl.rollout import EngineChoice


def memory(
    shape: ModelShape, work: Workload, held: StrategyMemory, engine: EngineChoice, checkpointing: bool
) -> dict[str, float]:
    """Bytes on one GPU by term, and each phase's total (`peak` the largest)."""
    sampling, during_update = engine.cls.memory(shape, work, engine.options)
    if engine.cls.shares_policy:
        sampling += held.sampling_weights
        draw = 0
    else:  # its log-probs are of its draw: the update scores each token under it too
        draw = work.draw.entry_bytes(getattr(engine.cls, "min_p_first", False))
    base = held.resting
    terms = {
        "weights": held.weights,
        "master weights": held.master_weights,
        "optimizer": held.optimizer,
        "reference": held.reference,
        "gradients": max(held.gradients_update, held.gradients_step),
        "gathered units": held.gathered,
        "activations": budget_activations(shape, work, checkpointing, draw),
        "rollout engine": sampling,
    }
    phases = {
        "rollout": base + sampling,
        "update": base + held.gradients_update + held.gathered + terms["activations"] + during_update,
        "optimizer step": base + held.gradients_step + during_update,
    }
    terms.update(phases)
    terms["peak"] = max(phases.values())
    if held.cpu_memory:
        terms["cpu memory"] = held.cpu_memory
    return terms


def variants() -> list[tuple[str, Any, Any]]:
    """(label, strategy class, its options) of every registered strategy's plan variants."""
    out = []
    for name in plugins.registered(plugins.STRATEGIES):
        cls = plugins.find_class(plugins.STRATEGIES, name, "trainer.parallel")
        out += [(label, cls, options) for label, options in cls.plan_variants().items()]
    return out


def plans(shape: ModelShape, work: Workload, engine: EngineChoice) -> list[tuple[str, bool, dict[str, float]]]:
    return [
        (label, ckpt, memory(shape, work, cls.memory(shape, work, options), engine, ckpt))
        for label, cls, options in variants()
        for ckpt in (False, True)
    ]


def engine_refusal(shape: ModelShape, work: Workload, engine: EngineChoice) -> str:
    """Why the rollout engine could not start on a GPU at all, whatever the strategy ("": it
    could); an engine says so with its optional `memory_refusal` (vLLM: a share too small for
    its weights and one sequence's cache)."""
    refusal = getattr(engine.cls, "memory_refusal", None)
    return refusal(shape, work, engine.options) if refusal else ""


def fits(terms: dict[str, float], work: Workload) -> bool:
    """Within 95% of the card: the allocator's fragmentation and the CUDA context take the rest."""
    return terms["peak"] <= 0.95 * work.gpu_memory
