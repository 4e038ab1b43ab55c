#!/usr/bin/env bash
# vkt train as a user runs it: the default run learns the shipped digits to >= 0.95
# test accuracy and ends with a well-formed result line; options work; a missing,
# truncated or corrupt data set gives a clear error naming the file, not a crash.
# Usage: train.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$("$bin" train 2>&1); rc=$?
last=$(tail -1 <<<"$out")
check "default run exits 0" "[[ $rc -eq 0 ]]"
check "result line is well formed" "grep -Eq '^result: test_accuracy=[0-9.]+ test_loss=[0-9.]+ steps=[0-9]+ samples_per_s=[0-9.]+ seconds=[0-9.]+ replicas=1 mode=sync\$' <<<\"\$last\""
acc=$(sed -E 's/.*test_accuracy=([0-9.]+).*/\1/' <<<"$last")
secs=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$last")
check "default run reaches test accuracy >= 0.95 (got $acc)" "awk -v a=$acc 'BEGIN{exit !(a >= 0.95)}'"
check "default run takes under 3 minutes (took ${secs}s)" "awk -v s=$secs 'BEGIN{exit !(s < 180)}'"
check "plain progress lines when not on a terminal" "grep -Eq '^step [0-9]+/620  loss [0-9.]+  [0-9]+ samples/s' <<<\"\$out\""
check "per-epoch evaluation lines" "grep -q '^epoch 1: test_accuracy=' <<<\"\$out\""

out=$("$bin" train --steps 30 --batch 50 --optimizer adam --hidden 64 --quiet 2>&1); rc=$?
check "options: adam, batch 50, one hidden layer, 30 steps" "[[ $rc -eq 0 ]] && grep -q 'steps=30 ' <<<\"\$out\" && [[ \$(wc -l <<<\"\$out\") -eq 1 ]]"
out=$("$bin" train --steps 5 --optimizer rmsprop 2>&1); rc=$?
check "unknown optimizer: exit 2 with a message" "[[ $rc -eq 2 ]] && grep -q \"unknown optimizer 'rmsprop'\" <<<\"\$out\""
out=$("$bin" train --help 2>&1); rc=$?
check "--help prints usage, exit 0" "[[ $rc -eq 0 ]] && grep -q -- '--hidden' <<<\"\$out\""

out=$("$bin" train --data "$tmp/none" 2>&1); rc=$?
check "missing data folder: exit 1 naming the file" "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_IO' <<<\"\$out\" && grep -q \"$tmp/none/train-images-idx3-ubyte\" <<<\"\$out\""
src=${VKT_DATA_DIR:-data/mnist}
mkdir -p "$tmp/trunc" "$tmp/corrupt"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  gunzip -c "$src/$f.gz" > "$tmp/trunc/$f"; cp "$src/$f.gz" "$tmp/corrupt/$f.gz"
done
truncate -s 100000 "$tmp/trunc/train-images-idx3-ubyte"
out=$("$bin" train --data "$tmp/trunc" 2>&1); rc=$?
check "truncated images: VKT_ERROR_FORMAT naming the file" "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_FORMAT' <<<\"\$out\" && grep -q 'trunc/train-images-idx3-ubyte' <<<\"\$out\" && grep -qi 'truncated' <<<\"\$out\""
printf '\xff\xff\xff\xff' | dd of="$tmp/corrupt/t10k-images-idx3-ubyte.gz" bs=1 seek=5000 conv=notrunc status=none
out=$("$bin" train --data "$tmp/corrupt" 2>&1); rc=$?
check "corrupt gzip: exit 1 naming the file" "[[ $rc -eq 1 ]] && grep -q 't10k-images-idx3-ubyte.gz' <<<\"\$out\""

# A run whose loss turns non-finite stops at that step, exit 1.
out=$("$bin" train --lr 1e6 --steps 50 2>&1); rc=$?
check "diverging run: exit 1, VKT_ERROR_DIVERGED naming the step" \
      "[[ $rc -eq 1 ]] && grep -Eq 'training failed at step [0-9]+: VKT_ERROR_DIVERGED: the loss is (-?nan|-?inf) at step [0-9]+' <<<\"\$out\""
# With checkpoints, the first save of the blown-up weights is refused (the divergence
# guard) naming the step and the checkpoint to go back to, which stays and exports.
"$bin" train --steps 5 --checkpoint-dir "$tmp/div" --quiet >/dev/null 2>&1
out=$("$bin" train --lr 1e6 --steps 50 --checkpoint-dir "$tmp/div" --save-every 1 --keep 0 2>&1); rc=$?
check "diverging run with checkpoints: exit 1, the save of step 6 refused, ckpt-5 named" \
      "[[ $rc -eq 1 ]] && grep -q 'cannot save a checkpoint: VKT_ERROR_DIVERGED: training diverged by step 6: .*the newest checkpoint, $tmp/div/ckpt-5.vkt, is from before' <<<\"\$out\""
n=$(ls "$tmp/div" | grep -c '^ckpt-.*\.vkt$')
check "its checkpoint from before is kept and exports ($n)" \
      "[[ $n -eq 1 ]] && \"$bin\" export --checkpoint-dir \"$tmp/div\" -o \"$tmp/div.st\" >/dev/null 2>&1"
out=$("$bin" train --batch 100000 --quiet 2>&1); rc=$?
check "a batch larger than the data: exit 1 saying so" \
      "[[ $rc -eq 1 ]] && grep -q 'fewer than one batch of 100000' <<<\"\$out\""
echo "train: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
