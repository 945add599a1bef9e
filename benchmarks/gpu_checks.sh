#!/usr/bin/env bash
# The GPU checks of docs/results.md ("On a GPU"; logs in benchmarks/results/gpu-h100-2026-11-27/), run from the
# source tree on a machine with one CUDA device and nothing to download: every model is built there with random
# weights. Name the steps to run, in order:
#
#   bash benchmarks/gpu_checks.sh tests speed fsdp          # about 4 minutes on an H100
#   bash benchmarks/gpu_checks.sh tests speed-1b fsdp compile-1b
#   bash benchmarks/gpu_checks.sh methods full-size
#
# Steps and what each took on an H100 (2026-11-27):
#   tests       pytest tests/test_gpu.py tests/test_adapters.py                                   75 s
#   speed       bench_gpu_train.py, the variants without torch.compile (SmolLM2-135M shape)        about 90 s
#   compile     bench_gpu_train.py, the torch.compile variants                                    about 85 s each
#   speed-1b    bench_gpu_train.py at the Llama-3.2-1B shape (128,256 tokens, tied), without torch.compile
#   compile-1b  the same, the torch.compile variants
#   fsdp        accelerate launch with examples/accelerate/fsdp.yaml, fsdp2.yaml and deepspeed-zero3.yaml (where
#               deepspeed is installed), each killed after a checkpoint, relaunched (it resumes), the saved folder
#               loaded and, while time is left, its weights compared with those of a run never killed
#   methods     bench_speed.py --methods-only at 128,256 tokens, model dimension 4,096
#   full-size   bench_full_size_train.py, the Llama-3-8B shape: 16 GB of checkpoint plus 16 GB per model folder on
#               disk; what is left of GPU_CHECKS_SECONDS (default 600)
#
# Logs and JSON results go to $OUT (default /tmp/gpu-checks), a few files per step.
set -u
steps="tests speed compile speed-1b compile-1b fsdp methods full-size"
[ $# -gt 0 ] || { echo "name the steps: $steps" >&2; exit 2; }
for step in "$@"; do  # every name checked before any step runs
  [[ " $steps " == *" $step "* ]] || { echo "unknown step '$step': $steps" >&2; exit 2; }
done
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
work=${GPU_CHECKS_WORK:-/tmp/langswap-gpu-checks}
mkdir -p "$work"
start=$SECONDS
left() { local seconds=$(( ${GPU_CHECKS_SECONDS:-600} - (SECONDS - start) - 10 )); echo $(( seconds > 1 ? seconds : 1 )); }
quiet() { grep -v "Loading weights\|it/s\]\|Warning\|warnings.warn\|_init_core_state\|set_state_dict_type" "$@"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  df -h /tmp | tail -n 1
  python3 -c "import sys, torch, transformers, accelerate, peft; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'peft', peft.__version__)"
  for package in deepspeed liger_kernel flash_attn fasttext entmax; do
    python3 -c "import $package" 2>/dev/null && echo "$package: installed" || echo "$package: missing"
  done
} >"$OUT/0-environment.txt" 2>&1
cat "$OUT/0-environment.txt"

speed_world() {  # the SmolLM2-135M-shaped model and a text (that of the speed steps where they ran first)
  [ -f "$work/train/train.txt" ] || python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
from pathlib import Path
from bench_gpu_train import SHAPES, build_world
build_world(Path('$work/train'), SHAPES['smollm2-135m'], 32 * 512 * 40)"
}

engine_resume() {  # NAME CONFIG: train, kill after checkpoint-20, relaunch; check the resume and the saved folder
  local name=$1 config=$2 folder=$work/$1 gpus pid
  echo "== $name ($config)"
  cat >"$work/$name.yaml" <<EOF
model: $work/train/model
train_text: $work/train/train.txt
output: $folder
preset: full
steps: 60
batch_size: 16
sequence_length: 512
save_steps: 20
logging_steps: 20
EOF
  sed -e "s#^output: .*#output: $folder-whole#" "$work/$name.yaml" >"$work/$name-whole.yaml"
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
  launch=(python3 -m accelerate.commands.launch --config_file "$config" --num_processes "$gpus" -m langswap.cli train)
  rm -rf "$folder" "$folder-whole"
  # a fresh rendezvous port per launch: a killed launch may still hold its own
  "${launch[@]:0:5}" --main_process_port $((20000 + RANDOM % 20000)) "${launch[@]:5}" "$work/$name.yaml" &
  pid=$!
  for _ in $(seq 720); do
    [ -n "$(find "$folder" -maxdepth 2 -name 'checkpoint-20' 2>/dev/null)" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  sleep 2  # let the checkpoint's files land; a resume checks that the checkpoint it takes is complete
  echo; echo "-- checkpoints when killed: $(find "$folder" -maxdepth 2 -name 'checkpoint-*' | xargs -rn1 basename | tr '\n' ' ')"
  # torchrun's workers run in sessions of their own: kill them by their command line, the launcher with them
  pkill -9 -f "langswap.cli train $work/$name.yaml"
  wait
  echo "-- rerun"
  timeout 200 "${launch[@]:0:5}" --main_process_port $((20000 + RANDOM % 20000)) "${launch[@]:5}" \
    "$work/$name.yaml" 2>&1 | tee "$work/$name-rerun.log"
  echo "$name rerun exit ${PIPESTATUS[0]}"
  grep -q "resuming phase 1-full from .*checkpoint-" "$work/$name-rerun.log" \
    && echo "$name: the rerun resumed from $(grep -o 'checkpoint-[0-9]*' "$work/$name-rerun.log" | head -n 1)" \
    || echo "FAILED: $name: the rerun did not resume from a checkpoint"
  python3 -c "from transformers import AutoModelForCausalLM; m = AutoModelForCausalLM.from_pretrained('$folder/model'); print('$name: the saved folder loads:', type(m).__name__, sum(p.numel() for p in m.parameters()), 'parameters')"
  if [ "$(left)" -gt 150 ]; then
    echo "-- a run never killed"
    timeout 200 "${launch[@]:0:5}" --main_process_port $((20000 + RANDOM % 20000)) "${launch[@]:5}" \
      "$work/$name-whole.yaml"
    echo "$name whole exit $?"
    python3 - "$folder/model" "$folder-whole/model" "$name" <<'PY'
import sys

import torch
from transformers import AutoModelForCausalLM

resumed, whole = (AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32) for path in sys.argv[1:3])
pairs = list(zip(resumed.state_dict().values(), whole.state_dict().values()))
worst = max((a - b).abs().max().item() for a, b in pairs)
scale = max(b.abs().max().item() for _, b in pairs)
print(f"{sys.argv[3]}: resumed against never killed, largest weight difference {worst:.3g} (largest weight "
      f"{scale:.3g}):", "the same weights" if worst == 0 else "weights differ")
PY
  else
    echo "-- $name: a run never killed: not run, $(left) s left"
  fi
}

for step in "$@"; do
  case $step in
  tests)
    echo "== the GPU tests"
    timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_adapters.py \
      >"$OUT/1-tests.log" 2>&1
    echo "exit $?"; tail -n 15 "$OUT/1-tests.log" ;;
  speed-1b|compile-1b)
    echo "== training speed, Llama-3.2-1B shape ($step)"
    if [ "$step" = speed-1b ]; then
      variants=("bare fused" "langswap full" "bare eager" "langswap full, foreach AdamW" "langswap full + liger"
                "langswap embeddings")
    else
      variants=("bare fused+compile" "langswap full + compile")
    fi
    limit=$(left); [ "$step" = compile-1b ] || limit=$(( limit < 200 ? limit : 200 ))
    timeout "$limit" python3 benchmarks/bench_gpu_train.py --shape llama-3.2-1b --workdir "$work/train-1b" \
      --steps 14 --warmup 6 --variants "${variants[@]}" --output "$OUT/6-$step.json" >"$OUT/6-$step.log" 2>&1
    echo "exit $?"; quiet "$OUT/6-$step.log" | tail -n 12 ;;
  speed|compile)
    echo "== training speed, SmolLM2-135M shape ($step)"
    if [ "$step" = speed ]; then
      variants=("bare eager" "langswap full" "langswap full, foreach AdamW" "langswap embeddings"
                "langswap full + document mask" "langswap full, micro-batch / 4, accumulation 4"
                "langswap full + liger")
    else
      variants=("bare fused+compile" "langswap full + compile" "langswap embeddings + compile")
    fi
    timeout 400 python3 benchmarks/bench_gpu_train.py --workdir "$work/train" --steps 20 --warmup 8 \
      --variants "${variants[@]}" --output "$OUT/2-$step.json" >"$OUT/2-$step.log" 2>&1
    echo "exit $?"; quiet "$OUT/2-$step.log" | tail -n 20 ;;
  fsdp)
    echo "== accelerate launch with FSDP1, FSDP2 and DeepSpeed ZeRO-3, one process per GPU: each killed after a"
    echo "   checkpoint, relaunched (it resumes) and, while time is left, compared with a run never killed"
    speed_world
    {
      engine_resume fsdp examples/accelerate/fsdp.yaml
      engine_resume fsdp2 examples/accelerate/fsdp2.yaml
      if python3 -c "import deepspeed" 2>/dev/null; then
        engine_resume zero3 examples/accelerate/deepspeed-zero3.yaml
      else
        echo "DeepSpeed ZeRO-3: not run, the deepspeed package is not installed"
      fi
    } >"$OUT/4-fsdp.log" 2>&1
    quiet "$OUT/4-fsdp.log" | grep "^==\|^--\|resume\|loads\|exit\|FAILED\|weight\|not run\|Error" | tail -n 40
    rm -rf "$work/fsdp" "$work/fsdp2" "$work/zero3" "$work"/*-whole ;;
  methods)
    echo "== the methods' steps at 128,256 tokens, model dimension 4096"
    timeout 150 python3 benchmarks/bench_speed.py --methods-only --device cuda --vocab 128256 --model-dim 4096 \
      --skip-package >"$OUT/5-methods.log" 2>&1
    echo "exit $?"; tail -n 12 "$OUT/5-methods.log" ;;
  full-size)
    echo "== the Llama-3-8B shape: adapters, then embeddings (30 updates each)"
    rm -rf "$work/train" "$work/fsdp"  # the disk: 16 GB of checkpoint and 16 GB per model folder
    df -h /tmp | tail -n 1
    timeout "$(left)" python3 benchmarks/bench_full_size_train.py --workdir "$work/full" --steps 30 \
      >"$OUT/3-full-size.log" 2>&1
    echo "exit $?"; quiet "$OUT/3-full-size.log" | tail -n 20 ;;
  esac
done
