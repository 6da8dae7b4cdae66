#!/usr/bin/env bash
# deepseek41 end to end: `onegpu run` and `onegpu serve` on a make-model --arch
# deepseek41 tiny file with the real tokenizer (Engram's token map from it).
# Greedy text from run (a prompt past the window and the candidate blocks,
# with and without the QAT round trips) must equal the server's
# /v1/completions text for the same prompt, streamed or not (two front ends,
# one engine), the cpu device playing a GPU gives the same tokens, a chat
# completion answers with the OpenAI envelope (streamed too), and n: 2 (the
# state forked after the prompt) gives two copies of the n: 1 text.
# usage: deepseek41_e2e.sh ONEGPU WORKDIR
set -euo pipefail
onegpu=$1 work=$2
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
model=$work/ds41-tiny.gguf
if [[ ! -s $model ]]; then
  "$onegpu" make-model --arch deepseek41 --preset tiny -o "$model" 2>"$work/make.log" || {
    if grep -q 'tokenizer' "$work/make.log"; then skip_dep "no tokenizer files (run scripts/deps.sh)"; fi
    cat "$work/make.log"; fail "make-model --arch deepseek41"
  }
fi
prompt="The quick brown fox jumps over the lazy dog, and then it runs far away into the woods"
for rnd in none spec; do
  "$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 --ds4-rounding $rnd >"$work/run-$rnd.txt" 2>"$work/run-$rnd.log" ||
    { cat "$work/run-$rnd.log"; fail "onegpu run --ds4-rounding $rnd"; }
  [[ -s $work/run-$rnd.txt ]] || fail "onegpu run --ds4-rounding $rnd printed nothing"
done
cmp -s "$work/run-none.txt" "$work/run-spec.txt" && fail "--ds4-rounding spec and none gave the same 12 tokens (the options do nothing?)"
"$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 >"$work/run-default.txt" 2>/dev/null || fail "onegpu run (default rounding)"
cmp -s "$work/run-none.txt" "$work/run-default.txt" || fail "deepseek41's default rounding is not none (decision 2)"
echo "ok: onegpu run: $(head -c 80 "$work/run-none.txt" | tr '\n' ' ')"
"$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 --vram 700M --reserve 16M --device-forward >"$work/run-dev.txt" \
  2>"$work/run-dev.log" || { cat "$work/run-dev.log"; fail "onegpu run --device-forward"; }
cmp -s "$work/run-none.txt" "$work/run-dev.txt" || fail "onegpu run on the cpu device: other tokens than without a device"
ONEGPU_DEVICE_WEIGHTS=copy "$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 --vram 700M --reserve 16M --device-forward \
  >"$work/run-copy.txt" 2>"$work/run-copy.log" || { cat "$work/run-copy.log"; fail "onegpu run --device-forward (weights copied)"; }
cmp -s "$work/run-none.txt" "$work/run-copy.txt" || fail "--device-forward with the weights copied into the device: other tokens"
echo "ok: the same tokens with the forward pass's ops on the cpu device (weights in place and copied, as on a GPU)"
if "$onegpu" run -m "$model" -p hi -n 1 --ds4-rounding kv-f16 >/dev/null 2>"$work/bad.log"; then
  fail "--ds4-rounding kv-f16 accepted on deepseek41 (it has no such option)"
fi
grep -q "kv-f16 is --kv-type f16 now" "$work/bad.log" || fail "--ds4-rounding kv-f16: $(cat "$work/bad.log")"
# deepseek41 keeps F32 rows: the default --kv-type leaves them, an explicit one is refused
if "$onegpu" run -m "$model" -p hi -n 1 --kv-type f16 >/dev/null 2>"$work/bad.log"; then
  fail "--kv-type f16 accepted on deepseek41 (its rows are F32)"
fi
grep -q "deepseek41 has no option 'kv-type'" "$work/bad.log" || fail "--kv-type f16: $(cat "$work/bad.log")"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start_server "$work/serve.log" --ctx 512 --parallel 2
base=http://127.0.0.1:$port
want=$(cat "$work/run-none.txt")
body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0}))' "$prompt")
curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/comp.json" || fail "/v1/completions"
got=$(json_get "$work/comp.json" 'j.choices[0].text')
[[ "$got" == "$want" ]] || fail "serve's text '$got' differs from run's '$want'"
# streamed: the chunks' text joined is the same, then [DONE]
body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0, stream: true}))' "$prompt")
curl -sfN "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/comp.sse" || fail "streamed /v1/completions"
tail -n 3 "$work/comp.sse" | grep -q '^data: \[DONE\]' || fail "the stream did not end with [DONE]: $(tail -c 300 "$work/comp.sse")"
sgot=$(node -e 'const fs = require("fs"); let s = "";
  for (const l of fs.readFileSync(process.argv[1], "utf8").split("\n"))
    if (l.startsWith("data: {")) { const j = JSON.parse(l.slice(6)); for (const c of j.choices) s += c.text || ""; }
  process.stdout.write(s)' "$work/comp.sse")
[[ "$sgot" == "$want" ]] || fail "streamed text '$sgot' differs from run's '$want'"
# chat, plain and streamed
curl -sf "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8}' >"$work/chat.json" || fail "/v1/chat/completions"
[[ $(json_get "$work/chat.json" 'j.object + " " + typeof j.choices[0].message.content + " " + j.usage.completion_tokens') \
   =~ ^chat.completion\ string\ [1-8]$ ]] || fail "chat answer: $(cat "$work/chat.json")"
curl -sfN "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"stream":true}' >"$work/chat.sse" ||
  fail "streamed /v1/chat/completions"
grep -q '"chat.completion.chunk"' "$work/chat.sse" && tail -n 3 "$work/chat.sse" | grep -q '^data: \[DONE\]' ||
  fail "streamed chat: $(tail -c 300 "$work/chat.sse")"
# n: 2 forks the state after the prompt: at temperature 0 both choices are the n: 1 text
body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0, n: 2}))' "$prompt")
curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/n2.json" ||
  fail "n: 2 on deepseek41: $(cat "$work/n2.json")"
[[ $(json_get "$work/n2.json" 'j.choices.length + " " + j.choices.map(c => c.index).join(",")') == "2 0,1" ]] ||
  fail "n: 2 gave $(cat "$work/n2.json")"
for i in 0 1; do
  c=$(json_get "$work/n2.json" "j.choices[$i].text")
  [[ "$c" == "$want" ]] || fail "n: 2: choice $i '$c' differs from n: 1's '$want'"
done
kill "$spid"; wait "$spid" 2>/dev/null || true
echo "ok: onegpu serve answers as onegpu run does (completions plain and streamed, chat plain and streamed, n: 2)"
