#!/usr/bin/env bash
# Builds and runs every test twice: a normal build (gcc, warnings as errors) and a sanitizer
# build (clang, AddressSanitizer + UndefinedBehaviorSanitizer) that also runs the libFuzzer
# targets for a bounded time. Ends with CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

echo "== build (gcc)"
scripts/build.sh

echo "== build (clang, ASan + UBSan, fuzzers)"
cmake -S . -B build-asan -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DFRENZY_SANITIZE=ON -DFRENZY_FUZZ=ON -DFRENZY_BUILD_BENCH=OFF -DFRENZY_WERROR=ON >/dev/null
cmake --build build-asan --parallel "$jobs"

echo "== tests (gcc build)"
ctest --test-dir build --output-on-failure --parallel "$jobs"

echo "== tests (sanitizer build, with fuzzing)"
ctest --test-dir build-asan --output-on-failure --parallel "$jobs"
