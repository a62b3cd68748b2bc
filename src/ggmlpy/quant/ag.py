"""Quantized weights in the ag_* API: `ag_quantize(model, "q4_K")` freezes ag_linear and
ag_embedding weights into a quantized type for inference.

A quantized ag_linear keeps t(W) as an [in, out] tensor of the quantized type (ggml's rows are
the reduced dimension, as its dot-product kernels need), and runs W %*% x as ggml_mul_mat over
it. Its backward gives the activations their gradient, t(W) %*% g, through ggml_out_prod with
the quantized weight (the CPU backend dequantizes row by row); the weight itself gets none: it
is frozen. A quantized ag_embedding looks its columns up with ggml_get_rows, which dequantizes.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from ..autograd.engine import apply
from ..autograd import ops
from ..autograd.rules import DERIVATIVE_RULES, Rule
from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..nn.layers import ag_embedding, ag_linear
from ..nn.module import Module
from ..tensor import AGTensor
from ..core.quants import ggml_quantize_chunk
from ..core.types import TYPE_NAMES, type_id
from ..runtime.state import STATE

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


# -- primitives -----------------------------------------------------------------------------------
def _matmul_q(ctx, wq, x):
    """t(Wq) %*% x for Wq [in, out] quantized, x [in, n] f32: W %*% x, [out, n]."""
    return checked_lib.ggml_mul_mat(ctx, wq, x)


def _matmul_q_t(ctx, wq, g):
    """Wq %*% g for Wq [in, out] quantized, g [out, n] or [out, n, ...]: t(W) %*% g, [in, n, ...].
    ggml's CPU out_prod broadcasts a quantized weight over no batch axis, so g's columns are
    taken as one [out, n * ...] matrix."""
    ne = [int(g.ne[i]) for i in range(4)]
    g2 = checked_lib.ggml_reshape_2d(ctx, checked_lib.ggml_cont(ctx, g), ne[0], ne[1] * ne[2] * ne[3])
    y = checked_lib.ggml_out_prod(ctx, wq, checked_lib.ggml_cont(ctx, checked_lib.ggml_transpose(ctx, g2)))
    return y if ne[2] == ne[3] == 1 else checked_lib.ggml_reshape_4d(ctx, y, int(y.ne[0]), ne[1], ne[2], ne[3])


# ggml_mul_mat takes an f16 or bf16 weight as it is (converting the activations, as llama.cpp
# computes); ggml's CPU out_prod has no bf16 kernel, so matmul_q_t's weight is cast to f32 first
DERIVATIVE_RULES["matmul_q"] = Rule(_matmul_q, lambda g, c: (None, c.apply("matmul_q_t", c.x(0), g)),
                                    lambda t, c: None if t[1] is None else c.apply("matmul_q", c.x(0), t[1]),
                                    saves=(0,), stored_inputs=(0,))
DERIVATIVE_RULES["matmul_q_t"] = Rule(_matmul_q_t, lambda g, c: (None, c.apply("matmul_q", c.x(0), g)),
                           lambda t, c: None if t[1] is None else c.apply("matmul_q_t", c.x(0), t[1]), saves=(0,))


# -- quantized layers -------------------------------------------------------------------------------
def quantized_tensor(values: ArrayLike, type: int | str, device: str | None = None) -> AGTensor:
    """A frozen AGTensor of R shape values.shape stored as `type`: each column (ggml row) is
    quantized, so nrow must be a whole number of blocks."""
    t = type_id(type, "quantized_tensor")
    if not checked_lib.ggml_is_quantized(t):
        raise GGMLError(f"quantized_tensor: {TYPE_NAMES[t]} is not a quantized type")
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2:
        raise GGMLError(f"quantized_tensor: expected a matrix, got shape {arr.shape}")
    nrow, ncol = arr.shape
    blocks = ggml_quantize_chunk(t, np.ascontiguousarray(arr.T, dtype=np.float32), ncol, nrow)
    return stored_tensor(blocks, t, (nrow, ncol), device)


def stored_tensor(blocks: np.ndarray, type: int, shape: tuple, device: str | None = None) -> AGTensor:
    """A frozen AGTensor of R shape `shape` (ggml's ne) and ggml type `type`, holding `blocks`,
    its bytes as ggml lays them out (a GGUF file's tensor data, a quantizer's output)."""
    dc = STATE.context(device)
    st = dc.persistent.alloc(type, tuple(shape))
    if int(checked_lib.ggml_nbytes(st.ptr)) != blocks.nbytes:
        raise GGMLError(f"stored_tensor: {blocks.nbytes} bytes for a {TYPE_NAMES[type]} tensor of shape "
                        f"{list(shape)}, which takes {int(checked_lib.ggml_nbytes(st.ptr))}")
    dc.sync()
    checked_lib.ggml_backend_tensor_set(st.ptr, ffi.from_buffer(np.ascontiguousarray(blocks)), 0, blocks.nbytes)
    return AGTensor(st, tuple(shape), dc, requires_grad=False)


def stored_blocks(t: AGTensor) -> np.ndarray:
    """The bytes of a tensor as ggml lays them out (stored_tensor's inverse), as flat uint8."""
    raw = np.empty(int(checked_lib.ggml_nbytes(t.storage.ptr)), dtype=np.uint8)
    t.device_context.sync()  # queued ops may still be writing it
    checked_lib.ggml_backend_tensor_get(t.storage.ptr, ffi.from_buffer(raw), 0, raw.nbytes)
    return raw


class QuantizedLinear(ag_linear):
    """An ag_linear whose weight is frozen in a quantized type (`ag_quantize`). `Wt` holds t(W)."""

    def forward(self, x):
        z = apply("matmul_q", self.Wt, ops._ag(x, "ag_linear", "x", like=self.b))
        y = ops.ag_add(z, self.b)
        act = {"relu": ops.ag_relu, "sigmoid": ops.ag_sigmoid, "tanh": ops.ag_tanh, "softmax": ops.ag_softmax,
               "gelu": ops.ag_gelu, "silu": ops.ag_silu}.get(self.activation)
        return act(y) if act else y

    def buffers(self, prefix: str = ""):
        return [(prefix + "Wt", self.Wt)]

    @property
    def qtype(self) -> str:
        return TYPE_NAMES[self.Wt.storage.type]


class QuantizedEmbedding(ag_embedding):
    """An ag_embedding whose table is frozen in a quantized type (`ag_quantize`)."""

    def buffers(self, prefix: str = ""):
        return [(prefix + "weight", self.weight)]

    def unembed(self, h):
        """t(weight) %*% h by ggml's product on the stored type."""
        return apply("matmul_q", self.weight, h)

    @property
    def qtype(self) -> str:
        return TYPE_NAMES[self.weight.storage.type]


def _modules(model):
    yield model
    for child in model.children():
        yield from _modules(child)


def ag_quantize(model: Module, type: int | str = "q4_K", linear: bool = True, embedding: bool = True) -> Module:
    """Freeze the weights of every ag_linear and ag_embedding in `model` into a quantized ggml type
    for inference (in place; returns the model). Forward passes run ggml's quantized kernels and
    gradients still reach the activations; quantized weights are no longer parameters. Biases stay
    f32. A layer whose reduced dimension (ag_linear: in_features, ag_embedding: dim) is not a whole
    number of blocks stays as it is, with a warning."""
    if not isinstance(model, Module):
        raise GGMLError(f"ag_quantize: expected a model (an ag_* layer), got {model.__class__.__name__}")
    t = type_id(type, "ag_quantize")
    name = TYPE_NAMES[t]
    if not checked_lib.ggml_is_quantized(t):
        raise GGMLError(f"ag_quantize: {name} is not a quantized type")
    if checked_lib.ggml_quantize_requires_imatrix(t):
        raise GGMLError(f"ag_quantize: {name} needs an importance matrix; quantize with ggml_quantize_chunk")
    blck = int(checked_lib.ggml_blck_size(t))
    skipped, done = [], 0
    for m in _modules(model):
        if isinstance(m, (QuantizedLinear, QuantizedEmbedding)):
            continue
        if linear and isinstance(m, ag_linear):
            n_in = m.W.shape[1]
            if n_in % blck:
                skipped.append(f"ag_linear({n_in}, {m.W.shape[0]})")
                continue
            m.Wt = quantized_tensor(m.W.numpy().T, t, m.W.device_context.spec)
            del m.W
            m.__class__ = QuantizedLinear
            done += 1
        elif embedding and isinstance(m, ag_embedding):
            if m.dim % blck:
                skipped.append(f"ag_embedding({m.vocab_size}, {m.dim})")
                continue
            m.weight = quantized_tensor(m.weight.numpy(), t, m.weight.device_context.spec)
            m.__class__ = QuantizedEmbedding
            done += 1
    if skipped:
        warnings.warn(f"ag_quantize: {', '.join(skipped)} kept in floating point: {name} needs the reduced "
                      f"dimension to be a multiple of {blck}", stacklevel=2)
    if not done and not skipped:
        raise GGMLError("ag_quantize: the model has no ag_linear or ag_embedding layer to quantize")
    return model


__all__ = ["ag_quantize"]
