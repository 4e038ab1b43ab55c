#!/usr/bin/env bash
# Prepares bench/gpu.sh for a machine lent for GPU runs (../shared/gpu/README.md), from
# any checkout or git worktree: builds vkt (Release, no MPI) into build-gpu/ and fills the
# git-ignored .gpu/ (about 4 MB) with it, the data, bench/gpu.sh and gpu_torch.py, the
# commit, and the Debian 12 Vulkan loader and glvnd packages that the NVIDIA driver needs
# (apt-get download: the package index must be current, `apt-get update`). Then, on the
# GPU machine, from the folder that holds .gpu/ (one command; it finishes within --limit):
#   bash .gpu/gpu.sh --debs .gpu/debs --limit 480 .gpu/bin
# Its tables are printed and written to $OUT/table.md, with every command's output beside.
# ../shared/gpu/prepare.sh prepares the whole test suite as well (run.sh), but it writes
# .git/info/exclude, which a git worktree does not have.
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DVKT_MPI=OFF >/dev/null
cmake --build build-gpu -j2 --target vkt >/dev/null
rm -rf .gpu
mkdir -p .gpu/bin .gpu/data .gpu/debs
cp build-gpu/vkt .gpu/bin/
strip .gpu/bin/vkt
cp -r data/mnist data/austen .gpu/data/
cp bench/gpu.sh bench/gpu_torch.py .gpu/
git describe --always --dirty >.gpu/commit
(cd .gpu/debs && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 \
  libgles2 >/dev/null 2>&1) || true
ls .gpu/debs | grep -q '^libvulkan1' ||
  { echo "bench/gpu_prepare.sh: apt-get download failed (run apt-get update first)" >&2; exit 1; }
bash .gpu/gpu.sh --dry-run .gpu/bin >/dev/null
echo "ready: $(du -sh .gpu | cut -f1) in .gpu/ ($(cat .gpu/commit)); on the GPU machine:" \
  "bash .gpu/gpu.sh --debs .gpu/debs --limit 480 .gpu/bin"
