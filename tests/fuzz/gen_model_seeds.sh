#!/usr/bin/env bash
# gen_model_seeds.sh ONEGPU DIR: writes the fuzz_model seeds, tiny deepseek2
# files (each under run_fuzz.sh's 64 KiB -max_len) covering the loader's
# variants: F32 with groups, F16 without group keys, Q8_0, legacy attn_kv_b with
# plain attn_q and softmax, no dense layer / shared expert / YaRN, a k-quant mix;
# a deepseek4 file (window-only, ratio-4 with indexer, ratio-128, hash layer) and a
# deepseek41 file (every CSA2 role, Engram).
# Run once when make-model's output changes; the output is committed beside
# found_* (inputs the fuzzer found that add coverage, small ones, merged with
# -merge=1) and regress_* (inputs that hung or crashed before a fix).
set -euo pipefail
onegpu=$1 dir=$2
mkdir -p "$dir"
base="--tokenizer none --vocab 32 --n-layer 2 --n-dense 1 --n-embd 16 --n-head 2 --q-lora-rank 8
  --kv-lora-rank 8 --qk-nope 4 --qk-rope 4 --v-head 4 --n-ff 16 --n-expert 4 --n-expert-used 2
  --n-expert-shared 1 --n-ff-exp 8 --n-group 2 --n-group-used 1 --ctx 256"
mk() { local name=$1; shift; "$onegpu" make-model $base "$@" -o "$dir/$name.gguf" 2>/dev/null; }
mk f32 --type F32
mk f16-nogroups --type F16 --no-group-keys --seed 3
mk q8 --type Q8_0 --n-embd 32 --seed 5
mk legacy --type F32 --legacy-mla --q-lora-rank 0 --gating softmax --n-group 1 --seed 7
mk moe-only --type F32 --n-dense 0 --n-expert-shared 0 --no-yarn --n-layer 1 --seed 9
mk kquant --type Q2_K --type-attn Q4_K --n-embd 256 --n-layer 1 --n-dense 0 --n-expert 2 --n-expert-used 1 \
  --n-group 1 --n-ff-exp 32 --vocab 16 --seed 11
# deepseek4 (--arch deepseek4): 4 layers [0,0,4,128], every kind of tensor once
"$onegpu" make-model --arch deepseek4 --tokenizer none --vocab 32 --n-layer 4 --hash-layers 1 --n-embd 16 --n-head 2 \
  --head-dim 16 --n-rot 4 --q-lora-rank 8 --o-rank 8 --indexer-heads 2 --indexer-dim 32 --n-expert 4 --n-expert-used 2 \
  --n-ff-exp 8 --window 4 --top-k 2 --type Q8_0 -o "$dir/ds4-q8.gguf" 2>/dev/null
# deepseek41 (--arch deepseek41): tiny's 8 layers with every CSA2 role and two Engram tables
"$onegpu" make-model --arch deepseek41 --tokenizer none --vocab 16 --n-embd 8 --n-head 2 --head-dim 8 --n-rot 4 \
  --q-lora-rank 8 --o-rank 8 --indexer-heads 1 --indexer-dim 32 --n-expert 2 --n-expert-used 1 --n-ff-exp 4 --window 4 \
  --top-k 2 --engram-heads 2 --engram-ngram 3 --engram-dim 32 --engram-primes-above 5 --hc 2 --type F16 \
  -o "$dir/ds41-f16.gguf" 2>/dev/null
ls -l "$dir"
