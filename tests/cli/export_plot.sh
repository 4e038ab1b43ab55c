#!/usr/bin/env bash
# vkt export names each corrupt newer checkpoint it passes over (as vkt train does)
# instead of silently taking an older one; vkt plot keeps a curve readable when one value
# is huge (a robust y range: the outlier is drawn on the panel's edge as a triangle and
# counted), and draws an ordinary steep loss curve whole. The PNGs are read back by
# tests/png_check.py, which checks where the curve lies in given pixel columns. Outputs
# never clobber: a device or a FIFO is written in place (still one afterwards: CI runs as
# root), an output is never a checkpoint, a file of the checkpoint folder or a summary
# file the plot reads, by any spelling (links, hard links, "./"), and names of 255 bytes
# work.
# Usage: export_plot.sh BIN_DIR
set -u
bin=$(cd "$1" && pwd)/vkt
here=$(cd "$(dirname "$0")/.." && pwd)
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- export ----
ck=$tmp/ck
out=$("$bin" train --steps 4 --save-every 2 --hidden 16 --checkpoint-dir "$ck" 2>&1); rc=$?
check "a run saves checkpoints 2 and 4" "[[ $rc -eq 0 && -s $ck/ckpt-4.vkt && -s $ck/ckpt-2.vkt ]]"
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/a.st" 2>&1); rc=$?
check "export of a sound folder: step 4, no warning" "[[ $rc -eq 0 ]] && grep -q 'step 4 ' <<<\"\$out\" && ! grep -q warning <<<\"\$out\""
# --dtype: the same tensors rounded from the fp32 masters (an independent reference in Python)
for dt in fp16 bf16; do
    out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/a.$dt.st" --dtype $dt 2>&1); rc=$?
    check "export --dtype $dt: exit 0, says $dt ($out)" "[[ $rc -eq 0 ]] && grep -q '($dt)' <<<\"\$out\""
    res=$(python3 "$here/cli/st_dtype_check.py" "$tmp/a.st" "$tmp/a.$dt.st" $dt 2>&1); prc=$?
    check "export --dtype $dt: every value the F32 one rounded ($res)" "[[ $prc -eq 0 ]] && grep -q 'values agree' <<<\"\$res\""
done
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/x.st" --dtype fp8 2>&1); rc=$?
check "export --dtype fp8: exit 2 naming it, no file ($out)" "[[ $rc -eq 2 && ! -e $tmp/x.st ]] && grep -q \"\-\-dtype 'fp8'\" <<<\"\$out\""
cp "$ck/ckpt-4.vkt" "$ck/ckpt-9.vkt"
printf 'XXXX' | dd of="$ck/ckpt-9.vkt" bs=1 seek=200 conv=notrunc 2>/dev/null
: >"$ck/ckpt-12.vkt"
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/b.st" 2>"$tmp/err"); rc=$?
err=$(cat "$tmp/err")
check "export past two corrupt newer checkpoints: exit 0, step 4 ($out)" "[[ $rc -eq 0 ]] && grep -q 'exported the parameters of step 4 ' <<<\"\$out\""
check "stderr names ckpt-12 and why, as train does ($err)" "grep -q \"^vkt: warning: checkpoint '$ck/ckpt-12.vkt' is corrupt: .*; trying an older checkpoint\$\" <<<\"\$err\""
check "stderr names ckpt-9: checksum mismatch" "grep -q \"^vkt: warning: checkpoint '$ck/ckpt-9.vkt' is corrupt: checksum mismatch.*; trying an older checkpoint\$\" <<<\"\$err\""
check "the newest is named first, one line each" "[[ \$(wc -l <<<\"\$err\") -eq 2 ]] && head -1 <<<\"\$err\" | grep -q ckpt-12"
check "export leaves the corrupt files where they are" "[[ -e $ck/ckpt-12.vkt && -e $ck/ckpt-9.vkt ]]"
check "the export equals the one from before the corruption" "cmp -s \"$tmp/a.st\" \"$tmp/b.st\""
mkdir -p "$tmp/bad" && cp "$ck/ckpt-9.vkt" "$ck/ckpt-12.vkt" "$tmp/bad/"
out=$("$bin" export --checkpoint-dir "$tmp/bad" -o "$tmp/c.st" 2>&1); rc=$?
check "only corrupt checkpoints: exit 1, each named, no file ($out)" "[[ $rc -eq 1 && ! -e $tmp/c.st ]] && grep -q 'cannot export: VKT_ERROR_FORMAT: no valid checkpoint' <<<\"\$out\" && [[ \$(grep -c '^vkt: warning: ' <<<\"\$out\") -eq 2 ]]"

