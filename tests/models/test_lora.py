"""LoRA: only adapters train, the adapter-free policy is the reference, checkpoints resume and evaluate."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vlrl.cli import main
from vlrl.config import load_config
from vlrl.models.loading import load_model, pretrained
from vlrl.models.lora import lora_linears
from vlrl.trainer.rl import train


def overrides(run_dir, data, **extra):
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.max_pixels": 50176,
        "model.lora.r": 4,
        "data.train": str(data),
        "task.name": f"{Path(__file__).parent.parent / 'fixtures' / 'toy_task.py'}:BriefGrounding",
        "rollout.num_generations": 4,
        "rollout.max_new_tokens": 10,
        "trainer.output_dir": str(run_dir),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 2,
        "trainer.lr": 5e-3,
        "trainer.progress": False,
        "trainer.save_every": 1,
        "algo.advantage": "dr_grpo",
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def test_lora_trains_adapters_resumes_and_evaluates(tmp_path, rec_data, tiny_qwen25, monkeypatch, capsys):
    from vlrl.trainer.run import Run

    loads = []
    original = Run.load
    monkeypatch.setattr(Run, "load", lambda run, *a, **k: loads.append(1) or original(run, *a, **k))
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(load_config(None, overrides(straight, rec_data, **{"trainer.steps": 3})))
    assert len(loads) == 1  # the policy; beta > 0, yet no reference model: the adapters are switched off for it
    kl = [json.loads(line)["kl"] for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert kl[0] == 0.0 and kl[-1] > 0.0  # lora_B starts at zero: the policy leaves the reference only as it trains
    checkpoint = straight / "checkpoints" / "step-0000003"
    assert (checkpoint / "adapter_config.json").is_file() and (checkpoint / "adapter_model.safetensors").is_file()
    adapters = load_file(checkpoint / "adapter_model.safetensors")
    assert adapters and all("lora_" in name for name in adapters)
    assert any(not torch.equal(w, torch.zeros_like(w)) for name, w in adapters.items() if "lora_B" in name)

    # with the adapters' dropout set, which RL leaves off (so the runs stay equal), and says so
    capsys.readouterr()
    train(load_config(None, overrides(resumed, rec_data, **{"trainer.steps": 2, "model.lora.dropout": 0.5})))
    train(load_config(None, overrides(resumed, rec_data, **{"trainer.steps": 3, "model.lora.dropout": 0.5})))
    assert "model.lora.dropout applies to SFT only" in " ".join(capsys.readouterr().out.split())

    def rows(d):
        return [
            {k: v for k, v in json.loads(line).items() if not k.startswith("time")}
            for line in (d / "metrics.jsonl").read_text().splitlines()
        ]

    assert rows(resumed) == rows(straight)
    b = load_file(resumed / "checkpoints" / "step-0000003" / "adapter_model.safetensors")
    assert all(torch.equal(adapters[name], b[name]) for name in adapters)

    # A LoRA checkpoint as model.path loads as its base with the adapter merged in: the model
    # that base + adapter computes.
    from peft import PeftModel

    merged = load_model(load_config(None, [f"model.path={checkpoint}"]).model).eval()
    unmerged = PeftModel.from_pretrained(
        load_model(load_config(None, ["model.path=tiny:qwen2_5_vl"]).model), str(checkpoint)
    ).eval()
    ids = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(merged(input_ids=ids).logits, unmerged(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
    assert not hasattr(merged, "disable_adapter")
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--task",
                f"refcoco={rec_data}",
                "--model",
                str(checkpoint),
                "--out",
                str(out),
                "--limit",
                "2",
                "model.max_pixels=50176",
                "eval.max_new_tokens=6",
            ]
        )
        == 0
    )
    assert json.loads((out / "results.json").read_text())["n-samples"]["refcoco"] == {"original": 2, "effective": 2}


def test_rl_from_a_lora_sft_checkpoint_starts_from_and_keeps_as_reference_the_sft_model(
    tmp_path, rec_data, tiny_qwen25, capsys, recwarn
):
    from tests.trainer.test_sft import sft_overrides
    from vlrl.trainer.sft import train_sft

    sft = train_sft(
        load_config(
            None, sft_overrides(tmp_path / "sft", rec_data, **{"model.lora.r": 4, "sft.steps": 2, "sft.lr": 5e-2})
        )
    )
    model_cfg = load_config(None, ["model.path=tiny:qwen2_5_vl"]).model
    sft_model = dict(pretrained(model_cfg, str(sft.checkpoint)).named_parameters())  # base + SFT adapter, merged
    moved = [
        n for n, w in pretrained(model_cfg, str(tiny_qwen25)).named_parameters() if not torch.equal(w, sft_model[n])
    ]
    assert moved and all("language_model" in n for n in moved)  # the SFT adapter, merged, moved the language model

    for rank in (4, 0):  # a new LoRA adapter on the SFT model, or all of its weights
        run_dir = tmp_path / f"rl-{rank}"
        rl = train(
            load_config(
                None,
                overrides(run_dir, rec_data, **{"model.path": sft.checkpoint, "model.lora.r": rank, "algo.beta": 0.04}),
            )
        )
        kl = [json.loads(line)["kl"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert kl[0] == 0.0 and kl[-1] > 0.0  # the policy starts as its reference, the SFT model, then moves
        trained = pretrained(model_cfg, str(rl.checkpoint))
        assert any(not torch.equal(w, sft_model[n]) for n, w in trained.named_parameters())
    # The kept base is an adapter folder without config.json: PEFT's vocabulary check warned at each save.
    assert not [w for w in recwarn if "Could not find a config file" in str(w.message)]
    rl_checkpoint = tmp_path / "rl-4" / "checkpoints" / "step-0000002"
    adapter = json.loads((rl_checkpoint / "adapter_config.json").read_text())
    kept = tmp_path / "rl-4" / "base"  # the SFT checkpoint's files, linked: resumed and evaluated on the SFT model
    assert adapter["base_model_name_or_path"] == str(kept)
    assert os.path.samefile(kept / "adapter_model.safetensors", sft.checkpoint / "adapter_model.safetensors")
    shutil.rmtree(tmp_path / "sft")  # the SFT run deleted: what follows reads the kept base

    # `vlrl export`: the RL adapter on the SFT adapter on the base, as one plain model that
    # transformers loads without PEFT, equal to the merge vlrl itself loads.
    from transformers import AutoModelForImageTextToText, AutoProcessor

    capsys.readouterr()
    assert main(["export", str(rl_checkpoint), str(tmp_path / "exported")]) == 0
    assert "(LoRA adapters merged into their base)" in capsys.readouterr().out
    assert not (tmp_path / "exported" / "adapter_config.json").exists()
    # The processor says the image budget the run trained at (model.max_pixels), not its base's
    exported_images = json.loads((tmp_path / "exported" / "processor_config.json").read_text())["image_processor"]
    assert exported_images["size"]["longest_edge"] == 50176
    full = tmp_path / "rl-0" / "checkpoints" / "step-0000002"  # a full checkpoint has no adapters to merge
    assert main(["export", str(full), str(tmp_path / "exported-full")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote the full model of {full} to {tmp_path / 'exported-full'}"
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "exported")
    merged = dict(pretrained(model_cfg, str(rl_checkpoint)).named_parameters())
    assert all(torch.equal(w, merged[n]) for n, w in exported.named_parameters())
    assert any(not torch.equal(w, sft_model[n]) for n, w in exported.named_parameters())  # the RL adapter is in it
    processor = AutoProcessor.from_pretrained(tmp_path / "exported")
    assert processor.chat_template == AutoProcessor.from_pretrained(rl_checkpoint).chat_template is not None
    # and how the run sampled videos (model.video: 2 fps, 4-16 frames of 128 x 28 x 28 pixels, up to
    # 1.05 times that by Video-R1's rule), not its base's 768 frames of up to 602,112 pixels
    videos = processor.video_processor
    assert (videos.fps, videos.min_frames, videos.max_frames) == (2.0, 4, 16)
    assert dict(videos.size) == {"shortest_edge": 128 * 28 * 28, "longest_edge": 105369}


def adapted_model(rec_data, dtype: str, arch: str = "qwen2_5_vl"):
    """A tiny model of `arch` (Qwen2.5-VL) with a LoRA adapter that moves it (B drawn, not
    zero), its processor and two image prompts."""
    from tasks.refcoco import RefCOCO
    from vlrl.data.records import load_split
    from vlrl.models.loading import frame_spec, load_processor
    from vlrl.models.prompting import render_prompt

    cfg = load_config(None, [f"model.path=tiny:{arch}", f"model.dtype={dtype}", "model.lora.r=4"]).model
    torch.manual_seed(0)  # peft draws A from the global generator: the same adapter whatever ran before
    model = load_model(cfg).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    processor = load_processor(cfg)
    samples = load_split(rec_data, RefCOCO().build_sample, frame_spec(cfg)).samples[:2]
    return model, processor, [render_prompt(processor, RefCOCO().messages(s), s, cfg) for s in samples]


def test_lora_decodes_merged_as_the_unmerged_policy_samples_and_its_weights_stay_bit_identical(rec_data, tiny_qwen25):
    from vlrl.rollout import SamplingParams
    from vlrl.rollout.hf import HFEngine, HFOptions

    model, processor, prompts = adapted_model(rec_data, "float32")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = SamplingParams(n=3, max_new_tokens=12, temperature=1.0)
    merged_engine = HFEngine(model, processor.tokenizer, options=HFOptions(merge_lora=True))
    assert merged_engine.lora is not None and not merged_engine.exact_logprobs

    calls = []
    import peft.tuners.lora as peft_lora

    original = peft_lora.Linear.forward
    peft_lora.Linear.forward = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)
    try:
        merged = merged_engine.generate(prompts, params, torch.Generator().manual_seed(4))
        assert not calls  # no adapter product ran: every adapted layer computed with its merged copy
        unmerged = HFEngine(model, processor.tokenizer, options=HFOptions(merge_lora=False)).generate(
            prompts, params, torch.Generator().manual_seed(4)
        )
        assert calls  # the unmerged policy: PEFT's layers, A then B
    finally:
        peft_lora.Linear.forward = original
    got = [c for g in merged for c in g.completions]
    want = [c for g in unmerged for c in g.completions]
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    for c, w in zip(got, want, strict=True):  # float32: the merge rounds once per weight (1.2e-5 seen at -6)
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(w.logprobs), rtol=1e-5, atol=1e-5)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # nothing written
    assert not any("forward" in vars(m) for m in lora_linears(model))  # the layers' own forward is back
    assert merged_engine.lora.copies  # kept for the next rollout (a CUDA graph reads them)...
    kept = dict(merged_engine.lora.copies)
    with torch.no_grad():  # the adapters move (an update): the next rollout decodes with the new merge
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(-1.0)
    again = merged_engine.generate(prompts, params, torch.Generator().manual_seed(4))
    fresh = HFEngine(model, processor.tokenizer, options=HFOptions(merge_lora=False)).generate(
        prompts, params, torch.Generator().manual_seed(4)
    )
    assert [c.token_ids for g in again for c in g.completions] == [c.token_ids for g in fresh for c in g.completions]
    for c, w in zip((c for g in again for c in g.completions), (c for g in fresh for c in g.completions), strict=True):
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(w.logprobs), rtol=0, atol=1e-4)
    assert all(merged_engine.lora.copies[layer] is copy for layer, copy in kept.items())  # refreshed in place
    merged_engine.sleep()
    assert not merged_engine.lora.copies  # ...until the engine sleeps


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_merging_in_place_would_not_give_the_weights_back(rec_data, tiny_qwen25, dtype):
    """Why vlrl merges out of place: PEFT's merge_adapter then unmerge_adapter rounds the weights,
    in float32 too."""
    model, _, _ = adapted_model(rec_data, dtype)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if "base_layer" in n}
    model.merge_adapter()
    model.unmerge_adapter()
    after = dict(model.named_parameters())
    assert any(not torch.equal(after[n], w) for n, w in before.items())


def test_the_trainer_measures_and_corrects_the_merged_lora_engines_log_probs(tmp_path, rec_data, tiny_qwen25):
    """Merged decoding's log-probs are not the trainer's: with several passes over a rollout the
    old log-probs come from a trainer forward and the difference is logged (rollout/logp_diff);
    decoding unmerged, the rollout's own log-probs are the old ones and nothing is measured."""
    from tests.rollout.test_rollout_seam import make_trainer, one_update

    options = {"model.lora.r": 4, "algo.num_iterations": 2}
    merged = make_trainer(tmp_path / "merged", rec_data, engine="hf", **options)
    assert (
        merged.updater.foreign and merged.updater.sampler is None
    )  # the policy's log-probs, not exactly the trainer's
    _, stats = one_update(merged)
    assert 0 <= stats["rollout/logp_diff"] < 1e-4 and stats["rollout/is_weight"] == pytest.approx(1.0, abs=1e-3)
    unmerged = make_trainer(tmp_path / "unmerged", rec_data, engine="hf", **options, **{"rollout.hf.merge_lora": False})
    assert not unmerged.updater.foreign
    _, stats = one_update(unmerged)
    assert "rollout/logp_diff" not in stats and "rollout/is_weight" not in stats


