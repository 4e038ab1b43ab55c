#!/usr/bin/env bash
# ctest import_torch_regenerate: makes the PyTorch fixtures afresh with Debian's
# python3-torch (tests/import/make_fixtures.py, into a temporary folder) and runs
# test_import_torch on them, so the engine's first losses are compared with what the
# installed PyTorch computes, not only with the committed files. When the installed PyTorch
# is the version that made the committed fixtures, the new files must equal them byte for
# byte (the script is deterministic: seeded, one thread): the committed files are what the
# script makes. Without torch for /usr/bin/python3 (scripts/install-deps.sh --bench
# installs python3-torch, python3-numpy and OpenBLAS) it exits 77: ctest reports the test
# skipped.
#   regenerate.sh TEST_IMPORT_TORCH_BINARY
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! /usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "skipped: /usr/bin/python3 cannot import torch and numpy (Debian's python3-torch," \
        "python3-numpy, libopenblas0: scripts/install-deps.sh --bench installs them)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "making the fixtures with PyTorch into $tmp"
/usr/bin/python3 "$here/make_fixtures.py" --out "$tmp" || { echo "FAIL: make_fixtures.py"; exit 1; }
rc=0
"$bin" "$tmp" || rc=1
version() { sed -n 's/^torch_version=//p' "$1/expected.txt"; }
if [[ $(version "$tmp") == "$(version "$here")" ]]; then
    for f in mlp.safetensors cnn.safetensors charlm.safetensors expected.txt; do
        if cmp -s "$tmp/$f" "$here/$f"; then
            echo "ok: $f made afresh equals the committed one (torch $(version "$here"))"
        else
            echo "FAIL: $f made afresh differs from tests/import/$f (torch $(version "$here")):" \
                "run tests/import/make_fixtures.py and commit its output"
            rc=1
        fi
    done
else
    echo "note: torch $(version "$tmp") here, the committed fixtures are from torch" \
        "$(version "$here"): compared with the engine only"
fi
exit $rc
