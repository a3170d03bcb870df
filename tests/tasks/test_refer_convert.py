"""The refer converter on a tiny hand-written refs pickle and instances.json (built here, never
downloaded): one record per sentence, [x,y,w,h] -> [x1,y1,x2,y2], splits as refer selects
them, bad refs reported with their place, and pickles that name code refused."""

from __future__ import annotations

import json
import os
import pickle
import struct

import pytest

from data_prep.fields import ItemError
from data_prep.refer import convert_refer, load_refs, main
from tasks.refcoco import RefCOCOPlus
from vlrl.data.records import FrameSpec

POLYGON = [103.93, 299.99, 238.15, 299.99, 238.15, 477.41, 103.93, 477.41]

REFS = [
    {
        "ref_id": 7,
        "ann_id": 70,
        "image_id": 1,
        "split": "val",
        "category_id": 1,
        "sentences": [
            {
                "sent_id": 700,
                "sent": "the lady with the blue shirt",
                "raw": "The lady with the blue shirt.",
                "tokens": [],
            },
            {"sent_id": 701, "sent": "lady  in blue", "raw": "Lady in blue", "tokens": []},
        ],
    },
    {
        "ref_id": 8,
        "ann_id": 80,
        "image_id": 2,
        "split": "testAB",
        "category_id": 2,
        "sentences": [{"sent_id": 800, "sent": "dog"}],
    },
    {
        "ref_id": 9,
        "ann_id": 81,
        "image_id": 2,
        "split": "testB",
        "category_id": 2,
        "sentences": [{"sent_id": 900, "sent": "cat"}],
    },
    {
        "ref_id": 10,
        "ann_id": [70, 71],
        "image_id": 1,
        "split": "train",
        "sentences": [{"sent_id": 1000, "sent": "both people"}],
    },
    {"ref_id": 11, "ann_id": 999, "image_id": 1, "split": "val", "sentences": [{"sent_id": 1100, "sent": "ghost"}]},
    {
        "ref_id": 12,
        "ann_id": 72,
        "image_id": 1,
        "split": "val",
        "sentences": [{"sent_id": 1200, "sent": "off the edge"}],
    },
]

INSTANCES = {
    "images": [
        {"id": 1, "file_name": "COCO_train2014_000000000001.jpg", "width": 427, "height": 640},
        {"id": 2, "file_name": "COCO_train2014_000000000002.jpg", "width": 100, "height": 100},
    ],
    "annotations": [
        # x + w = 103.93 + 134.22 = 238.14999999999998 in floating point; written as 238.15.
        {
            "id": 70,
            "image_id": 1,
            "bbox": [103.93, 299.99, 134.22, 177.42],
            "segmentation": [POLYGON],
            "category_id": 1,
        },
        {"id": 71, "image_id": 1, "bbox": [0, 0, 50, 60], "segmentation": [[0, 0, 50, 0, 50, 60]], "category_id": 1},
        {
            "id": 72,
            "image_id": 1,
            "bbox": [400, 10, 50, 20],
            "segmentation": [[400, 10, 450, 10, 450, 30]],
            "category_id": 1,
        },
        {
            "id": 80,
            "image_id": 2,
            "bbox": [10, 10, 20, 20],
            "segmentation": {"size": [100, 100], "counts": "x"},
            "category_id": 2,
        },
        {
            "id": 81,
            "image_id": 2,
            "bbox": [50, 50, 10, 10],
            "segmentation": [[50, 50, 60, 50, 60, 60]],
            "category_id": 2,
        },
    ],
    "categories": [{"id": 1, "name": "person"}, {"id": 2, "name": "dog"}],
}


def py2_pickle(value) -> bytes:
    """The opcodes Python 2's cPickle (protocol 2) writes for dicts, lists, str, int, float:
    strings are SHORT_BINSTRING bytes, which is how the refer pickles store them."""

    def emit(v) -> bytes:
        if isinstance(v, dict):
            return b"}" + b"".join(emit(k) + emit(x) + b"s" for k, x in v.items())
        if isinstance(v, list):
            return b"]" + b"".join(emit(x) + b"a" for x in v)
        if isinstance(v, str):
            data = v.encode("utf-8")
            return b"U" + bytes([len(data)]) + data
        if isinstance(v, int):
            return b"J" + struct.pack("<i", v)
        if isinstance(v, float):
            return b"G" + struct.pack(">d", v)
        raise TypeError(type(v))

    return b"\x80\x02" + emit(value) + b"."


@pytest.fixture
def refer_dir(tmp_path):
    (tmp_path / "refs(unc).p").write_bytes(py2_pickle(REFS))
    (tmp_path / "instances.json").write_text(json.dumps(INSTANCES))
    return tmp_path


