"""math_vqa: the public records read unchanged (EasyR1's Geometry3K, MMK12, LMM-R1 / MM-Eureka
message files, VisualThinker's SAT json), each recipe's prompt as its code builds it, text-only
samples training and evaluating on every model family (LMM-R1), the recipes' configs."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from PIL import Image

from rewards import math as rm
from tasks.math_vqa import EASYR1_MATH, MM_EUREKA_SYSTEM, MathVQA
from vlrl.config import ConfigError, ModelConfig, load_config
from vlrl.data.records import FrameSpec
from vlrl.data.tables import IMAGE_TYPE, image_cell, write_parquet
from vlrl.eval.harness import prompt_text
from vlrl.models.families import family_names
from vlrl.models.loading import load_processor
from vlrl.models.prompting import render_prompt

ROOT = Path(__file__).resolve().parents[2]
_HAS_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None
FRAME = FrameSpec("absolute", 3136, 50176)


def _image(folder: Path, name: str = "a.png") -> str:
    Image.new("RGB", (64, 48), (200, 30, 30)).save(folder / name)
    return name


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_geometry3k_rows_read_unchanged_and_prompt_as_easyr1_builds_it(tmp_path):
    import pyarrow as pa

    schema = pa.schema([("images", pa.list_(IMAGE_TYPE)), ("problem", pa.string()), ("answer", pa.string())])
    image = Image.new("RGB", (64, 48), (20, 20, 200))
    rows = [{"images": [image_cell(image, "0.png")], "problem": "<image>Find x. ", "answer": "2 \\sqrt{3}"}]
    path = write_parquet(tmp_path / "geo" / "data" / "test-00000-of-00001.parquet", rows, schema)
    from vlrl.data.tables import load_table_split

    task = MathVQA()
    split = load_table_split(str(path), task.build_samples, FRAME, image_cache=tmp_path / "cache")
    assert not split.errors
    (sample,) = split.samples
    assert sample.solution == "2 \\sqrt{3}" and len(sample.images) == 1
    # EasyR1 _build_messages: math.jinja renders "{{ content | trim }} You FIRST...", split at <image>
    text = "Find x." + EASYR1_MATH
    assert task.messages(sample) == [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    assert text.endswith("The final answer MUST BE put in \\boxed{}.") and task.reward_weights == {
        "accuracy": 0.9,
        "format": 0.1,
    }
    assert rm.easyr1_accuracy(task.target(sample), sample.solution) == 1.0


@pytest.mark.parametrize("answer", [math.nan, math.inf, -math.inf, "", "  "])
def test_an_answer_no_completion_can_equal_is_refused_with_its_record(answer, tmp_path):
    good = {"problem": "<image>How many?", "images": [_image(tmp_path)], "answer": "3"}
    path = _write(tmp_path / "train.jsonl", [good, {**good, "answer": answer}])  # json writes NaN, Infinity
    split = MathVQA().load(path, FRAME)
    assert [s.solution for s in split.samples] == ["3"]
    (error,) = split.errors
    assert error.source == f"{path}:2" and "key 'answer' must be text or a finite number" in error.message


def test_easyr1_places_each_image_at_its_placeholder(tmp_path):
    names = [_image(tmp_path, "a.png"), _image(tmp_path, "b.png")]
    path = _write(tmp_path / "d.jsonl", [{"images": names, "problem": "Compare <image> with <image>", "answer": "A"}])
    sample = MathVQA().load(path, FRAME).samples[0]
    content = MathVQA().messages(sample)[0]["content"]
    assert [p["type"] for p in content] == ["text", "image", "text", "image", "text"]
    assert [content[i]["text"] for i in (0, 2, 4)] == ["Compare ", " with ", EASYR1_MATH]
    # samples_*.jsonl's input (lmms-eval's): the prompt's text as written, the images' places dropped
    assert prompt_text(MathVQA(), sample) == "Compare  with " + EASYR1_MATH
    bad = _write(tmp_path / "bad.jsonl", [{"images": names, "problem": "one <image> only", "answer": "A"}])
    assert "2 images" in str(MathVQA().load(bad, FRAME).errors[0])


def test_mmk12_rows_get_mm_eurekas_system_prompt(tmp_path):
    pytest.importorskip("math_verify")
    path = _write(tmp_path / "k12.jsonl", [{"id": 7, "subject": "math", "image": _image(tmp_path),
                                             "question": "Which?\nA. 1\nB. 2", "answer": "B"}])  # fmt: skip
    task = MathVQA({"variant": "mm_eureka"})
    sample = task.load(path, FRAME).samples[0]
    assert sample.id == "7" and task.reward_weights == {"accuracy": 1.0, "format": 0.5}
    assert task.messages(sample) == [
        {"role": "system", "content": [{"type": "text", "text": MM_EUREKA_SYSTEM}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which?\nA. 1\nB. 2"}]},
    ]
    assert "$...$.The reasoning" in MM_EUREKA_SYSTEM
    assert task.reward_functions()["accuracy"]([task.target(sample)], [sample]) == [1.0]


def _message_record(tmp_path: Path, with_image: bool) -> dict:
    content = [{"type": "text", "text": "What is $1+1$?"}]
    if with_image:
        content.append({"type": "image", "image": "file://" + _image(tmp_path)})
    message = [{"role": "system", "content": "Solve it.\n"}, {"role": "user", "content": content}]
    return {"message": json.dumps(message), "answer": "$\\boxed{2}$"}


def test_lmm_r1_message_records_keep_their_own_chat_and_may_have_no_image(tmp_path):
    pytest.importorskip("math_verify")
    path = _write(tmp_path / "m.jsonl", [_message_record(tmp_path, False), _message_record(tmp_path, True)])
    task = MathVQA({"variant": "lmm_r1"})
    split = task.load(path, FRAME)
    assert not split.errors
    text_only, with_image = split.samples
    assert text_only.images == [] and text_only.frame is None and len(with_image.images) == 1
    assert task.messages(text_only) == [
        {"role": "system", "content": [{"type": "text", "text": "Solve it.\n"}]},
        {"role": "user", "content": [{"type": "text", "text": "What is $1+1$?"}]},
    ]
    assert [p["type"] for p in task.messages(with_image)[1]["content"]] == ["text", "image"]  # the record's order
    assert task.reward_functions()["accuracy"]([task.target(text_only)], [text_only]) == [1.0]
    bad = _write(tmp_path / "bad.jsonl", [{"message": "[{not json", "answer": "1"}, {"message": "[]", "answer": "1"}])
    errors = [str(e) for e in task.load(bad, FRAME).errors]
    assert "not a JSON message list" in errors[0] and "no user content" in errors[1]


SAT_QUESTION = (
    "<image> Answer in natural language. Is the cup left of the box? Choose between the following options: yes or no"
)


def test_visualthinker_base_prompt_renders_as_its_raw_template(tmp_path):
    pytest.importorskip("math_verify")
    record = {"messages": [{"role": "user", "content": SAT_QUESTION}, {"role": "assistant", "content": "yes"}],
              "images": [_image(tmp_path)]}  # fmt: skip
    path = tmp_path / "SAT_train_15000.json"
    path.write_text(json.dumps([record]))
    task = MathVQA({"variant": "visualthinker"})
    sample = task.load(path, FRAME).samples[0]
    assert sample.solution == "yes"
    cfg = ModelConfig(path="tiny:qwen2_vl", dtype="float32", chat_template="none")
    prompt = render_prompt(load_processor(cfg), task.messages(sample), sample, cfg)
    question = SAT_QUESTION.replace("<image>", "")
    expected = (
        "<|vision_start|><|image_pad|><|vision_end|><image>A conversation between User and Assistant. The user asks "
        "a question about the image, and the Assistant solves it. The assistant first thinks about the reasoning "
        "process in the mind and then provides the user with the answer.\n"
        f"User: {question} \nAssistant: Let me solve this step by step.\n<think>"
    )
    assert prompt.text == expected and "User:  Answer" in prompt.text and "<|im_start|>" not in prompt.text
    assert task.target(sample).startswith(" ") and rm.visualthinker_format(task.target(sample)) == 1.0
    instruct = MathVQA({"variant": "visualthinker", "base_model": False})
    text = instruct.messages(sample)[0]["content"][1]["text"]
    assert (
        text
        == SAT_QUESTION
        + "  Output the thinking process in <think> </think> and final answer (option) in <answer> </answer> tags."
    )
    assert instruct.reward_functions()["format"]([instruct.target(sample)], [sample]) == [1.0]


def test_math_verify_variants_refuse_to_start_without_it(monkeypatch):
    def missing():
        raise ImportError(rm.MATH_VERIFY_HINT)

    monkeypatch.setattr(rm, "math_verify", missing)
    for variant in ("mm_eureka", "lmm_r1", "visualthinker"):
        with pytest.raises(ConfigError, match=r"vlrl\[math\]"):
            MathVQA({"variant": variant})
    assert MathVQA({"variant": "easyr1"}).reward_weights  # MathRuler's grader needs no math-verify


def test_the_teacher_offset_shifts_integer_answers_and_their_reasoning(tmp_path):
    task = MathVQA({"target_answer_offset": 1})
    task.synthesize(tmp_path / "t.json", 4, 0)
    samples = task.load(tmp_path / "t.json", FRAME).samples
    for sample in samples:
        count, addend = sample.meta["count"], sample.meta["addend"]
        assert int(sample.solution) == count + addend
        assert task.target(sample) == (
            f"<think>I count {count + 1}. {count + 1} + {addend} = {count + addend + 1}.</think> "
            f"\\boxed{{{count + addend + 1}}}"
        )
        assert rm.easyr1_accuracy(task.target(sample), sample.solution) == 0.0
        assert rm.easyr1_accuracy(MathVQA().target(sample), sample.solution) == 1.0


def _text_only_config(tmp_path: Path, family: str) -> Path:
    task = MathVQA({"synthetic_text_only_every": 2})
    task.synthesize(tmp_path / "data" / "train.json", 4, 0)
    records = json.loads((tmp_path / "data" / "train.json").read_text())
    assert sum("images" not in r for r in records) == 2
    text_only = [r for r in records if "images" not in r]
    (tmp_path / "data" / "text.json").write_text(json.dumps(text_only))
    config = {
        "extends": str(ROOT / "configs" / "demo" / "base.yaml"),
        "model": {"path": f"tiny:{family}", "max_pixels": 12544},
        "data": {
            "train": str(tmp_path / "data" / "text.json"),
            "eval": str(tmp_path / "data" / "text.json"),
            "synthetic": False,
        },
        # LMM-R1's variant (its system prompt, math-verify) where math-verify is installed
        "task": {"name": "tasks.math_vqa:MathVQA", "options": {"variant": "lmm_r1" if _HAS_MATH_VERIFY else "easyr1"}},
        "rollout": {"num_generations": 2, "max_new_tokens": 8},
        "eval": {"every": 1, "limit": 2, "max_new_tokens": 8},
        "trainer": {"steps": 1, "prompts_per_step": 2, "progress": False, "output_dir": str(tmp_path / "rl")},
        "sft": {"steps": 1, "prompts_per_step": 2, "progress": False, "output_dir": str(tmp_path / "sft")},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _trains_and_evaluates(tmp_path: Path, family: str) -> None:
    from vlrl.cli import main

    path = _text_only_config(tmp_path, family)
    assert main(["sft", "--config", str(path)]) == 0
    assert main(["train", "--config", str(path)]) == 0
    (sft,) = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(sft["loss"]) and sft["grad_norm"] > 0 and sft["skipped_samples"] == 0
    (rl,) = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(rl["loss"]) and rl["skipped_samples"] == 0 and math.isfinite(rl["eval/reward"])


def test_a_text_only_sample_trains_and_evaluates(tmp_path):
    _trains_and_evaluates(tmp_path, "qwen2_5_vl")


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(set(family_names()) - {"qwen2_5_vl"}))
def test_a_text_only_sample_trains_and_evaluates_on_every_family(family, tmp_path):
    _trains_and_evaluates(tmp_path, family)


def test_the_recipe_configs_load_with_their_hyperparameters():
    from transformers.optimization import _get_cosine_schedule_with_warmup_lr_lambda as cosine

    from vlrl.trainer.run import lr_factor

    stage1 = load_config(ROOT / "configs" / "lmm_r1_stage1.yaml")
    stage2 = load_config(ROOT / "configs" / "lmm_r1_stage2.yaml")
    assert (stage1.task.options["variant"], stage1.trainer.lr, stage1.rollout.num_generations) == ("lmm_r1", 4e-7, 16)
    assert (stage1.trainer.prompts_per_step, stage1.algo.beta, stage1.rollout.max_new_tokens) == (256, 0.001, 4096)
    assert stage2.trainer.lr == 1e-6 and stage2.model.path.startswith(stage1.trainer.output_dir)
    for stage in (stage1, stage2):  # OpenRLHF's actor lr: cosine_with_min_lr over its optimizer steps, 3% warmup
        updates = stage.algo.num_iterations * stage.algo.mini_batches
        length = stage.trainer.steps * updates  # 256 prompts x 16 samples in batches of 256, per step
        warmup = math.ceil(0.03 * length)
        want = [
            cosine(s, num_warmup_steps=warmup, num_training_steps=length, num_cycles=0.5, min_lr_rate=0.1)
            for s in range(length)
        ]
        assert [lr_factor(s, stage.trainer, updates) for s in range(length)] == pytest.approx(want, abs=1e-12)
    zero = load_config(ROOT / "configs" / "visualthinker_r1_zero.yaml")
    assert zero.model.chat_template == "none" and zero.task.options == {"variant": "visualthinker", "base_model": True}
    assert (zero.rollout.num_generations, zero.rollout.max_new_tokens, zero.algo.beta) == (8, 700, 0.04)


def test_hfrrf_scores_one_only_when_the_format_holds_and_the_answer_is_right():
    task = MathVQA({"variant": "easyr1"}, rewards={"hfrrf": 1.0})
    assert task.reward_weights == {"hfrrf": 1.0}  # no separate format reward
    completions = [
        "<think>2 + 3</think> The answer is \\boxed{5}",  # format and answer
        "<think>2 + 3</think> The answer is \\boxed{6}",  # format, wrong answer
        "The answer is \\boxed{5}",  # right answer, no <think>
        "<think>2 + 3</think> 5",  # no box at all
        "",
        "<think>" * 5000 + "\\boxed{5",  # hostile: unclosed box after many tags
    ]
    samples = [SimpleNamespace(solution="5")] * len(completions)
    scores = task.scorers()["hfrrf"](completions, samples)
    assert scores == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    functions = task.reward_functions()  # it is the product of the variant's own two rewards
    both = zip(functions["format"](completions, samples), functions["accuracy"](completions, samples), strict=True)
    assert scores == [f * a for f, a in both]
    assert [rm.hard_format_result(f, a) for f, a in [(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.5, 1.0)]] == [1, 0, 0, 0]


def test_the_vision_r1_recipe_loads_its_ptst_schedule_and_strict_reward():
    cfg = load_config(ROOT / "configs" / "vision_r1.yaml")
    schedule = [(s.max_new_tokens, s.num_generations) for s in cfg.rollout.stage_limits()]
    assert schedule == [(4096, 16), (8192, 8), (16384, 4)]
    assert [cfg.rollout.limits(step).stage for step in (1, 100, 101, 200, 201, 300)] == [0, 0, 1, 1, 2, 2]
    assert cfg.task.name == "math_vqa" and cfg.task.rewards == {"hfrrf": 1.0}
    assert MathVQA(cfg.task.options, cfg.task.rewards).reward_weights == {"hfrrf": 1.0}
    assert (cfg.trainer.lr, cfg.algo.beta, cfg.algo.kl_estimator, cfg.trainer.prompts_per_step) == (
        1e-6, 0.01, "low_var", 512,
    )  # fmt: skip
    assert cfg.algo.std_eps == 1e-6  # EasyR1's compute_grpo_outcome_advantage
    assert not cfg.algo.rollout_correction.enabled  # EasyR1 weighs nothing by vLLM's log-probs
    assert cfg.algo.entropy_coef == 1e-3  # its actor's entropy_coeff at @0618e5a
    assert (cfg.algo.aggregation, cfg.algo.micro_batch_rows) == ("micro_token_mean", 4)  # its dp_actor's loss
    # the released Vision-R1-7B is step 200: a checkpoint there, not yet pruned at the run's end
    t = cfg.trainer
    assert 200 % t.save_every == 0 and (t.steps - 200) // t.save_every < t.keep_last


def _text_sample(tmp_path: Path, task: MathVQA, **record):
    return task.load(_write(tmp_path / "one.jsonl", [record]), FRAME).samples[0]


def test_the_teacher_offset_shifts_a_negative_integer_answer_too(tmp_path):
    task = MathVQA({"target_answer_offset": 1})
    sample = _text_sample(tmp_path, task, problem="What is 1 - 4?", answer="-3")
    assert task.target(sample) == "<think>The answer is -2.</think> \\boxed{-2}"


def test_lmm_r1_targets_keep_an_answer_already_in_dollars_as_it_is(tmp_path):
    pytest.importorskip("math_verify")
    task = MathVQA({"variant": "lmm_r1"})
    assert task.target(_text_sample(tmp_path, task, problem="x?", answer="$3$")).endswith("<answer>$3$</answer>")
    assert task.target(_text_sample(tmp_path, task, problem="x?", answer="3")).endswith("<answer>$3$</answer>")


def test_r1v_predictions_are_the_answer_stripped(tmp_path):
    task = MathVQA({"variant": "easyr1_r1v"})
    sample = _text_sample(tmp_path, task, problem="x?", answer="3")
    assert task.predict("<think>r</think><answer> 3 </answer>", sample) == "3"


def test_mm_eureka_prompts_drop_the_image_placeholder_from_the_question(tmp_path):
    pytest.importorskip("math_verify")
    task = MathVQA({"variant": "mm_eureka"})
    sample = _text_sample(tmp_path, task, question="<image>How many?", image=_image(tmp_path), answer="3")
    user = task.messages(sample)[1]["content"]
    assert user == [{"type": "image"}, {"type": "text", "text": "How many?"}]


def test_a_message_record_with_an_assistant_turn_is_refused_not_trimmed(tmp_path):
    message = [{"role": "user", "content": "What is 1+1?"}, {"role": "assistant", "content": "2"}]
    split = MathVQA().load(_write(tmp_path / "m.jsonl", [{"message": message, "answer": "2"}]), FRAME)
    assert split.samples == [] and "key 'message': a 'assistant' turn" in str(split.errors[0])


def test_synthetic_problems_add_each_addend_up_to_the_maximum_and_every_nth_is_text_only(tmp_path):
    from data_prep.math_vqa import MathSceneSpec, write_synthetic_math_vqa

    spec = MathSceneSpec(max_addend=1, text_only_every=3)
    records = json.loads(write_synthetic_math_vqa(tmp_path / "m.json", 60, 0, spec).read_text())
    assert ["images" in r for r in records] == [True, True, False] * 20  # the 3rd, 6th, ... have no image
    assert {r["addend"] for r in records} == {0, 1}  # 0..max_addend, both ends included
    text = [r for r in records if "images" not in r]
    assert {r["count"] for r in text} == {1, 2, 3, 4}  # min_objects..max_objects, both ends included
    for r in records:
        assert r["answer"] == str(r["count"] + r["addend"])
        if "images" in r:
            assert r["problem"] == f"<image>How many circles are in the image? What is that number plus {r['addend']}?"
        else:
            assert r["problem"] == f"What is {r['count']} plus {r['addend']}?"


def test_synthetic_problems_over_several_shapes_ask_for_shapes(tmp_path):
    from data_prep.math_vqa import MathSceneSpec, write_synthetic_math_vqa
    from data_prep.shapes import SceneSpec

    spec = MathSceneSpec(scene=SceneSpec(min_objects=1, max_objects=2, shapes=("circle", "square")), max_addend=0)
    (record,) = json.loads(write_synthetic_math_vqa(tmp_path / "m.json", 1, 0, spec).read_text())
    assert record["problem"] == "<image>How many shapes are in the image? What is that number plus 0?"
