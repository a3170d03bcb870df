"""`vlrl plan`: parameter counts from the config alone, memory terms by hand, the table."""

from __future__ import annotations

import itertools

import pytest
import torch

from tasks.refcoco import RefCOCO
from tests.live_bytes import LiveBytes
from tests.rollout.test_hf_engine import STATIC
from vlrl.app.plan import memory
from vlrl.cli import main
from vlrl.config import load_config
from vlrl.data.records import load_split
from vlrl.models.loading import frame_spec, load_model, load_processor
from vlrl.models.lora import lora_linears
from vlrl.models.memory import Block, DrawFilter, ModelShape, Workload, activation_bytes, model_shape
from vlrl.models.policy import CHUNK_TOKENS, SamplingFilter, TokenScorer
from vlrl.models.prompting import render_prompt
from vlrl.parallel.fsdp2 import FSDP2, FSDPOptions
from vlrl.parallel.replicated import Replicated
from vlrl.rollout import SamplingParams, choose_engine
from vlrl.rollout.hf import HFEngine
from vlrl.rollout.static import RowsLayer, RowsStateLayer


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe"])
def test_counts_from_the_config_equal_the_loaded_models(family):
    for lora in (4, 0):  # the last, without adapters, is read below
        cfg = load_config(None, [f"model.path=tiny:{family}", f"model.lora.r={lora}", "model.dtype=float32"])
        shape = model_shape(cfg)
        model = load_model(cfg.model)
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
        assert shape.trainable == trained
        assert shape.params == (frozen if lora else trained)  # LoRA: the base's weights are frozen
        adapted = sum(m.get_base_layer().weight.numel() for m in lora_linears(model)) if lora else 0
        assert shape.adapted == adapted and (adapted > 0) == bool(lora)  # what merge_lora copies
    # the widths the activations are counted in: the tiny builds' hidden sizes (Qwen3's layers
    # hold QK-norms of head size 32 before their hidden-size norms)
    assert shape.layers == Block(count=2, params=shape.layers.params, hidden=64)
    assert shape.vision == Block(count=2, params=shape.vision.params, hidden=32)
    # a decoder layer's parameters, which its activations are counted from: their mean over the
    # layers (Qwen3.5's first layer, linear attention, holds twice its second's, which attends),
    # the routed experts' left out (`memory.experts_token_bytes` counts what they keep)
    layers = [
        sum(p.numel() for p in layer.parameters())
        - sum(p.numel() for p in getattr(layer.mlp, "experts", torch.nn.Module()).parameters())
        for layer in model.model.language_model.layers
    ]
    assert abs(shape.layers.params * len(layers) - sum(layers)) < len(layers)
    if family == "qwen2_5_vl":
        assert shape.vocab == 640 and shape.kv_width == 2 * 2 * 16  # two kv heads of 16


@pytest.mark.parametrize("family", ["qwen3_vl_moe", "qwen3_5_moe"])
def test_the_plan_counts_the_adapters_on_a_mixtures_fused_experts(family):
    experts = "model.lora.target_parameters=[mlp.experts.gate_up_proj,mlp.experts.down_proj]"
    cfg = load_config(None, [f"model.path=tiny:{family}", "model.lora.r=4", "model.dtype=float32", experts])
    model = load_model(cfg.model)
    without = model_shape(load_config(None, [f"model.path=tiny:{family}", "model.lora.r=4", "model.dtype=float32"]))
    assert model_shape(cfg).trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert model_shape(cfg).trainable > without.trainable


def one_layer(kind: str, dtype: torch.dtype) -> tuple[torch.nn.Module, object]:
    """One decoder layer 256 wide with its text config: Qwen3.5's linear attention (8 value heads
    of 32), or Qwen3-VL MoE's experts (32 of 96, 4 routed, through grouped_mm)."""
    if kind == "linear_attention":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer as Layer

        config = Qwen3_5TextConfig(
            hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=768,
            linear_num_key_heads=4, linear_key_head_dim=32, linear_num_value_heads=8, linear_value_head_dim=32,
            num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=100,
        )  # fmt: skip
    else:
        from transformers.models.qwen3_vl_moe.configuration_qwen3_vl_moe import Qwen3VLMoeTextConfig
        from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextDecoderLayer as Layer

        config = Qwen3VLMoeTextConfig(
            hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=768,
            num_experts=32, num_experts_per_tok=4, moe_intermediate_size=96, num_hidden_layers=1, vocab_size=100,
        )  # fmt: skip
        config._experts_implementation = "grouped_mm"
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Layer(config, 0).to(dtype), config


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("kind", ["linear_attention", "experts"])
def test_a_layer_of_linear_attention_or_experts_is_counted_by_what_autograd_keeps_of_it(kind, dtype):
    """What one such layer keeps per token for its backward pass (parameters aside, 256 tokens):
    within 10% of a block of its dense parameters plus its kind's (`layer_extra_bytes`), where a
    block of all its parameters was 2.5 times short (linear attention) or twice over (experts)."""
    from vlrl.models.memory import layer_extra_bytes

    layer, config = one_layer(kind, dtype)
    tokens, b = 256, torch.finfo(dtype).bits // 8
    x = torch.randn(1, tokens, 256, dtype=dtype, requires_grad=True)
    cos = sin = torch.ones(1, tokens, 16 if kind == "linear_attention" else 64, dtype=dtype)
    skip = {p.untyped_storage().data_ptr() for p in [*layer.parameters(), cos, sin]}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x, position_embeddings=(cos, sin), attention_mask=None)
    measured = sum(kept.values()) / tokens
    experts = sum(p.numel() for p in layer.mlp.experts.parameters()) if kind == "experts" else 0
    dense = sum(p.numel() for p in layer.parameters()) - experts
    estimate = Block(1, dense, 256).token_bytes(b) + layer_extra_bytes(layer, config, b)
    assert abs(estimate - measured) <= 0.1 * measured, (estimate, measured)


