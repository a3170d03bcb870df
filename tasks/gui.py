"""GUI agents as UI-R1 and GUI-R1 train and evaluate them: grounding (ScreenSpot) and actions
(AndroidControl).

Data:
- gui_grounding: UI-R1's grounding json `{"img_filename", "bbox": [x1, y1, x2, y2] (original
  pixels), "instruction", "platform"?, "data_type"?}` (data_prep.gui converts ScreenSpot's
  `[x, y, w, h]` files into it).
- gui_action: AndroidControl steps as UI-R1 ships them, `{"image", "task" | "instruction",
  "gt": {"action_type": "click", "x", "y"} | {"action_type": "input_text", "text"} |
  {"action_type": "open_app", "app_name"} | {"action_type": "scroll", "direction"} | ...,
  "history"?, "task_type"?}` (data_prep.gui converts GUI-R1's rows into it, keeping GUI-R1's
  task_type, which picks its training prompt).

The model answers one action in its own frame; rewards and metrics bring its point back to
original pixels through the sample's Frame (GUI-R1's 140 px reward distance is measured in
the model's frame, as GUI-R1 measures it in the resized image).

`style` picks the public recipe: prompt, answer format (GUI-R1 `'point'` + `'input_text'`,
UI-R1 `'coordinate'`), action names, format reward, and how an answer is read: the style's
public extractor (GUI-R1: the quoted action, the last [x, y] inside braces; UI-R1: also an
unquoted action, the first [x, y]), which `parser=structured` (the default) tries after
reading the answer as a literal. Every component then compares what was read by its own
public rule, whatever the style: `action_type` and `click` as UI-R1 (the action name as
written; the point truncated to integer pixels, box edges count), `accuracy` as GUI-R1 (the
name lower-cased; strictly inside the box, or closer than the distance; text F1); GUI-R1's
total is `accuracy: 0.8, format: 0.2`.

An answer written in the other style's format is read for what it states: the structured
parser takes `'point'` or `'coordinate'` alike, and the public regexes take any [x, y]. Its
action names are compared with this style's names (GUI-R1's `type`, `press_back` are not
UI-R1's `input_text`, `navigate_back`), and under `gui_r1` its format reward is 0 (GUI-R1's
format needs the `'point'` and `'input_text'` keys).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from data_prep.gui import write_synthetic_actions, write_synthetic_grounding
from rewards import gui as R
from rewards.text import compile_pattern
from vlrl.config import ConfigError
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task
from vlrl.vision.frames import Frame
from vlrl.vision.resize import easyr1_size

DistanceUnit = Literal["model_px", "original_px", "relative"]

# -- public prompts ----------------------------------------------------------------------------
# GUI-R1, AndroidControl (guir1/inference/inference_vllm_android.py); "<image>" marks where
# GUI-R1's training puts the screenshot (verl/utils/dataset.py replaces it with vision tokens).
GUI_R1_ACTION_TEMPLATE = (
    "You are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want you to continue "
    "executing the command '{instruction}', with the action history being '{history}'.\n"
    "Please provide the action to perform (enumerate from ['wait', 'long_press', 'click', 'press_back', 'type', "
    "'open_app', 'scroll']), the point where the cursor is moved to (integer) if a click is performed, and any "
    "input text required to complete the action.\n"
    "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags as "
    "follows:\n"
    "<think> ... </think> <answer>[{'action': enum['wait', 'long_press', 'click', 'press_back', 'type', "
    "'open_app', 'scroll'], 'point': [x, y], 'input_text': 'no input text [default]'}]</answer>\n"
    "Note:\n specific input text (no default) is necessary for actions enum['type', 'open_app', 'scroll'] \n"
    " Example:\n"
    "[{'action': enum['wait', 'press_back'], 'point': [-100, -100], 'input_text': 'no input text'}]\n"
    "[{'action': enum['click', 'long_press'], 'point': [123, 300], 'input_text': 'no input text'}]\n"
    "[{'action': enum['type', 'open_app'], 'point': [-100, -100], 'input_text': 'shanghai shopping mall'}]\n"
    "[{'action': enum['scroll'], 'point': [-100, -100], 'input_text': enum['up', 'left', 'right', 'down']}]"
)
# GUI-R1's training prompt for action rows (task_type "high", verl/utils/dataset.py @d43eea2): its
# own nine actions, of which complete, close/delete, select and enter have no AndroidControl step
# (data_prep.gui skips such rows) and wait, long_press and open_app are not offered.
GUI_R1_TRAINING_ACTION_TEMPLATE = (
    "You are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want you to continue "
    "executing the command '{instruction}', with the action history being '{history}'.\n"
    "Please provide the action to perform (enumerate from ['complete', 'close/delete', 'press_home', 'click', "
    "'press_back', 'type', 'select', 'scroll', 'enter']), the point where the cursor is moved to (integer) if a "
    "click is performed, and any input text required to complete the action.\n"
    "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags as "
    "follows:\n"
    "<think> ... </think> <answer>[{'action': enum['complete', 'close/delete', 'press_home', 'click', "
    "'press_back', 'type', 'select', 'scroll', 'enter'], 'point': [x, y], 'input_text': 'no input text "
    "[default]'}]</answer>\n"
    "Note:\n specific input text (no default) is necessary for actions enum['type', 'select', 'scroll'] \n"
    " Example:\n"
    "[{'action': enum['complete', 'close/delete', 'press_home', 'press_back', 'enter'], 'point': [-100, -100], "
    "'input_text': 'no input text'}]\n"
    "[{'action': enum['click'], 'point': [123, 300], 'input_text': 'no input text'}]\n"
    "[{'action': enum['type', 'select'], 'point': [-100, -100], 'input_text': 'shanghai shopping mall'}]\n"
    "[{'action': enum['scroll'], 'point': [-100, -100], 'input_text': enum['up', 'left', 'right', 'down']}]"
)
# GUI-R1 grounding rows (task_type "low", verl/utils/dataset.py).
GUI_R1_GROUNDING_TEMPLATE = (
    "You are GUI-R1, a reasoning GUI Agent Assistant. In this UI screenshot <image>, I want you to continue "
    "executing the command '{instruction}', with the action history being '{history}'.\n"
    "Please provide the action to perform (enumerate from ['click']), the point where the cursor is moved to "
    "(integer) if a click is performed, and any input text required to complete the action.\n"
    "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags as "
    "follows:\n"
    "<think> ... </think> <answer>[{'action': enum[ 'click'], 'point': [x, y], 'input_text': 'no input text'}]"
    "</answer>\n"
    "Example:\n"
    "[{'action': enum['click'], 'point': [123, 300], 'input_text': 'no input text'}]\n"
)
# UI-R1's training prompt, for grounding and action records alike (grpo_json_action_coord.py),
# its typos kept: the model was trained on exactly this text.
UI_R1_TEMPLATE = (
    "In this UI screenshot, I want to perform the command '{instruction}'.\n"
    "Please provide the action to perform (enumerate in ['click', 'open_app', 'scroll', 'navigate_back', "
    "'input_text]')and the coordinate where the cursor is moved to(integer) if click is performed.\n"
    "Output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
    "The output answer format should be as follows:\n"
    "<think> ... </think> <answer>[{'action': enum['click', 'open_app', 'scroll', 'navigate_back', "
    "'input_text], 'coordinate': [x, y]}]</answer>\n"
    "Please strictly follow the format."
)
# UI-R1's ScreenSpot evaluation (evaluation/test_screenspot.py @2fe9bf0): a click/scroll question
# sent after the image as "<image>\n" + the question, the literal "<image>" read as text.
UI_R1_SCREENSPOT_TEMPLATE = (
    "<image>\nIn this UI screenshot, I want to perform the command '{instruction}'.\n"
    "Please provide the action to perform (enumerate in ['click', 'scroll']) and the coordinate where the cursor "
    "is moved to(integer) if click is performed.\n"
    "Output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
    "The output answer format should be as follows:\n"
    "<think> ... </think> <answer>[{'action': enum['click', 'scroll'], 'coordinate': [x, y]}]</answer>\n"
    "Please strictly follow the format."
)
# UI-R1-E, no thinking (grpo_json_action_coord-nothink.py).
UI_R1_E_GROUNDING_TEMPLATE = (
    "In this UI screenshot, I want to perform the command '{instruction}'.\n"
    "Please provide the action to perform (enumerate in ['click'])and the coordinate where the cursor is moved "
    "to(integer) if click is performed.\n"
    "Output the final answer in <answer> </answer> tags directly.The output answer format should be as follows:\n"
    "<answer>[{'action': 'click', 'coordinate': [x, y]}]</answer>\n"
    "Please strictly follow the format."
)
# Without thinking, GUI-R1's own no-think variant of its prompts (commented out in its dataset
# code) and UI-R1-E's wording for the action prompt: only the output instruction changes.
_NO_THINK = {
    "gui_r1": (
        "Output the thinking process in <think> </think> tags, and the final answer in <answer> </answer> tags as "
        "follows:\n<think> ... </think> <answer>",
        "Output the final answer in <answer> </answer> tags as follows:\n<answer>",
    ),
    "ui_r1": (
        "Output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
        "The output answer format should be as follows:\n<think> ... </think> <answer>",
        "Output the final answer in <answer> </answer> tags directly.The output answer format should be as "
        "follows:\n<answer>",
    ),
}
_PLACEHOLDER = compile_pattern(r"\{(instruction|history)\}")

# -- action vocabularies -----------------------------------------------------------------------
ANDROIDCONTROL_ACTIONS = (
    "click", "long_press", "scroll", "open_app", "input_text", "navigate_home", "navigate_back", "wait",
)  # fmt: skip
# The name each style's answers use for an AndroidControl action type (others: the same name).
STYLE_NAMES = {
    "gui_r1": {"input_text": "type", "navigate_back": "press_back", "navigate_home": "press_home"},
    "ui_r1": {},
}
# The actions each style's prompt offers (in AndroidControl names).
STYLE_SPACES = {
    "gui_r1": ("wait", "long_press", "click", "navigate_back", "input_text", "open_app", "scroll"),
    "ui_r1": ("click", "open_app", "scroll", "navigate_back", "input_text"),
}
# The ground-truth field holding each action's text argument.
TEXT_FIELDS = {"input_text": "text", "open_app": "app_name", "scroll": "direction"}
REWARD_TEXT_ACTIONS = ("input_text", "scroll")  # GUI-R1's reward checks text for type/select/scroll
EVAL_TEXT_ACTIONS = ("open_app", "input_text", "scroll")  # GUI-R1's evaluation: open_app/type/scroll/select
POINT_ACTIONS = ("click", "long_press")  # GUI-R1's evaluation grounds these; rewards check clicks only
OFF_SCREEN = [-100, -100]  # GUI-R1's point for actions without one


@dataclass
class GuiOptions:
    style: Literal["gui_r1", "ui_r1"] = "ui_r1"
    thinking: bool = True  # False: answer-only prompts and format (UI-R1-E)
    parser: Literal["structured", "public_regex"] = "structured"  # public_regex: the public extractors only
    prompt_template: str = ""  # "" = the style's public prompt; {instruction} and {history} are filled in
    target_think: str = "{instruction}"  # reasoning text of the SFT target
    # The frame an answer's coordinates are read in (and the SFT target's written in): model, the
    # image the model sees; process_image, EasyR1's process_image output within model.min_pixels /
    # model.max_pixels, as GUI-R1's training scales its relative ground truth by that size while
    # the model sees the processor's smart-resized image, a few pixels apart (absolute frames only)
    gt_frame: Literal["model", "process_image"] = "model"


@dataclass
class GuiGroundingOptions(GuiOptions):
    # style ui_r1's prompt: its training's, or its ScreenSpot evaluation's (test_screenspot.py:
    # click and scroll offered, the question after a literal "<image>\n")
    ui_r1_prompt: Literal["training", "screenspot"] = "training"
    # Metrics: vlrl (every sample; the first action's point, mapped to original pixels) or ui_r1
    # (UI-R1's test_screenspot.py and eval_ss.py as they count: see GuiGrounding.metrics)
    eval_protocol: Literal["vlrl", "ui_r1"] = "vlrl"

    def __post_init__(self) -> None:
        if self.ui_r1_prompt == "screenspot" and (self.style != "ui_r1" or not self.thinking):
            raise ConfigError(
                "config: task.options.ui_r1_prompt=screenspot is UI-R1's thinking prompt: it needs "
                f"style=ui_r1 and thinking=true, got style={self.style}, thinking={self.thinking}"
            )


@dataclass
class GuiActionOptions(GuiOptions):
    style: Literal["gui_r1", "ui_r1"] = "gui_r1"
    # style gui_r1's prompt: its AndroidControl evaluation's (inference_vllm_android.py: the seven
    # AndroidControl actions this task scores), or its training's (dataset.py: its own nine actions
    # for a record whose task_type is high or absent, its click-only grounding prompt for any other)
    gui_r1_prompt: Literal["android_control", "training"] = "android_control"
    # Rewards, for a click whose ground truth is a point: GUI-R1's 140 px in the model's frame.
    click_distance: float = 140.0
    click_distance_unit: DistanceUnit = "model_px"
    # Metrics: GUI-R1's evaluation (0.14 of the screen, per axis); UI-R1's is 151.2 original_px.
    eval_click_distance: float = 0.14
    eval_click_distance_unit: DistanceUnit = "relative"
    text_f1_threshold: float = 0.5
    # Metrics: count (every step in type_acc, grounding_acc and step_success) or drop (an action's
    # steps leave a metric where none of them is right: GUI-R1's eval_omni.py, whose counts of an
    # action are made on its first hit)
    eval_hitless_actions: Literal["count", "drop"] = "count"

    def __post_init__(self) -> None:
        for key in ("click_distance", "eval_click_distance"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"config: task.options.{key} must be > 0, got {getattr(self, key)}")
        if not 0 < self.text_f1_threshold <= 1:
            raise ConfigError(f"config: task.options.text_f1_threshold must be in (0, 1], got {self.text_f1_threshold}")


@dataclass(frozen=True)
class PointRule:
    """When a predicted point counts as a click on a ground-truth point."""

    threshold: float
    unit: DistanceUnit

    def hit(self, point: Sequence[float], target: Sequence[float], frame: Frame, truncate: bool) -> bool:
        if self.unit == "model_px":
            return R.point_near(point, frame.point_to_model(target, integer=False), self.threshold)
        original = _original(point, frame, truncate)
        if original is None:
            return False
        scale = (frame.width, frame.height) if self.unit == "relative" else (1.0, 1.0)
        return R.point_near(original, target, self.threshold, scale)


def _original(point: Sequence[float], frame: Frame, truncate: bool) -> list[float] | None:
    """The point in original pixels (None if not finite). UI-R1 truncates it to integers,
    `int(x * scale)`; rounding to 1e-6 first keeps float noise of the conversion (376 / 560 *
    1120 = 751.99..) from dropping the pixel that UI-R1's product (752.0) keeps."""
    x, y = frame.point_to_original(point)
    if not (math.isfinite(x) and math.isfinite(y)):
        return None
    return [float(int(round(x, 6))), float(int(round(y, 6)))] if truncate else [x, y]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _GuiTask(Task):
    """What grounding and action steps share: parsing, prompts, the click test and rewards."""

    Options = GuiOptions
    data_suffix = ".json"

    # -- data -----------------------------------------------------------------------------
    def _box(self, value: Any, where: str, width: int, height: int, ctx: RecordContext) -> list[float]:
        if not (isinstance(value, list) and len(value) == 4 and all(_number(v) for v in value)):
            raise ctx.error(f"{where} must be 4 finite numbers [x1, y1, x2, y2], got {value!r}"[:200])
        box = [float(v) for v in value]
        x1, y1, x2, y2 = box
        # One pixel of slack: public annotations round element edges past the border.
        if not (-1 <= x1 < x2 <= width + 1 and -1 <= y1 < y2 <= height + 1):
            raise ctx.error(f"{where} {value} is empty or outside the {width}x{height} image")
        return box

    def _sample(self, ctx: RecordContext, record: dict, problem: str, solution: dict, path: str,
                width: int, height: int, meta: dict) -> Sample:  # fmt: skip
        spec = ctx.frame_spec
        if self.options.gt_frame == "process_image" and spec.kind == "absolute":
            first_h, first_w = easyr1_size(height, width, spec.min_pixels, spec.max_pixels)
            meta = {**meta, "gt_frame_size": [first_w, first_h]}
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=solution,
            images=[path],
            frame=spec.frame(width, height),
            meta=meta,
            source=ctx.source,
        )

    @staticmethod
    def _training_frame(sample: Sample) -> Frame:
        """The frame rewards and the SFT target read coordinates in: the model's, or under
        gt_frame=process_image GUI-R1's training frame (`_sample`); its evaluation maps answers
        from the model's frame (inference_vllm_android.py's image_grid_thw), as metrics do."""
        size = sample.meta.get("gt_frame_size")
        return sample.frame if size is None else replace(sample.frame, model_width=size[0], model_height=size[1])

    # -- prompting ------------------------------------------------------------------------
    def _default_template(self, sample: Sample) -> str:
        raise NotImplementedError

    def _fill(self, template: str, sample: Sample) -> str:
        values = {"instruction": sample.problem, "history": sample.meta.get("history", "None")}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = self._fill(self.options.prompt_template or self._default_template(sample), sample)
        before, marker, after = text.partition("<image>")
        parts = [before, {"type": "image"}, after] if marker else [{"type": "image"}, text]
        content = [p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts if p]
        return [{"role": "user", "content": content}]

    def target(self, sample: Sample) -> str:
        gt = sample.solution
        point = None
        if gt["source_action"] in POINT_ACTIONS:
            box = gt["box"]
            center = gt["point"] if box is None else [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
            point = self._training_frame(sample).point_to_model(center)
        if self.options.style == "gui_r1":
            action = {"action": gt["action"], "point": point or OFF_SCREEN, "input_text": gt["text"] or R.NO_INPUT_TEXT}
        else:
            action = {"action": gt["action"], "coordinate": point or [0, 0]}
        answer = f"<answer>{[action]!r}</answer>"
        if not self.options.thinking:
            return answer
        return f"<think>{self._fill(self.options.target_think, sample)}</think> {answer}"

    # -- scoring --------------------------------------------------------------------------
    def parse(self, completion: str) -> R.GuiAction | None:
        o = self.options
        return R.extract_action(completion, o.style, o.thinking, o.parser)

    def _point_of(self, action: R.GuiAction | None) -> tuple[float, float] | None:
        if action is not None and action.point is not None:
            return action.point
        if self.options.parser != "public_regex" or (action is None and self.options.style == "ui_r1"):
            return None
        # The public extractors' value without a point is (0, 0) (GUI-R1's also without an
        # <answer>; UI-R1's evaluation counts a missing <answer> as an error instead).
        return (0.0, 0.0)

    def _hit(self, action: R.GuiAction | None, sample: Sample, rule: PointRule | None, inclusive: bool,
             truncate: bool, box_corner: bool = False, frame: Frame | None = None) -> bool:  # fmt: skip
        """Does the predicted point click the ground truth (its box, or near its point)?
        `box_corner`: a box is its first corner, near which the point must be (GUI-R1's
        eval_omni.py reads `gt_bbox[0], gt_bbox[1]` whatever the box). `frame`: the point's
        (default the sample's: the model's)."""
        point = self._point_of(action)
        if point is None:
            return False
        gt, frame = sample.solution, frame or sample.frame
        if gt["box"] is None or box_corner:
            target = gt["point"] if gt["box"] is None else gt["box"][:2]
            return rule is not None and rule.hit(point, target, frame, truncate)
        original = _original(point, frame, truncate)
        return original is not None and R.point_in_box(original, gt["box"], inclusive)

    def _reward_rule(self) -> PointRule | None:
        return None

    def _format(self, completion: str) -> float:
        check = R.gui_r1_format if self.options.style == "gui_r1" else R.tags_format
        return check(completion, self.options.thinking)

    def _action_type(self, completion: str, sample: Sample) -> float:
        """UI-R1's `accuracy_action`: the action type as written equals the ground truth's."""
        action = self.parse(completion)
        return R.action_type(action.action if action else None, sample.solution["action"])

    def _click(self, completion: str, sample: Sample) -> float:
        """UI-R1's `accuracy_coord`: the type matches and, for a click, the integer original-pixel
        point is inside the box (edges count); any other matching action scores 1."""
        action = self.parse(completion)
        if R.action_type(action.action if action else None, sample.solution["action"]) == 0.0:
            return 0.0
        if sample.solution["source_action"] != "click":
            return 1.0
        frame = self._training_frame(sample)
        hit = self._hit(action, sample, self._reward_rule(), inclusive=True, truncate=True, frame=frame)
        return 1.0 if hit else 0.0

    def _accuracy(self, completion: str, sample: Sample) -> float:
        """GUI-R1's `r1gui_accuracy_reward`: the type matches (any case) and its argument does:
        a click strictly inside the box / near the point, type and scroll texts by F1."""
        action = self.parse(completion)
        gt = sample.solution
        if R.action_type(action.action if action else None, gt["action"], case_sensitive=False) == 0.0:
            return 0.0
        if gt["source_action"] == "click":
            frame = self._training_frame(sample)
            hit = self._hit(action, sample, self._reward_rule(), inclusive=False, truncate=False, frame=frame)
            return 1.0 if hit else 0.0
        if gt["source_action"] in REWARD_TEXT_ACTIONS:
            return R.input_text(action.input_text, gt["text"], self._f1_threshold())
        return 1.0

    def _f1_threshold(self) -> float:
        return 0.5

    def reward_functions(self) -> dict[str, RewardFn]:
        def batch(fn: Callable[[str, Sample], float]) -> RewardFn:
            return lambda completions, samples: [fn(c, s) for c, s in zip(completions, samples, strict=True)]

        return {
            "format": lambda completions, samples: [self._format(c) for c in completions],
            "action_type": batch(self._action_type),
            "click": batch(self._click),
            "accuracy": batch(self._accuracy),
        }

    def _eval_truncate(self) -> bool:
        return self.options.style == "ui_r1"

    def _rates(self, completions: Sequence[str]) -> dict[str, float]:
        n = len(completions)
        parsed = [self.parse(c) for c in completions]
        return {
            "format_rate": sum(self._format(c) for c in completions) / n,
            "parse_rate": sum(a is not None and a.action is not None for a in parsed) / n,
        }


class GuiGrounding(_GuiTask):
    name = "gui_grounding"
    description = "GUI grounding (ScreenSpot / UI-R1 json): click the element an instruction names, point in box"
    headline = ("accuracy", "format_rate")
    data_source = (
        "UI-R1's grounding json, or ScreenSpot's files converted: "
        "python -m data_prep.gui screenspot screenspot_mobile.json {path}"
    )
    Options = GuiGroundingOptions
    default_rewards = {"format": 1.0, "action_type": 1.0, "click": 1.0}  # UI-R1's three rewards

    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        key = "img_filename" if "img_filename" in record or "image" not in record else "image"
        image = ctx.get(record, key, str, "a screenshot path")
        instruction = ctx.get(record, "instruction", str, "the instruction text")
        meta: dict[str, Any] = {}
        for field in ("platform", "data_type"):
            if record.get(field) is not None:
                meta[field] = ctx.get(record, field, str, f"a string ({field})")
        path, width, height = ctx.image_with_size(image, record)
        box = self._box(ctx.get(record, "bbox", list, "a box [x1, y1, x2, y2]"), "key 'bbox'", width, height, ctx)
        solution = {"action": "click", "source_action": "click", "point": None, "box": box, "text": None}
        return self._sample(ctx, record, instruction, solution, path, width, height, meta)

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_grounding(path, size, seed)

    def _default_template(self, sample: Sample) -> str:
        if self.options.style == "gui_r1":
            return _without_thinking(GUI_R1_GROUNDING_TEMPLATE, "gui_r1", self.options.thinking)
        return UI_R1_TEMPLATE if self.options.thinking else UI_R1_E_GROUNDING_TEMPLATE

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        if self.options.ui_r1_prompt == "screenspot" and not self.options.prompt_template:
            text = self._fill(UI_R1_SCREENSPOT_TEMPLATE, sample)  # its "<image>" stays text, as there
            return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        return super().messages(sample)

    def predict(self, completion: str, sample: Sample) -> list[float] | None:
        action = self.parse(completion)
        if action is None or action.point is None:
            return None
        return _original(action.point, sample.frame, truncate=False)

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """ScreenSpot's accuracy (the point inside the box: edges count as UI-R1's
        test_screenspot.py counts them, strictly inside under `style=gui_r1` as GUI-R1's
        eval_screenspot.py), overall and split by platform, element type (text / icon) and both.
        `eval_protocol=ui_r1` counts as UI-R1's scripts do (`_ui_r1_script_hits`)."""
        if not samples:
            return {}
        if self.options.eval_protocol == "ui_r1":
            judged = self._ui_r1_script_hits(samples, completions)
        else:
            inclusive, truncate = self.options.style != "gui_r1", self._eval_truncate()
            judged = [
                (s.meta.get("platform"), s.meta.get("data_type"),
                 self._hit(self.parse(c), s, None, inclusive=inclusive, truncate=truncate))
                for c, s in zip(completions, samples, strict=True)
            ]  # fmt: skip
        groups: dict[str, list[bool]] = {"accuracy": []}
        for platform, kind, hit in judged:
            groups["accuracy"].append(hit)
            for key in (platform, kind, f"{platform}/{kind}" if platform and kind else None):
                if key:
                    groups.setdefault(f"acc/{key}", []).append(hit)
        out = {key: sum(hits) / len(hits) if hits else 0.0 for key, hits in groups.items()}
        return {**out, **self._rates(completions)}

    @staticmethod
    def _ui_r1_script_hits(samples: Sequence[Sample], completions: Sequence[str]) -> list[tuple[Any, Any, bool]]:
        """(platform, element type, hit) as UI-R1's ScreenSpot scripts count them (2fe9bf0:
        test_screenspot.py writes a line per sample, eval_ss.py counts the lines): the point is
        `ui_r1_screenspot_point`'s, compared as written with the box in original pixels (the
        rescaling is commented out there), edges counting; an output without <answer> writes no
        line and is left out; a line holding "true" or "True" anywhere is a hit (its response
        included); the element type is the one of the platform's last sample with that box (a
        dict keyed by the box's text). The image's file name stands for `img_filename`. Nothing
        left: accuracy 0, where eval_ss.py divides by zero."""
        kinds = {(s.meta.get("platform"), tuple(s.solution["box"])): s.meta.get("data_type") for s in samples}
        judged = []
        for completion, sample in zip(completions, samples, strict=True):
            point = R.ui_r1_screenspot_point(completion)
            if point is None:
                continue
            box = sample.solution["box"]
            line = json.dumps({
                "image_id": Path(sample.images[0]).name, "gt_bbox": box, "pred_coord": point,
                "response": completion, "pred_result": R.point_in_box(point[:2], box, inclusive=True),
            })  # fmt: skip
            platform = sample.meta.get("platform")
            judged.append((platform, kinds[platform, tuple(box)], "true" in line or "True" in line))
        return judged


class GuiAction(_GuiTask):
    name = "gui_action"
    description = "GUI actions (AndroidControl / GUI-R1): predict the next step's type, point and text"
    data_source = "UI-R1's AndroidControl json, or GUI-R1's parquet converted: python -m data_prep.gui gui_r1 train.parquet {path}"
    Options = GuiActionOptions
    accuracy_metric = "step_success_strict"  # every step: its type and its argument right
    headline = ("step_success", "type_acc", "grounding_acc")
    default_rewards = {"accuracy": 0.8, "format": 0.2}  # GUI-R1's total

    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        image = ctx.get(record, "image", str, "a screenshot path")
        key = "task" if "task" in record or "instruction" not in record else "instruction"
        instruction = ctx.get(record, key, str, "the step's instruction ('task' or 'instruction')")
        gt = ctx.get(record, "gt", dict, 'the ground-truth action {"action_type": ...}')
        kind = gt.get("action_type")
        if kind not in ANDROIDCONTROL_ACTIONS:
            known = ", ".join(ANDROIDCONTROL_ACTIONS)
            raise ctx.error(f"gt.action_type {kind!r} is not an AndroidControl action ({known})"[:300])
        style, space = self.options.style, STYLE_SPACES[self.options.style]
        if kind not in space:
            raise ctx.error(f"gt.action_type {kind!r} is outside the {style} action space ({', '.join(space)})")
        history = record.get("history", "None")
        if isinstance(history, list) and all(isinstance(h, str) for h in history):
            history = "; ".join(history) if history else "None"
        if not isinstance(history, str):
            raise ctx.error(f"key 'history' must be a string or a list of strings, got {type(history).__name__}")
        meta = {"history": history}
        if record.get("task_type") is not None:
            meta["task_type"] = ctx.get(record, "task_type", str, "GUI-R1's task type (high or low)")
        path, width, height = ctx.image_with_size(image, record)
        box = None
        if kind in POINT_ACTIONS and "bbox" in gt:
            box = self._box(gt["bbox"], "gt.bbox", width, height, ctx)
        solution = {
            "action": STYLE_NAMES[self.options.style].get(kind, kind),
            "source_action": kind,
            "point": self._gt_point(gt, kind, width, height, ctx),
            "box": box,
            "text": self._gt_text(gt, kind, ctx),
        }
        return self._sample(ctx, record, instruction, solution, path, width, height, meta)

    def _gt_point(self, gt: dict, kind: str, width: int, height: int, ctx: RecordContext) -> list[float] | None:
        if kind not in POINT_ACTIONS:
            return None
        x, y = gt.get("x"), gt.get("y")
        if not (_number(x) and _number(y)):
            raise ctx.error(f"gt of a {kind} needs finite numbers 'x' and 'y', got x={x!r}, y={y!r}"[:200])
        if not (0 <= x <= width and 0 <= y <= height):
            raise ctx.error(f"gt point ({x}, {y}) is outside the {width}x{height} image")
        return [float(x), float(y)]

    def _gt_text(self, gt: dict, kind: str, ctx: RecordContext) -> str | None:
        field = TEXT_FIELDS.get(kind)
        if field is None:
            return None
        value = gt.get(field)
        if not isinstance(value, str) or not value.strip():
            raise ctx.error(f"gt of a {kind} needs a non-empty string '{field}', got {value!r}"[:200])
        if kind == "scroll":
            value = value.strip().lower()
            if value not in R.SCROLL_DIRECTIONS:
                raise ctx.error(f"gt.direction must be one of {', '.join(R.SCROLL_DIRECTIONS)}, got {gt[field]!r}")
        return value

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_actions(path, size, seed)

    def _default_template(self, sample: Sample) -> str:
        if self.options.style == "gui_r1":
            if self.options.gui_r1_prompt == "android_control":
                template = GUI_R1_ACTION_TEMPLATE
            elif sample.meta.get("task_type", "high") == "high":
                template = GUI_R1_TRAINING_ACTION_TEMPLATE
            else:  # GUI-R1's dataset.py asks every row but its "high" ones with its grounding prompt
                template = GUI_R1_GROUNDING_TEMPLATE
            return _without_thinking(template, "gui_r1", self.options.thinking)
        return _without_thinking(UI_R1_TEMPLATE, "ui_r1", self.options.thinking)

    def _reward_rule(self) -> PointRule:
        return PointRule(self.options.click_distance, self.options.click_distance_unit)

    def _f1_threshold(self) -> float:
        return self.options.text_f1_threshold

    def _input_text(self, completion: str, sample: Sample) -> float:
        """The type matches (any case) and, where the step carries a text (typed text, app
        name, scroll direction), the texts' F1 reaches the threshold."""
        action = self.parse(completion)
        gt = sample.solution
        if R.action_type(action.action if action else None, gt["action"], case_sensitive=False) == 0.0:
            return 0.0
        if gt["text"] is None:
            return 1.0
        return R.input_text(action.input_text, gt["text"], self.options.text_f1_threshold)

    def reward_functions(self) -> dict[str, RewardFn]:
        functions = super().reward_functions()
        functions["input_text"] = lambda completions, samples: [
            self._input_text(c, s) for c, s in zip(completions, samples, strict=True)
        ]
        return functions

    def predict(self, completion: str, sample: Sample) -> dict[str, Any] | None:
        action = self.parse(completion)
        if action is None:
            return None
        point = None if action.point is None else _original(action.point, sample.frame, truncate=False)
        return {"action": action.action, "point": point, "input_text": action.input_text}

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """GUI-R1's AndroidControl evaluation: type accuracy (exact name); grounding accuracy
        over click / long-press steps (the point alone, under the evaluation distance, from a
        box's first corner under gui_r1 as GUI-R1's eval_omni.py; UI-R1's evaluation also needs
        the type); step success over those and the text steps (open_app,
        type, scroll: F1 >= threshold), as GUI-R1 counts it. `step_success_strict` is the
        AndroidControl convention: every step, type and argument both right."""
        if not samples:
            return {}
        o = self.options
        rule = PointRule(o.eval_click_distance, o.eval_click_distance_unit)
        truncate = self._eval_truncate()
        box_corner = o.style == "gui_r1"  # GUI-R1's evaluation measures from a box's corner
        counts: dict[str, list[bool]] = defaultdict(list)
        by_action: dict[tuple[str, str], list[bool]] = defaultdict(list)  # (metric, action): its steps' hits
        for completion, sample in zip(completions, samples, strict=True):
            action = self.parse(completion)
            gt = sample.solution
            kind = gt["source_action"]
            type_ok = action is not None and action.action == gt["action"]
            by_action["type_acc", kind].append(type_ok)
            counts[f"type_acc/{gt['action']}"].append(type_ok)
            argument_ok = True
            if kind in POINT_ACTIONS:
                argument_ok = self._hit(action, sample, rule, inclusive=True, truncate=truncate, box_corner=box_corner)
                grounded = argument_ok and (type_ok or o.style == "gui_r1")
                by_action["grounding_acc", kind].append(grounded)
                by_action["step_success", kind].append(grounded)
            elif kind in EVAL_TEXT_ACTIONS:
                pred_text = action.input_text if action is not None else None
                text_ok = R.input_text(pred_text, gt["text"], o.text_f1_threshold) == 1.0
                by_action["step_success", kind].append(text_ok)
                argument_ok = R.scroll_direction(pred_text, gt["text"]) == 1.0 if kind == "scroll" else text_ok
            counts["step_success_strict"].append(type_ok and argument_ok)
        pooled: dict[str, list[bool]] = {}
        for (metric, _), hits in by_action.items():
            kept = o.eval_hitless_actions == "count" or any(hits)
            pooled.setdefault(metric, []).extend(hits if kept else [])
        out = {key: sum(hits) / len(hits) if hits else 0.0 for key, hits in {**pooled, **counts}.items()}
        return {**out, **self._rates(completions)}


def _without_thinking(template: str, style: str, thinking: bool) -> str:
    if thinking:
        return template
    old, new = _NO_THINK[style]
    return template.replace(old, new)
