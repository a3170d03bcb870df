"""trainer.gradient_checkpointing: layers recompute their activations in backward, and the
shared-prefix forward (prompt into a KV cache, completions on top) keeps its loss and gradients."""

from __future__ import annotations

import json

import pytest
import torch

from tasks.refcoco import RefCOCO
from tests.models.test_policy import six_completions
from tests.trainer.test_train import tiny_overrides
from vlrl.config import ModelConfig, load_config
from vlrl.data.records import FrameSpec, load_split
from vlrl.models.batch import collate
from vlrl.models.loading import load_model, load_processor
from vlrl.models.policy import completion_logprobs
from vlrl.models.prompting import render_prompt
from vlrl.parallel import recompute
from vlrl.parallel.recompute import checkpoint_layers
from vlrl.trainer.rl import train

LAYERS = ("Qwen2_5_VLDecoderLayer", "Qwen2_5_VLVisionBlock")


def counted_layer_forwards(model: torch.nn.Module) -> list[str]:
    """Every call of a layer's forward, also the recomputations (which bypass module hooks)."""
    calls: list[str] = []
    for module in model.modules():
        name = type(module).__name__
        if name in LAYERS:
            forward = module.forward
            module.forward = lambda *a, _f=forward, _n=name, **k: (calls.append(_n), _f(*a, **k))[1]
    return calls


def test_recomputed_layers_give_the_same_loss_and_gradients_through_the_kv_cache(rec_data, tiny_qwen25):
    cfg = ModelConfig(path=str(tiny_qwen25), dtype="float32", min_pixels=3136, max_pixels=50176)
    processor = load_processor(cfg)
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, FrameSpec("absolute", 3136, 50176)).samples
    prompts = collate(
        [render_prompt(processor, task.messages(s), s, cfg) for s in samples[:3]], processor.tokenizer.pad_token_id
    )
    rows, ids, mask, weights = six_completions(0, {1: 4})

    def step(checkpointed: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[str], int]:
        model = load_model(cfg).eval()  # eval: transformers' own checkpointing would not even start
        calls = counted_layer_forwards(model)
        if checkpointed:
            assert checkpoint_layers(model) == 4  # two decoder layers, two vision blocks
        loss = (completion_logprobs(model, prompts, rows, ids, mask)[0] * weights).sum()
        forwards = len(calls)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, calls, forwards

    plain_loss, plain_grads, plain_calls, _ = step(False)
    loss, grads, calls, forwards = step(True)
    # Each decoder layer runs twice (prompt, completions), each vision block once; the backward
    # pass runs them all again.
    assert forwards == 6 and len(plain_calls) == 6 and sorted(calls[forwards:]) == sorted(calls[:forwards])
    assert loss == plain_loss
    assert grads.keys() == plain_grads.keys() and any("visual" in n for n in grads)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=0, atol=0, msg=name)


def test_an_in_place_cache_is_refused():
    class InPlaceLayer:
        pass

    class Cache:
        layers = [InPlaceLayer()]

    with pytest.raises(RuntimeError, match="InPlaceLayer is updated in place"):
        recompute._cache_state(Cache())


def test_the_trainer_option_recomputes_and_changes_no_number(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    replays = []
    original = recompute.checkpoint
    monkeypatch.setattr(recompute, "checkpoint", lambda fn, *a, **k: replays.append(1) or original(fn, *a, **k))
    rows, checkpointed = {}, {}
    for option in (False, True):
        run_dir = tmp_path / str(option)
        train(
            load_config(
                None,
                tiny_overrides(run_dir, rec_data, **{"trainer.steps": 2, "trainer.gradient_checkpointing": option}),
            )
        )
        rows[option] = [
            {k: v for k, v in json.loads(line).items() if not k.startswith("time")}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        ]
        checkpointed[option], replays[:] = len(replays), []
    assert checkpointed[False] == 0 and checkpointed[True] > 0
    assert rows[True] == rows[False] and rows[True][-1]["grad_norm"] > 0
