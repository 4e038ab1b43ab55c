#!/usr/bin/env bash
# vkt train --logdir: the TensorBoard event file and the CSV beside it, checked by
# tests/tfevents_reader.py, a reader written independently of the writer (Python
# standard library only: its own CRC32C and protobuf decoder). Also: the reader catches
# a flipped byte and a truncation (so its checks bite), and an unusable log folder is a
# clear error. `vkt plot` makes a valid PNG of the curves (tests/png_check.py). Two runs
# on one folder at once write files of their own (a later writer of the same second adds
# "-2" after the stamp), and plot picks the newest CSV by stamp and writer number.
# Usage: summaries.sh BIN_DIR
set -u
bin=$1/vkt
here=$(cd "$(dirname "$0")/.." && pwd)
reader="/usr/bin/python3 $here/tfevents_reader.py"
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
train_tags=train/loss,train/learning_rate,train/samples_per_second
test_tags=test/accuracy,test/loss

check "reader's CRC32C known answers" "$reader --selftest >/dev/null"

out=$("$bin" train --steps 40 --log-every 5 --logdir "$tmp/a" 2>&1); rc=$?
check "train --logdir exits 0" "[[ $rc -eq 0 ]]"
check "it names the files" "grep -q 'summaries every 5 steps: $tmp/a/events.out.tfevents.' <<<\"\$out\""
out=$($reader "$tmp/a" --tags $train_tags,$test_tags --every 5 --last-step 40 2>&1); rc=$?
echo "$out"
check "event file and CSV valid, every 5 steps: 1 + 8*3 + 2 records" "[[ $rc -eq 0 ]] && grep -q '^tfevents_reader: 27 records ok' <<<\"\$out\""
csv=$(ls "$tmp"/a/scalars.*.csv)
# A run resumed at step 20 (--checkpoint-dir) logs at 25 the mean of its own 5 steps'
# losses (it divided their sum by 25, the absolute step: a fifth of the mean, measured
# 0.147 against 0.549 at step 30); the loss falls, so the record at 25 is at least 0.8 of
# the one at 30 (measured 0.735) and below 3 times it
"$bin" train --steps 20 --log-every 5 --checkpoint-dir "$tmp/ck" --quiet >/dev/null 2>&1
"$bin" train --steps 40 --log-every 5 --checkpoint-dir "$tmp/ck" --logdir "$tmp/r" --quiet >/dev/null 2>&1; rc=$?
at25=$(awk -F, '$3=="train/loss" && $1==25 {print $4}' "$tmp"/r/scalars.*.csv 2>/dev/null)
at30=$(awk -F, '$3=="train/loss" && $1==30 {print $4}' "$tmp"/r/scalars.*.csv 2>/dev/null)
check "resumed at 20: train/loss at 25 is its 5 steps' mean ($at25; at 30: $at30)" \
    "[[ $rc -eq 0 ]] && awk -v a='$at25' -v b='$at30' 'BEGIN { exit !(a != \"\" && b > 0 && a > 0.8 * b && a < 3 * b) }'"
check "train/loss at steps 5, 10, ..., 40" "[[ \$(grep ',train/loss,' '$csv' | cut -d, -f1 | tr '\n' ' ') == '5 10 15 20 25 30 35 40 ' ]]"
check "the loss falls" "awk -F, '\$3==\"train/loss\"{v[n++]=\$4} END{exit !(v[n-1] < v[0])}' '$csv'"

# Every epoch's evaluation: batch 200 makes 40 steps an epoch; the last step is no
# multiple of 7 and is logged too.
out=$("$bin" train --steps 60 --batch 200 --log-every 7 --logdir "$tmp/b" --quiet 2>&1); rc=$?
out=$($reader "$tmp/b" --tags $train_tags,$test_tags --every 7 --last-step 60 2>&1); rc=$?
echo "$out"
check "epoch evaluations and the final step" "[[ $rc -eq 0 ]] && [[ \$(grep ',test/accuracy,' $tmp/b/scalars.*.csv | cut -d, -f1 | tr '\n' ' ') == '40 60 ' ]] && grep -q '^60,.*,train/loss,' $tmp/b/scalars.*.csv"

# Async: staleness at the end.
out=$("$bin" train --steps 20 --replicas 2 --mode async --log-every 5 --logdir "$tmp/c" --quiet 2>&1); rc=$?
check "async run exits 0" "[[ $rc -eq 0 ]]"
out=$($reader "$tmp/c" --tags $train_tags,$test_tags,async/staleness_mean,async/staleness_max --every 5 --last-step 20 2>&1); rc=$?
echo "$out"
check "async summaries valid, with staleness" "[[ $rc -eq 0 ]]"

