"""ONNX's products: MatMul and Gemm, the fused linear layers (bias, GELU, residual, split heads) and
scaled dot-product attention, on ggml's products or ggmlpy's gemm and attention kernels.
"""
from __future__ import annotations

import numpy as np

from ..bindings import ffi
from .onnx_lib import onnx_lib
from .graph import Val, const
from .layout import (binary, broadcast_shape, cont, permute, permuted_source, permuted_view, repeat_to,
                     reshape)
from .op_table import f, op


# -- products -------------------------------------------------------------------------------------------
def _matmul(b, a: Val, bt, b_shape, out_batch=None):
    """A (..., M, K) @ B: `bt` is B transposed to ggml ne [K, N, ...]; returns tensor, ONNX shape."""
    K, N = b_shape[-2], b_shape[-1]
    b.need(a.shape[-1] == K, f"matmul shapes {list(a.shape)} and {list(b_shape)} do not match")
    M = a.shape[-2]
    ab, bb = a.shape[:-2], tuple(b_shape[:-2])
    batch = broadcast_shape(b, ab, bb) if (ab or bb) else ()
    if ab and not bb:  # (..., M, K) @ (K, N): one product of all the rows, not one per batch entry
        rows = int(np.prod(ab, dtype=np.int64)) * M
        t, _ = _matmul(b, Val((rows, K), a.dtype, t=reshape(b, f(b, a), (rows, K))), bt, b_shape)
        return reshape(b, t, ab + (M, N)), ab + (M, N)
    b.need(len(batch) <= 2, "matmul with more than two batch dimensions")
    ta = reshape(b, f(b, a), batch and ((1,) * (len(batch) - len(ab)) + ab + (M, K)) or (M, K))
    if tuple((1,) * (len(batch) - len(ab)) + ab) != batch:
        ta = repeat_to(b, ta, batch + (M, K))
    bt = reshape(b, bt, ((1,) * (len(batch) - len(bb)) + bb + (N, K)) if batch else (N, K))
    return onnx_lib.ggml_mul_mat(b.ctx, bt, ta), batch + (M, N)


def _linear(b, a: Val, w_kn, bias: Val | None = None):
    """A (..., M, K) @ W (K, N) for a constant f32 W on ggml's CPU backend with ggmlpy's gemm kernel:
    W kept in its own row-major layout (ggml ne [N, K]) is the first operand of one OpenBLAS product
    C = W X (column-major, N x rows), which lands in the output's layout; all rows of all batches at
    once. OpenBLAS runs this orientation faster than the one ggml's BLAS backend uses (on a
    transformer's projections; docs/benchmarks.md), and no ggml copy is made. A bias (N values) is added in the same
    node (conv.c's linear). None where it does not apply."""
    k = b.kernels
    if k is None or k.gemm is None or (b.f16_weights and w_kn.size >= 256) or a.rank < 2 or w_kn.ndim != 2:
        return None
    K, N = w_kn.shape
    b.need(a.shape[-1] == K, f"matmul shapes {list(a.shape)} and {list(w_kn.shape)} do not match")
    rows = int(np.prod(a.shape[:-1], dtype=np.int64))
    if max(rows, K, N) >= 1 << 31:  # past BLAS's int sizes: ggml's product
        return None
    x = reshape(b, f(b, a), (rows, K))  # ggml [K, rows]
    shape = a.shape[:-1] + (N,)
    bt = None
    if bias is not None:
        if k.linear is None or bias.size != N or bias.rank > len(shape):
            return None
        bt = (b.weight(np.asarray(bias.const, dtype=np.float32).reshape(N)) if bias.is_const
              else reshape(b, b.tensor(bias), (N,)))
    if k.linear_packed is not None:  # AVX2 or AVX-512: the weights packed once, here
        wp = b.weight(k.pack_linear(np.asarray(w_kn, dtype=np.float32)))
        t = b.kernel_node(k.linear_packed(b.ctx, wp, x, N, bt), "linear")
        b.packed_linears[int(ffi.cast("uintptr_t", t))] = (wp, x, N, bt)
        return reshape(b, t, shape), shape
    w = b.weight(np.ascontiguousarray(w_kn, dtype=np.float32))  # ggml [N, K]
    if bt is not None:
        return reshape(b, b.kernel_node(k.linear(b.ctx, w, x, bt), "linear"), shape), shape
    return reshape(b, b.kernel_node(k.gemm(b.ctx, w, x), "gemm"), shape), shape


def linear_bias(b, node, ins, at, bias: Val):
    """MatMul(x, W) + bias as one node (fusion.find_linear_bias); None where that does not apply."""
    a, w = ins
    if not w.is_const or w.rank != 2 or a.rank < 2 or a.is_const or bias.rank > a.rank:
        return None
    out = _linear(b, a, w.const, bias)
    return None if out is None else [b.out(out[0], out[1], a.dtype)]


