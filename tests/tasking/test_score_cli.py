"""`vlrl score` scores other systems' completions against the data, with no model."""

from __future__ import annotations

import json

import pytest

from tasks.refcoco import RefCOCO
from vlrl.cli import main
from vlrl.data.records import FrameSpec, load_split
from vlrl.eval.layout import samples_line
from vlrl.tasking.scoring import MAX_COMPLETION_CHARS


@pytest.fixture
def records(rec_data):
    return json.loads(rec_data.read_text())


def test_score_writes_components_and_totals_per_completion(tmp_path, rec_data, records, capsys):
    task = RefCOCO()
    # Default frame: Qwen2.5-VL's absolute pixels of the smart-resized image, default pixel limits.
    samples = load_split(rec_data, task.build_sample, FrameSpec("absolute", 3136, 12845056)).samples
    perfect = task.target(samples[0])
    lines = [
        {"id": 0, "completion": perfect},
        {"id": "1", "resps": ["<think>hm</think><answer>no idea</answer>"]},  # vlrl eval's samples file
        {"id": 2, "resps": [[""]]},  # lmms-eval's nesting
        {"id": 99, "completion": perfect},
        {"doc_id": 3, "answer": "x"},  # another layout: its keys named
    ]
    completions = tmp_path / "completions.jsonl"
    completions.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    out = tmp_path / "scores.jsonl"
    assert (
        main(
            [
                "score",
                "--task",
                "refcoco",
                "--data",
                str(rec_data),
                "--completions",
                str(completions),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["id"] for s in scored] == [0, "1", 2]
    assert scored[0]["rewards"]["format"] == 1.0
    # The target box is rounded to whole model pixels, so the IoU is high but need not be exactly 1.
    assert scored[0]["rewards"]["iou"] > 0.9
    assert scored[0]["reward"] == pytest.approx(1.0 + scored[0]["rewards"]["iou"])
    assert scored[1]["rewards"] == {"format": 0.0, "iou": 0.0}
    assert scored[2]["reward"] == 0.0
    printed = capsys.readouterr().out
    assert "no usable data record has id 99" in printed and "completions.jsonl:6: invalid JSON" in printed
    assert "completions.jsonl:5: expected" in printed and "found keys 'doc_id', 'answer'" in printed
    assert "acc@0.5" in printed and "3 completions scored" in printed


def test_score_reads_completions_in_the_configured_frame_and_says_which(
    tmp_path, rec_data, records, capsys, tiny_qwen2
):
    record = records[0]
    x1, y1, x2, y2 = record["solution"]
    w, h = record["width"], record["height"]
    norm = [round(x1 / w * 1000), round(y1 / h * 1000), round(x2 / w * 1000), round(y2 / h * 1000)]
    completion = f'<think>t</think><answer>{{"bbox_2d": {norm}}}</answer>'
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"id": 0, "completion": completion}) + "\n")
    out_norm, out_abs = tmp_path / "norm.jsonl", tmp_path / "abs.jsonl"
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions)]
    assert main([*args, "--out", str(out_norm), "model.coord_frame=norm1000"]) == 0
    qwen2 = "coordinates read in the norm1000 frame: 0-1000 normalized coordinates (Qwen2-VL, Qwen3-VL, Qwen3.5)"
    assert f"{qwen2}; model.coord_frame=norm1000" in capsys.readouterr().out
    assert main([*args, "--out", str(out_abs)]) == 0
    assert (
        "coordinates read in the absolute frame: pixels of the image smart-resized to model.min_pixels..max_pixels = "
        "3136..12845056 in multiples of 28 (Qwen2.5-VL); model.coord_frame=auto and no model.path: Qwen2.5-VL's frame"
    ) in capsys.readouterr().out
    assert main([*args, "--out", str(out_abs), f"model.path={tiny_qwen2}"]) == 0  # a Qwen2-VL checkpoint: its frame
    assert f"{qwen2}; model.coord_frame=auto, from model.path {tiny_qwen2} (Qwen2-VL)" in capsys.readouterr().out
    assert main([*args, "--out", str(out_abs)]) == 0
    iou_norm = json.loads(out_norm.read_text())["rewards"]["iou"]
    iou_abs = json.loads(out_abs.read_text())["rewards"]["iou"]
    assert iou_norm > 0.95 and iou_abs < iou_norm


