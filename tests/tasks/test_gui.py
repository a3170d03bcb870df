"""GUI tasks: UI-R1's and GUI-R1's reward and metric definitions on hand-computed cases, the
parser's safety, bad records, converters and the synthetic data."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest
from PIL import Image

from data_prep.gui import (
    convert_gui_r1,
    convert_screenspot,
    gui_r1_to_action,
    write_synthetic_actions,
    write_synthetic_grounding,
)
from rewards import gui as R
from tasks.gui import GuiAction, GuiGrounding
from vlrl.data.records import FrameSpec, RecordContext, RecordError
from vlrl.tasking.scoring import score

PAYLOAD = "__import__('os').system('touch PWNED')"


def gui_r1(action: str, point=(-100, -100), text: str = "no input text") -> str:
    answer = f"[{{'action': '{action}', 'point': [{point[0]}, {point[1]}], 'input_text': '{text}'}}]"
    return f"<think>ok</think> <answer>{answer}</answer>"


def ui_r1(action: str, point=(0, 0)) -> str:
    return f"<think>ok</think> <answer>[{{'action': '{action}', 'coordinate': [{point[0]}, {point[1]}]}}]</answer>"


# -- the literal parser --------------------------------------------------------------------------
def test_literal_parser_reads_json_and_python_literals_alike():
    python = "[{'action': 'click', 'point': (1, -2.5), 'input_text': 'it\\'s', 'ok': True, 'x': None,}]"
    json_text = '[{"action": "click", "point": [1, -2.5], "input_text": "it\'s", "ok": true, "x": null}]'
    expected = {"action": "click", "point": (1, -2.5), "input_text": "it's", "ok": True, "x": None}
    assert R.parse_literal(python) == [expected]
    assert R.parse_literal(json_text) == [{**expected, "point": [1, -2.5]}]
    assert R.parse_literal("('a',)") == ("a",) and R.parse_literal("(3)") == 3
    assert R.parse_literal("'\\u00e9\\n\\x41'") == "é\nA"


@pytest.mark.parametrize(
    "text",
    [
        PAYLOAD,
        "[{'action': print('x')}]",
        "[1, 2] + [3]",
        "{'a': 1",
        "f'{x}'",
        "[" * (R.MAX_DEPTH + 2) + "]" * (R.MAX_DEPTH + 2),
        "[" + ", ".join(["1"] * (R.MAX_NODES + 1)) + "]",
        "'" + "a" * R.MAX_ANSWER_CHARS + "'",
        "[" + "9" * 5000 + "]",
        "'unterminated",
        "{[1]: 2}",
    ],
)
def test_literal_parser_rejects_code_junk_and_oversized_input(text):
    with pytest.raises(R.LiteralError):
        R.parse_literal(text)


def test_no_completion_runs_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    completions = [
        f"<think>a</think> <answer>{PAYLOAD}</answer>",
        f"<think>a</think> <answer>[{{'action': {PAYLOAD}, 'point': [1, 2], 'input_text': 'x'}}]</answer>",
        f"<answer>[{{'action': 'click', 'point': [1, 2], 'input_text': {PAYLOAD}}}]</answer>",
    ]
    for completion in completions:
        for style in ("gui_r1", "ui_r1"):
            R.extract_action(completion, style)
            R.gui_r1_format(completion)
    assert not (tmp_path / "PWNED").exists()


# -- extraction ----------------------------------------------------------------------------------
def test_extraction_reads_both_answer_styles_and_json():
    expected = R.GuiAction("click", (123.0, 300.0), "no input text")
    assert R.extract_action(gui_r1("click", (123, 300))) == expected
    as_json = '<answer>[{"action": "click", "point": [123, 300], "input_text": "no input text"}]</answer>'
    assert R.extract_action(as_json) == expected
    assert R.extract_action(ui_r1("click", (7, 8)), "ui_r1") == R.GuiAction("click", (7.0, 8.0), None)
    assert R.extract_action("no answer tag") is None
    # A text with an apostrophe is double-quoted in a Python literal: read whole.
    quoted = "<answer>[{'action': 'type', 'point': [-100, -100], 'input_text': \"Mona lisa's painting\"}]</answer>"
    assert R.extract_action(quoted).input_text == "Mona lisa's painting"


def test_extraction_falls_back_to_the_public_regexes_on_junk():
    # Not a literal: GUI-R1's regexes still find the action, the text and the point in braces.
    junk = "<answer>Action: [{'action': 'click', 'point': [5, 6], 'input_text': 'no input text'}] done</answer>"
    assert R.extract_action(junk) == R.GuiAction("click", (5.0, 6.0), "no input text")
    nested = "<answer>[[[{'action': 'click', 'point': [5, 6]}]]]</answer>"  # a literal, but no action dict first
    assert R.extract_action(nested) == R.GuiAction("click", (5.0, 6.0), None)
    # UI-R1 takes the first [x, y], GUI-R1 the last one inside braces.
    two = "<answer>{'action': 'click', 'coordinate': [1, 2]} {'coordinate': [3, 4]} x</answer>"
    assert R.extract_action(two, "ui_r1").point == (1.0, 2.0)
    assert R.extract_action(two, "gui_r1").point == (3.0, 4.0)


@pytest.mark.parametrize("parser", ["structured", "public_regex"])
def test_an_answer_longer_than_the_literal_limit_is_read_by_the_public_regexes(parser):
    # GUI-R1's extractors have no length limit: 115 clicks (8,395 characters) score as one would
    action = "{'action': 'click', 'point': [150, 150], 'input_text': 'no input text'}"
    completion = f"<think>t</think> <answer>[{', '.join([action] * 115)}]</answer>"
    assert len(R.answer_text(completion)) > R.MAX_ANSWER_CHARS
    assert R.extract_action(completion, parser=parser) == R.GuiAction("click", (150.0, 150.0), "no input text")


def test_public_regex_mode_reads_only_what_the_public_code_reads():
    as_json = '<answer>[{"action": "click", "point": [1, 2], "input_text": "x"}]</answer>'
    assert R.extract_action(as_json, parser="public_regex") == R.GuiAction(None, (1.0, 2.0), None)
    negative = "<answer>[{'action': 'click', 'point': [-5, 2], 'input_text': 'no input text'}]</answer>"
    assert R.extract_action(negative, parser="public_regex").point is None
    assert R.extract_action(negative).point == (-5.0, 2.0)
    assert R.extract_action("<answer>[{'action': click}]</answer>", "ui_r1", parser="public_regex").action == "click"
    assert R.extract_action("<answer>[{'action': click}]</answer>", "gui_r1", parser="public_regex").action is None


# -- components ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pred,gt,f1",
    [
        ("shanghai mall", "shanghai shopping mall", 0.8),  # P 1, R 2/3
        ("a b", "a c d", 0.4),  # P 1/2, R 1/3
        ("a b c", "a", 0.5),  # P 1/3, R 1: exactly the threshold
        ("mall", "shoppingmall", 1.0),  # single tokens: containment counts
        ("[UP]", "up", 1.0),  # brackets dropped, case folded
        ("[search] [query]", "search query", 1.0),  # brackets dropped from every token, not only single ones
        ("no input text", "text", 0.5),  # GUI-R1's default text against a one-word truth
        ("", "", 0.0),
    ],
)
def test_text_f1_is_gui_r1s(pred, gt, f1):
    assert R.text_f1(pred, gt) == pytest.approx(f1)


def test_input_text_threshold_is_inclusive():
    assert R.input_text("a b c", "a") == 1.0  # F1 0.5 >= 0.5
    assert R.input_text("a b", "a c d") == 0.0  # F1 0.4
    assert R.input_text(None, "text") == 1.0  # missing text is "no input text" (F1 0.5), as in GUI-R1
    assert R.input_text("a b c", "a", threshold=0.6) == 0.0


def test_point_rules_on_edges_and_distances():
    box = [10, 0, 20, 10]
    assert R.point_in_box((10, 5), box, inclusive=True) and not R.point_in_box((10, 5), box, inclusive=False)
    assert R.point_in_box((15, 5), box, inclusive=False)
    assert R.point_near((139.9, 0), (0, 0), 140) and not R.point_near((140, 0), (0, 0), 140)  # strict
    assert R.point_near((83, 0), (0, 0), 0.14, scale=(600, 100))  # 0.138 of the width
    assert not R.point_near((0, 14), (0, 0), 0.14, scale=(600, 100))  # 0.14 of the height
    assert not R.point_near((float("nan"), 0), (0, 0), 140)


def test_action_type_and_scroll_direction():
    assert R.action_type("click", "click") == 1.0
    assert R.action_type("Click", "click") == 0.0  # UI-R1 compares as written
    assert R.action_type("Click", "click", case_sensitive=False) == 1.0  # GUI-R1 lower-cases
    assert R.action_type(None, "click") == 0.0
    assert R.scroll_direction("Down ", "down") == 1.0
    assert R.scroll_direction("sideways", "sideways") == 0.0
    assert R.scroll_direction(None, "up") == 0.0


@pytest.mark.parametrize(
    "completion,ui,gui",
    [
        (gui_r1("click", (1, 2)), 1.0, 1.0),
        (gui_r1("click", (1, 2)) + " trailing", 0.0, 0.0),
        ("<answer>[{'action': 'click', 'point': [1, 2], 'input_text': 'x'}]</answer>", 0.0, 0.0),  # no think
        ("<think>a</think><answer>[{'action': 'click', 'point': [1, 2]}]</answer>", 1.0, 0.0),  # no input_text key
        ("<think>a</think><answer>[{'action': 'click', 'point': [1.5, 2], 'input_text': 'x'}]</answer>", 1.0, 0.0),
        (gui_r1("type"), 1.0, 0.0),  # type needs a text
        (gui_r1("open_app", text="Maps"), 1.0, 1.0),
        (gui_r1("open_app"), 1.0, 0.0),  # open_app needs a text, as type and select do
        (gui_r1("scroll", text="sideways"), 1.0, 0.0),
        (gui_r1("scroll", text="up"), 1.0, 1.0),
        ("<think>a</think><answer>[]</answer>", 1.0, 1.0),  # GUI-R1 passes an empty list
        ("<think>a</think><answer>{'action': 'click', 'point': [1, 2], 'input_text': 'x'}</answer>", 1.0, 0.0),
        ("<think>a</think><answer>[{'action': 'click', 'point': [1, 2], 'input_text': 'x'}, 3]</answer>", 1.0, 0.0),
    ],
)
def test_format_rewards(completion, ui, gui):
    assert R.tags_format(completion) == ui
    assert R.gui_r1_format(completion) == gui


def test_format_without_thinking():
    answer = "<answer>[{'action': 'click', 'point': [1, 2], 'input_text': 'x'}]</answer>"
    assert R.tags_format(answer, thinking=False) == 1.0 and R.gui_r1_format(answer, thinking=False) == 1.0
    assert R.tags_format("<think>a</think>" + answer, thinking=False) == 0.0


# -- tasks: samples in a frame where model pixels are half the original ---------------------------
def _ctx(tmp_path: Path, kind: str = "absolute") -> RecordContext:
    Image.new("RGB", (1120, 560), (200, 200, 200)).save(tmp_path / "screen.png")
    return RecordContext("data.json:1", 0, tmp_path, FrameSpec(kind, 3136, 560 * 280))


def grounding_sample(tmp_path, box=(100, 100, 300, 200), **meta):
    record = {"img_filename": "screen.png", "bbox": list(box), "instruction": "click the send button", **meta}
    return GuiGrounding().build_sample(record, _ctx(tmp_path))


def action_sample(tmp_path, gt, options=None):
    return GuiAction(options).build_sample({"image": "screen.png", "task": "do it", "gt": gt}, _ctx(tmp_path))


def rewards(task, completion, sample):
    return {name: fn([completion], [sample])[0] for name, fn in task.reward_functions().items()}


def test_grounding_click_edges_and_truncation_follow_each_public_definition(tmp_path):
    sample = grounding_sample(tmp_path)
    assert (sample.frame.model_width, sample.frame.model_height) == (560, 280)
    task = GuiGrounding()
    inside = rewards(task, ui_r1("click", (100, 75)), sample)  # original (200, 150)
    assert inside == {"format": 1.0, "action_type": 1.0, "click": 1.0, "accuracy": 1.0}
    # (50, 50) is the box corner (100, 100): UI-R1 counts edges, GUI-R1 does not.
    edge = rewards(task, ui_r1("click", (50, 50)), sample)
    assert edge["click"] == 1.0 and edge["accuracy"] == 0.0
    # x 150.25 -> 300.5 original: UI-R1 truncates to 300 (inside), GUI-R1 keeps 300.5 (outside).
    past = rewards(task, ui_r1("click", (150.25, 75)), sample)
    assert past["click"] == 1.0 and past["accuracy"] == 0.0
    wrong_type = rewards(task, ui_r1("scroll", (100, 75)), sample)
    assert wrong_type["action_type"] == wrong_type["click"] == wrong_type["accuracy"] == 0.0
    capital = rewards(task, ui_r1("Click", (100, 75)), sample)
    assert capital["click"] == 0.0 and capital["accuracy"] == 1.0  # UI-R1 exact, GUI-R1 lower-cased
    assert task.predict(ui_r1("click", (100, 75)), sample) == [200.0, 150.0]
    assert task.target(sample) == (
        "<think>click the send button</think> <answer>[{'action': 'click', 'coordinate': [100, 75]}]</answer>"
    )


def test_screenspot_accuracy_truncates_the_point_in_ui_r1s_style_only(tmp_path):
    sample = grounding_sample(tmp_path)
    # x 150.25 -> 300.5 original, the box ends at 300: UI-R1's evaluation truncates to 300 (the edge counts).
    assert GuiGrounding().metrics([sample], [ui_r1("click", (150.25, 75))])["accuracy"] == 1.0
    gui_r1_style = GuiGrounding(options={"style": "gui_r1"})
    assert gui_r1_style.metrics([sample], [gui_r1("click", (150.25, 75))])["accuracy"] == 0.0
    assert gui_r1_style.metrics([sample], [gui_r1("click", (149.75, 75))])["accuracy"] == 1.0  # 299.5


def test_grounding_in_the_qwen2_norm1000_frame(tmp_path):
    record = {"img_filename": "screen.png", "bbox": [112, 56, 336, 168], "instruction": "x"}
    sample = GuiGrounding().build_sample(record, _ctx(tmp_path, "norm1000"))
    assert GuiGrounding().predict(ui_r1("click", (200, 200)), sample) == [224.0, 112.0]
    assert rewards(GuiGrounding(), ui_r1("click", (200, 200)), sample)["click"] == 1.0
    assert rewards(GuiGrounding(), ui_r1("click", (400, 200)), sample)["click"] == 0.0


def test_gui_r1_grounding_prompt_places_the_image_where_gui_r1_does(tmp_path):
    sample = grounding_sample(tmp_path)
    content = GuiGrounding({"style": "gui_r1"}).messages(sample)[0]["content"]
    assert [c["type"] for c in content] == ["text", "image", "text"]
    assert content[0]["text"].endswith("In this UI screenshot ")
    assert content[2]["text"].startswith(", I want you to continue executing the command 'click the send button'")
    assert "with the action history being 'None'" in content[2]["text"]
    ui = GuiGrounding().messages(sample)[0]["content"]
    assert [c["type"] for c in ui] == ["image", "text"] and "<think>" in ui[1]["text"]
    ui_e = GuiGrounding({"thinking": False}).messages(sample)[0]["content"][1]["text"]
    assert "<think>" not in ui_e and "enumerate in ['click']" in ui_e
    custom = GuiGrounding({"prompt_template": "Find {instruction} {braces}"}).messages(sample)[0]["content"]
    assert custom[1]["text"] == "Find click the send button {braces}"


def test_gui_r1_actions_are_asked_with_its_android_control_prompt_or_with_its_training_prompt(tmp_path):
    """GUI-R1 trains action rows on its own nine actions (verl/utils/dataset.py @d43eea2) and
    evaluates AndroidControl with its seven (inference_vllm_android.py), the ones this task scores."""
    sample = action_sample(tmp_path, {"action_type": "click", "x": 600, "y": 300})

    def text(options: dict) -> str:
        content = GuiAction(options).messages(sample)[0]["content"]
        assert [c["type"] for c in content] == ["text", "image", "text"]
        return content[0]["text"] + "<image>" + content[2]["text"]

    android, training = text({}), text({"gui_r1_prompt": "training"})
    assert "(enumerate from ['wait', 'long_press', 'click', 'press_back', 'type', 'open_app', 'scroll'])" in android
    assert training.startswith("You are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want")
    assert (
        "(enumerate from ['complete', 'close/delete', 'press_home', 'click', 'press_back', 'type', 'select', 'scroll', "
        "'enter']), the point" in training
    )
    assert (
        "necessary for actions enum['type', 'select', 'scroll'] \n Example:\n[{'action': enum['complete'," in training
    )
    assert training.endswith("'input_text': enum['up', 'left', 'right', 'down']}]")
    assert "<think>" not in text({"gui_r1_prompt": "training", "thinking": False})


def test_gui_r1s_training_prompt_asks_rows_other_than_high_with_its_grounding_prompt(tmp_path):
    """GUI-R1's dataset.py @d43eea2 asks a `task_type` "high" row with its nine actions and every
    other row with its click-only prompt; a record without task_type is an action row here."""
    record = {"image": "screen.png", "task": "tap ok", "history": "", "gt": {"action_type": "click", "x": 6, "y": 3}}
    task = GuiAction({"gui_r1_prompt": "training"})

    def text(**fields) -> str:
        content = task.messages(task.build_sample({**record, **fields}, _ctx(tmp_path)))[0]["content"]
        return content[0]["text"] + "<image>" + content[2]["text"]

    text_, history = "tap ok", ""
    grounding = (  # transcribed from verl/utils/dataset.py, its `else` branch
        f"You are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want you to continue executing the command '{text_}', with the action history being '{history}'.\n"
        "Please provide the action to perform (enumerate from ['click']), the point where the cursor is moved to (integer) if a click is performed, and any input text required to complete the action.\n"
        "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags as follows:\n"
        "<think> ... </think> <answer>[{'action': enum[ 'click'], 'point': [x, y], 'input_text': 'no input text'}]</answer>\n"
        "Example:\n"
        "[{'action': enum['click'], 'point': [123, 300], 'input_text': 'no input text'}]\n"
    )
    assert text(task_type="low") == grounding
    assert "enumerate from ['complete', 'close/delete'," in text(task_type="high") == text()
    assert "being ''" in text()
    with pytest.raises(RecordError, match="task_type"):
        task.build_sample({**record, "task_type": 1}, _ctx(tmp_path))


def test_action_click_distance_units(tmp_path):
    gt = {"action_type": "click", "x": 600, "y": 300}  # model frame (300, 150)
    sample = action_sample(tmp_path, gt)
    accuracy = GuiAction().reward_functions()["accuracy"]
    # GUI-R1: closer than 140 px of the model's frame.
    assert accuracy([gui_r1("click", (439, 150))], [sample]) == [1.0]
    assert accuracy([gui_r1("click", (440, 150))], [sample]) == [0.0]
    original = GuiAction({"click_distance_unit": "original_px"}).reward_functions()["accuracy"]
    assert original([gui_r1("click", (369, 150))], [sample]) == [1.0]  # 138 original px
    assert original([gui_r1("click", (371, 150))], [sample]) == [0.0]  # 142
    relative = GuiAction({"click_distance": 0.14, "click_distance_unit": "relative"}).reward_functions()["accuracy"]
    assert relative([gui_r1("click", (378, 150))], [sample]) == [1.0]  # 156 / 1120 = 0.139
    assert relative([gui_r1("click", (379, 150))], [sample]) == [0.0]  # 158 / 1120 = 0.141
    assert accuracy([gui_r1("long_press", (300, 150))], [sample]) == [0.0]
    # GUI-R1's total: 0.8 accuracy + 0.2 format.
    totals = score(GuiAction(), [gui_r1("click", (300, 150)), gui_r1("click", (440, 150))], [sample] * 2).total
    assert totals == [1.0, pytest.approx(0.2)]
    assert GuiAction().target(sample) == (
        "<think>do it</think> "
        "<answer>[{'action': 'click', 'point': [300, 150], 'input_text': 'no input text'}]</answer>"
    )


def test_gui_r1s_ground_truth_frame_is_process_images_output_when_asked(tmp_path):
    """GUI-R1 @d43eea2 (verl/utils/dataset.py) scales a relative gt_bbox by the size of
    process_image's output, 752 x 1672 for a 1080 x 2400 screenshot within its 262,144 to
    1,258,291 pixels, while the model sees the processor's 756 x 1680: r1gui_accuracy_reward
    then hits (46, 1234) against (0.0448, 0.8204), 137.9 px from (33.69, 1371.7); in the
    model's frame the target is (33.87, 1378.3), 144.8 px away."""
    Image.new("RGB", (1080, 2400)).save(tmp_path / "phone.png")
    spec = FrameSpec("absolute", 262144, 1258291, 28, then_within=(3136, 12845056))
    record = {
        "image": "phone.png",
        "task": "do it",
        "gt": {"action_type": "click", "x": 0.0448 * 1080, "y": 0.8204 * 2400},
    }
    completion = gui_r1("click", (46, 1234))
    for frame, hit in [("model", 0.0), ("process_image", 1.0)]:
        task = GuiAction({"gt_frame": frame})
        sample = task.build_sample(record, RecordContext("data.json:1", 0, tmp_path, spec))
        assert (sample.frame.model_width, sample.frame.model_height) == (756, 1680)  # what the model sees
        assert task.reward_functions()["accuracy"]([completion], [sample]) == [hit]
        assert "[34, 1372]" in task.target(sample) if hit else "[34, 1378]" in task.target(sample)
        # GUI-R1's evaluation maps the answer from the model's frame (image_grid_thw): so do metrics
        assert task.predict(completion, sample)["point"] == pytest.approx([46 * 1080 / 756, 1234 * 2400 / 1680])


