#!/usr/bin/env bash
# MPMD jobs (ranks with different command lines) without mpirun's MPMD syntax. Open MPI
# 5.0.7's mpirun (Debian 13) crashes with SIGSEGV on any `mpirun -np 1 A : -np 1 B`, even
# with /bin/echo (open-mpi/ompi#13303), so such a job is started as one SPMD job of all its
# ranks, each rank running this file, which finds its own command line by its rank
# (OMPI_COMM_WORLD_RANK, else PMIx's PMIX_RANK) and execs it: the rank's process is that
# command itself (same pid, no shell left), numbered as mpirun numbers an MPMD job's
# ranks (the first group's first), so what a test checks is unchanged.
#
# Two uses:
#  - sourced: `mpmd_args ARGS...` sets the array `mpmd` to ARGS, rewritten when they hold
#    a lone `:` (mpirun's MPMD form `[OPTIONS] -np N CMD... : -np M CMD... ...`) into
#    `[OPTIONS] -np N+M bash THIS_FILE N CMD... :next: M CMD...` (not `:`, which mpirun
#    takes for its MPMD separator wherever it stands); other ARGS are left as they are.
#    The launch functions of tests/mpi/common.sh and tests/cli/catalogue.sh call it, so a
#    test still writes its job in the MPMD form.
#  - run by each rank: `mpmd.sh N CMD... :next: M CMD... ...` execs the group holding its rank.
# A command's own arguments must not include a lone `:` or `:next:` (none does).
mpmd_file=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/mpmd.sh
mpmd_args() {
    local -a opts=() groups=() cur=()
    local total=0 n a mpmd_form=0
    for a in "$@"; do [[ $a == : ]] && mpmd_form=1; done
    if [[ $mpmd_form == 0 ]]; then mpmd=("$@"); return; fi
    # launcher options before the first -np are the job's
    while [[ $# -gt 0 && $1 != -np && $1 != -n ]]; do opts+=("$1"); shift; done
    while [[ $# -gt 0 ]]; do
        [[ $1 == -np || $1 == -n ]] || { echo "mpmd: expected -np, not '$1'" >&2; return 2; }
        n=$2; shift 2
        total=$((total + n))
        [[ ${#groups[@]} -gt 0 ]] && groups+=(:next:)
        groups+=("$n")
        while [[ $# -gt 0 && $1 != : ]]; do groups+=("$1"); shift; done
        [[ $# -gt 0 ]] && shift
    done
    mpmd=("${opts[@]}" -np "$total" bash "$mpmd_file" "${groups[@]}")
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}
    [[ -n $rank ]] || { echo "mpmd.sh: not started by an MPI launcher (no rank)" >&2; exit 2; }
    first=0
    while [[ $# -gt 0 ]]; do
        n=$1; shift
        cmd=()
        while [[ $# -gt 0 && $1 != :next: ]]; do cmd+=("$1"); shift; done
        [[ $# -gt 0 ]] && shift
        if ((rank < first + n)); then exec "${cmd[@]}"; fi
        first=$((first + n))
    done
    echo "mpmd.sh: rank $rank is in no group (the job has $first ranks)" >&2
    exit 2
fi
