#!/usr/bin/env bash
# What the onegpu command tells its user, on a tiny make-model file:
#  - `onegpu --help` lists --version, and --version answers;
#  - --expert-slots above a layer's experts is capped with a line saying so
#    (plan, and serve / run through the same preparation), and not otherwise;
#  - SIGTERM (SIGINT takes the same path) while make-model writes removes its
#    temporary file and exits 128 + 15, leaving no output file;
#  - serve's ready line gives the KV pool as parallel x ceil(ctx / 64) blocks
#    and the tiers with the sizes the flags took.
# usage: cli.sh ONEGPU WORKDIR
set -euo pipefail
onegpu=$1 work=$2
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
tiny_model "$onegpu" "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

echo "== --help and --version"
"$onegpu" --help | grep -qE '^  --version +the version' || fail "onegpu --help does not list --version: $("$onegpu" --help)"
"$onegpu" --version | grep -qE '^onegpu [0-9]+\.[0-9]+\.[0-9]+$' || fail "onegpu --version: $("$onegpu" --version)"

echo "== --expert-slots above the experts: capped, and said"
n_expert=$("$onegpu" gguf "$model" | awk '$1 == "deepseek2.expert_count" { print $3 }')
[[ -n $n_expert ]] || fail "no deepseek2.expert_count in onegpu gguf's output"
"$onegpu" plan -m "$model" --vram 1G --expert-slots 999 >"$work/plan.out" 2>"$work/plan.err" || fail "plan: $(cat "$work/plan.err")"
grep -qx "onegpu plan: --expert-slots 999: capped to $n_expert because a MoE layer has $n_expert routed experts (slots beyond them hold nothing; --expert-slots all asks for every one)" "$work/plan.err" ||
  fail "no cap line: $(cat "$work/plan.err")"
"$onegpu" plan -m "$model" --vram 1G --expert-slots "$n_expert" >/dev/null 2>"$work/plan.err" || fail "plan at the cap"
if grep -q capped "$work/plan.err"; then fail "--expert-slots $n_expert is no cap: $(cat "$work/plan.err")"; fi
"$onegpu" run -m "$model" -p hi -n 1 --vram 1G --expert-slots 999 >/dev/null 2>"$work/run.err" || fail "run: $(cat "$work/run.err")"
grep -q "^onegpu run: --expert-slots 999: capped to $n_expert because" "$work/run.err" || fail "run's cap line: $(cat "$work/run.err")"

echo "== SIGTERM while make-model writes"
rm -rf "$work/mm" && mkdir -p "$work/mm"
"$onegpu" make-model --preset demo -o "$work/mm/demo.gguf" 2>"$work/mm.err" &
mpid=$!
pids+=("$mpid")
for _ in $(seq 1 400); do # the writer's temporary file beside the output (a dot file)
  ls -A "$work/mm" | grep -q 'onegpu-write' && break
  kill -0 "$mpid" 2>/dev/null || break
  sleep 0.025
done
ls -A "$work/mm" | grep -q 'onegpu-write' || fail "make-model wrote no temporary file: $(ls -A "$work/mm"; cat "$work/mm.err")"
kill -TERM "$mpid"
rc=0
wait "$mpid" || rc=$?
[[ $rc == 143 ]] || fail "make-model after SIGTERM exited $rc, not 143: $(cat "$work/mm.err")"
[[ -z $(ls -A "$work/mm") ]] || fail "make-model left files after SIGTERM: $(ls -A "$work/mm")"
grep -q '^onegpu make-model: SIGTERM: removed the unfinished .*/\.onegpu-write-' "$work/mm.err" ||
  fail "no line naming the removed file: $(cat "$work/mm.err")"

echo "== serve's ready line: the pool and the tiers with their sizes"
start_server "$work/serve.log" --ctx 200 --parallel 3 --cache-ram 8M --cache-dir "$work/kvdir" --cache-dir-size 1G
grep -q "ready: .*, KV pool 12 blocks of 64 positions ([0-9.]* [KMG]iB), --cache-ram 8.00 MiB, --cache-dir $work/kvdir (at most 1.00 GiB)," "$work/serve.log" ||
  fail "ready line: $(grep ready "$work/serve.log")"
echo "ok"