# ---- outputs never clobber (README, "Outputs never clobber") ----
# Run as root in CI: a device node replaced by a file would break the machine's /dev/null.
sum4=$(cksum <"$ck/ckpt-4.vkt")
out=$("$bin" export --checkpoint-dir "$ck" -o /dev/null 2>&1); rc=$?
check "export -o /dev/null: exit 0, still a character device ($out)" "[[ $rc -eq 0 && -c /dev/null ]]"
if [[ -c /dev/full ]]; then
    out=$("$bin" export --checkpoint-dir "$ck" -o /dev/full 2>&1); rc=$?
    check "export -o /dev/full: exit 1 naming the full device ($out)" "[[ $rc -eq 1 && -c /dev/full ]] && grep -q \"cannot write '/dev/full': No space left on device\" <<<\"\$out\""
fi
mkfifo "$tmp/fifo"
timeout 60 cat "$tmp/fifo" >"$tmp/fifo.out" & reader=$!
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/fifo" 2>&1); rc=$?
wait $reader
check "export -o FIFO: the reader gets the file, still a FIFO ($out)" "[[ $rc -eq 0 && -p $tmp/fifo ]] && cmp -s \"$tmp/fifo.out\" \"$tmp/a.st\""
# an existing output is replaced whole, its permission bits kept, no temporary file left
printf 'old' >"$tmp/keep.st"; chmod 600 "$tmp/keep.st"
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/keep.st" 2>&1); rc=$?
check "an existing output is replaced, mode 600 kept" "[[ $rc -eq 0 && \$(stat -c %a '$tmp/keep.st') == 600 ]] && cmp -s \"$tmp/keep.st\" \"$tmp/a.st\""
# through a symbolic link: the file it names is replaced, the link kept
ln -s keep.st "$tmp/keep.link"; printf 'old' >"$tmp/keep.st"
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/keep.link" 2>&1); rc=$?
check "through a link: its file replaced, the link kept" "[[ $rc -eq 0 && -L $tmp/keep.link ]] && cmp -s \"$tmp/keep.st\" \"$tmp/a.st\""
check "no temporary file left beside the outputs" "[[ -z \$(ls -A '$tmp' | grep '\.tmp\$') ]]"
# never a file of the checkpoint folder, by identity: every spelling
ln -s "$ck/ckpt-4.vkt" "$tmp/ck.link"; ln "$ck/ckpt-4.vkt" "$tmp/ck.hard"
for o in "$ck/ckpt-4.vkt" "$ck/./ckpt-4.vkt" "$ck/../ck/ckpt-4.vkt" "$tmp/ck.link" "$tmp/ck.hard" \
         "$ck/ckpt-9.vkt" "$ck/.vkt.lock"; do
    out=$("$bin" export --checkpoint-dir "$ck" -o "$o" 2>&1); rc=$?
    check "export -o $o: exit 1, refused naming it ($out)" "[[ $rc -eq 1 ]] && grep -q \"the output '$o' is .* of the checkpoint folder\" <<<\"\$out\""
done
out=$("$bin" export --checkpoint-dir "$ck" -o "$ck/ckpt-40.vkt" 2>&1); rc=$?
check "export -o a new ckpt- name in the folder: refused ($out)" "[[ $rc -eq 1 && ! -e $ck/ckpt-40.vkt ]] && grep -q 'would be taken for a checkpoint' <<<\"\$out\""
mkdir -p "$tmp/other" && cp "$ck/ckpt-2.vkt" "$tmp/other/saved.vkt"
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/other/saved.vkt" 2>&1); rc=$?
check "export -o another folder's checkpoint: refused ($out)" "[[ $rc -eq 1 ]] && grep -q 'is a vktrain checkpoint' <<<\"\$out\" && cmp -s \"$tmp/other/saved.vkt\" \"$ck/ckpt-2.vkt\""
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/other" 2>&1); rc=$?
check "export -o a folder: refused ($out)" "[[ $rc -eq 1 && -d $tmp/other ]] && grep -q 'is a folder' <<<\"\$out\""
check "the checkpoints are untouched" "[[ \$(cksum <'$ck/ckpt-4.vkt') == '$sum4' && -L $tmp/ck.link ]]"
out=$("$bin" export --checkpoint-dir "$ck" -o "$tmp/ok.st" 2>/dev/null); rc=$?
check "and still export (step 4)" "[[ $rc -eq 0 ]] && grep -q 'step 4 ' <<<\"\$out\""
# names of 255 bytes (the temporary name is short, whatever the final one)
name=$(printf 'n%.0s' $(seq 243)).safetensors
out=$(cd "$tmp" && "$bin" export --checkpoint-dir "$ck" -o "$name" 2>&1); rc=$?
check "a 255-byte name: exit 0, written" "[[ $rc -eq 0 ]] && cmp -s \"$tmp/$name\" \"$tmp/a.st\""
name=$(printf '\xc3\xa9%.0s' $(seq 121)).safetensors
out=$(cd "$tmp" && "$bin" export --checkpoint-dir "$ck" -o "$name" 2>&1); rc=$?
check "a 254-byte name of 2-byte characters: exit 0" "[[ $rc -eq 0 ]] && cmp -s \"$tmp/$name\" \"$tmp/a.st\""