def test_score_reads_the_image_size_from_the_file_as_train_and_eval_do(tmp_path, rec_data, records, capsys):
    """VLM-R1 maps boxes with the size of the image file; a record whose width / height disagree
    with its file is reported and not scored, as train and eval reject it."""
    wrong = [dict(records[0], width=records[0]["width"] * 2), records[1]]
    data = tmp_path / "wrong_size.json"
    data.write_text(json.dumps(wrong))
    completions = tmp_path / "c.jsonl"
    completions.write_text("".join(json.dumps({"id": i, "completion": "x"}) + "\n" for i in range(2)))
    out = tmp_path / "scores.jsonl"
    args = ["score", "--task", "refcoco", "--data", str(data), "--completions", str(completions), "--out", str(out)]
    assert main([*args, f"data.image_root={rec_data.parent}"]) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [1]
    assert f"key 'width' says {records[0]['width'] * 2}" in capsys.readouterr().out
    # Without the image files, the records' sizes are all there is: both are scored.
    assert main(args) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [0, 1]


def test_score_says_which_completions_it_scored_0_unread_and_which_reward_failed(tmp_path, rec_data, capsys):
    """A completion over the length a reward reads, and a reward of the user's that raises, both
    score 0 (as in training); the command says so, naming the line and the reward."""
    (tmp_path / "fragile.py").write_text(
        "def fragile(completions, samples):\n    return [1 / 0 if c == 'boom' else 1.0 for c in completions]\n"
    )
    too_long = "x" * (MAX_COMPLETION_CHARS + 1)
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "".join(json.dumps({"id": i, "completion": c}) + "\n" for i, c in enumerate(["ok", too_long, "boom"]))
    )
    out = tmp_path / "scores.jsonl"
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions), "--out", str(out)]
    assert main([*args, f"task.rewards.{tmp_path / 'fragile.py'}:fragile=1"]) == 0
    assert [json.loads(line)["rewards"]["fragile"] for line in out.read_text().splitlines()] == [1.0, 0.0, 0.0]
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        f"scored 0: {completions}:2: {MAX_COMPLETION_CHARS + 1:,} characters, over the 65,536 a reward reads (the "
        "metrics read it whole, as the reference's do)" in printed
    )
    assert (
        "scored 0: reward fragile on 1 of 3 completions: it raised or gave no finite number (the first: "
        "ZeroDivisionError: division by zero)"
    ) in printed


def test_score_prints_the_first_ten_lines_it_skipped_then_how_many_more(tmp_path, rec_data, capsys):
    completions = tmp_path / "c.jsonl"
    completions.write_text("".join(json.dumps({"id": 100 + i, "completion": "x"}) + "\n" for i in range(12)))
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions)]
    assert main([*args, "--out", str(tmp_path / "scores.jsonl")]) == 1  # none names a record: nothing scored
    printed = " ".join(capsys.readouterr().out.split())
    assert [f"no usable data record has id {100 + i}" in printed for i in range(12)] == [True] * 10 + [False] * 2
    assert "... 2 more skipped completions" in printed


def test_several_completions_of_one_id_are_each_scored_and_said(tmp_path, rec_data, capsys):
    completions = tmp_path / "completions.jsonl"
    lines = [{"id": 0, "completion": "a"}, {"id": 1, "completion": "b"}, {"id": 0, "completion": "c"}]
    completions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "scores.jsonl"
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions)]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"repeated: {completions}:3: id 0 again (first at {completions}:1)" in printed
    assert "3 completions scored" in printed and len(out.read_text().splitlines()) == 3