def test_lora_checkpoints_of_runs_in_relative_folders_load_from_any_directory(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """An adapter records its base model's path; written relative to where the run started
    (`models/base`, `runs/rl/base`), export, eval and resume from another directory failed, and
    resume said to move the healthy checkpoint away."""
    from tests.trainer.test_sft import sft_overrides

    shutil.copytree(tiny_qwen25, tmp_path / "models" / "base")
    monkeypatch.chdir(tmp_path)
    sft = ["sft", *sft_overrides("runs/sft", rec_data, **{"sft.steps": 1, "model.lora.r": 4})]
    assert main([*sft, "model.path=models/base"]) == 0
    sft_checkpoint = tmp_path / "runs" / "sft" / "checkpoints" / "step-0000001"
    rl = overrides("runs/rl", rec_data, **{"model.path": "runs/sft/checkpoints/step-0000001", "trainer.steps": 1})
    assert main(["train", *rl]) == 0
    checkpoint = tmp_path / "runs" / "rl" / "checkpoints" / "step-0000001"
    assert Path(json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]).is_absolute()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["export", str(checkpoint), str(tmp_path / "exported")]) == 0
    assert main(["export", str(sft_checkpoint), str(tmp_path / "exported-sft")]) == 0
    elsewhere = [f"{key}={tmp_path / value}" if key in ("trainer.output_dir", "model.path") else f"{key}={value}"
                 for key, value in (item.split("=", 1) for item in rl)]  # fmt: skip
    assert main(["train", *elsewhere, "trainer.steps=2"]) == 0  # resumed


