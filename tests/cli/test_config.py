"""Config errors name the key and what was expected, and surface before any model loads."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from vlrl.cli import main
from vlrl.config import Config, ConfigError, Restored, build, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_then_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  lr: 0.5\n  steps: 7\nrollout:\n  num_generations: 4\n")
    cfg = load_config(path, ["trainer.lr=1e-5", "algo.epsilon_high=0.28", "task.rewards={format: 1, iou: 2}"])
    assert isinstance(cfg, Config)
    assert cfg.trainer.lr == 1e-5 and cfg.trainer.steps == 7
    assert cfg.rollout.num_generations == 4
    assert cfg.algo.epsilon_high == 0.28
    assert cfg.task.rewards == {"format": 1.0, "iou": 2.0}
    assert cfg.model.path == ""  # no default model: MODEL_PATH_MISSING says how to get one


def test_setting_one_sft_key_keeps_the_cold_starts_other_defaults():
    default, one_set = load_config(None, []).sft, load_config(None, ["sft.steps=200"]).sft
    assert (default.lr, default.steps, default.output_dir) == (1e-5, 500, "runs/sft")
    assert (one_set.lr, one_set.steps, one_set.output_dir) == (1e-5, 200, "runs/sft")  # not the trainer's 1e-6


@pytest.mark.parametrize(
    "override,message",
    [
        ("trainer.lrr=1", "unknown key 'trainer.lrr'"),
        ("traner.lr=1", "unknown key 'traner'"),
        ("trainer.steps=many", "trainer.steps expects an integer"),
        ("trainer.steps=1.5", "trainer.steps expects an integer"),
        ("model.dtype=fp8", "model.dtype must be one of"),
        ("trainer.progress=maybe", "trainer.progress expects true or false"),
        ("rollout.num_generations=0", "rollout.num_generations must be > 0"),
        ("algo.epsilon_high=0.1", "algo.epsilon_high (0.1) must be >= algo.epsilon (0.2)"),
        ("trainer", "must look like key.sub=value"),
        ("configs/refcoco.yaml", "must look like key.sub=value: a config file is given as --config FILE"),
        (
            "algo.length_control.min_tokens=600",
            "algo.length_control needs 0 <= min_tokens <= max_tokens, got 600 and 512",
        ),
        ("model.video.max_frames=1", "model.video needs fps > 0, min_frames >= 1, max_frames >= 2"),
        # what no later check would catch, or catches only as a traceback once a model is loaded
        ("trainer.lr=nan", "trainer.lr expects a finite number, got nan"),
        ("algo.beta=.inf", "algo.beta expects a finite number, got inf"),
        ("trainer.lr=-1e-4", "trainer.lr must be >= 0, got -0.0001"),
        ("trainer.max_grad_norm=-1", "trainer.max_grad_norm must be > 0"),  # clipping would turn gradients around
        ("sft.warmup_steps=-5", "sft.warmup_steps must be >= 0"),
        ("model.lora.r=-4", "model.lora.r must be >= 0"),
        ("model.lora.dropout=2", "model.lora.dropout must be in [0, 1), got 2.0"),
        ("eval.top_p=5", "eval.top_p must be in (0, 1], got 5.0"),
        ("eval.limit=-1", "eval.limit must be >= 0, got -1"),
        ("rollout.top_k=-3", "rollout.top_k must be >= 0"),
        ("rollout.min_p=1.5", "rollout.min_p must be in [0, 1]"),
        ("data.limit=-1", "data.limit must be >= 0"),
        ("data.synthetic_train_size=0", "data.synthetic_train_size must be > 0"),
        ("data.synthetic_seed=-1", "data.synthetic_seed must be >= 0"),  # numpy's seeds are not negative
        # values that trained silently the wrong way, or failed only after the model loaded
        ("algo.epsilon=-1", "algo.epsilon must be in (0, 1), got -1.0"),  # positive advantages had no gradient
        ("algo.epsilon=1", "algo.epsilon must be in (0, 1), got 1.0"),  # CPGD's log(1 - epsilon)
        ("algo.std_eps=-1", "algo.std_eps must be > 0"),  # a group's std of 1 divided by 0
        ("algo.negative_weight=-0.5", "algo.negative_weight must be >= 0"),
        ("algo.drift_coef=-1", "algo.drift_coef must be >= 0"),
        ("algo.overlong_penalty=-1", "algo.overlong_penalty must be >= 0"),
        ("algo.temporal.shuffled_fraction=2", "algo.temporal.shuffled_fraction must be in (0, 1], got 2.0"),
        ("algo.temporal.mu=-1", "algo.temporal.mu must be >= 0"),
        ("algo.trust.timeout_s=0", "algo.trust.timeout_s must be > 0"),
        ("algo.trust.judge_max_new_tokens=0", "algo.trust.judge_max_new_tokens must be > 0"),
        ("algo.trust.decay_steps=0", "algo.trust.decay_steps must be > 0"),  # exp(-step / 0)
        ("algo.trust.alpha=-1", "algo.trust.alpha must be >= 0"),
        ("trainer.adam_betas=[0.9, 1.0]", "trainer.adam_betas must be two numbers in [0, 1)"),
        ("trainer.adam_betas=[0.9]", "trainer.adam_betas must be two numbers in [0, 1)"),
        ("algo.micro_batch_rows=0", "algo.micro_batch_rows must be > 0"),
        ("model.video.total_pixels=-1", "model.video.total_pixels must be > 0"),
        # each range's other bound, and the checks between two keys
        ("model.video.fps=0", "model.video needs fps > 0"),
        ("model.video.min_frames=20", "model.video.max_pixels (100352) and max_frames (16) must be >= min_pixels"),
        ("model.max_pixels=1000", "model.max_pixels (1000) must be >= model.min_pixels (3136)"),
        ("data.max_image_pixels=200000000", "data.max_image_pixels must be in (0, 178956970]"),
        ("algo.rollout_correction.clip_min=3.5", "algo.rollout_correction.clip_min (3.5) must be <= clip_max (3.0)"),
        ("algo.length_control.min_tokens=-1", "algo.length_control needs 0 <= min_tokens <= max_tokens"),
        ("algo.replay.keep_fraction=1.5", "algo.replay.keep_fraction must be in (0, 1], got 1.5"),
        ("algo.replay.positive_fraction=-0.1", "algo.replay.buffer_size, positive_fraction and eps must be >= 0"),
        ("algo.dual_clip=1", "algo.dual_clip must be > 1, got 1.0"),
        ("algo.top_entropy_fraction=1.5", "algo.top_entropy_fraction must be in (0, 1], got 1.5"),
        ("eval.reasoning_tags=[[<think>, '']]", "eval.reasoning_tags holds [start, end] pairs of non-empty tags"),
        ("trainer.lr_min_ratio=2", "trainer.lr_min_ratio must be in [0, 1], got 2.0"),
        ("algo.mini_batches=9", "algo.mini_batches (9) must be <= trainer.prompts_per_step (8)"),
        ("model.chat_template_kwargs.tokenize=true", "model.chat_template_kwargs may not set tokenize: vlrl sets"),
        ("algo.overlong_buffer=1024", "algo.overlong_buffer must be in [0, rollout.max_new_tokens (1024)), got 1024"),
        # YAML's true is no number: it would train 1 step, or at lr 1.0
        ("trainer.steps=true", "trainer.steps expects an integer, got True"),
        ("trainer.lr=true", "trainer.lr expects a number, got True"),
    ],
)
def test_bad_keys_and_values_are_named(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_every_sections_refusal_is_said_at_once_each_naming_its_key_and_file(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("trainer:\n  stpes: 3\nrollout: {top_p: 2.0}\n")
    with pytest.raises(ConfigError) as built:  # building stops before validating: the top_p is not said yet
        load_config(recipe, ["trainer.lr=fast", "trainer.lrr=1", "algo.advantage=best"])
    lines = str(built.value).splitlines()
    assert lines[0] == "config: 4 problems:" and len(lines) == 5
    assert lines[1].startswith("  - unknown key 'trainer.stpes'; ") and lines[1].endswith(f"(set in {recipe})")
    assert lines[2].startswith("  - unknown key 'trainer.lrr'; ") and "set in" not in lines[2]
    assert lines[3] == "  - trainer.lr expects a number, got 'fast'"
    assert lines[4].startswith("  - algo.advantage must be one of 'grpo'")
    recipe.write_text("trainer:\n  steps: 3\nrollout: {top_p: 2.0}\n")
    with pytest.raises(ConfigError) as validated:
        load_config(recipe, ["algo.epsilon=-1", "eval.batch_size=0"])
    assert str(validated.value).splitlines() == [
        "config: 3 problems:",
        "  - rollout.top_p must be in (0, 1], got 2.0",
        "  - algo.epsilon must be in (0, 1), got -1.0",
        "  - eval.batch_size must be > 0, got 0",
    ]
    with pytest.raises(ConfigError, match=r"^config: eval.batch_size must be > 0, got 0$"):  # one: as before
        load_config(None, ["eval.batch_size=0"])


def test_chat_template_kwargs_without_a_chat_template_are_refused():
    with pytest.raises(ConfigError, match="model.chat_template_kwargs are read by a chat template"):
        load_config(None, ["model.chat_template=none", "model.chat_template_kwargs.enable_thinking=false"])


def test_the_data_pixel_limit_defaults_to_pils_and_goes_up_to_pils_refusal_exactly():
    from PIL import Image

    from vlrl.config import PIL_REFUSES_ABOVE

    assert load_config(None, []).data.max_image_pixels == Image.MAX_IMAGE_PIXELS == 89_478_485
    assert PIL_REFUSES_ABOVE == 2 * Image.MAX_IMAGE_PIXELS == 178_956_970
    assert load_config(None, ["data.max_image_pixels=178956970"]).data.max_image_pixels == PIL_REFUSES_ABOVE
    assert load_config(None, ["data.max_image_pixels=1"]).data.max_image_pixels == 1
    for value in (0, -1, 178_956_971):
        with pytest.raises(ConfigError, match=rf"data.max_image_pixels must be in \(0, 178956970\] .*got {value}$"):
            load_config(None, [f"data.max_image_pixels={value}"])


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["algo.advantage=dr_grpo", "rollout.num_generations=1"],
            "algo.advantage 'dr_grpo' needs rollout.num_generations >= 2",
        ),
        *[  # a group baseline of one completion: every advantage 0, nothing learned
            ([f"algo.advantage={name}", "rollout.num_generations=1"], f"algo.advantage {name!r} needs rollout.num")
            for name in ("opo", "gpg", "reinforce_baseline", "passk", "gdpo")
        ],
        (["trainer.lr=1", "trainer.lr.x=1"], "config override trainer.lr.x: trainer.lr is not a mapping"),
    ],
)
def test_overrides_that_clash_with_each_other_are_config_errors_naming_both_keys(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, overrides)


@pytest.mark.parametrize("option", ["algo.ratio_level=sequence", "algo.dual_clip=3.0"])
def test_clip_loss_options_with_the_cpgd_loss_are_refused_not_ignored(option):
    with pytest.raises(ConfigError, match=re.escape("algo.loss=cpgd clips the log-ratio per token its own way")):
        load_config(None, ["algo.loss=cpgd", option])


def test_choices_yaml_reads_as_null_or_false_are_the_words_meant(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algo:\n  replay: {mode: off}\neval:\n  reasoning_tags: none\n")
    cfg = load_config(path, ["model.chat_template=none", "algo.difficulty.weighting=none"])
    assert cfg.algo.replay.mode == "off" and cfg.model.chat_template == "none"
    assert cfg.algo.difficulty.weighting == "none"
    assert load_config(None, ["model.chat_template=None"]).model.chat_template == "none"  # null in any case
    assert cfg.eval.reasoning_tags is None  # a file's none is the command line's
    with pytest.raises(ConfigError, match="model.dtype must be one of"):
        load_config(None, ["model.dtype=none"])  # only where the word is a choice


def test_a_key_given_twice_in_a_file_is_refused_with_its_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer: {lr: 1.0e-5, steps: 7}\nrollout: {top_k: 5}\ntrainer: {save_every: 3}\n")
    with pytest.raises(ConfigError, match=r"key 'trainer' is given twice \(first on line 1\)"):
        load_config(path)
    path.write_text("trainer:\n  lr: 1.0e-5\n  lr: 2.0e-5\n")
    with pytest.raises(ConfigError, match=r"key 'lr' is given twice \(first on line 2\)"):
        load_config(path)
    # a merge key is no repeat: the anchored mapping's keys, each overridden by one given beside it
    path.write_text("trainer: &shared {steps: 3, lr: 1.0e-5}\nsft: {<<: *shared, lr: 0.1}\n")
    cfg = load_config(path)
    assert (cfg.sft.steps, cfg.sft.lr, cfg.trainer.lr) == (3, 0.1, 1e-5)


@pytest.mark.parametrize(
    "override,hint",
    [
        ("trainer.beta=0.1", "(or the chosen plugin's option section); of another section: 'algo.beta'"),
        ("data.max_pixels=1", "; did you mean 'data.max_image_pixels'?; of another section: 'model.max_pixels'"),
        ("model.seed=1", "; of another section: 'trainer.seed' or 'sft.seed'"),
        ("rollout.temprature=0.5", "(or the chosen plugin's option section); did you mean 'rollout.temperature'?"),
    ],
)
def test_an_unknown_key_names_the_close_one_of_its_section_and_the_sections_that_have_it(override, hint):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value).endswith(hint)


def test_a_files_unknown_key_and_its_yaml_errors_name_the_file(tmp_path):
    base, recipe = tmp_path / "base.yaml", tmp_path / "recipe.yaml"
    base.write_text("trainer:\n  stpes: 3\n")
    recipe.write_text("extends: base.yaml\nrollout: {top_k: 5}\n")
    with pytest.raises(ConfigError, match=rf"unknown key 'trainer.stpes'; .* \(set in {base}\)$"):
        load_config(recipe)  # the file of the chain that set it
    with pytest.raises(ConfigError, match=r"unknown key 'trainer.stpes'; .*section\); did you mean 'trainer.steps'\?$"):
        load_config(None, ["trainer.stpes=3"])  # the command line's: nothing to add
    base.write_text("trainer:\n  steps: [3\n")
    with pytest.raises(ConfigError, match=rf'invalid YAML: .*\n  in "{base}", line 2'):
        load_config(recipe)


def test_a_config_file_that_is_not_text_is_reported(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\x7fELF\xd0\xd1")
    with pytest.raises(ConfigError, match="cannot read it as UTF-8 text"):
        load_config(path)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["plan", "--gpus", "0"], "argument --gpus: expected a number >= 1, got 0"),
        (["plan", "--gpu-memory", "0"], "argument --gpu-memory: expected a number > 0, got 0"),
        (["plan", "--gpu-memory", "nan"], "argument --gpu-memory: expected a number > 0, got nan"),
        (["plan", "--image-tokens", "-100"], "argument --image-tokens: expected a number >= 0, got -100"),
        (["data", "synth", "--task", "counting", "--out", "x.json", "--size", "-3"], "--size: expected a number >= 1"),
        (["data", "synth", "--task", "counting", "--out", "x.json", "--seed", "-1"], "--seed: expected a number >= 0"),
        (["eval", "--limit", "x"], "argument --limit: expected an integer, got 'x'"),
    ],
)
def test_command_line_numbers_out_of_range_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_eval_data_without_a_task_is_refused_rather_than_ignored(capsys):
    config = str(ROOT / "configs" / "demo" / "refcoco.yaml")
    assert main(["eval", "--config", config, "--data", "/nonexistent.json", "--limit", "2"]) == 2
    assert "--data needs --task" in capsys.readouterr().out


def test_unknown_config_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_train_rejects_a_bad_config_before_loading_a_model(capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the config was validated")

    # patched where the run loads the policy and the reference (Run.load): patching
    # vlrl.models.loading's name while vlrl.trainer.run is first imported left no_model bound
    # there for the next tests
    monkeypatch.setattr("vlrl.trainer.run.load_model", no_model)
    assert main(["train", "--task", "refcoco", "algo.beta=-1"]) == 2
    assert "algo.beta must be >= 0" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_commands_that_load_a_model_say_how_to_get_one_when_model_path_is_unset(command, tmp_path, capsys):
    data = tmp_path / "train.json"
    assert main([command, "--task", "refcoco", f"data.train={data}", f"data.eval={data}", "data.synthetic=true"]) == 2
    out = capsys.readouterr().out
    assert "model.path is not set" in out and "huggingface-cli download" in out and "tiny:qwen2_5_vl" in out
    assert not data.exists()  # refused before any data was written


@pytest.mark.parametrize("command", ["train", "sft", "eval"])
def test_a_model_path_that_is_not_there_is_said_before_any_data_is_written(command, tmp_path, capsys):
    data = tmp_path / "train.json"
    args = [f"model.path={tmp_path / 'nowhere'}", f"data.train={data}", f"data.eval={data}", "data.synthetic=true"]
    assert main([command, "--task", "refcoco", *args]) == 2
    assert f"model.path '{tmp_path / 'nowhere'}' is not a local checkpoint" in capsys.readouterr().out
    assert not data.exists()


def test_unknown_task_and_reward_names_list_the_choices(capsys):
    assert main(["train", "--task", "nonsense", "model.path=tiny:qwen2_5_vl"]) == 2
    out = capsys.readouterr().out
    assert "is not a registered task; training tasks: " in out and "refcoco" in out.split("training tasks:")[1]
    assert "did you mean" not in out
    # the training tasks are listed, the eval-only benchmarks only counted
    assert "refcoco_bbox_rec_val" not in out and "evaluation-only benchmarks (`vlrl tasks list` names them)" in out
    assert main(["train", "--task", "refcocoo", "model.path=tiny:qwen2_5_vl"]) == 2
    assert "task.name 'refcocoo' is not a registered task; did you mean 'refcoco'" in capsys.readouterr().out
    assert main(["eval", "--task", "refcoco_bbox_rec_vall", "--model", "tiny:qwen2_5_vl"]) == 2
    assert "did you mean 'refcoco_bbox_rec_val'" in capsys.readouterr().out
    assert main(["eval", "--task", "refcoco_bbox_rec_val", "--model", "tiny:qwen2_5_vl"]) == 2
    out = capsys.readouterr().out
    assert "refcoco_bbox_rec_val is a benchmark (lmms-lab/RefCOCO, split val) and vlrl never downloads one" in out
    assert "--data DIR or --task refcoco_bbox_rec_val=DIR" in out
    assert main(["train", "--task", "refcoco", "model.path=tiny:qwen2_5_vl", "task.rewards={iuo: 1}"]) == 2
    out = capsys.readouterr().out
    assert "task.rewards.iuo" in out and "available:" in out and "iou" in out


@pytest.mark.parametrize(
    "task,option,value,message",
    [
        ("refcoco", "target_think", "I see {reason}", "has the placeholder {reason}; it may use {caption}, {problem}"),
        (
            "classification",
            "target_think",
            "It is {answer}",
            "has the placeholder {answer}; it may use {problem}, {label}",
        ),
        ("jigsaw", "prompt_template", "{question", "is not a template (expected '}' before end of string)"),
        ("video_qa", "target_think", "{data_type.__class__}", "has the placeholder {data_type.__class__}"),
        ("counting", "prompt_template", "Count: {}", "has the placeholder {}; it may use {Question}, {label}"),
    ],
)
def test_a_template_option_is_checked_when_the_task_is_built(task, option, value, message):
    from vlrl.config import TaskConfig
    from vlrl.tasking.registry import make_task

    with pytest.raises(ConfigError, match=re.escape(f"task.options.{option} {message}")):
        make_task(TaskConfig(name=task, options={option: value}))
    make_task(TaskConfig(name=task, options={option: value.replace("{", "{{").replace("}", "}}")}))  # literal braces


def test_task_options_are_validated_by_the_task(capsys):
    assert (
        main(["train", "--task", "refcoco", "model.path=tiny:qwen2_5_vl", "task.options.iou_convention=exactish"]) == 2
    )
    assert "task.options.iou_convention must be one of 'vlm_r1', 'continuous'" in capsys.readouterr().out


def test_overrides_may_follow_options_on_the_command_line(capsys):
    from vlrl.cli import parse

    args = parse(["eval", "--task", "refcoco", "model.max_pixels=12544", "--out", "x", "eval.limit=3"])
    assert args.overrides == ["model.max_pixels=12544", "eval.limit=3"] and args.out == "x"
    with pytest.raises(SystemExit):
        parse(["tasks", "list", "trainer.lr=1"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_extends_merges_the_base_then_overrides_it(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "base.yaml").write_text(
        "trainer: {lr: 0.5, steps: 7}\ntask: {name: refcoco, options: {format: vlm_r1_rec, iou_convention: vlm_r1}}\n"
        "model: {lora: {target_modules: [q_proj, v_proj]}}\n"
    )
    (tmp_path / "recipes" / "mid.yaml").write_text("extends: base.yaml\ntrainer: {steps: 9}\n")
    child = tmp_path / "child.yaml"  # the parent is found relative to the file, not to the working directory
    child.write_text(
        "extends: recipes/mid.yaml\ntask: {name: refcoco+, options: {iou_convention: continuous}}\n"
        "model: {lora: {target_modules: [o_proj]}}\n"
    )
    cfg = load_config(child, ["trainer.lr=0.25"])
    assert cfg.trainer.steps == 9 and cfg.trainer.lr == 0.25
    assert cfg.task.name == "refcoco+"
    assert cfg.task.options == {"format": "vlm_r1_rec", "iou_convention": "continuous"}  # mappings merge
    assert cfg.model.lora.target_modules == ["o_proj"]  # lists replace


def test_extends_cycles_and_missing_parents_are_refused(tmp_path):
    files = {
        "a.yaml": "extends: b.yaml\n",
        "b.yaml": "extends: a.yaml\ntrainer: {steps: 3}\n",
        "self.yaml": "extends: ./self.yaml\n",
        "orphan.yaml": "extends: gone.yaml\n",
        "bad.yaml": "extends: [a.yaml]\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for name, message in [
        ("a.yaml", r"extends a.yaml makes a cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"),
        ("self.yaml", "makes a cycle"),
        ("orphan.yaml", r"orphan.yaml: extends gone.yaml, but .*gone.yaml does not exist"),
        ("bad.yaml", "bad.yaml: extends expects a file name"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(tmp_path / name)


# configs/demo/refcoco.yaml as it was before it extended configs/demo/base.yaml, with the cold start
# it has since (5000 steps at a constant lr; 3000 under a cosine then): `make demo`'s numbers in the
# README were measured with exactly this configuration.
DEMO_REFCOCO_FLAT = """
model: {path: "tiny:qwen2_5_vl", dtype: float32, min_pixels: 3136, max_pixels: 12544}
data:
  train: data/synthetic/refcoco-demo/train.json
  eval: data/synthetic/refcoco-demo/val.json
  synthetic: true
  synthetic_train_size: 8192
  synthetic_eval_size: 128
