#!/usr/bin/env bash
# The output parser's unit test on the real DeepSeek-V3 vocabulary (a tiny
# make-model file; a dependency skip when the tokenizer package is missing).
# usage: outparse.sh ONEGPU TEST_OUTPARSE WORKDIR
set -euo pipefail
onegpu=$1 unit=$2 work=$3
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
"$unit" "$model"
