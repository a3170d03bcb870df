"""Scoring never fails on model output: oversized completions and raising rewards score 0, counted
(and the counts logged with each training step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tasks.counting import Counting
from tasks.refcoco import RefCOCO
from vlrl.data.records import FrameSpec, load_split
from vlrl.tasking.scoring import MAX_COMPLETION_CHARS, score, task_metrics
from vlrl.trainer.batch import Group
from vlrl.trainer.rl import reward_metrics


@pytest.fixture(scope="module")
def samples(rec_data: Path):
    return load_split(rec_data, RefCOCO().build_sample, FrameSpec("absolute", 3136, 50176)).samples


def _check(task, completions, samples):
    scores = score(task, completions, [samples[0]] * len(completions))
    for name, values in scores.components.items():
        assert all(0.0 <= v <= 1.0 for v in values), (name, values)
    return scores


def test_completions_longer_than_the_limit_score_zero_and_are_counted(samples):
    task = RefCOCO()
    good = '<think>x</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>'
    scores = _check(task, [good + " " * MAX_COMPLETION_CHARS, good], samples)
    assert scores.oversized == [0]
    assert scores.components["format"] == [0.0, 1.0]


def test_a_completion_of_exactly_the_limit_is_read(samples):
    good = '<think>x</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>'
    scores = score(RefCOCO(), [good, good + " "], [samples[0]] * 2, max_chars=len(good))
    assert scores.oversized == [1] and scores.components["format"] == [1.0, 0.0]


class Fragile(RefCOCO):
    def reward_functions(self):
        fns = super().reward_functions()

        def fragile(completions, batch):
            return [1.0 if c == "ok" else 1 / 0 for c in completions]

        return {**fns, "fragile": fragile}


def test_a_reward_that_raises_scores_zero_and_is_counted(samples):
    scores = score(Fragile(rewards={"fragile": 1.0}), ["ok", "boom", "ok"], [samples[0]] * 3)
    assert scores.components["fragile"] == [1.0, 0.0, 1.0]
    assert scores.failures == {"fragile": 1}


class Miscounting(RefCOCO):
    def reward_functions(self):
        return {**super().reward_functions(), "two": lambda completions, batch: [1.0, 0.0]}


def test_a_reward_that_returns_two_values_for_one_completion_scores_zero_and_says_so(samples):
    """Asked again about each completion alone (as one that gives too few values), a function
    that still returns two values is counted as failing: neither value is taken."""
    for n in (1, 3):
        scores = score(Miscounting(rewards={"two": 1.0}), ["a"] * n, [samples[0]] * n)
        assert scores.components["two"] == [0.0] * n and scores.failures == {"two": n}
        assert scores.reasons["two"] == "ValueError: returned 2 values for 1 completion"


class Unbounded(RefCOCO):
    def reward_functions(self):
        return {**super().reward_functions(), "unbounded": lambda completions, batch: [float(c) for c in completions]}

    def correct(self, completions, samples):
        return [float(c) for c in completions]


def test_an_infinite_reward_scores_zero_and_is_counted_and_correctness_stays_in_0_1(samples):
    from vlrl.tasking.scoring import correctness

    task = Unbounded(rewards={"unbounded": 1.0})
    scores = score(task, ["inf", "-inf", "0.5"], [samples[0]] * 3)
    assert scores.components["unbounded"] == [0.0, 0.0, 0.5] and scores.failures["unbounded"] == 2
    assert correctness(task, ["-0.5", "1.5", "0.25"], [samples[0]] * 3) == ([0.0, 1.0, 0.25], 0)


def test_a_step_logs_how_many_completions_were_too_long_to_read_and_which_rewards_failed(samples):
    task = Fragile(rewards={"fragile": 1.0})

    def group(completions: list[str]) -> Group:
        scores = score(task, completions, [samples[0]] * len(completions))
        reward = torch.tensor(scores.total)
        return Group(task, samples[0], None, [], scores, reward, torch.zeros(len(completions), dtype=torch.bool))

    too_long = "ok" + " " * MAX_COMPLETION_CHARS  # not handed to the reward: no failure of its
    metrics = reward_metrics([group(["ok", "boom", too_long]), group(["ok", too_long, too_long])])
    assert metrics["oversized_completions"] == 3.0 and metrics["reward_failures/fragile"] == 1.0
    assert not {"oversized_completions", "reward_failures/fragile"} & reward_metrics([group(["ok", "ok"])]).keys()


def test_a_steps_accuracy_is_the_mean_of_the_judged_groups_and_its_failures_are_summed(samples):
    task = RefCOCO()

    def group(accuracy: list[float] | None, failures: int) -> Group:
        scores = score(task, ["x"] * 2, [samples[0]] * 2)
        judged = None if accuracy is None else torch.tensor(accuracy)
        return Group(
            task, samples[0], None, [], scores, torch.zeros(2), torch.zeros(2, dtype=torch.bool), {}, judged, failures
        )

    metrics = reward_metrics([group([1.0, 0.0], 1), group(None, 0), group([1.0, 1.0], 2)])
    assert metrics["accuracy"] == 0.75 and metrics["accuracy_failures"] == 3.0
    assert "accuracy_failures" not in reward_metrics([group([1.0, 0.0], 0)])


class RaisingMetrics(RefCOCO):
    def metrics(self, samples, completions):
        raise KeyError("caption")


def test_a_tasks_metrics_that_raise_or_are_not_numbers_are_left_out_and_said(samples):
    metrics, notes = task_metrics(RaisingMetrics(), samples[:2], ["a", "b"])
    assert metrics == {} and notes == ["task refcoco's metrics raised KeyError: 'caption': no metrics of it here"]
    fine, none = task_metrics(RefCOCO(), samples[:2], ["a", "b"])
    assert none == [] and fine["acc@0.5"] == 0.0 and all(type(v) is float for v in fine.values())
    numpy_values, none = task_metrics(NumpyMetrics(), samples[:2], ["a", "b"])
    assert none == [] and numpy_values == {"acc": 0.5, "count": 3.0}  # numpy's scalars are numbers


class NumpyMetrics(RefCOCO):
    def metrics(self, samples, completions):
        import numpy as np

        return {"acc": np.float32(0.5), "count": np.int64(3)}


class ShortReward(RefCOCO):
    def reward_functions(self):
        return {**super().reward_functions(), "short": lambda completions, batch: [0.25]}


def test_a_reward_that_returns_too_few_values_is_asked_about_each_completion_alone(samples):
    scores = score(ShortReward(rewards={"short": 1.0}), ["a", "b", "c"], [samples[0]] * 3)
    assert scores.components["short"] == [0.25, 0.25, 0.25] and scores.failures == {}


class TwoWaysToFail(RefCOCO):
    def reward_functions(self):
        def picky(completions, batch):
            return [1 / 0 if c == "zero" else {}["missing"] if c == "key" else 1.0 for c in completions]

        return {**super().reward_functions(), "picky": picky}


def test_the_reason_a_reward_failed_is_that_of_its_first_failing_completion(samples):
    scores = score(TwoWaysToFail(rewards={"picky": 1.0}), ["ok", "zero", "key"], [samples[0]] * 3)
    assert scores.components["picky"] == [1.0, 0.0, 0.0] and scores.failures == {"picky": 2}
    assert scores.reasons == {"picky": "ZeroDivisionError: division by zero"}


def test_completions_and_samples_of_different_counts_are_refused(samples):
    with pytest.raises(ValueError, match="2 completions for 1 samples"):
        score(RefCOCO(), ["a", "b"], [samples[0]])


class BoolMetrics(RefCOCO):
    def metrics(self, samples, completions):
        return {"acc": 0.5, "found": True}


def test_a_metric_that_is_true_or_false_is_no_number_and_is_left_out(samples):
    metrics, notes = task_metrics(BoolMetrics(), samples[:1], ["a"])
    assert metrics == {"acc": 0.5}
    assert notes == ["task refcoco's metric 'found' is 'True', not a number: left out"]


def test_the_metrics_of_no_samples_are_none_without_asking_the_task(samples):
    assert task_metrics(RaisingMetrics(), [], []) == ({}, [])


class NoAccuracy(RefCOCO):
    accuracy_metric = ""


class OwnCorrectness(RefCOCO):
    accuracy_metric = "hit"  # RefCOCO's metrics name no "hit": its own `correct` judges


class CountingWithMetrics(Counting):
    def __init__(self, metrics):
        super().__init__()
        self._metrics = metrics

    def metrics(self, samples, completions):
        if self._metrics is None:
            raise KeyError("answer")
        return self._metrics


def test_a_task_judges_by_its_own_correct_or_by_an_accuracy_metric_its_metrics_report(samples):
    from vlrl.tasking.scoring import correctness, judges

    assert not judges(NoAccuracy(), samples[0])  # no accuracy_metric: nothing to judge by, own correct or not
    assert correctness(NoAccuracy(), ["a"], samples[:1]) is None
    assert judges(OwnCorrectness(), samples[0])
    assert judges(CountingWithMetrics({"accuracy": 1.0}), samples[0])
    assert not judges(CountingWithMetrics({"recall": 1.0}), samples[0])  # a split-level metric only
    assert judges(CountingWithMetrics(None), samples[0])  # metrics that raise: each failure is counted later


def test_a_completions_file_is_scored_naming_repeats_by_their_first_line_and_lines_without_an_id(samples, tmp_path):
    from vlrl.tasking.scoring import score_file

    first, second = samples[0].id, samples[1].id
    lines = [
        {"id": first, "completion": "ok"},
        {"id": first, "completion": "ok"},
        {"id": first, "completion": "boom"},
        {"completion": "ok"},
        {"id": second, "completion": "ok"},
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = score_file(Fragile(rewards={"fragile": 1.0}), samples, str(path), str(tmp_path / "scored.jsonl"))
    assert result.scored == 4 and result.mean_reward == 0.75  # 1 + 1 + 0 + 1 over 4
    assert result.repeated == [
        f"{path}:2: id {first!r} again (first at {path}:1)",
        f"{path}:3: id {first!r} again (first at {path}:1)",
    ]
    assert result.problems == [
        f'{path}:4: expected {{"id": ..., "completion": "..."}} (or "id" and "resps", as vlrl eval\'s '
        "samples_<task>.jsonl); found keys 'completion'"
    ]
    assert result.zeroed == [
        "reward fragile on 1 of 4 completions: it raised or gave no finite number "
        "(the first: ZeroDivisionError: division by zero)"
    ]
