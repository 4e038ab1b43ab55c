#!/usr/bin/env bash
# vkt train --mode async across processes: the sharded parameter server
# (docs/distributed.md, "Async across ranks"), each job started here with Open MPI's
# mpirun on this one machine:
#  - 2 ranks train; the chief alone prints one result line with mode=async ranks=2 and
#    the world's staleness;
#  - --staleness 0 equals sync across ranks (plain SGD, 2 ranks x 2 replicas);
#  - with a bound s the staleness stays within (G-1)(2s+1), G = 4 replicas in all, and
#    every update is counted once (G x steps);
#  - 2 ranks x 2 replicas reach test accuracy within 0.01 of sync with the same samples
#    seen (plain SGD, as tests/cli/parallel.sh checks in one process);
#  - checkpoints of an async job resume on another number of ranks; the TCP path works;
#  - a killed rank ends the job; a stopped rank is caught by --comm-timeout (exit 3); a
#    device lost on one rank stops every rank with the rank named. A job ended by a
#    failure must end within an outer limit (60 s or more; the defect is a hang, and these
#    scripts run beside other tests: the seconds taken are printed, not asserted).
# Usage: mpi_async.sh BIN_DIR  (ctest gives it the environment below; VKT_MPIEXEC names
# the launcher, default mpirun)
set -u
name=mpi_async
bin=$1/vkt
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/mpi/common.sh"

# 1. Two ranks, one replica each; only the chief prints.
out=$(mpi 120 -np 2 --tag-output "$bin" train --mode async --steps 50 2>&1); rc=$?
check "mpirun -np 2 vkt train --mode async --steps 50: exit 0" "[[ $rc -eq 0 ]]" "$out"
check "the result line: replicas=2 mode=async ranks=2 and the staleness" \
      "grep -Eq '^\[[0-9]+,0\]<stdout>: ?result: .* steps=50 .* replicas=2 mode=async ranks=2 staleness_mean=[0-9.]+ staleness_max=[0-9]+\$' <<<\"\$out\"" "$out"
check "one result line; rank 1 prints nothing" \
      "[[ \$(grep -c 'result: ' <<<\"\$out\") -eq 1 ]] && ! grep -q '^\[[0-9]*,1\]<' <<<\"\$out\"" "$out"

# 2. --staleness 0 equals sync across ranks (plain SGD; 2 ranks x 2 replicas).
sgd=(--optimizer sgd --steps 30 --quiet)
a0=$(VKT_DEVICES=0,0 mpi 120 -np 2 "$bin" train --mode async --staleness 0 "${sgd[@]}" 2>&1); rc=$?
check "async --staleness 0, 2 ranks x 2 replicas: exit 0, replicas=4" \
      "[[ $rc -eq 0 ]] && grep -q 'replicas=4 mode=async ranks=2' <<<\"\$a0\"" "$a0"
s0=$(VKT_DEVICES=0,0 mpi 120 -np 2 "$bin" train --mode sync "${sgd[@]}" 2>&1)
check "staleness 0: test loss $(val test_loss "$a0") equals sync ($(val test_loss "$s0"))" \
      "close '$(val test_loss "$a0")' '$(val test_loss "$s0")' 0.0005"
check "staleness 0: staleness_max $(val staleness_max "$a0") <= G - 1 = 3" \
      "[[ -n '$(val staleness_max "$a0")' && '$(val staleness_max "$a0")' -le 3 ]]"

# 3. Bounded staleness: max <= (G-1)(2s+1); every update counted once (4 x 40).
for s in 1 2; do
    out=$(VKT_DEVICES=0,0 mpi 120 -np 2 "$bin" train --mode async --staleness $s --steps 40 2>&1); rc=$?
    m=$(val staleness_max "$out")
    check "--staleness $s: exit 0, staleness_max $m <= $((3 * (2 * s + 1)))" \
          "[[ $rc -eq 0 && -n '$m' && '$m' -le $((3 * (2 * s + 1))) ]]" "$out"
    check "--staleness $s: 160 updates counted" "grep -q '^async: 160 updates' <<<\"\$out\"" "$out"
    # the host bytes of the exchange (before: not counted, 0): per update a pull and a push
    # of the whole parameter vector, 2 x the parameters' bytes
    h=$(sed -nE 's/^ranks: .* ([0-9.]+) MB through the host per update \(pulled and pushed; parameters ([0-9.]+) MB\)$/\1 \2/p' <<<"$out")
    check "--staleness $s: $h: host bytes per update 2 x the parameters" \
          "awk -v h='${h% *}' -v p='${h#* }' 'BEGIN { d = h - 2 * p; exit !(h != \"\" && p > 0 && d < 2e-4 && d > -2e-4) }'" "$out"
done

