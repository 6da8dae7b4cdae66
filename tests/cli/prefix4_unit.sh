#!/usr/bin/env bash
# test_engine_ds4 (the prefix cache of whole deepseek4 / deepseek41 states) on a
# make-model --arch ARCH --preset tiny file with the real tokenizer.
# usage: prefix4_unit.sh ONEGPU TEST_ENGINE_DS4 WORKDIR ARCH
set -euo pipefail
onegpu=$1 unit=$2 work=$3 arch=$4
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work" "$arch"
"$unit" "$model" "$work/tiers-$arch"