def convert(folder, split, **kwargs):
    return convert_refer(folder / "refs(unc).p", folder / "instances.json", split, **kwargs)


def test_python2_and_python3_refs_pickles_read_the_same(refer_dir, tmp_path):
    py3 = tmp_path / "refs3.p"
    py3.write_bytes(pickle.dumps(REFS))
    assert load_refs(refer_dir / "refs(unc).p") == REFS == load_refs(py3)
    accented = tmp_path / "accented.p"
    accented.write_bytes(py2_pickle([{"sent": "café"}]))
    assert load_refs(accented) == [{"sent": "café"}]


def test_one_record_per_sentence_with_boxes_in_original_pixels(refer_dir):
    result = convert(refer_dir, "val")
    first, second = result.records
    assert first == {
        "id": "700",
        "image": "train2014/COCO_train2014_000000000001.jpg",
        "problem": "Please provide the bounding box coordinate of the region this sentence describes: the lady with the blue shirt.",
        "normal_caption": "the lady with the blue shirt",
        "solution": [103.93, 299.99, 238.15, 477.41],
        "height": 640,
        "width": 427,
        "ref_id": 7,
        "ann_id": 70,
        "image_id": 1,
        "sent_id": 700,
        "category_id": 1,
    }
    assert second["normal_caption"] == "lady in blue" and second["solution"] == first["solution"]
    raw = convert(refer_dir, "val", sentence_key="raw", decimals=None, image_prefix="")
    assert raw.records[0]["normal_caption"] == "The lady with the blue shirt."
    assert raw.records[0]["solution"][2] == 103.93 + 134.22
    assert raw.records[0]["image"] == "COCO_train2014_000000000001.jpg"


def test_bad_refs_are_reported_with_their_place_and_skipped(refer_dir):
    result = convert(refer_dir, "val")
    assert len(result.errors) == 2
    ghost, edge = (str(e) for e in result.errors)
    assert "refs(unc).p: refs[4] (ref_id 11)" in ghost and "ann_id 999 is not in" in ghost
    assert "instances.json: annotation id 72" in edge and "outside the 427x640 image" in edge
    with pytest.raises(ItemError, match=r"refs\[4\] \(ref_id 11\): ann_id 999"):
        convert(refer_dir, "val", strict=True)
    with pytest.raises(FileNotFoundError, match="refs file not found"):
        convert_refer(refer_dir / "refs(google).p", refer_dir / "instances.json", "val")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        convert(refer_dir, "dev")


def test_splits_follow_refers_rules(refer_dir):
    captions = lambda split: [r["normal_caption"] for r in convert(refer_dir, split).records]  # noqa: E731
    assert captions("testA") == ["dog"]  # testAB counts for testA ...
    assert captions("testB") == ["dog", "cat"]  # ... and for testB
    assert captions("test") == ["dog", "cat"]
    assert captions("train") == ["both people"]


def test_segmentation_kept_when_asked_and_rle_refused(refer_dir):
    val = convert(refer_dir, "val", segmentation=True)
    assert val.records[0]["segmentation"] == [POLYGON]
    test = convert(refer_dir, "testB", segmentation=True)
    assert [r["normal_caption"] for r in test.records] == ["cat"]
    assert "annotation id 80: segmentation is RLE" in str(test.errors[0])


def test_a_ref_to_several_objects_becomes_a_multi_box_record(refer_dir):
    (record,) = convert(refer_dir, "train", segmentation=True).records
    assert record["solution"] == [[103.93, 299.99, 238.15, 477.41], [0.0, 0.0, 50.0, 60.0]]
    assert record["segmentation"] == [[POLYGON], [[0.0, 0.0, 50.0, 0.0, 50.0, 60.0]]]


def test_converted_records_load_as_task_samples(refer_dir, tmp_path):
    out = tmp_path / "refcocop_val.json"
    argv = ["--refs", str(refer_dir / "refs(unc).p"), "--instances", str(refer_dir / "instances.json")]
    assert main([*argv, "--split", "train", "--out", str(out), "--segmentation"]) == 0
    split = RefCOCOPlus().load(out, FrameSpec("norm1000"), require_images=False)
    (sample,) = split.samples
    assert sample.id == "1000" and sample.task == "refcoco+"
    assert sample.meta["segmentation"][0] == [POLYGON]
    # The first target's polygon is its box (a rectangle); the second is a right triangle in
    # its 50x60 box. Exact boxes in norm1000: [243, 469, 558, 746] and [0, 0, 117, 94].
    polygon_iou = RefCOCOPlus().reward_functions()["polygon_iou"]
    completion = '<answer>[{"bbox_2d": [0, 0, 117, 94]}, {"bbox_2d": [243, 469, 558, 746]}]</answer>'
    assert polygon_iou([completion], [sample])[0] == pytest.approx((1 + 0.5) / 2, abs=0.01)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.mark.parametrize(
    "payload,refused",
    [
        (pickle.dumps([Evil()]), "system"),
        (pickle.dumps([{"ref_id": eval}]), "builtins.eval"),
        (pickle.dumps(__import__("collections").OrderedDict(a=1)), "collections.OrderedDict"),
        (b"\x80\x02c__builtin__\neval\nq\x00.", "__builtin__.eval"),
    ],
)
def test_the_restricted_unpickler_refuses_pickles_that_name_code(tmp_path, monkeypatch, payload, refused):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "refs(unc).p"
    path.write_bytes(payload)
    with pytest.raises(ItemError, match=rf"refused to load global .*{refused}"):
        load_refs(path)
    assert not (tmp_path / "PWNED").exists()
    sets = tmp_path / "sets.p"
    sets.write_bytes(pickle.dumps([{"tokens": {"a"}}], protocol=2))
    assert load_refs(sets) == [{"tokens": {"a"}}]  # builtin containers are fine


