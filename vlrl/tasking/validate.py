"""`vlrl data validate`: every problem of a dataset, found before a run rather than during one.

It reads the file as a run does (the task's parser, the data root and the image size limit),
then does what a run does only when it draws a sample: decodes every image and video in full,
and looks for vision tokens written in a prompt's text, which the processor refuses.
It adds what no run checks: ids that repeat, and records that ask the same question about the
same media.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from vlrl.config import Config
from vlrl.models.families import model_family
from vlrl.models.prompting import UnusableSample, read_media
from vlrl.tasking.sources import read_split
from vlrl.tasking.task import Task


@dataclass
class Validation:
    path: str
    records: int = 0  # records the file holds, usable or not
    unit: str = "records"  # what a record is (a COCO file's: images)
    usable: int = 0  # records a run would train on (repeats included)
    problems: list[str] = field(default_factory=list)  # "file:line: what is wrong"
    kinds: Counter = field(default_factory=Counter)

    def add(self, kind: str, problem: str) -> None:
        self.problems.append(problem)
        self.kinds[kind] += 1

    def summary(self) -> str:
        if not self.records:
            return f"{self.path}: no {self.unit} (a run refuses it: no usable records)"
        if not self.problems:
            return f"{self.path}: {self.records} {self.unit}, all usable"
        kinds = ", ".join(f"{n} {kind}" for kind, n in self.kinds.most_common())
        return f"{self.path}: {self.records} {self.unit}, {self.usable} usable; {len(self.problems)} problems ({kinds})"


def validate_split(task: Task, path: str, cfg: Config, progress: Callable[[int], None] | None = None) -> Validation:
    every = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, strict=False, limit=0))  # every problem
    split = read_split(task, path, every, True, cfg.data.columns)  # as a run reads it: tables, data.columns
    report = Validation(path, split.records, split.unit)
    if not report.records:
        report.add(f"no {split.unit}", f"{path}: holds no {split.unit}")
    for err in split.errors:
        report.add("bad records", str(err))
    first_of_id: dict[str, str] = {}
    first_of_prompt: dict[tuple, str] = {}
    vision_tokens = model_family(cfg.model).vision_tokens
    for sample in split.samples:
        if sample.id in first_of_id:
            report.add(
                "repeated ids", f"{sample.source}: id {sample.id!r} repeats the record at {first_of_id[sample.id]}"
            )
        first_of_id.setdefault(sample.id, sample.source)
        prompt = (tuple(sample.images), sample.video, sample.problem)
        if prompt in first_of_prompt:
            report.add(
                "repeated questions",
                f"{sample.source}: same media and question as the record at {first_of_prompt[prompt]}",
            )
        first_of_prompt.setdefault(prompt, sample.source)
        text = messages_text(task.messages(sample))
        written = [token for token in vision_tokens if token in text]
        if written:
            report.add(
                "vision tokens in the text",
                f"{sample.source}: its prompt's text holds {', '.join(written)}, which the processor refuses "
                "(a run leaves the sample out)",
            )
        try:
            read_media(sample, cfg.model, {})
            report.usable += not written
        except UnusableSample as err:
            report.add("undecodable media", str(err))
        if progress:
            progress(1)
    return report


def messages_text(messages: list[dict]) -> str:
    """Every text part of the messages, joined (a content is a string or a list of parts)."""
    texts = []
    for message in messages:
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [part["text"] for part in parts if part.get("type") == "text"]
    return "\n".join(texts)
