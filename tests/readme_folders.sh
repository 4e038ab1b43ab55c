#!/bin/bash
# readme_folders.sh - README's table "What is there" names every folder of the tree: each
# top-level folder and each folder of engine/ appears as `folder/...` (ctest:
# readme_folders).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    paths=$(git ls-files)
else
    paths=$(find . -type f ! -path './build*' | sed 's|^\./||')
fi
folders=$( (grep / <<<"$paths" | cut -d/ -f1 | grep -v '^engine$'
            grep '^engine/[^/]*/' <<<"$paths" | cut -d/ -f1-2) | sort -u)
table=$(sed -n '/^| part | where | what |/,/^$/p' README.md)
[ -n "$table" ] || { echo "FAIL: README.md has no table '| part | where | what |'"; exit 1; }
missing=
for f in $folders; do
    grep -qF "\`$f/" <<<"$table" || missing+=" $f/"
done
if [ -n "$missing" ]; then
    echo "FAIL: README.md's folder table does not name:$missing"
    exit 1
fi
echo "README.md's folder table names all $(wc -w <<<"$folders") folders"
