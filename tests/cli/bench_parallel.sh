#!/usr/bin/env bash
# `vkt bench parallel` as a user runs it, quickly: a few steps per configuration, the
# tables (throughput, averaging bandwidth, waiting for a slowed replica, sync and async
# replicas sharing one VkDevice) and a
# well-formed result line; option errors. No timing thresholds: the figures belong to
# bench/README.md, not here.
# Usage: bench_parallel.sh BIN_DIR   (VKT_DATA_DIR set by ctest)
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
num='[0-9]+(\.[0-9]+)?'

out=$(LP_NUM_THREADS=1 "$bin" bench parallel --steps 4 --warmup 1 --slow-ms 2 --rounds 1 2>&1); rc=$?
check "bench parallel exits 0" "[[ $rc -eq 0 ]]"
check "the device line shows LP_NUM_THREADS" "grep -q '^device: .*LP_NUM_THREADS=1' <<<\"\$out\""
check "throughput: sync and async rows for 1, 2 and 4 replicas" \
  "[[ \$(grep -Ec '^(sync|async) +(1 +128|2 +64|4 +32) +[0-9]+ +$num +${num}x ' <<<\"\$out\") -eq 6 ]]"
check "throughput: MB staged per step is 2 x replicas x params x 4 (0 for one replica)" \
  "awk '/ params x 4 bytes/ { for (i = 1; i <= NF; i++) if (\$i == \"params\") p = \$(i-1) }
        /^(sync|async) +[124] +[0-9]+ / { rows[++n] = \$2 \" \" \$10 }
        END { if (!p || n != 6) exit 1
              for (k = 1; k <= n; k++) { split(rows[k], f, \" \"); r = f[1]
                want = r > 1 ? 8 * r * p / 1e6 : 0; d = f[2] - want
                if (d > 0.01 || d < -0.01) exit 1 } }' <<<\"\$out\""
check "throughput: round trips per replica and step: 1 submit and 1 wait alone and in sync (the update rides with the next step), 1 and 1 in async (lavapipe maps everything: no transfer), exposed ms on every row" \
  "awk '/^(sync|async) +[124] +[0-9]+ / { n++; split(\$12, f, \"/\"); want = 1
        if (f[1] != want || f[2] != want || f[3] != 0 || \$11 !~ /^[0-9]+\\.[0-9]+\$/) bad = 1 }
        END { exit !(n == 6 && !bad) }' <<<\"\$out\""
check "throughput: async rows with 2 and 4 replicas report staleness" \
  "[[ \$(grep -Ec '^async +[24] .* [0-9.]+/[0-9]+\$' <<<\"\$out\") -eq 2 ]]"
check "averaging table: averaging, memcpy and sum rows for 2 and 4 replicas" \
  "[[ \$(grep -Ec '^(sync averaging, [24] replicas|memcpy of [24] stages|sum of [24] arrays)' <<<\"\$out\") -eq 6 ]]"
check "averaging table: MB/step, ms and GB/s on every row (and a 64 MiB memcpy)" \
  "[[ \$(grep -Ec '^(sync averaging,|memcpy of|sum of) .* +$num +$num +$num\$' <<<\"\$out\") -eq 7 ]]"
check "waiting table: sync, async and bounded async, slowed and not, 4 wait figures each" \
  "[[ \$(grep -Ec '^(sync|async|async s<=1) +4 +(no|\\+2ms) +[0-9]+ +$num( +$num){4} +$num +$num\$' <<<\"\$out\") -eq 6 ]]"
check "the last line is the result line" \
  "tail -1 <<<\"\$out\" | grep -Eq '^result: sync4_samples_per_s=$num async4_samples_per_s=$num avg_gbps=$num memcpy_gbps=$num avg2_vs_memcpy=$num avg4_vs_memcpy=$num sync2_fence_waits_per_step=$num sync2_exposed_ms=$num async4_shared_samples_per_s=$num\$'"
check "the result's figures are positive; 1 fence wait per sync replica and step" \
  "tail -1 <<<\"\$out\" | awk -F'[= ]' '{ exit !(\$3 > 0 && \$5 > 0 && \$7 > 0 && \$9 > 0 && \$11 > 0 && \$13 > 0 && \$15 == 1 && \$17 > 0) }'"
check "the averaging table says the stages are host-cached (lavapipe's only memory type is)" \
  "grep -q '^   the stages are in host-cached memory\$' <<<\"\$out\""
check "the averaging's ratios to memcpy, with the threads that summed (1 to 8)" \
  "grep -Eq '^sync averaging vs a memcpy of the same bytes: ${num}x with 2 replicas, ${num}x with 4' <<<\"\$out\" &&
   [[ \$(grep -Ec '^sync averaging, [24] replicas \\(([1-8]) threads\\)' <<<\"\$out\") -eq 2 ]]"
check "shared VkDevice table: 2 and 4 sync replicas averaged by the host (one VkDevice each, gradient bytes read) and on the device (shared: none read), 2 with their staging imported (host-import), 1 submit and 1 wait per replica and step on each" \
  "[[ \$(grep -Ec '^one each +[24] +host +[0-9]+ +$num +${num}x +$num +$num +1\\.00/1\\.00/0\\.00 +0*[1-9][0-9]*\\.[0-9]+\$' <<<\"\$out\") -eq 2 ]] &&
   [[ \$(grep -Ec '^shared +[24] +device +[0-9]+ +$num +${num}x +$num +$num +1\\.00/1\\.00/0\\.00 +0\\.000\$' <<<\"\$out\") -eq 2 ]] &&
   grep -Eq '^one each +2 +host-import +[0-9]+ +$num +${num}x +$num +$num +1\\.00/1\\.00/0\\.00 +0*[1-9][0-9]*\\.[0-9]+\$' <<<\"\$out\""
check "async shared VkDevice table: 2 and 4 async replicas on the host master (one VkDevice each: parameter bytes moved) and on the device's (shared: none moved, no transfer), staleness on each" \
  "[[ \$(grep -Ec '^one each +[24] +master +[0-9]+ +$num +${num}x +$num +$num +$num/$num/0\\.00 +$num/[0-9]+ +0*[1-9][0-9]*\\.[0-9]+\$' <<<\"\$out\") -eq 2 ]] &&
   [[ \$(grep -Ec '^shared +[24] +device +[0-9]+ +$num +${num}x +$num +$num +$num/$num/0\\.00 +$num/[0-9]+ +0\\.000\$' <<<\"\$out\") -eq 2 ]]"

out=$(LP_NUM_THREADS=1 "$bin" bench parallel --batch 16 --steps 2 --warmup 0 --slow-ms 1 --rounds 1 2>&1); rc=$?
check "--batch 16: rows per replica 16, 8 and 4, the model line names the batch" \
  "[[ $rc -eq 0 ]] && grep -q 'batch 16,' <<<\"\$out\" && [[ \$(grep -Ec '^(sync|async) +(1 +16|2 +8|4 +4) ' <<<\"\$out\") -eq 6 ]]"

out=$("$bin" bench parallel --help 2>&1); rc=$?
check "--help exits 0 and names LP_NUM_THREADS" "[[ $rc -eq 0 ]] && grep -q LP_NUM_THREADS <<<\"\$out\""
out=$("$bin" bench parallel --steps 0 2>&1); rc=$?
check "--steps 0: usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
out=$("$bin" bench parallel --batch 3 2>&1); rc=$?
check "--batch 3 (fewer rows than 4 replicas): usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
out=$("$bin" bench parallel --rounds 0 2>&1); rc=$?
check "--rounds 0: usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
out=$("$bin" bench parallel --steps 2 --frobnicate 2>&1); rc=$?
check "unknown option: usage and exit 2" "[[ $rc -eq 2 ]] && grep -q usage <<<\"\$out\""
out=$("$bin" bench parallel --steps 2>&1); rc=$?
check "missing value: exit 2" "[[ $rc -eq 2 ]]"
out=$("$bin" bench parallel --steps 2 --data /nonexistent 2>&1); rc=$?
check "missing data set: exit 1 with a message" "[[ $rc -eq 1 ]] && grep -q 'cannot load the data set' <<<\"\$out\""
out=$("$bin" bench 2>&1); rc=$?
check "bench alone names parallel in its usage" "[[ $rc -eq 2 ]] && grep -q parallel <<<\"\$out\""
echo "bench_parallel: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