def test_adapter_dropout_is_on_only_inside_and_its_masks_follow_the_seed():
    from peft import LoraConfig, get_peft_model

    from vlrl.models.lora import adapters_dropping_out

    torch.manual_seed(0)
    model = get_peft_model(
        torch.nn.Sequential(torch.nn.Linear(64, 64)), LoraConfig(r=8, lora_dropout=0.5, target_modules=["0"])
    ).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    x = torch.randn(4, 64)

    def under(seed):
        with adapters_dropping_out(model, seed):
            return model(x)

    plain = model(x)
    # PEFT's LoRA forward with the masks seed 1 draws, by hand: W x + B A dropout(x) * alpha / r
    layer = model.base_model.model[0]
    torch.manual_seed(1)
    dropped = torch.nn.functional.dropout(x, 0.5, training=True)
    lora = layer.lora_B["default"](layer.lora_A["default"](dropped)) * layer.scaling["default"]
    assert torch.allclose(under(1), layer.base_layer(x) + lora, atol=1e-6)
    assert torch.equal(under(1), under(1)) and not torch.equal(under(1), under(2))
    assert not torch.equal(under(1), plain) and torch.equal(model(x), plain)  # off again outside
    state = torch.get_rng_state()
    under(3)
    assert torch.equal(torch.get_rng_state(), state)  # the generator outside is left where it was


