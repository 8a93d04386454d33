#!/usr/bin/env bash
# Builds Frenzy (RelWithDebInfo, warnings as errors) into build/. Usage: scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DFRENZY_WERROR=ON >/dev/null
cmake --build build --parallel "$jobs"