# 4. Accuracy: async within 0.01 of sync, same samples seen (plain SGD; 10 epochs, half of
# tests/cli/parallel.sh's 20 to keep this script near 2 minutes on 2 cores).
acc=(--optimizer sgd --epochs 10 --quiet)
t0=$(now)
aa=$(VKT_DEVICES=0,0 mpi 300 -np 2 "$bin" train --mode async "${acc[@]}" 2>&1); rc=$?
t_a=$(since "$t0")
check "async accuracy run: exit 0" "[[ $rc -eq 0 ]]" "$aa"
t0=$(now)
as=$(VKT_DEVICES=0,0 mpi 300 -np 2 "$bin" train --mode sync "${acc[@]}" 2>&1)
t_s=$(since "$t0")
echo "measured: 2 ranks x 2 replicas, SGD, 10 epochs: async accuracy $(val test_accuracy "$aa")" \
     "($(val samples_per_s "$aa") samples/s, ${t_a} s, staleness mean $(val staleness_mean "$aa")" \
     "max $(val staleness_max "$aa")); sync $(val test_accuracy "$as") ($(val samples_per_s "$as") samples/s, ${t_s} s)"
check "async accuracy $(val test_accuracy "$aa") within 0.01 of sync $(val test_accuracy "$as")" \
      "close '$(val test_accuracy "$aa")' '$(val test_accuracy "$as")' 0.01"

# 5. Checkpoints: saved by 2 async ranks, resumed by 3; the TCP path.
C=$tmp/c
out=$(mpi 120 -np 2 "$bin" train --mode async --steps 40 --save-every 20 --quiet --checkpoint-dir "$C" 2>&1); rc=$?
check "2 async ranks save checkpoints: exit 0, only ckpt-20 and ckpt-40 ($(ls "$C" 2>/dev/null | tr '\n' ' '))" \
      "[[ $rc -eq 0 && \"\$(ls '$C' | sort -t- -k2 -n | tr '\n' ' ')\" == 'ckpt-20.vkt ckpt-40.vkt ' ]]" "$out"
out=$(mpi 120 -np 3 "$bin" train --mode async --steps 60 --quiet --checkpoint-dir "$C" 2>&1); rc=$?
check "3 async ranks resume: 'resumed from step 40', exit 0, ranks=3" \
      "[[ $rc -eq 0 ]] && grep -q '^resumed from step 40\$' <<<\"\$out\" && grep -q 'mode=async ranks=3' <<<\"\$out\"" "$out"
out=$(mpi 120 -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo "$bin" train --mode async \
      --steps 40 --quiet 2>&1); rc=$?
check "async over TCP: exit 0, mode=async ranks=2" \
      "[[ $rc -eq 0 ]] && grep -q 'mode=async ranks=2' <<<\"\$out\"" "$out"

# 6. Failures: a killed rank, a stopped rank, a lost device.
C=$tmp/k
mpi 300 -np 3 "$bin" train --mode async --steps 100000 --quiet --checkpoint-dir "$C" \
    --save-every 10 >"$tmp/k.out" 2>&1 &
job=$!
wait_for "$C/ckpt-10.vkt" 240
victim=$(rank_pid 2 "$C")
check "the async job saved its first checkpoint and rank 2 is found (pid ${victim:-none})" "[[ -n '$victim' ]]"
t0=$(now)
[[ -n $victim ]] && kill -KILL "$victim"
reap "$job" 60; rc=$?
t=$(since "$t0")
check "async, rank 2 killed: mpirun exits $rc != 0, within 60 s ($t s)" \
      "[[ $rc -ne 0 && $rc -ne 124 ]]" "$(cat "$tmp/k.out")"
check "no process left" gone
n=$(newest_step "$C")
out=$(mpi 120 -np 2 "$bin" train --mode async --steps $((${n:-0} + 20)) --quiet --checkpoint-dir "$C" 2>&1); rc=$?
check "2 async ranks resume: 'resumed from step $n' (>= 10), exit 0" \
      "[[ $rc -eq 0 && ${n:-0} -ge 10 ]] && grep -q '^resumed from step $n\$' <<<\"\$out\"" "$out"

C=$tmp/s
mpi 300 -np 3 "$bin" train --mode async --steps 100000 --quiet --checkpoint-dir "$C" \
    --save-every 10 --comm-timeout 3 >"$tmp/s.out" 2>&1 &
job=$!
wait_for "$C/ckpt-10.vkt" 240
victim=$(rank_pid 1 "$C")
check "the async job saved its first checkpoint and rank 1 is found (pid ${victim:-none})" "[[ -n '$victim' ]]"
t0=$(now)
[[ -n $victim ]] && kill -STOP "$victim"
reap "$job" 60; rc=$?
t=$(since "$t0")
out=$(cat "$tmp/s.out")
check "async, rank 1 stopped: exit status 3, within 60 s ($rc, $t s)" "[[ $rc -eq 3 ]]" "$out"
check "the timeout is reported (VKT_ERROR_TIMEOUT)" "grep -q 'vkt: rank [0-9]*: .*VKT_ERROR_TIMEOUT' <<<\"\$out\"" "$out"
check "every process gone" gone

t0=$(now)
out=$(mpi 120 -np 1 "$bin" train --mode async --steps 200 --checkpoint-dir "$tmp/d" : \
              -np 1 env VKT_FAULT_INJECT=vkQueueSubmit:50 "$bin" train --mode async --steps 200 \
              --checkpoint-dir "$tmp/d" 2>&1); rc=$?
t=$(since "$t0")
check "async, device lost on rank 1: exit $rc != 0, not the 120 s limit's 124 ($t s), rank 1 and VK_ERROR_DEVICE_LOST named" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && grep -q 'vkt: rank 1: .*VK_ERROR_DEVICE_LOST' <<<\"\$out\"" "$out"
check "no process left" gone

finish
