#!/usr/bin/env bash
# vkt train --pipeline across processes (docs/distributed.md, "Pipeline stages across
# ranks"): a stage per rank, activations and gradients as MPI messages.
#  - `mpirun -np 2 vkt train --pipeline 2 --steps 40` prints the result line of
#    `vkt train --pipeline 2 --steps 40` in one process (accuracy and test loss to 4
#    digits); 4 ranks (2 copies of 2 stages) equal `--pipeline 2 --replicas 2`; the char
#    LM's validation and training losses equal one process's;
#  - a checkpoint saved by 2 ranks at step 20 is byte-identical to the one process's,
#    and resumes to 40 in 2 ranks, in one process with --pipeline 2 and in one plain
#    process, each with the uninterrupted run's test loss to 4 digits;
#    the chief warns once that periodic saves wait for the run's end (one process: no;
#    --quiet: yes);
#  - `-np 3 --pipeline 2` is refused on creation, the message naming both numbers, and so
#    is `VKT_PIPE_EDGES=import` (edges across ranks are messages), saying why;
#  - async copies: `-np 2 --pipeline 2 --mode async` (one copy) trains to one process's
#    losses; `-np 4 --staleness 0` (two copies) within 0.002 of the 4 sync ranks' test loss,
#    the world's staleness within the bound; a checkpoint of 4 async ranks resumes in 4
#    ranks and in one process;
#  - rank 1 killed (SIGKILL) mid-run: the job ends, nothing is left; rank 1 stopped
#    (SIGSTOP): the chief's receive gives up after --comm-timeout 3 and the job ends with
#    status 3 naming rank 1; so does rank 3 of 4 async ranks. A job ended by a failure
#    must end within an outer limit of 60 s (the defect is a hang, and these scripts run
#    beside other tests: the seconds taken are printed, not asserted).
# --split params everywhere: the default split measures the stages' time, which differs
# from run to run (the ranks agree on theirs: a split that differs is refused).
# Usage: mpi_pipeline.sh BIN_DIR  (ctest gives it the environment; VKT_MPIEXEC names the
# launcher, default mpirun)
set -u
name=mpi_pipeline
bin=$1/vkt
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/mpi/common.sh"
common=(--pipeline 2 --split params --schedule constant)

# 1. Two ranks, one stage each, against the pipeline in one process.
out=$(mpi 240 -np 2 --tag-output "$bin" train "${common[@]}" --steps 40 2>&1); rc=$?
check "mpirun -np 2 vkt train --pipeline 2: exit 0" "[[ $rc -eq 0 ]]" "$out"
ref=$(timeout -k 5 240 "$bin" train "${common[@]}" --steps 40 2>&1); rc=$?
check "vkt train --pipeline 2 in one process: exit 0" "[[ $rc -eq 0 ]]" "$ref"
echo "measured: 2 ranks: test_loss $(val test_loss "$out"), $(val samples_per_s "$out") samples/s;" \
     "one process: test_loss $(val test_loss "$ref"), $(val samples_per_s "$ref") samples/s"
for k in test_loss test_accuracy; do
    check "$k: 2 ranks $(val $k "$out") = one process $(val $k "$ref")" \
          "[[ -n '$(val $k "$out")' && '$(val $k "$out")' == '$(val $k "$ref")' ]]"
done
check "the result line says stages=2 ranks=2, from rank 0 only" \
      "[[ \$(grep -c 'result: ' <<<\"\$out\") -eq 1 ]] && grep -Eq '^\\[[0-9]+,0\\]<stdout>: ?result: .* stages=2 micro_batches=4 ranks=2\$' <<<\"\$out\"" "$out"
l_m=$(grep -o 'step 40/40  loss [0-9.]*' <<<"$out") l_r=$(grep -o 'step 40/40  loss [0-9.]*' <<<"$ref")
check "the last step's loss: '$l_m' = '$l_r'" "[[ -n '$l_m' && '$l_m' == '$l_r' ]]"
one2=$ref # one process, 40 steps: what async one copy across ranks equals (section 4)

# 4 ranks: 2 copies of 2 stages (the copies' gradients summed in the step's tail).
out=$(mpi 240 -np 4 "$bin" train "${common[@]}" --steps 20 --quiet 2>&1); rc=$?
ref=$(timeout -k 5 240 "$bin" train "${common[@]}" --replicas 2 --steps 20 --quiet 2>&1)
check "4 ranks (2 copies x 2 stages): exit 0, replicas=2 ranks=4" \
      "[[ $rc -eq 0 ]] && grep -Eq '^result: .* replicas=2 mode=sync stages=2 micro_batches=4 ranks=4\$' <<<\"\$out\"" "$out"
