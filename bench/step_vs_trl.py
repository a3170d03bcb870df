"""One RL step of vlrl against one of TRL's GRPOTrainer, same work, same machine, alternately.

Both train the same local Qwen2.5-VL checkpoint on the same synthetic RefCOCO data with the
same B prompts x G completions, completion length, learning rate, GRPO loss, KL weight,
temperature and seed, with the same reward (refcoco's format + IoU). Each trainer runs in its
own process, both at once, taking turns of two steps (`--turn-steps`): each waits, idle, for
its turn before the turn's first step and gives the turn back after its last (`Turns`), so the
steps of vlrl and those of TRL after them see the same phase of the machine, whose speed moves
by a third within tens of seconds (one process after the other, the ratio of a round moved
between 0.22 and 0.42 on the same code). Only the second step of a turn is measured: it
follows the process's own step, as every step of a run does, where the first follows the other
process's turn, and on the CPU machines a process's code runs slower the longer since it last
ran (docs/performance.md); the first steps of turns are reported apart (`turn_first_*`). The
wait is outside the timed step, and a step's time starts with the fetch of its prompts (vlrl's
draw and image reading; TRL's batch, which the HF Trainer fetches before it calls
`on_step_begin`). On a GPU (`--device cuda`) the two run one after the other by default, each
alone in the GPU's memory (`--turns` runs them at once). The first step of each process is
warm-up and not counted; a round is a new pair of processes, and samples with a seed of its own
(`--seed` plus the round's index): the rounds repeat the machine's phase and the data's draw,
not the same steps.

On CPU the model is the tiny checkpoint in float32. With `--shape qwen2.5-vl-3b` it is a
random-weight model of Qwen2.5-VL-3B's shape (vlrl.models.tiny.SHAPES), on a GPU in bfloat16 for
both (vlrl with its fp32 master weights, TRL stepping the bf16 weights as it does without
DeepSpeed), images at the model's own pixel limits.

Prints one JSON line: median step time of each, their ratio (and each round's, and the median
of each vlrl step over the TRL step after it), the same of the first steps of turns, mean
completion length of each (the same work: both sample up to max_new_tokens), each process's
peak RSS and peak GPU memory.

    python bench/step_vs_trl.py [--rounds 3] [--steps 6] [--turn-steps 2] [--generations 8] [--prompts 4]
    python bench/step_vs_trl.py --shape qwen2.5-vl-3b --device cuda --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_CONFIG = ROOT / "configs" / "demo" / "refcoco.yaml"
TURNS_ENV = "VLRL_BENCH_TURNS"  # the worker's two pipe ends: "go,done"


class Turns:
    """A worker's side of taking turns of `steps` steps: told before every step (`wait`) and
    after every step but its last (`give_back`), it waits for a line on `go` before a turn's
    first step and writes one on `done` after a turn's last step (and, at the end, once the
    process has finished its work: `end`)."""

    def __init__(self, go: int, done: int, steps: int = 1):
        self.go, self.done = os.fdopen(go, "r"), os.fdopen(done, "w")
        self.steps, self.taken = steps, 0

    def wait(self) -> None:
        if self.taken % self.steps == 0:
            self.go.readline()

    def give_back(self) -> None:
        self.taken += 1
        if self.taken % self.steps == 0:
            self.end()

    def end(self) -> None:
        self.done.write("done\n")
        self.done.flush()


def settings(args: argparse.Namespace, model_path: str, max_pixels: int) -> dict:
    return {
        "model_path": model_path,
        "device": args.device,
        "max_pixels": max_pixels,
        "prompts": args.prompts,
        "generations": args.generations,
        "max_new_tokens": args.max_new_tokens,
        "lr": 1e-4,
        "beta": 0.04,
        "epsilon": 0.2,
        "temperature": 1.0,
        "seed": args.seed,
    }


def tiny_model() -> tuple[Path, int]:
    """The bench's model on the CPU: the tiny checkpoint, at the demo config's pixel limit."""
    from vlrl.config import load_config
    from vlrl.models.tiny import tiny_checkpoint

    return tiny_checkpoint(), load_config(DEMO_CONFIG, []).model.max_pixels


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_gpu_mb() -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0


def model_overrides(s: dict) -> list[str]:
    dtype = "bfloat16" if s["device"] == "cuda" else "float32"
    return [f"model.path={s['model_path']}", f"model.dtype={dtype}", f"model.max_pixels={s['max_pixels']}"]


def run_vlrl(
    s: dict, data: Path, steps: int, out_dir: Path, turns: Turns | None = None, after_step: Callable | None = None
) -> tuple[list[float], list[float]]:
    """vlrl's run of `steps` steps; each step's time and mean completion length. `after_step`
    (trainer, metrics) is called after each step's log (bench/lean_forward.py switches an option)."""
    from rich.console import Console

    from vlrl.config import load_config
    from vlrl.trainer.rl import RLTrainer

    overrides = {
        "data.train": str(data),
        "eval.every": 0,  # no held-out split: the demo config's synthetic one is not this data's
        "rollout.num_generations": s["generations"],
        "rollout.max_new_tokens": s["max_new_tokens"],
        "rollout.temperature": s["temperature"],
        "algo.beta": s["beta"],
        "algo.epsilon": s["epsilon"],
        "algo.aggregation": "seq_mean_token_mean",  # TRL's loss_type="grpo"
        "trainer.prompts_per_step": s["prompts"],
        "trainer.lr": s["lr"],
        "trainer.seed": s["seed"],
        "trainer.steps": steps,
        "trainer.save_every": 10**6,
        "trainer.progress": False,
        "trainer.output_dir": str(out_dir),
        "trainer.resume": "",
    }
    cfg = load_config(DEMO_CONFIG, [*model_overrides(s), *(f"{k}={v}" for k, v in overrides.items())])
    trainer = RLTrainer(cfg, Console(quiet=True))
    log = trainer.run.logs.log

    def logged(metrics, samples=()):  # a step is timed from its start to its update's end, before its log
        log(metrics, samples)
        if after_step is not None:
            after_step(trainer, metrics)
        if turns is not None and metrics["step"] < steps:  # the last turn ends with the process's work
            turns.give_back()
            turns.wait()

    trainer.run.logs.log = logged
    if turns is not None:
        turns.wait()
    result = trainer.train()
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    return [r["time_step"] for r in rows], [r["completion_length"] for r in rows]


