"""The demo pipeline (cold-start SFT, eval, GRPO, eval, summary): fast on a few steps; the real
demo, with its gain, under `make test-slow`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vlrl.app.demo import main

ROOT = Path(__file__).resolve().parents[2]


def small(tmp_path: Path) -> list[str]:
    """Overrides that shrink a demo config to seconds: a few records, steps and tokens."""
    return [
        f"data.train={tmp_path / 'data' / 'train.json'}",
        f"data.eval={tmp_path / 'data' / 'val.json'}",
        "data.synthetic=true",  # synthetic data at paths of the command line: asked for there
        "data.synthetic_train_size=8",
        "data.synthetic_eval_size=4",
        "sft.steps=3",
        "sft.prompts_per_step=2",
        "trainer.steps=2",
        "trainer.prompts_per_step=2",
        "rollout.num_generations=2",
        "rollout.max_new_tokens=8",
        "eval.max_new_tokens=8",
        "eval.every=1",
        "trainer.progress=false",
        "sft.progress=false",
    ]


@pytest.mark.parametrize("name", ["refcoco", "counting", "math_vqa"])
def test_the_demo_pipeline_runs_end_to_end(name, tmp_path, tiny_qwen25, capsys):
    out = tmp_path / "demo"
    config = ROOT / "configs" / "demo" / f"{name}.yaml"
    assert main(["--config", str(config), "--seed", "1", "--out", str(out), *small(tmp_path)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    summary_path = out / "demo_summary.json"
    assert printed[-1] == str(summary_path)  # the last line is the summary's path
    summary = json.loads(summary_path.read_text())
    assert summary["task"] == name and summary["seed"] == 1 and summary["seconds"] > 0
    assert summary["cpu"] == torch.backends.cpu.get_cpu_capability()  # "AVX2", "AVX512", ...
    assert summary["before"].keys() == summary["after"].keys() and "reward" in summary["before"]
    assert Path(summary["curves"]).read_bytes()[:4] == b"\x89PNG"
    assert "SFT start" in "\n".join(printed) and "after RL" in "\n".join(printed)


@pytest.mark.slow
def test_the_refcoco_demo_shows_rl_improving_the_held_out_metrics(tmp_path):
    out = tmp_path / "demo"
    assert (
        main(
            [
                "--seed",
                "0",
                "--out",
                str(out),
                f"data.train={tmp_path / 'train.json'}",
                f"data.eval={tmp_path / 'val.json'}",
                "data.synthetic=true",
            ]
        )
        == 0
    )
    summary = json.loads((out / "demo_summary.json").read_text())
    before, after = summary["before"], summary["after"]
    # The numbers depend on the machine (the same code gives other numbers on another CPU: its
    # kernels round otherwise, and over the demo's thousands of steps that moves a seed as far as another seed;
    # demo_summary.json's "cpu" names the kernels). With the 5000-step cold start, on an AVX-512
    # machine (2026-11-30, docs/demo.md), seeds 0-4 with one thread moved acc@0.5 by +0.63, +0.66,
    # +0.66, +0.58, +0.66 and mean IoU by +0.20, +0.24, +0.22, +0.17, +0.21, and seed 0 with two
    # threads by +0.61 and +0.22. Over the six, +0.632 ± 0.034 and +0.210 ± 0.026: each bound sits
    # 3 standard deviations below the mean. (At 3000 steps one seed in five never learned to
    # localize and gained nothing.) The format bound leaves room for another CPU's numerics (0.95
    # seen there).
    assert after["acc@0.5"] - before["acc@0.5"] > 0.53
    assert after["mean_iou"] - before["mean_iou"] > 0.13
    assert after["format_rate"] >= 0.9


@pytest.mark.slow
def test_the_counting_demo_shows_rl_improving_the_held_out_accuracy(tmp_path):
    out = tmp_path / "demo"
    config = str(ROOT / "configs" / "demo" / "counting.yaml")
    data = [f"data.train={tmp_path / 'train.json'}", f"data.eval={tmp_path / 'val.json'}", "data.synthetic=true"]
    assert main(["--config", config, "--seed", "0", "--out", str(out), *data]) == 0
    summary = json.loads((out / "demo_summary.json").read_text())
    before, after = summary["before"], summary["after"]
    # Seeds 0-2 moved accuracy by +0.609 to +0.648 (standard deviation 0.023) and MAE by -0.633
    # to -0.680 (0.025) (README, 2026-11-30, GRPO at lr 1e-4; 2026-11-29: +0.516 to +0.625, std
    # 0.059, and -0.547 to -0.656, 0.058). The cold start's teacher counts
    # one too many, so the SFT start is below 0.1; RL can reach about 0.77 (1-circle scenes stay
    # wrong). The bounds sit 3 or more standard deviations below the mean gains. (At lr 3e-4 seed 0
    # collapsed to one answer whatever the image and gained +0.203: this test failed.)
    assert before["accuracy"] < 0.2
    assert after["accuracy"] - before["accuracy"] > 0.38
    assert after["mae"] < before["mae"] - 0.3
    assert after["format_rate"] >= 0.95


@pytest.mark.slow
def test_the_math_vqa_demo_shows_rl_improving_the_held_out_accuracy(tmp_path):
    out = tmp_path / "demo"
    config = str(ROOT / "configs" / "demo" / "math_vqa.yaml")
    data = [f"data.train={tmp_path / 'train.json'}", f"data.eval={tmp_path / 'val.json'}", "data.synthetic=true"]
    assert main(["--config", config, "--seed", "0", "--out", str(out), *data]) == 0
    summary = json.loads((out / "demo_summary.json").read_text())
    before, after = summary["before"], summary["after"]
    # The cold start's teacher states every sum one too high, so the SFT start is below 0.1.
    # Seeds 0-2 gained +0.594 to +0.742 accuracy (docs/demo.md, 2026-11-30), the code of
    # 2026-11-29 +0.469 to +0.562 and that of 2026-11-25 +0.531 to +0.688 on the same machine:
    # a run's held-out accuracy moves by up to 0.15 between evaluations, so where it stops
    # decides much of its gain. The bound sits 3 standard deviations (0.078) below the mean
    # (0.568) of the last six gains before 2026-11-30, the lower of the two measurements.
    assert before["accuracy"] < 0.2
    assert after["accuracy"] - before["accuracy"] > 0.33
    assert after["format_rate"] >= 0.95