def test_action_text_rewards(tmp_path):
    typed = action_sample(tmp_path, {"action_type": "input_text", "text": "shanghai shopping mall"})
    assert typed.solution["action"] == "type"  # GUI-R1's name for AndroidControl's input_text
    task = GuiAction()
    good = rewards(task, gui_r1("type", text="shanghai mall"), typed)
    assert good == {"format": 1.0, "action_type": 1.0, "click": 1.0, "accuracy": 1.0, "input_text": 1.0}
    bad = rewards(task, gui_r1("type", text="beijing"), typed)
    assert bad["accuracy"] == bad["input_text"] == 0.0 and bad["click"] == 1.0  # UI-R1 does not read text
    app = action_sample(tmp_path, {"action_type": "open_app", "app_name": "Maps"})
    wrong_app = rewards(task, gui_r1("open_app", text="Camera"), app)
    assert wrong_app["accuracy"] == 1.0 and wrong_app["input_text"] == 0.0  # GUI-R1's reward skips app names
    scroll = action_sample(tmp_path, {"action_type": "scroll", "direction": "Down"})
    assert rewards(task, gui_r1("scroll", text="down"), scroll)["accuracy"] == 1.0
    assert rewards(task, gui_r1("scroll", text="up"), scroll)["accuracy"] == 0.0
    back = action_sample(tmp_path, {"action_type": "navigate_back"})
    assert rewards(task, gui_r1("press_back"), back)["accuracy"] == 1.0
    ui_back = action_sample(tmp_path, {"action_type": "navigate_back"}, {"style": "ui_r1"})
    assert ui_back.solution["action"] == "navigate_back"


