"""Scoring completions with a task's reward components, never raising on model output.

Each component is called on the whole batch; if it raises, its items are retried one by
one and the failing ones score 0 (counted). Non-finite values score 0 (counted). A
completion longer than `max_chars` scores 0 on every component: no real answer is that
long, and it bounds the time any reward can spend.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from vlrl.config import LMMS_EVAL_REASONING_TAGS
from vlrl.data.records import RecordError, read_records
from vlrl.data.sample import Sample
from vlrl.tasking.benchmark import Benchmark, TagPairs
from vlrl.tasking.task import Task

MAX_COMPLETION_CHARS = 65536


@dataclass
class Scores:
    components: dict[str, list[float]]  # component name -> one value per completion
    total: list[float]  # weighted sum
    failures: dict[str, int] = field(default_factory=dict)  # component -> values replaced by 0
    oversized: list[int] = field(default_factory=list)  # completions over max_chars: 0 everywhere, unread
    # component -> why its first failing value was replaced ("TypeError: ...", "returned 'x'")
    reasons: dict[str, str] = field(default_factory=dict)

    def row(self, i: int) -> dict[str, float]:
        return {name: values[i] for name, values in self.components.items()}

    def zero_counts(self) -> dict[str, float]:
        """The metrics of what scored 0 without a value of its own, where anything did: each
        reward's failures (reward_failures/NAME) and the completions too long to read
        (oversized_completions). Training logs them with each step, evaluation with its results."""
        out = {f"reward_failures/{name}": float(n) for name, n in self.failures.items()}
        if self.oversized:
            out["oversized_completions"] = float(len(self.oversized))
        return out

    def failure_notes(self) -> list[str]:
        """Each failing reward's count and why its first value was replaced, for the user
        (`vlrl score`, `vlrl eval`; training says it in its own words, by step)."""
        return [
            f"reward {name} on {n} of {len(self.total)} completions: it raised or gave no finite number "
            f"(the first: {self.reasons[name]})"
            for name, n in self.failures.items()
        ]


def failure_reason(err: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200]}" if lines else type(err).__name__


def _safe_values(fn, completions: list[str], samples: list[Sample]) -> tuple[list[float], int, str]:
    """`fn`'s value of each completion, 0 where it raised or gave no finite number; the number of
    those, and why the first one failed (the exception or the value, said once). A call that
    raises, or returns another number of values than completions, is made again a completion at
    a time (one completion's error costs that one; a function written for one completion
    works), and each of those calls must return one value."""
    reason = ""
    try:
        values = list(fn(completions, samples))
        if len(values) != len(completions):
            raise ValueError(f"returned {len(values)} values for {len(completions)} completions")
    except Exception:
        values = []
        for completion, sample in zip(completions, samples, strict=True):
            try:
                one = list(fn([completion], [sample]))
                if len(one) != 1:
                    raise ValueError(f"returned {len(one)} values for 1 completion")
                values.append(one[0])
            except Exception as err:
                reason = reason or failure_reason(err)
                values.append(float("nan"))
    failures = 0
    clean = []
    for value in values:
        number = float("nan")
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            number = float(value)
        if not math.isfinite(number):
            failures += 1
            reason = reason or f"returned {str(value)[:80]!r}, not a finite number"
            number = 0.0
        clean.append(number)
    return clean, failures, reason


def _fits(completion: object, max_chars: int) -> bool:
    return isinstance(completion, str) and len(completion) <= max_chars


def _bounded(fn, completions: Sequence[str], samples: Sequence[Sample], max_chars: int) -> tuple[list[float], int, str]:
    """`fn`'s values of the completions (never raising), 0 for those longer than max_chars;
    the failures and the first one's reason (`_safe_values`)."""
    keep = [i for i, c in enumerate(completions) if _fits(c, max_chars)]
    values = [0.0] * len(completions)
    if not keep:
        return values, 0, ""
    kept, failures, reason = _safe_values(fn, [completions[i] for i in keep], [samples[i] for i in keep])
    for i, value in zip(keep, kept, strict=True):
        values[i] = value
    return values, failures, reason


def score(
    task: Task, completions: Sequence[str], samples: Sequence[Sample], max_chars: int = MAX_COMPLETION_CHARS
) -> Scores:
    """The task's reward components in use (`Task.scorers`: its own, and the config's reward
    functions) on each completion, and their weighted sum."""
    if len(completions) != len(samples):
        raise ValueError(f"{len(completions)} completions for {len(samples)} samples")
    components: dict[str, list[float]] = {}
    failures: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for name, fn in task.scorers().items():
        components[name], failures[name], reasons[name] = _bounded(fn, completions, samples, max_chars)
    total = [
        sum(task.reward_weights[name] * components[name][i] for name in components) for i in range(len(completions))
    ]
    oversized = [i for i, c in enumerate(completions) if not _fits(c, max_chars)]
    failed = {k: v for k, v in failures.items() if v}
    return Scores(components, total, failed, oversized, {k: reasons[k] for k in failed})


