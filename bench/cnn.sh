#!/usr/bin/env bash
# The CNN of `vkt train --model cnn` trained side by side in one run: vktrain on lavapipe
# (LP_NUM_THREADS=1, then its default: one thread per core) and PyTorch on the host CPU
# (1 thread, then 2), on the shipped digits, batch 64, SGD lr 0.1 momentum 0.9, EPOCHS
# epochs (default 1) timed from the first step, best of RUNS runs (default 2); then
# `vkt bench layers --model cnn` (the per-op times of one step).
# Usage: bench/cnn.sh [BUILD_DIR]  (default: build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
epochs=${EPOCHS:-1}
runs=${RUNS:-2}
data=$here/../data/mnist
py=/usr/bin/python3
[[ -x $build/vkt ]] || { echo "build vkt first (cmake --build $build)"; exit 1; }
"$py" -c 'import torch' 2>/dev/null ||
  { echo "PyTorch missing: scripts/install-deps.sh --bench (python3-torch)"; exit 1; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "== machine: $cpu, $(nproc) cores"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.*[ :]$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }
best_of() { # out_file command...: keeps the run with the highest samples_per_s
  local out=$1 best=-1 rate
  shift
  for ((r = 0; r < runs; r++)); do
    "$@" > "$out.run"
    rate=$(field "$out.run" samples_per_s)
    if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$rate; cp "$out.run" "$out"; fi
  done
  tail -1 "$out"
}
vk_env() { if [[ $1 == 1 ]]; then env LP_NUM_THREADS=1 "${@:2}"; else env -u LP_NUM_THREADS "${@:2}"; fi; }
for i in 1 2; do
  echo "== vktrain, vkt train --model cnn, $([[ $i == 1 ]] && echo LP_NUM_THREADS=1 || echo default threads)"
  best_of "$tmp/v$i" vk_env "$i" "$build/vkt" train --model cnn --data "$data" --epochs "$epochs" \
    --schedule constant --quiet
  echo "== PyTorch, cnn_torch.py, $i thread(s)"
  best_of "$tmp/p$i" "$py" "$here/cnn_torch.py" --threads "$i" --data "$data" --epochs "$epochs"
done
echo
echo "== CNN training, batch 64, $epochs epoch(s) of the shipped digits: $cpu, $(nproc) cores"
printf '%-10s %-9s %14s %14s %11s\n' "threads" "" "vktrain s/s" "PyTorch s/s" "vs PyTorch"
for i in 1 2; do
  v=$(field "$tmp/v$i" samples_per_s); p=$(field "$tmp/p$i" samples_per_s)
  printf '%-10s %-9s %14.0f %14.0f %10.2fx\n' "$i" "" "$v" "$p" "$(awk -v a="$v" -v b="$p" 'BEGIN { print a / b }')"
done
echo "(vktrain 'threads 2' is lavapipe's default thread count on this machine)"
echo
echo "== vkt bench layers --model cnn (LP_NUM_THREADS=1)"
LP_NUM_THREADS=1 "$build/vkt" bench layers --model cnn
