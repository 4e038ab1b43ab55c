#!/usr/bin/env bash
# Sizes that cannot fit are refused up front, quickly and by name (issue 11 item 7):
# `vkt train --model charlm --layers 100000` once spent minutes in the memory planner.
# It must exit non-zero within 10 seconds with a message naming --layers and the memory.
# Usage: limits.sh BIN_DIR
set -u
bin=$1
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }

start=$(date +%s.%N)
out=$(timeout 60 "$bin/vkt" train --model charlm --layers 100000 --steps 1 --quiet 2>&1)
rc=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
check "charlm --layers 100000 exits non-zero (rc $rc)" "[[ $rc -ne 0 && $rc -ne 124 ]]"
check "refused within 10 s ($secs s)" "awk -v s=$secs 'BEGIN { exit !(s < 10) }'"
check "the message names --layers and the memory" \
    "grep -q -- '--layers 100000' <<<\"\$out\" && grep -q 'GB of memory' <<<\"\$out\""
[[ $fail -gt 0 ]] && echo "--- vkt printed:" >&2 && echo "$out" >&2
echo "limits.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
