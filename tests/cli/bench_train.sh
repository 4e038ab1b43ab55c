#!/usr/bin/env bash
# `vkt bench train` as a user runs it, quickly: a few steps, a well-formed table and
# result line, the per-GEMM table, and option errors. The figures themselves are timed
# checks and belong to bench/, not here.
# Usage: bench_train.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
num='[0-9]+(\.[0-9]+)?'

out=$("$bin" bench train --steps 10 --warmup 2 2>&1); rc=$?
check "bench train exits 0" "[[ $rc -eq 0 ]]"
check "bench train ends with the result line" \
  "tail -1 <<<\"\$out\" | grep -Eq '^result: step_ms=$num gemm_ms=$num ratio=$num\$'"
check "the table has the step, GEMM-only and ratio rows" \
  "grep -q '^training step ' <<<\"\$out\" && grep -q '^GEMMs only ' <<<\"\$out\" &&
   grep -q '^ratio ' <<<\"\$out\""
check "the step records dispatches, the GEMM-only stream 8" \
  "grep -Eq '^training step +$num +$num +[1-9][0-9]* ' <<<\"\$out\" &&
   grep -Eq '^GEMMs only +$num +$num +8 ' <<<\"\$out\""
check "the ratio is the quotient of the two times" \
  "tail -1 <<<\"\$out\" | awk -F'[= ]' '{ r = \$3 / \$5; d = r - \$7; exit !(d < 0.002 && d > -0.002) }'"
check "the loss is finite" "grep -Eq '^samples/s: [0-9]+ .*loss $num -> $num ' <<<\"\$out\""
check "the device line is printed" "grep -q '^device: ' <<<\"\$out\""
out=$(LP_NUM_THREADS=1 "$bin" bench train --steps 10 --warmup 0 --gemms 2>&1); rc=$?
check "--gemms exits 0" "[[ $rc -eq 0 ]]"
check "--gemms lists the 8 products of a step" "[[ \$(grep -Ec '^(fwd|dW|dA)[0-9] ' <<<\"\$out\") -eq 8 ]]"
check "LP_NUM_THREADS is shown" "grep -q 'LP_NUM_THREADS=1' <<<\"\$out\""
out=$("$bin" bench train --steps 10 --batch 32 --warmup 1 2>&1); rc=$?
check "--batch 32 runs" "[[ $rc -eq 0 ]] && grep -q 'batch 32' <<<\"\$out\""
out=$(VKT_DEVICES=0,0 "$bin" bench train --steps 10 --warmup 1 2>&1); rc=$?
check "a device list of two still measures one replica" \
  "[[ $rc -eq 0 ]] && grep -q 'one replica' <<<\"\$out\""
out=$("$bin" bench train --steps 3 2>&1); rc=$?
check "too few steps: usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
out=$("$bin" bench train --frobnicate 2>&1); rc=$?
check "unknown option: usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
out=$("$bin" bench 2>&1); rc=$?
check "bench alone names train in its usage" "[[ $rc -eq 2 ]] && grep -q train <<<\"\$out\""
echo "bench_train: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
