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


def test_ten_notes_are_printed_without_a_count_of_more(capsys):
    from vlrl.cli import _print_first

    _print_first([f"line {i}" for i in range(10)], "skipped", "skipped completions")
    assert capsys.readouterr().out.splitlines() == [f"skipped line {i}" for i in range(10)]
    _print_first([f"line {i}" for i in range(11)], "skipped", "skipped completions")
    assert capsys.readouterr().out.splitlines()[-1] == "... 1 more skipped completions"


def test_validate_of_a_data_file_that_is_not_there_names_it_and_how_to_make_the_tasks_data(tmp_path, capsys):
    missing = tmp_path / "nothing.json"
    assert main(["data", "validate", "--task", "refcoco", str(missing)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(f"error: {missing} does not exist. Task refcoco's data:")
    assert out.endswith("vlrl data synth --task refcoco writes synthetic data")


def test_tiny_model_writes_a_qwen2_5_vl_by_default_and_names_a_shape_it_wrote(tmp_path, monkeypatch, capsys):
    import json

    assert main(["tiny-model", str(tmp_path / "tiny")]) == 0
    assert json.loads((tmp_path / "tiny" / "config.json").read_text())["model_type"] == "qwen2_5_vl"
    assert (
        capsys.readouterr().out.strip() == f"wrote tiny qwen2_5_vl checkpoint (random weights) to {tmp_path / 'tiny'}"
    )
    written = []
    monkeypatch.setattr(
        "vlrl.models.tiny.write_tiny_checkpoint", lambda out, spec, device: written.append((spec, device)) or out
    )
    assert main(["tiny-model", str(tmp_path / "big"), "--shape", "qwen2-vl-2b", "--seed", "3"]) == 0
    ((spec, device),) = written
    assert (spec.arch, spec.seed, str(device)) == ("qwen2_vl", 3, "cpu")
    assert " ".join(capsys.readouterr().out.split()) == (
        f"wrote qwen2-vl-2b qwen2_vl checkpoint (random weights) to {tmp_path / 'big'}"
    )


def test_config_reference_refuses_overrides_it_would_ignore(capsys):
    assert main(["config", "reference", "trainer.steps=20"]) == 2
    assert capsys.readouterr().out.startswith("error: vlrl config reference takes no config file or overrides")


def test_an_option_given_with_equals_is_an_unknown_option_not_an_override(capsys):
    from vlrl.cli import parse

    with pytest.raises(SystemExit) as stop:
        parse(["config", "show", "configs/demo/refcoco.yaml", "--steps=20"])
    assert stop.value.code == 2 and "unrecognized arguments: --steps=20" in capsys.readouterr().err


def test_only_keys_of_the_other_loop_draw_a_warning(capsys):
    from vlrl.cli import _warn_other_loop

    _warn_other_loop("train", ["model.path=x", "mixture=[]", "nosuch.key=1", "sft.steps=5"])
    out = " ".join(capsys.readouterr().out.split())
    assert out == (
        "warning: sft.steps is read by vlrl sft, not by vlrl train: it has no effect on training; "
        "trainer.steps is the key that applies here"
    )


def test_a_run_config_is_found_only_for_a_checkpoint_in_a_runs_checkpoints_folder(tmp_path):
    from vlrl.cli import run_config

    (tmp_path / "config.yaml").write_text("task: {name: refcoco}\n")
    assert run_config(str(tmp_path / "checkpoints" / "step-0000002")) is None  # not there (keep_last deleted it)
    (tmp_path / "checkpoints" / "step-0000002").mkdir(parents=True)
    (tmp_path / "exports" / "step-0000002").mkdir(parents=True)
    assert run_config(str(tmp_path / "checkpoints" / "step-0000002")) == tmp_path / "config.yaml"
    assert run_config(str(tmp_path / "exports" / "step-0000002")) is None
    assert run_config(None) is None


def test_tasks_list_puts_no_benchmark_among_the_tasks_to_train(capsys):
    from vlrl.tasking.registry import list_tasks

    assert main(["tasks", "list"]) == 0
    training, _, benchmarks = capsys.readouterr().out.partition("benchmarks, evaluation only")
    names = [name for name, origin, _ in list_tasks() if origin.startswith("benchmark")]
    assert names and all(re.search(rf"│ {re.escape(n)} +│", benchmarks) for n in names)
    assert not any(re.search(rf"│ {re.escape(n)} +│", training) for n in names)


def test_the_frame_note_says_a_set_family_decides_the_frame():
    from vlrl.cli import frame_note

    note = frame_note(load_config(None, ["model.family=qwen2_vl"]))
    assert note.startswith("coordinates read in the norm1000 frame: 0-1000 normalized coordinates")
    assert "; model.coord_frame=auto, the frame of model.family=qwen2_vl (set model.coord_frame=" in note


def test_a_file_may_be_written_into_folders_still_to_make_but_not_under_a_file(tmp_path):
    from vlrl.cli import writable
    from vlrl.config import ConfigError

    assert writable(str(tmp_path / "a" / "b" / "scores.jsonl"), "--out") == tmp_path / "a" / "b" / "scores.jsonl"
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ConfigError, match=re.escape(f"--out {tmp_path / 'notes.txt' / 'x.jsonl'} cannot be written: ")):
        writable(str(tmp_path / "notes.txt" / "x.jsonl"), "--out")


def test_data_synth_writes_512_records_by_default_and_says_how_many(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr("vlrl.tasking.sources.write_synthetic", lambda *args: calls.append(args[1:]))
    out = tmp_path / "train.jsonl"
    assert main(["data", "synth", "--task", "counting", "--out", str(out)]) == 0
    assert calls == [(str(out), 512, 0)]
    assert " ".join(capsys.readouterr().out.split()) == f"wrote 512 synthetic counting records to {out}"


def test_score_prints_the_mean_reward_to_four_places(tmp_path, rec_data, capsys):
    import json

    completions = tmp_path / "completions.jsonl"
    completions.write_text(json.dumps({"id": 0, "completion": "<answer>[1, 2, 3, 4]</answer>"}) + "\n")
    argv = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions)]
    assert main([*argv, "--out", str(tmp_path / "scores.jsonl")]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "mean reward" in line]
    (scored,) = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert re.fullmatch(rf"│ mean reward +│ +{scored['reward']:.4f} │", line.strip())
