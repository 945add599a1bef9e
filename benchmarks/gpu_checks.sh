#!/usr/bin/env bash
# The GPU checks of docs/benchmarks.md ("On a GPU"), from the source tree, on a machine with one CUDA device and
# nothing to download: every model is built there with random weights.
#
#   bash benchmarks/gpu_checks.sh 1     # the GPU tests, training speed (SmolLM2-135M shape), FSDP launch and resume
#   bash benchmarks/gpu_checks.sh 2     # the methods' steps at 128k tokens, then the Llama-3-8B shape
#
# Logs and JSON results go to $OUT (default /tmp/gpu-checks). Each step has its own time limit, so that a step cut
# short leaves the others their time; the 8B step takes what part 2 has left (GPU_CHECKS_SECONDS, default 600).
set -u
part=${1:?say which part: 1 or 2}
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
work=${GPU_CHECKS_WORK:-/tmp/langswap-gpu-checks}
mkdir -p "$work"
start=$SECONDS
left() { echo $(( ${GPU_CHECKS_SECONDS:-600} - (SECONDS - start) - 10 )); }

if [ "$part" = 1 ]; then
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "import sys, torch, transformers, accelerate, peft; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'peft', peft.__version__)"
    for package in deepspeed liger_kernel flash_attn fasttext entmax; do
      python3 -c "import $package" 2>/dev/null && echo "$package: installed" || echo "$package: missing"
    done
  } >"$OUT/0-environment.txt" 2>&1
  cat "$OUT/0-environment.txt"

  echo "== 1. the GPU tests"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_adapters.py \
    >"$OUT/1-tests.log" 2>&1
  echo "exit $?"; tail -n 15 "$OUT/1-tests.log"

  echo "== 2. training speed, SmolLM2-135M shape"
  timeout 250 python3 benchmarks/bench_gpu_train.py --workdir "$work/train" --steps 20 --warmup 8 \
    --output "$OUT/2-train-speed.json" >"$OUT/2-train-speed.log" 2>&1
  echo "exit $?"; grep -v "Loading weights" "$OUT/2-train-speed.log" | tail -n 20

  echo "== 4. accelerate launch with FSDP (one process per GPU), killed after a checkpoint and resumed"
  cat >"$work/fsdp.yaml" <<EOF
model: $work/train/model
train_text: $work/train/train.txt
output: $work/fsdp
overwrite: false
preset: full
steps: 400
batch_size: 16
sequence_length: 512
save_steps: 100
logging_steps: 50
EOF
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
  launch=(python3 -m accelerate.commands.launch --config_file examples/accelerate/fsdp.yaml --num_processes "$gpus"
          -m langswap.cli train "$work/fsdp.yaml")
  rm -rf "$work/fsdp"
  {
    setsid "${launch[@]}" &
    pid=$!
    for _ in $(seq 480); do
      [ -n "$(find "$work/fsdp" -maxdepth 2 -name 'checkpoint-100' 2>/dev/null)" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    echo "checkpoints when killed: $(find "$work/fsdp" -maxdepth 2 -name 'checkpoint-*' 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
    kill -9 -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "-- rerun"
    timeout 150 "${launch[@]}"
    echo "rerun exit $?"
    python3 -c "from transformers import AutoModelForCausalLM; m = AutoModelForCausalLM.from_pretrained('$work/fsdp/model'); print('the saved folder loads:', type(m).__name__, sum(p.numel() for p in m.parameters()), 'parameters')"
    if python3 -c "import deepspeed" 2>/dev/null; then
      echo "-- DeepSpeed ZeRO-3"
      sed -e "s#$work/fsdp\$#$work/zero3#" "$work/fsdp.yaml" >"$work/zero3.yaml"
      timeout 120 python3 -m accelerate.commands.launch --config_file examples/accelerate/deepspeed-zero3.yaml \
        --num_processes "$gpus" -m langswap.cli train "$work/zero3.yaml"
      echo "zero3 exit $?"
    else
      echo "DeepSpeed ZeRO-3: not run, the deepspeed package is not installed"
    fi
  } >"$OUT/4-fsdp.log" 2>&1
  grep -v "Loading weights\|it/s\]" "$OUT/4-fsdp.log" | tail -n 25
else
  echo "== 5. the methods' steps at 128,256 tokens, model dimension 4096"
  timeout 90 python3 benchmarks/bench_speed.py --methods-only --device cuda --vocab 128256 --model-dim 4096 \
    --skip-package >"$OUT/5-methods.log" 2>&1
  echo "exit $?"; tail -n 12 "$OUT/5-methods.log"

  echo "== 3. the Llama-3-8B shape: adapters, then embeddings (30 updates each)"
  timeout "$(left)" python3 benchmarks/bench_full_size_train.py --workdir "$work/full" --steps 30 \
    >"$OUT/3-full-size.log" 2>&1
  echo "exit $?"; grep -v "Loading weights\|it/s\]" "$OUT/3-full-size.log" | tail -n 20
  nvidia-smi --query-gpu=memory.used --format=csv
fi