def test_action_metrics_on_fixed_predictions(tmp_path):
    samples = [
        action_sample(tmp_path, {"action_type": "click", "x": 600, "y": 300}),
        action_sample(tmp_path, {"action_type": "click", "x": 100, "y": 100}),
        action_sample(tmp_path, {"action_type": "long_press", "x": 600, "y": 300}),
        action_sample(tmp_path, {"action_type": "input_text", "text": "hello world"}),
        action_sample(tmp_path, {"action_type": "scroll", "direction": "down"}),
        action_sample(tmp_path, {"action_type": "navigate_back"}),
    ]
    completions = [
        gui_r1("click", (370, 150)),  # original (740, 300): 140/1120 = 0.125 < 0.14: hit
        gui_r1("long_press", (50, 50)),  # wrong type, right place: GUI-R1 grounds it anyway
        gui_r1("click", (300, 150)),  # wrong type, right place
        gui_r1("type", text="hello"),  # F1 2/3
        gui_r1("scroll", text="up"),  # right type, wrong direction
        "no answer",
    ]
    m = GuiAction().metrics(samples, completions)
    assert m["type_acc"] == pytest.approx(3 / 6)
    assert m["type_acc/click"] == 0.5 and m["type_acc/press_back"] == 0.0
    assert m["grounding_acc"] == 1.0  # 3 of 3 point steps, types not asked
    assert m["step_success"] == pytest.approx(4 / 5)  # 3 grounded + 1 text of 5 point/text steps
    assert m["step_success_strict"] == pytest.approx(2 / 6)  # click 1 and type only
    assert m["format_rate"] == pytest.approx(5 / 6) and m["parse_rate"] == pytest.approx(5 / 6)
    ui = GuiAction({"eval_click_distance": 151.2, "eval_click_distance_unit": "original_px"})
    m_ui = ui.metrics(samples, completions)
    assert m_ui["grounding_acc"] == 1.0  # 140 original px < 151.2


