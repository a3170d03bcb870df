"""multi_image_grounding (UniVG-R1): records, prompts and rewards against the values UniVG-R1's
`iou_reward` and `format_reward_rec` give (AMAP-ML/UniVG-R1@44868ea, vlm_modules/qwen_module.py;
read off a copy of those functions run on these exact strings)."""

from __future__ import annotations

import pytest
from PIL import Image

from rewards.grounding import parse_mig_bench_box
from tasks.multi_image_grounding import UNIVG_R1_TEMPLATE, MultiImageGrounding
from vlrl.data.records import FrameSpec, RecordContext, RecordError
from vlrl.tasking.scoring import score

QWEN2 = FrameSpec("norm1000", 3136, 50176, 28)
QWEN25 = FrameSpec("absolute", 3136, 50176, 28)


@pytest.fixture()
def images(tmp_path):
    Image.new("RGB", (200, 100)).save(tmp_path / "a.png")
    Image.new("RGB", (300, 150)).save(tmp_path / "b.png")
    (tmp_path / "dataset/coco/train2014").mkdir(parents=True)
    Image.new("RGB", (64, 64)).save(tmp_path / "dataset/coco/train2014/COCO_1.png")
    return tmp_path


def sample_of(root, record, spec=QWEN2, **options):
    return MultiImageGrounding(options=options).build_sample(record, RecordContext("d.json:2", 0, root, spec))


RECORD = {
    "images": ["a.png", "b.png"],
    "question": "<image><image>Locate the cup in the second image.",
    "answer": [100, 100, 300, 300],
    "target_image": 1,
}


@pytest.mark.parametrize(
    "completion,iou,fmt",
    [
        ("<think>the cup in image 2</think><answer>(100,100),(300,300)</answer>", 1.0, 1.0),
        ("<think>t</think>\n<answer>(150, 150), (350, 350)</answer>\n", 0.391304, 1.0),  # 150^2 / 57500
        ("<think>t</think><answer>It's in the second image. (150,150),(350,350)</answer>", 0.391304, 0.0),
        ("<think>t</think><answer>[150,150,350,350]</answer>", 0.0, 0.0),
        ("<think>t</think><answer>(150,150),(350,350)</answer> done", 0.391304, 0.0),  # </answer> must end it
        ("<answer>(150 ,150),(350,350)</answer>", 0.0, 0.0),  # no space before a comma
        ("(100,100),(300,300)", 0.0, 0.0),  # outside <answer>
        ("<think>a</think><answer>(100,100),(300,300)</answer><answer>(0,0),(9,9)</answer>", 1.0, 0.0),
    ],
)
def test_rewards_equal_univg_r1s_on_its_qwen2_vl_frame(images, completion, iou, fmt):
    sample = sample_of(images, RECORD)
    scores = score(MultiImageGrounding(), [completion], [sample])
    assert scores.components["iou"][0] == pytest.approx(iou, abs=1e-6)
    assert scores.components["format"][0] == fmt


def test_metrics_count_an_iou_of_exactly_t_at_acc_t(images):
    """MIG-Bench's ACC@t is IoU >= t; the mean IoU and the rates are over every sample."""
    sample = sample_of(images, RECORD)
    half = "<think>t</think><answer>(100,100),(300,200)</answer>"  # the target's upper half: IoU 1/2
    metrics = MultiImageGrounding().metrics([sample, sample], [half, "no answer"])
    assert metrics["mean_iou"] == pytest.approx(0.25)
    assert metrics["acc@0.3"] == 0.5 and metrics["acc@0.5"] == 0.5 and metrics["acc@0.7"] == 0.0
    assert metrics["format_rate"] == 0.5 and metrics["parse_rate"] == 0.5


# (completion, the box MIG-Bench's extract_bbox reads, its calculate_iou with [100, 100, 300, 300]):
# read off a copy of eval/MIG_bench/utils.py @44868ea run on these strings.
MIG_BENCH_READS = [
    ("(100,100),(300,300)", [100, 100, 300, 300], 1.0),  # no tags needed
    ("<think>(100,100),(300,300)</think><answer>none</answer>", [100, 100, 300, 300], 1.0),
    ("<answer>[100,100,300,200]</answer>", [100, 100, 300, 200], 0.5),
    ("<think>near (1,1),(2,2)</think><answer>(100,100),(300,300)</answer>", [1, 1, 2, 2], 0.0),  # the first
    ("<answer>[0.1, 0.1, 0.3, 0.3]</answer>", None, 0.0),  # its int() raises: [0, 0, 0, 0]
    ("<box>100 100 300 300</box>", [100, 100, 300, 300], 1.0),
    ("[100, 100, 300, 300] then (100,100),(200,200)", [100, 100, 200, 200], 0.25),  # the pair pattern first
    ("no answer", None, 0.0),
    ("<answer>(300,300),(100,100)</answer>", [300, 300, 100, 100], 0.0),
]


