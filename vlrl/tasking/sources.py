"""A task's split as the config names it (synthetic data written when asked, bad records reported),
and the tasks a run trains on.

The data is the task's own format (json, jsonl, COCO...) or a published table (parquet /
arrow as downloaded, vlrl.data.tables), whose columns `data.columns` maps to the task's record keys.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.markup import escape

from vlrl.config import Config, ConfigError
from vlrl.data.records import MediaRules, Split
from vlrl.data.sample import Sample
from vlrl.data.tables import is_table_spec, load_table_split, spec_exists
from vlrl.models.families import model_family
from vlrl.models.loading import frame_spec
from vlrl.tasking.benchmark import Benchmark
from vlrl.tasking.registry import entry_task
from vlrl.tasking.task import Task

SYNTHETIC_SEED_OFFSET = {"train": 0, "eval": 1}  # train and eval never share a scene


def media_rules(cfg: Config) -> MediaRules:
    return MediaRules(cfg.data.allow_outside_root, cfg.data.max_image_pixels)


def load_task_split(
    task: Task,
    cfg: Config,
    which: Literal["train", "eval"],
    console: Console | None = None,
    require_images: bool = True,
    path: str | None = None,
    columns: dict[str, str] | None = None,
    key: str | None = None,
    columns_key: str = "data.columns",
) -> Split:
    """The split at `path` (default: data.train or data.eval). `key` is the config key that named
    a given path (None: the command line gave it as an argument, not as a key): synthetic data
    is written only at a key's path, and only where `Config.writes_synthetic` allows it.
    `columns_key` is the config key that gave `columns` (a mixture's entry: mixture[i].columns)."""
    if path is None:
        path, key = (cfg.data.train if which == "train" else cfg.data.eval), f"data.{which}"
    if not path:
        raise ConfigError(f"config: data.{which} is empty; give the path of a {task.name} data file")
    if key is not None and cfg.writes_synthetic(key) and cfg.data.image_root:
        raise ConfigError(
            f"config: data.synthetic writes a split's images beside its data file, but data.image_root is "
            f"{cfg.data.image_root} (set {cfg.where('data.image_root')}), where its records would be looked for: "
            "set data.image_root= (empty) for synthetic data"
        )
    size = cfg.data.synthetic_train_size if which == "train" else cfg.data.synthetic_eval_size
    synthetic = key is not None and cfg.writes_synthetic(key)
    existed = spec_exists(path)
    if not existed:
        if not synthetic:
            raise ConfigError(missing_data(task, cfg, path, key, which))
        write_synthetic(task, path, size, cfg.data.synthetic_seed + SYNTHETIC_SEED_OFFSET[which])
        if console:
            console.print(f"wrote synthetic {task.name} {which} data: {path} ({size} records)")
    split = read_split(task, path, cfg, require_images, cfg.data.columns if columns is None else columns, columns_key)
    cut = cfg.data.limit and len(split.samples) >= cfg.data.limit  # data.limit stopped reading: its size unknown
    if synthetic and existed and console and not cut and (held := len(split.samples) + len(split.errors)) != size:
        console.print(
            f"[yellow]{escape(path)} exists, so data.synthetic read it: {held} records, not data.synthetic_{which}_size={size} "
            "(delete it to write a new one)[/yellow]",
            highlight=False,
        )
    if split.errors and console:
        console.print(
            f"[yellow]skipped {len(split.errors)} bad record(s) in {path}; {len(split.samples)} sample(s) read[/yellow]"
        )
        for err in split.errors[:5]:
            console.print(f"  {err}", markup=False, highlight=False)
        if len(split.errors) > 5:
            console.print(
                f"  ... and {len(split.errors) - 5} more: vlrl data validate --task {task.name} {path} lists them all",
                markup=False,
                highlight=False,
            )
    if not split.samples:
        named = f"{key}: " if key else ""
        cause = common_cause(split, path, columns_key)
        raise ConfigError(f"{named}no usable records in {path} ({len(split.errors)} skipped){cause}")
    return split


def common_cause(split: Split, path: str, columns_key: str) -> str:
    """What to try when every record of a split failed alike ("": they did not): every image
    missing, or one key missing from every record."""
    messages = {err.message.split(":")[0] if err.message.startswith("image not found") else err.message
                for err in split.errors}  # fmt: skip
    if len(split.errors) < 2 or len(messages) != 1:
        return ""
    (message,) = messages
    if message == "image not found":
        return (
            "; every image is missing: a record's relative path is read from the data file's folder, or from "
            "data.image_root (--image-root) where set"
        )
    missing = re.match(r"missing key '([^']+)'", message)
    if missing and is_table_spec(path):
        key = missing.group(1)
        return f"; every row lacks {key!r}: give the table's column that holds it with {columns_key}.{key}=COLUMN"
    return ""


def write_synthetic(task: Task, path: str | Path, size: int, seed: int) -> None:
    """`task.synthesize(path, size, seed)` into a private folder beside `path`, then moved into
    place file by file, the data file (or a table's folder) last: nothing is at its path until
    every image it names is. Two runs that find the same data missing (two seeds of a demo
    started together) both write it, and one of them read images the other was rewriting: 3 of
    8,192 counting scenes skipped as unreadable, and that seed's numbers moved. The seed decides
    every byte, so whichever writer's file lands last is the same file. A synthesis stopped
    halfway leaves nothing behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".synthetic-", dir=path.parent) as private:
        made = Path(private) / path.name
        try:
            task.synthesize(made, size, seed)
        except ValueError as err:  # bad options, or a name of no data format (it names the file asked for)
            raise ConfigError(f"synthetic {task.name} data: {str(err).replace(str(made), str(path))}") from err
        media = [f for f in Path(private).rglob("*") if f.is_file() and made not in (f, *f.parents)]
        for file in sorted(media):
            target = path.parent / file.relative_to(private)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(file, target)
        if made.is_dir():  # a table's folder: moved whole; another writer's already there is the same
            with contextlib.suppress(OSError):
                os.rename(made, path)
        else:
            os.replace(made, path)


def missing_data(task: Task, cfg: Config, path: str, key: str | None, which: str = "train") -> str:
    """Why `path` is not there and how to make it: the task's converter (of its held-out split
    for `which` "eval"); and where data.synthetic is set, that synthetic data is refused at a path
    given apart from it (a typo must not fill a folder with scenes)."""
    text = f"config: {key}: {path} (set {cfg.where(key)}) does not exist" if key else f"{path} does not exist"
    split = "val" if which == "eval" else "train"
    if task.data_source:
        source = task.data_source.format(path=path, split=split)
    elif isinstance(task, Benchmark):  # vlrl never downloads one
        source = f"the benchmark {task.dataset}, to download first (docs/benchmarks.md says what it reads)"
    else:
        source = "docs/tasks.md describes its data"
    if key and cfg.data.synthetic:  # most likely a typo in the path to one's own data: both ways out
        return (
            f"{text}. Synthetic data is written only at the paths stated where data.synthetic is set "
            f"({cfg.where('data.synthetic')}), never at a path given elsewhere: check the path. Task {task.name}'s "
            f"data: {source}; to write synthetic data there on purpose: vlrl data synth --task {task.name} --out {path}"
        )
    return f"{text}. Task {task.name}'s data: {source}; vlrl data synth --task {task.name} writes synthetic data"


def held_out_inherited(cfg: Config) -> str | None:
    """The mistake of training on data of one's own from a demo config: its synthetic held-out
    split comes along (the held-out metrics would be the demo's). None when it is not made."""
    if cfg.mixture or not cfg.data.eval or not cfg.writes_synthetic("data.eval") or cfg.writes_synthetic("data.train"):
        return None
    return (
        f"data.train is {cfg.data.train} (set {cfg.where('data.train')}) but data.eval is {cfg.data.eval}, the "
        f"synthetic held-out split set {cfg.where('data.eval')}: held-out metrics would measure its synthetic data, "
        "not yours. Set data.eval to a held-out file of your data"
    )


def check_held_out(cfg: Config, console: Console, evaluates: bool, tasks: list[Task]) -> None:
    """`held_out_inherited`, refused when the run evaluates on it (eval.every > 0), else warned
    about (config.yaml keeps it: `vlrl eval --model RUN/checkpoints/...` would evaluate on it);
    and a held-out file that is not there, which a run that does not evaluate never reads, said
    now rather than at the first `vlrl eval` of its checkpoints."""
    problem = held_out_inherited(cfg)
    if problem and evaluates:
        raise ConfigError(f"config: {problem} (or eval.every=0)")
    problems = [problem] if problem else []
    key = cfg.task_key("eval")
    if not evaluates and not cfg.writes_synthetic(key):
        problems += [
            f"{missing_data(task, cfg, entry.eval, key, 'eval')}. This run does not read it (it evaluates nothing "
            "during training); `vlrl eval` of its checkpoints does"
            for task, entry in zip(tasks, cfg.tasks(), strict=True)
            if entry.eval and not spec_exists(entry.eval)
        ]
    for text in problems:
        console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False)


