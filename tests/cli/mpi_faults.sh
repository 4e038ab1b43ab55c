#!/usr/bin/env bash
# vkt train across processes when something goes wrong (docs/distributed.md, "Failures"),
# each job started here with Open MPI's mpirun on this one machine:
#  - ranks started with different options are refused at once (exit 2), naming the
#    option, on every model: --batch, --hidden, --check-identical, --checkpoint-dir;
#  - a device lost on one rank (the chief, or not) stops every rank at that step with
#    the rank and VK_ERROR_DEVICE_LOST named; mpirun exits non-zero, nothing is left;
#  - a rank killed with SIGKILL ends the job, nothing is left, and the job resumes from
#    the chief's last checkpoint with another number of ranks;
#  - a rank that stops answering (SIGSTOP) is caught by the watchdog: --comm-timeout 3
#    ends the job with exit status 3 and the timeout's message; a rank late before a step
#    (a replica slowed by --slow-replica-ms) is named by the chief;
#  - a chief stopped while it works alone at the end is named by the rank waiting for it;
#  - scripts/mpi-retry.sh reruns a failing command and stops at the first success; a
#    job whose first attempt loses a device finishes on the second from its checkpoint.
# Every job runs under a hard time limit, and a job ended by a failure must end within an
# outer limit (60 s or more): the defect is a job that hangs, and the limit leaves room for
# a loaded machine, as these scripts run beside other tests (the seconds taken are printed,
# not asserted: 2 to 4 s alone); "no process left" waits up to 30 s for the
# job's processes to end (mpirun does not wait for its killed ranks: tests/mpi/common.sh);
# the EXIT trap continues (SIGCONT) and kills whatever this script started that is still
# there.
# Usage: mpi_faults.sh BIN_DIR  (ctest gives it the environment below; VKT_MPIEXEC names
# the launcher, default mpirun; finding a rank's process relies on Open MPI's
# OMPI_COMM_WORLD_RANK in its environment)
set -u
name=mpi_faults
bin=$1/vkt
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/mpi/common.sh"

# 1. Ranks that disagree (MPMD: one command line per rank) are refused at start-up, before
# any other collective, naming the option: every rank exits with status 2 (a usage error).
t0=$(now)
out=$(mpi 60 -np 1 "$bin" train --batch 64 --steps 5 --logdir "$tmp/m1" : \
              -np 1 "$bin" train --batch 128 --steps 5 --logdir "$tmp/m1" 2>&1); rc=$?
check "--batch 64 vs 128: exit 2 in $(since "$t0") s ($rc), 'disagree on --batch'" \
      "[[ $rc -eq 2 ]] && grep -q 'rank 0: the ranks disagree on --batch (64 on the chief; different on 1 of the 2 ranks)' <<<\"\$out\" && grep -q 'rank 1: the ranks disagree on --batch (128 here, 64 on the chief)' <<<\"\$out\"" "$out"
out=$(mpi 60 -np 1 "$bin" train --hidden 256,128 --steps 5 --logdir "$tmp/m2" : \
              -np 1 "$bin" train --hidden 128 --steps 5 --logdir "$tmp/m2" 2>&1); rc=$?
check "--hidden 256,128 vs 128: exit 2 ($rc), 'disagree on --hidden'" \
      "[[ $rc -eq 2 ]] && grep -q 'rank 1: the ranks disagree on --hidden (128 here, 256,128 on the chief)' <<<\"\$out\"" "$out"
# --check-identical on the chief only: it adds a collective every N steps (an Open MPI
# abort, MPI_ERR_TRUNCATE, or a --comm-timeout stall naming the wrong rank before)
out=$(mpi 60 -np 1 "$bin" train --check-identical 1 --steps 5 --logdir "$tmp/m3" : \
              -np 2 "$bin" train --steps 5 --logdir "$tmp/m3" 2>&1); rc=$?
check "3 ranks, --check-identical on the chief only: exit 2 ($rc), every rank that differs named, no MPI error" \
      "[[ $rc -eq 2 ]] && grep -q 'rank 0: the ranks disagree on --check-identical (1 on the chief; different on 2 of the 3 ranks)' <<<\"\$out\" && [[ \$(grep -c 'disagree on --check-identical (0 here, 1 on the chief)' <<<\"\$out\") -eq 2 ]] && ! grep -q 'MPI_ERR' <<<\"\$out\"" "$out"
# --checkpoint-dir given on ranks 1 and 2 only (the chief alone reads and writes it, but
# whether it is given decides the collective restore): cnn, refused before it is built
out=$(mpi 60 -np 1 "$bin" train --model cnn --steps 5 --logdir "$tmp/m4" : \
              -np 2 "$bin" train --model cnn --steps 5 --checkpoint-dir "$tmp/m4" 2>&1); rc=$?
check "cnn, --checkpoint-dir on ranks 1, 2 only: exit 2 ($rc), named" \
      "[[ $rc -eq 2 ]] && grep -q 'rank 0: the ranks disagree on --checkpoint-dir (not given on the chief; different on 2 of the 3 ranks)' <<<\"\$out\" && grep -q 'rank 2: the ranks disagree on --checkpoint-dir (given here, not given on the chief)' <<<\"\$out\"" "$out"
