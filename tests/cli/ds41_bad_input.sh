#!/usr/bin/env bash
# deepseek41 files a careless user hands onegpu (the s22 attack review): a
# split set with one part from another model's set (the same part count and
# tensor order, another n_embd) names the part; a truncated file and a part
# missing say so; onegpu run refuses numbers it cannot hold. Every case must
# be an error, never a crash.
# usage: ds41_bad_input.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
onegpu=$1 work=$2
rm -rf "$work" && mkdir -p "$work"/a "$work"/b
# the fuzz seed's small shapes, one tensor per part (so both sets split alike)
small=(--arch deepseek41 --tokenizer none --vocab 16 --n-head 2 --head-dim 8 --n-rot 4 --q-lora-rank 8 --o-rank 8
       --indexer-heads 1 --indexer-dim 32 --n-expert 2 --n-expert-used 1 --n-ff-exp 4 --window 4 --top-k 2
       --engram-heads 2 --engram-ngram 3 --engram-dim 32 --engram-primes-above 5 --hc 2 --split-max-size 1)
"$onegpu" make-model "${small[@]}" --n-embd 8 -o "$work/a/m.gguf" 2>/dev/null || fail "make-model (n_embd 8)"
"$onegpu" make-model "${small[@]}" --n-embd 16 -o "$work/b/m.gguf" 2>/dev/null || fail "make-model (n_embd 16)"
first=$(ls "$work"/a/m-00001-of-*.gguf)
"$onegpu" plan -m "$first" --vram 1G --ram 4G > /dev/null 2>&1 || fail "the intact split set does not plan"
# expect WHAT NEEDLE CMD...: CMD fails (exit 1..3, not a signal) and its stderr holds NEEDLE
expect() {
  local what=$1 needle=$2 rc=0
  shift 2
  "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  (( rc >= 1 && rc <= 3 )) || { cat "$work/err.txt"; fail "$what: exit $rc (expected an error, 1..3)"; }
  grep -qF -- "$needle" "$work/err.txt" || { cat "$work/err.txt"; fail "$what: no '$needle'"; }
}
# part 2 holds output_norm.weight [n_embd]: take it from the n_embd 16 set
part2=$(basename "$(ls "$work"/a/m-00002-of-*.gguf)")
cp "$work/a/$part2" "$work/part2.keep"
cp "$work/b/$part2" "$work/a/$part2"
expect "a part from another model" \
  "tensor output_norm.weight has shape [16, 1, 1, 1] but the hyperparameters say [8, 1, 1] (it is in split part 2 and the hyperparameters in part 1: is part 2 from another model?)" \
  "$onegpu" plan -m "$first" --vram 1G --ram 4G
rm "$work/a/$part2"
expect "a part missing" "every part must be next to the first" "$onegpu" plan -m "$first" --vram 1G --ram 4G
cp "$work/part2.keep" "$work/a/$part2"
# a truncated single file
"$onegpu" make-model "${small[@]:0:${#small[@]}-2}" --n-embd 8 -o "$work/one.gguf" 2>/dev/null || fail "make-model (one file)"
head -c $(( $(stat -c %s "$work/one.gguf") - 100 )) "$work/one.gguf" > "$work/cut.gguf"
expect "a truncated file" "the file is truncated" "$onegpu" plan -m "$work/cut.gguf" --vram 1G --ram 4G
# onegpu run's numbers: atoi read -n 99999999999 as 1215752191 and "abc" as 0
expect "-n past 2^31" "-n takes a token count in 0..2147483647, not '99999999999'" \
  "$onegpu" run -m "$work/one.gguf" -p hi -n 99999999999
expect "-n junk" "-n takes a token count in 0..2147483647, not 'abc'" "$onegpu" run -m "$work/one.gguf" -p hi -n abc
expect "--top-p 2" "--top-p takes a number in 0..1, not '2'" "$onegpu" run -m "$work/one.gguf" -p hi --top-p 2
expect "--temp nan" "--temp takes a number >= 0, not 'nan'" "$onegpu" run -m "$work/one.gguf" -p hi --temp nan
echo "ds41_bad_input: a part from another model, a part missing, a truncated file, run -n / --top-p / --temp out of range: each refused by name"
