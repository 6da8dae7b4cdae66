#!/usr/bin/env bash
# Placement in `onegpu run`: the plan is checked before loading (exit 3), the
# expert statistics count every selection once (prompt + fed tokens - 1 forward
# tokens x k per MoE layer, from the saved profile), and the measured hit rate
# on the resident set equals the plan's prediction when a run replays the
# traffic of the profile it was planned from (same teacher-forced tokens).
# With --cpu-numerics gpu (the default) a result never depends on placement
# (bit-identical); with fork within a bound, checked at the end.
# usage: placement.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs  # the tiny preset takes its tokenizer from tests/node_modules
onegpu=$1 work=$2
mkdir -p "$work"
m=$work/tiny.gguf
"$onegpu" make-model --preset tiny -o "$m" 2>/dev/null
teacher=100,200,300,400,500,600,700,800,900
fits=(--vram 1G --ram 8G)

"$onegpu" plan -m "$m" "${fits[@]}" --json >"$work/plan.json"
k=$(json_get "$work/plan.json" 'j.n_expert_used')
n_layer=$(json_get "$work/plan.json" 'j.expert_slots_per_layer.length')
[[ $(json_get "$work/plan.json" 'j.fits') == true ]] || fail "tiny model does not fit 1G"

# statistics: every MoE layer sees (prompt + 9 - 1) x k selections
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher $teacher --json "${fits[@]}" --expert-slots 4 --migrate 0 \
  --save-profile "$work/p.json" >"$work/out.json" 2>"$work/err1"
n_prompt=$(json_get "$work/out.json" 'j.prompt_tokens.length')
want=$(( (n_prompt + 8) * k ))
sums=$(json_get "$work/p.json" 'j.layers.map(l => l.counts.reduce((a, b) => a + b, 0)).join(" ")')
n_moe=$(json_get "$work/p.json" 'j.layers.length')
[[ $n_moe -ge 1 && $n_moe -lt $n_layer ]] || fail "profile has $n_moe MoE layers of $n_layer"
for s in $sums; do [[ $s == "$want" ]] || fail "layer selection count $s, want ($n_prompt + 8) x $k = $want"; done
grep -q "cpu device: $((4 * n_moe)) experts resident" "$work/err1" || fail "resident set: $(cat "$work/err1")"
hit_line=$(grep 'expert selections hit' "$work/err1") || fail "no hit-rate line: $(cat "$work/err1")"
[[ $hit_line == *"of $((want * n_moe)) expert selections"* ]] || fail "wrong selection total: $hit_line"

# replaying the same traffic from the profile: measured hit rate == predicted
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher $teacher --json "${fits[@]}" --expert-slots 4 --migrate 0 \
  --profile "$work/p.json" >"$work/out2.json" 2>"$work/err2"
cmp -s <(json_get "$work/out.json" 'JSON.stringify([j.prompt_tokens, j.tokens, j.logprobs])') <(json_get "$work/out2.json" 'JSON.stringify([j.prompt_tokens, j.tokens, j.logprobs])') \
  || fail "placement changed the result"
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher $teacher --json >"$work/out0.json" 2>/dev/null
cmp -s <(json_get "$work/out.json" 'JSON.stringify([j.prompt_tokens, j.tokens, j.logprobs])') <(json_get "$work/out0.json" 'JSON.stringify([j.prompt_tokens, j.tokens, j.logprobs])') \
  || fail "experts read from the cpu device differ from the host copy"
line=$(grep 'expert selections hit' "$work/err2")
got=$(sed -E 's/.*: ([0-9.]+)% of .*/\1/' <<<"$line"); pred=$(sed -E 's/.*\(plan: ([0-9.]+)%\)/\1/' <<<"$line")
[[ $got == "$pred" ]] || fail "replay hit rate $got% but the plan predicted $pred%: $line"
uniform=$(sed -E 's/.*: ([0-9.]+)% of .*/\1/' <<<"$hit_line")
awk -v a="$got" -v b="$uniform" 'BEGIN { exit !(a > b) }' || fail "profile-seeded hot set ($got%) not above uniform ($uniform%)"
grep -q 'from the profile' "$work/err2" || fail "plan line does not say it used the profile"

