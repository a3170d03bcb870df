"""scene_graph (R1-SGG): records, prompts, the model frames' scale, and the recall of R1-SGG's
evaluation (gpt4vision/R1-SGG@e4de64d src/vg150_eval.py, its "ngR")."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from tasks.scene_graph import PROMPT_SG, R1V_SYSTEM_PROMPT, SceneGraph
from tests.rewards.test_scene_graph_rewards import EXACT, OTHER, completion
from vlrl.data.records import FrameSpec, RecordContext, RecordError
from vlrl.tasking.scoring import score

QWEN2 = FrameSpec("norm1000", 3136, 1_000_000, 28)
QWEN25 = FrameSpec("absolute", 3136, 1_000_000, 28)
RECORD = {
    "image": "a.png",
    "image_id": "2343",
    "objects": json.dumps(
        [{"id": "man.1", "bbox": [100, 50, 300, 450]}, {"id": "horse.2", "bbox": [250, 200, 700, 480]}]
    ),
    "relationships": json.dumps([{"subject": "man.1", "predicate": "riding", "object": "horse.2"}]),
}


@pytest.fixture()
def root(tmp_path):
    Image.new("RGB", (1000, 500)).save(tmp_path / "a.png")
    return tmp_path


def sample_of(root, record=RECORD, spec=QWEN2, **options):
    return SceneGraph(options=options).build_sample(record, RecordContext("g.json:4", 3, root, spec))


def test_records_read_as_r1_sggs_collator_reads_them(root):
    task = SceneGraph()
    sample = sample_of(root)
    assert sample.id == "2343" and sample.solution["relationships"][0]["predicate"] == "riding"
    assert task.messages(sample) == [
        {"role": "system", "content": [{"type": "text", "text": R1V_SYSTEM_PROMPT}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT_SG}]},
    ]
    scores = score(task, [EXACT, OTHER], [sample, sample])
    # format 1 + nodes 2 x (1, 1) + edge 5 x 1; the other: 1 + 2 x 0.5 + 2 x 0.9893 + 0
    assert scores.total == pytest.approx([10.0, 1.0 + 2 * 0.5 + 2 * 0.9893035120532743])
    head = SceneGraph(options={"format_variant": "head"})
    assert score(head, [EXACT], [sample]).total == [9.0]  # R1-SGG as published: its format scores 0


def test_a_model_in_pixels_of_the_resized_image_is_scaled_by_that_size(root):
    task = SceneGraph()
    sample = sample_of(root, spec=QWEN25)
    frame = sample.frame
    assert (frame.model_width, frame.model_height) != (1000, 500)  # smart_resize moved it
    boxes = [frame.box_to_model(b, integer=False) for b in ([100, 50, 300, 450], [250, 200, 700, 480])]
    text = completion(
        [{"id": "man.1", "bbox": boxes[0]}, {"id": "horse.2", "bbox": boxes[1]}],
        [{"subject": "man.1", "predicate": "riding", "object": "horse.2"}],
    )
    assert score(task, [text], [sample]).components["node_box"][0] == pytest.approx(1.0)


def test_the_closed_vocabulary_prompt_lists_the_sets_or_takes_the_records(root):
    sample = sample_of(root, vocabulary="closed", object_categories=["man", "horse"], predicate_categories=["riding"])
    assert '`["man", "horse"]`' in sample.problem and '`["riding"]`' in sample.problem
    own = sample_of(root, {**RECORD, "prompt_close": "Graph of size (1000 x 500) the image."}, vocabulary="closed")
    assert own.problem == "Graph the image."  # the image size is never given, as in R1-SGG
    assert sample_of(root, {**RECORD, "prompt_close": "mine"}).problem == PROMPT_SG  # open: R1-SGG's PROMPT_SG
    tagged = {**RECORD, "prompt_close": "Output Format:\n<answer>\n{...}\n</answer>"}
    assert sample_of(root, tagged, vocabulary="closed").problem == "Output Format:\n```json\n{...}\n```"  # its collator


def test_recall_is_r1_sggs_triplet_recall(root):
    task = SceneGraph()
    sample = sample_of(root)
    two = {
        **RECORD,
        "relationships": [
            {"subject": "man.1", "predicate": "riding", "object": "horse.2"},
            {"subject": "horse.2", "predicate": "under", "object": "man.1"},
        ],
    }
    other = sample_of(root, two)
    metrics = task.metrics([sample, other, other], [EXACT, EXACT, OTHER])
    # triplets recalled: 1 of 1, 1 of 2, 0 of 2; predicates: riding 2 of 3, under 0 of 2
    assert metrics["recall"] == pytest.approx(2 / 5)
    assert metrics["mean_recall"] == pytest.approx((2 / 3 + 0) / 2)
    assert metrics["recall_per_image"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert metrics["format_rate"] == 1.0 and metrics["parse_rate"] == 1.0
    assert task.predict(EXACT, sample)["objects"][0] == {"id": "man.1", "bbox": [100.0, 50.0, 300.0, 450.0]}


def test_a_triplet_is_recalled_only_with_both_categories_and_both_boxes_right(root):
    sample = sample_of(root)
    man, horse = {"id": "man.1", "bbox": [100, 100, 300, 900]}, {"id": "horse.2", "bbox": [250, 400, 700, 960]}
    riding = {"subject": "man.1", "predicate": "riding", "object": "horse.2"}
    dog = completion([{**man, "id": "dog.1"}, horse], [{**riding, "subject": "dog.1"}])  # the right boxes
    far = completion([man, {**horse, "bbox": [600, 0, 1000, 100]}], [riding])  # the object's box elsewhere
    for answer in (dog, far):
        assert SceneGraph().metrics([sample], [answer])["recall"] == 0.0
    assert SceneGraph().metrics([sample], [completion([man, horse], [riding])])["recall"] == 1.0


def test_mean_recall_groups_predicates_by_their_refined_name(root):
    capital = {
        **RECORD,
        "relationships": json.dumps([{"subject": "man.1", "predicate": "Riding", "object": "horse.2"}]),
    }
    samples = [sample_of(root), sample_of(root), sample_of(root, capital)]
    metrics = SceneGraph().metrics(samples, [EXACT, EXACT, OTHER])
    assert metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["mean_recall"] == pytest.approx(2 / 3)  # one predicate, "riding": 2 of 3


def test_a_triplet_is_recalled_at_exactly_half_iou_as_r1_sggs_evaluation(root):
    sample = sample_of(root)
    riding = {"subject": "man.1", "predicate": "riding", "object": "horse.2"}
    man, horse = {"id": "man.1", "bbox": [100, 100, 300, 500]}, {"id": "horse.2", "bbox": [250, 400, 700, 960]}
    half = completion([man, horse], [riding])  # the man's box is the upper half of his: IoU 1/2
    assert SceneGraph().predict(half, sample)["objects"][0]["bbox"] == [100.0, 50.0, 300.0, 250.0]
    assert SceneGraph().metrics([sample], [half])["recall"] == 1.0
    less = completion([{**man, "bbox": [100, 100, 300, 498]}, horse], [riding])
    assert SceneGraph().metrics([sample], [less])["recall"] == 0.0


def test_an_image_without_relations_leaves_per_image_recall_to_the_others(root):
    no_relations = sample_of(root, {**RECORD, "relationships": []})
    metrics = SceneGraph().metrics([sample_of(root), no_relations], [EXACT, EXACT])
    assert metrics["recall"] == 1.0 and metrics["recall_per_image"] == 1.0


def test_a_predicted_relation_naming_an_undeclared_object_is_dropped(root):
    man = {"id": "man.1", "bbox": [100, 100, 300, 900]}
    answer = completion([man], [{"subject": "man.1", "predicate": "riding", "object": "horse.2"}])
    assert SceneGraph().predict(answer, sample_of(root))["relationships"] == []
    assert SceneGraph().metrics([sample_of(root)], [answer])["recall"] == 0.0


def test_an_id_given_twice_is_its_first_object_as_r1_sggs_names_index(root):
    riding = {"subject": "man.1", "predicate": "riding", "object": "horse.2"}
    man, horse = {"id": "man.1", "bbox": [100, 100, 300, 900]}, {"id": "horse.2", "bbox": [250, 400, 700, 960]}
    elsewhere = {"id": "MAN.1", "bbox": [700, 700, 900, 900]}  # the same id once refined
    assert SceneGraph().metrics([sample_of(root)], [completion([man, elsewhere, horse], [riding])])["recall"] == 1.0
    assert SceneGraph().metrics([sample_of(root)], [completion([elsewhere, man, horse], [riding])])["recall"] == 0.0


@pytest.mark.parametrize(
    "bad", [{"subject": "man.1", "object": "horse.2"}, {"subject": 1, "predicate": "on", "object": "horse.2"}, "man.1"]
)
def test_one_malformed_relation_drops_the_image_as_r1_sggs_evaluation_does(root, bad):
    riding = {"subject": "man.1", "predicate": "riding", "object": "horse.2"}
    man, horse = {"id": "man.1", "bbox": [100, 100, 300, 900]}, {"id": "horse.2", "bbox": [250, 400, 700, 960]}
    answer = completion([man, horse], [riding, bad])
    assert SceneGraph().predict(answer, sample_of(root)) is None
    assert SceneGraph().metrics([sample_of(root)], [answer])["recall"] == 0.0


@pytest.mark.parametrize(
    "change,message",
    [
        ({"objects": "[{"}, "objects' is a string but not JSON"),
        ({"objects": [{"id": "man.1", "bbox": [1, 2, 3]}]}, r"objects\[0\] \(man.1\): bbox must be 4"),
        ({"objects": [{"id": "man.1", "bbox": [1, 2, 3000, 4]}]}, "outside the 1000x500 image"),
        ({"objects": [{"id": "a.1", "bbox": [1, 2, 3, 4]}] * 2, "relationships": []}, "repeats an id"),
        (
            {"relationships": [{"subject": "man.1", "predicate": "on", "object": "cat.3"}]},
            "'cat.3', which is no object",
        ),
        ({"relationships": [{"subject": "man.1", "object": "horse.2"}]}, "three strings"),
    ],
)
def test_bad_records_are_refused_by_place(root, change, message):
    with pytest.raises(RecordError, match=f"g.json:4: .*{message}"):
        sample_of(root, {**RECORD, **change})


def expected_predicate(subject_box, object_box):
    """Where the subject's box center lies from the object's, along the axis they differ most on."""
    dx = (subject_box[0] + subject_box[2]) / 2 - (object_box[0] + object_box[2]) / 2
    dy = (subject_box[1] + subject_box[3]) / 2 - (object_box[1] + object_box[3]) / 2
    if abs(dx) >= abs(dy):
        return "left of" if dx < 0 else "right of"
    return "above" if dy < 0 else "below"


def test_synthetic_scene_graphs_relate_each_pair_once_by_where_the_subject_lies(tmp_path):
    from data_prep.scene_graph import write_synthetic_scene_graphs
    from data_prep.shapes import SceneSpec

    spec = SceneSpec(min_objects=1, max_objects=4, min_side=160, max_side=256)  # one-object scenes are skipped
    records = json.loads(write_synthetic_scene_graphs(tmp_path / "sg.json", 8, 0, spec).read_text())
    assert len({r["image_id"] for r in records}) == 8
    for r in records:
        ids = [o["id"] for o in r["objects"]]
        assert len(ids) >= 2 and [i.split(".")[1] for i in ids] == [str(k) for k in range(1, len(ids) + 1)]
        boxes = {o["id"]: o["bbox"] for o in r["objects"]}
        pairs = [(ids[i], ids[j]) for i in range(len(ids)) for j in range(i + 1, len(ids))]
        assert [(x["subject"], x["object"]) for x in r["relationships"]] == pairs
        for x in r["relationships"]:
            assert x["predicate"] == expected_predicate(boxes[x["subject"]], boxes[x["object"]])
