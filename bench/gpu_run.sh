#!/usr/bin/env bash
# bench/gpu_run.sh DIR: issue 33's GPU figures on a bare GPU machine, in under 8 minutes, the
# JSON into DIR. What it needs comes in .gpu/ (bench/gpu_prepare.sh makes it here), in two
# parts because a call carries at most 64 MiB; the machine keeps /tmp between calls while it
# is warm, so the two calls follow each other at once:
#   run(carry=[".gpu/a"], command="bash bench/gpu_run.sh --stage")
#   run(carry=[".gpu/b"], command="bash bench/gpu_run.sh $OUT", timeout_s=590)
# Writes DIR/bench-gpu.jsonl (a line of python -m bench --json per figure: 1, 22, 26, 12, 9, 18,
# 2, 11 and 23 with the model drafting for itself, in that order while 350 s last),
# DIR/profile-b1.json and DIR/profile-b8.json (python -m bench.profile_step), DIR/step-ops.json
# (python -m bench.step_ops: each piece of the step alone, the host's share), DIR/run.log,
# and DIR/nsys.txt where the machine has nsys. "The default model" and Gemma 3 270M there are
# models of their exact shapes with random weights (bench/gpu_model.py): the real files do not
# fit a call.
set -uo pipefail
cd "$(dirname "$0")/.."
HOLD=/tmp/logitscope-gpu
SITE=$HOLD/site
if [ "${1:-}" = "--stage" ]; then
  mkdir -p "$HOLD" && cp .gpu/a/* "$HOLD"/ && ls -la "$HOLD" && exit 0
fi
DIR=${1:?usage: bench/gpu_run.sh DIR | --stage}
mkdir -p "$DIR"
exec > >(tee "$DIR/run.log") 2>&1
PY=${PY:-python3}
if [ ! -d "$SITE/mlx" ]; then
  [ -d .gpu/a ] && cp .gpu/a/* "$HOLD"/ 2>/dev/null
  mkdir -p "$SITE" && cp .gpu/b/cuda.part* "$HOLD"/ || exit 1
  ls "$HOLD"/cuda.part00 "$HOLD"/cuda.part01 >/dev/null || { echo "part a missing: run --stage first"; exit 1; }
  # The wheels first: pip --target skips a package whose folder exists (mlx-cuda-13's lib is in mlx/).
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .gpu/b/wheels/*.whl || exit 1
  cat "$HOLD"/cuda.part0* | xz -d | tar -C "$SITE" -xf - || exit 1
fi
# libmlx.so finds CUDA's libraries at $ORIGIN/../../nvidia/*/lib, as pip lays them out: point
# that at the machine's own Python packages (nvidia-nccl-cu13, nvidia-cublas, ...).
NV=$($PY -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
if [ -n "$NV" ] && [ ! -e "$SITE/nvidia" ]; then ln -s "$NV" "$SITE/nvidia"; fi
[ -n "$NV" ] && export LD_LIBRARY_PATH=$(ls -d "$NV"/*/lib 2>/dev/null | tr '\n' ':')${LD_LIBRARY_PATH:-}
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1
$PY -c "import mlx.core as mx; print('MLX', mx.__version__, mx.default_device()); assert mx.default_device() == mx.gpu" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
git log -1 --format='commit %H' 2>/dev/null || true
export LOGITSCOPE_BENCH_DEFAULT
LOGITSCOPE_BENCH_DEFAULT=$($PY -m bench.gpu_model .gpu/b/default "$HOLD/default-shaped") || exit 1
if [ -d .gpu/b/gemma ]; then
  export LOGITSCOPE_BENCH_GEMMA
  LOGITSCOPE_BENCH_GEMMA=$($PY -m bench.gpu_model .gpu/b/gemma "$HOLD/gemma-shaped") || exit 1
fi
start=$(date +%s)
# One process per figure, each line of bench-gpu.jsonl one figure's JSON as it ends: the run
# of 2026-11-27 lost every figure when one process's time ran out before it printed. The
# first figure pays for compiling MLX's CUDA kernels (139 s of figure 1's 143 there; MLX
# keeps them for the processes after it), so it gets the longest limit.
: >"$DIR/bench-gpu.jsonl"
# Figure 21 counts graph nodes, the same on any backend: this CPU's count is the figure, and
# it is left out here (its chains compiled 35 s on the H100 without finishing).
for figure in decode:200 tiny_decode:50 host_step:40 prefill:80 chain_cost:120 gemma:60 batched:150 compare:90 speculative:90; do
  name=${figure%%:*} limit=${figure##*:} left=$((350 - $(date +%s) + start))
  [ "$left" -lt 20 ] && { echo "$name: not run, $left s left"; continue; }
  [ "$limit" -gt "$left" ] && limit=$left
  t=$(date +%s)
  timeout "$limit" $PY -m bench --json --only "$name" >>"$DIR/bench-gpu.jsonl"
  echo "$name: exit $? after $(($(date +%s) - t)) s"
done
echo "bench: $(($(date +%s) - start)) s"
for b in 1 8; do
  timeout 45 $PY -m bench.profile_step --batch $b >"$DIR/profile-b$b.json"
  echo "profile batch $b: exit $?"
done
timeout 60 $PY -m bench.step_ops >"$DIR/step-ops.json"
echo "step ops: exit $?"
if command -v nsys >/dev/null; then
  timeout 60 nsys profile -o "$HOLD/steps" --force-overwrite true $PY -m bench.profile_step --batch 1 >/dev/null &&
    nsys stats --report cuda_gpu_kern_sum "$HOLD/steps.nsys-rep" >"$DIR/nsys.txt"
else
  echo "nsys is not on this machine's PATH: kernel counts are figure 21's graph counts" | tee "$DIR/nsys.txt"
fi
echo "done after $(($(date +%s) - start)) s"
