"""The lean decoding step (models/decode_step.py) is the model's own forward at one token per row,
bit for bit: logits and cache, with and without padded rows, in float32 and bfloat16, for every
family, through LoRA adapters merged or not; the settings it cannot stand in for are refused
with the reason."""

from __future__ import annotations

import contextlib
import copy
from unittest import mock

import pytest
import torch

from tests.families import decoder_families
from tests.models.test_policy import family_setup, six_completions, taken_grads
from vlrl.models.base import ModelFamily
from vlrl.models.batch import collate
from vlrl.models.decode_step import DecodeStep, ModelStep, decode_step_refusal, lean_forward
from vlrl.models.families import family_of_model
from vlrl.models.loading import core_model
from vlrl.models.lora import MergedLoRA
from vlrl.models.policy import SamplingFilter, completion_logprobs, prefill
from vlrl.rollout import SamplingParams
from vlrl.rollout.hf import HFEngine, HFOptions

STEPS = 3


@pytest.fixture(scope="module", params=decoder_families())
def setup(request, rec_data, video_qa_data):
    return family_setup(request.param, rec_data, video_qa_data)


def decode_both(model, prompts, pad_id: int, generator: torch.Generator, jump: int = 0):
    """`STEPS` decoding steps of random tokens after the prompts, through the model's forward and
    through DecodeStep, each on its own prefill of the same batch: their logits per step, caches.
    `jump` moves the positions of every step after the first that far on."""
    device = next(model.parameters()).device
    batch = collate(prompts, pad_id).to(device)
    family = family_of_model(model)
    forwards = {"model": ModelStep(model), "step": DecodeStep(model)}
    tokens = torch.randint(0, 500, (len(prompts), STEPS), generator=generator).to(device)
    logits = {"model": [], "step": []}
    caches = {}
    with torch.no_grad():
        for path in logits:
            prefix = prefill(model, batch)
            mask = batch.attention_mask
            for t in range(STEPS):
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                positions = family.decode_positions(prefix.next_position + (jump if t else 0), t, 1)
                logits[path].append(forwards[path](tokens[:, t : t + 1], mask, positions, prefix.cache))
            caches[path] = prefix.cache
    return logits, caches


def assert_bitwise(logits, caches) -> None:
    for t, (want, got) in enumerate(zip(logits["model"], logits["step"], strict=True)):
        assert torch.equal(got, want), f"step {t}: logits differ by up to {(got - want).abs().max().item()}"
    for i, (want, got) in enumerate(zip(caches["model"].layers, caches["step"].layers, strict=True)):
        for name, (a, b) in enumerate(zip(cached(want), cached(got), strict=True)):
            assert torch.equal(b, a), f"layer {i}'s cached tensor {name} differs"


def cached(layer) -> list[torch.Tensor]:
    """What a cache layer holds: keys and values, or linear attention's states (Qwen3.5)."""
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    if isinstance(layer, LinearAttentionCacheLayerMixin):
        return [*layer.conv_states.values(), *layer.recurrent_states.values()]
    return [layer.keys, layer.values]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padded", [True, False], ids=["padded rows", "no padding"])
def test_the_decode_step_is_the_models_forward_bit_for_bit(setup, dtype, padded):
    model, processor, prompts = setup
    assert decode_step_refusal(model) == ""  # every family
    model = copy.deepcopy(model).to(dtype)
    # padded: two images and a video prompt of different lengths; else one image prompt twice
    chosen = prompts if padded else [prompts[0], prompts[0]]
    assert bool((collate(chosen, processor.tokenizer.pad_token_id).attention_mask == 0).any()) == padded
    logits, caches = decode_both(model, chosen, processor.tokenizer.pad_token_id, torch.Generator().manual_seed(0))
    assert logits["model"][0].dtype == dtype
    assert_bitwise(logits, caches)


