#!/usr/bin/env bash
# vkt train --checkpoint-dir: a run killed with SIGKILL at random moments, again and
# again, always resumes from a valid checkpoint (never a corrupt one: the writes are
# atomic) and ends with the same test loss and accuracy as an uninterrupted run (resume
# is bitwise exact); a corrupt newest checkpoint is reported, moved aside and the previous
# one used; retention counts only checkpoints that verify (a corrupt newer one with
# --keep 1 does not cost the good ones); diverged checkpoints of an older build are gone
# back past (moved aside as .diverged), and with none sound the run fails saying what to
# do, changing nothing (docs/checkpoint.md, "Divergence"); a second run on a folder in
# use fails at once without touching it, and a SIGKILLed run leaves no lock behind;
# vkt export writes the parameters as safetensors that an independent reader loads.
# Usage: checkpoint.sh BIN_DIR
set -u
bin=$1/vkt
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d); holder=
trap '[[ -n $holder ]] && kill -KILL $holder 2>/dev/null; rm -rf "$tmp"' EXIT
args=(train --steps 600 --hidden 32 --batch 64 --dropout 0.1 --optimizer adam --quiet)
metrics() { grep -Eo 'test_accuracy=[0-9.]+ test_loss=[0-9.]+ steps=[0-9]+' <<<"$1"; }

t0=$(date +%s.%N)
ref=$("$bin" "${args[@]}" 2>&1); rc=$?
t_ref=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.3f", b - a}')
check "uninterrupted run exits 0" "[[ $rc -eq 0 ]]"
want=$(metrics "$ref")

# SIGKILL at random moments between the time a start takes to write its first checkpoint
# and the end of an uninterrupted run (both measured here, so the trials kill on a fast
# machine, a loaded one, and under AddressSanitizer, where start-up and the leak check at
# exit take most of a run); every start resumes from what the last left. A first start
# that finishes before its kill (the reference run measured during a burst of load on a
# shared machine) is timed and becomes the reference, and the trials start over.
t0=$(date +%s.%N)
"$bin" "${args[@]}" --steps 3 --checkpoint-dir "$tmp/first" --save-every 3 >/dev/null 2>&1 &
first=$!
while [[ ! -e $tmp/first/ckpt-3.vkt ]] && kill -0 $first 2>/dev/null; do sleep 0.02; done
t_first=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.3f", b - a}')
wait $first
ck="$tmp/ck"
killed=0 resumed=0 bad=0
for trial in $(seq 1 12); do
    delay=$(awk -v r=$RANDOM -v t="$t_ref" -v f="$t_first" \
            'BEGIN{ span = t - f; if (span < 0.5) span = 0.5;
                    printf "%.3f", f + span * (0.1 + (r % 50) / 100)}')
    t0=$(date +%s.%N)
    out=$(timeout -s KILL "$delay" "$bin" "${args[@]}" --checkpoint-dir "$ck" --save-every 3 \
          --keep 2 2>&1); rc=$?
    if [[ $rc -eq 0 && $killed -eq 0 && $trial -lt 12 ]] && ! grep -q '^resumed' <<<"$out"; then
        t_ref=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.3f", b - a}')
        echo "trial $trial finished unkilled before ${delay} s: the reference is now ${t_ref} s"
        rm -rf "$ck"
        continue
    fi
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
check "corrupt newest: reported (checksum mismatch), moved aside, previous used" \
      "[[ $rc -eq 0 ]] && grep -q \"$newest' is corrupt: checksum mismatch .*(moved aside to '.*$newest.corrupt')\" <<<\"\$out\" && grep -q '^resumed from step 597$' <<<\"\$out\" && [[ -f '$ck/$newest.corrupt' ]]"

# Retention counts only checkpoints that verify. A good ckpt-40 and a corrupt newer
# ckpt-1000, --keep 1: the run resumes from 40 (ckpt-1000 reported and moved aside), saves
# ckpt-60 and the next run resumes from it.
r="$tmp/retain"
small=(train --steps 40 --hidden 16 --batch 64 --quiet)
"$bin" "${small[@]}" --checkpoint-dir "$r" --save-every 20 >/dev/null 2>&1
cp "$r/ckpt-40.vkt" "$r/ckpt-1000.vkt"
printf '\x01' | dd of="$r/ckpt-1000.vkt" bs=1 seek=3000 conv=notrunc status=none
out=$("$bin" "${small[@]/40/60}" --checkpoint-dir "$r" --keep 1 2>&1); rc=$?
files=$(ls "$r" | tr '\n' ' ')
check "good older + corrupt newer, --keep 1: resumed from 40, ckpt-1000 reported and moved aside, ckpt-60 kept ($files)" \
      "[[ $rc -eq 0 ]] && grep -q '^resumed from step 40$' <<<\"\$out\" && grep -q \"ckpt-1000.vkt' is corrupt: .*moved aside\" <<<\"\$out\" && [[ '$files' == 'ckpt-1000.vkt.corrupt ckpt-60.vkt ' ]]"
