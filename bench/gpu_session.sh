#!/usr/bin/env bash
# A lent GPU's measurements, prepared: issue 25's numbers and the GPU tier's correctness checks in
# the order that matters, each stage under its own time limit so that one which hangs leaves the
# others theirs, everything written under $OUT (docs/gpu.md, "A lent GPU's 15 minutes").
#
#   bash bench/gpu_session.sh first    # graphs, output layer, engine tests; the recipe's tokens/s
#   bash bench/gpu_session.sh second   # LoRA rollout over full; the cache's window over all of it;
#                                      # the update's memory by token budget; the patch embedding;
#                                      # the vision tower's grouped attention; an update that
#                                      # runs the GPU out of memory (trainer.halve_on_oom)
#   bash bench/gpu_session.sh eager    # the recipe without CUDA graphs (when first's recipe failed)
#   bash bench/gpu_session.sh tier     # the rest of the GPU tier (strategies, runs, plan)
#   bash bench/gpu_session.sh recipe trainer.token_budget=16384   # the recipe with overrides
#   bash bench/gpu_session.sh profile  # the recipe's last step by kernel (bench/phase_profile.py)
#   bash bench/gpu_session.sh compiled # rollout.hf.compile_step: its GPU tests, the recipe with it
#   bash bench/gpu_session.sh families # the static step against the dynamic loop, Qwen3.5 and
#                                      # Qwen3-VL MoE built at the 3B shape's sizes (and
#                                      # one linear-attention layer eager and compiled)
#   bash bench/gpu_session.sh remax    # ReMax's greedy rows among the sampled ones against
#                                      # decoded apart; the recipe with algo.advantage=remax
#
# Each part fits one device call (10 minutes). It runs from the checkout with .whl/ carried (make
# gpu-wheels): the wheels go into .gpu-site/ beside the machine's own torch. Without a GPU it
# runs the same stages at the tiny shape on the CPU with .venv's Python (GPU_SESSION_ON_CPU=1,
# or no nvidia-smi): a check of this script, never a GPU figure.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?"which part: first, second, eager, tier, recipe, profile, compiled, families or remax"}
shift
OUT=${OUT:-$PWD/.gpu-session}
mkdir -p "$OUT"

