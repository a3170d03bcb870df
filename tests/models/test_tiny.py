"""Tiny checkpoints: real transformers classes, deterministic, loadable like the real models."""

from __future__ import annotations

import hashlib

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from vlrl.cli import main
from vlrl.models.build import SPECIAL_TOKENS
from vlrl.models.families import tiny_spec
from vlrl.models.tiny import tiny_checkpoint


def _digest(path):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir()) if f.is_file()}


def test_tiny_model_command_is_deterministic(tmp_path):
    assert main(["tiny-model", str(tmp_path / "a")]) == 0
    assert main(["tiny-model", str(tmp_path / "b")]) == 0
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert {"model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"} <= a.keys()
    assert a == b


def test_tiny_model_replaces_a_tiny_checkpoint_and_refuses_any_other_folder_or_file_leaving_it_whole(
    tmp_path, monkeypatch, capsys
):
    assert main(["tiny-model", str(tmp_path / "a")]) == 0
    before = _digest(tmp_path / "a")
    assert main(["tiny-model", str(tmp_path / "a"), "--seed", "1"]) == 0  # a tiny checkpoint: rebuilt
    assert _digest(tmp_path / "a")["model.safetensors"] != before["model.safetensors"]
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("keep\n")
    monkeypatch.chdir(run / "checkpoints")
    capsys.readouterr()
    for target in (str(run), "..", str(tmp_path / "notes.txt")):
        assert main(["tiny-model", target]) == 2
        assert "exists and is not a tiny checkpoint" in capsys.readouterr().out
    assert (run / "metrics.jsonl").read_text() == "{}\n" and (tmp_path / "notes.txt").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "notes.txt", "run"]  # no build left behind


def test_a_cached_build_that_another_process_finished_first_is_kept_as_it_is(tmp_path, monkeypatch):
    """Two test processes on a cold cache build the same checkpoint at once: the later must not
    delete the earlier's, which the other process may be reading (it did: FileNotFoundError)."""
    from vlrl.models.build import TinySpec
    from vlrl.models.tiny import write_tiny_checkpoint

    monkeypatch.setenv("VLRL_CACHE", str(tmp_path))
    spec = TinySpec(arch="qwen2_5_vl", dtype="bfloat16")
    path = tiny_checkpoint(spec)
    weights = (path / "model.safetensors").stat().st_ino
    assert write_tiny_checkpoint(path, spec, replace=False) == path  # the later build, finding it there
    assert (path / "model.safetensors").stat().st_ino == weights
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # its own build dropped


def test_the_cache_key_follows_the_builders_code_and_the_libraries_versions(tmp_path, monkeypatch):
    """An edit to the code that writes a tiny build, or another torch, transformers or tokenizers,
    is a new key: the cache never serves a build that the code would no longer make."""
    import transformers

    from vlrl.models import tiny

    spec = tiny_spec("tiny:qwen2_5_vl")
    sources = tiny.builder_sources(spec.arch)
    assert [(p.parent.name, p.name) for p in sources] == [
        ("models", name) for name in ("base.py", "build.py", "qwen2_5_vl.py", "qwen2_vl.py", "tiny.py")
    ]
    key = tiny.cache_key(spec)
    assert key.startswith("qwen2_5_vl-") and tiny.cache_key(spec) == key
    assert tiny.cache_key(tiny_spec("tiny:qwen2_5_vl-h32")) != key
    edited = tmp_path / "qwen2_vl.py"
    edited.write_text(sources[3].read_text() + "# an edit\n")
    with monkeypatch.context() as patch:
        patch.setattr(tiny, "builder_sources", lambda arch: [*sources[:3], edited, *sources[4:]])
        assert tiny.cache_key(spec) != key
    with monkeypatch.context() as patch:
        patch.setattr(transformers, "__version__", "0.0.1")
        assert tiny.cache_key(spec) != key
    assert tiny.cache_key(spec) == key


