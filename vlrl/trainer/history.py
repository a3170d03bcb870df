"""What a resumed run changed: settings and data compared with the checkpoint it resumes.

A checkpoint keeps the config its steps ran with and a fingerprint of each training data
file. Rerunning in the run directory with a changed setting applies the new value from the
next step, and the run records it in `config_history.jsonl` ({"step": first step it applies
to, "changes": {key: {"from": old, "to": new}}}); a setting that a resume cannot honour is
refused by name. A data file whose contents changed is warned about and recorded the same way;
another model at model.path (`model_fingerprint`) is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from vlrl.config import Config, ConfigError, absolute_if_local, to_dict
from vlrl.data.tables import table_files

# Sections each command reads: config.yaml states these and nothing else. An SFT run also keeps
# rollout.* and eval.*: it does not sample, but `vlrl eval --model RUN/checkpoints/...` evaluates
# its checkpoints with them (the generation length and image budget the user configured).
USED_SECTIONS = {
    "trainer": ("model", "data", "task", "mixture", "rollout", "algo", "trainer", "eval"),
    "sft": ("model", "data", "task", "mixture", "sft", "rollout", "eval"),
}
HISTORY_FILE = "config_history.jsonl"


def settings_at(run_dir: Path, step: int) -> dict[str, Any]:
    """The settings that the run in `run_dir` changed after its checkpoint of `step`, as that
    checkpoint was trained: dotted key -> its value then (config.yaml states the latest). Lines of
    config_history.jsonl that do not read are passed over."""
    path = run_dir / HISTORY_FILE
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
    before: dict[str, Any] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int) or entry["step"] <= step:
            continue
        changes = entry.get("changes")
        for key, change in changes.items() if isinstance(changes, dict) else ():
            if isinstance(change, dict) and "from" in change:
                before.setdefault(key, change["from"])  # the first change after the step: its value then
    return before


def used_config(cfg: Config, section: str) -> dict[str, Any]:
    """The sections a run reads, as it recorded them; a local model.path absolute, so that a
    resume from another directory, or with another spelling of the path, is the same setting."""
    tree = to_dict(cfg)
    tree["model"]["path"] = absolute_if_local(cfg.model.path)
    return {key: tree[key] for key in USED_SECTIONS[section]}


def recorded_config(cfg: Config, section: str) -> dict[str, Any]:
    """`used_config` as a checkpoint records it (JSON values: paths and the like as text)."""
    return json.loads(json.dumps(used_config(cfg, section), default=str))


def same_setting(key: str, before: Any, after: Any) -> bool:
    """Whether a resumed run's value is the checkpoint's (model.path: the same directory however
    spelled, for a checkpoint that recorded it relative to where it started)."""
    if before == after:
        return True
    if key != "model.path" or not (isinstance(before, str) and isinstance(after, str)):
        return False
    return Path(before).exists() and Path(after).exists() and Path(before).resolve() == Path(after).resolve()


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "m": [{"n": "x"}]} -> {"a.b": 1, "m.length": 1, "m[0].n": "x"}: a list of
    mappings by entry, with its length (a mixture that lost an entry is a change); other lists
    stay values."""
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(tree, list) and tree and all(isinstance(item, dict) for item in tree):
        out = {f"{prefix}.length": len(tree)}
        for i, item in enumerate(tree):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: tree}


# Why a resumed run keeps the checkpoint's LoRA settings: PEFT reads them from its adapter_config.json
LORA_FIXED = {
    "r": "its weights are full, or its adapters of that rank: the rank is the checkpoint's (0: no adapters)",
    "alpha": "its adapters keep the scale (alpha / r) they were saved with",
    "dropout": "its adapters keep the dropout they were saved with",
    "target_modules": "its adapters are on the layers it names",
    "target_parameters": "its adapters are on the parameters it names",
}


def fixed_on_resume(key: str, section: str) -> str | None:
    """Why a resumed run cannot take a new value for `key` (None: it can, from the next step)."""
    if key == "model.path":
        return "the weights come from the checkpoint"
    if key == "model.lora.dropout" and section == "trainer":
        return None  # RL runs the policy without dropout: the setting changes nothing there
    if key.startswith("model.lora."):
        return LORA_FIXED.get(key.removeprefix("model.lora."), "the checkpoint's adapters are as they were saved")
    if key == "model.freeze_vision":
        return "the optimizer's state holds the weights trained so far"
    if key == "task.name" or key == "mixture.length" or (key.startswith("mixture[") and key.endswith("].name")):
        return "the data stream and the rewards belong to the old tasks"
    if key == f"{section}.seed":
        return "the random generators are restored from the checkpoint"
    if key == f"{section}.master_weights":
        return "the optimizer's weights are restored from the checkpoint"
    if key == f"{section}.parallel":
        return "the optimizer's state is saved in that strategy's layout"
    return None


IGNORED = ("output_dir", "resume", "progress")  # where and how a run is shown, not what it computes


def check_command(saved: dict[str, Any], section: str, checkpoint: Path) -> None:
    """Refuses a checkpoint the other command wrote (its config, `saved`, has no `section`)."""
    if section not in saved:
        other = "vlrl sft" if section == "trainer" else "vlrl train"
        raise ConfigError(
            f"config: {checkpoint} was written by `{other}`, so {section}.resume cannot continue it; "
            f"start a new run from its weights in another {section}.output_dir with model.path={checkpoint}"
        )


