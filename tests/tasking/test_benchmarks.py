"""Benchmarks: the same responses scored by vlrl and by the reference evaluation (lmms-eval,
Video-R1's evaluator) give the same numbers and prompts; fixtures in each benchmark's
published schema are built here (no downloads)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lmms_eval_reference import (
    CLI_REASONING_TAGS,
    DEFAULT_REASONING_SYSTEM_PROMPT,
    THINK_SYSTEM_PROMPT,
    MathReimplementation,
    Reimplementation,
    extract_boxed_answer,
    hub_docs,
    lmms_eval_targets,
    model_answer,
    references,
    sat_filter,
    video_r1_extract_answer,
    video_r1_final_acc,
    video_r1_prompt,
    wemath_aggregate_results,
)
from lmms_eval_reference import video_r1_reward as reference_video_r1_reward
from PIL import Image

from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.math import wemath_score
from tasks.benchmarks.reasoning import last_boxed
from tasks.benchmarks.refcoco import SCHEMA, rec_iou, synthetic_rows
from tasks.benchmarks.video_r1 import video_r1_reward, vsi_score, vsi_task_scores
from vlrl.config import LMMS_EVAL_REASONING_TAGS, ConfigError, TaskConfig, load_config
from vlrl.data.sample import Sample
from vlrl.data.tables import hub_file, image_cell, write_parquet
from vlrl.eval.layout import samples_line, samples_path
from vlrl.rollout.base import Completion, Generation
from vlrl.tasking.benchmark import Benchmark, strip_reasoning
from vlrl.tasking.lmms_eval_model import lmms_eval_model_class
from vlrl.tasking.registry import benchmark_names, make_task
from vlrl.tasking.sources import load_task_split

REFERENCES = references()
IDS = [r.name for r in REFERENCES]


def _load(name: str, tmp_path: Path, size: int, seed: int = 0, frame: str = "absolute", data=None, model_class=None,
          **options):  # fmt: skip
    """A synthetic benchmark in its published schema (or the dataset at `data`), read by vlrl
    (through `model_class`, an lmms-eval model class, where given): (task, samples, data path)."""
    task = make_task(TaskConfig(name=name, options=options))
    task = task if model_class is None else task.for_model(model_class)
    path = data or tmp_path / name / ("eval.json" if task.data_suffix == ".json" and not task.columns else "dataset")
    overrides = [f"data.eval={path}", "data.synthetic=true", f"data.synthetic_eval_size={size}", f"data.synthetic_seed={seed}",
                 f"data.image_cache={tmp_path / 'cache'}", "model.max_pixels=50176", f"model.coord_frame={frame}"]  # fmt: skip
    cfg = load_config(None, overrides, {"task.name": name})
    split = load_task_split(task, cfg, "eval")
    assert not split.errors
    return task, split.samples, path


def _read_rows(name: str, rows: list[dict], schema: pa.Schema, split: str, tmp_path: Path):
    """These rows written as the hub stores benchmark `name`'s split, read by vlrl: (task, split read)."""
    data = tmp_path / name
    write_parquet(hub_file(data, split), rows, schema)
    task = make_task(TaskConfig(name=name))
    cfg = load_config(None, [f"data.eval={data}", f"data.image_cache={tmp_path / 'cache'}"], {"task.name": name})
    return task, load_task_split(task, cfg, "eval")


def _docs(task, path: Path):
    """The benchmark's rows as lmms-eval loads them (GQA's: its questions' config)."""
    join = task.image_join
    return hub_docs(hub_file(path, task.split, join.rows) if join else hub_file(path, task.split))


def _rounds(variants_of, samples):
    """Every sample meets every response kind: round r gives sample i kind (i + r) % K."""
    kinds = [variants_of(s) for s in samples]
    k = len(kinds[0])
    return [[kinds[i][(i + r) % k] for i in range(len(samples))] for r in range(k)]


def _nan_named(metrics: dict[str, float]) -> dict[str, float | str]:
    """The metrics with NaN (a category without rows, as lmms-eval reports it) as "nan", which
    equals itself."""
    return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in metrics.items()}


def _assert_same(task, samples, responses, expected: dict[str, float]) -> None:
    got = task.metrics(samples, responses)
    assert {k: got[k] for k in expected} == expected


def _reasoning(answer: str, decoy: str) -> list[str]:
    """Responses as R1-style models write them: the answer after a think block holding another
    answer, after a lone </think> (a template that prefilled <think>), after an <analysis> block,
    in whitespace; and blocks lmms-eval's strip leaves (unclosed, upper case) or empties."""
    return [
        f"<think>I first thought {decoy}</think> {answer}",
        f"the template opened the block: {decoy}</think>\n{answer}",
        f"<analysis>{decoy}</analysis>{answer}",
        f" \n\t{answer}\u3000 ",
        f"<think>{decoy}</think><analysis>{decoy}</analysis>\n{answer}\n",
        f"<think>unclosed {decoy} {answer}",
        f"<think>x</think>{answer}<think>{decoy}",
        f"<THINK>{decoy}</THINK>{answer}",
        f"<think>a<think>{decoy}</think>b</think>{answer}",
        f"<think>{answer}</think>",
        f"{decoy}</think>{decoy}</think> {answer}",
    ]


# -- RefCOCO ---------------------------------------------------------------------------------------
def _rec_responses(sample):
    x1, y1, x2, y2 = sample.solution
    return [
        f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f}]",
        f"It is [{x1 + 0.04:.3f},{y1:.3f},{x2 + 0.04:.3f},{y2:.3f}] or [0, 0, 1, 1]",  # the first box counts
        f"[{x2:.3f}, {y2:.3f}, {x1:.3f}, {y1:.3f}]",  # inverted: a positive unclipped area
        "[ 0.2 , 0.2, 0.6, 0.7 ]",  # a space before a comma: no match, [0, 0, 0, 0]
        '{"bbox_2d": [10, 20, 30, 40]}',
        "no box here",
        f"[{(x1 + x2) / 2:.3f}, {(y1 + y2) / 2:.3f}, {x2 + 0.3:.3f}, {y2 + 0.3:.3f}]",
        "[-0.1, 0.0, 0.5, 0.5]",
        f"[{x1:.2f}, {y1:.2f}, {(x1 + x2) / 2:.3f}, {y2:.2f}]",  # IoU near 0.5, against a float32 truth
        *_reasoning(f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f}]", "[0.0, 0.0, 1.0, 1.0]"),
    ]


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize("name", ["refcoco_bbox_rec_val", "refcoco+_bbox_rec_testA", "refcocog_bbox_rec_test"])
def test_refcoco_strict_rec_equals_lmms_eval(name, reference, tmp_path):
    task, samples, path = _load(name, tmp_path, size=8, seed=1)
    docs = _docs(task, path)
    assert len(samples) > len(docs)  # one sample per expression, as lmms-eval explodes them
    for responses in _rounds(_rec_responses, samples):
        prompts, expected = reference.refcoco_rec(docs, responses)
        assert [s.problem for s in samples] == prompts
        _assert_same(task, samples, responses, expected)
    assert set(expected) == {
        f"refcoco_{m}" for m in ("IoU", "ACC@0.1", "ACC@0.3", "ACC@0.5", "ACC@0.7", "ACC@0.9", "Center_ACC")
    }


def _grounding_responses(sample):
    x1, y1, x2, y2 = sample.solution
    w, h = sample.frame.width, sample.frame.height
    k = [x1 / w * 1000, y1 / h * 1000, x2 / w * 1000, y2 / h * 1000]
    return [
        f'```json\n[{{"bbox_2d": [{x1:g}, {y1:g}, {x2:g}, {y2:g}], "label": "box"}}]\n```',
        f'[{{"bbox_2d": [{k[0]:.0f}, {k[1]:.0f}, {k[2]:.0f}, {k[3]:.0f}]}}]',  # 0-1000: the second reading wins
        f'[{{"bbox": [0, 0, 5, 5]}}, {{"box": [{x1 + 3:g}, {y1:g}, {x2 + 3:g}, {y2:g}]}}]',  # the best of several
        f"The object is at ({x1:g}, {y1:g}, {x2:g}, {y2:g}).",  # no JSON: the loose regex
        f'{{"objects": [{{"coordinates": [{x1:g}, {y1:g}, {x2 + 9:g}, {y2:g}]}}]}}',
        '{"bbox_2d": ["a", 1, 2, 3]}',  # not numbers: no box
        f"[{x1:g} {y1:g} {x2:g} {y2:g}]",
        "[NaN, 1, 2, 3]",
        f'{{"bbox_2d": [{(x1 + x2) / 2:g}, {(y1 + y2) / 2:g}, {(x1 + x2) / 2:g}, {(y1 + y2) / 2:g}]}}',  # a point: IoU ties at 0
        "nothing",
        "",
        *_reasoning(f'[{{"bbox_2d": [{x1:g}, {y1:g}, {x2:g}, {y2:g}]}}]', '{"bbox_2d": [0, 0, 5, 5]}'),
    ]


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize("name", ["refcoco_grounding_testA", "refcoco_plus_grounding_testB", "refcocog_grounding_test"])
def test_refcoco_lenient_grounding_equals_lmms_eval(name, reference, tmp_path):
    task, samples, path = _load(name, tmp_path, size=10, seed=2)
    docs = _docs(task, path)
    for responses in _rounds(_grounding_responses, samples):
        prompts, expected = reference.refcoco_grounding(docs, responses)
        assert [s.problem for s in samples] == prompts
        _assert_same(task, samples, responses, expected)
    assert expected["refcoco_grounding_ACC@0.5"] > 0  # some responses do hit


def test_strict_rec_cuts_each_answer_at_its_yamls_until_where_lmms_evals_simple_classes_do(tmp_path):
    chat, samples, _ = _load("refcoco_bbox_rec_val", tmp_path, size=2, seed=1)
    simple = chat.for_model(lmms_eval_model_class("qwen2_5_vl", "simple"))
    box = "[{}]".format(", ".join(f"{v:.4f}" for v in samples[0].solution))
    assert simple.metrics(samples[:1], [f"{box} ASSISTANT: [0, 0, 0.01, 0.01]"])["refcoco_ACC@0.9"] == 1.0
    assert simple.metrics(samples[:1], [f"ASSISTANT: {box}"])["refcoco_IoU"] == 0.0  # "" is left: [0, 0, 0, 0]
    assert chat.metrics(samples[:1], [f"ASSISTANT: {box}"])["refcoco_ACC@0.9"] == 1.0  # the chat class cuts nothing
    lenient, l_samples, _ = _load("refcoco_grounding_testA", tmp_path, size=2, seed=1)  # its yaml has no until
    pixels = json.dumps({"bbox_2d": l_samples[0].solution})
    lenient = lenient.for_model(lmms_eval_model_class("qwen2_5_vl", "simple"))
    assert lenient.metrics(l_samples[:1], [f"ASSISTANT: {pixels}"])["refcoco_grounding_ACC@0.9"] == 1.0


# (family, eval.lmms_eval_model) -> the class lmms-eval 75571cf runs (tests/lmms_eval_reference.py model_answer)
MODEL_CLASSES = {("qwen2_5_vl", "auto"): "chat", ("qwen3_vl", "auto"): "chat_qwen3_vl", ("qwen2_5_vl", "simple"): "simple",
                 ("qwen3_vl_moe", "simple"): "simple", ("qwen2_vl", "auto"): "simple_qwen2_vl",
                 ("qwen2_vl", "simple"): "simple_qwen2_vl", ("qwen3_5", "auto"): "chat_qwen3_5",
                 ("qwen3_5_moe", "simple"): "simple_qwen3_5"}  # fmt: skip


@pytest.mark.parametrize("family, which", list(MODEL_CLASSES))
def test_each_lmms_eval_model_class_hands_the_evaluator_what_it_returns_there(family, which, tmp_path):
    """The answer as each model class returns it: the chat classes' uncut, the simple classes'
    cut at the yaml's until (Qwen2-VL's also at lmms-eval's default "\n\n"), Qwen3.5's after
    its first </think> ("" without one); then scored as lmms-eval scores it."""
    model = MODEL_CLASSES[family, which]
    reference = REFERENCES[0]
    for name, method in (("textvqa_val", "textvqa_val"), ("refcoco_bbox_rec_val", "refcoco_rec"), ("mmstar", "mmstar")):
        task, samples, path = _load(name, tmp_path, size=4, seed=2)
        task = task.for_model(lmms_eval_model_class(family, which))
        docs = _docs(task, path)
        truths = [_answer_text(s) if name != "refcoco_bbox_rec_val" else _rec_responses(s)[0] for s in samples]
        shapes = ["{}", "{}ASSISTANT: x", "{}\n\nmore", "so\n\n{}", "<think>x</think>{}", "x</think> {}\n\ny", "{}</think>z",
                  "ASSISTANT: {}"]  # fmt: skip
        for shape in shapes:
            responses = [shape.format(t) for t in truths]
            _, expected = getattr(reference, method)(docs, [model_answer(r, model, method) for r in responses])
            assert task.metrics(samples, responses) == expected, (name, shape)


@pytest.mark.parametrize("family, which", list(MODEL_CLASSES))
def test_each_class_cuts_mathvisions_reasoning_answers_at_its_yamls_until_and_qwen2_vls_strips_them(family, which):
    from vlrl.tasking.registry import eval_task

    model = MODEL_CLASSES[family, which]
    name = "mathvision_reason_testmini_reasoning"
    cfg = load_config(None, [f"eval.lmms_eval_model={which}"], {"task.name": name})
    task = eval_task(cfg.tasks()[0], family, cfg)
    responses = ["<think>Count.\n\nThree.</think>\n\nThe answer is \\boxed{B}", "Restated. Q: how many? \\boxed{B}",
                 " B\n", "B<|im_end|>C", "B</s>"]  # fmt: skip
    for response in responses:
        assert task.model_class.answer(response, task.until) == model_answer(response, model, name), (model, response)


def test_eval_runs_a_benchmark_through_the_class_its_config_and_family_name():
    from vlrl.tasking.registry import eval_task

    overrides = ["eval.lmms_eval_model=simple", "model.chat_template_kwargs={enable_thinking: false}"]
    cfg = load_config(None, overrides, {"task.name": "textvqa_val"})
    task = eval_task(cfg.tasks()[0], "qwen3_5", cfg)
    assert task.model_class == lmms_eval_model_class("qwen3_5", "simple", enable_thinking=False)
    assert not task.model_class.chat and not task.model_class.strips_thinking
    thinking = eval_task(cfg.tasks()[0], "qwen3_5", load_config(None, [], {"task.name": "textvqa_val"}))
    assert thinking.model_class.chat and thinking.model_class.strips_thinking and thinking.model_class.system_first


def test_a_benchmark_is_evaluated_at_its_model_classs_image_budget_unless_asked_for_the_models():
    from vlrl.eval.harness import task_run_config
    from vlrl.tasking.registry import eval_task

    budgets = {("qwen2_vl", "auto"): (3136, 602112), ("qwen2_5_vl", "auto"): (200704, 1605632),
               ("qwen2_5_vl", "simple"): (200704, 1605632), ("qwen3_vl_moe", "auto"): (4096, 16777216),
               ("qwen3_vl", "simple"): (200704, 1605632), ("qwen3_5", "auto"): (4096, 16777216),
               ("qwen3_5_moe", "simple"): (65536, 131072), ("someone_elses", "auto"): None}  # fmt: skip
    for (family, which), pixels in budgets.items():
        assert lmms_eval_model_class(family, which).image_pixels == pixels, family
    overrides = ["model.min_pixels=3136", "model.max_pixels=50176"]
    for name, which, expected in [("mmstar", "lmms_eval", (4096, 16777216)), ("mmstar", "model", (3136, 50176)),
                                  ("refcoco", "lmms_eval", (3136, 50176)), ("video_r1_mvbench", "lmms_eval", (3136, 50176))]:  # fmt: skip
        cfg = load_config(None, [*overrides, f"eval.image_pixels={which}"], {"task.name": name})
        run = task_run_config(cfg, eval_task(cfg.tasks()[0], "qwen3_vl", cfg))
        assert (run.model.min_pixels, run.model.max_pixels) == expected, (name, which)


def test_qwen2_vl_and_qwen2_5_vl_simple_classes_images_are_jpeg_encoded_unless_the_models_budget_is_asked():
    """Their `_encode_image_data_url` (lmms-eval @75571cf) sends each image as a JPEG of quality
    85; the chat classes and Qwen3-VL's simple one send it as it is."""
    from vlrl.eval.harness import task_run_config
    from vlrl.tasking.registry import eval_task

    encoded = {("qwen2_vl", "auto"): 85, ("qwen2_5_vl", "simple"): 85, ("qwen2_5_vl", "auto"): 0,
               ("qwen3_vl", "simple"): 0, ("qwen3_5", "simple"): 0, ("someone_elses", "simple"): 0}  # fmt: skip
    for (family, which), quality in encoded.items():
        assert lmms_eval_model_class(family, which).jpeg_quality == quality, (family, which)
    for name, which, expected in [("mmstar", "lmms_eval", 85), ("mmstar", "model", 0), ("refcoco", "lmms_eval", 0)]:
        cfg = load_config(None, [f"eval.image_pixels={which}"], {"task.name": name})
        assert task_run_config(cfg, eval_task(cfg.tasks()[0], "qwen2_vl", cfg)).model.image_jpeg_quality == expected


def test_a_benchmark_whose_yaml_sets_no_length_generates_its_model_classs_default():
    from vlrl.eval.harness import EvalSettings, sampling_params
    from vlrl.tasking.registry import eval_task

    cases = [("mmstar", "qwen2_5_vl", "auto", [], 128), ("mmstar", "qwen2_5_vl", "simple", [], 32768),
             ("mmstar", "qwen3_5", "auto", [], 1024), ("mmstar", "someone_elses", "auto", [], 777),
             ("docvqa_val", "qwen2_5_vl", "auto", [], 32), ("mmstar", "qwen2_5_vl", "auto", ["eval.max_new_tokens=7"], 7),
             ("refcoco", "qwen2_5_vl", "auto", [], 777)]  # fmt: skip
    for name, family, which, extra, expected in cases:
        overrides = ["rollout.max_new_tokens=777", f"eval.lmms_eval_model={which}", *extra]
        cfg = load_config(None, overrides, {"task.name": name})
        task = eval_task(cfg.tasks()[0], family, cfg)
        assert sampling_params(EvalSettings.of(cfg), task).max_new_tokens == expected, (name, family, which)


def test_the_class_each_family_runs_is_named_in_the_results(tmp_path):
    task, _, _ = _load("mmstar", tmp_path, size=1)
    sources = {
        key: task.for_model(lmms_eval_model_class(*key)).describe("absolute")["model_class"] for key in MODEL_CLASSES
    }
    assert sources[("qwen2_5_vl", "auto")] == "models/chat/qwen2_5_vl.py"
    assert sources[("qwen3_vl_moe", "simple")] == "models/simple/qwen3_vl.py"
    assert sources[("qwen2_vl", "auto")] == "models/simple/qwen2_vl.py"
    assert sources[("qwen3_5", "auto")] == "models/chat/qwen3_5.py"
    video, _, _ = _load("video_r1_mvbench", tmp_path, size=1)
    assert video.for_model(lmms_eval_model_class("qwen3_5")) is video  # Video-R1's evaluator, not lmms-eval's


