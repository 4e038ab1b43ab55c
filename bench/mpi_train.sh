#!/usr/bin/env bash
# Training across processes (mpirun -np R vkt train) against training in one process
# (vkt train --replicas N), side by side in one run, on the default MLP (784-256-128-10,
# batch 128, momentum, seed 1) and the shipped digits:
#  1. sync, --steps STEPS --quiet: samples/s for ranks x replicas per rank = 1x1 without
#     mpirun, 1x1 under mpirun -np 1, 2x1, 1x2, 2x2 (VKT_DEVICES=0,0 under -np 2), 4x1
#     and 1x4, and 1x2 again with LP_NUM_THREADS=2 (in one process every device shares
#     lavapipe's one compute thread pool, so 2 threads there match 2 ranks of 1 thread);
#     the best of RUNS rounds, every round running every case (the two 1x1 cases twice;
#     the start rotated each round), so a load passing over the machine falls on all of
#     them. Then SPLIT_RUNS rounds without --quiet for the split of a step: device time,
#     barrier wait, host averaging and MPI waits (the chief's figures: only rank 0
#     prints; the fastest run kept). Then a full default run (10 epochs) with -np 2 and
#     with --replicas 2: the same gradient sums up to rounding, so the same test
#     accuracy and loss to 4 digits are expected.
#  2. async: mpirun -np 2 --mode async against --mode async --replicas 2, then the same
#     four (sync and async, across ranks and in one process) with the last replica of the
#     last rank sleeping SLOW_MS ms per step (--slow-replica-ms): across ranks in async
#     mode the other rank should not wait for it. Best of RUNS_ASYNC rounds, without
#     --quiet (the per-replica lines are needed).
# Runs without mpirun get a terminal from script(1), as mpirun gives its ranks one: with
# output to a pipe and no --quiet, vkt train evaluates the test set after every epoch.
# Usage: bench/mpi_train.sh [BUILD_DIR]  (default: build; vkt built with VKT_MPI=ON)
#   STEPS=N (300), RUNS=N (3), SPLIT_RUNS=N (2), RUNS_ASYNC=N (2), SLOW_MS=M (20), FULL=0
#   skips the full runs, LOGS=DIR keeps every run's output there. LP_NUM_THREADS
#   defaults to 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
steps=${STEPS:-300}
runs=${RUNS:-3}
split_runs=${SPLIT_RUNS:-2}
runs_async=${RUNS_ASYNC:-2}
slow_ms=${SLOW_MS:-20}
data=$here/../data/mnist
vkt=$build/vkt
[[ -x $vkt ]] || { echo "build vkt first (cmake --build $build)"; exit 1; }
command -v mpirun >/dev/null ||
  { echo "mpirun missing: scripts/install-deps.sh (openmpi-bin)"; exit 1; }
command -v script >/dev/null || { echo "script(1) missing (util-linux)"; exit 1; }

# As root, more ranks than cores, no CMA single copy (blocked in containers), Open MPI
# yielding the core when idle (it is oversubscribed); one lavapipe thread per device.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe # Open MPI 5's oversubscribe
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export LP_NUM_THREADS=${LP_NUM_THREADS:-1}
unset VKT_DEVICES
mpi=(mpirun --bind-to none)
limit=${CASE_TIMEOUT:-300} # seconds: a hung run is killed and reported, not waited for

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "== machine: $cpu, $(nproc) cores; $(mpirun --version | head -1);" \
  "LP_NUM_THREADS=$LP_NUM_THREADS; load: $(cut -d' ' -f1-3 /proc/loadavg)"
t_begin=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
logs=${LOGS:-$tmp}
mkdir -p "$logs"

field() { sed -n "s/.*[ :]$2=\([^ ]*\).*/\1/p" "$1" | tail -1; } # key=value of a result line
calc() { awk "BEGIN { x = $1; printf \"$2\", x }"; }                # calc EXPR FORMAT
load1() { cut -d' ' -f1 /proc/loadavg; }
failed=()

