#!/usr/bin/env bash
# bench/kvtype.sh [ROUNDS] [PROMPT_WORDS]: decode speed with the f16 KV cache (the
# default) against --kv-type f32 on the demo model, runs alternating f16 / f32
# (ROUNDS each, default 3): `onegpu run` greedy, 64 tokens after a prompt of
# PROMPT_WORDS words (default 1500: attention reads ~2,000 cached positions per
# token, where the cache's bytes show). Prints each run's prefill and decode tok/s,
# then the medians and their ratio. Also checks that the two caches gave text
# (not that they agree: f16 rounds every cached value).
# usage: bench/kvtype.sh [ROUNDS] [PROMPT_WORDS]   (ONEGPU=path/to/onegpu)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} words=${2:-1500}
onegpu=${ONEGPU:-./build/onegpu}
model=models/demo.gguf
mkdir -p models
[[ -f $model ]] || "$onegpu" make-model --preset demo -o "$model"
. tests/cli/lib.sh # median
prompt=$(for i in $(seq 1 "$words"); do printf 'w%d ' $((i % 97)); done)
declare -A pre dec
for r in $(seq 1 "$rounds"); do
  for t in f16 f32; do
    line=$("$onegpu" run -m "$model" -p "$prompt" -n 64 --temp 0 --threads 2 --kv-type "$t" 2>&1 >/dev/null |
           grep 'prefill .* decode')
    p=$(sed -E 's/.*prefill [0-9]+ tokens ([0-9.]+) tok\/s.*/\1/' <<<"$line")
    d=$(sed -E 's/.*decode [0-9]+ tokens ([0-9.]+) tok\/s.*/\1/' <<<"$line")
    echo "round $r $t: $line"
    pre[$t]+="$p " dec[$t]+="$d "
  done
done
for t in f16 f32; do
  printf '%s: prefill median %s tok/s, decode median %s tok/s\n' "$t" \
    "$(tr ' ' '\n' <<<"${pre[$t]}" | grep . | median)" "$(tr ' ' '\n' <<<"${dec[$t]}" | grep . | median)"
done
d16=$(tr ' ' '\n' <<<"${dec[f16]}" | grep . | median) d32=$(tr ' ' '\n' <<<"${dec[f32]}" | grep . | median)
printf 'decode f16 / f32: %.3f\n' "$(echo "$d16 / $d32" | bc -l)"