def resume_changes(new: dict[str, Any], saved: dict[str, Any], section: str, checkpoint: Path) -> dict[str, dict]:
    """The settings that differ from the checkpoint's, {key: {"from", "to"}}; raises ConfigError
    naming the first one a resume cannot honour."""
    check_command(saved, section, checkpoint)
    before, after = flatten(saved), flatten(new)
    for one, other in ((before, after), (after, before)):  # [] on one side, entries on the other: 0 entries
        for key in [k for k, v in one.items() if v == [] and f"{k}.length" in other]:
            del one[key]
            one[f"{key}.length"] = 0
    before.setdefault(f"{section}.parallel", "replicated")  # checkpoints from before vlrl/parallel/
    # A setting newer than the checkpoint: its steps ran as the setting's default runs (a new key
    # keeps the old behaviour by default), so a resume keeping the default changes nothing.
    defaults = flatten(recorded_config(Config(), section))
    for key in after.keys() - before.keys():
        if key in defaults:
            before[key] = defaults[key]
    ignored = {f"{section}.{key}" for key in IGNORED}
    changes = {}
    for key in sorted(set(before) | set(after)):
        if key in ignored or same_setting(key, before.get(key), after.get(key)):
            continue
        reason = fixed_on_resume(key, section)
        if reason:
            raise ConfigError(
                f"config: {key} is {after.get(key)!r}, but {checkpoint} was trained with {before.get(key)!r} and a "
                f"resumed run cannot change it ({reason}); set it back, or start a new run in another "
                f"{section}.output_dir"
            )
        changes[key] = {"from": before.get(key), "to": after.get(key)}
    return changes


def file_digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


WEIGHT_FILES = ("*.safetensors", "*.bin")
MODEL_CONFIGS = ("config.json", "adapter_config.json")


def model_fingerprint(path: str | Path) -> dict[str, Any]:
    """What tells the model at `path` (model.path, the base a resumed run reloads its processor,
    reference and adapters' base from) apart from another put there: its config (less the
    transformers version that wrote it), each weight file's size, and a digest of a few windows
    of each file's bytes (`sampled_digest`): a fine-tune of the same architecture has the same
    config, sizes and safetensors header, but not the same weights."""
    folder = Path(path)
    configs = {}
    for name in MODEL_CONFIGS:
        if (folder / name).is_file():
            config = json.loads((folder / name).read_text(encoding="utf-8"))
            if isinstance(config, dict):
                config.pop("transformers_version", None)
            configs[name] = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    files = [p for pattern in WEIGHT_FILES for p in sorted(folder.glob(pattern))]
    return {
        "configs": configs,
        "weights": {p.name: p.stat().st_size for p in files},
        "weight_samples": {p.name: sampled_digest(p) for p in files},
    }


def same_model(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether `now` fingerprints the model `saved` was taken of, on what `saved` holds (a
    checkpoint written before weight_samples compares configs and sizes)."""
    return all(now.get(key) == value for key, value in saved.items())


def sampled_digest(path: Path, windows: int = 16, size: int = 1 << 16) -> str:
    """sha256 of `windows` evenly spaced `size`-byte windows of a file (all of it when it is
    smaller): 1 MiB read of a 4 GB shard, where every weight of a fine-tune differs."""
    length = path.stat().st_size
    if length <= windows * size:
        return file_digest(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for i in range(windows):
            handle.seek((length - size) * i // (windows - 1))
            digest.update(handle.read(size))
    return digest.hexdigest()


def data_fingerprints(paths: list[str]) -> list[dict[str, str]]:
    return [{"path": str(path), "sha256": file_digest(path)} for path in paths]


def split_fingerprints(splits: list[tuple[str, str]]) -> list[dict[str, str]]:
    """data_fingerprints of training splits, (spec, the task's default split) each: a file's
    sha256, or a table spec's (a dataset folder, DIR@split, a glob) over its files in order."""
    out = []
    for spec, default_split in splits:
        if Path(spec).is_file():
            out.append({"path": spec, "sha256": file_digest(spec)})
            continue
        digest = hashlib.sha256()
        for file in table_files(spec, default_split):
            digest.update(f"{file.name}\0{file_digest(file)}\0".encode())
        out.append({"path": spec, "sha256": digest.hexdigest()})
    return out


def data_changes(new: list[dict[str, str]], saved: list[dict[str, str]]) -> dict[str, dict]:
    """Training data files whose contents differ from the checkpoint's, by path."""
    return {
        after["path"]: {"from": before["sha256"], "to": after["sha256"]}
        for before, after in zip(saved, new, strict=False)
        if before["sha256"] != after["sha256"]
    }


def file_changes(new: list[dict[str, str]], saved: list[dict[str, str]]) -> dict[str, dict]:
    """Files, by path, whose contents differ from the checkpoint's (a file only one side has is
    a changed setting, which resume_changes reports)."""
    before = {entry["path"]: entry["sha256"] for entry in saved}
    return {
        entry["path"]: {"from": before[entry["path"]], "to": entry["sha256"]}
        for entry in new
        if entry["path"] in before and before[entry["path"]] != entry["sha256"]
    }
