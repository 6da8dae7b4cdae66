#!/usr/bin/env bash
# bench/prefix.sh ONEGPU MODEL [ROUNDS]: time to first token (curl's time_total of a
# non-streamed max_tokens=1 completion: the prefill plus one sampled token) of a
# ~4,000-token prompt whose prefix is in the prefix cache vs one that is cold,
# alternating request by request (ROUNDS rounds, default 5): medians and their ratio.
# The cold prompt starts with the round's own word, so no block of it is cached; the
# cached one is the warmed prefix plus the round's own short suffix. The model needs
# a context of at least 4,200 (make-model --preset demo --ctx 8192).
set -euo pipefail
onegpu=$1 model=$2 rounds=${3:-5}
log=$(mktemp)
"$onegpu" serve -m "$model" --port 0 --parallel 1 --ctx 8192 2>"$log" >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
port=
for _ in $(seq 1 600); do
  port=$(grep -o 'listening on http://[^:]*:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done
prefix=$(for i in $(seq 1 660); do printf 'item %d is blue; ' "$i"; done)
req() { # req PROMPT -> "seconds prompt_tokens cached_tokens"
  local out
  out=$(curl -s -w '\n%{time_total}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$1\",\"max_tokens\":1,\"temperature\":0}")
  local t=${out##*$'\n'} j=${out%$'\n'*}
  echo "$t $(node -e 'const u=JSON.parse(process.argv[1]).usage; console.log(u.prompt_tokens, u.prompt_tokens_details.cached_tokens)' "$j")"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "warm: $(req "$prefix")"
cold=() warm=()
for r in $(seq 1 "$rounds"); do
  c=$(req "round$r $prefix question $r") w=$(req "$prefix question $r")
  echo "round $r cold: $c  cached: $w"
  cold+=("${c%% *}") warm+=("${w%% *}")
done
mc=$(printf '%s\n' "${cold[@]}" | median) mw=$(printf '%s\n' "${warm[@]}" | median)
printf 'median cold %.3f s, cached %.3f s, ratio %.1fx\n' "$mc" "$mw" "$(echo "$mc / $mw" | bc -l)"
