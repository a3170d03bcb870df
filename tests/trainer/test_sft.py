"""`vlrl sft`: the cold start learns the task's targets, checkpoints and resumes like RL."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from vlrl.cli import main
from vlrl.config import load_config
from vlrl.trainer.sft import target_ids, train_sft


def sft_overrides(run_dir, data, **extra):
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.max_pixels": 50176,
        "data.train": str(data),
        "task.name": "refcoco",
        "sft.output_dir": str(run_dir),
        "sft.prompts_per_step": 4,
        "sft.steps": 12,
        "sft.lr": 3e-3,
        "sft.progress": False,
        "sft.save_every": 6,
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def losses(run_dir):
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_sft_lowers_the_loss_on_the_targets(tmp_path, rec_data, tiny_qwen25, capsys):
    assert main(["sft", *sft_overrides(tmp_path / "sft", rec_data)]) == 0
    assert "checkpoint:" in capsys.readouterr().out
    values = losses(tmp_path / "sft")
    assert len(values) == 12
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["data_skipped_records"] == 0 and "data_skipped_records" not in rows[1]  # said once, at step 1
    assert sum(values[-3:]) / 3 < 0.7 * sum(values[:3]) / 3
    assert main(["plot", str(tmp_path / "sft")]) == 0  # the files say what kind of run drew them
    assert sorted(p.name for p in (tmp_path / "sft" / "plots").iterdir()) == ["sft_loss.png"]


def test_sft_resumes_to_the_same_weights(tmp_path, rec_data, tiny_qwen25):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train_sft(load_config(None, sft_overrides(straight, rec_data)))
    train_sft(load_config(None, sft_overrides(resumed, rec_data, **{"sft.steps": 6})))
    train_sft(load_config(None, sft_overrides(resumed, rec_data)))
    assert losses(resumed) == losses(straight)
    a = load_file(straight / "checkpoints" / "step-0000012" / "model.safetensors")
    b = load_file(resumed / "checkpoints" / "step-0000012" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_step_without_a_usable_sample_logs_no_loss_rather_than_a_perfect_one(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    import vlrl.trainer.sft as sft

    render_usable, calls = sft.render_usable, []

    def nothing_usable_at_first(items, rendered):
        calls.append(len(items))
        kept = render_usable(items, rendered)
        return ([], [], kept[2]) if len(calls) == 1 else kept  # step 1: every sample left out

    monkeypatch.setattr(sft, "render_usable", nothing_usable_at_first)
    assert main(["sft", *sft_overrides(tmp_path / "sft", rec_data, **{"sft.steps": 2})]) == 0
    first, second = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert first["target_tokens"] == 0 and "loss" not in first and "perplexity" not in first
    assert second["target_tokens"] > 0 and second["loss"] > 0 and second["perplexity"] > 1
    assert main(["plot", str(tmp_path / "sft")]) == 0  # a curve with a step missing


def test_lora_dropout_acts_in_sft_and_a_resumed_run_draws_the_masks_an_uninterrupted_one_did(
    tmp_path, rec_data, tiny_qwen25
):
    lora = {"model.lora.r": 4, "sft.steps": 4, "sft.save_every": 2, "sft.lr": 1e-2}
    runs = {name: tmp_path / name for name in ("plain", "straight", "resumed")}
    train_sft(load_config(None, sft_overrides(runs["plain"], rec_data, **lora)))
    dropped = {**lora, "model.lora.dropout": 0.5}
    train_sft(load_config(None, sft_overrides(runs["straight"], rec_data, **dropped)))
    train_sft(load_config(None, sft_overrides(runs["resumed"], rec_data, **{**dropped, "sft.steps": 2})))
    train_sft(load_config(None, sft_overrides(runs["resumed"], rec_data, **dropped)))
    plain, straight = losses(runs["plain"]), losses(runs["straight"])
    assert straight[0] == plain[0]  # the adapters start at B = 0: dropout on their input changes nothing yet
    assert all(a != b for a, b in zip(straight[1:], plain[1:], strict=True))  # then it does, every step
    assert losses(runs["resumed"]) == straight
    a, b = (
        load_file(runs[n] / "checkpoints" / "step-0000004" / "adapter_model.safetensors")
        for n in ("straight", "resumed")
    )
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_sft_warns_about_keys_of_the_rl_loop_and_runs_its_own(tmp_path, rec_data, tiny_qwen25, capsys):
    run_dir = tmp_path / "sft"
    args = sft_overrides(run_dir, rec_data, **{"sft.steps": 2})
    assert main(["sft", *args, "trainer.steps=5", "rollout.num_generations=2"]) == 0
    out = capsys.readouterr().out
    assert (
        "trainer.steps is read by vlrl train, not by vlrl sft: it has no effect on training; sft.steps is the key that "
        "applies" in out
    )
    assert (
        "rollout.num_generations is read by vlrl train, not by vlrl sft: it has no effect on training; it is recorded "
        "in config.yaml, for `vlrl eval` of the run's checkpoints" in " ".join(out.split())
    )
    assert "sft.steps is read" not in out and "model.path is read" not in out
    assert len(losses(run_dir)) == 2  # sft.steps, not trainer.steps


def test_train_warns_about_keys_of_the_sft_loop(capsys):
    assert (
        main(["train", "--task", "refcoco", "sft.lr=0.1", "trainer.lr=0.1", "sft.turn_end=template", "algo.beta=-1"])
        == 2
    )
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "sft.lr is read by vlrl sft, not by vlrl train: it has no effect on training; trainer.lr is the key that applies"
        in out
    )
    assert "trainer.lr is read" not in out
    assert "sft.turn_end is read by vlrl sft, not by vlrl train: it has no effect on training" in out
    assert "trainer.turn_end" not in out  # the trainer has no such key


def test_a_target_is_trained_to_end_with_one_end_of_turn_token(tiny_qwen2):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen2)
    eos = tokenizer.eos_token_id
    assert tokenizer.convert_ids_to_tokens(eos) == "<|im_end|>"
    plain = "<think>2</think>\n<answer>2</answer>"
    assert target_ids(tokenizer, plain) == [*tokenizer(plain, add_special_tokens=False)["input_ids"], eos]
    # Perception-R1 counting's target ends with <|im_end|> itself (its format reward requires it)
    pr1 = "<|object_ref_start|>dog<|object_ref_end|><|box_start|>(1,2),(1,2)<|box_end|><|im_end|>"
    ids = target_ids(tokenizer, pr1)
    assert ids[-1] == eos and ids[-2] != eos and ids == tokenizer(pr1, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_turn_end_template_trains_the_completion_as_trls_sft_trainer_renders_it(arch):
    """TRL's completion-only loss trains what the chat template writes of the assistant's turn
    after the prompt (trl/trainer/sft_trainer.py: prompt + completion rendered, the prompt's
    tokens cut off): the target, `<|im_end|>` and the line break after it."""
    from transformers import AutoProcessor

    from vlrl.config import ModelConfig
    from vlrl.models.build import TinySpec
    from vlrl.models.tiny import tiny_checkpoint
    from vlrl.trainer.sft import template_turn_end

    processor = AutoProcessor.from_pretrained(tiny_checkpoint(TinySpec(arch=arch)))
    tokenizer, model = processor.tokenizer, ModelConfig()
    prompt = [{"role": "user", "content": [{"type": "text", "text": "How many?"}]}]
    for target in ("<think>2</think>\n<answer>2</answer>", "<answer>(1,2),(3,4)</answer><|im_end|>"):
        full = [
            *prompt,
            {"role": "assistant", "content": [{"type": "text", "text": target.removesuffix("<|im_end|>")}]},
        ]
        rendered = processor.apply_chat_template(full, tokenize=False)
        head = processor.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        assert rendered.startswith(head)
        completion = tokenizer(rendered, add_special_tokens=False)["input_ids"][len(tokenizer(head)["input_ids"]) :]
        assert target_ids(tokenizer, target, template_turn_end(processor, model)) == completion
        assert target_ids(tokenizer, target) == completion[:-1]  # eos: the line break after <|im_end|> left out
    assert tokenizer.convert_ids_to_tokens(template_turn_end(processor, model)) == ["<|im_end|>", "Ċ"]
    assert template_turn_end(processor, ModelConfig(chat_template="none")) == [tokenizer.eos_token_id]


def test_an_sft_step_under_turn_end_template_trains_one_more_token_a_row(tmp_path, rec_data, tiny_qwen25):
    rows = {}
    for turn_end in ("eos", "template"):
        overrides = {"sft.steps": 1, "sft.turn_end": turn_end}
        train_sft(load_config(None, sft_overrides(tmp_path / turn_end, rec_data, **overrides)))
        rows[turn_end] = json.loads((tmp_path / turn_end / "metrics.jsonl").read_text().splitlines()[0])
    assert rows["template"]["target_tokens"] == rows["eos"]["target_tokens"] + 4  # sft.prompts_per_step rows
    assert rows["template"]["loss"] != rows["eos"]["loss"]


def test_the_dropout_seed_of_any_run_seed_is_one_torch_takes():
    from vlrl.trainer.sft import dropout_seed

    seeds = {dropout_seed(seed, step, rank) for seed in (0, 7, 10**12, 2**62) for step in (1, 2) for rank in (0, 1)}
    assert len(seeds) == 16 and all(0 <= s < 2**63 for s in seeds)
    torch.Generator().manual_seed(max(seeds))


def test_sft_counts_skipped_updates_moves_the_lr_past_them_and_stops_after_too_many_in_a_row(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    from tests.trainer.test_train import unfinite_at

    unfinite_at(monkeypatch, {2, 3})
    options = {"sft.steps": 4, "sft.max_consecutive_nonfinite": 2, "sft.lr_schedule": "linear"}
    options |= {"sft.warmup_steps": 1, "sft.lr_schedule_per": "optimizer_step"}
    with pytest.raises(
        RuntimeError, match=r"stopped at step 3: 2 steps in a row skipped an update for a non-finite loss"
    ):
        train_sft(load_config(None, sft_overrides(tmp_path / "sft", rec_data, **options)))
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["skipped_updates"] for r in rows] == [0, 1, 2]
    # Each step's lr, before its update: warmup from 0, then linear over the 3 positions left; the
    # skipped update of step 2 moves the schedule on as a taken one does
    assert [r["lr"] for r in rows] == pytest.approx([0.0, 3e-3, 2e-3])


def test_each_sft_step_logs_its_perplexity_as_the_exponent_of_its_loss_and_its_gradients_norm(
    tmp_path, rec_data, tiny_qwen25
):
    import math

    train_sft(load_config(None, sft_overrides(tmp_path / "sft", rec_data, **{"sft.steps": 2})))
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["loss"] > 5 and r["perplexity"] == pytest.approx(math.exp(r["loss"]), rel=1e-9)
        assert r["grad_norm"] > 0 and math.isfinite(r["grad_norm"])
        assert (r["skipped_updates"], r["skipped_samples"]) == (0, 0)


def test_an_sft_step_packs_its_rows_as_the_rl_update_does_and_its_loss_does_not_depend_on_the_packing(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """sft.token_budget splits a step into micro-batches, chosen as the RL update chooses them
    (`update_micro_batches`: the fewer padded tokens of the rows' order and longest target
    first); the loss and the gradient's norm are those of the whole batch in one forward; it
    logs the share of padding its forwards computed (`update_padding`), as RL does."""
    from vlrl.trainer import batch as packing

    plans = []

    def spy(prompt_index, prompt_lengths, row_lengths, budget):
        plan = packing.update_micro_batches(prompt_index, prompt_lengths, row_lengths, budget)
        plans.append((plan, (prompt_index, prompt_lengths, row_lengths), budget))
        return plan

    monkeypatch.setattr("vlrl.trainer.sft.update_micro_batches", spy)
    rows = {}
    for budget in (100000, 400):
        run_dir = tmp_path / str(budget)
        overrides = {"sft.steps": 1, "sft.token_budget": budget, "sft.prompts_per_step": 8}
        train_sft(load_config(None, sft_overrides(run_dir, rec_data, **overrides)))
        rows[budget] = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    (whole, _, _), (split, shape, budget) = plans
    assert len(whole) == 1 and len(split) > 1
    in_order, longest = packing.micro_batches(*shape, budget), packing.longest_first(*shape, budget)
    assert packing.padded_tokens(longest, *shape) < packing.padded_tokens(in_order, *shape)  # the packing matters
    assert split == longest
    # the logged share of the forwards' tokens that were padding, by hand from the plan's lengths
    unpadded = sum(shape[1][i] + shape[2][i] for i in shape[0])
    assert rows[400]["update_padding"] == pytest.approx(1 - unpadded / packing.padded_tokens(split, *shape))
    assert rows[400]["update_padding"] < rows[100000]["update_padding"]  # one micro-batch pads to the longest row
    assert rows[400]["loss"] == pytest.approx(rows[100000]["loss"], rel=1e-5)
    assert rows[400]["grad_norm"] == pytest.approx(rows[100000]["grad_norm"], rel=1e-4)
