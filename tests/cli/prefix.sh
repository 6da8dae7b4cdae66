#!/usr/bin/env bash
# The prefix cache through `onegpu serve` on a tiny model: the same long prompt
# twice gives the same output (text and log-probs, bitwise as JSON) and
# cached_tokens > 0 the second time, on /v1/completions, /v1/chat/completions
# and /v1/messages (cache_read_input_tokens); the access log's cached= and
# /metrics' prefix counters agree; --prefix-cache off gives the same output
# with 0 cached. deepseek2 (no ARCH; ~1,200-token prompts): whole 64-token
# blocks, the last prompt token prefilled. ARCH deepseek4 / deepseek41 (whole
# states; ~700-token prompts): all but the last prompt token, an agent's next
# turn (the history resent plus a new message) reads the first turn's prompt
# from the cache, and n: 2 on a cached prompt gives two copies of the n: 1 answer.
# deepseek2 also: the pool's metrics add up, --cache-dir keeps the blocks over a
# restart (serve and run), and another model's server skips them.
# usage: prefix.sh ONEGPU WORKDIR [ARCH]
set -euo pipefail
onegpu=$1 work=$2 arch=${3:-}
. "$(dirname "$0")/lib.sh"
mkdir -p "$work"
if [[ -z $arch ]]; then
  tiny_model "$onegpu" "$work"
  items=200 ctx=2048 rule=blocks
else
  tiny_model "$onegpu" "$work" "$arch"
  items=120 ctx=4096 rule=state # room for 6 states of ~730 positions in 2 x 4096
fi
command -v node >/dev/null || skip_dep "Node.js is needed to read the JSON answers (scripts/deps.sh)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
text=$(for i in $(seq 1 $items); do printf 'item %d is blue; ' "$i"; done)
cbody="{\"prompt\":\"$text\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":2}"
hbody="{\"messages\":[{\"role\":\"user\",\"content\":\"$text\"}],\"max_tokens\":6,\"temperature\":0,\"logprobs\":true}"
mbody="{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Anthropic: $text\"}],\"max_tokens\":6,\"temperature\":0}"
post() { printf '%s' "$3" | curl -s "http://127.0.0.1:$port$1" -H 'Content-Type: application/json' --data-binary @- >"$2"; }
# check A B KIND: same output; A's cached 0, B's by the rule (0 with KIND off)
check() {
  node -e '
const fs = require("fs"), [a, b, kind, rule] = process.argv.slice(1);
const A = JSON.parse(fs.readFileSync(a, "utf8")), B = JSON.parse(fs.readFileSync(b, "utf8"));
const msg = A.type === "message";
const cached = j => msg ? j.usage.cache_read_input_tokens : j.usage.prompt_tokens_details.cached_tokens;
const total = j => msg ? j.usage.input_tokens + j.usage.cache_read_input_tokens : j.usage.prompt_tokens; // Anthropic: input_tokens are the uncached ones
const out = j => JSON.stringify(msg ? j.content : j.choices.map(c => [c.text, c.message, c.logprobs]));
if (total(A) < 600) { console.error("prompt too short:", total(A)); process.exit(1); }
if (cached(A) !== 0) { console.error(a, "cold request reports", cached(A), "cached"); process.exit(1); }
const want = kind === "off" ? 0 : rule === "state" ? total(A) - 1 : Math.floor((total(A) - 1) / 64) * 64;
if (cached(B) !== want) { console.error(b, "cached", cached(B), "expected", want, "of", total(B)); process.exit(1); }
if (out(A) !== out(B)) { console.error("outputs differ:\n", out(A), "\n", out(B)); process.exit(1); }
console.log("ok:", b, "cached", cached(B), "of", total(B));' "$1" "$2" "$3" "$rule"
}
# run_twice: onegpu run --cache-dir twice on one ~360-token prompt; the same JSON (tokens,
# log-probs) both times and nothing read the first time; the second run's stderr in run2.err
run_twice() {
  local rp k
  rp=$(for i in $(seq 1 60); do printf 'item %d is blue; ' "$i"; done)
  rm -rf "$work/rundir"
  for k in 1 2; do
    "$onegpu" run -m "$model" -p "$rp" -n 4 --temp 0 --json --cache-dir "$work/rundir" >"$work/run$k.json" 2>"$work/run$k.err" ||
      { cat "$work/run$k.err"; fail "onegpu run --cache-dir ($k)"; }
  done
  cmp -s "$work/run1.json" "$work/run2.json" || fail "onegpu run --cache-dir: the second run's JSON differs"
  grep -q 'prompt tokens read from --cache-dir' "$work/run1.err" && fail "onegpu run --cache-dir: the first run read the cache"
  return 0
}
start_server "$work/serve.log" --ctx $ctx --parallel 2 --batch-tokens 256
grep -q 'prefix cache on' "$work/serve.log" || fail "the ready line does not say 'prefix cache on': $(grep ready "$work/serve.log")"
post /v1/completions "$work/c1.json" "$cbody"
post /v1/completions "$work/c2.json" "$cbody"
check "$work/c1.json" "$work/c2.json" on || fail "completions"
post /v1/chat/completions "$work/h1.json" "$hbody"
post /v1/chat/completions "$work/h2.json" "$hbody"
check "$work/h1.json" "$work/h2.json" on || fail "chat completions"
post /v1/messages "$work/m1.json" "$mbody"
post /v1/messages "$work/m2.json" "$mbody"
check "$work/m1.json" "$work/m2.json" on || fail "messages"
files=("$work/c2.json" "$work/h2.json" "$work/m2.json") want_hits=3
if [[ -n $arch ]]; then
  # the next turn: the first turn's messages, its answer, a new question
  answer=$(json_get "$work/h1.json" 'JSON.stringify(j.choices[0].message.content)')
  tbody="{\"messages\":[{\"role\":\"user\",\"content\":\"$text\"},{\"role\":\"assistant\",\"content\":$answer},{\"role\":\"user\",\"content\":\"and item 121?\"}],\"max_tokens\":4,\"temperature\":0}"
  post /v1/chat/completions "$work/t2.json" "$tbody"
  t_cached=$(json_get "$work/t2.json" 'j.usage.prompt_tokens_details.cached_tokens')
  first=$(json_get "$work/h1.json" 'j.usage.prompt_tokens')
  [[ $t_cached -ge $((first - 1)) ]] || fail "the next turn read $t_cached tokens from the cache, the first turn's prompt has $first"
  echo "ok: the next turn read $t_cached of its $(json_get "$work/t2.json" 'j.usage.prompt_tokens') prompt tokens from the cache"
  # n: 2 on the cached prompt: two copies of the n: 1 answer
  post /v1/completions "$work/n2.json" "${cbody%\}},\"n\":2}"
  node -e '