check "4 ranks' test loss $(val test_loss "$out") = --replicas 2's $(val test_loss "$ref")" \
      "[[ -n '$(val test_loss "$out")' && '$(val test_loss "$out")' == '$(val test_loss "$ref")' ]]"
sync4=$out # what 4 async ranks follow (section 4)

# The char LM (vkt_trainer_step per step, its evaluation and sampling through the
# chief's whole graph at the batch's rows): its losses equal one process's. On the shipped
# text's first 20 000 characters, sampling 70 (two of the sampler's 64-character pieces):
# the final losses over the whole text's 68 000 validation characters and a 200-character
# sample were most of each run (6.9 s of CPU in one process, 2.7 s so).
head -c 20000 "$root/data/austen/pride_and_prejudice.txt" >"$tmp/text.txt"
lm=(--model charlm --text "$tmp/text.txt" --layers 2 --steps 10 --sample 70)
out=$(mpi 240 -np 2 "$bin" train "${lm[@]}" "${common[@]}" 2>&1); rc=$?
ref=$(timeout -k 5 240 "$bin" train "${lm[@]}" "${common[@]}" 2>&1)
check "charlm: the chief samples" "grep -q '^sample (temperature' <<<\"\$out\"" "$out"
for k in val_loss train_loss; do
    check "charlm $k: 2 ranks $(val $k "$out") = one process $(val $k "$ref")" \
          "[[ $rc -eq 0 && -n '$(val $k "$out")' && '$(val $k "$out")' == '$(val $k "$ref")' ]]" "$out"
done

# 2. Checkpoints: saved by 2 ranks at the end of a run, resumed anywhere.
A=$tmp/a B=$tmp/b
out=$(mpi 240 -np 2 "$bin" train "${common[@]}" --steps 20 --quiet --checkpoint-dir "$A" 2>&1); rc=$?
check "2 ranks save ckpt-20.vkt" "[[ $rc -eq 0 && -f $A/ckpt-20.vkt ]]" "$out"
check "--quiet still warns that periodic saves wait for the end (a warning, not progress)" \
      "grep -q 'warning: --save-every / --save-secs: with pipeline stages across ranks' <<<\"\$out\"" "$out"
timeout -k 5 240 "$bin" train "${common[@]}" --steps 20 --quiet --checkpoint-dir "$B" >/dev/null 2>&1
check "the same bytes as one process's checkpoint" "cmp -s '$A/ckpt-20.vkt' '$B/ckpt-20.vkt'"
cp -r "$A" "$tmp/c"; cp -r "$A" "$tmp/d"
full=$(timeout -k 5 240 "$bin" train "${common[@]}" --steps 40 --quiet 2>&1)
want=$(val test_loss "$full")
out=$(mpi 240 -np 2 "$bin" train "${common[@]}" --steps 40 --checkpoint-dir "$A" 2>&1); rc=$?
check "2 ranks resume from step 20: exit 0, test loss $(val test_loss "$out") = uninterrupted $want" \
      "[[ $rc -eq 0 && -n '$want' && '$(val test_loss "$out")' == '$want' ]] && grep -q '^resumed from step 20\$' <<<\"\$out\"" "$out"
check "the chief warns, once, that periodic saves (--save-secs 60 by default) wait for the end" \
      "[[ \$(grep -c 'warning: --save-every / --save-secs: with pipeline stages across ranks the checkpoint is saved at the end' <<<\"\$out\") -eq 1 ]]" "$out"
out=$(timeout -k 5 240 "$bin" train "${common[@]}" --steps 40 --checkpoint-dir "$tmp/c" 2>&1)
check "one process gives no such warning" "! grep -q 'warning: --save-every' <<<\"\$out\"" "$out"
check "one process --pipeline 2 resumes it: test loss $(val test_loss "$out") = $want" \
      "[[ '$(val test_loss "$out")' == '$want' ]] && grep -q '^resumed from step 20\$' <<<\"\$out\"" "$out"
out=$(timeout -k 5 240 "$bin" train --schedule constant --steps 40 --checkpoint-dir "$tmp/d" 2>&1)
check "one plain process resumes it: test loss $(val test_loss "$out") = $want" \
      "[[ '$(val test_loss "$out")' == '$want' ]] && grep -q '^resumed from step 20\$' <<<\"\$out\"" "$out"

