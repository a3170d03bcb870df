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


def test_plotting_the_demos_folder_of_runs_names_each_run(tmp_path, capsys):
    from vlrl.cli import main

    for run in ("sft", "rl"):  # python -m vlrl.app.demo's run directory
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.jsonl").write_text("")
    assert main(["plot", str(tmp_path)]) == 2
    assert (
        f"{tmp_path} holds runs, not one: plot each of {tmp_path / 'rl'}, {tmp_path / 'sft'}" in capsys.readouterr().out
    )


def test_a_moving_average_starts_over_the_steps_it_has_and_rates_are_shares_within_0_and_1():
    from vlrl.app.plots import is_rate, moving_average

    assert moving_average([2.0, 4.0, 6.0, 8.0], 2) == [2.0, 3.0, 5.0, 7.0]
    assert is_rate("eval/accuracy", [0.0, 0.5, 1.0]) and not is_rate("eval/accuracy", [0.5, 42.0])


def test_smoothing_starts_at_fifty_steps_with_a_twentieth_of_the_run():
    from vlrl.app.plots import smoothing

    assert [smoothing(n) for n in (1, 45, 49, 50, 60, 100)] == [1, 1, 1, 2, 3, 5]


def test_series_keep_a_training_minus_one_and_leave_out_true_false_values():
    from vlrl.app.plots import is_rate, series

    rows = [{"step": 1, "reward": -1, "eval/ap_small": -1, "eval/found": True}, {"step": 2, "reward": 0.5}]
    assert series(rows, ("reward", "eval/")) == {"reward": ([1, 2], [-1.0, 0.5])}
    assert not is_rate("eval/accuracy", [-0.5, 0.5])


def test_held_out_families_counts_and_rewards_get_their_own_panel_even_alone():
    from vlrl.app.plots import family_of

    assert [family_of(m) for m in ("count", "count_mae", "skipped_samples", "reward/iou", "acc@0.5", "mae")] == [
        "counts", "counts", "counts", "rewards", "acc@t", "mae"]  # fmt: skip
    rows = [{"step": 1, "eval/reward/accuracy": 0.5, "eval/count_acc": 0.25, "eval/format_rate": 1.0}]
    assert eval_panels(rows, "eval/", "held-out") == {
        "held-out: rewards": ["eval/reward/accuracy"],
        "held-out: counts": ["eval/count_acc"],
        "held-out: rates": ["eval/format_rate"],
    }


def test_a_task_that_cannot_be_built_has_the_reward_as_its_headline():
    from vlrl.app.plots import task_headline

    assert task_headline("no_such_task_anywhere") == ["reward"]


def test_the_figures_of_a_run_place_shaping_terms_clip_sides_and_a_mixtures_tasks(tmp_path):
    rows = [{"step": 1, "reward/iou": 0.5, "reward/length": -0.1, "reward/overlong": 0.0, "reward/format": 1.0}]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "refcoco"}}))
    figures = rl_figures(rows, tmp_path)
    assert figures["rewards"]["reward components"] == ["reward/iou", "reward/format"]
    assert figures["rewards"]["shaping terms"] == ["reward/length", "reward/overlong"]
    assert figures["kl_entropy"]["clipped tokens"] == ["clip_low_frac", "clip_high_frac"]
    assert [name for name in figures if name.startswith("eval")] == ["eval"]
    mixture = {"mixture": [{"name": "refcoco"}, {"name": "counting"}], "eval": {"headline": ["reward"]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(mixture))
    figures = rl_figures(rows, tmp_path)
    assert [name for name in figures if name.startswith("eval")] == ["eval_refcoco", "eval_counting"]
    assert figures["headline"]["training reward (sampled)"] == ["reward", "refcoco/reward", "counting/reward"]
    assert figures["headline"]["held-out counting reward"] == ["eval/counting/reward"]


def _drawn(monkeypatch) -> dict:
    """File name -> the figure plot_run saved there."""
    from matplotlib.figure import Figure

    figures, save = {}, Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, path, **kw: figures.setdefault(path.name, fig) and save(fig, path, **kw)
    )
    return figures


def test_an_sft_run_draws_one_loss_figure_its_perplexity_on_a_log_scale_and_its_rate_unsmoothed(tmp_path, monkeypatch):
    rows = [
        {"step": s, "loss": 3.0 / s, "perplexity": math.exp(3.0 / s), "grad_norm": 1.0, "lr": 1e-5 * s}
        for s in range(1, 101)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    figures = _drawn(monkeypatch)
    assert [p.name for p in plot_run(tmp_path)] == ["sft_loss.png"]
    axes = {ax.get_title(): ax for ax in figures["sft_loss.png"].axes if ax.get_visible()}
    assert set(axes) == {
        "loss (target tokens) (mean of 5 steps, raw faint)",
        "perplexity (mean of 5 steps, raw faint)",
        "gradient norm: grad_norm (mean of 5 steps, raw faint)",
        "learning rate: lr",  # a schedule: drawn as it is
    }
    assert axes["perplexity (mean of 5 steps, raw faint)"].get_yscale() == "log"
    assert axes["loss (target tokens) (mean of 5 steps, raw faint)"].get_yscale() == "linear"
    layout = figures["sft_loss.png"].axes[0].get_subplotspec().get_gridspec().get_geometry()
    assert layout == (2, 3)  # four panels, three a row


def test_only_figures_with_something_logged_are_written_and_sparse_metrics_are_points(tmp_path, monkeypatch):
    rows = [{"step": s, "reward": 0.5, "accuracy": 0.25} | ({"kl": 0.1} if s % 5 < 2 else {}) for s in range(1, 101)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "refcoco"}}))
    figures = _drawn(monkeypatch)
    assert [p.name for p in plot_run(tmp_path)] == ["rl_headline.png", "rl_kl_entropy.png"]
    (kl,) = [ax for ax in figures["rl_kl_entropy.png"].axes if ax.get_title().startswith("KL")]
    (points,) = kl.get_lines()  # logged on 40 of 100 steps: points, neither smoothed nor a line
    assert points.get_marker() == "o" and len(points.get_xdata()) == 40
