#!/bin/bash
# check_layers.sh [ROOT] - fails when an #include goes up a layer (docs/architecture.md,
# "Layers"). ROOT is the source tree (default: this script's repository). Run by ctest
# (test check_layers); tests/check_layers_test.sh plants violations and expects failure.
#
# The layers, lowest first. A file may include headers of its own folder and of any
# lower layer, never of a higher one nor of another folder of its own layer:
#
#   1 engine/platform   the only OS-specific code (files, clocks, threads, dlopen, signals)
#   2 engine/core       errors, interrupts, seeded random numbers
#   3 engine/gpu        Vulkan: instance, devices, memory, buffers, pipelines, streams
#   4 shaders/*.h       facts shared by C and GLSL (push and specialization constants,
#                       the dropout hash, the activations) and the generated
#                       <name>.spv.h headers of shaders/<name>.comp
#   5 engine/kernels    kernel dispatch and their CPU references
#   6 engine/graph      graphs, autodiff, the memory plan, models
#   7 engine/optim      optimizers
#   8 engine/data       data sets and loaders
#   8 engine/io         file formats: checkpoints, CRC-32C, summaries
#   9 engine/parallel   trainers, replicas, the world across processes
#  10 tools/, examples/ programs over the public API: include/vkt.h (examples: nothing
#                       else; tools: their own headers and engine/platform's OS
#                       services too), never the rest of engine/ nor shaders/
#
# engine/parallel sees the graph layer through one header, engine/graph/runtime.h (ids,
# counts, names, shapes and opaque pointers: no node, model or split internals).
#
# include/vkt.h, the public types and functions, is the vocabulary every layer may
# include: it includes its six parts, include/vkt/*.h, and each part only the parts
# below it (public_include) and C standard headers. In the library, operating-system headers
# (<pthread.h>, <unistd.h>, <dlfcn.h>, <windows.h>, <sys/...>, ...) belong to
# engine/platform alone, <volk.h> / <vulkan/...> to engine/gpu, and <mpi.h> to
# engine/parallel/world_mpi*.[ch] (world_mpi.h, which holds MPI's types, is included by
# those .c files only).
# Every quoted include must resolve to a file of the tree (or a generated .spv.h of an
# existing shader), so the check cannot be bypassed by a path it does not know.
set -u

ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
ROOT=$(cd "$ROOT" && pwd) || exit 2