def run_trl(
    s: dict, data: Path, steps: int, out_dir: Path, turns: Turns | None = None
) -> tuple[list[float], list[float]]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tasks.refcoco import RefCOCO
    from vlrl.config import load_config
    from vlrl.models.families import model_family
    from vlrl.models.loading import checkpoint_path
    from vlrl.tasking.sources import load_task_split
    from vlrl.vision.images import load_image

    cfg = load_config(DEMO_CONFIG, [*model_overrides(s), f"data.train={data}"])
    task = RefCOCO()
    samples = load_task_split(task, cfg, "train").samples
    m = cfg.model
    family = model_family(m)
    # The same prompt text and the same smart-resized image as vlrl renders.
    rows = [
        {
            "prompt": [{"role": "user", "content": task.messages(sample)[0]["content"][1]["text"]}],
            "image": load_image(sample.images[0], m.min_pixels, m.max_pixels, family.factor),
            "index": i,
        }
        for i, sample in enumerate(samples)
    ]
    dataset = Dataset.from_list(rows)
    rewards = task.reward_functions()

    def make_reward(name):
        def reward(completions, index, **kwargs):
            texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
            return rewards[name](texts, [samples[i] for i in index])

        reward.__name__ = name
        return reward

    path = checkpoint_path(cfg.model)
    # Left padding, as TRL requires of a processing class and sets when it loads one itself
    # (trl/trainer/grpo_trainer.py:223, :365-371). Its training forward left-pads the prompt ids
    # but takes mm_token_type_ids from re-running the processor with padding=True (:2529), so a
    # right-padding processor shifts them against the attention mask: Qwen2.5-VL's get_rope_index
    # then misplaces the image of every padded row, and fails ("value tensor of shape [3, 291]
    # cannot be broadcast to indexing result of shape [3, 283]") once a row's padding exceeds the
    # tokens before its image, as with the differently sized images at the 3B shape (issue 23).
    processor = AutoProcessor.from_pretrained(path, padding_side="left", truncation_side="left")
    cuda = s["device"] == "cuda"
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.bfloat16 if cuda else torch.float32)
    # The tokens vlrl never samples (TRL suppresses only <|image_pad|>), so both do the same work.
    # (A sampled <|vision_start|> does not break TRL's forward with transformers 5.23: what broke
    # it on the 3B shape was the right padding fixed above.)
    tokenizer = processor.tokenizer
    vocab = model.config.get_text_config().vocab_size
    banned = [tokenizer.convert_tokens_to_ids(t) for t in family.vision_tokens] + list(range(len(tokenizer), vocab))
    config = GRPOConfig(
        generation_kwargs={"suppress_tokens": banned},
        output_dir=str(out_dir),
        per_device_train_batch_size=s["prompts"] * s["generations"],
        gradient_accumulation_steps=1,
        num_generations=s["generations"],
        max_completion_length=s["max_new_tokens"],
        learning_rate=s["lr"],
        beta=s["beta"],
        epsilon=s["epsilon"],
        loss_type="grpo",
        temperature=s["temperature"],
        max_steps=steps,
        seed=s["seed"],
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not cuda,
        bf16=cuda,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
    )

    class StepTimer(TrainerCallback):
        """A step from the fetch of its batch (the HF Trainer fetches it before `on_step_begin`;
        vlrl's step draws its prompts and reads their images inside its time) to its end."""

        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def begin(self) -> None:
            if turns is not None:
                turns.wait()
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self._start)
            if turns is not None and state.global_step < steps:  # the last turn ends with the process's work
                turns.give_back()

    class TimedGRPOTrainer(GRPOTrainer):
        def get_batch_samples(self, *args, **kwargs):
            timer.begin()
            return super().get_batch_samples(*args, **kwargs)

    timer = StepTimer()
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=[make_reward("format"), make_reward("iou")],
        args=config,
        train_dataset=dataset,
        processing_class=processor,
        callbacks=[timer],
    )
    trainer.train()
    lengths = [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]
    return timer.times, lengths