# migration on (the default): the hot set moves, the result does not
long=$(seq -s, 1000 1040)
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher "$long" --json >"$work/m0.json" 2>/dev/null
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher "$long" --json "${fits[@]}" --expert-slots 4 --migrate 0 \
  >/dev/null 2>"$work/err7"
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher "$long" --json "${fits[@]}" --expert-slots 4 \
  >"$work/m1.json" 2>"$work/err8"
cmp -s <(json_get "$work/m0.json" 'JSON.stringify([j.prompt_tokens, j.tokens, j.logprobs])') <(json_get "$work/m1.json" 'JSON.stringify([j.prompt_tokens, j.tokens, j.logprobs])') \
  || fail "migration changed the result"
migs=$(sed -nE 's/.*: ([0-9]+) migrations.*/\1/p' "$work/err8")
# the placement stats in --json: selections = fed tokens x MoE layers x k (the prompt in
# one step), bytes = (initial + migrations) x one expert's bytes + the hidden rows the
# dispatcher uploads for the hits (n_embd f32 each), per-layer rates whole
n_embd=$("$onegpu" gguf "$m" | sed -nE 's/^ *deepseek2\.embedding_length +uint32 +([0-9]+)$/\1/p')
node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).placement;
const [nmoe, k, ntok, d] = process.argv.slice(2).map(Number);
if (j.selections !== ntok * nmoe * k) throw new Error("selections " + j.selections);
if (j.hit_rate_per_moe_layer.length !== nmoe) throw new Error("layers");
const per = j.selections / nmoe, hits = j.hit_rate_per_moe_layer.reduce((a, r) => a + Math.round(r * per), 0);
if (hits !== j.hits) throw new Error("per-layer hits " + hits + " vs " + j.hits);
const one = (j.pcie_bytes - j.hits * d * 4) / (4 * nmoe + j.migrations);
if (!(d > 0) || !Number.isInteger(one) || one <= 0) throw new Error("pcie bytes " + j.pcie_bytes);
' "$work/m1.json" "$n_moe" "$k" "$(( $(json_get "$work/m1.json" 'j.prompt_tokens.length') + 40 ))" "$n_embd" \
  || fail "placement stats in --json: $(json_get "$work/m1.json" 'JSON.stringify(j.placement)')"
[[ -n $migs && $migs -gt 0 ]] || fail "no migrations: $(cat "$work/err8")"
still=$(sed -nE 's/.*: ([0-9.]+)% of .*/\1/p' "$work/err7"); moved=$(sed -nE 's/.*: ([0-9.]+)% of .*/\1/p' "$work/err8")
echo "hit rate over 44 steps, 4 of 16 experts per layer: planned set $still%, migrating $moved% ($migs migrations)"

# every expert resident: 100%; none: 0%
"$onegpu" run -m "$m" -p "x" --teacher 5,6 --json "${fits[@]}" --expert-slots all >/dev/null 2>"$work/err3"
grep -q ': 100.0% of' "$work/err3" || fail "--expert-slots all: $(cat "$work/err3")"
"$onegpu" run -m "$m" -p "x" --teacher 5,6 --json "${fits[@]}" --expert-slots 0 >/dev/null 2>"$work/err4"
grep -q ': 0.0% of' "$work/err4" || fail "--expert-slots 0: $(cat "$work/err4")"

