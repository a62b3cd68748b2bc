#!/usr/bin/env bash
# Quick start, command 1: install ggmlpy and its build tools, build the pinned libggml
# (CPU + RPC, BLAS on OpenBLAS, and Vulkan when its toolchain is installed; a cache hit
# takes 0.1 s), and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."

# The compiler and cmake that build_ggml.py needs, and OpenBLAS, which ggml's BLAS backend uses
# for the CPU device's transposed matrix products (as root on Debian; otherwise say what to install).
missing=()
for tool in cmake c++; do command -v "$tool" >/dev/null || missing+=("$tool"); done
blas=$(ls /usr/include/*/openblas*/cblas.h /usr/include/openblas/cblas.h 2>/dev/null | head -1 || true)
if ((${#missing[@]})) || [[ -z $blas ]]; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake build-essential ninja-build \
      libopenblas-openmp-dev >/dev/null
  elif ((${#missing[@]})); then
    echo "quickstart: missing ${missing[*]}: sudo apt-get install cmake build-essential ninja-build" >&2
    exit 2
  else
    echo "quickstart: no OpenBLAS, building without ggml's BLAS backend" \
      "(sudo apt-get install libopenblas-openmp-dev for faster matrix products)" >&2
  fi
fi
python -m pip install -q -e ".[test,demo]"
python build_ggml.py --backend auto
python -m ggmlpy info
python -m ggmlpy demo
