"""A hub id in model.path loads from the local Hugging Face cache when the model is there, never
from the network; when it is not, the error says how to download it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config import ConfigError, ModelConfig
from vlrl.eval.layout import read_metrics, samples_path
from vlrl.models.loading import checkpoint_path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_model(cache: Path, repo: str, checkpoint: Path) -> Path:
    """`checkpoint` laid out as `huggingface-cli download repo` leaves it in the hub cache:
    blobs named by their hash, a snapshot of links to them, refs/main naming the snapshot."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / COMMIT
    for file in checkpoint.rglob("*"):
        if file.is_file():
            blob = root / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, blob)
            link = snapshot / file.relative_to(checkpoint)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, tiny_qwen25) -> Path:
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a look-up online would fail the test, not hang it
    return cache_model(cache, "vlrl-tests/tiny-qwen2.5-vl", tiny_qwen25)


def test_a_hub_id_in_the_local_cache_loads_and_evaluates_as_its_directory(hub_cache, tmp_path, rec_data, tiny_qwen25):
    assert checkpoint_path(ModelConfig(path="vlrl-tests/tiny-qwen2.5-vl")) == str(hub_cache)
    outs = {}
    for name, model in (("hub", "vlrl-tests/tiny-qwen2.5-vl"), ("local", str(tiny_qwen25))):
        outs[name] = tmp_path / name
        args = ["eval", "--task", f"refcoco={rec_data}", "--model", model, "--out", str(outs[name]), "--limit", "3"]
        assert main([*args, "model.max_pixels=12544", "eval.max_new_tokens=8"]) == 0
    assert read_metrics(outs["hub"]) == read_metrics(outs["local"])
    assert samples_path(outs["hub"], "refcoco").read_text() == samples_path(outs["local"], "refcoco").read_text()
    results = json.loads((outs["hub"] / "results.json").read_text())
    assert results["model_name"] == "vlrl-tests/tiny-qwen2.5-vl"


def test_a_hub_id_not_in_the_cache_says_how_to_download_it(hub_cache, capsys):
    with pytest.raises(ConfigError, match="vlrl-tests/absent' is a Hugging Face hub id that is not in the local"):
        checkpoint_path(ModelConfig(path="vlrl-tests/absent"))
    assert main(["eval", "--task", "refcoco", "--model", "vlrl-tests/absent", "--data", "x.json"]) == 2
    out = capsys.readouterr().out
    assert "`huggingface-cli download vlrl-tests/absent` puts it there" in out and str(hub_cache.parents[2]) in out
    with pytest.raises(ConfigError, match="is not a local checkpoint \\(no config.json\\) nor a hub id"):
        checkpoint_path(ModelConfig(path=str(hub_cache.parents[2] / "no" / "such" / "dir")))


def test_a_run_directory_given_as_the_model_names_its_latest_checkpoint(tmp_path):
    for step in ("step-0000010", "step-0000020"):
        (tmp_path / "run" / "checkpoints" / step).mkdir(parents=True)
    latest = tmp_path / "run" / "checkpoints" / "step-0000020"
    with pytest.raises(ConfigError, match=f"is a run directory, not a checkpoint: .*\\({latest} is the latest\\)"):
        checkpoint_path(ModelConfig(path=str(tmp_path / "run")))


def test_the_demos_folder_of_runs_given_as_the_model_names_each_runs_latest_checkpoint(tmp_path):
    for run, step in (("sft", "step-0000100"), ("rl", "step-0000010"), ("rl", "step-0000500")):
        (tmp_path / "demo" / run / "checkpoints" / step).mkdir(parents=True)
    rl, sft = (tmp_path / "demo" / run / "checkpoints" for run in ("rl", "sft"))
    latest = f"{rl / 'step-0000500'}, {sft / 'step-0000100'}"
    with pytest.raises(
        ConfigError,
        match=re.escape(f"holds runs, not a checkpoint: give one of their checkpoints (the latest: {latest})"),
    ):
        checkpoint_path(ModelConfig(path=str(tmp_path / "demo")))


def test_a_checkpoint_the_run_no_longer_holds_is_said_so_with_the_ones_it_holds(tmp_path, capsys):
    """trainer.keep_last deletes older checkpoints: evaluating one names those the run keeps,
    and says nothing of the settings the run changed after it (nothing of it is loaded)."""
    run = tmp_path / "run"
    for step in ("step-0000020", "step-0000023"):
        (run / "checkpoints" / step).mkdir(parents=True)
    (run / "config.yaml").write_text("trainer:\n  lr: 0.001\n")
    change = {"step": 15, "changes": {"trainer.lr": {"from": 0.01, "to": 0.001}}}
    (run / "config_history.jsonl").write_text(json.dumps(change) + "\n")  # changed after step 10
    gone = run / "checkpoints" / "step-0000010"
    with pytest.raises(
        ConfigError, match=r"the run holds no step-0000010 .* its checkpoints: step-0000020, step-0000023"
    ):
        checkpoint_path(ModelConfig(path=str(gone)))
    assert main(["eval", "--task", "refcoco", "--model", str(gone), "--data", "x.json"]) == 2
    out = capsys.readouterr().out
    assert "the run holds no step-0000010" in out and "changed settings" not in out


def test_an_adapters_hub_base_is_its_cached_snapshot_and_a_local_folder_wins_over_a_hub_id(
    hub_cache, tmp_path, monkeypatch
):
    from vlrl.models.checkpoints import local_path, weights_root

    adapter = tmp_path / "adapter"  # PEFT records the base as the hub id it was loaded by
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "vlrl-tests/tiny-qwen2.5-vl"}))
    assert weights_root(str(adapter)) == str(hub_cache)
    monkeypatch.chdir(tmp_path)
    assert local_path("vlrl-tests/tiny-qwen2.5-vl") == str(hub_cache)
    (tmp_path / "vlrl-tests" / "tiny-qwen2.5-vl").mkdir(parents=True)  # a folder of that name here
    assert local_path("vlrl-tests/tiny-qwen2.5-vl") == "vlrl-tests/tiny-qwen2.5-vl"


def test_a_relative_run_directory_named_like_a_hub_id_is_said_to_be_a_run_directory_not_a_missing_hub_model(
    tmp_path, monkeypatch
):
    """A folder here whose relative path has the hub's org/name shape (runs/demo) is a local folder,
    so the error says what it holds rather than how to download a hub model of that name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "demo" / "checkpoints" / "step-0000010").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"'runs/demo' is a run directory, not a checkpoint") as err:
        checkpoint_path(ModelConfig(path="runs/demo"))
    assert "Hugging Face hub id" not in str(err.value)
    (tmp_path / "runs" / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"'runs/empty' is not a local checkpoint \(no config.json\)"):
        checkpoint_path(ModelConfig(path="runs/empty"))
