#!/usr/bin/env bash
# Runs a command that is meant to fail in a defined way, then checks its exit status and
# that its output (stdout and stderr together) matches an extended regular expression.
# Used by vkt_add_mpi_test's EXPECT_RC / EXPECT_OUTPUT (tests/CMakeLists.txt), e.g. for
# a job that a rank ends with vkt_world_abort.
#   usage: expect.sh RC REGEX -- command [args...]
set -uo pipefail
if [[ $# -lt 4 || "$3" != "--" ]]; then
  echo "usage: expect.sh RC REGEX -- command [args...]" >&2
  exit 2
fi
want_rc=$1
regex=$2
shift 3
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
fail=0
if [[ "$want_rc" != "any" && $rc -ne $want_rc ]]; then
  echo "expect.sh: FAIL: exit status $rc, expected $want_rc" >&2
  fail=1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect.sh: FAIL: the output does not match: $regex" >&2
  fail=1
fi
[[ $fail -eq 0 ]] && echo "expect.sh: exit status $rc and output as expected"
exit $fail
