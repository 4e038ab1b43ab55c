#!/bin/bash
# check_layers_test.sh - scripts/check_layers.sh passes on a copy of the tree and catches
# each planted violation: an include up a layer, one across to a sibling layer, a program
# reaching into engine/, an OS header outside engine/platform, an include that names
# no file, and engine/parallel reading graph internals past graph/runtime.h. Run by ctest (check_layers_planted).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$SRC/engine" "$SRC/shaders" "$SRC/include" "$SRC/tools" "$SRC/examples" "$TMP/"
CHECK="$SRC/scripts/check_layers.sh"
failures=0

if ! out=$(bash "$CHECK" "$TMP" 2>&1); then
    echo "FAIL: the unmodified copy does not pass:"
    echo "$out"
    exit 1
fi

# plant FILE LINE EXPECTED: appends LINE to FILE, expects exit status 1 and EXPECTED (and
# the file's name) in the output, then restores the file.
plant() {
    local file=$1 line=$2 want=$3 out rc
    cp "$TMP/$file" "$TMP/$file.orig"
    printf '%s\n' "$line" >> "$TMP/$file"
    out=$(bash "$CHECK" "$TMP" 2>&1)
    rc=$?
    if [ "$rc" -ne 1 ] || [[ $out != *"$file:"* ]] || [[ $out != *"$want"* ]]; then
        echo "FAIL: '$line' in $file: exit $rc, expected 1 and '$want':"
        echo "$out"
        failures=$((failures + 1))
    else
        echo "ok: '$line' in $file: $(echo "$out" | head -1)"
    fi
    mv "$TMP/$file.orig" "$TMP/$file"
}

plant engine/gpu/buffer.c '#include "parallel/trainer.h"' "goes up or across a layer"
plant engine/kernels/unary.c '#include "graph/graph.h"' "goes up or across a layer"
plant engine/core/error.c '#include "../gpu/gpu.h"' "goes up or across a layer"
plant engine/io/summary.c '#include "data/data.h"' "goes up or across a layer"
plant shaders/push.h '#include "kernels/ref.h"' "goes up or across a layer"
plant engine/gpu/stream.c '#include <pthread.h>' "engine/platform only"
plant engine/graph/run.c '#include <volk.h>' "engine/gpu only"
plant tools/cli_util.c '#include "graph/model.h"' "programs use include/vkt.h"
plant examples/mnist_mlp/mnist_mlp.c '#include "platform/platform.h"' "programs use include/vkt.h"
plant engine/optim/update.c '#include "no/such/header.h"' "names no file"
plant engine/parallel/reduce_world.c '#include <mpi.h>' "world_mpi*.[ch] only"
plant engine/parallel/ps.c '#include "world_mpi.h"' "private to"
plant engine/parallel/trainer.c '#include "graph/model.h"' "graph/runtime.h only"
plant engine/parallel/trainer.h '#include "../graph/graph.h"' "graph/runtime.h only"
plant include/vkt/compute.h '#include "graph.h"' "the public header includes"
plant include/vkt/distributed.h '#include "training.h"' "the public header includes"
plant include/vkt/base.h '#include <zlib.h>' "C standard headers only"
plant include/vkt.h '#include "../engine/graph/graph.h"' "the public header includes"

if ! out=$(bash "$CHECK" "$TMP" 2>&1); then
    echo "FAIL: the restored copy does not pass:"
    echo "$out"
    exit 1
fi
[ "$failures" -eq 0 ] || exit 1
echo "check_layers catches every planted violation"
