"""An ag_llama or ag_gpt2 as a llama.cpp model file: `llm_save(model, path, vocab=, dtype=)` writes
what llm_load reads and llama.cpp runs (architecture `llama` or `gpt2`), from a model llm_load gave
or one built and trained in ggmlpy.

The hyper-parameters come from the model itself, under the keys llm_load reads, and the tensors
are those it reads, under the same names (io/llm_gguf.py names both; quant/llm.py's llm_layer
finds each in the model). Weights are written as the model holds them (dtype=None: f32
parameters as f32, weights frozen in a file's type as their bytes, unchanged), or all as one
type: "f32", "f16", "bf16" or a quantized type, through ggml's own quantizer
(`ggml_quantize_chunk`), as llama.cpp's quantize tool computes. The norm weights and biases stay
f32, as llama.cpp keeps every one-dimensional tensor, and so does gpt2's position table, which
llama.cpp's quantize tool leaves unquantized.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..core.checked import checked_lib
from ..core.quants import ggml_quantize_chunk
from ..core.types import TYPE_NAMES, type_id
from ..errors import GGMLError
from ..io.llm_gguf import SUPPORTED, LlmHParams, hparam_keys, tensor_shapes
from ..io.llm_write import byte_vocab, char_vocab, write_llm_gguf
from ..nn.gpt2 import ag_gpt2
from ..nn.layers import ag_embedding
from ..nn.llama import LlamaProjection, ag_llama
from ..tensor import AGTensor
from .ag import QuantizedEmbedding, stored_blocks
from .llm import NORMS, FrozenProjection, llm_layer, model_arch, norm_param

F32 = checked_lib.GGML_TYPE_F32


def _dtype(dtype) -> int | None:
    if dtype is None:
        return None
    t = type_id(dtype, "llm_save")
    name = TYPE_NAMES[t]
    if name not in ("f32", "f16", "bf16") and not checked_lib.ggml_is_quantized(t):
        raise GGMLError(f"llm_save: dtype {name!r} is not a weight type (f32, f16, bf16 or a quantized type)")
    if checked_lib.ggml_is_quantized(t) and checked_lib.ggml_quantize_requires_imatrix(t):
        raise GGMLError(f"llm_save: {name} needs an importance matrix, which llm_save does not compute")
    return t


def _matrix(name: str, stored: AGTensor | None, values, dtype: int | None) -> tuple:
    """(name, array, ggml type or None) of a weight matrix: `stored`, a tensor in a file's type
    (ne [in, out]), or `values` (numpy (out, in), f32 parameters), written as `dtype`."""
    if stored is not None and (dtype is None or dtype == stored.storage.type):
        blocks = stored_blocks(stored)
        return name, blocks.reshape(stored.shape[1], -1), stored.storage.type
    if stored is not None:
        values = stored.numpy().T  # dequantized by ggml: R shape [in, out]
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype is None or dtype == F32:
        return name, values, None
    n_per_row = values.shape[1]
    block = int(checked_lib.ggml_blck_size(dtype))
    if n_per_row % block:
        raise GGMLError(f"llm_save: {name} has rows of {n_per_row} values, not a whole number of {TYPE_NAMES[dtype]} "
                        f"blocks of {block}; choose another dtype")
    if not np.isfinite(values).all():
        raise GGMLError(f"llm_save: {name} holds NaN or infinite values")
    blocks = ggml_quantize_chunk(dtype, values, values.shape[0], n_per_row)
    return name, blocks.reshape(values.shape[0], -1), dtype


def _projection(name: str, proj, dtype: int | None) -> tuple:
    if isinstance(proj, FrozenProjection):
        return _matrix(name, proj.Wt, None, dtype)
    if type(proj) is LlamaProjection:
        return _matrix(name, None, proj.W.numpy(), dtype)
    raise GGMLError(f"llm_save: {name} is a {type(proj).__name__}, not a plain projection: merge LoRA adapters "
                    "into the weights first (lora_merge), or save them alone (llm_save_lora)")


def _vector(name: str, weight: AGTensor) -> tuple:
    return name, weight.numpy().reshape(-1), None


def _embedding(emb: ag_embedding, dtype: int | None) -> tuple:
    if isinstance(emb, QuantizedEmbedding):  # ne [d, vocab]: rows are columns of the R-shape table
        return _matrix("token_embd.weight", emb.weight, None, dtype)
    return _matrix("token_embd.weight", None, emb.weight.numpy().T, dtype)


def _vocab_keys(model: ag_llama | ag_gpt2, vocab, n_vocab: int) -> dict:
    if vocab is None:
        kept = getattr(getattr(model, "hparams", None), "vocab", None)
        if not kept:
            raise GGMLError("llm_save: the model has no vocabulary of its own (it was not loaded from a llama.cpp "
                            "file): give vocab=, the text of each token id, or vocab='bytes' for a byte model")
        keys = dict(kept)
    elif isinstance(vocab, str) and vocab == "bytes":
        keys = byte_vocab()
    elif isinstance(vocab, dict):
        if not all(isinstance(k, str) and k.startswith("tokenizer.") for k in vocab):
            raise GGMLError("llm_save: a vocab dict holds llama.cpp's tokenizer.* metadata, keyed by those names")
        keys = dict(vocab)
    else:
        keys = char_vocab(vocab)
    tokens = keys.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens) != n_vocab:
        raise GGMLError(f"llm_save: the vocabulary has {0 if tokens is None else len(tokens)} tokens, the model "
                        f"{n_vocab}")
    return keys


def _hparams(model: ag_llama | ag_gpt2) -> LlmHParams:
    """What a file says of `model`: the hyper-parameters llm_load would read back."""
    arch = model_arch(model)
    b = model.blocks[0]
    if b.rope_mode != SUPPORTED[arch]:
        raise GGMLError(f"llm_save: architecture {arch!r} rotates with llama.cpp's normal mode (rope_mode 0); this "
                        f"model uses mode {b.rope_mode}")
    same = {(x.d_model, x.n_heads, x.n_kv_heads, x.rope_base, x.ffn_up.out_features, x.attn_norm.eps, x.ffn_norm.eps)
            for x in model.blocks}
    if len(same) != 1 or b.attn_norm.eps != model.output_norm.eps:
        raise GGMLError("llm_save: the model's layers differ in their hyper-parameters; a llama.cpp file has one set")
    return LlmHParams(arch=arch, vocab_size=model.token_embd.vocab_size, d_model=b.d_model, n_layers=len(model.blocks),
                      n_heads=b.n_heads, n_kv_heads=b.n_kv_heads, d_ff=b.ffn_up.out_features, context=model.context,
                      rope_base=b.rope_base, rope_mode=b.rope_mode, eps=b.attn_norm.eps, tied=model.output is None)


def _tensor(model, name: str, dtype: int | None) -> tuple:
    """(name, array, ggml type or None) of llama.cpp's tensor `name` as the model holds it."""
    layer, part = llm_layer(model, name)
    if name == "position_embd.weight":
        return _matrix(name, None, layer.weight.numpy().T, None)
    if isinstance(layer, ag_embedding):
        return _embedding(layer, dtype)
    if isinstance(layer, NORMS):
        return _vector(name, norm_param(layer, part))
    if part == "bias":
        return _vector(name, layer.b)
    return _projection(name, layer, dtype)


