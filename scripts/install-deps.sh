#!/usr/bin/env bash
# Installs what vktrain needs from Debian packages, only what is missing; quiet when
# everything is present. Idempotent. Needs root (or sudo) only when it installs.
#   --bench      also the packages the benchmarks compare against (PyTorch, OpenBLAS); with
#                PyTorch, ctest import_torch_regenerate remakes the import test's fixtures
#   --toolchain  also what scripts/shader-toolchain.sh downloads with (.ci/run)
set -euo pipefail

packages=(
  gcc make cmake pkg-config        # compiler and build
  libvulkan-dev libvulkan1         # Vulkan headers and loader
  libvulkan-volk-dev               # volk: loads the Vulkan loader at run time
  glslang-tools                    # glslangValidator: GLSL -> SPIR-V at build time
  mesa-vulkan-drivers              # lavapipe, the CPU Vulkan device used by the tests
  vulkan-validationlayers          # Khronos validation layer, one test pass runs under it
  zlib1g-dev                       # gzip'd data sets
  openmpi-bin libopenmpi-dev       # Open MPI: training across processes (VKT_MPI, mpirun tests)
  python3-numpy                    # the Python module's tests and example (python/, ctest -L python)
)
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=(python3-torch libopenblas-dev) ;;
    --toolchain) packages+=(curl ca-certificates) ;;
    *) echo "install-deps: unknown option '$arg' (accepted: --bench, --toolchain)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
