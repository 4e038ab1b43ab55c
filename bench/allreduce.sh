#!/usr/bin/env bash
# The allreduce across processes: `vkt bench allreduce` under mpirun at 2 and 4 ranks on
# this machine (shared memory), vktrain's path (nonblocking, polled, with heartbeats and
# a deadline) against a plain blocking MPI_Allreduce, 4 KiB to 64 MiB. Each rank is a
# process with no device: LP_NUM_THREADS does not matter here.
# Usage: bench/allreduce.sh [BUILD_DIR] [-- extra vkt bench allreduce options]
#   RANKS="2 4"  world sizes; ROUNDS=N runs of each (default 1); TCP=1 adds runs over TCP
#   loopback (--mca btl tcp,self), the path of a job across machines.
set -euo pipefail
build=build
if [[ $# -gt 0 && "$1" != "--" ]]; then build=$1; shift; fi
[[ "${1:-}" == "--" ]] && shift
[[ -x $build/vkt ]] || { echo "build vkt first (cmake --build $build)"; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun missing: scripts/install-deps.sh (openmpi-bin)"; exit 1; }

# As root, more ranks than cores, no CMA single copy (blocked in containers), and Open
# MPI yielding the core when idle (it is oversubscribed).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe # Open MPI 5's oversubscribe
export OMPI_MCA_btl_vader_single_copy_mechanism=none

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "== machine: $cpu, $(nproc) cores; $(mpirun --version | head -1); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for np in ${RANKS:-2 4}; do
  for round in $(seq "${ROUNDS:-1}"); do
    echo "== mpirun -np $np (shared memory), round $round"
    mpirun -np "$np" --bind-to none "$build/vkt" bench allreduce "$@"
    if [[ "${TCP:-0}" == 1 ]]; then
      echo "== mpirun -np $np (TCP loopback), round $round"
      mpirun -np "$np" --bind-to none --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$build/vkt" bench allreduce "$@"
    fi
  done
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