def read_split(
    task: Task, path: str, cfg: Config, require_images: bool, columns: dict[str, str], columns_key: str = "data.columns"
) -> Split:
    """The split at `path`, a file of the task's own format or a published table (`columns`:
    the task's record keys -> the table's columns), by data.strict, data.limit and the media rules."""
    d = cfg.data
    if not (task.columns or is_table_spec(path)):
        if require_images and d.image_root and not Path(d.image_root).is_dir():  # else every record: "not found"
            raise ConfigError(
                f"config: data.image_root {d.image_root} is not a folder: the records' media paths are read from there"
            )
        if columns:
            raise ConfigError(f"config: {columns_key} maps table columns, but {path} is not a parquet / arrow table")
        return task.load(path, frame_spec(cfg.model), d.image_root, d.strict, d.limit, require_images, media_rules(cfg))
    if type(task).build_sample is Task.build_sample and type(task).build_samples is Task.build_samples:
        raise ConfigError(
            f"task {task.name!r} reads its own file format ({task.data_suffix}), not parquet / arrow tables"
        )
    return load_table_split(
        path,
        task.table_samples,
        frame_spec(cfg.model),
        columns=task.columns,
        rename=columns,
        default_split=task.split,
        image_root=d.image_root,
        image_cache=d.image_cache,
        strict=d.strict,
        limit=d.limit,
        require_images=require_images,
        media=media_rules(cfg),
        image_join=task.image_join,
    )


