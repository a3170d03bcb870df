"""A checkpoint is data: resuming never unpickles objects, and no checkpoint runs its own code."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import copy_run

from vlrl.cli import main
from vlrl.config import ModelConfig
from vlrl.trainer.checkpoint import STATE_FILE, load_trainer_state


class Payload:
    """Unpickling this object calls open(marker, "w"): it creates a file, as an attacker's code would."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_trainer_state_is_plain_data(finished_run):
    run_dir, _ = finished_run
    state = torch.load(run_dir / "checkpoints" / "step-0000002" / STATE_FILE, weights_only=True)
    assert state["step"] == 2 and isinstance(state["rng"]["numpy"]["keys"], torch.Tensor)


@pytest.mark.parametrize("how", ["auto", "path"])
def test_a_tampered_trainer_state_is_refused_without_running_its_payload(tmp_path, finished_run, capsys, how):
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3})
    checkpoint = run_dir / "checkpoints" / "step-0000002"
    marker = tmp_path / "payload-ran"
    state = torch.load(checkpoint / STATE_FILE, weights_only=True)
    torch.save({**state, "extra": Payload(marker)}, checkpoint / STATE_FILE)
    torch.load(checkpoint / STATE_FILE, weights_only=False)  # the payload is live: unpickled, it runs
    assert marker.exists()
    marker.unlink()

    if how == "path":  # trainer.resume=PATH, into a fresh run directory
        overrides = [*overrides, f"trainer.resume={checkpoint}", f"trainer.output_dir={tmp_path / 'other'}"]
    status = main(["train", *overrides])
    out = capsys.readouterr().out
    assert status == 2
    assert not marker.exists()
    assert out.count("error:") == 1 and str(checkpoint / STATE_FILE) in out and "refusing to load it" in out


def test_a_checkpoint_of_the_old_pickle_format_is_refused_with_what_to_do(tmp_path):
    checkpoint = tmp_path / "step-0000005"
    checkpoint.mkdir()
    torch.save({"step": 5, "rng": {"numpy": np.random.get_state()}}, checkpoint / STATE_FILE)  # as vlrl <= 0.1 wrote it
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 5}))
    with pytest.raises(Exception, match=r"older vlrl as a Python pickle.*model\.path=.*step-0000005"):
        load_trainer_state(checkpoint)


EVIL_CODE = """
from pathlib import Path
Path({marker!r}).touch()
from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLConfig, Qwen2_5_VLProcessor
class EvilConfig(Qwen2_5_VLConfig): pass
class EvilModel(Qwen2_5_VLForConditionalGeneration):
    config_class = EvilConfig
class EvilProcessor(Qwen2_5_VLProcessor): pass
"""


def test_a_checkpoint_that_ships_its_own_code_loads_without_running_it(tmp_path, tiny_qwen25):
    from transformers import AutoModelForImageTextToText

    from vlrl.models.loading import load_model, load_processor

    checkpoint, marker = tmp_path / "ckpt", tmp_path / "remote-code-ran"
    shutil.copytree(tiny_qwen25, checkpoint)
    (checkpoint / "evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    auto_map = {
        "AutoConfig": "evil.EvilConfig",
        "AutoModelForImageTextToText": "evil.EvilModel",
        "AutoProcessor": "evil.EvilProcessor",
    }
    for name in ("config.json", "processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        path = checkpoint / name
        if path.is_file():
            data = json.loads(path.read_text())
            data["auto_map"] = auto_map
            path.write_text(json.dumps(data))
    cfg = ModelConfig(path=str(checkpoint), dtype="float32")
    model = load_model(cfg, str(checkpoint))
    load_processor(cfg, str(checkpoint))
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert not marker.exists()
    # The code is live: allowed to, transformers runs it.
    AutoModelForImageTextToText.from_pretrained(checkpoint, trust_remote_code=True)
    assert marker.exists()


def test_a_pickled_weights_file_with_a_payload_is_refused_in_one_line_without_running_it(
    tmp_path, tiny_qwen25, rec_data, capsys
):
    """transformers loads a .bin with torch's weights_only: the payload does not run, and its error
    (a traceback suggesting weights_only=False) is said as one line naming the checkpoint."""
    from safetensors.torch import load_file

    checkpoint, marker = tmp_path / "evil", tmp_path / "payload-ran"
    shutil.copytree(tiny_qwen25, checkpoint)
    (weights,) = checkpoint.glob("*.safetensors")
    torch.save({**load_file(weights), "extra": Payload(marker)}, checkpoint / "pytorch_model.bin")
    weights.unlink()
    status = main(["eval", "--task", f"refcoco={rec_data}", "--model", str(checkpoint), "--out", str(tmp_path / "e")])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 2 and not marker.exists()
    assert (
        f"error: {checkpoint}: a pickled weights file (.bin) holds more than tensors, and vlrl does not unpickle it"
        in out
    )
