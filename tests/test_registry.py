"""Tasks are found by built-in name, entry point, module:Class or file.py:Class."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from tasks.refcoco import RefCOCO
from vlrl.cli import main
from vlrl.config import ConfigError
from vlrl.registry import list_tasks, task_class

TOY = Path(__file__).parent / "fixtures" / "toy_task.py"


def test_tasks_list_shows_the_built_in_tasks(capsys):
    assert main(["tasks", "list"]) == 0
    assert "refcoco" in capsys.readouterr().out


def test_a_task_is_found_by_module_and_by_file_path():
    assert task_class("tasks.refcoco:RefCOCO") is RefCOCO
    toy = task_class(f"{TOY}:BriefGrounding")
    assert toy.name == "brief_grounding" and issubclass(toy, RefCOCO)
    assert "brevity" in toy().reward_functions()


def test_a_task_is_found_by_entry_point(monkeypatch):
    fake = EntryPoint(name="my_grounding", value="tasks.refcoco:RefCOCO", group="vlrl.tasks")
    monkeypatch.setattr("vlrl.registry.entry_points", lambda group: [fake] if group == "vlrl.tasks" else [])
    assert task_class("my_grounding") is RefCOCO
    assert ("my_grounding", "entry point tasks.refcoco:RefCOCO", RefCOCO.description) in list_tasks()


@pytest.mark.parametrize(
    "spec,message",
    [
        ("tasks.refcoco:Nope", "has no attribute 'Nope'"),
        ("no_such_module:Task", "cannot import module"),
        ("tasks.refcoco:ACC_THRESHOLDS", "not a vlrl.task.Task subclass"),
        ("/nowhere/task.py:Task", "file not found: /nowhere/task.py"),
    ],
)
def test_bad_task_specs_say_what_is_wrong(spec, message):
    with pytest.raises(ConfigError, match=message):
        task_class(spec)


def test_an_alias_names_the_same_task(capsys):
    assert task_class("coco") is task_class("detection")
    assert main(["tasks", "list"]) == 0
    assert "alias: coco" in capsys.readouterr().out
