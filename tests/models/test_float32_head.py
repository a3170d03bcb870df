"""model.lm_head_fp32 (TRL's cast_lm_head_to_fp32): the output layer of a bfloat16 model computes
its product in float32 wherever it runs (the model's forward, the rollout's decoding step, the
update's chunked log-probs), from its weight in the model's dtype, tied or not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tasks.refcoco import RefCOCO
from vlrl.config import ConfigError, ModelConfig
from vlrl.data.records import load_split
from vlrl.models.batch import collate
from vlrl.models.build import TinySpec
from vlrl.models.float32_head import Float32Head, float32_head
from vlrl.models.loading import core_model, frame_spec, load_model, load_processor
from vlrl.models.policy import TokenScorer, completion_logprobs
from vlrl.models.prompting import render_prompt
from vlrl.models.tiny import write_tiny_checkpoint
from vlrl.rollout import SamplingParams
from vlrl.rollout.base import completion_rows
from vlrl.rollout.hf import HFEngine, HFOptions


def _bfloat16_head(seed: int) -> tuple[torch.nn.Linear, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(64, 1000, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 4)  # logits of some tens: bfloat16 rounds them coarsely
    hidden = torch.randn(300, 64, generator=generator).to(torch.bfloat16).requires_grad_()
    return head, hidden, torch.randint(0, 1000, (300,), generator=generator)


def test_a_float32_heads_chunked_log_probs_have_autograds_values_and_gradients_through_its_float32_product():
    head, hidden, ids = _bfloat16_head(0)
    plain = TokenScorer(0.7, False, None, chunk_tokens=512).of_hidden(head, hidden, ids)[:, 0]
    scaled = F.linear(hidden.float(), head.weight.float(), head.bias.float()) / 0.7
    want = scaled.gather(-1, ids[:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    params = (hidden, head.weight, head.bias)
    want_grads = torch.autograd.grad(want.sum(), params)
    head.__class__ = Float32Head
    for chunk in (512, 64):  # one chunk: to the bit; several: the weight's gradient summed in another order
        got = TokenScorer(0.7, False, None, chunk_tokens=chunk).of_hidden(head, hidden, ids)[:, 0]
        grads = torch.autograd.grad(got.sum(), params)
        assert torch.equal(got, want.detach())
        for grad, expected in zip(grads, want_grads, strict=True):
            assert grad.dtype == torch.bfloat16
            if chunk == 512:
                assert torch.equal(grad, expected)
            else:
                torch.testing.assert_close(grad, expected, rtol=1e-2, atol=1e-2)
    assert (plain.detach() - want.detach()).abs().max() > 1e-2  # the bfloat16 product's log-probs are not these


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def bfloat16_checkpoint(request, tmp_path_factory):
    spec = TinySpec(dtype="bfloat16", tie_embeddings=request.param, seed=3)
    return write_tiny_checkpoint(tmp_path_factory.mktemp("bf16") / "model", spec), request.param


def test_model_lm_head_fp32_makes_the_forwards_logits_float32_products_of_its_own_weight(bfloat16_checkpoint):
    path, tied = bfloat16_checkpoint
    model = load_model(ModelConfig(path=str(path), dtype="bfloat16", lm_head_fp32=True)).eval()
    plain = load_model(ModelConfig(path=str(path), dtype="bfloat16")).eval()
    core = core_model(model)
    head = core.get_output_embeddings()
    assert type(head) is Float32Head and head.weight.dtype == torch.bfloat16
    assert (head.weight is core.get_input_embeddings().weight) == tied
    ids = torch.arange(3, 40)[None]
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        assert out.logits.dtype == torch.float32
        assert torch.equal(out.logits, F.linear(out.hidden_states[-1].float(), head.weight.float()))
        assert torch.equal(out.hidden_states[-1], plain(input_ids=ids, output_hidden_states=True).hidden_states[-1])
        assert not torch.equal(out.logits, plain(input_ids=ids).logits.float())
    assert model.state_dict().keys() == plain.state_dict().keys()  # checkpoints name the weights as ever


@pytest.mark.parametrize(("lean", "static_cache"), [(True, False), (False, False), (True, True)])
def test_the_rollout_samples_what_the_updates_float32_head_scores(bfloat16_checkpoint, rec_data, lean, static_cache):
    """The HF engine decodes through the float32 head (its dynamic loop and its static step);
    the update's log-probs of its tokens (chunked, through the lean step or the model's forward)
    are the engine's, and so are the full float32 logits'."""
    path, _ = bfloat16_checkpoint
    cfg = ModelConfig(path=str(path), dtype="bfloat16", lm_head_fp32=True, min_pixels=3136, max_pixels=50176)
    model, processor = load_model(cfg).eval(), load_processor(cfg)
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, frame_spec(cfg)).samples[:2]
    prompts = [render_prompt(processor, task.messages(s), s, cfg) for s in samples]
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=static_cache))
    assert (engine._plan()[0] is not None) == static_cache
    drawn_from: list[torch.dtype] = []  # the logits each decoding step's output layer gave
    core_model(model).get_output_embeddings().register_forward_hook(lambda m, a, out: drawn_from.append(out.dtype))
    params = SamplingParams(n=2, max_new_tokens=8, temperature=0.7)
    r = completion_rows(engine.generate(prompts, params, torch.Generator().manual_seed(0)), engine.pad_id)
    assert drawn_from and set(drawn_from) == {torch.float32}
    with torch.no_grad():
        batch = collate(prompts, engine.pad_id)
        chunked = completion_logprobs(model, batch, r.rows, r.ids, r.mask, temperature=0.7, lean=lean).logp
        full = completion_logprobs(model, batch, r.rows, r.ids, r.mask, temperature=0.7, chunk_tokens=0, lean=lean).logp
    assert torch.equal(chunked * r.mask, full * r.mask)
    # to bfloat16's differences between decoding a token at a time and the update's forward of
    # whole completions (the hidden states', as without the option)
    torch.testing.assert_close(chunked * r.mask, r.logprobs * r.mask, rtol=0, atol=2e-3)


def test_under_fsdp2_the_head_unit_computes_in_float32_what_the_unsharded_model_computes(bfloat16_checkpoint, rec_data):
    """FSDP2 keeps float32 weights and gathers them in bfloat16 for the forward (its
    MixedPrecisionPolicy): the head's product then upcasts them, as the unsharded model's does,
    in the model's forward and in the update's chunked log-probs, and its gradient arrives."""
    import torch.distributed as dist

    from vlrl.config import TrainerConfig
    from vlrl.parallel.distributed import Processes
    from vlrl.parallel.fsdp2 import FSDP2, FSDPOptions

    path, _ = bfloat16_checkpoint
    cfg = ModelConfig(path=str(path), dtype="bfloat16", lm_head_fp32=True, min_pixels=3136, max_pixels=50176)
    unsharded, processor = load_model(cfg).eval(), load_processor(cfg)
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, frame_spec(cfg)).samples[:2]
    batch = collate(
        [render_prompt(processor, task.messages(s), s, cfg) for s in samples], processor.tokenizer.pad_token_id
    )
    rows, ids, mask = (
        torch.tensor([0, 1, 1]),
        torch.randint(3, 300, (3, 6), generator=torch.Generator().manual_seed(0)),
        torch.ones(3, 6),
    )
    with torch.no_grad():
        want = completion_logprobs(unsharded, batch, rows, ids, mask, temperature=0.7).logp
        want_logits = unsharded(input_ids=ids).logits
    try:
        model = FSDP2(Processes.from_env(), TrainerConfig(), FSDPOptions()).wrap(load_model(cfg).eval())
        head = core_model(model).get_output_embeddings()
        assert isinstance(head, Float32Head) and head.weight.dtype == torch.float32  # the optimizer's float32 weights
        assert torch.equal(model(input_ids=ids).logits.detach(), want_logits)
        got = completion_logprobs(model, batch, rows, ids, mask, temperature=0.7).logp
        assert torch.equal(got.detach(), want)
        got.sum().backward()
        assert head.weight.grad is not None and head.weight.grad.dtype == torch.float32
    finally:
        dist.destroy_process_group()


def test_an_output_layer_that_is_not_a_linear_is_refused_by_name():
    class Model(torch.nn.Module):
        def get_output_embeddings(self):
            return torch.nn.Embedding(4, 2)

    with pytest.raises(ConfigError, match="model.lm_head_fp32 needs the output layer to be a torch.nn.Linear"):
        float32_head(Model())
