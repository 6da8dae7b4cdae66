#!/usr/bin/env bash
# Long context (issue 17 item 4): a demo model made with the trained context
# CTX (make-model --preset demo --ctx CTX, default 65536), the plan's KV term for
# --ctx CTX x 5 sequences checked against the MLA formula (n_layer x (r_kv + d_rope)
# x 2 bytes per position: the f16 cache serve holds by default), then `onegpu serve --ctx CTX
# --parallel 5` and bench/long_load.mjs: an N-token prompt (default CTX - 64)
# prefills and decodes alone, then arrives while 4 decoders stream (their
# longest pause vs the prompt's prefill alone). A benchmark, not a test: a 64K
# prompt takes many minutes on a 2-core machine (attention is quadratic).
# usage: bench/long.sh [CTX] [N_TOKENS] [-- extra serve flags]
# PRESET=tiny: make-model's tiny preset instead of demo (4 heads, r_kv 32: a
# quarter of demo's attention per position), for a 64K run on a small machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ctx=${1:-65536}; n=${2:-$((ctx - 64))}
shift $(( $# >= 2 ? 2 : $# )); [[ ${1:-} == -- ]] && shift
onegpu=${ONEGPU:-./build/onegpu}
preset=${PRESET:-demo}
model=models/$preset-ctx$ctx.gguf
[[ -f $model ]] || "$onegpu" make-model --preset "$preset" --ctx "$ctx" -o "$model"
. tests/cli/lib.sh   # start_server, fail, json_get
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

# the plan: its KV term is the formula's, for ctx x 5 sequences
"$onegpu" gguf "$model" --json >"$work/gguf.json"
"$onegpu" plan -m "$model" --vram 8G --ctx "$ctx" --parallel 5 --json >"$work/plan.json" || true
"$onegpu" plan -m "$model" --vram 8G --ctx "$ctx" --parallel 5 | grep -iE 'kv|fits' >&2 || true
node -e '
const fs = require("fs"), [g, p, ctx] = [JSON.parse(fs.readFileSync(process.argv[1])), JSON.parse(fs.readFileSync(process.argv[2])), Number(process.argv[3])];
const key = (k) => g.metadata.find((m) => m.key === "deepseek2." + k).value;
if (key("context_length") !== ctx) { console.error("context_length", key("context_length"), "!= --ctx", ctx); process.exit(1); }
const perTok = key("block_count") * (key("attention.kv_lora_rank") + key("rope.dimension_count")) * 2;
const want = perTok * ctx * 5;
console.error(`plan kv_bytes ${p.kv_bytes} = ${perTok} B/position x ${ctx} x 5: ${p.kv_bytes === want ? "matches" : "MISMATCH, formula " + want}`);
if (p.kv_bytes !== want || !p.fits) process.exit(1);' "$work/gguf.json" "$work/plan.json" "$ctx"

start_server "$work/serve.log" --ctx "$ctx" --parallel 5 --batch-tokens 256 "$@"
grep 'ready' "$work/serve.log" >&2
node bench/long_load.mjs "http://127.0.0.1:$port" "$n" "$ctx"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^onegpu_(step_seconds_max|kv_blocks_total|prompt_tokens_total) ' >&2
grep -E 'VmHWM' "/proc/$spid/status" | sed 's/^/server peak RSS: /' >&2
