#!/usr/bin/env bash
# Re-creates data/austen/pride_and_prejudice.txt from Debian's r-cran-janeaustenr (run once;
# the text is committed, so neither R nor this package is needed to build or train).
# Jane Austen's novel (1813) is in the public domain; the package (MIT, Julia Silge) holds
# the Project Gutenberg text as one string per line.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v Rscript >/dev/null || apt-get install -y --no-install-recommends r-cran-janeaustenr
Rscript -e 'writeLines(janeaustenr::prideprejudice, "data/austen/pride_and_prejudice.txt")'
