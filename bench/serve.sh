#!/usr/bin/env bash
# Server load benchmark: starts `onegpu serve` on a model (default: the demo
# model, made if missing), runs bench/serve_load.mjs against it, stops it.
# usage: bench/serve.sh [MODEL.gguf] [LONG_PROMPT_WORDS] [-- extra serve flags]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/demo.gguf}; words=${2:-1500}
shift $(( $# >= 2 ? 2 : $# )); [[ ${1:-} == -- ]] && shift
[[ -f $model ]] || ./build/onegpu make-model --preset demo -o "$model"
log=$(mktemp)
./build/onegpu serve -m "$model" --port 0 --parallel 8 --batch-tokens 256 "$@" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 600); do
  port=$(grep -o 'listening on http://[^:]*:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.2
done
grep 'ready' "$log" >&2
node bench/serve_load.mjs "http://127.0.0.1:$port" "$words"
