"""sophiavl_r1: SophiaVL-R1-130k's records, its prompt as its dataset builds it, its scores by
hand (a run of its own math.py beside rewards/sophiavl_r1.py, 16,000 completions, is in the
commit that added them), and its recipe."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from rewards.sophiavl_r1 import outcome
from tasks.sophiavl_r1 import QUESTION_TEMPLATE, SYSTEM_PROMPT, TYPE_TEMPLATE, SophiaVLR1
from vlrl.config import ModelConfig, load_config
from vlrl.data.records import FrameSpec
from vlrl.models.loading import load_processor
from vlrl.models.prompting import render_prompt

ROOT = Path(__file__).resolve().parents[2]
FRAME = FrameSpec("absolute", 3136, 50176)
OPTIONS = ["A. 1", "B. 2", "C. 3", "D. 4"]


def load(tmp_path: Path, records: list[dict], **options):
    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "a.png")
    path = tmp_path / "train.json"
    path.write_text(json.dumps(records))
    return SophiaVLR1(options).load(path, FRAME)


def record(**fields) -> dict:
    return {"problem_id": 7, "problem": "How many?", "data_type": "image", "problem_type": "multiple choice",
            "options": OPTIONS, "solution": "<answer>B</answer>", "path": "a.png"} | fields  # fmt: skip


@pytest.mark.parametrize(
    ("scorer", "completion", "truth", "score"),
    [
        ("choice", "<think>t</think><answer>B</answer>", "B", 1.0),
        ("choice", "<think>t</think> so <answer> B </answer>\n", "B", 1.0),  # pieces are stripped
        ("choice", "<think>t</think><answer>A, B</answer>", "AB", 1.0),  # two pieces, two characters
        ("choice", "<think>t</think><answer>A,B</answer>", "A,B", 0.0),  # two pieces, three characters
        ("choice", "<think>t</think><answer>12</answer>", "12", 0.0),  # one piece, two characters
        ("choice", "<think>t</think><answer>b</answer>", "B", 0.0),
        ("choice", "Sure. <think>t</think><answer>B</answer>", "B", 0.0),  # the format starts at <think>
        ("choice", "<think>t</think>B", "B", 0.0),
        ("math", "<think>t</think><answer>$\\frac{1}{2}$</answer>", "0.5", 1.0),  # every $ removed
        ("math", "<think>t</think><answer>2</answer><answer>3</answer>", "2", 1.0),  # the first answer
        ("math", "<think>t</think><answer>3</answer>", "2", 0.0),
        ("ocr", "<think>t</think><answer> OPEN 24 </answer>", "OPEN 24 hours", math.exp(-1 / 3)),
        ("ocr", "<think>t</think><answer>OPEN 24 hours</answer>", "OPEN 24 hours", 1.0),
        # jiwer splits at spaces, a run of whitespace read as one: one line break joins two words
        ("ocr", "<think>t</think><answer>STOP\nHERE</answer>", "STOP HERE", math.exp(-1)),
        ("ocr", "<think>t</think><answer>Line one\nLine two</answer>", "Line one Line two", math.exp(-1 / 2)),
        ("ocr", "<think>t</think><answer>a\tb</answer>", "a b", math.exp(-1)),
        ("ocr", "<think>t</think><answer>a \n b</answer>", "a b", 1.0),
        ("ocr", "<think>t</think><answer>a\n\nb</answer>", "a b", 1.0),
        ("math", "<think>t</think><answer>\n1.5\n</answer>", "\\frac{3}{2}", 1.0),  # the unstripped answer
        ("caption", "<think>t</think><answer>the cat\nsat</answer>", "the cat sat", 1.0),
        ("caption", "<think>t</think><answer>a dog</answer>", "the cat sat", 0.0),
    ],
)
def test_each_scorer_gives_sophiavl_r1s_score_by_hand(scorer, completion, truth, score):
    assert outcome(completion, truth, scorer) == pytest.approx(score)


def test_a_multiple_choice_record_is_asked_as_its_dataset_builds_the_prompt(tmp_path):
    """verl/utils/dataset.py: options joined with "; " right after the problem, "<image>" put
    first, QUESTION_TEMPLATE and the type's template; run_train.sh's system prompt. Rendered
    through Qwen2.5-VL's chat template it is the text SophiaVL-R1's dataset makes: the template
    applied to the string, then "<image>" replaced by the vision tokens."""
    # verl/utils/dataset.py's QUESTION_TEMPLATE and TYPE_TEMPLATE["text"], as written there
    assert QUESTION_TEMPLATE == (
        "{Question}\n"
        "Please think about this question as if you were a human pondering deeply. "
        "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', 'let's break it down', etc, or other natural language thought expressions "
        "It's encouraged to include self-reflection or verification in the reasoning process. "
        "Provide your detailed reasoning between the <think> </think> tags, and then give your final answer between the <answer> </answer> tags."
    )
    assert TYPE_TEMPLATE["text"] == " Please provide the short text answer within the <answer> </answer> tags."
    (sample,) = load(tmp_path, [record()]).samples
    assert sample.solution == "B" and sample.meta["problem_type"] == "multiple choice"
    user = (
        QUESTION_TEMPLATE.format(Question="<image>How many?A. 1; B. 2; C. 3; D. 4") + TYPE_TEMPLATE["multiple choice"]
    )
    assert user.startswith("<image>How many?A. 1; B. 2; C. 3; D. 4\nPlease think about this question")
    task = SophiaVLR1()
    cfg = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32")
    processor = load_processor(cfg)
    theirs = processor.apply_chat_template(
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
        tokenize=False, add_generation_prompt=True,
    ).replace("<image>", "<|vision_start|><|image_pad|><|vision_end|>")  # fmt: skip
    prompt = render_prompt(processor, task.messages(sample), sample, cfg)
    pads = prompt.text.count("<|image_pad|>")
    assert pads >= 1 and prompt.text == theirs.replace("<|image_pad|>", "<|image_pad|>" * pads)
    assert (
        "tagsdd" in SYSTEM_PROMPT and SYSTEM_PROMPT.startswith("You FIRST") and "answer. The" in SYSTEM_PROMPT
    )  # as OmegaConf read it


def test_the_image_goes_at_the_problems_placeholder_and_a_text_only_record_has_none(tmp_path):
    samples = load(tmp_path, [record(problem="Look: <image> How many?", problem_type="numerical", solution="2"),
                              record(problem_type="text", data_type="text", solution="<answer>Denali</answer>")]).samples  # fmt: skip
    placed, text_only = (SophiaVLR1().messages(s)[1]["content"] for s in samples)
    assert [part["type"] for part in placed] == ["text", "image", "text"] and placed[0]["text"] == "Look: "
    assert placed[2]["text"].startswith(" How many?\nPlease think") and placed[2]["text"].endswith(
        TYPE_TEMPLATE["numerical"]
    )
    assert text_only == [
        {"type": "text", "text": QUESTION_TEMPLATE.format(Question="How many?") + TYPE_TEMPLATE["text"]}
    ]
    assert samples[1].images == [] and samples[1].solution == "Denali"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"data_type": "video"}, "reads images only"),
        ({"problem_type": "regression"}, "problem_type 'regression' is not one of"),
        ({"problem": "<image> and <image>"}, "2 <image> placeholders"),
        ({"solution": "<answer> </answer>"}, "empty answer"),
    ],
)
def test_a_record_it_cannot_ask_is_reported_and_skipped(fields, message, tmp_path):
    split = load(tmp_path, [record(**fields), record()])
    assert len(split.samples) == 1 and len(split.errors) == 1 and message in str(split.errors[0])


def test_the_records_answer_is_its_first_answer_tags_content_unstripped_as_sophiavl_r1s_ground_truth(tmp_path):
    """verl/workers/reward/custom.py @a818494: re.search(r"<answer>(.*?)</answer>", ground_truth,
    re.DOTALL).group(1), else the whole text, '$' removed, never stripped: a choice answer " A"
    has two characters, so "A" does not match it there or here."""
    samples = load(tmp_path, [record(solution="<answer> A</answer>"), record(solution="\nA$")]).samples
    assert [s.solution for s in samples] == [" A", "\nA$"]
    task = SophiaVLR1({"scorer": "choice"})
    scores = task.reward_functions()["accuracy"](["<think>r</think><answer>A</answer>"] * 2, samples)
    assert scores == [0.0, 0.0]
    math_sample = load(
        tmp_path, [record(problem_type="free-form", solution="<answer>\nhello world\t</answer>")]
    ).samples
    assert outcome("<think>$</think><answer>Hello  world</answer>$", math_sample[0].solution, "math") == 0.0


def test_each_sample_is_scored_by_its_problem_types_score_as_sophiavl_r1s_trainer_chooses_it(tmp_path):
    """verl/trainer/main.py @a818494 maps each problem type to its compute_score (reward_fn_dict)
    and rank_dynamic_reward_fn scores a group with its type's: the values are its math.py's
    (mathruler 0.1.0, jiwer 4.0.0) on these answers. One scorer for all (choice) scores the
    same answers 0 but the multiple-choice one."""
    cases = [  # problem type, record's solution, answer, its score
        ("multiple choice", "<answer>B</answer>", "B", 1.0),
        ("numerical", "<answer>1/2</answer>", "0.5", 1.0),
        ("OCR", "<answer>STOP</answer>", "S", math.exp(-1)),
        ("free-form", "<answer>a red car on the road</answer>", "a red car", 0.6349206349),
        ("text", "<answer>a red car on the road</answer>", "a red car", 0.6349206349),
    ]
    records = [record(problem_type=kind, solution=solution, data_type="text") for kind, solution, _, _ in cases]
    samples = load(tmp_path, records).samples
    completions = [f"<think>t</think><answer>{answer}</answer>" for _, _, answer, _ in cases]
    scores = SophiaVLR1({}).reward_functions()["accuracy"](completions, samples)
    assert scores == pytest.approx([score for *_, score in cases])
    assert SophiaVLR1({"scorer": "choice"}).reward_functions()["accuracy"](completions, samples) == [1.0, 0, 0, 0, 0]


def test_the_recipe_trains_as_sophiavl_r1s_released_script():
    cfg = load_config(ROOT / "configs" / "sophiavl_r1.yaml")
    algo, t = cfg.algo, cfg.trainer
    assert cfg.task.name == "sophiavl_r1" and cfg.task.options == {"scorer": "by_problem_type"}
    assert (algo.std_eps, algo.beta, algo.kl_estimator, algo.entropy_coef) == (1e-6, 0.04, "k3_clamped", 1e-3)
    assert (algo.trust.protocol, algo.trust.variant, algo.trust.decay_steps, algo.trust.alpha) == (
        "sophiavl_r1", "code", 12000.0, 0.3,
    )  # fmt: skip
    assert (t.prompts_per_step, cfg.rollout.num_generations, cfg.rollout.max_new_tokens) == (16, 8, 1024)
    assert (t.lr, t.weight_decay, t.max_grad_norm, algo.mini_batches) == (6e-7, 0.01, 4.0, 1)
    assert (algo.aggregation, algo.micro_batch_rows) == ("micro_token_mean", 4)
    assert (cfg.model.min_pixels, cfg.model.max_pixels) == (262144, 4194304)
