"""R1-SGG's scene-graph rewards against the values its own functions give (gpt4vision/R1-SGG@e4de64d,
open_r1/grpo.py; read off a copy of node_acc_reward, node_box_reward, edge_reward,
edge_hard_reward and format_reward run on these exact strings, with spaCy's similarity replaced by
the exact-match rule, which is spaCy's value wherever the names are identical), divided by R1-SGG's
scales (nodes 2, edges 5)."""

from __future__ import annotations

import json
import time

import pytest

from rewards.scene_graph import Graph, Node, Relation, graph_format, graph_reward

W, H = 1000, 500
# The ground truth as R1-SGG's collator holds it: original pixels times (1 / W, 1 / H).
GT = Graph(
    (
        Node("man.1", (100 * (1 / W), 50 * (1 / H), 300 * (1 / W), 450 * (1 / H))),
        Node("horse.2", (250 * (1 / W), 200 * (1 / H), 700 * (1 / W), 480 * (1 / H))),
    ),
    (Relation("man.1", "riding", "horse.2"),),
)
SCALE = (1 / 1000, 1 / 1000)  # Qwen2-VL answers in 0-1000


def completion(objects, relationships, think="a man rides a horse") -> str:
    return f"<think>{think}</think><answer>{json.dumps({'objects': objects, 'relationships': relationships})}</answer>"


EXACT = completion(
    [{"id": "man.1", "bbox": [100, 100, 300, 900]}, {"id": "horse.2", "bbox": [250, 400, 700, 960]}],
    [{"subject": "man.1", "predicate": "riding", "object": "horse.2"}],
)
OTHER = completion(
    [
        {"id": "person.1", "bbox": [110, 100, 300, 900]},
        {"id": "horse.2", "bbox": [250, 400, 700, 960]},
        {"id": "tree.3", "bbox": [0, 0, 100, 100]},
    ],
    [{"subject": "person.1", "predicate": "on", "object": "horse.2"}],
)


def rewards(text: str) -> dict[str, float]:
    names = ("node_acc", "node_box", "edge", "edge_hard", "edge_hard_relax")
    return {name: graph_reward(name, text, GT, *SCALE) for name in names}


def test_the_worked_examples():
    assert rewards(EXACT) == pytest.approx(
        {"node_acc": 1.0, "node_box": 1.0, "edge": 1.0, "edge_hard": 1.0, "edge_hard_relax": 1.0}
    )
    # person.1 vs man.1: no category match (spaCy would give a value in (0, 1)); tree.3 unmatched, free
    assert rewards(OTHER) == pytest.approx(
        {"node_acc": 0.5, "node_box": 0.9893035120532743, "edge": 0.0, "edge_hard": 0.0, "edge_hard_relax": 0.0}
    )


def test_the_format_reward_as_meant_and_as_published():
    assert graph_format(EXACT) == 1.0
    assert graph_format(EXACT, "head") == 0.0  # set() over dicts raises: every graph with an object scores 0
    empty = completion([], [])
    assert graph_format(empty, "head") == 1.0 and graph_format(empty) == 1.0
    untagged = json.dumps({"objects": [], "relationships": []})
    assert graph_format(untagged) == 0.0 and graph_format(untagged, strict=False) == 0.5
    dangling = completion(
        [{"id": "man.1", "bbox": [1, 2, 3, 4]}], [{"subject": "man.1", "predicate": "on", "object": "x.2"}]
    )
    assert graph_format(dangling, strict=False) == 0.0
    assert graph_format(EXACT + " trailing") == 0.0 and graph_format(EXACT + " trailing", strict=False) == 0.5
    assert graph_format("```json\n" + EXACT + "\n```") == 0.0  # the fence breaks the full match
    int_id = completion([{"id": 7, "bbox": [1, 2, 3, 4]}], [])
    assert graph_format(int_id, strict=False) == 0.0  # its id check runs re.fullmatch on the int and raises
    bad_box_first = completion([{"id": "a.1", "bbox": [1, 2, 3]}, {"id": 7, "bbox": [1, 2, 3, 4]}], [])
    assert graph_format(bad_box_first, strict=False) == 0.0


