#!/usr/bin/env bash
# vkt train --precision fp32|fp16|bf16|auto (README, "Mixed precision"): the start line says
# what the matrix products run in and why; a bad value is exit 2 naming the option; a run
# saved in fp16 resumes in bf16 and in fp32 (checkpoints hold the fp32 masters); the char
# LM's start line too; vkt devices lists the 16-bit types and the cooperative matrices.
# Usage: precision.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LP_NUM_THREADS=${LP_NUM_THREADS:-1}

out=$("$bin" train --steps 3 --hidden 16 2>&1); rc=$?
check "default: fp32, as asked ($out)" "[[ $rc -eq 0 ]] && grep -q '^training mlp .*, precision fp32 (as asked)\$' <<<\"\$out\""
for p in fp16 bf16; do
    out=$("$bin" train --steps 3 --hidden 16 --precision $p 2>&1); rc=$?
    check "--precision $p: exit 0, the start line names it and the product kernel ($out)" "[[ $rc -eq 0 ]] && grep -q '^training mlp .*, precision $p (as asked; products: gemm_[bf0-9]*_[a-z]*)\$' <<<\"\$out\" && grep -q '^result: test_accuracy=' <<<\"\$out\""
done
out=$("$bin" train --steps 3 --hidden 16 --precision auto 2>&1); rc=$?
if "$bin" devices 2>/dev/null | grep -q 'cooperative matrices *none'; then
    check "--precision auto without cooperative matrices: fp32, saying why ($out)" "[[ $rc -eq 0 ]] && grep -q 'precision fp32 (auto: no 16-bit product runs on cooperative matrices on .* so 16-bit operands would only add casts to fp32 arithmetic)\$' <<<\"\$out\""
else
    check "--precision auto with cooperative matrices: a 16-bit type, saying why ($out)" "[[ $rc -eq 0 ]] && grep -Eq 'precision (bf16|fp16) \\(auto: its (bf16|fp16) products run on cooperative matrices' <<<\"\$out\""
fi
out=$("$bin" train --steps 3 --precision fp8 2>&1); rc=$?
check "--precision fp8: exit 2 naming the option and the choices ($out)" "[[ $rc -eq 2 ]] && grep -q \"^vkt train: --precision: unknown precision 'fp8' (accepted: fp32, fp16, bf16, auto)\" <<<\"\$out\""
out=$("$bin" train --steps 3 --precision 2>&1); rc=$?
check "--precision without a value: exit 2 ($out)" "[[ $rc -eq 2 ]] && grep -q -- '--precision' <<<\"\$out\""

# fp16's loss scaling: the count of skipped steps and the scale before the result line
out=$("$bin" train --steps 5 --hidden 16 --precision fp16 2>&1); rc=$?
check "fp16 reports skipped steps and the loss scale ($out)" "[[ $rc -eq 0 ]] && grep -Eq '^skipped [0-9]+ of 5 steps \(non-finite gradients, never applied\); loss scale [0-9]+\$' <<<\"\$out\""
out=$("$bin" train --steps 5 --hidden 16 2>&1); rc=$?
check "fp32 without --skip-nonfinite: no such line" "[[ $rc -eq 0 ]] && ! grep -q '^skipped ' <<<\"\$out\""
out=$("$bin" train --steps 5 --hidden 16 --skip-nonfinite -1 2>&1); rc=$?
check "--skip-nonfinite -1: exit 2 naming it ($out)" "[[ $rc -eq 2 ]] && grep -q -- '--skip-nonfinite' <<<\"\$out\""
out=$("$bin" train --steps 5 --hidden 16 --precision fp16 --pipeline 2 2>&1); rc=$?
check "fp16 with 2 pipeline stages trains, reporting its skips and scale ($out)" "[[ $rc -eq 0 ]] && grep -Eq '^skipped [0-9]+ of 5 steps \(non-finite gradients, never applied\); loss scale [0-9]+\$' <<<\"\$out\" && grep -q '^result: test_accuracy=.* stages=2 ' <<<\"\$out\""

out=$("$bin" train --steps 5 --hidden 16 --precision fp16 --replicas 2 --mode async 2>&1); rc=$?
check "fp16 with 2 async replicas trains, reporting the replicas' skips summed and the smallest scale ($out)" "[[ $rc -eq 0 ]] && grep -Eq '^skipped [0-9]+ of 10 updates of 2 async replicas \(non-finite gradients, never applied\); loss scale [0-9]+ \(the smallest\)\$' <<<\"\$out\" && grep -q '^result: .* mode=async' <<<\"\$out\""

# checkpoints hold fp32 masters: a run saved in fp16 goes on in bf16, then in fp32
ck=$tmp/ck
out=$("$bin" train --steps 10 --save-every 10 --hidden 16 --precision fp16 --checkpoint-dir "$ck" 2>&1); rc=$?
check "fp16 run saves step 10 ($out)" "[[ $rc -eq 0 && -s $ck/ckpt-10.vkt ]]"
out=$("$bin" train --steps 20 --save-every 10 --hidden 16 --precision bf16 --checkpoint-dir "$ck" 2>&1); rc=$?
check "it resumes in bf16 at step 10 and saves 20 ($out)" "[[ $rc -eq 0 && -s $ck/ckpt-20.vkt ]] && grep -q '^resumed from step 10\$' <<<\"\$out\" && grep -q 'precision bf16' <<<\"\$out\""
out=$("$bin" train --steps 30 --hidden 16 --checkpoint-dir "$ck" 2>&1); rc=$?
check "and in fp32 at step 20 ($out)" "[[ $rc -eq 0 ]] && grep -q '^resumed from step 20\$' <<<\"\$out\" && grep -q 'precision fp32' <<<\"\$out\" && grep -q '^result: test_accuracy=' <<<\"\$out\""

out=$("$bin" train --model charlm --steps 2 --layers 1 --width 16 --heads 2 --context 16 --batch 4 --precision bf16 2>&1); rc=$?
check "charlm --precision bf16: the start line names it ($(head -1 <<<"$out"))" "[[ $rc -eq 0 ]] && grep -q '^training charlm .*, precision bf16 (as asked; products: ' <<<\"\$out\" && grep -q '^result: val_loss=' <<<\"\$out\""

out=$("$bin" devices 2>&1); rc=$?
check "vkt devices lists the 16-bit types and the cooperative matrices" "[[ $rc -eq 0 ]] && grep -Eq '^  16-bit types +fp16 storage (yes|no), fp16 arithmetic (yes|no), bf16 type (yes|no)' <<<\"\$out\" && grep -Eq '^  cooperative matrices +' <<<\"\$out\" && grep -Eq '^  gemm_f16 +' <<<\"\$out\" && grep -Eq '^  gemm_bf16 +' <<<\"\$out\""

echo "precision: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
