"""The pin and the build cache's naming, shared by build_ggml.py and the runtime loader.

Standard library only, and free of package imports: build_ggml.py loads this
file by path before any libggml exists.
"""
from __future__ import annotations

import hashlib
import os
import platform
import sys
from pathlib import Path

GGML_VERSION = "0.25.3"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


def cache_dir() -> Path:
    """$GGMLPY_CACHE_DIR, else $XDG_CACHE_HOME/ggmlpy, else ~/.cache/ggmlpy."""
    if os.environ.get("GGMLPY_CACHE_DIR"):
        return Path(os.environ["GGMLPY_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ggmlpy"


def environment_record() -> Path:
    """Where build_ggml.py also records its build when it runs in a virtual environment: inside
    that environment, so a shell without the build's cache variables still finds the build."""
    return Path(sys.prefix) / "share" / "ggmlpy" / "active.json"


def in_virtual_environment() -> bool:
    return sys.prefix != getattr(sys, "base_prefix", sys.prefix)


def cpu_tag(native: bool) -> str:
    """Arch for portable builds; arch + sha1 of the CPU feature flags for native ones,
    so a native build is never reused on a CPU that may lack its instructions."""
    arch = platform.machine() or "unknown"
    if not native:
        return arch
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() in ("flags", "Features"):  # x86 / arm spelling
                flags = " ".join(sorted(val.split()))
                break
    except OSError:
        pass
    flags = flags or platform.processor()
    return f"{arch}-{hashlib.sha1(f'{arch}:{flags}'.encode()).hexdigest()[:10]}"