# ---- plot ----
# A loss falling linearly from 2.0 to 0.2 over steps 0..100 with a spike of 1e9 at
# step 50. The panel spans rows 20 (top) to 300 (bottom), steps 0..100 columns 90..880.
blue=31,119,180
{
    echo "step,wall_time,tag,value"
    for s in $(seq 0 5 100); do
        v=$(awk -v s="$s" 'BEGIN { printf "%.4f", 2.0 - 1.8 * s / 100 }')
        [[ $s -eq 50 ]] && v=1e9
        echo "$s,$s.0,train/loss,$v"
    done
    echo "50,50.0,test/accuracy,0.5"
    echo "100,100.0,test/accuracy,0.8"
} >"$tmp/spike.csv"
out=$("$bin" plot "$tmp/spike.csv" -o "$tmp/spike.png" 2>&1); rc=$?
check "plot with a spike: exit 0, the outlier counted ($out)" "[[ $rc -eq 0 ]] && grep -q '^outliers: 1 in the upper panel and 0 in the lower' <<<\"\$out\""
# Before: the range 0..1e9 put every other point on the bottom row (300). Now step 10
# (1.82, column 169) is in the upper half, and the spike is a triangle whose base (8 rows
# below the apex on the top edge) reaches column 478, 7 left of the spike's column 485.
out=$(/usr/bin/python3 "$here/png_check.py" "$tmp/spike.png" 900 640 $blue \
      --only 169,20,150,$blue --at 478,20,30,$blue 2>&1); rc=$?
check "the curve keeps its shape, the spike is marked at the edge ($out)" "[[ $rc -eq 0 ]]"

# An ordinary steep loss curve (2.3 falling to 0.1) is no outlier: drawn whole, its
# first point on the top row.
{
    echo "step,wall_time,tag,value"
    for s in $(seq 0 10 290); do
        echo "$s,$s.0,train/loss,$(awk -v s="$s" 'BEGIN { printf "%.4f", 0.1 + 2.2 * exp(-s / 8) }')"
    done
    echo "290,290.0,test/accuracy,0.95"
} >"$tmp/steep.csv"
out=$("$bin" plot "$tmp/steep.csv" -o "$tmp/steep.png" 2>&1); rc=$?
check "a steep curve: exit 0, no outliers ($out)" "[[ $rc -eq 0 ]] && ! grep -q outliers <<<\"\$out\""
out=$(/usr/bin/python3 "$here/png_check.py" "$tmp/steep.png" 900 640 $blue --at 90,17,23,$blue 2>&1); rc=$?
check "its first point is on the top row, not clipped ($out)" "[[ $rc -eq 0 ]]"

# plot: never the CSV it reads nor another summary file of the folder (by identity);
# into /dev/null in place
logs=$tmp/logs
"$bin" train --steps 10 --hidden 16 --log-every 5 --logdir "$logs" --quiet >/dev/null 2>&1
csv=$(ls "$logs"/scalars.*.csv); ev=$(ls "$logs"/events.out.tfevents.*); sums=$(cksum "$csv" "$ev")
for o in "$csv" "$logs/./$(basename "$csv")" "$ev"; do
    out=$("$bin" plot "$logs" -o "$o" 2>&1); rc=$?
    check "plot -o $(basename "$o"): exit 1, refused ($out)" "[[ $rc -eq 1 ]] && grep -q 'never replaces an input' <<<\"\$out\""
done
out=$("$bin" plot "$csv" -o "$csv" 2>&1); rc=$?
check "plot CSV -o the same CSV: refused ($out)" "[[ $rc -eq 1 ]] && grep -q 'is an input of this command' <<<\"\$out\""
check "the summaries are untouched" "[[ \$(cksum '$csv' '$ev') == '$sums' ]]"
out=$("$bin" plot "$logs" -o /dev/null 2>&1); rc=$?
check "plot -o /dev/null: exit 0, still a device" "[[ $rc -eq 0 && -c /dev/null ]]"
out=$("$bin" plot "$logs" -o "$logs/curves.png" 2>&1); rc=$?
check "plot -o a new file in the log folder: fine" "[[ $rc -eq 0 ]] && /usr/bin/python3 '$here/png_check.py' '$logs/curves.png' 900 640 $blue >/dev/null"

echo "export_plot: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
