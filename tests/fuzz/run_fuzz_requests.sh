#!/usr/bin/env bash
# run_fuzz_requests.sh ONEGPU FUZZER SEED_DIR WORK_DIR SECONDS: makes the tiny
# model whose tokenizer fuzz_requests reads (OG_FUZZ_TOKENIZER), then runs it
# as run_fuzz.sh runs every fuzzer. Exit 77 (skip) without the tokenizer files.
set -euo pipefail
onegpu=$1 fuzzer=$2 seeds=$3 work=$4 secs=$5
. "$(dirname "$0")/../cli/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
OG_FUZZ_TOKENIZER=$model exec "$(dirname "$0")/run_fuzz.sh" "$fuzzer" "$seeds" "$work" "$secs"
