#!/usr/bin/env bash
# The antirez dialect end to end (issue 14): a make-model --arch deepseek41
# tiny file rewritten by test_ds41_fp8 as the same model in two spellings
# (antirez keys, names and FP8 Engram rows; vcruz305 with F32 tables holding
# those rows' decode from the E4M3 definition). `onegpu run --json --teacher`
# must give bitwise-equal log-probs on both, `onegpu gguf` must show the I8
# tables as the engram role, and a table of NaN codes must fail with a clear
# error naming the row and byte.
# usage: ds41_antirez.sh ONEGPU TEST_DS41_FP8 WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
onegpu=$1 conv=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$onegpu" make-model --arch deepseek41 --preset tiny -o "$work/in.gguf" 2>"$work/make.log" || {
  if grep -q 'tokenizer' "$work/make.log"; then skip_dep "no tokenizer files (run scripts/deps.sh)"; fi
  cat "$work/make.log"; fail "make-model --arch deepseek41 --preset tiny"
}
"$conv" convert "$work/in.gguf" "$work/az.gguf" "$work/vc.gguf" "$work/nan.gguf" || fail "test_ds41_fp8 convert"
# a prompt and 40 teacher-forced ids: past the window and the candidate blocks
ids=$(seq -s, 1005 3037 122000)
for d in az vc in; do
  "$onegpu" run -m "$work/$d.gguf" -p "The quick brown fox" --teacher "$ids" --json >"$work/$d.json" 2>"$work/$d.log" ||
    { cat "$work/$d.log"; fail "onegpu run --teacher on the $d file"; }
done
n=$(json_get "$work/az.json" "j.tokens ? j.tokens.length : JSON.stringify(Object.keys(j))")
cmp -s "$work/az.json" "$work/vc.json" || { diff "$work/az.json" "$work/vc.json" | head; fail "log-probs differ between the spellings"; }
# the control: the F32 tables before the FP8 rounding give other log-probs (the tables are read)
cmp -s "$work/in.json" "$work/vc.json" && fail "the FP8-rounded tables changed no log-prob (Engram not read?)"
"$onegpu" gguf "$work/az.gguf" --json >"$work/g.json"
[[ $(json_get "$work/g.json" "['deepseek41.hidden_size', 'deepseek41.embedding_length', 'deepseek41.kv_source_layer_ids'].map(k => j.metadata.some(m => m.key == k)).join() + ' ' + j.tensors.some(t => t.name == 'blk.4.engram_kv.weight')") \
   == "true,false,true true" ]] || fail "az.gguf is not spelled as the antirez dialect"
[[ $(json_get "$work/g.json" "j.tensors.filter(t => t.role == 'engram').map(t => t.name + ':' + t.type + ':' + t.shape.join('x')).join(' ')") \
   =~ ^blk\.1\.engram_embd\.weight:I8:33x[0-9]+\ blk\.4\.engram_embd\.weight:I8:33x[0-9]+$ ]] ||
  fail "onegpu gguf: the antirez tables are not I8 [33, rows] in the engram role"
rc=0; "$onegpu" run -m "$work/nan.gguf" -p "The quick brown fox" --teacher "$ids" --json >/dev/null 2>"$work/nan.log" || rc=$?
[[ $rc != 0 ]] && grep -q 'layer 1: Engram table row [0-9]*, byte [0-9]* (0x7f): an FP8 NaN code' "$work/nan.log" ||
  { cat "$work/nan.log"; fail "a table of NaN codes: rc $rc, not the clear error"; }
echo "ds41_antirez: antirez (FP8 rows) and vcruz305 (their decode) give bitwise-equal log-probs ($n); NaN codes refused"
