"""The evaluation harness: batched generation over a task's split, the task's metrics, files.

Prompts are rendered exactly as in training (same template, resize and frame), answers are
generated greedily by default, and the metrics are the task's, as its public evaluation
defines them. Outputs follow lmms-eval's layout (vlrl/eval/layout.py): `results.json` and
one `samples_<task>.jsonl` per task (prompt, target, response, parsed prediction, and the
per-sample rewards or a benchmark's per-sample metric values). A benchmark scores what
lmms-eval's evaluator scores: the response with its reasoning blocks and surrounding
whitespace stripped (eval.reasoning_tags; `Benchmark.responses`), logged as `filtered_resps`
beside the raw `resps`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vlrl.config import Config, ConfigError, EvalConfig, MixtureEntry, ModelConfig, TrainerConfig, to_dict
from vlrl.data.sample import Sample
from vlrl.eval.layout import TaskResult, write_outputs
from vlrl.models.batch import Prompt
from vlrl.models.loading import checkpoint_repetition_penalty, frame_kind
from vlrl.models.prompting import UnusableSample, render_prompts, render_usable
from vlrl.parallel.distributed import Processes
from vlrl.progress import ProgressReport
from vlrl.rollout import EngineSetup, RolloutEngine, SamplingParams, configured_engines
from vlrl.rollout.parts import RolloutRows
from vlrl.tasking.benchmark import Benchmark
from vlrl.tasking.registry import eval_task
from vlrl.tasking.scoring import score, task_metrics
from vlrl.tasking.sources import columns_for, load_task_split
from vlrl.tasking.task import Task


@dataclass(frozen=True)
class EvalSettings:
    """What evaluating a task takes of the config."""

    eval: EvalConfig
    model: ModelConfig  # prompts rendered as in training (pixel budgets, frame)
    max_new_tokens: int  # when neither eval.max_new_tokens nor the task sets one (rollout.max_new_tokens)
    seed: int  # of the sampling generator (trainer.seed)
    repetition_penalty: float = 1.0  # eval.repetition_penalty's, or the checkpoint's where it is null

    @classmethod
    def of(cls, cfg: Config) -> EvalSettings:
        """A task's evaluation settings (`task_run_config` gives a benchmark's config first):
        eval.repetition_penalty `reference` is none here, a task's own evaluation's and Video-R1's."""
        penalty = 1.0 if cfg.eval.repetition_penalty == "reference" else cfg.eval.repetition_penalty
        if penalty is None:
            penalty = checkpoint_repetition_penalty(cfg.model)
        return cls(cfg.eval, evaluated_model(cfg), cfg.rollout.max_new_tokens, cfg.trainer.seed, penalty)


def evaluated_model(cfg: Config) -> ModelConfig:
    """The model config evaluation renders with: the run's, its videos timed as eval.video_time_from
    says (Video-R1 trains a second a temporal patch and evaluates frames where they were sampled)."""
    return replace(cfg.model, video=replace(cfg.model.video, time_from=cfg.eval.video_time_from))


def sampling_params(settings: EvalSettings, task: Task) -> SamplingParams:
    """Greedy unless eval.temperature says otherwise; as long as eval.max_new_tokens, else the
    task's length, else (a benchmark whose yaml sets none) its lmms-eval model class's, else
    rollout.max_new_tokens."""
    e = settings.eval
    class_length = task.model_class.max_new_tokens if isinstance(task, Benchmark) else 0
    return SamplingParams(
        n=1,
        max_new_tokens=e.max_new_tokens or task.max_new_tokens or class_length or settings.max_new_tokens,
        temperature=e.temperature,
        top_p=e.top_p,
        repetition_penalty=settings.repetition_penalty,
    )


def answer(task: Task, prompt: Prompt, completion: str) -> str:
    """The text scored: a task's rewards read the answer as the chat template opened it
    (`Prompt.prefill` and the completion, as in training); a benchmark's harness the completion
    alone, as lmms-eval decodes it (its reasoning strip takes a `</think>` without its opening)."""
    return completion if isinstance(task, Benchmark) else prompt.prefill + completion


