"""llama.cpp's model files as ag_* models: `llm_load(path)` reads a GGUF of a supported
architecture (io/llm_gguf.py reads and checks its hyper-parameters and tensor table) into the
model family it belongs to (architecture `llama`: nn.llama.ag_llama; `gpt2`: nn.gpt2.ag_gpt2);
llm_decode.py runs it as llama.cpp does (llm_logits, llm_generate).

Weights keep the type the file stores them in. f32 tensors become the model's parameters (they
train like any other); every other type (f16, bf16, q8_0, q4_0, q4_K, ...) is uploaded as the
file's bytes and frozen, and its products run as ggml_mul_mat on the stored type, as llama.cpp
computes them (the quantized types' dot products quantize the activations too). Norm weights
are f32 in llama.cpp's files and stay parameters, as do biases; gpt2's position table is read
as f32 values whatever its type (ggml_get_rows dequantizes it so in llama.cpp too).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from ..autograd import ops
from ..autograd.engine import apply
from ..errors import GGMLError
from ..io.gguf_file import GGUFFile
from ..io.llm_gguf import read_hparams
from ..nn.gpt2 import ag_gpt2
from ..nn.module import Module
from ..nn.llama import LlamaProjection, ag_llama
from ..core.checked import checked_lib
from ..core.types import TYPE_NAMES
from ..runtime.state import STATE, ag_device
from ..tensor import AGTensor
from .ag import QuantizedEmbedding, stored_tensor

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

F32 = checked_lib.GGML_TYPE_F32


class FrozenProjection(LlamaProjection):
    """A LlamaProjection whose weight is frozen in a file's storage type: `Wt` holds t(W), [in, out]
    as ggml lays a GGUF projection out, and forward is ggml_mul_mat over it (`matmul_q`)."""

    def forward(self, x: AGTensor) -> AGTensor:
        """W %*% x (+ b) through ggml's product on the stored type."""
        y = apply("matmul_q", self.Wt, x)
        return y if self.b is None else ops.ag_add(y, self.b)

    def buffers(self, prefix: str = "") -> list:
        return [(prefix + "Wt", self.Wt)]

    @property
    def out_features(self) -> int:
        return self.Wt.shape[1]

    @property
    def qtype(self) -> str:
        return TYPE_NAMES[self.Wt.storage.type]

    def extra_repr(self) -> str:
        return f"{self.Wt.shape[0]}, {self.Wt.shape[1]}, {self.qtype}"


def _set_projection(proj: LlamaProjection, f: GGUFFile, name: str, device) -> None:
    info = f.info(name)
    if info.type == F32:
        proj.W.data = f.data(name).astype(np.float64)  # ne [in, out] read as numpy (out, in): W itself
        return
    proj.Wt = stored_tensor(f.raw(name), info.type, tuple(info.ne), device)
    del proj.W
    proj.__class__ = FrozenProjection


def _vector(f: GGUFFile, name: str) -> np.ndarray:
    return f.data(name).astype(np.float64).reshape(-1, 1)


def _set_embedding(emb, f: GGUFFile, name: str, device) -> None:
    info = f.info(name)
    if info.type == F32:
        emb.weight.data = f.data(name).T.astype(np.float64)
    else:
        emb.weight = stored_tensor(f.raw(name), info.type, tuple(info.ne), device)
        emb.__class__ = QuantizedEmbedding


def _load_llama(f: GGUFFile, h, device) -> ag_llama:
    model = ag_llama(h.vocab_size, d_model=h.d_model, n_heads=h.n_heads, n_kv_heads=h.n_kv_heads,
                     n_layers=h.n_layers, d_ff=h.d_ff, context=h.context, rope_base=h.rope_base,
                     rope_mode=h.rope_mode, eps=h.eps, tied=h.tied)
    _set_embedding(model.token_embd, f, "token_embd.weight", device)
    for i, block in enumerate(model.blocks):
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            _set_projection(getattr(block, name), f, f"blk.{i}.{name}.weight", device)
        block.attn_norm.weight.data = _vector(f, f"blk.{i}.attn_norm.weight")
        block.ffn_norm.weight.data = _vector(f, f"blk.{i}.ffn_norm.weight")
    model.output_norm.weight.data = _vector(f, "output_norm.weight")
    if not h.tied:
        _set_projection(model.output, f, "output.weight", device)
    return model


def _load_gpt2(f: GGUFFile, h, device) -> ag_gpt2:
    model = ag_gpt2(h.vocab_size, d_model=h.d_model, n_heads=h.n_heads, n_kv_heads=h.n_kv_heads,
                    n_layers=h.n_layers, d_ff=h.d_ff, context=h.context, eps=h.eps, tied=h.tied)
    _set_embedding(model.token_embd, f, "token_embd.weight", device)
    model.position_embd.weight.data = f.data("position_embd.weight").T.astype(np.float64)
    for i, block in enumerate(model.blocks):
        for name in ("attn_qkv", "attn_output", "ffn_up", "ffn_down"):
            proj = getattr(block, name)
            proj.b.data = _vector(f, f"blk.{i}.{name}.bias")
            _set_projection(proj, f, f"blk.{i}.{name}.weight", device)
        for name in ("attn_norm", "ffn_norm"):
            norm = getattr(block, name)
            norm.gamma.data, norm.beta.data = _vector(f, f"blk.{i}.{name}.weight"), _vector(f, f"blk.{i}.{name}.bias")
    model.output_norm.gamma.data = _vector(f, "output_norm.weight")
    model.output_norm.beta.data = _vector(f, "output_norm.bias")
    if not h.tied:
        _set_projection(model.output, f, "output.weight", device)
    return model


def llm_load(path: str | os.PathLike[str], device: str | None = None) -> ag_llama | ag_gpt2:
    """A llama.cpp GGUF model file as an ag_* model on `device` (default: the current one).
    Architecture `llama` gives an ag_llama, `gpt2` an ag_gpt2; its `hparams` (an LlmHParams) hold
    what the file's metadata says (io.llm_gguf.LlmHParams), its tokenizer.* entries (the vocabulary)
    included. Weights stay in the file's types (see the module's notes). An ag_llama computes with
    the file's context length in mind but sets no hard limit on the tokens given; an ag_gpt2 has
    that many learned positions."""
    device = STATE.context(device).spec  # the device now current, fixed for every tensor below
    with GGUFFile(path) as f:
        h = read_hparams(f)
        previous = ag_device(device)  # the model's own parameters on `device` too, beside its stored weights
        try:
            model = (_load_gpt2 if h.arch == "gpt2" else _load_llama)(f, h, device)
        finally:
            ag_device(previous)
        model.hparams = h
    return model


def checked_token_ids(model: Module, token_ids: ArrayLike, what: str) -> np.ndarray:
    """token_ids as a 1-D integer array for `model` (an ag_llama or ag_gpt2), or GGMLError naming `what`."""
    if not isinstance(model, (ag_llama, ag_gpt2)):
        raise GGMLError(f"{what}: expected a model from llm_load (an ag_llama or ag_gpt2), got "
                        f"{type(model).__name__}")
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu":
        raise GGMLError(f"{what}: token_ids must be a non-empty 1-D sequence of integers, got "
                        f"shape {list(ids.shape)}, dtype {ids.dtype}")
    vocab = model.token_embd.vocab_size
    if ids.min() < 0 or ids.max() >= vocab:
        raise GGMLError(f"{what}: token ids must lie in 0..{vocab - 1}, got {int(ids.min())}..{int(ids.max())}")
    return ids


__all__ = ["llm_load"]