@pytest.mark.parametrize("family, which", list(MODEL_CLASSES))
def test_each_lmms_eval_model_class_builds_the_messages_lmms_eval_builds(family, which, tmp_path):
    """The chat classes: the task's messages (a reasoning task's system prompt), after the
    class's system prompt in Qwen3-VL's and Qwen3.5's (whose templates then drop the second);
    the simple classes: their system prompt and doc_to_text with "<image>" deleted."""
    model = MODEL_CLASSES[family, which]
    helpful = {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]}
    for name in ("mmstar", "ocrbench_reasoning"):
        task, samples, _ = _load(name, tmp_path, size=1)
        task = task.for_model(lmms_eval_model_class(family, which))
        sample = dataclasses.replace(samples[0], problem="<image>What is it?")
        own = [{"role": "system", "content": [{"type": "text", "text": task.system}]}] if task.system else []
        text = "<image>What is it?" if model.startswith("chat") else "What is it?"
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}
        if model == "chat":
            expected = [*(own or [helpful]), user]  # Qwen2.5-VL's template writes the helpful one itself
        elif model.startswith("chat"):
            expected = [helpful, *own, user]
        else:
            expected = [helpful, user]
        assert task.messages(sample) == expected, name


def test_a_qwen3_vl_prompt_of_a_reasoning_benchmark_renders_as_lmms_evals_chat_class_renders_it(tmp_path):
    """Qwen3-VL's chat class puts its system prompt before the task's; the template keeps the first."""
    from vlrl.models.loading import load_processor
    from vlrl.models.prompting import render_prompt

    cfg = load_config(None, ["model.path=tiny:qwen3_vl", "model.max_pixels=50176"])
    processor = load_processor(cfg.model)
    task, samples, _ = _load("ocrbench_reasoning", tmp_path, size=1)
    task = task.for_model(lmms_eval_model_class("qwen3_vl"))
    prompt = render_prompt(processor, task.messages(samples[0]), samples[0], cfg.model)
    text = processor.tokenizer.decode(prompt.input_ids)
    lmms_eval = [{"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
                 {"role": "system", "content": [{"type": "text", "text": task.system}]},
                 {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": samples[0].problem}]}]  # fmt: skip
    expected = processor.apply_chat_template(lmms_eval, tokenize=False, add_generation_prompt=True)
    assert text.replace("<|image_pad|>", "") == expected.replace("<|image_pad|>", "")
    assert task.system not in text


def test_strict_and_lenient_differ_where_lmms_eval_says_they_do(tmp_path):
    """Pixel boxes score 0 in the strict task (which reads normalized floats) and hit in the
    lenient one; the lenient task keeps the best of several boxes, the strict one the first."""
    strict, s_samples, _ = _load("refcoco_bbox_rec_testA", tmp_path, size=4, seed=3)
    lenient, l_samples, _ = _load("refcoco_grounding_testA", tmp_path, size=4, seed=3)
    pixels = [json.dumps({"bbox_2d": s.solution}) for s in l_samples]
    assert lenient.metrics(l_samples, pixels)["refcoco_grounding_ACC@0.9"] == 1.0
    first_wrong = ["[0.0, 0.0, 0.01, 0.01] [{}]".format(", ".join(f"{v:.4f}" for v in s.solution)) for s in s_samples]
    assert strict.metrics(s_samples, first_wrong)["refcoco_ACC@0.1"] == 0.0
    best_of = [json.dumps([{"bbox_2d": [0, 0, 1, 1]}, {"bbox_2d": s.solution}]) for s in l_samples]
    assert lenient.metrics(l_samples, best_of)["refcoco_grounding_ACC@0.9"] == 1.0


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
def test_refcoco_acc_counts_an_iou_equal_to_the_threshold(reference):
    items = [{"bbox": [0.0, 0.0, 1.0, 1.0], "pred": [0.0, 0.0, 0.5, 1.0], "answer": "", "ann_id": ""},  # IoU exactly 0.5
             {"bbox": [0.0, 0.0, 1.0, 1.0], "pred": [0.0, 0.0, 0.3, 1.0], "answer": "", "ann_id": ""}]  # fmt: skip
    got = {k: f(items) for k, f in make_task(TaskConfig(name="refcoco_bbox_rec_val")).aggregations().items()}
    assert got == reference.rec_aggregate(items)
    assert (got["refcoco_ACC@0.5"], got["refcoco_ACC@0.3"], got["refcoco_ACC@0.7"]) == (0.5, 1.0, 0.0)


def test_strict_iou_where_lmms_eval_divides_by_zero_is_zero():
    """A box inverted in x alone has a negative unclipped area; when it cancels the ground
    truth's, lmms-eval's union is 0 and it raises: vlrl scores the sample 0 and goes on."""
    gt, pred = [0.0, 0.0, 0.5, 0.5], [0.5, 0.0, 0.25, 1.0]
    items = [{"bbox": [0.0, 0.0, 0.5, 0.5], "pred": [0.5, 0.0, 0.25, 1.0], "answer": "", "ann_id": ""}]
    assert rec_iou(gt, pred) == 0.0
    assert make_task(TaskConfig(name="refcoco_bbox_rec_val")).aggregations()["refcoco_IoU"](items) == 0.0
    with pytest.raises(ZeroDivisionError):
        _reference_iou_raises(gt, pred)


def _reference_iou_raises(gt, pred):
    inter = max(0, min(gt[2], pred[2]) - max(gt[0], pred[0])) * max(0, min(gt[3], pred[3]) - max(gt[1], pred[1]))
    return inter / ((gt[2] - gt[0]) * (gt[3] - gt[1]) + (pred[2] - pred[0]) * (pred[3] - pred[1]) - inter)


@pytest.mark.parametrize("frame", ["absolute", "norm1000"])
def test_coords_model_asks_and_reads_the_models_own_frame(frame, tmp_path):
    """coords=model: the prompt states the model's frame, and a box in that frame is read back
    to the image: the model's own answer scores, where lmms-eval's reading would not."""
    words = {"absolute": "integer pixel coordinates", "norm1000": "between 0 and 1000"}[frame]
    for name in ("refcoco_bbox_rec_val", "refcoco_grounding_test"):
        task, samples, _ = _load(name, tmp_path / name, size=4, seed=4, frame=frame, coords="model")
        lmms_task, lmms_samples, _ = _load(name, tmp_path / f"{name}-lmms", size=4, seed=4, frame=frame)
        boxes = []
        for s in samples:
            f = s.frame
            gt = s.solution if name.startswith("refcoco_grounding") else [s.solution[0] * f.width, s.solution[1] * f.height,
                                                                           s.solution[2] * f.width, s.solution[3] * f.height]  # fmt: skip
            boxes.append(f.box_to_model(gt))
        responses = [json.dumps({"bbox_2d": box}) for box in boxes]
        metric = "refcoco_ACC@0.5" if "rec" in name else "refcoco_grounding_ACC@0.5"
        assert task.metrics(samples, responses)[metric] == 1.0
        if "rec" in name:
            assert words in samples[0].problem and "between 0 and 1." not in samples[0].problem
            assert lmms_task.metrics(lmms_samples, responses)[metric] == 0.0
        assert task.describe(frame)["coords"] != lmms_task.describe(frame)["coords"]
    task, samples, _ = _load("screenspot_pro", tmp_path / "pro", size=4, seed=4, frame=frame, coords="model")
    centers = [
        [(s.solution[0] + s.solution[2]) / 2 * s.frame.width, (s.solution[1] + s.solution[3]) / 2 * s.frame.height]
        for s in samples
    ]
    responses = [str(s.frame.point_to_model(c)) for s, c in zip(samples, centers, strict=True)]
    assert task.metrics(samples, responses)["screenspot_pro_action_acc"] == 1.0
    assert words.split()[-1] in samples[0].problem and "within [0, 1]" not in samples[0].problem
    task, samples, _ = _load("osworld_g", tmp_path / "osworld", size=5, seed=4, frame=frame, coords="model")
    boxes = [s.solution["box"] if s.solution["type"] == "bbox" else [0, 0, 1, 1] for s in samples]
    k = [s.solution["size"][0] / s.frame.width for s in samples]  # the boxes in image_size's pixels
    centers = [[(b[0] + b[2] / 2) / f, (b[1] + b[3] / 2) / f] for b, f in zip(boxes, k, strict=True)]
    responses = [str(s.frame.point_to_model(c)) for s, c in zip(samples, centers, strict=True)]
    assert (
        task.metrics(samples, responses)["osworld_g_bbox_acc"] == 1.0 and "You may use either" not in samples[0].problem
    )
    task, samples, _ = _load("screenspot_rec_test", tmp_path / "rec", size=4, seed=4, frame=frame, coords="model")
    boxes = [s.frame.box_to_model([s.solution[0] * s.frame.width, s.solution[1] * s.frame.height,
                                   s.solution[2] * s.frame.width, s.solution[3] * s.frame.height]) for s in samples]  # fmt: skip
    assert task.metrics(samples, [str(list(box)) for box in boxes])["screenspot_ACC@0.5"] == 1.0
    assert words in samples[0].problem and "two decimal places" not in samples[0].problem


# -- counting ----------------------------------------------------------------------------------------
def _count_responses(sample):
    n = int(str(sample.solution).strip())
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven"]
    return [
        f"{n}",
        f" {n}\n",
        f"{n}.",
        words[n],
        words[n].title(),
        f"There are {n} dots.",
        f"{n + 1}",
        "",
        "none",
        f"{n}.0",
        *_reasoning(f"{n}", f"{n + 1} or maybe {words[n + 1]}"),
    ]


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize("name", ["countbench", "countbenchqa", "pixmo_count"])
def test_counting_benchmarks_equal_lmms_eval(name, reference, tmp_path):
    task, samples, path = _load(name, tmp_path, size=8, seed=5)
    docs = _docs(task, path)
    for responses in _rounds(_count_responses, samples):
        prompts, expected = getattr(reference, name)(docs, responses)
        assert [s.problem for s in samples] == prompts
        _assert_same(task, samples, responses, expected)


def test_counting_parsers_differ_as_lmms_eval_defines_them(tmp_path):
    got = {}
    for name in ("countbench", "countbenchqa", "pixmo_count"):
        task, samples, _ = _load(name, tmp_path, size=1, seed=6)
        n = int(str(samples[0].solution))
        words = ["zero", "one", "two", "three", "four", "five", "six"]
        got[name] = [task.metrics(samples, [r])["acc"] for r in (words[n], f"There are {n}.", f" {n} ")]
    assert got == {"countbench": [1.0, 0.0, 1.0], "countbenchqa": [0.0, 0.0, 1.0], "pixmo_count": [0.0, 1.0, 1.0]}


# -- ScreenSpot ----------------------------------------------------------------------------------------
def _click_responses(sample):
    w, h = sample.frame.width, sample.frame.height
    x1, y1, x2, y2 = sample.solution
    if max(sample.solution) <= 1:  # normalized truth
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        px, py = cx * w, cy * h
    else:  # pixel truth (v2 without a stated size reads pixels)
        px, py = (x1 + x2) / 2, (y1 + y2) / 2
        cx, cy = px / w, py / h
    return [
        f"[{cx:.3f}, {cy:.3f}]",
        f"({px:.0f}, {py:.0f})",
        f"<bbox>{px - 2:.0f} {py - 2:.0f} {px + 2:.0f} {py + 2:.0f}</bbox>",
        f'{{"x": {cx:.3f}, "y": {cy:.3f}}}',
        f"click at {cx * 100:.1f}% and {cy * 100:.1f}%",
        f"the box is {px - 1:.0f} {py - 1:.0f} {px + 1:.0f} {py + 1:.0f}",
        "I cannot find it",
        "[0.99, 0.01]",
        f"[{px:.0f}, {cy:.3f}]",  # one coordinate beyond 1: both are divided by the size
        *_reasoning(f"[{cx:.3f}, {cy:.3f}]", "[0.99, 0.01]"),
    ]


def _screenspot_rec_responses(sample):
    """Boxes as asked, in parentheses, on Qwen's 0-1000 grid, in pixels (read as 0-1000), with
    mixed brackets, without commas, around the center only, none."""
    x1, y1, x2, y2 = sample.solution
    w, h = sample.frame.width, sample.frame.height
    return [
        f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f}]",
        f"({x1:.3f}, {y1:.3f}, {x2:.3f}, {y2:.3f})",
        f"[{x1 * 1000:.0f}, {y1 * 1000:.0f}, {x2 * 1000:.0f}, {y2 * 1000:.0f}]",  # any number > 1: all / 1000
        f"[{x1 * w:.0f}, {y1 * h:.0f}, {x2 * w:.0f}, {y2 * h:.0f}]",  # pixels read as 0-1000: wrong
        f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f})",  # mixed brackets still match
        f"[{x1:.2f} {y1:.2f} {x2:.2f} {y2:.2f}]",  # no commas: [0, 0, 0, 0]
        f"[{x1:.2f}, {y1:.2f}, {(x1 + x2) / 2:.3f}, {y2:.2f}]",  # IoU near 0.5
        f"[{(x1 + x2) / 2 - 0.2:.3f}, {(y1 + y2) / 2 - 0.2:.3f}, {(x1 + x2) / 2 + 0.2:.3f}, {(y1 + y2) / 2 + 0.2:.3f}]",
        "[0.0, 0.0, 2, 0.5]",  # one number > 1 shrinks the others too
        "no box here",
        *_reasoning(f"[{x1:.2f}, {y1:.2f}, {x2:.2f}, {y2:.2f}]", "[0.0, 0.0, 1.0, 1.0]"),
    ]


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
def test_screenspot_rec_equals_lmms_eval_and_reports_what_it_prints_per_platform(reference, tmp_path):
    task, samples, path = _load("screenspot_rec_test", tmp_path, size=12, seed=7)
    docs = _docs(task, path)
    for responses in _rounds(_screenspot_rec_responses, samples):
        prompts, expected = reference.screenspot_rec_test(docs, responses)
        assert [s.problem for s in samples] == prompts
        assert task.metrics(samples, responses) == expected
    assert {key.split("-")[-1] for key in expected if "-" in key} == {
        f"{p}_{t}" for p in ("mobile", "web", "desktop") for t in ("text", "icon")
    }
    assert expected["screenspot_Center_ACC-desktop_text"] + expected["screenspot_Center_ACC-desktop_icon"] > 0


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize("name", ["screenspot_v2", "screenspot_pro"])
def test_screenspot_equals_lmms_eval(name, reference, tmp_path):
    task, samples, path = _load(name, tmp_path, size=12, seed=7)
    docs = _docs(task, path)
    for responses in _rounds(_click_responses, samples):
        prompts, expected = getattr(reference, name)(docs, responses)
        assert [s.problem for s in samples] == prompts
        _assert_same(task, samples, responses, expected)
    by_platform = task.metrics(samples, [_click_responses(s)[1] for s in samples])
    assert any(key.startswith(f"{name}_acc/") for key in by_platform)  # vlrl's own split by platform


# -- lmms-eval's harness: the reasoning strip and the hub's column types --------------------------------
STRIP_CASES = [  # (response, what lmms-eval 0.7.3's strip_reasoning_tags returns with its default tags)
    ("<think>a</think> [0.1, 0.2, 0.3, 0.4]", "[0.1, 0.2, 0.3, 0.4]"),
    ("  [0.1, 0.2, 0.3, 0.4]\n", "[0.1, 0.2, 0.3, 0.4]"),
    ("reasoning [9,9,9,9]</think>\n[0.1, 0.2, 0.3, 0.4]", "[0.1, 0.2, 0.3, 0.4]"),
    ("x</think>y</think>z", "z"),  # after the last lone closing tag
    ("<think>a<think>b</think>c</think>d", "d"),  # nested: a block, then a lone closing tag
    ("<think>a<think>b</think>c", "c"),
    ("<think>unclosed [1,2,3,4]", "<think>unclosed [1,2,3,4]"),
    ("<think>a</think>b<think>c", "b<think>c"),
    ("</think>pre<think>x", "</think>pre<think>x"),  # the closing tag first: nothing removed
    ("</think> a <think> b </think> c", "a  c"),
    ("<think>a</think>b<think>c</think>d", "bd"),
    ("<analysis>r</analysis>final", "final"),
    ("<think>t</think><analysis>r</analysis> ans ", "ans"),
    ("<analysis>r</think>x</analysis>y", "y"),  # think pass first, then analysis
    ("<think>a</think>b</analysis>c<analysis>d", "b</analysis>c<analysis>d"),
    ("<think>a</think>", ""),
    ("</think>", ""),
    ("<THINK>a</THINK>b", "<THINK>a</THINK>b"),  # case-sensitive
    ("<thinking>a</thinking>b", "<thinking>a</thinking>b"),  # not a default tag
    ("<think>x</think>\u3000 3 \u00a0", "3"),  # Unicode whitespace
]


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize("response,expected", STRIP_CASES)
def test_reasoning_is_stripped_as_lmms_eval_strips_it(reference, response, expected):
    tags = reference.parse_reasoning_tags_config(CLI_REASONING_TAGS)
    assert reference.strip_reasoning_tags(response, tags) == expected
    assert strip_reasoning(response, LMMS_EVAL_REASONING_TAGS) == expected
    assert reference.harness([response], "none") == [response]  # --reasoning_tags none: the raw response


class _ListFilter(Benchmark):
    """A benchmark whose filter turns a bracketed response into a list (as lmms-eval's filters may)."""

    name = "list_filter"

    def predict(self, completion, sample):
        return completion.split() if completion.startswith("[") else completion

    def process(self, response, sample):
        return {"count": response}

    def aggregations(self):
        return {"count": len}


def test_only_text_responses_are_stripped_and_no_sample_aggregates_to_no_metric():
    """lmms-eval's evaluator strips reasoning from str responses only; a filter's list is scored
    as it left it; and an evaluation of no samples reports no metric rather than dividing by 0."""
    task = _ListFilter()
    samples = [Sample(id=str(i), task=task.name, problem="", solution=None) for i in range(2)]
    completions = ["[<think>a</think> b]", "<think>a</think> b "]
    assert task.responses(samples, completions, LMMS_EVAL_REASONING_TAGS) == [["[<think>a</think>", "b]"], "b"]
    assert task.metrics(samples, completions) == {"count": 2}
    assert task.aggregate([]) == {} and task.metrics([], []) == {}


def _rec_table(path: Path, rows: list[tuple[int, int, list[float]]], bbox_type: pa.DataType = pa.float32()) -> None:
    """A strict-REC split of (width, height, pixel box) rows in the hub's schema, `bbox` of `bbox_type`."""
    schema = SCHEMA.set(SCHEMA.get_field_index("bbox"), pa.field("bbox", pa.list_(bbox_type)))
    table = [{"question_id": str(i), "image": image_cell(Image.new("RGB", (w, h)), f"{i}.png"), "question": "",
              "answer": ["it"], "segmentation": [], "bbox": box, "iscrowd": 0, "file_name": f"{i}.png"}
             for i, (w, h, box) in enumerate(rows)]  # fmt: skip
    write_parquet(hub_file(path, "val"), table, schema)


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
def test_strict_rec_ground_truth_has_the_type_the_hub_table_declares(reference, tmp_path):
    """The issue's box [64, 48, 128, 96] on 640 x 480: lmms-eval's process_docs writes the
    normalized truth back into the float32 column through datasets.map, so it is
    [0.10000000149011612, ..., 0.30000001192092896]; the answer [0.100, 0.100, 0.200, 0.300]
    then has IoU 0.49999993108213614, not ACC@0.5 (0.5000000000000001 against float64 truth).
    A center on the truth's edge 0.1 falls outside 0.10000000149. A table declaring float64
    keeps the float64 truth, in lmms-eval and here."""
    responses = ["[0.100, 0.100, 0.200, 0.300]", "[0.00, 0.10, 0.20, 0.20]"]
    truth32 = [float(np.float32(v)) for v in (0.1, 0.1, 0.3, 0.3)]
    assert truth32 == [0.10000000149011612, 0.10000000149011612, 0.30000001192092896, 0.30000001192092896]
    for bbox_type, truth, iou, center in ((pa.float32(), truth32, 0.49999993108213614, 0.5),
                                          (pa.float64(), [0.1, 0.1, 0.3, 0.3], 0.5000000000000001, 1.0)):  # fmt: skip
        data = tmp_path / str(bbox_type)
        _rec_table(data, [(640, 480, [64, 48, 128, 96])] * 2, bbox_type)
        task, samples, _ = _load("refcoco_bbox_rec_val", data.parent, size=2, data=data)
        assert [s.solution for s in samples] == [truth, truth]
        assert rec_iou(truth, [0.1, 0.1, 0.2, 0.3]) == iou
        _, expected = reference.refcoco_rec(_docs(task, data), responses)
        got = task.metrics(samples, responses)
        assert {k: got[k] for k in expected} == expected
        assert (got["refcoco_ACC@0.5"], got["refcoco_Center_ACC"]) == ((iou >= 0.5) / 2, center)


