#!/usr/bin/env bash
# The .deb on a clean Debian 12: builds it (cpack -G DEB in BUILD_DIR), makes a fresh
# Debian 12 root with debootstrap (minbase), installs the package there with
# `apt-get install ./vktrain_*.deb` (apt pulls its Depends from the mirror), and runs the
# installed `vkt devices` and `vkt train` (the default job) inside it, holding the result
# to what tests/cli/train.sh asks on Linux (exit 0, test accuracy >= 0.95). Prints the
# figures docs/install.md records: the .deb's size, Installed-Size, the root's size before
# and after, what apt installed, the time of each part, the accuracy.
#
# NOT part of CI (.ci/run): it needs root (debootstrap, chroot, mounting /proc), the
# network (deb.debian.org, or $DEB_MIRROR), a few hundred MB of disk and minutes.
#
# Usage: scripts/deb_check.sh [BUILD_DIR]   (default build: configured, built or not)
# KEEP_ROOT=1 leaves the root in place (its path is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mirror=${DEB_MIRROR:-http://deb.debian.org/debian}
[[ $(id -u) -eq 0 ]] || { echo "deb_check: needs root (debootstrap, chroot)" >&2; exit 2; }
[[ -f $build/CMakeCache.txt ]] ||
    { echo "deb_check: $build is not a configured build folder (cmake -S . -B $build)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap

t0=$SECONDS
cmake --build "$build" -j2 >/dev/null
rm -f "$build"/vktrain_*_amd64.deb
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls "$build"/vktrain_*_amd64.deb)
t_deb=$((SECONDS - t0))

root=$(mktemp -d /tmp/vkt-deb-root.XXXXXX)
chmod 755 "$root" # mktemp makes it 0700: apt's _apt user must reach /var/lib/apt inside
cleanup() {
    umount "$root/proc" 2>/dev/null || true
    if [[ ${KEEP_ROOT:-0} == 1 ]]; then echo "deb_check: root kept in $root"; else rm -rf "$root"; fi
}
trap cleanup EXIT
t1=$SECONDS
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
    { tail -20 "$root.debootstrap.log" >&2; echo "deb_check: debootstrap failed" >&2; exit 1; }
rm -f "$root.debootstrap.log"
t_root=$((SECONDS - t1))
size_before=$(du -sm --exclude=proc "$root" | cut -f1)
mount -t proc proc "$root/proc" # /proc/self/exe: the installed vkt finds its data from there

t2=$SECONDS
cp "$deb" "$root/tmp/"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    LP_NUM_THREADS=1 DEBIAN_FRONTEND=noninteractive "$@"; }
in_root dpkg-query -W -f='${Package}\n' | sort >"$root/tmp/before.txt"
in_root apt-get update -qq
in_root apt-get install -y -qq "/tmp/$(basename "$deb")" >"$root/tmp/apt.log" 2>&1 ||
    { tail -30 "$root/tmp/apt.log" >&2; echo "deb_check: apt-get install failed" >&2; exit 1; }
in_root apt-get clean
t_install=$((SECONDS - t2))
size_after=$(du -sm --exclude=proc "$root" | cut -f1)
in_root dpkg-query -W -f='${Package}\n' | sort >"$root/tmp/after.txt"
added=$(comm -13 "$root/tmp/before.txt" "$root/tmp/after.txt")

set +e # the checks count failures themselves
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1" >&2; fi; }
check "vktrain is installed" "in_root dpkg-query -W -f='\${Status}' vktrain | grep -q 'install ok installed'"
icd=$(grep -xE 'mesa-vulkan-drivers|nvidia-vulkan-icd|[a-z0-9-]*vulkan-icd[a-z0-9-]*' <<<"$added" | tr '\n' ' ')
check "apt chose a Vulkan driver for 'mesa-vulkan-drivers | vulkan-icd': ${icd:-none}" \
    "grep -qx mesa-vulkan-drivers <<<\"\$added\""

devices=$(in_root vkt devices 2>&1); rc=$?
check "vkt devices: exit 0, lists device 0 ($(grep -m1 '^device 0' <<<"$devices"))" \
    "[[ $rc -eq 0 ]] && grep -q '^device 0: ' <<<\"\$devices\""
t3=$SECONDS
out=$(in_root vkt train 2>&1); rc=$?
t_train=$((SECONDS - t3))
res=$(grep '^result: ' <<<"$out" | tail -1)
acc=$(sed -nE 's/.*test_accuracy=([0-9.]+).*/\1/p' <<<"$res")
check "vkt train (the default job, its data from /usr/share/vktrain): exit 0 ($rc)" "[[ $rc -eq 0 ]]"
check "vkt train: test accuracy >= 0.95 (${acc:-none})" \
    "awk -v a='$acc' 'BEGIN { exit !(a ~ /^[0-9.]+$/ && a >= 0.95) }'"

echo "deb: $(basename "$deb"), $(stat -c %s "$deb") bytes, Installed-Size $(dpkg-deb -f "$deb" Installed-Size) KiB"
echo "deb: Depends: $(dpkg-deb -f "$deb" Depends)"
echo "root: debootstrap minbase ${size_before} MB in ${t_root} s; after apt-get install ${size_after} MB" \
     "(+$((size_after - size_before)) MB, $(wc -l <<<"$added") packages) in ${t_install} s"
echo "packages added: $(tr '\n' ' ' <<<"$added")"
echo "vkt devices: $(grep -m1 '^device 0' <<<"$devices")"
echo "vkt train: ${res:-no result line} (${t_train} s wall)"
echo "times: build and cpack ${t_deb} s, debootstrap ${t_root} s, install ${t_install} s, train ${t_train} s; total $((SECONDS - t0)) s"
echo "deb_check: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
