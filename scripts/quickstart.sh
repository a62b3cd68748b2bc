#!/usr/bin/env bash
# Quick start, command 1: install ggmlpy, build the pinned libggml if no usable one is
# found (cached in ~/.cache/ggmlpy), and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[test,demo]"
python - <<'PY' || python build_ggml.py
import ggmlpy  # fails with GGMLLoadError when no usable libggml is found
PY
python -m ggmlpy info
python -m ggmlpy demo