def test_matching_quirks_of_the_public_code():
    # predicted ids are refined (lower case, "_" and "-" to spaces), the ground truth's are not
    assert rewards(EXACT.replace("man.1", " MAN.1 ")) == rewards(EXACT)
    assert rewards(EXACT.replace("horse.2", "race_horse.2"))["node_acc"] == pytest.approx(0.5)  # "race horse"
    # the last predicate given for an ordered pair wins
    twice = [
        {"subject": "man.1", "predicate": "riding", "object": "horse.2"},
        {"subject": "man.1", "predicate": "near", "object": "horse.2"},
    ]
    objects = json.loads(EXACT.split("<answer>")[1].split("</answer>")[0])["objects"]
    assert rewards(completion(objects, twice))["edge"] == 0.0
    assert rewards(completion(objects, twice))["edge_hard"] == 1.0  # any predicted triplet may recall it
    # a relation naming an unknown id zeroes the hard rewards (a KeyError there), not the others
    unknown = [*twice[:1], {"subject": "cat.9", "predicate": "riding", "object": "horse.2"}]
    assert rewards(completion(objects, unknown)) == pytest.approx(
        {"node_acc": 1.0, "node_box": 1.0, "edge": 1.0, "edge_hard": 1.0, "edge_hard_relax": 0.0}
    )  # edge_hard stops at its first match; relax reads every prediction
    assert rewards(completion(objects, unknown[::-1]))["edge_hard"] == 0.0
    # fewer predictions than ground truth: the missing ones score nothing
    assert rewards(completion(objects[:1], []))["node_acc"] == pytest.approx(0.5)
    # "man_.1" refines to "man .1", whose category "man " spaCy reads as the token "man" and a
    # trailing space: identical tokens, similarity 1 (checked with spaCy 3.8); two spaces are a token
    assert rewards(EXACT.replace('"man.1"', '"man_.1"', 1))["node_acc"] == pytest.approx(1.0)
    assert rewards(EXACT.replace('"man.1"', '"man__.1"', 1))["node_acc"] == pytest.approx(0.5)
    assert rewards(EXACT.replace('"riding"', '"riding ."'))["edge"] == pytest.approx(1.0)


def test_fences_and_every_word_json_are_blanked_before_the_answer_is_read():
    body = EXACT.split("<answer>")[1].split("</answer>")[0]
    assert rewards(EXACT.replace(body, "```json\n" + body + "\n```")) == rewards(EXACT)
    # R1-SGG blanks "json" everywhere, inside an id too: "jsonman.1" reads as " man.1", refined "man.1"
    assert rewards(EXACT.replace('"man.1"', '"jsonman.1"', 1)) == rewards(EXACT)


def test_the_hard_rewards_recall_a_triplet_at_exactly_half_iou():
    """R1-SGG's hard gate is IoU >= 0.5 for both boxes (dyadic boxes: the IoU is exactly 1/2)."""
    gt = Graph(
        (Node("man.1", (0.0, 0.0, 0.5, 0.5)), Node("horse.2", (0.5, 0.5, 1.0, 1.0))),
        (Relation("man.1", "riding", "horse.2"),),
    )
    riding = [{"subject": "man.1", "predicate": "riding", "object": "horse.2"}]
    half = completion(
        [{"id": "man.1", "bbox": [0, 0, 512, 1024]}, {"id": "horse.2", "bbox": [512, 512, 1024, 1024]}], riding
    )
    for name in ("edge_hard", "edge_hard_relax"):
        assert graph_reward(name, half, gt, 1 / 1024, 1 / 1024) == 1.0
        assert graph_reward(name, half.replace("1024]}, {", "1026]}, {"), gt, 1 / 1024, 1 / 1024) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<answer>not json</answer>",
        completion([{"id": "man.1", "bbox": [1, 2, 3]}], []),
        completion([{"id": "man.1", "bbox": ["1", 2, 3, 4]}], []),
        completion([{"id": ["man.1"], "bbox": [1, 2, 3, 4]}], []),
        "<answer>"
        + json.dumps({"objects": [{"id": "man.1", "bbox": [float("nan"), 0, 1, 1]}], "relationships": []})
        + "</answer>",
        "<answer>"
        + json.dumps({"objects": [{"id": "man.1", "bbox": [10**400, 0, 1, 1]}], "relationships": []})
        + "</answer>",
        "<answer>" + "[" * 5000 + "]" * 5000 + "</answer>",
        "<answer>{" + '"objects": [' + '{"id": "a.1", "bbox": [1, 2, 3, 4]},' * 3000 + "{}]}</answer>",
    ],
)
def test_hostile_answers_score_zero_quickly(text):
    start = time.perf_counter()
    assert rewards(text) == {name: 0.0 for name in rewards("")}
    assert graph_format(text) == 0.0
    assert time.perf_counter() - start < 5.0
