"""Scoring never fails on model output: oversized completions and raising rewards score 0, counted
(and the counts logged with each training step)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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
