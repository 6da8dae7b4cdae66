#!/usr/bin/env bash
# Canonical numerics by default (issue 12, Acceptance): on models whose routed
# experts are Q2_K, Q3_K, Q4_K, Q6_K and Q8_0 (rows of 256, so no fallback
# types; the other weights F32 with the embedding and head Q8_0, or all Q8_0 for
# Q3_K and Q6_K, whose fork order differs from the canonical one), `onegpu run --json
# --temp 0` at default settings gives byte-identical tokens and log-probs for no
# device; --vram with 0, some and all experts resident; migration on (checked
# to have migrated); and on every CPU tier this machine has (ONEGPU_CPU_ISA; a
# tier it lacks is a hardware skip line). The reference is the scalar tier with
# no device. The check is shown able to fail: `--cpu-numerics fork` on the best
# tier must differ from it for every type, and fork must depend on placement
# for at least one type.
# usage: numerics.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs  # the tiny preset takes its tokenizer from tests/node_modules
onegpu=$1 work=$2
mkdir -p "$work"
fits=(--vram 1G --ram 8G)
# name: flags (the default numerics everywhere)
configs=(base s0 s4 sall mig)
declare -A cflags=([base]="" [s0]="${fits[*]} --expert-slots 0" [s4]="${fits[*]} --expert-slots 4 --migrate 0"
                   [sall]="${fits[*]} --expert-slots all --migrate 0" [mig]="${fits[*]} --expert-slots 4 --migrate 2")
# the product a run must reproduce: prompt, tokens, log-probs (--vram adds a placement report)
core() { node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  console.log(JSON.stringify({p: j.prompt_tokens, t: j.tokens, l: j.logprobs}))' "$1"; }
gen() { # gen OUT ISA FLAGS...
  local out=$1 isa=$2; shift 2
  ONEGPU_CPU_ISA=$isa "$onegpu" run -m "$model" -p "The quick brown fox" -n 12 --temp 0 --json "$@" \
    >"$out.json" 2>"$out.err" || fail "run $* (ISA $isa): $(cat "$out.err")"
  core "$out.json" >"$out.core"
}
tiers=()
for isa in scalar avx2 avx512; do
  if ONEGPU_CPU_ISA=$isa "$onegpu" run -m /nonexistent -p x -n 1 2>&1 | grep -q "this CPU lacks"; then
    echo "SKIP (hardware): tier $isa: this CPU lacks it"
  else
    tiers+=("$isa")
  fi
done
best=${tiers[${#tiers[@]}-1]}
n_cmp=0 fork_moves=()
for T in Q2_K Q3_K Q4_K Q6_K Q8_0; do
  model=$work/tiny-$T.gguf
  case $T in Q3_K|Q6_K) rest=(--type Q8_0) ;; *) rest=(--type-embd Q8_0 --type-output Q8_0) ;; esac
  "$onegpu" make-model --preset tiny "${rest[@]}" --type-routed $T --n-embd 256 --n-ff-exp 256 -o "$model" 2>/dev/null
  gen "$work/$T-ref" scalar
  for isa in "${tiers[@]}"; do
    for c in "${configs[@]}"; do
      # shellcheck disable=SC2086
      gen "$work/$T-$isa-$c" "$isa" ${cflags[$c]}
      cmp -s "$work/$T-ref.core" "$work/$T-$isa-$c.core" \
        || fail "$T: tier $isa, $c (${cflags[$c]:-no device}) differs from scalar without a device"
      n_cmp=$((n_cmp + 1))
    done
    grep -Eq '[1-9][0-9]* migrations' "$work/$T-$isa-mig.err" || fail "$T: tier $isa: no migration happened"
  done
  # the check can fail: the fork differs from the canonical reference, and depends on placement
  gen "$work/$T-fork" "$best" --cpu-numerics fork
  cmp -s "$work/$T-ref.core" "$work/$T-fork.core" && fail "$T: --cpu-numerics fork ($best) equals canonical"
  # shellcheck disable=SC2086
  gen "$work/$T-fork-s4" "$best" --cpu-numerics fork ${cflags[s4]}
  # shellcheck disable=SC2086
  gen "$work/$T-fork-sall" "$best" --cpu-numerics fork ${cflags[sall]}
  # (which placements happen to agree with no device is chance: two of them)
  { cmp -s "$work/$T-fork.core" "$work/$T-fork-s4.core" && cmp -s "$work/$T-fork.core" "$work/$T-fork-sall.core"; } \
    || fork_moves+=("$T")
done
# (a tier's fork kernel may already sum in the canonical order for some types)
[[ ${#fork_moves[@]} -gt 0 ]] || fail "fork ($best) depends on placement for no type"
[[ $n_cmp -gt 0 ]] || fail "no comparison ran"
echo "numerics: OK ($n_cmp runs bit-identical to scalar without a device: tiers ${tiers[*]} x ${configs[*]} x 5 types; fork differs, and moves with placement for ${fork_moves[*]})"
