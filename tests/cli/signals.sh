#!/usr/bin/env bash
# Ctrl-C, SIGTERM and SIGHUP during vkt train: the first signal lets the current step
# finish, saves a checkpoint into --checkpoint-dir, names it ("vkt: interrupted (SIGINT) at
# step N: saved checkpoint D/ckpt-N.vkt") and exits with 128 + the signal number (130,
# 143, 129); a SIGHUP ignored at start (nohup) stays ignored; the
# checkpoint loads and a rerun resumes from step N. Two signals back to back either save
# or end the process at once, never leaving a corrupt checkpoint. Without --checkpoint-dir
# the run still stops cleanly and says that nothing was saved. The charlm loop does the
# same, also while it evaluates and samples alone at the end. Under mpirun (skipped
# without it) a SIGINT to the launcher ends every rank and leaves the chief's checkpoint.
# Usage: signals.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d); pid=
trap '[[ -n $pid ]] && kill -KILL $pid 2>/dev/null; rm -rf "$tmp"' EXIT
args=(train --steps 100000 --hidden 32 --batch 64 --save-secs 1000)

# start NAME ARGS...: vkt in the background, SIGINT and SIGTERM at their default actions
# (a script's background jobs start with SIGINT ignored, and vkt keeps an ignored signal
# ignored); waits for the first progress line. Sets pid.
start() {
    local name=$1 i; shift
    env --default-signal=INT,TERM,HUP ${IGNORE:+--ignore-signal=$IGNORE} "$bin" "$@" \
        >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pid=$!
    for ((i = 0; i < 600; i++)); do
        grep -q '^step ' "$tmp/$name.out" 2>/dev/null && return 0
        kill -0 $pid 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# stop SIGNALS...: sends them back to back, waits (30 s at most); sets rc and secs.
stop() {
    local t0 s i
    t0=$(date +%s.%N)
    for s in "$@"; do kill -"$s" $pid 2>/dev/null; done
    for ((i = 0; i < 300; i++)); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -KILL $pid 2>/dev/null
    wait $pid; rc=$?; pid=
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
}
# loads DIR: every ckpt-*.vkt in DIR is a valid checkpoint (exported one by one).
loads() {
    local f ok=0
    for f in "$1"/ckpt-*.vkt; do
        [[ -e $f ]] || continue
        rm -rf "$tmp/one" && mkdir "$tmp/one" && cp "$f" "$tmp/one/"
        "$bin" export --checkpoint-dir "$tmp/one" -o "$tmp/one.st" >/dev/null 2>&1 ||
            { echo "does not load: $f" >&2; ok=1; }
    done
    return $ok
}
# step_of NAME SIGNAL: N from "interrupted (SIGNAL) at step N" in NAME's stderr.
step_of() { sed -nE "s/^vkt: interrupted \\($2\\) at step ([0-9]+).*/\\1/p" "$tmp/$1.err"; }

# ---- SIGINT: the step finishes, a checkpoint is saved and named, exit 130 ----
d=$tmp/ck
start int "${args[@]}" --checkpoint-dir "$d"
check "the run starts training" "[[ \$? -eq 0 ]]"
stop INT
n=$(step_of int SIGINT)
echo "SIGINT: exit $rc after ${secs}s at step $n"
check "SIGINT: exit 130 within 10 s (rc $rc, ${secs}s)" "[[ $rc -eq 130 ]] && awk 'BEGIN{exit !($secs < 10)}'"
check "SIGINT: the message names the checkpoint ($(cat "$tmp/int.err"))" \
      "[[ -n '$n' ]] && grep -qx \"vkt: interrupted (SIGINT) at step $n: saved checkpoint $d/ckpt-$n.vkt\" '$tmp/int.err'"
check "SIGINT: ckpt-$n.vkt is there and loads" "[[ -s '$d/ckpt-$n.vkt' ]] && loads '$d'"
out=$("$bin" "${args[@]/100000/$((n + 3))}" --quiet --checkpoint-dir "$d" 2>&1); rc=$?
check "a rerun resumes from step $n and finishes" \
      "[[ $rc -eq 0 ]] && grep -q '^resumed from step $n\$' <<<\"\$out\" && grep -q 'steps=$((n + 3)) ' <<<\"\$out\""

# ---- SIGTERM: the same with 143, resuming the folder above ----
start term "${args[@]}" --checkpoint-dir "$d"
grep -q "^resumed from step $((n + 3))\$" "$tmp/term.out"
check "the SIGTERM run resumed from step $((n + 3))" "[[ \$? -eq 0 ]]"
stop TERM
m=$(step_of term SIGTERM)
echo "SIGTERM: exit $rc after ${secs}s at step $m"
check "SIGTERM: exit 143 within 10 s (rc $rc, ${secs}s)" "[[ $rc -eq 143 ]] && awk 'BEGIN{exit !($secs < 10)}'"
check "SIGTERM: the message names ckpt-$m.vkt, later than step $((n + 3))" \
      "[[ -n '$m' ]] && (( m > n + 3 )) && grep -qx \"vkt: interrupted (SIGTERM) at step $m: saved checkpoint $d/ckpt-$m.vkt\" '$tmp/term.err'"
check "SIGTERM: every checkpoint in the folder loads" "[[ -s '$d/ckpt-$m.vkt' ]] && loads '$d'"
out=$("$bin" "${args[@]/100000/$m}" --quiet --checkpoint-dir "$d" 2>&1); rc=$?
check "a rerun resumes from step $m" "[[ $rc -eq 0 ]] && grep -q '^resumed from step $m\$' <<<\"\$out\""

# ---- SIGHUP (a closed terminal or ssh session): as SIGTERM, with 129 ----
d5=$tmp/hup
start hup "${args[@]}" --checkpoint-dir "$d5"
stop HUP
h=$(step_of hup SIGHUP)
echo "SIGHUP: exit $rc after ${secs}s at step $h"
check "SIGHUP: exit 129 within 10 s, ckpt-$h.vkt named and loads ($(cat "$tmp/hup.err"))" \
      "[[ $rc -eq 129 && -n '$h' ]] && awk 'BEGIN{exit !($secs < 10)}' && grep -qx \"vkt: interrupted (SIGHUP) at step $h: saved checkpoint $d5/ckpt-$h.vkt\" '$tmp/hup.err' && loads '$d5'"
# nohup: SIGHUP ignored when vkt starts stays ignored; the run trains on, and stops on
# Ctrl-C as usual. Also when a library loaded before main has replaced the ignored SIGHUP
# by then (on Debian 13 UCX's libucs, which Open MPI 5's libmpi links, installs its debug
# handler on UCX_DEBUG_SIGNO, SIGHUP by default, in its constructor): vkt notes the
# signal's disposition in its .preinit_array, before any library's constructor. The probe
# names such a library of vkt's where there is one; hup_taker (VKT_HUP_TAKER, built by
# ctest) is one everywhere, preloaded.
hup_taken_by() { # the first library of vkt's that un-ignores SIGHUP when loaded, if any
    command -v python3 >/dev/null || return 0
    env --ignore-signal=HUP python3 -c '
import ctypes, sys
def ignored(): return [l for l in open("/proc/self/status") if l.startswith("SigIgn:")][0].split()[1]
for lib in sys.argv[1:]:
    try: ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    except OSError: continue
    if not int(ignored(), 16) & 1: print(lib); break
' $(ldd "$bin" | awk '$3 ~ /^\//{print $3}') 2>/dev/null
}
taker=$(hup_taken_by)
[[ -n $taker ]] && echo "note: loading $taker (with what it loads) replaces an ignored SIGHUP before vkt's main"
IGNORE=HUP start nohup "${args[@]}" --checkpoint-dir "$tmp/nohup"
kill -HUP $pid; sleep 1
alive=$(kill -0 $pid 2>/dev/null && echo yes)
stop INT
check "SIGHUP ignored at start (nohup): still training 1 s later, then SIGINT: 130" \
      "[[ '$alive' == yes && $rc -eq 130 ]] && grep -q 'interrupted (SIGINT)' '$tmp/nohup.err'"
if [[ -n ${VKT_HUP_TAKER:-} ]]; then
    # (ASan checks that its runtime comes first among the libraries; a preloaded one does)
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
        LD_PRELOAD=$VKT_HUP_TAKER IGNORE=HUP start nohup_taken "${args[@]}" --checkpoint-dir "$tmp/nohup2"
    kill -HUP $pid; sleep 1
    alive=$(kill -0 $pid 2>/dev/null && echo yes)
    stop INT
    check "nohup with a library that took SIGHUP before main (hup_taker): still training 1 s after SIGHUP, neither vkt nor the library saw it, then SIGINT: 130 ($(cat "$tmp/nohup_taken.err"))" \
          "[[ '$alive' == yes && $rc -eq 130 ]] && grep -q 'interrupted (SIGINT)' '$tmp/nohup_taken.err' && ! grep -q 'hup_taker: SIGHUP' '$tmp/nohup_taken.err'"
fi

# ---- two signals back to back: saved, or ended at once; never a corrupt file ----
# Several spacings, so that the second lands before, during or after the save; a bigger
# model makes the save long enough to be hit.
for gap in 0 0.02 0.1 0.3; do
    d2=$tmp/twice-$gap
    start twice "${args[@]}" --hidden 1024,1024 --checkpoint-dir "$d2"
    t0=$(date +%s.%N)
    kill -INT $pid; sleep "$gap"
    stop INT
    saved=$(grep -c 'saved checkpoint' "$tmp/twice.err")
    echo "two SIGINTs $gap s apart: exit $rc, saved: $saved"
    check "two SIGINTs $gap s apart: exit 130 (rc $rc)" "[[ $rc -eq 130 ]]"
    check "two SIGINTs $gap s apart: every checkpoint loads" "loads '$d2'"
done

# ---- no --checkpoint-dir: stops cleanly, nothing saved ----
start nodir "${args[@]}"
stop INT
k=$(step_of nodir SIGINT)
check "no --checkpoint-dir: exit 130 at a step, nothing saved ($(cat "$tmp/nodir.err"))" \
      "[[ $rc -eq 130 && -n '$k' ]] && grep -qx 'vkt: interrupted (SIGINT) at step $k: no checkpoint saved (no --checkpoint-dir)' '$tmp/nodir.err'"

# ---- charlm's loop ----
lm=(train --model charlm --steps 100000 --layers 1 --width 32 --heads 2 --context 16
    --batch 8 --eval-every 0 --save-secs 1000)
d3=$tmp/lm
start lm "${lm[@]}" --checkpoint-dir "$d3"
stop INT
j=$(step_of lm SIGINT)
check "charlm: SIGINT exits 130 and saves ckpt-$j.vkt ($(cat "$tmp/lm.err"))" \
      "[[ $rc -eq 130 && -n '$j' ]] && grep -qx \"vkt: interrupted (SIGINT) at step $j: saved checkpoint $d3/ckpt-$j.vkt\" '$tmp/lm.err' && loads '$d3'"
out=$("$bin" "${lm[@]/100000/$((j + 2))}" --sample 10 --quiet --checkpoint-dir "$d3" 2>&1); rc=$?
check "charlm: a rerun resumes from step $j" "[[ $rc -eq 0 ]] && grep -q '^resumed from step $j\$' <<<\"\$out\""

# The end of a charlm run (the validation loss, then --sample characters) is the
# program's alone: a first SIGTERM there ends it within a piece of the sample, naming the
# checkpoint of the last step (saved before the end), 143.
env --default-signal=INT,TERM "$bin" "${lm[@]/100000/3}" --sample 1000000 \
    --checkpoint-dir "$tmp/lmend" >"$tmp/lmend.out" 2>"$tmp/lmend.err" &
pid=$!
for ((i = 0; i < 600; i++)); do [[ -e $tmp/lmend/ckpt-3.vkt ]] && break; sleep 0.1; done
sleep 2 # into the sampling
stop TERM
check "charlm, SIGTERM at the end: exit 143 within 10 s ($rc, ${secs}s), ckpt-3.vkt named ($(cat "$tmp/lmend.err"))" \
      "[[ $rc -eq 143 ]] && awk 'BEGIN{exit !($secs < 10)}' && grep -qx \"vkt: interrupted (SIGTERM) at step 3: saved checkpoint $tmp/lmend/ckpt-3.vkt\" '$tmp/lmend.err' && ! grep -q '^result:' '$tmp/lmend.out'"

# ---- under mpirun: the launcher forwards the signal to every rank ----
if command -v mpirun >/dev/null && ldd "$bin" 2>/dev/null | grep -q libmpi; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
        OMPI_MCA_mpi_yield_when_idle=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_tcp_disable_family=6 \
        LP_NUM_THREADS=1
    d4=$tmp/mpi
    # Each rank writes its stderr to its own file ($tmp/mpi.err.RANK): Open MPI 5's mpirun
    # (PRRTE) answers SIGINT with SIGTERM to the ranks and SIGKILL about 0.3 s later, and
    # exits without passing on what the ranks wrote meanwhile (the chief's "interrupted"
    # line, written before it exits 143, never reached mpirun's stderr there)
    env --default-signal=INT,TERM mpirun -np 2 --bind-to none \
        bash -c 'exec "$@" 2>"$0.${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-x}}"' "$tmp/mpi.err" \
        "$bin" "${args[@]}" --checkpoint-dir "$d4" >"$tmp/mpi.out" 2>"$tmp/mpi.err" &
    pid=$!
    # the ranks' progress lines end in \r (a pty) and reach the file only at a newline:
    # wait for the line before training, then let it train
    for ((i = 0; i < 600; i++)); do
        grep -q '^training ' "$tmp/mpi.out" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    sleep 2
    stop INT
    sleep 1
    left=$(pgrep -f -- "$d4" | tr '\n' ' ')
    echo "mpirun -np 2, SIGINT: exit $rc after ${secs}s; $(grep -h 'interrupted' "$tmp/mpi.err.0")"
    check "mpirun: SIGINT ends the job with a non-zero status within 10 s (rc $rc, ${secs}s)" \
          "[[ $rc -ne 0 ]] && awk 'BEGIN{exit !($secs < 10)}'"
    check "mpirun: the chief names its checkpoint ($(cat "$tmp/mpi.err" "$tmp/mpi.err.0"))" \
          "grep -Eq \"^vkt: interrupted \\(SIG(INT|TERM)\\) at step [0-9]+: saved checkpoint $d4/ckpt-[0-9]+\\.vkt\$\" '$tmp/mpi.err.0'"
    check "mpirun: the chief saved a checkpoint that loads ($(ls "$d4" 2>/dev/null | tr '\n' ' '))" \
          "ls '$d4' 2>/dev/null | grep -q '^ckpt-[0-9]*\.vkt\$' && loads '$d4'"
    check "mpirun: no process left ($left)" "[[ -z '$left' ]]"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
else
    echo "no mpirun or a build without MPI: the MPI case skipped"
fi

echo "signals: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
