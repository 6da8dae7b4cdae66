#!/usr/bin/env bash
# bench/endpoints.sh ONEGPU MODEL [ROUNDS]: the same greedy generation (32 tokens)
# through POST /v1/chat/completions, /v1/messages and /v1/responses, alternating
# request by request (ROUNDS rounds, default 15), non-streamed and streamed: the
# medians of curl's time_total per endpoint and their ratio to chat. What differs
# is only the request translation and the output assembly (og_endpoints.h).
set -euo pipefail
onegpu=$1 model=$2 rounds=${3:-15}
. "$(dirname "$0")/../tests/cli/lib.sh" # start_server, median
work=$(mktemp -d) pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
start_server "$work/serve.log" --parallel 1 --ctx 512
u='"messages":[{"role":"user","content":"Tell me about the sea."}]'
declare -A body=(
  [chat]="{$u,\"max_tokens\":32,\"temperature\":0}"
  [messages]="{\"model\":\"m\",$u,\"max_tokens\":32,\"temperature\":0}"
  [responses]="{\"input\":\"Tell me about the sea.\",\"max_output_tokens\":32,\"temperature\":0}"
)
declare -A path=([chat]=/v1/chat/completions [messages]=/v1/messages [responses]=/v1/responses)
for stream in false true; do
  declare -A t=()
  for r in $(seq 1 "$rounds"); do
    for ep in chat messages responses; do
      b=${body[$ep]%\}},\"stream\":$stream}
      t[$ep]+="$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$port${path[$ep]}" -H 'Content-Type: application/json' -d "$b") "
    done
  done
  c=$(tr ' ' '\n' <<<"${t[chat]}" | grep . | median)
  for ep in chat messages responses; do
    m=$(tr ' ' '\n' <<<"${t[$ep]}" | grep . | median)
    printf 'stream=%-5s %-9s median %.4f s  ratio to chat %.3f\n' "$stream" "$ep" "$m" "$(echo "$m / $c" | bc -l)"
  done
done
