"""Run by llama-cpp-python's own interpreter (scripts/llama_cpp_env.py), never inside ggmlpy's
process (both ship a libggml-base.so.0): llama.cpp's greedy continuation of a prompt.

    python llama_cpp_greedy_child.py MODEL.gguf '[1, 2, 3]' N_NEW

prints the N_NEW token ids as JSON: the prompt evaluated in one batch, then one token at a time,
each the first largest logit (llama.cpp's greedy sampler's choice), f32 KV cache, one thread."""
import json
import sys

import numpy as np
from llama_cpp import GGML_TYPE_F32, Llama


def main(model_path: str, prompt: list, n_new: int) -> None:
    n_ctx = len(prompt) + n_new
    llm = Llama(model_path=model_path, n_ctx=max(64, n_ctx), n_batch=max(64, len(prompt)), n_threads=1,
                n_threads_batch=1, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, verbose=False)
    llm.eval(prompt)
    out = []
    for _ in range(n_new):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))  # the last output's
        token = int(np.argmax(logits))
        out.append(token)
        if len(out) < n_new:
            llm.eval([token])
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))
