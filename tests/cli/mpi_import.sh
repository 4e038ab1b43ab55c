#!/usr/bin/env bash
# vkt train --init-from across ranks (docs/import.md): the chief alone reads the file and
# the map, every rank gets its values (vkt_trainer_import_safetensors is collective):
#  - 2 ranks from PyTorch's MLP weights end with exactly the result of one process with 2
#    replicas (the same values on every rank, averaged alike);
#  - the file only where the chief looks (a path other ranks cannot read): it works;
#  - a file the chief cannot read stops every rank: the chief names the file, the other
#    rank says the chief failed.
# Usage: mpi_import.sh BIN_DIR (ctest gives it the environment of tests/mpi/common.sh)
set -u
name=mpi_import
bin=$1/vkt
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tests/mpi/common.sh"
fx=$root/tests/import
args=(train --hidden 64,32 --steps 3 --quiet --init-map torch)
of_rank() { grep -E "^\[[0-9]+,$1\]<std(out|err)>:" <<<"$2"; }

one=$("$bin" "${args[@]}" --replicas 2 --init-from "$fx/mlp.safetensors" 2>&1)
out=$(mpi 120 -np 2 "$bin" "${args[@]}" --init-from "$fx/mlp.safetensors" 2>&1); rc=$?
check "2 ranks from PyTorch's weights: exit 0" "[[ $rc -eq 0 ]]" "$out"
check "the result of 1 process with 2 replicas ($(val test_loss "$one"), $(val test_loss "$out"))" \
      "[[ -n \"$(val test_loss "$one")\" && \"$(val test_accuracy "$one") $(val test_loss "$one")\" == \"$(val test_accuracy "$out") $(val test_loss "$out")\" ]]" "$out"
# rank 0 alone finds the file: MPMD, rank 1 given a path that does not exist
cp "$fx/mlp.safetensors" "$tmp/chief.safetensors"
out=$(mpi 120 --tag-output -np 1 "$bin" "${args[@]}" --init-from "$tmp/chief.safetensors" : \
      -np 1 "$bin" "${args[@]}" --init-from "$tmp/nowhere.safetensors" 2>&1); rc=$?
check "only the chief's file is read: exit 0, the same result" \
      "[[ $rc -eq 0 && \"$(val test_loss "$out")\" == \"$(val test_loss "$one")\" ]]" "$out"
out=$(mpi 120 --tag-output -np 2 "$bin" "${args[@]}" --init-from "$tmp/none.safetensors" 2>&1); rc=$?
check "a missing file stops both ranks (rc $rc)" "[[ $rc -ne 0 && $rc -ne 124 ]]" "$out"
check "rank 0 names the file" \
      "of_rank 0 \"\$out\" | grep -q \"cannot start from --init-from '$tmp/none.safetensors': VKT_ERROR_IO: cannot read safetensors file\"" "$out"
check "rank 1: the chief could not import" \
      "of_rank 1 \"\$out\" | grep -q 'VKT_ERROR_REMOTE: the chief (rank 0) could not import a safetensors file'" "$out"
check "no process left behind" gone
finish
