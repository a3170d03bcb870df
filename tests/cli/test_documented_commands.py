"""Every `vlrl` command the README and docs/ show still parses, and its config with its overrides
still loads: a renamed flag, key, task or config file fails here, naming the page and line,
before a reader copies the command. Running them is the demo's and the other tests' job."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from vlrl.cli import parse
from vlrl.config import load_config
from vlrl.tasking.registry import registered_tasks

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"bash", "sh", "console"}


def documented_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line, argv) of each `vlrl ...` line in the page's shell code blocks, a backslash's
    continuation joined, a trailing comment dropped."""
    commands, fence, pending = [], None, ""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence not in SHELL_FENCES:
            continue
        text = pending + line.strip()
        pending = text[:-1] + " " if text.endswith("\\") else ""
        if not pending and text.startswith("vlrl "):
            commands.append((number, shlex.split(text, comments=True)))
    return commands


COMMANDS = [
    pytest.param(argv, id=f"{page.relative_to(ROOT)}:{number}")
    for page in PAGES
    for number, argv in documented_commands(page)
]


def test_the_pages_show_the_commands_a_reader_runs():
    # the scan itself: the README's tour alone has fourteen commands, one on two lines
    readme = documented_commands(ROOT / "README.md")
    assert len(readme) >= 14
    assert ["vlrl", "train", "--config", "configs/demo/refcoco.yaml", "trainer.steps=20",
            "model.path=runs/demo/refcoco-sft/checkpoints/step-0000100"] in [argv for _, argv in readme]  # fmt: skip
    assert len(COMMANDS) > len(readme)  # docs/ shows more


@pytest.mark.parametrize("argv", COMMANDS)
def test_a_documented_command_parses_and_its_config_loads(argv):
    try:
        args = parse(argv[1:])
    except SystemExit:
        pytest.fail(f"`{shlex.join(argv)}` no longer parses")
    config = args.path if args.command == "config" else getattr(args, "config", None)
    if config:
        load_config(ROOT / config, getattr(args, "overrides", []))
    known = {t.name for t in registered_tasks()}
    tasks = args.task if isinstance(getattr(args, "task", None), list) else [getattr(args, "task", None)]
    for name in tasks:
        unknown = name is not None and not name.startswith("$") and name.partition("=")[0] not in known
        assert not unknown, f"`{shlex.join(argv)}` names task {name!r}, which is not registered"
