"""LoRA: only adapters train, the adapter-free policy is the reference, checkpoints resume and evaluate."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from vlrl.cli import main
from vlrl.config import load_config
from vlrl.models.loading import load_model, pretrained
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


def test_lora_trains_adapters_resumes_and_evaluates(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    import vlrl.trainer.rl as rl

    loads = []
    original = rl.load_model
    monkeypatch.setattr(rl, "load_model", lambda *a, **k: loads.append(1) or original(*a, **k))
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(load_config(None, overrides(straight, rec_data, **{"trainer.steps": 3})))
    assert not loads  # beta > 0, yet no second model: the adapters are switched off for the reference
    kl = [json.loads(line)["kl"] for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert kl[0] == 0.0 and kl[-1] > 0.0  # lora_B starts at zero: the policy leaves the reference only as it trains
    checkpoint = straight / "checkpoints" / "step-0000003"
    assert (checkpoint / "adapter_config.json").is_file() and (checkpoint / "adapter_model.safetensors").is_file()
    adapters = load_file(checkpoint / "adapter_model.safetensors")
    assert adapters and all("lora_" in name for name in adapters)
    assert any(not torch.equal(w, torch.zeros_like(w)) for name, w in adapters.items() if "lora_B" in name)

    train(load_config(None, overrides(resumed, rec_data, **{"trainer.steps": 2})))
    train(load_config(None, overrides(resumed, rec_data, **{"trainer.steps": 3})))

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
    tmp_path, rec_data, tiny_qwen25, capsys
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
    rl_checkpoint = tmp_path / "rl-4" / "checkpoints" / "step-0000002"
    adapter = json.loads((rl_checkpoint / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(sft.checkpoint)  # resumed and evaluated on the SFT model

    # `vlrl export`: the RL adapter on the SFT adapter on the base, as one plain model that
    # transformers loads without PEFT, equal to the merge vlrl itself loads.
    from transformers import AutoModelForImageTextToText, AutoProcessor

    capsys.readouterr()
    assert main(["export", str(rl_checkpoint), str(tmp_path / "exported")]) == 0
    assert "(LoRA adapters merged into their base)" in capsys.readouterr().out
    assert not (tmp_path / "exported" / "adapter_config.json").exists()
    full = tmp_path / "rl-0" / "checkpoints" / "step-0000002"  # a full checkpoint has no adapters to merge
    assert main(["export", str(full), str(tmp_path / "exported-full")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote the full model of {full} to {tmp_path / 'exported-full'}"
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "exported")
    merged = dict(pretrained(model_cfg, str(rl_checkpoint)).named_parameters())
    assert all(torch.equal(w, merged[n]) for n, w in exported.named_parameters())
    assert any(not torch.equal(w, sft_model[n]) for n, w in exported.named_parameters())  # the RL adapter is in it
    processor = AutoProcessor.from_pretrained(tmp_path / "exported")
    assert processor.chat_template == AutoProcessor.from_pretrained(rl_checkpoint).chat_template is not None
