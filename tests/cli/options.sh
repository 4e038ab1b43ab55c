#!/usr/bin/env bash
# vkt train's options (tools/train_options.c): a bad value is exit 2 with a message naming
# the option, before anything is loaded or trained; --help lists every option of the table
# and every option it lists is parsed; VKT_KERNELS takes cpu or gpu only; degenerate runs
# (fewer samples than one batch, resuming a finished run) say so instead of printing nan.
# Usage: options.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Exit 2, a "vkt train: <option>" message, nothing trained (no training or result line).
refused() { # option output rc
    [[ $3 -eq 2 ]] && grep -qe "^vkt train: .*$1" <<<"$2" &&
        ! grep -Eq '^(training |result:|step )' <<<"$2" && ! grep -q '=-\?nan' <<<"$2"
}
bad() { # option value...: each value of the option is refused
    local opt=$1 v out rc
    shift
    for v in "$@"; do
        out=$("$bin" train --steps 2 "$opt" "$v" 2>&1); rc=$?
        check "$opt '$v': exit 2 naming $opt, nothing trained (rc $rc: $out)" "refused '$opt' \"\$out\" $rc"
    done
}
bad --lr abc 0 nan -1 inf -inf 1e400 0x 1.5x ''
bad --batch -1 0 abc 1.5 4294967296 ' 5' +5
bad --steps -1 0 abc 2.5 99999999999999999999
bad --epochs 1.5 0 -1 abc
bad --staleness -1 abc
bad --dropout -0.5 1 nan
bad --keep -1 1.5
bad --replicas 0 65 -1
bad --momentum -0.1 1 nan
bad --weight-decay -1 nan
bad --clip -1 inf
bad --warmup -1 x
bad --seed -1 18446744073709551616 1e3
bad --save-every -1 x
bad --save-secs -1 nan
bad --log-every 0 -1
bad --slow-replica-ms -1 nan
bad --balance -1
bad --comm-timeout 0 abc
bad --bucket-mb 0 2048
bad --check-identical -1 1.5
bad --overlap maybe
bad --mode sideways
bad --model resnet
bad --optimizer rmsprop
bad --schedule linear
bad --hidden 0 64,,32 64,x 1,2,3,4,5,6,7,8,9 ''
bad --context 0
bad --width -1
bad --layers 0
bad --heads 0
bad --eval-every -1
bad --sample -1 1000001
bad --temperature -1 nan
bad --pipeline 0 17 -1 x
bad --micro-batches 0 65537 1.5
bad --split fastest ''
bad --recompute sometimes ''

out=$("$bin" train --steps 2 --frobnicate 2>&1); rc=$?
check "a trailing unknown option is named as unknown, exit 2 ($out)" \
    "[[ $rc -eq 2 ]] && grep -q \"unknown option '--frobnicate'\" <<<\"\$out\" && ! grep -q 'needs a value' <<<\"\$out\""
out=$("$bin" train --frobnicate 1 --steps 2 2>&1); rc=$?
check "an unknown option before others: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q \"unknown option '--frobnicate'\" <<<\"\$out\""
out=$("$bin" train --steps 2 --lr 2>&1); rc=$?
check "a trailing option without its value: exit 2, '--lr needs a value'" "[[ $rc -eq 2 ]] && grep -q -- '--lr needs a value' <<<\"\$out\""
out=$("$bin" train --mode sync --staleness 2 --steps 2 2>&1); rc=$?
check "--staleness without --mode async: exit 2" "[[ $rc -eq 2 ]] && grep -q -- '--staleness applies to --mode async' <<<\"\$out\""
# the sync replicas' options where no reducer or hash uses them: refused, not ignored
for o in "--check-identical 1" "--bucket-mb 2" "--overlap on"; do
    for a in "--mode async" "--pipeline 2" "--micro-batches 2"; do
        out=$("$bin" train $o $a --steps 2 2>&1); rc=$?
        check "$o with $a: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q -- '${o%% *} applies to --mode sync without --pipeline' <<<\"\$out\""
    done
done
out=$("$bin" train --model charlm --heads 3 2>&1); rc=$?
check "--heads not dividing --width: exit 2 naming both" "[[ $rc -eq 2 ]] && grep -q -- '--heads (3) must divide --width (64)' <<<\"\$out\""
# the charlm-only options with another model: refused naming the option (they were
# silently unused: --eval-every 5 on an MLP evaluated nothing and said nothing)
out=$("$bin" train --steps 2 --eval-every 5 2>&1); rc=$?
check "--eval-every with the MLP: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q -- '--eval-every applies to --model charlm (not --model mlp)' <<<\"\$out\""
out=$("$bin" train --context 8 --model cnn --steps 2 2>&1); rc=$?
check "--context before --model cnn: exit 2 naming it" "[[ $rc -eq 2 ]] && grep -q -- '--context applies to --model charlm (not --model cnn)' <<<\"\$out\""

# --help: every option of the table (this list) is there, and every option it shows is
# one the parser knows (given a bad value, it is refused for the value, not as unknown).
help=$("$bin" train --help 2>&1); rc=$?
check "--help exits 0" "[[ $rc -eq 0 ]]"
all="--data --model --hidden --epochs --steps --batch --optimizer --lr --momentum --weight-decay
--clip --dropout --schedule --warmup --seed --replicas --mode --staleness --scale-lr --balance
--slow-replica-ms --logdir --log-every --checkpoint-dir --save-every --save-secs --keep --max-growth --precision --skip-nonfinite --init-from --init-map --quiet
--pipeline --micro-batches --split --recompute --comm-timeout --bucket-mb --check-identical --overlap --text --context --width --layers
--heads --norm --act --eval-every --sample --temperature --help"
missing=""
for o in $all; do grep -Eq -- "^  $o( |\$)" <<<"$help" || missing+=" $o"; done
check "--help lists every option (missing:$missing)" "[[ -z '$missing' ]]"
shown=$(grep -oE '^  --[a-z-]+' <<<"$help" | tr -d ' ')
check "--help shows $(wc -w <<<"$all") options" "[[ \$(wc -w <<<\"\$shown\") -eq $(wc -w <<<"$all") ]]"
unknown=""
for o in $shown; do
    [[ $o == --help ]] && continue
    out=$("$bin" train "$o" -1 --frobnicate 2>&1)
    grep -q "unknown option '$o'" <<<"$out" && unknown+=" $o"
