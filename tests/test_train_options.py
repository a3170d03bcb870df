"""Each trainer option of the GRPO family runs end to end on the tiny model and does what it says."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vlrl.config import load_config
from vlrl.trainer.rl import train

FIXTURES = Path(__file__).parent / "fixtures"
BRIEF = f"{FIXTURES / 'toy_task.py'}:BriefGrounding"


def run(tmp_path, data, task=BRIEF, **extra) -> list[dict]:
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.dtype": "float32",  # also on a GPU, where auto is bfloat16: these tests compare to 1e-5
        "model.max_pixels": 50176,
        "data.train": str(data),
        "task.name": task,
        "rollout.num_generations": 4,
        "rollout.max_new_tokens": 10,
        "trainer.output_dir": str(tmp_path / "run"),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 2,
        "trainer.lr": 1e-3,
        "trainer.progress": False,
        **extra,
    }
    result = train(load_config(None, [f"{k}={v}" for k, v in values.items()]))
    return [json.loads(line) for line in result.metrics.read_text().splitlines()]


def test_several_updates_per_rollout_with_rollout_or_recomputed_old_logprobs(tmp_path, rec_data, tiny_qwen25):
    options = {"algo.num_iterations": 2, "algo.mini_batches": 2, "algo.beta": 0.0}
    from_rollout = run(tmp_path / "a", rec_data, **options)
    recomputed = run(tmp_path / "b", rec_data, **options, **{"algo.old_logprobs": "recompute"})
    assert [r["optimizer_steps"] for r in from_rollout] == [4.0, 4.0]
    # The rollout's log-probs are the policy's: both runs take the same steps.
    for a, b in zip(from_rollout, recomputed):
        assert a["reward"] == b["reward"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-5)


def test_beta_zero_loads_no_reference_model(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    import vlrl.trainer.rl as rl
    import vlrl.trainer.run as run_module

    loads = []
    original = run_module.load_model
    counting = lambda *a, **k: loads.append(1) or original(*a, **k)  # noqa: E731
    monkeypatch.setattr(run_module, "load_model", counting)
    monkeypatch.setattr(rl, "load_model", counting)
    rows = run(tmp_path, rec_data, **{"algo.beta": 0.0})
    assert len(loads) == 1 and "kl" not in rows[0]
    loads.clear()
    rows = run(tmp_path / "kl", rec_data, **{"algo.beta": 0.04})
    assert len(loads) == 2 and "kl" in rows[0]


def test_dynamic_sampling_drops_groups_without_spread_and_refills(tmp_path, rec_data, tiny_qwen25):
    task = f"{FIXTURES / 'rl_fixtures.py'}:HalfInformative"
    plain = run(tmp_path / "plain", rec_data, task=task, **{"trainer.prompts_per_step": 4, "trainer.steps": 3})
    assert any(r["frac_groups_zero_std"] > 0 for r in plain)
    dynamic = run(
        tmp_path / "dapo", rec_data, task=task, **{"trainer.prompts_per_step": 4, "trainer.steps": 3, "algo.dynamic_sampling": True}
    )
    assert all(r["frac_groups_zero_std"] == 0 for r in dynamic)
    assert max(r["sampling_rounds"] for r in dynamic) > 1


def test_overlong_shaping_and_truncation_masking(tmp_path, rec_data, tiny_qwen25):
    rows = run(tmp_path, rec_data, **{"algo.overlong_buffer": 4, "algo.mask_truncated": True})
    # The untrained model rarely stops within 10 tokens: most completions sit at L_max, penalty -1.
    assert all(-1.0 <= r["reward/overlong"] < 0 for r in rows)
    assert all(r["truncated_frac"] > 0 for r in rows)


@pytest.mark.parametrize(
    "options",
    [
        {"algo.loss": "cpgd", "algo.advantage": "cpgd", "algo.cpgd_weighting": "clip_filter"},
        {"algo.ratio_level": "sequence", "algo.aggregation": "token_mean", "algo.epsilon_high": 0.28},
        {"algo.advantage": "rloo", "algo.kl_estimator": "low_var", "algo.dual_clip": 3.0},
        {"algo.advantage": "sign", "algo.positive_weight": 0.1, "algo.accuracy_reward": "brevity", "algo.accuracy_threshold": 0.9},
        {"algo.top_entropy_fraction": 0.2, "algo.aggregation": "seq_mean_token_sum_norm", "algo.advantage": "dr_grpo"},
        {"algo.advantage_std": "batch", "algo.kl_estimator": "k1"},
    ],
)
def test_loss_and_advantage_variants_train(tmp_path, rec_data, tiny_qwen25, options):
    rows = run(tmp_path, rec_data, **options)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["skipped_updates"] == 0 and r["grad_norm"] > 0 for r in rows)


def test_trust_grpo_with_a_callable_scorer(tmp_path, rec_data, tiny_qwen25):
    scorer = f"{FIXTURES / 'rl_fixtures.py'}:thinking_length"
    rows = run(tmp_path, rec_data, **{"algo.trust.scorer": scorer, "algo.accuracy_reward": "brevity", "algo.accuracy_threshold": 0.95})
    assert all("reward/thinking" in r and r["thinking_failures"] == 0 for r in rows)


class Scores(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.server.broken:
            self.send_response(500)
            self.end_headers()
            return
        payload = json.dumps({"scores": [0.5] * len(body["items"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("broken", [False, True])
def test_trust_grpo_with_an_http_scorer_survives_its_failures(tmp_path, rec_data, tiny_qwen25, broken):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scores)
    server.broken = broken
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/score"
        rows = run(tmp_path, rec_data, **{"algo.trust.scorer": url, "algo.accuracy_reward": "brevity", "algo.accuracy_threshold": 0.95})
    finally:
        server.shutdown()
    assert [r["thinking_failures"] > 0 for r in rows] == [broken, broken]


def test_trust_grpo_with_a_local_judge_model(tmp_path, rec_data, tiny_qwen25):
    rows = run(tmp_path, rec_data, **{"algo.trust.scorer": "judge:tiny:qwen2_5_vl", "algo.trust.judge_max_new_tokens": 4})
    assert [r["step"] for r in rows] == [1, 2]  # an untrained judge rarely answers a number: scored 0, counted
    assert all("thinking_failures" in r for r in rows)


def test_t_grpo_contrasts_each_prompt_with_its_variant(tmp_path, rec_data, tiny_qwen25):
    task = f"{FIXTURES / 'rl_fixtures.py'}:OrderedGrounding"
    rows = run(tmp_path, rec_data, task=task, **{"algo.temporal.enabled": True, "algo.accuracy_reward": "brevity", "algo.accuracy_threshold": 0.95})
    assert all("reward/temporal" in r and r["reward/temporal"] >= 0 for r in rows)
