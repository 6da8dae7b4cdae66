#!/usr/bin/env bash
# test_deepseek41 on make-model --arch deepseek41 --preset tiny files: F32 with
# F16 Engram tables (the gather dequantizes them as ref_deepseek41 does, so the
# reference comparison covers it), and Q8_0 with Q2_K tables of 256-wide rows
# for the quantized run. The plain build passes ref_deepseek41;
# the sanitizer builds have none.
# usage: deepseek41_unit.sh ONEGPU TEST_DEEPSEEK41 WORKDIR [REF_DEEPSEEK41]
set -euo pipefail
onegpu=$1 unit=$2 work=$3 ref=${4:-}
mkdir -p "$work"
mk() { "$onegpu" make-model --arch deepseek41 --preset tiny --tokenizer none --vocab 512 "$@" 2>/dev/null; }
mk --type F32 --type-engram F16 -o "$work/tiny.gguf"
mk --type Q8_0 --type-engram Q2_K --engram-dim 256 -o "$work/tiny-q8.gguf"
"$unit" "$work/tiny.gguf" "$work/tiny-q8.gguf" ${ref:+"$ref"}
