#!/usr/bin/env bash
# The CNN and the character transformer as a user runs them, at shortened lengths (the
# full runs, 0.97+ accuracy and val loss < 2.0, take minutes: README "Models"):
# `vkt train --model cnn` one epoch reaches test accuracy >= 0.90; `--model charlm` 200
# steps (constant learning rate) gets the validation loss below 2.6 nats/char (4.3 at the start) and samples the
# asked number of characters; resuming from its checkpoint of step 100 gives exactly the
# uninterrupted run's losses; bad options and files fail cleanly. The examples
# mnist_cnn (1 epoch) and char_lm (200 steps) are held to the same bounds.
# Usage: layers.sh BIN_DIR   (VKT_DATA_DIR: the shipped digits)
set -u
bin=$1
text=$(cd "$(dirname "$0")/../.." && pwd)/data/austen/pride_and_prejudice.txt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
at_least() { awk -v v="$1" -v m="$2" 'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v >= m) }'; }
below() { awk -v v="$1" -v m="$2" 'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v < m) }'; }
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }
run() { out=$("$@" 2>&1); rc=$?; res=$(grep '^result: ' <<<"$out" | tail -1); }
shown=0
show_if_failed() { if [[ $fail -gt $shown ]]; then echo "--- $1 printed:" >&2; echo "$out" >&2; fi; shown=$fail; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run "$bin/vkt" train --model cnn --epochs 1 --quiet
acc=$(field test_accuracy "$res")
check "vkt train --model cnn exits 0" "[[ $rc -eq 0 ]]"
check "cnn, 1 epoch: test accuracy >= 0.90 ($acc)" "at_least '$acc' 0.90"
show_if_failed "vkt train --model cnn"

lm=(--model charlm --steps 200 --eval-every 100 --sample 40 --quiet --schedule constant)
run "$bin/vkt" train "${lm[@]}" --checkpoint-dir "$tmp/full" --save-every 100 --keep 0
val=$(field val_loss "$res")
sample=$(grep -A1 '^sample (temperature 0.80):' <<<"$out" | tail -1)
check "vkt train --model charlm exits 0" "[[ $rc -eq 0 ]]"
check "charlm, 200 steps: val_loss < 2.6 ($val)" "below '$val' 2.6"
check "charlm samples 40 characters (${#sample}: '$sample')" "[[ ${#sample} -le 40 && -n '$sample' ]]"
show_if_failed "vkt train --model charlm"
full=$res

# The LLaMA-style options (issue 12's new ops through the op table): RMSNorm and SiLU
# train too, 100 steps below 3.0 nats/char (2.75 measured; 4.3 at the start).
run "$bin/vkt" train --model charlm --norm rms --act silu --steps 100 --eval-every 100 \
    --sample 0 --quiet --schedule constant
check "charlm --norm rms --act silu, 100 steps: val_loss < 3.0 ($(field val_loss "$res"))" \
    "[[ $rc -eq 0 ]] && below '$(field val_loss "$res")' 3.0"
show_if_failed "vkt train --model charlm --norm rms --act silu"

# Resumed from the run's checkpoint of step 100 in a new process: the same losses at step 200
# as the uninterrupted run (which saved it: a second run of the first 100 steps cost 100
# steps, its evaluation and sampling).
mkdir -p "$tmp/ck" && cp "$tmp/full/ckpt-100.vkt" "$tmp/ck/" 2>/dev/null
check "charlm saved its checkpoint of step 100 ($(ls "$tmp/full" 2>/dev/null | tr '\n' ' '))" \
    "[[ -f '$tmp/ck/ckpt-100.vkt' && -f '$tmp/full/ckpt-200.vkt' ]]"
run "$bin/vkt" train "${lm[@]}" --checkpoint-dir "$tmp/ck"
check "charlm resumed from step 100" "grep -q 'resumed from step 100' <<<\"\$out\""
check "charlm resumed: val_loss $(field val_loss "$res") and train_loss equal the uninterrupted run's" \
    "[[ '$(field val_loss "$res") $(field train_loss "$res")' == '$(field val_loss "$full") $(field train_loss "$full")' ]]"
show_if_failed "vkt train --model charlm (resumed)"

run "$bin/vkt" train --model charlm --text "$tmp/missing.txt" --steps 10
check "a missing --text fails with exit 1 and names the file" \
    "[[ $rc -eq 1 ]] && grep -q 'missing.txt' <<<\"\$out\""
run "$bin/vkt" train --model charlm --heads 3 --steps 10
check "--heads not dividing --width is a usage error (exit 2)" "[[ $rc -eq 2 ]]"
run "$bin/vkt" train --model charlm --sample -1 --steps 10
check "--sample -1 is a usage error (exit 2)" "[[ $rc -eq 2 ]]"
run "$bin/vkt" train --model charlm --mode async --replicas 2 --steps 10
check "charlm refuses async replicas before training (exit 2)" \
    "[[ $rc -eq 2 ]] && grep -q 'sync replicas' <<<\"\$out\""
run "$bin/vkt" train --model resnet
check "an unknown model is a usage error naming the models" \
    "[[ $rc -eq 2 ]] && grep -q 'cnn, charlm' <<<\"\$out\""
show_if_failed "errors"

run "$bin/mnist_cnn" "${VKT_DATA_DIR:-data/mnist}" 1
acc=$(field test_accuracy "$res")
check "example mnist_cnn, 1 epoch: exits 0 with test accuracy >= 0.90 ($acc)" \
    "[[ $rc -eq 0 ]] && at_least '$acc' 0.90"
show_if_failed mnist_cnn
run "$bin/char_lm" "$text" 200
val=$(field val_loss "$res")
check "example char_lm, 200 steps: exits 0 with val_loss < 2.6 ($val)" \
    "[[ $rc -eq 0 ]] && below '$val' 2.6"
show_if_failed char_lm

echo "layers.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
