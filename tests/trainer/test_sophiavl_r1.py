"""Trust-GRPO's thinking scorer in SophiaVL-R1's protocol (algo.trust.protocol=sophiavl_r1): the
request its reward manager sends to the thinking reward model, and how it reads the answer,
against a transcription of kxfan2002/SophiaVL-R1 at a818494 (verl/workers/reward/custom.py)."""

from __future__ import annotations

import base64
import io
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from PIL import Image

from tests.trainer.test_train_options import run, send_json
from vlrl.config import ConfigError, ModelConfig, TrustConfig, load_config
from vlrl.data.sample import Sample
from vlrl.trainer.sophiavl_r1 import MAX_ANSWER_CHARS, extract_score
from vlrl.trainer.thinking import Asked, make_scorer


def reference_prompt(prompt_str, reasoning_str, image):
    """get_process_reward's text, verbatim (the manager has removed `$` from the response)."""
    if image is not None and "<image>" not in prompt_str:
        prompt_str = f"<image> {prompt_str}"

    prompt = f"""You are an expert reasoning evaluator. I will give you a multimodal question and an answer. Your goal is to judge a reward process and give a score between 0 and 1. You should focus on whether the reasoning process is good rather than whether the final answer is correct.### Evaluation Criteria:\n- **Logical Soundness**: Does each step follow logically from the previous one?\n- **Correct Reasoning**: Are the methods and steps used appropriate and valid? Are the facts and lemmas correctly stated and applied?\n- **Error Identification**: Are there any logical fallacies, unsupported assumptions, or incorrect steps?\n- **Language Consistency**: Is the reasoning process conducted in a single, consistent language without mixing different languages?\n- **Redundancy**: Is the reasoning concise, without unnecessary repetition or extraneous steps?\nProvide a single score from **{{0, 0.1, 0.2, ..., 1.0}}** based on the reasoning quality, where:\n - **0**: Completely flawed reasoning\n- **1**: Perfectly sound reasoning\n- Intermediate values (e.g., 0.3, 0.7) should reflect partial correctness or minor errors.\nBe strict, reward the good process and punish the bad one. You should only output the score without any explanation.
    Question: {prompt_str}
    Reasoning process: {reasoning_str}
    Your response format: <answer>your_score</answer>
    """
    return prompt


def reference_extract_score(text: str):
    """extract_score and its extractors, verbatim but for their docstrings."""

    def extract_after_think_number(text):
        match = re.search(r"</think>\s*<answer>\s*([\d.]+)\s*</answer>", text)
        if match:
            number_str = match.group(1)
            return int(number_str) if number_str.isdigit() else float(number_str)
        match = re.search(r"</think>\s*([\d.]+)", text)
        if match:
            number_str = match.group(1)
            return int(number_str) if number_str.isdigit() else float(number_str)
        return None

    def extract_zero_wrong_steps(text):
        match = re.search(r"\*\*(\d+)\s+wrong steps\*\*", text)
        return int(match.group(1)) if match else None

    def extract_box_score(text):
        match = re.search(r"\\box(?:es)?\{([01](?:\.\d)?)\}", text)
        return float(match.group(1)) if match else None

    def extract_total_wrong_steps(text):
        match = re.search(r"Total Wrong Steps\*\*:\s*(\d+)", text)
        return int(match.group(1)) if match else None

    def extract_xml_answer(text):
        match = re.search(r"<answer>\s*([01](?:\.\d)?)\s*</answer>", text)
        return float(match.group(1)) if match else None

    def extract_plain_number(text):
        match = re.search(r"\b([01](?:\.\d)?)\b", text)
        return float(match.group(1)) if match else None

    def extract_wrong_steps(text):
        match = re.search(r"\*\*.*?\bWrong Steps\*\*:\s*(\d+)", text)
        return int(match.group(1)) if match else None

    for extractor in [extract_box_score, extract_xml_answer, extract_plain_number, extract_after_think_number,
                      extract_total_wrong_steps, extract_zero_wrong_steps, extract_wrong_steps]:  # fmt: skip
        score = extractor(text)
        if score is not None:
            if score > 1:
                score = 1
            elif score < 0:
                score = 0
            return score
    return 0


