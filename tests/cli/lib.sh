# Shared by the shell tests: skips (exit 77, ctest SKIP_RETURN_CODE), the outside
# references' check, and small assertion helpers.
# Two kinds of skip, each one line that test.sh counts (it reads ctest's log):
#   skip_dep WHY   a dependency is missing. scripts/deps.sh (the README's command)
#                  installs every one, so under CI=true this is a failure instead;
#   skip_hw WHY    hardware this machine lacks (a GPU, AMX): never a failure.
# skip_dep_part WHY: the same for a part of a test that goes on without it.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)   # tests/
skip_dep_part() {
  if [[ ${CI:-} == true ]]; then
    echo "FAIL: CI=true and a dependency is missing, which would skip: $* (the README's command, scripts/deps.sh, installs it)" >&2; exit 1
  fi
  echo "SKIP (dependency): $*"
}
skip_dep() { skip_dep_part "$@"; exit 77; }
skip_hw() { echo "SKIP (hardware): $*"; exit 77; }
need_node_refs() {
  if ! command -v node >/dev/null || [[ $(node -p 'process.versions.node.split(".")[0]') -lt 20 ]]; then
    skip_dep "Node.js >= 20 is needed for the llama.cpp reference (scripts/deps.sh)"
  fi
  if [[ ! -d $here/node_modules/node-llama-cpp ]]; then
    skip_dep "tests/node_modules missing: run scripts/deps.sh"
  fi
}
fail() { echo "FAIL: $*" >&2; exit 1; }
# median: the median of the numbers on stdin, one per line (bench/*.sh)
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# json_get FILE EXPR: evaluates a JS expression over the parsed JSON `j`.
json_get() { node -e "const j=JSON.parse(require('fs').readFileSync('$1','utf8')); console.log($2)"; }
# start_server LOG ARGS...: starts "$onegpu" serve -m "$model" on a free port, waits for
# /health 200; sets port and spid, adds spid to the caller's pids array (its cleanup
# kills them). Fails with the server's log if it exits or is not ready in 60 s.
# stderr goes to LOG, stdout (the access log) to LOG.access.
start_server() {
  local log=$1; shift
  "$onegpu" serve -m "$model" --port 0 "$@" 2>"$log" >"$log.access" &
  spid=$!
  pids+=("$spid")
  port=
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://[^:]*:[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$' || true)
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$spid" 2>/dev/null || { cat "$log"; fail "onegpu serve exited at start"; }
    sleep 0.1
  done
  cat "$log"; fail "onegpu serve did not become ready"
}
# tiny_model ONEGPU WORK [ARCH]: makes WORK/tiny.gguf (deepseek2; with ARCH
# WORK/ARCH-tiny.gguf, make-model --arch ARCH) with the real tokenizer unless it is
# there, sets model; exits 77 (skip) when the tokenizer files are not installed.
tiny_model() {
  model=$2/${3:+$3-}tiny.gguf
  [[ -s $model ]] && return 0
  "$1" make-model ${3:+--arch "$3"} --preset tiny -o "$model" 2>"$2/make.log" || {
    if grep -q 'tokenizer' "$2/make.log"; then skip_dep "no tokenizer files (run scripts/deps.sh)"; fi
    cat "$2/make.log"; fail "make-model${3:+ --arch $3}"
  }
}
