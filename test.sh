#!/usr/bin/env bash
# onegpu's test command (README, CI): dependencies, two builds, all tests.
#   1. build/       gcc, -Wall -Wextra -Werror, RelWithDebInfo: every ctest, including
#                   the outside references (llama.cpp via node-llama-cpp, tokenizer)
#   2. build-asan/  clang, AddressSanitizer + UBSan, libFuzzer: every C test again
#                   and the GGUF and model fuzzers for OG_FUZZ_SECONDS each (default 60)
#   ./test.sh --quick   only the first build
set -euo pipefail
cd "$(dirname "$0")"

quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option $a" >&2; exit 1 ;;
  esac
done

jobs=$(nproc 2>/dev/null || echo 2)
scripts/deps.sh

echo "== build (gcc, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOG_WERROR=ON >/dev/null
cmake --build build -j"$jobs" >/dev/null
echo "== tests (build/)"
(cd build && ctest --output-on-failure -j"$jobs")

[[ $quick -eq 1 ]] && { echo "test.sh --quick: all tests passed (gcc build)"; exit 0; }

echo "== build (clang, ASan + UBSan, libFuzzer)"
CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOG_WERROR=ON -DOG_SANITIZE=ON \
  -DOG_FUZZ=ON -DOG_FUZZ_SECONDS="${OG_FUZZ_SECONDS:-60}" >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
echo "== tests (build-asan/)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
echo "test.sh: all tests passed (gcc build and ASan+UBSan build)"