class Canned:
    """An engine answering the given texts in order: the harness runs as for a model's answers."""

    name, shares_policy, gives_entropy, device = "canned", False, False, torch.device("cpu")

    def __init__(self, texts: list[str]):
        self.texts = list(texts)

    def generate(self, prompts, params, generator=None):
        return [Generation([Completion([0], self.texts.pop(0), False)]) for _ in prompts]


def _lmms_eval_method(name: str) -> str | None:
    """The reference entry point of a benchmark scored by lmms-eval (None: Video-R1's evaluator)."""
    if name.startswith("video_r1_"):
        return None
    if "_bbox_rec_" in name:
        return "refcoco_rec"
    if "_grounding_" in name:
        return "refcoco_grounding"
    if name.startswith("blink_"):
        return "blink"
    if name.startswith("mindcube_"):
        return "mindcube"
    if name.startswith("visualwebbench_"):
        return "visualwebbench"
    if name.startswith("refspatial_"):
        return "refspatial_json" if name.endswith("_json") else "refspatial"
    return name


def _hostile(name: str, sample) -> list[str]:
    """Responses with reasoning blocks, whitespace and threshold decimals, for a benchmark's sample."""
    method = _lmms_eval_method(name)
    if method is None:
        truth = video_r1_extract_answer(sample.meta["solution"])
        return _reasoning(f"<answer>{truth}</answer>", "<answer>Z</answer>") + _reasoning(truth, "Z")
    if method == "geometry3k":
        return _geometry3k_responses(sample) + _reasoning("B", "C")
    if method.endswith("_reasoning"):
        truth = _answer_text(sample)
        return _reasoning_responses(sample) + _reasoning(f"<answer>{truth}</answer>", f"<answer>{truth}1</answer>")
    if method.startswith("mathvista_"):
        answer = str(sample.solution["answer"])
        return _mathvista_responses(sample) + _reasoning(answer, f"{answer}1")
    kinds = {"refcoco_rec": _rec_responses, "refcoco_grounding": _grounding_responses,
             "screenspot_v2": _click_responses, "screenspot_pro": _click_responses, "ocrbench": _ocr_responses,
             "screenspot_rec_test": _screenspot_rec_responses,
             "chartqa": _chart_responses, "mmstar": _mcq_responses, "mmstar_qwen": _mcq_responses,
             "mmmu_val": _mmmu_responses, "mmmu_val_qwen": _mmmu_responses, "realworldqa": _realworldqa_responses,
             "pope": _pope_responses, "pope_adv": _pope_responses, "pope_pop": _pope_responses,
             "pope_random": _pope_responses, "ai2d": _ai2d_responses, "mme": _mme_responses,
             "cv_bench": _cv_bench_responses, "cv_bench_2d": _cv_bench_responses,
             "cv_bench_3d": _cv_bench_responses, "docvqa_val": _anls_responses, "infovqa_val": _anls_responses,
             "textvqa_val": _textvqa_responses, "mmvp": _mmvp_responses, "blink": _cv_bench_responses,
             "vstar_bench": _vstar_responses, "scienceqa": _sqa_responses, "scienceqa_img": _sqa_responses,
             "seedbench": _seed_responses, "seedbench_lite": _seed_responses, "seedbench_2_plus": _seed_responses,
             "vqav2_val": _vqa_responses, "ok_vqa_val2014": _vqa_responses, "vizwiz_vqa_val": _vqa_responses,
             "mmbench_en_dev_static": _mmbench_responses, "mmmu_pro_standard": _mmmu_responses, "mmmu_pro_vision": _mmmu_responses,
             "muirbench": _muir_responses, "gqa": _gqa_responses, "mmerealworld": _mme_rw_responses,
             "mmerealworld_lite": _mme_rw_responses, "mmerealworld_cn": _mme_rw_responses,
             "hrbench4k": _hrbench_responses, "hrbench8k": _hrbench_responses, "embspatial": _embspatial_responses,
             "zerobench": _zerobench_responses, "VisualPuzzles_direct": _puzzle_responses,
             "VisualPuzzles_cot": _puzzle_responses, "mmsi_bench": _mmsi_responses,
             "sat": _sat_responses, "mathkangaroo": _kangaroo_responses, "erqa": _erqa_responses,
             "naturalbench": _naturalbench_responses, "fsc147": _fsc147_responses,
             "vlmsareblind": _vlmsareblind_responses, "vlms_are_biased": _vlms_are_biased_responses,
             "vmcbench": _vmcbench_responses, "mirb": _mirb_responses,
             "multihopspatial": _multihopspatial_responses, "simplevqa": _simplevqa_responses, "osworld_g": _osworld_g_responses, "groundingme": _groundingme_responses,
             "visualwebbench": _visualwebbench_responses,
             "illusionvqa_comprehension": _ai2d_responses, "illusionvqa_soft_localization": _ai2d_responses, "3dsrbench": _threedsr_responses, "3dsrbench_circular": _threedsr_responses,
             "chartqapro": _chartqapro_responses, "viewspatial": _viewspatial_responses,
             "omni_spatial": _omni_spatial_responses, "mindcube": _mindcube_responses,
             "where2place": _where2place_responses, "refspatial": _where2place_responses,
             "where2place_json": _point2d_responses, "refspatial_json": _point2d_responses}  # fmt: skip
    if method.startswith("spatial457_"):
        return _spatial457_responses(sample)
    return kinds.get(method, _count_responses)(sample)


@pytest.mark.parametrize("name", sorted(benchmark_names()))
def test_every_benchmark_scores_what_its_reference_harness_scores(name, tmp_path, tiny_qwen25, monkeypatch):
    """Through vlrl's harness (the canned answers generated, filtered, stripped, processed,
    aggregated, logged) and through the reference's (lmms-eval's evaluator steps on the hub
    table, or Video-R1's evaluator on the raw output): the same numbers, and the samples file
    holds what was scored (filtered_resps) beside the raw response (resps), as lmms-eval's.
    eval.reasoning_tags=none scores the raw response, as lmms-eval's --reasoning_tags none."""
    from vlrl.eval import harness
    from vlrl.eval.harness import EvalSettings, evaluate
    from vlrl.models.loading import load_processor

    task, samples, path = _load(
        name, tmp_path, size=4 if name in ("mme", "naturalbench") else 3, seed=10
    )  # in pairs, fours
    method = _lmms_eval_method(name)
    processed, process = [], task.process  # process_results runs once a sample, its values logged and aggregated
    task.process = lambda response, sample: processed.append(sample.id) or process(response, sample)
    # Each sample's prompt rendered once: the rounds change the answers, never the prompts
    # (rendering, a video's above all, was most of this test's time).
    rendered, render = {}, harness.render_prompts

    def render_once(processor, jobs, model):
        missing = [(messages, sample) for messages, sample in jobs if sample.id not in rendered]
        for (_, sample), prompt in zip(missing, render(processor, missing, model), strict=True):
            rendered[sample.id] = prompt
        return [rendered[sample.id] for _, sample in jobs]

    monkeypatch.setattr(harness, "render_prompts", render_once)
    processor = load_processor(load_config(None, ["model.path=tiny:qwen2_5_vl", "model.max_pixels=50176"]).model)
    docs = None if method is None else _docs(task, path)  # the hub table, loaded once as lmms-eval loads it
    for tags in (CLI_REASONING_TAGS, "none"):
        cfg = load_config(None, ["model.path=tiny:qwen2_5_vl", "model.max_pixels=50176", f"eval.reasoning_tags={tags}"])
        kinds = [_hostile(name, s) for s in samples]
        for r in range(len(kinds[0])):
            responses = [k[(i + r) % len(k)] for i, k in enumerate(kinds)]
            processed.clear()
            result = evaluate(Canned(responses), processor, task, samples, EvalSettings.of(cfg), str(path))
            assert processed == [s.id for s in samples]
            lines = [samples_line(record) for record in result.records]
            if method is None:
                records = json.loads(path.read_text())
                expected = video_r1_final_acc(records, responses)
                scored = responses  # Video-R1's evaluator strips nothing
            else:
                reference = next(r for r in reversed(REFERENCES) if hasattr(r, method))  # lmms-eval's own, if it has it
                scored = reference.harness(responses, tags, method, docs)  # logged as filtered_resps
                if hasattr(MathReimplementation, method):  # process_results alone: the harness steps first
                    _, expected = getattr(reference, method)(docs, reference.scored(responses, tags, method))
                else:
                    _, expected = getattr(reference, method)(docs, responses, tags)
            assert _nan_named({k: result.metrics[k] for k in expected}) == _nan_named(expected), (r, responses)
            assert [line["filtered_resps"] for line in lines] == scored
            assert [line.get("resps", line["filtered_resps"]) for line in lines] == responses
            if method is not None:  # lmms-eval's target; Video-R1's evaluator keeps the record's solution
                assert [line["target"] for line in lines] == lmms_eval_targets(method, docs)
        stripped = method is not None and tags != "none"
        assert result.config["reasoning_tags"] == ([list(p) for p in LMMS_EVAL_REASONING_TAGS] if stripped else None)


@pytest.mark.parametrize("override, acc", [([], 1.0), (["eval.reasoning_tags=none"], 0.0)])
def test_vlrl_score_on_a_benchmark_strips_reasoning_as_lmms_eval_does(override, acc, tmp_path, capsys):
    from vlrl.cli import main

    _, samples, path = _load("countbenchqa", tmp_path, size=4, seed=11)
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": s.id, "completion": f"<think>{s.solution + 1}?</think> {s.solution}\n"}) + "\n" for s in samples))  # fmt: skip
    args = ["score", "--task", "countbenchqa", "--data", str(path), "--completions", str(completions)]
    main([*args, "--out", str(tmp_path / "scored.jsonl"), f"data.image_cache={tmp_path / 'cache'}", *override])
    (row,) = [line for line in capsys.readouterr().out.splitlines() if " acc " in line]
    assert row.split()[-2] == f"{acc:.4f}"
    # each line as vlrl eval's samples file has it: the response scored and its process_results
    lines = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    responses = [f"{s.solution}" if acc else f"<think>{s.solution + 1}?</think> {s.solution}\n" for s in samples]
    assert [line["filtered_resps"] for line in lines] == responses
    assert [(line["id"], line["acc"], line["exact_match"]) for line in lines] == [(s.id, acc, acc) for s in samples]


def test_a_benchmarks_long_completion_is_read_whole_and_not_said_to_score_zero(tmp_path):
    """A benchmark has no rewards, so no completion is scored 0 unread: its metrics read each whole."""
    from vlrl.tasking.scoring import MAX_COMPLETION_CHARS, score_file

    task, samples, _ = _load("countbenchqa", tmp_path, size=2, seed=11)
    completions = tmp_path / "completions.jsonl"
    texts = [" " * MAX_COMPLETION_CHARS + str(samples[0].solution), str(samples[1].solution)]
    completions.write_text(
        "".join(json.dumps({"id": s.id, "completion": t}) + "\n" for s, t in zip(samples, texts, strict=True))
    )
    result = score_file(task, samples, str(completions), str(tmp_path / "scored.jsonl"))
    assert result.zeroed == [] and result.scored == 2 and result.metrics["acc"] == 1.0


