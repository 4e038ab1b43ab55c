#!/usr/bin/env bash
# examples/pipeline_mlp as a user runs it (model parallelism, issue 13), held to what its
# header promises:
#  - 2 stages x 4 micro-batches, 5 epochs: test accuracy >= 0.94 (a correct run measured
#    0.949; the same graph on one stage 0.9515);
#  - the stages' bytes (vkt_trainer_stage_stats_get): the parameter bytes of the 2 stages
#    add up to the whole model's (each parameter on one stage), the activation bytes to
#    the trainer's statistics, and each stage's device bytes hold its four categories;
#  - the losses of the pipeline equal the unpipelined trainer's: the last step's loss of
#    30 steps with 2 stages x 4 micro-batches, and with 2 stages x 2 data-parallel copies
#    (VKT_DEVICES=0,0,0,0), within 1e-5 relative of 1 stage (measured: 2.2e-7 and
#    1.1e-7; the batch mean is then a sum of micro-batch means, float sums in another
#    order). Over whole epochs the difference grows (6e-5 after 62 steps, 8% of the
#    final loss after 5 epochs, as any reordering of float sums does in training), so the
#    comparison is on a short run.
# Usage: pipeline_mlp.sh BIN_DIR   (VKT_DATA_DIR: the shipped digits)
set -u
bin=$1
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
# at_least VALUE MIN: VALUE is a number and VALUE >= MIN.
at_least() { awk -v v="$1" -v m="$2" 'BEGIN { exit !(v ~ /^-?[0-9]+(\.[0-9]+)?$/ && v >= m) }'; }
# close A B TOL: both are numbers and |A - B| <= TOL * |B| (B nonzero).
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { n = "^-?[0-9]+(\\.[0-9]+)?(e-?[0-9]+)?$"
    d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
    exit !(a ~ n && b ~ n && m > 0 && d <= t * m) }'; }
# field NAME LINE: the value of the first word "NAME=value" in LINE.
field() { awk -v k="$1=" '{ for (i = 1; i <= NF; i++) if (index($i, k) == 1) {
    print substr($i, length(k) + 1); exit } }' <<<"$2"; }
# run [ARGS]: runs the example; sets out (stdout and stderr), rc, and res (its last
# "result: " line); shows the output afterwards if one of its checks failed.
run() { out=$("$bin/pipeline_mlp" "$@" 2>&1); rc=$?; res=$(grep '^result: ' <<<"$out" | tail -1); }
shown=0
show_if_failed() { if [[ $fail -gt $shown ]]; then echo "--- pipeline_mlp $1 printed:" >&2
    echo "$out" >&2; fi; shown=$fail; }
# sums LABEL: "A B" from the line "LABEL bytes: stages' sum A, ... B".
sums() { sed -nE "s/^$1 bytes: stages' sum ([0-9]+), [^0-9]*([0-9]+)$/\1 \2/p" <<<"$out"; }

start=$SECONDS
run
check "2 stages exits 0" "[[ $rc -eq 0 ]]"
check "2 stages prints a line per epoch (5)" "[[ \$(grep -c '^epoch ' <<<\"\$out\") -eq 5 ]]"
rows=$(grep -E '^ +[01] +0( +[0-9]+){6}$' <<<"$out")
check "2 stages prints a row of bytes for each stage" "[[ \$(wc -l <<<\"\$rows\") -eq 2 ]]"
# columns: stage device ops param grad optimizer activation device_bytes
check "each stage's device bytes hold its parameters, gradients, optimizer and activations" \
    "awk '{ if (\$8 < \$4 + \$5 + \$6 + \$7 || \$4 == 0) bad = 1 } END { exit bad }' <<<\"\$rows\""
read -r p_stages p_model <<<"$(sums param)"
check "the stages' parameter bytes add up to the model's (${p_stages:-} vs ${p_model:-})" \
    "[[ -n '${p_stages:-}' && '${p_stages:-}' -gt 0 && '${p_stages:-}' == '${p_model:-}' ]]"
read -r a_stages a_trainer <<<"$(sums activation)"
check "the stages' activation bytes add up to the trainer's (${a_stages:-} vs ${a_trainer:-})" \
    "[[ -n '${a_stages:-}' && '${a_stages:-}' -gt 0 && '${a_stages:-}' == '${a_trainer:-}' ]]"
acc=$(field test_accuracy "$res")
check "2 stages x 4 micro-batches reach test_accuracy >= 0.94 (test_accuracy=$acc)" \
    "at_least '$acc' 0.94"
show_if_failed "(5 epochs)"
echo "pipeline_mlp, 5 epochs: $((SECONDS - start)) s, $res"

run --stages 1 --steps 30
one=$(field last_loss "$res")
check "1 stage, 30 steps exits 0 with a loss (${one:-})" "[[ $rc -eq 0 ]] && at_least '$one' 0"
show_if_failed "--stages 1 --steps 30"
run --stages 2 --steps 30
two=$(field last_loss "$res")
check "2 stages x 4 micro-batches: the loss of step 30 within 1e-5 of 1 stage's ($two vs $one)" \
    "[[ $rc -eq 0 ]] && close '$two' '$one' 1e-5"
show_if_failed "--stages 2 --steps 30"
out=$(VKT_DEVICES=0,0,0,0 "$bin/pipeline_mlp" --stages 2 --steps 30 2>&1); rc=$?
res=$(grep '^result: ' <<<"$out" | tail -1)
copies=$(field last_loss "$res")
check "2 stages x 2 copies prints it" \
    "grep -q '^trainer: 2 stages x 2 data-parallel copies' <<<\"\$out\""
check "2 stages x 2 copies: the loss of step 30 within 1e-5 of 1 stage's ($copies vs $one)" \
    "[[ $rc -eq 0 ]] && close '$copies' '$one' 1e-5"
show_if_failed "--stages 2 --steps 30 (VKT_DEVICES=0,0,0,0)"

echo "pipeline_mlp: $pass passed, $fail failed, $((SECONDS - start)) s"
[[ $fail -eq 0 ]]
