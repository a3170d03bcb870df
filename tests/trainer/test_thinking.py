"""Trust-GRPO's thinking scorers take their options: an HTTP call slower than
algo.trust.timeout_s fails (scores 0, counted), and the local judge writes at most
algo.trust.judge_max_new_tokens tokens."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest
from PIL import Image

from tests.trainer.test_train_options import Scores
from vlrl.config import ModelConfig, TrustConfig
from vlrl.data.sample import Sample
from vlrl.trainer.thinking import make_scorer

SLOW_S = 1.0


@pytest.fixture
def slow_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scores)
    server.delay = SLOW_S
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/score"
    server.shutdown()


@pytest.fixture
def sample(tmp_path):
    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "red.png")
    return Sample(
        id="0",
        task="refcoco",
        problem="where is the red box?",
        solution=[0, 0, 1, 1],
        images=[str(tmp_path / "red.png")],
    )


@pytest.mark.parametrize("timeout_s, scores, failures", [(SLOW_S / 5, [0.0, 0.0], 2), (SLOW_S * 10, [0.5, 0.5], 0)])
def test_an_http_scorer_waits_timeout_s_for_its_answer(slow_url, sample, timeout_s, scores, failures):
    scorer = make_scorer(TrustConfig(scorer=slow_url, timeout_s=timeout_s), ModelConfig())
    assert scorer([sample, sample], ["<think>a</think>", "<think>b</think>"]) == scores
    assert scorer.failures == failures


def test_the_judge_writes_at_most_judge_max_new_tokens(sample, tiny_qwen25, monkeypatch):
    from vlrl.rollout.hf import HFEngine

    written = []
    generate = HFEngine.generate

    def recording(self, prompts, params, generator=None):
        generations = generate(self, prompts, params, generator)
        written.extend((params.max_new_tokens, len(g.completions[0].token_ids)) for g in generations)
        return generations

    monkeypatch.setattr(HFEngine, "generate", recording)
    model = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=12544)
    scorer = make_scorer(TrustConfig(scorer="judge:tiny:qwen2_5_vl", judge_max_new_tokens=3), model)
    scores = scorer([sample, sample], ["<think>it is red</think>", "<think>no idea</think>"])
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    assert [limit for limit, _ in written] == [3, 3] and all(n <= 3 for _, n in written)


def test_a_judge_call_that_runs_out_of_memory_goes_on_one_prompt_a_call_with_the_same_scores(
    sample, tiny_qwen25, monkeypatch
):
    """trainer.halve_on_oom reaches a local judge (its own model): a call of two prompts that
    runs the GPU out of memory is made again one at a time, and each prompt gets its score (the
    tiny judge's answer replaced by a number its prompt decides); without recovery the error
    ends the run, as the policy's rollout's does (a judge failing so at every step would score
    0 every time)."""
    import torch

    from vlrl.rollout.hf import HFEngine
    from vlrl.rollout.parts import RolloutRows

    model = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=12544)
    trust = TrustConfig(scorer="judge:tiny:qwen2_5_vl", judge_max_new_tokens=3)
    generate, calls, fails = HFEngine.generate, [], [True]  # the next call of two prompts fails

    def answering(self, prompts, params, generator=None):
        calls.append(len(prompts))
        if len(prompts) > 1 and fails[0]:
            fails[0] = False
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        generations = generate(self, prompts, params, generator)
        for prompt, generation in zip(prompts, generations, strict=True):
            generation.completions[0].text = str(int(prompt.input_ids.sum()) % 10)
        return generations

    monkeypatch.setattr(HFEngine, "generate", answering)
    completions = ["<think>it is red</think>", "<think>no idea, none at all</think>"]
    warnings = []
    recovering = make_scorer(trust, model, RolloutRows(True, warn=warnings.append, what="thinking judge"))
    scores = recovering([sample, sample], completions)
    assert calls == [2, 1, 1] and recovering.failures == 0 and len(set(scores)) == 2
    assert "thinking judge ran out of GPU memory" in warnings[0]
    calls.clear()
    assert make_scorer(trust, model)([sample, sample], completions) == scores and calls == [2]  # none fails
    calls.clear()
    fails[0] = True
    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        make_scorer(trust, model)([sample, sample], completions)
    assert calls == [2]


def test_the_judge_refuses_a_sample_whose_image_cannot_be_read_naming_the_file(sample, tiny_qwen25, tmp_path):
    """The judge renders with render_prompts, which returns an unreadable sample's error instead
    of raising it; the judge raises it (ThinkingScorer counts the call as failed) rather than
    handing it to the engine as a prompt."""
    import dataclasses

    from vlrl.models.prompting import UnusableSample
    from vlrl.trainer.thinking import judge_scorer

    judge = judge_scorer("tiny:qwen2_5_vl", ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=12544), 3)
    missing = dataclasses.replace(sample, images=[str(tmp_path / "missing.png")])
    with pytest.raises(UnusableSample, match="missing.png"):
        judge([sample, missing], ["<think>it is red</think>", "<think>no idea</think>"])


@pytest.mark.parametrize(
    "spec,problem",
    [
        ("missing.py:score", r"algo\.trust\.scorer 'missing\.py:score': file not found: .*missing\.py"),
        ("no_such_module:score", r"algo\.trust\.scorer 'no_such_module:score': cannot import module 'no_such_module'"),
        ("os:no_such_function", r"algo\.trust\.scorer 'os:no_such_function': 'os' has no attribute"),
        ("judge:/no/such/model", r"algo\.trust\.scorer 'judge:/no/such/model': model\.path '/no/such/model' is not"),
        # there, but it could take no call: every one would have failed and scored 0, silently
        ("os:getcwd", r"algo\.trust\.scorer 'os:getcwd' cannot be called as fn\(samples, completions\)"),
    ],
)
def test_a_thinking_scorer_that_is_not_there_names_algo_trust_scorer_before_the_policy_loads(
    tmp_path, monkeypatch, capsys, rec_data, spec, problem
):
    import re

    from vlrl.cli import main

    def loaded(*args, **kwargs):
        raise AssertionError("the policy loaded before the scorer was checked")

    monkeypatch.setattr("vlrl.trainer.run.load_model", loaded)
    run = tmp_path / "run"
    overrides = [f"data.train={rec_data}", "model.path=tiny:qwen2_5_vl"]
    assert (
        main(["train", "--task", "refcoco", *overrides, f"algo.trust.scorer={spec}", f"trainer.output_dir={run}"]) == 2
    )
    assert re.search(problem, capsys.readouterr().out.replace("\n", " ")) and not run.exists()


def test_the_thinking_is_the_first_think_blocks_content_stripped_else_the_whole_completion():
    from vlrl.trainer.thinking import thinking_text

    assert thinking_text("<think>\n it is red \n</think><answer>red</answer><think>more</think>") == "it is red"
    assert thinking_text("no tags, all of it") == "no tags, all of it"


def test_scores_are_clamped_into_zero_one_and_what_is_not_a_finite_number_fails():
    from vlrl.trainer.thinking import ThinkingScorer

    scorer = ThinkingScorer(lambda samples, completions: [1.5, -0.5, "0.25", float("nan"), float("inf"), None, "x"])
    assert scorer([None] * 7, ["c"] * 7) == [1.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0]
    assert scorer.failures == 4  # nan, inf, None, "x"


def test_a_scorer_giving_the_wrong_number_of_scores_fails_every_completion():
    from vlrl.trainer.thinking import ThinkingScorer

    scorer = ThinkingScorer(lambda samples, completions: [0.5])
    assert scorer([None, None], ["a", "b"]) == [0.0, 0.0]
    assert scorer.failures == 2


def test_an_http_scorer_is_sent_each_completion_and_its_thinking(sample):
    """vlrl's protocol: {"items": [{"id", "problem", "completion", "thinking"}]}, over https too."""
    import json as json_module

    from vlrl.trainer import thinking

    sent = []

    class Answer:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, limit):
            return json_module.dumps({"scores": [0.25]}).encode()

    def urlopen(request, timeout):
        sent.append((request.full_url, json_module.loads(request.data)))
        return Answer()

    completion = "<think> look left </think><answer>[0, 0, 1, 1]</answer>"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(thinking.urllib.request, "urlopen", urlopen)
        scorer = make_scorer(TrustConfig(scorer="https://judge.example/score"), ModelConfig())
        assert scorer([sample], [completion]) == [0.25] and scorer.failures == 0
    item = {"id": "0", "problem": "where is the red box?", "completion": completion, "thinking": "look left"}
    assert sent == [("https://judge.example/score", {"items": [item]})]


