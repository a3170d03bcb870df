"""Several tasks in one run: prompts drawn by weight, each scored by its own task, metrics per task."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from vlrl.config import ConfigError, load_config
from vlrl.data.stream import MixtureStream
from vlrl.trainer.rl import train


def test_mixture_stream_draws_by_weight_and_resumes_exactly():
    stream = MixtureStream([10, 5], [3.0, 1.0], seed=7)
    first = stream.take(400)
    counts = Counter(source for source, _ in first)
    assert 0.68 < counts[0] / 400 < 0.82  # about 3 to 1
    state = stream.state_dict()
    after = stream.take(50)
    resumed = MixtureStream([10, 5], [3.0, 1.0], seed=7)
    resumed.load_state_dict(state)
    assert resumed.take(50) == after
    # Each source still visits all of its samples once per epoch.
    zero = [i for s, i in first if s == 0][:10]
    assert sorted(zero) == list(range(10))


def test_a_mixture_trains_with_per_task_metrics(tmp_path, rec_data, tiny_qwen25):
    from tasks.jigsaw import Jigsaw

    jigsaw_data = tmp_path / "jigsaw" / f"train{Jigsaw.data_suffix}"
    Jigsaw().synthesize(jigsaw_data, 6, seed=0)
    overrides = [
        "model.path=tiny:qwen2_5_vl",
        "model.max_pixels=50176",
        f"mixture=[{{name: refcoco, train: {rec_data}, weight: 1.0}}, {{name: jigsaw, train: {jigsaw_data}, weight: 1.0}}]",
        "rollout.num_generations=2",
        "rollout.max_new_tokens=8",
        f"trainer.output_dir={tmp_path / 'run'}",
        "trainer.prompts_per_step=4",
        "trainer.steps=2",
        "trainer.progress=false",
    ]
    result = train(load_config(None, overrides))
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    keys = set().union(*rows)
    assert {"refcoco/reward", "jigsaw/reward", "refcoco/reward/iou", "jigsaw/reward/jigsaw_partial"} <= keys


@pytest.mark.parametrize(
    "mixture,message",
    [
        ("[{name: refcoco, train: x.json}, {name: refcoco, train: y.json}]", "names a task twice"),
        ("[{name: refcoco, train: x.json, weight: 0}]", "weights must be > 0"),
        ("[{train: x.json}]", "needs a task name"),
    ],
)
def test_bad_mixtures_are_rejected(mixture, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"mixture={mixture}"])
