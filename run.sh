#!/usr/bin/env bash
# run.sh: from nothing to a model onegpu can serve, one step at a time, each
# printed as the command it runs.
#
#   ./run.sh --demo [--dry-run]
#
# --demo   installs what is missing (scripts/deps.sh), builds onegpu, makes the
#          built-in demo model (models/demo.gguf: a synthetic DeepSeek-class MoE
#          with the real DeepSeek-V3 tokenizer), inspects it, plans it for a
#          540 MiB device and generates a few tokens with that plan.
#          The server (`onegpu serve`) and model download are not built yet:
#          this script grows with them (see the open issues).
# --dry-run  print every command without running anything.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
  cat <<'EOF'
usage: ./run.sh --demo [--dry-run]

--demo     install what is missing (scripts/deps.sh), build onegpu, make the built-in
           demo model (models/demo.gguf: a synthetic DeepSeek-class MoE with the real
           DeepSeek-V3 tokenizer), inspect it, plan it for a 540 MiB device and generate
           a few tokens with that plan. The server and model download are not built
           yet; this script grows with them.
--dry-run  print every command without running anything.
EOF
}

dry=0 demo=0
for a in "$@"; do
  case "$a" in
    --demo) demo=1 ;;
    --dry-run) dry=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option '$a' (try --help)" >&2; exit 1 ;;
  esac
done
if [[ $demo -eq 0 ]]; then
  echo "run.sh: only --demo works so far (serving a downloaded model comes with the server issue)." >&2
  usage >&2
  exit 1
fi

step() {
  printf '+' >&2; printf ' %q' "$@" >&2; printf '\n' >&2
  [[ $dry -eq 1 ]] || "$@"
}

jobs=$(nproc 2>/dev/null || echo 2)
model=models/demo.gguf

step scripts/deps.sh
step cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_MESSAGE_LOG_LEVEL=WARNING
step cmake --build build -j"$jobs" --target onegpu
if [[ -f $model ]]; then
  echo "# $model exists; delete it to make it again" >&2
else
  step mkdir -p models
  step ./build/onegpu make-model --preset demo -o "$model"
fi
# Header and bytes per role; every tensor: ./build/onegpu gguf models/demo.gguf
plan=(--vram 540M --reserve 64M --ctx 4096)   # run's KV cache is f32: plan it so (--kv-type f32)
if [[ $dry -eq 1 ]]; then
  echo "+ ./build/onegpu gguf $model   (header and bytes per role shown)" >&2
  echo "+ ./build/onegpu plan -m $model ${plan[*]} --kv-type f32" >&2
  echo "+ ./build/onegpu run -m $model ${plan[*]} -p 'The capital of France is' -n 24 --temp 0" >&2
  exit 0
fi
echo "+ ./build/onegpu gguf $model   (header and bytes per role shown)" >&2
./build/onegpu gguf "$model" | awk '/^metadata:/{skip=1} /^bytes per role:/{skip=0} !skip'
echo >&2
step ./build/onegpu plan -m "$model" "${plan[@]}" --kv-type f32
echo >&2
echo "# random weights: the text is noise; the speeds and the hit rate are real" >&2
step ./build/onegpu run -m "$model" "${plan[@]}" -p 'The capital of France is' -n 24 --temp 0
echo >&2
echo "run.sh: the demo model is ready at $model. Serving it (onegpu serve on port 8090) is a coming issue;" >&2
echo "run.sh: until then: ./build/onegpu run -m $model -p TEXT, ./build/onegpu plan -m $model --vram SIZE" >&2
