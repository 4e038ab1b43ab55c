#!/usr/bin/env bash
# The project on a clean Debian 13 (trixie), with that system's own toolchain: makes a
# fresh root with debootstrap (minbase), copies the source tree into it (the files git
# tracks, and untracked ones it does not ignore), installs what scripts/install-deps.sh
# asks for there (Debian 13's gcc 14, CMake, glslang 15, Vulkan 1.4 headers and loader,
# Mesa 25's lavapipe, the validation layer, Open MPI 5, Python 3.13 with NumPy 2), builds
# it (Release, as README's command 2) and runs the whole suite inside the root. Prints the
# versions found, the time of each part, and ctest's summary (passed, failed, the failed
# tests' names); the exit status is ctest's.
#
# NOT part of CI (.ci/run): it needs root (debootstrap, chroot, mounting /proc, /sys,
# /dev/shm), the network (deb.debian.org, or $DEB_MIRROR), about 1.5 GB of disk and, on 2
# cores, the better part of an hour (docs/portability.md has the last result).
#
# Usage: scripts/debian13_check.sh [CTEST_ARGS...]   (default: the whole suite)
#   e.g. scripts/debian13_check.sh -R 'python|cli_install'
# Environment:
#   ROOT=DIR      reuse a root a previous run kept (KEEP_ROOT=1): no debootstrap; the
#                 source is copied afresh, the build folder (/work/build there) is kept,
#                 so only what changed is rebuilt
#   KEEP_ROOT=1   leave the root in place (its path is printed)
#   JOBS=N        build and ctest parallelism (default 2)
#   NICE=N        niceness of the build and the tests (default 10: the machine is shared)
#   LP_NUM_THREADS lavapipe's threads inside (default 1)
#   CMAKE_ARGS    more configure options (e.g. -DVKT_TSAN_TESTS=OFF)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
mirror=${DEB_MIRROR:-http://deb.debian.org/debian}
jobs=${JOBS:-2}
niceness=${NICE:-10}
[[ $(id -u) -eq 0 ]] || { echo "debian13_check: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap
[[ -f /usr/share/debootstrap/scripts/trixie ]] ||
    { echo "debian13_check: this debootstrap does not know trixie (update it)" >&2; exit 2; }

t0=$SECONDS
if [[ -n ${ROOT:-} ]]; then
    root=$ROOT
    [[ -f $root/etc/debian_version ]] ||
        { echo "debian13_check: ROOT=$root is not a Debian root" >&2; exit 2; }
    keep=1
else
    root=$(mktemp -d /tmp/vkt-deb13-root.XXXXXX)
    chmod 755 "$root" # mktemp makes it 0700: apt's _apt user must reach /var/lib/apt inside
    keep=${KEEP_ROOT:-0}
fi
mounts=()
cleanup() {
    local m
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" 2>/dev/null || true; done
    if [[ $keep == 1 ]]; then echo "debian13_check: root kept in $root (ROOT=$root reuses it)"
    else rm -rf "$root"; fi
}
trap cleanup EXIT
if [[ -z ${ROOT:-} ]]; then
    debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
        { tail -20 "$root.debootstrap.log" >&2; echo "debian13_check: debootstrap failed" >&2; exit 1; }
    rm -f "$root.debootstrap.log"
fi
t_root=$((SECONDS - t0))
# /proc (the tests read /proc/self/exe and /proc/self/status), /sys (Open MPI's hwloc reads
# the topology there), /dev/shm (Open MPI's shared-memory transport and POSIX semaphores).
mount_in() { mkdir -p "$root/$3"; mount -t "$1" "$2" "$root/$3"; mounts+=("$root/$3"); }
mount_in proc proc proc
mount_in sysfs sysfs sys
mount_in tmpfs shm dev/shm

in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    LP_NUM_THREADS="${LP_NUM_THREADS:-1}" DEBIAN_FRONTEND=noninteractive "$@"; }

t1=$SECONDS
rm -rf "$root/work/src"
mkdir -p "$root/work/src" "$root/work/build"
# (tar keeps the mtimes, so a kept build folder rebuilds only what changed)
git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$root/work/src"
in_root apt-get update -qq
in_root bash /work/src/scripts/install-deps.sh >"$root/work/deps.log" 2>&1 ||
    { tail -30 "$root/work/deps.log" >&2; echo "debian13_check: install-deps.sh failed" >&2; exit 1; }
in_root apt-get clean
t_deps=$((SECONDS - t1))

ver() { in_root dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none; }
echo "debian13: $(cat "$root/etc/debian_version"); gcc $(ver gcc), cmake $(ver cmake)," \
     "glslang-tools $(ver glslang-tools), libvulkan-dev $(ver libvulkan-dev)" \
     "(VK_HEADER_VERSION $(sed -nE 's/^#define VK_HEADER_VERSION ([0-9]+)$/\1/p' \
        "$root/usr/include/vulkan/vulkan_core.h")), mesa-vulkan-drivers $(ver mesa-vulkan-drivers)," \
     "vulkan-validationlayers $(ver vulkan-validationlayers), openmpi-bin $(ver openmpi-bin)," \
     "python3 $(ver python3), python3-numpy $(ver python3-numpy)"

t2=$SECONDS
in_root nice -n "$niceness" cmake -S /work/src -B /work/build -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} \
    >"$root/work/configure.log" 2>&1 ||
    { tail -30 "$root/work/configure.log" >&2; echo "debian13_check: configure failed" >&2; exit 1; }
in_root nice -n "$niceness" cmake --build /work/build -j"$jobs" >"$root/work/build.log" 2>&1 ||
    { grep -E 'error|Error' "$root/work/build.log" | head -30 >&2
      echo "debian13_check: build failed ($root/work/build.log)" >&2; exit 1; }
warnings=$(grep -c 'warning:' "$root/work/build.log" || true)
t_build=$((SECONDS - t2))
echo "debian13: configured and built in ${t_build} s ($warnings compiler warnings)"

t3=$SECONDS
set +e
in_root nice -n "$niceness" ctest --test-dir /work/build --output-on-failure -j"$jobs" "$@" \
    >"$root/work/ctest.log" 2>&1
rc=$?
set -e
t_test=$((SECONDS - t3))
cp "$root/work/ctest.log" "${CTEST_LOG:-/tmp/vkt-debian13-ctest.log}"
grep -E '^[0-9]+% tests passed' "$root/work/ctest.log" || echo "debian13: no ctest summary"
sed -n '/^The following tests FAILED:/,/^Errors while running/p' "$root/work/ctest.log" |
    grep -vE '^(The following|Errors while)' || true
echo "debian13: suite in ${t_test} s (log: ${CTEST_LOG:-/tmp/vkt-debian13-ctest.log})"
echo "times: debootstrap ${t_root} s, copy and dependencies ${t_deps} s, build ${t_build} s," \
     "suite ${t_test} s; total $((SECONDS - t0)) s"
exit $rc
