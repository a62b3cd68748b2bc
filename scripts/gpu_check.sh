#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: build libggml with CUDA (or use one built
# elsewhere), run the CUDA device tests, the op/autograd/graph-mode suites and ggmlR parity on
# CUDA, the backend, op and llama.cpp benchmarks, and write a short report. Under 10 minutes in all.
#
#   bash scripts/gpu_check.sh            # report: $OUT/report.txt, logs: $OUT/ (or ./gpu_report.txt, ./gpu_logs/)
#
# Needs nvidia-smi (the driver) and nvcc (the CUDA toolkit); fails at once, with the reason,
# without them. Offline machines: carry the unpacked source (vendor/ggml/) and build_ggml.py
# does not download anything. Measured on an H200 machine (16 cores): the CUDA build took
# 154 s, the whole check 3 min; with a build carried in (GPU_CHECK_LIB_DIR), 50 s. The CUDA build is cached like every build_ggml.py build (a
# second run is a cache hit); the tests run with GGMLPY_LIB_DIR pointing at it.
#
# Knobs (environment): GPU_CHECK_BUDGET_S (570: the whole run), GPU_CHECK_BUILD_TIMEOUT_S (420),
# GPU_CHECK_CUDA_ARCH (default: build_ggml.py's choice, "native" with a GPU),
# GPU_CHECK_FULL_BUILD=1 keeps ggml's flash-attention CUDA kernels (off by default: they are
# most of the CUDA compile time, and nothing this check runs uses them),
# GPU_CHECK_LIB_DIR: a CUDA build's install/lib made on another machine (build_ggml.py with
# nvcc and cuBLAS; no GPU needed), used when it loads and sees the GPU, which saves GPU-machine
# minutes; GPU_CHECK_PARITY_DIR: ggmlR's parity fixtures (default tests/parity).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python}
# The machine's python runs this checkout's source (src/) unless it has ggmlpy installed.
if ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('ggmlpy') is None)" 2>/dev/null; then
  export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ -n "${OUT:-}" ]]; then
  LOGS=$OUT; REPORT=$OUT/report.txt
else
  LOGS=$ROOT/gpu_logs; REPORT=$ROOT/gpu_report.txt
fi
mkdir -p "$LOGS"
: > "$REPORT"
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-570}
BUILD_TIMEOUT=${GPU_CHECK_BUILD_TIMEOUT_S:-420}
FAILED=0

log() { echo "[gpu_check $(( $(date +%s) - T0 ))s] $*" | tee -a "$LOGS/gpu_check.log" >&2; }
report() { echo "$*" >> "$REPORT"; }
die() {
  log "FAILED: $*"
  report "gpu_check: FAILED: $*"
  report "elapsed: $(( $(date +%s) - T0 )) s"
  exit 1
}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# step NAME TIMEOUT_S CMD...: run with a timeout (capped by what is left of the budget), log to
# $LOGS/NAME.log, record the outcome; later steps still run when one fails.
step() {
  local name=$1 t=$2; shift 2
  local cap; cap=$(left)
  if (( cap < 20 )); then
    log "$name: skipped, time budget spent"; report "$name: SKIPPED (time budget spent)"; FAILED=1; return 0
  fi
  (( t > cap )) && t=$cap
  log "$name: $* (timeout ${t}s)"
  local s=$(date +%s) rc=0
  timeout --kill-after=10 "$t" "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
  local d=$(( $(date +%s) - s ))
  if (( rc == 0 )); then
    report "$name: ok (${d}s)"
  else
    FAILED=1
    if (( rc == 124 || rc == 137 )); then report "$name: TIMEOUT after ${d}s"; else report "$name: FAILED rc=$rc (${d}s)"; fi
    tail -n 30 "$LOGS/$name.log" | sed 's/^/    /' >> "$REPORT"
  fi
  return 0
}

report "ggmlpy GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname)"

# 1. the machine: fail fast and say why
command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: this check needs an NVIDIA GPU with its driver (no GPU on this machine?)"
timeout 60 nvidia-smi -L > "$LOGS/nvidia-smi.txt" 2>&1 || die "nvidia-smi failed (no GPU visible, or no driver): $(head -c 300 "$LOGS/nvidia-smi.txt")"
grep -q "^GPU " "$LOGS/nvidia-smi.txt" || die "nvidia-smi lists no GPU: $(head -c 300 "$LOGS/nvidia-smi.txt")"
timeout 60 nvidia-smi >> "$LOGS/nvidia-smi.txt" 2>&1 || true
NVCC=$(command -v nvcc || true)
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && { export PATH=/usr/local/cuda/bin:$PATH; NVCC=/usr/local/cuda/bin/nvcc; }
[[ -n "$NVCC" ]] || die "nvcc not found: install the CUDA toolkit (or put it on PATH)"
report "gpu: $(grep '^GPU ' "$LOGS/nvidia-smi.txt" | head -n 4 | tr '\n' ';')"
report "nvcc: $("$NVCC" --version | grep -o 'release [0-9.]*' | head -n 1) ($NVCC)"
report "cpu cores: $(nproc)"

