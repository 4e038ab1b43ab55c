#!/usr/bin/env bash
# vkt train --init-from FILE --init-map torch starts from weights PyTorch trained
# (tests/import/*.safetensors, made by tests/import/make_fixtures.py): after one step the
# MLP and the CNN classify far better than from their own initialization, and the char LM's
# validation loss is far lower. A map file saying what the built-in map says gives the same
# result, bitwise. Every bad input stops the run before training with a message naming the
# file or the option: a missing or truncated file, a map line that is malformed or names
# nothing, a model of other sizes, --init-map without --init-from, a map file that cannot be
# read. A run that resumes from its checkpoint keeps the checkpoint's parameters.
# Usage: import.sh BIN_DIR
set -u
bin=$(cd "$1" && pwd)/vkt
here=$(cd "$(dirname "$0")/.." && pwd)
fx=$here/import
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
field() { sed -n "s/^result: .*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LP_NUM_THREADS=${LP_NUM_THREADS:-1}

# ---- the three models from PyTorch's weights ----
mlp=(train --hidden 64,32 --steps 1 --quiet)
out=$("$bin" "${mlp[@]}" --init-from "$fx/mlp.safetensors" --init-map torch 2>&1); rc=$?
acc=$(field test_accuracy "$out")
check "mlp from PyTorch: exit 0, accuracy > 0.85 after 1 step ($acc)" \
    "[[ $rc -eq 0 ]] && awk 'BEGIN { exit !($acc > 0.85) }'"
check "mlp: the import is reported" \
    "grep -q \"^initialized from '$fx/mlp.safetensors': 6 parameters (3 transposed)\$\" <<<\"\$out\""
fresh=$("$bin" "${mlp[@]}" 2>&1)
acc0=$(field test_accuracy "$fresh")
check "mlp from its own initialization: accuracy < 0.5 after 1 step ($acc0)" \
    "awk 'BEGIN { exit !($acc0 < 0.5) }'"
printf '# PyTorch nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)\n' >"$tmp/mlp.map"
for k in 0 1 2; do
    printf 'w%d %d.weight transpose\nb%d %d.bias\n' $((k + 1)) $((2 * k)) $((k + 1)) $((2 * k)) \
        >>"$tmp/mlp.map"
done
out2=$("$bin" "${mlp[@]}" --init-from "$fx/mlp.safetensors" --init-map "$tmp/mlp.map" 2>&1)
check "a map file like the built-in map: the same result" \
    "[[ \$(grep ^result <<<\"\$out\" | cut -d' ' -f2,3) == \$(grep ^result <<<\"\$out2\" | cut -d' ' -f2,3) ]]"

out=$("$bin" train --model cnn --steps 1 --quiet --init-from "$fx/cnn.safetensors" \
    --init-map torch 2>&1); rc=$?
acc=$(field test_accuracy "$out")
check "cnn from PyTorch: exit 0, accuracy > 0.9 after 1 step ($acc)" \
    "[[ $rc -eq 0 ]] && awk 'BEGIN { exit !($acc > 0.9) }'"

lm=(train --model charlm --width 32 --context 32 --layers 2 --heads 4 --steps 1 --sample 0
    --eval-every 0 --quiet)
out=$("$bin" "${lm[@]}" --init-from "$fx/charlm.safetensors" --init-map torch 2>&1); rc=$?
val=$(field val_loss "$out")
check "charlm from PyTorch: exit 0, validation loss < 3 after 1 step ($val)" \
    "[[ $rc -eq 0 ]] && awk 'BEGIN { exit !($val < 3) }'"
check "charlm: 30 tensors, 9 transposed" \
    "grep -q \"30 parameters (9 transposed)\" <<<\"\$out\""
fresh=$("$bin" "${lm[@]}" 2>&1)
val0=$(field val_loss "$fresh")
check "charlm from its own initialization: validation loss > 4 ($val0)" \
    "awk 'BEGIN { exit !($val0 > 4) }'"

# ---- bad inputs: refused before training, the file or option named ----
fails() { # WHAT RC PATTERN ARGS...: the run exits RC, its output matches PATTERN, no result
    local what=$1 want=$2 pat=$3 out rc
    shift 3
    out=$("$bin" "$@" 2>&1); rc=$?
    check "$what: exit $want, '$pat' ($(tail -1 <<<"$out" | cut -c1-300))" \
        "[[ $rc -eq $want ]] && grep -q -- \"\$pat\" <<<\"\$out\" && ! grep -q '^result' <<<\"\$out\""
}
fails "a missing file" 1 "cannot start from --init-from '$tmp/none.safetensors': VKT_ERROR_IO: cannot read safetensors file '$tmp/none.safetensors' (no such file)" \
    "${mlp[@]}" --init-from "$tmp/none.safetensors"
head -c 5000 "$fx/mlp.safetensors" >"$tmp/cut.safetensors"
fails "a truncated file" 1 "VKT_ERROR_FORMAT: safetensors file '$tmp/cut.safetensors' is invalid: tensor '0.weight': data_offsets \\[0, 100352\\] pass the end of the data (4472 bytes)" \
    "${mlp[@]}" --init-from "$tmp/cut.safetensors" --init-map torch
fails "no map for PyTorch's names" 1 "none of the model's 6 parameter names is a tensor of the file (whose tensors are named like '0.weight'): a name map is needed" \
    "${mlp[@]}" --init-from "$fx/mlp.safetensors"
fails "a model of other sizes" 1 "parameter 'w1' is \\[784,256\\], tensor '0.weight' transposed is \\[784,64\\]" \
    train --steps 1 --init-from "$fx/mlp.safetensors" --init-map torch
printf 'w1 0.weight transpose\nw2 2.weight sideways\n' >"$tmp/bad.map"
fails "a malformed map line" 1 "VKT_ERROR_INVALID_ARGUMENT: the name map, line 2: the third word is 'sideways'" \
    "${mlp[@]}" --init-from "$fx/mlp.safetensors" --init-map "$tmp/bad.map"
sed 's/^b3 /b9 /' "$tmp/mlp.map" >"$tmp/typo.map"
fails "a map line naming no parameter" 1 "map line 7 names 'b9', which is not a parameter of the model" \
    "${mlp[@]}" --init-from "$fx/mlp.safetensors" --init-map "$tmp/typo.map"
fails "a map file that cannot be read" 1 "vkt: --init-map: cannot read the name map '$tmp/nomap'" \
    "${mlp[@]}" --init-from "$fx/mlp.safetensors" --init-map "$tmp/nomap"
fails "--init-map without --init-from" 2 "vkt train: --init-map applies to --init-from" \
    "${mlp[@]}" --init-map torch
fails "--init-from without a value" 2 "vkt train: --init-from needs a value (FILE)" \
    "${mlp[@]}" --init-from

# ---- a resumed run keeps its checkpoint ----
ck=$tmp/ck
out=$("$bin" "${mlp[@]}" --steps 2 --checkpoint-dir "$ck" --init-from "$fx/mlp.safetensors" \
    --init-map torch 2>&1); rc=$?
check "a run with --checkpoint-dir starts from the file and saves step 2" \
    "[[ $rc -eq 0 && -s $ck/ckpt-2.vkt ]] && grep -q '^initialized from' <<<\"\$out\""
out=$("$bin" "${mlp[@]}" --steps 3 --checkpoint-dir "$ck" --init-from "$tmp/none.safetensors" \
    --init-map torch 2>&1); rc=$?
check "resumed: --init-from is not applied (not even read) ($(tail -1 <<<"$out"))" \
    "[[ $rc -eq 0 ]] && grep -q \"^--init-from '$tmp/none.safetensors' not applied: the run resumed from its checkpoint\$\" <<<\"\$out\""

echo "import.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