@pytest.mark.parametrize(
    "payload",
    [
        b"\x80\x02}K\x01a.",  # APPEND onto a dict: AttributeError
        b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7f.",  # a frame longer than any: OverflowError
        b"\x80\x02cbuiltins\nset\n)\x81}b.",  # BUILD state onto a set: AttributeError
    ],
)
def test_a_damaged_refs_pickle_is_named_whatever_the_unpickler_raises(tmp_path, payload):
    path = tmp_path / "refs(unc).p"
    path.write_bytes(payload)
    with pytest.raises(ItemError, match=r"not a refs pickle: \w+"):
        load_refs(path)


# -- one unusable item each, on refs and instances written for the case ------------------------
def convert_one(tmp_path, refs, annotations, images=None, **kwargs):
    """Convert hand-written refs against hand-written annotations (images: one 100x100 image, id 1)."""
    images = images if images is not None else [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 100}]
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    (tmp_path / "instances.json").write_text(json.dumps({"images": images, "annotations": annotations}))
    return convert_refer(tmp_path / "refs.json", tmp_path / "instances.json", "val", **kwargs)


def one_ref(ann_id, sentences=None, image_id=1, ref_id=5):
    return {"ref_id": ref_id, "ann_id": ann_id, "image_id": image_id, "split": "val",
            "sentences": sentences or [{"sent_id": 50, "sent": "it"}]}  # fmt: skip


def test_a_box_may_overhang_its_image_by_one_pixel_and_no_more(tmp_path):
    """The loader's one pixel of slack: x1, y1 >= -1 and x2, y2 <= side + 1 on a 100x100 image."""
    boxes = {1: [-1, -1, 11, 21], 2: [90, 89, 11, 12], 3: [-1.5, 0, 5, 5], 4: [0, -1.5, 5, 5],
             5: [95, 0, 6.5, 5], 6: [0, 95, 5, 6.5]}  # fmt: skip
    annotations = [{"id": i, "image_id": 1, "bbox": box} for i, box in boxes.items()]
    result = convert_one(tmp_path, [one_ref(i, ref_id=i) for i in boxes], annotations)
    assert [r["solution"] for r in result.records] == [[-1.0, -1.0, 10.0, 20.0], [90.0, 89.0, 101.0, 101.0]]
    assert [e.where for e in result.errors] == [
        f"{tmp_path / 'instances.json'}: annotation id {i}" for i in (3, 4, 5, 6)
    ]
    assert all("is empty or outside the 100x100 image" in e.message for e in result.errors)


@pytest.mark.parametrize("bbox", [[10, 10, 5, 0], [10, 10, 0, 5], [10, 10, 5, -2]])
def test_a_box_without_area_is_refused(tmp_path, bbox):
    result = convert_one(tmp_path, [one_ref(1)], [{"id": 1, "image_id": 1, "bbox": bbox}])
    assert not result.records
    assert str(result.errors[0]) == (
        f"{tmp_path / 'instances.json'}: annotation id 1: bbox [x, y, w, h] = {bbox} is empty or outside the 100x100 image"
    )


def test_an_annotation_of_another_image_is_refused_naming_both_images(tmp_path):
    images = [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 100},
              {"id": 2, "file_name": "b.jpg", "width": 100, "height": 100}]  # fmt: skip
    result = convert_one(tmp_path, [one_ref(1, image_id=2)], [{"id": 1, "image_id": 1, "bbox": [0, 0, 5, 5]}], images)
    assert not result.records
    assert (
        str(result.errors[0])
        == f"{tmp_path / 'refs.json'}: refs[0] (ref_id 5): ann_id 1 belongs to image 1, the ref to 2"
    )


