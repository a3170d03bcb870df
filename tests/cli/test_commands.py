"""The command line as a new user meets it: --version, each command's help and examples, one
clear line for an impossible request, progress that stays out of piped output."""

from __future__ import annotations

import re

import pytest

import vlrl
from vlrl.cli import EXAMPLES, build_parser, main
from vlrl.config import load_config


def test_version_is_printed(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"vlrl {vlrl.__version__}"


def _subcommands(parser, prefix=()):
    """(command words, parser) of every command, `data synth` and `data validate` included."""
    for action in parser._subparsers._group_actions:
        for name, sub in action.choices.items():
            if sub._subparsers is not None:
                yield from _subcommands(sub, (*prefix, name))
            else:
                yield (*prefix, name), sub


@pytest.mark.parametrize("words", [words for words, _ in _subcommands(build_parser())], ids=" ".join)
def test_every_command_has_a_help_page_with_examples_of_itself(words, capsys):
    with pytest.raises(SystemExit):
        main([*words, "--help"])
    page = capsys.readouterr().out
    description = page.split("\n\n")[1]  # after the usage: what the command does
    assert description.strip() and not description.startswith(("positional", "options"))
    examples = page.split("examples:\n", 1)[1].splitlines()
    assert examples == [f"  {line}" for line in EXAMPLES[words[-1]]]
    assert all(re.search(rf"(vlrl|vlrl\.cli) {' '.join(words)}\b", line) for line in examples)


# The config sections each command reads: its help's key=value examples name only these.
READS = {
    "train": {"model", "data", "task", "rollout", "algo", "trainer", "eval"},
    "sft": {"model", "data", "task", "sft"},
    "eval": {"model", "data", "task", "rollout", "eval"},
    "score": {"model", "data", "task"},
    "validate": {"model", "data", "task"},
    "plan": {"model", "rollout", "trainer", "eval"},
    "config": {"model", "data", "task", "rollout", "algo", "trainer", "eval", "sft"},
}


@pytest.mark.parametrize("words", [words for words, _ in _subcommands(build_parser())], ids=" ".join)
def test_override_examples_name_keys_the_command_reads(words):
    (sub,) = [p for w, p in _subcommands(build_parser()) if w == words]
    for action in sub._actions:
        if action.dest == "overrides":
            sections = set(re.findall(r"(\w+)\.[\w.]+=", action.help))
            assert sections and sections <= READS[words[-1]], (action.help, READS[words[-1]])


def test_every_argument_says_what_it_is(capsys):
    for words, sub in _subcommands(build_parser()):
        for action in sub._actions:
            if action.dest != "help":
                assert action.help, f"vlrl {' '.join(words)} {action.dest} has no help text"


def test_tiny_model_on_a_missing_gpu_is_one_error_line(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["tiny-model", str(tmp_path / "tiny"), "--device", "cuda"]) == 2
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and out.startswith("error: tiny-model --device cuda: this machine has no usable")
    assert "Traceback" not in out + err and not (tmp_path / "tiny").exists()
    assert main(["tiny-model", str(tmp_path / "tiny"), "--device", "gpu9"]) == 2
    assert capsys.readouterr().out.startswith("error: tiny-model --device 'gpu9' is not a device")


def test_a_single_value_is_a_list_of_one_where_a_list_is_expected():
    cfg = load_config(
        None, ["trainer.report_to=tensorboard", "eval.headline=acc@0.5", "model.lora.target_modules=q_proj"]
    )
    assert cfg.trainer.report_to == ["tensorboard"] and cfg.eval.headline == ["acc@0.5"]
    assert cfg.model.lora.target_modules == ["q_proj"]
    with pytest.raises(ValueError, match=r"trainer.report_to\[0\] must be one of"):
        load_config(None, ["trainer.report_to=tensorbord"])


def test_validate_prints_no_progress_bar_into_a_pipe(rec_data, capsys):
    assert main(["data", "validate", "--task", "refcoco", str(rec_data)]) == 0  # trainer.progress is on
    out = capsys.readouterr().out
    assert out.strip() == f"{rec_data}: 12 records, all usable"