def test_an_open_app_step_is_a_text_step_of_gui_r1s_evaluation(tmp_path):
    sample = action_sample(tmp_path, {"action_type": "open_app", "app_name": "Google Maps"})
    right, wrong = gui_r1("open_app", text="Maps"), gui_r1("open_app", text="Chrome")  # F1 2/3; 0
    m = GuiAction().metrics([sample, sample], [right, wrong])
    assert m["type_acc"] == 1.0
    assert m["step_success"] == 0.5 and m["step_success_strict"] == 0.5
    assert "grounding_acc" not in m


def test_ui_r1_grounding_metric_needs_the_type(tmp_path):
    task = GuiAction({"style": "ui_r1", "eval_click_distance": 151.2, "eval_click_distance_unit": "original_px"})
    sample = action_sample(tmp_path, {"action_type": "click", "x": 600, "y": 300}, {"style": "ui_r1"})
    assert task.metrics([sample], [ui_r1("click", (375, 150))])["grounding_acc"] == 1.0  # 150 px
    # 152 px; 376 / 560 * 1120 is 751.99.. in floats, which must not truncate to 751 (UI-R1: 376 * 2.0)
    assert task.metrics([sample], [ui_r1("click", (376, 150))])["grounding_acc"] == 0.0
    assert task.metrics([sample], [ui_r1("scroll", (300, 150))])["grounding_acc"] == 0.0


def test_action_metrics_can_leave_out_actions_without_a_hit_as_gui_r1s_eval_omni_does(tmp_path):
    """GUI-R1's eval_omni.py (d43eea2) makes an action's hit count on its first hit and sums over
    those: an action none of whose steps is right leaves type, grounding and step success."""
    click, press = ({"action_type": kind, "x": 600, "y": 300} for kind in ("click", "long_press"))
    samples = [action_sample(tmp_path, gt) for gt in (click, click, press, {"action_type": "wait"})]
    completions = [
        gui_r1("click", (300, 150)),
        gui_r1("click", (300, 150)),
        gui_r1("click", (20, 20)),
        gui_r1("press_back"),
    ]
    every = GuiAction().metrics(samples, completions)
    assert (every["type_acc"], every["grounding_acc"], every["step_success"]) == (
        0.5,
        pytest.approx(2 / 3),
        pytest.approx(2 / 3),
    )
    dropped = GuiAction({"eval_hitless_actions": "drop"}).metrics(samples, completions)
    assert (dropped["type_acc"], dropped["grounding_acc"], dropped["step_success"]) == (1.0, 1.0, 1.0)
    assert dropped["step_success_strict"] == every["step_success_strict"] == 0.5  # every step, either way
    none = GuiAction({"eval_hitless_actions": "drop"}).metrics(samples[2:], completions[2:])
    assert (none["type_acc"], none["grounding_acc"]) == (0.0, 0.0)  # eval_omni divides by zero there


def test_grounding_metrics_split_by_platform_and_type(tmp_path):
    specs = [("mobile", "text", (100, 75)), ("mobile", "icon", (10, 10)), ("web", "text", (100, 75)),
             ("desktop", "icon", (150, 100))]  # fmt: skip
    samples = [grounding_sample(tmp_path, platform=p, data_type=t) for p, t, _ in specs]
    completions = [ui_r1("click", point) for _, _, point in specs]
    m = GuiGrounding().metrics(samples, completions)
    assert m["accuracy"] == 0.75
    assert m["acc/mobile"] == 0.5 and m["acc/web"] == 1.0 and m["acc/desktop"] == 1.0  # (300, 200) is an edge
    assert m["acc/text"] == 1.0 and m["acc/icon"] == 0.5
    assert m["acc/mobile/icon"] == 0.0 and m["acc/desktop/icon"] == 1.0 and m["acc/web/text"] == 1.0
    assert m["format_rate"] == 1.0 and m["parse_rate"] == 1.0


def test_screenspot_accuracy_counts_box_edges_as_ui_r1s_evaluation_and_not_as_gui_r1s(tmp_path):
    """A click on the box's edge (original (200, 100), model (100, 50)): UI-R1's
    test_screenspot.py counts it (<=), GUI-R1's eval_screenspot.py does not (<)."""
    sample, edge, inside = grounding_sample(tmp_path), ui_r1("click", (100, 50)), ui_r1("click", (100, 75))
    assert GuiGrounding().metrics([sample, sample], [edge, inside])["accuracy"] == 1.0
    gui_r1_style = GuiGrounding({"style": "gui_r1"})
    assert (
        gui_r1_style.metrics([sample, sample], [gui_r1("click", (100, 50)), gui_r1("click", (100, 75))])["accuracy"]
        == 0.5
    )


def test_gui_r1s_evaluation_measures_a_box_target_from_its_first_corner(tmp_path):
    """GUI-R1's eval_omni.py takes gt_bbox[0], gt_bbox[1] as the target of a click step's 0.14
    rule whatever the box: a click at the box's centre, original (600, 300) in a box (100, 100,
    1100, 500), is 0.58 of the screen from its corner and misses; one at its corner hits.
    UI-R1's style asks for the point in the box."""
    gt = {"action_type": "click", "x": 600, "y": 300, "bbox": [100, 100, 1100, 500]}
    centre, corner = gui_r1("click", (300, 150)), gui_r1("click", (50, 50))
    m = GuiAction().metrics([action_sample(tmp_path, gt)] * 2, [centre, corner])
    assert m["grounding_acc"] == 0.5
    sample = action_sample(tmp_path, gt, {"style": "ui_r1"})
    ui = GuiAction({"style": "ui_r1"}).metrics([sample] * 2, [ui_r1("click", (300, 150)), ui_r1("click", (50, 50))])
    assert ui["grounding_acc"] == 1.0


@pytest.mark.parametrize(
    "record,message",
    [
        ({"bbox": [0, 0, 10, 10], "instruction": "x"}, "missing key 'img_filename'"),
        ({"img_filename": "missing.png", "bbox": [0, 0, 10, 10], "instruction": "x"}, "image not found"),
        ({"img_filename": "screen.png", "bbox": [0, 0, 1200, 10], "instruction": "x"}, "outside the 1120x560 image"),
        ({"img_filename": "screen.png", "bbox": [10, 0, 5, 10], "instruction": "x"}, "is empty or outside"),
        ({"img_filename": "screen.png", "bbox": [0, 0, 10], "instruction": "x"}, "must be 4 finite numbers"),
        ({"img_filename": "screen.png", "bbox": [0, 0, 10, 10]}, "missing key 'instruction'"),
        ({"img_filename": "screen.png", "bbox": [0, 0, 10, 10], "instruction": "x", "platform": 3}, "key 'platform'"),
    ],
)
def test_bad_grounding_records_are_named(tmp_path, record, message):
    with pytest.raises(RecordError, match=message):
        GuiGrounding().build_sample(record, _ctx(tmp_path))


