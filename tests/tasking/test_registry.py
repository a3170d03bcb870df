"""Tasks are found by built-in name, entry point, module:Class or file.py:Class."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import tomllib

from tasks.refcoco import RefCOCO
from vlrl import plugins
from vlrl.cli import main
from vlrl.config import ConfigError
from vlrl.tasking.registry import list_tasks, task_class

TOY = Path(__file__).parent.parent / "fixtures" / "toy_task.py"


def test_tasks_list_shows_the_built_in_tasks(capsys):
    assert main(["tasks", "list"]) == 0
    assert "refcoco" in capsys.readouterr().out


def test_every_task_entry_point_the_package_declares_loads_and_registers():
    """The registry skips an entry point that fails to load (a third party's broken plugin must
    not hide the others), so a built-in module that fails would vanish without an error."""
    from vlrl.tasking.registry import registered_tasks

    declared = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["entry-points"]
    entries = declared["vlrl.tasks"]
    registered = {r.entry_point.name for r in registered_tasks()}
    for name, value in entries.items():
        EntryPoint(name, value, "vlrl.tasks").load()  # raises where the module does not import
    assert set(entries) <= registered


def test_tasks_list_shows_every_name_whole_with_the_benchmarks_apart(capsys):
    """Names are what one copies into --task: never cut, also in an 80-column pipe."""
    from vlrl.tasking.benchmark import Benchmark
    from vlrl.tasking.registry import registered_tasks

    assert main(["tasks", "list"]) == 0
    training, _, benchmarks = capsys.readouterr().out.partition("benchmarks, evaluation only")
    assert "…" not in training + benchmarks
    for r in registered_tasks():
        if r.builtin and r.alias:
            continue  # listed beside its task
        part = benchmarks if issubclass(r.cls, Benchmark) else training
        assert re.search(rf"│ {re.escape(r.name)} +│", part), r.name


def test_list_tasks_gives_the_training_tasks_then_the_benchmarks_each_by_name():
    rows = list_tasks()
    kinds = [origin.split(" ")[0] for _, origin, _ in rows]
    assert set(kinds) <= {"built-in", "benchmark", "entry"} and "benchmark" in kinds
    order = ["built-in", "benchmark", "entry"]
    assert kinds == sorted(kinds, key=order.index)
    for kind in order:
        names = [name for (name, _, _), k in zip(rows, kinds, strict=True) if k == kind]
        assert names == sorted(names), kind
    assert ("detection", "built-in (alias: coco)") in [(name, origin) for name, origin, _ in rows]


def heavy_modules_after(script: str) -> subprocess.CompletedProcess:
    """`script` run in a fresh process from the checkout, which then prints `HEAVY [...]`: which of
    torch and transformers it imported."""
    root = Path(__file__).resolve().parents[2]
    script += "import sys\nprint('HEAVY', [m for m in ('torch', 'transformers') if m in sys.modules])\n"
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "command, status, printed",
    [
        (["tasks", "list"], 0, "video_qa"),
        (["config", "show", "/no/such.yaml"], 2, "/no/such.yaml does not exist"),
        (["train", "--config", "configs/demo/refcoco.yaml", "trainer.stepz=3"], 2, "unknown key 'trainer.stepz'"),
        (["sft", "--config", "configs/demo/refcoco.yaml", "sft.stepz=3"], 2, "unknown key 'sft.stepz'"),
        (["eval", "--task", "refcoco", "eval.limt=3"], 2, "unknown key 'eval.limt'"),
    ],
)
def test_listing_tasks_or_a_configs_error_imports_neither_torch_nor_transformers(command, status, printed):
    """`vlrl tasks list` took 9 s when it imported torch and transformers to print a table, a
    mistyped config path 7 s to say so, and `vlrl train` or `vlrl eval` 8 s to name a mistyped key. (`vlrl
    config show` imports the engines and strategies it checks, about 2 s.)"""
    done = heavy_modules_after(f"from vlrl.cli import main\nassert main({command!r}) == {status}\n")
    assert done.returncode == 0, done.stderr
    assert printed in done.stdout and "HEAVY []" in done.stdout


def test_an_unexpected_error_of_a_light_command_is_raised_without_importing_torch():
    """Its traceback, and nothing imported to tell it from the errors training tells in one line
    (a checkpoint's, another process's): importing those took 4 s before the traceback."""
    script = (
        "import sys, vlrl.cli\nvlrl.cli.cmd_tasks = lambda args: 1 / 0\ntry:\n    vlrl.cli.main(['tasks', 'list'])\n"
    )
    script += "except ZeroDivisionError:\n    pass\nelse:\n    sys.exit('the error was not raised')\n"
    done = heavy_modules_after(script)
    assert done.returncode == 0 and "HEAVY []" in done.stdout, done.stdout + done.stderr


def test_a_task_is_found_by_module_and_by_file_path():
    assert task_class("tasks.refcoco:RefCOCO") is RefCOCO
    toy = task_class(f"{TOY}:BriefGrounding")
    assert toy.name == "brief_grounding" and issubclass(toy, RefCOCO)
    assert "brevity" in toy().reward_functions()


def test_a_task_is_found_by_entry_point(monkeypatch):
    fake = EntryPoint(name="my_grounding", value="tasks.refcoco:RefCOCO", group="vlrl.tasks")
    registered = plugins.registered
    monkeypatch.setattr(
        plugins,
        "registered",
        lambda group: {**registered(group), **({fake.name: fake} if group == plugins.TASKS else {})},
    )
    assert task_class("my_grounding") is RefCOCO
    assert ("my_grounding", "entry point tasks.refcoco:RefCOCO", RefCOCO.description) in list_tasks()


@pytest.mark.parametrize(
    "spec,message",
    [
        ("tasks.refcoco:Nope", "has no attribute 'Nope'"),
        ("no_such_module:Task", "cannot import module"),
        ("tasks.refcoco:ACC_THRESHOLDS", "not a vlrl.tasking.task.Task subclass"),
        ("/nowhere/task.py:Task", "file not found: /nowhere/task.py"),
        # a benchmark family's collection is no task: named as an unknown one, with the choices
        ("lmms_eval_refcoco", r"task.name 'lmms_eval_refcoco' is not a registered task; .*training tasks: .*refcoco"),
    ],
)
def test_bad_task_specs_say_what_is_wrong(spec, message):
    with pytest.raises(ConfigError, match=message):
        task_class(spec)


def test_an_alias_names_the_same_task(capsys):
    assert task_class("coco") is task_class("detection")
    assert main(["tasks", "list"]) == 0
    assert "alias: coco" in capsys.readouterr().out
