"""Experiment trackers: where a run's numbers go (`trainer.report_to`; metrics.jsonl always).

Each tracker is one class behind the `Tracker` protocol: per-step scalars, sample completions
as a table every `log_samples_every` steps, and the config as hyperparameters when it opens.
TensorBoard, W&B and MLflow are optional installs (`pip install 'vlrl[tensorboard]'` ...);
a run that asks for one that is missing stops before any model loads, saying what to install.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol
from urllib.parse import urlparse

from vlrl.config import ConfigError, dotted
from vlrl.tasking.scoring import failure_reason


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a null says "not a number" without breaking readers
    return value


class JsonlLog:
    """Append-only JSON lines, flushed per line so a killed run keeps what it logged. The file is
    created by the first line written."""

    def __init__(self, path: Path):
        self.path = path
        self._handle = None

    def write(self, record: dict[str, Any]) -> None:
        with self._naming_the_file():
            if self._handle is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._handle = open(self.path, "a", encoding="utf-8")
            self._handle.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
            self._handle.flush()

    def sync(self) -> None:
        """Onto the disk, not only to the OS: done before a checkpoint is committed, so that a
        power loss never leaves a checkpoint whose earlier steps' lines were lost (a resume
        keeps the lines up to its step and would go on with a gap)."""
        if self._handle is not None:
            with self._naming_the_file():
                os.fsync(self._handle.fileno())

    @contextlib.contextmanager
    def _naming_the_file(self) -> Iterator[None]:
        """An OSError raised inside names this file (a full disk's ENOSPC names none)."""
        try:
            yield
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(self.path)) from err

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):  # only a line a failed write left unflushed (it was said)
                handle.close()


def drop_steps_after(path: Path, step: int) -> list[str]:
    """Forget lines logged after `step` (a resumed run logs those steps again) and lines that are
    not whole JSON records (a run killed mid-write, or a full disk, leaves a torn last line).
    Returns one "file:line: ..." report per torn line dropped, and one of the steps forgotten."""
    if not path.is_file():
        return []
    kept, reports, later = [], [], set()
    # JSON lines end at "\n" only: str.splitlines() would also split at characters that JSON
    # allows raw inside strings (U+2028, \x1c, ...).
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            reports.append(
                f"{path}:{lineno}: dropped a line that is not a whole JSON record (torn by a stop mid-write?)"
            )
            continue
        if record.get("step", 0) <= step:
            kept.append(line)
        else:
            later.add(record["step"])
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)  # a stop during the repair leaves the old file, never half of it
    if later:  # a stop after them, before their checkpoint: trained and logged again
        steps = f"step {min(later)}" if len(later) == 1 else f"steps {min(later)}-{max(later)}"
        reports.append(f"{path}: dropped the lines of {steps}, which no checkpoint holds (they are trained again)")
    return reports


@dataclass
class TrackedRun:
    """What a tracker needs to know about the run it reports."""

    dir: Path
    section: str  # "trainer" or "sft": the config section whose report_to named the tracker
    config: dict[str, Any]  # the whole config, as config.yaml holds it
    resume_step: int  # 0: a fresh run; otherwise the checkpoint's step, after which steps are logged again

    @property
    def name(self) -> str:
        return self.dir.name


class Tracker(Protocol):
    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def log_samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self, failed: bool = False) -> None:
        """The run ended: `failed` when an error ended it, which a tracker with run states shows."""


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics line, without its step."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def flatten(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config by dotted key, lists as JSON text: hyperparameter tables hold only scalars."""
    return {k: json.dumps(v) if isinstance(v, (list, tuple, dict)) else v for k, v in dotted(dict(config)).items()}