def task_metrics(
    task: Task, samples: Sequence[Sample], completions: Sequence[str]
) -> tuple[dict[str, float], list[str]]:
    """The task's metrics of the completions, as numbers, and what was left out of them: a metric
    whose value is not a number (a task of yours returning None, say), or all of them when its
    `metrics` raised. An evaluation, held-out or not, never ends on the task's own code."""
    if not samples:
        return {}, []
    try:
        values = dict(task.metrics(samples, completions))
    except Exception as err:
        return {}, [f"task {task.name}'s metrics raised {failure_reason(err)}: no metrics of it here"]
    metrics, notes = {}, []
    for name, value in values.items():
        if isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy's scalars too
            metrics[str(name)] = float(value)
        else:
            notes.append(f"task {task.name}'s metric {name!r} is {str(value)[:80]!r}, not a number: left out")
    return metrics, notes


def judges(task: Task, sample: Sample) -> bool:
    """Whether the task defines a correctness (`Task.correct`): its own `correct`, or an
    `accuracy_metric` that its metrics report for one sample (a task's metrics may name none,
    a split-level recall say: then nothing is logged rather than a failure per completion)."""
    if not task.accuracy_metric:
        return False
    if type(task).correct is not Task.correct:
        return True
    try:
        return task.accuracy_metric in task.metrics([sample], [""])
    except Exception:  # the metrics themselves fail: scoring counts each failure
        return True


def correctness(
    task: Task, completions: Sequence[str], samples: Sequence[Sample], max_chars: int = MAX_COMPLETION_CHARS
) -> tuple[list[float], int] | None:
    """The task's correctness of each completion (`Task.correct`, in [0, 1]) under the rules of
    `score`: never raising (a failing item is 0, counted), 0 beyond `max_chars`. Returns the
    values and the failures; None when the task defines no correctness (`accuracy_metric` "")."""
    if not task.accuracy_metric:
        return None
    values, failures, _ = _bounded(task.correct, completions, samples, max_chars)
    return [min(1.0, max(0.0, v)) for v in values], failures


class Matched(NamedTuple):
    """A line of a completions file with the sample its id names."""

    id: object
    completion: str
    sample: Sample
    where: str  # "file:line"


@dataclass
class FileScore:
    scored: int
    metrics: dict[str, float]
    problems: list[str]  # "file:line: reason" for completions that could not be scored
    mean_reward: float
    zeroed: list[str]  # completions scored 0 unread (too long), rewards whose values were 0 (it raised)
    repeated: list[str]  # "file:line: id again (first at file:line)": several completions of a sample, each scored
    # "file:line: ...": lines stating a `target` other than their record's (another task's or data's outputs), scored
    foreign: list[str] = field(default_factory=list)


def completion_of(record: dict) -> str | None:
    """A line's completion: its `completion`, or the first of its `resps` (vlrl eval's samples
    files, lmms-eval's layout: a list, in lmms-eval itself a list of lists). A samples line
    without `resps` has dropped it for equalling `filtered_resps` (lmms-eval's
    save_results_samples, `layout.samples_line`): that is the response then."""
    if "completion" in record:
        return record["completion"] if isinstance(record["completion"], str) else None
    resps = record.get("resps", record.get("filtered_resps"))
    while isinstance(resps, list) and resps:
        resps = resps[0]
    return resps if isinstance(resps, str) else None


def unscorable(record: dict) -> str:
    """Why a line has no id or completion to score: the key `completion_of` read, of another
    type than a string, or (no id, or no such key) the keys the line has."""
    key = next((k for k in ("completion", "resps", "filtered_resps") if k in record), None)
    if key is not None and "id" in record:
        value = record[key]
        expected = "a string" if key == "completion" else "a string, or a list whose first item is one"
        return f"its {key!r} is {type(value).__name__} {str(value)[:40]!r}, expected {expected}"
    keys = ", ".join(repr(k)[:40] for k in list(record)[:8]) or "none"
    return (
        'expected {"id": ..., "completion": "..."} (or "id" and "resps", as vlrl eval\'s samples_<task>.jsonl); '
        f"found keys {keys}"
    )


def by_position(doc_id: Any, documents: int, in_order: bool) -> str:
    """Why an lmms-eval `doc_id` names no sample ("": it does): it is a document's position
    (lmms-eval's enumerate over the documents after process_docs, vlrl's samples in order)."""
    if not in_order:
        return f"doc_id {repr(doc_id)[:40]} is a position among the documents, and records of the data were skipped: give ids"
    if isinstance(doc_id, bool) or not isinstance(doc_id, int) or not 0 <= doc_id < documents:
        return f"doc_id {repr(doc_id)[:40]} is not a position among the {documents} documents (0 to {documents - 1})"
    return ""


