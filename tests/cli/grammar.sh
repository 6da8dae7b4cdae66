#!/usr/bin/env bash
# Constrained decoding: test_grammar on the real DeepSeek-V3 vocabulary (a tiny
# make-model file), then response_format through `onegpu serve`, every output
# validated by an outside validator (npm ajv) through the official openai client
# (tests/js/response_format.mjs).
# usage: grammar.sh ONEGPU TEST_GRAMMAR WORKDIR
set -euo pipefail
onegpu=$1 unit=$2 work=$3
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
echo "== test_grammar"
"$unit" "$model"

if ! command -v node >/dev/null || [[ $(node -p 'process.versions.node.split(".")[0]') -lt 20 ]] ||
   [[ ! -d $here/node_modules/openai || ! -d $here/node_modules/ajv ]]; then
  skip_dep "the openai and ajv npm packages are not installed (scripts/deps.sh)"
fi
if [[ -n ${OG_SANITIZED:-} ]]; then # values through the client: the plain build checks them
  echo "(response_format through the openai client: in the plain build; this is a sanitizer build)"
  exit 0
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start_server "$work/serve.log" --parallel 8 --batch-tokens 64 --ctx 1024 --queue 64
echo "== response_format through the openai client, validated by ajv (port $port)"
node "$here/js/response_format.mjs" "http://127.0.0.1:$port/v1"
