#!/usr/bin/env bash
# test_engine_ds4 (the prefix cache of whole deepseek4 / deepseek41 states) on a
# make-model --arch ARCH --preset tiny file with the real tokenizer.
# usage: prefix4_unit.sh ONEGPU TEST_ENGINE_DS4 WORKDIR ARCH
set -euo pipefail
onegpu=$1 unit=$2 work=$3 arch=$4
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
model=$work/$arch-tiny.gguf
if [[ ! -s $model ]]; then
  "$onegpu" make-model --arch "$arch" --preset tiny -o "$model" 2>"$work/make.log" || {
    if grep -q 'tokenizer' "$work/make.log"; then skip_dep "no tokenizer files (run scripts/deps.sh)"; fi
    cat "$work/make.log"; fail "make-model --arch $arch"
  }
fi
"$unit" "$model"
