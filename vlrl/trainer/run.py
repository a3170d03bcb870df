"""What RL and SFT runs share: run directory, model and optimizer, resume, checkpoints, logs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from rich.console import Console

from vlrl.config import Config, ConfigError, TrainerConfig, to_dict
from vlrl.datasets import Source
from vlrl.modeling import checkpoint_path, load_model, load_processor
from vlrl.trainer.checkpoint import list_checkpoints, load_trainer_state, restore_rng, rng_state, save_checkpoint
from vlrl.trainer.loader import MixtureStream
from vlrl.trainer.logs import JsonlLog, drop_steps_after


@dataclass
class RunResult:
    run_dir: Path
    metrics: Path
    checkpoint: Path | None
    steps_done: int


def lr_factor(step: int, t: TrainerConfig) -> float:
    """Multiplier of t.lr at optimizer step `step` (0-based): warmup, then the schedule."""
    if step < t.warmup_steps:
        return (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
    if t.lr_schedule == "linear":
        return max(0.0, 1.0 - progress)
    if t.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return 1.0


def resume_checkpoint(t: TrainerConfig, section: str) -> Path | None:
    checkpoints = Path(t.output_dir) / "checkpoints"
    if t.resume == "":
        if list_checkpoints(checkpoints):
            raise ConfigError(
                f"config: {section}.output_dir {t.output_dir} already holds checkpoints; "
                f"set {section}.resume=auto to continue that run, or choose another output_dir"
            )
        return None
    if t.resume == "auto":
        found = list_checkpoints(checkpoints)
        return found[-1] if found else None
    path = Path(t.resume)
    load_trainer_state(path)  # fails early, naming the path, if it is not a complete checkpoint
    return path


class Run:
    """A training run in `t.output_dir`: the policy, its optimizer and schedule, the data stream
    over the run's tasks,
    the sampling generator and the logs, restored from the latest checkpoint when resuming."""

    def __init__(self, cfg: Config, t: TrainerConfig, section: str, sources: list[Source], console: Console):
        self.t = t
        self.console = console
        self.dir = Path(t.output_dir)
        resume_from = resume_checkpoint(t, section)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        errors = [err for source in sources for err in source.train.errors]
        if errors:
            (self.dir / "skipped_records.txt").write_text("".join(f"{err}\n" for err in errors))

        torch.manual_seed(t.seed)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.base_path = checkpoint_path(cfg.model)
        self.processor = load_processor(cfg.model, self.base_path)
        # Dropout stays off: the first ratio of an update is exactly 1, and rollouts match updates.
        self.model = load_model(cfg.model, str(resume_from) if resume_from else None, self.device).eval()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.params = trainable
        self.optimizer = torch.optim.AdamW(trainable, lr=t.lr, weight_decay=t.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, t))
        self.stream = MixtureStream([len(s.train.samples) for s in sources], [s.weight for s in sources], t.seed)
        self.generator = torch.Generator(device=self.device).manual_seed(t.seed)
        self.step = 0
        self.consecutive_nonfinite = 0
        self.skipped_updates = 0
        self.checkpoint = resume_from
        if resume_from:
            state = load_trainer_state(resume_from)
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.stream.load_state_dict(state["stream"])
            restore_rng(state["rng"], self.generator)
            self.step = state["step"]
            self.consecutive_nonfinite = state["consecutive_nonfinite"]
            self.skipped_updates = state["skipped_updates"]
            console.print(f"resumed from {resume_from} (step {self.step})")
        self.metrics_path = self.dir / "metrics.jsonl"
        drop_steps_after(self.metrics_path, self.step)
        drop_steps_after(self.dir / "samples.jsonl", self.step)
        self.metrics = JsonlLog(self.metrics_path)
        self.samples = JsonlLog(self.dir / "samples.jsonl")

    def optimizer_step(self, loss_is_finite: bool) -> tuple[float, bool]:
        """Clip, then step unless the loss or the gradient is not finite. Returns (grad_norm, applied)."""
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.t.max_grad_norm))
        applied = loss_is_finite and math.isfinite(grad_norm)
        if applied:
            self.optimizer.step()
            self.scheduler.step()  # the schedule counts optimizer steps taken
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, applied

    def end_step(self, step: int, skipped: int) -> None:
        """Count skipped optimizer steps, stop after too many steps in a row had one, checkpoint on schedule."""
        self.step = step
        self.skipped_updates += skipped
        self.consecutive_nonfinite = self.consecutive_nonfinite + 1 if skipped else 0
        if self.consecutive_nonfinite >= self.t.max_consecutive_nonfinite:
            self.close()
            raise RuntimeError(
                f"stopped at step {step}: {self.consecutive_nonfinite} consecutive updates had a non-finite loss or "
                f"gradient (max_consecutive_nonfinite={self.t.max_consecutive_nonfinite}); no NaN weights were "
                f"written; last good checkpoint: {self.checkpoint}"
            )
        if step % self.t.save_every == 0 or step == self.t.steps:
            state = {
                "step": step,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "stream": self.stream.state_dict(),
                "rng": rng_state(self.generator),
                "consecutive_nonfinite": self.consecutive_nonfinite,
                "skipped_updates": self.skipped_updates,
            }
            self.checkpoint = save_checkpoint(
                self.dir / "checkpoints", step, self.model, self.processor, state, self.t.keep_last
            )

    def close(self) -> RunResult:
        self.metrics.close()
        self.samples.close()
        return RunResult(self.dir, self.metrics_path, self.checkpoint, self.step)