def named_by_id(line_id: Any, sample: Sample | None, held: Counter) -> str:
    """Why a line's `id` names no one sample ("": it names `sample`): no record has it, or
    several do (`held` counts the records of each id), so which one it answers is unknown."""
    if sample is None:
        return f"no usable data record has id {line_id!r}"
    if held[sample.id] > 1:
        return (
            f"id {line_id!r} is the id of {held[sample.id]} data records, so which one this completion answers "
            "is unknown: give the records unique ids"
        )
    return ""


def stated_target(task: Task, sample: Sample) -> str:
    """The sample's `target` as an evaluation's samples file states it: vlrl eval's (the string
    of its JSON value, `layout.samples_line`) and lmms-eval's (the string of doc_to_target)."""
    return str(json.loads(json.dumps(task.logged_target(sample), default=str)))


def foreign_target(record: dict, task: Task, sample: Sample) -> str:
    """Why a samples line seems to answer another sample ("": it states no target, or the
    sample's): its `target` is not the record's, so ids or positions matched the completions of
    another task or data file. Said, not refused: the completion is scored all the same."""
    if "target" not in record:
        return ""
    stated, expected = str(record["target"]), stated_target(task, sample)
    if stated == expected:
        return ""
    return (
        f"its target {stated[:60]!r} is not that of the data record it names ({expected[:60]!r}): "
        "completions of another task or data file?"
    )


def score_file(
    task: Task,
    samples: Sequence[Sample],
    completions_path: str,
    out_path: str,
    reasoning_tags: TagPairs | None = LMMS_EVAL_REASONING_TAGS,
    in_order: bool = True,
) -> FileScore:
    """Score `{"id", "completion"}` lines against the samples with those ids; write one
    `{"id", "rewards", "reward"}` line per scored completion to `out_path`. A line of lmms-eval's
    samples file names its document by position (`doc_id`, no `id`): the sample at that position,
    where `samples` are the documents `in_order` (no record of the data left out). A benchmark's
    metrics are those of its harness: reasoning stripped with `reasoning_tags` (eval.reasoning_tags)."""
    by_id: dict[str, Sample] = {}
    held = Counter(s.id for s in samples)  # an id several records have answers none of them for sure
    for s in samples:
        by_id.setdefault(s.id, s)
    pairs: list[Matched] = []
    problems: list[str] = []
    first_line: dict[str, str] = {}
    repeated: list[str] = []
    foreign: list[str] = []
    for where, _, record in read_records(completions_path):
        if isinstance(record, RecordError):
            problems.append(str(record))
            continue
        completion = completion_of(record)
        if "id" not in record and "doc_id" in record and completion is not None:  # lmms-eval's layout
            problem = by_position(record["doc_id"], len(samples), in_order)
            if problem:
                problems.append(f"{where}: {problem}")
                continue
            pairs.append(Matched(record["doc_id"], completion, samples[record["doc_id"]], where))
        elif "id" not in record or completion is None:
            problems.append(f"{where}: {unscorable(record)}")
            continue
        else:
            sample = by_id.get(str(record["id"]))
            problem = named_by_id(record["id"], sample, held)
            if problem:
                problems.append(f"{where}: {problem}")
                continue
            if sample.id in first_line:  # n samples of a prompt, or a line written twice: said, and scored
                repeated.append(f"{where}: id {record['id']!r} again (first at {first_line[sample.id]})")
            first_line.setdefault(sample.id, where)
            pairs.append(Matched(record["id"], completion, sample, where))
        doubt = foreign_target(record, task, pairs[-1].sample)
        if doubt:
            foreign.append(f"{where}: {doubt}")
    texts = [pair.completion for pair in pairs]
    matched = [pair.sample for pair in pairs]
    scores = score(task, texts, matched)
    rewarded = bool(task.reward_weights)  # a benchmark has metrics only
    zeroed = [
        f"{pairs[i].where}: {len(texts[i]):,} characters, over the {MAX_COMPLETION_CHARS:,} a reward reads (the "
        "metrics read it whole, as the reference's do)"
        for i in (scores.oversized if rewarded else ())
    ]
    zeroed += scores.failure_notes()
    lines = [
        {"id": pair.id, **({"rewards": scores.row(i), "reward": scores.total[i]} if rewarded else {})}
        for i, pair in enumerate(pairs)
    ]
    if isinstance(task, Benchmark):  # each line as vlrl eval's samples file has it: what was scored, and its values
        responses, processed = task.processed(matched, texts, reasoning_tags)
        metrics = task.aggregate(processed)
        for line, response, values in zip(lines, responses, processed, strict=True):
            line |= {"filtered_resps": response, **values}
    else:
        metrics, notes = task_metrics(task, matched, texts)
        problems += notes
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, default=str) + "\n")
    mean = sum(scores.total) / len(pairs) if pairs else 0.0
    return FileScore(len(pairs), metrics, problems, mean, zeroed, repeated, foreign)
