#!/usr/bin/env bash
# NUMA binding of `onegpu run` and `onegpu serve` on a fake two-node topology
# ($ONEGPU_SYSFS: a /sys-like tree this test builds, node 0 = the first CPU this
# process may use, node 1 = the last): the chosen node and CPU list, the default
# (the GPU's node when sysfs gives one, else no binding), the error for a node that
# does not exist or whose CPUs are not ours (exit 1), the threads of a running
# server really pinned (/proc), and on the real /sys the memory line: the routed
# experts' ranges bound (3 per MoE layer, counted from the file) or the refusal.
# usage: numa.sh ONEGPU WORKDIR
set -euo pipefail
onegpu=$1 work=$2
. "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
model=$work/tiny.gguf
"$onegpu" make-model --preset tiny -o "$model" 2>"$work/make.log" || {
  grep -q 'tokenizer' "$work/make.log" && skip_dep "no tokenizer files for the tiny preset (scripts/deps.sh)"
  cat "$work/make.log"; fail "make-model"
}
mine=$(sed -nE 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
first=${mine%%[-,]*}; last=${mine##*[-,]}
fake=$work/sys
mkdir -p "$fake/devices/system/node/node0" "$fake/devices/system/node/node1" "$fake/devices/system/node/node2"
echo 0-2 > "$fake/devices/system/node/online"
echo "$first" > "$fake/devices/system/node/node0/cpulist"
echo "$last" > "$fake/devices/system/node/node1/cpulist"
echo 4000-4003 > "$fake/devices/system/node/node2/cpulist"   # CPUs this process may not use
gpu=$fake/bus/pci/devices/0000:17:00.0
runit() { ONEGPU_SYSFS=$fake "$onegpu" run -m "$model" -p "The quick brown fox" -n 2 --temp 0 "$@"; }

echo "== --numa-node 1: the node's CPU list, one line"
runit --numa-node 1 --threads 2 >/dev/null 2>"$work/r1.log" || fail "run --numa-node 1: $(cat "$work/r1.log")"
[[ $(grep -c 'NUMA: ' "$work/r1.log") == 1 ]] || fail "not one NUMA line: $(cat "$work/r1.log")"
grep -q "^onegpu run: NUMA: node 1 (--numa-node), 2 threads pinned to CPUs $last, memory " "$work/r1.log" ||
  fail "binding line: $(cat "$work/r1.log")"
# where the kernel has no node 1 (a one-node machine), its policy is refused: said, not fatal
if [[ ! -d /sys/devices/system/node/node1 ]]; then
  grep -qE 'memory not bound \((set_mempolicy|mbind): .+\)$' "$work/r1.log" || fail "refused policy: $(cat "$work/r1.log")"
fi
runit --numa-node 0 >/dev/null 2>"$work/r0.log" || fail "run --numa-node 0"
grep -q "NUMA: node 0 (--numa-node), 1 thread pinned to CPUs $first, memory " "$work/r0.log" ||
  fail "node 0 (threads default to its CPUs): $(cat "$work/r0.log")"

echo "== default: the GPU's node, else none"
runit >/dev/null 2>"$work/d0.log"
grep -q "NUMA: no binding (no GPU with a known node; --numa-node N binds): [0-9]* threads on CPUs $mine as inherited" \
  "$work/d0.log" || fail "no GPU: $(cat "$work/d0.log")"
mkdir -p "$gpu"; echo 0x10de > "$gpu/vendor"; echo 0x030200 > "$gpu/class"; echo -1 > "$gpu/numa_node"
runit >/dev/null 2>"$work/d1.log"
grep -q 'NUMA: no binding' "$work/d1.log" || fail "GPU with numa_node -1: $(cat "$work/d1.log")"
echo 1 > "$gpu/numa_node"
runit >/dev/null 2>"$work/d2.log"
grep -q "NUMA: node 1 (the GPU's node), 1 thread pinned to CPUs $last" "$work/d2.log" || fail "GPU on node 1: $(cat "$work/d2.log")"
echo "ok: --numa-node, the GPU's node, none"

echo "== bad nodes: exit 1 with the reason, before loading"
for cmd in run serve; do
  args=(-p x); [[ $cmd == serve ]] && args=(--port 0)
  rc=0; ONEGPU_SYSFS=$fake "$onegpu" $cmd -m "$model" "${args[@]}" --numa-node 5 >/dev/null 2>"$work/bad.log" || rc=$?
  [[ $rc == 1 ]] && grep -q "^onegpu $cmd: --numa-node: NUMA node 5 does not exist (this machine's nodes: 0-2)$" "$work/bad.log" ||
    fail "$cmd --numa-node 5: rc $rc $(cat "$work/bad.log")"
done
rc=0; runit --numa-node 2 >/dev/null 2>"$work/bad2.log" || rc=$?
[[ $rc == 1 ]] && grep -q "NUMA node 2 (--numa-node): none of its CPUs 4000-4003 is one this process may use ($mine)" \
  "$work/bad2.log" || fail "node outside our CPUs: rc $rc $(cat "$work/bad2.log")"
rc=0; runit --numa-node -1 >/dev/null 2>&1 || rc=$?; [[ $rc == 1 ]] || fail "--numa-node -1: rc $rc"
echo "ok: bad nodes"

echo "== serve: the line, and its threads pinned (/proc)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
ONEGPU_SYSFS=$fake start_server "$work/serve.log" --numa-node 1 --threads 2
grep -q "^onegpu serve: NUMA: node 1 (--numa-node), 2 threads pinned to CPUs $last, memory " "$work/serve.log" ||
  fail "serve line: $(cat "$work/serve.log")"
# main (pinned to the node), the pool's worker and the engine thread: at least 3 on $last alone
# (a thread may end between the glob and the read: cat skips it, 2>/dev/null)
allowed() { cat /proc/"$spid"/task/*/status 2>/dev/null | grep '^Cpus_allowed_list:' || true; }
pinned=$(allowed | awk -v c="$last" '$2 == c' | wc -l)
[[ $pinned -ge 3 ]] || fail "$pinned threads of the server allowed only CPU $last: $(allowed)"
kill -TERM "$spid"; wait "$spid"
echo "ok: serve ($pinned threads on CPU $last)"

echo "== the real /sys, node 0: the routed experts' ranges bound, or the refusal said"
moe=$("$onegpu" gguf "$model" | grep -c 'ffn_gate_exps')
[[ $moe -ge 1 ]] || fail "no routed experts in the tiny model"
"$onegpu" run -m "$model" -p x -n 1 --numa-node 0 >/dev/null 2>"$work/real.log" || fail "real /sys: $(cat "$work/real.log")"
grep -qE "NUMA: node 0 \(--numa-node\), [0-9]+ threads? pinned to CPUs [0-9,-]+, (memory preferred on node 0 \(this thread's policy, and mbind of $((3 * moe)) routed-expert ranges, |memory not bound \((set_mempolicy|mbind): .+\)$)" \
  "$work/real.log" || fail "real /sys line ($moe MoE layers): $(cat "$work/real.log")"
echo "ok: $(grep -o 'memory.*' "$work/real.log")"
echo "numa.sh: all passed"