QWEN2_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"  # Qwen3-VL's template has none


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"])
def test_tiny_checkpoint_loads_like_a_qwen_vl_checkpoint(arch):
    path = tiny_checkpoint(tiny_spec(f"tiny:{arch}"))
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert model.config.model_type == arch
    tokenizer = processor.tokenizer
    assert model.config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert model.config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    for token in SPECIAL_TOKENS:  # each special token is one id, never split
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (QWEN2_SYSTEM if arch.startswith("qwen2") else "") + (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Where?<|im_end|>\n<|im_start|>assistant\n"
    )
    patch = 14 if arch.startswith("qwen2") else 16
    assert (
        processor.image_processor.patch_size
        == processor.video_processor.patch_size
        == model.config.vision_config.patch_size
        == patch
    )
    assert tokenizer.decode(tokenizer("[12, 345]")["input_ids"]) == "[12, 345]"


def test_tiny_model_writes_any_familys_build_and_refuses_an_unknown_one(tmp_path, capsys):
    from transformers import AutoConfig

    assert main(["tiny-model", str(tmp_path / "q35"), "--arch", "qwen3_5"]) == 0
    assert AutoConfig.from_pretrained(tmp_path / "q35").model_type == "qwen3_5"
    assert main(["tiny-model", str(tmp_path / "x"), "--arch", "qwen9_vl"]) != 0
    err = capsys.readouterr()
    assert "qwen9_vl" in err.out + err.err and "qwen3_vl_moe" in err.out + err.err


def test_the_command_line_names_every_shape():
    from vlrl.cli import SHAPE_NAMES
    from vlrl.models.tiny import SHAPES

    assert tuple(SHAPES) == SHAPE_NAMES


def test_an_unknown_shape_is_refused_with_the_known_ones(tmp_path, capsys):
    assert main(["tiny-model", str(tmp_path / "a"), "--shape", "qwen-100b"]) != 0
    err = capsys.readouterr()
    assert "qwen-100b" in err.out + err.err and "qwen2.5-vl-3b" in err.out + err.err


@pytest.mark.parametrize(
    ("shape", "parameters"),
    [
        ("qwen2.5-vl-3b", 3_754_622_976),
        ("qwen2.5-vl-7b", 8_292_166_656),
        ("qwen2-vl-2b", 2_208_985_600),
        ("qwen3-vl-8b", 8_767_123_696),
        ("qwen3-vl-30b-a3b", 31_070_754_032),
    ],
)
def test_shapes_have_the_real_checkpoints_parameter_counts(shape, parameters):
    """The counts of Qwen2.5-VL-3B-Instruct, Qwen2.5-VL-7B-Instruct, Qwen2-VL-2B-Instruct,
    Qwen3-VL-8B-Instruct and Qwen3-VL-30B-A3B-Instruct (their bf16 safetensors' total_size / 2;
    the last published as 31.07B, its language model Qwen3-30B-A3B's 30,532,122,624), built on the
    meta device: no memory, no weights drawn."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.tiny import SHAPES, build_model

    spec = SHAPES[shape]
    with torch.device("meta"):
        model = build_model(spec, build_tokenizer(spec))
    assert sum(p.numel() for p in model.parameters()) == parameters


@pytest.mark.parametrize(
    ("shape", "vision"),
    [
        ("qwen2.5-vl-3b", {"fullatt_block_indexes": [7, 15, 23, 31], "window_size": 112, "tokens_per_second": 2}),
        ("qwen2.5-vl-7b", {"fullatt_block_indexes": [7, 15, 23, 31], "window_size": 112, "tokens_per_second": 2}),
        ("qwen3-vl-8b", {"deepstack_visual_indexes": [8, 16, 24], "num_position_embeddings": 2304}),
        ("qwen3-vl-30b-a3b", {"deepstack_visual_indexes": [8, 16, 24], "num_position_embeddings": 2304}),
    ],
)
def test_shapes_have_the_real_checkpoints_vision_layout(shape, vision):
    """The vision_config values of Qwen2.5-VL-3B/7B-Instruct's and Qwen3-VL-8B-Instruct's config.json
    that no parameter count shows: which blocks attend fully or feed the deepstack, the window, the
    time scale of video positions."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.tiny import SHAPES, build_model

    spec = SHAPES[shape]
    with torch.device("meta"):
        model = build_model(spec, build_tokenizer(spec))
    assert {key: getattr(model.config.vision_config, key) for key in vision} == vision