def _packed_args(b, y: Val):
    """The arguments of the packed linear layer (_linear) whose output y is, in the same memory order
    (through reshapes and permutations that leave it contiguous), or None."""
    t = y.t
    if t is None or not onnx_lib.ggml_is_contiguous(t):
        return None
    while t.op in (onnx_lib.GGML_OP_RESHAPE, onnx_lib.GGML_OP_PERMUTE):
        t = t.src[0]
    return b.packed_linears.get(int(ffi.cast("uintptr_t", t)))


def linear_gelu(b, x: Val):
    """GELU(x) where x is a packed linear layer's output (_linear) that nothing else reads: the same
    product with the GELU applied in its node, while each block is in cache. None where x is not one."""
    args = _packed_args(b, x)
    if args is None:
        return None
    y = b.kernel_node(b.kernels.linear_packed(b.ctx, *args, gelu=True), "linear_gelu")
    return b.out(reshape(b, y, x.shape), x.shape, x.dtype)


def linear_residual(b, y: Val, r: Val):
    """y + r where y is a packed linear layer's output (_linear) that nothing else reads and r a value
    of y's shape and type (a residual connection): the same product adding r in its node. None where
    that does not apply."""
    args = _packed_args(b, y)
    if args is None or r.is_const or r.shape != y.shape or r.dtype != y.dtype:
        return None
    wp, x, N, bias = args
    rt = reshape(b, f(b, r), (r.size // N, N))
    t = b.kernel_node(b.kernels.linear_packed(b.ctx, wp, x, N, bias, residual=rt), "linear_residual")
    return b.out(reshape(b, t, y.shape), y.shape, y.dtype)


def linear_split(b, x: Val, perm):
    """Transpose(x, perm) where x is a packed linear layer's output (_linear, [T, P * D] as rows) that
    nothing else reads and the transposition takes its rows apart into [P, T, D] (an attention's
    stacked q, k, v, axes of one anywhere): the layer's node writes the P parts one after another,
    which is the result, with no copy. None where the transposition is anything else."""
    args = _packed_args(b, x)
    if args is None:
        return None
    wp, xin, N, bias = args
    shape = tuple(x.shape[p] for p in perm)
    view = permuted_view(b, b.tensor(x), perm, x.shape)
    dims = [(int(view.ne[i]), int(view.nb[i])) for i in range(4) if view.ne[i] != 1]  # ggml order: inner first
    if len(dims) != 3:
        return None
    (D, nd), (T, nt), (P, npart) = dims
    if P * D != N or T * N != x.size or D % b.kernels.packed_rows or (nd, nt, npart) != (4, 4 * N, 4 * D):
        return None
    y = b.kernel_node(b.kernels.linear_packed(b.ctx, wp, xin, N, bias, split=D), "linear_split")
    return b.out(reshape(b, y, shape), shape, x.dtype)


def _strided(b, v: Val):
    """v's f32 ggml tensor as a reader through strides takes it: a Transpose's copy is read in its
    source's place (the permuted view; the copy then leaves the graph unless another node reads it)."""
    t = b.tensor(v)
    src = permuted_source(t)
    return t.src[0] if src is not None and t.src[0].type == onnx_lib.GGML_TYPE_F32 else t


def attention(b, q: Val, kt: Val, v: Val, mask: Val | None, scale: float, softmax_axis: int,
              heads_swapped: bool = False):
    """softmax(scale Q K^T + mask) V as one node (fusion.find_attention; attention.c): Q (..., L, D),
    K^T (..., D, S), V (..., S, E), the batch dimensions (at most two) broadcasting (each equal or 1), the mask
    broadcasting to the scores (..., L, S), the Softmax over their last axis. None where that does
    not apply (the pattern's nodes are then built one by one). heads_swapped: the result's only reader
    is a Transpose to (..., L, H, E) (fusion.heads_transposed): the node writes that layout, and the
    result is a view of it, which the Transpose turns back without a copy."""
    k = b.kernels
    if k is None or k.attention is None or mask is not None and mask.dtype != 1:
        return None
    if any(not 2 <= x.rank <= 4 or x.dtype != 1 for x in (q, kt, v)):
        return None
    L, D = q.shape[-2:]
    S, E = kt.shape[-1], v.shape[-1]
    if kt.shape[-2] != D or v.shape[-2] != S:
        return None
    nb = max(x.rank for x in (q, kt, v)) - 2
    padded = [(1,) * (nb + 2 - x.rank) + x.shape[:-2] for x in (q, kt, v)]  # ggml's ne past the rank are 1
    batch = tuple(max(d) for d in zip(*padded))
    if any(d not in (1, m) for p in padded for d, m in zip(p, batch)):
        return None
    scores = batch + (L, S)
    if int(softmax_axis) not in (-1, len(scores) - 1):
        return None
    if mask is not None and (mask.rank > len(scores) or
                             any(d not in (1, s) for d, s in zip(mask.shape[::-1], scores[::-1]))):
        return None
    mt = _strided(b, mask) if mask is not None else None
    inner = heads_swapped and nb >= 1
    t = b.kernel_node(k.attention(b.ctx, _strided(b, q), _strided(b, kt), _strided(b, v), mt, scale, inner),
                      "attention")
    if inner:  # ne [E, H, L, B] seen as [E, L, H, B]
        t = onnx_lib.ggml_permute(b.ctx, t, 0, 2, 1, 3)
    shape = batch + (L, E)
    return [b.out(t, shape, q.dtype)]


def _matmul_gemm(b, a: Val, w: Val):
    """A (..., M, K) @ B (..., K, N) for a computed B on ggml's CPU backend with ggmlpy's gemm kernel: one
    product per batch matrix, C = B A in column-major terms, reading B as it is (ggml's mul_mat would
    need it transposed: a copy) and an operand that is a Transpose's copy (of its last two axes) in
    place, through the product's transposition flag. None where it does not apply."""
    k = b.kernels
    if k is None or k.gemm is None or a.rank < 2 or w.rank < 2:
        return None
    K, N = w.shape[-2:]
    M = a.shape[-2]
    b.need(a.shape[-1] == K, f"matmul shapes {list(a.shape)} and {list(w.shape)} do not match")
    if max(M, K, N) >= 1 << 31:  # past BLAS's int sizes: ggml's product
        return None
    ab, bb = a.shape[:-2], w.shape[:-2]
    batch = broadcast_shape(b, ab, bb) if (ab or bb) else ()
    if len(batch) > 2:
        return None

    def operand(v, shape):  # (tensor, transposed): a swap of ggml's first two axes is read in place
        t = reshape(b, f(b, v), (1,) * (len(batch) - len(shape) + 2) + shape)
        src = permuted_source(t)
        if src is not None and src[1] == (1, 0, 2, 3) and src[0].type == onnx_lib.GGML_TYPE_F32:
            return src[0], True
        return t, False
    ta, a_t = operand(a, ab + (M, K))  # ggml [K, M, ...]
    tb, b_t = operand(w, bb + (K, N))  # ggml [N, K, ...]
    shape = batch + (M, N)
    return reshape(b, b.kernel_node(k.gemm(b.ctx, tb, ta, b_t, a_t), "gemm"), shape), shape


def _transposed_b(b, v: Val):
    """B (..., K, N) as ggml ne [K, N, ...] (numpy shape (..., N, K)): free for constants."""
    if v.is_const:
        arr = np.swapaxes(np.asarray(v.const, dtype=np.float32), -1, -2)
        return cont(b, b.tensor(const(np.ascontiguousarray(arr)), f16_ok=True))
    perm = list(range(v.rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return permute(b, b.tensor(v), perm)


@op("MatMul")
def _matmul_op(b, node, ins, at):
    a, w = ins
    squeeze = []
    if a.rank == 1:
        a = Val((1,) + a.shape, a.dtype, a.const, a.t)
        squeeze.append(-2)
    if w.rank == 1:
        w = Val(w.shape + (1,), w.dtype, None if w.const is None else w.const.reshape(-1, 1), w.t)
        squeeze.append(-1)
    fast = _linear(b, a, w.const) if w.is_const and w.rank == 2 else _matmul_gemm(b, a, w) if not w.is_const else None
    t, shape = fast or _matmul(b, a, _transposed_b(b, w), w.shape)
    if squeeze:
        shape = tuple(d for k, d in enumerate(shape) if k - len(shape) not in squeeze)
        t = reshape(b, t, shape)
    return [b.out(t, shape, a.dtype)]


@op("Gemm")
def _gemm(b, node, ins, at):
    A, B = ins[0], ins[1]
    C = ins[2] if len(ins) > 2 else None
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    if int(at.get("transA", 0)):
        A = Val(A.shape[::-1], A.dtype, t=permute(b, b.tensor(A), (1, 0)))
    fast = None
    if B.is_const and B.rank == 2:
        w_kn = B.const.T if int(at.get("transB", 0)) else B.const
        if C is not None and alpha == 1.0 and beta == 1.0 and C.size == w_kn.shape[1] and C.rank <= 2:
            fast = _linear(b, A, w_kn, C)  # the bias in the product's node
            if fast is not None:
                return [b.out(fast[0], fast[1], A.dtype)]
        fast = _linear(b, A, w_kn)
    if fast is not None:
        t, shape = fast
    else:
        if int(at.get("transB", 0)):  # B given as (N, K): already ggml's [K, N]
            bt = cont(b, b.tensor(B, f16_ok=True))
            b_shape = B.shape[::-1]
        else:
            bt, b_shape = _transposed_b(b, B), B.shape
        t, shape = _matmul(b, A, bt, b_shape)
    if alpha != 1.0:
        t = onnx_lib.ggml_scale(b.ctx, t, alpha)
    if C is not None and beta != 0.0:
        if beta != 1.0:
            C = Val(C.shape, C.dtype, t=onnx_lib.ggml_scale(b.ctx, f(b, C), beta))
        t, shape = binary(b, lambda c, x, y: onnx_lib.ggml_add(c, x, y), Val(shape, A.dtype, t=t), C, True)
    return [b.out(t, shape, A.dtype)]
