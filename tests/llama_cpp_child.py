"""Run by llama-cpp-python's own interpreter (scripts/llama_cpp_env.py), never inside ggmlpy's
process (both ship a libggml-base.so.0): llama.cpp's logits of every position of a token sequence,
or its tokenization of a text.

    python llama_cpp_child.py MODEL.gguf '[1, 2, 3]' OUT.npy [ADAPTER.gguf]
    python llama_cpp_child.py MODEL.gguf --tokenize TEXT OUT.json

The first writes [n_tokens, n_vocab] float32, computed with an f32 KV cache on one thread, with
the LoRA adapter applied at scale 1 when one is given; the second the token ids of TEXT (UTF-8),
no begin token, special tokens not parsed."""
import json
import sys

import numpy as np
from llama_cpp import GGML_TYPE_F32, Llama


def main(model_path: str, tokens: list, out: str, lora_path: str | None = None) -> None:
    llm = Llama(model_path=model_path, n_ctx=max(64, len(tokens)), n_batch=max(64, len(tokens)),
                logits_all=True, n_threads=1, n_threads_batch=1, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32,
                lora_path=lora_path, verbose=False)
    llm.eval(tokens)
    np.save(out, np.asarray(llm.scores[:len(tokens)], dtype=np.float32))


def tokenize(model_path: str, text: str, out: str) -> None:
    llm = Llama(model_path=model_path, vocab_only=True, verbose=False)
    with open(out, "w") as f:
        json.dump(llm.tokenize(text.encode(), add_bos=False, special=False), f)


if __name__ == "__main__":
    if sys.argv[2] == "--tokenize":
        tokenize(sys.argv[1], sys.argv[3], sys.argv[4])
    else:
        main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
