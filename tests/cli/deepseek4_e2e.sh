#!/usr/bin/env bash
# deepseek4 end to end: `onegpu run` and `onegpu serve` on a make-model --arch
# deepseek4 tiny file with the real tokenizer. Greedy text from run (a prompt
# past the window, the spec's rounding and llama.cpp's) must equal the server's /v1/completions
# text for the same prompt (two front ends, one engine), and a chat completion
# must answer with the OpenAI envelope; n: 3 (the state forked after the
# prompt) gives three copies of that text, a seeded n: 2 repeats itself.
# usage: deepseek4_e2e.sh ONEGPU WORKDIR
set -euo pipefail
onegpu=$1 work=$2
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
model=$work/ds4-tiny.gguf
if [[ ! -s $model ]]; then
  "$onegpu" make-model --arch deepseek4 --preset tiny -o "$model" 2>"$work/make.log" || {
    if grep -q 'tokenizer' "$work/make.log"; then skip_dep "no tokenizer files (run scripts/deps.sh)"; fi
    cat "$work/make.log"; fail "make-model --arch deepseek4"
  }
fi
prompt="The quick brown fox jumps over the lazy dog, and then it runs far away into the woods"
for rnd in spec llama; do
  "$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 --ds4-rounding $rnd >"$work/run-$rnd.txt" 2>"$work/run-$rnd.log" ||
    { cat "$work/run-$rnd.log"; fail "onegpu run --ds4-rounding $rnd"; }
  [[ -s $work/run-$rnd.txt ]] || fail "onegpu run --ds4-rounding $rnd printed nothing"
done
cmp -s "$work/run-spec.txt" "$work/run-llama.txt" && fail "--ds4-rounding spec and llama gave the same 12 tokens (the option does nothing?)"
echo "ok: onegpu run, spec rounding: $(head -c 80 "$work/run-spec.txt" | tr '\n' ' ')"
# the same tokens with the cpu device playing a GPU: every expert resident, the
# forward pass's ops on the device's stream, and a part of the experts resident
for placement in "--vram 700M --reserve 16M" "--vram 700M --reserve 16M --device-forward" \
                 "--vram 700M --reserve 16M --expert-slots 3"; do
  # shellcheck disable=SC2086
  "$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 $placement >"$work/run-dev.txt" 2>"$work/run-dev.log" ||
    { cat "$work/run-dev.log"; fail "onegpu run $placement"; }
  cmp -s "$work/run-spec.txt" "$work/run-dev.txt" || fail "onegpu run $placement: other tokens than without a device"
done
# the weights copied into the device's memory and read through the table, as on a GPU
ONEGPU_DEVICE_WEIGHTS=copy "$onegpu" run -m "$model" -p "$prompt" -n 12 --temp 0 --vram 700M --reserve 16M --device-forward \
  >"$work/run-copy.txt" 2>"$work/run-copy.log" || { cat "$work/run-copy.log"; fail "onegpu run --device-forward (weights copied)"; }
cmp -s "$work/run-spec.txt" "$work/run-copy.txt" || fail "--device-forward with the weights copied: other tokens"
echo "ok: the same tokens with the cpu device (all, some experts resident; --device-forward, weights in place and copied)"
# a bad value is refused with the flag named (',' and empty items were taken as
# a list that changes nothing)
for bad in maybe SPEC , kv-fp8,,spec no-spec ""; do
  if "$onegpu" run -m "$model" -p hi -n 1 --ds4-rounding "$bad" >/dev/null 2>"$work/bad.log"; then
    fail "--ds4-rounding '$bad' accepted"
  fi
  grep -q "bad value '$bad' for --ds4-rounding" "$work/bad.log" || fail "--ds4-rounding '$bad': $(cat "$work/bad.log")"