@pytest.mark.parametrize("names", ["[]", "['.*']", "[q_proj, 'o_proj|lm_head']"])
def test_lora_target_modules_are_layer_names_not_patterns(names):
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"model.lora.target_modules must name the layers to adapt"):
        load_config(None, ["model.lora.r=4", f"model.lora.target_modules={names}"])


def test_lora_target_modules_that_name_no_layer_of_the_model_are_refused_naming_its_layers(tiny_qwen25):
    from vlrl.config import ConfigError

    cfg = load_config(None, ["model.path=tiny:qwen2_5_vl", "model.lora.r=4", "model.lora.target_modules=[qkv]"])
    with pytest.raises(ConfigError, match=r"\['qkv'\] name no linear layer .* named down_proj, gate_proj, k_proj"):
        load_model(cfg.model, str(tiny_qwen25), "cpu")
    # one name of the family's is enough (a MoE family's experts are no linear layers): PEFT skips the rest
    cfg = load_config(None, ["model.path=tiny:qwen2_5_vl", "model.lora.r=4", "model.lora.target_modules=[qkv,q_proj]"])
    model = load_model(cfg.model, str(tiny_qwen25), "cpu")
    adapted = {n.partition(".lora_A")[0].rpartition(".")[2] for n, _ in model.named_parameters() if ".lora_A" in n}
    assert adapted == {"q_proj"}
    # a dotted name picks the layers under one parent, as PEFT's target_modules do
    cfg = load_config(None, ["model.path=tiny:qwen2_5_vl", "model.lora.r=4", "model.lora.target_modules=[mlp.up_proj]"])
    model = load_model(cfg.model, str(tiny_qwen25), "cpu")
    adapted = {
        n.partition(".lora_A")[0].rsplit(".", 2)[-2:] == ["mlp", "up_proj"]
        for n, _ in model.named_parameters()
        if ".lora_A" in n
    }
    assert adapted == {True}


