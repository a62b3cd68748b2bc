"""Runs the ```python blocks of documentation pages; tests/test_doc_examples.py starts it.

stdin: JSON {"workdir": folder, "timeout": seconds per page,
             "pages": [{"page": name, "blocks": [[line, source, [needs]], ...]}, ...]}.
stdout: one JSON object per page, {"page", "ok", "ran": [lines], "skipped": [[line, need]], "error",
        "seconds", "output"}.

ggmlpy is imported once, here; each page then runs in a process forked from this one, in a folder of
its own, so pages share the import time but no state (one page's ag_device(), seed or files never
reach the next). Forking is safe because this process only imports: ggml's OpenMP threads start at
the first compute, which happens in the forked page, never here.
"""
import importlib.util
import json
import os
import signal
import socket
import sys
import time
import traceback

import numpy  # noqa: F401  (imported before the fork, like ggmlpy: each page finds it loaded)

import ggmlpy
from llama_cpp_ref import python_path  # beside this file: where scripts/llama_cpp_env.py builds llama.cpp

_WITHOUT = {n.strip() for n in os.environ.get("GGMLPY_DOCS_WITHOUT", "").split(",") if n.strip()}


def _has_backend(kind: str) -> bool:
    return any(d.backend.lower() == kind for d in ggmlpy.devices())


def _rpc_server_listening() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 50052), timeout=0.2):
            return True
    except OSError:
        return False


def _llama_cpp() -> bool:
    """Whether llama-cpp-python is built (scripts/llama_cpp_env.py); its interpreter is given to the
    pages as $LLAMA_CPP_PYTHON, to run in a process of its own (both libraries ship a
    libggml-base.so.0, and one process would share whichever loaded first)."""
    if not (python_path().parent.parent / "installed.txt").exists():
        return False
    os.environ["LLAMA_CPP_PYTHON"] = str(python_path())
    return True


_CHECKS = {
    "torch": lambda: importlib.util.find_spec("torch") is not None,
    "vulkan": lambda: _has_backend("vulkan"),
    "cuda": lambda: _has_backend("cuda"),
    "rpc-server": _rpc_server_listening,
    "sklearn": lambda: importlib.util.find_spec("sklearn") is not None,
    "anndata": lambda: importlib.util.find_spec("anndata") is not None,
    "llama-cpp": _llama_cpp,
}


def _available(need: str, seen: dict) -> bool:
    if need not in seen:
        seen[need] = need not in _WITHOUT and _CHECKS[need]()
    return seen[need]


def _run_page(page: dict, folder: str, result_path: str, timeout: int) -> None:
    """The forked process: run the page's blocks in order in one namespace, write the result, exit."""
    signal.alarm(timeout)                      # SIGALRM ends a page that hangs
    os.chdir(folder)
    result = {"page": page["page"], "ok": False, "ran": [], "skipped": [], "error": None}
    ns = {"__name__": "__main__"}
    seen: dict = {}
    code = 1
    try:
        for line, src, needs in page["blocks"]:
            missing = [n for n in needs if not _available(n, seen)]
            if missing:
                result["skipped"].append([line, missing[0]])
                continue
            print(f"--- {page['page']}:{line}", flush=True)
            exec(compile("\n" * (line - 1) + src, page["page"], "exec"), ns)
            result["ran"].append(line)
        result["ok"], code = True, 0
    except BaseException:                      # noqa: BLE001  (the page's error is the test's result)
        result["error"] = traceback.format_exc()
    with open(result_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    job = json.load(sys.stdin)
    for i, page in enumerate(job["pages"]):
        folder = os.path.join(job["workdir"], f"page{i}")
        os.makedirs(folder)
        log, result_path = os.path.join(folder, "_output.log"), os.path.join(folder, "_result.json")
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            _run_page(page, folder, result_path, job["timeout"])
        _, status = os.waitpid(pid, 0)
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        else:
            how = (f"killed by signal {os.WTERMSIG(status)}" + (f" (over {job['timeout']} s)"
                   if os.WTERMSIG(status) == signal.SIGALRM else "")) if os.WIFSIGNALED(status) \
                else f"exit status {os.WEXITSTATUS(status)}"
            result = {"page": page["page"], "ok": False, "ran": [], "skipped": [], "error": f"the page's process: {how}"}
        result["seconds"] = round(time.perf_counter() - start, 2)
        with open(log) as f:
            result["output"] = f.read()[-6000:]
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