def sample_table(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns id, prompt and target (where the rows have them), completion, reward and one per
    reward component, and the rows under them."""
    components = list(dict.fromkeys(name for row in rows for name in row.get("rewards", {})))
    texts = [key for key in ("prompt", "target") if any(key in row for row in rows)]
    columns = ["id", *texts, "completion", "reward", *components]
    data = [
        [
            str(row.get("id")),
            *(row.get(key) if isinstance(row.get(key), str) else json.dumps(row.get(key)) for key in texts),
            row.get("completion", ""),
            row.get("reward"),
            *(row.get("rewards", {}).get(c) for c in components),
        ]
        for row in rows
    ]
    return columns, data


# tracker -> (module to import, package to install)
PACKAGES = {
    "tensorboard": ("torch.utils.tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}


def require(tracker: str, section: str) -> ModuleType:
    """The tracker's client module, or a ConfigError that says what to install."""
    module, package = PACKAGES[tracker]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(
            f"config: {section}.report_to names {tracker!r}, but the {package} package is not installed ({err}); "
            f"install it with `pip install 'vlrl[{tracker}]'` (or `pip install {package}`), "
            f"or drop {tracker} from {section}.report_to"
        ) from err


def previous_id(run: TrackedRun, tracker: str) -> str | None:
    """The tracker's run id that the run directory remembers, when resuming: a resumed vlrl
    run continues the same tracked run."""
    path = run.dir / "trackers.json"
    return json.loads(path.read_text()).get(tracker) if run.resume_step and path.is_file() else None


def remember_id(run: TrackedRun, tracker: str, run_id: str) -> None:
    path = run.dir / "trackers.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**known, tracker: run_id}, indent=1) + "\n")


class JsonlTracker:
    """RUN/metrics.jsonl (one line per step) and RUN/samples.jsonl (one line per completion):
    always on and flushed per line."""

    def __init__(self, run: TrackedRun):
        # the Run has cut both files back to the resumed step, and reported any torn line
        self.metrics = JsonlLog(run.dir / "metrics.jsonl")
        self.samples = JsonlLog(run.dir / "samples.jsonl")

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.metrics.write(dict(metrics))

    def log_samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        for row in rows:
            self.samples.write({"step": step, **row})

    def sync(self) -> None:
        self.metrics.sync()
        self.samples.sync()

    def close(self, failed: bool = False) -> None:
        self.metrics.close()
        self.samples.close()


class TensorBoardTracker:
    """Event files in RUN/tensorboard (`tensorboard --logdir RUN`): scalars, the samples as a
    text table, the config as HParams and as text. A resumed run purges the events logged
    after its checkpoint, so each step is shown once."""

    def __init__(self, run: TrackedRun):
        writer_module = require("tensorboard", run.section)
        from torch.utils.tensorboard.summary import hparams

        self.writer = writer_module.SummaryWriter(
            str(run.dir / "tensorboard"), purge_step=run.resume_step + 1 if run.resume_step else None
        )
        if not run.resume_step:
            flat = {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in flatten(run.config).items()}
            for summary in hparams(flat, {}):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in flatten(run.config).items()), 0)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in scalars(metrics).items():
            self.writer.add_scalar(key, value, step)

    def log_samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, data = sample_table(rows)

        def cell(value: Any) -> str:
            text = f"{value:.4f}" if isinstance(value, float) else str(value)
            return text.replace("|", "\\|").replace("\n", "<br>")

        lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in data]
        self.writer.add_text("samples", "\n".join(lines), step)

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run named after the run directory, its files under RUN/wandb; project from
    WANDB_PROJECT (default "vlrl"), WANDB_MODE=offline to sync later. Samples are a
    wandb.Table per logged step."""

    def __init__(self, run: TrackedRun):
        self.wandb = require("wandb", run.section)
        try:
            self.run = self.wandb.init(
                project=os.environ.get("WANDB_PROJECT", "vlrl"),
                name=run.name,
                id=previous_id(run, "wandb"),  # None: W&B picks a new one
                resume="allow",
                dir=str(run.dir),
                config=run.config,
            )
        except Exception as err:  # no API key, no network, a bad WANDB_* setting: said before the run starts
            raise ConfigError(
                f"config: {run.section}.report_to wandb: W&B did not start ({failure_reason(err)}); `wandb login`, "
                "or WANDB_MODE=offline to sync later"
            ) from err
        remember_id(run, "wandb", self.run.id)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(scalars(metrics), step=step)

    def log_samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, data = sample_table(rows)
        self.run.log({"samples": self.wandb.Table(columns=columns, data=data)}, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)  # W&B shows a run that exited non-zero as failed


def mlflow_key(name: str, file_store: bool = False) -> str:
    """MLflow accepts letters, digits and _ - . / and spaces in names: acc@0.5 -> acc_0.5. Its file
    store keeps a metric as a file at its name's path, so `reward` and `reward/format` cannot both
    be stored there: a file store is sent `reward.format`."""
    key = re.sub(r"[^\w./\- ]", "_", name)
    return key.replace("/", ".") if file_store else key


def is_file_store(uri: str) -> bool:
    """Whether MLflow's tracking URI names its file store: a `file:` URI or a plain path (not the
    bare names of a Databricks workspace, which have no scheme either)."""
    scheme = urlparse(uri).scheme
    return scheme == "file" or (scheme == "" and uri not in ("databricks", "databricks-uc", "uc"))


class MLflowTracker:
    """An MLflow run named after the run directory, in the experiment MLFLOW_EXPERIMENT_NAME
    (default "vlrl") of the tracking store MLFLOW_TRACKING_URI names. The config is logged as
    params (dotted keys), the samples as a table artifact per logged step."""

    def __init__(self, run: TrackedRun):
        mlflow = require("mlflow", run.section)
        from mlflow.entities import Metric, Param

        self.Metric = Metric
        self.file_store = is_file_store(mlflow.get_tracking_uri())
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "vlrl")
        try:
            self.client = mlflow.MlflowClient()
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
            previous = previous_id(run, "mlflow")
            if previous:
                self.run_id = previous
                self.client.update_run(previous, status="RUNNING")
            else:
                self.run_id = self.client.create_run(experiment_id, run_name=run.name).info.run_id
                remember_id(run, "mlflow", self.run_id)
                params = [Param(mlflow_key(k), str(v)[:6000]) for k, v in flatten(run.config).items()]
                self.client.log_batch(self.run_id, params=params)
        except Exception as err:  # a store that does not open, or is not there: said before the run starts
            raise ConfigError(
                f"config: {run.section}.report_to mlflow: MLflow's tracking store {mlflow.get_tracking_uri()!r} "
                f"did not open ({failure_reason(err)}); set MLFLOW_TRACKING_URI to your tracking server "
                "(http://HOST:PORT), install the full `mlflow` package for its local sqlite store, or set "
                "MLFLOW_ALLOW_FILE_STORE=true for a file store (file:PATH)"
            ) from err

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        batch = [self.Metric(mlflow_key(k, self.file_store), v, now, step) for k, v in scalars(metrics).items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def log_samples(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        columns, data = sample_table(rows)
        table = {column: [row[i] for row in data] for i, column in enumerate(columns)}
        self.client.log_table(self.run_id, table, f"samples/step-{step:07d}.json")

    def close(self, failed: bool = False) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


TRACKERS: dict[str, type] = {
    "jsonl": JsonlTracker,
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "mlflow": MLflowTracker,
}


def check_trackers(names: Sequence[str], section: str) -> None:
    """Fail now, naming what to install, rather than after the model has loaded."""
    for name in names:
        if name in PACKAGES:
            require(name, section)


def open_trackers(names: Sequence[str], run: TrackedRun) -> dict[str, Tracker]:
    """jsonl first and always, then the others named, once each."""
    return {name: TRACKERS[name](run) for name in dict.fromkeys(["jsonl", *names])}