def test_a_merge_that_runs_out_of_memory_half_way_leaves_no_layer_computing_with_a_copy(monkeypatch):
    """The rollout's retry after an out-of-memory (rollout/parts.py) frees the merged copies: no
    layer merged before the failure still computes with (and holds) one."""
    from peft import LoraConfig, get_peft_model

    import vlrl.models.lora as lora

    net = torch.nn.Sequential()
    for name in ("a", "b", "c"):
        net.add_module(name, torch.nn.Linear(4, 4))
    model = get_peft_model(net, LoraConfig(r=2, target_modules=["a", "b", "c"]))
    real, made = lora.merged_weight, []

    def second_fails(module, weight):
        if len(made) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        made.append(module)
        return real(module, weight)

    monkeypatch.setattr(lora, "merged_weight", second_fails)
    merged = lora.MergedLoRA(model)
    with pytest.raises(torch.OutOfMemoryError), merged.merged():
        pass
    assert [layer for layer in lora_linears(model) if "forward" in vars(layer)] == []
    merged.release()
    assert merged.copies == {}


def test_adapters_switched_off_are_not_merged_in():
    from peft import LoraConfig, get_peft_model

    net = torch.nn.Sequential()
    net.add_module("proj", torch.nn.Linear(4, 4))
    model = get_peft_model(net, LoraConfig(r=2, target_modules=["proj"]))
    assert len(lora_linears(model)) == 1
    with model.disable_adapter():  # the reference model's forwards: the base weights alone
        assert lora_linears(model) == []


def test_use_rslora_scales_each_adapter_by_alpha_over_the_square_root_of_r_as_peft_does(tiny_qwen25):
    """PEFT's use_rslora (TRL's ModelConfig.use_rslora): scaling alpha / sqrt(r), not alpha / r;
    a layer's delta weight, and so a merged weight, follows it."""
    from peft.tuners.lora import LoraLayer

    from vlrl.models.lora import merged_weight

    scales = {}
    for rslora in (False, True):
        cfg = load_config(None, ["model.path=tiny:qwen2_5_vl", "model.lora.r=4", "model.lora.alpha=8",
                                 f"model.lora.use_rslora={str(rslora).lower()}"])  # fmt: skip
        model = load_model(cfg.model)
        layer = next(m for m in model.modules() if isinstance(m, LoraLayer))
        scales[rslora] = layer.scaling["default"]
        torch.nn.init.normal_(layer.lora_B["default"].weight, generator=torch.Generator().manual_seed(0))
        base = layer.get_base_layer().weight
        expected = base + scales[rslora] * (layer.lora_B["default"].weight @ layer.lora_A["default"].weight)
        torch.testing.assert_close(merged_weight(layer, base), expected)
    assert (scales[False], scales[True]) == (2.0, 4.0)  # 8 / 4 and 8 / sqrt(4)


