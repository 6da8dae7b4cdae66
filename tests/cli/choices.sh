#!/usr/bin/env bash
# `n` > 1 and `best_of` through `onegpu serve` on a tiny model, driven by the
# official openai client (tests/js/choices.mjs): n choices equal to n: 1 (greedy,
# and seed + i when sampled), streamed choices by index, completions' prompt x n
# order, best_of by summed log-prob, the 400s, and a stream abandoned mid-way
# freeing all its choices.
# usage: choices.sh ONEGPU WORKDIR
set -euo pipefail
onegpu=$1 work=$2
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
if ! command -v node >/dev/null || [[ $(node -p 'process.versions.node.split(".")[0]') -lt 20 ]] ||
   [[ ! -d $here/node_modules/openai ]]; then
  skip_dep "Node.js >= 20 and the openai npm package (scripts/deps.sh)"
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start_server "$work/serve.log" --parallel 4 --ctx 1024 --batch-tokens 128 --queue 16
node "$here/js/choices.mjs" "http://127.0.0.1:$port/v1" 4
kill -TERM "$spid"; wait "$spid" || true
echo "choices.sh: all passed"
