#!/usr/bin/env bash
# `n` > 1: what one prefill saves. On the demo model (`onegpu serve --parallel 4`),
# a P-token prompt (token ids, a new one each round so the prefix cache never
# serves it) asked three ways, alternating, ROUNDS rounds: n: 1, n: 4, and 4
# separate n: 1 requests at once (4 prefills); whole-request seconds (curl's
# time_total, the slowest of the 4), then the medians.
# usage: bench/choices.sh [MODEL.gguf] [P] [ROUNDS] [MAX_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/demo.gguf}; p=${2:-1000}; rounds=${3:-3}; mt=${4:-16}
onegpu=${ONEGPU:-./build/onegpu}
[[ -f $model ]] || "$onegpu" make-model --preset demo -o "$model"
. tests/cli/lib.sh   # start_server, median
work=$(mktemp -d)
pids=()
trap 'for q in "${pids[@]}"; do kill "$q" 2>/dev/null || true; done; rm -rf "$work"' EXIT
start_server "$work/serve.log" --parallel 4 --ctx $((p + mt + 64)) --batch-tokens 256
body() { # SALT N: the prompt's ids start with SALT
  node -e 'const [salt, n, p, mt] = process.argv.slice(1).map(Number); let x = salt * 7919 + 1;
    const ids = [1000 + salt]; for (let i = 1; i < p; i++) { x = (x * 1103515245 + 12345) % 2147483648; ids.push(1000 + (x % 100000)); }
    console.log(JSON.stringify({ prompt: ids, n, max_tokens: mt, temperature: 0 }))' "$1" "$2" "$p" "$mt" >"$work/b$1.json"
}
post() { curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' --data-binary @"$1"; }
salt=1
for r in $(seq 1 "$rounds"); do
  body $salt 1; post "$work/b$salt.json" >>"$work/one"; salt=$((salt + 1))
  body $salt 4; post "$work/b$salt.json" >>"$work/four"; salt=$((salt + 1))
  for k in 1 2 3 4; do body $((salt + k)) 1; done
  cp=()
  for k in 1 2 3 4; do post "$work/b$((salt + k)).json" >"$work/sep$k" & cp+=($!); done
  wait "${cp[@]}"
  cat "$work"/sep? | sort -g | tail -1 >>"$work/sep"; salt=$((salt + 5))
  echo "round $r: n:1 $(tail -1 "$work/one") s, n:4 $(tail -1 "$work/four") s, 4 x n:1 $(tail -1 "$work/sep") s" >&2
done
echo "medians over $rounds rounds ($p-token prompt, $mt tokens each): n:1 $(median <"$work/one") s," \
     "n:4 $(median <"$work/four") s, 4 separate n:1 at once $(median <"$work/sep") s"
