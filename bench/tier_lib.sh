# Sourced by bench/kvtier.sh and bench/kvtier4.sh: requests to the servers named in the
# caller's associative array `at` (name -> port).
# req SERVER PROMPT -> "seconds prompt_tokens cached_tokens": curl's time_total of a
# non-streamed max_tokens=1 completion, and its usage.
req() {
  local out
  out=$(curl -s -w '\n%{time_total}' "http://127.0.0.1:${at[$1]}/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$2\",\"max_tokens\":1,\"temperature\":0}")
  local t=${out##*$'\n'} j=${out%$'\n'*}
  echo "$t $(node -e 'const u=JSON.parse(process.argv[1]).usage; console.log(u.prompt_tokens, u.prompt_tokens_details.cached_tokens)' "$j")"
}
# metric SERVER NAME -> the value of /metrics' NAME
metric() { curl -s "http://127.0.0.1:${at[$1]}/metrics" | awk -v k="$2" '$1==k{print $2}'; }
# medians NAME...: "median cold X s; NAME Y s (Rx); ..." over the arrays cold and NAME...
medians() {
  local mc m line s
  mc=$(printf '%s\n' "${cold[@]}" | median)
  line="median cold $(printf '%.3f' "$mc") s"
  for s in "$@"; do
    eval "m=\$(printf '%s\n' \"\${$s[@]}\" | median)"
    line+="; $s $(printf '%.3f' "$m") s ($(echo "$mc / $m" | bc -l | xargs printf '%.1f')x)"
  done
  echo "$line"
}
