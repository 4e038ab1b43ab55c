#!/usr/bin/env bash
# The catalogue of ways a user can run vkt wrong (and what used to go wrong), one line
# each: the exit status, the message, and that every checkpoint left behind still loads
# (vkt export reads the newest valid one; a corrupt file moved aside is never counted).
# The topic scripts (options.sh, checkpoint.sh, signals.sh, messages.sh, limits.sh,
# export_plot.sh, train.sh) test each area in depth; this one keeps the whole list in
# one table, printed as it runs.
# Usage: catalogue.sh BIN_DIR
set -u
bin=$(cd "$1" && pwd)/vkt
pass=0 fail=0
tmp=$(mktemp -d); bg=
trap '[[ -n $bg ]] && kill -KILL $bg 2>/dev/null; rm -rf "$tmp"' EXIT
# case NAME WANT_RC REGEX OUTPUT RC: one row of the table
case_() {
    local name=$1 want=$2 re=$3 out=$4 rc=$5
    if [[ $rc -eq $want ]] && grep -Eq -- "$re" <<<"$out"; then
        pass=$((pass+1)); printf 'ok   | %-58s | %3s | %s\n' "$name" "$rc" "$(grep -Em1 -- "$re" <<<"$out" | cut -c1-90)"
    else
        fail=$((fail+1)); printf 'FAIL | %-58s | %3s (want %s) | %s\n' "$name" "$rc" "$want" "$(tail -2 <<<"$out" | tr '\n' ' ' | cut -c1-160)" >&2
    fi
}
# loads DIR: every checkpoint the folder offers loads
loads() { "$bin" export --checkpoint-dir "$1" -o "$tmp/x.safetensors" >/dev/null 2>&1; }
run() { timeout -k 5 120 "$bin" "$@" 2>&1; }
# until_line FILE REGEX: waits (60 s at most) for a line of a background run's output
until_line() { for _ in $(seq 600); do grep -Eq -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# options, parsed whole, finite and in range (exit 2, the option named)
for a in "--lr abc" "--lr 0" "--lr nan" "--lr -1" "--batch -1" "--steps -1" "--epochs 1.5" \
         "--steps abc" "--staleness -1" "--dropout -0.5" "--keep -1" "--replicas 0" \
         "--recompute sometimes"; do
    out=$(run train $a); rc=$?
    case_ "vkt train $a" 2 "${a%% *}" "$out" $rc
done
out=$(run train --steps 2 --frobnicate); rc=$?
case_ "a trailing unknown option" 2 "unknown option '--frobnicate'" "$out" $rc
out=$(VKT_KERNELS=tpu run train --steps 2); rc=$?
case_ "VKT_KERNELS=tpu" 1 "VKT_KERNELS='tpu'" "$out" $rc
out=$(VKT_VALIDATION=syn run train --steps 2); rc=$?
case_ "VKT_VALIDATION=syn (a typo of sync): refused, not level 1" 1 "VKT_ERROR_INVALID_ARGUMENT: VKT_VALIDATION='syn'" "$out" $rc

# messages arrive whole
out=$(VKT_DEVICES=0,,x run devices); rc=$?
case_ "VKT_DEVICES=0,,x: one clean message" 1 "bad device list '0,,x'" "$out" $rc
[[ $(grep -c 'VKT_DEVICES: VKT_DEVICES' <<<"$out") -eq 0 ]] || case_ "no repeated prefix" 0 "^$" "$out" 1

# degenerate runs and sizes
out=$(run train --batch 100000); rc=$?
case_ "a batch larger than the data" 1 "fewer than one batch of 100000" "$out" $rc
t0=$SECONDS
out=$(run train --model charlm --layers 100000); rc=$?
case_ "charlm --layers 100000 refused up front ($((SECONDS - t0)) s)" 1 "--layers 100000.*memory" "$out" $rc

# divergence: a non-finite loss stops the run at its step
out=$(run train --lr 1e6 --steps 50); rc=$?
case_ "--lr 1e6 diverges" 1 "VKT_ERROR_DIVERGED: the loss is .* at step [0-9]+" "$out" $rc
# the divergence guard (docs/checkpoint.md, "Divergence"): a finite blow-up is caught at
# the end of a run without checkpoints, and no checkpoint of one is ever saved: from a
# good ckpt-20, each blow-up is refused at its first save (step 25) naming ckpt-20, which
# survives every --keep; the same command again goes back to 20 and stops there again;
# with a smaller --lr the run resumes from 20 and trains on
for c in "adam --lr 1e6|--optimizer adam --lr 1e6|--optimizer adam" \
         "momentum --lr 2|--lr 2|--optimizer momentum" "momentum --lr 30|--lr 30|--optimizer momentum"; do
    IFS='|' read -r name args good <<<"$c"
    out=$(run train $args --steps 40 --quiet); rc=$?
    case_ "$name, no checkpoints: caught at the end" 1 "training failed: VKT_ERROR_DIVERGED: training diverged by step 40: the parameters' RMS is" "$out" $rc
    g="$tmp/good${good// /}"
    [[ -d $g ]] || run train $good --steps 20 --checkpoint-dir "$g" --quiet >/dev/null
    for k in 1 2 3; do
        d="$tmp/div$k${args//[ .]/}"
        cp -r "$g" "$d"
        out=$(run train $args --steps 60 --save-every 5 --keep $k --checkpoint-dir "$d" --quiet); rc=$?
        case_ "$name --keep $k: refused at step 25, ckpt-20 named" 1 "VKT_ERROR_DIVERGED: training diverged by step 25: the parameters' RMS is .*: the newest checkpoint, $d/ckpt-20.vkt, is from before" "$out" $rc
        [[ "$(ls "$d")" == ckpt-20.vkt ]] && loads "$d"; case_ "  ... ckpt-20 alone is left, and loads" 0 "" "" $?
        if [[ $k -eq 3 ]]; then
            out=$(run train $args --steps 60 --save-every 5 --keep $k --checkpoint-dir "$d" --quiet); rc=$?
            both="$(grep -m1 '^resumed from step' <<<"$out"); $(grep -om1 'training diverged by step [0-9]*' <<<"$out")"
            case_ "  ... the same command again: from 20, refused again" 1 "^resumed from step 20; training diverged by step 25$" "$both" $rc
        fi
        out=$(run train $good --lr 0.01 --steps 40 --save-every 5 --keep $k --checkpoint-dir "$d" --quiet); rc=$?
        case_ "  ... rerun with --lr 0.01: resumes from 20, trains on" 0 "^resumed from step 20" "$out" $rc
    done
done
# checkpoints of every step from the start: the first is refused, nothing is written
out=$(run train --lr 1e6 --steps 50 --checkpoint-dir "$tmp/div" --save-every 1); rc=$?
case_ "--lr 1e6, a checkpoint every step: none written" 1 "training diverged by step 1: .*not saved \(no checkpoint in '$tmp/div' yet\)" "$out" $rc
[[ -z "$(ls "$tmp/div" | grep ckpt)" ]]; case_ "  ... the folder holds no checkpoint" 0 "" "" $?

# retention: a corrupt newer checkpoint does not cost the good one
run train --steps 20 --checkpoint-dir "$tmp/ret" --quiet >/dev/null
printf 'not a checkpoint' >"$tmp/ret/ckpt-1000.vkt"
out=$(run train --steps 40 --checkpoint-dir "$tmp/ret" --keep 1 --quiet); rc=$?
case_ "corrupt newer + --keep 1: warned, moved aside" 0 "warning: .*ckpt-1000.vkt" "$out" $rc
out=$(run train --steps 60 --checkpoint-dir "$tmp/ret" --quiet); rc=$?
case_ "  ... the next run resumes" 0 "^resumed from step 40" "$out" $rc
out=$(run train --steps 60 --checkpoint-dir "$tmp/ret" --quiet); rc=$?
case_ "resuming a finished run" 0 "nothing to train: the checkpoint is at step 60 of 60" "$out" $rc

# one run per checkpoint folder
# --foreground: timeout passes a signal to its child only; without it timeout also sends
# it to its whole process group, and vkt takes the second copy for a second Ctrl-C.
timeout --foreground -k 5 120 env --default-signal=INT,TERM "$bin" train --steps 100000 \
    --checkpoint-dir "$tmp/lock" --save-secs 1000 --quiet >"$tmp/lock.out" 2>&1 &
bg=$!
for _ in $(seq 100); do [[ -e $tmp/lock/.vkt.lock ]] && break; sleep 0.1; done
sleep 1
out=$(run train --steps 5 --checkpoint-dir "$tmp/lock" --quiet); rc=$?
case_ "a second run on a folder in use" 1 "is in use by another run" "$out" $rc

# Ctrl-C: the step finishes, a checkpoint is saved, status 130
kill -INT $bg; wait $bg; rc=$?; bg=
out=$(cat "$tmp/lock.out")
case_ "SIGINT during training" 130 "interrupted \(SIGINT\) at step [0-9]+: saved checkpoint" "$out" $rc
loads "$tmp/lock"; case_ "  ... that checkpoint loads" 0 "" "" $?

# SIGHUP (a closed terminal or ssh session): as SIGTERM, saved and named, status 129
timeout --foreground -k 5 120 env --default-signal=INT,TERM,HUP "$bin" train --steps 100000 \
    --checkpoint-dir "$tmp/hup" --save-secs 1000 >"$tmp/hup.out" 2>&1 &
bg=$!
until_line "$tmp/hup.out" '^step '
kill -HUP $bg; wait $bg; rc=$?; bg=
out=$(cat "$tmp/hup.out")
case_ "SIGHUP during training" 129 "interrupted \(SIGHUP\) at step [0-9]+: saved checkpoint" "$out" $rc
loads "$tmp/hup"; case_ "  ... that checkpoint loads" 0 "" "" $?

# Ctrl-C while the char LM samples at the end: stops within a piece (64 characters),
# exit 130, the last step's checkpoint named; the second Ctrl-C is not needed
timeout --foreground -k 5 120 env --default-signal=INT,TERM "$bin" train --model charlm \
    --steps 2 --layers 1 --width 32 --heads 2 --context 16 --batch 8 --eval-every 0 \
    --sample 1000000 --checkpoint-dir "$tmp/smp" >"$tmp/smp.out" 2>&1 &
bg=$!
until_line "$tmp/smp.out" '^step 2/2'
sleep 2 # the validation loss, then sampling
kill -INT $bg
for _ in $(seq 100); do kill -0 $bg 2>/dev/null || break; sleep 0.1; done
kill -0 $bg 2>/dev/null && { kill -INT $bg; echo "(the first SIGINT was not enough)" >>"$tmp/smp.out"; }
wait $bg; rc=$?; bg=
out=$(cat "$tmp/smp.out")
case_ "SIGINT while charlm samples: one is enough" 130 "^vkt: interrupted \(SIGINT\) at step 2: saved checkpoint .*/ckpt-2.vkt" "$out" $rc

# export says when it skips a corrupt newest checkpoint
cp -r "$tmp/ret" "$tmp/exp"
printf 'garbage' >"$tmp/exp/ckpt-9999.vkt"
out=$("$bin" export --checkpoint-dir "$tmp/exp" -o "$tmp/e.safetensors" 2>&1); rc=$?
case_ "vkt export skips a corrupt newest checkpoint, saying so" 0 "warning: .*ckpt-9999.vkt" "$out" $rc

# ---- across ranks (mpirun -np 2; skipped without it): options the ranks must share are
# compared at start-up and named, on every model; every rank stops with status 2 at once
# (no stall, no MPI error), and no process of the job is left. The chief's end (its final
# save, evaluation and a long sample) is waited for however long it takes.
if command -v mpirun >/dev/null && ldd "$bin" 2>/dev/null | grep -q libmpi; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
        OMPI_MCA_mpi_yield_when_idle=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_tcp_disable_family=6 \
        LP_NUM_THREADS=1
    # mpi ARGS...: an MPMD job (": " between the ranks' command lines), started as one SPMD
    # job by tests/mpi/mpmd.sh (Open MPI 5.0.7's mpirun crashes on MPMD command lines);
    # every command line names a folder under $tmp, so its processes are found by that
    . "$(cd "$(dirname "$0")/../mpi" && pwd)/mpmd.sh"
    mpi() { local mpmd; mpmd_args "$@" || return; timeout -k 5 120 mpirun --bind-to none "${mpmd[@]}" 2>&1; }
    # gone: the job's processes have all ended (10 s at most: mpirun sends SIGKILL and exits
    # without waiting for the ranks to die)
    gone() {
        for _ in $(seq 100); do [[ -z $(pgrep -f -- "$tmp/m") ]] && return 0; sleep 0.1; done
        pgrep -af -- "$tmp/m" >&2; return 1
    }
    mlp=(train --steps 5 --hidden 16 --quiet)
    lm=(train --model charlm --steps 4 --layers 1 --width 32 --heads 2 --context 16 --batch 8
        --eval-every 0 --quiet)
    one="-np 1 $bin"
    out=$(mpi $one "${mlp[@]}" --logdir "$tmp/m1" --check-identical 1 : $one "${mlp[@]}" --logdir "$tmp/m1"); rc=$?
    case_ "mpirun: --check-identical on the chief only" 2 "rank 1: the ranks disagree on --check-identical \(0 here, 1 on the chief\)" "$out" $rc
    gone; case_ "  ... no process left" 0 "" "" $?
    out=$(mpi $one "${mlp[@]}" --checkpoint-dir "$tmp/m2" : $one "${mlp[@]}" --logdir "$tmp/m2"); rc=$?
    case_ "mpirun: --checkpoint-dir on the chief only" 2 "rank 0: the ranks disagree on --checkpoint-dir \(given on the chief; different on 1 of the 2 ranks\)" "$out" $rc
    gone; case_ "  ... no process left" 0 "" "" $?
    out=$(mpi $one "${mlp[@]}" --logdir "$tmp/m3" : $one "${mlp[@]}" --logdir "$tmp/m3" --steps 6); rc=$?
    case_ "mpirun: --steps 5 vs 6 (the cosine schedule's length)" 2 "rank 1: the ranks disagree on --steps \(6 here, 5 on the chief\)" "$out" $rc
    gone; case_ "  ... no process left" 0 "" "" $?
    out=$(mpi $one "${lm[@]}" --logdir "$tmp/m4" : $one "${lm[@]}" --logdir "$tmp/m4" --seed 2); rc=$?
    case_ "mpirun: charlm --seed 1 vs 2" 2 "rank 1: the ranks disagree on --seed \(2 here, 1 on the chief\)" "$out" $rc
    gone; case_ "  ... no process left" 0 "" "" $?
    src=$(cd "$(dirname "$0")/../.." && pwd)/data/austen/pride_and_prejudice.txt
    tac "$src" >"$tmp/m5.txt" # the same characters in another order: the same model
    out=$(mpi $one "${lm[@]}" --logdir "$tmp/m5" : $one "${lm[@]}" --logdir "$tmp/m5" --text "$tmp/m5.txt"); rc=$?
    case_ "mpirun: charlm --text of other contents" 2 "rank 1: the ranks disagree on the contents of --text" "$out" $rc
    gone; case_ "  ... no process left" 0 "" "" $?
    # The chief alone samples 30000 characters at the end (6 to 15 s here), longer than
    # rank 1 may wait for a silent chief (--comm-timeout 3, + 2 s): it waits anyway.
    out=$(mpi -np 2 "$bin" "${lm[@]}" --logdir "$tmp/m6" --sample 30000 --comm-timeout 3 \
          --checkpoint-dir "$tmp/m6/ck"); rc=$?
    case_ "mpirun: the chief's long end is waited for" 0 "^result: val_loss=.* ranks=2" "$out" $rc
    gone; case_ "  ... no process left" 0 "" "" $?
else
    echo "no mpirun or a build without MPI: the MPI section skipped"
fi

# outputs never clobber (README, "Outputs never clobber"): a device or a pipe is written
# in place, never replaced (the tests run as root in CI: /dev/null itself is at stake);
# an output is never an input of the command nor a checkpoint (by file identity)
out=$(run export --checkpoint-dir "$tmp/ret" -o /dev/null); rc=$?
case_ "vkt export -o /dev/null: written in place" 0 "exported the parameters of step 60 to /dev/null" "$out" $rc
[[ -c /dev/null ]]; case_ "  ... /dev/null is still a character device" 0 "" "" $?
if [[ -c /dev/full ]]; then
    out=$(run export --checkpoint-dir "$tmp/ret" -o /dev/full); rc=$?
    case_ "vkt export -o /dev/full: the write error" 1 "cannot write '/dev/full': No space left on device" "$out" $rc
    [[ -c /dev/full ]]; case_ "  ... /dev/full is still a character device" 0 "" "" $?
fi
mkfifo "$tmp/fifo"
timeout 60 cat "$tmp/fifo" >"$tmp/fifo.out" & reader=$!
out=$(run export --checkpoint-dir "$tmp/ret" -o "$tmp/fifo"); rc=$?
wait $reader
run export --checkpoint-dir "$tmp/ret" -o "$tmp/plain.st" >/dev/null
case_ "vkt export -o FIFO: streamed to its reader" 0 "exported the parameters of step 60" "$out" $rc
[[ -p $tmp/fifo ]] && cmp -s "$tmp/fifo.out" "$tmp/plain.st"; case_ "  ... still a FIFO, the reader got the whole file" 0 "" "" $?
sum=$(cksum <"$tmp/ret/ckpt-60.vkt")
out=$(run export --checkpoint-dir "$tmp/ret" -o "$tmp/ret/ckpt-60.vkt"); rc=$?
case_ "vkt export -o the newest checkpoint: refused" 1 "the output '.*ckpt-60.vkt' is a file of the checkpoint folder" "$out" $rc
ln -s "ret/ckpt-60.vkt" "$tmp/link.vkt"
out=$(cd "$tmp" && "$bin" export --checkpoint-dir ./ret/ -o link.vkt 2>&1); rc=$?
case_ "  ... through a symbolic link: refused, naming it" 1 "'link.vkt' is the same file as '\./ret//ckpt-60.vkt'" "$out" $rc
out=$(run export --checkpoint-dir "$tmp/ret" -o "$tmp/ret/ckpt-61.vkt"); rc=$?
case_ "  ... a new checkpoint name in the folder: refused" 1 "would be taken for a checkpoint" "$out" $rc
[[ $(cksum <"$tmp/ret/ckpt-60.vkt") == "$sum" && ! -e $tmp/ret/ckpt-61.vkt ]]; case_ "  ... the checkpoint untouched" 0 "" "" $?
run train --steps 10 --hidden 16 --log-every 5 --logdir "$tmp/logs" --quiet >/dev/null
csv=$(ls "$tmp"/logs/scalars.*.csv); sum=$(cksum <"$csv")
out=$(run plot "$tmp/logs" -o "$csv"); rc=$?
case_ "vkt plot logs -o logs/scalars.<stamp>.csv: refused" 1 "the output '.*scalars\..*\.csv' is an input of this command" "$out" $rc
[[ $(cksum <"$csv") == "$sum" ]]; case_ "  ... the CSV untouched" 0 "" "" $?
name=$(printf 'n%.0s' $(seq 243)).st
out=$(cd "$tmp" && "$bin" export --checkpoint-dir ret -o "$name" 2>&1); rc=$?
case_ "vkt export -o a 246-byte name" 0 "exported the parameters of step 60" "$out" $rc
name=$(printf 'n%.0s' $(seq 243)).safetensors
out=$(cd "$tmp" && "$bin" export --checkpoint-dir ret -o "$name" 2>&1); rc=$?
case_ "vkt export -o a 255-byte name" 0 "exported the parameters of step 60" "$out" $rc
out=$(cd "$tmp" && "$bin" export --checkpoint-dir ret -o "x$name" 2>&1); rc=$?
case_ "  ... 256 bytes: the system's reason" 1 "File name too long" "$out" $rc

mkdir -p "$tmp/lk" && ln -s /dev/null "$tmp/lk/.vkt.lock"
out=$(run train --steps 2 --checkpoint-dir "$tmp/lk"); rc=$?
case_ "a checkpoint folder whose lock file links to /dev/null" 1 "cannot lock the checkpoint folder .*: it is a symbolic link, not a regular file" "$out" $rc
[[ -c /dev/null ]]; case_ "  ... /dev/null is still a character device" 0 "" "" $?

# two runs in one second on one log folder: the second gets files of its own (the first
# pair's names are taken for every second the run can start in, with marker contents)
host=$(uname -n | tr '/\\' '__'); now=$(date +%s); mkdir -p "$tmp/same"
for t in $(seq $((now - 2)) $((now + 120))); do
    echo marker >"$tmp/same/events.out.tfevents.$t.$host"; echo marker >"$tmp/same/scalars.$t.$host.csv"
done
out=$(run train --steps 10 --hidden 16 --log-every 5 --logdir "$tmp/same"); rc=$?
case_ "a second run in the same second on one --logdir" 0 "summaries every 5 steps: .*/events\.out\.tfevents\.[0-9]+-2\.$host" "$out" $rc
intact=0
for t in $(seq $((now - 2)) $((now + 120))); do
    [[ $(cat "$tmp/same/events.out.tfevents.$t.$host") == marker && $(cat "$tmp/same/scalars.$t.$host.csv") == marker ]] || intact=1
done
case_ "  ... the other run's files untouched" 0 "" "" $intact

# devices, warnings, numbers
out=$(VKT_DEVICES=0,0,0 run train --pipeline 2 --steps 1); rc=$?
case_ "VKT_DEVICES=0,0,0 --pipeline 2: refused, not 1 unused" 2 "VKT_DEVICES lists 3 devices, not a multiple of --pipeline 2" "$out" $rc
out=$(run train --pipeline 2 --replicas 2 --mode async --steps 2); rc=$?
case_ "--pipeline 2 --replicas 2 --mode async: trains (was exit 2)" 0 "^async: 8 updates, staleness mean 0\.50 p99 1 max 1$" "$out" $rc
out=$(run train --pipeline 2 --scale-lr --steps 1); rc=$?
case_ "--pipeline 2 --scale-lr: refused, the options named" 2 "^vkt train: --pipeline and --micro-batches train without --scale-lr" "$out" $rc
out=$(VKT_DEVICES=0,0,0 run train --replicas 2 --steps 1); rc=$?
case_ "VKT_DEVICES=0,0,0 --replicas 2: refused" 2 "VKT_DEVICES lists 3 devices, more than --replicas 2 uses" "$out" $rc
cp -r "$tmp/ret" "$tmp/many"
for i in $(seq 1000 1250); do printf 'junk' >"$tmp/many/ckpt-$i.vkt"; done
out=$(run export --checkpoint-dir "$tmp/many" -o "$tmp/many.st"); rc=$?
cut=$(grep '^vkt: warning: ' <<<"$out" | grep -Ev "^vkt: warning: (checkpoint '[^']*/ckpt-[0-9]+\.vkt' is corrupt: not a vktrain checkpoint \(bad magic\)|\.\.\. and [0-9]+ more like these); trying an older checkpoint\$" | head -1)
case_ "251 corrupt newer checkpoints: warnings whole, the rest counted" 0 "^vkt: warning: \.\.\. and [0-9]+ more like these; trying an older checkpoint\$" "$out" $rc
[[ -z $cut ]]; case_ "  ... no warning cut mid-sentence ${cut:0:60}" 0 "" "" $?
out=$(VKT_DEVICES=99999999999999999999999 run devices); rc=$?
case_ "VKT_DEVICES=99999999999999999999999: the number as typed" 1 "index 99999999999999999999999 too large" "$out" $rc
awk 'BEGIN { srand(5); for (c = 0; c < 4100; c++) printf "f%d,", c; print "label";
  for (r = 0; r < 30; r++) { for (c = 0; c < 4100; c++) printf "%.2f,", rand() + (c < 3 ? r % 2 : 0); print r % 2 } }' >"$tmp/wide.csv"
out=$(timeout -k 5 300 "${bin%/vkt}/csv_train" --epochs 2 --out "$tmp/wide" "$tmp/wide.csv" label 2>&1); rc=$?
case_ "csv_train on 4100 feature columns (classification)" 0 "^result: val_accuracy=" "$out" $rc

echo "catalogue: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