# The command of a case, into CMD: p = one process, m = mpirun; RxN = ranks x replicas;
# t = lavapipe with 2 threads. MPI=1 when it runs under mpirun.
set_cmd() {
  MPI=1
  case $1 in
    p1x1) CMD=("$vkt" train) MPI=0 ;;
    m1x1) CMD=("${mpi[@]}" -np 1 "$vkt" train) ;;
    m2x1) CMD=("${mpi[@]}" -np 2 "$vkt" train) ;;
    p1x2) CMD=("$vkt" train --replicas 2) MPI=0 ;;
    p1x2t) CMD=(env LP_NUM_THREADS=2 "$vkt" train --replicas 2) MPI=0 ;;
    m2x2) CMD=(env "VKT_DEVICES=0,0" "${mpi[@]}" -np 2 "$vkt" train) ;;
    m4x1) CMD=("${mpi[@]}" -np 4 "$vkt" train) ;;
    p1x4) CMD=("$vkt" train --replicas 4) MPI=0 ;;
    *) echo "unknown case $1" >&2; exit 1 ;;
  esac
}
label() {
  case $1 in
    p1x1) echo "1x1, one process" ;; m1x1) echo "1x1, mpirun -np 1" ;;
    m2x1) echo "2x1, mpirun -np 2" ;; p1x2) echo "1x2, --replicas 2" ;;
    p1x2t) echo "1x2, --replicas 2, LP_NUM_THREADS=2" ;;
    m2x2) echo "2x2, -np 2, VKT_DEVICES=0,0" ;; m4x1) echo "4x1, mpirun -np 4" ;;
    p1x4) echo "1x4, --replicas 4" ;;
  esac
}

# run OUT CASE tty|quiet ARGS...: one run of vkt train; its output (carriage returns of
# the progress line turned into newlines) in OUT. Returns 1 when it failed or timed out.
run() {
  local out=$1 name=$2 how=$3 rc=0
  shift 3
  set_cmd "$name"
  CMD+=(--data "$data" --seed 1 "$@")
  if [[ $how == quiet ]]; then
    timeout -k 10 "$limit" "${CMD[@]}" --quiet > "$out.raw" 2>&1 || rc=$?
  elif [[ $MPI == 0 ]]; then
    timeout -k 10 "$limit" script -qfec "$(printf '%q ' "${CMD[@]}")" /dev/null \
      > "$out.raw" 2>&1 || rc=$?
  else
    timeout -k 10 "$limit" "${CMD[@]}" > "$out.raw" 2>&1 || rc=$?
  fi
  tr '\r' '\n' < "$out.raw" | grep -v '^$' | grep -v '^step [0-9]' > "$out" || true
  rm -f "$out.raw"
  if [[ $rc != 0 ]] || ! grep -q '^result:' "$out"; then
    failed+=("$(label "$name") $how $* (exit code $rc; output: $out)")
    echo "   FAILED (exit code $rc): ${CMD[*]} $*"
    tail -5 "$out" | sed 's/^/   | /'
    return 1
  fi
}

# best_into BEST NEW: keeps in BEST the output with the higher samples_per_s.
best_into() {
  local a b
  b=$(field "$2" samples_per_s)
  [[ -n $b ]] || return 0
  a=$(field "$1" samples_per_s 2>/dev/null || true)
  if [[ -z $a ]] || awk -v a="$a" -v b="$b" 'BEGIN { exit !(b > a) }'; then cp "$2" "$1"; fi
}