def test_several_tokens_a_row_with_padding_among_them_are_the_models_forward_bit_for_bit(setup):
    """The lean step over several tokens per row (the update's forwards: `hidden`) where some of
    them are padding, trailing in one row and a hole in another: the logits at every position,
    the padding's too, and the cache equal the model's forward's. Qwen3.5's linear attention
    keeps the padding out of its recurrent state (transformers zeroes its input there), which
    the update's log-probs of kept tokens after right padding cannot show."""
    model, processor, prompts = setup
    batch = collate(prompts, processor.tokenizer.pad_token_id)
    rows, width = len(prompts), 4
    tokens = torch.randint(0, 500, (rows, width), generator=torch.Generator().manual_seed(4))
    new = torch.ones(rows, width, dtype=batch.attention_mask.dtype)
    new[0, 2:], new[1, 1] = 0, 0
    mask = torch.cat([batch.attention_mask, new], dim=1)
    step, logits, caches = DecodeStep(model), {}, {}
    with torch.no_grad():
        for path in ("model", "step"):
            prefix = prefill(model, batch)
            positions = family_of_model(model).decode_positions(prefix.next_position, 0, width)
            if path == "model":
                logits[path] = model(
                    input_ids=tokens, attention_mask=mask, position_ids=positions, past_key_values=prefix.cache,
                    use_cache=True,
                ).logits  # fmt: skip
            else:
                logits[path] = step.head(step.hidden(tokens, mask, positions, prefix.cache))
            caches[path] = prefix.cache
    assert_bitwise({path: [value] for path, value in logits.items()}, caches)


def test_the_engine_decodes_with_weights_stepped_in_place_or_replaced_since_its_last_rollout(rec_data, video_qa_data):
    """The lean step looks each layer's weights up once a rollout, not at every call: the
    optimizer steps them in place, and a weight replaced (a new tensor) counts from the next
    rollout, with no sleep between. Each time the engine samples what a new engine samples."""
    model, processor, prompts = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    model = copy.deepcopy(model)
    engine = HFEngine(model, processor.tokenizer)
    assert isinstance(engine.decode_forward, DecodeStep)
    params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0)

    def sampled(engine: HFEngine) -> list[tuple[list[int], list[float]]]:
        groups = engine.generate(prompts, params, torch.Generator().manual_seed(0))
        return [(c.token_ids, c.logprobs) for g in groups for c in g.completions]

    def moved(weight: torch.Tensor, seed: int) -> torch.Tensor:
        return torch.randn(weight.shape, generator=torch.Generator().manual_seed(seed)) * 0.05

    before = sampled(engine)
    with torch.no_grad():  # as an optimizer steps: in place
        for i, parameter in enumerate(model.parameters()):
            parameter.add_(moved(parameter, i))
    stepped = sampled(engine)
    assert stepped != before and stepped == sampled(HFEngine(model, processor.tokenizer))
    for i, layer in enumerate(model.model.language_model.layers):  # new tensors, as a load with assign=True
        mlp = layer.mlp
        mlp.down_proj.weight = torch.nn.Parameter(mlp.down_proj.weight + moved(mlp.down_proj.weight, 100 + i))
    replaced = sampled(engine)
    assert replaced != stepped and replaced == sampled(HFEngine(model, processor.tokenizer))


def test_a_decode_step_computes_a_plain_linear_directly_and_anything_else_as_a_module():
    """A plain Linear is F.linear of its own parameters (no module call); with a hook, or of
    another class (a LoRA layer), the module is called."""
    from vlrl.models.decode_step import bound

    plain, hooked, other = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3), torch.nn.Bilinear(4, 4, 3)
    hooked.register_forward_hook(lambda module, args, out: 2 * out)
    assert bound(hooked) is hooked and bound(other) is other
    direct = bound(plain)
    assert direct is not plain
    x = torch.randn(2, 4)
    with torch.no_grad():
        plain.weight.add_(1.0)  # stepped in place after the look-up
    assert torch.equal(direct(x), plain(x))


def test_the_decode_steps_rope_tables_grow_to_positions_past_their_end(setup):
    """The first step makes tables of 256 positions; the next ones are past 1,000."""
    model, processor, prompts = setup
    logits, caches = decode_both(
        model, prompts, processor.tokenizer.pad_token_id, torch.Generator().manual_seed(2), 1000
    )
    assert_bitwise(logits, caches)


def test_the_decode_steps_rope_tables_double_as_they_grow_and_follow_the_compute_dtype(rec_data, video_qa_data):
    model, _, _ = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    step = DecodeStep(model)
    sizes = []
    for top in (10, 255, 256, 300, 600, 5000):  # doubled when passed, or to the position if that is further
        step.rope(torch.tensor([0, top]), torch.float32)
        sizes.append(len(step.cos))
    assert sizes == [256, 256, 512, 512, 1024, 5001]
    positions = torch.tensor([3, 700])
    cos, sin = step.rope(positions, torch.float32)
    half_cos, half_sin = step.rope(positions, torch.bfloat16)  # the model cast since: tables in its dtype
    assert half_cos.dtype == half_sin.dtype == torch.bfloat16
    assert torch.equal(half_cos, cos.to(torch.bfloat16)) and torch.equal(half_sin, sin.to(torch.bfloat16))


