#!/usr/bin/env bash
# The vkt command as a user runs it: devices table, device selection errors, quick GEMM
# benchmarks (square sizes, the MLP shapes, one or several shapes) with their correctness
# checks, vkt bench layers at a given transformer shape (bench/gpu.sh's attention runs), its
# --plan-only and its option errors, and missing-Vulkan handling.
# Usage: vkt_cli.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }

out=$("$bin" devices 2>&1); rc=$?
check "vkt devices exits 0" "[[ $rc -eq 0 ]]"
check "devices lists device 0" "grep -q '^device 0: ' <<<\"\$out\""
check "devices shows maxStorageBufferRange" "grep -q 'maxStorageBufferRange' <<<\"\$out\""
check "devices shows subgroup size" "grep -q 'subgroup size' <<<\"\$out\""
check "devices shows what replicas and stages need: queues, timelines, host import, group" \
  "grep -Eq '^  compute queues +[1-9]' <<<\"\$out\" && grep -Eq '^  timeline semaphores +(yes|no)\$' <<<\"\$out\" &&
   grep -Eq '^  host memory import +(yes|no)\$' <<<\"\$out\" && grep -Eq '^  device group +[0-9]+, (alone|linked with [1-9])' <<<\"\$out\""
check "devices shows the kernel profile" "grep -q '  compute units  *[0-9]' <<<\"\$out\""
check "devices shows each family's variant" "grep -Eq '  gemm  +gemm_[a-z]+\$' <<<\"\$out\" && grep -Eq '  optimizer  +optimizer_' <<<\"\$out\""
out=$(VKT_KERNELS=gpu,gemm_texel "$bin" devices 2>&1); rc=$?
check "VKT_KERNELS=gpu,gemm_texel: gpu style, the gemm forced" "[[ $rc -eq 0 ]] && grep -Eq 'kernel style +gpu' <<<\"\$out\" && grep -Eq '  gemm +gemm_texel' <<<\"\$out\" && grep -Eq '  rows +rows_spread' <<<\"\$out\""
out=$(VKT_KERNELS=gemm_warp "$bin" devices 2>&1); rc=$?
check "VKT_KERNELS=gemm_warp: exit 1 naming the term and the variants" "[[ $rc -eq 1 ]] && grep -q \"VKT_KERNELS='gemm_warp': unknown kernel variant 'gemm_warp' (accepted: cpu, gpu, or a kernel variant: gemm_texel\" <<<\"\$out\""
out=$("$bin" bench layers --model charlm --layers 1 --width 48 --heads 3 --context 20 --batch 3 --runs 2 --steps 1 2>&1); rc=$?
check "bench layers at a given char LM shape: its title, one attention row, the planned memory" \
  "[[ $rc -eq 0 ]] && grep -q '^charlm (batch 3, context 20, width 48, 1 layer, 3 heads): step ' <<<\"\$out\" &&
   [[ \$(grep -c '^  causal_attention ' <<<\"\$out\") -eq 1 ]] && grep -Eq '^  memory: parameters [0-9.]+ MB, activations [0-9.]+ MB planned' <<<\"\$out\""
out=$("$bin" bench layers --model charlm --width 64 --heads 5 2>&1); rc=$?
check "bench layers --heads 5 --width 64: exit 2 naming both" "[[ $rc -eq 2 ]] && grep -q -- '--heads (5) must divide --width (64)' <<<\"\$out\""
out=$("$bin" bench layers --model cnn --batch 4 --runs 2 --steps 1 --precision bf16 2>&1); rc=$?
check "bench layers --precision bf16: the CNN autocast (conv2d rows), its planned memory" "[[ $rc -eq 0 ]] && grep -q 'conv2d' <<<\"\$out\" && grep -q 'memory: parameters' <<<\"\$out\""
out=$("$bin" bench layers --model charlm --plan-only --precision bf16 --layers 1 2>&1); rc=$?
check "bench layers --plan-only: the planned memory, no step run (no op rows)" "[[ $rc -eq 0 ]] && grep -q '^charlm (batch 32, context 64, width 64, 1 layer, 4 heads): planned, not run\$' <<<\"\$out\" && grep -Eq '^  memory: parameters [0-9.]+ MB, activations [0-9.]+ MB planned' <<<\"\$out\" && ! grep -q '^  linear ' <<<\"\$out\""
# The peak's breakdown: its rows add up to the live bytes (to their printed rounding), which
# fit in the arena; the bf16 plan holds the products' 16-bit operands, the fp32 one none.
peak_sums() { awk '/^  memory:/ {arena = $6} /^  peak:/ {live = $2} /^    .* values +[0-9.]+ MB$/ {sum += $(NF-1); rows++}
  END {d = sum - live; if (d < 0) d = -d; exit !(rows > 0 && live > 0 && live <= arena + 0.005 && d <= 0.005 * rows + 0.005)}'; }
check "bench layers --plan-only bf16: the peak by op, role and type, rows summing to it" "grep -Eq \"^  peak: [0-9.]+ MB live at the (forward|backward) of '[^']+', by op, role and type:\\\$\" <<<\"\$out\" && peak_sums <<<\"\$out\" && grep -Eq '^    linear +16-bit x +bf16 +[0-9]+ values +[0-9.]+ MB\$' <<<\"\$out\" && grep -Eq '^    layer_norm +saved +fp32 ' <<<\"\$out\""
out=$("$bin" bench layers --model charlm --plan-only --layers 2 --batch 5 --context 19 2>&1); rc=$?
check "bench layers --plan-only fp32: the peak's rows sum to it, no 16-bit values" "[[ $rc -eq 0 ]] && peak_sums <<<\"\$out\" && grep -Eq '^    add +output +fp32 ' <<<\"\$out\" && ! grep -Eq ' (bf16|fp16) +[0-9]+ values' <<<\"\$out\""
out=$("$bin" bench layers --precision fp8 2>&1); rc=$?
check "bench layers --precision fp8: exit 2 naming the option" "[[ $rc -eq 2 ]] && grep -q -- '--precision takes fp32, fp16 or bf16' <<<\"\$out\""
out=$("$bin" bench layers --width 64 2>&1); rc=$?
check "bench layers --width without --model charlm: exit 2" "[[ $rc -eq 2 ]] && grep -q 'add --model charlm' <<<\"\$out\""
out=$("$bin" bench layers --model charlm --context 0 2>&1); rc=$?
check "bench layers --context 0: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q -- '--context takes a whole number from 1' <<<\"\$out\""
out=$("$bin" bench layers --model cnn --batch 2x 2>&1); rc=$?
check "bench layers --batch 2x: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q -- '--batch takes a whole number' <<<\"\$out\""
out=$(VKT_DEVICES=0,0,0 "$bin" devices 2>&1)
check "VKT_DEVICES=0,0,0 selects device 0 three times" "grep -q 'selected (VKT_DEVICES): 0 0 0' <<<\"\$out\""
out=$(VKT_DEVICES=7 "$bin" devices 2>&1); rc=$?
check "a missing device index fails cleanly" "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_NO_DEVICE' <<<\"\$out\""
out=$(VKT_VULKAN_LIBRARY=/nonexistent/libvulkan.so.1 "$bin" devices 2>&1); rc=$?
check "no Vulkan loader: exit 1 with VKT_ERROR_NO_VULKAN" "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_NO_VULKAN' <<<\"\$out\""
out=$(VK_DRIVER_FILES=/nonexistent.json VK_ICD_FILENAMES=/nonexistent.json "$bin" devices 2>&1); rc=$?
check "no Vulkan driver: exit 1 with VKT_ERROR_NO_DEVICE" "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_NO_DEVICE' <<<\"\$out\""
out=$("$bin" bench gemm --sizes 64,100,1024 --min-seconds 0 2>&1); rc=$?
check "bench gemm runs and checks its results" "[[ $rc -eq 0 ]] && [[ \$(grep -c ' ok\$' <<<\"\$out\") -eq 3 ]]"
check "bench gemm ends with the result line" "tail -1 <<<\"\$out\" | grep -Eq '^result: gemm_1024_gflops=[0-9.]+\$'"
out=$("$bin" bench gemm --sizes 64,100 --dtype bf16 --min-seconds 0 2>&1); rc=$?
check "bench gemm --dtype bf16 checks its results (16-bit inputs)" "[[ $rc -eq 0 ]] && grep -q '^A and B in bf16' <<<\"\$out\" && [[ \$(grep -c ' ok\$' <<<\"\$out\") -eq 2 ]]"
out=$("$bin" bench gemm --dtype fp8 2>&1); rc=$?
check "bench gemm --dtype fp8: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q \"'fp8': not fp32, fp16 or bf16\" <<<\"\$out\""
out=$("$bin" bench gemm --mlp --min-seconds 0 2>&1); rc=$?
check "bench gemm --mlp times and checks the 10 MLP GEMMs" "[[ $rc -eq 0 ]] && [[ \$(grep -c ' ok\$' <<<\"\$out\") -eq 10 ]]"
check "bench gemm --mlp ends with the step line" "tail -1 <<<\"\$out\" | grep -Eq '^result: mlp_step_gemm_us=[0-9.]+\$'"
out=$("$bin" bench gemm --shape 33,10,7,1,1,0.5 --min-seconds 0 2>&1); rc=$?
check "bench gemm --shape checks one product" "[[ $rc -eq 0 ]] && grep -q ' ok\$' <<<\"\$out\""
out=$("$bin" bench gemm --shape 33,10,7,1,0,0 --shape 9,17,40,0,1,1 --min-seconds 0 2>&1); rc=$?
check "bench gemm --shape twice checks both products, in order" "[[ $rc -eq 0 ]] && [[ \$(grep -c ' ok\$' <<<\"\$out\") -eq 2 ]] &&
  grep -Eq '^shape +1 +0 +33 +10 +7 ' <<<\"\$out\" && grep -Eq '^shape +0 +1 +9 +17 +40 +1 ' <<<\"\$out\""
out=$("$bin" bench gemm --shape 3,4 2>&1); rc=$?
check "bench gemm --shape with too few numbers: exit 2" "[[ $rc -eq 2 ]]"
out=$("$bin" frobnicate 2>&1); rc=$?
check "unknown command: usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
echo "vkt_cli: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
