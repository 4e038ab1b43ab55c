#!/usr/bin/env bash
# The Windows build, cross-compiled with mingw-w64 (cmake/mingw-w64.cmake) and run under
# Wine: Wine's vulkan-1.dll reaches the host's Vulkan driver (lavapipe here), through its
# X11 driver, hence xvfb-run. Installs what is missing (root or sudo), builds the library
# (static and DLL), the examples and vkt.exe, checks that the DLL exports exactly the
# functions vkt.h declares, runs the examples, each held to what its header promises, and
# vkt.exe (devices; the default train job, held to the Linux default's accuracy; a bad
# option).
# Usage: scripts/windows.sh [BUILD_DIR]   (default build-win)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-win}
need=()
for p in gcc-mingw-w64-x86-64 libz-mingw-w64-dev wine wine64 xvfb xauth; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [[ ${#need[@]} -gt 0 ]]; then
    sudo=; [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get install -y --no-install-recommends "${need[@]}"
fi
examples=(linear_regression polynomial_fit mnist_mlp)
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j2 --target vktrain vktrain_shared vktrain_static vkt "${examples[@]}"
set +e # the checks count failures themselves

pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
within() { awk -v v="$1" -v t="$2" -v e="$3" \
    'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v - t <= e && t - v <= e) }'; }
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }

grep -oE '^VKT_API [^(]*\bvkt_[a-z0-9_]+\(' include/vkt.h | grep -oE 'vkt_[a-z0-9_]+\($' |
    tr -d '(' | sort -u >"$dir/api.txt"
x86_64-w64-mingw32-objdump -p "$dir/libvktrain.dll" |
    sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' | sed -nE 's/^\s*\[ *[0-9]+\] (.*)$/\1/p' |
    sort -u >"$dir/dll_exports.txt"
check "libvktrain.dll exports exactly vkt.h's $(wc -l <"$dir/api.txt") functions" \
    "cmp -s '$dir/api.txt' '$dir/dll_exports.txt'"

export WINEDEBUG=-all LP_NUM_THREADS=1 WINEPREFIX=${WINEPREFIX:-$PWD/$dir/wineprefix}
# run NAME [ARGS]: one program under Wine; sets out, rc and res (its last result line).
run() {
    out=$(cd "$dir" && timeout 600 xvfb-run -a wine "./$1.exe" "${@:2}" 2>&1 | tr -d '\r'
          exit "${PIPESTATUS[0]}"); rc=$? # the program's status (xvfb-run passes it on)
    res=$(grep '^result: ' <<<"$out" | tail -1)
    echo "$1: ${res:-no result line}"
}
run linear_regression
check "linear_regression.exe: w = 2.5 within 0.05" "within '$(field w "$res")' 2.5 0.05"
check "linear_regression.exe: b = -1 within 0.05" "within '$(field b "$res")' -1 0.05"
run polynomial_fit
weights=$(sed -nE 's/.*weights=\[([^]]*)\].*/\1/p' <<<"$res" | tr -d ' ')
IFS=, read -r w2 w1 w0 <<<"$weights"
check "polynomial_fit.exe: weights within 0.1 of [5, 0, 3] ($weights)" \
    "within '${w2:-}' 5 0.1 && within '${w1:-}' 0 0.1 && within '${w0:-}' 3 0.1"
run mnist_mlp "Z:$PWD/data/mnist" # Wine maps the host's / to drive Z:
acc=$(field test_accuracy "$res")
check "mnist_mlp.exe: test accuracy >= 0.95 ($acc)" \
    "awk -v a='$acc' 'BEGIN { exit !(a ~ /^[0-9.]+$/ && a >= 0.95) }'"

# vkt.exe: the device list, the default job (MNIST MLP, 620 steps, about 8 s under Wine
# here), held to what tests/cli/train.sh asks of the Linux one, and a bad option.
run vkt devices
check "vkt.exe devices: exit 0, lists device 0 ($(grep -m1 '^device 0' <<<"$out"))" \
    "[[ $rc -eq 0 ]] && grep -q '^device 0: ' <<<\"\$out\""
run vkt train --data "Z:$PWD/data/mnist"
acc=$(field test_accuracy "$res")
check "vkt.exe train: exit 0, a well-formed result line" \
    "[[ $rc -eq 0 ]] && grep -Eq '^result: test_accuracy=[0-9.]+ test_loss=[0-9.]+ steps=620 samples_per_s=[0-9.]+ seconds=[0-9.]+ replicas=1 mode=sync\$' <<<\"\$res\""
check "vkt.exe train: test accuracy >= 0.95 ($acc)" \
    "awk -v a='$acc' 'BEGIN { exit !(a ~ /^[0-9.]+$/ && a >= 0.95) }'"
run vkt train --lr nan
check "vkt.exe train --lr nan: exit 2 naming the option" \
    "[[ $rc -eq 2 ]] && grep -q -- \"--lr takes a finite number\" <<<\"\$out\""
echo "windows: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
