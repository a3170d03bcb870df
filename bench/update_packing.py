"""The tokens the update's forwards compute, padding included: its micro-batches packed in the
rows' order (each prompt's completions together, its prefix once) against the plan the update
uses (`vlrl.trainer.batch.update_micro_batches`: that or longest first, prompt and completion
together, whichever computes fewer), on completion lengths drawn like the H200 recipe run's (docs/performance.md:
16 prompts of 152 tokens x 8 completions, 27% of them at max_new_tokens and the rest uniform
below a uniform fraction of it). A count, not a timing: what it saves in seconds depends on the
card, and the recipe bench measures that.

    python bench/update_packing.py [--budgets 4096 8192 12288] [--draws 20]

Prints one JSON line: per budget, the mean completion tokens, padded tokens in order and as
planned, their ratio, and the micro-batches of each.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from vlrl.trainer.batch import micro_batches, padded_tokens, update_micro_batches


def draw_lengths(rng: np.random.Generator, rows: int, limit: int, at_limit: float) -> list[int]:
    return [limit if rng.random() < at_limit else int(rng.integers(1, limit) * rng.random()) + 1 for _ in range(rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, nargs="+", default=[4096, 8192, 12288])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=152)
    parser.add_argument("--max-new-tokens", type=int, default=1024)
    parser.add_argument("--at-limit", type=float, default=0.27, help="share of completions at max_new_tokens")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    index = [i // args.generations for i in range(args.prompts * args.generations)]
    prompt_lengths = [args.prompt_tokens] * args.prompts
    rows = []
    for budget in args.budgets:
        draws = []
        for _ in range(args.draws):
            lengths = draw_lengths(rng, len(index), args.max_new_tokens, args.at_limit)
            in_order = micro_batches(index, prompt_lengths, lengths, budget)
            planned = update_micro_batches(index, prompt_lengths, lengths, budget)
            draws.append(
                (sum(lengths), padded_tokens(in_order, index, prompt_lengths, lengths),
                 padded_tokens(planned, index, prompt_lengths, lengths), len(in_order), len(planned))
            )  # fmt: skip
        tokens, in_order_tokens, planned_tokens, in_order_batches, planned_batches = (
            statistics.mean(column) for column in zip(*draws, strict=True)
        )
        rows.append(
            {"budget": budget, "completion_tokens": round(tokens), "padded_in_order": round(in_order_tokens),
             "padded_planned": round(planned_tokens), "in_order_over_planned": round(in_order_tokens / planned_tokens, 2),
             "micro_batches_in_order": in_order_batches, "micro_batches_planned": planned_batches}
        )  # fmt: skip
    print(json.dumps({"benchmark": "update_packing", "draws": args.draws, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