const fs = require("fs"), a = JSON.parse(fs.readFileSync(process.argv[1], "utf8")), n = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const one = JSON.stringify([a.choices[0].text, a.choices[0].logprobs]);
if (n.choices.length !== 2) { console.error("n: 2 gave", n.choices.length, "choices"); process.exit(1); }
for (const c of n.choices) if (JSON.stringify([c.text, c.logprobs]) !== one) { console.error("choice", c.index, "differs"); process.exit(1); }
if (n.usage.prompt_tokens_details.cached_tokens !== a.usage.prompt_tokens - 1) { console.error("n: 2 cached", n.usage.prompt_tokens_details.cached_tokens); process.exit(1); }
console.log("ok: n: 2 on the cached prompt, two copies of the n: 1 answer");' "$work/c1.json" "$work/n2.json" || fail "n: 2"
  files+=("$work/t2.json" "$work/n2.json") want_hits=5
fi
curl -s "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
metric() { awk -v k="$1" '$1==k{print $2}' "$work/metrics.txt"; }
hits=$(metric onegpu_prefix_cache_hits_total) toks=$(metric onegpu_prefix_cached_tokens_total)
[[ $hits == "$want_hits" ]] || fail "onegpu_prefix_cache_hits_total: '$hits', expected $want_hits"
want=$(node -e 'const f=require("fs"); let n=0; for (const p of process.argv.slice(1)) { const u=JSON.parse(f.readFileSync(p,"utf8")).usage;
  n += u.prompt_tokens_details ? u.prompt_tokens_details.cached_tokens : u.cache_read_input_tokens; } console.log(n)' "${files[@]}")