def worker(args: argparse.Namespace) -> None:
    s = json.loads(args.settings)
    go, done = (int(fd) for fd in os.environ[TURNS_ENV].split(","))
    turns = Turns(go, done, s["turn_steps"])
    with tempfile.TemporaryDirectory() as tmp:
        start_rss = peak_rss_mb()
        run = run_vlrl if args.worker == "vlrl" else run_trl
        times, lengths = run(s, Path(args.data), args.steps, Path(tmp) / "run", turns)
    report = {"times": times, "lengths": lengths, "peak_rss_mb": peak_rss_mb(), "peak_gpu_mb": peak_gpu_mb()}
    print(json.dumps({**report, "rss_at_start_mb": start_rss}))
    turns.end()  # the last turn: this process's work is done


def run_round(args: argparse.Namespace, data: Path, s: dict, env: dict, logs: Path) -> dict[str, dict]:
    """The reports of each worker (`worker`), given turns of `s["turn_steps"]` steps, vlrl's
    turn first: turn about (`args.turns`), else all of one process's steps, then the other's (on
    a GPU, where both would hold a model in its memory at once). A worker starts when first
    given a turn. A worker that fails ends the round, and the other with it."""
    workers: dict[str, tuple] = {}

    def start(name: str) -> None:
        go_read, go_write = os.pipe()
        done_read, done_write = os.pipe()
        command = [sys.executable, __file__, "--worker", name, "--data", str(data), "--steps", str(args.steps)]
        out, err = open(logs / f"{name}.out", "w+"), open(logs / f"{name}.err", "w+")
        process = subprocess.Popen(
            [*command, "--settings", json.dumps(s)], stdout=out, stderr=err, cwd=ROOT,
            env={**env, TURNS_ENV: f"{go_read},{done_write}"}, pass_fds=(go_read, done_write),
        )  # fmt: skip
        os.close(go_read)
        os.close(done_write)  # so that a worker's end reads as the end of its pipe
        workers[name] = (process, os.fdopen(go_write, "w"), os.fdopen(done_read, "r"), out, err)

    def take_turn(name: str, last: int) -> None:
        """Its turn, which ends after step `last`."""
        process, go, done, _, err = workers[name]
        try:
            go.write("go\n")
            go.flush()
            given_back = bool(done.readline())
        except BrokenPipeError:
            given_back = False
        if not given_back:
            failed(name, err)
        if last == args.steps:  # its exit is not to overlap the other's steps
            process.wait()

    names, per_turn = ("vlrl", "trl"), s["turn_steps"]
    ends = range(per_turn, args.steps + 1, per_turn)  # each turn's last step
    if args.turns:
        order = [(end, name) for end in ends for name in names]
    else:
        order = [(end, name) for name in names for end in ends]
    try:
        for step, name in order:
            if name not in workers:  # started when first given a turn
                start(name)
            take_turn(name, step)
        reports = {}
        for name, (process, _, _, out, err) in workers.items():
            if process.wait() != 0:
                failed(name, err)
            out.seek(0)
            reports[name] = json.loads(out.read().strip().splitlines()[-1])
    finally:
        for process, *streams in workers.values():
            process.kill()
            process.wait()
            for stream in streams:
                stream.close()
    return reports


