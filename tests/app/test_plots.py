"""`vlrl plot`: one figure per concern, a panel per scale, the headline first, smoothed curves
over faint raw values, legends under their panel."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
import yaml

from vlrl.app.plots import eval_panels, plot_run, rl_figures

matplotlib.use("Agg")


def rows_of(steps: int = 100, every: int = 20) -> list[dict]:
    rows = []
    for step in range(1, steps + 1):
        row = {"step": step, "reward": 1 + math.sin(step), "accuracy": 0.5 + 0.4 * math.sin(step / 7),
               "reward/format": 0.9, "reward/iou": 0.3, "reward/overlong": -0.1, "kl": 0.01 * step,
               "completion_length": 30.0, "truncated_frac": 0.1, "loss": 0.0, "lr": 1e-6, "time_step": 1.0}  # fmt: skip
        if step % every == 0:
            row |= {"eval/acc@0.1": 0.9, "eval/acc@0.5": step / steps, "eval/mean_iou": 0.4, "eval/format_rate": 1.0,
                    "eval/reward": 1.4, "eval/reward/iou": 0.4, "eval/skipped_samples": 0.0, "eval/mae": 2.5,
                    "eval/ap_small": -1.0, "time_eval": 3.0}  # fmt: skip
        rows.append(row)
    return rows


def test_held_out_metrics_are_grouped_by_scale():
    panels = eval_panels(rows_of(), "eval/", "held-out")
    assert panels == {
        "held-out: acc@t": ["eval/acc@0.1", "eval/acc@0.5"],
        "held-out: rates": ["eval/mean_iou", "eval/format_rate"],  # ap_small is all -1 (pycocotools' "undefined")
        "held-out: rewards": ["eval/reward", "eval/reward/iou"],
        "held-out: counts": ["eval/skipped_samples"],
        "held-out: mae": ["eval/mae"],  # not a share: on its own scale
    }


def test_the_headline_is_the_runs_eval_headline_or_its_tasks(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "refcoco"}, "eval": {"headline": []}}))
    headline = rl_figures(rows_of(), tmp_path)["headline"]
    assert list(headline) == [
        "training reward (sampled)", "training accuracy (the task's correctness)",
        "held-out acc@0.5", "held-out mean_iou", "held-out format_rate", "held-out reward",
    ]  # fmt: skip
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "counting"}, "eval": {"headline": ["mae"]}}))
    assert list(rl_figures(rows_of(), tmp_path)["headline"])[2:] == ["held-out mae"]
    # A mixture: each task's own headline
    mixture = {"mixture": [{"name": "refcoco"}, {"name": "counting"}], "eval": {"headline": []}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(mixture))
    panels = list(rl_figures(rows_of(), tmp_path)["headline"])[2:]
    assert panels[:4] == [f"held-out refcoco {m}" for m in ("acc@0.5", "mean_iou", "format_rate", "reward")]
    assert "held-out counting accuracy" in panels and "held-out counting acc@0.5" not in panels


def test_plots_draw_each_scale_apart_smooth_over_faint_raw_values_and_keep_legends_off_the_data(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows_of()))
    (run / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "refcoco"}, "eval": {"headline": []}}))
    figures = {}
    from matplotlib.figure import Figure

    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, path, **kw: figures.setdefault(path.name, fig) and save(fig, path, **kw)
    )
    written = plot_run(run)
    assert written[0].name == "rl_headline.png" and all(p.read_bytes()[:4] == b"\x89PNG" for p in written)
    axes = {ax.get_title(): ax for fig in figures.values() for ax in fig.axes if ax.get_visible()}
    reward = axes["training reward (sampled) (mean of 5 steps, raw faint)"]
    raw, smooth = reward.get_lines()
    assert raw.get_alpha() == pytest.approx(0.25) and smooth.get_alpha() is None
    assert list(raw.get_ydata()) == [row["reward"] for row in rows_of()]
    assert smooth.get_ydata()[9] == pytest.approx(sum(rows_of()[i]["reward"] for i in range(5, 10)) / 5)
    assert axes["training accuracy (the task's correctness) (mean of 5 steps, raw faint)"].get_ylim() == (-0.03, 1.03)
    held_out = axes["held-out acc@0.5"]
    (points,) = held_out.get_lines()
    assert points.get_marker() == "o" and list(points.get_xdata()) == [20, 40, 60, 80, 100]
    assert held_out.get_xlim()[0] == 0 and held_out.get_xlim()[1] >= 100  # lined up with the training curves
    # rewards and shaping terms apart; tokens, fractions, seconds apart; legends under the data
    assert "reward components (mean of 5 steps, raw faint)" in axes and "shaping terms: reward/overlong" in " ".join(
        axes
    )
    assert "truncated (hit max_new_tokens): truncated_frac (mean of 5 steps, raw faint)" in axes
    for ax in axes.values():
        legend = ax.get_legend()
        if legend is not None:
            assert legend._bbox_to_anchor.bounds[1] < ax.bbox.bounds[1]  # anchored below the axes
    time = next(ax for title, ax in axes.items() if title.startswith("seconds per step"))
    eval_time = next(line for line in time.get_lines() if line.get_label() == "time_eval")
    assert eval_time.get_marker() == "o"  # logged every eval.every steps: points, not a smoothed line


def test_plotting_a_run_with_no_step_logged_says_so(tmp_path, capsys):
    from vlrl.cli import main

    (tmp_path / "metrics.jsonl").write_text("")  # a run stopped before its first step
    assert main(["plot", str(tmp_path)]) == 2
    assert f"{tmp_path / 'metrics.jsonl'} holds no step yet: nothing to plot" in capsys.readouterr().out
    assert not (tmp_path / "plots").exists()


def test_a_moving_average_starts_over_the_steps_it_has_and_rates_are_shares_within_0_and_1():
    from vlrl.app.plots import is_rate, moving_average

    assert moving_average([2.0, 4.0, 6.0, 8.0], 2) == [2.0, 3.0, 5.0, 7.0]
    assert is_rate("eval/accuracy", [0.0, 0.5, 1.0]) and not is_rate("eval/accuracy", [0.5, 42.0])
