#!/usr/bin/env bash
# Extract llama.cpp's vocab-only GGUFs (models/ggml-vocab-*.gguf) and their
# tokenizer test vectors (*.gguf.inp / *.gguf.out) from the git bundle shipped
# inside node-llama-cpp, into the flat directory $1. Nothing is built.
#
# usage: extract_vocab.sh DEST_DIR [BUNDLE]
#   BUNDLE defaults to ../node_modules/node-llama-cpp/llama/gitRelease.bundle
#   (relative to this script), or $LLAMA_BUNDLE.
# Idempotent: a stamp file named after the bundle's commit lists the files of a
# finished extraction; a rerun finding all of them only prints the list.
# .inp holds test strings separated by "\n__ggml_vocab_test__\n"; .out holds
# the expected ids of each string, one line per string, space separated
# (llama.cpp's tests/test-tokenizer-0 format).
set -euo pipefail

dest=${1:?usage: extract_vocab.sh DEST_DIR [BUNDLE]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=${2:-${LLAMA_BUNDLE:-$here/../node_modules/node-llama-cpp/llama/gitRelease.bundle}}
[[ -f $bundle ]] || { echo "extract_vocab.sh: no git bundle at $bundle (run npm install in tests/)" >&2; exit 1; }

# The bundle's head commit names the content; listing heads needs no clone.
commit=$(git bundle list-heads "$bundle" | awk 'NR==1{print $1}')
[[ -n $commit ]] || { echo "extract_vocab.sh: cannot read $bundle" >&2; exit 1; }
stamp=$dest/.extracted-$commit

complete() {
    [[ -s $stamp ]] || return 1
    local f
    while read -r f; do [[ -f $dest/$f ]] || return 1; done < "$stamp"
}

mkdir -p "$dest"
if ! complete; then
    # Work in a private temp dir so an interrupted run leaves no half files
    # behind a stamp, and parallel runs do not trample each other.
    tmp=$(mktemp -d "$dest/.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # A bare clone of the bundle is < 1 s; git archive then streams only the
    # wanted blobs (~75 MB) without checking out the whole tree.
    git clone -q --bare "$bundle" "$tmp/repo.git"
    git --git-dir="$tmp/repo.git" archive --format=tar "$commit" -- 'models/ggml-vocab-*' \
        | tar -x -C "$tmp" --strip-components=1
    rm -f "$dest"/.extracted-*
    (cd "$tmp" && ls -1 ggml-vocab-*) > "$tmp/list"
    mv -f "$tmp"/ggml-vocab-* "$dest"/
    mv -f "$tmp/list" "$stamp"
fi
ls -1 "$dest"/ggml-vocab-*
