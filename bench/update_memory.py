"""Peak memory of one update micro-batch against its token budget: the output layer scored in
chunks (vlrl's update, `models.policy.CHUNK_TOKENS`) or all tokens' logits at once (before).

A small model with Qwen's 151,936-token vocabulary (random weights, nothing downloaded), so the
logits weigh as at real size: one image prompt and as many completions of `--completion`
tokens as the budget holds, the shared-prefix forward and its backward, as the update runs a
micro-batch (models.policy.completion_logprobs, a weighted sum of the log-probs as the loss).
Each (mode, budget) runs in a fresh process: on the CPU the peak is the process's peak resident
memory (Linux's VmHWM, reset before the micro-batch: a process started from a larger one
inherits its high-water mark) less what it held before the micro-batch; on CUDA torch's
allocator peak less the same baseline. Also the seconds of that micro-batch and its tokens per second (meaningful
only on an idle machine).

    python bench/update_memory.py [--budgets 1024 2048 4096 8192 16384] [--modes chunked full]
    python bench/update_memory.py --device cuda --budgets 4096 16384 65536
    python bench/update_memory.py --layers 36 --hidden 64 --completion 1024 --budgets 8192 --modes chunked

Prints one JSON object: a row per (mode, budget).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QWEN_VOCABULARY = 151936


def status_mb(key: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def reset_peak_rss() -> None:
    """Set the resident high-water mark back to the current resident size (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def one(mode: str, budget: int, completion: int, device: str, hidden: int, layers: int) -> dict:
    """One micro-batch of `budget` tokens in this process; its memory above what came before."""
    import torch

    from tasks.refcoco import RefCOCO
    from vlrl.config import ModelConfig
    from vlrl.data.records import load_split
    from vlrl.models.batch import collate
    from vlrl.models.build import TinySpec
    from vlrl.models.loading import core_model, frame_spec, load_model, load_processor
    from vlrl.models.policy import CHUNK_TOKENS, completion_logprobs
    from vlrl.models.prompting import render_prompt
    from vlrl.models.tiny import tiny_checkpoint

    torch.manual_seed(0)
    spec = TinySpec(
        vocab_size=QWEN_VOCABULARY,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_heads=4,
        tie_embeddings=True,
        num_layers=layers,
    )
    cfg = ModelConfig(path=str(tiny_checkpoint(spec)), dtype="float32", max_pixels=50176)
    model = load_model(cfg, device=device)
    processor = load_processor(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.json"
        RefCOCO().synthesize(data, 1, 0)
        sample = load_split(data, RefCOCO().build_sample, frame_spec(cfg)).samples[0]
        prompt = render_prompt(processor, RefCOCO().messages(sample), sample, cfg)
    rows = max(1, (budget - len(prompt)) // completion)
    batch = collate([prompt], processor.tokenizer.pad_token_id).to(device)
    ids = torch.randint(0, len(processor.tokenizer), (rows, completion), device=device)
    mask = torch.ones(rows, completion, device=device)
    chunk = CHUNK_TOKENS if mode == "chunked" else 0
    index = torch.zeros(rows, dtype=torch.long, device=device)

    def micro_batch() -> None:
        logp = completion_logprobs(model, batch, index, ids, mask, chunk_tokens=chunk).logp
        (logp * mask).sum().backward()
        model.zero_grad(set_to_none=False)

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        reset_peak_rss()
        before = status_mb("VmRSS")
    start = time.perf_counter()
    micro_batch()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20 if cuda else status_mb("VmHWM") - before
    tokens = len(prompt) + rows * completion
    return {
        "mode": mode,
        "budget": budget,
        "tokens": tokens,
        "completions": rows,
        "layers": len(core_model(model).model.language_model.layers),
        "chunk_tokens": chunk,
        "peak_mb": round(peak, 1),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--modes", nargs="+", default=["chunked", "full"], choices=["chunked", "full"])
    parser.add_argument("--completion", type=int, default=256, help="tokens per completion")
    parser.add_argument("--hidden", type=int, default=256, help="the small model's hidden size")
    parser.add_argument("--layers", type=int, default=2, help="its decoder layers (Qwen2.5-VL-3B has 36)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--one", nargs=2, metavar=("MODE", "BUDGET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        row = one(args.one[0], int(args.one[1]), args.completion, args.device, args.hidden, args.layers)
        print(json.dumps(row))
        return 0
    rows = []
    for budget in args.budgets:
        for mode in args.modes:
            command = [
                sys.executable, __file__, "--one", mode, str(budget), "--completion", str(args.completion),
                "--hidden", str(args.hidden), "--layers", str(args.layers), "--device", args.device,
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
            if done.returncode != 0:
                rows.append({"mode": mode, "budget": budget, "error": done.stderr.strip().splitlines()[-1:]})
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        json.dumps(
            {
                "benchmark": "update_memory",
                "device": args.device,
                "vocabulary": QWEN_VOCABULARY,
                "hidden": args.hidden,
                "completion_tokens": args.completion,
                "rows": rows,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
