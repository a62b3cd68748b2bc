"""Run by llama-cpp-python's own interpreter (scripts/llama_cpp_env.py), never inside ggmlpy's
process (both ship a libggml-base.so.0): llama.cpp's logits of every position of a token sequence.

    python llama_cpp_child.py MODEL.gguf '[1, 2, 3]' OUT.npy

writes [n_tokens, n_vocab] float32, computed with an f32 KV cache on one thread."""
import json
import sys

import numpy as np
from llama_cpp import GGML_TYPE_F32, Llama


def main(model_path: str, tokens: list, out: str) -> None:
    llm = Llama(model_path=model_path, n_ctx=max(64, len(tokens)), n_batch=max(64, len(tokens)),
                logits_all=True, n_threads=1, n_threads_batch=1, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
                verbose=False)
    llm.eval(tokens)
    np.save(out, np.asarray(llm.scores[:len(tokens)], dtype=np.float32))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])
