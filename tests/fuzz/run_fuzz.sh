#!/usr/bin/env bash
# run_fuzz.sh FUZZER SEED_DIR WORK_DIR SECONDS
# Runs a libFuzzer target for SECONDS over a copy of the committed seeds.
# Limits turn a huge allocation or a hang into a failure with a saved input.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 secs=$4
mkdir -p "$work/corpus" "$work/artifacts"
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  "$work/corpus" "$seeds" 2>&1 | tail -25
