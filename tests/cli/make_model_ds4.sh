#!/usr/bin/env bash
# make-model --arch deepseek4 against llama.cpp (node-llama-cpp 3.21.1): every
# preset writes (demo and v4-flash sparse: their shapes and keys, read back by
# og_ds4_hparams_read inside the writer); llama.cpp LOADS tiny in Q8_0 and with
# IQ2_XXS gate/up experts (n_embd and n_ff_exp 256: IQ2_XXS rows are 256 wide)
# and generates 16 greedy tokens with finite log-probs from each
# (tests/js/llama_load_many.mjs: one node process for both files). tiny in F32
# and F16 is loaded and run by llama.cpp in ref_ds4.sh (64 tokens, 3 prompts,
# compared with the reference forward), so not again here.
# usage: make_model_ds4.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 work=$2
mkdir -p "$work"
mk() { "$onegpu" make-model --arch deepseek4 "$@" 2>>"$work/make.log" || { cat "$work/make.log"; fail "make-model --arch deepseek4 $*"; }; }
mk --preset tiny -o "$work/tiny.gguf"
mk --preset demo --sparse -o "$work/demo.gguf"
mk --preset v4-flash --sparse -o "$work/v4-flash.gguf"
# the published V4 Flash Q2 file is 80.8 GiB (deepseek4.md §3.1)
size=$(stat -c %s "$work/v4-flash.gguf")
awk -v s="$size" 'BEGIN { g = s / 2^30; if (g < 80.3 || g > 81.3) exit 1 }' \
  || fail "v4-flash is $size bytes, not the published file's ~80.8 GiB"
"$onegpu" gguf "$work/v4-flash.gguf" > "$work/v4-flash.txt"
grep -q 'blk.42.ffn_gate_exps.weight .*IQ2_XXS' "$work/v4-flash.txt" || fail "v4-flash: gate experts are not IQ2_XXS"
grep -q 'blk.42.ffn_down_exps.weight .*Q2_K' "$work/v4-flash.txt" || fail "v4-flash: down experts are not Q2_K"
mk --preset tiny --type Q8_0 -o "$work/q8.gguf"
mk --preset tiny --n-embd 256 --n-ff-exp 256 --n-expert 4 --type Q8_0 --type-routed IQ2_XXS --type-routed-down Q2_K \
  -o "$work/iq2.gguf"
"$onegpu" gguf "$work/iq2.gguf" | grep -q 'blk.5.ffn_up_exps.weight .*IQ2_XXS' || fail "iq2.gguf has no IQ2_XXS experts"
node "$here/js/llama_load_many.mjs" -n 16 "$work/q8.gguf" "$work/iq2.gguf" \
  > "$work/llama.jsonl" 2> "$work/llama.log" || { tail -20 "$work/llama.log"; fail "llama.cpp could not load or run a deepseek4 file"; }
n=$(grep -c '"finite":true' "$work/llama.jsonl" || true)
[[ $n == 2 ]] || { cat "$work/llama.jsonl"; fail "llama.cpp gave non-finite log-probs ($n of 2 files finite)"; }
echo "make_model_ds4: 3 presets written; llama.cpp loads and runs tiny Q8_0 and IQ2_XXS-experts"