def test_a_shape_is_counted_without_its_tokenizer():
    cfg = load_config("configs/refcoco.yaml", [])
    shape = model_shape(cfg, "qwen2.5-vl-3b")
    assert shape.params == 3_754_622_976  # as tests/models/test_tiny.py counts the real checkpoint
    # the vision tower (about 0.67B) is the root unit; the tied embeddings, counted once, the largest other
    assert 0.66e9 < shape.root_unit < 0.67e9 and shape.largest_unit == 151_936 * 2048
    # a token's keys and values: 36 layers x (2 key and 2 value heads of 128) in bf16, 4.7 GB at
    # 128 rows x 1,000 slots (what a static decoding step reads per 1,000 slots: rollout/static.py)
    assert shape.kv_token_bytes == 36 * 2 * 2 * 128 * 2 == 36_864


def test_a_qwen3_5_shape_caches_keys_in_its_full_attention_layers_and_a_state_in_the_others():
    shape = model_shape(load_config("configs/refcoco.yaml", []), "qwen3.5-27b")
    # a token: 16 full-attention layers x (4 key and 4 value heads of 256) in bf16
    assert (shape.kv_layers, shape.kv_token_bytes) == (16, 16 * 2 * 4 * 256 * 2)
    # a sequence: 48 gated delta nets, each a 4-wide convolution window over its q, k (16 heads of
    # 128 each) and v (48 heads of 128) channels in bf16, and a float32 recurrent state of 48 x 128 x 128
    assert shape.state_bytes == 48 * ((2 * 16 * 128 + 48 * 128) * 4 * 2 + 48 * 128 * 128 * 4)


SHAPE = ModelShape(
    params=1000,
    trainable=1000,
    upcast=1000,
    dtype_bytes=2,
    trainable_bytes=2,
    layers=Block(count=2, params=300, hidden=10),
    vision=Block(count=1, params=100, hidden=5),
    patches_per_token=4,
    patch_values=12,
    kv_width=8,
    kv_layers=2,
    state_bytes=0,
    layer_extras=(0, 0),
    vocab=50,
    context=1000,
    root_unit=100,
    largest_unit=300,
)
WORK = Workload(
    gpus=4, gpu_memory=10_000, token_budget=20, image_tokens=0, rows=2, max_new_tokens=6, beta=0.1, lora=False
)
HF = choose_engine("hf", {})
VLLM = choose_engine("vllm", {"vllm": {"gpu_memory_utilization": 0.3, "sleep": False}})


def plan(strategy, options, checkpointing=False, engine=HF):
    return memory(SHAPE, WORK, strategy.memory(SHAPE, WORK, options), engine, checkpointing)


