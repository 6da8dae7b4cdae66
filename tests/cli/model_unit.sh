#!/usr/bin/env bash
# test_model on small make-model files covering the variants the forward pass
# handles: F32 with and without group keys, legacy MLA layout with softmax
# routing and plain attn_q, Q8_0 and Q4_K/Q6_K mixes. No tokenizer needed.
# usage: model_unit.sh ONEGPU TEST_MODEL WORKDIR
set -euo pipefail
onegpu=$1 unit=$2 work=$3
mkdir -p "$work"
small="--tokenizer none --vocab 512 --n-layer 4 --n-dense 1 --n-embd 256 --n-head 4 --q-lora-rank 64
  --kv-lora-rank 64 --qk-nope 32 --qk-rope 16 --v-head 32 --n-ff 256 --n-expert 16 --n-expert-used 4
  --n-ff-exp 256 --n-group 4 --n-group-used 2"
"$onegpu" make-model $small --type F32 -o "$work/f32.gguf" 2>/dev/null
"$onegpu" make-model $small --type F32 --no-group-keys --seed 3 -o "$work/f32-nogroups.gguf" 2>/dev/null
"$onegpu" make-model $small --type F32 --legacy-mla --q-lora-rank 0 --gating softmax --n-group 1 --seed 5 \
  -o "$work/f32-legacy.gguf" 2>/dev/null
"$onegpu" make-model $small --type Q8_0 --seed 7 -o "$work/q8.gguf" 2>/dev/null
"$onegpu" make-model $small --type Q4_K --type-routed Q2_K --type-output Q6_K --seed 9 -o "$work/k.gguf" 2>/dev/null
if [[ ${OG_SANITIZED:-0} == 1 ]]; then # sanitizer builds: the legacy layout and the quantized mix (same code, 10x slower)
  "$unit" "$work/f32-legacy.gguf" "$work/k.gguf"
else
  "$unit" "$work/f32.gguf" "$work/f32-nogroups.gguf" "$work/f32-legacy.gguf" "$work/q8.gguf" "$work/k.gguf"
fi
