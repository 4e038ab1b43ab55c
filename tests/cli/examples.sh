#!/usr/bin/env bash
# The example programs as a user runs them, each held to what its header promises:
# linear_regression recovers w = 2.5 and b = -1 within 0.05, polynomial_fit the
# weights [5, 0, 3] within 0.1, mnist_mlp reaches a test accuracy of at least 0.95 on
# the shipped digits and fails cleanly (exit 1, status name, file) on a missing folder.
# Usage: examples.sh BIN_DIR   (VKT_DATA_DIR: the shipped digits, for mnist_mlp)
set -u
bin=$1
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
# within VALUE TARGET TOL: VALUE is a number and |VALUE - TARGET| <= TOL.
within() { awk -v v="$1" -v t="$2" -v e="$3" \
    'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v - t <= e && t - v <= e) }'; }
# at_least VALUE MIN: VALUE is a number and VALUE >= MIN.
at_least() { awk -v v="$1" -v m="$2" 'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v >= m) }'; }
# field NAME LINE: the value of the first word "NAME=value" in LINE.
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }
# run NAME [ARGS]: runs an example; sets out (stdout and stderr), rc, and res (its last
# "result: " line); shows the output afterwards if one of its checks failed.
run() { out=$("$bin/$1" "${@:2}" 2>&1); rc=$?; res=$(grep '^result: ' <<<"$out" | tail -1); }
shown=0
show_if_failed() { if [[ $fail -gt $shown ]]; then echo "--- $1 printed:" >&2; echo "$out" >&2; fi; shown=$fail; }

run linear_regression
check "linear_regression exits 0" "[[ $rc -eq 0 ]]"
w=$(field w "$res") b=$(field b "$res")
check "linear_regression recovers w = 2.5 within 0.05 (w=$w)" "within '$w' 2.5 0.05"
check "linear_regression recovers b = -1 within 0.05 (b=$b)" "within '$b' -1 0.05"
show_if_failed linear_regression

run polynomial_fit
check "polynomial_fit exits 0" "[[ $rc -eq 0 ]]"
weights=$(sed -nE 's/.*weights=\[([^]]*)\].*/\1/p' <<<"$res" | tr -d ' ')
IFS=, read -r w2 w1 w0 <<<"$weights"
check "polynomial_fit: x^2 weight 5 within 0.1 (${w2:-})" "within '${w2:-}' 5 0.1"
check "polynomial_fit: x weight 0 within 0.1 (${w1:-})" "within '${w1:-}' 0 0.1"
check "polynomial_fit: constant 3 within 0.1 (${w0:-})" "within '${w0:-}' 3 0.1"
show_if_failed polynomial_fit

start=$SECONDS
run mnist_mlp
check "mnist_mlp exits 0" "[[ $rc -eq 0 ]]"
check "mnist_mlp prints a line per epoch" "[[ \$(grep -c '^epoch ' <<<\"\$out\") -ge 1 ]]"
acc=$(field test_accuracy "$res") loss=$(field test_loss "$res")
check "mnist_mlp reaches test_accuracy >= 0.95 (test_accuracy=$acc)" "at_least '$acc' 0.95"
check "mnist_mlp prints a test loss (test_loss=$loss)" "at_least '$loss' 0"
show_if_failed mnist_mlp
echo "mnist_mlp: $((SECONDS - start)) s, $res"

run mnist_mlp /nonexistent/mnist
check "mnist_mlp on a missing folder: exit 1 naming VKT_ERROR_IO and the file" \
    "[[ $rc -eq 1 ]] && grep -q 'VKT_ERROR_IO.*/nonexistent/mnist/train-images' <<<\"\$out\""
show_if_failed "mnist_mlp /nonexistent/mnist"

echo "examples: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
