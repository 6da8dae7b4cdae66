#!/usr/bin/env bash
# --device cuda|cpu|auto of run (serve shares the parser): the build's CUDA status
# (onegpu --version), the one line saying who computes, the refusal of --device
# cuda without a usable GPU (or without CUDA in the build), the line a GPU machine
# with a CPU-only build gets (a fake /proc/driver/nvidia/version via
# $ONEGPU_NVIDIA_PROC), and identical tokens and log-probs whichever device computes.
# usage: device.sh ONEGPU WORKDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_node_refs  # the tiny preset takes its tokenizer from tests/node_modules
onegpu=$1 work=$2
mkdir -p "$work"
tiny_model "$onegpu" "$work"
core() { sed 's/,"placement":.*$/}/' "$1"; }
run() { "$onegpu" run -m "$model" -p "The quick brown fox" -n 6 --temp 0 --json "$@"; }

built=0
"$onegpu" --version | grep -q '^cuda device: built$' && built=1
"$onegpu" --version | grep -qE '^cuda device: (built|not built \(cmake -DONEGPU_CUDA=ON builds it\))$' ||
  fail "version: $("$onegpu" --version)"

# a bad value
rc=0; run --device gpu >"$work/o0" 2>"$work/e0" || rc=$?
[[ $rc == 1 ]] && grep -q "bad value 'gpu' for --device: expected cuda, cpu or auto" "$work/e0" || fail "bad value: $(cat "$work/e0")"

# the reference: the CPU alone
run --device cpu >"$work/ref.json" 2>"$work/ref.err"
grep -q 'compute: CPU only (no device)' "$work/ref.err" || fail "cpu: $(cat "$work/ref.err")"
core "$work/ref.json" >"$work/ref.core"

# --device cuda: the GPU, or one clear refusal
rc=0; run --device cuda --vram 1G --ram 8G --expert-slots 4 --migrate 0 >"$work/cuda.json" 2>"$work/cuda.err" || rc=$?
if [[ $rc == 0 ]]; then
  [[ $built == 1 ]] || fail "--device cuda ran in a build without CUDA"
  grep -q 'compute: cuda device ' "$work/cuda.err" || fail "cuda: $(cat "$work/cuda.err")"
  core "$work/cuda.json" | cmp -s - "$work/ref.core" || fail "the cuda device changed the tokens or log-probs"
else
  [[ $rc == 1 ]] || fail "--device cuda: exit $rc"
  if [[ $built == 1 ]]; then
    grep -qE '^onegpu run: --device cuda: no (CUDA device \(|NVIDIA GPU on this machine \(no driver)' "$work/cuda.err" || fail "refusal: $(cat "$work/cuda.err")"
    echo "SKIP (hardware): no CUDA device: the GPU half of this test did not run"
  else
    grep -q '^onegpu run: --device cuda: this build has no CUDA (.*-DONEGPU_CUDA=ON' "$work/cuda.err" ||
      fail "refusal: $(cat "$work/cuda.err")"
  fi
  [[ $(wc -l <"$work/cuda.err") == 1 ]] || fail "the refusal is not one line: $(cat "$work/cuda.err")"
fi

# auto (the default) with --vram: the GPU if one answers, else the cpu device; same result
run --vram 1G --ram 8G --expert-slots 4 --migrate 0 >"$work/auto.json" 2>"$work/auto.err"
core "$work/auto.json" | cmp -s - "$work/ref.core" || fail "auto changed the tokens or log-probs"
grep -qE 'compute: (cuda device .*|cpu device: [0-9]+ experts resident)' "$work/auto.err" || fail "auto: $(cat "$work/auto.err")"
if grep -q 'compute: cpu device' "$work/auto.err" && [[ $built == 1 ]]; then
  grep -qE '^onegpu run: no (CUDA device|NVIDIA GPU on this machine) \(.*\): the CPU computes$' "$work/auto.err" || fail "auto, no GPU: $(cat "$work/auto.err")"
fi
# --device-forward on the cpu device: the weights used in place, and copied into the device's
# memory and looked up there as on a GPU (ONEGPU_DEVICE_WEIGHTS=copy, the test mode), with 0, 4
# and all experts resident (the MoE combine then an op on the device): the CPU's tokens and log-probs
for slots in 0 4 all; do
  for mode in alias copy; do
    ONEGPU_DEVICE_WEIGHTS=$mode run --device cpu --vram 1G --ram 8G --expert-slots $slots --migrate 0 --device-forward \
      >"$work/fwd-$mode-$slots.json" 2>"$work/fwd-$mode-$slots.err" || fail "--device-forward ($mode, $slots): $(cat "$work/fwd-$mode-$slots.err")"
    core "$work/fwd-$mode-$slots.json" | cmp -s - "$work/ref.core" || fail "--device-forward ($mode, $slots slots) changed the tokens or log-probs"
  done
  grep -q 'the forward pass on the device, weights used in place$' "$work/fwd-alias-$slots.err" || fail "alias: $(cat "$work/fwd-alias-$slots.err")"
  grep -qE 'the forward pass on the device, [0-9.]+ MiB of weights copied$' "$work/fwd-copy-$slots.err" || fail "copy: $(cat "$work/fwd-copy-$slots.err")"
done
# --no-device-forward keeps the forward pass on the host pool
run --device cpu --vram 1G --ram 8G --expert-slots 4 --migrate 0 --no-device-forward >"$work/nofwd.json" 2>"$work/nofwd.err"
! grep -q 'the forward pass on the device' "$work/nofwd.err" || fail "--no-device-forward: $(cat "$work/nofwd.err")"
core "$work/nofwd.json" | cmp -s - "$work/ref.core" || fail "--no-device-forward changed the tokens or log-probs"

# plan-for-a-device flags without --vram and without a GPU are refused
if ! grep -q 'compute: cuda device' "$work/auto.err"; then
  rc=0; run --migrate 1 >/dev/null 2>"$work/e1" || rc=$?
  [[ $rc == 1 ]] && grep -q 'give --vram SIZE too' "$work/e1" || fail "--migrate without --vram: $(cat "$work/e1")"
fi

# a GPU machine (faked) with a build without CUDA is told how to rebuild; a CUDA build is not
echo "NVRM version: fake" >"$work/nvidia-version"
ONEGPU_NVIDIA_PROC=$work/nvidia-version run --device auto >/dev/null 2>"$work/fake.err"
if [[ $built == 0 ]]; then
  grep -q 'this machine has an NVIDIA GPU but this build has no CUDA, so the CPU computes (rebuild .*-DONEGPU_CUDA=ON' \
    "$work/fake.err" || fail "no-CUDA build on a GPU machine: $(cat "$work/fake.err")"
else
  ! grep -q 'this build has no CUDA' "$work/fake.err" || fail "a CUDA build said it has no CUDA"
fi
ONEGPU_NVIDIA_PROC=$work/nothing-here run --device auto >/dev/null 2>"$work/none.err"
! grep -q 'NVIDIA GPU but' "$work/none.err" || fail "no GPU, yet: $(cat "$work/none.err")"
echo "device: ok (cuda built: $built)"
