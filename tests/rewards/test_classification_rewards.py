"""Classification rewards: CLS-RL's thinking / no-thinking rules and its evaluation rule, by hand."""

from __future__ import annotations

import pytest
from PIL import Image

from rewards.classification import (
    cls_rl_answer,
    cls_rl_eval_correct,
    label_cls_rl,
    label_direct,
    label_normalized,
    normalize_label,
)
from rewards.format import bare_answer, think_answer
from tasks.classification import Classification
from vlrl.config import ConfigError
from vlrl.data.records import FrameSpec, RecordContext, RecordError
from vlrl.data.sample import Sample
from vlrl.vision.images import load_image


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("<think>fur</think><answer> Golden Retriever </answer>", 1.0),  # case and outer spaces do not matter
        ("<think>fur</think><answer>golden retriever dog</answer>", 0.0),  # equality, not containment
        ("<think>a</think><answer>golden retriever</answer><answer>cat</answer>", 1.0),  # the first answer
        ("<think>a</think><answer>\ngolden retriever\n</answer>", 0.0),  # no DOTALL: not found, whole text compared
        ("golden retriever", 1.0),  # no tags: the whole completion is the answer
        ("  GOLDEN RETRIEVER\n", 1.0),
        ("<answer>golden_retriever</answer>", 0.0),  # CLS-RL's reward does not read "_" as " "
        ("", 0.0),
    ],
)
def test_cls_rl_thinking_reward(completion, expected):
    assert label_cls_rl(completion, "golden retriever") == expected


# (completion, label, CLS-RL's accuracy_reward, the answer's match alone): CLS-RL's grpo.py
# accuracy_reward run with math-verify 0.5.2 on each pair, its solution "<answer> label </answer>".
CLS_RL_MATH = [
    ("<think>it looks like a 737-200 but the wings</think><answer>A320</answer>", "737-200", 1.0, 0.0),
    ("<think>I count 537 windows</think><answer>A320</answer>", "737-200", 1.0, 0.0),  # 737-200 read as 537
    ("<think>x</think><answer>A320</answer>", "737-200", 0.0, 0.0),
    ("<think>x</think><answer>737-200</answer>", "737-200", 1.0, 1.0),
    ("<think>x</think><answer>Boeing 737</answer>", "Boeing 737-200", 0.0, 0.0),
    ("<think>x</think><answer>DC-10</answer>", "DC-9", 0.0, 0.0),
    ("<think>two wings</think><answer>sparrow</answer>", "sparrow", 1.0, 1.0),
    ("<think>x</think><answer>\ngolden retriever\n</answer>", "golden retriever", 0.0, 0.0),
    ("<think>x</think><answer>$\\frac{1}{2}$</answer>", "0.5", 1.0, 0.0),
]


@pytest.mark.parametrize("completion,label,cls_rl,string_only", CLS_RL_MATH)
def test_cls_rl_thinking_reward_asks_math_verify_first_as_cls_rl_does(completion, label, cls_rl, string_only):
    pytest.importorskip("math_verify", reason="pip install 'vlrl[math]'")
    assert label_cls_rl(completion, label, use_math_verify=True) == cls_rl
    assert label_cls_rl(completion, label) == string_only
    rewards = {}
    for check in ("auto", "math_verify", "string"):
        task = Classification({"answer_check": check})
        rewards[check] = task.reward_functions()["label"]([completion], [_labelled(label)])[0]
    assert rewards == {"auto": cls_rl, "math_verify": cls_rl, "string": string_only}


def test_answer_check_math_verify_without_math_verify_is_refused_and_auto_matches_strings(monkeypatch):
    import rewards.classification
    import tasks.answer_check

    monkeypatch.setattr(tasks.answer_check, "math_verify_available", lambda: False)
    monkeypatch.setattr(rewards.classification, "math_verify_available", lambda: False)
    with pytest.raises(ConfigError, match="answer_check=math_verify needs the math-verify package"):
        Classification({"answer_check": "math_verify"})
    completion = "<think>I count 537 windows</think><answer>A320</answer>"
    assert Classification().reward_functions()["label"]([completion], [_labelled("737-200")]) == [0.0]


def _labelled(label: str) -> Sample:
    return Sample(id="0", task="classification", problem="What is it?", solution=label)


def test_cls_rl_no_thinking_reward_is_exact_equality():
    assert label_direct("golden retriever", "golden retriever") == 1.0
    assert label_direct("golden retriever\n", "golden retriever") == 0.0
    assert label_direct("Golden retriever", "golden retriever") == 0.0
    assert label_direct("<answer>golden retriever</answer>", "golden retriever") == 0.0


