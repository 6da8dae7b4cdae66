#!/usr/bin/env bash
# Server load benchmark: starts `onegpu serve` on a model (default: the demo
# model, made if missing), runs bench/serve_load.mjs against it, stops it.
# usage: bench/serve.sh [MODEL.gguf] [LONG_PROMPT_WORDS] [-- extra serve flags]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/demo.gguf}; words=${2:-1500}
shift $(( $# >= 2 ? 2 : $# )); [[ ${1:-} == -- ]] && shift
onegpu=${ONEGPU:-./build/onegpu}   # $ONEGPU: another build (tests/gpu/run.sh)
[[ -f $model ]] || "$onegpu" make-model --preset demo -o "$model"
. tests/cli/lib.sh   # start_server, fail
log=$(mktemp)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -f "$log"' EXIT
start_server "$log" --parallel 8 --batch-tokens 256 "$@"
grep 'ready' "$log" >&2
node bench/serve_load.mjs "http://127.0.0.1:$port" "$words"
