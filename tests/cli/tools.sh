#!/usr/bin/env bash
# Tool calls and reasoning through `onegpu serve` on a tiny make-model file
# (the real DeepSeek-V3 tokenizer and chat encoding): a forced call streamed and
# not in every build (the parser and the SSE deltas under the sanitizers), then
# the official openai client with every call's arguments validated by ajv
# (tests/js/tools.mjs; plain build).
# With "reasoning": the server as V3.1 with --reasoning on, hand-written replies
# forced by teacher_tokens and split into reasoning, content and calls
# (tests/js/reasoning.mjs).
# usage: tools.sh ONEGPU WORKDIR [tools|reasoning]
set -euo pipefail
onegpu=$1 work=$2 part=${3:-tools}
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
need_client() {
  if ! command -v node >/dev/null || [[ $(node -p 'process.versions.node.split(".")[0]') -lt 20 ]] ||
     [[ ! -d $here/node_modules/openai || ! -d $here/node_modules/ajv ]]; then
    skip_dep "the openai and ajv npm packages are not installed (scripts/deps.sh)"
  fi
}
if [[ $part == reasoning ]]; then
  need_client
  start_server "$work/serve-v31.log" --parallel 2 --ctx 2048 --batch-tokens 256 --chat-template v3.1 --reasoning on
  echo "== reasoning and calls from hand-written replies (teacher_tokens), V3.1 encoding (port $port)"
  node "$here/js/reasoning.mjs" "http://127.0.0.1:$port/v1" "$onegpu" "$model"
  exit 0
fi
start_server "$work/serve.log" --parallel 2 --ctx 2048 --batch-tokens 256
base="http://127.0.0.1:$port/v1"
tools='[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}}}]'
body="{\"messages\":[{\"role\":\"user\",\"content\":\"time?\"}],\"tools\":$tools,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"temperature\":0,\"seed\":3,\"max_tokens\":64"
if [[ -n ${OG_SANITIZED:-} ]]; then # the plain build runs the same through the openai client below
echo "== a forced call, non-streamed and streamed"
curl -sf "$base/chat/completions" -H 'Content-Type: application/json' -d "$body}" > "$work/call.json" || fail "the forced call request failed"
grep -q '"finish_reason":"tool_calls"' "$work/call.json" || fail "no tool_calls finish: $(cat "$work/call.json")"
grep -Eq '"tool_calls":\[\{"id":"call_[A-Za-z0-9]{24}","type":"function","function":\{"name":"get_time","arguments":"\{\\"tz\\":\\"(UTC|CET)\\"\}"\}\}\]' "$work/call.json" ||
  fail "not one get_time call with valid arguments: $(cat "$work/call.json")"
grep -q '"content":null' "$work/call.json" || fail "content must be null when only calls: $(cat "$work/call.json")"
curl -sfN "$base/chat/completions" -H 'Content-Type: application/json' -d "$body,\"stream\":true}" > "$work/call.sse" || fail "the streamed forced call failed"
grep -q '"delta":{"tool_calls":\[{"index":0,"id":"call_' "$work/call.sse" || fail "no first tool_calls delta: $(cat "$work/call.sse")"
grep -q '"finish_reason":"tool_calls"' "$work/call.sse" || fail "no tool_calls finish in the stream"
grep -q '^data: \[DONE\]' "$work/call.sse" || fail "the stream did not end with [DONE]"
echo "ok"
fi

need_client
if [[ -n ${OG_SANITIZED:-} ]]; then
  echo "(the openai client with ajv: in the plain build; this is a sanitizer build)"
  exit 0
fi
# A forced call cut by max_tokens in the V4.1 encoding, whose DSML tags are spelled by ordinary
# tokens (the V3 vocabulary has no DSML token): at every cut, no markup in the answer, only the cut's
# finish (chat "length", messages "max_tokens") or the complete call; chat and /v1/messages,
# streamed and not (the plain build: the sanitizer builds run the parser on every cut in test_outparse)
port3=$port
start_server "$work/serve41.log" --parallel 2 --ctx 2048 --batch-tokens 256 --chat-template v4.1
base41="http://127.0.0.1:$port"
echo "== a forced V4.1 DSML call cut by max_tokens (port $port)"
port=$port3
mbody='{"model":"m","messages":[{"role":"user","content":"time?"}],"tools":[{"name":"get_time","input_schema":{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}}],"tool_choice":{"type":"any"},"temperature":0'
for k in 1 2 3 5 8; do
  for stream in false true; do
    curl -sfN "$base41/v1/chat/completions" -H 'Content-Type: application/json' \
      -d "${body%,\"max_tokens\":64},\"max_tokens\":$k,\"stream\":$stream}" > "$work/cut.out" || fail "chat, max_tokens $k"
    if grep -q 'DSML\|<｜' "$work/cut.out"; then fail "chat, max_tokens $k, stream $stream: markup in the answer: $(cat "$work/cut.out")"; fi
    grep -q '"finish_reason":"\(length\|tool_calls\)"' "$work/cut.out" || fail "chat, max_tokens $k: finish: $(cat "$work/cut.out")"
    curl -sfN "$base41/v1/messages" -H 'Content-Type: application/json' -d "$mbody,\"max_tokens\":$k,\"stream\":$stream}" \
      > "$work/cut.out" || fail "messages, max_tokens $k"
    if grep -q 'DSML\|<｜' "$work/cut.out"; then fail "messages, max_tokens $k, stream $stream: markup in the answer: $(cat "$work/cut.out")"; fi
    grep -q '"stop_reason":"\(max_tokens\|tool_use\)"' "$work/cut.out" || fail "messages, max_tokens $k: stop_reason: $(cat "$work/cut.out")"
  done
done
echo "ok"

cb=$("$onegpu" tokenize -m "$model" --no-bos --special -p '<｜tool▁calls▁begin｜>' | grep -o '[0-9][0-9]*' | head -1)
echo "== tools through the openai client, arguments validated by ajv (port $port; calls marker id $cb)"
node "$here/js/tools.mjs" "$base" "$cb"