done

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for rnd in spec llama; do
  # --prefix-cache on: deepseek4's keeps whole states (tests/cli/prefix.sh deepseek4 tests it)
  start_server "$work/serve-$rnd.log" --ctx 512 --parallel 3 --ds4-rounding $rnd --prefix-cache on
  for _ in $(seq 50); do grep -q "ready:" "$work/serve-$rnd.log" && break; sleep 0.1; done # printed after /health turns 200
  grep -q "ready: .*prefix cache on" "$work/serve-$rnd.log" || fail "serve's ready line: $(grep ready "$work/serve-$rnd.log")"
  base=http://127.0.0.1:$port
  body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0}))' "$prompt")
  curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/comp-$rnd.json" ||
    fail "/v1/completions (rounding $rnd)"
  got=$(json_get "$work/comp-$rnd.json" 'j.choices[0].text')
  want=$(cat "$work/run-$rnd.txt")
  [[ "$got" == "$want" ]] || fail "rounding $rnd: serve's text '$got' differs from run's '$want'"
  curl -sf "$base/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":8}' >"$work/chat-$rnd.json" || fail "/v1/chat/completions"
  [[ $(json_get "$work/chat-$rnd.json" 'j.object + " " + typeof j.choices[0].message.content + " " + j.usage.completion_tokens') \
     =~ ^chat.completion\ string\ [1-8]$ ]] || fail "chat answer: $(cat "$work/chat-$rnd.json")"
  # n > 1 forks a sequence's state after its prompt (og_kv_fork: deepseek4's windows,
  # compressed rows, indexer keys and compressor states copied): at temperature 0
  # the 3 choices are each the n: 1 text; best_of 2 at temperature 0 is it too
  body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0, n: 3}))' "$prompt")
  curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/n3-$rnd.json" ||
    fail "n: 3 on deepseek4 (rounding $rnd): $(cat "$work/n3-$rnd.json")"
  [[ $(json_get "$work/n3-$rnd.json" 'j.choices.length + " " + j.choices.map(c => c.index).join(",")') == "3 0,1,2" ]] ||
    fail "n: 3 gave $(cat "$work/n3-$rnd.json")"
  for i in 0 1 2; do
    c=$(json_get "$work/n3-$rnd.json" "j.choices[$i].text")
    [[ "$c" == "$got" ]] || fail "n: 3 (rounding $rnd): choice $i '$c' differs from n: 1's '$got'"
  done
  body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0, best_of: 2}))' "$prompt")
  curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/bo2-$rnd.json" ||
    fail "best_of: 2 on deepseek4 (rounding $rnd)"
  [[ $(json_get "$work/bo2-$rnd.json" 'j.choices.length + " " + j.choices[0].text') == "1 $got" ]] ||
    fail "best_of: 2 at temperature 0 (rounding $rnd): $(cat "$work/bo2-$rnd.json")"
  # seeded sampling of n: 2 at temperature 1 gives the same two texts twice
  body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 1, n: 2, seed: 7}))' "$prompt")
  for k in 1 2; do
    curl -sf "$base/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$work/seed$k-$rnd.json" ||
      fail "seeded n: 2 on deepseek4 (rounding $rnd)"
    json_get "$work/seed$k-$rnd.json" 'JSON.stringify(j.choices.map(c => [c.index, c.text]))' >"$work/seed$k-$rnd.txt"
  done
  [[ $(json_get "$work/seed1-$rnd.json" 'j.choices.length') == 2 ]] || fail "seeded n: 2 gave $(cat "$work/seed1-$rnd.json")"
  cmp -s "$work/seed1-$rnd.txt" "$work/seed2-$rnd.txt" ||
    fail "seeded n: 2 at temperature 1 (rounding $rnd) differs between runs: $(cat "$work/seed1-$rnd.txt") vs $(cat "$work/seed2-$rnd.txt")"
  kill "$spid"; wait "$spid" 2>/dev/null || true
  echo "ok: onegpu serve (rounding $rnd) answers as onegpu run does; n: 3 and best_of: 2 at temperature 0 give its text, seeded n: 2 repeats"
done

# out of memory for new sequences' state (a file whose window is 2^20 positions: 1.5 GiB
# per sequence at --ctx 2^20, made at its first step): one short step used to fail every
# request in it; now only the newest fails and the others run. At --ctx 256 the window
# rings hold 256 rows (min(window, ctx)): all 4 fit under the same limit. Not under the sanitizers
# (their shadow memory does not fit a ulimit -v) nor next to a GPU driver (a CUDA
# context reserves more address space than the limit).
if [[ -z ${OG_SANITIZED:-} && ! -e /proc/driver/nvidia ]]; then
  wide=$work/ds4-window1m-ctx1m.gguf
  [[ -s $wide ]] || "$onegpu" make-model --arch deepseek4 --preset tiny --window 1048576 --ctx 1048576 -o "$wide" 2>"$work/make-wide.log" ||
    { cat "$work/make-wide.log"; fail "make-model --window 1048576 --ctx 1048576"; }
  for ctx in 256 1048576; do
    (ulimit -v 2600000; exec "$onegpu" serve -m "$wide" --port 0 --parallel 4 --ctx $ctx --device cpu --threads 2) 2>"$work/serve-oom.log" >/dev/null &
    spid=$!; pids+=("$spid")
    port=
    for _ in $(seq 150); do
      port=$(grep -o 'listening on http://[^:]*:[0-9]*' "$work/serve-oom.log" | grep -o '[0-9]*$' || true)
      [[ -n $port ]] && grep -q "ready:" "$work/serve-oom.log" && break
      kill -0 "$spid" 2>/dev/null || { cat "$work/serve-oom.log"; fail "serve under ulimit -v exited"; }
      sleep 0.2
    done
    codes=()
    for i in 1 2 3 4; do
      curl -s -m 60 -o "$work/oom-$i.json" -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
        -H 'Content-Type: application/json' -d '{"prompt":"hello","max_tokens":4}' >"$work/oom-$i.code" &
      codes+=($!)
    done
    wait "${codes[@]}"
    if [[ $ctx == 256 ]]; then
      for i in 1 2 3 4; do
        [[ $(cat "$work/oom-$i.code") == 200 ]] || fail "--ctx 256, window 2^20: request $i $(cat "$work/oom-$i.json") (rings not cut to the context?)"
      done
      kill "$spid"; wait "$spid" 2>/dev/null || true
      echo "ok: a 2^20 window at --ctx 256: rings of 256 rows, 4 of 4 served under the memory limit"
      continue
    fi
    ok=0
    for i in 1 2 3 4; do
      c=$(cat "$work/oom-$i.code")
      if [[ $c == 200 ]]; then ok=$((ok + 1))
      elif [[ $c != 500 ]] || ! grep -q "no memory for a new sequence's state" "$work/oom-$i.json"; then
        fail "request $i under ulimit: $c $(cat "$work/oom-$i.json")"
      fi
    done
    ((ok >= 1)) || fail "out of memory for new sequences: all 4 requests failed ($(cat "$work/oom-1.json"))"
    c=$(curl -s -m 60 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
          -d '{"prompt":"hello","max_tokens":4}')
    [[ $c == 200 ]] || fail "after the shortage a request got $c"
    kill "$spid"; wait "$spid" 2>/dev/null || true
    echo "ok: out of memory for new sequences: $ok of 4 served, the rest refused with the reason, then serving again"
  done
fi