def test_a_blank_sentence_is_refused_naming_its_place(tmp_path):
    sentences = [{"sent_id": 50, "sent": "fine"}, {"sent_id": 51, "sent": " \t "}]
    result = convert_one(tmp_path, [one_ref(1, sentences)], [{"id": 1, "image_id": 1, "bbox": [0, 0, 5, 5]}])
    assert not result.records  # the ref as a whole is skipped
    assert str(result.errors[0]) == f"{tmp_path / 'refs.json'}: refs[0] (ref_id 5) sentences[1]: empty 'sent'"


def test_a_sentence_without_a_sent_id_is_named_by_its_ref_and_position(tmp_path):
    sentences = [{"sent_id": 50, "sent": "first"}, {"sent": "second"}]
    result = convert_one(tmp_path, [one_ref(1, sentences, ref_id=13)], [{"id": 1, "image_id": 1, "bbox": [0, 0, 5, 5]}])
    assert [(r["id"], r["sent_id"]) for r in result.records] == [("50", 50), ("13-1", None)]


@pytest.mark.parametrize("ann_id", [-1, [-1], [], [3, -1]])
def test_a_ref_to_no_object_is_refused(tmp_path, ann_id):
    annotations = [{"id": 3, "image_id": 1, "bbox": [0, 0, 5, 5]}]
    result = convert_one(tmp_path, [one_ref(ann_id)], annotations)
    assert not result.records
    assert str(result.errors[0]) == (
        f"{tmp_path / 'refs.json'}: refs[0] (ref_id 5): ann_id {ann_id!r} names no object "
        "(no-target refs are not grounding data)"
    )


def test_a_boolean_image_id_is_refused_not_read_as_image_1(tmp_path):
    result = convert_one(tmp_path, [one_ref(1, image_id=True)], [{"id": 1, "image_id": 1, "bbox": [0, 0, 5, 5]}])
    assert not result.records
    assert (
        str(result.errors[0]) == f"{tmp_path / 'refs.json'}: refs[0] (ref_id 5): key 'image_id' has the wrong type bool"
    )


@pytest.mark.parametrize(
    "polygon,message",
    [
        ([0, 0, 10, 0], "a segmentation polygon must be a flat list of at least 3 x, y pairs"),
        ([0, 0, 10, 0, 10, 10, 5], "a segmentation polygon must be a flat list of at least 3 x, y pairs"),
        ([0, 0, 10, 0, float("nan"), 10], "a segmentation polygon has a value that is not a finite number"),
        ([0, 0, 10, 0, True, 10], "a segmentation polygon has a value that is not a finite number"),
    ],
)
def test_a_malformed_polygon_is_refused_when_segmentation_is_kept(tmp_path, polygon, message):
    annotations = [{"id": 1, "image_id": 1, "bbox": [0, 0, 10, 10], "segmentation": [polygon]}]
    result = convert_one(tmp_path, [one_ref(1)], annotations, segmentation=True)
    assert not result.records
    assert str(result.errors[0]) == f"{tmp_path / 'instances.json'}: annotation id 1: {message}"
    assert len(convert_one(tmp_path, [one_ref(1)], annotations).records) == 1  # boxes alone need no polygon


def test_instances_without_annotations_are_refused_naming_the_file(tmp_path):
    (tmp_path / "refs.json").write_text(json.dumps([one_ref(1)]))
    (tmp_path / "instances.json").write_text(json.dumps({"images": []}))
    with pytest.raises(ItemError) as err:
        convert_refer(tmp_path / "refs.json", tmp_path / "instances.json", "val")
    assert (
        str(err.value) == f"{tmp_path / 'instances.json'}: expected a COCO instances object with a list 'annotations'"
    )


def test_a_python2_byte_string_that_is_not_utf8_is_read_as_latin1(tmp_path):
    path = tmp_path / "refs(unc).p"
    path.write_bytes(b"\x80\x02]U\x04caf\xe9a.")  # [b"caf\xe9"] as Python 2 pickles a Latin-1 str
    assert load_refs(path) == ["café"]


def test_the_command_line_prefixes_train2014_and_stops_at_the_first_bad_ref_with_strict(refer_dir, tmp_path, capsys):
    out = tmp_path / "val.json"
    argv = [
        "--refs",
        str(refer_dir / "refs(unc).p"),
        "--instances",
        str(refer_dir / "instances.json"),
        "--split",
        "val",
    ]
    assert main([*argv, "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [r["image"] for r in records] == ["train2014/COCO_train2014_000000000001.jpg"] * 2
    assert "wrote 2 records (2 refs skipped)" in capsys.readouterr().out
    assert main([*argv, "--out", str(tmp_path / "strict.json"), "--strict"]) == 2
    assert "refs[4] (ref_id 11): ann_id 999 is not in" in capsys.readouterr().err
    assert not (tmp_path / "strict.json").exists()
