"""llama.cpp's side of bench_llama.py, run by llama-cpp-python's own interpreter (never in ggmlpy's
process: both ship a libggml-base.so.0). Reads one JSON request a line on stdin, answers one JSON
line on stdout with the seconds it took, timed here so the pipe is not in the figure:

    {"model": PATH, "threads": N, "what": "decode", "prompt": [...], "n": 64}
        the prompt evaluated, then n tokens fed one at a time, each the argmax of the last
        logits (as llm_generate's greedy loop): seconds per decoded token
    {"model": PATH, "threads": N, "what": "prompt", "prompt": [...]}
        the prompt evaluated in one batch from an empty cache: seconds
    {"what": "info"}
        whether this build offloads to a GPU, and the backends it was built with ("CPU", "CUDA", ...)

A request may add "gpu_layers": the layers llama.cpp offloads (-1: all; default 0, the CPU).
"""
import json
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import GGML_TYPE_F32, Llama

_MODELS: dict = {}


def _llama(path: str, threads: int, gpu_layers: int) -> Llama:
    key = (path, threads, gpu_layers)
    if key not in _MODELS:
        _MODELS[key] = Llama(model_path=path, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads,
                             n_threads_batch=threads, n_gpu_layers=gpu_layers, type_k=GGML_TYPE_F32,
                             type_v=GGML_TYPE_F32, verbose=False)
    return _MODELS[key]


def _info() -> dict:
    """The build's GPU offload and backends, as llama_print_system_info names them ("CPU : SSE3 = 1 |
    ... | CUDA : ARCHS = 890 | ...": a backend is a part with " : " in it)."""
    parts = llama_cpp.llama_print_system_info().decode().split(" | ")
    return {"gpu": bool(llama_cpp.llama_supports_gpu_offload()),
            "backends": [p.split(" : ")[0].strip() for p in parts if " : " in p]}


def _last_logits(llm: Llama) -> np.ndarray:
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))


def serve(req: dict) -> dict:
    if req["what"] == "info":
        return _info()
    llm = _llama(req["model"], int(req["threads"]), int(req.get("gpu_layers", 0)))
    llm.reset()  # n_tokens = 0: the next eval clears the cache from there
    prompt = req["prompt"]
    if req["what"] == "prompt":
        t0 = time.perf_counter()
        llm.eval(prompt)
        return {"seconds": time.perf_counter() - t0}
    llm.eval(prompt)
    tokens = []
    t0 = time.perf_counter()
    token = int(np.argmax(_last_logits(llm)))
    for _ in range(int(req["n"])):
        llm.eval([token])
        tokens.append(token)
        token = int(np.argmax(_last_logits(llm)))
    return {"seconds": (time.perf_counter() - t0) / int(req["n"]), "tokens": tokens}


def main() -> None:
    for line in sys.stdin:
        print(json.dumps(serve(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
