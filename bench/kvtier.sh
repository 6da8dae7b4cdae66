#!/usr/bin/env bash
# bench/kvtier.sh ONEGPU MODEL [ROUNDS]: time to first token (curl's time_total of a
# non-streamed max_tokens=1 completion) of a ~4,000-token prompt whose prefix is
# cached in the KV pool, in host RAM (--cache-ram) or in a directory (--cache-dir),
# against the same prompt cold (issue 17 items 1-2). Three servers, one after the
# other, each --parallel 1:
#   pool: --ctx 8192 (a pool of 128 blocks holds the prefix's 61 and a cold prompt's
#         63): cold and cached requests alternate, ROUNDS each (default 3);
#   ram:  --ctx 4224 (66 blocks) --cache-ram 1G; dir: --ctx 4224 --cache-dir DIR: each
#         round a ~450-token prompt of other words evicts the prefix (the least
#         recently used chain goes whole) to the tier, then the cached request reads
#         it back; ROUNDS + 2 rounds.
# Prints every request, the medians and the ratios to cold, and the tier's bytes per
# cached token from /metrics (kv_cache_ram_bytes / 64 per block) next to the plan's.
set -euo pipefail
onegpu=$1 model=$2 rounds=${3:-3}
. "$(dirname "$0")/../tests/cli/lib.sh" # start_server, median
work=$(mktemp -d) pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
prefix=$(for i in $(seq 1 660); do printf 'item %d is blue; ' "$i"; done)
evict=$(for i in $(seq 1 75); do printf 'thing %d is red; ' "$i"; done)
req() { # req PROMPT -> "seconds prompt_tokens cached_tokens"
  local out
  out=$(curl -s -w '\n%{time_total}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$1\",\"max_tokens\":1,\"temperature\":0}")
  local t=${out##*$'\n'} j=${out%$'\n'*}
  echo "$t $(node -e 'const u=JSON.parse(process.argv[1]).usage; console.log(u.prompt_tokens, u.prompt_tokens_details.cached_tokens)' "$j")"
}
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v k="$1" '$1==k{print $2}'; }
stop() { kill -TERM "$spid"; wait "$spid" || true; }

start_server "$work/pool.log" --parallel 1 --ctx 8192
echo "pool warm: $(req "$prefix")"
cold=() pool=()
for r in $(seq 1 "$rounds"); do
  c=$(req "round$r $prefix question $r") w=$(req "$prefix question $r")
  echo "round $r cold: $c  pool: $w"
  cold+=("${c%% *}") pool+=("${w%% *}")
done
stop
declare -A tier_t
for tier in ram dir; do
  if [[ $tier == ram ]]; then flags=(--cache-ram 1G); else flags=(--cache-dir "$work/kv"); fi
  start_server "$work/$tier.log" --parallel 1 --ctx 4224 "${flags[@]}"
  echo "$tier warm: $(req "$prefix")"
  ts=()
  for r in $(seq 1 $((rounds + 2))); do
    e=$(req "$evict round $r") w=$(req "$prefix question $r")
    echo "round $r evictor: $e  $tier: $w"
    ts+=("${w%% *}")
  done
  if [[ $tier == ram ]]; then
    echo "ram: $(metric onegpu_kv_cache_ram_blocks) blocks, $(metric onegpu_kv_cache_ram_bytes) bytes, restored $(metric onegpu_kv_cache_ram_restored_total)"
    rb=$(metric onegpu_kv_cache_ram_bytes) rn=$(metric onegpu_kv_cache_ram_blocks)
    echo "ram bytes per cached token: $(echo "$rb / ($rn * 64)" | bc)"
  else
    echo "dir: $(metric onegpu_kv_cache_disk_blocks) files, $(metric onegpu_kv_cache_disk_bytes) bytes, restored $(metric onegpu_kv_cache_disk_restored_total)"
  fi
  tier_t[$tier]=$(printf '%s\n' "${ts[@]}" | median)
  stop
done
"$onegpu" plan -m "$model" --vram 64G --ctx 4224 --parallel 1 2>/dev/null | grep '^kv:' || true
mc=$(printf '%s\n' "${cold[@]}" | median) mp=$(printf '%s\n' "${pool[@]}" | median)
printf 'median cold %.3f s; pool %.3f s (%.1fx); ram %.3f s (%.1fx); dir %.3f s (%.1fx)\n' "$mc" "$mp" \
  "$(echo "$mc / $mp" | bc -l)" "${tier_t[ram]}" "$(echo "$mc / ${tier_t[ram]}" | bc -l)" "${tier_t[dir]}" \
  "$(echo "$mc / ${tier_t[dir]}" | bc -l)"
