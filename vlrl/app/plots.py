"""`vlrl plot RUN_DIR`: a run's metrics.jsonl as PNG files, one figure per concern.

Each figure holds panels, each panel one scale: rates in [0, 1] together, rewards, tokens,
seconds and counts apart. The headline comes first (rl_headline.png: the training reward and
accuracy, then each held-out headline metric, `eval.headline` or the task's own). Training
curves are smoothed by a moving average drawn over the raw values, which stay faint; held-out
metrics, a point every `eval.every` steps, are drawn as points. Legends sit under their panel,
never over the data.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import yaml

RAW_ALPHA = 0.25  # the raw values under a smoothed curve
LONG_RUN = 50  # steps from which training curves are smoothed
# Metrics that are shares of samples or of tokens: a panel of only these is drawn from 0 to 1,
# so that its curves read as what they are and two runs' figures compare by eye.
UNSMOOTHED = ("lr", "skipped_samples", "skipped_updates")  # a schedule and counts, not noisy measurements
LOG_SCALE = ("perplexity",)  # spans orders of magnitude
RATE = re.compile(r"(^|_)(acc|accuracy|rate|frac|correct|success|exact|partial|iou|map|ap\d*|ar\d*|score)($|@|_)")


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(rows: list[dict], prefixes: tuple[str, ...]) -> dict[str, tuple[list[int], list[float]]]:
    """name -> (steps, values) for every numeric metric matching a name or a prefix ending in '/',
    in the order of `prefixes`."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for prefix in prefixes:
        for row in rows:
            for key, value in row.items():
                matches = key.startswith(prefix) if prefix.endswith("/") else key == prefix
                undefined = key.startswith("eval/") and value == -1  # pycocotools' -1: no ground truth of that kind
                if matches and isinstance(value, (int, float)) and not isinstance(value, bool) and not undefined:
                    steps, values = out.setdefault(key, ([], []))
                    steps.append(row["step"])
                    values.append(float(value))
    return out


def is_rate(name: str, values: list[float]) -> bool:
    """A share (RATE's names) whose values all lie in [0, 1]."""
    return any(RATE.search(part) for part in name.split("/")) and all(0.0 <= v <= 1.0 for v in values)


def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def smoothing(steps: int) -> int:
    """The moving-average window for a run of `steps` logged steps: none below LONG_RUN, then
    about a twentieth of the run."""
    return 1 if steps < LONG_RUN else max(2, round(steps / 20))


def plot_panels(rows: list[dict], panels: dict[str, list[str]], path: Path, smooth: int = 0, title: str = "") -> Path:
    """Panels of named metrics over steps, at most three a row, each on its own scale (shares
    from 0 to 1). Training curves are smoothed (a moving average of `smooth` steps, 0: by the
    run's length) over their faint raw values; held-out `eval/` metrics and others logged on
    fewer than half the steps are points. Returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, len(panels))
    lines = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(5.6 * columns, 3.9 * lines), squeeze=False, layout="constrained")
    last = max((row["step"] for row in rows), default=1)
    for ax, (panel_title, names) in zip(axes.flat, panels.items(), strict=False):
        curves = series(rows, tuple(names))
        ax.set_xlim(0, last * 1.02)  # every panel over the whole run: held-out points line up with training
        if curves and all(is_rate(name, values) for name, (_, values) in curves.items()):
            ax.set_ylim(-0.03, 1.03)
        elif curves and all(name in LOG_SCALE for name in curves):
            ax.set_yscale("log")
        colors = plt.get_cmap("tab10" if len(curves) <= 10 else "tab20").colors
        notes = set()
        for i, (name, (steps, values)) in enumerate(curves.items()):
            color = colors[i % len(colors)]
            label = name.removeprefix("eval/") if panel_title.startswith("held-out") else name
            if name.startswith("eval/") or len(steps) < max(2, len(rows) / 2):  # held-out or sparse: points
                ax.plot(steps, values, marker="o", markersize=4, color=color, label=label)
                continue
            window = 1 if name in UNSMOOTHED else smooth or smoothing(len(steps))
            if window > 1:
                ax.plot(steps, values, color=color, alpha=RAW_ALPHA, linewidth=0.8)
                notes.add(f"mean of {window} steps, raw faint")
                values = moving_average(values, window)
            ax.plot(steps, values, color=color, linewidth=1.6, label=label)
        if len(curves) == 1 and label not in panel_title:  # no legend: the title names the one curve
            panel_title = f"{panel_title}: {label}"
        ax.set_title(panel_title + (f" ({'; '.join(sorted(notes))})" if notes else ""), fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(curves) > 1:  # one curve: the title names it
            ax.legend(
                fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(3, len(curves)), frameon=False
            )
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_kind(rows: list[dict]) -> str:
    """ "rl" or "sft": every RL step logs a reward, no SFT step does."""
    return "rl" if any("reward" in row for row in rows) else "sft"


def run_headline(run_dir: Path) -> dict[str, list[str]]:
    """The run's tasks (several for a mixture), each with the held-out metrics its summaries
    show first: eval.headline, else the task's own (Task.headline), from RUN/config.yaml."""
    path = run_dir / "config.yaml"
    config = yaml.safe_load(path.read_text()) if path.is_file() else {}
    mixture = config.get("mixture") or []
    tasks = [entry.get("name", "") for entry in mixture] or [config.get("task", {}).get("name", "")]
    chosen = config.get("eval", {}).get("headline") or []
    return {task: list(chosen) or task_headline(task) for task in tasks}


