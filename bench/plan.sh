#!/usr/bin/env bash
# The memory planner's time on chain graphs of (linear, relu) pairs: 1k, 4k, 16k and 64k
# ops (tests/test_plan.c `bench`), and the arena of the CLI's MLP, CNN and charlm.
# Usage: bench/plan.sh [BUILD_DIR] [OPS...]   (default build/ and 1000 4000 16000 64000)
set -eu
build=${1:-build}
shift || true
exec "$build/tests/test_plan" bench "$@"