@pytest.mark.parametrize(
    "completion,label,expected",
    [
        ("<think>x</think><answer>golden retriever</answer>", "Golden Retriever", True),
        ("<think>x</think><answer>It is a golden retriever.</answer>", "golden retriever", True),  # containment
        ("<answer>\n golden retriever \n</answer>", "golden retriever", True),  # the eval reads across lines
        ("<answer>golden retriever</answer>", "golden_retriever", True),  # second try: "_" as " "
        ("<answer>retriever</answer>", "golden retriever", False),
        ("<answer></answer>golden retriever", "golden retriever", True),  # empty answer: whole output
        ("a golden retriever", "golden retriever", True),
        ("<answer>Acme Inc.</answer>", "acme inc.", True),  # nothing trimmed from the answer: its dot stays
    ],
)
def test_cls_rl_evaluation_rule(completion, label, expected):
    assert cls_rl_eval_correct(completion, label) is expected


def test_normalized_match_ignores_case_punctuation_and_articles():
    assert normalize_label("The Golden-Retriever.") == "golden retriever"
    assert normalize_label("  an   Apple ") == "apple"
    assert label_normalized("<think>x</think><answer>The golden_retriever!</answer>", "Golden Retriever") == 1.0
    assert label_normalized("A golden retriever", "golden retriever", think=False) == 1.0
    assert label_normalized("<answer>golden</answer>", "golden retriever") == 0.0
    assert label_normalized("<answer>Ｇｏｌｄｅｎ Retriever</answer>", "golden retriever") == 1.0  # NFKC: full width
    assert cls_rl_answer("no tags\n") == "no tags"


def test_formats_of_the_two_variants():
    assert think_answer("<think>x</think>\n<answer>cat</answer>") == 1.0
    assert think_answer("cat") == 0.0
    assert bare_answer("cat") == 1.0
    assert bare_answer("  cat \n") == 1.0
    assert bare_answer("<answer>cat</answer>") == 0.0
    assert bare_answer("<think>hm</think>cat") == 0.0
    assert bare_answer("   ") == 0.0


# -- the task -------------------------------------------------------------------------------------
PROBLEM = "What type of object is in the photo?\nPlease choose one from list [ cat, golden retriever]."


def _ctx(tmp_path):
    Image.new("RGB", (64, 48), (10, 20, 30)).save(tmp_path / "im.png")
    return RecordContext("data.jsonl:1", 0, tmp_path, FrameSpec("absolute", 3136, 50176))


def _sample(tmp_path, task=None, **record):
    base = {"image": "im.png", "label": "golden retriever", "problem": PROBLEM}
    return (task or Classification()).build_sample({**base, **record}, _ctx(tmp_path))


def test_thinking_variant_prompt_target_and_rewards(tmp_path):
    task = Classification()
    sample = _sample(tmp_path)
    assert task.messages(sample)[0]["content"][1]["text"] == (
        PROBLEM
        + "\n Please output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
    )
    target = task.target(sample)
    assert target == "<think>The object in the photo is: golden retriever.</think>\n<answer>golden retriever</answer>"
    fns = task.reward_functions()
    assert fns["format"]([target], [sample]) == [1.0]
    assert fns["label"]([target, "<think>x</think><answer>cat</answer>"], [sample, sample]) == [1.0, 0.0]
    assert task.predict(target, sample) == "golden retriever"
    assert task.predict("   ", sample) is None


def test_no_thinking_variant_prompt_target_and_rewards(tmp_path):
    task = Classification(options={"variant": "no_thinking"})
    assert task.reward_weights == {"label": 1.0}  # grpo_direct.py trains on accuracy alone
    sample = _sample(tmp_path, task=task)
    assert task.messages(sample)[0]["content"][1]["text"] == PROBLEM + "\n Please directly output the answer."
    assert task.target(sample) == "golden retriever"
    fns = task.reward_functions()
    assert fns["label"](["golden retriever", "Golden retriever", "golden retriever."], [sample] * 3) == [1.0, 0.0, 0.0]
    assert fns["format"](["golden retriever", "<think>x</think>cat"], [sample] * 2) == [1.0, 0.0]
    loose = Classification(options={"variant": "no_thinking", "match": "normalized"})
    assert loose.reward_functions()["label"](["Golden retriever."], [sample]) == [1.0]


@pytest.mark.parametrize(
    "variant,suffix",
    [
        (
            "thinking",
            " First output the thinking process in <think> </think> and final answer in <answer> </answer> tags.",
        ),
        ("no_thinking", " Please directly output the answer name."),
    ],
)
def test_evaluation_prompts_are_cls_rl_test_scripts(tmp_path, variant, suffix):
    task = Classification(options={"variant": variant, "prompts": "evaluation"})
    assert task.messages(_sample(tmp_path, task=task))[0]["content"][1]["text"] == PROBLEM + suffix


