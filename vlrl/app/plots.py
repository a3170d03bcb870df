"""`vlrl plot RUN_DIR`: the curves of a run's metrics.jsonl as PNG files, one figure per topic."""

from __future__ import annotations

import json
from pathlib import Path

# The figures of each kind of run: topic -> metric names (a name ending in "/" is a prefix).
FIGURES: dict[str, dict[str, tuple[str, ...]]] = {
    "rl": {
        "rewards": ("reward", "reward/"),
        "accuracy": ("accuracy",),
        "lengths": ("completion_length", "completion_length_max", "truncated_frac"),
        "kl_entropy": ("kl", "entropy", "clip_low_frac", "clip_high_frac"),
        "loss": ("loss", "grad_norm"),
        "eval": ("eval/",),
    },
    "sft": {"loss": ("loss", "perplexity")},
}


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(rows: list[dict], prefixes: tuple[str, ...]) -> dict[str, tuple[list[int], list[float]]]:
    """name -> (steps, values) for every numeric metric matching a name or a prefix ending in '/'."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for row in rows:
        for key, value in row.items():
            matches = any(key.startswith(p) if p.endswith("/") else key == p for p in prefixes)
            if matches and isinstance(value, (int, float)):
                steps, values = out.setdefault(key, ([], []))
                steps.append(row["step"])
                values.append(float(value))
    return out


def plot_curves(rows: list[dict], prefixes: tuple[str, ...], title: str, path: Path) -> Path | None:
    """One figure of the metrics matching `prefixes` over steps; None when none was logged."""
    curves = series(rows, prefixes)
    return plot_panels(rows, {title: sorted(curves)}, path) if curves else None


def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot_panels(rows: list[dict], panels: dict[str, list[str]], path: Path, smooth: int = 1) -> Path:
    """Side-by-side panels of named metrics over steps (training curves smoothed by a moving
    average of `smooth` steps; held-out `eval/` curves as points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, names) in zip(axes[0], panels.items(), strict=True):
        curves = series(rows, tuple(names))
        for name in names:
            if name not in curves:
                continue
            steps, values = curves[name]
            if name.startswith("eval/") or len(steps) < 50:  # sparse: points, not a line
                ax.plot(steps, values, marker="o", label=name)
            else:
                ax.plot(
                    steps, moving_average(values, smooth), label=f"{name} (mean of {smooth})" if smooth > 1 else name
                )
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_kind(rows: list[dict]) -> str:
    """ "rl" or "sft": every RL step logs a reward, no SFT step does."""
    return "rl" if any("reward" in row for row in rows) else "sft"


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write RUN_DIR/plots/<kind>_<topic>.png (kind rl or sft) for each topic the run logged;
    returns the files."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        raise FileNotFoundError(f"{metrics_path} not found: is {run_dir} a vlrl run directory?")
    rows = read_metrics(metrics_path)
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    kind = run_kind(rows)
    written = []
    for topic, prefixes in FIGURES[kind].items():
        path = plot_curves(rows, prefixes, f"{run_dir.name} ({kind}): {topic}", out_dir / f"{kind}_{topic}.png")
        if path is not None:
            written.append(path)
    return written
