#!/usr/bin/env bash
# examples/csv_train on small CSV files made here: a 3-class problem whose two informative
# columns have scales 100 and 0.01 (standardization must cope) beside a noise column, and
# a regression y = 50 + 20 x1^2 - 3 x2 + N(0, 1). Each must learn (training loss falls
# from the first progress line to the last; validation accuracy >= 0.9, or validation
# RMSE below 4 where the target's standard deviation is about 24), save a checkpoint,
# model.safetensors and csv_train.txt, and the saved model must load again (--load) and
# score the whole file as well as during training. Bad input: a missing label column and
# a ragged row give exit 1 with a message naming them; no arguments give exit 2. Any
# number of feature columns (4500 here), and csv_train.txt never replaces the data file.
# Usage: csv_train.sh BIN_DIR
set -u
bin=$1
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
num() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { if (v !~ /^-?[0-9]+(\.[0-9]+)?$/) exit 1;
    exit !((op == ">=" && v >= t) || (op == "<" && v < t) || (op == ">" && v > t)) }'; }
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export LP_NUM_THREADS=${LP_NUM_THREADS:-1}

# deterministic data (awk's srand with a seed), Box-Muller normals
awk 'BEGIN { srand(3); print "a,b,noise,species";
  split("0 3 1", cx, " "); split("0 1 4", cy, " ");
  for (i = 0; i < 600; i++) { c = i % 3;
    g1 = sqrt(-2 * log(1 - rand())) * cos(6.2831853 * rand());
    g2 = sqrt(-2 * log(1 - rand())) * cos(6.2831853 * rand());
    printf "%g,%g,%g,%d\n", 100 * (cx[c+1] + 0.7 * g1), 0.01 * (cy[c+1] + 0.7 * g2), rand(), c } }' \
    > "$dir/cls.csv"
awk 'BEGIN { srand(4); print "price,x1,x2";
  for (i = 0; i < 600; i++) { x1 = 4 * rand() - 2; x2 = 10 * rand();
    g = sqrt(-2 * log(1 - rand())) * cos(6.2831853 * rand());
    printf "%g,%g,%g\n", 50 + 20 * x1 * x1 - 3 * x2 + g, x1, x2 } }' > "$dir/reg.csv"

show() { if [[ $fail -gt 0 ]]; then echo "--- $1 printed:" >&2; echo "$out" >&2; fi; }
first_last_loss() { grep '^epoch ' <<<"$out" | sed -n '1p;$p' | sed -E 's/.*train_loss=([0-9.]+).*/\1/'; }

out=$("$bin/csv_train" --epochs 20 --out "$dir/m1" "$dir/cls.csv" species 2>&1); rc=$?
res=$(grep '^result: ' <<<"$out")
check "classify exits 0" "[[ $rc -eq 0 ]]"
read -r l0 l1 <<<"$(first_last_loss | tr '\n' ' ')"
check "classify: the training loss falls ($l0 -> $l1)" "num '${l1:-x}' '<' '${l0:-0}'"
acc=$(field val_accuracy "$res")
check "classify: val_accuracy >= 0.9 ($acc)" "num '$acc' '>=' 0.9"
check "classify: checkpoint, safetensors and spec saved" \
    "ls $dir/m1/ckpt-*.vkt >/dev/null && [[ -s $dir/m1/model.safetensors && -s $dir/m1/csv_train.txt ]]"
check "classify: safetensors header names out.w [32, 3]" \
    "head -c 400 $dir/m1/model.safetensors | grep -aq '\"out.w\":{\"dtype\":\"F32\",\"shape\":\[32,3\]'"
show classify
out=$("$bin/csv_train" --load "$dir/m1" "$dir/cls.csv" 2>&1); rc=$?
res=$(grep '^result: ' <<<"$out")
acc2=$(field accuracy "$res")
check "classify: the saved model loads and scores the file (accuracy $acc2 >= 0.9)" \
    "[[ $rc -eq 0 ]] && num '$acc2' '>=' 0.9"
show "classify --load"

