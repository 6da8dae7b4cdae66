#!/usr/bin/env bash
# IQ2_XXS, MXFP4 and I32 against llama.cpp (node-llama-cpp 3.21.1): our tables
# against ggml-common.h of the bundled source (read from the git bundle), our
# dequantization, dots and quantizers against the prebuilt ggml libraries on
# make-model files with IQ2_XXS and MXFP4 experts (tests/unit/ref_iquants.c says what
# each check is), and an I32 tensor read by ggml's gguf reader.
# usage: ref_iquants.sh ONEGPU REF_IQUANTS WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs
onegpu=$1 ref=$2 work=$3
mkdir -p "$work"
bundle=$here/node_modules/node-llama-cpp/llama/gitRelease.bundle
libs=$here/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
[[ -f $bundle ]] || skip_dep "the llama.cpp source bundle is missing (scripts/deps.sh)"
[[ -f $libs/libggml-base.so ]] || skip_dep "node-llama-cpp's prebuilt linux-x64 libraries are missing (scripts/deps.sh)"
command -v git >/dev/null || skip_dep "git is needed to read the llama.cpp source bundle"
if [[ ! -s $work/ggml-common.h ]]; then
  rm -rf "$work/src.git"
  git clone -q --bare "$bundle" "$work/src.git" 2>/dev/null || fail "cannot read $bundle"
  git --git-dir="$work/src.git" show HEAD:ggml/src/ggml-common.h > "$work/ggml-common.h" || fail "no ggml/src/ggml-common.h in the bundle"
  rm -rf "$work/src.git"
fi
shape="--tokenizer none --vocab 300 --n-layer 3 --n-dense 1 --n-embd 256 --n-head 2 --q-lora-rank 64 --kv-lora-rank 64
  --qk-nope 32 --qk-rope 16 --v-head 32 --n-ff 256 --n-expert 4 --n-expert-used 2 --n-group 1 --n-ff-exp 256"
# shellcheck disable=SC2086
"$onegpu" make-model $shape --type Q8_0 --type-routed IQ2_XXS --type-shared IQ2_XXS -o "$work/iq2.gguf" 2>/dev/null || fail "make-model IQ2_XXS"
# shellcheck disable=SC2086
"$onegpu" make-model $shape --type MXFP4 --seed 3 -o "$work/mxfp4.gguf" 2>/dev/null || fail "make-model MXFP4"
LD_LIBRARY_PATH=$libs "$ref" "$work/ggml-common.h" "$libs" "$work" "$work/iq2.gguf" "$work/mxfp4.gguf"