out=$("$bin" "${small[@]/40/80}" --checkpoint-dir "$r" --keep 1 2>&1); rc=$?
check "the next run resumes from ckpt-60" "[[ $rc -eq 0 ]] && grep -q '^resumed from step 60$' <<<\"\$out\""
# a corrupt file the restore does not reach (older than the newest valid one) is found by
# retention: --keep 3 keeps the 2 valid ones and moves ckpt-70 aside, with a warning
cp "$r/ckpt-80.vkt" "$r/ckpt-70.vkt"
printf '\x01' | dd of="$r/ckpt-70.vkt" bs=1 seek=3000 conv=notrunc status=none
out=$("$bin" "${small[@]/40/100}" --checkpoint-dir "$r" --keep 3 2>&1); rc=$?
files=$(ls "$r" | tr '\n' ' ')
check "--keep 3 counts valid checkpoints only: ckpt-70 moved aside at the save, 80 and 100 kept ($files)" \
      "[[ $rc -eq 0 ]] && grep -q \"^vkt: warning: checkpoint '.*ckpt-70.vkt' is corrupt: checksum mismatch .*moved aside\" <<<\"\$out\" && [[ '$files' == 'ckpt-100.vkt ckpt-1000.vkt.corrupt ckpt-70.vkt.corrupt ckpt-80.vkt ' ]]"

# One run per folder: a second run while one runs fails at once (exit 1, naming the folder
# and the holder's pid) without touching the folder; after the first is killed with
# SIGKILL, a new run takes the folder. The holder saves only at its end (--save-secs 0), so
# the folder stands still while it runs.
l="$tmp/locked"
"$bin" "${small[@]/40/20}" --checkpoint-dir "$l" >/dev/null 2>&1
"$bin" train --steps 100000000 --hidden 16 --batch 64 --quiet --checkpoint-dir "$l" \
    --save-secs 0 >"$tmp/holder.out" 2>&1 &
holder=$!
for _ in $(seq 1 600); do grep -q '^resumed from step' "$tmp/holder.out" && break; sleep 0.1; done
before=$(cd "$l" && ls -la --time-style=full-iso . && md5sum ckpt-*)
out=$("$bin" "${small[@]/40/60}" --checkpoint-dir "$l" 2>&1); rc=$?
after=$(cd "$l" && ls -la --time-style=full-iso . && md5sum ckpt-*)
check "a second run on a folder in use: exit 1 naming the folder and the holder (pid $holder)" \
      "[[ $rc -eq 1 ]] && grep -q \"checkpoint folder '$l' is in use by another run (pid $holder on \" <<<\"\$out\""
check "the second run touched nothing in the folder" "[[ \"\$before\" == \"\$after\" ]]"
kill -KILL $holder; wait $holder 2>/dev/null; holder=
out=$("$bin" "${small[@]/40/30}" --checkpoint-dir "$l" 2>&1); rc=$?
check "after a SIGKILL of the holder a new run takes the folder and resumes" \
      "[[ $rc -eq 0 ]] && grep -q '^resumed from step 20$' <<<\"\$out\" && [[ -f '$l/ckpt-30.vkt' ]]"

# A checkpoint of another model: a clear error naming the tensor.
out=$("$bin" train --steps 600 --hidden 16 --batch 64 --quiet --checkpoint-dir "$ck" 2>&1); rc=$?
check "another model: exit 1 naming the tensor" \
      "[[ $rc -eq 1 ]] && grep -q 'does not match the model: parameter' <<<\"\$out\""

