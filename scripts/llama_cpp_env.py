"""Install llama-cpp-python, built from the same pinned sdist ggml comes from (build_ggml.py), into
a virtual environment of its own in ggmlpy's cache: the reference the llama.cpp tests compare
ggmlpy against (tests/llama_cpp.py runs it in a child process).

It never shares a process with ggmlpy: both ship a libggml-base.so.0, and one process would
silently use whichever loaded first.

    python scripts/llama_cpp_env.py            # build (CPU only; minutes), or say where it is
    python scripts/llama_cpp_env.py --jobs 2   # compile jobs (default 2)

The environment is <cache>/llama-cpp-python-<version> (cache: $GGMLPY_CACHE_DIR, else
~/.cache/ggmlpy); its python is what tests/llama_cpp.py looks for. Building needs cmake and a C++
compiler, and PyPI for the sdist's build requirements (scikit-build-core) and its run-time ones.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "ggmlpy"))
import _buildinfo as B  # noqa: E402  (standard library only: no libggml is loaded)

# CPU only, for this machine, with what the comparison needs and nothing else
CMAKE_ARGS = ("-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_OPENMP=OFF -DGGML_VULKAN=OFF -DGGML_CUDA=OFF "
              "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF "
              "-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF")


def env_dir() -> Path:
    return B.cache_dir() / f"llama-cpp-python-{B.LLAMA_CPP_PYTHON_VERSION}"


def python_path() -> Path:
    return env_dir() / "bin" / "python"


def _sdist() -> Path:
    path = B.cache_dir() / "sdist" / B.SDIST_NAME
    if not path.exists():
        sys.exit(f"{path} is missing: run build_ggml.py first (it fetches the sdist)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != B.SDIST_SHA256:
        sys.exit(f"{path}: sha256 {digest} is not the pinned {B.SDIST_SHA256}")
    return path


def installed() -> bool:
    return (env_dir() / "installed.txt").exists() and python_path().exists()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    if installed():
        print(python_path())
        return 0
    sdist = _sdist()
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(env_dir())], check=True)
    env = dict(os.environ, CMAKE_ARGS=CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL=str(args.jobs))
    subprocess.run([str(python_path()), "-m", "pip", "install", "--quiet", "--no-cache-dir", str(sdist)],
                   check=True, env=env)
    minutes = (time.monotonic() - start) / 60
    (env_dir() / "installed.txt").write_text(f"{sdist.name} {CMAKE_ARGS} built in {minutes:.1f} min\n")
    print(f"{python_path()} (built in {minutes:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
