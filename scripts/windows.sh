#!/usr/bin/env bash
# The Windows build, cross-compiled with mingw-w64 (cmake/mingw-w64.cmake) and run under
# Wine: Wine's vulkan-1.dll reaches the host's Vulkan driver (lavapipe here), through its
# X11 driver, hence xvfb-run (and Xvfb for the tests). Installs what is missing (root or
# sudo), builds the library (static and DLL), the examples, vkt.exe and the C tests,
# checks that the DLL exports exactly the functions vkt.h declares, runs the examples,
# each held to what its header promises (csv_train to what tests/cli/csv_train.sh asks),
# vkt.exe (devices; the default train job, held to the Linux default's accuracy; a bad
# option), and every tests/test_*.c but those in wine_skip, two at a time.
# From a clean folder on 2 cores: 2 min 50 s (docs/portability.md).
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
examples=(linear_regression polynomial_fit mnist_mlp csv_train)
# The C tests: every tests/test_*.c (as tests/CMakeLists.txt), less those that cannot run
# here, each with its reason (docs/portability.md lists them too).
wine_skip=(
    # It checks that the Khronos validation layer reports errors: no Windows build of the
    # layer here (Debian's vulkan-validationlayers is the Linux one), so it cannot load.
    test_validation
)
tests=()
for src in tests/test_*.c; do
    name=$(basename "$src" .c)
    [[ " ${wine_skip[*]-} " == *" $name "* ]] || tests+=("$name")
done
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j2 --target vktrain vktrain_shared vktrain_static vkt "${examples[@]}" \
    "${tests[@]}"
set +e # the checks count failures themselves

pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
within() { awk -v v="$1" -v t="$2" -v e="$3" \
    'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v - t <= e && t - v <= e) }'; }
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }

