"""A rollout engine and a parallelism strategy written outside the package (docs/examples/),
chosen by path with their own options: each is one module, nothing in vlrl changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rich.console import Console

from vlrl import plugins
from vlrl.cli import main
from vlrl.config import ConfigError, load_config
from vlrl.trainer.rl import RLTrainer

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
ENGINE = f"{EXAMPLES / 'canned_engine.py'}:CannedEngine"
STRATEGY = f"{EXAMPLES / 'sgd_strategy.py'}:SGDReplicated"
ANSWERS = ['<think>a</think><answer>{"bbox_2d": [10, 12, 60, 70]}</answer>', "no"]


def overrides(run: Path, data: Path, **extra) -> list[str]:
    values = {
        "model.path": "tiny:qwen2_5_vl", "model.dtype": "float32", "model.max_pixels": 12544, "data.train": str(data),
        "task.name": "refcoco", "rollout.engine": ENGINE, "rollout.canned.answers": json.dumps(ANSWERS),
        "rollout.num_generations": 2, "rollout.max_new_tokens": 64, "trainer.parallel": STRATEGY, "trainer.lr": 0.01,
        "trainer.prompts_per_step": 2, "trainer.steps": 1, "trainer.progress": False, "trainer.output_dir": str(run),
        "trainer.log_samples_every": 1, **extra,
    }  # fmt: skip
    return [f"{k}={v}" for k, v in values.items()]


def test_an_engine_and_a_strategy_from_outside_the_package_train_with_their_own_options(
    tmp_path, rec_data, tiny_qwen25
):
    trainer = RLTrainer(load_config(None, overrides(tmp_path / "run", rec_data)), Console(quiet=True))
    start = [p.detach().clone() for p in trainer.run.strategy.parameters]
    assert type(trainer.run.optimizer) is torch.optim.SGD and trainer.run.optimizer.defaults["momentum"] == 0.0
    trainer.train()
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # the engine's canned completions were scored ...
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [s["completion"] for s in samples] == ANSWERS
    # ... and SGD stepped the weights: one step of lr times the gradient clipped to norm 1 (AdamW
    # would have moved each weight by about lr)
    moved = torch.cat([(p.detach() - s).flatten() for p, s in zip(trainer.run.strategy.parameters, start, strict=True)])
    assert float(moved.norm()) == pytest.approx(0.01 * min(row["grad_norm"], 1.0), rel=1e-4)
    assert row["grad_norm"] > 0


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"trainer.sgd.momentum": 1.5}, r"trainer.sgd.momentum must be in \[0, 1\), got 1.5"),
        ({"trainer.sgd.nesterov": True}, "unknown key 'trainer.sgd.nesterov'"),
        ({"rollout.canned.answers": "[]"}, "rollout.canned.answers needs at least one answer"),
        ({"rollout.vllm.sleep": 3}, "rollout.vllm.sleep expects true or false"),  # another engine's, checked
        (
            {"rollout.vlm.sleep": False},
            r"unknown key 'rollout.vlm': the run's plugins \(canned, hf\) read rollout.canned",
        ),
        (  # the engine that samples and evaluates is named once
            {"rollout.engine": "hf"},  # the canned engine's options, left over
            r"unknown key 'rollout.canned': the run's plugins \(hf\) read rollout.hf$",
        ),
    ],
)
def test_a_plugins_options_are_checked_by_the_plugin_before_any_model_loads(
    tmp_path, rec_data, extra, message, monkeypatch
):
    monkeypatch.setattr("vlrl.models.loading.pretrained", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(ConfigError, match=message):
        RLTrainer(load_config(None, overrides(tmp_path / "run", rec_data, **extra)), Console(quiet=True))


def test_vlrl_plan_counts_a_registered_strategy_as_it_says(monkeypatch, capsys):
    class FileEntryPoint:  # as a package registering it would: by name, loading the class
        name, value = "sgd_replicated", STRATEGY

        def load(self):
            return plugins.import_object(STRATEGY)

    ep = FileEntryPoint()
    registered = plugins.registered
    monkeypatch.setattr(
        plugins,
        "registered",
        lambda group: {**registered(group), **({ep.name: ep} if group == plugins.STRATEGIES else {})},
    )
    assert main(["plan", "--config", "configs/refcoco.yaml", "--shape", "qwen2.5-vl-3b"]) == 0
    rows = {
        line.split("│")[1].strip(): line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("│") and "│ off" in line
    }
    adamw = lambda label: float(rows[label].split("│")[6])  # noqa: E731
    assert adamw("sgd") == 0.0 and adamw("sgd + momentum") == pytest.approx(adamw("replicated") / 2, abs=0.1)


def test_a_checkout_run_without_installing_finds_its_plugins_in_its_pyproject(monkeypatch):
    """On PYTHONPATH without pip (a GPU machine without network), no `vlrl` metadata exists: the
    checkout's pyproject.toml gives the entry points an install would have written."""
    from importlib.metadata import PackageNotFoundError, distribution

    installed = distribution("vlrl").entry_points
    assert not plugins.checkout_entry_points.__wrapped__()  # installed: its metadata holds them

    def missing(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(plugins, "distribution", missing)
    checkout = plugins.checkout_entry_points.__wrapped__()
    for group in (plugins.TASKS, plugins.FAMILIES, plugins.ENGINES, plugins.STRATEGIES):
        assert {(ep.name, ep.value) for ep in checkout.select(group=group)} == {
            (ep.name, ep.value) for ep in installed.select(group=group)
        }
    assert {ep.name for ep in checkout.select(group=plugins.ENGINES)} == {"hf", "vllm"}


def test_a_plugin_file_that_fails_to_run_fails_again_rather_than_half_imported(tmp_path):
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("class Engine:\n    pass\n\nraise RuntimeError('no GPU here')\n")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="no GPU here"):
            plugins.import_object(f"{broken}:Engine")


