"""Several tasks in one run: prompts drawn by weight, each scored by its own task, metrics per task."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from rich.console import Console

from vlrl.cli import main
from vlrl.config import ConfigError, TaskConfig, load_config
from vlrl.data.stream import MixtureStream
from vlrl.tasking.registry import make_task
from vlrl.tasking.sources import Source, held_out, task_sources
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


def test_each_epoch_and_each_source_has_an_order_of_its_own_and_a_resume_keeps_the_seed():
    from vlrl.data.stream import IndexStream

    stream = IndexStream(6, seed=0)
    two_epochs = stream.take(12)
    assert sorted(two_epochs[6:]) == list(range(6)) and two_epochs[6:] != two_epochs[:6]
    orders = [s.take(8) for s in MixtureStream([8, 8], [1.0, 1.0], seed=0).streams]
    assert orders[0] != orders[1]  # two tasks of one size are not drawn in step
    with pytest.raises(ValueError, match="seed 0; this run has 6 and 1"):
        IndexStream(6, seed=1).load_state_dict(stream.state_dict())


def test_a_stream_of_no_samples_is_refused_and_a_resume_names_a_changed_size_or_task_count():
    from vlrl.data.stream import IndexStream

    with pytest.raises(ValueError, match="^cannot stream from an empty dataset$"):
        IndexStream(0, seed=0)
    with pytest.raises(
        ValueError,
        match="^checkpoint's data stream had 6 samples and seed 0; this run has 5 and 0: .*or start a new run in another output_dir$",
    ):
        IndexStream(5, seed=0).load_state_dict(IndexStream(6, seed=0).state_dict())
    saved = MixtureStream([4, 4], [1.0, 1.0], seed=0).state_dict()
    with pytest.raises(ValueError, match="^checkpoint's run drew from 2 tasks; this run has 3$"):
        MixtureStream([4, 4, 4], [1.0, 1.0, 1.0], seed=0).load_state_dict(saved)


def test_each_mixture_entrys_weight_goes_with_its_task_and_is_one_unless_set(tmp_path, rec_data):
    from tasks.jigsaw import Jigsaw

    jigsaw_data = tmp_path / f"train{Jigsaw.data_suffix}"
    Jigsaw().synthesize(jigsaw_data, 2, seed=0)
    mixture = f"mixture=[{{name: jigsaw, train: '{jigsaw_data}'}}, {{name: refcoco, train: '{rec_data}', weight: 0.5}}]"
    sources = task_sources(load_config(None, [mixture]))
    assert [(s.task.name, s.weight) for s in sources] == [("jigsaw", 1.0), ("refcoco", 0.5)]  # 1: unless set
    (single,) = task_sources(load_config(None, ["task.name=refcoco", f"data.train={rec_data}"]))
    assert single.weight == 1.0


def test_a_mixture_trains_with_per_task_metrics_and_its_checkpoint_evaluates_each_entry_as_trained(
    tmp_path, rec_data, tiny_qwen25, capsys
):
    """Each entry's rewards, options and files go with it: into training, its held-out
    evaluation, and `vlrl eval` of the run's checkpoint (which evaluates every entry with an
    eval file, or the one --task names)."""
    from data_prep.refcoco import write_synthetic_rec
    from tasks.jigsaw import Jigsaw

    jigsaw_data = tmp_path / "jigsaw" / f"train{Jigsaw.data_suffix}"
    Jigsaw().synthesize(jigsaw_data, 6, seed=0)
    rec_eval = write_synthetic_rec(tmp_path / "rec" / "val.json", size=3, seed=1)
    overrides = [
        "model.path=tiny:qwen2_5_vl",
        "model.max_pixels=50176",
        f"mixture=[{{name: refcoco, train: {rec_data}, eval: {rec_eval}, rewards: {{iou: 2.0}}}}, "
        f"{{name: jigsaw, train: {jigsaw_data}, options: {{think: false}}}}]",
        "rollout.num_generations=2",
        "rollout.max_new_tokens=8",
        f"trainer.output_dir={tmp_path / 'run'}",
        "trainer.prompts_per_step=4",
        "trainer.steps=2",
        "trainer.progress=false",
        "eval.every=2",
        "eval.limit=2",
        "eval.max_new_tokens=4",
        "data.max_image_pixels=50000000",  # a data.* setting of the run, which its evaluation keeps
    ]
    result = train(load_config(None, overrides))
    assert "mixture task jigsaw has no eval file: it is not evaluated during training" in capsys.readouterr().out
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    keys = set().union(*rows)
    assert {"refcoco/reward", "jigsaw/reward", "refcoco/reward/iou", "jigsaw/reward/jigsaw_partial"} <= keys
    assert "eval/refcoco/acc@0.5" in rows[-1] and not any(key.startswith("eval/jigsaw/") for key in keys)

    checkpoint = tmp_path / "run" / "checkpoints" / "step-0000002"
    assert main(["eval", "--model", str(checkpoint), "--limit", "2", "--out", str(tmp_path / "all")]) == 0
    assert "mixture task jigsaw has no eval file: not evaluated" in capsys.readouterr().out
    results = json.loads((tmp_path / "all" / "results.json").read_text())
    assert list(results["results"]) == ["refcoco"]
    assert results["configs"]["refcoco"]["data"] == str(rec_eval)
    assert results["configs"]["refcoco"]["rewards"] == {"iou": 2.0}  # the entry's, not the task's defaults

    assert main(["eval", "--model", str(checkpoint), "--split", str(rec_eval)]) == 2  # whose file is it?
    assert (
        "the run's mixture holds several tasks (refcoco, jigsaw); name the file's with --task"
        in capsys.readouterr().out
    )
    jigsaw_eval = tmp_path / "jigsaw" / f"val{Jigsaw.data_suffix}"
    Jigsaw().synthesize(jigsaw_eval, 2, seed=1)
    one = ["eval", "--model", str(checkpoint), "--task", f"jigsaw={jigsaw_eval}", "--out", str(tmp_path / "one")]
    assert main(one) == 0
    results = json.loads((tmp_path / "one" / "results.json").read_text())
    assert results["configs"]["jigsaw"]["options"]["think"] is False  # the entry's option
    assert results["config"]["data"]["max_image_pixels"] == 50000000  # the run's data.*, kept for its entry
    # A task the run did not train takes none of its files; named first, it does not cost the run's
    # entries their settings
    assert main(["eval", "--model", str(checkpoint), "--task", "counting", "--task", "jigsaw"]) == 2
    assert "the config trains no task counting, so none of its files is counting's" in capsys.readouterr().out
    from tasks.counting import Counting

    counting = tmp_path / "counting" / f"val{Counting.data_suffix}"
    Counting().synthesize(counting, 2, seed=0)
    two = ["--task", f"counting={counting}", "--task", f"jigsaw={jigsaw_eval}", "--out", str(tmp_path / "two")]
    assert main(["eval", "--model", str(checkpoint), *two]) == 0
    results = json.loads((tmp_path / "two" / "results.json").read_text())
    assert results["config"]["data"]["max_image_pixels"] == 50000000  # jigsaw's, though counting came first
    assert results["configs"]["jigsaw"]["options"]["think"] is False
    assert (
        "Directly output the final answer"
        in json.loads((tmp_path / "one" / "samples_jigsaw.jsonl").open().readline())["input"]
    )


def test_a_mixture_without_any_eval_file_is_refused_when_the_run_evaluates():
    cfg = load_config(None, ["mixture=[{name: refcoco, train: x.json}, {name: jigsaw, train: y.jsonl}]"])
    sources = [Source(make_task(TaskConfig(e.name)), None, e.eval, e.weight) for e in cfg.mixture]
    with pytest.raises(ConfigError, match=r"no mixture entry names an eval file: give mixture\[i\]\.eval"):
        held_out(cfg, sources, Console(quiet=True))


def test_a_bad_option_or_reward_of_a_mixture_entry_is_named_by_the_entrys_key():
    entries = "[{name: refcoco, train: x.json}, {name: counting, train: y.json, %s}]"
    with pytest.raises(ConfigError, match=r"unknown key 'mixture\[1\]\.options\.bogus'"):
        task_sources(load_config(None, [f"mixture={entries % 'options: {bogus: 1}'}"]))
    with pytest.raises(ConfigError, match=r"config: mixture\[1\]\.rewards\.iou is not a reward of task 'counting'"):
        task_sources(load_config(None, [f"mixture={entries % 'rewards: {iou: 1}'}"]))
    with pytest.raises(
        ConfigError, match=r"mixture\[1\]\.rewards\.my_task\.rewards\.py:score: file not found: \S*/my_task"
    ):
        task_sources(
            load_config(None, [f"mixture={entries % 'rewards: {my_task.rewards.py:score: 1}'}"])
        )  # its name kept


def test_columns_given_to_a_json_file_are_named_by_the_entrys_key_whatever_name_it_uses(rec_data):
    mixture = (
        f"mixture=[{{name: refcoco, train: '{rec_data}'}}, {{name: univg, train: '{rec_data}', columns: {{a: b}}}}]"
    )
    with pytest.raises(ConfigError, match=r"config: mixture\[1\]\.columns maps table columns"):
        task_sources(load_config(None, [mixture]))  # univg: multi_image_grounding's alias


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


def test_a_mixture_evaluates_every_task_on_the_train_split_and_those_with_an_eval_file_on_eval():
    from vlrl.cli import run_task_specs

    cfg = load_config(None, ["mixture=[{name: refcoco, train: a.json, eval: c.json}, {name: jigsaw, train: b.json}]"])
    assert run_task_specs(cfg, "train") == ["refcoco", "jigsaw"]
    assert run_task_specs(cfg, "eval") == ["refcoco"]


def test_a_mixtures_held_out_metrics_go_under_each_task_and_its_eval_time_is_their_sum(monkeypatch):
    """Each entry's evaluation reports under eval/<task>/, and time_eval is every evaluation's
    time together, not the last one's."""
    from types import SimpleNamespace

    from vlrl.eval.layout import TaskResult
    from vlrl.rollout.parts import RolloutRows
    from vlrl.trainer import rl

    cfg = load_config(
        None, ["mixture=[{name: refcoco, train: a.json, eval: c.json}, {name: counting, train: b.json, eval: d.json}]"]
    )
    sources = [Source(make_task(TaskConfig(e.name)), None, e.eval, e.weight) for e in cfg.mixture]
    results = {"refcoco": ({"acc@0.5": 0.5}, 1.5, []), "counting": ({"accuracy": 0.25}, 2.25, ["d.json:3: bad image"])}

    def evaluate(engine, processor, task, samples, settings, path, rows):
        assert rows is trainer.eval_rows  # the run's held-out limit, kept from one evaluation to the next
        metrics, seconds, skipped = results[task.name]
        return TaskResult(task.name, path, metrics, [{}] * len(samples), seconds, skipped=skipped)

    monkeypatch.setattr(rl, "evaluate", evaluate)
    trainer = rl.RLTrainer.__new__(rl.RLTrainer)
    trainer.cfg, trainer.sources, trainer.engine, trainer.run = cfg, sources, None, SimpleNamespace(processor=None)
    trainer.console, trainer.headline_said, trainer.eval_rows = Console(quiet=True), set(), RolloutRows()
    trainer.held_out = [(source.task, source.eval_path, []) for source in sources]
    assert trainer.evaluate_held_out(step=2) == {
        "eval/refcoco/acc@0.5": 0.5,
        "eval/refcoco/skipped_samples": 0.0,
        "eval/counting/accuracy": 0.25,
        "eval/counting/skipped_samples": 1.0,
        "time_eval": 3.75,
    }