ANSWERS = [
    "<answer>0.7</answer>", "\\box{0.3}", "\\boxes{1}", "I'd say 0.5 overall", "</think> <answer>0.83</answer>",
    "</think><answer>3</answer>", "</think> 7 because", "**Total Wrong Steps**: 2", "**0 wrong steps**",
    "**Step 3 Wrong Steps**: 4", "nothing numeric here", "0.35", "10 out of 10", "<answer> 1 </answer>",
    "</think> \u0663", "\uff12", "1.0.0", "", "<answer>0.9</answer> then 0",
    "Step 1 holds. <answer>0.7</answer>",  # <answer> before a bare 0/1 number found earlier in the text
    "Step 1 holds. \\boxes{0.3}",  # \\boxes{} before it too
]  # fmt: skip


def test_its_answers_are_read_as_its_extract_score_reads_them():
    for answer in ANSWERS:
        assert extract_score(answer) == reference_extract_score(answer), answer
    with pytest.raises(ValueError):  # float("2.3.4") there: get_process_reward retries, then scores 0
        reference_extract_score("</think> 2.3.4")
    assert extract_score("</think> 2.3.4") == 0.0
    # the error ends the reading there: a later extractor's count is never reached
    with pytest.raises(ValueError):
        reference_extract_score("</think> 2.3.4 **5 wrong steps**")
    assert extract_score("</think> 2.3.4 **5 wrong steps**") == 0.0
    # an answer is read up to MAX_ANSWER_CHARS: a score past them is not found
    assert extract_score("x" * (MAX_ANSWER_CHARS - 20) + "<answer>0.7</answer>") == 0.7
    assert extract_score("x" * MAX_ANSWER_CHARS + "<answer>0.7</answer>") == 0.0


def test_a_prompt_that_already_holds_its_image_tag_gets_no_second_one():
    from vlrl.trainer.sophiavl_r1 import evaluator_text

    for prompt in ("<image>Where is the dog?", "user\nWhere is the dog?\n"):
        for image in (None, "an image"):
            expected = reference_prompt(prompt, "r", image)
            assert evaluator_text(prompt, "r", image is not None) == expected, (prompt, image)
    assert "Question: <image>Where is the dog?\n" in evaluator_text("<image>Where is the dog?", "r", True)


class ChatServer(BaseHTTPRequestHandler):
    """An OpenAI-style chat completions endpoint: records each request, answers `server.answer`."""

    def do_POST(self):
        self.server.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        send_json(self, {"choices": [{"message": {"content": self.server.answer}}]})

    def log_message(self, *args):
        pass


@pytest.fixture
def chat():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatServer)
    server.requests, server.answer = [], "<answer>0.7</answer>"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
    server.shutdown()


