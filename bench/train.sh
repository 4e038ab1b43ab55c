#!/usr/bin/env bash
# Training the 784-256-128-10 MLP (relu, batch 128, SGD lr 0.1) side by side in one run:
# vktrain on lavapipe (LP_NUM_THREADS=1, then its default: one thread per core) and
# PyTorch on the host CPU (torch.set_num_threads(1), then 2).
#   bench loop: `vkt bench train` / `mlp_torch.py`: pre-made random batches, warm-up,
#               every step timed; the best step (the figure a busy machine disturbs least)
#   data loop:  `vkt train` / `mlp_torch.py --data`: the shipped digits, shuffled every
#               epoch, 4 epochs timed from the first step, batch gathering included;
#               the fastest of RUNS (default 3) runs
# Prints one table: samples/s, vktrain / PyTorch at the same thread count, and host CPU
# time per step (process CPU: lavapipe's threads are the "device", so they count).
# Usage: bench/train.sh [BUILD_DIR]  (default: build).  STEPS=N: timed steps of the bench
# loops (default 300); RUNS=N: runs of each data loop (default 3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
steps=${STEPS:-300}
data=$here/../data/mnist
py=/usr/bin/python3
[[ -x $build/vkt ]] || { echo "build vkt first (cmake --build $build)"; exit 1; }
"$py" -c 'import torch' 2>/dev/null ||
  { echo "PyTorch missing: scripts/install-deps.sh --bench (python3-torch)"; exit 1; }

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
driver=$("$build/vkt" devices | sed -n 's/^ *driver *//p' | head -1)
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
echo "== machine: $cpu, $(nproc) cores; lavapipe: $driver; torch $torch_version"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.*[ :]$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }  # key=value of a result line

# A data loop is timed as a whole, so a busy machine slows it: run it `runs` times and keep
# the output of the fastest run (the highest samples_per_s).
runs=${RUNS:-3}
best_of() { # out_file command...
  local out=$1 rate best=-1
  shift
  for ((r = 0; r < runs; r++)); do
    "$@" > "$out.run"
    rate=$(field "$out.run" samples_per_s)
    if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then
      best=$rate
      cp "$out.run" "$out"
    fi
  done
  cat "$out"
}

# vktrain: LP_NUM_THREADS=1, then lavapipe's default (unset: one thread per core);
# PyTorch: torch.set_num_threads(1), then 2. Rows are paired in that order.
vk_env() { # 1|2 command...
  if [[ $1 == 1 ]]; then env LP_NUM_THREADS=1 "${@:2}"; else env -u LP_NUM_THREADS "${@:2}"; fi
}
for i in 1 2; do
  label=$([[ $i == 1 ]] && echo "LP_NUM_THREADS=1" || echo "LP_NUM_THREADS unset (default)")
  echo "== vktrain, vkt bench train, $label"
  vk_env "$i" "$build/vkt" bench train --steps "$steps" | tee "$tmp/vb$i"
  echo "== vktrain, vkt train (shipped digits, SGD lr 0.1, 4 epochs), $label, best of $runs"
  best_of "$tmp/vt$i" vk_env "$i" "$build/vkt" train --data "$data" --optimizer sgd --lr 0.1 \
    --schedule constant --epochs 4 --quiet
  echo "== PyTorch, mlp_torch.py, torch.set_num_threads($i)"
  "$py" "$here/mlp_torch.py" --threads "$i" --steps "$steps" | tee "$tmp/pb$i"
  echo "== PyTorch, mlp_torch.py --data (shipped digits, 4 epochs), torch.set_num_threads($i)," \
    "best of $runs"
  best_of "$tmp/pt$i" "$py" "$here/mlp_torch.py" --threads "$i" --data "$data" --steps 0 --epochs 4
done

num() { awk -v x="$1" -v f="$2" 'BEGIN { if (x == "") print "-"; else printf f, x }'; }
fmt='%-32s %-8s %9s %9s %10s %12s %11s\n'
row() { # label threads step_ms gemm_ms samples_per_s cpu_ms [torch samples_per_s]
  local ratio="-"
  [[ -n ${7:-} ]] && ratio=$(awk -v a="$5" -v b="$7" 'BEGIN { printf "%.2fx", a / b }')
  printf "$fmt" "$1" "$2" "$(num "$3" %.3f)" "$(num "$4" %.3f)" "$(num "$5" %.0f)" \
    "$(num "$6" %.3f)" "$ratio"
}
echo
echo "== 784-256-128-10 MLP, batch 128, SGD lr 0.1: $cpu, $(nproc) cores"
printf "$fmt" "" "threads" "step ms" "GEMM ms" "samples/s" "host CPU ms" "vs PyTorch"
for i in 1 2; do
  vk_threads=$([[ $i == 1 ]] && echo 1 || echo "default")
  pb_rate=$(field "$tmp/pb$i" samples_per_s)
  pt_rate=$(field "$tmp/pt$i" samples_per_s)
  vb_step=$(field "$tmp/vb$i" step_ms)
  vt_rate=$(field "$tmp/vt$i" samples_per_s)
  row "vktrain, bench loop (best step)" "$vk_threads" "$vb_step" "$(field "$tmp/vb$i" gemm_ms)" \
    "$(awk -v s="$vb_step" 'BEGIN { print 128 / s * 1000 }')" \
    "$(awk '/^training step / { print $6 }' "$tmp/vb$i")" "$pb_rate"
  row "PyTorch, bench loop (best step)" "$i" "$(field "$tmp/pb$i" step_ms)" \
    "$(field "$tmp/pb$i" gemm_ms)" "$pb_rate" "$(field "$tmp/pb$i" cpu_ms_per_step)"
  row "vktrain, data loop (vkt train)" "$vk_threads" \
    "$(awk -v r="$vt_rate" 'BEGIN { print 128 / r * 1000 }')" "" "$vt_rate" "" "$pt_rate"
  row "PyTorch, data loop" "$i" "$(field "$tmp/pt$i" step_ms)" "" "$pt_rate" \
    "$(field "$tmp/pt$i" cpu_ms_per_step)"
done
echo "step ms: the best step (bench loop), or loop time / steps (data loop). GEMM ms: the"
echo "step's matrix products alone, best run. host CPU ms: process CPU time per step, every"
echo "thread counted (lavapipe's threads are the device), mean over the timed steps."
echo "vs PyTorch: vktrain samples/s / PyTorch samples/s of the row pair."
echo "vktrain step / GEMM-only ratio (vkt bench train): LP_NUM_THREADS=1" \
  "$(field "$tmp/vb1" ratio), default threads $(field "$tmp/vb2" ratio) (goal: <= 1.5)"