if [ "${GPU_SESSION_ON_CPU:-}" != 1 ] && command -v nvidia-smi > /dev/null; then
    on_gpu=1
    python=python3
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
    if [ ! -d .whl ]; then
        echo "no .whl/: run make gpu-wheels where there is network and carry .whl" >&2
        exit 2
    fi
    # A warm machine keeps .gpu-site (git-ignored) from the call before: installed once for a
    # set of wheels (.gpu-site/.wheels lists the set it holds). No byte-compiling
    # (transformers' 2,900 files), the imports compile what they use.
    wheels=$(ls .whl)
    if [ "$(cat .gpu-site/.wheels 2> /dev/null)" != "$wheels" ]; then
        $python -m pip install -q --no-index --no-deps --no-compile --upgrade --target .gpu-site .whl/*.whl || exit 2
        echo "$wheels" > .gpu-site/.wheels
    fi
    export PYTHONPATH=$PWD/.gpu-site:$PWD
    # transformers checks its dependencies' versions on import (the machine's, as --no-deps left
    # them): fail here in seconds, with the versions written down, rather than in every stage.
    $python -c "import importlib.metadata as m, torch, transformers
print(torch.__version__, torch.version.cuda, *(f'{p} {m.version(p)}' for p in ('transformers', 'tokenizers',
      'huggingface-hub', 'safetensors', 'accelerate', 'pytest')), sep='; ')" | tee "$OUT/versions.txt" || exit 2
    memory_mb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    recipe=(--steps 2)
    lora=(--max-new-tokens 256 --rounds 2)
    windows=(--max-new-tokens 1024 --rounds 2)
    families=(--max-new-tokens 256 --rounds 2)
    remax=(--max-new-tokens 1024 --rounds 2)
    memory=(--device cuda --budgets 4096 16384)
    patch=(--shape qwen2.5-vl-3b --device cuda --dtype bfloat16 --patches 16384 --rounds 3 --repeats 5)
    vision=(--device cuda --dtype bfloat16 --hidden 1280 --heads 16 --intermediate 3420 --rounds 2 --repeats 1)
    linear=(--device cuda --dtype bfloat16 --rows 128 --hidden 2048 --rounds 3 --repeats 5)
else
    on_gpu=0
    python=.venv/bin/python
    echo "cpu (a check of this script: no GPU figure)" | tee "$OUT/gpu.txt"
    export VLRL_GPU_TIER_ON_CPU=1 PYTHONPATH=$PWD
    memory_mb=0
    recipe=(--steps 2 --shape tiny --device cpu)
    lora=(--shape tiny --device cpu --rounds 1 --max-new-tokens 16)
    windows=(--shape tiny --device cpu --rounds 1 --max-new-tokens 64)
    families=(--shape tiny --device cpu --rounds 1 --max-new-tokens 16)
    remax=(--shape tiny --device cpu --rounds 1 --max-new-tokens 16)
    memory=(--device cpu --budgets 1024 2048 --completion 32 --hidden 64)
    patch=(--rounds 1 --repeats 2)
    vision=(--depth 2 --images 2 --size 336x224 --rounds 1 --repeats 1)
    linear=(--rows 2 --hidden 64 --key-heads 2 --value-heads 4 --head-dim 16 --rounds 1 --repeats 1)
fi
export HF_HUB_OFFLINE=1
# Qwen2.5-VL-3B's recipe replicated needs ~90 GB (vlrl plan; 87 GB measured on an H200): on an
# 80 GB card the full fine-tuning figures wait for an H200, and LoRA (35 GB) runs instead.
name=recipe lora_rank=()
if [ "$memory_mb" -lt 100000 ] && [ "$on_gpu" = 1 ]; then
    name=recipe_lora lora_rank=(model.lora.r=64)
fi

# stage NAME SECONDS COMMAND...: stdout to $OUT/NAME.out (a bench's JSON line), stderr to
# $OUT/NAME.err, a line of {stage, rc, seconds} to $OUT/stages.jsonl (rc 124 or 137: its limit
# passed); its status is left in $rc. A stage past its limit is killed 10 s after SIGTERM: a
# trainer stopped by SIGTERM finishes its step and saves a checkpoint (52 GB at the 3B shape with
# its optimizer), which is not what a time limit is for. first and second's limits add up to
# 880 s: more than a lent GPU's 15 minutes with its start, so a session runs what it can.
stage() {
    local name=$1 limit=$2 start
    shift 2
    echo "== $name (at most ${limit} s)"
    start=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
    rc=$?
    echo "{\"stage\": \"$name\", \"rc\": $rc, \"seconds\": $(($(date +%s) - start)), \"on_gpu\": $on_gpu}" |
        tee -a "$OUT/stages.jsonl"
    tail -n 3 "$OUT/$name.out"
}

case $part in
first)
    # Every test runs (no -x): a failing graph test must not cost the others' answers. The graphs
    # first, before test_engine_on_gpu's FSDP2 runs leave an NCCL group (and its watchdog) alive.
    stage gpu_tests 180 $python -m pytest -q -m gpu tests/gpu/test_decoding_graphs.py \
        tests/gpu/test_output_layer_on_gpu.py tests/gpu/test_engine_on_gpu.py tests/gpu/test_model_forward_graphs.py
    stage $name 240 $python bench/recipe_on_gpu.py "${recipe[@]}" "${lora_rank[@]}"
    ;;
eager)
    # After a recipe that failed in first (not for time): the numbers without graphs. The eager
    # static step is ~29 ms a decoding step at 3B (../shared/notes/gpu.md): ~60 s a step, with
    # the model's build, two loads and CUDA's start about 3 minutes.
    stage ${name}_eager 240 $python bench/recipe_on_gpu.py "${recipe[@]}" "${lora_rank[@]}" rollout.hf.cuda_graphs=false
    ;;
second)
    stage lora_rollout 150 $python bench/lora_rollout.py "${lora[@]}"
    stage cache_windows 120 $python bench/cache_windows.py "${windows[@]}"
    stage update_memory 100 $python bench/update_memory.py "${memory[@]}"
    stage patch_embed 30 $python bench/patch_embed.py "${patch[@]}"
    stage vision_attention 60 $python bench/vision_attention.py "${vision[@]}"
    # trainer.halve_on_oom against a real CUDA out-of-memory (the mid-size model: three updates, four rollouts)
    stage oom_test 90 $python -m pytest -q -m gpu tests/gpu/test_oom_on_gpu.py
    ;;
recipe)
    # The recipe with config overrides (a setting's effect, after first's figures); the stage is
    # named by them, so that several runs in one call keep their own files.
    stage "${name}_$(echo "$*" | tr -c 'A-Za-z0-9._\n-' _)" 240 $python bench/recipe_on_gpu.py "${recipe[@]}" "${lora_rank[@]}" "$@"
    ;;
compiled)
    # rollout.hf.compile_step (off by default until these figures say): its GPU tests (the
    # compiled step's graphs against it run eagerly), then the recipe with it. The first step
    # compiles the 3B step (a minute or more), which the recipe's measured second step does not pay.
    stage compiled_tests 150 $python -m pytest -q -m gpu tests/gpu/test_compiled_step_on_gpu.py
    stage ${name}_compiled 420 $python bench/recipe_on_gpu.py "${recipe[@]}" "${lora_rank[@]}" rollout.hf.compile_step=true
    ;;
profile)
    # Where the rollout's and the update's time goes, by kernel: a third step under torch's
    # profiler (its summary in $OUT/profile.json; step 2's figures, as recipe's, beside it).
    stage ${name}_profile 300 $python bench/recipe_on_gpu.py "${recipe[@]}" --steps 3 --profile "$OUT/profile.json" "${lora_rank[@]}"
    ;;
families)
    # Qwen3.5 and Qwen3-VL MoE take the static step, through the lean step, since 2026-12-01
    # (before: the dynamic loop): what its graphs bring them, and
    # Qwen2.5-VL-3B's beside them. First, one Qwen3.5 linear-attention layer's one-token step at
    # 128 rows, eager (transformers' fallback: 8 reads and 6 writes of the states) and compiled.
    stage linear_attention_step 90 $python bench/linear_attention_step.py "${linear[@]}"
    for arch in qwen3_5 qwen3_vl_moe qwen2_5_vl; do
        stage static_vs_dynamic_$arch 150 $python bench/static_vs_dynamic.py "${families[@]}" --arch $arch
    done
    ;;
remax)
    # algo.advantage=remax: its greedy baselines as one more row of each group (one decoding
    # loop a step) against decoded in a call of their own (two), then the recipe with it
    stage remax_rollout 200 $python bench/remax_rollout.py "${remax[@]}"
    stage ${name}_remax 300 $python bench/recipe_on_gpu.py "${recipe[@]}" "${lora_rank[@]}" algo.advantage=remax
    ;;
tier)
    stage strategies_tests 300 $python -m pytest -q -m gpu tests/gpu/test_strategies_on_gpu.py
    stage other_tests 280 $python -m pytest -q -m gpu tests/gpu/test_runs_on_gpu.py tests/gpu/test_plan_on_gpu.py
    ;;
*)
    echo "unknown part $part: first, second, eager, tier, recipe, profile, compiled, families or remax" >&2
    exit 2
    ;;
esac