def test_lmms_evals_own_samples_file_is_scored_by_its_doc_ids_positions(tmp_path):
    """lmms-eval 0.7's samples_<task>.jsonl names a document by `doc_id`, its position among the
    documents after process_docs (RefCOCO's: one a referring expression, where vlrl's ids are
    "<question_id>/<k>"), with no `id`: the sample at that position, as vlrl reads them in order."""
    from vlrl.tasking.scoring import score_file

    task, samples, _ = _load("refcoco_bbox_rec_val", tmp_path, size=3, seed=1)
    assert len(samples) > 3 and all("/" in s.id for s in samples)  # exploded: positions are not ids
    texts = [str(list(s.solution)) if i % 2 else "[0, 0, 0.1, 0.1]" for i, s in enumerate(samples)]
    lmms_eval = [{"doc_id": i, "doc": {}, "target": "", "arguments": [], "resps": [[t]], "filtered_resps": [t],
                  "doc_hash": "", "prompt_hash": "", "target_hash": "", "refcoco_IoU": 0.0}
                 for i, t in reversed(list(enumerate(texts)))]  # fmt: skip
    (tmp_path / "samples_refcoco.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lmms_eval))
    ours = tmp_path / "ours.jsonl"
    ours.write_text(
        "".join(json.dumps({"id": s.id, "completion": t}) + "\n" for s, t in zip(samples, texts, strict=True))
    )
    by_doc_id = score_file(task, samples, str(tmp_path / "samples_refcoco.jsonl"), str(tmp_path / "a.jsonl"))
    by_id = score_file(task, samples, str(ours), str(tmp_path / "b.jsonl"))
    assert by_doc_id.scored == len(samples) and by_doc_id.problems == [] and by_doc_id.metrics == by_id.metrics
    assert 0 < by_id.metrics["refcoco_ACC@0.5"] < 1
    bad = [
        {"doc_id": len(samples), "resps": [["x"]]},
        {"doc_id": "0", "resps": [["x"]]},
        {"doc_id": 0, "resps": [["x"]]},
    ]
    (tmp_path / "bad.jsonl").write_text("".join(json.dumps(x) + "\n" for x in bad))
    result = score_file(task, samples, str(tmp_path / "bad.jsonl"), str(tmp_path / "c.jsonl"))
    assert result.scored == 1 and [p.split(": ", 1)[1] for p in result.problems] == [
        f"doc_id {len(samples)!r} is not a position among the {len(samples)} documents (0 to {len(samples) - 1})",
        f"doc_id '0' is not a position among the {len(samples)} documents (0 to {len(samples) - 1})",
    ]
    skipped = score_file(task, samples, str(tmp_path / "bad.jsonl"), str(tmp_path / "d.jsonl"), in_order=False)
    assert skipped.scored == 0 and "records of the data were skipped: give ids" in skipped.problems[-1]


def test_a_benchmarks_table_given_as_a_json_file_is_said_to_be_no_table(tmp_path, capsys):
    from vlrl.cli import main

    (tmp_path / "val.json").write_text(json.dumps([{"id": 0, "question": "how many?"}]))
    (tmp_path / "mine.jsonl").write_text(json.dumps({"id": 0, "completion": "3"}) + "\n")
    args = ["score", "--task", "countbenchqa", "--data", str(tmp_path / "val.json"), "--completions"]
    assert main([*args, str(tmp_path / "mine.jsonl"), "--out", str(tmp_path / "out.jsonl")]) == 2
    printed = " ".join(capsys.readouterr().out.split())
    assert "not a readable arrow table (" in printed and "a table is read from parquet or arrow files" in printed


def test_vlrl_score_on_a_benchmark_writes_and_prints_no_reward(tmp_path, capsys):
    """A benchmark has metrics only: its scored lines hold no rewards, and no mean reward is printed."""
    from vlrl.cli import main

    _, samples, path = _load("countbenchqa", tmp_path, size=2, seed=11)
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": s.id, "completion": str(s.solution)}) + "\n" for s in samples))
    args = ["score", "--task", "countbenchqa", "--data", str(path), "--completions", str(completions)]
    assert main([*args, "--out", str(tmp_path / "scored.jsonl"), f"data.image_cache={tmp_path / 'cache'}"]) == 0
    out = capsys.readouterr().out
    assert " acc " in out and "mean reward" not in out
    lines = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == [s.id for s in samples]
    assert all("rewards" not in line and "reward" not in line for line in lines), lines


# -- Video-R1's evaluator and VSI-Bench ----------------------------------------------------------------
REWARD_CASES = [
    ("<think>hm</think><answer>B</answer>", "<answer>B</answer>", "multiple choice"),
    ("<answer> B </answer>", "<answer>B</answer>", "multiple choice"),
    ("B", "<answer>B</answer>", "multiple choice"),
    ("<answer></answer>", "<answer>B</answer>", "multiple choice"),
    ("<answer>b</answer>", "<answer>B</answer>", "multiple choice"),
    ("<answer>3</answer>", "<answer>3</answer>", "numerical"),
    ("<answer>3.0</answer>", "<answer>3</answer>", "numerical"),
    ("<answer>1,000</answer>", "<answer>1000.5</answer>", "numerical"),
    ("<answer>3.004</answer>", "<answer>3.001</answer>", "numerical"),
    ("<answer>2</answer>", "<answer>2.0</answer>", "regression"),
    ("<answer>2.6</answer>", "<answer>2.0</answer>", "regression"),
    ("<answer>2.49999</answer>", "<answer>2.0</answer>", "regression"),
    ("<answer>0</answer>", "<answer>0</answer>", "regression"),
    ("<answer>nan</answer>", "<answer>2.0</answer>", "regression"),
    ("<answer>inf</answer>", "<answer>2.0</answer>", "numerical"),
    ("<answer>two</answer>", "<answer>2.0</answer>", "regression"),
    ("<answer>hello</answer>", "<answer>hello</answer>", "OCR"),
    ("<answer>a cat</answer>", "<answer>a cat</answer>", "free-form"),
    ("<answer>B</answer>", "B", "multiple choice"),  # an untagged solution reads as ""
]


@pytest.mark.parametrize("output,solution,problem_type", REWARD_CASES)
def test_video_r1_reward_equals_the_evaluator(output, solution, problem_type):
    assert video_r1_reward(output, solution, problem_type) == reference_video_r1_reward(
        {"solution": solution}, output, problem_type
    )


@pytest.mark.parametrize("name", ["video_r1_vsibench", "video_r1_mvbench"])
def test_video_r1_benchmarks_equal_the_evaluator(name, tmp_path):
    task, samples, path = _load(name, tmp_path, size=18, seed=8)
    records = json.loads(path.read_text())
    assert [task.messages(s)[0]["content"][1]["text"] for s in samples] == [video_r1_prompt(r) for r in records]
    assert [s.video for s in samples] == [str(path.parent / r["path"]) for r in records]

    def responses_of(sample):
        truth = video_r1_extract_answer(sample.meta["solution"])
        return [f"<think>x</think><answer>{truth}</answer>", "<answer>A</answer>", truth, "<answer>2.3</answer>",
                "<answer>three</answer>", f"The answer is {truth}.", "<answer>1.5 meters</answer>",
                *_reasoning(f"<answer>{truth}</answer>", "<answer>Z</answer>"), *_reasoning(truth, "Z")]  # fmt: skip

    for responses in _rounds(responses_of, samples):
        got = task.metrics(samples, responses)
        expected = video_r1_final_acc(records, responses)
        assert {k: got[k] for k in expected} == expected
        if name == "video_r1_vsibench":
            docs = [
                {"question_type": r["original_question_type"], "ground_truth": video_r1_extract_answer(r["solution"])}
                for r in records
            ]
            predictions = [video_r1_extract_answer(text) or text for text in responses]
            for reference in REFERENCES:
                vsi = reference.vsibench(docs, predictions)
                assert {k: got[k] for k in vsi} == vsi
        else:
            assert "vsibench_overall" not in got


VSI_CASES = [
    ("object_counting", "3", "3"), ("object_counting", "three chairs", "3"), ("object_counting", "one apple, room 2", "1"),
    ("object_counting", "twenty-one", "21"), ("object_counting", "three hundred and twenty-one", "321"),
    ("object_abs_distance", "about 2.5 meters", "2.1"), ("object_size_estimation", "no idea", "80"),
    ("room_size_estimation", "15", "20.5"), ("object_rel_direction_easy", "A. left", "A"),
    ("object_rel_direction_medium", "a", "A"), ("object_rel_direction_hard", "B.", "A"), ("object_rel_distance", "C", "C"),
    ("route_planning", "D is right", "D"), ("obj_appearance_order", "Option B", "B"),
]  # fmt: skip


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
def test_vsi_bench_eight_task_mean_equals_lmms_eval(reference):
    docs = [{"question_type": t, "ground_truth": g} for t, _, g in VSI_CASES]
    predictions = [p for _, p, _ in VSI_CASES]
    scores = vsi_task_scores([{"question_type": t, "score": vsi_score(t, p, g)} for t, p, g in VSI_CASES])
    expected = reference.vsibench(docs, predictions)
    assert round(scores["overall"], 6) == expected["vsibench_overall"]
    assert round(scores["object_counting_MRA:.5:.95:.05"], 6) == expected["object_counting_mra"]
    assert round(scores["object_rel_direction_accuracy"], 6) == expected["object_rel_direction_accuracy"]
    assert 0 < expected["vsibench_overall"] < 1


# -- every benchmark: the eval-only contract ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(benchmark_names()))
def test_every_benchmark_reads_its_fixture_and_scores_any_text(name, tmp_path):
    task, samples, _ = _load(name, tmp_path, size=2, seed=9)
    assert task.eval_only and not task.reward_functions() and task.reward_weights == {}
    with pytest.raises(ConfigError, match="evaluation-only"):
        task.target(samples[0])
    content = task.messages(samples[0])[-1]["content"]  # the user's turn (after a system prompt, if any)
    media = [part["type"] for part in content if part["type"] != "text"]
    assert media == ["video"] or (media and set(media) == {"image"})  # one video, or images (MuirBench's several)
    junk = ["", "]]]]{{{", "<answer>" * 50, "1" * 5000, "[1e309, 2, 3, 4] NaN -0 ０.５"]
    for text in junk:
        texts = [text] * len(samples)
        metrics = task.metrics(samples, texts)
        processed = task.processed(samples, texts, LMMS_EVAL_REASONING_TAGS)[1]
        returned = {name for name in task.aggregations() if any(name in p for p in processed)}
        assert returned and returned <= metrics.keys()  # every metric some sample returned (and extras: ScreenSpot's)
        assert all(isinstance(v, float) for v in metrics.values())
    assert task.describe("absolute")["reference"]


def test_training_on_a_benchmark_fails_with_a_clear_error(tmp_path, capsys):
    from vlrl.cli import main
    from vlrl.tasking.task import Task

    data = tmp_path / "ds"
    make_task(TaskConfig(name="countbench")).synthesize(data, 2, 0)
    for command in ("train", "sft"):
        assert main([command, "--task", "countbench", f"data.train={data}", "model.path=tiny:qwen2_5_vl"]) == 2
        assert "'countbench' is an evaluation-only benchmark (no rewards)" in capsys.readouterr().out
    mixture = f"mixture=[{{name: counting, train: {tmp_path / 'c.json'}}}, {{name: countbench, train: {data}}}]"
    assert main(["train", mixture, "data.synthetic=true", "model.path=tiny:qwen2_5_vl"]) == 2
    assert "evaluation-only benchmark" in capsys.readouterr().out
    assert not (tmp_path / "c.json").exists()  # refused before the first entry's data was written

    class Rewardless(Task):  # only an eval-only task may go without rewards
        name = "rewardless"

        def reward_functions(self):
            return {"r": lambda c, s: [0.0] * len(c)}

    with pytest.raises(ConfigError, match="has no reward components selected"):
        Rewardless()
    type("EvalOnly", (Rewardless,), {"eval_only": True})()


def test_vlrl_eval_on_a_published_benchmark_writes_lmms_eval_shaped_files(tmp_path, tiny_qwen25, capsys):
    """`vlrl eval --task refcoco_bbox_rec_val --data DIR --model CKPT` on a dataset as downloaded
    (several splits; one row's image does not decode): lmms-eval's files, lmms-eval's numbers."""
    from vlrl.cli import main

    name, data = "refcoco_bbox_rec_val", tmp_path / "RefCOCO"
    task = make_task(TaskConfig(name=name))
    task.synthesize(data, 4, seed=0)
    write_parquet(hub_file(data, "testA"), synthetic_rows(3, seed=1), SCHEMA)
    rows = pq.read_table(hub_file(data, "val")).to_pylist()
    rows[1]["image"] = {"bytes": b"not an image", "path": "broken.jpg"}
    write_parquet(hub_file(data, "val"), rows, SCHEMA)
    out = tmp_path / "out"
    args = ["eval", "--task", name, "--data", str(data), "--model", "tiny:qwen2_5_vl", "--out", str(out), "--batch-size", "3",
            "model.max_pixels=50176", "eval.max_new_tokens=12", f"data.image_cache={tmp_path / 'cache'}"]  # fmt: skip
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    metrics = [f"refcoco_{m}" for m in ("IoU", "ACC@0.1", "ACC@0.3", "ACC@0.5", "ACC@0.7", "ACC@0.9", "Center_ACC")]
    assert set(results["results"][name]) == {"alias"} | {f"{m},none" for m in metrics} | {
        f"{m}_stderr,none" for m in metrics
    }
    good = [r for i, r in enumerate(rows) if i != 1]
    effective = sum(len(r["answer"]) for r in good)
    assert results["n-samples"][name] == {"original": effective + 1, "effective": effective}
    assert "row 1 image: embedded image does not decode" in results["skipped"][name][0]
    config = results["configs"][name]
    assert (config["dataset_path"], config["test_split"]) == ("lmms-lab/RefCOCO", "val") and "lmms-eval" in config[
        "coords"
    ]
    assert config["reasoning_tags"] == [list(pair) for pair in LMMS_EVAL_REASONING_TAGS]
    assert config["model_class"] == "models/chat/qwen2_5_vl.py"  # what `lmms-eval --model qwen2_5_vl` runs
    assert config["image_pixels"] == [200704, 1605632]  # its budget, not model.max_pixels=50176
    printed = capsys.readouterr().out
    assert "images sized as lmms-eval's models/chat/qwen2_5_vl.py sizes them" in printed
    lines = [json.loads(line) for line in samples_path(out, name).read_text().splitlines()]
    assert len(lines) == effective
    for line in lines:  # scored: the response stripped; the raw one beside it where that changed it
        raw = line.get("resps", line["filtered_resps"])
        assert isinstance(raw, str) and line["filtered_resps"] == strip_reasoning(raw, LMMS_EVAL_REASONING_TAGS)
    assert lines[0]["input"].startswith("Bounding box coordinates are specified") and isinstance(
        lines[0]["target"], str
    )
    assert {"pred", "bbox", "answer", "ann_id"} <= lines[0]["refcoco_IoU"].keys()
    # The reported numbers are lmms-eval's for the logged responses.
    docs = hub_docs(hub_file(data, "val"), skip=(1,))
    prompts, expected = Reimplementation().refcoco_rec(
        docs, [line.get("resps", line["filtered_resps"]) for line in lines]
    )
    assert [line["input"] for line in lines] == prompts
    assert {m: results["results"][name][f"{m},none"] for m in metrics} == expected
    assert str(out / "results.json") in printed
    from vlrl.tasking.registry import list_tasks

    assert (name, "benchmark (evaluation only)") in [row[:2] for row in list_tasks()]


def test_generation_length_is_the_benchmarks_unless_the_config_sets_one():
    from vlrl.eval.harness import EvalSettings, sampling_params

    cfg = load_config(None, ["rollout.max_new_tokens=300"])
    lengths = {name: sampling_params(EvalSettings.of(cfg), make_task(TaskConfig(name=name))).max_new_tokens
               for name in ("countbench", "pixmo_count", "screenspot_v2", "refcoco_grounding_test", "video_r1_vsibench", "refcoco_bbox_rec_val", "refcoco")}  # fmt: skip
    assert lengths == {"countbench": 16, "pixmo_count": 32, "screenspot_v2": 128, "refcoco_grounding_test": 512,
                       "video_r1_vsibench": 1024, "refcoco_bbox_rec_val": 300, "refcoco": 300}  # fmt: skip
    cfg.eval.max_new_tokens = 7
    assert sampling_params(EvalSettings.of(cfg), make_task(TaskConfig(name="countbench"))).max_new_tokens == 7


# -- math: MathVista (judge-free), the reasoning tasks, Geometry3K ---------------------------------------


def _mathvista_responses(sample):
    doc = sample.solution if isinstance(sample.solution, dict) else {}
    answer = str(doc.get("answer", sample.solution))
    return [answer, f" {answer} ", "(B)", "B", f"The answer is {answer}.", "", "14.0", "3", "1.45", "0.5", "2.0"]


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize("name", ["mathvista_testmini_cot", "mathvista_testmini_solution", "mathvista_testmini_format"])
def test_mathvista_without_its_judge_equals_lmms_eval(name, reference, tmp_path):
    if not hasattr(reference, name):
        pytest.skip(f"{reference.name} asks a GPT judge for {name}")
    task, samples, path = _load(name, tmp_path, size=9, seed=3)
    docs = _docs(task, path)
    for responses in _rounds(_mathvista_responses, samples):
        prompts, expected = getattr(reference, name)(docs, reference.scored(responses))
        assert [s.problem for s in samples] == prompts
        _assert_same(task, samples, responses, expected)


def test_mathvista_float_questions_are_never_right_as_lmms_eval_rounds_them(tmp_path):
    task, samples, _ = _load("mathvista_testmini_format", tmp_path, size=9, seed=3)
    floats = [s for s in samples if s.solution["answer_type"] == "float"]
    assert floats and task.metrics(floats, [s.solution["answer"] for s in floats])["llm_as_judge_eval"] == 0.0
    integers = [s for s in samples if s.solution["answer_type"] == "integer"]
    assert task.metrics(integers, [s.solution["answer"] for s in integers])["llm_as_judge_eval"] == 100.0


def _answer_text(sample) -> str:
    """The answer a sample's responses are built around: ChartQA's, OCRBench's first, or the solution."""
    solution = sample.solution
    if isinstance(solution, dict):
        answer = solution["answer"] if "answer" in solution else solution["label"]  # V*'s is its label
        return answer[0] if isinstance(answer, list) else answer
    return str(solution)


def _reasoning_responses(sample):
    truth = _answer_text(sample)
    return [
        f"<think>r</think><answer>{truth}</answer>",
        f"<think>r</think><answer>({truth}) x</answer>",
        f"The answer is \\boxed{{{truth}}}.",
        f"so it is {truth}.",
        "<think>r</think><answer>$\\frac{1}{2}$</answer>",
        "<answer>Dark green</answer>",
        "no answer at all",
        f"{'x' * 60} = {truth}",
    ]


# -- OCRBench, ChartQA -----------------------------------------------------------------------------------
def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" if c == " " else c for c in text)


def _ocr_responses(sample):
    answer = _answer_text(sample)
    return [
        answer,
        f"The text reads {answer.upper()}.",
        " ".join(answer),  # spaced out: right for HME100k only
        _fullwidth(answer),
        answer[:-1],
        "",
        f"line one\n{answer.lower()}\nline three",
        *_reasoning(answer, "decoy"),
    ]


def _chart_responses(sample):
    answer = _answer_text(sample)
    number = float(answer.rstrip("%")) if answer.rstrip("%").isdigit() else 7.0
    return [
        answer,
        answer.upper(),
        f" {answer}",  # stripped by lmms-eval's Task.process_results under any reasoning tags
        f"{number * 1.04:g}",
        f"{number * 1.06:g}",
        f"{number:g}%",
        f"{number / 100:g}",
        f"{answer[:1]}_{answer[1:]}",  # Python's float reads 1_2 as 12
        "nan",
        "inf",
        "0",
        f"It is {answer}",
        *_reasoning(answer, "Figs"),
    ]


def _mcq_responses(sample):
    letter = _answer_text(sample)
    other = "C" if letter != "C" else "D"
    return [
        letter,
        f"({letter})",
        f"{letter}.",
        f"Answer: {letter}",
        f"The answer is {letter}",
        f"I think {other}. No, the answer is {letter}",
        f"({other}) or ({letter})",
        f"{letter}ad",  # a word starting with the letter: not a standalone letter
        letter.lower(),
        "",
        "E",
        f"{other} is wrong; {letter}",
        f"I say {other}. 答案是{letter}",  # the phrase ("the answer is") outranks "{other}."
        f"({letter}) or (E)",  # MMStar reads A-D only: (E) is no candidate
        *_reasoning(letter, other),
    ]


def _mmmu_responses(sample):
    truth = sample.solution
    if truth["multiple_choice"]:
        right = truth["options"][1]
        return ["B", "(B)", "The answer is B.", f"B. {right}", "I think (A) but it is (B)", f"I would say it is {right} here",
                "A or B", "", "no idea at all", "(E)", "b", f"Looking closely, {truth['options'][0]} is what I count",
                f"it shows {right} dots here", "The answer: (A)", "B!", f"maybe {right} or {truth['options'][2]} it seems",
                "A.B okay"]  # fmt: skip  # "B " is looked for before "A."
    n = truth["answer"]
    return [n, f"The answer is {n}.", f"there are {n} dots", f"{n}.0", "three", f"{n},000", f"x = {n}",
            f"so {n}\nfinal answer is {int(n) + 1}", "", f"{n} dots", "It could be 1e3", f"{int(n) + 1}",
            f".{n}.", f"{n} is !", f"so {int(n) + 1}\nx = {n}", f"{n}.004", f"it is {n}; so"]  # fmt: skip


def _realworldqa_responses(sample):
    answer = sample.solution
    if answer in "ABCD":
        return _mcq_responses(dataclasses.replace(sample, solution={"answer": answer}))[:16]
    return [answer, answer.lower(), f"{answer}.", f"{answer}..", f" {answer.upper()} ", f"{answer}!", "", "B",
            f"It is {answer}", f"{answer}\n", "three", "Dots", "3", f"<think>{answer}</think>", f"{answer} .", "no"]  # fmt: skip


def _ai2d_responses(sample):
    letter = sample.solution
    other = "A" if letter != "A" else "B"
    return [letter, f"{letter}.", f"  {letter}. because", f"({letter})", f"{letter})", letter.lower(), f"{letter} is right",
            f"{other}. no, {letter}", f"<think>{other}.</think> {letter}.", f"{letter}\n", "", f"'{letter}'", f"{letter}!?",
            f"Z. {letter}"]  # fmt: skip


def _gqa_responses(sample):
    answer = sample.solution
    return [answer, answer.upper(), f"{answer}.", f"'{answer}'", f" {answer} ", f"{answer}s", f"a {answer}",
            f"{answer}\n", f"{answer}!?", f"{answer} {answer}", "", "no", f"<think>no</think>{answer}",
            f"{answer}\u3000", f"{answer}-"]  # fmt: skip


def _kangaroo_responses(sample):
    """Each of _extract_prediction's readings, and the words its first pattern reads a letter in."""
    letter = sample.solution[0] if sample.solution else "A"
    other = "A" if letter != "A" else "B"
    return [f"Answer: {letter}", f"the final answer is ({letter.lower()})", f"option {letter}, not {other}", f"{other}\n({letter}).",
            f"I think {letter} not", f"The answer is: {letter}", f"answered by {other}", f"{letter}\n\n", "", "none",
            f"Options: {letter}", f"E.g. {letter}?", f"<think>{other}</think> {letter}", f"{letter}{other}"]  # fmt: skip


def _sat_responses(sample):
    """The letter, punctuated, an option's text (read as its letter where the question lists the options), two
    texts (the leftmost wins), and reasoning whose tags the filter has taken apart."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    listed = sample.solution["question"]
    text = listed.split(f"{letter}. ")[-1].split("\n")[0].strip() or "no listed text"
    other_text = listed.split(f"{other}. ")[-1].split("\n")[0].strip() or "no other text"
    return [letter, f"({letter}).", f"{letter} is it", f"{letter.lower()}!", f"I think {text}", f"{text} or dots",
            f"{text}, not {other_text}", f"{other_text}, not {text}",
            f"<think>{other}</think>{letter}", f"{other}\n{letter}", "", "   ", f"-{letter}-", f"{letter}{other}"]  # fmt: skip


def _mmsi_responses(sample):
    """Letters enclosed as asked, in braces, standalone, lower-case, followed by a word, and none."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [f"``{letter}``", f"`{letter}`", f"{{{letter}}}", letter, letter.lower(), f"{letter} is right",
            f"{other} dots, so {letter}.", f"``{other}`` then `{letter}`", f"`{letter}` or ``{other}``", "no letter",
            f"E{letter}", f"({letter})", f"option {letter}", f"the answer is {letter}", "", f"F, {letter}"]  # fmt: skip


def _fsc147_responses(sample):
    """Counts as lmms-eval's _to_int reads them: bare, in a sentence, with commas, halves (to
    even), decimals, negative, in other digits, the first of two, none."""
    n = 3 if sample.solution is None else sample.solution
    return [f"{n}", f"There are {n} red dots.", f"{n + 1}", f"1,{n:03d}", f"{n}.5", f"{n - 1}.5", f"{n}.49",
            f"-{n}", "\u0663", f"{n} or {n + 2}", "none", "", f"{n}e3"]  # fmt: skip


def _vlmsareblind_responses(sample):
    """Each task's formats (braces, parentheses, rows=/columns=), the answer in a sentence (a
    number still reads, a letter reads the sentence's first), other cases, wrong, none; right
    and wrong in turn, so that no round of three answers is all wrong (lmms-eval's task_mean
    then divides by zero)."""
    answer, task = sample.solution["answer"], sample.solution["task"].lower()
    if task.startswith("counting grid"):
        r, c = answer.split(",")
        return [f"{{{r}}}{{{c}}}", f"({c}, {r})", f"{{{r}}} {{{c}}}", f"{r},{c}", f"({r}, {c})",
                f"rows={{{r}}}  columns={{{c}}}", f"({r} , {c})", "none", f"rows={{{r}}} columns={{{c}}}"]  # fmt: skip
    if task == "touching circles":
        other = "no" if answer.lower() == "yes" else "yes"
        return [answer, other, answer.upper(), f"{answer}.", f" {answer.lower()} ", f"{answer}, they do", answer, ""]
    return [f"{{{answer}}}", "{z9}", answer.upper(), "", f"{{{answer}}}.", f"The answer is {{{answer}}}", answer,
            f"so: {answer}"]  # fmt: skip