def test_the_decode_step_runs_the_hooks_of_a_linear_layer(rec_data, video_qa_data):
    model, processor, prompts = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    generator = torch.Generator().manual_seed(3)
    plain, _ = decode_both(model, prompts, processor.tokenizer.pad_token_id, generator)
    q_proj = model.model.language_model.layers[0].self_attn.q_proj
    q_proj.register_forward_hook(lambda module, args, out: 2 * out)
    logits, caches = decode_both(model, prompts, processor.tokenizer.pad_token_id, generator.manual_seed(3))
    assert not torch.equal(plain["model"][0], logits["model"][0])  # the hook counts
    assert_bitwise(logits, caches)


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_5"])
@pytest.mark.parametrize("merged", [False, True], ids=["adapters unmerged", "adapters merged"])
def test_the_decode_step_computes_through_lora_adapters(rec_data, tiny_qwen25, merged, arch):
    """Qwen3.5's too, whose attention's query projection, adapted, also gives the gate."""
    from tests.models.test_lora import adapted_model

    model, processor, prompts = adapted_model(rec_data, "float32", arch)
    assert decode_step_refusal(model) == ""
    lora = MergedLoRA(model)
    with lora.merged() if merged else contextlib.nullcontext():
        logits, caches = decode_both(model, prompts, processor.tokenizer.pad_token_id, torch.Generator().manual_seed(1))
    assert_bitwise(logits, caches)
    with model.disable_adapter():  # the adapters count: without them the logits differ
        base, _ = decode_both(model, prompts, processor.tokenizer.pad_token_id, torch.Generator().manual_seed(1))
    assert not torch.equal(base["model"][0], logits["step"][0])


def test_what_the_decode_step_cannot_stand_in_for_is_refused(setup, monkeypatch):
    model, processor, _ = setup
    assert isinstance(HFEngine(model, processor.tokenizer).decode_forward, DecodeStep)  # the CPU default
    off = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=True, lean_step=False))
    assert isinstance(off.decode_forward, ModelStep) and not off.static_plan.lean
    static = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=True, lean_step=True))
    assert static.static_plan.lean and not static.note  # the static step's too (static.LeanStaticStep)
    monkeypatch.setattr(model.config, "_attn_implementation", "eager")
    asked = HFEngine(model, processor.tokenizer, options=HFOptions(lean_step=True))  # refused, and said so
    assert isinstance(asked.decode_forward, ModelStep) and "'eager'" in asked.note
    monkeypatch.undo()
    text = model.config.get_text_config()
    monkeypatch.setitem(text.rope_parameters, "rope_type", "yarn")  # its tables depend on the length
    assert "'yarn'" in decode_step_refusal(model)
    monkeypatch.undo()
    monkeypatch.setattr(text, "attention_dropout", 0.1)
    assert "dropout" in decode_step_refusal(model)
    monkeypatch.undo()
    own = type(family_of_model(model))
    monkeypatch.setattr(own, "decode_positions", lambda self, *a: ModelFamily.decode_positions(self, *a))
    assert "decoding positions are its own" in decode_step_refusal(model)


def test_under_fsdp2_the_engine_decodes_with_the_models_forward(tmp_path, tiny_qwen25):
    """FSDP2's units gather their weights in their own forwards, which the lean step does not
    call: outside them the weights are shards (DTensors), so the engine calls the model."""
    from torch.distributed.tensor import DTensor

    from tests.models.test_loading import sharded_in_one_process
    from vlrl.config import ModelConfig
    from vlrl.models.loading import load_model, load_processor

    cfg = ModelConfig(path=str(tiny_qwen25), dtype="float32")
    model, processor = load_model(cfg), load_processor(cfg)
    with sharded_in_one_process(model, tmp_path / "store"):
        assert isinstance(model.model.language_model.layers[0].self_attn.q_proj.weight, DTensor)
        assert "FSDP2" in decode_step_refusal(model)
        assert isinstance(HFEngine(model, processor.tokenizer).decode_forward, ModelStep)


