#!/usr/bin/env bash
# The chat encodings (test_chat): hand-written expectations for every kind,
# detection, the tokenization guarantee on the real vocabulary; then the same
# formatters against the official Jinja templates rendered by an outside engine
# (tests/js/chat_cases.mjs: the V3 template from the DeepSeek-V3 tokenizer
# package; R1, V3.1, V4 and llama.cpp's R1 tool template from llama.cpp's source
# bundle in node-llama-cpp).
# usage: chat.sh ONEGPU TEST_CHAT WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
onegpu=$1 unit=$2 work=$3
mkdir -p "$work"
tiny_model "$onegpu" "$work"
"$unit" "$model"

if ! command -v node >/dev/null || [[ $(node -p 'process.versions.node.split(".")[0]') -lt 20 ]] \
   || [[ ! -d $here/node_modules/@huggingface/jinja || ! -d $here/node_modules/node-llama-cpp ]]; then
  skip_dep "Node.js >= 20 and tests/node_modules are needed for the Jinja references (scripts/deps.sh)"
fi
bundle=$here/node_modules/node-llama-cpp/llama/gitRelease.bundle
commit=$(git bundle list-heads "$bundle" | awk 'NR==1{print $1}')
tdir=$work/templates-$commit
if [[ ! -s $tdir/deepseek-ai-DeepSeek-V4.jinja ]]; then
  tmp=$(mktemp -d "$work/.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  git clone -q --bare "$bundle" "$tmp/repo.git"
  git --git-dir="$tmp/repo.git" archive --format=tar "$commit" -- models/templates \
    | tar -x -C "$tmp" --strip-components=2
  mkdir -p "$tdir" && mv "$tmp"/*.jinja "$tdir"/
fi
node "$here/js/chat_cases.mjs" "$work/chat_cases.json" "$tdir"
"$unit" "$model" "$work/chat_cases.json"
