#!/usr/bin/env bash
# shader-toolchain.sh - the shader toolchain of the cooperative-matrix GEMMs on Debian 12,
# without installing anything (docs/toolchain.md says why this way):
#   the pinned Debian packages of scripts/shader-toolchain.lock are downloaded (from
#   $DEB_MIRROR, default deb.debian.org, else snapshot.debian.org at the lock's date),
#   checked against their SHA256, unpacked with dpkg-deb -x into a folder of their own,
#   and run through their own C library's dynamic loader (--library-path), so the
#   system's libc 2.36 and libstdc++ 12 never meet binaries built for 2.43 and 16.
# Prints the folder (for cmake -DVKT_SHADER_TOOLCHAIN=...). It holds bin/glslang,
# bin/spirv-val, bin/spirv-dis and, with --run, bin/with-lavapipe: `with-lavapipe PROGRAM
# ARGS...` runs a program (an ELF executable) with Mesa 26.1's lavapipe, which has
# VK_KHR_cooperative_matrix, as its only Vulkan device.
#
# Usage: scripts/shader-toolchain.sh [--run] [FOLDER]
#          FOLDER default: ${XDG_CACHE_HOME:-~/.cache}/vktrain/shader-toolchain-<lock digest>;
#          a folder already complete for the lock is reused (nothing downloaded).
#        scripts/shader-toolchain.sh --repin
#          rewrites the lock with the versions forky has now (its InRelease checked with
#          gpgv against the Debian archive keyring, Packages.xz against InRelease's SHA256);
#          then rebuild shaders/spv/ (docs/toolchain.md).
set -euo pipefail
cd "$(dirname "$0")/.."
lock=scripts/shader-toolchain.lock
mirror=${DEB_MIRROR:-http://deb.debian.org/debian}
suite=forky
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
die() { echo "shader-toolchain: $*" >&2; exit 1; }

fetch() { # URL FILE
    curl -sSfL --retry 3 --connect-timeout 20 -o "$2.part" "$1" && mv "$2.part" "$2"
}

repin() {
    command -v gpgv >/dev/null || die "--repin needs gpgv"
    command -v xz >/dev/null || die "--repin needs xz (xz-utils)"
    local tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    fetch "$mirror/dists/$suite/InRelease" "$tmp/InRelease" || die "cannot fetch $suite's InRelease"
    gpgv --keyring "$keyring" "$tmp/InRelease" 2>/dev/null ||
        die "$suite's InRelease: no good signature from $keyring"
    local want date
    want=$(awk '/^SHA256:/{s=1; next} /^[A-Za-z]/{s=0} s && $3=="main/binary-amd64/Packages.xz"{print $1}' \
        "$tmp/InRelease")
    date=$(sed -n 's/^Date: //p' "$tmp/InRelease")
    [[ -n $want ]] || die "InRelease lists no main/binary-amd64/Packages.xz"
    fetch "$mirror/dists/$suite/main/binary-amd64/Packages.xz" "$tmp/Packages.xz" ||
        die "cannot fetch Packages.xz"
    [[ $(sha256sum "$tmp/Packages.xz" | cut -d' ' -f1) == "$want" ]] ||
        die "Packages.xz does not match InRelease's SHA256"
    xz -dc "$tmp/Packages.xz" | awk '
        /^Package:/ {p=$2} /^Version:/ {v=$2} /^SHA256:/ {h=$2} /^Filename:/ {f=$2}
        /^$/ { if (p != "") print p, v, h, f; p="" }' >"$tmp/index"
    local stamp
    stamp=$(date -u -d "$date" +%Y%m%dT%H%M%SZ)
    {
        grep '^#' "$lock" | sed "s/index of [^ ]* (InRelease/index of $(date -u -d "$date" +%Y-%m-%dT%H:%M:%SZ) (InRelease/"
        echo "snapshot $stamp"
        grep -v -e '^#' -e '^snapshot ' "$lock" | while read -r set pkg _ _ _ only; do
            line=$(awk -v p="$pkg" '$1==p {print $2, $3, $4; exit}' "$tmp/index")
            [[ -n $line ]] || die "$pkg is not in $suite any more"
            echo "$set $pkg $line${only:+ $only}"
        done
    } >"$tmp/lock"
    diff "$lock" "$tmp/lock" || true
    cp "$tmp/lock" "$lock"
    echo "shader-toolchain: $lock now pins $suite of $date"
}

[[ ${1:-} == --repin ]] && { repin; exit 0; }
sets=tools
if [[ ${1:-} == --run ]]; then
    sets="tools run"
    shift
fi
[[ -f $lock ]] || die "$lock is missing"
command -v dpkg-deb >/dev/null || die "needs dpkg-deb (Debian)"
digest=$(sha256sum "$lock" | cut -c1-12)
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/vktrain/shader-toolchain-$digest}
mkdir -p "$dir/debs" "$dir/root" "$dir/bin"
dir=$(cd "$dir" && pwd)
snapshot=$(awk '$1=="snapshot" {print $2}' "$lock")

for set in $sets; do
    [[ -f $dir/.complete-$set ]] && continue
    grep -v -e '^#' -e '^snapshot ' "$lock" | while read -r s pkg ver sha path only; do
        [[ $s == "$set" ]] || continue
        deb=$dir/debs/$(basename "$path")
        if [[ ! -f $deb ]] || [[ $(sha256sum "$deb" | cut -d' ' -f1) != "$sha" ]]; then
            fetch "$mirror/$path" "$deb" ||
                fetch "https://snapshot.debian.org/archive/debian/$snapshot/$path" "$deb" ||
                die "cannot download $pkg $ver ($path) from $mirror nor snapshot.debian.org" \
                    "at $snapshot; if $suite has moved on: scripts/shader-toolchain.sh --repin"
        fi
        [[ $(sha256sum "$deb" | cut -d' ' -f1) == "$sha" ]] ||
            die "$(basename "$deb"): SHA256 differs from the lock's"
        if [[ -n $only ]]; then
            dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir/root" "$only"
        else
            dpkg-deb -x "$deb" "$dir/root"
        fi
    done
    touch "$dir/.complete-$set"
done

lib=$dir/root/usr/lib/x86_64-linux-gnu
loader=$lib/ld-linux-x86-64.so.2
[[ -x $loader ]] || die "$loader is missing after unpacking"
for tool in glslang spirv-val spirv-dis; do
    cat >"$dir/bin/$tool" <<EOF
#!/bin/sh
exec "$loader" --library-path "$lib" "$dir/root/usr/bin/$tool" "\$@"
EOF
    chmod +x "$dir/bin/$tool"
done
if [[ $sets == *run* ]]; then
    # The loader finds lavapipe by this manifest alone (VK_DRIVER_FILES): no system driver.
    # Libraries the program needs that the root lacks (Open MPI, say) still come from the
    # system's ld.so.cache, which the newer loader reads too.
    mkdir -p "$dir/share"
    cat >"$dir/share/lvp_icd.json" <<EOF
{ "file_format_version": "1.0.1",
  "ICD": { "library_path": "$lib/libvulkan_lvp.so", "api_version": "1.4.354" } }
EOF
    cat >"$dir/bin/with-lavapipe" <<EOF
#!/bin/sh
export VK_DRIVER_FILES="$dir/share/lvp_icd.json" VK_ICD_FILENAMES="$dir/share/lvp_icd.json"
exec "$loader" --library-path "$lib" "\$@"
EOF
    chmod +x "$dir/bin/with-lavapipe"
fi
"$dir/bin/glslang" --version >/dev/null || die "$dir/bin/glslang does not run"
echo "$dir"