out=$("$bin/csv_train" --task regress --epochs 40 --out "$dir/m2" "$dir/reg.csv" price 2>&1); rc=$?
res=$(grep '^result: ' <<<"$out")
check "regress exits 0" "[[ $rc -eq 0 ]]"
read -r l0 l1 <<<"$(first_last_loss | tr '\n' ' ')"
check "regress: the training loss falls ($l0 -> $l1)" "num '${l1:-x}' '<' '${l0:-0}'"
rmse=$(field val_rmse "$res")
check "regress: val_rmse < 4 ($rmse)" "num '$rmse' '<' 4"
show regress
out=$("$bin/csv_train" --load "$dir/m2" "$dir/reg.csv" 2>&1); rc=$?
rmse2=$(field rmse "$(grep '^result: ' <<<"$out")")
check "regress: the saved model loads (rmse $rmse2 < 4)" "[[ $rc -eq 0 ]] && num '$rmse2' '<' 4"
show "regress --load"

out=$("$bin/csv_train" "$dir/cls.csv" nope 2>&1); rc=$?
check "a missing label column: exit 1 naming it" "[[ $rc -eq 1 ]] && grep -q \"no label column 'nope'\" <<<\"\$out\""
printf 'price,x1,x2\n1,2,3\n4,5\n' > "$dir/ragged.csv"
out=$("$bin/csv_train" --task regress "$dir/ragged.csv" price 2>&1); rc=$?
check "a ragged row: exit 1 naming line 3" "[[ $rc -eq 1 ]] && grep -q 'line 3' <<<\"\$out\""
out=$("$bin/csv_train" 2>&1); rc=$?
check "no arguments: usage, exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
# Any number of feature columns (before: more than 4096 overflowed the statistics, a
# segmentation fault on the classification path; regression refused them): 4500 columns,
# two informative, both tasks, and the saved model loads.
awk 'BEGIN { srand(6); for (c = 0; c < 4500; c++) printf "f%d,", c; print "label";
  for (r = 0; r < 60; r++) { for (c = 0; c < 4500; c++) printf "%.3f,", rand() + (c < 2 ? 3 * (r % 2) : 0);
  print r % 2 } }' >"$dir/wide.csv"
out=$("$bin/csv_train" --epochs 5 --out "$dir/w1" "$dir/wide.csv" label 2>&1); rc=$?
check "4500 features, classify: exit 0, 4500 features read" "[[ $rc -eq 0 ]] && grep -q '4500 features, classification' <<<\"\$out\" && grep -q '^result: val_accuracy=' <<<\"\$out\""
show "wide classify"
out=$("$bin/csv_train" --load "$dir/w1" "$dir/wide.csv" 2>&1); rc=$?
check "4500 features: the saved model loads" "[[ $rc -eq 0 ]] && grep -q '^result: accuracy=' <<<\"\$out\""
out=$("$bin/csv_train" --task regress --epochs 5 --out "$dir/w2" "$dir/wide.csv" label 2>&1); rc=$?
check "4500 features, regress (lines of 27 KB): exit 0" "[[ $rc -eq 0 ]] && grep -q '4500 features, regression' <<<\"\$out\""
show "wide regress"
# csv_train.txt is written by the output rule: never the data file it trained on
mkdir -p "$dir/self" && cp "$dir/cls.csv" "$dir/self/csv_train.txt"
out=$("$bin/csv_train" --epochs 1 --out "$dir/self" "$dir/self/csv_train.txt" species 2>&1); rc=$?
check "--out holding the data as csv_train.txt: exit 1, the data kept" "[[ $rc -eq 1 ]] && grep -q 'is an input of this command' <<<\"\$out\" && cmp -s \"$dir/cls.csv\" \"$dir/self/csv_train.txt\""

out=$("$bin/csv_train" --load "$dir/none" "$dir/cls.csv" 2>&1); rc=$?
check "--load of a folder without a model: exit 1" "[[ $rc -eq 1 ]] && grep -q csv_train.txt <<<\"\$out\""

echo "csv_train: classify val_accuracy=$acc (loaded: $acc2), regress val_rmse=$rmse (loaded: $rmse2)"
echo "csv_train: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