def task_headline(name: str) -> list[str]:
    from vlrl.config import ConfigError, TaskConfig
    from vlrl.eval.harness import headline_names
    from vlrl.tasking.registry import make_task

    try:
        return headline_names(make_task(TaskConfig(name=name)))
    except ConfigError:  # a task of a file that is gone: no headline but the reward
        return ["reward"]


def family_of(metric: str) -> str:
    """A held-out metric's family, drawn together: acc@t, accuracy/<type>, rewards, counts."""
    if "skipped" in metric or metric.startswith("count"):
        return "counts"
    if metric == "reward" or metric.startswith("reward/"):
        return "rewards"
    if "@" in metric:
        return metric.split("@")[0] + "@t"
    return metric.split("/")[0] + "/..." if "/" in metric else metric


def eval_panels(rows: list[dict], prefix: str, label: str) -> dict[str, list[str]]:
    """Every held-out metric under `prefix` (eval/ or eval/<task>/): a panel per family of two or
    more, the other rates together, any other metric alone."""
    curves = series(rows, (prefix,))
    families: dict[str, list[str]] = {}
    for name in curves:
        families.setdefault(family_of(name.removeprefix(prefix)), []).append(name)
    panels: dict[str, list[str]] = {}
    for family, names in families.items():
        if len(names) > 1 or family in ("rewards", "counts"):
            panels[f"{label}: {family}"] = names
        elif is_rate(names[0], curves[names[0]][1]):
            panels.setdefault(f"{label}: rates", []).extend(names)
        else:
            panels[f"{label}: {family}"] = names
    return panels


def rl_figures(rows: list[dict], run_dir: Path) -> dict[str, dict[str, list[str]]]:
    """Figure name -> its panels (title -> metrics), headline first."""
    headlines = run_headline(run_dir)
    tasks = list(headlines)
    mixture = len(tasks) > 1
    per_task = (lambda metric: [f"{t}/{metric}" for t in tasks]) if mixture else (lambda metric: [])
    headline_panels = {
        "training reward (sampled)": ["reward", *per_task("reward")],
        "training accuracy (the task's correctness)": ["accuracy", *per_task("accuracy")],
    }
    for task in tasks:
        prefix = f"eval/{task}/" if mixture else "eval/"
        for metric in headlines[task]:
            headline_panels[f"held-out {task + ' ' if mixture else ''}{metric}"] = [prefix + metric]
    rewards = [name for name in series(rows, ("reward/",)) if not name.startswith("reward_failures/")]
    figures = {
        "headline": headline_panels,
        "rewards": {
            "reward components": [n for n in rewards if n.removeprefix("reward/") not in SHAPING],
            "shaping terms": [n for n in rewards if n.removeprefix("reward/") in SHAPING],
            "spread within groups": ["reward_std", "frac_groups_zero_std"],
            "mean |advantage| (advantage_abs)": ["advantage_abs"],
            "correct by algo.accuracy_reward": ["correct_frac"],
        },
        "lengths": {
            "completion tokens": ["completion_length", "completion_length_max"],
            "truncated (hit max_new_tokens)": ["truncated_frac"],
        },
        "kl_entropy": {
            "KL to the reference": ["kl"],
            "entropy (nats per token)": ["entropy"],
            "clipped tokens": ["clip_low_frac", "clip_high_frac"],
            "engine vs trainer: KL": ["rollout/kl"],
            "engine vs trainer: |log-prob difference|": ["rollout/logp_diff", "rollout/logp_diff_max"],
        },
        "loss": {"loss": ["loss"], "gradient norm": ["grad_norm"], "learning rate": ["lr"]},
        "time": {
            "seconds per step": ["time_step", "time_rollout", "time_update", "time_eval"],
            "skipped": ["skipped_samples", "skipped_updates"],
        },
    }
    for task in tasks if mixture else [""]:
        prefix = f"eval/{task}/" if mixture else "eval/"
        name = f"eval_{task}" if mixture else "eval"
        figures[name] = eval_panels(rows, prefix, f"held-out {task}".strip())
    return figures


SHAPING = ("overlong", "thinking", "temporal", "length")  # terms added to the reward (rl.py)

SFT_FIGURES = {
    "loss": {
        "loss (target tokens)": ["loss"],
        "perplexity": ["perplexity"],
        "gradient norm": ["grad_norm"],
        "learning rate": ["lr"],
    }
}


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write RUN_DIR/plots/<kind>_<figure>.png (kind rl or sft) for each figure with something
    logged; returns the files, headline first."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        runs = sorted(str(m.parent) for m in run_dir.glob("*/metrics.jsonl"))
        if runs:  # a folder of runs: the demo's (sft/, rl/)
            raise FileNotFoundError(f"{run_dir} holds runs, not one: plot each of {', '.join(runs)}")
        raise FileNotFoundError(f"{metrics_path} not found: is {run_dir} a vlrl run directory?")
    rows = read_metrics(metrics_path)
    if not rows:  # stopped before its first step was logged
        raise FileNotFoundError(f"{metrics_path} holds no step yet: nothing to plot")
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    kind = run_kind(rows)
    figures = rl_figures(rows, run_dir) if kind == "rl" else SFT_FIGURES
    written = []
    for topic, panels in figures.items():
        logged = {title: names for title, names in panels.items() if series(rows, tuple(names))}
        if not logged:
            continue
        path = plot_panels(rows, logged, out_dir / f"{kind}_{topic}.png", title=f"{run_dir.name} ({kind}): {topic}")
        written.append(path)
    return written
