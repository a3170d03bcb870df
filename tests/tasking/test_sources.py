"""Where a run's data comes from: synthetic data only at a config's own paths, a real recipe's
missing data pointing at its converter, a demo's synthetic held-out split never inherited."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config import ConfigError, load_config
from vlrl.data.records import FrameSpec

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs" / "demo" / "refcoco.yaml")
TINY = ["model.path=tiny:qwen2_5_vl", "model.max_pixels=12544"]
FRAMES = FrameSpec("absolute", 3136, 50176)


def test_a_data_path_given_on_the_command_line_is_never_filled_with_synthetic_data(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "mydata" / "rec_jsons_processed" / "refcoco_trian.json"
    assert main(["train", "--config", DEMO, f"data.train={typo}", f"trainer.output_dir={tmp_path / 'run'}"]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"error: config: data.train: {typo} (set on the command line) does not exist")
    assert f"Synthetic data is written only at the paths stated where data.synthetic is set (in {DEMO})" in out
    assert f"vlrl data synth --task refcoco --out {typo}" in out
    assert "Task refcoco's data: VLM-R1's REC json (rec_jsons_processed) as downloaded" in out  # one's own data
    assert not (tmp_path / "mydata").exists() and not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


def test_a_user_config_that_extends_a_demo_gets_no_synthetic_data_at_its_own_paths(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(f"extends: {DEMO}\ndata: {{train: mine/train.json, eval: mine/val.json}}\n")
    assert main(["sft", "--config", "mine.yaml", *TINY]) == 2
    assert "error: config: data.train: mine/train.json (set in mine.yaml) does not exist" in capsys.readouterr().out
    assert not (tmp_path / "mine").exists()


def test_the_demo_config_writes_its_synthetic_data_at_its_own_paths(tmp_path, monkeypatch, tiny_qwen25):
    monkeypatch.chdir(tmp_path)  # the demo's paths are relative: data/synthetic/refcoco-demo/...
    small = ["data.synthetic_train_size=4", "sft.steps=1", "sft.prompts_per_step=2", "sft.progress=false"]
    assert main(["sft", "--config", DEMO, *TINY, *small, f"sft.output_dir={tmp_path / 'a'}"]) == 0
    assert (tmp_path / "data" / "synthetic" / "refcoco-demo" / "train.json").is_file()
    # Asked for on the command line, beside the paths given there, it is written there too.
    given = tmp_path / "given" / "train.json"
    here = [f"data.train={given}", "data.synthetic=true", f"sft.output_dir={tmp_path / 'b'}"]
    assert main(["sft", "--config", DEMO, *TINY, *small, *here]) == 0
    assert given.is_file()


@pytest.mark.parametrize(
    "config, converter",
    [
        ("refcoco.yaml", "python -m data_prep.refer --refs 'refcoco/refs(unc).p' --instances refcoco/instances.json "
         "--split train --out data/rec_jsons_processed/refcoco_train.json"),
        ("gui_action.yaml", "python -m data_prep.gui gui_r1 train.parquet data/gui_r1/android_train.json"),
        ("gui_grounding.yaml", "python -m data_prep.gui screenspot screenspot_mobile.json data/ui_r1/grounding_train.json"),
    ],
)  # fmt: skip
def test_a_recipe_whose_data_is_absent_points_at_its_converter(tmp_path, monkeypatch, capsys, config, converter):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(ROOT / "configs" / config), "model.path=tiny:qwen2_5_vl"]) == 2
    out = capsys.readouterr().out
    assert converter in out and "data.synthetic" not in out
    assert "does not exist" in out and "(set in " in out


def test_user_data_with_a_demos_synthetic_held_out_split_is_refused_or_warned(tmp_path, rec_data, capsys):
    """Training on one's own data from a demo config used to evaluate on the demo's synthetic val.json."""
    args = ["--config", DEMO, *TINY, f"data.train={rec_data}"]
    assert main(["train", *args, f"trainer.output_dir={tmp_path / 'run'}"]) == 2  # eval.every: 100 in the demo
    out = capsys.readouterr().out
    assert (
        f"data.train is {rec_data} (set on the command line) but data.eval is data/synthetic/refcoco-demo/val.json"
        in out
    )
    assert f"the synthetic held-out split set in {DEMO}" in out and "eval.every=0" in out
    cfg = load_config(DEMO, [f"data.train={rec_data}", f"data.eval={rec_data}"])
    from vlrl.tasking.sources import held_out_inherited

    assert held_out_inherited(cfg) is None  # a held-out file of one's own: nothing to say
    assert held_out_inherited(load_config(DEMO)) is None  # the demo as it is


def test_sft_on_user_data_from_a_demo_warns_about_the_held_out_split(tmp_path, rec_data, tiny_qwen25, capsys):
    sft = [f"sft.output_dir={tmp_path / 'sft'}", "sft.steps=1", "sft.prompts_per_step=2", "sft.progress=false"]
    assert main(["sft", "--config", DEMO, *TINY, f"data.train={rec_data}", *sft]) == 0
    out = capsys.readouterr().out
    assert "warning: data.train is" in out and "data/synthetic/refcoco-demo/val.json" in out


def test_validating_or_scoring_a_missing_file_names_the_converter(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["data", "validate", "--task", "gui_action", "android.json"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: android.json does not exist")
    assert "GUI-R1's parquet converted: python -m data_prep.gui gui_r1 train.parquet android.json" in out
    (tmp_path / "mine.jsonl").write_text('{"id": 0, "completion": "x"}\n')
    assert main(["score", "--task", "refcoco", "--data", "rec.json", "--completions", "mine.jsonl", "--out", "o"]) == 2
    assert "python -m data_prep.refer" in capsys.readouterr().out and not (tmp_path / "rec.json").exists()


@pytest.mark.parametrize(
    "config", sorted(p.name for p in (ROOT / "configs" / "demo").glob("*.yaml") if p.name != "base.yaml")
)
def test_every_demo_config_writes_its_synthetic_data_at_its_own_paths(config):
    """A demo config states data.synthetic: true beside its data paths (not in base.yaml, which a
    config of yours may extend with paths of its own)."""
    cfg = load_config(ROOT / "configs" / "demo" / config)
    assert cfg.writes_synthetic("data.train") and cfg.writes_synthetic("data.eval")
    assert not load_config(ROOT / "configs" / "demo" / config, ["data.train=x.json"]).writes_synthetic("data.train")


class HalfWritten(Exception):
    pass


def test_synthetic_data_is_at_its_path_only_once_whole(tmp_path, monkeypatch):
    """Two runs that found the same demo data missing both wrote it, and one read images the
    other was rewriting (3 of 8,192 counting scenes skipped, that seed's numbers moved): while
    one writes, nothing of it is at its path; a synthesis stopped halfway leaves nothing."""
    from tasks.counting import Counting
    from vlrl.data.tables import spec_exists
    from vlrl.tasking.sources import write_synthetic

    path = tmp_path / "data" / "train.json"
    synthesize = Counting.synthesize
    seen: list[list[Path]] = []

    def watched(task, made, size, seed):
        synthesize(task, made, size, seed)
        assert (made.parent / "images").is_dir()  # written where the watcher below looks
        seen.append(sorted(p for p in tmp_path.rglob("*") if p.is_file() and ".synthetic-" not in str(p)))
        assert not spec_exists(str(path))

    monkeypatch.setattr(Counting, "synthesize", watched)
    write_synthetic(Counting(), path, 3, 0)
    assert seen == [[]]
    assert sorted(p.name for p in (path.parent / "images").iterdir()) == [f"train_00000{i}.png" for i in range(3)]
    assert Counting().load(path, FRAMES).samples and not Counting().load(path, FRAMES).errors
    assert sorted(p.name for p in path.parent.iterdir()) == ["images", "train.json"]  # no private folder left

    def stopped(task, made, size, seed):
        synthesize(task, made, size, seed)
        raise HalfWritten

    monkeypatch.setattr(Counting, "synthesize", stopped)
    other = tmp_path / "other" / "val.json"
    with pytest.raises(HalfWritten):
        write_synthetic(Counting(), other, 3, 0)
    assert list(other.parent.iterdir()) == []


def test_synthetic_tables_land_whole_and_a_second_writer_leaves_the_first_ones(tmp_path):
    """A benchmark's synthetic data is a folder (a table): moved into place whole, once."""
    from vlrl.data.tables import spec_exists
    from vlrl.tasking.registry import task_class
    from vlrl.tasking.sources import write_synthetic

    bench = task_class("countbench")()
    path = tmp_path / "countbench"
    write_synthetic(bench, path, 2, 0)
    first = {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    write_synthetic(bench, path, 2, 0)  # as a run beside it would
    assert spec_exists(str(path)) and first
    assert {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()} == first
    assert [p.name for p in tmp_path.iterdir()] == ["countbench"]


def test_synthetic_data_with_a_recipes_image_root_is_refused_naming_it(tmp_path, capsys):
    """A GPU recipe's data.image_root (its dataset's folder) with data.synthetic: every synthetic
    record was skipped as 'image not found' under that folder."""
    train = ["train", "--config", str(ROOT / "configs" / "refcoco.yaml"), "data.synthetic=true"]
    assert main([*train, f"data.train={tmp_path / 'train.json'}", "model.path=tiny:qwen2_5_vl"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"data.image_root is data/coco (set in {ROOT / 'configs' / 'refcoco.yaml'})" in out
    assert "set data.image_root= (empty) for synthetic data" in out and not (tmp_path / "train.json").exists()


def test_an_image_root_that_is_not_a_folder_is_named_instead_of_every_record_missing_its_image(tmp_path, capsys):
    from data_prep.refcoco import write_synthetic_rec

    data = write_synthetic_rec(tmp_path / "train.json", size=3, seed=0)
    validate = ["data", "validate", "--task", "refcoco", str(data), "--image-root", str(tmp_path / "nowhere")]
    assert main(validate) == 2
    assert f"data.image_root {tmp_path / 'nowhere'} is not a folder" in " ".join(capsys.readouterr().out.split())
    assert main([*validate[:-1], str(tmp_path)]) == 0  # the folder the records' images are in


def test_a_configs_synthetic_train_and_eval_splits_share_no_scene(tmp_path):
    from tasks.refcoco import RefCOCO
    from vlrl.tasking.sources import load_task_split

    paths = {"train": tmp_path / "train.json", "eval": tmp_path / "val.json"}
    cfg = load_config(None, [f"data.train={paths['train']}", f"data.eval={paths['eval']}", "data.synthetic=true",
                             "data.synthetic_train_size=4", "data.synthetic_eval_size=4"])  # fmt: skip
    splits = {which: load_task_split(RefCOCO(), cfg, which) for which in paths}
    images = {which: {s.images[0] for s in split.samples} for which, split in splits.items()}
    problems = {which: [s.problem for s in split.samples] for which, split in splits.items()}
    assert not images["train"] & images["eval"] and problems["train"] != problems["eval"]


def test_the_media_rules_follow_the_data_section():
    from vlrl.data.records import MediaRules
    from vlrl.tasking.sources import media_rules

    cfg = load_config(None, ["data.allow_outside_root=true", "data.max_image_pixels=1000"])
    assert media_rules(cfg) == MediaRules(True, 1000)


def test_a_synthetic_split_has_the_size_its_config_gives_that_split(tmp_path):
    from tasks.refcoco import RefCOCO
    from vlrl.tasking.sources import load_task_split

    cfg = load_config(None, [f"data.train={tmp_path / 'train.json'}", f"data.eval={tmp_path / 'val.json'}",
                             "data.synthetic=true", "data.synthetic_train_size=3", "data.synthetic_eval_size=2"])  # fmt: skip
    assert len(load_task_split(RefCOCO(), cfg, "eval").samples) == 2
    assert len(load_task_split(RefCOCO(), cfg, "train").samples) == 3


def test_a_split_with_bad_records_names_the_first_five_and_counts_the_rest(tmp_path):
    import io
    import json

    from PIL import Image
    from rich.console import Console

    from tasks.refcoco import RefCOCO
    from vlrl.tasking.sources import load_task_split

    Image.new("RGB", (100, 80)).save(tmp_path / "ok.png")
    good = {"image": "ok.png", "problem": "find it", "solution": [10, 10, 50, 40], "width": 100, "height": 80}
    records = [good] + [{**good, "image": f"missing{i}.png"} for i in range(7)]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = io.StringIO()
    split = load_task_split(RefCOCO(), load_config(None, [f"data.train={path}"]), "train", Console(file=out, width=400))
    assert len(split.samples) == 1
    lines = out.getvalue().splitlines()
    assert lines[0] == f"skipped 7 bad record(s) in {path}; 1 sample(s) read"
    assert [line.split(": image not found")[0] for line in lines[1:6]] == [f"  {path}:{n}" for n in range(2, 7)]
    assert lines[6:] == [f"  ... and 2 more: vlrl data validate --task refcoco {path} lists them all"]


def test_a_split_whose_every_record_failed_alike_says_what_to_try(tmp_path):
    """Every image missing: where relative paths are read from; one key missing from every row of
    a table: the column mapping that names it. Failures of several kinds: no guess."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks.refcoco import RefCOCO
    from vlrl.tasking.sources import load_task_split

    record = {"image": "a.png", "problem": "find it", "solution": [10, 10, 50, 40], "width": 100, "height": 80}
    images = tmp_path / "images.jsonl"
    images.write_text("".join(json.dumps({**record, "image": f"m{i}.png"}) + "\n" for i in range(3)))
    with pytest.raises(
        ConfigError, match=r"\(3 skipped\); every image is missing: .* data.image_root \(--image-root\)"
    ):
        load_task_split(RefCOCO(), load_config(None, [f"data.train={images}"]), "train")
    table = tmp_path / "train.parquet"
    pq.write_table(pa.table({"img": ["x"] * 3, "question": ["q"] * 3}), table)
    with pytest.raises(ConfigError, match=r"every row lacks 'problem': .* data.columns.problem=COLUMN$"):
        load_task_split(RefCOCO(), load_config(None, [f"data.train={table}"]), "train")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps({**record, "image": "m.png"}) + "\n" + json.dumps({"problem": "x"}) + "\n")
    with pytest.raises(ConfigError, match=r"\(2 skipped\)$"):
        load_task_split(RefCOCO(), load_config(None, [f"data.train={mixed}"]), "train")


def test_a_split_without_one_usable_record_is_refused_naming_its_config_key(tmp_path):
    from tasks.refcoco import RefCOCO
    from vlrl.config import ConfigError
    from vlrl.tasking.sources import load_task_split

    path = tmp_path / "val.jsonl"
    path.write_text('{"image": "missing.png"}\n')
    cfg = load_config(None, [f"data.eval={path}"])
    with pytest.raises(ConfigError, match=rf"^data\.eval: no usable records in {re.escape(str(path))} \(1 skipped\)$"):
        load_task_split(RefCOCO(), cfg, "eval")


def test_a_missing_held_out_file_points_at_the_converters_val_split(tmp_path):
    from tasks.refcoco import RefCOCO
    from vlrl.tasking.sources import load_task_split, missing_data

    path = str(tmp_path / "val.json")
    cfg = load_config(None, [f"data.eval={path}"])
    assert f"--split val --out {path}" in missing_data(RefCOCO(), cfg, path, "data.eval", "eval")
    assert f"--split train --out {path}" in missing_data(RefCOCO(), cfg, path, "data.train", "train")
    with pytest.raises(ConfigError, match=f"--split val --out {path}"):  # vlrl score's --data: a held-out file
        load_task_split(RefCOCO(), load_config(None, []), "eval", path=path)


def test_a_run_that_evaluates_nothing_warns_that_its_held_out_file_is_missing(tmp_path, rec_data, tiny_qwen25, capsys):
    """A recipe's data.eval is read only by held-out evaluation (eval.every > 0) or `vlrl eval`
    of the checkpoints: a run that evaluates nothing says the file is missing at its start, with
    the converter of the held-out split, not at the first evaluation after training."""
    val = tmp_path / "val.json"
    sft = [f"sft.output_dir={tmp_path / 'sft'}", "sft.steps=1", "sft.prompts_per_step=2", "sft.progress=false"]
    args = [*TINY, "task.name=refcoco", f"data.train={rec_data}", f"data.eval={val}", *sft]
    assert main(["sft", *args]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"warning: config: data.eval: {val} (set on the command line) does not exist." in out
    assert f"--split val --out {val}" in out and "`vlrl eval` of its checkpoints does" in out
    assert main(["sft", *args[:-4], f"data.eval={rec_data}", f"sft.output_dir={tmp_path / 'sft2'}", *sft[1:]]) == 0
    assert "does not exist" not in capsys.readouterr().out


def test_a_missing_benchmark_points_at_its_published_dataset_and_docs_benchmarks():
    from vlrl.tasking.registry import task_class
    from vlrl.tasking.sources import missing_data

    chartqa = task_class("chartqa")()
    said = missing_data(chartqa, load_config(None, []), "/data/ChartQA", None)
    assert f"the benchmark {chartqa.dataset}, to download first (docs/benchmarks.md says what it reads)" in said


def test_options_of_a_demo_configs_task_under_another_task_name_are_said_to_be_set_apart(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", DEMO, "task.name=countbench", f"trainer.output_dir={tmp_path / 'run'}"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "unknown key 'task.options.target_box_scale'; allowed under 'task.options.': none (it takes no keys)" in out
    assert (
        f"task.name countbench was set on the command line and its options in {DEMO}, perhaps for another task: "
        "clear them with task.options='{}', or start from a config of countbench's"
    ) in out
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()
    (tmp_path / "mine.yaml").write_text("task: {name: countbench, options: {nope: 1}}\n")  # set together: no hint
    assert main(["train", "--config", "mine.yaml", *TINY]) == 2
    assert "perhaps for another task" not in capsys.readouterr().out
