#!/usr/bin/env bash
# Quick start, command 1: install ggmlpy, build the pinned libggml (CPU + RPC, and Vulkan when
# its toolchain is installed; a cache hit takes 0.1 s), and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[test,demo]"
python build_ggml.py --backend auto
python -m ggmlpy info
python -m ggmlpy demo
