#!/usr/bin/env bash
# The outside world accepts our files: llama.cpp (node-llama-cpp 3.21.1) loads
# make-model files (F32/F16 and Q8_0), generates tokens, and tokenizes text with
# our written vocabulary exactly as the reference DeepSeek-V3 tokenizer does.
# usage: ref_llama.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 work=$2
mkdir -p "$work"
js=$here/js

for variant in f32 q8_0; do
  model=$work/ref-$variant.gguf
  if [[ $variant == f32 ]]; then "$onegpu" make-model --preset tiny -o "$model" 2>/dev/null
  else "$onegpu" make-model --preset tiny --type Q8_0 -o "$model" 2>/dev/null; fi
  out=$work/gen-$variant.json
  node "$js/llama_generate.mjs" "$model" --prompt "The quick brown fox" -n 16 --probs > "$out" \
    || fail "llama.cpp could not run $model"
  n=$(json_get "$out" 'j.tokens.length')
  [[ $n == 16 ]] || fail "$variant: expected 16 generated tokens, got $n"
  json_get "$out" 'j.tokens.every(t => Number.isInteger(t) && t >= 0 && t < 129280) && j.prompt_tokens[0] === 0' | grep -qx true \
    || fail "$variant: token ids out of range or no BOS: $(cat "$out")"
  # Real probabilities, not a constant: finite, and not all positions the same token.
  json_get "$out" 'j.logprobs.every(p => Number.isFinite(p.logprob) && p.logprob <= 0) && new Set(j.tokens).size > 1' | grep -qx true \
    || fail "$variant: degenerate output $(cat "$out")"
  echo "ok: llama.cpp generated 16 tokens from the $variant tiny model ($(json_get "$out" 'j.cpu_backend'))"
done

# Tokenizer texts: English, code, whitespace runs, CJK, Cyrillic, emoji, digits.
texts=$work/texts
mkdir -p "$texts"
printf 'Hello world! The quick brown fox jumps over the lazy dog.\n' > "$texts/en.txt"
printf 'int main(void) {\n    return 0;\t// done\n}\n\n\n   x = 12345 + 3.14;\n' > "$texts/code.txt"
printf '你好世界！こんにちは、カタカナ。Привет, мир! 🚀🎉 naïve café 1234567\n' > "$texts/multi.txt"
for f in /usr/share/common-licenses/GPL-3 /usr/share/doc/bash/README; do
  [[ -f $f ]] && head -c 20000 "$f" > "$texts/$(basename "$f").txt"
done
node "$js/compare_tokenizers.mjs" "$work/ref-f32.gguf" "$texts"/*.txt || fail "llama.cpp tokenization of our vocabulary differs from the reference tokenizer"
echo "ok: tokenization with our vocabulary matches the DeepSeek-V3 reference tokenizer"
