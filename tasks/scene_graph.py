"""Scene-graph generation as R1-SGG trains it (alias `r1_sgg`): objects with boxes and relation
triplets, node- and edge-level matching rewards.

Records (R1-SGG's; data_prep/scene_graph.py): `image`, optional `image_id`, `objects` (a list,
or a JSON string of one, of {"id": "name.N", "bbox": [x1, y1, x2, y2]} in original pixels,
ids unique), `relationships` (the same, of {"subject", "predicate", "object"} naming object
ids), optional `prompt_close` (read with `vocabulary: closed`, as R1-SGG's collator reads it).

Prompt: R1-V's system prompt (`system_prompt`), then the image and R1-SGG's PROMPT_SG (open
vocabulary), or with `vocabulary: closed` its closed-set template listing
`object_categories` and `predicate_categories` (`--use_predefined_cats`), the record's
`prompt_close` where it has one; "of size (W x H) " is removed, as there. The answer is a
JSON graph in <answer>, boxes in the model's frame.

Rewards (rewards/scene_graph.py holds the definitions and their source), each in [0, 1],
their weights carrying R1-SGG's scales: `format` (1), `node_acc` (2), `node_box` (2), `edge`
(5), `edge_hard` (5, the README's "Hard Recall"), `edge_hard_relax` (5). Defaults: R1-SGG's
default set, format + node_acc + node_box + edge. `format_variant: head` is R1-SGG's format
reward as published (0 for any graph with an object); `strict_format: false` gives a valid
graph without the tags 0.5.

Metrics (R1-SGG's src/vg150_eval.py, its "ngR"): `recall` (ground-truth triplets recalled by a
predicted one with the same predicate and categories and IoU >= 0.5 for both boxes, over the
split), `mean_recall` (the mean over predicates), `recall_per_image`; `format_rate`, `parse_rate`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from data_prep.scene_graph import PREDICATES, write_synthetic_scene_graphs
from data_prep.shapes import SHAPES
from rewards.scene_graph import (
    GRAPH_REWARDS,
    HARD_IOU,
    Graph,
    GraphError,
    Node,
    Relation,
    graph_format,
    graph_reward,
    iou,
    json_field,
    read_prediction,
    refine,
)
from tasks.records import record_image
from vlrl.config import ConfigError
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

# R1-V's system prompt, which R1-SGG's collator gives every sample (open_r1/grpo.py SYSTEM_PROMPT).
R1V_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think><answer> answer here </answer>"
)
_EXAMPLE = (
    '```json\n{\n  "objects": [\n    {"id": "person.1", "bbox": [120, 200, 350, 700]},\n'
    '    {"id": "bike.2", "bbox": [100, 600, 400, 800]},\n    {"id": "helmet.3", "bbox": [150, 150, 280, 240]},\n'
    '    {"id": "tree.4", "bbox": [500, 100, 750, 700]}\n  ],\n  "relationships": [\n'
    '    {"subject": "person.1", "predicate": "riding", "object": "bike.2"},\n'
    '    {"subject": "person.1", "predicate": "wearing", "object": "helmet.3"}\n  ]\n}\n```\n\n'
    "Now, generate the complete scene graph for the provided image:\n"
)
_FORMAT = (
    '```json\n{\n  "objects": [\n    {"id": "object_name.number", "bbox": [x1, y1, x2, y2]},\n    ...\n  ],\n'
    '  "relationships": [\n    {"subject": "object_name.number", "predicate": "relationship_type", '
    '"object": "object_name.number"},\n    ...\n  ]\n}\n```\n\n'
)
# R1-SGG's prompts (open_r1/trainer/utils/prompt_gallery.py PROMPT_SG, PROMPT_CLOSE_TEMPLATE).
PROMPT_SG = (
    "Generate a structured scene graph for an image using the following format:\n\n" + _FORMAT + "### **Guidelines:**\n"
    "- **Objects:**\n"
    '  - Assign a unique ID for each object using the format `"object_name.number"` (e.g., `"person.1"`, `"bike.2"`).\n'
    "  - Provide its bounding box `[x1, y1, x2, y2]` in integer pixel format.\n"
    "  - Include all visible objects, even if they have no relationships.\n\n"
    "- **Relationships:**\n"
    '  - Represent interactions accurately using `"subject"`, `"predicate"`, and `"object"`.\n'
    "  - Omit relationships for orphan objects.\n\n"
    "### **Example Output:**\n" + _EXAMPLE
)
PROMPT_CLOSE_TEMPLATE = (
    "Generate a structured scene graph for an image using the specified object and relationship categories.\n\n"
    "### **Output Format:**\n" + _FORMAT + "### **Guidelines:**\n"
    "- **Objects:**\n"
    '  - Assign unique IDs in the format `"object_name.number"` (e.g., `"person.1"`). The **object_name** must '
    "belong to the predefined object set: `{OBJ_CLS}`.\n"
    "  - Provide a bounding box `[x1, y1, x2, y2]` in integer pixel format.\n"
    "  - Include all visible objects, even if they have no relationships.\n\n"
    "- **Relationships:**\n"
    '  - Define relationships using `"subject"`, `"predicate"`, and `"object"`.\n'
    "  - The **predicate** must belong to the predefined relationship set: `{REL_CLS}`.\n"
    "  - Omit relationships for orphan objects.\n\n"
    "### **Example Output:**\n" + _EXAMPLE
)
BOX_SLACK = 1.0


@dataclass
class SceneGraphOptions:
    vocabulary: Literal["open", "closed"] = "open"  # closed: R1-SGG's --use_predefined_cats
    # The closed prompt's sets (a record's prompt_close replaces the whole prompt); default: the synthetic data's.
    object_categories: list[str] = field(default_factory=lambda: list(SHAPES))
    predicate_categories: list[str] = field(default_factory=lambda: list(PREDICATES))
    system_prompt: str = R1V_SYSTEM_PROMPT  # "": none
    # intended: the format rule R1-SGG's code means (and ran until 01aaf6d); head: as published (an
    # unhashable set() scores every graph with an object 0).
    format_variant: Literal["intended", "head"] = "intended"
    strict_format: bool = True  # R1-SGG's STRICT_FORMAT; false: a valid graph without the tags scores 0.5
    target_think: str = "The image shows {count} objects."  # reasoning text of the SFT target

    def __post_init__(self) -> None:
        if self.vocabulary == "closed" and not (self.object_categories and self.predicate_categories):
            raise ConfigError("config: task.options.vocabulary=closed needs object_categories and predicate_categories")


class SceneGraph(Task):
    name = "scene_graph"
    description = "Scene-graph generation (R1-SGG): objects with boxes and relation triplets, node and edge rewards"
    accuracy_metric = "recall_per_image"  # one image's triplet recall; its mean over images is the metric
    headline = ("recall", "mean_recall", "recall_per_image")
    Options = SceneGraphOptions
    option_templates = {"target_think": ("count",)}
    default_rewards = {"format": 1.0, "node_acc": 2.0, "node_box": 2.0, "edge": 5.0}

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        path, width, height = record_image(record, ctx)
        objects = [_object(o, i, ctx, width, height) for i, o in enumerate(_json_list(record, "objects", ctx))]
        ids = [o["id"] for o in objects]
        if len(set(ids)) != len(ids):
            raise ctx.error("key 'objects' repeats an id")
        relations = [_relation(r, i, ctx, ids) for i, r in enumerate(_json_list(record, "relationships", ctx))]
        # R1-SGG's collator: ground-truth boxes times (1 / width, 1 / height)
        sx, sy = 1.0 / width, 1.0 / height
        graph = Graph(
            tuple(
                Node(o["id"], (o["bbox"][0] * sx, o["bbox"][1] * sy, o["bbox"][2] * sx, o["bbox"][3] * sy))
                for o in objects
            ),
            tuple(Relation(r["subject"], r["predicate"], r["object"]) for r in relations),
        )
        prompt = record.get("prompt_close") if self.options.vocabulary == "closed" else None
        if prompt is not None and not isinstance(prompt, str):
            raise ctx.error("key 'prompt_close' must be text")
        return Sample(
            id=str(record.get("image_id", ctx.record_id(record))),
            task=self.name,
            problem=_answer_as_fence(self._prompt(prompt).replace(f"of size ({width} x {height}) ", "")),
            solution={"objects": objects, "relationships": relations},
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta={"graph": graph},
            source=ctx.source,
        )

    def _prompt(self, prompt_close: str | None) -> str:
        if self.options.vocabulary == "open":
            return PROMPT_SG
        if prompt_close is not None:
            return prompt_close
        return PROMPT_CLOSE_TEMPLATE.replace("{OBJ_CLS}", json.dumps(self.options.object_categories)).replace(
            "{REL_CLS}", json.dumps(self.options.predicate_categories)
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_scene_graphs(path, size, seed)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": sample.problem}]}
        system = self.options.system_prompt
        return [{"role": "system", "content": [{"type": "text", "text": system}]}, user] if system else [user]

    def target(self, sample: Sample) -> str:
        objects = [{"id": o["id"], "bbox": sample.frame.box_to_model(o["bbox"])} for o in sample.solution["objects"]]
        graph = json.dumps({"objects": objects, "relationships": sample.solution["relationships"]})
        think = self.options.target_think.format(count=len(objects))
        return f"<think>{think}</think>\n<answer>{graph}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        rewards: dict[str, RewardFn] = {
            "format": lambda completions, samples: [
                graph_format(c, self.options.format_variant, self.options.strict_format) for c in completions
            ]
        }
        for name in GRAPH_REWARDS:
            rewards[name] = self._graph_reward(name)
        return rewards

    @staticmethod
    def _graph_reward(name: str) -> RewardFn:
        def reward(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
            return [
                graph_reward(name, c, s.meta["graph"], *_scale(s)) for c, s in zip(completions, samples, strict=True)
            ]

        return reward

    def predict(self, completion: str, sample: Sample) -> dict[str, list] | None:
        """The graph's objects (ids refined, boxes in original pixels) and the relations among
        them (refined, naming known ids), as R1-SGG's evaluation gathers them
        (src/sgg_gather_preds.py): None where it drops the whole image, at a graph its rewards
        cannot read or at any relation that is not three strings; an id given twice is its
        first object (`names.index`)."""
        try:
            pred = read_prediction(completion, 1.0, 1.0)
            relations = [
                {k: refine(json_field(r, k)) for k in ("subject", "predicate", "object")} for r in pred.relations()
            ]
        except GraphError:
            return None
        frame = sample.frame
        objects: dict[str, list[float]] = {}
        named: set[str] = set()
        for node in pred.objects:
            box = frame.box_to_original(node.bbox)
            if node.id not in named and all(math.isfinite(v) for v in box):  # not finite: never recalled
                objects[node.id] = box
            named.add(node.id)
        kept = [r for r in relations if r["subject"] in objects and r["object"] in objects]
        return {"objects": [{"id": k, "bbox": v} for k, v in objects.items()], "relationships": kept}

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        predictions = [self.predict(c, s) for c, s in zip(completions, samples, strict=True)]
        hits: list[bool] = []
        by_predicate: dict[str, list[bool]] = defaultdict(list)
        per_image: list[float] = []
        for sample, pred in zip(samples, predictions, strict=True):
            mine = [
                (r["predicate"], recalled(r, sample.solution["objects"], pred))
                for r in sample.solution["relationships"]
            ]
            for predicate, hit in mine:
                hits.append(hit)
                by_predicate[refine(predicate)].append(hit)
            if mine:
                per_image.append(sum(hit for _, hit in mine) / len(mine))
        out = {
            "recall": sum(hits) / len(hits) if hits else 0.0,
            "mean_recall": sum(sum(v) / len(v) for v in by_predicate.values()) / len(by_predicate)
            if by_predicate
            else 0.0,
            "recall_per_image": sum(per_image) / len(per_image) if per_image else 0.0,
        }
        out["format_rate"] = sum(self.reward_functions()["format"](list(completions), list(samples))) / n
        out["parse_rate"] = sum(p is not None for p in predictions) / n
        return out


def _answer_as_fence(prompt: str) -> str:
    """R1-SGG's collator (grpo.py replace_answer_format): a prompt's <answer> tags become a
    ```json fence (its own prompts have none; its datasets' prompt_close may)."""
    return prompt.replace("<answer>", "```json").replace("</answer>", "```")


def recalled(relation: dict[str, str], objects: list[dict[str, Any]], pred: dict[str, list] | None) -> bool:
    """R1-SGG's evaluation (src/vg150_eval.py): some predicted triplet has the relation's
    predicate and categories, and IoU >= 0.5 for both boxes (original pixels)."""
    if pred is None:
        return False
    boxes = {refine(o["id"]): o["bbox"] for o in objects}
    predicted = {o["id"]: o["bbox"] for o in pred["objects"]}
    subject, obj = refine(relation["subject"]), refine(relation["object"])
    for p in pred["relationships"]:
        if refine(relation["predicate"]) != p["predicate"]:
            continue
        if subject.split(".")[0].strip() != p["subject"].split(".")[0].strip():
            continue
        if obj.split(".")[0].strip() != p["object"].split(".")[0].strip():
            continue
        if (
            iou(boxes[subject], predicted[p["subject"]]) >= HARD_IOU
            and iou(boxes[obj], predicted[p["object"]]) >= HARD_IOU
        ):
            return True
    return False


def _scale(sample: Sample) -> tuple[float, float]:
    """R1-SGG's box_scale: predictions times 1 / (the model frame's extent) are in [0, 1]."""
    return 1.0 / sample.frame.model_width, 1.0 / sample.frame.model_height


def _json_list(record: dict[str, Any], key: str, ctx: RecordContext) -> list:
    value = ctx.get(record, key, (list, str), "a list (or a JSON string of one)")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ctx.error(f"key {key!r} is a string but not JSON: {err.msg}") from err
        if not isinstance(value, list):
            raise ctx.error(f"key {key!r} must hold a list, got {type(value).__name__}")
    return value


def _object(item: Any, index: int, ctx: RecordContext, width: int, height: int) -> dict[str, Any]:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"].strip():
        raise ctx.error(f'objects[{index}] must be {{"id": "name.N", "bbox": [x1, y1, x2, y2]}}'[:200])
    box = item.get("bbox")
    if not (
        isinstance(box, list)
        and len(box) == 4
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in box)
    ):
        raise ctx.error(f"objects[{index}] ({item['id']}): bbox must be 4 finite numbers, got {box!r}"[:200])
    x1, y1, x2, y2 = box
    if not (-BOX_SLACK <= x1 <= x2 <= width + BOX_SLACK and -BOX_SLACK <= y1 <= y2 <= height + BOX_SLACK):
        raise ctx.error(f"objects[{index}] ({item['id']}): bbox {box} is outside the {width}x{height} image")
    return {"id": item["id"], "bbox": [float(v) for v in box]}


def _relation(item: Any, index: int, ctx: RecordContext, ids: list[str]) -> dict[str, str]:
    keys = ("subject", "predicate", "object")
    if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in keys):
        raise ctx.error(f"relationships[{index}] must be three strings {keys}, got {item!r}"[:200])
    for key in ("subject", "object"):
        if item[key] not in ids:
            raise ctx.error(f"relationships[{index}] names {item[key]!r}, which is no object id"[:200])
    return {k: item[k] for k in keys}