def failed(name: str, err) -> None:
    err.seek(0)
    sys.stderr.write(err.read()[-4000:])
    raise SystemExit(f"{name} worker failed")


def build_parser() -> argparse.ArgumentParser:
    """The bench's options (bench/pause_penalty.py times its trainers at their defaults)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="steps per process (the first is warm-up)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--turns", action=argparse.BooleanOptionalAction, default=None,
        help="both processes at once, taking turns (--turn-steps; default on CPU; on a GPU one after the other)",
    )  # fmt: skip
    parser.add_argument(
        "--turn-steps", type=int, default=2,
        help="steps a process takes in a turn: a turn's first step is reported apart, not measured (with --turns)",
    )  # fmt: skip
    parser.add_argument(
        "--shape", help="a real model's shape with random weights (vlrl.models.tiny.SHAPES); default: the tiny model"
    )
    parser.add_argument("--worker", choices=["vlrl", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.turns is None:
        args.turns = args.device == "cpu"
    per_turn = args.turn_steps if args.turns else 1
    if per_turn < 1 or args.steps % per_turn:
        parser.error(f"--steps {args.steps} is not a whole number of turns of --turn-steps {per_turn}")

    from tasks.refcoco import RefCOCO
    from vlrl.models.tiny import SHAPES, write_tiny_checkpoint

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results = {
        name: {"times": [], "turn_firsts": [], "lengths": [], "peak_rss_mb": 0.0, "peak_gpu_mb": 0.0}
        for name in ("vlrl", "trl")
    }
    with tempfile.TemporaryDirectory() as tmp:
        # Built once, outside the timed processes.
        if args.shape:
            spec = SHAPES[args.shape]
            model_path, max_pixels = write_tiny_checkpoint(Path(tmp) / "model", spec, args.device), spec.max_pixels
        else:
            model_path, max_pixels = tiny_model()
        s = {**settings(args, str(model_path), max_pixels), "turn_steps": per_turn}
        data = Path(tmp) / "train.json"
        RefCOCO().synthesize(data, 64, args.seed)
        by_round: list[dict[str, float]] = []  # each round's median step of each
        for round_ in range(args.rounds):
            # Each round its own seed (--seed, then one more a round): its own prompts and
            # completions. With one seed every round repeated the same four steps, whose
            # completions happened to be 8% longer on TRL's side (2026-11-28).
            reports = run_round(args, data, {**s, "seed": args.seed + round_}, env, Path(tmp))
            by_round.append({name: statistics.median(measured(r["times"], per_turn)) for name, r in reports.items()})
            for name, report in reports.items():
                results[name]["times"].extend(measured(report["times"], per_turn))
                results[name]["turn_firsts"].extend(turn_firsts(report["times"], per_turn))
                results[name]["lengths"].extend(report["lengths"])
                for peak in ("peak_rss_mb", "peak_gpu_mb"):
                    results[name][peak] = max(results[name][peak], report[peak])
    times = results["vlrl"]["times"], results["trl"]["times"]
    pair_ratio = round(statistics.median(v / t for v, t in zip(*times, strict=True)), 4) if args.turns else None
    vlrl_median = statistics.median(results["vlrl"]["times"])
    trl_median = statistics.median(results["trl"]["times"])
    firsts = {k: round(statistics.median(v["turn_firsts"]), 4) for k, v in results.items() if v["turn_firsts"]}
    print(
        json.dumps(
            {
                "benchmark": "rl_step_vs_trl",
                **{k: v for k, v in s.items() if k != "model_path"},
                "device": device_name(args.device),
                "model": args.shape or "tiny",
                "torch_threads": __import__("torch").get_num_threads(),
                "steps_measured": {k: len(v["times"]) for k, v in results.items()},
                "vlrl_median_step_s": round(vlrl_median, 4),
                "trl_median_step_s": round(trl_median, 4),
                "ratio_vlrl_over_trl": round(vlrl_median / trl_median, 4),
                # the machine's speed moves between rounds (docs/performance.md): each round's own
                "ratio_by_round": [round(r["vlrl"] / r["trl"], 4) for r in by_round],
                "turns": args.turns,
                # each measured vlrl step over the TRL step taken right after it (with turns)
                "median_step_pair_ratio": pair_ratio,
                # the first step of each turn but a process's first, after the other's turn (not measured)
                "turn_first_median_step_s": firsts,
                "turn_first_ratio": round(firsts["vlrl"] / firsts["trl"], 4) if firsts else None,
                "vlrl_mean_completion_tokens": round(statistics.mean(results["vlrl"]["lengths"]), 2),
                "trl_mean_completion_tokens": round(statistics.mean(results["trl"]["lengths"]), 2),
                "vlrl_peak_rss_mb": round(results["vlrl"]["peak_rss_mb"], 1),
                "trl_peak_rss_mb": round(results["trl"]["peak_rss_mb"], 1),
                "vlrl_peak_gpu_mb": round(results["vlrl"]["peak_gpu_mb"], 1),
                "trl_peak_gpu_mb": round(results["trl"]["peak_gpu_mb"], 1),
            }
        )
    )


def measured(times: list[float], per_turn: int) -> list[float]:
    """The steps measured of a process's step `times`: not its first (warm-up), and with turns of
    several steps not a turn's first either. On the CPU machines a process's code runs slower
    the longer since it last ran, whether it slept or computed something else meanwhile
    (docs/performance.md): a turn's first step, after the other's turn, is the exception of a
    run, whose steps follow each other."""
    return times[1:] if per_turn == 1 else [t for i, t in enumerate(times) if i % per_turn]


def turn_firsts(times: list[float], per_turn: int) -> list[float]:
    """The first step of each turn but the process's first (warm-up), with turns of several steps."""
    return [t for i, t in enumerate(times) if i and i % per_turn == 0] if per_turn > 1 else []


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


if __name__ == "__main__":
    main()