# Diverged checkpoints left by an older build (no NORM section, weights blown up; made
# here from a good one by an independent writer): a run goes back past them by itself to
# the newest sound one, saying so and moving them aside; with none sound it fails, names
# what to do and moves nothing; once they are moved out it starts again from step 0.
if command -v python3 >/dev/null; then
old_build() { # SRC DST SCALE: SRC's parameters times SCALE, without NORM, checksums right
    python3 - "$@" <<'PY'
import struct, sys, zlib
src, dst, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
ck = open(src, 'rb').read()
p, out = 32, b''
while p < len(ck):
    tag, res, ln = struct.unpack('<4sIQ', ck[p:p + 16]); body = bytearray(ck[p + 16:p + 16 + ln]); p += 16 + ln
    if tag == b'NORM':
        continue
    if tag == b'PARM':
        cnt, q = struct.unpack('<I', body[:4])[0], 8
        for _ in range(cnt):
            l = struct.unpack('<I', body[q:q + 4])[0]; q += 4 + l
            nd = struct.unpack('<I', body[q:q + 4])[0]; q += 4 + 4 * nd
            c = struct.unpack('<Q', body[q:q + 8])[0]; q += 8
            v = struct.unpack('<%df' % c, body[q:q + 4 * c])
            body[q:q + 4 * c] = struct.pack('<%df' % c, *[x * scale for x in v]); q += 4 * c
    out += struct.pack('<4sIQ', tag, res, len(body)) + bytes(body)
hdr = b'VKTCKPT\0' + struct.pack('<IIQI', 1, 32, len(out), zlib.crc32(out))
open(dst, 'wb').write(hdr + struct.pack('<I', zlib.crc32(hdr)) + out)
PY
}
o="$tmp/older"
"$bin" "${small[@]/40/20}" --checkpoint-dir "$o" >/dev/null 2>&1
for s in 40 50 60; do old_build "$o/ckpt-20.vkt" "$o/ckpt-$s.vkt" 1e6; done
out=$("$bin" "${small[@]/40/80}" --checkpoint-dir "$o" 2>&1); rc=$?
files=$(ls "$o" | tr '\n' ' ')
check "older diverged checkpoints above a good one: each named and moved aside, resumed from 20 ($files)" \
      "[[ $rc -eq 0 ]] && [[ \$(grep -c \"^vkt: warning: checkpoint '$o/ckpt-[456]0.vkt' (step 20) holds a diverged model: the parameters' RMS is .* (moved aside to '$o/ckpt-[456]0.vkt.diverged'); trying an older checkpoint\$\" <<<\"\$out\") -eq 3 ]] && grep -q '^resumed from step 20$' <<<\"\$out\" && [[ '$files' == 'ckpt-20.vkt ckpt-40.vkt.diverged ckpt-50.vkt.diverged ckpt-60.vkt.diverged ckpt-80.vkt ' ]]" "$out"
rm -f "$o"/ckpt-20.vkt "$o"/ckpt-*.diverged
for s in 90 100; do old_build "$o/ckpt-80.vkt" "$o/ckpt-$s.vkt" 1e4; done
rm -f "$o/ckpt-80.vkt"
printf 'garbage' >"$o/ckpt-95.vkt"
before=$(cd "$o" && ls -la --time-style=full-iso ckpt-* && md5sum ckpt-*) # (not the lock file)
out=$("$bin" "${small[@]/40/120}" --checkpoint-dir "$o" 2>&1); rc=$?
after=$(cd "$o" && ls -la --time-style=full-iso ckpt-* && md5sum ckpt-*)
check "only diverged (and corrupt) checkpoints: exit 1, VKT_ERROR_DIVERGED saying what to do" \
      "[[ $rc -eq 1 ]] && grep -q \"cannot resume from the checkpoints: VKT_ERROR_DIVERGED: no checkpoint in '$o' is from before training diverged (the newest: checkpoint '$o/ckpt-100.vkt' (step 80) holds a diverged model: .*); the files stay: move them out of the folder to start again from step 0\" <<<\"\$out\"" "$out"
check "  ... and nothing in the folder changed" "[[ \"\$before\" == \"\$after\" ]]"
mkdir "$tmp/attic" && mv "$o"/ckpt-* "$tmp/attic/"
out=$("$bin" "${small[@]/40/20}" --checkpoint-dir "$o" 2>&1); rc=$?
check "  ... once moved out, a run starts again from step 0" \
      "[[ $rc -eq 0 ]] && ! grep -q resumed <<<\"\$out\" && [[ -f '$o/ckpt-20.vkt' ]]" "$out"
fi

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