# The reader's checks bite: one flipped byte, a truncation.
cp -r "$tmp/a" "$tmp/flip"; f=$(ls "$tmp"/flip/events.out.tfevents.*)
printf '\x55' | dd of="$f" bs=1 seek=200 conv=notrunc status=none
out=$($reader "$tmp/flip" 2>&1); rc=$?
check "a flipped byte is caught (CRC mismatch)" "[[ $rc -eq 1 ]] && grep -q 'CRC mismatch' <<<\"\$out\""
cp -r "$tmp/a" "$tmp/cut"; f=$(ls "$tmp"/cut/events.out.tfevents.*)
truncate -s -3 "$f"
out=$($reader "$tmp/cut" 2>&1); rc=$?
check "a truncated file is caught" "[[ $rc -eq 1 ]] && grep -q 'truncated' <<<\"\$out\""

# Unusable log folder: a path below a regular file.
touch "$tmp/file"
out=$("$bin" train --steps 5 --logdir "$tmp/file/logs" 2>&1); rc=$?
check "unusable --logdir: exit 1, VKT_ERROR_IO naming the folder" "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_IO' <<<\"\$out\" && grep -q \"$tmp/file/logs\" <<<\"\$out\""
out=$("$bin" train --steps 5 --log-every 0 --logdir "$tmp/z" 2>&1); rc=$?
check "--log-every 0: exit 2" "[[ $rc -eq 2 ]] && grep -q 'log-every' <<<\"\$out\""

# vkt plot: a valid PNG (signature, chunk CRCs, IHDR, inflated size) with the three
# curves' colours; no CSV is a clear error.
out=$("$bin" plot "$tmp/b" -o "$tmp/curves.png" 2>&1); rc=$?
check "plot exits 0 and says what it drew" "[[ $rc -eq 0 ]] && grep -q 'train/loss (blue, 9 points)' <<<\"\$out\" && grep -q 'test/accuracy (green, 2)' <<<\"\$out\""
out=$(/usr/bin/python3 "$here/png_check.py" "$tmp/curves.png" 900 640 31,119,180 255,127,14 44,160,44 2>&1); rc=$?
echo "$out"
check "the PNG is valid and shows the curves" "[[ $rc -eq 0 ]]"
mkdir -p "$tmp/empty"
out=$("$bin" plot "$tmp/empty" -o "$tmp/x.png" 2>&1); rc=$?
check "plot of a folder without a CSV: exit 1 with a message" "[[ $rc -eq 1 ]] && grep -q 'no scalars' <<<\"\$out\" && [[ ! -e $tmp/x.png ]]"

# Two runs on one log folder at once (most often in the same second): each has files of
# its own, never the other's records (before: both appended to one event file and one
# CSV). Each pair, moved to a folder of its own, reads back whole.
"$bin" train --steps 10 --log-every 5 --logdir "$tmp/two" --quiet >"$tmp/two.a" 2>&1 & first=$!
"$bin" train --steps 10 --log-every 5 --logdir "$tmp/two" --quiet >"$tmp/two.b" 2>&1; rc_b=$?
wait $first; rc_a=$?
check "two runs on one --logdir: both exit 0" "[[ $rc_a -eq 0 && $rc_b -eq 0 ]]"
check "two event files and two CSVs" "[[ \$(ls '$tmp/two' | grep -c '^events\.out\.tfevents\.') -eq 2 && \$(ls '$tmp/two' | grep -c '^scalars\..*\.csv\$') -eq 2 ]]"
k=0
for c in "$tmp"/two/scalars.*.csv; do
    k=$((k + 1)); stem=${c##*/scalars.}; stem=${stem%.csv}; mkdir -p "$tmp/two$k"
    cp "$c" "$tmp/two/events.out.tfevents.$stem" "$tmp/two$k/" 2>/dev/null
    out=$($reader "$tmp/two$k" --tags $train_tags,$test_tags --every 5 --last-step 10 2>&1); rc=$?
    check "run $k's pair ($stem) reads back whole: $out" "[[ $rc -eq 0 ]]"
done

# vkt plot takes the newest CSV by its time stamp, then by the writer's number ("-2"
# after the stamp: a later run of the same second), as numbers
mkdir -p "$tmp/pick"
for name in 999.h 1000.h 1000-2.h 1000-10.h 998-3.h; do
    { echo "step,wall_time,tag,value"; echo "1,1.0,train/loss,1"; } >"$tmp/pick/scalars.$name.csv"
done
out=$("$bin" plot "$tmp/pick" -o "$tmp/pick.png" 2>&1); rc=$?
check "plot picks scalars.1000-10.h.csv ($out)" "[[ $rc -eq 0 ]] && grep -q 'from $tmp/pick/scalars.1000-10.h.csv:' <<<\"\$out\""

echo "summaries: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
