#!/usr/bin/env bash
# test_deepseek4 on a make-model --arch deepseek4 tiny F32 file (vocabulary cut
# to 512 so every position's logits fit), with ds4ref's double reference
# (ref_deepseek4: the plain build passes it; the sanitizer builds have none).
# usage: deepseek4_unit.sh ONEGPU TEST_DEEPSEEK4 WORKDIR [REF_DEEPSEEK4]
set -euo pipefail
onegpu=$1 unit=$2 work=$3 ref=${4:-}
mkdir -p "$work"
"$onegpu" make-model --arch deepseek4 --preset tiny --type F32 --tokenizer none --vocab 512 -o "$work/tiny.gguf" 2>/dev/null
"$unit" "$work/tiny.gguf" ${ref:+"$ref"}
