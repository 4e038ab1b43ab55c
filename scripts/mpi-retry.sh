#!/usr/bin/env bash
# Reruns a command while it fails: a restart loop for unattended training jobs, in the
# spirit of torchrun's --max-restarts, for machines without a scheduler that restarts
# jobs. With `vkt train --checkpoint-dir D` every attempt resumes from the newest valid
# checkpoint, so a job that lost a rank (a dead machine, a lost device, a hung rank
# ended by --comm-timeout) goes on from its last save (docs/distributed.md, "Failures").
#
# Usage: scripts/mpi-retry.sh [--delay S] [--give-up-on CODES] N -- command [args...]
#   N                  at most N attempts (N >= 1)
#   --delay S          seconds to wait between attempts (default 10: lets a launcher
#                      release its ports and a restarted machine come back)
#   --give-up-on CODES comma-separated exit statuses that end the loop at once
#                      (default 2: vkt's usage error, which another attempt cannot fix)
# Every attempt is announced on stderr ("mpi-retry: attempt 2 of 5: ..."), and so is how
# it ended. Exits with the last attempt's status: 0 as soon as one succeeds. SIGINT or
# SIGTERM is passed to the running attempt and ends the loop (no further attempt).
#
# Example:
#   scripts/mpi-retry.sh 5 -- mpirun -np 4 --hostfile hosts --bind-to none \
#       vkt train --checkpoint-dir /shared/run1 --save-every 200
set -u

usage() {
    echo "usage: mpi-retry.sh [--delay S] [--give-up-on CODES] N -- command [args...]" >&2
    exit 2
}

delay=10 give_up=2
while [[ $# -gt 0 ]]; do
    case $1 in
        --delay) [[ $# -ge 2 && $2 =~ ^[0-9]+([.][0-9]+)?$ ]] || usage; delay=$2; shift 2 ;;
        --give-up-on) [[ $# -ge 2 && $2 =~ ^[0-9]+(,[0-9]+)*$ ]] || usage; give_up=$2; shift 2 ;;
        -h|--help) usage ;;
        *) break ;;
    esac
done
[[ $# -ge 3 && $1 =~ ^[1-9][0-9]*$ && $2 == -- ]] || usage
max=$1
shift 2

child='' stopped=''
on_signal() {
    stopped=$1
    # TERM either way: a non-interactive shell starts background commands with SIGINT
    # ignored, and mpirun ends its job on TERM.
    [[ -n $child ]] && kill -TERM "$child" 2>/dev/null
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

printf -v cmdline '%q ' "$@"
rc=1
for ((attempt = 1; attempt <= max; attempt++)); do
    echo "mpi-retry: attempt $attempt of $max: ${cmdline% }" >&2
    "$@" &
    child=$!
    # wait returns early (> 128) when a trapped signal arrives: wait again for the
    # attempt itself, which got the signal too.
    while :; do
        wait "$child"
        rc=$?
        kill -0 "$child" 2>/dev/null || break
    done
    child=
    if [[ $rc -eq 0 ]]; then
        echo "mpi-retry: attempt $attempt succeeded" >&2
        exit 0
    fi
    echo "mpi-retry: attempt $attempt exited with status $rc" >&2
    if [[ -n $stopped ]]; then
        echo "mpi-retry: stopped by SIG$stopped; no further attempt" >&2
        exit "$rc"
    fi
    if [[ ,$give_up, == *,$rc,* ]]; then
        echo "mpi-retry: status $rc is in --give-up-on ($give_up); no further attempt" >&2
        exit "$rc"
    fi
    if ((attempt < max)) && [[ $delay != 0 ]]; then
        sleep "$delay" &
        child=$!
        wait "$child"
        child=
        if [[ -n $stopped ]]; then
            echo "mpi-retry: stopped by SIG$stopped; no further attempt" >&2
            exit "$rc"
        fi
    fi
done
echo "mpi-retry: giving up after $max attempts (last status $rc)" >&2
exit "$rc"
