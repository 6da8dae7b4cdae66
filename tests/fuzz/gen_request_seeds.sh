#!/usr/bin/env bash
# gen_request_seeds.sh BUILD_DIR DIR: writes the fuzz_requests seeds, the request
# bodies the tests send: server.sh's table of chat / completions bodies, and
# (OG_WRITE_SEEDS) every body test_endpoints parses and the official clients
# send in messages.sh. Each seed: a selector byte (0 chat, 1 completions,
# 2 messages, 3 count_tokens, 4 responses; fuzz_requests.c), then the body.
# Run when those tests change; the output is committed (tests/fuzz/corpus_requests)
# beside found_* (inputs a fuzz run found that add coverage, merged with -merge=1)
# and regress_* (inputs that crashed before a fix).
set -euo pipefail
build=$(cd "$1" && pwd) dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
# server.sh's bad-request table: its req lines, with req writing the body instead
C=/v1/chat/completions P=/v1/completions work=$(mktemp -d)
u='"messages":[{"role":"user","content":"hi"}]'
key=k
head -c 100000 /dev/zero | tr '\0' 'a' >"$work/huge.txt"
req() {
  local path=$2 body=$3 sel
  case $path in $C) sel='\x00' ;; $P) sel='\x01' ;; *) return 0 ;; esac
  [[ -n $body && ${#body} -lt 60000 ]] || return 0
  { printf "$sel"; printf '%s' "$body"; } >"$dir/table_$(printf '%s%s' "$sel" "$body" | sha1sum | cut -c1-16)"
}
eval "$(grep -E '^(AUTH="[^"]*" )?req [0-9]+ \$[CP] ' "$here/cli/server.sh")"
rm -rf "$work"
OG_WRITE_SEEDS=$dir "$here/cli/messages.sh" "$build/onegpu" "$build/tests/test_endpoints" "$build/tests/seeds-work" >/dev/null
ls "$dir" | wc -l
