# Shared by the shell tests: skip (exit 77, ctest SKIP_RETURN_CODE) when the
# outside references are not installed, and small assertion helpers.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)   # tests/
need_node_refs() {
  if ! command -v node >/dev/null || [[ $(node -p 'process.versions.node.split(".")[0]') -lt 20 ]]; then
    echo "SKIP: Node.js >= 20 is needed for the llama.cpp reference (scripts/deps.sh)"; exit 77
  fi
  if [[ ! -d $here/node_modules/node-llama-cpp ]]; then
    echo "SKIP: tests/node_modules missing: run scripts/deps.sh"; exit 77
  fi
}
fail() { echo "FAIL: $*" >&2; exit 1; }
# json_get FILE EXPR: evaluates a JS expression over the parsed JSON `j`.
json_get() { node -e "const j=JSON.parse(require('fs').readFileSync('$1','utf8')); console.log($2)"; }