def generate(
    engine: RolloutEngine,
    processor,
    task: Task,
    samples: Sequence[Sample],
    settings: EvalSettings,
    progress: Any = None,
    rows: RolloutRows | None = None,
) -> tuple[list[Sample], list[str], list[UnusableSample]]:
    """One completion per sample, in batches of eval.batch_size (each in parts of `rows` once a
    batch ran the GPU out of memory: rollout/parts.py): the samples answered, their
    completions, and the samples left out because their media failed to decode or the engine
    refused their prompt."""
    rows = rows or RolloutRows()  # by default the error ends the evaluation
    params = sampling_params(settings, task)
    generator = torch.Generator(device=engine.device).manual_seed(settings.seed)
    answered: list[Sample] = []
    texts: list[str] = []
    unusable: list[UnusableSample] = []
    size = settings.eval.batch_size
    for start in range(0, len(samples), size):
        batch = samples[start : start + size]
        kept, prompts, failed = render_usable(
            batch, render_prompts(processor, [(task.messages(s), s) for s in batch], settings.model)
        )
        unusable += failed
        generations = rows.generate(engine, prompts, params, generator) if kept else []
        for sample, prompt, generation in zip(kept, prompts, generations, strict=True):
            if generation.rejected:
                unusable.append(UnusableSample(sample.source, generation.rejected))
            else:
                answered.append(sample)
                texts.append(answer(task, prompt, generation.completions[0].text))
        if progress is not None:
            progress(len(batch))
    return answered, texts, unusable


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def shard(n: int, batch_size: int, procs: Processes) -> range:
    """This process's share of n samples: whole generation batches, contiguous, so that every
    batch is the one a single process generates (greedy answers are the same) and gathering in
    process order restores the samples' order."""
    per = math.ceil(math.ceil(n / batch_size) / procs.world) * batch_size
    return range(min(n, procs.rank * per), min(n, (procs.rank + 1) * per))


def evaluate(
    engine: RolloutEngine,
    processor,
    task: Task,
    samples: Sequence[Sample],
    settings: EvalSettings,
    split: str,
    progress: Any = None,
    procs: Processes = Processes(),
    rows: RolloutRows | None = None,
) -> TaskResult:
    """The task's metrics and per-sample records on `samples`. With several processes (`vlrl
    eval` under torchrun) each generates its `shard` and every process gets all the answers."""
    start = time.perf_counter()
    mine = shard(len(samples), settings.eval.batch_size, procs)
    answered, texts, unusable = generate(
        engine, processor, task, samples[mine.start : mine.stop], settings, progress, rows
    )
    skipped = [str(err) for err in unusable]
    if procs.world > 1:
        position = {id(sample): i for i, sample in enumerate(samples)}
        gathered = procs.gather([(position[id(sample)], text) for sample, text in zip(answered, texts, strict=True)])
        answered, texts = [samples[i] for i, _ in gathered], [text for _, text in gathered]
        skipped = procs.gather(skipped)
    samples = answered
    seconds = time.perf_counter() - start
    notes: list[str] = []
    if isinstance(task, Benchmark):  # lmms-eval's evaluator: filter, strip reasoning, process_results
        filtered, processed = task.processed(samples, texts, settings.eval.reasoning_tags)
        metrics = task.aggregate(processed)
    else:
        filtered = [task.predict(text, sample) for text, sample in zip(texts, samples, strict=True)]
        processed = [{} for _ in samples]
        metrics, notes = task_metrics(task, samples, texts)
    records = [
        {
            "doc_id": i,
            "id": sample.id,
            "input": prompt_text(task, sample),
            "target": jsonable(task.logged_target(sample)),
            "resps": [text],
            "filtered_resps": [jsonable(response)],
            **jsonable(values),  # a benchmark's process_results, as lmms-eval logs them
        }
        for i, (sample, text, response, values) in enumerate(zip(samples, texts, filtered, processed, strict=True))
    ]
    if task.reward_weights and samples:
        scores = score(task, texts, samples)
        metrics["reward"] = sum(scores.total) / len(texts)
        for name, values in scores.components.items():
            metrics[f"reward/{name}"] = sum(values) / len(values)
        metrics |= scores.zero_counts()
        notes = [*notes, *scores.failure_notes()]
        for i, record in enumerate(records):
            record |= {"rewards": scores.row(i), "reward": scores.total[i]}
    return TaskResult(task.name, split, metrics, records, seconds, task_config(task, settings, split), skipped, notes)


def prompt_text(task: Task, sample: Sample) -> str:
    """The text of the sample's prompt (lmms-eval's `input`: the user's text, not the system's)."""
    return "".join(
        part["text"]
        for message in task.messages(sample)
        if message["role"] == "user"
        for part in message["content"]
        if part.get("type") == "text"
    )