def test_a_completion_line_that_is_not_text_costs_that_line_alone(tmp_path, rec_data, capsys):
    good = [json.dumps({"id": i, "completion": "c"}).encode() for i in range(3)]
    completions = tmp_path / "completions.jsonl"  # a latin-1 line and one with a raw NUL among UTF-8 ones
    completions.write_bytes(b"\n".join([good[0], b'{"id": 1, "completion": "caf\xe9"}', good[1], b"{\0}", good[2]]))
    out = tmp_path / "scores.jsonl"
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions)]
    assert main([*args, "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"{completions}:2: not UTF-8 text (byte 28 of the line); expected a JSON object" in printed
    assert f"{completions}:4: not a text line (it holds a NUL byte, byte 1 of the line)" in printed
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [0, 1, 2]


@pytest.mark.parametrize("out, message", [("{tmp}", "is a folder; give the file to write"),
                                          ("{data}/x.jsonl", "is not a folder this user may write in"),
                                          ("{completions}", "is the --completions file this command reads"),
                                          ("{data}", "is the data file this command reads")])  # fmt: skip
def test_an_out_that_cannot_be_written_is_said_before_any_scoring(
    tmp_path, rec_data, capsys, monkeypatch, out, message
):
    completions = tmp_path / "completions.jsonl"
    completions.write_text(json.dumps({"id": 0, "completion": "a"}) + "\n")
    monkeypatch.setattr("vlrl.tasking.scoring.score_file", lambda *a, **k: pytest.fail("scored before checking --out"))
    out = out.format(tmp=tmp_path, data=rec_data, completions=completions)
    inputs = {path: path.read_bytes() for path in (completions, rec_data)}
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions), "--out", out]
    assert main(args) == 2
    assert message in capsys.readouterr().out
    assert all(path.read_bytes() == text for path, text in inputs.items())  # nothing it reads overwritten


def test_a_completions_file_that_is_not_there_is_named_by_its_flag(tmp_path, rec_data, capsys):
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(tmp_path / "nope.jsonl")]
    assert main([*args, "--out", str(tmp_path / "out.jsonl")]) == 2
    assert f"error: --completions {tmp_path / 'nope.jsonl'} is not a file" in capsys.readouterr().out


def test_a_completions_file_of_which_nothing_is_scored_exits_1(tmp_path, rec_data, capsys):
    completions = tmp_path / "completions.jsonl"
    completions.write_text(json.dumps([{"id": 0, "completion": "a"}]) + "\n")  # a JSON list in a .jsonl
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions)]
    assert main([*args, "--out", str(tmp_path / "scores.jsonl")]) == 1
    out = capsys.readouterr().out
    assert f"no completion of {completions} was scored" in out
    assert "mean reward" not in out  # no mean of nothing


