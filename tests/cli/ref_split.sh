#!/usr/bin/env bash
# Split models against llama.cpp (node-llama-cpp 3.21.1, llama.cpp v0.4.0):
# - llama.cpp loads the parts `make-model --split-max-size` writes (given the first
#   part) and generates exactly what it generates from the unsplit file;
# - llama.cpp's own gguf-split tool (built from the source bundle node-llama-cpp
#   ships, against its prebuilt libraries; skipped if that cannot be built) splits
#   the unsplit file in two ways, and `onegpu run --json` on its parts gives exactly
#   what it gives on the unsplit file;
# - gguf-split --merge of our parts gives back the unsplit file's tensor data, byte
#   for byte, and onegpu reads the merged file (split.count 0) as a single file.
# usage: ref_split.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
js=$here/js

"$onegpu" make-model --preset tiny -o "$work/m.gguf" 2>/dev/null
"$onegpu" make-model --preset tiny --split-max-size 10M -o "$work/s.gguf" 2>/dev/null
[[ -f $work/s-00001-of-00003.gguf && -f $work/s-00003-of-00003.gguf ]] || fail "expected 3 parts: $(ls "$work")"

# llama.cpp's results without its timings
gen() { node "$js/llama_generate.mjs" "$1" --prompt "The quick brown fox" -n 16 --probs |
  node -e 'const j=JSON.parse(require("fs").readFileSync(0,"utf8")); delete j.prefill_tok_per_s; delete j.decode_tok_per_s; console.log(JSON.stringify(j))'; }
gen "$work/m.gguf" > "$work/llama-m.json" || fail "llama.cpp could not run the unsplit file"
gen "$work/s-00001-of-00003.gguf" > "$work/llama-s.json" || fail "llama.cpp could not load our split files"
cmp -s "$work/llama-m.json" "$work/llama-s.json" ||
  fail "llama.cpp generates differently from our split files: $(head -c 400 "$work/llama-s.json") vs $(head -c 400 "$work/llama-m.json")"
echo "ok: llama.cpp loads our 3 parts and generates the same 16 tokens and log-probs as from the unsplit file"

# ours on a set of parts: the same output as on the unsplit file
ours() { "$onegpu" run -m "$1" -p "The quick brown fox" -n 16 --temp 0 --json --top-logprobs 3 2>/dev/null; }
ours "$work/m.gguf" > "$work/ours-m.json"

bundle=$here/node_modules/node-llama-cpp/llama/gitRelease.bundle
libs=$here/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
tool=$work/gguf-split
if [[ -f $bundle && -d $libs ]] && command -v git >/dev/null && command -v g++ >/dev/null &&
   git clone -q "$bundle" "$work/llama.cpp" 2>/dev/null &&
   g++ -O1 -std=c++17 -I"$work/llama.cpp/include" -I"$work/llama.cpp/ggml/include" -I"$work/llama.cpp/common" \
     "$work/llama.cpp/tools/gguf-split/gguf-split.cpp" -o "$tool" "$libs"/libllama.v*.so "$libs/libggml-base.so" \
     "$libs/libllama-common.so" "$libs"/libggml.v*.so -Wl,-rpath,"$libs" 2>"$work/build.log"; then
  "$tool" --split --split-max-size 20M "$work/m.gguf" "$work/ll" > "$work/split1.log" 2>&1 || fail "gguf-split: $(cat "$work/split1.log")"
  "$tool" --split --split-max-tensors 40 --no-tensor-first-split "$work/m.gguf" "$work/lt" > "$work/split2.log" 2>&1 ||
    fail "gguf-split: $(cat "$work/split2.log")"
  for first in "$work"/ll-00001-of-*.gguf "$work"/lt-00001-of-*.gguf; do
    ours "$first" > "$work/ours-split.json" || fail "onegpu cannot run llama.cpp's split $first"
    cmp -s "$work/ours-m.json" "$work/ours-split.json" || fail "onegpu on $first differs from the unsplit file"
    echo "ok: onegpu runs llama.cpp's gguf-split parts $(basename "$first") with the unsplit file's tokens and log-probs"
  done
  "$tool" --merge "$work/s-00001-of-00003.gguf" "$work/merged.gguf" > "$work/merge.log" 2>&1 || fail "gguf-split --merge: $(cat "$work/merge.log")"
  ours "$work/merged.gguf" > "$work/ours-merged.json" || fail "onegpu cannot read gguf-split's merged file"
  cmp -s "$work/ours-m.json" "$work/ours-merged.json" || fail "onegpu on the merged file differs from the unsplit file"
  "$onegpu" gguf --json "$work/merged.gguf" > "$work/merged-info.json"
  "$onegpu" gguf --json "$work/m.gguf" > "$work/m-info.json"
  off_merged=$(json_get "$work/merged-info.json" 'j.data_offset') off_m=$(json_get "$work/m-info.json" 'j.data_offset')
  cmp -s <(tail -c +$((off_merged + 1)) "$work/merged.gguf") <(tail -c +$((off_m + 1)) "$work/m.gguf") ||
    fail "gguf-split --merge of our parts does not give back the unsplit file's tensor data"
  echo "ok: gguf-split --merge of our parts gives the unsplit file's tensor data byte for byte, and onegpu reads it"
else
  echo "skipped: llama.cpp's gguf-split could not be built here ($(tail -c 300 "$work/build.log" 2>/dev/null || echo 'no bundle, git or g++'))"
fi
echo "ref_split.sh: all passed"