def task_config(task: Task, settings: EvalSettings, data: str) -> dict[str, Any]:
    """What results.json records of a task's run: lmms-eval's config keys, and the options used;
    for a benchmark, the reasoning tags stripped before scoring (None: the raw response)."""
    out: dict[str, Any] = {"task": task.name, "data": data, "options": to_dict(task.options)}
    if task.reward_weights:
        out["rewards"] = dict(task.reward_weights)
    if isinstance(task, Benchmark):
        described = task.describe(frame_kind(settings.model))
        out |= {"dataset_path": described.pop("dataset"), "test_split": described.pop("split"), **described}
        out["reasoning_tags"] = settings.eval.reasoning_tags if task.strips_reasoning else None
        if task.follows_lmms_eval_model:
            out["image_pixels"] = [settings.model.min_pixels, settings.model.max_pixels]
            out["repetition_penalty"] = settings.repetition_penalty
    return out


def task_run_config(cfg: Config, task: Task) -> Config:
    """The config `task` is evaluated with: an lmms-eval benchmark's as its model class runs it,
    its images within the class's pixel budget and JPEG-encoded where it encodes them
    (eval.image_pixels lmms_eval), and the checkpoint's
    repetition penalty (eval.repetition_penalty reference: the class leaves it to `generate`);
    the config itself for any other task."""
    if not (isinstance(task, Benchmark) and task.follows_lmms_eval_model):
        return cfg
    model, evaluation, kind = cfg.model, cfg.eval, task.model_class
    if evaluation.image_pixels == "lmms_eval":  # the class's images: their budget, their encoding
        if kind.image_pixels is not None:
            model = replace(model, min_pixels=kind.image_pixels[0], max_pixels=kind.image_pixels[1])
        if kind.jpeg_quality:
            model = replace(model, image_jpeg_quality=kind.jpeg_quality)
    if evaluation.repetition_penalty == "reference":
        evaluation = replace(evaluation, repetition_penalty=None)
    return replace(cfg, model=model, eval=evaluation)


def split_path(entry: MixtureEntry, split: str, task: Task, key: str | None) -> str:
    """The data file of `split` (eval, train, or a file) of a task as the config states it
    (`entry`, its files named by `key`; None: a task the config does not train, which has no
    file of it); a benchmark without data says it is one."""
    if key is None and split in ("eval", "train") and not isinstance(task, Benchmark):
        raise ConfigError(
            f"vlrl eval: the config trains no task {task.name}, so none of its files is {task.name}'s: give its "
            f"data with --task {task.name}=FILE"
        )
    if split == "eval":
        if entry.eval:
            return entry.eval
        if isinstance(task, Benchmark):
            published = f"{task.dataset}, split {task.split}" if task.split else task.dataset
            raise ConfigError(
                f"vlrl eval: {task.name} is a benchmark ({published}) and vlrl never downloads one: "
                f"download it, then give its folder or file with --data DIR or --task {task.name}=DIR "
                "(docs/benchmarks.md says what each reads)"
            )
        named = f"mixture task {task.name}'s eval" if key == "mixture" else key
        raise ConfigError(f"config: {named} is empty; give the evaluation data file (or --split PATH)")
    if split == "train":
        return entry.train
    path = Path(split)
    if not path.exists() and len(path.parts) == 1 and not path.suffix:  # a split's name, not a file's
        raise ConfigError(
            f"eval.split (--split) is eval (data.eval), train (data.train) or a data file; {split!r} is neither, "
            "and no file of that name is here"
        )
    return split


def headline_names(task: Task, chosen: Sequence[str] = ()) -> list[str]:
    """The metrics a summary shows first: eval.headline when it names any, else the task's own
    (`Task.headline`, or its accuracy metric), then the mean reward."""
    names = list(chosen) or list(task.headline) or [task.accuracy_metric]
    return [name for name in dict.fromkeys([*names, "reward"]) if name]


def headline_line(label: str, metrics: dict[str, float], names: Sequence[str]) -> str:
    """One line of `metrics` (the `names` it has, in order): 'label | acc@0.5 0.5234 | reward 1.401'."""
    return " | ".join([label, *(f"{name} {metrics[name]:.4g}" for name in names if name in metrics)])


