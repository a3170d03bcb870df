"""A chat template that opens the answer for the model (Qwen3-VL-Thinking's and Qwen3.5's
`<think>\n` after the assistant's header): a task's rewards read the answer as opened, SFT
targets go on from it, a benchmark reads the completion alone as lmms-eval does."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tasks.refcoco import RefCOCO
from vlrl.config import ModelConfig, load_config
from vlrl.eval.harness import answer
from vlrl.models.batch import Prompt
from vlrl.models.prompting import answer_prefill
from vlrl.tasking.registry import task_class
from vlrl.trainer.rl import train
from vlrl.trainer.sft import after_prefill, train_sft

OPENED = "<|im_start|>assistant\n{% endif %}"


# Qwen3.5's switch: thinking on unless the template's enable_thinking is false, which closes the block
SWITCH = "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}"


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory, tiny_qwen25):
    """The tiny Qwen2.5-VL with a template whose generation prompt opens `<think>\n`, or closes
    the block when told enable_thinking=false."""
    path = tmp_path_factory.mktemp("thinking") / "model"
    shutil.copytree(tiny_qwen25, path)
    template = path / "chat_template.jinja"
    text = template.read_text()
    assert text.count(OPENED) == 1
    template.write_text(text.replace(OPENED, "<|im_start|>assistant\n" + SWITCH + "{% endif %}"))
    return path


def test_the_prefill_is_a_reasoning_block_the_template_opened_after_the_assistants_header():
    user = "<|im_start|>user\nWhere is the cat?<|im_end|>\n"
    templated, raw = ModelConfig(), ModelConfig(chat_template="none")
    assert answer_prefill(user + "<|im_start|>assistant\n", templated) == ""
    assert answer_prefill(user + "<|im_start|>assistant\n<think>\n", templated) == "<think>\n"
    # Qwen3.5's with thinking off: the block is closed, the answer follows it alone
    assert answer_prefill(user + "<|im_start|>assistant\n<think>\n\n</think>\n\n", templated) == ""
    # an earlier turn's answer is not the prefill: the last assistant header is the one answered after
    earlier = "<|im_start|>assistant\nold<think>x<|im_end|>\n" + user
    assert answer_prefill(user + earlier + "<|im_start|>assistant\n<think>\n", templated) == "<think>\n"
    # no template: the raw prompt is the user's, whatever it quotes
    assert answer_prefill("Example: <|im_start|>assistant\n<think>\nNow you. Answer:", raw) == ""


def test_a_target_opening_with_the_prefill_goes_on_from_it():
    assert after_prefill("<think>a cat</think>\n<answer>1</answer>", "<think>\n") == "a cat</think>\n<answer>1</answer>"
    assert after_prefill("<think>\na cat</think>", "<think>\n") == "a cat</think>"
    assert after_prefill("<answer>1</answer>", "<think>\n\n</think>\n\n") == "<answer>1</answer>"
    assert after_prefill("<think>x</think>", "") == "<think>x</think>"


def test_a_benchmark_reads_the_completion_alone_and_a_task_the_answer_as_opened():
    text = "<|im_start|>assistant\n<think>\n"
    opened = Prompt(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), {}, text, prefill="<think>\n")
    assert answer(RefCOCO(), opened, "a cat</think><answer>[1,2,3,4]</answer>") == (
        "<think>\na cat</think><answer>[1,2,3,4]</answer>"
    )
    benchmark = task_class("refcoco_bbox_rec_val")()
    assert answer(benchmark, opened, "a cat</think>[1,2,3,4]") == "a cat</think>[1,2,3,4]"


def overrides(run_dir, data, model, section):
    values = {
        "model.path": str(model), "model.max_pixels": 12544, "data.train": str(data), "task.name": "refcoco",
        "rollout.num_generations": 2, "rollout.max_new_tokens": 8, f"{section}.output_dir": str(run_dir),
        f"{section}.prompts_per_step": 2, f"{section}.steps": 1, f"{section}.progress": False,
    }  # fmt: skip
    return [f"{k}={v}" for k, v in values.items()]


def test_rl_rewards_and_samples_read_the_answer_as_the_template_opened_it(
    tmp_path, rec_data, thinking_model, monkeypatch
):
    import vlrl.trainer.rl as rl

    read, score = [], rl.score
    monkeypatch.setattr(rl, "score", lambda task, texts, samples: read.extend(texts) or score(task, texts, samples))
    train(load_config(None, overrides(tmp_path / "run", rec_data, thinking_model, "trainer")))
    assert len(read) == 4 and all(text.startswith("<think>\n") for text in read)
    logged = [json.loads(line)["completion"] for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert logged and all(text in read for text in logged)  # the groups shown, as scored


def test_chat_template_kwargs_reach_the_template_and_a_closed_block_is_no_prefill(
    tmp_path, rec_data, thinking_model, monkeypatch
):
    """model.chat_template_kwargs.enable_thinking=false, as Qwen3.5 without thinking: the prompt
    ends in the closed block, and rewards read the completion alone."""
    import vlrl.trainer.rl as rl
    from vlrl.models.loading import frame_spec, load_processor
    from vlrl.models.prompting import render_prompt

    off = ["model.chat_template_kwargs.enable_thinking=false"]
    cfg = load_config(None, [*overrides(tmp_path / "run", rec_data, thinking_model, "trainer"), *off])
    task = RefCOCO()
    sample = task.load(rec_data, frame_spec(cfg.model)).samples[0]
    prompt = render_prompt(load_processor(cfg.model), task.messages(sample), sample, cfg.model)
    assert prompt.text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and prompt.prefill == ""
    read, score = [], rl.score
    monkeypatch.setattr(rl, "score", lambda task, texts, samples: read.extend(texts) or score(task, texts, samples))
    train(cfg)
    assert len(read) == 4 and not any(text.startswith("<think>") for text in read)


def test_sft_targets_go_on_from_the_opened_think_tag(tmp_path, rec_data, thinking_model, monkeypatch):
    import vlrl.trainer.sft as sft

    trained, target_ids = [], sft.target_ids
    monkeypatch.setattr(
        sft, "target_ids", lambda tokenizer, text, end=None: trained.append(text) or target_ids(tokenizer, text, end)
    )
    train_sft(load_config(None, overrides(tmp_path / "sft", rec_data, thinking_model, "sft")))
    assert len(trained) == 2 and not any(text.startswith("<think>") for text in trained)
    assert all("</think>\n<answer>" in text for text in trained)


def test_eval_of_a_task_scores_and_logs_the_answer_as_the_template_opened_it(tmp_path, rec_data, thinking_model):
    from vlrl.cli import main
    from vlrl.eval.layout import samples_path

    out = tmp_path / "eval"
    args = ["eval", "--task", f"refcoco={rec_data}", "--model", str(thinking_model), "--out", str(out), "--limit", "2"]
    assert main([*args, "model.max_pixels=12544", "eval.max_new_tokens=4"]) == 0
    lines = [json.loads(line) for line in samples_path(out, "refcoco").read_text().splitlines()]
    assert len(lines) == 2 and all(line.get("resps", line["filtered_resps"]).startswith("<think>\n") for line in lines)


def test_a_templated_prompt_without_an_assistant_header_has_no_prefill():
    """A chat template that writes no ChatML assistant header opened no answer: a `<think>` in the
    prompt is the user's text, not a reasoning block the model goes on from."""
    assert answer_prefill("Question: why?\n<think>\n", ModelConfig()) == ""