@pytest.mark.parametrize(
    ("shape", "rope"),
    [
        ("qwen2.5-vl-3b", {"mrope_section": [16, 24, 24], "rope_theta": 1e6}),
        ("qwen2.5-vl-7b", {"mrope_section": [16, 24, 24], "rope_theta": 1e6}),
        ("qwen2-vl-2b", {"mrope_section": [16, 24, 24], "rope_theta": 1e6}),
        ("qwen3-vl-8b", {"mrope_section": [24, 20, 20], "rope_theta": 5e6, "mrope_interleaved": True}),
        ("qwen3-vl-30b-a3b", {"mrope_section": [24, 20, 20], "rope_theta": 5e6, "mrope_interleaved": True}),
        ("qwen3.5-27b", {"mrope_section": [11, 11, 10], "rope_theta": 1e7, "partial_rotary_factor": 0.25}),
        ("qwen3.5-35b-a3b", {"mrope_section": [11, 11, 10], "rope_theta": 1e7, "partial_rotary_factor": 0.25}),
    ],
)
def test_shapes_have_the_real_checkpoints_rope(shape, rope):
    """The text config's rope_scaling of each real checkpoint's config.json: how the 64 rotated
    frequency pairs of a 128-wide head are split between time, height and width."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.tiny import SHAPES, build_model

    spec = SHAPES[shape]
    with torch.device("meta"):
        model = build_model(spec, build_tokenizer(spec))
    parameters = model.config.text_config.rope_parameters
    assert {key: parameters[key] for key in rope} == rope


@pytest.mark.parametrize(
    ("shape", "positions"),
    [("qwen2.5-vl-3b", 128000), ("qwen2.5-vl-7b", 128000), ("qwen2-vl-2b", 32768), ("qwen3-vl-8b", 262144),
     ("qwen3-vl-30b-a3b", 262144), ("qwen3.5-27b", 262144), ("qwen3.5-35b-a3b", 262144)],
)  # fmt: skip
def test_shapes_declare_the_real_checkpoints_context(shape, positions):
    """max_position_embeddings of each text config.json: vLLM's max_model_len unless a run sets
    one, and so what its cache must hold for one sequence before it starts (`vlrl plan`)."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.tiny import SHAPES, build_model

    spec = SHAPES[shape]
    with torch.device("meta"):
        model = build_model(spec, build_tokenizer(spec))
    assert model.config.get_text_config().max_position_embeddings == positions


