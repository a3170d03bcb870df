"""docs/config.md is what the code says: a key added, removed or re-documented in a config
dataclass (or a plugin's options) without regenerating the page fails here."""

from __future__ import annotations

import re
from pathlib import Path

from vlrl.app.reference import reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_the_config_reference_page_is_the_one_the_code_writes():
    assert PAGE.read_text() == reference(), "docs/config.md is stale: run `vlrl config reference > docs/config.md`"


def test_every_config_key_has_a_description():
    """A key row with an empty description cell tells the reader nothing: every field of a config
    dataclass and of a plugin's options carries a comment in the source (reference.own_comments)."""
    missing, section = [], ""
    for line in reference().splitlines():
        if line.startswith("## `"):
            section = line.removeprefix("## `").removesuffix("`")
        elif line.startswith("| `"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]  # a cell's own | is escaped
            if not cells[-1].strip():
                missing.append(f"{section}.{cells[0].strip().strip('`')}")
    assert not missing, f"config keys without a description (comment the field in its dataclass): {', '.join(missing)}"


def test_every_key_of_the_config_and_of_each_plugins_options_is_on_the_page():
    page = reference()
    for key in ("`token_budget`", "`gpu_memory_utilization`", "`cpu_offload`", "`accuracy_reward`", "## `mixture[i]`"):
        assert key in page


def test_config_reference_given_a_config_says_it_reads_none_rather_than_ignoring_it(capsys):
    from vlrl.cli import main

    assert main(["config", "reference", "configs/demo/refcoco.yaml", "trainer.steps=3"]) == 2
    assert "vlrl config reference takes no config file or overrides" in capsys.readouterr().out
