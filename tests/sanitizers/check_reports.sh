#!/usr/bin/env bash
# The VKT_ASAN suite's last test: fails, printing them, if any test's process wrote an
# AddressSanitizer, LeakSanitizer or UndefinedBehaviorSanitizer report into the log folder.
#   usage: check_reports.sh LOG_DIR
set -uo pipefail
dir=$1
shopt -s nullglob
reports=("$dir"/*)
if [[ ${#reports[@]} -eq 0 ]]; then
  echo "check_reports: no sanitizer report in $dir"
  exit 0
fi
for f in "${reports[@]}"; do
  echo "==== $f"
  cat "$f"
done
echo "check_reports: FAIL: ${#reports[@]} sanitizer report(s) in $dir" >&2
exit 1