[[ $toks == "$want" ]] || fail "onegpu_prefix_cached_tokens_total: '$toks', expected $want"
held=$(metric onegpu_kv_blocks_cached)
[[ -n $arch ]] && held=$(metric onegpu_prefix_cache_states)
[[ -n $held && $held -gt 0 ]] || fail "nothing held by the cache after the requests ended (blocks or states: '$held')"
if [[ -z $arch ]]; then # the pool: --parallel 2 x ceil(2048 / 64) blocks, each held, cached or free
  kt=$(metric onegpu_kv_blocks_total) ku=$(metric onegpu_kv_blocks_used) kf=$(metric onegpu_kv_blocks_free)
  [[ $kt == 64 && $((ku + held + kf)) == 64 ]] || fail "the pool: total '$kt', used '$ku' + cached '$held' + free '$kf'"
fi
kill -TERM "$spid"; wait "$spid" || true
c2=$(json_get "$work/c2.json" 'j.usage.prompt_tokens_details.cached_tokens')
grep -q " cached=$c2 " "$work/serve.log.access" || { cat "$work/serve.log.access"; fail "no access-log line with cached=$c2"; }
echo "ok: /metrics and the access log count the cached tokens"
start_server "$work/serve-off.log" --ctx $ctx --parallel 2 --batch-tokens 256 --prefix-cache off
post /v1/completions "$work/o1.json" "$cbody"
check "$work/c1.json" "$work/o1.json" off || fail "--prefix-cache off"
kill -TERM "$spid"; wait "$spid" || true
if [[ -n $arch ]]; then # deepseek4 / deepseek41: the states' tiers
# --cache-dir over a restart: the states cached at exit are written to DIR (one
# .kvs file each); a restart on it (with --cache-ram too) restores the prompt's
# state from its file: all but the last token cached, the cold output bit for bit
kvdir=$work/kvdir-states
rm -rf "$kvdir"
start_server "$work/serve-sdir1.log" --ctx $ctx --parallel 2 --batch-tokens 256 --cache-dir "$kvdir"
post /v1/completions "$work/s1.json" "$cbody"
check "$work/c1.json" "$work/s1.json" off || fail "--cache-dir (states): the first run"
kill -TERM "$spid"; wait "$spid" || true
nfiles=$(ls "$kvdir" | grep -c '\.kvs$' || true)
[[ $nfiles -gt 0 ]] || fail "--cache-dir (states): no state files after the server stopped"
start_server "$work/serve-sdir2.log" --ctx $ctx --parallel 2 --batch-tokens 256 --cache-dir "$kvdir" --cache-ram 64M
post /v1/completions "$work/s2.json" "$cbody"
check "$work/c1.json" "$work/s2.json" on || fail "--cache-dir (states): after the restart"
curl -s "http://127.0.0.1:$port/metrics" >"$work/metrics-s2.txt"
restored=$(awk '$1=="onegpu_kv_cache_disk_states_restored_total"{print $2}' "$work/metrics-s2.txt")
[[ $restored == 1 ]] || fail "onegpu_kv_cache_disk_states_restored_total: '$restored' after the restart, expected 1"
held=$(awk '$1=="onegpu_kv_cache_disk_states"{print $2}' "$work/metrics-s2.txt")
[[ $held == "$nfiles" ]] || fail "onegpu_kv_cache_disk_states: '$held', $nfiles files"
kill -TERM "$spid"; wait "$spid" || true
grep -q 'cache-dir: skipping' "$work/serve-sdir2.log" && fail "the restart skipped a state file: $(grep skipping "$work/serve-sdir2.log")"
echo "ok: --cache-dir (states): $nfiles state files, the prompt's read back after a restart, the same output"
# onegpu run --cache-dir (--parallel 1: no room in memory beside the running sequence, so the
# prompt's state goes to the tiers at once): a second run reads all but the last prompt token
run_twice
n_run=$(grep -o '; [0-9]* prompt tokens read from --cache-dir' "$work/run2.err" | grep -o '[0-9]*' || true)
n_prompt=$(json_get "$work/run1.json" 'j.prompt_tokens.length')
[[ -n $n_run && $n_run == $((n_prompt - 1)) ]] || { cat "$work/run2.err"; fail "onegpu run --cache-dir (states): read '$n_run' of $n_prompt prompt tokens"; }
echo "ok: onegpu run --cache-dir (states): the second run read $n_run of $n_prompt prompt tokens, the same output"
fi
if [[ -z $arch ]]; then # deepseek2: the KV pool's tiers
# --cache-dir (issue 17 item 5): the blocks cached at exit are written to DIR; a
# restart on the same DIR reads them back (cached_tokens as warm, the cold
# output bit for bit); another model's server leaves every file alone (named apart:
# none opened, none skipped with a warning, none removed) and reads none
kvdir=$work/kvdir
rm -rf "$kvdir"
start_server "$work/serve-dir1.log" --ctx 2048 --parallel 2 --batch-tokens 256 --cache-dir "$kvdir"
post /v1/completions "$work/d1.json" "$cbody"
check "$work/c1.json" "$work/d1.json" off || fail "--cache-dir: the first run"
kill -TERM "$spid"; wait "$spid" || true
nfiles=$(ls "$kvdir" | grep -c '\.kvb$' || true)
[[ $nfiles -gt 0 ]] || fail "--cache-dir: no block files after the server stopped"
start_server "$work/serve-dir2.log" --ctx 2048 --parallel 2 --batch-tokens 256 --cache-dir "$kvdir"
post /v1/completions "$work/d2.json" "$cbody"
check "$work/c1.json" "$work/d2.json" on || fail "--cache-dir: after the restart"
curl -s "http://127.0.0.1:$port/metrics" >"$work/metrics2.txt"
restored=$(awk '$1=="onegpu_kv_cache_disk_restored_total"{print $2}' "$work/metrics2.txt")
[[ -n $restored && $restored -gt 0 ]] || fail "onegpu_kv_cache_disk_restored_total: '$restored' after the restart"
files=$(awk '$1=="onegpu_kv_cache_disk_blocks"{print $2}' "$work/metrics2.txt")
[[ $files == "$nfiles" ]] || fail "onegpu_kv_cache_disk_blocks: '$files', $nfiles files"
kill -TERM "$spid"; wait "$spid" || true
echo "ok: --cache-dir: $nfiles block files, $restored read back after a restart, the same output"
other=$work/other.gguf
[[ -s $other ]] || "$onegpu" make-model --preset tiny --seed 77 -o "$other" 2>/dev/null || fail "make-model --seed 77"
ours=$(ls "$kvdir" | grep '\.kvb$' | head -1 | cut -c1-16)
before=$(ls "$kvdir" | grep -c "^$ours-.*\.kvb$" || true)
model_was=$model model=$other
start_server "$work/serve-dir3.log" --ctx 2048 --parallel 2 --batch-tokens 256 --cache-dir "$kvdir"
post /v1/completions "$work/d3.json" "$cbody"
kill -TERM "$spid"; wait "$spid" || true
model=$model_was
skipped=$(grep -c 'cache-dir: skipping' "$work/serve-dir3.log" || true)
[[ $skipped == 0 ]] || { cat "$work/serve-dir3.log"; fail "another model's server skipped $skipped files with a warning"; }
kept=$(ls "$kvdir" | grep -c "^$ours-.*\.kvb$" || true)
[[ $kept == "$before" ]] || fail "another model's server changed the first one's files: $before before, $kept after"
[[ $(ls "$kvdir" | grep '\.kvb$' | cut -c1-16 | sort -u | wc -l) == 2 ]] || fail "two models' files under two names: $(ls "$kvdir")"
node -e 'const j=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
  if (j.usage.prompt_tokens_details.cached_tokens !== 0) { console.error("cached", j.usage); process.exit(1); }' \
  "$work/d3.json" || fail "another model read the cache"
echo "ok: another model's server left the $before files alone and wrote its own beside them"
# onegpu run --cache-dir: a second run of the same prompt reads the first one's blocks (same JSON: tokens, log-probs)
run_twice
grep -q '; 320 prompt tokens read from --cache-dir' "$work/run2.err" || { cat "$work/run2.err"; fail "onegpu run --cache-dir: the second run read no blocks"; }
echo "ok: onegpu run --cache-dir: the second run read 320 prompt tokens' blocks, the same output"
fi
echo "prefix.sh${arch:+ ($arch)}: all passed"
