#!/usr/bin/env bash
# The installed package as a user meets it (cmake/Install.cmake):
#  - `cmake --install` into a scratch prefix puts vkt.h, libvktrain.so.X.Y (soname),
#    libvktrain.a, the CMake package, vktrain.pc, bin/vkt and share/vktrain in place;
#  - the shared library exports exactly the functions include/vkt.h declares, and so
#    does the static archive (nm -D / nm -g --defined-only), and no internal function
#    of the build tree's archive is named vkt_;
#  - examples/linear_regression builds outside the tree against the prefix with CMake
#    (shared, and static: then nothing of libvktrain is loaded at run time) and with
#    pkg-config (vktrain.pc: shared, Cflags with -DVKT_SHARED; vktrain-static.pc: the
#    archive, Cflags without it), and each program recovers w = 2.5, b = -1 within 0.05;
#  - the Python module under lib/python3/dist-packages imports and trains a step with the
#    prefix's own library (_install.py), also after the prefix moved;
#  - the prefix moved elsewhere still works (relocatable package and pkg-config file),
#    and the installed vkt trains from its own share/vktrain: with that folder removed
#    it fails cleanly, never falling back to the source tree's data.
# Usage: install.sh BUILD_DIR   (the build folder: vkt lives at its top)
set -u
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LP_NUM_THREADS=1
unset VKT_DATA_DIR
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
within() { awk -v v="$1" -v t="$2" -v e="$3" \
    'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v - t <= e && t - v <= e) }'; }
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }
# fits NAME PROGRAM: runs an example build of linear_regression and checks its result.
fits() {
    local out rc res
    out=$("$2" 2>&1); rc=$?
    res=$(grep '^result: ' <<<"$out" | tail -1)
    check "$1: exits 0 (rc=$rc)" "[[ $rc -eq 0 ]]"
    check "$1: w = 2.5 within 0.05 ($(field w "$res"))" "within '$(field w "$res")' 2.5 0.05"
    check "$1: b = -1 within 0.05 ($(field b "$res"))" "within '$(field b "$res")' -1 0.05"
    [[ $rc -eq 0 ]] || echo "$out" | tail -5 >&2
}

prefix=$tmp/prefix
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2; echo "FAIL: cmake --install"; exit 1
fi
libdir=$(cd "$prefix" && ls -d lib*/ | head -1); libdir=${libdir%/}
for f in include/vkt.h include/vkt/base.h include/vkt/compute.h include/vkt/graph.h \
         include/vkt/data.h include/vkt/training.h include/vkt/distributed.h bin/vkt "$libdir/libvktrain.a" "$libdir/libvktrain.so" \
         "$libdir/cmake/vktrain/vktrainConfig.cmake" "$libdir/pkgconfig/vktrain.pc" \
         "$libdir/pkgconfig/vktrain-static.pc" \
         share/vktrain/mnist/train-images-idx3-ubyte.gz \
         share/vktrain/austen/pride_and_prejudice.txt; do
    check "installed: $f" "[[ -e '$prefix/$f' ]]"
done
so=$(readlink -f "$prefix/$libdir/libvktrain.so")
soname=$(readelf -d "$so" | sed -nE 's/.*SONAME.*\[(.*)\].*/\1/p')
check "soname libvktrain.so.<version> ($soname), its link installed" \
    "[[ '$soname' =~ ^libvktrain\.so\.[0-9]+(\.[0-9]+)?$ && -L '$prefix/$libdir/$soname' ]]"