def test_evaluation_reads_and_scores_boxes_as_mig_bench_does(images):
    sample = sample_of(images, RECORD)
    task = MultiImageGrounding()
    for completion, box, iou in MIG_BENCH_READS:
        assert parse_mig_bench_box(completion) == box, completion
        assert task.metrics([sample], [completion])["mean_iou"] == pytest.approx(iou), completion


def test_metrics_are_reported_per_mig_bench_subset_too(images):
    task = MultiImageGrounding()
    common = sample_of(images, {**RECORD, "task": "common_object"})
    diff = sample_of(images, {**RECORD, "task": "diff"})
    right, wrong = "(100,100),(300,300)", "(0,0),(9,9)"
    metrics = task.metrics([common, diff, diff, diff], [right, wrong, wrong, right])
    assert metrics["acc@0.5"] == 0.5 and metrics["acc@0.5/common_object"] == 1.0
    assert metrics["acc@0.5/diff"] == pytest.approx(1 / 3) and metrics["mean_iou/diff"] == pytest.approx(1 / 3)
    with pytest.raises(RecordError, match="key 'task' must name the MIG-Bench subset"):
        sample_of(images, {**RECORD, "task": 3})


def test_a_box_whose_area_no_float_holds_scores_0_as_univg_r1s_try_does_and_raises_nothing(images):
    huge = "1" + "0" * 200  # each coordinate fits a float; the union's area (1e400) does not
    completion = f"<think>x</think><answer>(0,0),({huge},{huge})</answer>"
    scores = score(MultiImageGrounding(), [completion], [sample_of(images, RECORD)])
    assert scores.components["iou"] == [0.0] and scores.failures == {}  # not a reward that raised


def test_the_prompt_shows_every_image_then_univg_r1s_question(images):
    task = MultiImageGrounding()
    sample = sample_of(images, RECORD)
    text = UNIVG_R1_TEMPLATE.format(Question="Locate the cup in the second image.")
    assert task.messages(sample) == [
        {"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": text}]}
    ]
    assert len(sample.images) == 2 and sample.frame.width == 300  # the target image's frame
    assert sample.solution == [30.0, 15.0, 90.0, 45.0]  # 0-1000 of the 300x150 image, in its pixels
    assert task.predict("<answer>(150,150),(350,350)</answer>", sample) == [45.0, 22.5, 105.0, 52.5]
    assert task.predict("<think>(150,150),(350,350)</think>", sample) == [45.0, 22.5, 105.0, 52.5]  # MIG-Bench's read


def test_a_model_in_another_frame_is_scored_in_its_own_frame_of_the_target_image(images):
    """Qwen2.5-VL answers in pixels of the resized target image: the answer is put there."""
    task = MultiImageGrounding()
    sample = sample_of(images, RECORD, QWEN25)
    model = sample.frame.box_to_model(sample.solution)
    completion = f"<think>t</think><answer>({model[0]},{model[1]}),({model[2]},{model[3]})</answer>"
    assert score(task, [completion], [sample]).components["iou"][0] > 0.95
    assert score(task, [task.target(sample)], [sample]).components["format"][0] == 1.0
    pixels = {**RECORD, "answer": [30, 15, 90, 45]}  # the same box, stated in pixels
    same = sample_of(images, pixels, QWEN25, answer_frame="pixels")
    assert same.solution == sample.solution


def test_plain_single_image_records_follow_univg_r1s_released_run(images):
    """--single_img_with_cot False: a COCO image gets no reasoning, its box read anywhere."""
    task = MultiImageGrounding()
    record = {"images": ["dataset/coco/train2014/COCO_1.png"], "question": "<image>the dog", "answer": [0, 0, 500, 500]}
    sample = sample_of(images, {**record, "target_image": 0})
    assert task.messages(sample)[0]["content"][1]["text"] == (
        "This is a single image grounding task with simple reference. the dog"
    )
    scores = score(task, ["The dog is at (0,0),(500,500)."], [sample])
    assert scores.components == {"iou": [1.0], "format": [1.0]}
    with_cot = sample_of(images, {**record, "target_image": 0}, single_image_cot=True)
    assert score(task, ["The dog is at (0,0),(500,500)."], [with_cot]).components == {"iou": [0.0], "format": [0.0]}


