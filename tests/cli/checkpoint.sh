#!/usr/bin/env bash
# vkt train --checkpoint-dir: a run killed with SIGKILL at random moments, again and
# again, always resumes from a valid checkpoint (never a corrupt one: the writes are
# atomic) and ends with the same test loss and accuracy as an uninterrupted run (resume
# is bitwise exact); a corrupt newest checkpoint is reported and the previous one used;
# vkt export writes the parameters as safetensors that an independent reader loads.
# Usage: checkpoint.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
args=(train --steps 600 --hidden 32 --batch 64 --dropout 0.1 --optimizer adam --quiet)
metrics() { grep -Eo 'test_accuracy=[0-9.]+ test_loss=[0-9.]+ steps=[0-9]+' <<<"$1"; }

t0=$(date +%s.%N)
ref=$("$bin" "${args[@]}" 2>&1); rc=$?
t_ref=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.3f", b - a}')
check "uninterrupted run exits 0" "[[ $rc -eq 0 ]]"
want=$(metrics "$ref")

# SIGKILL at random moments within the length of an uninterrupted run (measured above, so
# the trial kills on a fast machine too); every start resumes from what the last left.
ck="$tmp/ck"
killed=0 resumed=0 bad=0
for trial in $(seq 1 12); do
    delay=$(awk -v r=$RANDOM -v t="$t_ref" 'BEGIN{printf "%.3f", t * (0.15 + (r % 70) / 100)}')
    out=$(timeout -s KILL "$delay" "$bin" "${args[@]}" --checkpoint-dir "$ck" --save-every 3 \
          --keep 2 2>&1); rc=$?
    [[ $rc -eq 137 ]] && killed=$((killed+1))
    grep -q '^resumed from step' <<<"$out" && resumed=$((resumed+1))
    if [[ $rc -ne 137 && $rc -ne 0 ]] || grep -q 'corrupt' <<<"$out"; then
        bad=$((bad+1)); echo "trial $trial (kill after ${delay}s): rc $rc: $out" >&2
    fi
    [[ $rc -eq 0 ]] && break
done
check "no killed run left a corrupt or unreadable checkpoint ($bad bad)" "[[ $bad -eq 0 ]]"
echo "killed $killed times, resumed $resumed times"
check "runs were killed ($killed) and resumed ($resumed)" "[[ $killed -ge 1 && $resumed -ge 1 ]]"
out=$("$bin" "${args[@]}" --checkpoint-dir "$ck" --save-every 3 --keep 2 2>&1); rc=$?
check "the last start finishes" "[[ $rc -eq 0 ]]"
check "killed and resumed equals uninterrupted ($(metrics "$out") vs $want)" \
      "[[ \"$(metrics "$out")\" == \"$want\" ]]"
n=$(ls "$ck" | grep -c '^ckpt-[0-9]*\.vkt$')
check "--keep 2 keeps two checkpoints (found $n)" "[[ $n -eq 2 ]]"
check "no temporary files left" "! ls \"$ck\" | grep -q tmp"
out=$("$bin" "${args[@]}" --checkpoint-dir "$ck" 2>&1); rc=$?
check "a finished run resumes at its last step and stops" \
      "[[ $rc -eq 0 ]] && grep -q '^resumed from step 600$' <<<\"\$out\""

# A corrupt newest checkpoint: reported with the reason, the previous one used.
newest=$(ls "$ck" | sort -t- -k2 -n | tail -1)
printf '\x01' | dd of="$ck/$newest" bs=1 seek=5000 conv=notrunc status=none
out=$("$bin" "${args[@]}" --checkpoint-dir "$ck" 2>&1); rc=$?
check "corrupt newest: reported (checksum mismatch), previous used" \
      "[[ $rc -eq 0 ]] && grep -q \"$newest' is corrupt: checksum mismatch\" <<<\"\$out\" && grep -q '^resumed from step 597$' <<<\"\$out\""

# A checkpoint of another model: a clear error naming the tensor.
out=$("$bin" train --steps 600 --hidden 16 --batch 64 --quiet --checkpoint-dir "$ck" 2>&1); rc=$?
check "another model: exit 1 naming the tensor" \
      "[[ $rc -eq 1 ]] && grep -q 'does not match the model: parameter' <<<\"\$out\""

# Export: safetensors read by an independent reader (Python's standard library).
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/model.safetensors" 2>&1); rc=$?
check "export exits 0" "[[ $rc -eq 0 ]]"
check "export of an empty folder fails" "! \"$bin\" export --checkpoint-dir \"$tmp/none\" -o \"$tmp/x\" >/dev/null 2>&1"
if command -v python3 >/dev/null; then
    res=$(python3 - "$tmp/model.safetensors" "$ck/ckpt-600.vkt" <<'PY' 2>&1
import json, struct, sys, zlib
st = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', st[:8])[0]
hdr = json.loads(st[8:8 + n])
data = st[8 + n:]
meta = hdr.pop('__metadata__')
# the checkpoint, parsed independently: header, CRC, sections (docs/checkpoint.md)
ck = open(sys.argv[2], 'rb').read()
assert ck[:8] == b'VKTCKPT\0'
ver, hb, plen, pcrc, hcrc = struct.unpack('<IIQII', ck[8:32])
assert ver == 1 and hb == 32 and plen == len(ck) - 32
assert zlib.crc32(ck[32:]) == pcrc and zlib.crc32(ck[:28]) == hcrc
p, tensors = 32, {}
while p < len(ck):
    tag, _, ln = struct.unpack('<4sIQ', ck[p:p + 16]); body = ck[p + 16:p + 16 + ln]; p += 16 + ln
    if tag == b'PARM':
        cnt = struct.unpack('<I', body[:4])[0]; q = 8
        for _ in range(cnt):
            l = struct.unpack('<I', body[q:q + 4])[0]; name = body[q + 4:q + 4 + l].decode(); q += 4 + l
            nd = struct.unpack('<I', body[q:q + 4])[0]; shape = list(struct.unpack('<%dI' % nd, body[q + 4:q + 4 + 4 * nd])); q += 4 + 4 * nd
            c = struct.unpack('<Q', body[q:q + 8])[0]; q += 8
            tensors[name] = (shape, body[q:q + 4 * c]); q += 4 * c
assert meta["step"] == "600", meta
assert set(hdr) == set(tensors), (sorted(hdr), sorted(tensors))
end = 0
for name, e in hdr.items():
    assert e['dtype'] == 'F32'
    b, f = e['data_offsets']
    assert e['shape'] == tensors[name][0] and f - b == 4 * eval('*'.join(map(str, e['shape'])))
    assert data[b:f] == tensors[name][1], name
    vals = struct.unpack('<%df' % ((f - b) // 4), data[b:f])
    assert all(v == v and abs(v) < 1e3 for v in vals), name
    end = max(end, f)
assert end == len(data)
print('ok', len(hdr))
PY
)
    check "safetensors read back equal to the checkpoint ($res)" "[[ \"$res\" == ok* ]]"
fi
echo "checkpoint.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