# The contract: every function declared in vkt.h's parts (vkt/*.h), and nothing else.
cat "$prefix/include/vkt.h" "$prefix"/include/vkt/*.h | grep -oE '^VKT_API [^(]*\bvkt_[a-z0-9_]+\(' |
    grep -oE 'vkt_[a-z0-9_]+\($' | tr -d '(' | sort -u >"$tmp/api"
nm -D --defined-only "$so" | awk '{print $NF}' | sort -u >"$tmp/exports_shared"
nm -g --defined-only "$prefix/$libdir/libvktrain.a" 2>/dev/null | awk 'NF == 3 {print $3}' |
    sort -u >"$tmp/exports_static"
# Inside the library, internal functions carry their layer's prefix (plat_, gpu_, graph_,
# kref_...), never vkt_: the build tree's archive, before hiding, names no other vkt_.
nm -g --defined-only "$build/libvktrain.a" 2>/dev/null | awk 'NF == 3 {print $3}' |
    grep '^vkt_' | sort -u >"$tmp/vkt_named"
n=$(wc -l <"$tmp/api")
check "vkt.h declares the API ($n functions)" "[[ $n -gt 100 ]]"
check "shared library exports exactly vkt.h's functions: $(comm -3 "$tmp/exports_shared" "$tmp/api" |
    head -5 | tr '\n' ' ')" "cmp -s '$tmp/exports_shared' '$tmp/api'"
check "no internal function is named vkt_: $(comm -23 "$tmp/vkt_named" "$tmp/api" | head -5 |
    tr '\n' ' ')" "[[ -s '$tmp/vkt_named' && -z \"\$(comm -23 '$tmp/vkt_named' '$tmp/api')\" ]]"
check "static archive's global symbols are exactly vkt.h's functions: $(comm -3 "$tmp/exports_static" \
    "$tmp/api" | head -5 | tr '\n' ' ')" "cmp -s '$tmp/exports_static' '$tmp/api'"

# Builds outside the tree, against the prefix.
ex=$src/examples/linear_regression
cmake_build() { # NAME PREFIX [cmake args]: configures and builds $ex in $tmp/NAME
    local name=$1 pre=$2; shift 2
    cmake -S "$ex" -B "$tmp/$name" -DCMAKE_PREFIX_PATH="$pre" -DCMAKE_BUILD_TYPE=Release "$@" \
        >"$tmp/$name.log" 2>&1 && cmake --build "$tmp/$name" >>"$tmp/$name.log" 2>&1 ||
        { cat "$tmp/$name.log" >&2; return 1; }
}
check "CMake: find_package(vktrain) builds the example (shared)" "cmake_build shared '$prefix'"
fits "CMake, shared" "$tmp/shared/linear_regression"
check "CMake shared build loads the installed libvktrain" \
    "ldd '$tmp/shared/linear_regression' | grep -q '$prefix/$libdir/libvktrain.so'"
check "CMake: vktrain::vktrain_static builds the example" \
    "cmake_build static '$prefix' -DVKT_STATIC=ON"
fits "CMake, static" "$tmp/static/linear_regression"
check "static build loads no libvktrain" "! ldd '$tmp/static/linear_regression' | grep -q libvktrain"

pc() { PKG_CONFIG_PATH="$1/$libdir/pkgconfig" pkg-config "${@:2}" vktrain; }
check "pkg-config --modversion" "[[ \$(pc '$prefix' --modversion) == [0-9]*.[0-9]*.[0-9]* ]]"
pkgbuild() { # PREFIX OUT
    cc -std=c11 $(pc "$1" --cflags) "$ex/linear_regression.c" -o "$2" $(pc "$1" --libs) -lm \
        -Wl,-rpath,"$(pc "$1" --variable=libdir)"
}
check "pkg-config: the example compiles and links" "pkgbuild '$prefix' '$tmp/pc_example'"
fits "pkg-config" "$tmp/pc_example"
# Static linking through vktrain-static.pc: no VKT_SHARED in its Cflags (on Windows it
# would declare the functions dllimport, and a static program would not link), the
# archive named by path in Libs (-lvktrain would pick the shared library).
cflags=$(pc "$prefix" --cflags)
check "vktrain.pc: Cflags define VKT_SHARED ($cflags)" "grep -qw -- '-DVKT_SHARED' <<<'$cflags'"
pcs() { PKG_CONFIG_PATH="$1/$libdir/pkgconfig" pkg-config "${@:2}" vktrain-static; }
s_cflags=$(pcs "$prefix" --cflags) s_libs=$(pcs "$prefix" --libs)
check "vktrain-static.pc: Cflags without VKT_SHARED ($s_cflags)" \
    "[[ -n '$s_cflags' ]] && ! grep -q VKT_SHARED <<<'$s_cflags'"
archive=$(grep -oE '[^ ]*/libvktrain\.a' <<<"$s_libs")
check "vktrain-static.pc: Libs name the installed archive and its dependencies ($s_libs)" \
    "[[ -n '$archive' && \$(readlink -f '$archive') == \$(readlink -f '$prefix/$libdir/libvktrain.a') ]] &&
     grep -qw -- -lz <<<'$s_libs'"