def test_images_are_squashed_to_cls_rl_square_before_the_model_resize(tmp_path):
    sample = _sample(tmp_path)
    Image.effect_noise((64, 48), 60).convert("RGB").save(sample.images[0])  # resampling filters differ on it
    assert sample.image_size == (384, 384)
    assert (sample.frame.width, sample.frame.height) == (384, 384)
    squashed = load_image(sample.images[0], 3136, 401408, 28, sample.image_size)
    with Image.open(sample.images[0]) as im:
        expected = (
            im.convert("RGB").resize((384, 384), Image.Resampling.LANCZOS).resize((392, 392), Image.Resampling.BICUBIC)
        )
    assert squashed.size == (392, 392) and squashed.tobytes() == expected.tobytes()
    own = _sample(tmp_path, task=Classification(options={"image_side": 0}))
    assert own.image_size is None and load_image(own.images[0], 3136, 401408, 28).size == (56, 56)
    with pytest.raises(ConfigError, match="image_side must be >= 0"):
        Classification(options={"image_side": -1})


def test_classification_metrics_on_fixed_predictions(tmp_path):
    sample = _sample(tmp_path)
    completions = [
        "<think>x</think><answer>golden retriever</answer>",  # right by every rule
        "<think>x</think><answer>a golden retriever</answer>",  # right by the eval's containment only
        "<answer>GOLDEN RETRIEVER</answer>",  # right, but no <think>
        "<think>x</think><answer>cat</answer>",  # wrong
    ]
    metrics = Classification().metrics([sample] * 4, completions)
    assert metrics == {"accuracy": 0.75, "exact_accuracy": 0.5, "format_rate": 0.75}


def test_records_in_cls_rl_and_choice_forms(tmp_path):
    ctx = _ctx(tmp_path)
    built = Classification().build_sample({"image": "im.png", "label": "cat", "choices": ["dog", "cat"]}, ctx)
    assert built.problem == "What type of object is in the photo?\nPlease choose one from list [ dog, cat]."
    assert built.meta["choices"] == ["dog", "cat"]
    tagged = Classification().build_sample(
        {"image": "im.png", "solution": "<answer> cat </answer>", "problem": "?"}, ctx
    )
    assert tagged.solution == "cat" and tagged.meta["choices"] is None


@pytest.mark.parametrize(
    "change,message",
    [
        ({"label": None}, "missing key 'label'"),
        ({"label": 3}, "'label' must be the class name"),
        ({"label": "  "}, "empty class name"),
        ({"choices": ["cat", "dog"]}, "not among the choices"),
        ({"choices": ["golden retriever", "cat", "cat"]}, "lists a class name twice"),
        ({"choices": []}, "non-empty list"),
        ({"choices": "cat, dog"}, "'choices' must be a list"),
        ({"problem": 5}, "'problem' must be the question text"),
        ({"image": "nope.png"}, "image not found"),
    ],
)
def test_bad_classification_records_say_what_is_wrong(tmp_path, change, message):
    record = {"image": "im.png", "label": "golden retriever", "problem": PROBLEM, **change}
    record = {k: v for k, v in record.items() if v is not None}
    with pytest.raises(RecordError, match=message):
        Classification().build_sample(record, _ctx(tmp_path))


def test_synthetic_records_offer_six_distinct_choices_around_the_label_the_image_shows(tmp_path):
    import json

    import numpy as np

    from data_prep.classification import CLS_RL_QUESTION, choice_text, write_synthetic_classification
    from data_prep.shapes import COLORS

    records = json.loads(write_synthetic_classification(tmp_path / "val.json", 12, seed=0).read_text())
    for r in records:
        color, shape = r["label"].split(" ")
        assert shape in ("circle", "square", "triangle") and r["split"] == "val"
        assert len(r["choices"]) == len(set(r["choices"])) == 6 and r["label"] in r["choices"]
        assert r["problem"] == f"{CLS_RL_QUESTION}\n{choice_text(r['choices'])}"
        with Image.open(tmp_path / r["image"]) as image:
            pixels = np.asarray(image.convert("RGB"))
        shown = [name for name, rgb in COLORS.items() if (pixels == np.array(rgb, dtype=np.uint8)).all(axis=-1).any()]
        assert shown == [color]  # the one object's fill is the label's color
    assert len({r["choices"].index(r["label"]) for r in records}) > 2  # the label's place varies