def check_trainable(task: Task) -> Task:
    """An evaluation-only task (a benchmark) has nothing to train on: say so before any model loads."""
    if task.eval_only:
        raise ConfigError(
            f"config: task {task.name!r} is an evaluation-only benchmark (no rewards); train on a task "
            f"with rewards (`vlrl tasks` lists them) and evaluate with `vlrl eval --task {task.name}`"
        )
    return task


@dataclass
class Source:
    """A task and its training data in a run, with its share of the prompts."""

    task: Task
    train: Split
    eval_path: str
    weight: float
    columns: dict[str, str] = field(default_factory=dict)  # as data.columns, for its tables


def columns_for(columns: dict[str, str], path: str) -> dict[str, str]:
    """The columns that map a file a task of the run evaluates on (its eval file, or one given on
    the command line): the task's (data.columns, or its mixture entry's) when the file is a
    table, none for a file of the task's own format (a json held-out file beside a training table)."""
    return columns if is_table_spec(path) else {}


def task_sources(cfg: Config, console: Console | None = None) -> list[Source]:
    """The run's tasks (`Config.tasks`): the `mixture` entries, or the single `task` with
    `data.train` / `data.eval`."""
    family = model_family(cfg.model).name  # a task's prompt may follow the model family's recipe
    entries = cfg.tasks()
    tasks = []  # every entry's task made and checked before any data loads: a bad entry fails at once
    for i, entry in enumerate(entries):
        if cfg.mixture and not entry.train:
            raise ConfigError(f"config: mixture[{i}].train is empty; give the data file of task {entry.name!r}")
        tasks.append(check_trainable(entry_task(entry, family, cfg)))
    train_key = cfg.task_key("train")
    sources = []
    for task, entry in zip(tasks, entries, strict=True):
        columns_key = cfg.columns_key(entry.name)
        split = load_task_split(
            task, cfg, "train", console, path=entry.train, columns=entry.columns, key=train_key, columns_key=columns_key
        )
        sources.append(Source(task, split, entry.eval, entry.weight, entry.columns))
    return sources


def held_out(cfg: Config, sources: list[Source], console: Console) -> list[tuple[Task, str, list[Sample]]]:
    """The held-out splits evaluated during training (eval.limit samples of each), read as the
    task's training data is (its columns): every task with an eval file. A mixture's entries
    without one are said once and left out; a single task without data.eval is an error."""
    named = [source for source in sources if source.eval_path or not cfg.mixture]
    if not named:
        raise ConfigError(
            "config: eval.every > 0 evaluates held-out data, but no mixture entry names an eval file: give "
            "mixture[i].eval, or eval.every=0"
        )
    for source in sources:
        if source not in named:
            console.print(
                f"[yellow]warning:[/yellow] mixture task {source.task.name} has no eval file: "
                "it is not evaluated during training",
                highlight=False,
                soft_wrap=True,
            )
    out = []
    for source in named:
        columns, key = columns_for(source.columns, source.eval_path), cfg.task_key("eval")
        split = load_task_split(source.task, cfg, "eval", console, path=source.eval_path, columns=columns, key=key)
        out.append((source.task, source.eval_path, split.samples[: cfg.eval.limit or None]))
    return out