check "no process left after the refusals" gone

# 2. A device lost on one rank: on the chief (rank 0 of 3), then on rank 1 of 2. The fault
# hook fails the 50th vkQueueSubmit of that process (engine/gpu/error.c).
fault=(env VKT_FAULT_INJECT=vkQueueSubmit:50)
t0=$(now)
out=$(mpi 120 -np 1 "${fault[@]}" "$bin" train --steps 200 --checkpoint-dir "$tmp/d1" : \
              -np 2 "$bin" train --steps 200 --checkpoint-dir "$tmp/d1" 2>&1); rc=$?
t=$(since "$t0")
check "device lost on rank 0: exit $rc != 0, not the 120 s limit's 124 ($t s)" \
      "[[ $rc -ne 0 && $rc -ne 124 ]]" "$out"
check "the chief names itself and VK_ERROR_DEVICE_LOST, the others name rank 0" \
      "grep -q 'vkt: rank 0: training failed at step [0-9]*: VKT_ERROR_DEVICE_LOST: vkQueueSubmit failed: VK_ERROR_DEVICE_LOST' <<<\"\$out\" && grep -q 'vkt: rank [12]: .*rank 0 failed at step' <<<\"\$out\"" "$out"
check "no process left" gone
t0=$(now)
out=$(mpi 120 -np 1 "$bin" train --steps 200 --checkpoint-dir "$tmp/d2" : \
              -np 1 "${fault[@]}" "$bin" train --steps 200 --checkpoint-dir "$tmp/d2" 2>&1); rc=$?
t=$(since "$t0")
check "device lost on rank 1: exit $rc != 0, not the 120 s limit's 124 ($t s), rank 1 and VK_ERROR_DEVICE_LOST named" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && grep -q 'vkt: rank 1: .*VK_ERROR_DEVICE_LOST' <<<\"\$out\" && grep -q 'vkt: rank 0: .*rank 1 failed at step' <<<\"\$out\"" "$out"
check "no process left" gone

# 3. A rank killed with SIGKILL after the first checkpoint: mpirun ends the job.
C=$tmp/k
mpi 300 -np 3 "$bin" train --steps 100000 --quiet --checkpoint-dir "$C" --save-every 10 \
    >"$tmp/k.out" 2>&1 &
job=$!
wait_for "$C/ckpt-10.vkt" 240
victim=$(rank_pid 2 "$C")
check "the job saved its first checkpoint and rank 2 is found (pid ${victim:-none})" "[[ -n '$victim' ]]"
t0=$(now)
[[ -n $victim ]] && kill -KILL "$victim"
reap "$job" 60; rc=$?
t=$(since "$t0")
check "rank 2 killed: mpirun exits $rc != 0, within 60 s ($t s)" \
      "[[ $rc -ne 0 && $rc -ne 124 ]]" "$(cat "$tmp/k.out")"
check "no process left" gone
n=$(newest_step "$C")
out=$(mpi 120 -np 2 "$bin" train --steps $((${n:-0} + 20)) --quiet --checkpoint-dir "$C" 2>&1); rc=$?
check "2 ranks resume: 'resumed from step $n' (>= 10), exit 0" \
      "[[ $rc -eq 0 && ${n:-0} -ge 10 ]] && grep -q '^resumed from step $n\$' <<<\"\$out\"" "$out"

# 4. A rank stopped with SIGSTOP: the others wait for it until --comm-timeout, then the
# chief ends the job (MPI_Abort with 3, which mpirun returns), naming it: stopped before
# its step's heartbeat it "has not arrived"; stopped inside the allreduce it "stopped
# answering" (the waiting ranks' beats come, its do not).
C=$tmp/s
mpi 300 -np 3 "$bin" train --steps 100000 --quiet --checkpoint-dir "$C" --save-every 10 \
    --comm-timeout 3 >"$tmp/s.out" 2>&1 &
job=$!
wait_for "$C/ckpt-10.vkt" 240
victim=$(rank_pid 1 "$C")
check "the job saved its first checkpoint and rank 1 is found (pid ${victim:-none})" "[[ -n '$victim' ]]"
t0=$(now)
[[ -n $victim ]] && kill -STOP "$victim"
reap "$job" 60; rc=$?
t=$(since "$t0")
out=$(cat "$tmp/s.out")
check "rank 1 stopped: exit status 3, within 60 s ($rc, $t s)" "[[ $rc -eq 3 ]]" "$out"
check "every process gone" gone
check "the chief reports the timeout" \
      "grep -q 'vkt: rank 0: training failed at step [0-9]*: VKT_ERROR_TIMEOUT: step [0-9]*: the gradient allreduce did not complete in 3 s: ' <<<\"\$out\"" "$out"
check "and names rank 1" \
      "grep -qE 'rank\\(s\\) 1(, [0-9]+)* (have not arrived|stopped answering)' <<<\"\$out\"" "$out"

