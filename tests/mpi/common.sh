# Sourced by tests/cli/mpi_*.sh after setting `name` (the script's) and `bin` (the vkt
# binary): the checks' bookkeeping, the environment Open MPI needs here, the launcher
# (exits 77, "skipped", without one), a scratch folder whose name marks this script's
# processes, and small helpers. The caller ends with `finish`.
pass=0 fail=0
# check NAME CONDITION [OUTPUT]: OUTPUT's last lines are shown when it fails
check() {
    if eval "$2"; then pass=$((pass+1)); echo "ok: $1"
    else fail=$((fail+1)); echo "FAIL: $1" >&2; [[ $# -gt 2 ]] && tail -n 15 <<<"$3" >&2; fi
}
finish() {
    echo "$name: $pass passed, $fail failed"
    [[ $fail -eq 0 ]]
}
# What Open MPI needs here (ctest sets the same): root, more ranks than the 2 cores,
# yielding when idle, no CMA single copy (blocked in containers), TCP over IPv4 only, one
# lavapipe thread.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM-1}
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe-1} # Open MPI 4
export PRTE_MCA_rmaps_default_mapping_policy=${PRTE_MCA_rmaps_default_mapping_policy-:oversubscribe} # 5
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle-1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism-none}
# Open MPI 5.0.7's TCP transport prints "Unable to find reachable pairing between local and
# remote interfaces" from every rank on a host whose interface has IPv6 addresses beside
# IPv4 (open-mpi/ompi#14079; this machine's eth0), which the checks of what ranks print
# would count: IPv4 only (Open MPI 4 takes the same option).
export OMPI_MCA_btl_tcp_disable_family=${OMPI_MCA_btl_tcp_disable_family-6}
export LP_NUM_THREADS=${LP_NUM_THREADS-1}
read -ra mpirun <<<"${VKT_MPIEXEC:-mpirun}"
if ! command -v "${mpirun[0]}" >/dev/null; then
    echo "$name: no MPI launcher (${mpirun[0]}): skipped"
    exit 77
fi
mpirun+=(--bind-to none)
. "$(dirname "${BASH_SOURCE[0]}")/mpmd.sh"
# mpi SECONDS ARGS...: one job under a hard time limit. ARGS in mpirun's MPMD form
# (`-np 1 A : -np 1 B`) start one SPMD job instead (tests/mpi/mpmd.sh: Open MPI 5.0.7's
# mpirun crashes on MPMD command lines).
mpi() { local t=$1 mpmd; shift; mpmd_args "$@" || return; timeout -k 5 "$t" "${mpirun[@]}" "${mpmd[@]}"; }
tmp=$(mktemp -d)
# Every job names a folder under $tmp on its command line, so its processes are found by
# that (and nobody else's are).
mine() { pgrep -f -- "$tmp/" | grep -vx "$$"; }
# gone: every process of this script's jobs has ended, within 30 s. mpirun ends a job by
# sending its ranks SIGKILL and exits without waiting for them to die (strace: kill(-pgid,
# SIGKILL), then exit_group 55 ms later, no wait4), so a rank can still be dying, SIGKILL
# pending, when mpirun returns (seen 0.2 s after mpirun's exit on a loaded machine). A
# process still there after 30 s really lingers: its pid, state and command are printed.
gone() {
    local i p
    for ((i = 0; i < 300; i++)); do [[ -z $(mine) ]] && return 0; sleep 0.1; done
    for p in $(mine); do ps -o pid=,stat=,args= -p "$p" >&2; done
    return 1
}
cleanup() {
    local p
    for p in $(mine); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
# reap PID SECONDS: the exit status of the background job PID (started here with `mpi ... &`)
# once it has ended, or 124, like timeout(1), if it still runs SECONDS from now. The failure
# checks (a rank killed or stopped) use it: the defect they catch is a job that never ends,
# so the limit is an outer one, generous for a loaded machine (these scripts run beside
# other tests), not a measure of how fast the job ends; the time taken is only printed.
reap() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$1" 2>/dev/null || { wait "$1"; return; }
        sleep 0.1
    done
    return 124
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b - a}'; }
# val KEY OUTPUT: KEY's value in the last result line
val() { grep -E '(^|: ?)result: ' <<<"$2" | tail -1 | grep -Eo " $1=[^ ]+" | cut -d= -f2; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN{d=a-b; if(d<0)d=-d; exit !(a!="" && b!="" && d<=t)}'; }
# The pid of rank R of the job whose command line names DIR (a vkt process, not mpirun).
rank_pid() {
    local p
    for p in $(pgrep -f -- "$2"); do
        [[ $(cat /proc/"$p"/comm 2>/dev/null) == vkt ]] &&
            tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
            { echo "$p"; return; }
    done
}
# wait_for FILE SECONDS: 0 once FILE exists.
wait_for() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do [[ -e $1 ]] && return 0; sleep 0.1; done
    return 1
}
# The step of the newest checkpoint in a folder.
newest_step() { ls "$1" 2>/dev/null | sed -nE 's/^ckpt-([0-9]+)\.vkt$/\1/p' | sort -n | tail -1; }