# ---- 1. sync: throughput, split, accuracy ------------------------------------------------
cases=(p1x1 m1x1 m2x1 p1x2 p1x2t m2x2 m4x1 p1x4)
# A round: the two 1x1 cases (their ratio is the finest one) in the order A B B A, then
# the others, their order rotated by one case each round. np1_vs_plain is the median of
# the ratios of neighbouring pairs (a load that moves slowly hits both alike; the median
# drops a pair that a passing load hit on one side).
others=("${cases[@]:2}")
n=${#others[@]}
declare -A rates
pairs=()
# timed OUT CASE: one --quiet run; the best kept, its rate noted
timed() {
  if run "$1" "$2" quiet --steps "$steps"; then
    best_into "$logs/best.$2" "$1"
    rates[$2]+="$(printf '%.0f ' "$(field "$1" samples_per_s)")"
  fi
}
for ((r = 0; r < runs; r++)); do
  echo "== sync, --steps $steps --quiet, round $((r + 1))/$runs (load $(load1))"
  i=0
  for c in p1x1 m1x1 m1x1 p1x1; do
    timed "$logs/q.$c.$r.$i" "$c"
    i=$((i + 1))
  done
  a=$(field "$logs/q.p1x1.$r.0" samples_per_s 2>/dev/null || true)
  b=$(field "$logs/q.m1x1.$r.1" samples_per_s 2>/dev/null || true)
  [[ -n $a && -n $b ]] && pairs+=("$b / $a")
  a=$(field "$logs/q.p1x1.$r.3" samples_per_s 2>/dev/null || true)
  b=$(field "$logs/q.m1x1.$r.2" samples_per_s 2>/dev/null || true)
  [[ -n $a && -n $b ]] && pairs+=("$b / $a")
  for ((k = 0; k < n; k++)); do
    c=${others[(k + r) % n]}
    timed "$logs/q.$c.$r.$i" "$c"
    i=$((i + 1))
  done
done
for ((r = 0; r < split_runs; r++)); do
  echo "== sync, --steps $steps with the stats lines, round $((r + 1))/$split_runs (load $(load1))"
  for ((i = 0; i < ${#cases[@]}; i++)); do
    c=${cases[(i + r) % ${#cases[@]}]}
    if run "$logs/s.$c.$r" "$c" tty --steps "$steps"; then
      best_into "$logs/split.$c" "$logs/s.$c.$r"
    fi
  done
done
if [[ ${FULL:-1} == 1 ]]; then
  echo "== sync, full default runs (10 epochs): -np 2 and --replicas 2"
  run "$logs/full.m2x1" m2x1 quiet || true
  run "$logs/full.p1x2" p1x2 quiet || true
fi

# ---- 2. async across ranks, and a slowed replica -----------------------------------------
acases=(m2x1:async:0 p1x2:async:0 "m2x1:async:$slow_ms" "p1x2:async:$slow_ms"
        "m2x1:sync:$slow_ms" "p1x2:sync:$slow_ms")
an=${#acases[@]}
for ((r = 0; r < runs_async; r++)); do
  echo "== async and slowed, --steps $steps, round $((r + 1))/$runs_async (load $(load1))"
  for ((i = 0; i < an; i++)); do
    spec=${acases[(i + r) % an]}
    IFS=: read -r c mode ms <<< "$spec"
    key=a.$c.$mode.$ms
    extra=(--steps "$steps" --mode "$mode")
    [[ $ms != 0 ]] && extra+=(--slow-replica-ms "$ms")
    if run "$logs/$key.$r" "$c" tty "${extra[@]}"; then
      best_into "$logs/best.$key" "$logs/$key.$r"
    fi
  done
done

# ---- tables --------------------------------------------------------------------------------
val() { [[ -f $1 ]] && field "$1" "$2" || true; }
# replica_mean FILE COLUMN: mean over the chief's "replica i: ..." lines of
# device (ms on the device per step), wait (ms waiting per step), steps or rows.
replica_mean() {
  [[ -f $1 ]] || return 0
  awk -v col="$2" '/^replica [0-9]+: / {
      for (i = 1; i <= NF; i++) {
        if ($(i+1) == "rows,") rows += $i
        if ($(i+1) == "steps,") st += $i
        if ($(i+1) == "ms" && $(i+6) == "device,") dev += $i
        if ($(i+1) == "ms" && $(i+4) == "waiting") wt += $i
      }
      k++ }
    END { if (k) { v = col == "device" ? dev : col == "wait" ? wt : col == "steps" ? st : rows
                   printf(col == "steps" || col == "rows" ? "%d" : "%.2f", v / k) } }' "$1"
}
# grab FILE PATTERN [REPLACEMENT]: the last line matching, as sed replaces it (default \1)
grab() { [[ -f $1 ]] && sed -n "s/$2/${3:-\\1}/p" "$1" | tail -1 || true; }
avg_ms() { grab "$1" '^averaging: \([0-9.]*\) ms.*'; }
ar_ms() { grab "$1" '.*; allreduce: \([0-9.]*\) ms per step.*'; }
ar_exposed() { grab "$1" '.*, \([0-9.]*\) ms of it after the device.*'; }
ar_mb() { grab "$1" '.*, \([0-9.]*\) MB per step$'; }
ps_ms() { grab "$1" '.*parameter servers: \([0-9.]*\) ms per update.*'; }
ps_mb() { grab "$1" '.*, \([0-9.]*\) MB sent per update$'; }
# rep0 FILE: "steps device_ms waiting_ms" of the chief's replica 0
rep0() {
  local n='\([0-9.]*\)'
  grab "$1" "^replica 0: [0-9]* rows, $n steps, $n ms per step on the device, $n ms.*" '\1 \2 \3'
}
# own_ms FILE: replica 0's time per step of its own: device + waiting (+ in sync mode
# averaging and the allreduce, which its thread runs)
own_ms() {
  local steps d w a ar
  read -r steps d w <<< "$(rep0 "$1")"
  [[ -n ${d:-} ]] || { echo -; return; }
  a=$(avg_ms "$1") ar=$(ar_ms "$1")
  calc "$d + $w + ${a:-0} + ${ar:-0}" %.2f
}
# comm_of FILE MODE: "ms, MB" across ranks (allreduce per step, or per parameter-server update)
comm_of() {
  local ms mb
  if [[ $2 == sync ]]; then
    ms=$(ar_ms "$1") mb=$(ar_mb "$1")
  else
    ms=$(ps_ms "$1") mb=$(ps_mb "$1")
  fi
  [[ -n $ms ]] && echo "$ms, $mb" || echo -
}
or_dash() { [[ -n ${1:-} ]] && echo "$1" || echo "-"; }
pair_median() { # the median of the pairs' ratios
  ((${#pairs[@]})) || { echo -; return; }
  printf '%s\n' "${pairs[@]}" | awk '{ print $1 / $3 }' | sort -g |
    awk '{ v[NR] = $1 }
      END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

batch=128
thr1=$(val "$logs/best.p1x1" samples_per_s)
echo
echo "== 1. sync, default MLP, batch $batch, --steps $steps, seed 1: samples/s, best of" \
  "$runs rounds (--quiet)"
printf '| %s |\n' "ranks x replicas | samples/s (best) | every run | ms/step | vs 1x1 | E(N) |\
 test acc / loss"
printf '|%s\n' "---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  b=$logs/best.$c
  rate=$(val "$b" samples_per_s)
  nrep=$((${c:1:1} * ${c:3:1})) # ranks x replicas from the name
  if [[ -n $rate ]]; then
    ms=$(calc "$batch * 1000 / $rate" %.2f)
    vs=$( [[ -n $thr1 ]] && calc "$rate / $thr1" %.2fx || echo -)
    eff=$( [[ -n $thr1 ]] && calc "$rate / ($nrep * $thr1)" %.2f || echo -)
    acc="$(val "$b" test_accuracy) / $(val "$b" test_loss)"
  else
    rate=- ms=- vs=- eff=- acc=-
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$(label "$c")" "$(or_dash "${rate%.*}")" \
    "$(or_dash "${rates[$c]% }")" "$ms" "$vs" "$eff" "$acc"
done
echo "E(N) = samples/s / (N x samples/s of 1x1, one process), N = ranks x replicas."
echo "mpirun -np 1 / one process, in neighbouring pairs: $(printf '%s\n' "${pairs[@]}" |
  awk '{ printf "%.3f ", $1 / $3 }')(median $(pair_median))"
echo
echo "== the step split: the fastest of $split_runs runs with the stats lines (the chief's)"
printf '| %s |\n' "ranks x replicas | samples/s | ms/step | device ms | barrier wait ms |\
 averaging ms | allreduce ms (after the device) | MB/step allreduced | rest ms"
printf '|%s\n' "---|---|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  s=$logs/split.$c
  rate=$(val "$s" samples_per_s)
  ms=- dev=- wt=- avg=- ar=- rest=-
  if [[ -n $rate ]]; then
    ms=$(calc "$batch * 1000 / $rate" %.2f)
    dev=$(or_dash "$(replica_mean "$s" device)") wt=$(or_dash "$(replica_mean "$s" wait)")
    avg=$(or_dash "$(avg_ms "$s")") ar=$(ar_ms "$s")
    [[ $dev != - ]] && rest=$(calc "$ms - $dev - $wt - $avg - ${ar:-0}" %.2f)
    [[ -n $ar ]] && ar="$ar ($(ar_exposed "$s"))"
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(label "$c")" \
    "$(or_dash "${rate%.*}")" "$ms" "$dev" "$wt" "$avg" "$(or_dash "$ar")" \
    "$(or_dash "$(ar_mb "$s")")" "$rest"
done
echo "Per step, the chief's figures (1x1 prints none). device, barrier wait: means over its"
echo "replicas. averaging: in one process the sum of the replicas' gradients; across ranks the"
echo "world's sum copied back into the replicas' stages. allreduce: its start and the wait for"
echo "it (in brackets the part after the device finished). rest: ms/step minus those (across"
echo "ranks the rank's own sum before the allreduce falls here, and the barriers)."

full_eq=-
if [[ ${FULL:-1} == 1 ]]; then
  echo
  echo "== full default runs (10 epochs, 620 steps):"
  for c in m2x1 p1x2; do
    printf '%-22s %s\n' "$(label "$c"):" \
      "$(grep '^result:' "$logs/full.$c" 2>/dev/null || echo failed)"
  done
  a1=$(val "$logs/full.m2x1" test_accuracy) l1=$(val "$logs/full.m2x1" test_loss)
  a2=$(val "$logs/full.p1x2" test_accuracy) l2=$(val "$logs/full.p1x2" test_loss)
  if [[ -n $a1 && -n $a2 ]]; then
    [[ $a1 == "$a2" && $l1 == "$l2" ]] && full_eq=yes || full_eq=no
  fi
  echo "same test_accuracy and test_loss to 4 digits: $full_eq"
fi

echo
echo "== 2. async across ranks, and the last replica slowed by $slow_ms ms per step" \
  "(--slow-replica-ms; on rank 1 across ranks): best of $runs_async rounds, --steps $steps"
printf '| %s |\n' "run | mode | slowed | samples/s (best) | test acc / loss | staleness mean / max |\
 chief's replica 0: steps, device ms, waiting ms | across ranks: MPI ms, MB | its own ms per step"
printf '|%s\n' "---|---|---|---|---|---|---|---|---|"
for spec in "${acases[@]}"; do
  IFS=: read -r c mode ms <<< "$spec"
  b=$logs/best.a.$c.$mode.$ms
  rate=$(val "$b" samples_per_s)
  if [[ -z $rate ]]; then
    printf '| %s | %s | %s | - | - | - | - | - | - |\n' "$(label "$c")" "$mode" "$ms"
    continue
  fi
  read -r steps0 d0 w0 <<< "$(rep0 "$b")"
  st="-"
  [[ $mode == async ]] && st="$(val "$b" staleness_mean) / $(val "$b" staleness_max)"
  printf '| %s | %s | %s | %.0f | %s | %s | %s, %s, %s | %s | %s |\n' "$(label "$c")" "$mode" \
    "$([[ $ms == 0 ]] && echo no || echo "+$ms ms")" "$rate" \
    "$(val "$b" test_accuracy) / $(val "$b" test_loss)" "$st" "$(or_dash "${steps0:-}")" \
    "$(or_dash "${d0:-}")" "$(or_dash "${w0:-}")" "$(comm_of "$b" "$mode")" "$(own_ms "$b")"
done
echo "across ranks: sync, the allreduce per step and MB per step; async, the wait for the"
echo "parameter servers per update and MB sent per update. its own ms per step: device +"
echo "waiting (+ averaging and allreduce in sync mode) of the chief's replica 0 (async across"
echo "ranks: an upper bound, as its device time includes the pull, which waiting counts"
echo "too); samples/s counts until every replica has made its --steps updates."

# ---- result line ---------------------------------------------------------------------------
rate_of() { val "$logs/best.$1" samples_per_s; }
div() { [[ -n $1 && -n $2 ]] && calc "$1 / $2" "$3" || echo -; } # div A B FORMAT
ratio() { div "$(rate_of "$1")" "$(rate_of "$2")" %.3f; }
eff_of() { local a; a=$(rate_of "$1"); div "$a" "${thr1:+($2 * $thr1)}" %.2f; }
aa=$(val "$logs/best.a.m2x1.async.0" samples_per_s)
ab=$(val "$logs/best.a.p1x2.async.0" samples_per_s)
echo
echo "result: np1_vs_plain=$(pair_median) np1_vs_plain_best=$(ratio m1x1 p1x1)" \
  "np2_vs_replicas2=$(ratio m2x1 p1x2)" \
  "np2_vs_replicas2_lp2=$(ratio m2x1 p1x2t) np4_vs_replicas4=$(ratio m4x1 p1x4)" \
  "e_2x1=$(eff_of m2x1 2) e_1x2=$(eff_of p1x2 2) e_2x2=$(eff_of m2x2 4)" \
  "e_4x1=$(eff_of m4x1 4) e_1x4=$(eff_of p1x4 4) full_run_equal=$full_eq" \
  "async_np2_vs_replicas2=$(div "$aa" "$ab" %.3f)" \
  "slowed_fast_rank_ms_per_step_async=$(own_ms "$logs/best.a.m2x1.async.$slow_ms")" \
  "slowed_fast_rank_ms_per_step_sync=$(own_ms "$logs/best.a.m2x1.sync.$slow_ms")"
echo "== $(( $(date +%s) - t_begin )) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
if ((${#failed[@]})); then
  echo "== failed runs:"
  printf '   %s\n' "${failed[@]}"
  exit 1
fi
