#!/usr/bin/env bash
# bench/kvtier4.sh ONEGPU MODEL [ROUNDS] [SERVE-FLAGS...]: time to first token (curl's
# time_total of a non-streamed max_tokens=1 completion) of a ~4,000-token prompt whose
# prefix state (deepseek4 / deepseek41: whole states, snap_cache.h) is cached in memory,
# in host RAM (--cache-ram) or in a directory read after a restart (--cache-dir), against
# the same prompt cold. For the V4.1 demo (make-model --arch deepseek41 --preset demo) with
# run.sh's placement (SERVE-FLAGS, default --vram 540M --reserve 64M). Three servers, one
# request at a time in all:
#   mem: the flags as given (--parallel 4, --ctx 4096: room for the states in memory);
#   ram: --parallel 2 --ctx 4224 --cache-ram 1G: a ~2,400-token prompt of other words
#        (the evictor) leaves too little room for the prefix's state, which goes to RAM;
#   dir: --parallel 2 --ctx 4224 --cache-dir DIR, stopped and started again before each
#        request (the states cached at exit are written; the restart reads the file).
# Each round, in turn: a cold prompt (its own first word) and the cached one on mem; on
# ram the evictor then the cached prompt; on dir the restart then the cached prompt.
# ROUNDS rounds (default 3): every request, the medians and the ratios to cold, and the
# state files' bytes against the formula (og_model_info: (kv_elems_fixed + n x
# kv_elems_per_token) x 4, `onegpu plan`'s "kv:" line) plus the file's header and ids.
set -euo pipefail
onegpu=$1 model=$2 rounds=${3:-3}
flags=("${@:4}")
[[ ${#flags[@]} -gt 0 ]] || flags=(--vram 540M --reserve 64M)
. "$(dirname "$0")/../tests/cli/lib.sh" # start_server, median
. "$(dirname "$0")/tier_lib.sh"          # req, metric, medians
work=$(mktemp -d) pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
prefix=$(for i in $(seq 1 660); do printf 'item %d is blue; ' "$i"; done)
evict=$(for i in $(seq 1 400); do printf 'thing %d is red; ' "$i"; done)
declare -A at pidof
start_server "$work/mem.log" "${flags[@]}"; at[mem]=$port
start_server "$work/ram.log" "${flags[@]}" --parallel 2 --ctx 4224 --cache-ram 1G; at[ram]=$port
start_dir() { start_server "$work/dir$1.log" "${flags[@]}" --parallel 2 --ctx 4224 --cache-dir "$work/kv"; at[dir]=$port pidof[dir]=$spid; }
start_dir 0
for s in mem ram dir; do echo "$s warm: $(req $s "$prefix")"; done
cold=() mem=() ram=() dir=()
for r in $(seq 1 "$rounds"); do
  c=$(req mem "round$r $prefix question $r") m=$(req mem "$prefix question $r")
  echo "round $r cold: $c  mem: $m"
  cold+=("${c%% *}") mem+=("${m%% *}")
  e=$(req ram "$evict round $r") w=$(req ram "$prefix question $r")
  echo "round $r ram: evictor $e  cached $w (RAM restores so far: $(metric ram onegpu_kv_cache_ram_states_restored_total))"
  ram+=("${w%% *}")
  kill -TERM "${pidof[dir]}"; wait "${pidof[dir]}" || true
  start_dir "$r"
  w=$(req dir "$prefix question $r")
  echo "round $r dir: restarted, cached $w (disk restores: $(metric dir onegpu_kv_cache_disk_states_restored_total))"
  dir+=("${w%% *}")
done
echo "ram: $(metric ram onegpu_kv_cache_ram_states) states, $(metric ram onegpu_kv_cache_ram_state_bytes) bytes in RAM"
echo "dir: $(metric dir onegpu_kv_cache_disk_states) files, $(metric dir onegpu_kv_cache_disk_state_bytes) bytes; the files:"
ls -l "$work/kv" | awk 'NR>1{print "  " $5, $9}'
"$onegpu" plan -m "$model" "${flags[@]}" --ctx 4224 --parallel 2 2>/dev/null | grep '^kv:' || true
medians mem ram dir
