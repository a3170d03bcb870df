"""ReMax's rollout with its greedy baselines decoded among the sampled rows, against decoded in
a call of their own, side by side in one process (algo.advantage=remax). Prints one JSON line.

Each prompt's G sampled completions and its greedy one, the two ways in turn within each round
(bench/lora_rollout.py's rounds), one HF engine each with the config's options:
- `mixed`: one call of G + 1 rows a prompt, the first greedy (`SamplingParams.greedy`): what the
  trainer asks of an engine that `mixes_greedy`, as the HF engine does;
- `separate`: G sampled rows a prompt, then the greedy rows in a call of their own: EasyR1's and
  verl's ReMax, and vlrl's with an engine that cannot mix them.
The greedy completions are the same (`same_greedy`). The sampled ones are not: a row draws its
batch row's uniform, and the rows are others. A random model's completions run to
max_new_tokens either way, so the two do the same decoding work in other batches.

    python bench/remax_rollout.py --shape tiny --device cpu     # CPU figures at the tiny model
    python bench/remax_rollout.py --max-new-tokens 1024          # a GPU at Qwen2.5-VL-3B's shape
"""

from __future__ import annotations

import json
from dataclasses import replace

import torch
from lora_rollout import alternate, arguments, over

from vlrl.models.batch import Prompt
from vlrl.rollout import Generation, SamplingParams


def mixed(engine, prompts: list[Prompt], params: SamplingParams, generator: torch.Generator) -> list[Generation]:
    return engine.generate(prompts, replace(params, n=params.n + 1, greedy=1), generator)


def separate(engine, prompts: list[Prompt], params: SamplingParams, generator: torch.Generator) -> list[Generation]:
    sampled = engine.generate(prompts, params, generator)
    greedy = engine.generate(prompts, replace(params, n=1, temperature=0.0), generator)
    return [Generation(g.completions + s.completions) for g, s in zip(greedy, sampled, strict=True)]  # greedy first


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, argv)
    rounds = alternate(args, {"mixed": [], "separate": []}, rollouts={"mixed": mixed, "separate": separate})
    summary = rounds.summary()
    group = summary["num_generations"] + 1  # a prompt's rows: its greedy one first
    same_greedy = rounds.sampled["mixed"][::group] == rounds.sampled["separate"][::group]
    summary.pop("same_tokens")  # the sampled rows draw other uniforms
    report = {"benchmark": "remax_rollout", **summary, "same_greedy": same_greedy}
    print(json.dumps({**report, "mixed_over_separate": over(summary, "mixed", "separate")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