def test_terms_by_hand():
    one = plan(Replicated, None)
    # bf16 weights, fp32 masters, two fp32 moments, a bf16 reference; gradients in bf16 during
    # backward, fp32 on the masters for the step
    assert (one["weights"], one["master weights"], one["optimizer"], one["reference"]) == (2000, 4000, 8000, 2000)
    assert one["gradients"] == 4000 and one["gathered units"] == 0
    kv_cache = 2 * (0 + 64 + 6) * 8 * 2 * 2  # rows x (prompt + new tokens) x kv width x layers x 2 bytes
    assert one["rollout engine"] == kv_cache and one["rollout"] == 16000 + kv_cache
    assert one["optimizer step"] == 16000 + 4000  # + fp32 gradients (fused AdamW steps in place)
    sharded = plan(FSDP2, FSDPOptions())
    # the fp32 weights are the masters, sharded four ways with gradients, moments and reference
    assert (sharded["weights"], sharded["master weights"], sharded["optimizer"], sharded["reference"]) == (
        0,
        1000,
        2000,
        500,
    )
    assert sharded["gradients"] == 1000
    assert sharded["gathered units"] == 100 * 2 + 2 * 300 * 2 + 300 * 6
    resting = sharded["rollout"] - sharded["rollout engine"]
    update = resting + sharded["gradients"] + sharded["gathered units"] + sharded["activations"]
    assert sharded["update"] == pytest.approx(update)  # the gathered units are held during the update
    assert sharded["rollout engine"] == kv_cache + 2000  # the policy gathered to sample with it
    offloaded = plan(FSDP2, FSDPOptions(cpu_offload=True))
    # in CPU memory: the fp32 weights with their gradients and moments, and the bf16 reference
    assert offloaded["optimizer"] == offloaded["master weights"] == 0
    assert offloaded["cpu memory"] == 1000 * 16 / 4 + 1000 * 2 / 4
    assert plan(FSDP2, FSDPOptions(), checkpointing=True)["activations"] < sharded["activations"]
    # vLLM holds its share of the card, also during the update when it does not sleep
    awake = plan(FSDP2, FSDPOptions(), engine=VLLM)
    assert awake["rollout engine"] == 3000 and awake["update"] == sharded["update"] + 3000


def test_vllm_is_refused_where_its_share_holds_not_its_weights_and_one_sequence_of_its_context():
    """vLLM loads every weight (2,000 bytes, split over tensor_parallel_size) and starts only if
    its share also holds one sequence of max_model_len tokens, at 32 bytes of keys and values a
    token: with 0 the model's 1,000 (34,000 bytes, 0.34 of a 100,000-byte card); with -1
    (auto-fit, the default) whatever it holds, which must still hold this plan's prompt (64
    text tokens) and completion (6): 2,000 + 70 x 32 bytes."""
    from dataclasses import replace

    from vlrl.rollout.vllm import VLLMEngine, VLLMOptions

    work = replace(WORK, gpu_memory=100_000)

    def refusal(shape=SHAPE, **options) -> str:
        return VLLMEngine.memory_refusal(shape, work, VLLMOptions(**options))

    assert refusal(gpu_memory_utilization=0.34, max_model_len=0) == ""
    said = refusal(gpu_memory_utilization=0.33, max_model_len=0)
    assert "one 1000-token sequence: it would not start" in said
    assert "rollout.vllm.gpu_memory_utilization=0.34" in said and "rollout.vllm.max_model_len=-1" in said
    assert refusal(gpu_memory_utilization=0.0425) == ""  # auto-fit: 4,240 bytes
    said = refusal(gpu_memory_utilization=0.0423)
    assert "auto-fit would leave a shorter context" in said and "max_model_len=-1" not in said
    assert refusal(gpu_memory_utilization=0.0425, max_model_len=70) == ""
    assert refusal(gpu_memory_utilization=0.0423, max_model_len=70) != ""
    assert refusal(gpu_memory_utilization=0.17, max_model_len=0, tensor_parallel_size=2) == ""  # half of each
    assert refusal(gpu_memory_utilization=0.16, max_model_len=0, tensor_parallel_size=2) != ""
    longer = replace(SHAPE, context=10_000)  # 322,000 bytes: more than the card
    assert "more GPUs than 1 to hold it" in refusal(longer, max_model_len=0)


def test_a_plan_counts_an_engine_that_cannot_start_against_every_strategy(capsys):
    """Qwen3-VL-8B declares 262,144 positions: asked for all of them (max_model_len 0), at vLLM's
    default share of an 80 GB card (24 GB) its 17.5 GB of weights and one such sequence's 38.7
    GB of keys and values would not fit; auto-fit (the default) fits its context to the share."""
    args = ["plan", "--shape", "qwen3-vl-8b", "--gpus", "8", "rollout.engine=vllm", "model.dtype=bfloat16"]
    assert main([*args, "rollout.vllm.max_model_len=0"]) == 0
    out = capsys.readouterr().out
    assert "it would not start" in " ".join(out.split())
    assert {row[-1] for row in _printed_rows(out)} == {"no (the engine)"}
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "would not start" not in out and "no (the engine)" not in out


def test_a_lora_policy_decoding_with_merged_weights_holds_a_copy_of_each_adapted_weight():
    """rollout.hf.merge_lora: a bf16 copy of every adapted weight while sampling, none with
    the adapters computed unmerged, and none during the update (the engine sleeps first)."""
    from dataclasses import replace

    from vlrl.rollout.hf import HFOptions

    lora, kv_cache = replace(SHAPE, adapted=400), 2 * (0 + 64 + 6) * 8 * 2 * 2
    assert HFEngine.memory(lora, WORK, None) == (kv_cache + 400 * 2, 0.0)
    assert HFEngine.memory(lora, WORK, HFOptions(merge_lora=False)) == HFEngine.memory(SHAPE, WORK, None)
    assert memory(lora, WORK, Replicated.memory(lora, WORK, None), HF, False)["rollout engine"] == kv_cache + 800