@pytest.mark.parametrize(
    "gt,options,message",
    [
        ({"action_type": "teleport"}, None, "is not an AndroidControl action"),
        ({"action_type": "click", "x": 5}, None, "needs finite numbers 'x' and 'y'"),
        ({"action_type": "click", "x": 5000, "y": 5}, None, "outside the 1120x560 image"),
        ({"action_type": "input_text"}, None, "needs a non-empty string 'text'"),
        ({"action_type": "open_app", "app_name": " "}, None, "needs a non-empty string 'app_name'"),
        ({"action_type": "scroll", "direction": "sideways"}, None, "gt.direction must be one of"),
        ({"action_type": "navigate_home"}, None, "outside the gui_r1 action space"),
        ({"action_type": "wait"}, {"style": "ui_r1"}, "outside the ui_r1 action space"),
        ({"action_type": "click", "x": 5, "y": 5, "bbox": [0, 0, 2000, 9]}, None, "gt.bbox"),
    ],
)
def test_bad_action_records_are_named(tmp_path, gt, options, message):
    with pytest.raises(RecordError, match=message):
        action_sample(tmp_path, gt, options)


def test_action_records_need_an_instruction_and_a_gt(tmp_path):
    with pytest.raises(RecordError, match="missing key 'task'"):
        GuiAction().build_sample({"image": "screen.png", "gt": {"action_type": "wait"}}, _ctx(tmp_path))
    with pytest.raises(RecordError, match="missing key 'gt'"):
        GuiAction().build_sample({"image": "screen.png", "instruction": "x"}, _ctx(tmp_path))
    record = {"image": "screen.png", "instruction": "x", "history": ["a", "b"], "gt": {"action_type": "wait"}}
    sample = GuiAction().build_sample(record, _ctx(tmp_path))
    assert "with the action history being 'a; b'" in GuiAction().messages(sample)[0]["content"][2]["text"]


def test_a_text_with_an_apostrophe_survives_the_target(tmp_path):
    sample = action_sample(tmp_path, {"action_type": "input_text", "text": "Mona lisa's painting"})
    target = GuiAction().target(sample)
    assert '"Mona lisa\'s painting"' in target
    assert rewards(GuiAction(), target, sample)["input_text"] == 1.0


# -- data ----------------------------------------------------------------------------------------
def test_screenspot_converter(tmp_path):
    src = tmp_path / "screenspot_web.json"
    src.write_text(json.dumps([{"img_filename": "a.png", "bbox": [10, 20, 30, 40], "instruction": "go",
                                "data_type": "icon", "data_source": "shop"}]))  # fmt: skip
    out = json.loads(convert_screenspot(src, tmp_path / "out.json").read_text())
    assert out == [{"img_filename": "a.png", "bbox": [10, 20, 40, 60], "instruction": "go", "platform": "web",
                    "data_type": "icon", "data_source": "shop"}]  # fmt: skip
    with pytest.raises(ValueError, match="platform"):
        convert_screenspot(src.rename(tmp_path / "other.json"), tmp_path / "o.json")


def test_gui_r1_converter(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (200, 100)).save(buffer, format="PNG")
    Image.new("RGB", (400, 200)).save(tmp_path / "shot.png")
    rows = [
        {"image": {"bytes": buffer.getvalue()}, "instruction": "tap", "gt_action": "click", "gt_bbox": [0.5, 0.25],
         "gt_input_text": "no input text", "history": "None"},
        {"image": "shot.png", "instruction": "tap box", "gt_action": "click", "gt_bbox": [0.1, 0.1, 0.2, 0.3],
         "gt_input_text": "no input text"},
        {"image": "shot.png", "instruction": "type", "gt_action": "type", "gt_bbox": [-1, -1], "gt_input_text": "cats"},
        {"image": "shot.png", "instruction": "done", "gt_action": "complete", "gt_bbox": [-1, -1], "gt_input_text": ""},
    ]  # fmt: skip
    records, skipped = gui_r1_to_action(rows, tmp_path, tmp_path / "out" / "images")
    assert [r["gt"] for r in records] == [
        {"action_type": "click", "x": 100.0, "y": 25.0},
        {"action_type": "click", "bbox": [40.0, 20.0, 80.0, 60.0], "x": 60.0, "y": 40.0},
        {"action_type": "input_text", "text": "cats"},
    ]
    assert records[0]["image"] == "images/000000.png" and (tmp_path / "out" / "images" / "000000.png").is_file()
    assert records[1]["image"] == "images/000001.png"  # a named image too: the data stays inside its root
    assert len(skipped) == 1 and "'complete'" in skipped[0]
    path = tmp_path / "out" / "train.json"
    path.write_text(json.dumps(records))
    split = GuiAction().load(path, FrameSpec("absolute", 3136, 50176))
    assert not split.errors and split.samples[1].solution["box"] == [40.0, 20.0, 80.0, 60.0]
    src = tmp_path / "rows.jsonl"  # GUI-R1's jsonl evaluation files name their images
    src.write_text("\n".join(json.dumps(row) for row in rows[1:]))
    assert len(convert_gui_r1(src, tmp_path / "j" / "out.json")) == 1
    assert len(json.loads((tmp_path / "j" / "out.json").read_text())) == 2


def test_gui_r1_rows_keep_ids_directions_and_any_case_of_action_name(tmp_path):
    jpeg = io.BytesIO()
    Image.new("RGB", (60, 40)).save(jpeg, format="JPEG")
    Image.new("RGB", (400, 200)).save(tmp_path / "shot.png")
    rows = [
        {"image": {"bytes": jpeg.getvalue()}, "instruction": "see more", "gt_action": "SCROLL", "gt_bbox": [-1, -1],
         "gt_input_text": "down", "history": "", "id": 7, "task_type": "high"},
        {"image": "shot.png", "instruction": "go home", "gt_action": "press_home", "gt_bbox": [-1, -1],
         "gt_input_text": "no input text", "history": "step 1: open app"},
    ]  # fmt: skip
    (scroll, home), skipped = gui_r1_to_action(rows, tmp_path, tmp_path / "out" / "images")
    assert not skipped
    # GUI-R1 formats an empty history as '' (dataset.py, inference_vllm_android.py), a missing one as 'None'
    assert scroll == {"image": "images/000000.jpeg", "instruction": "see more", "history": "",
                      "gt": {"action_type": "scroll", "direction": "down"}, "width": 60, "height": 40, "id": 7,
                      "task_type": "high"}  # fmt: skip
    assert (tmp_path / "out" / "images" / "000000.jpeg").read_bytes() == jpeg.getvalue()
    assert home["gt"] == {"action_type": "navigate_home"} and home["history"] == "step 1: open app"
    assert "id" not in home and "task_type" not in home
    src = tmp_path / "rows.jsonl"  # blank lines between rows, as hand-edited files have them
    src.write_text("\n\n".join(json.dumps(row) for row in [rows[1], rows[1]]) + "\n\n")
    assert convert_gui_r1(src, tmp_path / "j" / "train.json") == []
    assert len(json.loads((tmp_path / "j" / "train.json").read_text())) == 2


def test_gui_r1_boxes_in_pixels_are_not_scaled(tmp_path):
    Image.new("RGB", (400, 200)).save(tmp_path / "shot.png")
    row = {"image": "shot.png", "instruction": "tap", "gt_action": "click", "gt_bbox": [10, 20, 30, 60]}
    (record,), _ = gui_r1_to_action([row], tmp_path, tmp_path / "images", bbox_unit="pixels")
    assert record["gt"] == {"action_type": "click", "bbox": [10.0, 20.0, 30.0, 60.0], "x": 20.0, "y": 40.0}


def test_screenspot_ids_are_kept(tmp_path):
    src = tmp_path / "screenspot_mobile.json"
    src.write_text(json.dumps([{"img_filename": "a.png", "bbox": [1, 2, 3, 4], "instruction": "go", "id": "s-1"}]))
    (record,) = json.loads(convert_screenspot(src, tmp_path / "out.json").read_text())
    assert record == {
        "img_filename": "a.png",
        "bbox": [1, 2, 4, 6],
        "instruction": "go",
        "platform": "mobile",
        "id": "s-1",
    }