def _groundingme_responses(sample):
    """The truth as JSON in pixels, [0, 1], 0-999 and Qwen's resized frame; a box shifted by
    a fifth and by a half of its width (ACC@t at some t); null; bare numbers (the last four); a
    fence followed by more braces (the greedy span then fails JSON); a null box holding another
    (the span from the first brace); [0, 1] up to 1 itself; nothing."""
    from tasks.benchmarks.groundingme import smart_resize_qwen

    (w, h), truth = (sample.frame.width, sample.frame.height), sample.solution
    x1, y1, x2, y2 = truth if sample.meta["l1"] != "Rejection" else [w / 4, h / 4, w / 2, h / 2]
    qh, qw = smart_resize_qwen(h, w)
    box = lambda b: '{"bbox_2d": [' + ", ".join(f"{v:.3f}" for v in b) + "]}"  # noqa: E731
    shift = lambda k: box([x1 + k * (x2 - x1), y1, x2 + k * (x2 - x1), y2])  # noqa: E731
    return [box([x1, y1, x2, y2]), box([x1 / w, y1 / h, x2 / w, y2 / h]),
            box([round(v * 999) for v in (x1 / w, y1 / h, x2 / w, y2 / h)]),
            box([x1 * qw / w, y1 * qh / h, x2 * qw / w, y2 * qh / h]), shift(0.2), shift(0.5), '{"bbox_2d": null}',
            f"first 1 2 3 4, then {x1:.0f}, {y1:.0f} {x2:.0f},{y2:.0f}", f"```json\n{box([x1, y1, x2, y2])}\n``` {{\"note\": 1}}",
            '{"bbox_2d": null, "alt": ' + box([x1, y1, x2, y2]) + "}", box([x1 / w, y1 / h, 1, 1]), ""]  # fmt: skip


def _osworld_g_responses(sample):
    """A point inside the target in pixels and normalized, on an edge, outside, the refusal, a
    <bbox> tag, a box's four numbers, x=/y=, none."""
    truth, (w, h) = sample.solution, sample.solution["size"]
    box = truth["box"]
    if truth["type"] == "bbox":
        cx, cy = box[0] + box[2] / 2, box[1] + box[3] / 2
    elif truth["type"] == "polygon" and len(box) == 4:
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    elif truth["type"] == "polygon":
        cx, cy = (box[0] + box[2] + box[4]) / 3, (box[1] + box[3] + box[5]) / 3  # the triangle's centroid
    else:
        cx, cy = w / 2, h / 2
    return [f"[{cx:.0f}, {cy:.0f}]", f"[{cx / w:.4f}, {cy / h:.4f}]", "[-1, -1]", f"<bbox>{cx - 2:.0f} {cy - 2:.0f} {cx + 2:.0f} {cy + 2:.0f}</bbox>",
            f"x={cx:.1f}, y={cy:.1f}", "[0.99, 0.01]", f"the box is {cx - 1:.0f} {cy - 1:.0f} {cx + 1:.0f} {cy + 1:.0f}",
            "no target", f"[{box[0] if box else 0:.0f}, {box[1] if box else 0:.0f}]", "(-1, 5)", f"[{cx:.0f} {cy:.0f}]"]  # fmt: skip


def _visualwebbench_responses(sample):
    """parse_multi_choice_response's readings: a lone letter (any case), "X." first, "(X)" (the
    last of several), " X " (the last), punctuation dropped, none (empty, "ß": -1), a letter past H."""
    letter, other = "ABCDEFGH"[sample.solution], "B" if sample.solution != 1 else "C"
    return [letter, letter.lower(), f"{letter}. yes", f"({other}) or ({letter})", f"so {other} then {letter}",
            f"{letter}!", f"I pick {letter}.", "", "\u00df", f"({letter}) not ({other})", f"{letter}{other}",
            "Z", f"{other} and {letter}, {other}", f"'{letter}'"]  # fmt: skip


def _vlms_are_biased_responses(sample):
    """The truth in braces and cases, the bias, digits among words (either's), superscript digits
    (str.isdigit), no digits, none."""
    truth, bias = sample.solution["answer"], sample.solution["bias"]
    return [f"{{{truth}}}", truth.upper(), f"{{{bias}}}", f"{{ {truth} }}", f"I count {truth} of them",
            f"about {bias}", f"{{{{{truth}}}}}", "\u00b2", "many", "", f"{truth}{bias}", f" {{{truth}}}.",
            f"{truth}\u00b2 of them"]  # fmt: skip


def _vmcbench_responses(sample):
    """The letter alone, "X.", "(X)", "X. text", two letters (the last bracketed, or the first of
    "X. " ones), an option's text in a long answer, stripped punctuation, none (a seeded draw)."""
    letter, options = sample.solution["answer"], sample.solution["options"]
    other = "A" if letter != "A" else "B"
    return [letter, f"{letter}.", f"({letter})", f"{letter}. {options[letter]}", f"({other}) no, ({letter})",
            f"{other}. no, {letter}. yes", f"I think it is {options[letter]} in the end", "no idea", "",
            f"'{letter}'!", f"{letter} or {other}", f"the answer is clearly {options[other]} here",
            f"option{letter} fits"]  # fmt: skip  # " X " only: no letter read here


def _mirb_responses(sample):
    """A letter alone, "X.", "(X)", lower-case; an open answer as a key phrase, a number with commas,
    in a sentence, an equation, wrong, none."""
    answer = sample.solution["answer"]
    if answer in "ABCDE":
        other = "A" if answer != "A" else "B"
        return [answer, f"{answer}. dots", f"({answer})", answer.lower(), f"{other}. no", f"  {answer}.",
                f"{answer} is right", "", f"{answer}{other}", f"Z. {answer}"]  # fmt: skip
    return [answer, f"The answer is {answer}.", f"so it is {answer}", f"x = {answer}", "7", "", "I am not sure",
            f"{answer.upper()}!", f"count: {answer.replace(',', '')}", f"Maybe {answer}. Or not"]  # fmt: skip


def _multihopspatial_responses(sample):
    """Each answer form (in turn, the first that matches), with the box as bbox_2d, a "Bounding
    Box:" line, a bare list, on the 0-1000 grid, inverted, outside [0, 1], or none."""
    letter, other = sample.solution["letter"], "a" if sample.solution["letter"] != "a" else "b"
    w, h = sample.solution["size"]
    x1, y1, x2, y2 = 10 / w, 10 / h, 40 / w, 30 / h  # the truth box [10, 10, 30, 20] in pixels
    good = f"[{x1:.3f}, {y1:.3f}, {x2:.3f}, {y2:.3f}]"
    return [f'Answer: ({letter}) thing\nBounding Box: {{"bbox_2d": {good}}}', f"Answer: {letter}) thing\nBounding Box: {good}",
            f"Answer: {letter.upper()}\n{good}", f"I pick ({letter}) there, ({other}) not. {good}",
            f"Answer: ({letter})\n[{x1 * 1000:.0f}, {y1 * 1000:.0f}, {x2 * 1000:.0f}, {y2 * 1000:.0f}]",
            f"Answer: ({letter})\n[{x2:.3f}, {y2:.3f}, {x1:.3f}, {y1:.3f}]", f"Answer: ({other}) x\n{good}",
            f"Answer: ({letter}) [0.0, 0.0, 1.5, 0.5]", "no idea", "", f"answer: ({letter}) box [0.1, 0.1, 0.12, 0.12]",
            f"Answer: ({letter}), the {letter}\n[-0.1, 0.2, 0.3, 0.4]"]  # fmt: skip


def _simplevqa_responses(sample):
    """The answer in other cases, with articles, punctuation, number words, commas; wrong; none."""
    answer = sample.solution
    return [answer, answer.upper(), f"the {answer}.", f"{answer}!", f" {answer}\n", "three", "3", f"a {answer}?",
            answer.replace(",", ""), "", "It is unknown", f"{answer}'s"]  # fmt: skip


def _naturalbench_responses(sample):
    """The right word as asked, in other cases and among others; the wrong one; both (the first
    counts); "a" as an article (A for a letter question); neither."""
    yes = sample.solution["index"] % 4 in (0, 3)  # q0 on image 0 and q1 on image 1: yes / A
    one, zero = ("Yes", "No") if sample.solution["type"] == "yes_no" else ("A", "B")
    right, wrong = (one, zero) if yes else (zero, one)
    return [right, f"{right}.", right.lower(), f"{right}, it is.", f"I think {right.upper()}",
            wrong, f"{wrong} and {right}", f"{right} or {wrong}", "It is a square.", "Nope", "Bored", "",
            f"({right})", f"yes{right}"]  # fmt: skip


def _erqa_responses(sample):
    """extract_mcq_answer's formats over A-D: a letter alone, in parentheses, after a phrase, two letters, none."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [letter, f"({letter})", f"The answer is {letter}.", f"{other} or {letter}", "no letter", letter.lower(),
            f"{letter}: yes", f"I doubt {other}. So {letter}", "", f"E{letter}", f"{letter} and {other}", f"E) no, {letter}"]  # fmt: skip


def _threedsr_responses(sample):
    """extract_answer's eight patterns in turn, and what none of them reads."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [f" {letter}. since", letter, f"Answer: {letter}", f"the answer is {letter}", f"My answer is  {letter}",
            f"pick ({letter})", f"x{other}. then {letter}", f"so {letter} here", f"{other}{letter}", "",
            letter.lower(), f"{other}) wait, {letter}", f"answer {letter}", f"Option {other}, not {letter}",
            f"{letter}) or {other}.", f"{other}? Answer: {letter}", f"{other}? the answer is {letter}",
            f"{other}? my answer is {letter}", f"{other}? pick ({letter})"]  # fmt: skip


def _spatial457_responses(sample):
    """Its JSON template answered as asked, unquoted, other spellings of yes and numbers, and no template."""
    truth = sample.solution["answer"]
    return [f"{{'Reasoning': 'x', 'Answer': '{truth}'}}", f"{{'Reasoning': 'x', 'Answer': {truth}}}",
            f'"answer": "{truth.upper()}"', f"ANSWER = '{truth}'", f"Answer:'{truth} '", truth, f" {truth} ", "",
            "Answer: true", "{'Answer': 'no'}", f"Answer: 0{truth}", "'Answer': 12", "Answer = maybe", "Answer: 1", "Answer: false",
            f"the answer: {truth}"]  # fmt: skip


def _chartqapro_responses(sample):
    """The answer as written, near and far numbers, lists (quoted, bare, short, malformed), case, ANLS-near
    texts, a text upper-casing lengthens, and what no parser reads."""
    truth = sample.solution["answer"].strip().strip(".")
    number = next((float(t) for t in truth.replace("%", " ").replace("[", " ").replace(",", " ").split()
                   if t.replace(".", "").isdigit()), 3.0)  # fmt: skip
    return [truth, f" {truth}.\n", f"{number * 1.04:g}", f"{number * 1.06:g}%", f"[{number:g}, 'dots']",
            f"['{number:g}', 'dot']", f"[{number:g}]", f"[{number:g}, dots", truth.upper(), truth.lower() + "x",
            "ßß", "", "nan", "inf", "1e999", "[[1], 2]", "(1, 2)", "True.", "b", "red", "redd", f"{number:g} dot",
            f"{truth}ß", truth.replace(" ", "  "), f"{number + number / 20:g}", "0.0", f"[\"'{number:g}'\", 'dots']",
            "['true']"]  # fmt: skip


def _viewspatial_responses(sample):
    """Letters alone, in either case, inside words, on an earlier line, and none."""
    letter = sample.solution["option"] or "C"
    other = "A" if letter != "A" else "B"
    return [letter, letter.lower(), f"{letter}. left", f"{other}\n{letter}", f"{letter}\nno option", "", "none",
            f"X{letter} {other}", f"({other}) or {letter}", f"Answer: {letter}", f"{letter}\n"]  # fmt: skip


def _omni_spatial_responses(sample):
    """The first letter after thinking, answer tags in any case, lower case, and a leading word."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [letter, letter.lower(), f"{other}</think>{letter}", f"<think>{letter}</think> {other}",
            f"{other}</thought>\n{letter}", f"<ANSWER> {letter} </answer>", f"<answer>{other}</answer>{letter}",
            f"Answer: {letter}", "", f"  {letter}.", f"{letter}</think>{other}</think>{letter}",
            f"<answer>x</answer><answer>{letter}</answer>", "ß", f"{other}\nmore</think>{letter}"]  # fmt: skip


def _mindcube_responses(sample):
    """extract_answer's stages in turn: "X.", an <Answer> section, the priority patterns, a line's letter."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [f"{letter}.", f"{other}. no, {letter}. yes", f"<Answer> my answer is {letter}", f"<Answer>{other} or {letter}<x>",
            f"<Answer>The answer is {letter} not {other}", f"{other} then\n{letter} yes", f'pick "{letter}" or *{other}*',
            f"Answer:{letter}", f"so the answer is {letter}", f"{letter}\n{other}x", f"x {other} y\n no", "",
            f"<Answer> {other}\n{letter}", f"Answer: {letter}\n", "E", f"My answer is {letter}",
            f"<Answer>\nmy answer is {letter}\n{other}", f"<Answer>{other}<x> my answer is {letter}",
            f'{letter} is it, not "{other}"', f"so {other}? Answer:{letter}", f"so {other}? the answer is {letter}",
            f"so {other} here\nthen {letter} there"]  # fmt: skip


def test_a_mindcube_prompt_is_interleaved_for_a_chat_class_as_lmms_eval_does(tmp_path):
    from lmms_eval_reference import mindcube_interleaved_messages

    from vlrl.tasking.lmms_eval_model import lmms_eval_model_class

    task, samples, path = _load(
        "mindcube_full", tmp_path, size=8, seed=2, model_class=lmms_eval_model_class("qwen2_5_vl", "auto")
    )
    docs = list(_docs(task, path))
    for sample, doc in zip(samples, docs, strict=True):
        expected = mindcube_interleaved_messages(doc["input_prompt"], doc["images"])[0]["content"]
        assert task.messages(sample)[-1]["content"] == [
            {k: v for k, v in part.items() if k != "url"} for part in expected
        ]
        assert len(sample.images) == sum(part["type"] == "image" for part in expected)
    simple = make_task(TaskConfig(name="mindcube_full")).for_model(lmms_eval_model_class("qwen2_5_vl", "simple"))
    _, samples, _ = _load(
        "mindcube_full", tmp_path / "s", size=8, seed=2, model_class=lmms_eval_model_class("qwen2_5_vl", "simple")
    )
    assert [len(s.images) for s in samples] == [len(d["images"]) for d in docs]
    assert simple.messages(samples[0])[-1]["content"][-1]["text"] == docs[0]["input_prompt"].replace("<image>", "")


def _where2place_responses(sample):
    """Points inside and outside the mask's quarter, outside the image, negative, on the rounded pixel,
    tuples of other lengths, integers, and none."""
    return ["[(0.1, 0.1)]", "[(0.1, 0.1), (0.9, 0.9)]", "(0.25,0.2) (0.3, 0.8) (1.5, 0.1)", "[(-0.1, 0.1)]", "",
            "(0, 0)", "(1, 0)", "(0.5, 0.0)", "(0.1, 0.1, 0.1)", "[(0.2, 0.3), (0.4)]", "no points", "(-0.001, 0.1)",
            "(0.49, 0.49)", "(0.504, 0.001)", "(0.565, 0.001)"]  # fmt: skip


def _point2d_responses(sample):
    """Qwen's point_2d JSON on the 0-1000 grid, normalized floats, a float with an integer, tuples, bad pairs."""
    return ['[{"point_2d": [100, 100], "label": "spot"}]', '[{"point_2d": [900, 900]}]', "[0.1, 0.1]", "(0.9, 0.1)",
            "[100, 0.1]", "[ 10 , 20 ]", "[-5, 10]", "[1000, 0]", "[499, 10] [501, 10]", "", "[1, 2, 3]",
            "(0.504, 0.001) (0.565, 0.001)", "[1,2]", "[.5, 1]", "[999, 0]", "[1000, 0]"]  # fmt: skip


def test_a_where2place_point_too_large_to_scale_is_outside_the_image_where_lmms_eval_fails():
    from lmms_eval_reference import where2place_text2pts

    from tasks.benchmarks.where2place import in_mask_share, points

    mask = np.ones((4, 4), dtype=int)
    for text in (f"(1{'0' * 400}.0, 0.1) (0.1, 0.1)", f"(3{'0' * 400}, 0.1) (0.1, 0.1)"):
        with pytest.raises(OverflowError):
            where2place_text2pts(text, 4, 4)  # lmms-eval's _text2pts
        found = points(text, 4, 4)
        assert found == [None, (0, 0)] and in_mask_share(mask, found) == 0.5


def _puzzle_responses(sample):
    """A response for each of parse_response's patterns in turn, one that only an option's text answers, and
    one that leaves the random letter."""
    letter, options = sample.solution["answer"], sample.solution["options"] or ["x", "y", "z", "w"]
    other = "A" if letter != "A" else "B"
    text, other_text = options["ABCD".index(letter)], options["ABCD".index(other)]
    return [f"Answer: ({letter.lower()})", f"Final Answer: {other}. Answer: {letter}", f"Final Answer: {letter}",
            f"Answer: {other}. Final Answer: {letter}", f"I pick ({letter}) not ({other}) but ({letter})",
            f"{other}) or {letter})", f"{{{letter}}}", f"${letter}$", f"so it is {letter}. yes", f" {letter} ",
            f"zz {letter}?", f"it is {letter} for sure", f"answer: {text.lower()}", f"answer: {text} but {other_text}",
            f"{text} then {other_text} then {text}", "no idea", "", f"Answer: (E) then Answer: {letter}", "(e)",
            f"{letter}"]  # fmt: skip


def _zerobench_responses(sample):
    """The answer as written, re-cased, quoted, spaced, with a final period, as another decimal of the same
    value, with commas; and near misses."""
    answer = sample.solution
    return [answer, answer.upper(), f'"{answer}"', f"`{answer}`.", f"  {answer}  ", f"{answer}.", "6.00", "1,006",
            "1006", "-0", "0.5", ".5", f"{answer} dots", f"the answer is {answer}", f"{answer}\n\n", "e5", "1e3",
            f"'{answer}  dots'", f"<think>5</think>{answer}", "٣", answer.replace(",", ""), f"0,{answer}"]  # fmt: skip


def _embspatial_responses(sample):
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [letter, f"({letter.lower()})", f" {letter}) because", f"{letter}.", f"The answer is {letter}", "",
            f"{other} or {letter}", f"<think>{other}</think>{letter}", "1", f"[{letter}]", f"Answer: {letter}"]  # fmt: skip


def _hrbench_responses(sample):
    """Each of can_infer's rules: a letter as a word (among punctuation), two letters, "Z", a refusal, an option's
    text, two options' texts, and what only a judge would read."""
    letter, options = sample.solution["answer"], sample.solution["options"]
    other = "A" if letter != "A" else "B"
    return [letter, f"({letter}).", f"**{letter}**", f"{letter} or {other}", "Z", "Cannot determine the answer",
            f"It is {options[letter]}.", f"{options[letter]} {options[other]}", "the second one", "",
            f"Failed to obtain answer via API {letter}", f"Failed to obtain answer via API, {options[letter]}",
            f"<think>{other}</think>{letter}", f"{letter.lower()}", f"[{letter}]",
            f"Cannot determine the answer, maybe {letter}", f"Z: {options[letter]}"]  # fmt: skip