# 3. Ranks that are not a multiple of the stages.
out=$(mpi 120 -np 3 "$bin" train "${common[@]}" --steps 4 2>&1); rc=$?
check "-np 3 --pipeline 2: refused ($rc), naming 3 ranks and 2 stages" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && grep -q 'VKT_ERROR_INVALID_ARGUMENT: vkt_trainer_create: 3 ranks do not split into pipelines of 2 stages' <<<\"\$out\"" "$out"
check "no process left" gone
# Import edges (VKT_PIPE_EDGES=import) are for stages in one process: across ranks the
# edges are messages, and creation says so.
out=$(VKT_PIPE_EDGES=import mpi 120 -np 2 "$bin" train "${common[@]}" --steps 4 2>&1); rc=$?
check "VKT_PIPE_EDGES=import -np 2 --pipeline 2: refused ($rc), saying why" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && grep -q 'VKT_ERROR_INVALID_ARGUMENT: VKT_PIPE_EDGES=import: stages across ranks send their edges as messages' <<<\"\$out\"" "$out"
check "no process left" gone
# 4. Async copies across ranks (pipe_async_world.c): each stage's master sharded over the
# stage's ranks, each copy's push applied in the order it arrives. (tests/test_mpi_pipeline.c
# checks them against the one-process async pipeline, bit for bit with one copy, within
# 1e-4 and the same staleness figures with two.) One copy: the one-process (sync) run's
# losses, bit for bit.
out=$(mpi 120 -np 2 "$bin" train "${common[@]}" --mode async --steps 40 2>&1); rc=$?
l_m=$(grep -o 'step 40/40  loss [0-9.]*' <<<"$out") l_r=$(grep -o 'step 40/40  loss [0-9.]*' <<<"$one2")
check "-np 2 --mode async (one copy): exit 0 ($rc), '$l_m' and test loss $(val test_loss "$out") = one process's '$l_r', $(val test_loss "$one2")" \
      "[[ $rc -eq 0 && -n '$l_m' && '$l_m' == '$l_r' && -n '$(val test_loss "$out")' && '$(val test_loss "$out")' == '$(val test_loss "$one2")' ]]" "$out"
# Two copies, with a bound of 0: within 0.002 of the 4 sync ranks' test loss (momentum SGD:
# the pushes of a step add up to sync's update; their order varies), each step's 2 pushes
# into a master stale by 0 and 1, within (D-1)(2s+1) = 1: the copies meet every step.
out=$(mpi 240 -np 4 "$bin" train "${common[@]}" --mode async --staleness 0 --steps 20 2>&1); rc=$?
echo "measured: -np 4 async: test_loss $(val test_loss "$out"), $(grep -o '^async: .*' <<<"$out");" \
     "-np 4 sync: test_loss $(val test_loss "$sync4")"
check "-np 4 --mode async: exit 0 ($rc), replicas=2 mode=async ranks=4, staleness mean 0.50 max 1" \
      "[[ $rc -eq 0 ]] && grep -Eq '^result: .* replicas=2 mode=async stages=2 micro_batches=4 ranks=4 staleness_mean=0.50 staleness_max=1\$' <<<\"\$out\"" "$out"
check "-np 4 async test loss $(val test_loss "$out") within 0.002 of 4 sync ranks' $(val test_loss "$sync4")" \
      "close '$(val test_loss "$out")' '$(val test_loss "$sync4")' 0.002"
check "the world's staleness: every rank's pushes, 80 = 20 steps x 2 stages x 2 copies" \
      "grep -q '^async: 80 updates, staleness mean 0.50 p99 1 max 1\$' <<<\"\$out\"" "$out"
# the plan line gives a micro-batch's rows: batch 128 / 2 copies / 4 micro-batches
check "the plan line says each copy's micro-batch: 16 rows (128 / 2 copies / 4)" \
      "grep -q '^pipeline: 2 stages x 4 micro-batches of 16 rows,' <<<\"\$out\"" "$out"