def results_table(results: list[TaskResult], title: str) -> Table:
    table = Table(title=title)
    for column in ("task", "metric", "value"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for r in results:
        for name, value in r.metrics.items():
            table.add_row(r.task, name, f"{value:.4f}")
    return table


def parse_task_spec(spec: str) -> tuple[str, str | None]:
    """'refcoco' or 'refcoco=path/to/val.json'."""
    name, _, data = spec.partition("=")
    return name, data or None


def run_eval(
    cfg: Config, task_specs: Sequence[str], split: str, out_dir: Path, console: Console, show_table: bool = True
) -> list[TaskResult]:
    """Evaluate the tasks of `task_specs` and write their results to `out_dir`. Under torchrun
    the samples are shared among the processes (`shard`) and process 0 writes and says what
    one process would."""
    from vlrl.models.families import model_family
    from vlrl.models.loading import checkpoint_path, load_model, load_processor

    _, backend = configured_engines(cfg.rollout, cfg.eval.backend)  # its options checked before any model loads
    cfg = replace(cfg, model=evaluated_model(cfg))  # so results.json records what the prompts were rendered with
    procs = Processes.from_env()
    if not procs.main:
        console, show_table = Console(quiet=True), False
    path = checkpoint_path(cfg.model)  # a model that is not there is said before any data is read
    tasks = []
    names = [parse_task_spec(spec)[0] for spec in task_specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"vlrl eval names a task twice ({', '.join(names)}): its results and samples would collide")
    for spec in task_specs:
        name, data = parse_task_spec(spec)
        which = "train" if split == "train" and not data else "eval"
        # A task the config trains (`task`, or a mixture's entry) keeps its reward weights, options,
        # files and columns; another task its defaults and none of the config's files (its tasks')
        configured = cfg.task_settings(name)
        entry = configured or MixtureEntry(name)
        key = cfg.task_key(which) if configured else None
        task = eval_task(entry, model_family(cfg.model).name, cfg)
        task_cfg = task_run_config(cfg, task)
        if task_cfg.model is not cfg.model:
            m = task_cfg.model
            console.print(f"{name}: images sized as lmms-eval's {task.model_class.source} sizes them, {m.min_pixels:,} to "
                          f"{m.max_pixels:,} pixels (eval.image_pixels=model: model.min_pixels / max_pixels)", highlight=False)  # fmt: skip
        data_path = data or split_path(entry, split, task, key)
        columns = columns_for(entry.columns, data_path)
        if data or split not in ("train", "eval"):
            key = None  # a file given as is
        with procs.main_first():  # process 0 writes missing synthetic data, the others read it
            loaded = load_task_split(task, task_cfg, which, console, path=data_path, columns=columns, key=key)
        tasks.append((task, loaded, data_path, task_cfg))
    device = procs.device()  # under torchrun, each process its own GPU
    processor = load_processor(cfg.model, path)
    engine = backend.build(
        EngineSetup(
            cfg.model, path, processor, cfg.trainer.seed, lambda: (load_model(cfg.model, path, device).eval(), device)
        )
    )
    try:
        results = [
            evaluate_logged(
                engine, processor, task, loaded, EvalSettings.of(task_cfg), cfg.trainer, data_path, console, procs
            )
            for task, loaded, data_path, task_cfg in tasks
        ]
    finally:
        engine.close()
    if procs.main:  # every process holds every answer; one writes them
        write_outputs(out_dir, results, cfg.model.path, cfg)
    if show_table:
        console.print(results_table(results, f"{cfg.model.path} -> {out_dir}"))
    return results


def evaluate_logged(
    engine: RolloutEngine,
    processor,
    task: Task,
    loaded,
    settings: EvalSettings,
    t: TrainerConfig,
    data_path: str,
    console: Console,
    procs: Processes = Processes(),
) -> TaskResult:
    """`evaluate` with its progress shown (a bar on a terminal, else a line every
    trainer.log_every batches; under torchrun process 0's share) and what it skipped said: bad
    records, then bad media."""
    every, enabled = t.log_every, t.progress
    total = len(shard(len(loaded.samples), settings.eval.batch_size, procs))

    def warn(message: str) -> None:
        console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)

    rows = RolloutRows(t.halve_on_oom, warn=warn, what="evaluation")
    with ProgressReport(console, f"eval {task.name}", total, every=every, unit="sample", enabled=enabled) as report:
        result = evaluate(engine, processor, task, loaded.samples, settings, data_path, report.advance, procs, rows)
    result.skipped = [str(err) for err in loaded.errors] + result.skipped
    for problem in result.skipped:
        console.print(f"[yellow]skipped[/yellow] {escape(problem)}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]warning:[/yellow] {escape(note)}", highlight=False)
    return result