def _mme_rw_responses(sample):
    """Each way extract_characters_regex reads a letter, or reads the wrong one ("A" of "Answer"), or none."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [letter, f"({letter})", f"The best answer is {letter}", f"Answer: {letter}", "", f"({letter.lower()})", ")",
            f"{letter.lower()}", "none of these choices is the right one for the picture shown here at all",
            f"many words before the letter and after it to pass ten of them {letter}", f"{letter}. because",
            f"<think>{other}</think>{letter}", f"The correct option is{other}", f"Best option: ({letter})", "xyz"]  # fmt: skip


def _mme_responses(sample):
    return ["Yes", "no", "Y", "n.", "Nope", "not sure", "yes, it is", "No. Yes.", "x", "", "Yes\n", "I think yes",
            "<think>no</think>Yes", "NO!", "I no, yes", "a yes"]  # fmt: skip


def _cv_bench_responses(sample):
    letter = sample.solution["answer"]
    return [letter, f"({letter.lower()})", f" {letter}. yes", f"Answer: {letter}", f"The answer is {letter}", "",
            f"(({letter}))", f"{letter}{letter}", "1", f"<think>A</think>{letter}", f"\n{letter}\n", "é"]  # fmt: skip


def _sqa_responses(sample):
    letter = sample.solution
    other = "A" if letter != "A" else "B"
    return [letter, letter.lower(), f" {letter} ", f"{letter}. it", f"{letter.lower()}. it", f"({letter})", f"{other}.",
            f"{letter}.", f"The answer is {letter}", "", f"{letter}{letter}", f"{other}. {letter}", "\u0130."]  # fmt: skip


def _vstar_responses(sample):
    letter = sample.solution["label"]
    other = "B" if letter != "B" else "C"
    return [letter, f"{letter.lower()}.", f"The answer is {letter}", f"answer: ({letter.lower()})", f"Option {other}",
            f"I think {letter} is right", f"x{letter.lower()}y", f"x{letter.lower()}y z{other.lower()}w", f"{other}{letter}", "", "none", f"({other}) or ({letter})",
            f"\u0131 {letter}", f"choice\n{letter}", "ab", f"<think>{other}</think>{letter}", "Dog"]  # fmt: skip


def _mmvp_responses(sample):
    letter = sample.solution["answer"]
    other = "AB"[letter == "A"]
    return [letter, f"({letter.lower()})", f"{letter}. Even", f"The answer is {letter}", f"option ({letter})",
            f"a cat, {letter}", f"I pick {other}", f"{letter}{other}", f"{other}x", f"{letter}xz", "", "\u0131", f"<think>{other}</think>{letter}",
            f"answer is\n{letter.lower()}", f"Option {other}!", f"\n{letter}\n", "Bb", "nothing"]  # fmt: skip


def _seed_responses(sample):
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    return [letter, letter.lower(), f" {letter} ", f"{letter}. it", f"({letter})", f"The answer is {letter}", "",
            f"{other}{letter}", f"{letter.lower()}x", f"\n{letter}\n", f"<think>{other}</think>{letter}", "\u0130",
            f"{letter}ASSISTANT: {other}", f"ASSISTANT: {letter}"]  # fmt: skip


def _anls_responses(sample):
    answer = sample.solution[0]
    return [answer, answer.lower(), f"  {answer.upper()}  ", answer[:-1], answer[: len(answer) // 2], "", f"It is {answer}",
            answer.replace(" ", "\n "), "ß" * len(answer), f"{answer}ß", answer[::-1], sample.solution[-1]]  # fmt: skip


def _textvqa_responses(sample):
    answer = sample.solution[0]
    return [answer, answer.upper(), f"The {answer}.", f"{answer}ASSISTANT: sign", "sign", "a sign", f"({answer})",
            f"{answer}, {answer}", "dont walk", "Three.", "3", "2500", "2,500", "No 5.", "It's Im oclock", "somebody'd",
            "a.b.c." * 20, f"{answer} - !", answer + "." * 40, answer.replace(" ", "-")]  # fmt: skip


def _vqa_responses(sample):
    """TextVQA's kinds over the first answer (a string, or a VQAv2 answer record; "sign" where there is none),
    and the marks the VQAv2 cleaning treats otherwise than EvalAI's full processor."""
    first = (sample.solution or ["sign"])[0]
    answer = first["answer"] if isinstance(first, dict) else first
    return [*_textvqa_responses(SimpleNamespace(solution=[answer])), f"{answer}?", f"{answer},", f"{answer}'s",
            f"{answer}\t!", answer.replace(" ", ","), "Unanswerable", "unanswerable."]  # fmt: skip


def _mmbench_responses(sample):
    """Each way MMBench's rules read a letter: a word, a form ("B.", "(B)", ":B"), an option's text, then
    extract_mcq_answer; and the ways they read none or the wrong one (two letters, "A" as an article)."""
    letter = sample.solution["answer"]
    other = "A" if letter != "A" else "B"
    text = sample.solution[letter]
    return [letter, f"{letter}.", f"({letter})", f":{letter}", f"The answer is {letter}", f"{letter} {other}",
            f"I see {text} dots", f"{other}. {text}", f"A cat and {letter} here", f"Answer:{letter}", f"{letter.lower()}",
            f"{text}", "", "Failed to obtain answer via API", f"<think>{other}</think>{letter}", "nan", f"**{letter}**",
            f"option {letter}, not {other}", f"{other}. or {letter}."]  # fmt: skip


def _muir_responses(sample):
    letter = sample.solution
    other = "A" if letter != "A" else "B"
    return [letter, f"{letter}.", f" {letter}. yes", letter.lower(), f"{letter.lower()}.", f"({letter})", f"{other}. {letter}",
            f"{letter} {other}", "", f"The answer is {letter}.", f"<think>{other}</think>{letter}", f"\n{letter}.\n"]  # fmt: skip


def _pope_responses(sample):
    return ["yes", "no", "Yes", "Yes.", " NO ", "yes, there are", "", "maybe", "<think>no</think> yes",
            "</think>no", "Yes\n", "nO"]  # fmt: skip


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize(
    "name, kinds",
    [("ocrbench", _ocr_responses), ("chartqa", _chart_responses), ("mmstar", _mcq_responses),
     ("mmstar_qwen", _mcq_responses), ("mmmu_val", _mmmu_responses), ("mmmu_val_qwen", _mmmu_responses),
     ("realworldqa", _realworldqa_responses), ("pope", _pope_responses), ("pope_adv", _pope_responses),
     ("ai2d", _ai2d_responses), ("mme", _mme_responses), ("cv_bench", _cv_bench_responses),
     ("cv_bench_3d", _cv_bench_responses), ("docvqa_val", _anls_responses), ("infovqa_val", _anls_responses),
     ("textvqa_val", _textvqa_responses), ("mmvp", _mmvp_responses), ("blink_counting", _cv_bench_responses),
     ("blink_visual_similarity", _cv_bench_responses), ("vstar_bench", _vstar_responses), ("scienceqa", _sqa_responses),
     ("scienceqa_img", _sqa_responses), ("seedbench", _seed_responses), ("seedbench_lite", _seed_responses),
     ("seedbench_2_plus", _seed_responses), ("vqav2_val", _vqa_responses), ("ok_vqa_val2014", _vqa_responses),
     ("vizwiz_vqa_val", _vqa_responses), ("mmbench_en_dev_static", _mmbench_responses),
     ("mmmu_pro_standard", _mmmu_responses), ("mmmu_pro_vision", _mmmu_responses),
     ("muirbench", _muir_responses), ("gqa", _gqa_responses), ("mmerealworld", _mme_rw_responses),
     ("mmerealworld_cn", _mme_rw_responses), ("hrbench4k", _hrbench_responses),
     ("embspatial", _embspatial_responses), ("zerobench", _zerobench_responses),
     ("VisualPuzzles_direct", _puzzle_responses), ("VisualPuzzles_cot", _puzzle_responses),
     ("mmsi_bench", _mmsi_responses), ("sat", _sat_responses), ("mathkangaroo", _kangaroo_responses),
     ("erqa", _erqa_responses), ("naturalbench", _naturalbench_responses), ("fsc147", _fsc147_responses),
     ("vlmsareblind", _vlmsareblind_responses), ("osworld_g", _osworld_g_responses), ("groundingme", _groundingme_responses),
     ("vlms_are_biased", _vlms_are_biased_responses), ("vmcbench", _vmcbench_responses),
     ("mirb", _mirb_responses), ("multihopspatial", _multihopspatial_responses),
     ("simplevqa", _simplevqa_responses),
     ("visualwebbench_element_ground", _visualwebbench_responses),
     ("visualwebbench_action_prediction", _visualwebbench_responses),
     ("visualwebbench_action_ground", _visualwebbench_responses),
     ("illusionvqa_comprehension", _ai2d_responses), ("illusionvqa_soft_localization", _ai2d_responses),
     ("3dsrbench", _threedsr_responses), ("3dsrbench_circular", _threedsr_responses),
     ("spatial457_l1_single", _spatial457_responses), ("spatial457_l5_collision", _spatial457_responses),
     ("chartqapro", _chartqapro_responses), ("viewspatial", _viewspatial_responses),
     ("omni_spatial", _omni_spatial_responses), ("mindcube_full", _mindcube_responses),
     ("mindcube_tiny_around", _mindcube_responses), ("where2place", _where2place_responses),
     ("refspatial_placement", _where2place_responses), ("where2place_json", _point2d_responses),
     ("refspatial_unseen_json", _point2d_responses)],
)  # fmt: skip
def test_the_newer_benchmarks_equal_lmms_eval(name, kinds, reference, tmp_path):
    method = _lmms_eval_method(name)
    if not hasattr(reference, method):
        pytest.skip(f"{reference.name} has no {method}")  # lmms-eval's mmmu utils import its LLM-judge verifiers
    task, samples, path = _load(name, tmp_path, size=12, seed=3)
    docs = _docs(task, path)
    for responses in _rounds(kinds, samples):
        prompts, expected = getattr(reference, method)(docs, responses)
        assert [s.problem for s in samples] == prompts
        assert _nan_named(task.metrics(samples, responses)) == _nan_named(expected)


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
@pytest.mark.parametrize(
    "name",
    ["mathvista_testmini_cot_reasoning", "mathverse_testmini_reasoning", "mathvision_reason_testmini_reasoning",
     "dynamath_reasoning", "logicvista_reasoning", "wemath_testmini_reasoning", "mmerealworld_reasoning",
     "mmerealworld_cn_reasoning", "ocrbench_reasoning", "chartqa_reasoning",
     "mmstar_reasoning", "realworldqa_reasoning", "ai2d_reasoning", "vstar_bench_reasoning"],
)  # fmt: skip
def test_reasoning_benchmarks_equal_lmms_eval(name, reference, tmp_path):
    pytest.importorskip("math_verify")
    if not hasattr(reference, name):
        pytest.skip(f"{reference.name} has no {name}")
    task, samples, path = _load(name, tmp_path, size=8, seed=4)
    docs = _docs(task, path)
    for responses in _rounds(lambda s: _hostile(name, s), samples):
        prompts, expected = getattr(reference, name)(docs, reference.scored(responses))
        assert [s.problem for s in samples] == prompts
        assert task.metrics(samples, responses) == expected
    # MathVista's, MathVerse's, MathVision's, DynaMath's, LogicVista's, WeMath's and RealWorldQA's name their
    # own (<think>); the others get reasoning_utils' default
    system = (
        DEFAULT_REASONING_SYSTEM_PROMPT
        if name.startswith(("ocrbench", "chartqa", "mmstar", "vstar", "mmerealworld"))
        else THINK_SYSTEM_PROMPT
    )
    assert task.messages(samples[0])[0] == {"role": "system", "content": [{"type": "text", "text": system}]}


WEMATH_KEYS = ["2steps_1", "2steps_2", "2steps_multi", "3steps_1", "3steps_2", "3steps_3", "3steps_multi", "1step"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(WEMATH_KEYS), st.booleans()), min_size=1, max_size=30))
@example([(0, "2steps_1", True), (0, "2steps_multi", True)])  # a step missing: neither right nor wrong
@example(
    [
        (0, "3steps_1", False),
        (0, "3steps_1", True),
        (0, "3steps_2", False),
        (0, "3steps_3", False),
        (0, "3steps_multi", True),
        (0, "3steps_multi", False),
    ]
)  # rows repeated: every pairing counts
def test_wemath_scores_every_pairing_of_steps_as_its_pandas_merges_do(rows):
    items = [{"ID": f"p{problem}", "key": key, "acc_score": 1.0 if right else 0.0} for problem, key, right in rows]
    expected = wemath_aggregate_results(items)
    assert wemath_score(items, strict=False) == float(expected["Score (Loose)"].rstrip("%"))
    assert wemath_score(items, strict=True) == float(expected["Score (Strict)"].rstrip("%"))


@pytest.mark.parametrize(
    ("name", "key"),
    [("dynamath_reasoning", "ground_truth"), ("wemath_testmini_reasoning", "answer"), ("mmerealworld", "answer"),
     ("hrbench4k", "answer"), ("erqa", "answer"), ("3dsrbench", "answer"), ("spatial457_l4_occ", "answer")],
)  # fmt: skip
def test_a_row_without_the_answer_its_scorer_reads_is_skipped_and_named(name, key, tmp_path):
    if name.endswith("_reasoning"):
        pytest.importorskip("math_verify")
    task = make_task(TaskConfig(name=name))
    rows = list(task.synthetic_rows(3, 0))
    rows[1][key] = None
    _, split = _read_rows(name, rows, task.schema, task.split, tmp_path)
    assert len(split.samples) == 2 and len(split.errors) == 1
    assert split.errors[0].source.endswith(":row 1") and f"key '{key}' must be the answer" in str(split.errors[0])
    metrics = task.metrics(split.samples, ["A", "B"])  # the others score
    assert metrics and all(math.isfinite(value) for value in metrics.values())


