#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (-fsanitize=fuzzer,address) in
# build-fuzz/ and runs each for EXECUTIONS inputs (-runs) over a copy of its seeds and
# regression inputs, one process at a time. Prints per target the executions, the time
# and the result; exits 1 if any target crashed (its input is in
# build-fuzz/crashes/<target>/: copy it to tests/fuzz/regressions/<target>/, which the
# plain build's ctest fuzz_replay_<target> replays, and fix the reader).
#
#   scripts/fuzz.sh [EXECUTIONS] [TARGET...]     default 100000, every target
#   targets: idx csv tokens text checkpoint train_options safetensors
#   FUZZ_FLAGS="-max_total_time=180" adds libFuzzer flags; CC=clang-NN picks the compiler.
#
# Only the engine sources the targets need are compiled, directly by this script, into an
# archive the linker takes objects from: the Vulkan engine and the main build are untouched.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=100000
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    runs=$1
    shift
fi
all=(idx csv tokens text checkpoint train_options safetensors)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")
for t in "${targets[@]}"; do
    [[ -f tests/fuzz/fuzz_$t.c ]] || { echo "fuzz.sh: no target '$t' (${all[*]})" >&2; exit 2; }
done

CC=${CC:-clang}
if ! command -v "$CC" >/dev/null; then
    echo "fuzz.sh: $CC not found; on Debian: apt-get install -y clang" >&2
    exit 2
fi

out=build-fuzz
mkdir -p "$out/obj"
flags=(-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 -fno-omit-frame-pointer
       -Iinclude -Iengine -Itools -Itests/fuzz)
engine=(engine/data/idx.c engine/data/readers.c engine/data/text.c engine/data/dataset.c
        engine/data/loader.c engine/data/prefetch.c engine/core/error.c
        engine/platform/platform_posix.c engine/platform/threads_posix.c
        engine/io/checkpoint_format.c engine/io/safetensors.c engine/io/safetensors_map.c
        engine/platform/output.c engine/platform/output_posix.c engine/platform/host_posix.c
        engine/gpu/device_list.c tools/train_options.c tools/cli_util.c)

# The engine objects, instrumented for coverage and ASan; rebuilt when a source is newer.
objs=()
for src in "${engine[@]}"; do
    obj=$out/obj/$(basename "$src" .c).o
    if [[ ! -f $obj || $src -nt $obj ]]; then
        "$CC" "${flags[@]}" -fsanitize=fuzzer-no-link,address -c "$src" -o "$obj"
    fi
    objs+=("$obj")
done
rm -f "$out/libvkt_fuzz.a"
ar rcs "$out/libvkt_fuzz.a" "${objs[@]}"

failed=0
printf '%-14s %12s %9s %9s  %s\n' target executions seconds exec/s result
for t in "${targets[@]}"; do
    bin=$out/fuzz_$t
    "$CC" "${flags[@]}" -fsanitize=fuzzer,address "tests/fuzz/fuzz_$t.c" "$out/libvkt_fuzz.a" \
        -lz -ldl -lpthread -lm -o "$bin"
    corpus=$out/corpus/$t
    rm -rf "$corpus"
    mkdir -p "$corpus" "$out/crashes/$t"
    cp tests/fuzz/seeds/"$t"/* "$corpus"/
    cp tests/fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
    extra=()
    [[ -f tests/fuzz/$t.dict ]] && extra+=(-dict="tests/fuzz/$t.dict")
    log=$out/fuzz_$t.log
    start=$(date +%s.%N)
    set +e
    # close_fd_mask=3: the readers' and the option parser's messages are not findings;
    # libFuzzer and ASan still report on their own copy of stderr (into the log).
    # shellcheck disable=SC2086
    "$bin" -runs="$runs" -close_fd_mask=3 -print_final_stats=1 -max_len=4096 \
        -artifact_prefix="$out/crashes/$t/" "${extra[@]}" ${FUZZ_FLAGS:-} "$corpus" >"$log" 2>&1
    rc=$?
    set -e
    end=$(date +%s.%N)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    rate=$(awk -v n="${execs:-0}" -v s="$secs" 'BEGIN { printf "%d", (s > 0) ? n / s : 0 }')
    if [[ $rc -eq 0 ]]; then
        result=ok
    else
        failed=1
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        result="CRASH (rc $rc) input ${art:-?}, log $log"
    fi
    printf '%-14s %12s %9s %9s  %s\n' "$t" "${execs:-?}" "$secs" "$rate" "$result"
done
exit "$failed"
