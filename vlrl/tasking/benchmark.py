"""Evaluation-only tasks: public benchmarks, read as published and scored as their reference
evaluation scores them.

A Benchmark is a Task without rewards (`eval_only`): training on one is refused. Scoring
keeps the shape of lmms-eval's harness, so that each step can be compared with it:
`responses` is what its evaluator logs as filtered_resps (the task's filter, `predict`, then
the reasoning blocks and surrounding whitespace stripped, `strip_reasoning`, as a default
`lmms-eval` run does: eval.reasoning_tags), `process` turns one response, stripped of
surrounding whitespace as lmms-eval's Task.process_results hands it on whatever the
reasoning tags, into the per-sample values `process_results` returns, by metric name, and
`aggregations` turn each metric's list of values into the number its aggregation function
reports. The harness logs each sample's values in the samples file and reports the metrics
under the reference's names. A benchmark whose reference evaluation strips nothing
(Video-R1's evaluator) sets `strips_reasoning` and `strips_whitespace` false.

Before that, lmms-eval's model class shapes the prompt and the answer (`model_class`,
vlrl/tasking/lmms_eval_model.py): the harness gives each benchmark the class lmms-eval runs for
the evaluated model's family (`for_model`, eval.lmms_eval_model).

Where a benchmark's prompt states a coordinate convention, `task.options.coords` picks it:
`lmms_eval` (the reference prompt, numbers read as the reference reads them) or `model`
(the model's own frame, vlrl.models.loading.frame_kind: Qwen2.5-VL pixels of the resized image,
Qwen2-VL / Qwen3-VL 0-1000; predictions are mapped back before the reference's scoring).
The results file records the convention used (`describe`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from vlrl.config import LMMS_EVAL_REASONING_TAGS, ConfigError
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import hub_file, write_parquet
from vlrl.tasking.lmms_eval_model import ModelClass
from vlrl.tasking.task import RewardFn, Task
from vlrl.vision.frames import FrameKind

Coords = Literal["lmms_eval", "model"]
# lmms-eval's Qwen classes' system prompt (their system_prompt default): the simple classes send
# it with every prompt, Qwen3-VL's and Qwen3.5's chat classes before the task's messages.
# Qwen2-VL's and Qwen2.5-VL's chat templates write the same one when a conversation has none;
# Qwen3-VL's and Qwen3.5's write none.
QWEN_SYSTEM = "You are a helpful assistant."
# What the model is asked to write, by convention: recorded in the results file.
CONVENTIONS = {
    "lmms_eval": "the reference prompt's convention (lmms-eval: floats normalized to [0, 1])",
    "absolute": "pixels of the smart-resized image (Qwen2.5-VL)",
    "norm1000": "0-1000 normalized (Qwen2-VL, Qwen3-VL)",
    "original": "pixels of the original image",
}

DOC_TARGET = "doc_target"  # Sample.meta key: `doc_target` of its row


@dataclass
class CoordsOptions:
    coords: Coords = "lmms_eval"  # the reference prompt, or the model's own coordinate frame


TagPairs = Sequence[Sequence[str]]


def strip_reasoning(text: str, tag_pairs: TagPairs) -> str:
    """lmms-eval's `strip_reasoning_tags` (lmms_eval/api/reasoning.py @ 75571cf, the same in PyPI
    0.7.3), quirks kept. For each (start, end) pair in order: while both tags occur, cut from the
    first start tag through the first end tag after it (plain, case-sensitive string search; an
    unclosed start tag stays); then, if an end tag is left and no start tag, keep only the text
    after the last end tag (a chat template that prefilled the start tag). Whitespace is
    stripped at the end, always."""
    for start, end in tag_pairs:
        while start in text and end in text:
            left = text.find(start)
            right = text.find(end, left)
            if right == -1:
                break
            text = text[:left] + text[right + len(end) :]
        if end in text and start not in text:
            text = text.rsplit(end, 1)[-1]
    return text.strip()


class Benchmark(Task):
    eval_only = True
    dataset: ClassVar[str] = ""  # where it is published (a Hugging Face dataset id, or a file)
    reference: ClassVar[str] = ""  # the evaluation its prompt, parsing and metrics follow (file @ commit)
    schema: ClassVar[Any] = None  # the published table's pyarrow schema, which `synthesize` writes
    # The reference's harness strips reasoning before scoring (lmms-eval's evaluator does).
    strips_reasoning: ClassVar[bool] = True
    # It strips each response's surrounding whitespace just before the task's process_results,
    # even under --reasoning_tags none (lmms-eval's Task.process_results, api/task.py).
    strips_whitespace: ClassVar[bool] = True
    # The reference yaml's generation_kwargs.until: lmms-eval's simple model classes cut each
    # decoded answer at every one of them in turn (`ans.split(term)[0]`) before any filter.
    until: ClassVar[tuple[str, ...]] = ()
    # The system prompt of the reference's chat messages (lmms-eval's reasoning tasks); None:
    # none of its own (the model class's, QWEN_SYSTEM).
    system: ClassVar[str | None] = None
    # The lmms-eval model class the prompts and answers go through (`for_model` sets it); a
    # benchmark whose reference is another evaluator renders and reads its own way.
    model_class: ModelClass = ModelClass()
    follows_lmms_eval_model: ClassVar[bool] = True
    # The yaml's lmms_eval_specific_kwargs under a `--model` name, as the class attributes they
    # replace (MMStar's qwen3_vl prompt): lmms-eval runs that model with them instead of its defaults.
    model_kwargs: ClassVar[dict[str, dict[str, Any]]] = {}
    # The yaml's doc_to_target: the column whose value lmms-eval's samples file logs as a row's
    # `target`. A name the table has no column of is logged as itself: Task.doc_to_target renders
    # it as a template (TextVQA's, VQAv2's, OK-VQA's and VizWiz's "answer"). A yaml naming a
    # utils.py function: the class overrides `doc_target`.
    doc_to_target: ClassVar[str] = "answer"

    @property
    def states_coordinates(self) -> bool:  # type: ignore[override]
        """Coordinates in the model's frame only under `coords: model`; the reference's prompt
        asks for its own convention (normalized, 0-1000), whatever the model's frame."""
        return getattr(self.options, "coords", None) == "model"

    def for_model(self, model_class: ModelClass) -> Benchmark:
        """This benchmark run through `model_class`, with the kwargs of its name (a copy;
        itself where the reference is not lmms-eval). Samples are built after: prompts follow."""
        if not self.follows_lmms_eval_model:
            return self
        task = copy.copy(self)
        task.model_class = model_class
        for attribute, value in self.model_kwargs.get(model_class.name, {}).items():
            setattr(task, attribute, value)
        return task

    def reward_functions(self) -> dict[str, RewardFn]:
        return {}

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        """As `model_class` builds them, the sample's images before its text. A chat class: the
        task's system prompt (QWEN_SYSTEM, the template's own, where it has none), after the
        class's where it inserts one (models/chat/qwen3_vl.py). A simple class: its system
        prompt, and the text with any literal "<image>" deleted (models/simple/qwen2_5_vl.py;
        Geometry3K's problems may hold one)."""
        images = [{"type": "image"} for _ in sample.images]
        if self.model_class.chat:
            text = sample.problem
            both = self.model_class.system_first and self.system
            systems = [QWEN_SYSTEM, self.system] if both else [self.system or QWEN_SYSTEM]
        else:
            text, systems = sample.problem.replace("<image>", ""), [QWEN_SYSTEM]
        return [
            *({"role": "system", "content": [{"type": "text", "text": system}]} for system in systems),
            {"role": "user", "content": [*images, {"type": "text", "text": text}]},
        ]

    def table_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        samples = self.build_samples(record, ctx)
        for sample in samples:
            sample.meta[DOC_TARGET] = self.doc_target(record, sample)
        return samples

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        """lmms-eval's Task.doc_to_target (api/task.py) of the row `sample` was read from: what
        its samples file logs, as a string, for the sample's `target`."""
        return record.get(self.doc_to_target, self.doc_to_target)

    def logged_target(self, sample: Sample) -> Any:
        """`doc_target` of the sample's row; a sample read from no table (Video-R1's JSON, one
        built by hand): its solution."""
        return sample.meta.get(DOC_TARGET, sample.solution)

    def target(self, sample: Sample) -> str:
        raise ConfigError(f"task {self.name!r} is an evaluation-only benchmark: it has no training targets")

    def predict(self, completion: str, sample: Sample) -> str:
        """The response as the reference's filter leaves it (lmms-eval's "none": unchanged)."""
        return completion

    # -- scoring, as lmms-eval's process_results and aggregation functions --------------------
    def process(self, response: Any, sample: Sample) -> dict[str, Any]:
        """Per-sample values by metric name (what the samples file logs) of a response as
        `responses` leaves it."""
        raise NotImplementedError

    def aggregations(self) -> dict[str, Callable[[list[Any]], float]]:
        """Metric name -> the function of its per-sample values that the results report."""
        raise NotImplementedError

    def responses(
        self, samples: Sequence[Sample], completions: Sequence[str], reasoning_tags: TagPairs | None
    ) -> list[Any]:
        """What the reference's harness logs as filtered_resps: each completion as the model
        class returns it (`ModelClass.answer`: cut at the `until` strings, its thinking
        stripped), through the task's filter, then (lmms-eval's evaluator) `strip_reasoning`
        with `reasoning_tags`; None strips nothing, as lmms-eval's `--reasoning_tags none`."""
        answers = [self.model_class.answer(c, self.until) for c in completions]
        out = [self.predict(a, s) for a, s in zip(answers, samples, strict=True)]
        if reasoning_tags is None or not self.strips_reasoning:
            return out
        return [strip_reasoning(r, reasoning_tags) if isinstance(r, str) else r for r in out]

    def metrics(
        self,
        samples: Sequence[Sample],
        completions: Sequence[str],
        reasoning_tags: TagPairs | None = LMMS_EVAL_REASONING_TAGS,
    ) -> dict[str, float]:
        """The metrics a default lmms-eval run reports for these completions."""
        return self.aggregate(self.processed(samples, completions, reasoning_tags)[1])

    def processed(
        self, samples: Sequence[Sample], completions: Sequence[str], reasoning_tags: TagPairs | None
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Each completion's response (`responses`) and the `process` values of it as scored
        (`strips_whitespace`): what lmms-eval's samples file logs of it."""
        responses = self.responses(samples, completions, reasoning_tags)
        scored = [r.strip() if isinstance(r, str) and self.strips_whitespace else r for r in responses]
        return responses, [self.process(r, s) for r, s in zip(scored, samples, strict=True)]

    def aggregate(self, processed: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The metrics of the samples' `process` values (each computed once, also logged per
        sample by the harness): each metric's `aggregations` function of the values the samples
        gave it. A metric no sample gave a value is not reported, as lmms-eval's evaluator
        aggregates only the values `process_results` returned (ChartQA's split metrics)."""
        values = {name: [p[name] for p in processed if name in p] for name in self.aggregations()}
        return {name: fn(values[name]) for name, fn in self.aggregations().items() if values[name]}

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        """`synthetic_rows` in the published schema, where the hub keeps the split (ROOT/data/
        SPLIT-00000-of-00001.parquet), or at `path` itself when it names a .parquet file."""
        target = Path(path) if Path(path).suffix == ".parquet" else hub_file(path, self.split)
        write_parquet(target, list(self.synthetic_rows(size, seed)), self.schema)

    def synthetic_rows(self, size: int, seed: int) -> Iterable[dict[str, Any]]:
        """`size` rows in the published schema (the tests' and `vlrl data synth`'s fixtures)."""
        raise NotImplementedError(f"benchmark {self.name!r} has no synthetic rows")

    def describe(self, frame: FrameKind) -> dict[str, Any]:
        """What the results file records about the run of this benchmark."""
        out = {"dataset": self.dataset, "split": self.split, "reference": self.reference}
        if self.follows_lmms_eval_model:
            out["model_class"] = self.model_class.source
        coords = getattr(self.options, "coords", None)
        if coords is not None:
            out["coords"] = CONVENTIONS["lmms_eval" if coords == "lmms_eval" else frame]
        return out


def variants(base: type[Benchmark], rows: Sequence[dict[str, Any]]) -> dict[str, type[Benchmark]]:
    """One class per row of a family's table (name, split, dataset...): benchmarks that differ
    only in those fields share every line of code."""
    return {row["name"]: type(row["name"], (base,), dict(row)) for row in rows}


def mean(values: Sequence[float]) -> float:
    """lmms-eval's `mean` aggregation."""
    return sum(values) / len(values)