# refused before loading: exit 3 with the reason; bad flags: exit 1
set +e
"$onegpu" run -m "$m" -p "x" -n 1 --vram 100M --ram 8G >/dev/null 2>"$work/err5"; rc=$?
[[ $rc == 3 ]] && grep -q 'does not fit: device short by' "$work/err5" || fail "small --vram: rc $rc, $(cat "$work/err5")"
"$onegpu" run -m "$m" -p "x" -n 1 --vram 1G --ram 1M >/dev/null 2>"$work/err6"; rc=$?
[[ $rc == 3 ]] && grep -q 'host short by' "$work/err6" || fail "small --ram: rc $rc, $(cat "$work/err6")"
"$onegpu" run -m "$m" -p "x" -n 1 --ram 8G >/dev/null 2>&1; rc=$?
[[ $rc == 1 ]] || fail "--ram without --vram: rc $rc"
"$onegpu" run -m "$m" -p "x" -n 1 --vram 1G --profile "$work/nonexistent.json" >/dev/null 2>&1; rc=$?
[[ $rc == 2 ]] || fail "missing profile: rc $rc"
ln -sf "$work/target.json" "$work/link.json"
"$onegpu" run -m "$m" -p "x" -n 1 --vram 1G --save-profile "$work/link.json" >/dev/null 2>&1; rc=$?
[[ $rc == 1 && -L $work/link.json ]] || fail "--save-profile onto a symlink: rc $rc"
"$onegpu" run -m "$m" -p "The quick brown fox" -n 20 --vram 1G --ctx 8 >/dev/null 2>"$work/err10"; rc=$?
[[ $rc == 1 ]] && grep -q 'exceed the planned --ctx 8' "$work/err10" || fail "run beyond --ctx: rc $rc $(cat "$work/err10")"
"$onegpu" run -m "$m" -p "x" -n 1 --migrate 1 >/dev/null 2>&1; rc=$?
[[ $rc == 1 ]] || fail "--migrate without --vram: rc $rc"
# run and serve share one parser: the same message for the same bad value, --ctx checked against the model
for cmd in run serve; do
  "$onegpu" $cmd -m "$m" --vram 12Q >/dev/null 2>"$work/err11"; rc=$?
  [[ $rc == 1 ]] && grep -q "onegpu $cmd: bad value '12Q' for --vram: expected a size" "$work/err11" \
    || fail "$cmd --vram 12Q: rc $rc $(cat "$work/err11")"
  "$onegpu" $cmd -m "$m" --cpu-numerics exact >/dev/null 2>"$work/err12"; rc=$?
  [[ $rc == 1 ]] && grep -q "onegpu $cmd: bad value 'exact' for --cpu-numerics: expected fork or gpu" "$work/err12" \
    || fail "$cmd --cpu-numerics exact: rc $rc $(cat "$work/err12")"
  # a --cache-ram past this machine's memory (a typo: 100T for 100G) is refused before loading
  "$onegpu" $cmd -m "$m" --cache-ram 1000T >/dev/null 2>"$work/err14"; rc=$?
  [[ $rc == 1 ]] && grep -q "onegpu $cmd: --cache-ram 1000.00 TiB is more than the memory this process may use" "$work/err14" \
    || fail "$cmd --cache-ram 1000T: rc $rc $(cat "$work/err14")"
done
"$onegpu" run -m "$m" -p "x" -n 1 --ctx 1000000 >/dev/null 2>"$work/err13"; rc=$?
[[ $rc == 1 ]] && grep -q -- '--ctx 1000000 is outside 2\.\.' "$work/err13" || fail "run --ctx beyond the model: rc $rc $(cat "$work/err13")"
set -e

# the policy benchmark's JSON: every policy, the oracle on top
"$onegpu" bench placement --json --layers 2 --experts 64 --k 4 --steps 300 >"$work/bench.json"
[[ $(json_get "$work/bench.json" 'j.policies.map(p => p.name).join(",")') == lru,decay,static,oracle ]] \
  || fail "bench placement policies: $(cat "$work/bench.json")"
[[ $(json_get "$work/bench.json" 'j.policies.every(p => p.device_share >= 0 && p.device_share <= j.policies[3].device_share)') == true ]] \
  || fail "a policy beats the oracle or is out of range"
set +e
"$onegpu" bench placement --locality 2 >/dev/null 2>&1; rc=$?
set -e
[[ $rc == 1 ]] || fail "bench placement --locality 2: rc $rc"

# a trace from the model's own router: one entry per decode step (fed tokens - 1),
# k distinct experts per MoE layer, the same counts as the profile of that run
"$onegpu" run -m "$m" --cpu-numerics gpu -p "The quick brown fox" --teacher "$long" --json --save-trace "$work/trace.json" \
  --save-profile "$work/p2.json" >/dev/null 2>&1
