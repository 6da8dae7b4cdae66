#!/usr/bin/env bash
# POST /v1/messages, /v1/messages/count_tokens and /v1/responses: test_endpoints
# (request mapping, output assembler) on a tiny model, then `onegpu serve` driven
# by the official @anthropic-ai/sdk and openai clients (tests/js/messages_client.mjs)
# and curl (headers, envelopes). OG_SANITIZED=1 (sanitizer builds): test_endpoints only.
# usage: messages.sh ONEGPU TEST_ENDPOINTS WORKDIR
set -euo pipefail
onegpu=$1 unit=$2 work=$3
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
echo "== test_endpoints"
"$unit" "$model"
[[ ${OG_SANITIZED:-} == 1 ]] && { echo "ok: sanitizer build, the clients' part runs in the plain build"; exit 0; }

key=test-key-456
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start_server "$work/serve.log" --api-key "$key" --parallel 4 --ctx 512
base=http://127.0.0.1:$port
echo "== server on port $port"
# the same model in an encoding with a thinking mode (V3.1), for the thinking blocks
start_server "$work/serve31.log" --api-key "$key" --parallel 2 --ctx 512 --chat-template v3.1
base31=http://127.0.0.1:$port

echo "== curl: auth headers, anthropic-version, envelopes, SSE headers"
body='{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}'
code() { curl -s -o "$work/out.json" -w '%{http_code}' "$@"; }
[[ $(code -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' -H 'anthropic-beta: x' "$base/v1/messages" -H 'Content-Type: application/json' -d "$body") == 200 ]] ||
  fail "x-api-key with anthropic-version: $(cat "$work/out.json")"
[[ $(code -H "Authorization: Bearer $key" "$base/v1/messages" -H 'Content-Type: application/json' -d "$body") == 200 ]] || fail "Bearer on /v1/messages"
[[ $(code -H "x-api-key: $key" "$base/v1/chat/completions" -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}') == 200 ]] ||
  fail "x-api-key on /v1/chat/completions"
[[ $(code -H "x-api-key: wrong" "$base/v1/messages" -H 'Content-Type: application/json' -d "$body") == 401 ]] || fail "a wrong x-api-key must be 401"
json_get "$work/out.json" 'j.type==="error"&&j.error.type==="authentication_error"&&typeof j.error.message==="string"' |
  grep -qx true || fail "401 envelope: $(cat "$work/out.json")"
[[ $(code -H "x-api-key: $key" "$base/v1/messages/nope" -H 'Content-Type: application/json' -d "$body") == 404 ]] || fail "unknown /v1/messages path"
json_get "$work/out.json" 'j.type==="error"&&j.error.type==="not_found_error"' | grep -qx true ||
  fail "404 envelope: $(cat "$work/out.json")"
[[ $(code -H "x-api-key: $key" "$base/v1/messages") == 405 ]] || fail "GET /v1/messages must be 405"
head -c 5000000 /dev/zero | tr '\0' ' ' >"$work/big.json" # over the default --max-body 4M
[[ $(code -H "x-api-key: $key" -H 'Content-Type: application/json' --data-binary @"$work/big.json" "$base/v1/messages") == 413 ]] ||
  fail "a body over --max-body must be 413"
json_get "$work/out.json" 'j.type==="error"&&j.error.type==="request_too_large"' | grep -qx true ||
  fail "413 envelope: $(cat "$work/out.json")"
[[ $(code -H "Authorization: Bearer $key" "$base/v1/responses" -H 'Content-Type: application/json' -d '{"input":"x","previous_response_id":"r"}') == 400 ]] ||
  fail "previous_response_id"
json_get "$work/out.json" 'j.error.param==="previous_response_id"&&j.error.code==="unsupported_parameter"' |
  grep -qx true || fail "responses 400 envelope (OpenAI's): $(cat "$work/out.json")"
curl -s -D "$work/h.txt" -o /dev/null -H "x-api-key: $key" "$base/v1/messages" \
  -H 'Content-Type: application/json' -d '{"model":"m","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
grep -qi '^Content-Type: text/event-stream' "$work/h.txt" || fail "SSE content type: $(cat "$work/h.txt")"
grep -qE ' POST /v1/messages 200 prompt=[1-9][0-9]* cached=0 completion=2 ' "$work/serve.log.access" ||
  fail "access log lines for the new endpoints: $(tail -3 "$work/serve.log.access")"
# Content-Type: JSON or none; what a web page can send cross-origin without a preflight is 415
[[ $(code -H "x-api-key: $key" -H 'Content-Type: text/plain' "$base/v1/messages" -d "$body") == 415 ]] ||
  fail "text/plain on /v1/messages must be 415: $(cat "$work/out.json")"
json_get "$work/out.json" 'j.type==="error"&&j.error.type==="invalid_request_error"&&j.error.message.includes("Content-Type: application/json")' |
  grep -qx true || fail "415 envelope (Anthropic's): $(cat "$work/out.json")"
[[ $(code -H "x-api-key: $key" "$base/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}') == 415 ]] ||
  fail "curl -d (application/x-www-form-urlencoded) on /v1/chat/completions must be 415"
json_get "$work/out.json" 'j.error.code==="unsupported_media_type"&&j.error.message.includes("x-www-form-urlencoded")' |
  grep -qx true || fail "415 envelope (OpenAI's): $(cat "$work/out.json")"
[[ $(code -H "x-api-key: $key" -F 'input=x' "$base/v1/responses") == 415 ]] || fail "multipart on /v1/responses must be 415"
[[ $(code -H "x-api-key: $key" -H 'Content-Type: text/plain' "$base/v1/completions" -d '{"prompt":"x"}') == 415 ]] ||
  fail "text/plain on /v1/completions must be 415"
[[ $(code -H "x-api-key: $key" -H 'Content-Type: text/plain;charset=utf-8' "$base/v1/messages/count_tokens" -d "$body") == 415 ]] ||
  fail "text/plain on count_tokens must be 415"
[[ $(code -H "x-api-key: $key" -H 'Content-Type:' "$base/v1/messages" -d "$body") == 200 ]] ||
  fail "no Content-Type at all must be accepted: $(cat "$work/out.json")"
[[ $(code -H "x-api-key: $key" -H 'Content-Type: Application/JSON; charset=utf-8' "$base/v1/messages" -d "$body") == 200 ]] ||
  fail "application/json with a charset must be accepted: $(cat "$work/out.json")"
# read whole before grep -q (which stops at the match: under pipefail curl's write
# into a closed pipe failed the check once /metrics had more rows after this one)
metrics=$(curl -s -H "x-api-key: $key" "$base/metrics")
grep -q '^onegpu_requests_total{code="415"} 5$' <<<"$metrics" ||
  fail "/metrics must count the 415s: $(grep requests_total <<<"$metrics")"
# an empty user turn is refused where it is (not dropped into a prefill)
[[ $(code -H "x-api-key: $key" -H 'Content-Type: application/json' "$base/v1/messages" \
  -d '{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"The answer is"},{"role":"user","content":[]}]}') == 400 ]] ||
  fail "an empty last user turn must be 400"
grep -q 'messages\[2\].content holds no content blocks' "$work/out.json" || fail "empty turn: $(cat "$work/out.json")"
echo "ok: curl checks"

if command -v node >/dev/null && [[ $(node -p 'process.versions.node.split(".")[0]') -ge 20 ]] &&
   [[ -d $here/node_modules/@anthropic-ai/sdk && -d $here/node_modules/openai ]]; then
  echo "== the official @anthropic-ai/sdk and openai clients"
  node "$here/js/messages_client.mjs" "$base" "$key" "$base31"
else
  skip_dep "the clients' part: Node.js >= 20, @anthropic-ai/sdk and openai in tests/node_modules (scripts/deps.sh)"
fi