# Checkpoints: saved by 4 async ranks at step 10, resumed to 20 by 4 ranks and by one
# process with 2 async copies, each within 0.002 of the uninterrupted 4 ranks' test loss.
# Plain SGD: a checkpoint keeps copy 0's optimizer state and a restore gives it to every
# copy (docs/async.md), so with momentum a resumed async run follows another path, in one
# process as across ranks.
sgd=(--optimizer sgd --mode async --quiet)
E=$tmp/e
out=$(mpi 240 -np 4 "$bin" train "${common[@]}" "${sgd[@]}" --steps 10 --checkpoint-dir "$E" 2>&1); rc=$?
check "4 async ranks save ckpt-10.vkt" "[[ $rc -eq 0 && -f $E/ckpt-10.vkt ]]" "$out"
cp -r "$E" "$tmp/f"
full=$(mpi 240 -np 4 "$bin" train "${common[@]}" "${sgd[@]}" --steps 20 2>&1)
want=$(val test_loss "$full")
out=$(mpi 240 -np 4 "$bin" train "${common[@]}" "${sgd[@]}" --steps 20 --checkpoint-dir "$E" 2>&1); rc=$?
check "4 async ranks resume from step 10: exit 0, test loss $(val test_loss "$out") within 0.002 of uninterrupted $want" \
      "[[ $rc -eq 0 ]] && close '$(val test_loss "$out")' '$want' 0.002 && grep -q '^resumed from step 10\$' <<<\"\$out\"" "$out"
out=$(timeout -k 5 240 "$bin" train "${common[@]}" "${sgd[@]}" --replicas 2 --steps 20 --checkpoint-dir "$tmp/f" 2>&1)
check "one process with 2 async copies resumes it: test loss $(val test_loss "$out") within 0.002 of $want" \
      "close '$(val test_loss "$out")' '$want' 0.002 && grep -q '^resumed from step 10\$' <<<\"\$out\"" "$out"
check "no process left" gone

# 5. A rank killed, a rank stopped. The job's progress lines (every 2 s off a terminal)
# say it is training; its checkpoint folder marks its processes.
C=$tmp/k
mpi 300 -np 2 "$bin" train "${common[@]}" --steps 100000 --checkpoint-dir "$C" >"$tmp/k.out" 2>&1 &
job=$!
for ((i = 0; i < 2400; i++)); do grep -q 'step [0-9]*/' "$tmp/k.out" && break; sleep 0.1; done
victim=$(rank_pid 1 "$C")
check "the job trains and rank 1 is found (pid ${victim:-none})" "[[ -n '$victim' ]]" "$(cat "$tmp/k.out")"
t0=$(now)
[[ -n $victim ]] && kill -KILL "$victim"
reap "$job" 60; rc=$?
t=$(since "$t0")
check "rank 1 killed: mpirun exits $rc != 0, within 60 s ($t s)" \
      "[[ $rc -ne 0 && $rc -ne 124 ]]" "$(cat "$tmp/k.out")"
check "no process left" gone

# stop_rank NP RANK NAME ARGS...: an -np NP job of `vkt train ARGS --comm-timeout 3` in
# $tmp/NAME, rank RANK stopped (SIGSTOP) once the job trains; sets rc (124 if the job still
# runs 60 s after the stop), t (seconds from the stop to the job's end) and out.
stop_rank() {
    local np=$1 rank=$2 C=$tmp/$3 victim
    shift 3
    mpi 300 -np "$np" "$bin" train "${common[@]}" "$@" --steps 100000 --checkpoint-dir "$C" \
        --comm-timeout 3 >"$C.out" 2>&1 &
    local job=$!
    for ((i = 0; i < 2400; i++)); do grep -q 'step [0-9]*/' "$C.out" && break; sleep 0.1; done
    victim=$(rank_pid "$rank" "$C")
    check "the job trains and rank $rank is found (pid ${victim:-none})" "[[ -n '$victim' ]]" \
          "$(cat "$C.out")"
    local t0
    t0=$(now)
    [[ -n $victim ]] && kill -STOP "$victim"
    reap "$job" 60; rc=$?
    t=$(since "$t0")
    out=$(cat "$C.out")
}

stop_rank 2 1 s
check "rank 1 stopped: exit status 3, within 60 s ($rc, $t s)" "[[ $rc -eq 3 ]]" "$out"
check "the chief reports the timeout, naming rank 1" \
      "grep -qE 'vkt: rank 0: training failed at step [0-9]+: VKT_ERROR_TIMEOUT: .*did not complete in 3 s: rank\\(s\\) 1 (have not arrived|stopped answering)' <<<\"\$out\"" "$out"
check "every process gone" gone
# The same with async copies (4 ranks): rank 3 stopped, the job ends with status 3 naming it.
stop_rank 4 3 as --mode async
check "async, rank 3 stopped: exit status 3, within 60 s ($rc, $t s), naming rank 3" \
      "[[ $rc -eq 3 ]] && grep -qE 'VKT_ERROR_TIMEOUT: .*(rank\\(s\\) ([0-9]+, )*3 (have not arrived|stopped answering)|rank 3 did not push)' <<<\"\$out\"" "$out"
check "every process gone" gone
finish
