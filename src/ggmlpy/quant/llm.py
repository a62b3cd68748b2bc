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
from ..io.llm_gguf import LlmHParams, read_hparams, tensor_shapes
from ..nn.gpt2 import ag_gpt2
from ..nn.layers import ag_embedding, ag_layer_norm_layer
from ..nn.module import Module
from ..nn.llama import LlamaProjection, ag_llama, ag_rms_norm_layer
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


def model_arch(model: ag_llama | ag_gpt2) -> str:
    """llama.cpp's architecture of the model's family ("llama" or "gpt2"), as its files name it."""
    return "gpt2" if isinstance(model, ag_gpt2) else "llama"


def llm_layer(model: ag_llama | ag_gpt2, name: str) -> tuple:
    """(the sub-layer of `model` that holds llama.cpp's tensor `name`, the name's last part:
    "weight" or "bias"): "blk.3.attn_q.weight" is model.blocks[3].attn_q's weight. The model's
    sub-layers carry llama.cpp's names, so the file's names (io.llm_gguf.tensor_shapes) find them."""
    parts = name.split(".")
    owner = model.blocks[int(parts[1])] if parts[0] == "blk" else model
    return getattr(owner, parts[-2]), parts[-1]


NORMS = (ag_rms_norm_layer, ag_layer_norm_layer)


def norm_param(norm, part: str) -> AGTensor:
    """A norm's tensor stored as llama.cpp's `weight` or `bias`: RMSNorm's weight, LayerNorm's gamma
    or beta."""
    if isinstance(norm, ag_layer_norm_layer):
        return norm.gamma if part == "weight" else norm.beta
    return norm.weight


def _set_tensor(model, f: GGUFFile, name: str, device) -> None:
    layer, part = llm_layer(model, name)
    if name == "position_embd.weight":  # read as f32 values whatever its type, as ggml_get_rows gives them
        layer.weight.data = f.data(name).T.astype(np.float64)
    elif isinstance(layer, ag_embedding):
        _set_embedding(layer, f, name, device)
    elif isinstance(layer, NORMS):
        norm_param(layer, part).data = _vector(f, name)
    elif part == "bias":
        layer.b.data = _vector(f, name)
    else:
        _set_projection(layer, f, name, device)


def _model(h: LlmHParams) -> ag_llama | ag_gpt2:
    """The model of the file's architecture and hyper-parameters, before its weights are read."""
    if h.arch == "gpt2":
        return ag_gpt2(h.vocab_size, d_model=h.d_model, n_heads=h.n_heads, n_kv_heads=h.n_kv_heads,
                       n_layers=h.n_layers, d_ff=h.d_ff, context=h.context, eps=h.eps, tied=h.tied)
    return ag_llama(h.vocab_size, d_model=h.d_model, n_heads=h.n_heads, n_kv_heads=h.n_kv_heads,
                    n_layers=h.n_layers, d_ff=h.d_ff, context=h.context, rope_base=h.rope_base,
                    rope_mode=h.rope_mode, eps=h.eps, tied=h.tied)


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
            model = _model(h)
            for name in tensor_shapes(h):
                _set_tensor(model, f, name, device)
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