def llm_save(model: ag_llama | ag_gpt2, path: str | os.PathLike[str],
             vocab: str | Sequence[str] | dict | None = None, dtype: str | int | None = None) -> str:
    """Write `model` (an ag_llama or ag_gpt2: from llm_load, or built and trained in ggmlpy) as a
    llama.cpp GGUF model file of architecture `llama` or `gpt2`, atomically; returns the path.

    `vocab`: None keeps the vocabulary of the file the model was loaded from; a list of strings
    (or one string of characters) is the text of each token id, written as a SentencePiece-style
    vocabulary (io.llm_write.char_vocab, which says what llama.cpp makes of it); "bytes" a byte
    model's 256 ids; a dict, tokenizer.* metadata written as given. `dtype`: None writes each
    weight as the model holds it; "f32", "f16", "bf16", "q8_0", "q4_K", ... writes every weight
    matrix in that type (norms, biases and gpt2's position table stay f32)."""
    if not isinstance(model, (ag_llama, ag_gpt2)):
        raise GGMLError(f"llm_save: expected an ag_llama or ag_gpt2 (from llm_load, or built in ggmlpy), got "
                        f"{type(model).__name__}")
    t = _dtype(dtype)
    h = _hparams(model)
    keys = {**hparam_keys(h), **_vocab_keys(model, vocab, h.vocab_size)}
    tensors = [_tensor(model, name, t) for name in tensor_shapes(h)]
    return write_llm_gguf(path, h.arch, keys, tensors, "llm_save")


__all__ = ["llm_save"]
