#!/usr/bin/env bash
# CI stage: Vulkan through Mesa's software driver (lavapipe) and ggml RPC over loopback, with the
# one libggml build that has both (the installed wheel's, built where the Vulkan toolchain is; in a
# development checkout, python build_ggml.py --backend vulkan --backend rpc).
#
#   bash scripts/ci_vulkan.sh            # checks, smoke test, then tests/test_devices.py and tests/test_rpc.py
#   bash scripts/ci_vulkan.sh --smoke    # without the tests (.ci/run: its full pytest run has them)
#
# Fails when the build lacks either backend or lavapipe is missing (in CI both must be there:
# .ci/run installs mesa-vulkan-drivers, glslc, libvulkan-dev and spirv-headers), then runs the
# Vulkan smoke test (scripts/vulkan_demo.py: a matmul and MLP training on lavapipe against the
# CPU backend), `python -m ggmlpy info` with software Vulkan on, and the device and RPC tests.
# Mesa's shader cache lives next to ggmlpy's build cache, so a warm CI run skips the pipeline
# compiles (about 1 minute cold on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export GGMLPY_SOFTWARE_VULKAN=1
export MESA_SHADER_CACHE_DIR=${MESA_SHADER_CACHE_DIR:-${GGMLPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ggmlpy}/mesa-shader-cache}
t0=$(date +%s)
stamp() { echo "[ci_vulkan $(( $(date +%s) - t0 ))s] $*"; }

stamp "checking the build"
timeout 120 python - <<'PY'
import sys
import ggmlpy
from ggmlpy.core import registry, rpc
missing = [b for b in ("Vulkan", "RPC") if b not in registry.backends()]
if missing:
    sys.exit(f"ci_vulkan: the active libggml ({ggmlpy.found.lib_dir}) lacks {', '.join(missing)}: "
             "apt-get install glslc libvulkan-dev spirv-headers mesa-vulkan-drivers, then reinstall "
             "(CMAKE_ARGS=-DGGML_VULKAN=ON pip install .; a development checkout: "
             "python build_ggml.py --backend vulkan --backend rpc)")
if rpc.rpc_server_binary() is None:
    sys.exit("ci_vulkan: no rpc-server binary next to the library: rebuild with RPC (the wheel's default)")
if not any(d.backend == "Vulkan" for d in ggmlpy.devices()):
    sys.exit("ci_vulkan: no Vulkan device even with GGMLPY_SOFTWARE_VULKAN=1: apt-get install mesa-vulkan-drivers")
PY
timeout 120 python -m ggmlpy info
stamp "Vulkan smoke test on lavapipe"
timeout 900 python scripts/vulkan_demo.py --require
if [[ "${1:-}" != "--smoke" ]]; then
  stamp "device and RPC tests"
  timeout 1200 python -m pytest -q -p no:cacheprovider tests/test_devices.py tests/test_rpc.py
fi
stamp "done"