def test_the_mixture_of_experts_shape_routes_as_the_released_model():
    """Qwen3-VL-30B-A3B-Instruct's text config.json beyond its parameter count, which shows the
    experts' total width but not how many a token is routed to, nor that heads are 128 wide
    while 32 of them span 4,096 of a 2,048-wide model."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.tiny import SHAPES, build_model

    spec = SHAPES["qwen3-vl-30b-a3b"]
    with torch.device("meta"):
        text = build_model(spec, build_tokenizer(spec)).config.text_config
    assert (text.num_experts, text.num_experts_per_tok, text.moe_intermediate_size) == (128, 8, 768)
    assert (text.head_dim, text.num_attention_heads, text.num_key_value_heads) == (128, 32, 4)


def test_qwen3_text_layouts_follow_the_released_models():
    """Qwen3.5: layers 4, 8, ... attend fully and the other three of every four are linear, with
    twice as many value heads as key heads, a quarter of each head rotated; Qwen3-VL and Qwen3.5:
    interleaved mrope (their config.json's rope_scaling.mrope_interleaved)."""
    from vlrl.models.build import TinySpec, build_tokenizer
    from vlrl.models.qwen3_5 import Qwen35
    from vlrl.models.qwen3_vl import Qwen3VL

    spec = TinySpec(arch="qwen3_5", num_layers=8)
    text = Qwen35().text_config(spec, build_tokenizer(spec))
    assert text["layer_types"] == (["linear_attention"] * 3 + ["full_attention"]) * 2
    assert text["linear_num_value_heads"] == 2 * text["linear_num_key_heads"] == 2 * spec.num_heads
    assert text["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert text["rope_parameters"]["mrope_interleaved"] is True
    spec = TinySpec(arch="qwen3_vl")
    assert Qwen3VL().text_config(spec, build_tokenizer(spec))["rope_parameters"]["mrope_interleaved"] is True


def test_the_tiny_tokenizer_learns_the_words_of_the_synthetic_scenes():
    """The tokenizer's corpus (vlrl/models/build.py) names the scene words of data_prep/shapes.py
    itself (the engine imports nothing of data_prep): the two lists must stay the same."""
    from data_prep.shapes import COLORS, SHAPES, SIZES
    from vlrl.models.build import CORPUS_COLORS, CORPUS_SHAPES, CORPUS_SIZES

    assert (tuple(COLORS), tuple(SHAPES), tuple(SIZES)) == (CORPUS_COLORS, CORPUS_SHAPES, CORPUS_SIZES)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen3_vl"])
def test_tiny_checkpoints_name_their_special_tokens_and_stop_as_the_released_qwen_checkpoints_do(arch):
    """Qwen2.5-VL-7B-Instruct's config.json and generation_config.json, in its own ids: bos 151643
    (<|endoftext|>), eos 151645 (<|im_end|>), vision start / end 151652 / 151653, image / video
    pads 151655 / 151656; generation stops at [151645, 151643] and pads with 151643."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    path = tiny_checkpoint(tiny_spec(f"tiny:{arch}"))
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = AutoConfig.from_pretrained(path)
    text = config.get_text_config()
    assert (text.bos_token_id, text.eos_token_id) == (ids["<|endoftext|>"], ids["<|im_end|>"])
    assert (config.vision_start_token_id, config.vision_end_token_id) == (
        ids["<|vision_start|>"],
        ids["<|vision_end|>"],
    )
    assert (config.image_token_id, config.video_token_id) == (ids["<|image_pad|>"], ids["<|video_pad|>"])
    generation = GenerationConfig.from_pretrained(path)
    assert generation.eos_token_id == [ids["<|im_end|>"], ids["<|endoftext|>"]]
    assert generation.pad_token_id == ids["<|endoftext|>"]


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_a_tiny_checkpoints_image_processor_states_the_specs_pixel_limits(arch):
    """A tiny checkpoint's saved image processor resizes between TinySpec's 56 x 56 and 448 x 448
    pixels (what any reader of the folder but vlrl's configured limits goes by)."""
    path = tiny_checkpoint(tiny_spec(f"tiny:{arch}"))
    size = AutoProcessor.from_pretrained(path).image_processor.size
    assert (size["shortest_edge"], size["longest_edge"]) == (56 * 56, 448 * 448)


def test_the_tiny_moe_build_routes_each_token_to_two_of_four_experts_in_every_layer():
    """tiny:qwen3_vl_moe: 4 experts 96 wide, 2 per token, in both layers (Qwen3-VL-30B-A3B
    routes to 8 of 128 in every layer: decoder_sparse_step 1), normalizing the chosen experts'
    weights, as its config.json states for vLLM (norm_topk_prob)."""
    from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeTextSparseMoeBlock

    spec = tiny_spec("tiny:qwen3_vl_moe")
    model = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint(spec))
    text = model.config.get_text_config()
    assert (text.num_experts, text.num_experts_per_tok, text.moe_intermediate_size) == (4, 2, 96)
    assert text.norm_topk_prob is True
    layers = model.model.language_model.layers
    assert len(layers) == 2 and all(isinstance(layer.mlp, Qwen3VLMoeTextSparseMoeBlock) for layer in layers)


@pytest.mark.parametrize("arch", ["qwen3_vl", "qwen3_5"])
def test_the_qwen3_template_renders_a_system_message_first_and_only_once(arch):
    """What Qwen3-VL-Instruct's own template renders for a system message and a user turn."""
    processor = AutoProcessor.from_pretrained(tiny_checkpoint(tiny_spec(f"tiny:{arch}")))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where?"}]},
    ]
    assert processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Where?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_the_tiny_qwen35_linear_attention_has_qwen35s_convolution_and_vllms_head_size():
    """Qwen3.5's linear attention convolves over 4 positions (its config.json's
    linear_conv_kernel_dim); the tiny build's heads are 64 wide, a size vLLM's CPU kernel takes."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    model = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint(tiny_spec("tiny:qwen3_5")))
    (linear, *_) = [m for m in model.modules() if isinstance(m, Qwen3_5GatedDeltaNet)]
    assert linear.conv1d.kernel_size == (4,)
    assert (linear.head_k_dim, linear.head_v_dim) == (64, 64)


def test_qwen35s_mrope_sections_split_only_the_rotated_quarter_of_each_head():
    """Qwen3.5 rotates a quarter of each head: its config.json's mrope_section [11, 11, 10] sums
    to 256 x 0.25 / 2; the tiny build's 32-wide heads rotate 8 dimensions, 4 frequencies."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.qwen3_5 import Qwen35

    spec = tiny_spec("tiny:qwen3_5")
    rope = Qwen35().text_config(spec, build_tokenizer(spec))["rope_parameters"]
    assert spec.hidden_size // spec.num_heads == 32 and sum(rope["mrope_section"]) == 32 // 4 // 2


@pytest.mark.parametrize(("tokens", "rows"), [(1038, 1088), (1024, 1024), (1025, 1088), (64, 64)])
def test_embedding_rows_are_the_vocabulary_rounded_up_to_a_multiple_of_64(tokens, rows):
    from vlrl.models.build import TinySpec, vocab_rows

    assert vocab_rows(TinySpec(), [None] * tokens) == rows
    assert vocab_rows(TinySpec(vocab_size=2000), [None] * tokens) == 2000  # set: taken as it is


@pytest.mark.parametrize(
    ("shape", "text", "billions"),
    [
        ("qwen3.5-27b", {"linear_num_value_heads": 48, "intermediate_size": 17408, "num_key_value_heads": 4}, 27),
        ("qwen3.5-35b-a3b", {"linear_num_value_heads": 32, "num_experts": 256, "moe_intermediate_size": 512}, 35),
    ],
)
def test_qwen3_5_shapes_have_the_released_hybrid_layers(shape, text, billions):
    """Qwen3.5-27B's and Qwen3.5-35B-A3B's text config.json (as THUDM/slime's model scripts and
    the readers of those checkpoints quote it): every fourth layer attends fully, the others are
    gated delta nets with 16 key heads of 128 and their own count of value heads, the full
    attention 256 wide a head; the vision tower has no deepstack. No safetensors total_size was at
    hand offline: the names bracket the counts, to half a billion."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.tiny import SHAPES, build_model

    spec = SHAPES[shape]
    with torch.device("meta"):
        model = build_model(spec, build_tokenizer(spec))
    config = model.config.text_config
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"] + config.layer_types[4:]
    assert config.layer_types.count("full_attention") * 4 == config.num_hidden_layers
    assert (config.linear_num_key_heads, config.linear_key_head_dim, config.linear_value_head_dim) == (16, 128, 128)
    assert (config.head_dim, config.vocab_size, config.tie_word_embeddings) == (256, 248320, False)
    assert {key: getattr(config, key) for key in text} == text
    assert not getattr(model.config.vision_config, "deepstack_visual_indexes", None)
    assert (model.config.vision_config.depth, model.config.vision_config.hidden_size) == (27, 1152)
    assert billions * 1e9 <= sum(p.numel() for p in model.parameters()) < (billions + 0.5) * 1e9
