#!/usr/bin/env bash
# run.sh: resumable, verified downloads from a local HTTP server (tests/js/range_server.mjs),
# split files, the NUMA binding ladder with a fake numactl that fails, --dry-run on this
# machine, and a machine too small for the plan.
# usage: run_sh.sh ONEGPU WORKDIR
set -euo pipefail
onegpu=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") work=$2
. "$(dirname "$0")/lib.sh"
command -v node >/dev/null || skip_dep "node is needed for the local HTTP server"
repo=$(cd "$here/.." && pwd)
rm -rf "$work"; mkdir -p "$work/srv" "$work/bin"
export ONEGPU_BIN=$onegpu
runsh() { (cd "$work" && "$repo/run.sh" "$@"); }

# the file to download: a real GGUF (so the planner can read it afterwards)
"$onegpu" make-model --tokenizer none --vocab 512 --n-layer 2 --n-embd 256 --n-head 4 --n-expert 8 \
  --n-expert-used 2 --n-ff-exp 512 -o "$work/srv/m.gguf" 2>/dev/null
size=$(stat -c %s "$work/srv/m.gguf")
sum=$(sha256sum "$work/srv/m.gguf" | cut -d' ' -f1)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
start_http() { # start_http CUT: sets url_base
  : > "$work/http.log"
  rm -f "$work/port"
  node "$here/js/range_server.mjs" "$work/srv" "$work/http.log" "$1" > "$work/port" &
  pids+=($!)
  for _ in $(seq 1 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  url_base=http://127.0.0.1:$(cat "$work/port")
}

echo "== a download cut halfway resumes and verifies"
start_http $((size / 2))
export ONEGPU_MODELS_DIR=$work/models
rc=0; runsh --model "$url_base/m.gguf" --sha256 "$sum" --vram 1M > "$work/out1" 2>&1 || rc=$?
if [[ -f $work/models/m.gguf ]]; then
  # curl resumed by itself within the run (its --retry with -C -)
  grep -q "bytes=[1-9]" "$work/http.log" || fail "the file arrived without a resumed request: $(cat "$work/http.log")"
else
  grep -q 'run the same command again to resume\|run again to resume' "$work/out1" || fail "no resume hint: $(cat "$work/out1")"
  [[ -f $work/models/m.gguf.part ]] || fail "the partial file was not kept"
  part=$(stat -c %s "$work/models/m.gguf.part")
  (( part > 0 && part < size )) || fail "partial size $part"
  rc=0; runsh --model "$url_base/m.gguf" --sha256 "$sum" --vram 1M > "$work/out1b" 2>&1 || rc=$?
  grep -q "resuming .*m.gguf.part at byte $part" "$work/out1b" || fail "no resume line: $(cat "$work/out1b")"
  grep -q "bytes=$part-" "$work/http.log" || fail "no Range request from byte $part: $(cat "$work/http.log")"
  cat "$work/out1b" >> "$work/out1"
fi
cmp -s "$work/models/m.gguf" "$work/srv/m.gguf" || fail "the downloaded file differs"
grep -q "SHA-256 verified: $sum" "$work/out1" || fail "not verified: $(cat "$work/out1")"
# then the plan: --vram 1M is too small -> the planner's message and its exit status
[[ $rc == 3 ]] || fail "a machine too small must stop with the planner's exit 3 (got $rc)"
grep -q 'does not fit: device short by' "$work/out1" || fail "no planner message"
grep -q 'the planner refused this machine (exit 3)' "$work/out1" || fail "run.sh did not say the planner refused"
echo "ok: resumed, verified, then refused by the planner (exit 3)"

echo "== a wrong SHA-256 is refused and the file kept aside"
rm -rf "$work/models"
bad=$(printf '0%.0s' $(seq 1 64))
rc=0; runsh --model "$url_base/m.gguf" --sha256 "$bad" --vram 1M > "$work/out2" 2>&1 || rc=$?
[[ $rc == 1 ]] || fail "wrong sha: exit $rc"
grep -q "SHA-256 mismatch .*expected $bad, got $sum; the file is kept aside as .*m.gguf.sha256-mismatch" "$work/out2" ||
  fail "mismatch message: $(cat "$work/out2")"
[[ -f $work/models/m.gguf.sha256-mismatch && ! -f $work/models/m.gguf ]] || fail "the bad file must be kept aside, not used"
echo "ok: wrong SHA-256"

echo "== a complete .part (a run stopped before the rename) is verified, not fetched again"
rm -rf "$work/models"; mkdir -p "$work/models"
cp "$work/srv/m.gguf" "$work/models/m.gguf.part"
: > "$work/http.log"
up=$(tr 'a-f' 'A-F' <<<"$sum")   # hashes are taken in any case
rc=0; runsh --model "$url_base/m.gguf" --sha256 "$up" --vram 1M > "$work/out2b" 2>&1 || rc=$?
grep -q 'm.gguf.part is complete' "$work/out2b" && ! grep -q '^GET' "$work/http.log" || fail "complete .part: $(cat "$work/out2b")"
[[ $rc == 3 && -f $work/models/m.gguf ]] || fail "complete .part: rc $rc"
echo "ok: complete .part"

echo "== bad --sha256 is refused before any download"
: > "$work/http.log"
rc=0; runsh --model "$url_base/m2.gguf" --sha256 abc --vram 1M > "$work/out2c" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "'abc' is not 64 hex digits" "$work/out2c" && [[ ! -s $work/http.log ]] || fail "bad sha: $(cat "$work/out2c")"
echo "ok: bad --sha256"

echo "== the server's file changed between two runs: start over, never splice"
cp "$work/srv/m.gguf" "$work/srv/c.gguf"
kill "${pids[-1]}"; start_http $((size / 2))
rc=0; runsh --model "$url_base/c.gguf" --vram 1M > "$work/out2d" 2>&1 || rc=$?
[[ -f $work/models/c.gguf.part ]] || fail "no partial file: $(cat "$work/out2d")"
"$onegpu" make-model --tokenizer none --vocab 512 --n-layer 2 --n-embd 256 --n-head 4 --n-expert 8 \
  --n-expert-used 2 --n-ff-exp 512 --seed 99 -o "$work/srv/c.gguf" 2>/dev/null
touch -d '+1 hour' "$work/srv/c.gguf"
rc=0; runsh --model "$url_base/c.gguf" --vram 1M > "$work/out2e" 2>&1 || rc=$?
grep -q 'changed since .*c.gguf.part was started.*starting over' "$work/out2e" || fail "change not seen: $(cat "$work/out2e")"
cmp -s "$work/models/c.gguf" "$work/srv/c.gguf" || fail "the result is not the new file"
echo "ok: changed file"

echo "== a URL with a query string and a fresh models dir under --dry-run"
rm -rf "$work/models"
runsh --dry-run --model "$url_base/m.gguf?token=x" > "$work/out2f" 2>&1 || fail "dry run with a URL: $(cat "$work/out2f")"
grep -q "^+ curl .*m.gguf.part .*m.gguf.*token=x" "$work/out2f" && [[ ! -e $work/models ]] || fail "dry run: $(cat "$work/out2f")"
echo "ok: dry run with a URL"

echo "== split files: every part is fetched, and the plan reads the whole model"
# the same model as m.gguf, split by make-model (gguf-split names)
"$onegpu" make-model --tokenizer none --vocab 512 --n-layer 2 --n-embd 256 --n-head 4 --n-expert 8 \
  --n-expert-used 2 --n-ff-exp 512 --split-max-size 1M -o "$work/srv/s.gguf" 2>/dev/null
first=$(cd "$work/srv" && ls s-00001-of-*.gguf)
n_parts=$((10#$(basename "$first" .gguf | sed 's/.*-of-//')))
[[ $n_parts -ge 2 ]] || fail "make-model --split-max-size 1M wrote $first"
: > "$work/http.log"
rc=0; runsh --model "$url_base/$first?sig=1" --vram 1M > "$work/out3" 2>&1 || rc=$?
for ((k = 1; k <= n_parts; k++)); do
  part=$(printf 's-%05d-of-%05d.gguf' "$k" "$n_parts")
  [[ $k -eq 1 ]] || grep -q "^GET /$part?sig=1" "$work/http.log" || fail "the query string was not kept: $(cat "$work/http.log")"
  cmp -s "$work/models/$part" "$work/srv/$part" || fail "part $part: $(cat "$work/out3")"
done
[[ $rc == 3 ]] || fail "--vram 1M must be refused by the planner (exit 3), got $rc: $(cat "$work/out3")"
# the first part plans the model as the unsplit file does (every line but the file's name)
runsh --dry-run --model "$work/models/$first" --vram 1G > "$work/out3b" 2>&1 || fail "split dry run: $(cat "$work/out3b")"
runsh --dry-run --model "$work/srv/m.gguf" --vram 1G > "$work/out3c" 2>&1 || fail "unsplit dry run: $(cat "$work/out3c")"
diff <(grep -E '^(device|host|resident|expert slots|bytes per role):' "$work/out3b") \
     <(grep -E '^(device|host|resident|expert slots|bytes per role):' "$work/out3c") >&2 ||
  fail "the split model plans differently from the unsplit one"
grep -q '^device: ' "$work/out3b" || fail "no plan in the split dry run: $(cat "$work/out3b")"
# a local split model: one hash per part, each checked
sums=$(cd "$work/models" && for ((k = 1; k <= n_parts; k++)); do sha256sum "$(printf 's-%05d-of-%05d.gguf' "$k" "$n_parts")" | cut -d' ' -f1; done | paste -sd,)
runsh --dry-run --model "$work/models/$first" --sha256 "$sums" --vram 1G > "$work/out3e" 2>&1 || fail "split hashes: $(cat "$work/out3e")"
wrong=${sums%,*},$(printf '0%.0s' $(seq 64))
rc=0; runsh --dry-run --model "$work/models/$first" --sha256 "$wrong" --vram 1G > "$work/out3f" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "$(printf 's-%05d-of-%05d.gguf' "$n_parts" "$n_parts"): SHA-256 is " "$work/out3f" ||
  fail "a wrong hash of the last part: $rc $(cat "$work/out3f")"
# a part missing: the planner names it
mv "$work/models/$(printf 's-%05d-of-%05d.gguf' 2 "$n_parts")" "$work/part2"
rc=0; runsh --dry-run --model "$work/models/$first" --vram 1G > "$work/out3d" 2>&1 || rc=$?
grep -q "$(printf 's-%05d-of-%05d.gguf' 2 "$n_parts"): cannot open" "$work/out3d" && [[ $rc == 2 ]] ||
  fail "a missing part: exit $rc, $(cat "$work/out3d")"
mv "$work/part2" "$work/models/$(printf 's-%05d-of-%05d.gguf' 2 "$n_parts")"
echo "ok: split files"

echo "== the NUMA ladder falls to the next rung when one is refused"
cat > "$work/bin/numactl" <<'FAKE'
#!/usr/bin/env bash
# fake numactl: memory policy refused as a container's seccomp does; CPU binding per $FAKE_CPUBIND
for a in "$@"; do
  [[ $a == --preferred=* ]] && { echo "set_mempolicy: Operation not permitted" >&2; exit 1; }
done
[[ ${FAKE_CPUBIND:-ok} == ok ]] || { echo "sched_setaffinity: Operation not permitted" >&2; exit 1; }
while [[ $1 == --* ]]; do shift; done
exec "$@"
FAKE
chmod +x "$work/bin/numactl"
PATH=$work/bin:$PATH runsh --dry-run --model "$work/srv/m.gguf" > "$work/out4" 2>&1 || fail "dry run: $(cat "$work/out4")"
grep -q 'tried: numactl --preferred=0 --cpunodebind=0 -> failed: set_mempolicy: Operation not permitted' "$work/out4" ||
  fail "the refused rung is not reported: $(cat "$work/out4")"
grep -q 'NUMA binding: CPUs of node 0 only' "$work/out4" || fail "did not fall to --cpunodebind: $(cat "$work/out4")"
grep -q '^+ numactl --cpunodebind=0 .*onegpu serve' "$work/out4" || fail "serve command: $(cat "$work/out4")"
FAKE_CPUBIND=no PATH=$work/bin:$PATH runsh --dry-run --model "$work/srv/m.gguf" > "$work/out5" 2>&1 || fail "dry run 2"
grep -q 'tried: numactl --cpunodebind=0 -> failed: sched_setaffinity' "$work/out5" || fail "second rung: $(cat "$work/out5")"
grep -q 'NUMA binding: taskset to CPUs' "$work/out5" || fail "did not fall to taskset: $(cat "$work/out5")"
printf '#!/bin/sh\necho "taskset: failed to set pid 0 affinity: Operation not permitted" >&2\nexit 1\n' > "$work/bin/taskset"
chmod +x "$work/bin/taskset"
FAKE_CPUBIND=no PATH=$work/bin:$PATH runsh --dry-run --model "$work/srv/m.gguf" > "$work/out6" 2>&1 || fail "dry run 3"
grep -q 'NUMA binding: none' "$work/out6" || fail "did not fall to none: $(cat "$work/out6")"
grep -q '^+ .*onegpu serve -m' "$work/out6" && ! grep -q '^+ numactl\|^+ taskset' "$work/out6" || fail "none: $(cat "$work/out6")"
echo "ok: ladder"

echo "== a model with less than 4096 tokens of context plans at its own; serve flags after -- reach the plan"
"$onegpu" make-model --tokenizer none --vocab 512 --n-layer 2 --n-embd 256 --n-head 4 --n-expert 8 \
  --n-expert-used 2 --n-ff-exp 512 --ctx 2048 -o "$work/short.gguf" 2>/dev/null
runsh --dry-run --model "$work/short.gguf" --vram 1G > "$work/out8" 2>&1 || fail "a 2048-token model refused: $(cat "$work/out8")"
! grep -q 'above the model' "$work/out8" || fail "planned above the model's context: $(cat "$work/out8")"
rc=0; runsh --dry-run --model "$work/short.gguf" --vram 1G -- --ctx 4096 > "$work/out9" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q 'ctx 4096 is above the model' "$work/out9" ||
  fail "--ctx after -- did not reach the planner as a usage error (rc $rc): $(cat "$work/out9")"
echo "ok: the plan follows serve's --ctx default and flags"

echo "== --dry-run on this machine: facts and commands, nothing changed"
rm -rf "$work/models"
runsh --demo --dry-run > "$work/out7" 2>&1 || fail "demo dry run: $(cat "$work/out7")"
cores=$(lscpu -p=CORE,SOCKET,NODE | awk -F, '!/^#/ && ($3 == 0 || $3 == "") {print $2"-"$1}' | sort -u | wc -l) # node 0's
grep -qE "^run.sh: facts: GPU (none|.*NUMA node).*; [0-9]+ NUMA node\(s\); node 0: CPUs [0-9,-]+, $cores physical cores; RAM [0-9.]+ GiB" "$work/out7" ||
  fail "facts line: $(cat "$work/out7")"
grep -q "^+ .*onegpu make-model --arch deepseek41 --preset demo -o $work/models/demo-v41.gguf" "$work/out7" ||
  fail "make-model not shown"
grep -q "^+ .*onegpu serve -m $work/models/demo-v41.gguf --port 8090 --threads $cores --numa-node 0 --vram 540M --reserve 64M --migrate 2" "$work/out7" ||
  fail "serve command: $(cat "$work/out7")"
[[ ! -e $work/models ]] || fail "--dry-run created $work/models"
echo "ok: dry run"

echo "== the real deployment's plan: V4.1 Flash's 7 split files (sparse) on 96G / 280G, 4 x 64K"
mkdir -p "$work/v41"
"$onegpu" make-model --arch deepseek41 --preset v41-flash --sparse --tokenizer none -o "$work/v41/v41.gguf" \
  > "$work/v41.log" 2>&1 || fail "make-model v41-flash: $(cat "$work/v41.log")"
v41=$work/v41/v41-00001-of-00007.gguf
runsh --dry-run --model "$v41" --vram 96G --ram 280G -- --ctx 65536 > "$work/out13" 2>&1 ||
  fail "v41-flash dry run: $(cat "$work/out13")"
grep -q "^+ .*onegpu plan -m $v41 --vram 96G --ram 280G --parallel 4 --ctx 65536" "$work/out13" ||
  fail "v41-flash: the plan command: $(cat "$work/out13")"
grep -q '^host: .*host-only tensors 60.29 GiB (never on the device: Engram tables and token embeddings)' "$work/out13" ||
  fail "v41-flash: the Engram tables are not planned in RAM: $(cat "$work/out13")"
grep -q '^kv: .*6400 bytes per token' "$work/out13" || fail "v41-flash: no CSA2 KV term: $(cat "$work/out13")"
resident=$(sed -n 's/^resident: \([0-9]*\) of 15360 experts.*/\1/p' "$work/out13")
[[ -n $resident ]] && (( resident >= 5825 )) || fail "v41-flash: resident experts '$resident' (the published layout holds 5,825)"
grep -q "^+ .*onegpu serve -m $v41 .*--vram 96G --ram 280G --ctx 65536" "$work/out13" || fail "v41-flash: serve command: $(cat "$work/out13")"
rc=0; runsh --dry-run --model "$v41" --vram 96G --ram 240G -- --ctx 65536 > "$work/out14" 2>&1 || rc=$?
[[ $rc == 3 ]] && grep -q 'does not fit: host short by 3.84 GiB' "$work/out14" && ! grep -q 'device short' "$work/out14" ||
  fail "v41-flash on 240G: $rc $(cat "$work/out14")"
echo "ok: v41-flash dry run ($resident resident experts)"
# no GPU and no --vram: nothing is placed, but the weights must still fit in RAM (a GPU
# machine plans its GPU instead: the cases above)
if ! command -v nvidia-smi >/dev/null 2>&1; then
  rc=0; runsh --dry-run --model "$v41" --ram 240G > "$work/out15" 2>&1 || rc=$?
  [[ $rc == 3 ]] && grep -q "does not fit: the model's weights are 246.5[0-9] GiB but host RAM gives 240.00 GiB (--ram 240G)" "$work/out15" &&
    ! grep -q '^+ .*onegpu serve' "$work/out15" || fail "v41-flash with no device on 240G: $rc $(cat "$work/out15")"
  runsh --dry-run --model "$v41" --ram 300G > "$work/out16" 2>&1 || fail "v41-flash with no device on 300G: $(cat "$work/out16")"
  grep -q "^+ .*onegpu serve -m $v41 " "$work/out16" || fail "v41-flash on 300G: no serve command: $(cat "$work/out16")"
  echo "ok: no device: the host RAM check refuses 240G and passes 300G"
fi

echo "== bad usage"
rc=0; runsh --model > /dev/null 2>&1 || rc=$?; [[ $rc == 1 ]] || fail "--model without a value: $rc"
rc=0; runsh --port 99999 > /dev/null 2>&1 || rc=$?; [[ $rc == 1 ]] || fail "--port 99999: $rc"
(cd "$work/srv" && "$repo/run.sh" --dry-run --model m.gguf > "$work/out8b" 2>&1) || fail "relative --model: $(cat "$work/out8b")"
grep -q "serve -m $work/srv/m.gguf" "$work/out8b" || fail "relative --model not taken from the caller's directory"
rc=0; runsh --port 08090 --dry-run --model "$work/srv/m.gguf" > "$work/out8c" 2>&1 || rc=$?
[[ $rc == 0 ]] && grep -q -- '--port 8090' "$work/out8c" || fail "--port 08090: $(cat "$work/out8c")"
rc=0; runsh --model --dry-run > /dev/null 2>&1 || rc=$?; [[ $rc == 1 ]] || fail "--model --dry-run: $rc"
rc=0; runsh --model "$work/nope.gguf" > "$work/out8" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q 'no such model file' "$work/out8" || fail "missing file: $rc $(cat "$work/out8")"
rc=0; ONEGPU_DEFAULT_MODEL_URL= runsh > "$work/out9" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q 'DeepSeek-V4.1-Flash-Q2_K.gguf, 264 GB' "$work/out9" || fail "no model: $rc $(cat "$work/out9")"
head -c 3000 /dev/urandom > "$work/srv/bad.gguf"
rc=0; runsh --model "$work/srv/bad.gguf" --vram 1G > "$work/out10" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q 'could not plan' "$work/out10" && ! grep -q 'refused this machine' "$work/out10" ||
  fail "a bad file is not a machine refusal: $rc $(cat "$work/out10")"
rc=0; runsh --model "$work/srv/m.gguf" --port "$(cat "$work/port")" > "$work/out11" 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "port $(cat "$work/port") is taken" "$work/out11" || fail "port taken: $rc $(cat "$work/out11")"
grep -q ' serve -m ' "$work/out11" && fail "the serve command was shown although the port is taken: $(cat "$work/out11")"
# a dry run reports the taken port and still shows the plan and the command
rc=0; runsh --dry-run --model "$work/srv/m.gguf" --port "$(cat "$work/port")" > "$work/out12" 2>&1 || rc=$?
[[ $rc == 0 ]] && grep -q "port $(cat "$work/port") is taken" "$work/out12" && grep -q ' serve -m ' "$work/out12" ||
  fail "dry run, port taken: $rc $(cat "$work/out12")"
echo "run_sh.sh: all passed"