task:
  name: refcoco
  options:
    target_think: ""
    target_box_scale: 1.5
    synthetic_scene: {min_objects: 1, max_objects: 1, min_side: 112, max_side: 168, sizes: [large]}
rollout: {num_generations: 8, max_new_tokens: 48, temperature: 1.0}
algo: {beta: 0.0}
trainer: {output_dir: runs/demo/refcoco, steps: 500, prompts_per_step: 8, lr: 3.0e-4, save_every: 100, keep_last: 1, log_samples_every: 25}
sft: {output_dir: runs/demo/refcoco-sft, steps: 5000, prompts_per_step: 8, lr: 3.0e-3, lr_schedule: constant, warmup_steps: 20, save_every: 1000, keep_last: 1}
eval: {max_new_tokens: 48, batch_size: 32, every: 100, headline: [acc@0.5, mean_iou, format_rate, reward]}
"""


def test_the_demo_config_resolves_to_the_configuration_it_was_measured_with(tmp_path):
    flat = tmp_path / "flat.yaml"
    flat.write_text(DEMO_REFCOCO_FLAT)
    assert load_config(ROOT / "configs" / "demo" / "refcoco.yaml") == load_config(flat)


def test_config_show_prints_the_merged_config(capsys):
    assert main(["config", "show", str(ROOT / "configs" / "refcocog.yaml"), "trainer.steps=5"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    cfg = load_config(ROOT / "configs" / "refcocog.yaml", ["trainer.steps=5"])
    assert build(Config, shown) == cfg
    assert shown["task"]["name"] == "refcocog" and shown["trainer"]["steps"] == 5
    assert shown["trainer"]["token_budget"] == 8192  # from refcoco.yaml, which it extends


@pytest.mark.parametrize(
    "override,message",
    [
        ("task.name=nosuchtask", "task.name 'nosuchtask' is not a registered task"),
        ("task.options.bogus=1", "unknown key 'task.options.bogus'"),
        ("task.rewards.nosuch=1", "nosuch"),
        ("mixture=[{name: refcoco, train: x.json, options: {bogus: 1}}]", "unknown key 'mixture[0].options.bogus'"),
        (
            "mixture=[{name: refcoco, train: x.json}, {name: counting, train: y.json, rewards: {nosuch: 1}}]",
            "mixture[1].rewards.nosuch is not a reward of task 'counting'",
        ),
        # the plugins' names and option sections, and what the algorithm asks of the tasks
        ("rollout.hf.compactt=true", "unknown key 'rollout.hf.compactt'"),
        ("rollout.vllm.gpu_memory_utilization=5", "rollout.vllm needs 0 < gpu_memory_utilization <= 1"),
        ("rollout.engine=nope", "rollout.engine"),
        ("eval.backend=nope", "eval.backend"),
        ("trainer.fsdp.bogus=1", "unknown key 'trainer.fsdp.bogus'"),
        ("trainer.fsdpp.cpu_offload=true", "unknown key 'trainer.fsdpp'"),
        ("trainer.replicated.bogus=1", "unknown key 'trainer.replicated': the run's plugins (replicated) read nothing"),
        ("sft.parallel=nope", "sft.parallel"),
        ("algo.accuracy_reward=bogus", "algo.accuracy_reward 'bogus' is not one of task 'refcoco''s rewards"),
        (
            "algo.difficulty={weighting: exp, reward: miou}",
            "algo.difficulty.reward 'miou' is not one of task 'refcoco''s rewards: format, iou",
        ),
        ("algo.temporal.enabled=true", "algo.temporal.enabled (T-GRPO) contrasts a video"),
        ("task.rewards={iou: 0, format: 0}", "every reward of task 'refcoco' weighs 0 (iou: 0, format: 0)"),
    ],
)
def test_config_show_refuses_what_a_run_refuses_before_it_loads_a_model(override, message, capsys):
    assert main(["config", "show", str(ROOT / "configs" / "demo" / "refcoco.yaml"), override]) == 2
    assert message in capsys.readouterr().out


def test_an_unknown_engine_is_named_with_the_registered_ones():
    from vlrl.rollout import configured_engines

    with pytest.raises(ConfigError, match="rollout.engine 'tgi' is unknown; available: hf, vllm"):
        configured_engines(load_config(None, ["rollout.engine=tgi"]).rollout, "hf")
    with pytest.raises(ConfigError, match="eval.backend 'sglang' is unknown"):
        configured_engines(load_config(None, ["eval.backend=sglang"]).rollout, "sglang")


@pytest.mark.parametrize(
    "scene,message",
    [
        ({"min_objects": 2, "max_objects": 1}, "needs 0 <= min_objects <= max_objects, got 2 and 1"),
        ({"min_objects": -1, "max_objects": 3}, "needs 0 <= min_objects <= max_objects, got -1 and 3"),
        ({"min_side": 0}, "needs 8 <= min_side <= max_side, got 0 and 320"),
        ({"sizes": []}, "sizes must be some of small, large, got []"),
        ({"colors": ["teal"]}, "colors must be some of red, green, blue, yellow, purple, orange, got ['teal']"),
    ],
)
def test_a_synthetic_scene_that_cannot_be_drawn_is_named_before_any_data_is_written(scene, message, tmp_path):
    from tasks.counting import Counting
    from tasks.refcoco import RefCOCO

    expected = re.escape(f"config: task.options.synthetic_scene: {message}")
    with pytest.raises(ConfigError, match=expected):
        RefCOCO({"synthetic_scene": scene})  # as the task is built: `vlrl config show` says it
    with pytest.raises(ConfigError, match=expected):
        Counting({"synthetic_scene": scene}).synthesize(tmp_path / "train.json", 2, 0)
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_flash_attention_without_its_package_is_refused_in_one_line_when_a_model_would_load_with_it(tiny_qwen25):
    from vlrl.models.loading import load_model

    cfg = load_config(None, ["model.attn_implementation=flash_attention_2"])  # a run's config, shown on a CPU box
    with pytest.raises(ConfigError, match="attn_implementation=flash_attention_2 needs the flash-attn package"):
        load_model(cfg.model, str(tiny_qwen25), "cpu")


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_a_run_with_flash_attention_without_its_package_stops_before_writing_its_data(tmp_path, capsys):
    data = tmp_path / "synthetic" / "train.json"
    run = ["train", "--task", "refcoco", "model.path=tiny:qwen2_5_vl", "model.attn_implementation=flash_attention_2"]
    assert main([*run, "data.synthetic=true", f"data.train={data}", f"trainer.output_dir={tmp_path / 'run'}"]) == 2
    assert "needs the flash-attn package" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())  # no synthetic scenes drawn, no run folder


def test_numbers_read_as_yaml_1_2_reads_them_in_files_and_overrides(tmp_path):
    with pytest.raises(ConfigError, match="trainer.steps expects an integer, got '0o_'"):
        load_config(None, ["trainer.steps=0o_"])  # no digits: a string, not a traceback
    # YAML 1.1 (PyYAML's) read 010 as 8, 0777 as 511 and 1:30 as 90
    cfg = load_config(None, ["trainer.steps=010", "trainer.seed=0777", "trainer.save_every=0x10"])
    assert (cfg.trainer.steps, cfg.trainer.seed, cfg.trainer.save_every) == (10, 777, 16)
    with pytest.raises(ConfigError, match="trainer.steps expects an integer, got '1:30'"):
        load_config(None, ["trainer.steps=1:30"])
    path = tmp_path / "c.yaml"
    path.write_text("trainer: {steps: 010, lr: 1.0e-05, keep_last: 0o10}\n")
    cfg = load_config(path)
    assert (cfg.trainer.steps, cfg.trainer.lr, cfg.trainer.keep_last) == (10, 1e-5, 8)


def test_a_shown_config_reads_back_as_the_same_config_strings_like_numbers_included(tmp_path, capsys):
    """`vlrl config show` and a run's config.yaml write strings that YAML 1.2 would read as
    numbers ("08": a string to YAML 1.1, whose writer left it unquoted) in quotes."""
    path = tmp_path / "c.yaml"
    path.write_text(f"extends: {ROOT / 'configs' / 'counting.yaml'}\ndata: {{columns: {{answer: '08'}}}}\n"
                    "trainer: {output_dir: '019'}\n")  # fmt: skip
    assert main(["config", "show", str(path)]) == 0
    shown = tmp_path / "shown.yaml"
    shown.write_text(capsys.readouterr().out)
    again = load_config(shown)
    assert (again.data.columns["answer"], again.trainer.output_dir) == ("08", "019")
    assert again == load_config(path)


def test_a_config_file_that_is_a_folder_is_named_as_one(tmp_path):
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(tmp_path))} is a folder; give a YAML file"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    "scene",
    [
        {"min_objects": 0, "max_objects": 0},
        {"min_objects": 2, "colors": ["red"], "shapes": ["circle"], "sizes": ["large"]},
    ],
)
def test_grounding_scenes_that_never_name_an_object_are_refused_instead_of_drawn_for_ever(scene, tmp_path):
    from tasks.refcoco import RefCOCO
    from vlrl.tasking.sources import write_synthetic

    with pytest.raises(ConfigError, match="scenes in a row held no object an expression names"):
        write_synthetic(RefCOCO({"synthetic_scene": scene}), tmp_path / "train.json", 2, 0)
    assert not any(tmp_path.iterdir())


def test_settings_restored_from_a_runs_history_are_said_to_come_from_it_and_flags_win_over_them(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("model: {path: tiny:qwen2_5_vl, max_pixels: 25088}\ndata: {train: latest.json}\n")
    restored = Restored("RUN/config_history.jsonl at step 2", {"data.train": "then.json", "eval.limit": 3})
    cfg = load_config(config, ["model.max_pixels=50176"], {"eval.limit": 1}, restored)
    assert cfg.data.train == "then.json" and cfg.where("data.train") == "in RUN/config_history.jsonl at step 2"
    assert cfg.eval.limit == 1 and cfg.where("eval.limit") == "on the command line"
    assert cfg.model.max_pixels == 50176 and cfg.where("model.max_pixels") == "on the command line"
    assert cfg.where("model.path") == f"in {config}"


@pytest.mark.parametrize("recipe", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_recipe_config_loads_and_validates(recipe):
    """The GPU recipes (configs/*.yaml) run on no CPU test: each must at least parse, merge and
    validate (a stray control character in a comment once made one unreadable)."""
    assert load_config(ROOT / "configs" / recipe).model.path


def test_the_video_r1_recipe_trains_as_its_trainer_does():
    """Video-R1's trainer: frames a second a temporal patch, k3 of a clamped log-ratio, and its
    lr constant over the 1,200 steps its README trained (its cosine spans a whole epoch)."""
    cfg = load_config(ROOT / "configs" / "video_qa.yaml")
    assert cfg.model.video.time_from == "video_r1" and cfg.algo.kl_estimator == "k3_clamped"
    assert (cfg.trainer.steps, cfg.trainer.lr, cfg.trainer.lr_schedule) == (1200, 1e-6, "constant")


def test_the_recipes_take_what_their_public_trainers_do():
    """Read off each public trainer and launch script (2026-12-01; the configs' comments cite
    them): R1-SGG's bnpo per micro-batch of 4 rows; Video-R1's clamped KL, image length reward
    and near-constant lr for OCR; CLS-RL's 200 Trainer steps (2,672 prompts: 167 of 16); PR1's
    first 10,000 rows; VLM-R1's REC lr, which decays over far more steps than the budget;
    LMM-R1's micro-batches of 2 and OpenRLHF's betas; R1-VL's and UniVG-R1's save steps."""

    def recipe(name):
        return load_config(ROOT / "configs" / f"{name}.yaml")

    sgg = recipe("scene_graph").algo
    assert (sgg.aggregation, sgg.micro_batch_rows) == ("micro_token_mean", 4)
    ocr = recipe("ocr")
    assert (ocr.algo.kl_estimator, ocr.algo.accuracy_reward, ocr.algo.accuracy_threshold) == ("k3_clamped", "wer", 0.1)
    assert ocr.algo.accuracy_strict and ocr.algo.length_control.enabled and ocr.trainer.lr_schedule == "constant"
    assert recipe("classification").trainer.steps * 16 == 2672
    assert recipe("counting").data.limit == 10000
    assert recipe("refcoco").trainer.lr_schedule == "constant"
    lmm = recipe("lmm_r1_stage1")
    assert (lmm.algo.aggregation, lmm.algo.micro_batch_rows, lmm.trainer.adam_betas) == (
        "micro_token_mean",
        2,
        [0.9, 0.95],
    )
    assert lmm.algo.advantage == "reinforce_baseline"
    assert (lmm.algo.kl_in, lmm.algo.kl_estimator, lmm.algo.beta) == ("returns", "k1", 0.001)  # OpenRLHF's KL
    assert recipe("lmm_r1_stage2").trainer.adam_betas == [0.9, 0.95]  # it extends stage 1
    assert (recipe("step_reasoning").trainer.save_every, recipe("multi_image_grounding").trainer.save_every) == (
        100,
        200,
    )
