#!/usr/bin/env bash
# The double-precision deepseek4 reference (tests/unit/ref_deepseek4.c, written
# from shared/spec/deepseek4.md §4) against llama.cpp v0.4.0 (node-llama-cpp
# 3.21.1) on make-model --arch deepseek4 tiny files (6 layers: window-only,
# ratio 4 + indexer, ratio 128; window 8, indexer top_k 4 of up to 98 rows,
# 3 hash layers). llama.cpp generates 64 greedy tokens with log-probs after 3
# prompts (12, 27 and 331 tokens: every one runs past the window and through
# many ratio-4 blocks; the long one through 3 ratio-128 blocks, which llama.cpp
# hard-codes to 128 tokens each); the reference is teacher-forced on the same
# tokens. llama.cpp runs with an F32 KV cache and without flash attention (its
# flash path casts K and V to F16 even for an F32 cache), and the reference
# with llama.cpp's choice of numerics: --no-kv-fp8 --no-indexer-fp4 (its graph
# has neither QAT round trip) and F32 storage.
#   F32 file: |delta logprob| <= 1e-3 at every position (measured ~1e-5).
#   F16 file: ggml's CPU backend rounds the input of every F16 product to F16
#     (ggml-cpu.c: F16's vec_dot_type is F16, and tinyBLAS's F16 kernel takes
#     F16 B only); the reference does too (--act-f16). Whether an activation
#     rounds up or down then depends on its last float bits, which a double
#     computation does not reproduce: a relative jitter of 1e-7 before the
#     rounding moved the reference's own log-probs by up to 2e-3 on this model,
#     and a flipped expert or indexer choice moved later ones by up to 4. So
#     the F16 file uses every expert and a top_k above the row count (no
#     discrete choice to flip, as ref_model.sh's quantized files; the F32 file
#     has both) and is held to the floor: median <= 3e-3, every position
#     <= 2e-2, greedy agreement >= 90% (compare_ref.mjs --f16).
#   The spec's numerics (FP8 KV and FP4 indexer QAT, the reference's default)
#     must differ from llama.cpp's by > 1e-3 somewhere: the QAT is real.
# The fast path (onegpu run --json --teacher IDS --ds4-rounding llama, as
# ref_model.sh does for deepseek2; compare_gen.mjs --prob-sum) against the same
# llama.cpp runs: F32 within 1e-3 at every position (measured <= 8e-6); F16
# under the floor above (--f16), in both numerics: canonical (the default: F16
# weights times F32 activations) and fork (activations rounded to f16 as ggml
# does). Neither reaches 1e-3: measured max 3.6e-3..1.0e-2, median
# 0.9e-3..1.6e-3; our own fork tiers (scalar, AVX2, AVX-512) differ from each
# other by as much (max 4e-3..7e-3, median ~1e-3), so the floor is the f16
# rounding's, not a fault of either side.
# usage: ref_ds4.sh ONEGPU REF_DEEPSEEK4 WORKDIR [quantized]
# quantized: instead, the fast path against llama.cpp on quantized tiny files:
#   Q8_0; Q4_K trunk + Q2_K routed + Q6_K output (Q8_0 embeddings); the
#   published V4 Q2 layout (IQ2_XXS gate/up, Q2_K down, Q8_0 attention, shared
#   and output, F16 embeddings and aux). n_embd and n_ff_exp are 256 for the
#   k-quants' blocks (rows of 32, 64 or 128 fall back to Q5_0 as llama-quantize
#   does); every expert is used and the indexer's top_k is above the row count
#   (no discrete choice for a rounding step to flip; see ref_model.sh); prompts
#   1 and 2 (the long one runs through 3 ratio-128 blocks). ref_model.sh's
#   criteria: compare_gen.mjs --quantized (median <= 0.1, greedy agreement
#   >= 90%); measured medians 0.002-0.053, agreement >= 51/51 (our own fork and
#   canonical numerics differ from each other by medians 0.021-0.046: the floor
#   of activation rounding, not a fault of either side). The bound is
#   loose: the spec's FP8 KV round trip (--ds4-rounding spec) gave medians
#   0.076-0.098 on the long prompt and passes it too, and a bound between the two
#   (0.06) left the kq file 0.007 of room; the F32 comparisons above are the ones
#   that tell such differences apart.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 ref=$2 work=$3 part=${4:-float}
[[ $part == float || $part == quantized ]] || fail "ref_ds4.sh: unknown part '$part' (float or quantized)"
mkdir -p "$work"
js=$here/js
long="In the beginning the small model read every word of the long story, and it kept the recent words in a short window while older words were folded into compressed rows. "
prompts=("The quick brown fox jumps over the lazy dog."
         "你好，世界！ Once upon a time, in a land far away, there lived a small model that read every word."
         "$(for _ in $(seq 10); do printf '%s' "$long"; done)")
