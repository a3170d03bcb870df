"""`vlrl plot RUN_DIR`: the curves of a run's metrics.jsonl as PNG files, one figure per topic."""

from __future__ import annotations

import json
from pathlib import Path

FIGURES: dict[str, tuple[str, ...]] = {
    "rewards": ("reward", "reward/"),
    "accuracy": ("accuracy",),
    "lengths": ("completion_length", "completion_length_max", "truncated_frac"),
    "kl_entropy": ("kl", "entropy", "clip_low_frac", "clip_high_frac"),
    "eval": ("eval/",),
    "sft": ("loss", "perplexity"),
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


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write RUN_DIR/plots/<topic>.png for each topic the run logged; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        raise FileNotFoundError(f"{metrics_path} not found: is {run_dir} a vlrl run directory?")
    rows = read_metrics(metrics_path)
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    written = []
    for topic, prefixes in FIGURES.items():
        curves = series(rows, prefixes)
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, (steps, values) in sorted(curves.items()):
            ax.plot(steps, values, marker="." if len(steps) < 50 else None, label=name)
        ax.set_xlabel("step")
        ax.set_title(f"{run_dir.name}: {topic}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{topic}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
