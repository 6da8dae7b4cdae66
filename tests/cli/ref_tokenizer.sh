#!/usr/bin/env bash
# Tokenizer against outside references:
#  1. llama.cpp's own test vectors for deepseek-llm (the .inp/.out files in its
#     source bundle), through `onegpu tokenize`;
#  2. llama.cpp (node-llama-cpp) tokenizing the same >= 1 MB of real multilingual
#     text (man pages in Japanese, Korean, Chinese, Russian, Ukrainian, German,
#     French, English; plus code, emoji, whitespace runs) with our DeepSeek-V3 file;
#  3. decode(encode(x)) == x and the incremental detokenizer (test_tokenizer).
# usage: ref_tokenizer.sh ONEGPU TEST_TOKENIZER WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 unit=$2 work=$3
mkdir -p "$work"
js=$here/js

# 1. vectors
bash "$js/extract_vocab.sh" "$work/vocab" >/dev/null
v=$work/vocab/ggml-vocab-deepseek-llm.gguf
[[ -f $v.inp && -f $v.out ]] || fail "deepseek-llm test vectors missing from the bundle"
rm -rf "$work/cases" && mkdir -p "$work/cases"
node -e '
const fs = require("fs");
const inp = fs.readFileSync(process.argv[1], "utf8").split("\n__ggml_vocab_test__\n");
const out = fs.readFileSync(process.argv[2], "utf8").split("\n");
const n = Math.min(inp.length, out.filter((l, i) => i < inp.length).length);
const lines = [];
for (let i = 0; i < n; i++) {
  const f = `${process.argv[3]}/case${String(i).padStart(3, "0")}.txt`;
  fs.writeFileSync(f, inp[i]);
  lines.push(JSON.stringify({ file: f, tokens: out[i].trim().split(/\s+/).filter(Boolean).map(Number) }));
}
fs.writeFileSync(process.argv[3] + "/expected.jsonl", lines.join("\n") + "\n");
' "$v.inp" "$v.out" "$work/cases"
args=()
for f in "$work"/cases/case*.txt; do args+=(--file "$f"); done
"$onegpu" tokenize -m "$v" --no-bos "${args[@]}" > "$work/cases/ours.jsonl"
node "$js/compare_ids.mjs" "$work/cases/ours.jsonl" "$work/cases/expected.jsonl" \
  || fail "deepseek-llm: onegpu differs from llama.cpp's test vectors"
echo "ok: llama.cpp's deepseek-llm tokenizer vectors"

# 2. >= 1 MB of multilingual text, DeepSeek-V3 vocabulary
model=$work/v3.gguf
[[ -f $model ]] || "$onegpu" make-model --preset tiny -o "$model" 2>/dev/null
rm -rf "$work/corpus" && mkdir -p "$work/corpus"
i=0
for lang in ja ko zh_CN zh_TW ru uk de fr pl cs man1; do
  for page in $(ls /usr/share/man/$lang/man1/*.gz /usr/share/man/$lang/*.gz 2>/dev/null | head -40); do
    # cut at 48 kB, then drop a character the cut split (both sides read UTF-8)
    zcat "$page" 2>/dev/null | head -c 48000 | iconv -c -f UTF-8 -t UTF-8 > "$work/corpus/t$(printf %04d $i).txt" || true
    i=$((i + 1))
  done
done
# what man pages lack: emoji, long whitespace runs, code, digits, special-looking text
node -e '
const parts = ["emoji 🚀🎉👩‍👩‍👧‍👦 🇫🇷 ok", " ".repeat(300) + "\t\t\n\n\n" + " ".repeat(17), "x = 1234567890 + 3.14159;\n\tif (a<=b) { return a->c; }",
  "naïve café Ωμέγα العربية हिन्दी ไทย", "<think>reasoning</think> <｜User｜> text", "\r\n\r\n  trailing   "];
let s = ""; for (let k = 0; k < 400; k++) s += parts[k % parts.length] + (k % 7 ? " " : "\n");
require("fs").writeFileSync(process.argv[1], s);' "$work/corpus/synthetic.txt"
bytes=$(cat "$work"/corpus/*.txt | wc -c)
[[ $bytes -ge 1000000 ]] || fail "only $bytes bytes of text found on this machine (want >= 1 MB)"
args=()
for f in "$work"/corpus/*.txt; do args+=(--file "$f"); done
"$onegpu" tokenize -m "$model" --no-bos "${args[@]}" > "$work/corpus.ours.jsonl"
node "$js/llama_tokenize_many.mjs" "$model" --no-bos "$work"/corpus/*.txt > "$work/corpus.llama.jsonl"
node "$js/compare_ids.mjs" "$work/corpus.ours.jsonl" "$work/corpus.llama.jsonl" \
  || fail "deepseek-v3: onegpu and llama.cpp tokenize the corpus differently"
echo "ok: $bytes bytes of multilingual text tokenized exactly as llama.cpp does"

# 3. round trip and detokenizer
"$unit" "$model" "$work"/corpus/*.txt
