#!/usr/bin/env bash
# Rewrites the golden whole-simulation files (tests/golden/*.json) from the frenzy binary of a
# build, after a deliberate change of behaviour. Usage: scripts/refresh-golden.sh [BUILD_DIR]
# (default build/). Builds the CLI there first (FRENZY_BUILD_JOBS=N limits the build's jobs),
# reruns every case of tests/golden/golden_test.py and prints which files changed; review
# `git diff tests/golden` and commit the files with the change that moved them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target frenzy_cli ${FRENZY_BUILD_JOBS:+--parallel "$FRENZY_BUILD_JOBS"}
python3 tests/golden/golden_test.py --refresh "$build/bin/frenzy"