def test_a_plugin_that_is_not_a_subclass_of_its_kind_is_refused_naming_the_key():
    with pytest.raises(
        ConfigError, match="config: rollout.engine 'pathlib:Path' resolves to .* which is not a subclass"
    ):
        plugins.find_class(plugins.ENGINES, "pathlib:Path", "rollout.engine", base=int)


def test_a_plugin_file_named_twice_runs_once_and_gives_the_same_class(tmp_path):
    counter = tmp_path / "runs.txt"
    plugin = tmp_path / "counted_plugin.py"
    plugin.write_text(
        f"from pathlib import Path\nPath({str(counter)!r}).open('a').write('x')\n\nclass Engine:\n    pass\n"
    )
    first = plugins.import_object(f"{plugin}:Engine")
    assert plugins.import_object(f"{plugin}:Engine") is first
    assert counter.read_text() == "x"


def test_a_function_whose_signature_cannot_be_read_is_not_refused_before_it_is_called():
    assert plugins.call_refused(max, [], []) is None  # a builtin: no signature to check
    assert plugins.call_refused(lambda completions, samples: [], [], []) is None
    assert isinstance(plugins.call_refused(lambda completions: [], [], []), TypeError)


def test_a_plugin_that_is_not_a_class_is_refused_naming_the_key():
    with pytest.raises(
        ConfigError, match=r"^config: rollout.engine 'os.path:join' resolves to .*, which is not a class$"
    ):
        plugins.find_class(plugins.ENGINES, "os.path:join", "rollout.engine")


def test_a_plugin_path_with_a_folder_is_looked_for_as_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"^file not found: {tmp_path / 'engines' / 'canned'} "):
        plugins.import_object("engines/canned:Engine")


def test_a_plugins_options_that_are_not_a_dataclass_are_refused_naming_the_plugin():
    class Engine:
        Options = dict
        options_key = "engine"

    with pytest.raises(ConfigError, match=r"^Engine.Options must be a dataclass$"):
        plugins.plugin_options(Engine, {"engine": {}}, "rollout")


def test_a_stray_section_under_plugins_that_read_no_options_says_they_read_nothing():
    class Bare:
        name = "bare"

    with pytest.raises(ConfigError, match=r"unknown key 'rollout.bogus': the run's plugins \(bare\) read nothing$"):
        plugins.check_sections({"bogus": {}}, [Bare], plugins.ENGINES, "rollout")


def test_the_checkouts_plugins_and_the_installed_ones_are_registered_the_installed_winning_a_name(monkeypatch):
    from importlib.metadata import EntryPoint, EntryPoints

    checkout = [EntryPoint("mine", "pathlib:Path", plugins.ENGINES), EntryPoint("both", "os:getcwd", plugins.ENGINES)]
    installed = [EntryPoint("both", "os:getpid", plugins.ENGINES)]
    monkeypatch.setattr(plugins, "checkout_entry_points", lambda: EntryPoints(checkout))
    monkeypatch.setattr(plugins, "installed_entry_points", lambda: EntryPoints(installed))
    found = plugins.registered(plugins.ENGINES)
    assert {name: ep.value for name, ep in found.items()} == {"mine": "pathlib:Path", "both": "os:getpid"}


def test_an_unknown_plugin_name_is_refused_listing_the_registered_ones():
    with pytest.raises(ConfigError, match=r"^config: rollout.engine 'hff' is unknown; available: hf, vllm \(or module"):
        plugins.find(plugins.ENGINES, "hff", "rollout.engine")
