#!/usr/bin/env bash
# test_deepseek41 on make-model --arch deepseek41 --preset tiny files (F32, and
# Q8_0 for the quantized run), with ref_deepseek41's double reference (the
# plain build passes it; the sanitizer builds have none).
# usage: deepseek41_unit.sh ONEGPU TEST_DEEPSEEK41 WORKDIR [REF_DEEPSEEK41]
set -euo pipefail
onegpu=$1 unit=$2 work=$3 ref=${4:-}
mkdir -p "$work"
"$onegpu" make-model --arch deepseek41 --preset tiny --type F32 --tokenizer none --vocab 512 -o "$work/tiny.gguf" 2>/dev/null
"$onegpu" make-model --arch deepseek41 --preset tiny --type Q8_0 --tokenizer none --vocab 512 -o "$work/tiny-q8.gguf" 2>/dev/null
"$unit" "$work/tiny.gguf" "$work/tiny-q8.gguf" ${ref:+"$ref"}