def test_a_record_without_target_image_needs_no_conversion(images):
    record = {key: value for key, value in RECORD.items() if key != "target_image"}
    sample = sample_of(images, record)  # 0-1000 data for a 0-1000 model: compared as stated
    assert sample.solution == [100.0, 100.0, 300.0, 300.0]
    with pytest.raises(RecordError, match=r"d.json:2: record has no 'target_image'.*absolute frame"):
        sample_of(images, record, QWEN25)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"images": []}, "non-empty list of image paths"),
        ({"images": ["a.png", "missing.png"]}, "image not found"),
        ({"answer": [1, 2, 3]}, "4 finite numbers"),
        ({"answer": [300, 100, 100, 300]}, "empty or outside"),
        ({"answer": [0, 0, 1200, 500]}, "empty or outside"),
        ({"target_image": 2}, "not an index of the record's 2 images"),
        ({"target_image": "1"}, "must be an image index"),
    ],
)
def test_bad_records_are_refused_by_place(images, change, message):
    with pytest.raises(RecordError, match=f"d.json:2: .*{message}"):
        sample_of(images, {**RECORD, **change})


def test_synthetic_records_show_several_images_and_name_the_target(tmp_path):
    from data_prep.multi_image import ORDINALS

    task = MultiImageGrounding()
    task.synthesize(tmp_path / "train.json", 12, 0)
    split = task.load(tmp_path / "train.json", QWEN25)
    assert not split.errors and len(split.samples) == 12
    for sample in split.samples:
        assert len(sample.images) >= 2
        assert f"the {ORDINALS[sample.meta['target_image']]} image" in sample.problem
    assert any("same color and kind" in s.problem for s in split.samples)  # questions by reference occur


def test_a_zero_width_answer_box_is_refused_as_empty(images):
    with pytest.raises(RecordError, match=r"d.json:2: answer \[100, 100, 100, 300\] is empty or outside"):
        sample_of(images, {**RECORD, "answer": [100, 100, 100, 300]})


def test_a_target_image_past_the_named_ordinals_gets_the_fallback_wording(images):
    record = {**RECORD, "images": ["a.png"] * 6 + ["b.png"], "target_image": 6}  # ORDINALS stop at "sixth"
    target = MultiImageGrounding().target(sample_of(images, record))
    assert target.startswith("<think>The question asks about the named image.</think>")


def test_a_pixel_box_rounds_to_the_nearest_unit_of_the_0_1000_frame():
    from data_prep.multi_image import norm1000_box

    # 2/3 * 1000 = 666.7 -> 667, 1/7 * 1000 = 142.9 -> 143, 3/7 * 1000 = 428.6 -> 429
    assert norm1000_box([2, 1, 3, 3], 3, 7) == [667, 143, 1000, 429]


def test_synthetic_questions_show_one_image_token_per_image_and_need_two_images(tmp_path):
    import json

    from data_prep.multi_image import write_synthetic_multi_image

    path = write_synthetic_multi_image(tmp_path / "train.json", 8, 0, max_images=4)
    for record in json.loads(path.read_text()):
        count = len(record["images"])
        assert 2 <= count <= 4
        assert record["question"].startswith("<image>" * count) and record["question"].count("<image>") == count
    with pytest.raises(ValueError, match=r"max_images must be in \[2, 6\], got 1"):
        write_synthetic_multi_image(tmp_path / "one.json", 1, 0, max_images=1)


def test_a_question_by_reference_needs_a_target_unique_by_color_and_kind():
    import numpy as np

    from data_prep.multi_image import _question, multi_image_spec
    from data_prep.shapes import Scene, SceneObject

    def scenes(second):
        objects = [
            SceneObject("circle", "red", "large", [0, 0, 40, 40]),
            SceneObject(*second, "large", [60, 60, 100, 100]),
        ]
        return [Scene(Image.new("RGB", (120, 120)), [*objects]) for _ in range(2)]

    spec = multi_image_spec()
    # two alike red circles in every image: no question singles one out, by reference or by name
    assert all(_question(scenes(("circle", "red")), spec, np.random.default_rng(seed)) is None for seed in range(20))
    by_reference = 0
    for seed in range(20):
        shown = scenes(("square", "blue"))
        question, target, box = _question(shown, spec, np.random.default_rng(seed))
        if "same color and kind" in question:
            by_reference += 1
            (reference,) = [i for i in range(2) if i != target]
            (alike,) = shown[reference].objects  # the other image now shows one shape like the target
            target_object = next(o for o in shown[target].objects if o.box == box)
            assert (alike.color, alike.shape) == (target_object.color, target_object.shape)
    assert by_reference > 0