# 2. libggml with CUDA. cuBLAS and the CUDA runtime come from the toolkit or from the
#    nvidia-* Python wheels (PyTorch's), whichever this machine has: put both on the path.
NVLIBS=$("$PY" - <<'PY' 2>/dev/null || true
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = {os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "nvidia", "**", "libcublas.so*"), recursive=True)}
print(":".join(sorted(dirs)))
PY
)
CUDA_ROOT=$(dirname "$(dirname "$(readlink -f "$NVCC")")")  # nvcc may be a wrapper outside the toolkit
export LD_LIBRARY_PATH=$CUDA_ROOT/lib64:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${NVLIBS:+:$NVLIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# sees_cuda LIB_DIR: ggmlpy loads that libggml and lists a CUDA device
sees_cuda() {
  GGMLPY_LIB_DIR=$1 timeout 120 "$PY" -m ggmlpy info > "$LOGS/info.txt" 2>&1 && grep -q "CUDA0" "$LOGS/info.txt"
}
build_line() {
  "$PY" -c "import json,sys; b=json.load(open(sys.argv[1])); print(b['key'], '-', b['build_seconds'], 's, cuda_arch', b.get('cuda_arch'))" \
    "$1/../../build.json" 2>/dev/null || echo "$1"
}

#    A build made elsewhere (GPU_CHECK_LIB_DIR: build_ggml.py's install/lib, compiled on a CPU
#    machine with nvcc and carried here) saves the compile when it loads and sees the GPU;
#    otherwise build here (cached; a cache hit takes 0.1 s).
LIB=""
if [[ -n "${GPU_CHECK_LIB_DIR:-}" ]]; then
  PRE=$(cd "$GPU_CHECK_LIB_DIR" && pwd)
  if [[ -f "$PRE/libggml-cuda.so" ]] && sees_cuda "$PRE"; then
    LIB=$PRE
    report "build: prebuilt elsewhere and carried in: $(build_line "$LIB")"
  else
    report "build: the prebuilt $GPU_CHECK_LIB_DIR does not load or sees no GPU; building here"
    ldd "$PRE/libggml-cuda.so" 2>&1 | grep "not found" | sed 's/^/    /' >> "$REPORT" || true
    tail -n 5 "$LOGS/info.txt" 2>/dev/null | sed 's/^/    /' >> "$REPORT" || true
  fi
fi
if [[ -z "$LIB" ]]; then
  BUILD_ARGS=(--backend cuda --jobs "$(nproc)")
  [[ -n "${GPU_CHECK_CUDA_ARCH:-}" ]] && BUILD_ARGS+=(--cuda-arch "$GPU_CHECK_CUDA_ARCH")
  [[ "${GPU_CHECK_FULL_BUILD:-0}" == 1 ]] || BUILD_ARGS+=(--cmake-arg=-DGGML_CUDA_FA=OFF)
  log "build: $PY build_ggml.py ${BUILD_ARGS[*]} (timeout ${BUILD_TIMEOUT}s)"
  rc=0
  timeout --kill-after=10 "$BUILD_TIMEOUT" "$PY" build_ggml.py "${BUILD_ARGS[@]}" > "$LOGS/build.log" 2>&1 || rc=$?
  if (( rc != 0 )); then
    tail -n 40 "$LOGS/build.log" | sed 's/^/    /' >> "$REPORT"
    (( rc == 124 || rc == 137 )) && die "the CUDA build took over ${BUILD_TIMEOUT}s (log: $LOGS/build.log)"
    die "the CUDA build failed, rc=$rc (log: $LOGS/build.log)"
  fi
  LIB=$("$PY" build_ggml.py "${BUILD_ARGS[@]}" --print-lib-dir 2>/dev/null | tail -n 1)
  [[ -f "$LIB/libggml-cuda.so" ]] || die "the build has no libggml-cuda.so in $LIB"
  report "build: $(build_line "$LIB")"
  sees_cuda "$LIB" || die "the CUDA build does not load or sees no CUDA device: $(tail -n 5 "$LOGS/info.txt")"
fi
export GGMLPY_LIB_DIR=$LIB
report "devices: $(grep -E '^\s+(CUDA|CPU)' "$LOGS/info.txt" | sed 's/  */ /g' | tr '\n' ';')"

# 3. the CUDA tests: the device tests, then the op, autograd, forward-AD and graph-mode suites
#    and ggmlR's ag and train parity programs on CUDA, at the GPU tolerance (cuBLAS runs f32
#    products in TF32), as CI runs them on lavapipe
step pytest_cuda 120 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_devices.py -k "cuda or CUDA0"
report "  $(grep -E '[0-9]+ (passed|failed|skipped)' "$LOGS/pytest_cuda.log" | tail -n 1)"
grep -q " passed" "$LOGS/pytest_cuda.log" || { report "  no CUDA test ran"; FAILED=1; }
step pytest_suites_cuda 180 "$PY" -m pytest -q -p no:cacheprovider tests/test_autograd.py tests/test_forward_ad.py \
  tests/test_graph_mode.py tests/test_batched.py --devices cuda
report "  $(grep -E '[0-9]+ (passed|failed|skipped)' "$LOGS/pytest_suites_cuda.log" | tail -n 1)"
PARITY_DIR=${GPU_CHECK_PARITY_DIR:-$ROOT/tests/parity}
if [[ -d "$PARITY_DIR" ]]; then
  step parity_cuda 120 "$PY" scripts/parity.py "$PARITY_DIR" --device cuda --suite ag --suite train --f32-tol 5e-3 5e-4
  report "  $(tail -n 1 "$LOGS/parity_cuda.log")"
else
  report "parity_cuda: skipped (no fixtures at $PARITY_DIR; set GPU_CHECK_PARITY_DIR)"
fi

# 4. the benchmarks: the MLP step on each device, eager and compiled, 256 and 1024 wide; then
#    this machine's per-op overheads
step bench_backends 120 "$PY" scripts/bench_backends.py --steps 10 --torch --json "$LOGS/bench_backends.json"
[[ -s "$LOGS/bench_backends.log" ]] && sed -n '/^MLP/,$p' "$LOGS/bench_backends.log" | sed 's/^/  /' >> "$REPORT"
step bench_backends_wide 150 "$PY" scripts/bench_backends.py --width 1024 --batch 1024 --steps 10 --torch \
  --json "$LOGS/bench_backends_wide.json"
[[ -s "$LOGS/bench_backends_wide.log" ]] && sed -n '/^MLP/,$p' "$LOGS/bench_backends_wide.log" | sed 's/^/  /' >> "$REPORT"
step bench_ops 90 "$PY" scripts/bench_ops.py --quick
[[ -s "$LOGS/bench_ops.log" ]] && tail -n 12 "$LOGS/bench_ops.log" | sed 's/^/  /' >> "$REPORT"
# ONNX models (ResNet-18 batch 1 and 8, a BERT-style encoder) on CUDA and on Vulkan, against
# onnxruntime on this machine's CPU (the wheel has no GPU provider), with the output difference
# (skipped, and said, where PyTorch or onnxruntime is missing or the build lacks the backend)
for dev in cuda vulkan; do
  if ! "$PY" -c "import torch, onnxruntime" 2>/dev/null; then
    report "onnx_$dev: skipped (no PyTorch or onnxruntime here to export and compare)"; continue
  fi
  if ! "$PY" -c "import sys, ggmlpy as g; sys.exit(not any(d.backend.lower() == sys.argv[1] for d in g.devices()))" \
      "$dev" 2>/dev/null; then
    report "onnx_$dev: skipped (this libggml has no $dev device)"; continue
  fi
  step "onnx_$dev" 120 "$PY" scripts/bench_onnx.py --device "$dev" --reps 3
  [[ -s "$LOGS/onnx_$dev.log" ]] && grep -E '^(ggmlpy on|model|ResNet|BERT)' "$LOGS/onnx_$dev.log" | sed 's/^/  /' >> "$REPORT"
done
# 5. the char-GPT (2 blocks, batch 32, context 64) trained on CUDA as one graph per step: tokens/s
step gpt_cuda 120 "$PY" -m ggmlpy demo --gpt --steps 150 --device cuda --out "$LOGS/gpt"
[[ -s "$LOGS/gpt_cuda.log" ]] && grep -E '^char-GPT' "$LOGS/gpt_cuda.log" | sed 's/^/  /' >> "$REPORT"

# 6. llm_generate on CUDA against llama.cpp (its CPU build, unless the one built here can offload),
#    small settings: decode time per token and a 128-token prompt, q8_0, one round after a warm-up.
#    Skipped, and said, where llama.cpp (scripts/llama_cpp_env.py) or the gguf package is missing.
if ! "$PY" -c "import sys; sys.path.insert(0, 'scripts'); import llama_cpp_env; sys.exit(not llama_cpp_env.installed())" \
    2>/dev/null; then
  report "bench_llama_cuda: skipped (llama.cpp is not built here: scripts/llama_cpp_env.py)"
elif ! "$PY" -c "import gguf" 2>/dev/null; then
  report "bench_llama_cuda: skipped (no gguf package to write the model)"
else
  step bench_llama_cuda 120 "$PY" scripts/bench_llama.py --device cuda --models q8_0 --threads 1 --rounds 1 \
    --decode 16 --prompt 128
  [[ -s "$LOGS/bench_llama_cuda.log" ]] && grep -E '^(devices|round|summary)' "$LOGS/bench_llama_cuda.log" \
    | sed 's/^/  /' >> "$REPORT"
fi

report "elapsed: $(( $(date +%s) - T0 )) s; logs in $LOGS"
if (( FAILED )); then report "gpu_check: FAILED"; log "done: FAILED (report $REPORT)"; exit 1; fi
report "gpu_check: OK"
log "done: OK (report $REPORT)"
