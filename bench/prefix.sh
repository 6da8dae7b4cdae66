#!/usr/bin/env bash
# bench/prefix.sh ONEGPU MODEL [ROUNDS]: time to first token (curl's time_total of a
# non-streamed max_tokens=1 completion: the prefill plus one sampled token) of a
# ~4,000-token prompt whose prefix is in the prefix cache vs one that is cold,
# alternating request by request (ROUNDS rounds, default 5): medians and their ratio.
# The cold prompt starts with the round's own word, so no block of it is cached; the
# cached one is the warmed prefix plus the round's own short suffix. The model needs
# a context of at least 4,200 (make-model --preset demo --ctx 8192).
# bench/prefix.sh ONEGPU MODEL ROUNDS SERVE-FLAGS...: serve with these flags instead of
# --parallel 1 --ctx 8192 (deepseek41's demo, whose prefix cache keeps whole states:
# run.sh's --vram 540M --reserve 64M, its 4 places and 4,096 positions).
set -euo pipefail
onegpu=$1 model=$2 rounds=${3:-5}
flags=("${@:4}")
[[ ${#flags[@]} -gt 0 ]] || flags=(--parallel 1 --ctx 8192)
. "$(dirname "$0")/../tests/cli/lib.sh" # start_server, median
work=$(mktemp -d) pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
start_server "$work/serve.log" "${flags[@]}"
prefix=$(for i in $(seq 1 660); do printf 'item %d is blue; ' "$i"; done)
req() { # req PROMPT -> "seconds prompt_tokens cached_tokens"
  local out
  out=$(curl -s -w '\n%{time_total}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$1\",\"max_tokens\":1,\"temperature\":0}")
  local t=${out##*$'\n'} j=${out%$'\n'*}
  echo "$t $(node -e 'const u=JSON.parse(process.argv[1]).usage; console.log(u.prompt_tokens, u.prompt_tokens_details.cached_tokens)' "$j")"
}
echo "warm: $(req "$prefix")"
cold=() warm=()
for r in $(seq 1 "$rounds"); do
  c=$(req "round$r $prefix question $r") w=$(req "$prefix question $r")
  echo "round $r cold: $c  cached: $w"
  cold+=("${c%% *}") warm+=("${w%% *}")
done
mc=$(printf '%s\n' "${cold[@]}" | median) mw=$(printf '%s\n' "${warm[@]}" | median)
printf 'median cold %.3f s, cached %.3f s, ratio %.1fx\n' "$mc" "$mw" "$(echo "$mc / $mw" | bc -l)"
