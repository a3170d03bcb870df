"""The HF engine's decoding with this checkout's lean step (models/decode_step.py) against REV's,
in one process. Prints one JSON line.

One engine samples the step bench's work (4 RefCOCO prompts x 8 completions of up to 48 tokens,
the tiny model in float32, configs/demo/refcoco.yaml) with the same per-round seed through each
step in turn within every round, the order swapped every round: the machine's speed moves by a
quarter from minute to minute, so separate processes measure the machine more than the change.
Even so the two medians moved apart by up to 8% with the same step on both sides (40 rounds,
2026-11-28): the speed moves within a round too. The headline is `pair_median_now_over_then`,
the median over rounds of one round's two times' ratio: over 200 rounds (about a minute) it
gave 1.003 and 0.996 for the same step on both sides. REV's decode_step.py is read
with `git show` and imported beside this checkout's vlrl (what it imports comes from here); a
step without `refresh` (older ones) is given one that does nothing. Both must sample the same
tokens (`same_tokens`); `max_logprob_diff` says how far their log-probs are apart (0: bit for bit).

    python bench/decode_step_vs_revision.py --against eaac4bf [--rounds 200]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.refcoco import RefCOCO  # noqa: E402
from vlrl.config import load_config  # noqa: E402
from vlrl.models.loading import load_model, load_processor  # noqa: E402
from vlrl.models.prompting import render_prompt  # noqa: E402
from vlrl.models.tiny import tiny_checkpoint  # noqa: E402
from vlrl.rollout import EngineSetup, SamplingParams, choose_engine  # noqa: E402
from vlrl.tasking.sources import load_task_split  # noqa: E402


def revision_step(rev: str, tmp: Path) -> type:
    """REV's DecodeStep class, imported from its file."""
    source = subprocess.run(
        ["git", "show", f"{rev}:vlrl/models/decode_step.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = tmp / "decode_step_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("decode_step_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: dataclasses look their module up
    spec.loader.exec_module(module)
    step = module.DecodeStep
    if not hasattr(step, "refresh"):
        step.refresh = lambda self: None
    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="a git revision")
    parser.add_argument("--rounds", type=int, default=200, help="measured rounds, after one warm-up round")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.json"
        task = RefCOCO()
        task.synthesize(data, 64, 0)
        path = tiny_checkpoint()
        cfg = load_config(
            ROOT / "configs" / "demo" / "refcoco.yaml",
            [f"model.path={path}", f"data.train={data}", "model.dtype=float32"],
        )
        processor = load_processor(cfg.model)
        samples = load_task_split(task, cfg, "train").samples[:4]
        prompts = [render_prompt(processor, task.messages(s), s, cfg.model) for s in samples]
        params = SamplingParams(8, 48, 1.0)
        model = load_model(cfg.model, str(path), "cpu").eval()
        engine = choose_engine("hf", cfg.rollout.options).build(
            EngineSetup(cfg.model, str(path), processor, 0, lambda: (model, torch.device("cpu")))
        )
        steps = {"now": engine.decode_forward, "then": revision_step(args.against, Path(tmp))(model)}
        if type(steps["now"]).__name__ != "DecodeStep":
            raise SystemExit(f"the engine does not decode with the lean step here: {engine.note}")
        seconds: dict[str, list[float]] = {name: [] for name in steps}
        sampled: dict[str, list] = {name: [] for name in steps}
        for round_ in range(args.rounds + 1):  # round 0: warm-up
            for name, step in list(steps.items())[:: 1 if round_ % 2 else -1]:  # who goes first, in turn
                engine.decode_forward = step
                start = time.perf_counter()
                groups = engine.generate(prompts, params, torch.Generator().manual_seed(round_))
                elapsed = time.perf_counter() - start
                sampled[name] += [(c.token_ids, c.logprobs) for g in groups for c in g.completions]
                if round_:
                    seconds[name].append(elapsed)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    paired = statistics.median(now / then for now, then in zip(seconds["now"], seconds["then"], strict=True))
    same = [t for t, _ in sampled["now"]] == [t for t, _ in sampled["then"]]
    pairs = zip(sampled["now"], sampled["then"], strict=True)
    apart = max(abs(a - b) for (_, la), (_, lb) in pairs for a, b in zip(la, lb, strict=True)) if same else None
    print(
        json.dumps(
            {
                "benchmark": "decode_step_vs_revision",
                "against": args.against,
                "device": "cpu",
                "torch_threads": torch.get_num_threads(),
                "rounds": args.rounds,
                "now_median_s": round(median["now"], 5),
                "then_median_s": round(median["then"], 5),
                "now_over_then": round(median["now"] / median["then"], 3),
                "pair_median_now_over_then": round(paired, 3),  # each round's ratio, adjacent in time
                "same_tokens": same,
                "max_logprob_diff": apart,  # None where the tokens differ
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