def test_a_screenspot_item_that_cannot_be_read_stops_the_conversion_naming_the_file_and_the_item(tmp_path, capsys):
    from data_prep.gui import main

    src = tmp_path / "screenspot_mobile.json"
    good = {"img_filename": "a.png", "bbox": [1, 2, 3, 4], "instruction": "go"}
    for item, message in [
        ({"img_filename": "b.png", "instruction": "no box"}, "missing key 'bbox'"),
        ({**good, "bbox": [1, 2, 3]}, "bbox must be 4 finite numbers [x, y, w, h] in pixels, got [1, 2, 3]"),
        ({**good, "bbox": [1, 2, "3", 4]}, "bbox must be 4 finite numbers"),
        ({**good, "instruction": None}, "key 'instruction' has the wrong type NoneType"),
    ]:
        src.write_text(json.dumps([good, item]))
        with pytest.raises(ValueError, match=re.escape(f"{src} item 1: {message}")):
            convert_screenspot(src, tmp_path / "out.json")
    assert main(["screenspot", str(src), str(tmp_path / "out.json")]) == 2
    assert capsys.readouterr().err == f"error: {src} item 1: key 'instruction' has the wrong type NoneType\n"
    assert not (tmp_path / "out.json").exists()  # a benchmark is never written short of an item


def test_a_gui_r1_row_that_cannot_be_read_is_skipped_with_its_reason_and_the_others_kept(tmp_path, capsys):
    from data_prep.gui import main

    Image.new("RGB", (400, 200)).save(tmp_path / "shot.png")
    (tmp_path / "broken.png").write_bytes(b"not an image")
    good = {"image": "shot.png", "instruction": "tap", "gt_action": "click", "gt_bbox": ["0.5", 0.25]}
    rows = [
        good,
        {**good, "instruction": None},
        {k: v for k, v in good.items() if k != "image"},
        {**good, "image": "missing.png"},
        {**good, "image": "broken.png"},
        {**good, "gt_bbox": [0.1, 0.2, 0.3]},
        {**good, "gt_bbox": [0.1, "x"]},
        {k: v for k, v in good.items() if k != "gt_bbox"},
        "not a row",
        good,
    ]
    records, skipped = gui_r1_to_action(rows, tmp_path, tmp_path / "out" / "images")
    assert [r["gt"] for r in records] == [{"action_type": "click", "x": 200.0, "y": 50.0}] * 2
    assert skipped[:3] == [
        "row 1: key 'instruction' has the wrong type NoneType",
        "row 2: missing key 'image'",
        f"row 3: image cannot be read: [Errno 2] No such file or directory: '{tmp_path / 'missing.png'}'",
    ]
    assert skipped[4:] == [
        "row 5: gt_bbox must be a point [x, y] or a box [x1, y1, x2, y2], got [0.1, 0.2, 0.3]",
        "row 6: gt_bbox must be a point [x, y] or a box [x1, y1, x2, y2], got [0.1, 'x']",
        "row 7: missing key 'gt_bbox'",
        "row 8: a row must be an object, got str",
    ]
    assert skipped[3].startswith("row 4: image cannot be read: cannot identify image file")
    src = tmp_path / "rows.jsonl"
    lines = [json.dumps(row) for row in rows]
    src.write_text("\n".join([*lines[:2], '{"image": "shot.png", "instruction": tap}', *lines[2:]]))
    assert main(["gui_r1", str(src), str(tmp_path / "j" / "out.json")]) == 0
    out = capsys.readouterr().out
    assert f"skipped 9 row(s) of {src}" in out
    assert f"{src}:3: invalid JSON: Expecting value: line 1 column 38" in out  # the file's line, and the rest read
    assert len(json.loads((tmp_path / "j" / "out.json").read_text())) == 2
    for text, message in [
        ("{]", "invalid JSON: Expecting property name"),
        ('{"rows": []}', "expected a list of GUI-R1 rows, got dict"),
    ]:
        (tmp_path / "rows.json").write_text(text)
        assert main(["gui_r1", str(tmp_path / "rows.json"), str(tmp_path / "k" / "out.json")]) == 2
        assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'rows.json'}: {message}")
        (tmp_path / "screenspot_web.json").write_text(text)
        assert main(["screenspot", str(tmp_path / "screenspot_web.json"), str(tmp_path / "k" / "out.json")]) == 2
        assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'screenspot_web.json'}: ")
    assert not (tmp_path / "k").exists()


def test_an_element_is_clicked_at_the_floor_of_its_boxs_center():
    from data_prep.gui import Element

    assert Element("button", [10, 20, 31, 41]).center == (20, 30)
    assert Element("icon", [0, 0, 18, 26]).center == (9, 13)


def test_synthetic_grounding_cycles_the_platforms_and_types_icons_apart_from_text(tmp_path):
    records = json.loads(write_synthetic_grounding(tmp_path / "g.json", 9, seed=0).read_text())
    assert [r["platform"] for r in records] == ["mobile", "desktop", "web"] * 3
    for r in records:
        with Image.open(tmp_path / r["img_filename"]) as image:
            assert image.size == (r["width"], r["height"])
        assert (r["height"] > r["width"]) == (r["platform"] == "mobile")  # phones stand, screens lie
        assert r["data_type"] == ("icon" if r["instruction"].endswith(" icon") else "text")
    assert {r["data_type"] for r in records} == {"icon", "text"}


def test_synthetic_data_is_deterministic(tmp_path):
    for write in (write_synthetic_grounding, write_synthetic_actions):
        a = write(tmp_path / "a" / "train.json", 6, seed=3)
        b = write(tmp_path / "b" / "train.json", 6, seed=3)
        assert a.read_text() == b.read_text()
        image = Path("images") / "train_000005.png"
        assert (a.parent / image).read_bytes() == (b.parent / image).read_bytes()
    records = json.loads((tmp_path / "a" / "train.json").read_text())
    kinds = [r["gt"]["action_type"] for r in records[:5]]
    assert kinds == ["click", "input_text", "scroll", "open_app", "navigate_back"]


def test_public_regex_mode_clicks_the_origin_without_a_point(tmp_path):
    sample = grounding_sample(tmp_path, box=(0, 0, 50, 50))
    no_point = "<think>a</think> <answer>[{'action': 'click'}]</answer>"
    public = GuiGrounding({"parser": "public_regex"})
    assert rewards(public, no_point, sample)["click"] == 1.0  # UI-R1 reads [0, 0]: inside this box
    assert rewards(GuiGrounding(), no_point, sample)["click"] == 0.0
    assert public.metrics([sample], ["no answer"])["accuracy"] == 0.0  # UI-R1's evaluation errors
    # GUI-R1's evaluation reads [0, 0] too, the box's corner: not strictly inside, where a box from -1 holds it
    gui_r1_public = GuiGrounding({"parser": "public_regex", "style": "gui_r1"})
    assert gui_r1_public.metrics([sample], ["none"])["accuracy"] == 0.0
    assert gui_r1_public.metrics([grounding_sample(tmp_path, box=(-1, -1, 50, 50))], ["none"])["accuracy"] == 1.0


def test_options_are_checked():
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match="click_distance must be > 0"):
        GuiAction({"click_distance": 0})
    with pytest.raises(ConfigError, match="text_f1_threshold"):
        GuiAction({"text_f1_threshold": 1.5})
    with pytest.raises(ConfigError, match="style must be one of"):
        GuiGrounding({"style": "seeclick"})


# -- exact values where the model's frame is the image's -------------------------------------------
def gui_r1_accuracy(completion: str, gt_action: str, gt_bbox: list) -> float:
    """GUI-R1's r1gui_accuracy_reward for click steps, transcribed from ritzz-ai/GUI-R1 at d43eea2
    (verl/utils/reward_score/r1gui.py: extract_action, extract_coord); gt_bbox in the model's frame."""
    content = re.search(r"<answer>(.*?)</answer>", completion, re.DOTALL).group(1).strip()
    action = re.search(r"'action':\s*'(\w+)'", content).group(1).lower()
    match = re.search(r"\{.*\[(\d+),\s*(\d+)]\s*.*\}", content)
    pred = [int(match.group(1)), int(match.group(2))] if match else [0, 0, 0, 0]
    if action != gt_action:
        return 0.0
    if len(gt_bbox) == 2:
        return 1.0 if (pred[0] - gt_bbox[0]) ** 2 + (pred[1] - gt_bbox[1]) ** 2 < 140**2 else 0.0
    return 1.0 if gt_bbox[0] < pred[0] < gt_bbox[2] and gt_bbox[1] < pred[1] < gt_bbox[3] else 0.0