lines() { node -e 'const [f, i] = process.argv.slice(1); console.log(require("fs").readFileSync(f, "utf8").split("\n")[+i])' "$@"; }
# fast MODEL I OUTNAME [onegpu run options]: the fast path teacher-forced on
# llama.cpp's tokens for prompt I (llama.cpp's numerics with its F32 cache, as
# the llama.cpp runs here use: --ds4-rounding llama --kv-type f32)
fast() {
  local model=$1 i=$2 out=$3
  shift 3
  "$onegpu" run -m "$work/$model.gguf" -p "${prompts[$i]}" --json --ds4-rounding llama --kv-type f32 "$@" \
    --teacher "$(json_get "$work/$model-$i.llama.json" 'j.tokens.join(",")')" > "$work/$out.json" 2> "$work/$out.log" \
    || { tail -3 "$work/$out.log"; fail "onegpu run failed on $model, prompt $i"; }
}
if [[ $part == quantized ]]; then
  allexp="--n-expert-used 8 --top-k 128" k256="--n-embd 256 --n-ff-exp 256"
  "$onegpu" make-model --arch deepseek4 --preset tiny --type Q8_0 $allexp --seed 23 -o "$work/q8.gguf" 2>/dev/null
  "$onegpu" make-model --arch deepseek4 --preset tiny $k256 --type Q4_K --type-embd Q8_0 --type-routed Q2_K --type-output Q6_K $allexp \
    --seed 24 -o "$work/kq.gguf" 2>/dev/null
  "$onegpu" make-model --arch deepseek4 --preset tiny $k256 --type Q8_0 --type-embd F16 --type-aux F16 \
    --type-routed IQ2_XXS --type-routed-down Q2_K $allexp --seed 25 -o "$work/iq2.gguf" 2>/dev/null
  for model in q8 kq iq2; do
    node "$js/llama_generate.mjs" "$work/$model.gguf" --prompt "${prompts[1]}" --prompt "${prompts[2]}" \
      -n 64 --probs --kv-f32 --no-flash-attn > "$work/$model.llama.jsonl" 2> "$work/$model.llama.log" \
      || { tail -5 "$work/$model.llama.log"; fail "llama.cpp could not run $model"; }
    for i in 1 2; do
      lines "$work/$model.llama.jsonl" $((i - 1)) > "$work/$model-$i.llama.json"
      fast $model $i $model-$i.ours
      echo -n "$model prompt $i, fast path: "
      node "$js/compare_gen.mjs" "$work/$model-$i.llama.json" "$work/$model-$i.ours.json" 0.1 --quantized --prob-sum \
        || fail "$model, prompt $i: the fast path and llama.cpp disagree"
    done
  done
  exit 0
fi
"$onegpu" make-model --arch deepseek4 --preset tiny --type F32 --seed 21 -o "$work/f32.gguf" 2>/dev/null
"$onegpu" make-model --arch deepseek4 --preset tiny --type F16 --n-expert-used 8 --top-k 128 --seed 22 -o "$work/f16.gguf" 2>/dev/null
for model in f32 f16; do
  node "$js/llama_generate.mjs" "$work/$model.gguf" --prompt "${prompts[0]}" --prompt "${prompts[1]}" \
    --prompt "${prompts[2]}" -n 64 --probs --kv-f32 --no-flash-attn > "$work/$model.llama.jsonl" 2> "$work/$model.llama.log" \
    || { tail -5 "$work/$model.llama.log"; fail "llama.cpp could not run $model"; }
  opts="--no-kv-fp8 --no-indexer-fp4" mode=
  [[ $model == f16 ]] && opts="$opts --act-f16" mode=--f16
  for i in 0 1 2; do
    lines "$work/$model.llama.jsonl" $i > "$work/$model-$i.llama.json"
    all=$(json_get "$work/$model-$i.llama.json" '[...j.prompt_tokens, ...j.tokens].join(",")')
    np=$(json_get "$work/$model-$i.llama.json" 'j.prompt_tokens.length')
    "$ref" "$work/$model.gguf" --tokens "$all" --from $((np - 1)) $opts > "$work/$model-$i.ref.json" \
      || fail "ref_deepseek4 failed on $model"
    echo -n "$model prompt $i ($np prompt tokens): "
    node "$js/compare_ref.mjs" "$work/$model-$i.llama.json" "$work/$model-$i.ref.json" 1e-3 $mode \
      || fail "$model, prompt $i: the reference and llama.cpp disagree"
    for numerics in gpu fork; do
      [[ $model == f32 && $numerics == fork ]] && continue # F32 products: no activation rounding to differ
      fast $model $i $model-$i.$numerics --cpu-numerics $numerics
      name=$numerics; [[ $numerics == gpu ]] && name=canonical
      echo -n "$model prompt $i, fast path ($name numerics): "
      node "$js/compare_gen.mjs" "$work/$model-$i.llama.json" "$work/$model-$i.$numerics.json" 1e-3 --prob-sum $mode \
        || fail "$model, prompt $i: the fast path ($name numerics) and llama.cpp disagree"
    done
  done
done
# the spec's QAT on the long prompt: measurably not what llama.cpp computes
"$ref" "$work/f32.gguf" --tokens "$(json_get "$work/f32-2.llama.json" '[...j.prompt_tokens, ...j.tokens].join(",")')" \
  --from $(($(json_get "$work/f32-2.llama.json" 'j.prompt_tokens.length') - 1)) > "$work/f32-2.spec.json"
echo -n "f32 prompt 2, spec numerics (FP8 KV + FP4 indexer QAT): "
# (it must fail on the log-prob bound, not for a missing entry or a token mismatch)
if qat=$(node "$js/compare_ref.mjs" "$work/f32-2.llama.json" "$work/f32-2.spec.json" 1e-3 --no-argmax); then
  echo "$qat"
  fail "the FP8/FP4 QAT of the reference changed nothing (llama.cpp skips it, so they must differ)"
fi
echo "$qat"
grep -q '^FAIL: position [0-9]*: |delta logprob|' <<< "$qat" || fail "the spec-numerics comparison failed for another reason"