cat include/vkt.h include/vkt/*.h | grep -oE '^VKT_API [^(]*\bvkt_[a-z0-9_]+\(' | grep -oE 'vkt_[a-z0-9_]+\($' |
    tr -d '(' | sort -u >"$dir/api.txt"
x86_64-w64-mingw32-objdump -p "$dir/libvktrain.dll" |
    sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' | sed -nE 's/^\s*\[ *[0-9]+\] (.*)$/\1/p' |
    sort -u >"$dir/dll_exports.txt"
check "libvktrain.dll exports exactly vkt.h's $(wc -l <"$dir/api.txt") functions" \
    "cmp -s '$dir/api.txt' '$dir/dll_exports.txt'"
imports() { x86_64-w64-mingw32-objdump -p "$1" | sed -nE 's/^\s*DLL Name: //p' | tr '\n' ' '; }
# Windows has no zlib1.dll (Wine brings one): zlib is linked in (cmake/mingw-w64.cmake)
for bin in libvktrain.dll vkt.exe; do
    check "$bin imports only Windows' own DLLs and vulkan-1 at run time ($(imports "$dir/$bin"))" \
        "! imports '$dir/$bin' | grep -qiE 'zlib|libgcc|winpthread'"
done

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

# examples/csv_train, held to what tests/cli/csv_train.sh asks of the Linux build on the
# same generated files: a 3-class problem (columns of scale 100 and 0.01 beside noise),
# validation accuracy >= 0.9, also after --load; a regression y = 50 + 20 x1^2 - 3 x2 +
# N(0, 1), validation RMSE < 4 (the target's deviation is about 24).
csv=$PWD/$dir/csv
rm -rf "$csv" && mkdir -p "$csv"
awk 'BEGIN { srand(3); print "a,b,noise,species";
  split("0 3 1", cx, " "); split("0 1 4", cy, " ");
  for (i = 0; i < 600; i++) { c = i % 3;
    g1 = sqrt(-2 * log(1 - rand())) * cos(6.2831853 * rand());
    g2 = sqrt(-2 * log(1 - rand())) * cos(6.2831853 * rand());
    printf "%g,%g,%g,%d\n", 100 * (cx[c+1] + 0.7 * g1), 0.01 * (cy[c+1] + 0.7 * g2), rand(), c } }' \
    >"$csv/cls.csv"
awk 'BEGIN { srand(4); print "price,x1,x2";
  for (i = 0; i < 600; i++) { x1 = 4 * rand() - 2; x2 = 10 * rand();
    g = sqrt(-2 * log(1 - rand())) * cos(6.2831853 * rand());
    printf "%g,%g,%g\n", 50 + 20 * x1 * x1 - 3 * x2 + g, x1, x2 } }' >"$csv/reg.csv"
at_least() { awk -v v="$1" -v t="$2" 'BEGIN { exit !(v ~ /^[0-9.]+$/ && v >= t) }'; }
below() { awk -v v="$1" -v t="$2" 'BEGIN { exit !(v ~ /^[0-9.]+$/ && v < t) }'; }
run csv_train --epochs 20 --out "Z:$csv/m1" "Z:$csv/cls.csv" species
acc=$(field val_accuracy "$res")
check "csv_train.exe classify: exit 0, val_accuracy >= 0.9 ($acc)" \
    "[[ $rc -eq 0 ]] && at_least '$acc' 0.9"
run csv_train --load "Z:$csv/m1" "Z:$csv/cls.csv"
acc=$(field accuracy "$res")
check "csv_train.exe --load: the saved model scores the file, accuracy >= 0.9 ($acc)" \
    "[[ $rc -eq 0 ]] && at_least '$acc' 0.9"
run csv_train --task regress --epochs 40 --out "Z:$csv/m2" "Z:$csv/reg.csv" price
rmse=$(field val_rmse "$res")
check "csv_train.exe regress: exit 0, val_rmse < 4 ($rmse)" "[[ $rc -eq 0 ]] && below '$rmse' 4"
run csv_train "Z:$csv/cls.csv" nope
check "csv_train.exe, a missing label column: exit 1 naming it" \
    "[[ $rc -eq 1 ]] && grep -q \"no label column 'nope'\" <<<\"\$out\""

# pkg-config for a Windows program (docs/install.md): examples/linear_regression built
# against the installed package with vktrain.pc (the DLL: its Cflags hold -DVKT_SHARED,
# so the functions are declared dllimport) and with vktrain-static.pc (libvktrain.a, no
# dllimport, which would not link), each run under Wine.
prefix=$PWD/$dir/prefix
rm -rf "$prefix"
cmake --install "$dir" --prefix "$prefix" >/dev/null
wpc() { PKG_CONFIG_PATH="$prefix/lib/pkgconfig" PKG_CONFIG_LIBDIR= pkg-config "$@"; }
cc_win() { # PC OUT [flags]: builds the example against the prefix through PC
    x86_64-w64-mingw32-gcc -std=c11 $(wpc --cflags "$1") examples/linear_regression/linear_regression.c \
        -o "$2" $(wpc --libs "$1") -lm "${@:3}"
}
for pc in vktrain vktrain-static; do
    exe=$prefix/bin/pc_$pc.exe
    if [[ $pc == vktrain ]]; then
        check "pkg-config $pc: Cflags hold -DVKT_SHARED ($(wpc --cflags $pc))" \
            "wpc --cflags $pc | grep -qw -- -DVKT_SHARED"
        check "pkg-config $pc: the example links against the DLL" \
            "cc_win $pc '$exe' -static-libgcc && imports '$exe' | grep -q libvktrain.dll"
    else
        check "pkg-config $pc: Cflags without VKT_SHARED ($(wpc --cflags $pc))" \
            "! wpc --cflags $pc | grep -q VKT_SHARED"
        check "pkg-config $pc: the example links the archive, importing no libvktrain.dll" \
            "cc_win $pc '$exe' -static && ! imports '$exe' | grep -q libvktrain"
    fi
    out=$(cd "$prefix/bin" && timeout 600 xvfb-run -a wine "./pc_$pc.exe" 2>&1 | tr -d '\r'
          exit "${PIPESTATUS[0]}"); rc=$?
    res=$(grep '^result: ' <<<"$out" | tail -1)
    echo "pc_$pc ($(imports "$exe")): ${res:-no result line}"
    check "pkg-config $pc, under Wine: w = 2.5 and b = -1 within 0.05 (rc=$rc)" \
        "[[ $rc -eq 0 ]] && within '$(field w "$res")' 2.5 0.05 && within '$(field b "$res")' -1 0.05"
done

# Every example from its own folder with CMake against the installed package, as a Windows
# user builds it (find_package(vktrain CONFIG); vktrain_DIR names the package because the
# toolchain confines package searches to mingw's root): the static library for each (with
# ZLIB_USE_STATIC_LIBS, so the program needs no zlib1.dll: Windows has none, Wine does),
# and polynomial_fit also against the DLL, both run under Wine (the DLL found through
# WINEPATH).
poly_ok() { # the result line of polynomial_fit in $res: weights within 0.1 of [5, 0, 3]
    local w2 w1 w0
    IFS=, read -r w2 w1 w0 <<<"$(sed -nE 's/.*weights=\[([^]]*)\].*/\1/p' <<<"$res" | tr -d ' ')"
    within "${w2:-}" 5 0.1 && within "${w1:-}" 0 0.1 && within "${w0:-}" 3 0.1
}
build_example() { # NAME FOLDER STATIC: configures and builds examples/NAME into FOLDER
    cmake -S "examples/$1" -B "$2" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/mingw-w64.cmake" \
        -DCMAKE_BUILD_TYPE=Release -Dvktrain_DIR="$prefix/lib/cmake/vktrain" \
        -DVKT_STATIC="$3" -DZLIB_USE_STATIC_LIBS="$3" >"$2.log" 2>&1 &&
        cmake --build "$2" >>"$2.log" 2>&1
}
rm -rf "$dir/ex" && mkdir -p "$dir/ex"
for ex in examples/*/; do
    name=$(basename "$ex")
    [[ -f $ex/CMakeLists.txt ]] || continue # examples/python_mlp: Python, no C build
    check "examples/$name builds from its folder against the installed package (static)" \
        "build_example $name '$dir/ex/$name' ON"
done
check "the static builds import only Windows' own DLLs ($(imports "$dir/ex/polynomial_fit/polynomial_fit.exe"))" \
    "! imports '$dir/ex/polynomial_fit/polynomial_fit.exe' | grep -qiE 'libvktrain|zlib1'"
check "examples/polynomial_fit builds against the installed DLL, importing libvktrain.dll" \
    "build_example polynomial_fit '$dir/ex/polynomial_fit-dll' OFF &&
     imports '$dir/ex/polynomial_fit-dll/polynomial_fit.exe' | grep -q libvktrain.dll"
for build in polynomial_fit polynomial_fit-dll; do
    out=$(cd "$dir/ex/$build" && WINEPATH="Z:$prefix/bin" timeout 600 xvfb-run -a wine \
          ./polynomial_fit.exe 2>&1 | tr -d '\r'; exit "${PIPESTATUS[0]}"); rc=$?
    res=$(grep '^result: ' <<<"$out" | tail -1)
    echo "installed-package $build: ${res:-no result line}"
    check "installed-package $build under Wine: weights within 0.1 of [5, 0, 3] (rc=$rc)" \
        "[[ $rc -eq 0 ]] && poly_ok"
done

# The tests, two at a time as ctest -j2 runs them (LP_NUM_THREADS=1, 300 s each), in the
# environment ctest gives them, under one X server (Xvfb picks a free display);
# VKT_TEST_WINE tells test_errors to leave out what Wine cannot show. test_op_table reads
# which ops test_graph_ops and test_layers checked: those start first, it runs last.
logs=$dir/wine-tests
rm -rf "$logs" && mkdir -p "$logs" "$dir/op-coverage" "$dir/test-cache"
Xvfb -displayfd 3 -nolisten tcp 3>"$logs/display" >/dev/null 2>&1 &
xvfb=$!
disown "$xvfb" # not one of the jobs counted and waited for below
for _ in $(seq 100); do [[ -s $logs/display ]] && break; sleep 0.1; done
trap 'kill $xvfb 2>/dev/null' EXIT
export DISPLAY=:$(cat "$logs/display") VKT_TEST_WINE=1
export VKT_DATA_DIR="Z:$PWD/data/mnist" VKT_CACHE_DIR="Z:$PWD/$dir/test-cache"
export VKT_OP_COVERAGE_DIR="Z:$PWD/$dir/op-coverage"
run_test() { # NAME: writes $logs/NAME.log and $logs/NAME.rc ("status seconds")
    local name=$1 s=$SECONDS cov=
    case $name in test_graph_ops | test_layers) cov="Z:$PWD/$dir/op-coverage/$name.ops" ;; esac
    (cd "$dir/tests" && VKT_OP_COVERAGE=$cov timeout 300 wine "./$name.exe" 2>&1 |
        tr -d '\r' >"../wine-tests/$name.log"; echo "${PIPESTATUS[0]}" >"../wine-tests/$name.rc")
    echo "$(cat "$logs/$name.rc") $((SECONDS - s))" >"$logs/$name.rc"
}
order=()
for name in test_graph_ops test_layers "${tests[@]}"; do
    [[ " ${order[*]-} " == *" $name "* || $name == test_op_table ]] || order+=("$name")
done
t_start=$SECONDS
running=0
for name in "${order[@]}"; do
    if [[ $running -ge 2 ]]; then wait -n; running=$((running - 1)); fi
    run_test "$name" &
    running=$((running + 1))
done
wait
[[ " ${tests[*]} " == *" test_op_table "* ]] && order+=(test_op_table) && run_test test_op_table
t_pass=0 t_fail=0
for name in "${order[@]}"; do
    read -r rc secs <"$logs/$name.rc"
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$logs/$name.log" | tail -1)
    if [[ $rc -eq 0 ]] && grep -Eq '(^|: )[0-9]+ passed, 0 failed$' <<<"$line"; then
        t_pass=$((t_pass + 1))
    else
        t_fail=$((t_fail + 1))
        grep -E 'FAIL|failed' "$logs/$name.log" | head -20 >&2
    fi
    echo "$name.exe: rc=$rc, $secs s, $line"
done
kill $xvfb 2>/dev/null
echo "tests under Wine: $t_pass of ${#tests[@]} passed, $t_fail failed, in $((SECONDS - t_start)) s"
check "tests under Wine: $t_pass of ${#tests[@]} passed in $((SECONDS - t_start)) s" \
    "[[ $t_fail -eq 0 && $t_pass -eq ${#tests[@]} ]]"
echo "windows: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