def test_a_chartqapro_row_without_an_answer_is_skipped_and_named_and_the_others_score(tmp_path):
    task = make_task(TaskConfig(name="chartqapro"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1]["Answer"] = []
    _, split = _read_rows("chartqapro", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 1"] and "'Answer'" in str(split.errors[0])
    assert len(split.samples) == 2 and task.metrics(split.samples, ["x", "y"])["relaxed_overall"] == 0.0


def test_naturalbench_scores_its_complete_groups_of_four_in_any_row_order_where_lmms_eval_asserts_all(tmp_path):
    """lmms-eval asserts 7,600 rows in Index order; vlrl scores the complete groups (Index // 4),
    in any order: the same numbers as lmms-eval's on those groups alone."""
    task, samples, path = _load("naturalbench", tmp_path, size=11, seed=2)  # two groups and three rows
    docs = _docs(task, path)
    kinds = [_naturalbench_responses(s) for s in samples]
    for r in range(len(kinds[0])):
        responses = [k[(i + r) % len(k)] for i, k in enumerate(kinds)]
        _, expected = Reimplementation().naturalbench(docs.select(range(8)), responses[:8])
        assert task.metrics(samples, responses) == expected
        assert task.metrics(samples[::-1], responses[::-1]) == expected
    right = [k[0] for k in kinds]
    assert task.metrics(samples, right)["naturalbench_G_ACC"] == 1.0
    assert task.metrics(samples[:3], right[:3])["naturalbench_G_ACC"] == 0.0  # no complete group
    wrong = [k[5] for k in kinds]
    twice = task.metrics(samples[:8] + samples[:1], right[:4] + wrong[4:8] + right[:1])
    assert twice["naturalbench_G_ACC"] == 0.0  # the first group, a row repeated, is left out: the second is wrong


def test_a_naturalbench_row_of_another_question_type_or_without_an_index_is_skipped_and_named(tmp_path):
    task = make_task(TaskConfig(name="naturalbench"))
    rows = list(task.synthetic_rows(4, 0))
    rows[2]["Question_Type"] = "open"
    rows[3]["Index"] = None
    _, split = _read_rows("naturalbench", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 2", "row 3"] and "'open'" in str(split.errors[0])
    assert "'Index'" in str(split.errors[1]) and len(split.samples) == 2


def test_an_fsc147_number_too_large_for_a_float_reads_as_none_where_lmms_eval_fails(tmp_path):
    """_to_int's int(round(float("9" * 400))) raises OverflowError (its except catches
    ValueError): a response is scored as one without a number, a row's count is an error."""
    from lmms_eval_reference import fsc147_to_int

    from tasks.benchmarks.counting import fsc147_int

    with pytest.raises(OverflowError):
        fsc147_to_int("9" * 400)
    assert fsc147_int("9" * 400) is None and fsc147_int("1,234.5") == fsc147_to_int("1,234.5") == 1234
    task = make_task(TaskConfig(name="fsc147"))
    rows = [row | {"count": None} for row in task.synthetic_rows(3, 0)]
    rows[2] |= {"annotated_pos_count": None, "pos_count": None, "count": "9" * 400}
    schema = task.schema.append(pa.field("count", pa.string()))
    _, split = _read_rows("fsc147", rows, schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 2"] and "'count'" in str(split.errors[0])
    (truth,) = {s.solution for s in split.samples[:1]}
    assert task.metrics(split.samples[:1], ["9" * 400]) == {"fsc147_exact_match": 0.0, "fsc147_mae": float(truth)}
    split.samples[1].solution = -2  # a negative count: the distance to no number is its size, as there
    assert task.metrics(split.samples[1:], ["none"])["fsc147_mae"] == 2.0


def test_vlmsareblind_with_no_right_answer_reports_a_task_mean_of_0_where_lmms_eval_divides_by_zero(tmp_path):
    from lmms_eval_reference import vlmsareblind_aggregate_by_task

    task, samples, _ = _load("vlmsareblind", tmp_path, size=4, seed=0)
    wrong = [{"task": s.solution["task"], "is_correct": False} for s in samples]
    with pytest.raises(ZeroDivisionError):
        vlmsareblind_aggregate_by_task(wrong)
    assert task.metrics(samples, ["{z9}"] * 4) == {"accuracy": 0.0, "accuracy_by_task/task_mean": 0.0}


def test_an_illusionvqa_row_whose_answer_is_no_option_is_skipped_and_named_where_lmms_eval_raises(tmp_path):
    from lmms_eval_reference import illusionvqa_doc_to_target

    task = make_task(TaskConfig(name="illusionvqa_comprehension"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1]["answer"] = "none of them"
    with pytest.raises(ValueError):
        illusionvqa_doc_to_target(rows[1])
    _, split = _read_rows("illusionvqa_comprehension", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 1"] and "'none of them'" in str(split.errors[0])
    assert task.metrics(split.samples, [s.solution for s in split.samples]) == {"exact_match": 1.0}


def test_osworld_g_scales_a_normalized_point_by_the_rows_image_size_not_the_images(tmp_path):
    task, samples, path = _load("osworld_g", tmp_path, size=5, seed=1)
    doc, sample = _docs(task, path)[4], samples[4]  # a bbox row whose image_size is twice its image's
    width, height = doc["image_size"]
    assert doc["box_type"] == "bbox" and (width, height) == (2 * sample.frame.width, 2 * sample.frame.height)
    x, y, w, h = doc["box_coordinates"]
    response = f"[{(x + w / 2) / width:.4f}, {(y + h / 2) / height:.4f}]"
    assert task.metrics([sample], [response])["osworld_g_acc"] == 1.0


def test_a_screenspot_row_without_a_four_number_box_is_skipped_and_named(tmp_path):
    task = make_task(TaskConfig(name="screenspot_rec_test"))
    rows = list(task.synthetic_rows(3, 0))
    rows[0]["bbox"], rows[2]["bbox"] = None, [0.1, 0.2, 0.3]
    _, split = _read_rows("screenspot_rec_test", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 0", "row 2"] and len(split.samples) == 1
    assert all("bbox must be 4 numbers" in str(e) for e in split.errors)


def test_a_vmcbench_row_of_an_unknown_source_is_skipped_and_named_where_lmms_eval_raises(tmp_path):
    from lmms_eval_reference import vmcbench_process_results

    task = make_task(TaskConfig(name="vmcbench"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1]["category"] = "NewBench"
    with pytest.raises(KeyError):
        vmcbench_process_results(rows[1], ["A"])
    _, split = _read_rows("vmcbench", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 1"] and "'NewBench'" in str(split.errors[0])
    assert task.metrics(split.samples, [s.solution["answer"] for s in split.samples])["average"] == 1.0


def test_a_mirb_row_of_an_unknown_subset_is_skipped_and_named_where_lmms_eval_fails(tmp_path):
    from lmms_eval_reference import mirb_get_task_instruction

    task = make_task(TaskConfig(name="mirb"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1]["subset"] = "puzzles"
    with pytest.raises(UnboundLocalError):
        mirb_get_task_instruction("puzzles")
    _, split = _read_rows("mirb", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 1"] and "'puzzles'" in str(split.errors[0])
    assert len(split.samples) == 2


def test_a_spatial457_digit_int_cannot_read_is_a_wrong_answer_where_lmms_eval_fails():
    from lmms_eval_reference import spatial457_check_correctness

    from tasks.benchmarks.spatial457 import is_right

    with pytest.raises(ValueError):
        spatial457_check_correctness("2", "²")  # "²".isdigit(), int("²") raises
    assert not is_right("2", "²") and is_right("02", "2") and is_right("No", "false")


def test_embspatial_reports_a_source_without_rows_as_0_and_refuses_an_answer_past_its_four_letters(tmp_path):
    task, samples, _ = _load("embspatial", tmp_path, size=2, seed=1)  # rows from ai2thor and mp3d only
    got = task.metrics(samples, [s.solution["answer"] for s in samples])
    assert got == {"embspatial_acc": 1.0, "ai2thor_accuracy": 1.0, "mp3d_accuracy": 1.0, "scannet_accuracy": 0.0}
    rows = list(task.synthetic_rows(2, 0))
    rows[0]["answer"] = 4
    _, split = _read_rows("embspatial", rows, task.schema, task.split, tmp_path / "bad")
    assert len(split.samples) == 1 and "answer 4 names none of the options A, B, C, D" in str(split.errors[0])


def test_a_visualpuzzles_row_with_fewer_than_four_options_is_skipped_and_named(tmp_path):
    task = make_task(TaskConfig(name="VisualPuzzles_direct"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1]["options"] = ["1 Dots", "2 Dots"]
    _, split = _read_rows("VisualPuzzles_direct", rows, task.schema, task.split, tmp_path)
    assert len(split.samples) == 2 and split.errors[0].source.endswith(":row 1")
    assert "options holds 2 entries; the prompt shows four" in str(split.errors[0])


@pytest.mark.parametrize(
    "question, response",
    [("Which?\nA. x\nB. x", "x"), ("Which?\nA. left\nB. left turn", "a left turn"), ("Which?\nA. \nB. y", "y"), ("Which?\nB. y\nA. ", "zzz"),
     ("No options here.", "The answer: B"), ("Q\nC. up\nD. down", "down, up"), ("Q (A. x)", "x)")],
)  # fmt: skip
def test_sats_filter_reads_listed_options_as_lmms_evals_does(question, response):
    from tasks.benchmarks.sat import listed_option

    assert listed_option(response, question) == sat_filter([[response]], [{"question": question}])[0]


def test_ocrbench_reads_hme100k_without_spaces_or_case_folding_and_divides_by_1000(tmp_path):
    task, samples, _ = _load("ocrbench", tmp_path, size=20, seed=1)
    hme = [s for s in samples if s.solution["dataset"] == "HME100k"]
    assert hme and len(hme) < len(samples)
    sample = dataclasses.replace(hme[0], solution={**hme[0].solution, "answer": ["x^{2}+1"]})
    other = dataclasses.replace(sample, solution={**sample.solution, "dataset": "IIIT5K", "answer": ["Main St"]})
    right = {"x ^ { 2 }\n+ 1": (sample, 1), "X^{2}+1": (sample, 0), "MAIN\u3000ＳＴ": (other, 1), "mainst": (other, 0)}
    for response, (s, score) in right.items():
        assert task.metrics([s], [response]) == {"ocrbench_accuracy": score / 1000}, response
    assert task.metrics(samples, [_answer_text(s) for s in samples]) == {"ocrbench_accuracy": 20 / 1000}


def test_chartqa_reports_a_split_only_where_its_samples_are_and_reads_percent_and_zero_answers(tmp_path):
    task, samples, _ = _load("chartqa", tmp_path, size=6, seed=2)
    human = [s for s in samples if s.solution["type"] == "human_test"]
    got = task.metrics(human, [_answer_text(s) for s in human])
    assert got == {"relaxed_overall": 1.0, "relaxed_human_split": 1.0}
    truths = {"52%": "0.53", "0": "0.0", "0.0": "0.0", "12": "1_2", "Figs": "figs"}
    expected = {"52%": 1.0, "0": 0.0, "0.0": 1.0, "12": 1.0, "Figs": 1.0}  # a 0 answer is compared as text
    for answer, response in truths.items():
        sample = dataclasses.replace(human[0], solution={"answer": answer, "type": "augmented_test"})
        got = task.metrics([sample], [response])
        assert got == {"relaxed_overall": expected[answer], "relaxed_augmented_split": expected[answer]}, answer
    other = dataclasses.replace(human[0], solution={"answer": "3", "type": "val"})  # not human_test: augmented
    assert task.metrics([other], ["3"]) == {"relaxed_overall": 1.0, "relaxed_augmented_split": 1.0}


def test_mmstar_means_its_l2_categories_and_counts_an_unknown_category_in_the_average_only(tmp_path):
    task, samples, _ = _load("mmstar", tmp_path, size=1, seed=0)

    def sample(category, l2, answer="B"):
        truth = {"answer": answer, "category": category, "l2_category": l2, "index": 0}
        return dataclasses.replace(samples[0], solution=truth)

    math = [sample("math", "geometry")] * 3 + [sample("math", "statistical reasoning")]
    got = task.metrics([*math, sample("poetry", "rhyme")], ["B", "B", "B", "A", "B"])
    assert got == {"math": (1.0 + 0.0) / 2, "average": (1.0 + 0.0 + 1.0) / 3}  # not 4/5: a mean of L2 means
    assert task.metrics([sample("math", "geometry", answer=" b ")], ["The answer is (B)."]) == {
        "math": 1.0,
        "average": 1.0,
    }


def test_mmmu_open_questions_score_as_lmms_eval_or_as_mmmu_and_a_letterless_answer_is_drawn_per_question(tmp_path):
    reference = REFERENCES[0]
    scores = {}
    for open_answers in ("lmms_eval", "mmmu"):
        task, samples, path = _load("mmmu_val", tmp_path / open_answers, size=12, seed=3, open_answers=open_answers)
        docs = _docs(task, path)
        right = [_answer_text(s) for s in samples]  # the letter, or the open answer itself
        _, expected = reference.mmmu_val(docs, right, open_answers=open_answers)
        scores[open_answers] = task.metrics(samples, right)
        assert scores[open_answers] == expected
        assert task.describe("absolute")["open_answers"] == open_answers
        for responses in _rounds(_mmmu_responses, samples):
            assert task.metrics(samples, responses) == reference.mmmu_val(docs, responses, open_answers=open_answers)[1]
    n_open = sum(not s.solution["multiple_choice"] for s in samples)
    assert n_open and scores["mmmu"]["mmmu_acc"] == 1.0
    assert scores["lmms_eval"]["mmmu_acc"] == round((len(samples) - n_open) / len(samples), 5)  # open never right there
    mc = next(s for s in samples if s.solution["multiple_choice"])
    letters = {task.process(text, mc)["mmmu_acc"]["parsed_pred"][0] for text in ["", "", "no idea"]}
    assert letters == {random.Random(mc.solution["id"]).choice("ABCD")}


@pytest.mark.parametrize(
    "gold, response",
    [("a", "banana"), ("a", "it is a"), ("A", "The answer is (a)."), ("Paris", "so it is paris, france"),
     ("1,234.5", "the total is 1234.50 dollars"), ("1,234", "about 1,234 in all"), ("3.14", "x = 3.1416"), ("0.5", "it could be about 5e-1 units"),
     ("12", "first 13.\nthus 12"), ("12", "The results are 12. The answer is 13")],
)  # fmt: skip
def test_mmmu_open_answers_are_read_as_mmmus_eval_utils_read_them(gold, response):
    from lmms_eval_reference import mmmu_eval_open, mmmu_parse_open_response

    from tasks.benchmarks.mmmu import eval_open, parse_open_response

    assert sorted(map(str, parse_open_response(response))) == sorted(map(str, mmmu_parse_open_response(response)))
    assert eval_open(gold, parse_open_response(response)) == mmmu_eval_open(gold, mmmu_parse_open_response(response))


def test_mmmu_shows_the_images_its_markers_name_and_skips_rows_lmms_eval_would_stop_on(tmp_path):
    from tasks.benchmarks.mmmu import SCHEMA as MMMU_SCHEMA
    from tasks.benchmarks.mmmu import synthetic_row

    scenes = list(dot_scenes(4, 0))
    rows = [synthetic_row(*scene) for scene in scenes]
    assert "<image 2>" in rows[1]["options"]
    rows[2]["options"] = "__import__('os').system('true')"
    rows[3]["image_1"] = None
    rows.append(synthetic_row(*scenes[0]) | {"options": "[]"})  # multiple choice, no options
    rows.append(synthetic_row(*scenes[0]) | {"id": "Art_Theory"})  # no subject: MMMU weighs accuracy by it
    task, split = _read_rows("mmmu_val", rows, MMMU_SCHEMA, "validation", tmp_path)
    assert [len(s.images) for s in split.samples] == [1, 2] and len(split.errors) == 4
    assert "not a Python list literal" in str(split.errors[0]) and "image_1 is empty" in str(split.errors[1])
    assert "no options" in str(split.errors[2]) and "'Art_Theory' names no subject" in str(split.errors[3])
    simple = task.for_model(lmms_eval_model_class("qwen2_5_vl", "simple"))
    assert simple.messages(split.samples[1])[-1]["content"][:2] == [{"type": "image"}, {"type": "image"}]


def _mmmu_content(messages):
    return [{"type": "image"} if part["type"] == "image" else part for part in messages[-1]["content"]]


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_mmmu_interleaves_its_images_where_lmms_evals_chat_classes_do_and_qwen3_vl_takes_its_kwargs(family, tmp_path):
    """mmmu_doc_to_messages: the text split at the markers, each image where its marker stood
    (in name order), and `--model qwen3_vl`'s own kwargs: the Qwen3-VL format, images first."""
    from lmms_eval_reference import MMMU_KWARGS, MMMU_VAL_QWEN3_VL_KWARGS, mmmu_doc_to_messages

    from tasks.benchmarks.mmmu import SCHEMA as MMMU_SCHEMA
    from tasks.benchmarks.mmmu import synthetic_row

    rows = [synthetic_row(*scene) for scene in dot_scenes(8, 0)]
    rows[5]["question"] = "Compare <image 2> with <image 1>:  "  # markers out of name order, trailing spaces
    rows[5]["image_2"] = rows[5]["image_1"]
    rows[6]["question"] = "<image 1> and again <image 1>, then"  # a marker twice: a piece dropped
    path = tmp_path / "MMMU"
    write_parquet(hub_file(path, "validation"), rows, MMMU_SCHEMA)
    task, samples, _ = _load("mmmu_val", tmp_path, size=8, data=path, model_class=lmms_eval_model_class(family))
    kwargs = MMMU_VAL_QWEN3_VL_KWARGS if family == "qwen3_vl" else MMMU_KWARGS
    docs = _docs(task, path)
    assert len(samples) == len(docs) == 8
    for sample, doc in zip(samples, docs, strict=True):
        assert _mmmu_content(task.messages(sample)) == _mmmu_content(mmmu_doc_to_messages(doc, kwargs))
    assert any(len(s.images) == 2 for s in samples)


def test_realworldqa_reads_a_lower_case_letter_answer_as_a_letter_and_pope_skips_a_non_yes_no_answer(tmp_path):
    from tasks.benchmarks.pope import SCHEMA as POPE_SCHEMA
    from tasks.benchmarks.pope import synthetic_row as pope_row
    from tasks.benchmarks.realworldqa import realworldqa_right

    assert realworldqa_right("The answer is (B).", " b ") and not realworldqa_right("b.", "Downhill")
    rows = [pope_row(*scene) for scene in dot_scenes(3, 0)]
    rows[1]["answer"] = "maybe"
    _, split = _read_rows("pope", rows, POPE_SCHEMA, "test", tmp_path)
    assert len(split.samples) == 2 and "yes or no" in str(split.errors[0]) and "'maybe'" in str(split.errors[0])


def test_mme_scores_an_unpaired_question_with_the_answers_it_has_where_lmms_eval_stops(tmp_path):
    task, samples, _ = _load("mme", tmp_path, size=6, seed=0)
    pairs = [(s.solution["category"], s.solution["question_id"]) for s in samples]
    assert pairs[0] == pairs[1] != pairs[2] == pairs[3] != pairs[4] and [p[0] for p in pairs[::2]] == [
        "existence", "existence", "count"]  # fmt: skip
    # existence: an image both right (100 + acc+ 100), one half right (50), their mean;
    # count: its one question right, 100 (no acc+)
    got = task.metrics(samples[:5], ["yes", "no", "yes", "yes", "Yes."])
    assert got == {"mme_perception_score": (200.0 + 50.0) / 2 + 100.0}


def test_cv_bench_reads_the_letters_res_case_insensitive_class_reads():
    """lmms-eval reads `[A-Z]` with re.IGNORECASE: every character of the Basic Multilingual Plane
    (where every case mapping into ASCII letters lies) read as there, İ and the Kelvin sign included."""
    import re

    from tasks.benchmarks.cv_bench import answer_letter

    theirs = re.compile(r"[\(\s]*([A-Z])[\)\.\s]*", flags=re.IGNORECASE)
    for code in range(0x10000):
        text = f"({chr(code)}) x"
        match = theirs.match(text.strip())
        assert answer_letter(text) == (match.group(1).upper() if match else ""), hex(code)


def test_an_ocrbench_row_of_an_unknown_category_is_skipped_and_named(tmp_path):
    from tasks.benchmarks.ocrbench import SCHEMA as OCR_SCHEMA
    from tasks.benchmarks.ocrbench import synthetic_rows as ocr_rows

    rows = list(ocr_rows(3, 0))
    rows[1]["question_type"] = "Poetry"
    _, split = _read_rows("ocrbench", rows, OCR_SCHEMA, "test", tmp_path)
    assert len(split.samples) == 2 and len(split.errors) == 1
    assert "question_type" in str(split.errors[0]) and "'Poetry'" in str(split.errors[0])


def _geometry3k_responses(sample):
    choices = sample.solution["choices"]
    return ["B", "b", "(B)", "B.", "Answer: B", "The answer is B", f"B. {choices[1]}", choices[1], choices[3],
            "The answer is B, not a", "Answer: C. Because B is wrong", "I think it is D) no, B", "E", ""]  # fmt: skip


@pytest.mark.parametrize("reference", REFERENCES, ids=IDS)
def test_geometry3k_equals_lmms_eval(reference, tmp_path):
    if not hasattr(reference, "geometry3k"):
        pytest.skip(f"{reference.name} has no geometry3k")
    task, samples, path = _load("geometry3k", tmp_path, size=6, seed=2)
    docs = _docs(task, path)
    for responses in _rounds(_geometry3k_responses, samples):
        prompts, expected = reference.geometry3k(docs, reference.scored(responses))
        assert [s.problem for s in samples] == prompts
        _assert_same(task, samples, responses, expected)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_every_prompt_has_the_system_message_lmms_evals_qwen_classes_send(family, tmp_path):
    """lmms-eval's Qwen classes send "You are a helpful assistant." as the system message; Qwen2.5-VL's
    template writes the same one itself, Qwen3-VL's writes none without it."""
    from vlrl.models.loading import load_processor
    from vlrl.models.prompting import templated_text

    task, samples, _ = _load("countbench", tmp_path, size=1, seed=1)
    model = load_config(None, [f"model.path=tiny:{family}"]).model
    processor = load_processor(model)
    messages = task.messages(samples[0])
    text = templated_text(processor, messages, model)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    without = templated_text(processor, messages[1:], model)
    assert (without == text) == (family == "qwen2_5_vl")  # 2.5's template writes it; 3's does not


@pytest.mark.parametrize("name", ["geometry3k", "countbench"])
def test_a_literal_image_token_leaves_the_prompt_text_where_lmms_evals_simple_classes_delete_it(name, tmp_path):
    task, samples, _ = _load(name, tmp_path, size=1, seed=2)
    sample = dataclasses.replace(samples[0], problem="<image>Find x. " + samples[0].problem)
    simple = task.for_model(lmms_eval_model_class("qwen2_5_vl", "simple")).messages(sample)[-1]["content"]
    assert simple == [{"type": "image"}, {"type": "text", "text": "Find x. " + samples[0].problem}]
    assert task.messages(sample)[-1]["content"][-1]["text"] == sample.problem  # the chat class's: as written


def test_geometry3k_reads_letters_as_lmms_eval_does():
    from tasks.benchmarks.math import geometry3k_letter

    choices = ["3", "6", "9", "12"]
    read = {
        r: geometry3k_letter(r, choices)
        for r in ["6", "12", "13", "The answer is B, not a", "Since AB = 6, x = 6", "E"]
    }
    assert read == {"6": "B", "12": "D", "13": "A", "The answer is B, not a": "A", "Since AB = 6, x = 6": "B", "E": ""}


@settings(max_examples=500, deadline=None)
@example("{7} so the answer is \\boxed")  # a "\\boxed" is looked for before a brace, not at the text's end
@given(st.lists(st.sampled_from(["\\boxed{", "{", "}", "x", "\\boxed", "boxed{", " "]), max_size=30).map("".join))
def test_the_last_closed_box_is_the_one_lmms_eval_finds(text):
    assert last_boxed(text) == extract_boxed_answer(text)


def test_the_last_closed_box_is_found_in_one_pass_after_thousands_of_unclosed_ones():
    """lmms-eval scans from each box to the end: 8,000 unclosed boxes took minutes."""
    assert last_boxed("\\boxed{" * 8000) == "" and last_boxed("\\boxed{" * 8000 + "\\boxed{7}") == "7"


# -- scoring edges the published fixtures do not reach ----------------------------------------------------
def test_counting_reads_none_as_zero_and_pixmo_truths_by_their_first_number():
    def sample(truth):
        return Sample(id="0", task="t", problem="", solution=truth)

    countbench, countbenchqa, pixmo = (
        make_task(TaskConfig(name=n)) for n in ("countbench", "countbenchqa", "pixmo_count")
    )
    assert [countbench.process(r, sample(0)) for r in ("None", " zero ", "0", "nothing")] == [
        {"acc": 1.0}, {"acc": 1.0}, {"acc": 1.0}, {"acc": 0.0}
    ]  # fmt: skip
    assert pixmo.process("I count 12 dots, not 13", sample(" 12 objects ")) == {"acc": 1.0, "exact_match": 1.0}
    assert pixmo.process("twelve", sample("about twelve")) == {"acc": 0.0, "exact_match": 0.0}
    assert countbenchqa.process(" 3\n", sample(3)) == {"acc": 1.0, "exact_match": 1.0}


def test_screenspot_accuracy_by_type_and_platform_counts_edges_and_reads_types_in_any_case():
    """Edges count; a point beyond 1 on one axis is divided by the image size on both; a bracketed
    pair is read before 'x: .., y: ..'; types are compared lowercased; a sample without a platform
    is in no per-platform accuracy."""
    task = make_task(TaskConfig(name="screenspot_v2"))
    kinds = [("Text", "ios"), ("text", "ios"), ("ICON", "web"), ("icon", ""), ("other", "web")]
    samples = [Sample(id=str(i), task=task.name, problem="", solution=[0.2, 0.0 if i == 2 else 0.4, 0.6, 0.8],
                      meta={"size": [100, 200], "type": kind, "platform": platform})
               for i, (kind, platform) in enumerate(kinds)]  # fmt: skip
    responses = ["[0.2, 0.8]", "[0.61, 0.5]", "[40, 0.5]", "(0.6, 0.4)", '{"x": 0.5, "y": 0.5} not [0.9, 0.9]']
    # [40, 0.5] reads as (0.4, 0.0025): inside [0.2, 0.0, 0.6, 0.8]; the last as (0.9, 0.9): outside
    assert task.metrics(samples, responses) == {
        "screenspot_v2_action_acc": 0.6,
        "screenspot_v2_text_acc": 0.5,
        "screenspot_v2_icon_acc": 1.0,
        "screenspot_v2_acc/ios": 0.5,
        "screenspot_v2_acc/ios/text": 0.5,
        "screenspot_v2_acc/web": 0.5,
        "screenspot_v2_acc/web/icon": 1.0,
        "screenspot_v2_acc/web/other": 0.0,
    }
    texts = [s for s in samples if s.meta["type"].lower() == "text"]
    assert task.metrics(texts, ["[0.3, 0.5]"] * 2)["screenspot_v2_icon_acc"] == 0.0  # no icon sample: 0, as lmms-eval


def test_screenspot_ground_truth_boxes_are_read_as_lmms_eval_reads_them():
    from tasks.benchmarks.screenspot import pro_box, v2_box

    assert v2_box([0.2, 0.3, 0.2, 0.5], 100, 200) == [0.2, 0.3, 0.2, 0.5]  # x2 == x1: still normalized x1y1x2y2
    assert v2_box([10, 20, 5, 40], 100, 200) == [0.1, 0.1, 0.15, 0.3]  # x2 < x1: read as [x, y, w, h]
    assert pro_box([0.5, 20, 0.9, 40], 100, 200) == pytest.approx([0.005, 0.1, 0.009, 0.2])  # y2 beyond 1: pixels
    pro = make_task(TaskConfig(name="screenspot_pro"))
    record = {"bbox": "[10, 20, 30, 40]", "img_size": "[100, 200]", "ui_type": "Icon", "data_type": "text",
              "platform": "macos"}  # fmt: skip
    assert pro._truth(record, None) == ([0.1, 0.1, 0.3, 0.2], [100, 200], "icon", "macos")  # ui_type first


def test_lenient_grounding_keeps_the_first_candidate_of_the_highest_iou():
    """A point-like box has IoU 0 read either way; the pixel reading comes first and its center
    lies in the truth, the 0-1000 reading's does not."""
    from vlrl.data.records import FrameSpec

    task = make_task(TaskConfig(name="refcoco_grounding_test"))
    sample = Sample(id="0", task=task.name, problem="", solution=[40.0, 40.0, 80.0, 80.0],
                    frame=FrameSpec().frame(200, 100), meta={"answer": ["it"], "ann_id": "0"})  # fmt: skip
    metrics = task.metrics([sample], ["[60, 60, 60, 60]"])
    assert metrics["refcoco_grounding_Center_ACC"] == 1.0 and metrics["refcoco_grounding_IoU"] == 0.0


def test_video_r1_and_vsi_bench_means_over_the_samples_and_tasks_present():
    """Video-R1's mean_acc over the non-regression samples (float32), mean_mra 0 without a
    regression sample; VSI-Bench's choice types by the first word without its '.', the
    direction levels present averaged into one task, `overall` the mean over tasks, absent
    tasks 0."""
    task = make_task(TaskConfig(name="video_r1_vsibench"))
    rows = [("object_rel_direction_easy", "A", "<answer>A</answer>"),
            ("object_rel_direction_medium", "B", "<answer>C</answer>"),
            ("route_planning", "A", "<answer>A.</answer>")]  # fmt: skip
    samples = [Sample(id=str(i), task=task.name, problem="", solution=None,
                      meta={"problem_type": "multiple choice", "data_type": "video", "solution": f"<answer>{truth}</answer>",
                            "question_type": kind})
               for i, (kind, truth, _) in enumerate(rows)]  # fmt: skip
    metrics = task.metrics(samples, [response for _, _, response in rows])
    assert metrics["mean_acc"] == float(np.float32(1 / 3)) and metrics["mean_mra"] == 0.0
    assert metrics["vsibench_overall"] == 0.75
    assert metrics["object_rel_direction_accuracy"] == 0.5 and metrics["route_planning_accuracy"] == 1.0
    assert metrics["object_counting_mra"] == 0.0 and metrics["obj_appearance_order_accuracy"] == 0.0
    for output, solution, score in [("<answer>3.14</answer>", "<answer>3.12</answer>", 0.0),
                                    ("<answer>3.141</answer>", "<answer>3.14</answer>", 1.0)]:  # fmt: skip
        assert video_r1_reward(output, solution, "numerical") == score  # numbers to 2 decimals
        assert reference_video_r1_reward({"solution": solution}, output, "numerical") == score


def test_math_reasoning_format_length_relaxed_match_and_geometry3ks_choice_text():
    from tasks.benchmarks.math import geometry3k_letter
    from tasks.benchmarks.reasoning import reasoning_format, reasoning_score, relax_exact_match

    assert reasoning_format("y" * 45 + " = 12") == 0.0  # 50 characters: not over 50
    assert reasoning_format("y" * 46 + " = 12") == 0.8
    assert relax_exact_match("123456789", "1234567890") == 1.0  # 9 of 10 characters: 90%
    assert relax_exact_match("12345678", "1234567890") == 0.0
    assert reasoning_score("<answer>red car.</answer>", "red car") == (1.0, 0.0)  # a final '.' dropped
    assert geometry3k_letter("it is six", ["three", "Six", "nine", "twelve"]) == "B"  # the choice's text, any case


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*"aAbBcx .()\n\u0131", "answer is ", "option ", "The "]), max_size=12).map("".join))
@example("Bxz")
@example("a cat")
def test_mmvp_reads_the_letter_lmms_eval_reads_and_its_answers_as_it_does(response):
    from lmms_eval_reference import mmvp_doc_to_target, mmvp_extract_answer_letter

    from tasks.benchmarks.mmvp import answer_letter, target_letter

    assert answer_letter(response) == mmvp_extract_answer_letter(response)
    for answer in ("(a)", "(b)", "a", "b", " B ", "(B) Odd", "(c)", "", "c", "(a) or (b)", "\u0131"):
        assert target_letter(answer) == mmvp_doc_to_target({"Correct Answer": answer}), answer


def test_mmvp_pairs_by_index_and_counts_only_pairs_with_both_questions_scored(tmp_path):
    task, samples, _ = _load("mmvp", tmp_path, size=5, seed=0)  # Index 1..5: pairs (1, 2), (3, 4), and 5 alone
    letters = [s.solution["answer"] for s in samples]
    wrong = ["AB"[letter == "A"] for letter in letters]
    assert task.metrics(samples, letters) == {"mmvp_accuracy": 1.0, "mmvp_pair_accuracy": 1.0}
    assert task.metrics(samples, [*letters[:2], wrong[2], *letters[3:]]) == {
        "mmvp_accuracy": 0.8,
        "mmvp_pair_accuracy": 0.5,
    }
    assert task.metrics(samples, [*letters[:4], wrong[4]]) == {"mmvp_accuracy": 0.8, "mmvp_pair_accuracy": 1.0}


def test_blink_shows_every_image_a_row_holds_in_column_order(tmp_path):
    from lmms_eval_reference import blink_doc_to_visual_keys

    task, samples, path = _load("blink_visual_similarity", tmp_path, size=4, seed=5)
    docs = _docs(task, path)
    assert [len(s.images) for s in samples] == [len(blink_doc_to_visual_keys(d)) for d in docs] == [1, 2, 1, 2]
    for sample, doc in zip(samples, docs, strict=True):
        shown = [np.asarray(Image.open(image).convert("RGB")) for image in sample.images]
        assert all(
            (a == np.asarray(doc[k].convert("RGB"))).all()
            for a, k in zip(shown, blink_doc_to_visual_keys(doc), strict=True)
        )
    assert samples[1].problem.startswith(
        "Note: You only need to respond with A, B, C without providing any additional information.\nHow many"
    )


@pytest.mark.parametrize("name", ["mmstar", "mmstar_qwen", "mmstar_reasoning"])
def test_mmstar_run_with_qwen3_vl_takes_its_yamls_qwen3_vl_prompt_and_other_models_the_default(name, tmp_path):
    """lmms-eval picks a yaml's kwargs by the --model name: mmstar's qwen3_vl kwargs for Qwen3-VL
    (its MoE too), the defaults for Qwen3.5; mmstar_qwen and the reasoning task name none."""
    from lmms_eval_reference import MMSTAR_KWARGS, MMSTAR_QWEN_KWARGS, mmstar_doc_to_text

    for family in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen2_5_vl"):
        task, samples, path = _load(name, tmp_path, size=6, model_class=lmms_eval_model_class(family))
        docs = _docs(task, path)
        if name == "mmstar_reasoning":
            expected = [d["question"].strip() for d in docs]
        elif name == "mmstar_qwen" or family.startswith("qwen3_vl"):
            expected = [mmstar_doc_to_text(d, MMSTAR_QWEN_KWARGS) for d in docs]
        else:
            expected = [mmstar_doc_to_text(d, MMSTAR_KWARGS) for d in docs]
        assert [s.problem for s in samples] == expected, family


def test_simplevqa_takes_its_qwen3_vl_prompt_for_qwen3_vl_and_reads_images_given_in_base64(tmp_path):
    import base64
    import io

    from lmms_eval_reference import simplevqa_doc_to_text

    for family in ("qwen3_vl", "qwen2_5_vl"):
        task, samples, path = _load("simplevqa", tmp_path / family, size=4, model_class=lmms_eval_model_class(family))
        kwargs = {"pre_prompt": "Question: ", "post_prompt": "\nAnswer with a short phrase only."}
        if family != "qwen3_vl":
            kwargs = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a short phrase."}
        assert [s.problem for s in samples] == [simplevqa_doc_to_text(d, kwargs) for d in _docs(task, path)], family
    rows = list(task.synthetic_rows(2, 0))
    for row in rows:  # the image as simplevqa_doc_to_visual's other form: its bytes in base64
        buffer = io.BytesIO(row["image"]["bytes"])
        row["image"] = base64.b64encode(buffer.getvalue()).decode()
    schema = pa.schema([f if f.name != "image" else pa.field("image", pa.string()) for f in task.schema])
    _, split = _read_rows("simplevqa", rows, schema, task.split, tmp_path / "b64")
    sizes = [(s.frame.width, s.frame.height) for s in split.samples]
    assert not split.errors and [Image.open(s.images[0]).size for s in split.samples] == sizes


def test_seedbench_shows_every_frame_of_a_row_and_scores_each_type_apart(tmp_path):
    task, samples, path = _load("seedbench", tmp_path, size=6, seed=0)  # rows 2 and 5 are three-frame videos
    docs = _docs(task, path)
    assert [len(s.images) for s in samples] == [len(d["image"]) for d in docs] == [1, 1, 3, 1, 1, 3]
    assert [m["type"] for m in task.messages(samples[2])[-1]["content"]] == ["image", "image", "image", "text"]
    letters = [s.solution["answer"] for s in samples]
    assert task.metrics(samples, letters) == {"seed_image": 1.0, "seed_video": 1.0, "seed_all": 1.0}
    # the first character only: "The answer is B" reads T; a wrong video answer counts in video and all
    responses = [f"{letters[0]} is it", f"The answer is {letters[1]}", "Z", *letters[3:]]
    assert task.metrics(samples, responses) == {"seed_image": 0.75, "seed_video": 0.5, "seed_all": 4 / 6}
    images_only = [s for s in samples if s.solution["type"] == "image"]
    assert task.metrics(images_only, [s.solution["answer"] for s in images_only]) == {
        "seed_image": 1.0,
        "seed_all": 1.0,
    }
    other = dataclasses.replace(samples[0], solution={**samples[0].solution, "type": "audio"})
    assert task.metrics([other], [letters[0]]) == {"seed_all": 1.0}  # outside the yaml's metric list


def test_seedbench_2_plus_writes_an_image_token_for_an_image_choice_and_keeps_the_question_as_written(tmp_path):
    task, samples, _ = _load("seedbench_2_plus", tmp_path, size=4, seed=0)  # row 3 names an image file as a choice
    assert samples[3].problem.startswith("How many dots are there? <img>\nA. ")
    assert "<image>" in samples[3].problem and all("<image>" not in s.problem for s in samples[:3])
    letters = [s.solution["answer"] for s in samples]
    assert task.metrics(samples, letters) == {"seedbench_2_plus_Chart": 1.0, "seedbench_2_plus_Map": 1.0,
                                              "seedbench_2_plus_Web": 1.0, "seedbench_2_plus_all": 1.0}  # fmt: skip


def test_vqav2_refuses_an_empty_answer_list_naming_the_row_and_reads_the_others(tmp_path):
    task = make_task(TaskConfig(name="vqav2_val"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1]["answers"] = []
    write_parquet(hub_file(tmp_path / "vqav2", task.split), rows, task.schema)
    overrides = [f"data.eval={tmp_path / 'vqav2'}", f"data.image_cache={tmp_path / 'cache'}", "model.max_pixels=50176"]
    split = load_task_split(task, load_config(None, overrides, {"task.name": "vqav2_val"}), "eval")
    assert [s.id for s in split.samples] == ["0", "2"]
    assert len(split.errors) == 1 and "row 1" in str(split.errors[0]) and "answers is empty" in str(split.errors[0])


def test_mmbench_counts_a_question_right_only_when_each_of_its_circular_copies_is(tmp_path):
    task, samples, _ = _load("mmbench_en_dev_static", tmp_path, size=6, seed=0)  # questions 0-2, each with its copy
    assert [s.solution["index"] % 1_000_000 for s in samples] == [0, 0, 1, 1, 2, 2]
    letters = [s.solution["answer"] for s in samples]
    assert task.metrics(samples, letters) == {"gpt_eval_score": 100.0}
    wrong = [*letters[:3], "A" if letters[3] != "A" else "B", *letters[4:]]  # question 1's copy answered wrong
    assert task.metrics(samples, wrong) == {"gpt_eval_score": 2 / 3 * 100}  # the hit rate, then x 100
    assert task.metrics(samples[2:], letters[2:]) == {"gpt_eval_score": 100.0}
    assert math.isnan(task.metrics(samples[1:2], letters[1:2])["gpt_eval_score"])  # a copy alone: pandas' mean of none
    assert samples[4].problem.startswith(" How many dots")  # an empty hint still takes its space (kept)
    assert samples[0].problem.endswith("\nD. 6\n\nAnswer with the option's letter from the given choices directly.")


def test_mmmu_pro_shows_its_images_before_the_text_in_every_class_and_takes_qwen3_vls_format(tmp_path):
    chat = lmms_eval_model_class("qwen2_5_vl", "auto")
    task, samples, _ = _load("mmmu_pro_standard", tmp_path / "chat", size=2, seed=0, model_class=chat)
    shown = samples[1]  # its last option names <image 2>
    content = task.messages(shown)[-1]["content"]
    assert [c["type"] for c in content] == ["image", "image", "text"] and "<image 1>" in content[-1]["text"]
    assert shown.problem.endswith(
        "\nJ. the count in <image 2>\n\nAnswer with the option letter from the given choices directly."
    )
    qwen3 = lmms_eval_model_class("qwen3_vl", "auto")
    _, samples, _ = _load("mmmu_pro_standard", tmp_path / "qwen3", size=1, seed=0, model_class=qwen3)
    assert samples[0].problem.startswith("Question: How many dots does <image 1> show?\nOptions:\nA. ")
    assert samples[0].problem.endswith("\nAnswer with the option letter only.")
    vision, samples, _ = _load("mmmu_pro_vision", tmp_path / "vision", size=2, seed=0)
    assert [s.problem for s in samples] == ["Answer with the option letter from the given choices directly."] * 2
    letters = [s.solution["answer"] for s in samples]
    assert vision.metrics(samples, letters) == {"mmmu_acc": 1.0}
    assert vision.metrics(samples, [f"{letter}." for letter in letters]) == {"mmmu_acc": 0.0}  # unparsed, kept
    _, samples, _ = _load("mmmu_pro_vision", tmp_path / "vision_qwen3", size=1, seed=0, model_class=qwen3)
    assert samples[0].problem.startswith(
        "Question: analyze the image and answer the associated question.\nOptions:\nA. "
    )


def test_groundingme_reads_json_lmms_eval_stops_on_as_a_failed_parse_and_skips_rows_it_cannot_resize(tmp_path):
    """parse_bbox catches ValueError alone: a "bbox_2d" below the top level (KeyError) or a null
    coordinate (TypeError) stops lmms-eval; vlrl falls back to the last four numbers as after a
    ValueError. A row whose width and height MiMo's resize refuses (a side under 10 pixels) would
    stop it on every response: it is skipped and named. coords=model reads the model's frame."""
    from lmms_eval_reference import groundingme_process_result

    task = make_task(TaskConfig(name="groundingme"))
    rows = list(task.synthetic_rows(3, 0))
    rows[1] |= {"image": image_cell(Image.new("RGB", (8, 6)), "tiny.png"), "width": 8, "height": 6}
    _, split = _read_rows("groundingme", rows, task.schema, task.split, tmp_path)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 1"] and "8 x 6" in str(split.errors[0])
    sample, doc = split.samples[0], rows[0]
    truth = ", ".join(f"{v:g}" for v in sample.solution)
    nested, null = f'{{"answer": {{"bbox_2d": [{truth}]}}}}', '{"bbox_2d": [null, 1, 2, 3]}'
    for response, error, iou in ((nested, KeyError, 1.0), (null, TypeError, 0.0)):
        with pytest.raises(error):
            groundingme_process_result(doc, [response])
        assert task.metrics([sample], [response])["groundingme_IoU"] == iou
    task, samples, _ = _load("groundingme", tmp_path / "model", size=2, seed=1, coords="model")
    f, (x1, y1, x2, y2) = samples[0].frame, samples[0].solution
    in_frame = f.box_to_model([x1, y1, x2, y2], integer=False)
    assert f.model_width != f.width and task.metrics(samples[:1], [str(in_frame)])["groundingme_IoU"] == pytest.approx(
        1.0
    )
    assert task.metrics(samples[:1], [str([x1, y1, x2, y2])])["groundingme_IoU"] < 0.9  # pixels are not read there


def test_anls_skips_only_answers_whose_length_alone_puts_them_under_the_threshold():
    """docvqa's `anls` leaves out an answer whose length differs from the response's by more
    than half the longer; on random pairs (lengths far apart, near the bound and equal) it
    equals lmms-eval's api/metrics.py anls, which compares every answer."""
    import random

    from tasks.benchmarks.docvqa import anls
    from tests.lmms_eval_reference import anls as reference_anls

    rng = random.Random(0)
    alphabet = "abc AB\u00df\u0130 "
    for _ in range(3000):
        answers = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 3))]
        prediction = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 6, 12, 25, 60])))
        assert anls(answers, prediction) == reference_anls(answers, [prediction])["anls"], (answers, prediction)
    assert anls(["ab"], "abcd") == reference_anls(["ab"], ["abcd"])["anls"] == 0.5  # on the bound: compared
    assert anls(["ab"], "a" * 1_000_000) == 0.0
