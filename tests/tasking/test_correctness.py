"""Training's `accuracy` is the task's correctness (Task.correct): the per-sample value of the
evaluation metric its task names (refcoco ACC@0.5, counting's exact count, ...), not a
threshold on the total reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrl.config import load_config
from vlrl.data.records import FrameSpec
from vlrl.tasking.registry import builtin_training_tasks, task_class
from vlrl.tasking.scoring import correctness
from vlrl.trainer.rl import train

SPEC = FrameSpec("absolute", 3136, 50176)
FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.fixture(scope="module", params=sorted(builtin_training_tasks()))
def task_and_samples(request, tmp_path_factory):
    task = task_class(request.param)()
    path = tmp_path_factory.mktemp(request.param.replace("+", "plus")) / f"train{task.data_suffix}"
    task.synthesize(path, size=9, seed=1)
    return task, task.load(path, SPEC).samples


def test_the_mean_correctness_is_the_tasks_evaluation_metric(task_and_samples):
    task, samples = task_and_samples
    targets = [task.target(s) for s in samples]
    # right (its own target), wrong (another sample's target) and unreadable answers, by thirds
    completions = [
        targets[i] if i % 3 == 0 else targets[(i + 1) % len(samples)] if i % 3 == 1 else "I cannot tell."
        for i in range(len(samples))
    ]
    values, failures = correctness(task, completions, samples)
    assert failures == 0 and all(0.0 <= v <= 1.0 for v in values)
    metric = task.metrics(samples, completions)[task.accuracy_metric]
    assert sum(values) / len(values) == pytest.approx(metric)
    right, _ = correctness(task, targets, samples)
    assert sum(right) / len(right) >= 0.9  # the ideal completions are right
    assert max(values[2::3]) == 0.0  # an unreadable answer is not


def test_refcoco_counts_iou_above_one_half_as_vlm_r1_and_at_it_with_acc_inclusive(tmp_path):
    refcoco = task_class("refcoco")
    path = tmp_path / "rec.json"
    refcoco().synthesize(path, 1, seed=0)
    (sample,) = refcoco().load(path, SPEC).samples
    x1, y1, x2, y2 = sample.solution if len(sample.solution) == 4 else sample.solution[0]
    # the same height, half the width: IoU exactly 0.5
    half = [x1, y1, x1 + (x2 - x1) / 2, y2]
    box = [round(v) for v in sample.frame.box_to_model(half)]
    completion = f'<think>x</think><answer>{{"bbox_2d": {box}}}</answer>'
    iou = refcoco()._box_score(completion, sample)[0]
    assert iou == pytest.approx(0.5, abs=0.03)
    for inclusive in (False, True):
        task = refcoco({"acc_inclusive": inclusive})
        expected = float(iou >= 0.5 if inclusive else iou > 0.5)
        assert task.correct([completion], [sample]) == [expected]
        assert task.metrics([sample], [completion])["acc@0.5"] == expected


def _detection_answer(entries: list[tuple[list[float], str]], sample) -> str:
    boxes = [{"bbox_2d": sample.frame.box_to_model(box), "label": label} for box, label in entries]
    return f"<think>x</think>\n<answer>```json\n{json.dumps(boxes)}\n```</answer>"


def test_a_detection_answer_is_right_when_it_finds_every_object_and_states_nothing_else(tmp_path):
    task = task_class("detection")()
    path = tmp_path / "coco.json"
    task.synthesize(path, 12, seed=0)
    samples = task.load(path, SPEC).samples
    two = next(s for s in samples if len({o["label"] for o in s.solution}) >= 2)
    empty = next(s for s in samples if not s.solution)
    objects = [(o["box"], o["label"]) for o in two.solution]
    box, label = objects[0]
    nudged = [box[0] + 1, box[1], box[2] + 1, box[3]]  # IoU well above 0.5
    other = next(lab for _, lab in objects if lab != label)
    cases = {
        "every object": (objects, 1.0),
        "every object, one box nudged": ([(nudged, label), *objects[1:]], 1.0),
        "every object, in another order": (objects[::-1], 1.0),
        "one object missing": (objects[1:], 0.0),
        "one object twice": ([*objects, objects[0]], 0.0),
        "a wrong label": ([(box, other), *objects[1:]], 0.0),
        "a box beside its object": (
            [([box[2], box[3], 2 * box[2] - box[0], 2 * box[3] - box[1]], label), *objects[1:]],
            0.0,
        ),
    }
    for name, (entries, expected) in cases.items():
        assert task.correct([_detection_answer(entries, two)], [two]) == [expected], name
    none = "<think>x</think>\n<answer>None</answer>"
    assert task.correct([none, _detection_answer(objects[:1], empty)], [empty, empty]) == [1.0, 0.0]
    assert task.correct(["no answer"], [two]) == [0.0]
    # A malformed extra entry (no label) is still an entry stated: more entries than objects.
    right = _detection_answer(objects, two)
    assert task.correct([right.replace("}]", '}, {"bbox_2d": [1, 2, 3, 4]}]')], [two]) == [0.0]


def test_training_logs_the_tasks_correctness_as_accuracy_not_the_total_reward(tmp_path, rec_data, tiny_qwen25):
    """With a constant 0.5 reward the old `accuracy` (total >= 0.5) was 1 for every completion;
    the task's correctness is 1 for the one completion in four that answers "no"."""
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.max_pixels": 12544,
        "data.train": str(rec_data),
        "task.name": f"{FIXTURES / 'rl_fixtures.py'}:RightWhenNo",
        "task.rewards": "{half: 1.0}",
        "algo.accuracy_reward": "half",
        "algo.advantage": "sign",
        "rollout.engine": f"{FIXTURES / 'scripted_engine.py'}:ScriptedEngine",
        "rollout.num_generations": 4,
        "rollout.max_new_tokens": 64,
        "trainer.output_dir": str(tmp_path / "run"),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 2,
        "trainer.progress": False,
    }
    result = train(load_config(None, [f"{k}={v}" for k, v in values.items()]))
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    assert [r["accuracy"] for r in rows] == [0.25, 0.25]  # ScriptedEngine's second answer of four is "no"
    assert [r["correct_frac"] for r in rows] == [1.0, 1.0]  # what the sign advantages count as correct
    lines = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [line["accuracy"] for line in lines if line["step"] == 1] == [0.0, 1.0, 0.0, 0.0]


def test_a_task_whose_metrics_name_no_accuracy_logs_none_and_says_so(tmp_path, rec_data, tiny_qwen25, capsys):
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.max_pixels": 12544,
        "data.train": str(rec_data),
        "task.name": f"{FIXTURES / 'rl_fixtures.py'}:NoAccuracyMetric",
        "rollout.num_generations": 2,
        "rollout.max_new_tokens": 8,
        "trainer.output_dir": str(tmp_path / "run"),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 1,
        "trainer.progress": False,
    }
    from vlrl.cli import main

    assert main(["train", *(f"{k}={v}" for k, v in values.items())]) == 0
    assert "warning: task no_accuracy_metric's metrics report no 'accuracy' for a sample" in capsys.readouterr().out
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "accuracy" not in row and "accuracy_failures" not in row and "reward" in row
