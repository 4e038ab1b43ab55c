#!/usr/bin/env bash
# The divergence guard (docs/checkpoint.md, "Divergence") on the command line, for every
# shipped model:
#  - healthy runs never trip it: mlp, cnn and charlm, each with every optimizer at its
#    default learning rate (and the mlp at 10 times Adam's), save every checkpoint they
#    are asked for and exit 0;
#  - a blow-up is refused at its first save for cnn and charlm too, and with 2 replicas,
#    async replicas and 2 pipeline stages: exit 1, the step, the good checkpoint named and
#    left alone; the same command again stops there again;
#  - --max-growth: 0 lets any growth through (the old behaviour), a value below the healthy
#    growth refuses a healthy run;
#  - the guard's message for a run without checkpoints (exit 1 instead of 0).
# Long runs of every model are measured in docs/checkpoint.md; these are short ones.
# Usage: divergence.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); echo "ok: $1"; else fail=$((fail+1)); echo "FAIL: $1" >&2; [[ $# -gt 2 ]] && tail -n 5 <<<"$3" >&2; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { timeout -k 5 300 "$bin" train "$@" --quiet 2>&1; }
count() { ls "$1" 2>/dev/null | grep -c '^ckpt-[0-9]*\.vkt$'; }
export LP_NUM_THREADS=${LP_NUM_THREADS-1}
# The char LM's runs train on the shipped text's first 20 000 characters: a run ends by
# measuring the loss over all of its last 10% and 1000 training windows, which on the whole
# text (68 000 validation characters) was most of a 24-step run (5.3 s of CPU, 3.1 s on the
# prefix); the guard watches the parameters, not the text.
head -c 20000 "$(dirname "$0")/../../data/austen/pride_and_prejudice.txt" >"$tmp/text.txt"
lm=(--model charlm --text "$tmp/text.txt")

# 1. Healthy runs: every checkpoint saved (--keep 0 keeps them all).
healthy() { # NAME STEPS EVERY ARGS...
    local name=$1 steps=$2 every=$3; shift 3
    local d="$tmp/h-$name" out rc
    out=$(run "$@" --steps "$steps" --save-every "$every" --keep 0 --checkpoint-dir "$d"); rc=$?
    check "healthy $name: exit 0, all $((steps / every)) checkpoints saved ($(count "$d"))" \
          "[[ $rc -eq 0 && $(count "$d") -eq $((steps / every)) ]] && ! grep -q DIVERGED <<<\"\$out\"" "$out"
    rm -rf "$d"
}
for o in sgd momentum nesterov adam adamw; do
    healthy "mlp-$o" 124 4 --optimizer $o           # 2 epochs of the shipped digits
    healthy "cnn-$o" 40 4 --model cnn --optimizer $o
    healthy "charlm-$o" 24 4 "${lm[@]}" --optimizer $o --eval-every 0 --sample 0
done
healthy mlp-adam-lr0.01 124 4 --optimizer adam --lr 0.01
healthy charlm-adamw-lr0.01 24 4 "${lm[@]}" --lr 0.01 --eval-every 0 --sample 0
healthy mlp-2-replicas 62 2 --replicas 2
healthy mlp-async 62 2 --replicas 2 --mode async
healthy mlp-pipeline 62 2 --pipeline 2

# 2. Blow-ups, from a good checkpoint of step 10, a checkpoint every step: the first save
# the guard refuses (step N: 11 when the first step blows up, later when the weights grow
# in a few steps, each below the limit) names ckpt-<N-1>, the only one left (--keep 1);
# the same command again goes back to it and stops at N again.
blow() { # NAME GOOD_ARGS -- BAD_ARGS
    local name=$1; shift
    local good=() bad=()
    while [[ $1 != -- ]]; do good+=("$1"); shift; done
    shift
    bad=("$@")
    local d="$tmp/b-$name" out rc n
    run "${good[@]}" --steps 10 --checkpoint-dir "$d" >/dev/null
    out=$(run "${good[@]}" "${bad[@]}" --steps 40 --save-every 1 --keep 1 --checkpoint-dir "$d"); rc=$?
    n=$(grep -om1 'training diverged by step [0-9]*' <<<"$out" | grep -o '[0-9]*$')
    check "$name: exit 1, refused at step ${n:-?} (11 to 13), ckpt-$((${n:-1} - 1)) named" \
          "[[ $rc -eq 1 && ${n:-0} -ge 11 && ${n:-0} -le 13 ]] && grep -q \"cannot save a checkpoint: VKT_ERROR_DIVERGED: training diverged by step $n: .*the newest checkpoint, $d/ckpt-$((${n:-1} - 1)).vkt, is from before\" <<<\"\$out\"" "$out"
    check "$name: ckpt-$((${n:-1} - 1)) alone is left" "[[ \"\$(ls '$d')\" == ckpt-$((${n:-1} - 1)).vkt ]]"
    out=$(run "${good[@]}" "${bad[@]}" --steps 40 --save-every 1 --keep 1 --checkpoint-dir "$d"); rc=$?
    check "$name: the same command again resumes from $((${n:-1} - 1)) and stops at ${n:-?}" \
          "[[ $rc -eq 1 ]] && grep -q '^resumed from step $((${n:-1} - 1))$' <<<\"\$out\" && grep -q 'diverged by step $n:' <<<\"\$out\"" "$out"
    rm -rf "$d"
}
blow cnn --model cnn -- --lr 30
blow charlm "${lm[@]}" --eval-every 0 --sample 0 -- --lr 1e6
blow mlp-2-replicas --replicas 2 -- --lr 30
blow mlp-async --replicas 2 --mode async -- --lr 30
blow mlp-pipeline --pipeline 2 -- --lr 30

# 3. --max-growth: 0 is no limit (the blow-up is saved, as before the guard); 1.01 is below
# the growth of a healthy run (refused, naming the limit).
d="$tmp/nolimit"
out=$(run --lr 30 --steps 20 --save-every 5 --max-growth 0 --checkpoint-dir "$d"); rc=$?
check "--max-growth 0: the blow-up is saved, exit 0 ($(count "$d") checkpoints)" "[[ $rc -eq 0 && $(count "$d") -eq 3 ]]" "$out"
out=$(run --steps 60 --save-every 20 --max-growth 1.01 --checkpoint-dir "$tmp/tight"); rc=$?
check "--max-growth 1.01 refuses a healthy run, naming the limit" \
      "[[ $rc -eq 1 ]] && grep -q 'the limit is 1.01x' <<<\"\$out\"" "$out"
out=$(run --max-growth -1); rc=$?
check "--max-growth -1: exit 2 naming the option" "[[ $rc -eq 2 ]] && grep -q -- '--max-growth' <<<\"\$out\"" "$out"

# 4. No checkpoints: the guard at the end turns a finite blow-up's exit 0 into 1.
out=$(run "${lm[@]}" --lr 10 --steps 6 --eval-every 0 --sample 0); rc=$?
check "charlm --lr 10 without checkpoints: exit 1, training diverged" \
      "[[ $rc -eq 1 ]] && grep -q 'training failed: VKT_ERROR_DIVERGED: training diverged by step 6' <<<\"\$out\"" "$out"

echo "divergence: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
