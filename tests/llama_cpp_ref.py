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


def _run(args: list, what: str) -> None:
    python = require_llama_cpp()
    run = subprocess.run([str(python), str(CHILD), *map(str, args)], capture_output=True, text=True, timeout=300)
    if run.returncode:
        raise AssertionError(f"llama.cpp failed on {what} (exit {run.returncode}):\n{run.stderr[-3000:]}")


def llama_cpp_logits(model_path, tokens, lora=None) -> np.ndarray:
    """llama.cpp's logits [n_tokens, n_vocab] for `tokens` (f32 KV cache, one thread), with the
    LoRA adapter file `lora` applied (scale 1) when given."""
    out = Path(model_path).with_suffix(".llama_cpp.npy")
    _run([model_path, json.dumps([int(t) for t in tokens]), out] + ([lora] if lora else []), model_path)
    return np.load(out)


def llama_cpp_tokenize(model_path, text: str) -> list:
    """llama.cpp's token ids of `text` with the file's vocabulary (no begin token)."""
    out = Path(model_path).with_suffix(".tokens.json")
    _run([model_path, "--tokenize", text, out], model_path)
    return json.loads(out.read_text())


GREEDY_CHILD = Path(__file__).with_name("llama_cpp_greedy_child.py")


def llama_cpp_greedy(model_path, prompt, n_new: int) -> list:
    """llama.cpp's greedy continuation of `prompt` by n_new tokens (f32 KV cache, one thread)."""
    python = require_llama_cpp()
    run = subprocess.run([str(python), str(GREEDY_CHILD), str(model_path), json.dumps([int(t) for t in prompt]),
                          str(int(n_new))], capture_output=True, text=True, timeout=300)
    if run.returncode:
        raise AssertionError(f"llama.cpp failed on {model_path} (exit {run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])
