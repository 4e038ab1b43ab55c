#!/usr/bin/env bash
# bench/gpu.sh (vktrain beside PyTorch on a CUDA GPU) where no GPU is: its dry run lists
# every figure's command, and without a GPU, or with bad usage, it stops with exit 2 and a
# message saying why. Its figures need a GPU (docs/performance.md); `bench/gpu.sh --cpu`
# runs it small on lavapipe and CPU PyTorch, by hand (about a minute, PyTorch needed).
# Usage: bench_gpu.sh BIN_DIR
set -u
bin=$1
gpu=$(cd "$(dirname "$0")/../../bench" && pwd)/gpu.sh
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }

out=$(bash "$gpu" --dry-run "$bin" 2>&1); rc=$?
check "--dry-run exits 0" "[[ $rc -eq 0 ]]"
check "--dry-run: the four GEMM sizes" \
  "grep -q 'vkt bench gemm --sizes 1024,2048,4096,8192 ' <<<\"\$out\""
check "--dry-run: the same sizes with 16-bit inputs, bf16 and fp16" \
  "grep -q 'vkt bench gemm --dtype bf16 --sizes 1024,2048,4096,8192 ' <<<\"\$out\" &&
   grep -q 'vkt bench gemm --dtype fp16 --sizes 1024,2048,4096,8192 ' <<<\"\$out\""
check "--dry-run: six transposed shapes, the weight gradients among them" \
  "[[ \$(grep -c 'vkt bench gemm --shape ' <<<\"\$out\") -eq 6 ]] &&
   grep -q -- '--shape 384,1536,16384,1,0,0 ' <<<\"\$out\""
check "--dry-run: the MLP step at batch 128 and 1024" \
  "grep -Eq 'vkt bench train *\$' <<<\"\$out\" && grep -q 'vkt bench train --batch 1024' <<<\"\$out\""
check "--dry-run: the CNN at batch 64 and 512" \
  "grep -q 'model cnn --quiet --batch 64 ' <<<\"\$out\" &&
   grep -q 'model cnn --quiet --batch 512 ' <<<\"\$out\""
check "--dry-run: the CNN again with conv_im2col forced, at batch 64 and 512" \
  "[[ \$(grep -c 'VKT_KERNELS=gpu,conv_im2col .*model cnn --quiet --batch' <<<\"\$out\") -eq 2 ]]"
check "--dry-run: the char LM at its default and at width 384, 6 layers, context 256" \
  "grep -q 'model charlm --steps 300 ' <<<\"\$out\" &&
   grep -q 'width 384 --layers 6 --heads 6 --context 256 --batch 64' <<<\"\$out\""
torch_line=$(grep 'gpu_torch.py --device cuda' <<<"$out")
check "--dry-run: PyTorch on CUDA, the same six shapes" \
  "grep -q \"^env 'GEMM_SHAPES=2048,64,64,0,0 .* 384,1536,16384,1,0 16384,384,1536,0,1' \" <<<\"\$torch_line\""
out=$(bash "$gpu" --dry-run --cpu "$bin" 2>&1); rc=$?
check "--dry-run --cpu: small sizes, PyTorch on the CPU" \
  "[[ $rc -eq 0 ]] && grep -q -- '--sizes 256,512 ' <<<\"\$out\" &&
   grep -q 'gpu_torch.py --device cpu --quick' <<<\"\$out\" && ! grep -q 'width 384' <<<\"\$out\" &&
   ! grep -q conv_im2col <<<\"\$out\""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  out=$(bash "$gpu" "$bin" 2>&1); rc=$?
  check "no GPU: exit 2, saying so and naming --cpu: $out" \
    "[[ $rc -eq 2 ]] && grep -q 'no CUDA GPU' <<<\"\$out\" && grep -q -- '--cpu' <<<\"\$out\""
fi
out=$(bash "$gpu" --frobnicate 2>&1); rc=$?
check "unknown option: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q frobnicate <<<\"\$out\""
out=$(bash "$gpu" --dry-run /nonexistent 2>&1); rc=$?
check "no vkt in the folder: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q /nonexistent <<<\"\$out\""
out=$(bash "$gpu" --help 2>&1); rc=$?
check "--help shows the usage" "[[ $rc -eq 0 ]] && grep -q 'Usage: bench/gpu.sh' <<<\"\$out\""
echo "bench_gpu: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
