#!/usr/bin/env bash
# Error messages arrive whole: a message that wraps another one (a replica's error inside
# the trainer's, the device list's inside VKT_DEVICES's) names each prefix once and keeps
# every word. Before the fix the formatter read the buffer it wrote, giving text such as
# "replica 0: replica 0: reate: ..." and "VKT_DEVICES: VKT_DEVICES: st '0,,x'".
# Usage: messages.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1

# Clean: every "vkt:" line names no prefix twice in a row ("a: a: "), and no prefix is
# the tail of another ("reate:" beside "vkt_model_create:", "T_DEVICES:" beside
# "VKT_DEVICES:"), the mark of a word cut by an overlapping write.
clean() {
    local line a b tokens
    while IFS= read -r line; do
        [[ $line == vkt:* || $line == "vkt train:"* ]] || continue
        if grep -Eq '(^|: )([^:]+: )\2' <<<"$line"; then echo "repeated prefix: $line" >&2; return 1; fi
        tokens=$(grep -oE '[A-Za-z_][A-Za-z0-9_]*:' <<<"$line" | sort -u)
        for a in $tokens; do
            for b in $tokens; do
                if [[ $a != "$b" && $b == *"$a" ]]; then echo "cut word '$a': $line" >&2; return 1; fi
            done
        done
    done <<<"$1"
    return 0
}

# A message reaches the user (non-zero exit, a "vkt:" line, or "vkt train:" for an option
# refused before anything runs) and is clean.
refused() { [[ $2 -ne 0 ]] && grep -Eq '^vkt( train)?: ' <<<"$1" && clean "$1"; }

out=$("$bin" train --batch -5 --steps 1 2>&1); rc=$?
check "train --batch -5: refused, message clean ($out)" "refused \"\$out\" $rc"
out=$("$bin" train --batch 100000000 --steps 1 2>&1); rc=$?
check "train --batch 100000000: refused, message clean ($out)" "refused \"\$out\" $rc"
# A batch too large for the model: the replica's error inside the trainer's.
out=$("$bin" train --model charlm --batch 100000000 --steps 1 2>&1); rc=$?
check "charlm --batch 100000000: refused, message clean ($out)" "refused \"\$out\" $rc"
out=$(VKT_DEVICES=0,0 "$bin" train --model charlm --batch 100000000 --steps 1 2>&1); rc=$?
check "two replicas, batch too large: refused, message clean ($out)" "refused \"\$out\" $rc"
if grep -q 'replica 0' <<<"$out"; then
    check "the replica's message keeps its function name" "grep -q 'replica 0: vkt_model_create: ' <<<\"\$out\""
fi

# VKT_DEVICES: named once, the list whole.
for cmd in devices "train --steps 1"; do
    out=$(VKT_DEVICES=0,,x "$bin" $cmd 2>&1); rc=$?
    err=$(grep '^vkt: ' <<<"$out")
    check "VKT_DEVICES=0,,x vkt $cmd: refused, message clean ($err)" "refused \"\$out\" $rc"
    check "VKT_DEVICES=0,,x vkt $cmd: the list whole" "grep -q \"bad device list '0,,x': expected a device index at position 2\" <<<\"\$err\""
    check "VKT_DEVICES=0,,x vkt $cmd: VKT_DEVICES named once" "[[ \$(grep -o VKT_DEVICES <<<\"\$err\" | wc -l) -eq 1 ]]"
done

# A number past what the parser holds is shown as typed, not as the clamped value
# (before: "index 18446744073709551615 too large").
for cmd in devices "train --steps 1"; do
    out=$(VKT_DEVICES=0,99999999999999999999999 "$bin" $cmd 2>&1); rc=$?
    check "VKT_DEVICES=0,99999999999999999999999 vkt $cmd: the index as typed ($out)" "refused \"\$out\" $rc && grep -q 'index 99999999999999999999999 too large (at most 1023)' <<<\"\$out\" && ! grep -q 18446744073709551615 <<<\"\$out\""
done

echo "messages: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