# The layer of a path relative to ROOT into RANK (empty: none). Functions here return
# through globals, not $(...): no subshell per include keeps the check fast.
rank_of() {
    case "$1" in
    engine/platform/*) RANK=1 ;;
    engine/core/*) RANK=2 ;;
    engine/gpu/*) RANK=3 ;;
    shaders/*) RANK=4 ;;
    engine/kernels/*) RANK=5 ;;
    engine/graph/*) RANK=6 ;;
    engine/optim/*) RANK=7 ;;
    engine/data/* | engine/io/*) RANK=8 ;;
    engine/parallel/*) RANK=9 ;;
    tools/* | examples/*) RANK=10 ;;
    include/*) RANK=0 ;; # allowed from everywhere
    *) RANK= ;;
    esac
}

# Normalizes a relative path into NORM: removes "." and folds "dir/.." ("" if it leaves
# the tree).
normalize() {
    local IFS=/ part out=()
    for part in $1; do
        case "$part" in
        '' | .) ;;
        ..) if [ ${#out[@]} -eq 0 ]; then NORM=; return; fi
            unset 'out[${#out[@]}-1]' ;;
        *) out+=("$part") ;;
        esac
    done
    NORM="${out[*]}"
}

# The file (relative to ROOT) that `#include "name"` in a file of folder `dir` names,
# into TARGET (empty: none).
resolve() {
    local dir=$1 name=$2 cand
    TARGET=
    case "$name" in
    ./* | ../*)
        normalize "$dir/$name"
        [ -n "$NORM" ] && [ -f "$ROOT/$NORM" ] && TARGET=$NORM
        return ;;
    esac
    for cand in "$dir/$name" "engine/$name" "shaders/$name" "include/$name"; do
        normalize "$cand"
        if [ -f "$ROOT/$NORM" ]; then
            TARGET=$NORM
            return
        fi
    done
    case "$name" in
    *.spv.h) [ -f "$ROOT/shaders/${name%.spv.h}.comp" ] && TARGET="shaders/$name" ;;
    esac
}

# Whether the public header $1 may include the public header $2: vkt.h its six parts,
# each part the parts below it (base; compute, data and distributed over base; graph
# over compute; training over graph, data and distributed).
public_include() {
    case "$1:$2" in
    include/vkt.h:include/vkt/*.h) return 0 ;;
    include/vkt/compute.h:include/vkt/base.h | include/vkt/distributed.h:include/vkt/base.h) return 0 ;;
    include/vkt/data.h:include/vkt/base.h | include/vkt/training.h:include/vkt/data.h) return 0 ;;
    include/vkt/graph.h:include/vkt/base.h | include/vkt/graph.h:include/vkt/compute.h) return 0 ;;
    include/vkt/training.h:include/vkt/base.h | include/vkt/training.h:include/vkt/compute.h) return 0 ;;
    include/vkt/training.h:include/vkt/graph.h | include/vkt/training.h:include/vkt/distributed.h) return 0 ;;
    esac
    return 1
}

errors=0
fail() {
    echo "check_layers: $*" >&2
    errors=$((errors + 1))
}

cd "$ROOT" || exit 2
files=$(find engine shaders include tools examples -type f \
            \( -name '*.c' -o -name '*.h' \) 2>/dev/null | sort)
[ -n "$files" ] || { echo "check_layers: no sources under $ROOT" >&2; exit 2; }

for f in $files; do
    rank_of "$f"
    from_rank=$RANK
    from_dir=${f%/*}
    while IFS=: read -r line text; do
        if [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
            name=${BASH_REMATCH[1]}
            resolve "$from_dir" "$name"
            target=$TARGET
            if [ -z "$target" ]; then
                fail "$f:$line: #include \"$name\" names no file of the tree"
                continue
            fi
            rank_of "$target"
            to_rank=$RANK
            to_dir=${target%/*}
            if [ "$target" = engine/parallel/world_mpi.h ] &&
               [[ $f != engine/parallel/world_mpi*.c ]]; then
                fail "$f:$line: #include \"$name\": world_mpi.h (MPI's types) is private to" \
                     "engine/parallel/world_mpi*.c; the rest use world.h"
            elif [[ $f == engine/parallel/* && $target == engine/graph/* &&
                    $target != engine/graph/runtime.h ]]; then
                fail "$f:$line: #include \"$name\": engine/parallel sees the graph through" \
                     "graph/runtime.h only (no node, model or split internals)"
            elif [[ $f == include/* ]]; then
                public_include "$f" "$target" ||
                    fail "$f:$line: the public header includes \"$name\" ($target): vkt.h" \
                         "includes its parts, a part only the parts below it (vkt/base.h;" \
                         "compute, distributed: base; graph: compute; training: graph and" \
                         "distributed) and C standard headers"
            elif [ -z "$to_rank" ]; then
                fail "$f:$line: #include \"$name\" ($target) is outside every layer"
            elif [ "$to_dir" = "$from_dir" ] || [ "$to_rank" = 0 ]; then
                : # own folder, or the public header
            elif [ "$from_rank" = 10 ]; then
                case "$f:$to_dir" in
                tools/*:tools | tools/*:engine/platform) ;;
                *) fail "$f:$line: #include \"$name\" ($target): programs use include/vkt.h" \
                        "(and tools/ the platform layer) only" ;;
                esac
            elif [ "$to_rank" -ge "$from_rank" ]; then
                fail "$f:$line: #include \"$name\" ($target) goes up or across a layer:" \
                     "$from_dir is layer $from_rank, $to_dir is layer $to_rank"
            fi
        elif [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
            name=${BASH_REMATCH[1]}
            case "$name" in
            pthread.h | unistd.h | dlfcn.h | dirent.h | fcntl.h | signal.h | windows.h | \
            winsock2.h | io.h | direct.h | process.h | sys/* | mach-o/* | mach/*)
                case "$f" in
                engine/platform/* | tools/* | examples/*) ;;
                *) fail "$f:$line: <$name> is operating-system specific: engine/platform only" ;;
                esac ;;
            volk.h | volk.c | vulkan/*)
                case "$f" in
                engine/gpu/*) ;;
                *) fail "$f:$line: <$name> is Vulkan: engine/gpu only" ;;
                esac ;;
            mpi.h)
                case "$f" in
                engine/parallel/world_mpi*.[ch]) ;;
                *) fail "$f:$line: <mpi.h>: engine/parallel/world_mpi*.[ch] only" ;;
                esac ;;
            *)
                [[ $f == include/* ]] && case "$name" in
                    std*.h | limits.h | float.h) ;;
                    *) fail "$f:$line: the public header includes <$name> (C standard headers only)" ;;
                    esac ;;
            esac
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f")
done

if [ "$errors" -gt 0 ]; then
    echo "check_layers: $errors include(s) break the layers (the order: scripts/check_layers.sh," \
         "docs/architecture.md)" >&2
    exit 1
fi
echo "check_layers: $(echo "$files" | wc -l) files, every include within its layer or below"