# A rank late before its step is named: the last replica (rank 2's) sleeps 8 s per step.
t0=$(now)
out=$(mpi 90 -np 3 "$bin" train --steps 20 --quiet --slow-replica-ms 8000 --comm-timeout 3 \
      --checkpoint-dir "$tmp/w" 2>&1); rc=$?
t=$(since "$t0")
check "a late rank: exit status 3, not the 90 s limit's 124 ($rc, $t s)" "[[ $rc -eq 3 ]]" "$out"
check "the chief names rank 2" \
      "grep -q 'vkt: rank 0: .*did not complete in 3 s: rank(s) 2 have not arrived (last seen at step(s) 0)' <<<\"\$out\"" "$out"
check "every process gone" gone

# The chief stopped (SIGSTOP) while it samples alone at the end, after its final
# checkpoint: rank 1, waiting for it in finalize, names the silent chief after
# --comm-timeout + 2 s of silence (a chief that answers is waited for however long it
# works: tests/cli/catalogue.sh), and the job ends.
C=$tmp/e
mpi 120 -np 2 "$bin" train --model charlm --steps 4 --layers 1 --width 32 --heads 2 \
    --context 16 --batch 8 --eval-every 0 --sample 1000000 --comm-timeout 2 --quiet \
    --checkpoint-dir "$C" >"$tmp/e.out" 2>&1 &
job=$!
wait_for "$C/ckpt-4.vkt" 240
victim=$(rank_pid 0 "$C")
check "the job saved its last checkpoint and the chief is found (pid ${victim:-none})" "[[ -n '$victim' ]]"
[[ -n $victim ]] && kill -STOP "$victim"
wait "$job"; rc=$?
out=$(cat "$tmp/e.out")
check "the chief stopped at its end: exit $rc != 0, rank 1 names the silent chief" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && grep -q 'vkt: rank 1: step 4: finalize did not complete: the chief (rank 0) has been silent for 4 s' <<<\"\$out\" && ! grep -q '^result:' <<<\"\$out\"" "$out"
check "no process left" gone

# 5. scripts/mpi-retry.sh: a command failing twice, then succeeding; one always failing;
# a usage error (status 2) is not retried.
retry=("$root/scripts/mpi-retry.sh" --delay 0)
flaky=(bash -c 'n=$(cat "$1" 2>/dev/null || echo 0); echo $((n + 1)) >"$1"; [[ $n -ge 2 ]]' _ "$tmp/count")
out=$(timeout -k 5 30 "${retry[@]}" 5 -- "${flaky[@]}" 2>&1); rc=$?
check "retry: fails twice, then succeeds on attempt 3 of 5 (exit $rc)" \
      "[[ $rc -eq 0 && \$(cat '$tmp/count') -eq 3 ]] && grep -q '^mpi-retry: attempt 2 exited with status 1\$' <<<\"\$out\" && grep -q '^mpi-retry: attempt 3 succeeded\$' <<<\"\$out\" && ! grep -q 'attempt 4' <<<\"\$out\"" "$out"
out=$(timeout -k 5 30 "${retry[@]}" 3 -- bash -c 'exit 7' 2>&1); rc=$?
check "retry: always failing gives up after 3 attempts with the last status (exit $rc)" \
      "[[ $rc -eq 7 ]] && [[ \$(grep -c '^mpi-retry: attempt [0-9] of 3:' <<<\"\$out\") -eq 3 ]]" "$out"
out=$(timeout -k 5 30 "${retry[@]}" 3 -- bash -c 'exit 2' 2>&1); rc=$?
check "retry: status 2 (usage) is not retried (exit $rc)" \
      "[[ $rc -eq 2 && \$(grep -c 'of 3:' <<<\"\$out\") -eq 1 ]]" "$out"
# The first attempt loses a device at its 50th queue submission on a rank: past the first
# checkpoint (about step 46 with one submission per replica and step; the step it lands on
# follows the submissions a step costs, so the check does not name it); the second resumes
# from the newest checkpoint (a multiple of 10 before 60) and finishes.
C=$tmp/r
first=(bash -c 'if [[ ! -e $1 ]]; then touch "$1"; export VKT_FAULT_INJECT=vkQueueSubmit:50; fi
                exec "${@:2}"' _ "$tmp/r.failed")
out=$(timeout -k 5 180 "${retry[@]}" 3 -- "${first[@]}" "${mpirun[@]}" -np 2 "$bin" train \
      --steps 60 --quiet --save-every 10 --checkpoint-dir "$C" 2>&1); rc=$?
check "retry: a job that lost a device finishes on attempt 2 from its checkpoint (exit $rc)" \
      "[[ $rc -eq 0 ]] && grep -q '^mpi-retry: attempt 1 exited with status [1-9]' <<<\"\$out\" && grep -Eq '^resumed from step [1-5]0\$' <<<\"\$out\" && grep -q '^mpi-retry: attempt 2 succeeded\$' <<<\"\$out\" && grep -q '^result: .* steps=60 .* ranks=2' <<<\"\$out\"" "$out"
check "no process left" gone

finish