pkgbuild_static() { # PREFIX OUT
    cc -std=c11 $(pcs "$1" --cflags) "$ex/linear_regression.c" -o "$2" $(pcs "$1" --libs) -lm
}
check "pkg-config static: the example compiles and links" "pkgbuild_static '$prefix' '$tmp/pcs_example'"
fits "pkg-config, static" "$tmp/pcs_example"
check "pkg-config static build loads no libvktrain" "! ldd '$tmp/pcs_example' | grep -q libvktrain"

# The Python module under <prefix>/lib/python3/dist-packages loads the prefix's library
# (Debian's python3 finds it there for the prefix /usr; elsewhere through PYTHONPATH).
pydir=lib/python3/dist-packages
mkdir -p "$tmp/cwd"
pycheck() { # PREFIX: imports vktrain from the prefix, trains a step, prints the library
    (cd "$tmp/cwd" && env -u VKTRAIN_LIBRARY PYTHONPATH="$1/$pydir" PYTHONDONTWRITEBYTECODE=1 \
        /usr/bin/python3 -c '
import numpy as np, vktrain
g = vktrain.Graph(seed=1)
x, y = g.input("x", (4, 3)), g.labels("y", 4)
loss = g.softmax_cross_entropy(g.dense(x, 2, "fc"), y)
t = vktrain.Trainer(g, loss, batch=4)
print(vktrain.library_path, t.step({x: np.ones((4, 3)), y: [0, 1, 0, 1]}))' 2>&1)
}
check "installed: the Python module and its _install.py" \
    "[[ -f '$prefix/$pydir/vktrain/__init__.py' && -f '$prefix/$pydir/vktrain/_install.py' ]]"
out=$(pycheck "$prefix")
lib=$(awk 'END { print $1 }' <<<"$out")
check "python3 imports it and trains a step with the prefix's library ($out)" \
    "[[ \$(readlink -f '$lib') == \$(readlink -f '$so') ]]"

# Relocated: the package and vkt work from wherever the prefix is.
moved=$tmp/elsewhere/usr
mkdir -p "$tmp/elsewhere" && mv "$prefix" "$moved"
check "CMake against the moved prefix" "cmake_build moved '$moved'"
fits "CMake, moved prefix" "$tmp/moved/linear_regression"
check "pkg-config against the moved prefix" "pkgbuild '$moved' '$tmp/pc_moved'"
fits "pkg-config, moved prefix" "$tmp/pc_moved"
check "pkg-config static against the moved prefix" "pkgbuild_static '$moved' '$tmp/pcs_moved'"
fits "pkg-config static, moved prefix" "$tmp/pcs_moved"
out=$(pycheck "$moved")
check "the Python module of the moved prefix loads its library ($out)" \
    "[[ \$(awk 'END { print \$1 }' <<<\"\$out\") == '$moved/'* ]]"
out=$(cd "$tmp/cwd" && "$moved/bin/vkt" train --steps 30 2>&1); rc=$?
check "installed vkt trains the shipped digits from its own share/vktrain (rc=$rc)" \
    "[[ $rc -eq 0 ]] && grep -q '^result: test_accuracy=' <<<\"\$out\""
rm -rf "$moved/share/vktrain/mnist"
out=$(cd "$tmp/cwd" && "$moved/bin/vkt" train --steps 30 2>&1); rc=$?
check "without its data it fails cleanly (rc=$rc), not reading the source tree's: $(head -c 300 <<<"$out")" \
    "[[ $rc -ne 0 ]] && grep -q 'VKT_ERROR_IO' <<<\"\$out\" && ! grep -q '$src/data' <<<\"\$out\""
check "... and VKT_DATA_DIR still points it at any folder" \
    "(cd '$tmp/cwd' && VKT_DATA_DIR='$src/data/mnist' '$moved/bin/vkt' train --steps 5 >/dev/null 2>&1)"
echo "install: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
