#!/usr/bin/env bash
# bench/kvtier.sh ONEGPU MODEL [ROUNDS]: time to first token (curl's time_total of a
# non-streamed max_tokens=1 completion) of a ~4,000-token prompt whose prefix is
# cached in the KV pool, in host RAM (--cache-ram) or in a directory (--cache-dir),
# against the same prompt cold (issue 17 items 1-2). Three servers run side by side
# (one request at a time in all), each --parallel 1:
#   pool: --ctx 8192 (a pool of 128 blocks holds the prefix's 61 and a cold prompt's 63);
#   ram:  --ctx 4224 (66 blocks) --cache-ram 1G;   dir: --ctx 4224 --cache-dir DIR.
# Each round, in turn: a cold prompt (its own first word) and the cached one on pool;
# on ram, then on dir, a ~450-token prompt of other words that evicts the prefix (the
# least recently used chain goes whole, to the tier), then the cached prompt, which
# reads it back. ROUNDS rounds (default 3): every request, the medians, the ratios to
# cold, and the tiers' bytes per cached token from /metrics next to the plan's.
set -euo pipefail
onegpu=$1 model=$2 rounds=${3:-3}
. "$(dirname "$0")/../tests/cli/lib.sh" # start_server, median
. "$(dirname "$0")/tier_lib.sh"          # req, metric, medians
work=$(mktemp -d) pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
prefix=$(for i in $(seq 1 660); do printf 'item %d is blue; ' "$i"; done)
evict=$(for i in $(seq 1 75); do printf 'thing %d is red; ' "$i"; done)
declare -A at
start_server "$work/pool.log" --parallel 1 --ctx 8192; at[pool]=$port
start_server "$work/ram.log" --parallel 1 --ctx 4224 --cache-ram 1G; at[ram]=$port
start_server "$work/dir.log" --parallel 1 --ctx 4224 --cache-dir "$work/kv"; at[dir]=$port
for s in pool ram dir; do echo "$s warm: $(req $s "$prefix")"; done
cold=() pool=() ram=() dir=()
for r in $(seq 1 "$rounds"); do
  c=$(req pool "round$r $prefix question $r") p=$(req pool "$prefix question $r")
  echo "round $r cold: $c  pool: $p"
  cold+=("${c%% *}") pool+=("${p%% *}")
  for s in ram dir; do
    e=$(req $s "$evict round $r") w=$(req $s "$prefix question $r")
    echo "round $r $s: evictor $e  cached $w"
    eval "$s+=(\"${w%% *}\")"
  done
done
for s in ram dir; do
  kind=$([[ $s == ram ]] && echo ram || echo disk)
  b=$(metric $s onegpu_kv_cache_${kind}_bytes) n=$(metric $s onegpu_kv_cache_${kind}_blocks)
  echo "$s: $n blocks, $b bytes ($(echo "$b / ($n * 64)" | bc -l | xargs printf '%.1f') bytes per cached token)," \
       "restored $(metric $s onegpu_kv_cache_${kind}_restored_total) blocks"
done
"$onegpu" plan -m "$model" --vram 64G --ctx 4224 --parallel 1 2>/dev/null | grep '^kv:' || true
medians pool ram dir