def ui_r1_click(completion: str, bbox: list, scale: tuple[float, float]) -> float:
    """UI-R1's accuracy_reward_coord for a click, transcribed from lll6gg/UI-R1 at 2fe9bf0
    (src/ui_r1/src/open_r1/grpo_json_action_coord.py); scale = original / resized size."""
    content = re.search(r"<answer>(.*?)</answer>", completion, re.DOTALL).group(1).strip()
    match = re.search(r"\[(\d+),\s*(\d+)]", content)
    x, y = int(int(match.group(1)) * scale[0]), int(int(match.group(2)) * scale[1])
    return 1.0 if bbox[0] <= x <= bbox[2] and bbox[1] <= y <= bbox[3] else 0.0


def _square_ctx(tmp_path: Path) -> RecordContext:
    Image.new("RGB", (728, 728), (200, 200, 200)).save(tmp_path / "square.png")  # 26 x 28: not resized
    return RecordContext("data.json:1", 0, tmp_path, FrameSpec("absolute", 3136, 12845056))


EDGES = [99, 100, 101, 199, 299, 300, 301]


def test_clicks_on_box_edges_follow_each_public_rule_exactly_where_frames_coincide(tmp_path):
    box = [100, 100, 300, 300]  # 100 / 728 * 728 = 100.00000000000001: a converted edge would move
    record = {"img_filename": "square.png", "bbox": box, "instruction": "x"}
    sample = GuiGrounding().build_sample(record, _square_ctx(tmp_path))
    assert (sample.frame.model_width, sample.frame.model_height) == (728, 728)
    accuracy, click = GuiGrounding().reward_functions()["accuracy"], GuiGrounding().reward_functions()["click"]
    for x in EDGES:
        for y in EDGES:
            gui, ui = gui_r1("click", (x, y)), ui_r1("click", (x, y))
            assert accuracy([gui], [sample]) == [gui_r1_accuracy(gui, "click", box)], (x, y)
            assert click([ui], [sample]) == [ui_r1_click(ui, box, (1.0, 1.0))], (x, y)
            assert GuiGrounding().predict(ui, sample) == [float(x), float(y)]


@pytest.mark.parametrize("point", [(240, 100), (100, 240), (184, 212), (16, 212), (239, 100), (183, 212)])
def test_a_click_exactly_140_px_from_the_point_misses_as_in_gui_r1(tmp_path, point):
    sample = GuiAction().build_sample(
        {"image": "square.png", "task": "x", "gt": {"action_type": "click", "x": 100, "y": 100}}, _square_ctx(tmp_path)
    )
    completion = gui_r1("click", point)  # (184, 212): 84^2 + 112^2 = 140^2 exactly
    expected = gui_r1_accuracy(completion, "click", [100, 100])
    assert GuiAction().reward_functions()["accuracy"]([completion], [sample]) == [expected]


def test_an_answer_in_the_other_styles_format_is_read_for_what_it_states(tmp_path):
    sample = grounding_sample(tmp_path)  # box [100, 100, 300, 200] original, model frame halves it
    under_gui_r1 = rewards(GuiGrounding({"style": "gui_r1"}), ui_r1("click", (100, 75)), sample)
    assert under_gui_r1 == {"format": 0.0, "action_type": 1.0, "click": 1.0, "accuracy": 1.0}  # no 'point' key
    under_ui_r1 = rewards(GuiGrounding(), gui_r1("click", (100, 75)), sample)
    assert under_ui_r1 == {"format": 1.0, "action_type": 1.0, "click": 1.0, "accuracy": 1.0}
    typed = action_sample(tmp_path, {"action_type": "input_text", "text": "hello"})  # GUI-R1 calls it "type"
    ui_named = "<think>a</think> <answer>[{'action': 'input_text', 'coordinate': [0, 0]}]</answer>"
    assert rewards(GuiAction(), ui_named, typed)["action_type"] == 0.0


# -- single rules pinned -----------------------------------------------------------------------
def test_a_select_action_without_its_text_fails_gui_r1s_format():
    assert R.gui_r1_format(gui_r1("select", (1, 2))) == 0.0  # "no input text" is no text
    assert R.gui_r1_format(gui_r1("select", (1, 2), text="Maps")) == 1.0


def test_the_structured_reader_takes_the_first_action_of_a_list():
    two = "[{'action': 'click', 'point': [1, 2]}, {'action': 'type', 'point': [3, 4]}]"
    assert R.structured_action(two) == R.GuiAction("click", (1.0, 2.0), None)


def test_the_structured_reader_takes_point_over_coordinate_and_coordinate_alone():
    both = "{'action': 'click', 'point': [1, 2], 'coordinate': [3, 4]}"
    assert R.structured_action(both).point == (1.0, 2.0)  # GUI-R1's key first
    assert R.structured_action("{'action': 'click', 'coordinate': [3, 4]}").point == (3.0, 4.0)  # UI-R1's
    assert R.structured_action("{'action': 'click', 'point': [True, 4]}").point is None  # a bool is no coordinate


def test_the_public_input_text_regex_stops_at_a_line_break():
    """GUI-R1's `re.search(r"'input_text':\\s*'(.*?)'", ...)` runs without DOTALL."""
    assert R.regex_action("{'action': 'type', 'input_text': 'hello\nworld'}", "gui_r1").input_text is None
    assert R.regex_action("{'action': 'type', 'input_text': 'hello world'}", "gui_r1").input_text == "hello world"


def test_the_structured_reader_strips_the_action_name():
    assert R.structured_action("[{'action': ' click ', 'point': [1, 2]}]").action == "click"


def test_ui_r1_without_thinking_reads_the_last_point_in_braces_as_ui_r1_e_does():
    content = "[{'action': 'click', 'coordinate': [1, 2]}] then {'x': [3, 4]}"
    assert R.regex_action(content, "ui_r1", thinking=False).point == (3.0, 4.0)
    assert R.regex_action(content, "ui_r1", thinking=True).point == (1.0, 2.0)


def test_a_point_too_long_for_int_is_gui_r1s_origin_but_no_click_for_ui_r1():
    content = "{'action': 'click', 'point': [" + "9" * 5000 + ", 1]}"
    assert R.regex_action(content, "gui_r1").point == (0.0, 0.0)  # GUI-R1 falls back to [0, 0]
    assert R.regex_action(content, "ui_r1", thinking=False).point == (math.inf, math.inf)


def test_a_zero_width_grounding_box_is_refused_as_empty(tmp_path):
    with pytest.raises(RecordError, match=r"key 'bbox' \[100, 100, 100, 200\] is empty or outside"):
        grounding_sample(tmp_path, box=(100, 100, 100, 200))


def test_strict_step_success_needs_the_exact_scroll_direction_not_a_close_text(tmp_path):
    sample = action_sample(tmp_path, {"action_type": "scroll", "direction": "up"})
    m = GuiAction().metrics([sample], [gui_r1("scroll", text="upward")])
    assert m["step_success"] == 1.0  # "upward" contains "up": F1 1 by GUI-R1's rule
    assert m["step_success_strict"] == 0.0


def test_a_text_f1_threshold_of_zero_is_refused():
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"text_f1_threshold must be in \(0, 1\], got 0"):
        GuiAction({"text_f1_threshold": 0})
    assert GuiAction({"text_f1_threshold": 1}).options.text_f1_threshold == 1


def test_the_gui_r1_recipe_takes_its_easyr1_loss():
    """ritzz-ai/GUI-R1 d43eea2: dp_actor.py's masked mean of each micro-batch of 4 rows
    (examples/config.yaml) over gradient accumulation, core_algos.py's GRPO epsilon 1e-6."""
    from vlrl.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "gui_action.yaml")
    algo = cfg.algo
    assert (algo.aggregation, algo.micro_batch_rows, algo.std_eps) == ("micro_token_mean", 4, 1e-6)
    assert (algo.beta, algo.kl_estimator, algo.mini_batches) == (0.01, "low_var", 4)
    assert (cfg.model.image_resize, cfg.task.options["gt_frame"]) == ("easyr1", "process_image")  # its frames