def test_the_judges_rating_is_its_first_number_over_ten(sample, tiny_qwen25, monkeypatch):
    """vlrl's judge protocol: 0-10, the first number of the answer (decimals too) / 10; an
    answer without a number fails (counted)."""
    from vlrl.rollout import Completion
    from vlrl.rollout.base import Generation
    from vlrl.rollout.hf import HFEngine

    answers = iter(["7.5 out of 10", "no idea"])
    monkeypatch.setattr(
        HFEngine,
        "generate",
        lambda self, prompts, params, generator=None: [
            Generation([Completion([1], next(answers), False)]) for _ in prompts
        ],
    )
    model = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", max_pixels=12544)
    scorer = make_scorer(TrustConfig(scorer="judge:tiny:qwen2_5_vl"), model)
    assert scorer([sample, sample], ["<think>it is red</think>", "<think>?</think>"]) == [0.75, 0.0]
    assert scorer.failures == 1


@pytest.mark.parametrize("halve", [True, False])
def test_the_trainer_hands_a_local_judge_its_halve_on_oom(halve, tmp_path, rec_data, tiny_qwen25, monkeypatch):
    from rich.console import Console

    import vlrl.trainer.rl as rl
    from tests.trainer.test_train import tiny_overrides
    from vlrl.config import load_config

    given = []
    monkeypatch.setattr(rl, "make_scorer", lambda trust, model, rows: given.append(rows))
    options = {"algo.trust.scorer": "judge:tiny:qwen2_5_vl", "trainer.halve_on_oom": str(halve).lower()}
    rl.RLTrainer(load_config(None, tiny_overrides(tmp_path, rec_data, **options)), Console(quiet=True))
    assert [(rows.halve_on_oom, rows.what) for rows in given] == [(halve, "thinking judge")]