json_get "$work/trace.json" 'j.n_layer + " " + j.k + " " + j.sel.length' >"$work/tr.txt"
read -r tl tk tn <"$work/tr.txt"
[[ $tl == "$n_moe" && $tk == "$k" && $tn == $((40 * n_moe * k)) ]] || fail "trace shape: $(cat "$work/tr.txt")"
node -e '
const fs = require("fs");
const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8")), p = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const n = p.layers.length, E = t.n_expert, K = t.k;
for (let i = 0; i < t.sel.length; i += K)
  if (new Set(t.sel.slice(i, i + K)).size !== K) throw new Error("repeated expert in a step at " + i);
// profile = prefill + decode; the trace holds the decode part: every trace count <= profile count
const cnt = Array.from({length: n}, () => new Array(E).fill(0));
t.sel.forEach((e, i) => cnt[Math.floor(i / K) % n][e]++);
p.layers.forEach((l, j) => l.counts.forEach((c, e) => { if (cnt[j][e] > c) throw new Error("trace > profile"); }));
' "$work/trace.json" "$work/p2.json" || fail "trace does not match the run"
"$onegpu" bench placement --trace "$work/trace.json" --json >"$work/bt.json"
[[ $(json_get "$work/bt.json" 'j.policies.every(p => p.device_share <= j.policies[3].device_share)') == true ]] \
  || fail "replayed trace: a policy beats the oracle"
echo '{"n_layer": 1, "n_expert": 4, "k": 2, "tokens_per_step": 1, "sel": [0, 9]}' >"$work/bad-trace.json"
set +e
"$onegpu" bench placement --trace "$work/bad-trace.json" >/dev/null 2>"$work/err9"; rc=$?
set -e
[[ $rc == 2 ]] && grep -q 'sel\[1\]' "$work/err9" || fail "bad trace: rc $rc $(cat "$work/err9")"
echo "placement: OK (k=$k, $n_moe MoE layers, $want selections per layer; replay hit $got% = plan, uniform $uniform%)"

# --cpu-numerics on a Q8_0 model (the F32 one's fast path is already f32): gpu is
# bit-identical for every placement, fork is not (resident experts compute in the
# canonical order, cold ones and every other product in the tier's, so fork with
# every expert resident still differs from gpu; the per-product bound is
# test_backend's); teacher-forced, so the tokens are the same. Rows of 256 (eight
# Q8_0 blocks): with the tiny preset's two the two orders happen to agree.
q8=$work/tiny-q8.gguf
"$onegpu" make-model --preset tiny --type Q8_0 --n-embd 256 --n-ff-exp 256 -o "$q8" 2>/dev/null
for nm in fork gpu; do
  "$onegpu" run -m "$q8" --cpu-numerics $nm -p "The quick brown fox" --teacher "$long" --json >"$work/$nm-0.json" 2>/dev/null
  "$onegpu" run -m "$q8" --cpu-numerics $nm -p "The quick brown fox" --teacher "$long" --json "${fits[@]}" \
    --expert-slots 4 >"$work/$nm-4.json" 2>/dev/null
  "$onegpu" run -m "$q8" --cpu-numerics $nm -p "The quick brown fox" --teacher "$long" --json "${fits[@]}" \
    --expert-slots all --migrate 0 >"$work/$nm-all.json" 2>/dev/null
done
node -e '
const r = (f) => JSON.parse(require("fs").readFileSync(process.argv[1] + "/" + f + ".json", "utf8"));
const diff = (a, b) => { if (JSON.stringify(a.tokens) !== JSON.stringify(b.tokens)) throw new Error("tokens");
  return Math.max(...a.logprobs.map((x, i) => Math.abs(x.logprob - b.logprobs[i].logprob))); };
const g = [r("gpu-0"), r("gpu-4"), r("gpu-all")], f = [r("fork-0"), r("fork-4"), r("fork-all")];
if (diff(g[0], g[1]) !== 0 || diff(g[0], g[2]) !== 0) throw new Error("gpu numerics depend on placement");
const da = diff(f[2], g[0]);
if (!(da > 0 && isFinite(da))) throw new Error("fork with every expert resident equals gpu numerics: its other products are not the fork");
const d = diff(f[0], f[1]);
if (!(d > 0 && isFinite(d))) throw new Error("fork: placement made no difference (" + d + ")");
console.log("gpu numerics: bit-identical for 0, 4 and all slots; fork: placement moves log-probs by up to " + d.toFixed(3));
' "$work" || fail "--cpu-numerics"
