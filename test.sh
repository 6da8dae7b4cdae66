#!/usr/bin/env bash
# onegpu's test command (README, CI): dependencies, three builds, all tests.
#   1. build/       gcc, -Wall -Wextra -Werror, RelWithDebInfo: every ctest, including
#                   the outside references (llama.cpp via node-llama-cpp, tokenizer); the
#                   CUDA device too when nvcc is found (sm_90 + sm_120; its GPU tests
#                   skip for hardware without a GPU)
#   2. build-asan/  clang, AddressSanitizer + UBSan, libFuzzer: every C test again
#                   and the model-load fuzzer for OG_FUZZ_SECONDS (default 60), the GGUF
#                   and request fuzzers for half of it
#   3. build-tsan/  clang, ThreadSanitizer: the tests labelled tsan (pool, engine,
#                   dispatcher, server)
#   ./test.sh --quick   only the first build
# A test skipped for a missing dependency (SKIP (dependency): ...) fails under CI=true
# and is called out in the summary otherwise; a skip for hardware this machine lacks
# (SKIP (hardware): ...) is counted and named. The summary ends the output.
set -euo pipefail
cd "$(dirname "$0")"

quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option $a" >&2; exit 1 ;;
  esac
done

jobs=$(nproc 2>/dev/null || echo 2)
scripts/deps.sh

summary=() hw=() dep=()
# run_ctest DIR [ctest args...]: runs ctest in DIR, then adds a line to the summary:
# tests run, passed, failed, skipped (for hardware, or for a dependency: the tests
# and reasons come from their "SKIP (kind): why" lines in ctest's log).
run_ctest() {
  local dir=$1; shift
  local rc=0
  (cd "$dir" && ctest --output-on-failure -j"$jobs" "$@") | tee "$dir/ctest.out" || rc=$?
  # ctest's lines: "1/16 Test  #3: name ....   Passed   1.2 sec" (or ***Skipped, ***Failed)
  local total passed skipped
  total=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$dir/ctest.out" || true)
  passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed +[0-9.]+ sec' "$dir/ctest.out" || true)
  skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$dir/ctest.out" || true)
  # "N/M Test: name" opens each test's block in LastTest.log; keep "name: SKIP (...)"
  local lines l t hw_here=0 dep_here=0
  lines=$(awk '/^[0-9]+\/[0-9]+ Test: /{name=$3} /^SKIP \((hardware|dependency)\): /{print name ": " $0}' \
            "$dir/Testing/Temporary/LastTest.log" 2>/dev/null | sort -u)
  while IFS= read -r l; do
    [[ -z $l ]] && continue
    if [[ $l == *": SKIP (hardware)"* ]]; then hw+=("$dir: $l"); hw_here=$((hw_here + 1))
    else dep+=("$dir: $l"); dep_here=$((dep_here + 1)); fi
  done <<<"$lines"
  # a test that exited 77 without a SKIP line of its own counts as a dependency skip
  while IFS= read -r t; do
    [[ -z $t ]] || grep -q "^$t: SKIP (" <<<"$lines" && continue
    dep+=("$dir: $t: skipped (exit 77) without a SKIP line: taken for a missing dependency")
    dep_here=$((dep_here + 1))
  done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .*\*\*\*Skipped.*/\1/p' "$dir/ctest.out")
  summary+=("$dir: $total tests ran: $passed passed, $((total - passed - skipped)) failed, $skipped skipped ($hw_here hardware and $dep_here dependency SKIP lines)")
  if [[ $rc -ne 0 ]]; then print_summary; echo "test.sh: tests failed in $dir (see above)" >&2; exit 1; fi
}
print_summary() {
  echo "== summary"
  printf '  %s\n' "${summary[@]}"
  echo "  skipped for hardware this machine lacks: ${#hw[@]}"
  [[ ${#hw[@]} -eq 0 ]] || printf '    %s\n' "${hw[@]}"
  if [[ ${#dep[@]} -gt 0 ]]; then
    echo "  !!!!! SKIPPED FOR A MISSING DEPENDENCY: ${#dep[@]} -- these parts were NOT tested (scripts/deps.sh installs them; CI=true fails on them):"
    printf '    !!! %s\n' "${dep[@]}"
  else
    echo "  skipped for a missing dependency: 0"
  fi
}

echo "== build (gcc, -Werror)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOG_WERROR=ON >/dev/null
cmake --build build -j"$jobs" >/dev/null
echo "== tests (build/)"
run_ctest build

if [[ $quick -eq 0 ]]; then
  echo "== build (clang, ASan + UBSan, libFuzzer)"
  CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DOG_WERROR=ON -DOG_SANITIZE=ON -DONEGPU_CUDA=OFF \
    -DOG_FUZZ=ON -DOG_FUZZ_SECONDS="${OG_FUZZ_SECONDS:-60}" >/dev/null
  cmake --build build-asan -j"$jobs" >/dev/null
  echo "== tests (build-asan/)"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest build-asan

  echo "== build (clang, ThreadSanitizer)"
  CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOG_WERROR=ON -DOG_TSAN=ON -DONEGPU_CUDA=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target og_tsan_tests >/dev/null # what the tsan-labelled tests run
  echo "== tests (build-tsan/, label tsan)"
  # halt_on_error: a race ends the process (a server that dies fails its test)
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" run_ctest build-tsan -L tsan
  if races=$(grep -rl 'WARNING: ThreadSanitizer' build-tsan/tests/*-work build-tsan/Testing/Temporary/LastTest.log 2>/dev/null); then
    summary+=("build-tsan: ThreadSanitizer reports in: $races")
    print_summary; echo "test.sh: ThreadSanitizer found races (see $races)" >&2; exit 1
  fi
fi

print_summary
if [[ ${CI:-} == true && ${#dep[@]} -gt 0 ]]; then
  echo "test.sh: CI=true: a test was skipped for a missing dependency" >&2; exit 1
fi
if [[ $quick -eq 1 ]]; then echo "test.sh --quick: all tests passed (gcc build)"
else echo "test.sh: all tests passed (gcc build, ASan+UBSan build, TSan build)"; fi
