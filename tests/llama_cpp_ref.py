"""llama.cpp itself as the reference: llama-cpp-python built from ggmlpy's pinned sdist into an
environment of its own (scripts/llama_cpp_env.py), run in a child process (llama_cpp_child.py,
which imports the package `llama_cpp`: hence this module's other name). Never in ggmlpy's own
process: both ship a libggml-base.so.0, and one process would silently share whichever loaded first."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ggmlpy._buildinfo import LLAMA_CPP_PYTHON_VERSION, cache_dir

CHILD = Path(__file__).with_name("llama_cpp_child.py")


def python_path() -> Path:
    """llama-cpp-python's interpreter, as scripts/llama_cpp_env.py installs it."""
    return cache_dir() / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}" / "bin" / "python"


def require_llama_cpp() -> Path:
    env = python_path().parent.parent
    if not (env / "installed.txt").exists():
        pytest.skip(f"llama.cpp is not built: `python scripts/llama_cpp_env.py` builds llama-cpp-python "
                    f"{LLAMA_CPP_PYTHON_VERSION} from the pinned sdist into {env}")
    return python_path()


def llama_cpp_logits(model_path, tokens) -> np.ndarray:
    """llama.cpp's logits [n_tokens, n_vocab] for `tokens` (f32 KV cache, one thread)."""
    python = require_llama_cpp()
    out = Path(model_path).with_suffix(".llama_cpp.npy")
    run = subprocess.run([str(python), str(CHILD), str(model_path), json.dumps([int(t) for t in tokens]), str(out)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode:
        raise AssertionError(f"llama.cpp failed on {model_path} (exit {run.returncode}):\n{run.stderr[-3000:]}")
    return np.load(out)