def test_a_completion_whose_id_several_data_records_have_is_said_not_scored_against_one_of_them(
    tmp_path, rec_data, records, capsys
):
    """Video-R1's records take their id from problem_id; where two records share one, a
    completion of that id was scored against the last of them without a word."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps([{**records[0], "id": 7}, {**records[1], "id": 7}, {**records[2], "id": 8}]))
    for name in {records[i]["image"] for i in range(3)}:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((rec_data.parent / name).read_bytes())
    task = RefCOCO()
    first = load_split(data, task.build_sample, FrameSpec("absolute", 3136, 12845056)).samples[0]
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        json.dumps({"id": 7, "completion": task.target(first)}) + "\n" + '{"id": 8, "completion": ""}\n'
    )
    out = tmp_path / "scores.jsonl"
    score = ["score", "--task", "refcoco", "--data", str(data), "--completions", str(completions), "--out", str(out)]
    assert main(score) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [8]
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "completions.jsonl:1: id 7 is the id of 2 data records, so which one this completion answers is unknown"
        in printed
    )


def test_score_with_a_run_config_scores_as_the_run_did_its_task(tmp_path, rec_data, capsys):
    """A mixture entry's reward weights are the ones scored with (they were the task's
    defaults), a mixture of several tasks needs --task, and a config of another task gives
    its options no say (they were validated as the scored task's: unknown key)."""
    import yaml

    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, FrameSpec("absolute", 3136, 12845056)).samples
    completions = tmp_path / "completions.jsonl"
    completions.write_text(json.dumps({"id": samples[0].id, "completion": task.target(samples[0])}) + "\n")
    mixture = tmp_path / "mixture.yaml"
    entries = [{"name": "refcoco", "train": "x.json", "rewards": {"iou": 2.0}}, {"name": "counting", "train": "y.json"}]
    mixture.write_text(yaml.safe_dump({"mixture": entries}))
    jigsaw = tmp_path / "jigsaw.yaml"
    jigsaw.write_text(yaml.safe_dump({"task": {"name": "jigsaw", "options": {"think": False}}}))
    out = tmp_path / "scores.jsonl"
    score = ["score", "--data", str(rec_data), "--completions", str(completions), "--out", str(out)]
    assert main([*score, "--config", str(mixture), "--task", "refcoco"]) == 0
    (scored,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored["rewards"].keys() == {"iou"} and scored["reward"] == pytest.approx(2.0 * scored["rewards"]["iou"])
    assert main([*score, "--config", str(mixture)]) == 2
    assert (
        "the config's mixture holds several tasks (refcoco, counting): name the one to score with --task"
        in " ".join(capsys.readouterr().out.split())
    )
    assert main([*score, "--config", str(jigsaw), "--task", "refcoco"]) == 0
    (scored,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored["rewards"].keys() == {"format", "iou"}


def test_a_samples_line_that_dropped_resps_for_equalling_filtered_resps_is_scored_by_it(tmp_path, rec_data, capsys):
    """vlrl eval (as lmms-eval) drops a sample's `resps` when it equals `filtered_resps`: such a
    line is scored by `filtered_resps`, not skipped; a completion that is not a string is said so."""
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, FrameSpec("absolute", 3136, 12845056)).samples
    perfect = task.target(samples[0])
    line = samples_line(
        {"doc_id": 0, "id": 0, "input": "", "target": "", "resps": [perfect], "filtered_resps": [perfect]}
    )
    assert "resps" not in line
    completions = tmp_path / "samples_refcoco.jsonl"
    completions.write_text(json.dumps(line) + "\n" + json.dumps({"id": 1, "completion": 5}) + "\n")
    out = tmp_path / "scores.jsonl"
    args = ["score", "--task", "refcoco", "--data", str(rec_data), "--completions", str(completions), "--out", str(out)]
    assert main(args) == 0
    (scored,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert scored["id"] == 0 and scored["rewards"]["format"] == 1.0 and scored["rewards"]["iou"] > 0.9
    printed = " ".join(capsys.readouterr().out.split())
    assert f"{completions}:2: its 'completion' is int '5', expected a string" in printed


def test_score_without_a_task_asks_for_one_rather_than_scoring_as_some_task(tmp_path, rec_data, capsys):
    completions = tmp_path / "completions.jsonl"
    completions.write_text(json.dumps({"id": 0, "completion": "x"}) + "\n")
    args = ["score", "--data", str(rec_data), "--completions", str(completions), "--out", str(tmp_path / "s.jsonl")]
    assert main(args) == 2
    assert "name the task whose rewards score the completions: --task NAME" in capsys.readouterr().out
    assert main([*args, "task.name=refcoco"]) == 0  # an override names it as well


@pytest.mark.parametrize("name", ["math_vqa", "classification"])  # classification: a TextAnswerTask
def test_the_frame_note_is_said_only_where_completions_state_coordinates(tmp_path, capsys, name):
    from vlrl.config import MixtureEntry, load_config
    from vlrl.tasking.registry import eval_task, make_task

    task = make_task(load_config(None, [f"task.name={name}"]).task)
    data = tmp_path / f"data{task.data_suffix}"
    task.synthesize(data, size=2, seed=0)
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"id": 0, "completion": "<think>t</think> \\boxed{3}"}) + "\n")
    args = ["score", "--task", name, "--data", str(data), "--completions", str(completions)]
    assert main([*args, "--out", str(tmp_path / "s.jsonl")]) == 0
    assert "coordinates read in" not in capsys.readouterr().out
    cfg = load_config(None, [])
    assert not eval_task(MixtureEntry("refcoco_bbox_rec_val"), "", cfg).states_coordinates  # its own 0-1 boxes
    model_frame = MixtureEntry("refcoco_bbox_rec_val", options={"coords": "model"})
    assert eval_task(model_frame, "", cfg).states_coordinates
