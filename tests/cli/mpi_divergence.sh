#!/usr/bin/env bash
# The divergence guard across ranks (docs/checkpoint.md, "Divergence"), each job started
# here with mpirun on this one machine. The chief alone writes, every rank checks its own
# copy of what a save would hold (bitwise the chief's in sync mode), so the ranks agree
# without a message and none waits for another:
#  - sync, 2 ranks, from a good ckpt-20 at --lr 30 with a checkpoint every 5 steps: the
#    chief's save of step 25 is refused, every rank stops there with VKT_ERROR_DIVERGED (the
#    other naming rank 0), none waiting out --comm-timeout (600 s there, past the job's
#    outer limit of 120 s, which a loaded machine leaves room for: the seconds are printed,
#    not asserted); ckpt-20 alone is left; a rerun with a smaller --lr resumes from it on 2
#    ranks and finishes;
#  - the final save refused (no periodic one): every rank says so itself;
#  - no --checkpoint-dir: every rank's check at the end fails alike (exit 1, not 0);
#  - async across ranks (the parameter server): the refusal in the chief's callback stops
#    every rank;
#  - charlm with --save-secs: the chief's clock decides when every rank saves, so all
#    check the same step and stop together.
# Usage: mpi_divergence.sh BIN_DIR (ctest gives it the environment of tests/mpi/common.sh)
set -u
name=mpi_divergence
bin=$1/vkt
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/mpi/common.sh"
# lines of rank R in a --tag-output job's output
of_rank() { grep -E "^\[[0-9]+,$1\]<std(out|err)>:" <<<"$2"; }

# 1. sync, a periodic save refused
d="$tmp/sync"
mpi 120 -np 2 "$bin" train --steps 20 --checkpoint-dir "$d" --quiet >/dev/null 2>&1
t0=$(now)
out=$(mpi 120 -np 2 --tag-output "$bin" train --lr 30 --steps 60 --save-every 5 --keep 1 \
      --checkpoint-dir "$d" --comm-timeout 600 --quiet 2>&1); rc=$?
secs=$(since "$t0")
check "sync, lr 30: the job fails (rc $rc) in ${secs} s, within the 120 s limit: no rank waiting out the 600 s timeout" \
      "[[ $rc -ne 0 && $rc -ne 124 ]]" "$out"
check "rank 0: its save of step 25 refused, ckpt-20 named" \
      "of_rank 0 \"\$out\" | grep -q \"cannot save a checkpoint: VKT_ERROR_DIVERGED: training diverged by step 25: .*the newest checkpoint, $d/ckpt-20.vkt, is from before\"" "$out"
check "rank 1: VKT_ERROR_DIVERGED, naming rank 0" \
      "of_rank 1 \"\$out\" | grep -q 'VKT_ERROR_DIVERGED: rank 0 found training diverged at step 26'" "$out"
check "ckpt-20 alone is left" "[[ \"\$(ls '$d')\" == ckpt-20.vkt ]]"
out=$(mpi 120 -np 2 "$bin" train --lr 0.01 --steps 40 --checkpoint-dir "$d" --quiet 2>&1); rc=$?
check "a rerun with --lr 0.01 resumes from 20 on 2 ranks and finishes" \
      "[[ $rc -eq 0 ]] && grep -q '^resumed from step 20$' <<<\"\$out\" && [[ -f '$d/ckpt-40.vkt' ]]" "$out"

# 2. the final save refused: both ranks check their own copy
d="$tmp/final"
out=$(mpi 120 -np 2 --tag-output "$bin" train --lr 30 --steps 30 --save-secs 0 \
      --checkpoint-dir "$d" --quiet 2>&1); rc=$?
check "the final save refused: rank 0 and rank 1 each say 'training diverged by step 30'" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && of_rank 0 \"\$out\" | grep -q 'diverged by step 30' && of_rank 1 \"\$out\" | grep -q 'cannot save a checkpoint: VKT_ERROR_DIVERGED: training diverged by step 30'" "$out"
check "nothing written" "[[ -z \"\$(ls '$d' 2>/dev/null | grep ckpt)\" ]]"

# 3. no checkpoints: the check at the end, on every rank
out=$(mpi 120 -np 2 --tag-output "$bin" train --lr 30 --steps 30 --quiet 2>&1); rc=$?
check "no --checkpoint-dir: every rank fails the check at the end (rc $rc)" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && of_rank 0 \"\$out\" | grep -q 'training failed: VKT_ERROR_DIVERGED: training diverged by step 30' && of_rank 1 \"\$out\" | grep -q 'training failed: VKT_ERROR_DIVERGED: training diverged by step 30'" "$out"

# 4. async across ranks: the chief's callback refuses, every rank stops
d="$tmp/async"
t0=$(now)
out=$(mpi 120 -np 2 --tag-output "$bin" train --mode async --lr 30 --steps 60 --save-every 5 \
      --checkpoint-dir "$d" --comm-timeout 600 --quiet 2>&1); rc=$?
secs=$(since "$t0")
check "async across ranks: the job fails (rc $rc) in ${secs} s, within the 120 s limit (--comm-timeout 600), the chief's save of step 5 refused" \
      "[[ $rc -ne 0 && $rc -ne 124 ]] && of_rank 0 \"\$out\" | grep -q 'cannot save a checkpoint: VKT_ERROR_DIVERGED: training diverged by step 5'" "$out"
check "  ... rank 1 stopped, naming rank 0" "of_rank 1 \"\$out\" | grep -q 'rank 0'" "$out"

# 5. charlm, a save due by the chief's clock at every step: all ranks check step 1
d="$tmp/lm"
out=$(mpi 180 -np 2 --tag-output "$bin" train --model charlm --lr 10 --steps 20 --save-secs 0.001 \
      --eval-every 0 --sample 0 --checkpoint-dir "$d" --quiet 2>&1); rc=$?
n0=$(of_rank 0 "$out" | grep -om1 'diverged by step [0-9]*')
n1=$(of_rank 1 "$out" | grep -om1 'diverged by step [0-9]*')
check "charlm --save-secs: both ranks refuse the same step (${n0:-none}, ${n1:-none})" \
      "[[ $rc -ne 0 && $rc -ne 124 && -n '$n0' && '$n0' == '$n1' ]]" "$out"
finish