def test_activations_by_hand():
    # a decoder layer keeps 2 (4/3 300/10 + 5/3 10) + 20 10 bytes a token, a vision block
    # 2 (4/3 100/5 + 5/3 5) + 20 5
    layer, block = 2 * (40 + 50 / 3) + 200, 2 * (80 / 3 + 25 / 3) + 100
    tokens = 1 * 10 + 2 * 5  # one prompt of 10 tokens, two completions of 5
    lm = 2 * (tokens * layer + 2 * 10 * 10 * 2)  # two layers; each row keeps its prompt's keys
    expected = lm + 4 * block + 4 * 12 * 2 + 2 * 5 * 4  # vision, pixel values, float32 log-normalizers
    assert activation_bytes(SHAPE, 1, 10, 2, 5, 4, checkpointing=False, transient=False) == pytest.approx(expected)
    # checkpointed: each layer keeps its input, keys and values; one layer or block is recomputed at a time
    kept = tokens * 2 * 2 * (10 + 8) + 4 * 1 * 2 * 5 + max(tokens * layer + 400, 4 * block)
    assert activation_bytes(SHAPE, 1, 10, 2, 5, 4, checkpointing=True, transient=False) == pytest.approx(kept + 96 + 40)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_a_shapes_cache_width_and_patch_sizes_are_those_the_model_and_processor_use(family):
    """kv_width from the layers' key and value projections (Qwen3's head_dim is its own, not
    hidden / heads); patch values and patches per image token from what the processor makes
    of an image."""
    from PIL import Image

    from vlrl.models.families import model_family

    cfg = load_config(None, [f"model.path=tiny:{family}", "model.dtype=float32"])
    shape = model_shape(cfg)
    attention = load_model(cfg.model).model.language_model.layers[0].self_attn
    assert shape.kv_width == attention.k_proj.out_features + attention.v_proj.out_features
    processor = load_processor(cfg.model)
    family = model_family(cfg.model)
    text = f"<|vision_start|>{family.image_pad}<|vision_end|>"
    out = processor(text=[text], images=[Image.new("RGB", (112, 84))], return_tensors="pt")
    patches, values = out["pixel_values"].shape
    tokens = int((out["input_ids"] == processor.tokenizer.convert_tokens_to_ids(family.image_pad)).sum())
    assert (shape.patch_values, shape.patches_per_token * tokens) == (values, patches) and tokens < patches


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_5"])
def test_a_shapes_cache_bytes_are_what_the_static_step_allocates(family, rec_data):
    """Per row, the HF engine's static step holds a slot of keys and values per token in every
    full-attention layer (`kv_token_bytes`) and, in Qwen3.5's linear-attention layers (three in
    four), a convolution window and a float32 recurrent state (`state_bytes`): what `vlrl plan`
    counts as the engine's cache (`sequence_cache_bytes` a row), in bf16."""
    cfg = load_config(None, [f"model.path=tiny:{family}", "model.dtype=bfloat16"])
    shape = model_shape(cfg)
    model, processor = load_model(cfg.model).eval(), load_processor(cfg.model)
    samples = load_split(rec_data, RefCOCO().build_sample, frame_spec(cfg.model)).samples[:2]
    prompts = [render_prompt(processor, RefCOCO().messages(s), s, cfg.model) for s in samples]
    engine = HFEngine(model, processor.tokenizer, options=STATIC["static, compacted every 3 steps"])
    engine.generate(prompts, SamplingParams(n=2, max_new_tokens=4), torch.Generator().manual_seed(0))
    decoding = engine._static[1]
    rows, slots = decoding.rows, decoding.layers[-1].all_keys.shape[2]  # the last layer attends fully

    def size(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    kv = size(
        t for layer in decoding.layers if isinstance(layer, RowsLayer) for t in (layer.all_keys, layer.all_values)
    )
    states = size(
        t
        for layer in decoding.layers
        if isinstance(layer, RowsStateLayer)
        for t in (*layer.all_conv, *layer.all_recurrent)
    )
    assert kv == rows * slots * shape.kv_token_bytes
    assert states == rows * shape.state_bytes and (states > 0) == (family == "qwen3_5")
    # one sequence's cache, as the HF engine's plan and vLLM's start check count it
    assert kv + states == rows * shape.sequence_cache_bytes(slots)


def test_a_shape_counts_what_the_optimizer_steps_and_in_which_precision():
    def shape(*overrides):
        return model_shape(load_config(None, ["model.path=tiny:qwen2_5_vl", *overrides]))

    def trained(*overrides):
        model = load_model(load_config(None, ["model.path=tiny:qwen2_5_vl", *overrides]).model)
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    bf16 = shape("model.dtype=bfloat16")
    assert (bf16.upcast, bf16.trainable_bytes) == (bf16.params, 2)  # fp32 masters of every weight
    assert (
        shape("model.dtype=bfloat16", "trainer.master_weights=false").upcast,
        shape("model.dtype=float32").upcast,
    ) == (0, 0)
    lora = shape("model.dtype=bfloat16", "model.lora.r=4")
    assert (lora.upcast, lora.trainable_bytes) == (0, 4)  # PEFT's adapters are fp32 already
    frozen = shape("model.dtype=float32", "model.freeze_vision=true")
    assert frozen.trainable == trained("model.dtype=float32", "model.freeze_vision=true") < frozen.params
    # model.lm_head_fp32: each product of the output layer upcasts its weight (a float32 model's is)
    head = load_model(load_config(None, ["model.path=tiny:qwen2_5_vl"]).model).get_output_embeddings().weight
    assert shape("model.dtype=bfloat16", "model.lm_head_fp32=true").float32_head == head.numel() > 0
    assert shape("model.dtype=float32", "model.lm_head_fp32=true").float32_head == bf16.float32_head == 0


def test_the_workload_is_one_gpus_share_of_the_prompts_and_the_stage_with_the_most_tokens():
    cfg = load_config(None, ["trainer.prompts_per_step=8", "rollout.num_generations=4"])
    assert [Workload.of(cfg, gpus, 80, image_tokens=0).rows for gpus in (1, 2, 16)] == [32, 16, 4]
    # 4 x (64 + 36) and 2 x (64 + 136) tokens: equal, and the longer completions are taken
    stages = (
        "rollout.stages=[{steps: 1, max_new_tokens: 36, num_generations: 4}, {max_new_tokens: 136, num_generations: 2}]"
    )
    work = Workload.of(load_config(None, ["trainer.prompts_per_step=1", stages]), 1, 80, image_tokens=0)
    assert (work.rows, work.max_new_tokens, work.prompt_tokens) == (2, 136, 64)
    # ReMax: each group's greedy completion decoded in the same call, one more row a prompt
    remax = load_config(None, ["trainer.prompts_per_step=8", "rollout.num_generations=4", "algo.advantage=remax"])
    assert Workload.of(remax, 2, 80, image_tokens=0).rows == 4 * (4 + 1)
    # DAPO's rounds of algo.sampling_batch prompts (its recipe's 3 x the batch): each a call of them
    dapo = ["trainer.prompts_per_step=8", "rollout.num_generations=4", "algo.dynamic_sampling=true"]
    assert Workload.of(load_config(None, [*dapo, "algo.sampling_batch=24"]), 2, 80, image_tokens=0).rows == 12 * 4
    assert Workload.of(load_config(None, dapo), 2, 80, image_tokens=0).rows == 4 * 4
    # rollout.max_rows: a call decodes at most that many, whole groups while one fits (its KV
    # cache is a call's): of 6, one group of 4
    capped = load_config(None, ["trainer.prompts_per_step=8", "rollout.num_generations=4", "rollout.max_rows=6"])
    assert Workload.of(capped, 1, 80, image_tokens=0).rows == 4
    # the stage is the one whose call holds the most tokens, with the split and ReMax's row: 4
    # rows of 1000 tokens (a call of the second stage) over 4 of 300 (a piece of the first's 16)
    split = "rollout.stages=[{steps: 2, num_generations: 16, max_new_tokens: 300}, {num_generations: 4, max_new_tokens: 1000}]"
    work = Workload.of(load_config(None, ["trainer.prompts_per_step=1", "rollout.max_rows=4", split]), 1, 80, 0)
    assert (work.rows, work.max_new_tokens) == (4, 1000)
    remax = "rollout.stages=[{steps: 2, num_generations: 2, max_new_tokens: 1000}, {num_generations: 6, max_new_tokens: 300}]"
    work = Workload.of(load_config(None, ["trainer.prompts_per_step=1", "algo.advantage=remax", remax]), 1, 80, 0)
    assert (work.rows, work.max_new_tokens) == (3, 1000)  # 3 x 1064 tokens over 7 x 364


def test_the_plans_rows_of_a_call_are_the_largest_part_the_rollout_splits_a_step_into():
    from vlrl.models.memory import call_rows
    from vlrl.rollout.parts import parts

    for prompts, n, max_rows in itertools.product(range(1, 6), range(1, 7), range(0, 13)):
        largest = max(part.rows for part in parts(prompts, n, max_rows or None))
        assert call_rows(prompts, n, max_rows) == largest, (prompts, n, max_rows)


def test_activations_by_hand_of_the_logits_the_vision_peak_and_the_token_budget():
    from dataclasses import replace

    from vlrl.models.memory import budget_activations

    def logits_bytes(shape, transient, width=5):  # what 50 vocabulary entries add, per vocabulary entry
        args = (1, 10, 2, width, 4)
        with_vocab = activation_bytes(shape, *args, checkpointing=False, transient=transient)
        return (with_vocab - activation_bytes(replace(shape, vocab=0), *args, False, transient)) / 50

    fp32 = replace(SHAPE, dtype_bytes=4)
    # nothing of the vocabulary's size is kept (ScoredChunks); for a moment a chunk's logits in the
    # compute dtype, their float32 copy and a float32 temporary: 2 + 4 + 4 (4 + 4 + 4) bytes for
    # each of the 2 x 5 completion tokens
    assert [logits_bytes(SHAPE, False), logits_bytes(SHAPE, True), logits_bytes(fp32, False), logits_bytes(fp32, True)] == [
        pytest.approx(0), pytest.approx(10 * 10), pytest.approx(0), pytest.approx(10 * 12)]  # fmt: skip
    # a float32 output layer (model.lm_head_fp32): float32 logits, no copy, and its weight upcast
    # (400 elements, 4 bytes each) for the moment of its products; the engine's steps as well
    head = replace(SHAPE, float32_head=400)
    assert [logits_bytes(head, False), logits_bytes(head, True)] == [pytest.approx(0), pytest.approx(10 * 8)]
    args = (1, 10, 2, 5, 4)
    upcast = activation_bytes(head, *args, False) - activation_bytes(replace(head, float32_head=0), *args, False)
    assert upcast == pytest.approx(10 * SHAPE.vocab * (8 - 10) + 400 * 4)
    assert HFEngine.memory(head, WORK, None)[0] == HFEngine.memory(SHAPE, WORK, None)[0] + 400 * 4
    # at most one chunk of tokens at once: 2 x 1000 completion tokens hold CHUNK_TOKENS' logits
    assert logits_bytes(SHAPE, True, width=1000) == pytest.approx(CHUNK_TOKENS * 10)
    # the entropy bonus (algo.entropy_coef): two float32 temporaries more, 8 bytes an entry, in the
    # plan of a config that sets it
    args = (SHAPE, 1, 10, 2, 5, 4)
    bonus = activation_bytes(*args, False, entropy=True) - activation_bytes(*args, False)
    assert bonus == pytest.approx(10 * SHAPE.vocab * 8)
    work = Workload.of(load_config(None, ["algo.entropy_coef=0.001"]), 1, 80, image_tokens=0)
    assert work.entropy_bonus and not Workload.of(load_config(None, []), 1, 80, image_tokens=0).entropy_bonus
    extra = budget_activations(SHAPE, replace(WORK, entropy_bonus=True), False) - budget_activations(SHAPE, WORK, False)
    assert extra > 0 and extra % (SHAPE.vocab * 8) == 0  # 8 bytes an entry of the budget's completion tokens
    # checkpointed with many patches: the vision block being recomputed is the larger transient
    layer, block = 2 * (40 + 50 / 3) + 200, 2 * (80 / 3 + 25 / 3) + 100
    tokens, patches = 20, 1000
    kept = tokens * 2 * 2 * (10 + 8) + patches * 1 * 2 * 5
    assert patches * block > tokens * layer + 400
    assert activation_bytes(SHAPE, 1, 10, 2, 5, patches, checkpointing=True, transient=False) == pytest.approx(
        kept + patches * block + patches * 12 * 2 + 40
    )
    # the token budget: one prompt (10 image tokens + 64 of text) and whole completions that fit
    for budget, rows, width in ((200, 4, 30), (90, 1, 16)):
        work = replace(WORK, token_budget=budget, image_tokens=10, max_new_tokens=30)
        expected = activation_bytes(SHAPE, 1, 74, rows, width, 40, checkpointing=False)
        assert budget_activations(SHAPE, work, checkpointing=False) == pytest.approx(expected)


@pytest.mark.parametrize("min_p_first", [False, True])
def test_scoring_a_foreign_engines_draw_holds_per_logit_what_the_plan_counts(min_p_first):
    # every combination of the four filters, measured on the CPU: the columns of the draw a
    # chunk's tokens are scored under, from its float32 logits
    tokens, vocab = 64, 20_000
    logits, ids = torch.randn(tokens, vocab), torch.randint(0, vocab, (tokens,))
    banned = torch.zeros(vocab, dtype=torch.bool)
    stops, position = torch.rand(vocab) < 0.01, torch.randint(0, 4, (tokens,))
    for filters in itertools.product((0, 50), (1.0, 0.9), (0.0, 0.1), (1.0, 1.2), (0, 2)):
        top_k, top_p, min_p, penalty, min_new = filters
        sampler = SamplingFilter(banned, top_k, top_p, min_p, min_p_first, penalty, min_new, stops)
        seen = torch.randint(0, vocab, (tokens, 40)) if penalty != 1 else None
        lse = torch.logsumexp(logits, dim=-1)
        with LiveBytes(logits, ids, lse, position, stops) as held:
            TokenScorer(1.0, False, sampler).extras(logits, ids, lse, seen, position)
        counted = DrawFilter(*filters).entry_bytes(min_p_first)
        assert held.peak / (tokens * vocab) == pytest.approx(counted, abs=0.1), filters


def test_the_plan_counts_the_draw_of_an_engine_whose_log_probs_are_of_it():
    from dataclasses import replace

    work = replace(WORK, token_budget=64 + 12, draw=DrawFilter(top_p=0.9))  # a prompt, 2 rows of 6 tokens
    args = (SHAPE, work, Replicated.memory(SHAPE, work, None))
    hf, vllm = memory(*args, HF, False), memory(*args, VLLM, False)
    # 2 rows of 6 tokens: the banned logits and top-p's temporaries (4 + 20 bytes a logit)
    # beside the float32 logits, against the bf16 logits, their float32 copy and a temporary
    assert vllm["activations"] - hf["activations"] == pytest.approx(12 * SHAPE.vocab * (4 + 24 - (2 + 8)))
    unfiltered = replace(work, draw=DrawFilter())
    assert (
        hf["activations"]
        == memory(SHAPE, unfiltered, Replicated.memory(SHAPE, unfiltered, None), HF, False)["activations"]
    )
    # the filters are the run's
    cfg = load_config(
        None, ["rollout.top_k=20", "rollout.min_p=0.05", "rollout.repetition_penalty=1.1", "rollout.min_new_tokens=1"]
    )
    assert Workload.of(cfg, 1, 80, image_tokens=0).draw == DrawFilter(20, 1.0, 0.05, 1.1, 1)
    # a policy that moves within the step (here two optimizer steps) takes old log-probs, and
    # the draw's, from a forward without gradients: the update's forward scores no draw
    moving = load_config(None, ["rollout.top_p=0.9", "algo.mini_batches=2"])
    assert Workload.of(moving, 1, 80, image_tokens=0).draw == DrawFilter()


def test_plan_prints_a_table_per_strategy(capsys):
    args = [
        "plan",
        "--config",
        "configs/refcoco.yaml",
        "--shape",
        "qwen2.5-vl-7b",
        "--gpus",
        "8",
        "--gpu-memory",
        "141",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "8.29B parameters" in out and out.count("fsdp2") >= 4 and "replicated" in out
    with pytest.raises(SystemExit):
        main(["plan", "--shape"])  # a missing value is argparse's error


def test_a_plan_without_a_model_points_at_shape_before_a_checkpoint(capsys):
    assert main(["plan"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: vlrl plan needs a model: --shape NAME plans a real checkpoint's shape")
    assert "qwen2.5-vl-3b" in out and "; or model.path is not set. Give a local checkpoint" in out


def test_a_plan_fits_within_95_percent_of_the_card():
    from vlrl.app.plan import fits

    work = Workload(
        gpus=1, gpu_memory=1000.0, token_budget=1, image_tokens=0, rows=1, max_new_tokens=1, beta=0.0, lora=False
    )
    assert fits({"peak": 950.0}, work) and not fits({"peak": 951.0}, work)


def _printed_rows(out: str) -> list[list[str]]:
    """The cells of the plan table's rows (rich's box lines between │ characters)."""
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in out.splitlines() if "│" in line]
    return [row for row in rows if row[0] not in ("strategy", "")]


def test_plan_says_its_workload_and_prints_every_strategys_terms_as_the_plan_computes_them(capsys):
    """Defaults: one GPU of 80 GB; image tokens: model.max_pixels / 28², at most half the token
    budget, unless --image-tokens says (0 included). Each strategy once without and once with
    gradient checkpointing, its terms in GB, its verdict against 95% of the card, the CPU memory
    an offloading strategy needs."""
    from vlrl.app.plan import plans
    from vlrl.models.memory import GB
    from vlrl.rollout import configured_engines

    for overrides, flags, image_tokens in (
        (["model.max_pixels=78400", "trainer.token_budget=4096"], [], 100),  # 78400 / 784: under 2048
        (["model.max_pixels=12845056", "trainer.token_budget=1000"], [], 500),  # half the budget
        (["model.max_pixels=78400"], ["--image-tokens", "0"], 0),
    ):
        assert main(["plan", "--shape", "qwen2-vl-2b", *flags, *overrides]) == 0
        out = capsys.readouterr().out
        cfg = load_config(None, overrides)
        assert (
            f"1 GPU(s) of 80 GB; a micro-batch of {cfg.trainer.token_budget} tokens (one prompt with {image_tokens} "
            "image tokens, --image-tokens)" in " ".join(out.split())
        )
    engine, _ = configured_engines(cfg.rollout, cfg.eval.backend)
    work = Workload.of(cfg, 1, 80, 0)
    expected = plans(model_shape(cfg, "qwen2-vl-2b"), work, engine)
    rows = _printed_rows(out)
    assert [row[:2] for row in rows] == [[label, "on" if ckpt else "off"] for label, ckpt, _ in expected]
    terms = ("weights", "master weights", "gradients", "optimizer", "reference", "gathered units", "activations")
    for row, (label, _, computed) in zip(rows, expected, strict=True):
        numbers = [f"{computed[t] / GB:.1f}" for t in (*terms, "rollout engine", "peak")]
        verdict = "yes" if computed["peak"] <= 0.95 * 80 * GB else "no"
        if "cpu memory" in computed:
            verdict += f" (+{computed['cpu memory'] / GB:.0f} GB CPU)"
        assert row[2:] == [*numbers, verdict], label
    assert any(row[2] != row[4] for row in rows)  # gradients are not the optimizer's moments
    assert {row[-1].split()[0] for row in rows} == {"yes", "no"}  # 2B parameters: not everywhere on 80 GB
    assert any("GB CPU" in row[-1] for row in rows)


def test_a_plan_of_gpus_sizes_model_dtype_auto_as_a_gpus_bfloat16_whatever_the_host(capsys):
    """model.dtype=auto is bfloat16 on a GPU: a plan made on a CPU-only host sized float32
    weights and said nothing (a user audit); it says the width it sizes."""
    assert main(["plan", "--shape", "qwen2-vl-2b"]) == 0
    auto = capsys.readouterr().out
    assert main(["plan", "--shape", "qwen2-vl-2b", "model.dtype=bfloat16"]) == 0
    bf16 = capsys.readouterr().out
    assert "16-bit weights (model.dtype=auto)" in " ".join(auto.split())
    assert _printed_rows(auto) == _printed_rows(bf16)
    assert main(["plan", "--shape", "qwen2-vl-2b", "model.dtype=float32"]) == 0
    assert "32-bit weights (model.dtype=float32)" in " ".join(capsys.readouterr().out.split())


def test_a_plan_larger_than_the_card_says_it_does_not_fit(capsys):
    assert main(["plan", "--shape", "qwen2-vl-2b", "--gpu-memory", "10"]) == 0
    rows = _printed_rows(capsys.readouterr().out)
    assert [row[-1].split()[0] for row in rows] == ["yes" if float(row[-2]) <= 9.5 else "no" for row in rows]
    assert "no" in [row[-1] for row in rows]


def test_terms_by_hand_of_adapters_frozen_weights_and_a_run_without_kl():
    """A shape of 100 trained bf16 weights of 1000 stepped in bf16 (no fp32 masters): the
    optimizer's moments in bf16, the frozen weights sharded; no reference model for LoRA (its
    base is the reference) nor with beta 0; an offloaded reference on the CPU."""
    from dataclasses import replace

    from vlrl.models.memory import StrategyMemory

    shape = replace(SHAPE, trainable=100, upcast=0, trainable_bytes=2)
    one = Replicated.memory(shape, WORK, None)
    assert (one.weights, one.master_weights, one.optimizer, one.reference) == (2000, 0, 400, 2000)
    assert (one.gradients_update, one.gradients_step) == (200, 200)
    for work in (replace(WORK, lora=True), replace(WORK, beta=0.0)):
        assert Replicated.memory(shape, work, None).reference == 0
        assert FSDP2.memory(shape, work, FSDPOptions()).reference == 0
    sharded = FSDP2.memory(shape, WORK, FSDPOptions())
    assert (sharded.weights, sharded.master_weights, sharded.optimizer, sharded.reference) == (450, 50, 100, 500)
    offloaded = FSDP2.memory(shape, WORK, FSDPOptions(cpu_offload=True))
    assert (offloaded.weights, offloaded.reference) == (0, 0)
    assert offloaded.cpu_memory == (900 * 2 + 100 * 2 * 4) / 4 + 1000 * 2 / 4  # the reference beside them
    # vLLM awake holds its share in the optimizer step too; the peak is whichever phase is largest
    awake, asleep = plan(FSDP2, FSDPOptions(), engine=VLLM), plan(FSDP2, FSDPOptions())
    assert awake["optimizer step"] == asleep["optimizer step"] + 3000
    held = StrategyMemory(
        weights=0, master_weights=0, optimizer=0, reference=0, gradients_update=0, gradients_step=10**6, gathered=0
    )
    step = memory(SHAPE, WORK, held, HF, False)
    assert step["peak"] == step["optimizer step"] == 10**6


def test_the_workload_says_whether_adapters_train_and_the_kl_weight():
    cfg = load_config(None, ["model.lora.r=1", "algo.beta=0.04"])
    work = Workload.of(cfg, 1, 80, image_tokens=0)
    assert (work.lora, work.beta, work.gpu_memory) == (True, 0.04, 80e9)  # decimal GB
    assert Workload.of(load_config(None, ["model.lora.r=0"]), 1, 80, 0).lora is False