def test_the_request_is_its_reward_managers_request(chat):
    server, url = chat
    scorer = make_scorer(TrustConfig(scorer=url, protocol="sophiavl_r1", judge_model="rm-3b"), ModelConfig())
    image = Image.fromarray(np.arange(48 * 64 * 3, dtype=np.uint8).reshape(48, 64, 3))
    asked = Asked("system\nYou are a helpful assistant.\nuser\nWhere is the dog?\nassistant\n", image)
    sample = Sample(id="0", task="refcoco", problem="Where is the dog?", solution=[0, 0, 1, 1])
    completions = ["<think>It costs $5$ and $$x$$.</think><answer>here</answer>", "<think>b</think>"]
    assert scorer([sample, sample], completions, asked) == [0.7, 0.7] and scorer.failures == 0
    texts = [reference_prompt(asked.prompt, c.replace("$$", "").replace("$", ""), "an image") for c in completions]
    assert sorted(r["messages"][1]["content"][0]["text"] for r in server.requests) == sorted(texts)  # sent at once
    for request in server.requests:
        assert request["model"] == "rm-3b" and request["temperature"] == 0.0
        system, user = request["messages"]
        assert system == {"role": "system", "content": "You are a helpful assistant."}
        text, picture = user["content"]
        assert text["type"] == "text"
        url = picture["image_url"]["url"]
        assert picture["type"] == "image_url" and url.startswith("data:image/png;base64,")
        sent = Image.open(io.BytesIO(base64.b64decode(url.removeprefix("data:image/png;base64,"))))
        assert np.array_equal(np.asarray(sent), np.asarray(image))  # the image the policy saw, lossless
    # A video's prompt: no image, no "<image> " put first; an unreachable model scores 0, counted.
    server.requests.clear()
    scorer([sample], ["<think>c</think>"], Asked("user\nWhat happens?\nassistant\n", None))
    (request,) = server.requests
    assert request["messages"][1]["content"] == [
        {"type": "text", "text": reference_prompt("user\nWhat happens?\nassistant\n", "<think>c</think>", None)}
    ]
    gone = make_scorer(TrustConfig(scorer="http://127.0.0.1:9/x", protocol="sophiavl_r1", judge_model="rm"), None)
    assert gone([sample], ["a"], asked) == [0.0] and gone.failures == 1


def test_a_local_judge_is_asked_its_request_with_the_first_image_and_read_by_extract_score(
    tmp_path, tiny_qwen25, monkeypatch
):
    from vlrl.rollout.hf import HFEngine

    asked_texts, answers = [], []
    generate = HFEngine.generate

    def recording(self, prompts, params, generator=None):
        asked_texts.extend(p.text for p in prompts)
        generations = generate(self, prompts, params, generator)
        answers.extend(g.completions[0].text for g in generations)
        return generations

    monkeypatch.setattr(HFEngine, "generate", recording)
    for name in ("a.png", "b.png"):
        Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / name)
    two_images = Sample(
        id="0", task="t", problem="q", solution=1, images=[str(tmp_path / "a.png"), str(tmp_path / "b.png")]
    )
    model = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=12544)
    options = {"scorer": "judge:tiny:qwen2_5_vl", "protocol": "sophiavl_r1", "judge_max_new_tokens": 6}
    scorer = make_scorer(TrustConfig(**options), model)
    asked = Asked("user\nq\nassistant\n", Image.open(tmp_path / "a.png"))
    scores = scorer([two_images], ["<think>$red$</think>"], asked)
    (text,) = asked_texts
    expected = reference_prompt(asked.prompt, "<think>red</think>", "an image")
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    assert expected in text and text.count("<|vision_start|>") == 1  # the text, then the first image only
    assert text.index(expected) < text.index("<|vision_start|>")
    assert scores == [extract_score(answers[0])] and scorer.failures == 0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"algo.trust.scorer": "http://localhost:8000/v1/chat/completions"}, "names the served model in"),
        ({"algo.trust.scorer": "my.py:score"}, "is how an http(s):// or judge: scorer is asked"),
    ],
)
def test_the_protocol_is_refused_where_it_cannot_apply(options, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["algo.trust.protocol=sophiavl_r1", *(f"{k}={v}" for k, v in options.items())])


def test_a_run_asks_its_reward_model_about_the_prompt_it_sampled_from(chat, tmp_path, rec_data, tiny_qwen25):
    server, url = chat
    options = {"algo.trust.scorer": url, "algo.trust.protocol": "sophiavl_r1", "algo.trust.judge_model": "rm"}
    rows = run(tmp_path, rec_data, **options, **{"trainer.steps": 1, "algo.accuracy_reward": "brevity"})
    assert rows[0]["thinking_failures"] == 0 and server.requests
    text = server.requests[0]["messages"][1]["content"][0]["text"]
    # The policy's prompt decoded without special tokens, its image announced and sent.
    assert "Question: <image> system\nYou are a helpful assistant.\nuser\n" in text and "<|im_start|>" not in text
    assert len(server.requests[0]["messages"][1]["content"]) == 2