def test_adding_lora_adapters_warns_nothing_the_user_cannot_act_on(tiny_qwen25):
    """PEFT 0.21 reads transformers 5's deprecated `is_gradient_checkpointing`: without vlrl's
    filter every LoRA command printed its FutureWarning."""
    import warnings

    cfg = load_config(None, ["model.path=tiny:qwen2_5_vl", "model.lora.r=2"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model(cfg.model)
    assert [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)] == []


def test_lora_targets_the_named_projections_of_the_language_model_and_none_of_the_vision_tower():
    """Qwen2.5-VL's two towers both have MLPs with an up_proj: the family's target pattern picks
    the language model's layers of the names given, and no vision layer."""
    import re

    from vlrl.models.build import TinySpec, build_tokenizer
    from vlrl.models.families import family_class
    from vlrl.models.tiny import build_model

    spec = TinySpec(arch="qwen2_5_vl")
    with torch.device("meta"):
        model = build_model(spec, build_tokenizer(spec))
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    assert any(n.startswith("model.visual.") and n.endswith(".up_proj") for n in linears)  # the case at stake
    target = family_class("qwen2_5_vl")().lora_target(["up_proj", "q_proj"])
    picked = {n for n in linears if re.match(target, n)}
    layers = range(spec.num_layers)
    assert picked == {f"model.language_model.layers.{i}.mlp.up_proj" for i in layers} | {
        f"model.language_model.layers.{i}.self_attn.q_proj" for i in layers
    }


EXPERTS = "[mlp.experts.gate_up_proj,mlp.experts.down_proj]"


@pytest.mark.parametrize("arch", ["qwen3_vl_moe", "qwen3_5_moe"])
def test_lora_on_a_mixture_of_experts_fused_weights_adapts_each_expert_and_merges_into_plain_weights(arch, tmp_path):
    """model.lora.target_parameters on the MoE families: an adapter on each fused expert tensor
    (PEFT's ParamWrapper, nested one per parameter) trains while the experts stay frozen, and
    what an engine or an export receives (`full_weights`: the adapters merged in) loaded into a
    plain model computes the adapted model's logits, as its saved adapter merged by `pretrained`."""
    from vlrl.models.loading import full_weights, save_model

    options = [f"model.path=tiny:{arch}", "model.dtype=float32", "model.lora.r=4"]
    cfg = load_config(None, [*options, f"model.lora.target_parameters={EXPERTS}"]).model
    torch.manual_seed(0)
    model = load_model(cfg).eval()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert all("lora_" in n for n in trained)  # the experts (and every base weight) frozen
    expert_adapters = [n for n in trained if ".mlp.experts." in n and "lora_B" in n]
    assert len(expert_adapters) == 2 * 2  # two fused tensors in each of the tiny build's two layers
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name and ".mlp.experts." in name:  # the experts' adapters alone move the model
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    ids = torch.randint(0, 300, (2, 12), generator=generator)
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with model.disable_adapter():
            plain_logits = model(input_ids=ids).logits
    assert (adapted - plain_logits).abs().max() > 1e-2

    plain = load_model(load_config(None, options[:2]).model).eval()
    weights = dict(full_weights(model))
    assert weights.keys() == plain.state_dict().keys()
    plain.load_state_dict(weights)
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, adapted, rtol=1e-4, atol=1e-5)

    save_model(model, tmp_path / "adapter")
    merged = pretrained(load_config(None, options[:2]).model, str(tmp_path / "adapter")).eval()
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted, rtol=1e-4, atol=1e-5)


def test_a_grpo_run_with_adapters_on_the_experts_moves_them_and_not_the_experts(tmp_path, rec_data):
    run = tmp_path / "run"
    options = {"model.path": "tiny:qwen3_vl_moe", "model.lora.target_parameters": EXPERTS, "trainer.steps": 1}
    train(load_config(None, overrides(run, rec_data, **options)))
    adapters = load_file(run / "checkpoints" / "step-0000001" / "adapter_model.safetensors")
    moved = [n for n, w in adapters.items() if ".mlp.experts." in n and "lora_B" in n and w.abs().max() > 0]
    assert len(moved) == 4 and all("lora_" in n for n in adapters)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["model.lora.target_parameters=[mlp.experts.up_proj]"], r"\['mlp.experts.up_proj'\] name no parameter of .* "
         r"fused \(3D\) parameters are mlp.experts.down_proj, mlp.experts.gate_up_proj"),
        ([f"model.lora.target_parameters={EXPERTS}", "model.lora.dropout=0.1"], r"target_parameters takes no dropout"),
        ([f"model.lora.target_parameters={EXPERTS}", "trainer.parallel=fsdp2"], r"fsdp2 is not built"),
        (["model.lora.target_parameters=['experts.*']"], r"target_parameters must name parameters"),
    ],
)  # fmt: skip
def test_lora_target_parameters_that_cannot_be_adapted_are_refused_saying_why(extra, message):
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        cfg = load_config(None, ["model.path=tiny:qwen3_vl_moe", "model.lora.r=4", *extra])
        load_model(cfg.model)
