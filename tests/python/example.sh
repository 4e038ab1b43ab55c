#!/usr/bin/env bash
# ctest python_example: examples/python_mlp/train_mlp.py (the MLP defined in Python, trained
# on NumPy arrays) reaches the accuracy of the C example examples/mnist_mlp: the same
# network, initialization, batches and optimizer through the same library, so the same
# result line, digit for digit, and at least 0.95 on the shipped digits.
#   example.sh MNIST_MLP_BINARY   (VKTRAIN_LIBRARY, PYTHONPATH, VKT_DATA_DIR from ctest)
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); echo "ok: $1"; else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
c=$("$1" "$VKT_DATA_DIR" 2>&1); crc=$?
py=$(/usr/bin/python3 "$here/examples/python_mlp/train_mlp.py" "$VKT_DATA_DIR" 2>&1); prc=$?
cres=$(grep '^result:' <<<"$c")
pres=$(grep '^result:' <<<"$py")
echo "C:      $cres"
echo "Python: $pres"
check "both exit 0 ($crc, $prc)" "[[ $crc -eq 0 && $prc -eq 0 ]]"
check "the Python example prints an epoch line per epoch" "[[ \$(grep -c '^epoch ' <<<\"\$py\") -eq 10 ]]"
check "the same result line as the C example" "[[ -n \"$cres\" && \"$cres\" == \"$pres\" ]]"
acc=$(sed -n 's/^result: test_accuracy=\([0-9.]*\).*/\1/p' <<<"$pres")
check "test accuracy >= 0.95 ($acc)" "awk 'BEGIN { exit !(\"$acc\" + 0 >= 0.95) }'"
[[ $fail -eq 0 ]] || { echo "$py" | tail -5 >&2; }
echo "python_example: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
