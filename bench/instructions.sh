#!/usr/bin/env bash
# The lavapipe no-regression check (issue 20 item 6, issue 22's "fp32 does not regress"),
# measured in instructions rather than time: on a shared machine a wall clock spreads by
# 2-5x, while valgrind's count of the instructions a run executes (cachegrind with
# --cache-sim=no, "I refs") moves by a few hundredths of a percent. Two revisions are built
# apart (git worktrees, Release, the vkt target only) and each runs the same benchmarks
# under valgrind with LP_NUM_THREADS=1, lavapipe's threads included:
#   train   `vkt bench train --warmup 0`: one step and its GEMM replay, the difference
#           of a 30-step and a 10-step run divided by 20
#   gemm    `vkt bench gemm --sizes 1024 --min-seconds 0`: the whole run
#   cnn     `vkt bench layers --model cnn --runs 2`: one step, the difference of a 6-step
#           and a 2-step run over 4 (--runs is the per-op profile's, the same in both)
#   charlm  `vkt bench layers --model charlm --runs 2`: the same
# Each command runs once without valgrind first, so both revisions read a warm pipeline
# cache (their own, VKT_CACHE_DIR per revision), then twice under valgrind, keeping the
# smaller count: a shader compile can still land in one counted run (Mesa's disk cache
# churned by other builds; measured on 2026-11-27: +103 M in a 30-step train run, +94 M
# in a cnn run, gone when repeated), and a compile only adds.
# Prints one table, base | head | head / base; a ratio within 1 +- 0.05 is the issue's
# bound. Counts are kept per commit under OUT (default /tmp/vkt-instructions), so a later
# run against the same base counts only the new head.
#   bench/instructions.sh BASE [HEAD]     revisions (default HEAD: HEAD); e.g. 29f8103
# Takes about 20-40 minutes a revision on one idle core (valgrind runs lavapipe ~50x
# slower); needs valgrind (apt-get install valgrind).
set -euo pipefail
base=${1:?usage: bench/instructions.sh BASE [HEAD]}
head=${2:-HEAD}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/vkt-instructions}
command -v valgrind >/dev/null || { echo "valgrind missing: apt-get install -y valgrind" >&2; exit 1; }
mkdir -p "$out"

# The instructions of one command (run from the revision's tree, so data/ is its own).
count() { # dir cmd...
  local dir=$1 log
  shift
  log=$(mktemp)
  (cd "$dir" && "$@" >/dev/null 2>&1) || { echo "failed: $*" >&2; rm -f "$log"; exit 1; }
  local n best=
  for n in 1 2; do # the smaller of two counts: a compile that lands in one only adds
    (cd "$dir" && valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
         "$@" >/dev/null 2>"$log") ||
      { echo "failed under valgrind: $*" >&2; cat "$log" >&2; exit 1; }
    n=$(sed -n 's/.*I *refs: *//p' "$log" | tr -d ',' | head -1)
    [[ -z $best || $n -lt $best ]] && best=$n
  done
  echo "$best"
  rm -f "$log"
}

# Builds one revision apart and writes its four figures to $out/<sha>.counts.
measure() { # rev
  local sha dir
  sha=$(git -C "$repo" rev-parse --short=7 "$1^{commit}")
  if [[ -s $out/$sha.counts ]]; then echo "$sha"; return; fi
  dir=$out/tree-$sha
  [[ -d $dir ]] || git -C "$repo" worktree add -q --detach "$dir" "$sha" >&2
  cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$dir/build" -j2 --target vkt >/dev/null
  local vkt=$dir/build/vkt t30 t10 g c6 c2 l6 l2
  export LP_NUM_THREADS=1 VKT_CACHE_DIR=$dir/build/cache
  echo "counting $sha ..." >&2
  t30=$(count "$dir" "$vkt" bench train --steps 30 --warmup 0)
  t10=$(count "$dir" "$vkt" bench train --steps 10 --warmup 0)
  g=$(count "$dir" "$vkt" bench gemm --sizes 1024 --min-seconds 0)
  c6=$(count "$dir" "$vkt" bench layers --model cnn --runs 2 --steps 6)
  c2=$(count "$dir" "$vkt" bench layers --model cnn --runs 2 --steps 2)
  l6=$(count "$dir" "$vkt" bench layers --model charlm --runs 2 --steps 6)
  l2=$(count "$dir" "$vkt" bench layers --model charlm --runs 2 --steps 2)
  printf '%s %s %s %s\n' $(((t30 - t10) / 20)) "$g" $(((c6 - c2) / 4)) $(((l6 - l2) / 4)) \
    >"$out/$sha.counts"
  git -C "$repo" worktree remove --force "$dir" >&2 || true
  echo "$sha"
}

b=$(measure "$base")
h=$(measure "$head")
read -r bt bg bc bl <"$out/$b.counts"
read -r ht hg hc hl <"$out/$h.counts"
echo "instructions (valgrind Ir, LP_NUM_THREADS=1), $b against $h"
printf '| %-52s | %14s | %14s | %6s |\n' benchmark "$b" "$h" ratio
printf '|%s|%s|%s|%s|\n' ------------------------------------------------------ \
  ---------------- ---------------- --------
row() { printf '| %-52s | %14s | %14s | %6s |\n' "$1" "$2" "$3" \
          "$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.4f", b / a }')"; }
row "vkt bench train: one step and its GEMM replay" "$bt" "$ht"
row "vkt bench gemm --sizes 1024: whole run" "$bg" "$hg"
row "vkt bench layers --model cnn: one step" "$bc" "$hc"
row "vkt bench layers --model charlm: one step" "$bl" "$hl"