def through_both(model, prompts, pad_id: int, rows, ids, mask, weights) -> tuple[dict, dict]:
    """The update's forward of completion tokens (log-prob, entropy and the sampling
    distribution's log-prob columns) through the model's forward and through the lean step, and
    the gradients of the `weights`-weighted log-probs' sum (None: no backward): each by path.
    On the model's device. Each path is checked to be the one it is named after: the lean one
    through `DecodeStep.hidden` (once, over several tokens per row), the other never."""
    device = next(model.parameters()).device
    batch = collate(prompts, pad_id).to(device)
    rows, ids, mask = rows.to(device), ids.to(device), mask.to(device)
    weights = None if weights is None else weights.to(device)
    vocab = core_model(model).config.get_text_config().vocab_size
    sampler = SamplingFilter(torch.arange(vocab, device=device) >= vocab - 7, top_k=20)
    columns, grads = {}, {}
    for lean in (False, True):
        model.zero_grad()
        with mock.patch.object(DecodeStep, "hidden", autospec=True, side_effect=DecodeStep.hidden) as hidden:
            scored = completion_logprobs(
                model, batch, rows, ids, mask, 0.7, True, sampler, lean=lean, with_sum_pi_squared=True
            )
        assert [call.args[1].shape for call in hidden.call_args_list] == ([ids.shape] if lean else [])
        if weights is not None:
            (scored.logp * weights).sum().backward()
        columns[lean], grads[lean] = scored, taken_grads(model)
    return columns, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_forward_of_completions_is_the_models_forward_bit_for_bit(setup, dtype):
    """The update's forward (models/policy.py) through the lean step: several tokens per row on
    top of the prompts' shared cache, completions of different lengths after prompts of
    different lengths; its columns equal the model's forward's bit for bit, and its gradients
    (through the prefix and the vision tower) the model's to float rounding: the same kernels,
    but autograd may sum a tensor's gradients in another order (with LoRA it does)."""
    model, processor, prompts = setup
    model = copy.deepcopy(model).to(dtype)
    assert isinstance(lean_forward(model), DecodeStep)
    rows, ids, mask, weights = six_completions(0, {1: 4, 3: 7})
    columns, grads = through_both(model, prompts, processor.tokenizer.pad_token_id, rows, ids, mask, weights)
    for name, want in columns[False]._asdict().items():
        got = getattr(columns[True], name)
        assert torch.equal(got, want), f"{name}: apart by up to {(got - want).abs().max().item()}"
    assert grads[True].keys() == grads[False].keys() and any("visual" in n for n in grads[False])
    assert_same_gradients(grads[True], grads[False])


def assert_same_gradients(got: dict, want: dict, rounding: float = 1e-6) -> None:
    """Equal but for `rounding` relative to each gradient's largest entry (on the CPU even
    bfloat16's agree to float32's rounding)."""
    assert got.keys() == want.keys()
    for name, expected in want.items():
        scale = float(expected.abs().max())
        torch.testing.assert_close(got[name], expected, rtol=0, atol=rounding * scale + 1e-12, msg=name)


def test_the_lean_forward_of_completions_computes_through_lora_adapters(rec_data, tiny_qwen25):
    """Through the adapters (their gradients, to rounding, too), and without them as the KL
    reference of a LoRA policy is computed (the adapters disabled): the model's forward's
    log-probs, bit for bit."""
    from tests.models.test_lora import adapted_model

    model, processor, prompts = adapted_model(rec_data, "float32")
    rows, ids, mask, weights = six_completions(1, {0: 3})
    rows = rows.clamp(max=len(prompts) - 1)
    columns, grads = through_both(model, prompts, processor.tokenizer.pad_token_id, rows, ids, mask, weights)
    assert torch.equal(columns[True].logp, columns[False].logp)
    assert any("lora_B" in name for name in grads[False])
    # summed in another order through the adapters: over twelve adapter draws the largest
    # difference was 2e-7 to 1.1e-6 of a gradient's largest entry (float32's epsilon is 1.2e-7)
    assert_same_gradients(grads[True], grads[False], rounding=4e-6)
    with model.disable_adapter():  # the base weights, which take no gradient
        base, _ = through_both(model, prompts, processor.tokenizer.pad_token_id, rows, ids, mask, None)
    assert torch.equal(base[True].logp, base[False].logp) and not torch.equal(base[True].logp, columns[True].logp)


def test_layers_that_recompute_their_activations_take_the_models_forward_under_autograd(rec_data, video_qa_data):
    """trainer.gradient_checkpointing replaces each decoder layer's forward, which the lean step
    does not call: under autograd the model's forward runs; without gradients (the reference,
    old log-probs) nothing is recomputed, and the lean step runs."""
    from vlrl.parallel.recompute import checkpoint_layers

    model, _, _ = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    model = copy.deepcopy(model)
    assert isinstance(lean_forward(model), DecodeStep)
    checkpoint_layers(model)
    assert lean_forward(model) is None
    with torch.no_grad():
        assert isinstance(lean_forward(model), DecodeStep)