done
check "every option --help shows is parsed (unknown:$unknown)" "[[ -z '$unknown' ]]"
check "--help shows ranges and defaults" "grep -q -- '--lr X .*> 0 and <= 1e+06' <<<\"\$help\" && grep -q -- '--keep N .*0 to 1000000 (default 3)' <<<\"\$help\""

# VKT_KERNELS: an unknown variant is a clear error naming the variable and the choices.
out=$(VKT_KERNELS=tpu "$bin" train --steps 2 2>&1); rc=$?
check "VKT_KERNELS=tpu: refused naming the variable and cpu, gpu ($out)" \
    "[[ $rc -ne 0 ]] && grep -q \"VKT_ERROR_INVALID_ARGUMENT.*VKT_KERNELS='tpu'.*cpu, gpu\" <<<\"\$out\" && ! grep -q '^result:' <<<\"\$out\""
out=$(VKT_KERNELS=cpu "$bin" train --steps 2 --quiet 2>&1); rc=$?
check "VKT_KERNELS=cpu still trains" "[[ $rc -eq 0 ]] && grep -q '^result: .*steps=2 ' <<<\"\$out\""

# Good values are taken: whole numbers, reals in range, exponents.
out=$("$bin" train --steps 3 --batch 64 --lr 5e-2 --dropout 0 --keep 0 --quiet 2>&1); rc=$?
check "valid values train ($out)" "[[ $rc -eq 0 ]] && grep -q '^result: .*steps=3 ' <<<\"\$out\""

# Five images with batch 128: fewer than one batch, said so; no nan.
src=${VKT_DATA_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/data/mnist}
mkdir -p "$tmp/five"
{ printf '\x00\x00\x08\x03\x00\x00\x00\x05'; gunzip -c "$src/train-images-idx3-ubyte.gz" | tail -c +9 | head -c $((8 + 5 * 784)); } > "$tmp/five/train-images-idx3-ubyte"
{ printf '\x00\x00\x08\x01\x00\x00\x00\x05'; gunzip -c "$src/train-labels-idx1-ubyte.gz" | tail -c +9 | head -c 5; } > "$tmp/five/train-labels-idx1-ubyte"
cp "$src/t10k-images-idx3-ubyte.gz" "$src/t10k-labels-idx1-ubyte.gz" "$tmp/five/"
out=$("$bin" train --data "$tmp/five" --batch 128 2>&1); rc=$?
check "five images, batch 128: exit 1, 'fewer than one batch', no nan ($out)" \
    "[[ $rc -eq 1 ]] && grep -q '5 training samples, fewer than one batch of 128' <<<\"\$out\" && ! grep -q nan <<<\"\$out\""
out=$("$bin" train --data "$tmp/five" --batch 5 --steps 2 --quiet 2>&1); rc=$?
check "five images, batch 5: trains ($out)" "[[ $rc -eq 0 ]] && grep -q '^result: .*steps=2 ' <<<\"\$out\" && ! grep -q nan <<<\"\$out\""

# Resuming a finished run: nothing to train, said so, the evaluation's result line, exit 0.
"$bin" train --steps 3 --checkpoint-dir "$tmp/ck" --quiet >/dev/null 2>&1
out=$("$bin" train --steps 3 --checkpoint-dir "$tmp/ck" 2>&1); rc=$?
check "resuming a finished run: exit 0, 'nothing to train: the checkpoint is at step 3 of 3' ($out)" \
    "[[ $rc -eq 0 ]] && grep -q '^nothing to train: the checkpoint is at step 3 of 3\$' <<<\"\$out\""
check "... with a result line of real figures, no nan" \
    "grep -Eq '^result: test_accuracy=[0-9.]+ test_loss=[0-9.]+ steps=3 samples_per_s=[0-9.]+ ' <<<\"\$out\" && ! grep -q nan <<<\"\$out\""
out=$("$bin" train --steps 2 --checkpoint-dir "$tmp/ck" --quiet 2>&1); rc=$?
check "resuming past the steps asked: 'at step 3 of 2', exit 0" \
    "[[ $rc -eq 0 ]] && grep -q 'nothing to train: the checkpoint is at step 3 of 2' <<<\"\$out\" && ! grep -q nan <<<\"\$out\""
"$bin" train --model charlm --steps 2 --sample 5 --eval-every 0 --checkpoint-dir "$tmp/lm" --quiet >/dev/null 2>&1
out=$("$bin" train --model charlm --steps 2 --sample 5 --checkpoint-dir "$tmp/lm" --quiet 2>&1); rc=$?
check "charlm, resuming a finished run: nothing to train, a result line, no nan ($out)" \
    "[[ $rc -eq 0 ]] && grep -q 'nothing to train: the checkpoint is at step 2 of 2' <<<\"\$out\" && grep -q '^result: val_loss=[0-9.]* ' <<<\"\$out\" && ! grep -q nan <<<\"\$out\""

echo "options: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