# -- UI-R1's ScreenSpot scripts, as they count -----------------------------------------------------
def ui_r1_screenspot_scripts(items: list[dict], responses: list[str]) -> tuple[dict, dict]:
    """UI-R1's ScreenSpot numbers, transcribed from lll6gg/UI-R1 at 2fe9bf0: test_screenspot.py
    (`extract_coord`, the unscaled comparison, one json line per sample, exceptions caught) and
    eval_ss.py (hits and totals per `{platform}_{type}`, the type looked up by the box's text in
    the platform's file). Returns (hits, totals)."""

    def extract_coord(content):
        answer_tag_pattern = r"<answer>(.*?)</answer>"
        bbox_pattern = r"\{.*\[(\d+),\s*(\d+)]\s*.*\}"
        content_answer_match = re.search(answer_tag_pattern, content, re.DOTALL)
        if content_answer_match:
            content_answer = content_answer_match.group(1).strip()
            coord_match = re.search(bbox_pattern, content_answer)
            if coord_match:
                coord = [int(coord_match.group(1)), int(coord_match.group(2))]
                return coord, True
        else:
            coord_pattern = r"\{.*\((\d+),\s*(\d+))\s*.*\}"
            coord_match = re.search(coord_pattern, content)
            if coord_match:
                coord = [int(coord_match.group(1)), int(coord_match.group(2))]
                return coord, True
        return [0, 0, 0, 0], False

    lines = {}
    for item, response in zip(items, responses, strict=True):
        try:
            gt_bbox = item["bbox"]
            pred_coord, _ = extract_coord(response)
            success = gt_bbox[0] <= pred_coord[0] <= gt_bbox[2] and gt_bbox[1] <= pred_coord[1] <= gt_bbox[3]
            new_pred_dict = {"image_id": item["img_filename"], "gt_bbox": gt_bbox, "pred_coord": pred_coord,
                             "response": response, "pred_result": success}  # fmt: skip
            lines.setdefault(item["platform"], []).append(json.dumps(new_pred_dict))
        except Exception:
            pass
    result, total = {}, {}
    for task in lines:
        bbox_type = {}
        for d in items:
            if d["platform"] == task:
                bbox_type[str(d["bbox"]).strip("[]")] = d["data_type"]
        for line in lines[task]:
            type = bbox_type[re.search(r'"gt_bbox": \[(.*?)\]', line).group(1)]
            if "true" in line or "True" in line:
                result[f"{task}_{type}"] = result.get(f"{task}_{type}", 0) + 1
            total[f"{task}_{type}"] = total.get(f"{task}_{type}", 0) + 1
    return result, total


def screenspot_outputs(rng) -> str:
    x, y = rng.choice([0, 50, 99, 100, 101, 150, 200, 299, 300, 301, 600]), rng.choice([0, 50, 100, 150, 200, 201])
    think = rng.choice(["ok", "the true icon", "it is True", "tr\nue", ""])
    answers = [
        f"[{{'action': 'click', 'coordinate': [{x}, {y}]}}]",
        f"[{{'action': 'click', 'coordinate': [{x}, {y}]}}, {{'action': 'click', 'coordinate': [{y}, {x}]}}]",
        f"[{{'action': 'click',\n 'coordinate': [{x}, {y}]}}]",
        f"[{{'action': 'click', 'coordinate': [{x}, {y}]}}]\n[{{'coordinate': [{y}, {x}]}}]",
        f'[{{"action": "click", "coordinate": [{x}, {y}]}}]',
        f"[{{'action': 'click', 'coordinate': [{x}.5, {y}]}}]",
        f"[{x}, {y}]",
        "{'action': 'scroll'}",
        "[{'coordinate': [" + "9" * 5000 + ", 1]}]",
    ]
    answer = rng.choice(answers)
    if rng.random() < 0.15:
        return f"<think>{think}</think> {answer}"  # no <answer>: the script writes no line
    return f"<think>{think}</think> <answer>{answer}</answer>" + rng.choice(["", " True", " <answer>[1, 1]</answer>"])


def test_ui_r1_eval_protocol_counts_screenspot_as_ui_r1s_scripts_do(tmp_path):
    """On generated outputs (several points, lines, "true" in the thinking, no answer, a
    5000-digit number) and boxes shared across element types, every metric equals the
    transcribed scripts' hits / totals. The model frame here is half the original: the scripts
    compare the point unscaled, and so does this protocol."""
    import random

    rng = random.Random(0)
    boxes = [(100, 100, 300, 200), (0, 0, 150, 100), (200, 150, 600, 300)]
    items = []
    for i in range(400):
        b = rng.randrange(3)  # the first box is an icon, the last text, the middle one either: its last type counts
        kind = ["icon", rng.choice(["text", "icon"]), "text"][b]
        items.append({"img_filename": "screen.png", "bbox": list(boxes[b]), "instruction": "x",
                      "platform": ["mobile", "web", "desktop"][i % 3], "data_type": kind})  # fmt: skip
    responses = [screenspot_outputs(rng) for _ in items]
    task = GuiGrounding({"eval_protocol": "ui_r1"})
    samples = [task.build_sample(item, _ctx(tmp_path)) for item in items]
    m = task.metrics(samples, responses)
    result, total = ui_r1_screenspot_scripts(items, responses)
    assert set(total) == {f"{p}_{t}" for p in ("mobile", "web", "desktop") for t in ("text", "icon")}
    assert sum(total.values()) < len(items)  # outputs were left out
    for key, count in total.items():
        platform, kind = key.split("_")
        assert m[f"acc/{platform}/{kind}"] == pytest.approx(result.get(key, 0) / count), key
    assert m["accuracy"] == pytest.approx(sum(result.values()) / sum(total.values()))
    assert m["accuracy"] != GuiGrounding().metrics(samples, responses)["accuracy"]


def test_ui_r1_eval_protocol_on_hand_computed_cases(tmp_path):
    sample = grounding_sample(tmp_path, platform="mobile", data_type="text")  # box (100, 100, 300, 200)
    task = GuiGrounding({"eval_protocol": "ui_r1"})
    unscaled = ui_r1("click", (200, 150))  # vlrl's frame maps it to (400, 300): outside
    assert task.metrics([sample], [unscaled])["accuracy"] == 1.0
    assert GuiGrounding().metrics([sample], [unscaled])["accuracy"] == 0.0
    two = "<think>a</think> <answer>[{'action': 'click', 'coordinate': [1, 1]}, {'coordinate': [150, 150]}]</answer>"
    assert task.metrics([sample], [two])["accuracy"] == 1.0  # the last point on the line
    said_true = "<think>true</think> <answer>[{'action': 'click', 'coordinate': [1, 1]}]</answer>"
    assert task.metrics([sample], [said_true])["accuracy"] == 1.0
    no_answer = "<think>a</think> [{'action': 'click', 'coordinate': [150, 150]}]"
    assert task.metrics([sample, sample], [no_answer, unscaled])["accuracy"] == 1.0  # left out
    assert task.metrics([sample], [no_answer])["accuracy"] == 0.0


def test_ui_r1s_screenspot_prompt_is_sent_as_its_evaluation_sends_it(tmp_path):
    sample = grounding_sample(tmp_path)
    task_prompt = sample.problem
    question_template = (  # lll6gg/UI-R1 2fe9bf0, evaluation/test_screenspot.py
        f"In this UI screenshot, I want to perform the command '{task_prompt}'.\n"
        "Please provide the action to perform (enumerate in ['click', 'scroll']) and the coordinate where the cursor is moved to(integer) if click is performed.\n"
        "Output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
        "The output answer format should be as follows:\n"
        "<think> ... </think> <answer>[{'action': enum['click', 'scroll'], 'coordinate': [x, y]}]</answer>\n"
        "Please strictly follow the format."
    )
    content = GuiGrounding({"ui_r1_prompt": "screenspot"}).messages(sample)[0]["content"]
    assert content == [{"type": "image"}, {"type": "text", "text": "<image>\n" + question_template}]
    with pytest.raises(Exception, match="ui_r1_prompt=screenspot"):
        GuiGrounding({"ui_r1_prompt": "screenspot", "style": "gui_r1"})
