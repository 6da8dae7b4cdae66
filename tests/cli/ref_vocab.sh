#!/usr/bin/env bash
# Our reader reads the vocab-only GGUFs shipped in llama.cpp's source (the git
# bundle inside node-llama-cpp) with the same metadata and tensor counts that
# node-llama-cpp's own GGUF parser reports.
# usage: ref_vocab.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 work=$2
mkdir -p "$work"
bash "$here/js/extract_vocab.sh" "$work/vocab" >/dev/null
files=("$work"/vocab/ggml-vocab-*.gguf)
[[ ${#files[@]} -ge 10 ]] || fail "expected the vocab GGUFs of llama.cpp's bundle, found ${#files[@]}"
node "$here/js/nlc_counts.mjs" "${files[@]}" > "$work/nlc_counts.jsonl"
n=0
while read -r line; do
  file=$(node -e "console.log(JSON.parse(process.argv[1]).file)" "$line")
  want=$(node -e "const j=JSON.parse(process.argv[1]); console.log(j.n_kv + ' ' + j.n_tensors)" "$line")
  "$onegpu" gguf --json "$file" > "$work/ours.json" || fail "onegpu gguf rejected $file"
  got=$(json_get "$work/ours.json" "j.n_kv + ' ' + j.n_tensors + ' ' + j.metadata.length")
  [[ "$got" == "$want ${want%% *}" ]] || fail "$(basename "$file"): node-llama-cpp says n_kv n_tensors = $want, onegpu says $got"
  n=$((n + 1))
done < "$work/nlc_counts.jsonl"
[[ $n -eq ${#files[@]} ]] || fail "counted $n of ${#files[@]} files"
echo "ok: $n vocab GGUFs from llama.cpp's bundle read with the same counts as node-llama-cpp"
