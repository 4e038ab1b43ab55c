#!/usr/bin/env bash
# GEMM side by side in one run: vktrain on lavapipe (`vkt bench gemm`) and OpenBLAS on the
# host CPU, each with 1 and 2 threads. Usage: bench/gemm.sh [BUILD_DIR]  (default: build)
set -euo pipefail
build=${1:-build}
[[ -x $build/vkt ]] || { echo "build vkt first (cmake --build $build)"; exit 1; }
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for t in 1 2; do
  echo "== vktrain, lavapipe, LP_NUM_THREADS=$t"
  LP_NUM_THREADS=$t "$build/vkt" bench gemm
  if [[ -x $build/gemm_openblas ]]; then
    echo "== OpenBLAS sgemm, OPENBLAS_NUM_THREADS=$t"
    OPENBLAS_NUM_THREADS=$t "$build/gemm_openblas"
  else
    echo "== OpenBLAS not built (scripts/install-deps.sh --bench, then re-run cmake)"
  fi
done
