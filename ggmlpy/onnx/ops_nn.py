"""ONNX operators: products, convolutions, pooling, normalisations, reductions, softmax, resize, pad."""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..bindings import ffi
from .safe import lib
from .graph import Val, const
from .layout import (binary, broadcast_shape, cont, pad_zero, permute, permuted_source, permuted_view, repeat_to,
                     reshape, scalar_f32, slice_axis, take, to_rows)
from .ops_basic import FLT_MAX, I64, cval, f, norm_axis, op

POOL_MAX, POOL_AVG = lib.GGML_OP_POOL_MAX, lib.GGML_OP_POOL_AVG
COLUMNS_FIRST = True  # conv product order where the builder does not choose (see conv2d)
# conv.c's pixel-major AVX-512 convolution: blocks of this many 16-pixel vectors (by 24 / it channels);
# 3 measured fastest on ResNet-18's wide planes (Kernels.packed_conv_kind picks the kernel per layer)
PIXEL_VECTORS = 3
CHANNEL_VECTORS = 4  # conv2d_pixels' block 4: channels in the lanes, read from the padded input ("lanes")


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
    return lib.ggml_mul_mat(b.ctx, bt, ta), batch + (M, N)


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
    if k.linear_packed is not None:  # AVX-512: the weights packed once, here
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
    if t is None or not lib.ggml_is_contiguous(t):
        return None
    while t.op in (lib.GGML_OP_RESHAPE, lib.GGML_OP_PERMUTE):
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
    return t.src[0] if src is not None and t.src[0].type == lib.GGML_TYPE_F32 else t


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
        t = lib.ggml_permute(b.ctx, t, 0, 2, 1, 3)
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
        if src is not None and src[1] == (1, 0, 2, 3) and src[0].type == lib.GGML_TYPE_F32:
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
        t = lib.ggml_scale(b.ctx, t, alpha)
    if C is not None and beta != 0.0:
        if beta != 1.0:
            C = Val(C.shape, C.dtype, t=lib.ggml_scale(b.ctx, f(b, C), beta))
        t, shape = binary(b, lambda c, x, y: lib.ggml_add(c, x, y), Val(shape, A.dtype, t=t), C, True)
    return [b.out(t, shape, A.dtype)]


# -- convolution ----------------------------------------------------------------------------------------
def _conv_pads(b, at, in_sizes, k_sizes, strides, dils):
    nd = len(in_sizes)
    for name, v in (("strides", strides), ("dilations", dils), ("kernel_shape", k_sizes)):
        b.need(len(v) == nd and all(int(d) >= 1 for d in v), f"{name} must be {nd} values >= 1, got {list(v)}")
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i in range(nd):
            out = -(-in_sizes[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (k_sizes[i] - 1) * dils[i] + 1 - in_sizes[i])
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        return pads_b, pads_e
    if auto == "VALID":
        return [0] * nd, [0] * nd
    pads = [int(p) for p in at.get("pads", [0] * (2 * nd))]
    return pads[:nd], pads[nd:]


def conv2d(b, x, x_shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group, bias=None, residual=None,
           relu=False):
    """NCHW conv of ggml tensor x with weights (M, C/group, kH, kW), then + bias (a Val of M values),
    + residual (a Val of the output's shape), ReLU; returns tensor, shape.
    On ggml's CPU backend with ggmlpy's kernels, one conv.c node does it all (see conv_kernel)."""
    N, C, H, W = x_shape
    M, Cg, kH, kW = w_shape
    b.need(C == Cg * group and M % group == 0, f"conv: {C} input channels, weights {list(w_shape)}, group {group}")
    # negative pads crop the input
    crop_b = [max(0, -p) for p in pads_b]
    crop_e = [max(0, -p) for p in pads_e]
    pads_b = [max(0, p) for p in pads_b]
    pads_e = [max(0, p) for p in pads_e]
    shape = (N, C, H, W)
    for ax in (0, 1):
        if crop_b[ax] or crop_e[ax]:
            x, shape = slice_axis(b, x, shape, 2 + ax, crop_b[ax], shape[2 + ax] - crop_e[ax])
    out = conv_kernel(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group, bias, residual, relu)
    if out is not None:
        return out
    y, shape = _conv2d_ggml(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group)
    y = _add_bias(b, y, bias, shape)
    if residual is not None:
        b.need(tuple(residual.shape) == shape, f"conv residual of shape {list(residual.shape)}, output {list(shape)}")
        y = lib.ggml_add(b.ctx, y, reshape(b, b.tensor(residual), shape))
    if relu:
        y = b.relu(y)
    return y, shape


def conv_kernel(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group, bias=None, residual=None,
                relu=False):
    """The convolution as one node of ggmlpy's conv.c kernel (patches built a cache-sized block at a
    time and multiplied at once by OpenBLAS, bias, residual and ReLU applied to the block), or None
    where it does not apply: not ggml's CPU backend, no kernels, f16 weights, a residual that is not
    of the output's shape (a constant one). Pads are non-negative here."""
    k = b.kernels
    if k is None or k.conv2d is None:
        return None
    N, C, H, W = shape
    M, Cg, kH, kW = w_shape
    is_const = isinstance(w_arr_or_val, np.ndarray)
    if is_const and b.f16_weights and w_arr_or_val.size >= 256:
        return None  # dtype="f16" asked for half-precision weights: ggml's products read them
    OH, OW = _conv_out_hw((H, W), (kH, kW), strides, pads_b, pads_e, dils)
    b.need(OH > 0 and OW > 0, "conv output would be empty")
    out_shape = (N, M, OH, OW)
    if residual is not None and residual.is_const:
        return None
    bt = None if bias is None else _conv_bias(b, bias, M)
    rt = None if residual is None else reshape(b, b.tensor(residual), out_shape)
    kind = _packed_kind(k, (OH, OW), w_shape, group, strides, pads_b, pads_e, dils) if is_const else None
    if kind in ("pixels", "lanes"):
        vectors = PIXEL_VECTORS if kind == "pixels" else CHANNEL_VECTORS
        wp = b.weight(k.pack_conv_pixels(np.asarray(w_arr_or_val, dtype=np.float32), group, vectors))
        y = k.conv2d_pixels(b.ctx, cont(b, x), wp, M, (kH, kW), tuple(strides), (pads_b[0], pads_b[1]), tuple(dils),
                            (OH, OW), group, bt, rt, relu, vectors)
        return b.kernel_node(y, "conv2d"), out_shape
    if kind == "channels":
        wp = b.weight(k.pack_conv(np.asarray(w_arr_or_val, dtype=np.float32), group))
        y = k.conv2d_packed(b.ctx, cont(b, x), wp, M, (kH, kW), tuple(strides), (pads_b[0], pads_b[1]), tuple(dils),
                            (OH, OW), group, bt, rt, relu)
        return b.kernel_node(y, "conv2d"), out_shape
    if is_const:
        w = b.weight(np.ascontiguousarray(w_arr_or_val, dtype=np.float32).reshape(M, Cg * kH * kW))
    else:
        w = lib.ggml_reshape_2d(b.ctx, cont(b, w_arr_or_val), Cg * kH * kW, M)
    y = k.conv2d(b.ctx, cont(b, x), w, (kH, kW), tuple(strides), (pads_b[0], pads_b[1]), tuple(dils), (OH, OW),
                 group, bt, rt, relu)
    return b.kernel_node(y, "conv2d"), out_shape


def _conv_out_hw(in_hw, k_hw, strides, pads_b, pads_e, dils) -> tuple:
    """A convolution's output planes (OH, OW) (not positive where the kernel does not fit)."""
    return tuple((n + p + q - d * (kk - 1) - 1) // s + 1
                 for n, kk, s, p, q, d in zip(in_hw, k_hw, strides, pads_b, pads_e, dils))


def _conv_bias(b, bias, M: int):
    """A convolution's bias (M values) as conv.c's kernels read it: a 1-D f32 tensor, a weight when constant."""
    if bias.is_const:
        return b.weight(np.asarray(bias.const, dtype=np.float32).reshape(M))
    return lib.ggml_reshape_1d(b.ctx, cont(b, b.tensor(bias)), M)


def _packed_kind(k, out_hw, w_shape, group, strides, pads_b, pads_e, dils):
    """Kernels.packed_conv_kind for a convolution of weights (M, C/group, kH, kW) with constant weights."""
    M, Cg, kH, kW = w_shape
    return k.packed_conv_kind(out_hw, M // group, *kernels.direct_planes(out_hw, (kH, kW), strides, dils, Cg),
                              stride=strides[0], taps=Cg * kH * kW, unpadded=not any(pads_b) and not any(pads_e))


def _conv2d_ggml(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group):
    """ggml's own convolution: im2col, then a product per group."""
    N, C, H, W = shape
    M, Cg, kH, kW = w_shape
    if pads_b != pads_e:
        x, shape = pad_zero(b, x, shape, [0, 0] + pads_b, [0, 0] + pads_e)
        p = [0, 0]
    else:
        p = pads_b
    _, _, H, W = shape
    OH, OW = _conv_out_hw((H, W), (kH, kW), strides, p, p, dils)
    b.need(OH > 0 and OW > 0, "conv output would be empty")
    x = cont(b, x)
    is_const = isinstance(w_arr_or_val, np.ndarray)
    outs = []
    Mg = M // group
    for g in range(group):
        xg = x if group == 1 else slice_axis(b, x, shape, 1, g * Cg, (g + 1) * Cg)[0]
        if is_const:
            wg = b.weight(np.ascontiguousarray(w_arr_or_val[g * Mg:(g + 1) * Mg], dtype=np.float32),
                          lib.GGML_TYPE_F16 if (b.f16_weights and w_arr_or_val.size >= 256) else lib.GGML_TYPE_F32)
        else:
            wg = cont(b, w_arr_or_val) if group == 1 else slice_axis(b, w_arr_or_val, w_shape, 0, g * Mg, (g + 1) * Mg)[0]
        # im2col in f32 (ggml_conv_2d's default is f16 columns: 1e-3 off), then one product
        cols = lib.ggml_im2col(b.ctx, wg, xg, strides[1], strides[0], p[1], p[0], dils[1], dils[0], True,
                               lib.GGML_TYPE_F32)  # ne [Cg*kH*kW, OW, OH, N]
        kk = Cg * kH * kW
        cols2 = lib.ggml_reshape_2d(b.ctx, cols, kk, OW * OH * N)
        w2 = lib.ggml_reshape_2d(b.ctx, wg, kk, Mg)
        # columns first: the product comes out as ne [OW*OH*N, Mg], the output's layout. On the CPU without
        # BLAS, ggml's own kernel is 11 % faster over a ResNet-18 the other way round, permute included
        if wg.type == lib.GGML_TYPE_F32 and getattr(b, "columns_first", COLUMNS_FIRST):
            y = lib.ggml_mul_mat(b.ctx, cols2, w2)
            y = lib.ggml_reshape_4d(b.ctx, y, OW, OH, N, Mg)
            if N > 1:  # to ne [OW, OH, Mg, N]; with one image that is a reshape
                y = lib.ggml_cont(b.ctx, lib.ggml_permute(b.ctx, y, 0, 1, 3, 2))
            else:
                y = lib.ggml_reshape_4d(b.ctx, y, OW, OH, Mg, 1)
        else:  # f16 weights must be the first operand of ggml_mul_mat
            y = lib.ggml_mul_mat(b.ctx, w2, cols2)  # ne [Mg, OW*OH*N]
            y = lib.ggml_reshape_4d(b.ctx, y, Mg, OW, OH, N)
            y = lib.ggml_cont(b.ctx, lib.ggml_permute(b.ctx, y, 2, 0, 1, 3))  # ne [OW, OH, Mg, N]
        outs.append(y)
    y = outs[0]
    for o in outs[1:]:
        y = lib.ggml_concat(b.ctx, y, o, 2)
    return y, (N, M, OH, OW)


def _as_2d(b, x: Val):
    """(N, C, L) as (N, C, 1, L); 2-D spatial as it is."""
    b.need(x.rank in (3, 4), f"only 1-D and 2-D convolution and pooling are supported (input rank {x.rank})")
    if x.rank == 3:
        return reshape(b, b.tensor(x), (x.shape[0], x.shape[1], 1, x.shape[2])), (x.shape[0], x.shape[1], 1, x.shape[2])
    return b.tensor(x), x.shape


def _ints2(at, key, nd, default):
    v = [int(a) for a in at.get(key, [default] * nd)]
    return ([1] + v) if nd == 1 and key in ("strides", "dilations", "kernel_shape") else v


def _add_bias(b, y, bias, shape):
    """y (N, M, OH, OW) + a per-channel bias. A constant bias is stored repeated along the rows
    (ne [OW, 1, M, 1]): ggml adds a whole row per call, where a (1, M, 1, 1) bias costs one call
    per element (15 % of a ResNet-18's time)."""
    if bias is None:
        return y
    if bias.is_const:
        rows = np.repeat(np.asarray(bias.const, dtype=np.float32).reshape(1, -1, 1, 1), shape[3], axis=3)
        return lib.ggml_add(b.ctx, y, b.weight(rows))
    return lib.ggml_add(b.ctx, y, reshape(b, b.tensor(bias), (1, bias.size, 1, 1)))


@op("Conv")
def _conv(b, node, ins, at, residual=None, relu=False):
    """Conv; conv_epilogue builds it with the Add and Relu that follow it (see fusion.find_conv_epilogues)."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    nd = x.rank - 2
    xt, xs = _as_2d(b, x)
    ks = list(w.shape[2:])
    strides = [int(s) for s in at.get("strides", [1] * nd)]
    dils = [int(d) for d in at.get("dilations", [1] * nd)]
    pb, pe = _conv_pads(b, at, list(x.shape[2:]), ks, strides, dils)
    if nd == 1:
        strides, dils, pb, pe, ks = [1] + strides, [1] + dils, [0] + pb, [0] + pe, [1] + ks
    w_shape = (w.shape[0], w.shape[1], ks[0], ks[1])
    wsrc = np.asarray(w.const, dtype=np.float32).reshape(w_shape) if w.is_const else reshape(b, b.tensor(w), w_shape)
    if residual is not None and nd == 1:
        r4 = (residual.shape[0], residual.shape[1], 1, residual.shape[2])
        residual = Val(r4, residual.dtype, None if residual.const is None else residual.const.reshape(r4), residual.t)
    y, shape = conv2d(b, xt, xs, wsrc, w_shape, strides, pb, pe, dils, int(at.get("group", 1)), bias,
                      residual, relu)
    if nd == 1:
        shape = (shape[0], shape[1], shape[3])
        y = reshape(b, y, shape)
    return [b.out(y, shape, x.dtype)]


def conv_epilogue(b, node, ins, at, residual, relu):
    """Conv, then Add(residual) (when not None) and Relu (when relu), as conv.c's one node; None where
    that does not apply (no conv kernel, a residual that is constant or not of the output's shape): the
    caller then builds the nodes one by one."""
    if b.kernels is None or b.kernels.conv2d is None:
        return None
    x, w = ins[0], ins[1]
    if x.rank not in (3, 4) or w.rank != x.rank or len(ins) > 2 and ins[2] is not None and ins[2].rank != 1:
        return None  # leave the errors to the Conv builder
    if residual is not None:
        nd = x.rank - 2
        ks = list(w.shape[2:])
        strides = [int(s) for s in at.get("strides", [1] * nd)]
        dils = [int(d) for d in at.get("dilations", [1] * nd)]
        pb, pe = _conv_pads(b, at, list(x.shape[2:]), ks, strides, dils)
        spatial = tuple((x.shape[2 + i] + pb[i] + pe[i] - dils[i] * (ks[i] - 1) - 1) // strides[i] + 1
                        for i in range(nd))
        if residual.is_const or tuple(residual.shape) != (x.shape[0], w.shape[0]) + spatial:
            return None
    return _conv(b, node, ins, at, residual, relu)


def _dilate(b, t, shape, axis, s):
    """Insert s-1 zeros between the elements of one axis (the input of a transposed convolution)."""
    if s == 1:
        return t, shape
    pre, L, post = shape[:axis], shape[axis], shape[axis + 1:]
    P, Q = int(np.prod(pre, dtype=np.int64)), int(np.prod(post, dtype=np.int64))
    x, sh = pad_zero(b, reshape(b, t, (P, L, 1, Q)), (P, L, 1, Q), [0, 0, 0, 0], [0, 0, s - 1, 0])
    x, sh = slice_axis(b, reshape(b, x, (P, L * s, Q)), (P, L * s, Q), 1, 0, L * s - (s - 1))
    out = pre + (L * s - (s - 1),) + post
    return reshape(b, x, out), out


def _transpose_geometry(b, at, nd, ins_sp, ks):
    """strides, dilations, output_padding, and the pads (begin, end) of a ConvTranspose with nd spatial
    axes of sizes ins_sp and kernel ks (from output_shape, auto_pad or pads)."""
    strides = [int(v) for v in at.get("strides", [1] * nd)]
    dils = [int(v) for v in at.get("dilations", [1] * nd)]
    outpad = [int(p) for p in at.get("output_padding", [0] * nd)]
    for name, v, lo in (("strides", strides, 1), ("dilations", dils, 1), ("output_padding", outpad, 0)):
        b.need(len(v) == nd and all(d >= lo for d in v), f"{name} must be {nd} integers >= {lo}, got {v}")
    full = [strides[i] * (ins_sp[i] - 1) + outpad[i] + (ks[i] - 1) * dils[i] + 1 for i in range(nd)]
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if "output_shape" in at:
        oshape = [int(v) for v in at["output_shape"]][-nd:]
        total = [full[i] - oshape[i] for i in range(nd)]
        upper = auto == "SAME_UPPER"
        pb = [t // 2 if upper else t - t // 2 for t in total]
        pe = [t - p for t, p in zip(total, pb)]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [full[i] - ins_sp[i] * strides[i] for i in range(nd)]
        pb = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        pe = [t - p for t, p in zip(total, pb)]
    else:
        pads = [int(p) for p in at.get("pads", [0] * (2 * nd))]
        b.need(len(pads) == 2 * nd, f"pads must have {2 * nd} values, got {pads}")
        pb, pe = pads[:nd], pads[nd:]
    return strides, dils, outpad, pb, pe


@op("ConvTranspose", const_inputs=(1,))
def _conv_transpose(b, node, ins, at):
    """A transposed convolution is a convolution of the zero-dilated input with the flipped kernel."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    nd = x.rank - 2
    b.need_value(w.is_const, "ConvTranspose weights must be known at load time (an initializer or constant)", w)
    if nd == 3:
        return _conv_transpose_3d(b, at, x, np.asarray(w.const, dtype=np.float32), bias)
    group = int(at.get("group", 1))
    xt, xs = _as_2d(b, x)
    W = np.asarray(w.const, dtype=np.float32)
    if nd == 1:
        W = W[:, :, None, :]
    C, Mg, kH, kW = W.shape
    strides, dils, outpad, pb, pe = _transpose_geometry(b, at, nd, list(x.shape[2:]), list(W.shape[4 - nd:]))
    if nd == 1:
        strides, dils, outpad, pb, pe = ([d0] + v for d0, v in ((1, strides), (1, dils), (0, outpad), (0, pb),
                                                                 (0, pe)))
    ks = [kH, kW]
    t, shape = xt, xs
    for ax in (0, 1):
        t, shape = _dilate(b, t, shape, 2 + ax, strides[ax])
    Cg = C // group
    Wc = np.concatenate([np.transpose(W[g * Cg:(g + 1) * Cg], (1, 0, 2, 3)) for g in range(group)], axis=0)
    Wc = np.ascontiguousarray(Wc[:, :, ::-1, ::-1])  # (Mg * group, Cg, kH, kW)
    cpb = [dils[i] * (ks[i] - 1) - pb[i] for i in range(2)]
    cpe = [dils[i] * (ks[i] - 1) - pe[i] + outpad[i] for i in range(2)]
    y, oshape = conv2d(b, t, shape, Wc, Wc.shape, [1, 1], cpb, cpe, dils, group, bias)
    if nd == 1:
        oshape = (oshape[0], oshape[1], oshape[3])
        y = reshape(b, y, oshape)
    return [b.out(y, oshape, x.dtype)]


def _conv_transpose_3d(b, at, x, W, bias):
    """3-D ConvTranspose (group 1): the input zero-dilated by the strides and padded, its windows gathered
    by ggml_im2col_3d (ggml [W, H, D, N*C] in, one row of C*KD*KH*KW per output cell), times the flipped
    kernel as one matrix product."""
    b.need(int(at.get("group", 1)) == 1, "3-D ConvTranspose with group > 1 is not supported")
    N, C = x.shape[:2]
    b.need(W.ndim == 5 and W.shape[0] == C, f"weights {list(W.shape)} do not fit {C} input channels")
    M, ks = W.shape[1], list(W.shape[2:])
    strides, dils, outpad, pb, pe = _transpose_geometry(b, at, 3, list(x.shape[2:]), ks)
    shape = (N * C,) + tuple(x.shape[2:])
    t = reshape(b, b.tensor(x), shape)
    for ax in range(3):
        t, shape = _dilate(b, t, shape, 1 + ax, strides[ax])
    cpb = [dils[i] * (ks[i] - 1) - pb[i] for i in range(3)]
    cpe = [dils[i] * (ks[i] - 1) - pe[i] + outpad[i] for i in range(3)]
    for ax in range(3):  # negative amounts crop
        lo, hi = max(0, -cpb[ax]), shape[1 + ax] - max(0, -cpe[ax])
        b.need(hi > lo, "ConvTranspose: the pads remove the whole output")
        t, shape = slice_axis(b, t, shape, 1 + ax, lo, hi)
    t, shape = pad_zero(b, t, shape, [0] + [max(0, p) for p in cpb], [0] + [max(0, p) for p in cpe])
    outs = [shape[1 + i] - dils[i] * (ks[i] - 1) for i in range(3)]
    b.need(all(o > 0 for o in outs), f"ConvTranspose: output size {outs}")
    Wc = np.ascontiguousarray(np.transpose(W, (1, 0, 2, 3, 4))[:, :, ::-1, ::-1, ::-1])  # (M, C, kD, kH, kW)
    taps = b.weight(np.zeros((C, *ks), np.float32))  # im2col_3d reads its shape only (one output channel)
    cols = lib.ggml_im2col_3d(b.ctx, taps, cont(b, t), C, 1, 1, 1, 0, 0, 0, dils[2], dils[1], dils[0],
                              lib.GGML_TYPE_F32)  # ne [C*K, OW, OH, OD*N]
    S = int(np.prod(outs))
    K = C * int(np.prod(ks))
    y = lib.ggml_mul_mat(b.ctx, b.weight(Wc.reshape(M, K)), reshape(b, cols, (N * S, K)))  # ne [M, S*N]
    y = permute(b, reshape(b, y, (N, S, M)), (0, 2, 1))  # (N, M, S)
    if bias is not None:
        y = lib.ggml_add(b.ctx, y, reshape(b, b.tensor(bias), (1, M, 1)))
    oshape = (N, M) + tuple(outs)
    return [b.out(reshape(b, y, oshape), oshape, x.dtype)]


def conv_pool(b, node, ins, at, relu, pool_node, pool_at):
    """Conv (-> Relu) -> MaxPool (fusion.find_conv_epilogues) as one node of conv.c's pixel kernel, which
    pools the convolution's rows while they are in cache and never writes them (Kernels.conv2d_pool):
    where that kernel, on the padded input's phase planes, is the one the Conv gets (conv_kernel; a ResNet's
    stem) and the MaxPool is 2-D without dilations (any windows, strides, pads and ceil_mode). None
    otherwise: the caller then builds the Conv's node and the MaxPool's."""
    k = b.kernels
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    if k is None or k.conv2d_pool is None or x.rank != 4 or w.rank != 4 or not w.is_const or \
            bias is not None and bias.rank != 1:
        return None
    N, C, H, W = x.shape
    M, Cg, kH, kW = w.shape
    group = int(at.get("group", 1))
    if group < 1 or C != Cg * group or M % group or b.f16_weights and w.const.size >= 256:
        return None  # the Conv's builder says what is wrong; half-precision weights are ggml's products'
    strides = [int(s) for s in at.get("strides", [1, 1])]
    dils = [int(d) for d in at.get("dilations", [1, 1])]
    pb, pe = _conv_pads(b, at, [H, W], [kH, kW], strides, dils)
    OH, OW = _conv_out_hw((H, W), (kH, kW), strides, pb, pe, dils)
    if min(pb + pe) < 0 or OH < 1 or OW < 1:
        return None
    ks, pstrides, pdils, ppb, ppe, ceil = _pool_attrs(b, Val((N, M, OH, OW), x.dtype), pool_at)
    if any(d != 1 for d in pdils) or \
            not kernels.direct_fits(*kernels.direct_planes((OH, OW), (kH, kW), strides, dils, Cg)) or \
            _packed_kind(k, (OH, OW), w.shape, group, strides, pb, pe, dils) != "pixels" or PIXEL_VECTORS != 3:
        return None
    outs, _ = _pool_outs([OH, OW], ks, pstrides, ppb, ppe, ceil)
    wp = b.weight(k.pack_conv_pixels(np.asarray(w.const, dtype=np.float32), group, 3))  # conv_pixels_direct's
    bt = None if bias is None else _conv_bias(b, bias, M)
    y = k.conv2d_pool(b.ctx, cont(b, b.tensor(x)), wp, M, (kH, kW), tuple(strides), (pb[0], pb[1]), tuple(dils),
                      (OH, OW), group, bt, relu, tuple(ks), tuple(pstrides), (ppb[0], ppb[1]), tuple(outs))
    return [b.out(b.kernel_node(y, "conv2d_pool"), (N, M, *outs), x.dtype)]


# -- pooling --------------------------------------------------------------------------------------------
def _pool_attrs(b, x, at):
    """kernel_shape, strides, dilations, pads (begin, end) of a pooling node, checked."""
    nd = x.rank - 2
    b.need(nd >= 1, f"pooling needs (N, C, spatial...), got rank {x.rank}")
    b.need("kernel_shape" in at, "kernel_shape is required")
    ks = [int(k) for k in at["kernel_shape"]]
    strides = [int(s) for s in at.get("strides", [1] * nd)]
    dils = [int(d) for d in at.get("dilations", [1] * nd)]
    for name, v in (("kernel_shape", ks), ("strides", strides), ("dilations", dils)):
        b.need(len(v) == nd and all(d >= 1 for d in v), f"{name} must be {nd} positive integers, got {v}")
    if "pads" in at:
        pads = [int(p) for p in at["pads"]]
        b.need(len(pads) == 2 * nd and all(p >= 0 for p in pads), f"pads must be {2 * nd} non-negative integers, "
                                                                   f"got {pads}")
    ceil = int(at.get("ceil_mode", 0))
    b.need(ceil in (0, 1), f"ceil_mode must be 0 or 1, got {ceil}")
    pb, pe = _conv_pads(b, at, list(x.shape[2:]), ks, strides, dils)
    return ks, strides, dils, pb, pe, ceil


def _pool_windows(b, x, at, kind, ks, strides, dils, pb, pe, ceil, indices=False):
    """1-, 2- or 3-D pooling with dilations (and MaxPool's Indices) through ggml_im2col_3d: the input as
    ggml [W, H, D, N*C] (every plane pooled alike, so N and C merge), padded by hand, each output cell's
    window gathered into one row of K = KD*KH*KW taps, then the row's max (and the first tap reaching it),
    or its sum over the window's cell count. Returns the output Vals."""
    nd = x.rank - 2
    N, C = x.shape[:2]
    lead = 3 - nd  # missing leading spatial axes: size one, one tap
    sizes = [1] * lead + list(x.shape[2:])
    ks3, st3, dl3 = [1] * lead + ks, [1] * lead + strides, [1] * lead + dils
    pb3, pe3 = [0] * lead + list(pb), [0] * lead + list(pe)
    outs, ends = [], []
    for i in range(3):
        keff = (ks3[i] - 1) * dl3[i] + 1
        span = sizes[i] + pb3[i] + pe3[i] - keff
        b.need(span >= 0, f"the window ({keff} cells with dilation) is larger than the padded input "
                          f"({sizes[i] + pb3[i] + pe3[i]})")
        o = (-(-span // st3[i]) if ceil else span // st3[i]) + 1
        if ceil and (o - 1) * st3[i] >= sizes[i] + pb3[i]:
            o -= 1  # the last window must start inside the input or the left padding
        outs.append(o)
        ends.append((o - 1) * st3[i] + keff - pb3[i])  # input cells the windows reach, padding included
    shape4 = (N * C, *sizes)
    t = reshape(b, b.tensor(x), shape4)
    if kind == "lp":  # (sum |x|^p)^(1/p) over the window; padding adds zeros
        t = _abs_pow(b, cont(b, t), float(at.get("p", 2)))
    for i in range(3):
        if ends[i] < sizes[i]:  # the last cells are in no window
            t, shape4 = slice_axis(b, t, shape4, i + 1, 0, ends[i])
    t, padded = pad_zero(b, t, shape4, [0] + pb3, [0] + [max(0, ends[i] - sizes[i]) for i in range(3)])
    if kind == "max" and padded != shape4:  # padding never wins a max
        mask = np.full(padded[1:], -np.inf, dtype=np.float32)
        mask[pb3[0]:pb3[0] + shape4[1], pb3[1]:pb3[1] + shape4[2], pb3[2]:pb3[2] + shape4[3]] = 0
        t = lib.ggml_add(b.ctx, t, b.weight(mask))
    K = int(np.prod(ks3))
    taps = b.weight(np.zeros((1, *ks3), np.float32))  # only its shape matters: ne [KW, KH, KD, 1]
    cols = lib.ggml_im2col_3d(b.ctx, taps, cont(b, t), 1, st3[2], st3[1], st3[0], 0, 0, 0, dl3[2], dl3[1], dl3[0],
                              lib.GGML_TYPE_F32)  # ne [K, OW, OH, OD * N * C]
    R = N * C * int(np.prod(outs))
    rows = reshape(b, cols, (R, K))
    shape = (N, C) + tuple(outs[lead:])
    if kind == "max":
        y = _row_max(b, rows)
    elif kind == "lp":
        y = _abs_pow(b, lib.ggml_sum_rows(b.ctx, rows), 1.0 / float(at.get("p", 2)))
    else:
        y = lib.ggml_sum_rows(b.ctx, rows)
        incl = int(at.get("count_include_pad", 0))
        counts = []
        for i in range(3):  # taps inside the input (or its pads too), per axis: the window is a box
            lo, hi = (-pb3[i], sizes[i] + pe3[i]) if incl else (0, sizes[i])
            pos = np.arange(outs[i])[:, None] * st3[i] - pb3[i] + np.arange(ks3[i])[None, :] * dl3[i]
            counts.append(((pos >= lo) & (pos < hi)).sum(axis=1))
        div = np.einsum("i,j,k->ijk", *counts).astype(np.float64)
        y = lib.ggml_mul(b.ctx, reshape(b, y, (N * C, *outs)), b.weight((1.0 / np.maximum(div, 1)).astype(np.float32)))
    res = [b.out(reshape(b, y, shape), shape, x.dtype)]
    if indices:
        res.append(_pool_indices(b, rows, at, nd, N * C, sizes, outs, ks3, st3, dl3, pb3, shape))
    return res


def _pool_indices(b, rows, at, nd, planes, sizes, outs, ks3, st3, dl3, pb3, shape):
    """MaxPool's Indices: the flat index in the input (N, C, spatial) of each maximum, the first in window
    order; spatial axes row-major (storage_order 0) or column-major (1). Computed in float32, exact below
    2**24."""
    order = int(at.get("storage_order", 0))
    b.need(order in (0, 1), f"storage_order must be 0 or 1, got {order}")
    step = int(np.prod(sizes))
    b.limit(planes * step < 2 ** 24, "MaxPool's Indices above 2**24 (computed in float32)")
    c = b.ctx
    if order == 0:
        mult = [sizes[1] * sizes[2], sizes[2], 1]
    else:  # column-major over the real spatial axes (the leading padded ones have one cell)
        mult = [0, 0, 0]
        acc = 1
        for i in range(3 - nd, 3):
            mult[i] = acc
            acc *= sizes[i]
    k = arg_rows(b, rows)  # the tap, k = k0 * K1 * K2 + k1 * K2 + k2
    K12, K2 = ks3[1] * ks3[2], ks3[2]
    cf = [mult[i] * dl3[i] for i in range(3)]
    k0 = lib.ggml_floor(c, lib.ggml_scale_bias(c, k, 1.0 / K12, 0.5 / K12))
    rem = lib.ggml_sub(c, k, lib.ggml_scale(c, k0, float(K12)))
    k1 = lib.ggml_floor(c, lib.ggml_scale_bias(c, rem, 1.0 / K2, 0.5 / K2))
    # offset = k2 cf2 + k1 cf1 + k0 cf0 with k2 = rem - k1 K2
    off = lib.ggml_add(c, lib.ggml_scale(c, rem, float(cf[2])), lib.ggml_scale(c, k1, float(cf[1] - K2 * cf[2])))
    off = lib.ggml_add(c, off, lib.ggml_scale(c, k0, float(cf[0])))
    grid = np.meshgrid(*[np.arange(outs[i]) * st3[i] - pb3[i] for i in range(3)], indexing="ij")
    base = sum(mult[i] * grid[i] for i in range(3)).astype(np.float32)  # window origins, (OD, OH, OW)
    off = lib.ggml_add(c, reshape(b, off, (planes, *outs)), b.weight(base))
    plane = (np.arange(planes, dtype=np.float32) * step).reshape(planes, 1, 1, 1)
    off = lib.ggml_add(c, off, b.weight(plane))
    return b.out(reshape(b, off, shape), shape, I64)


def _abs_pow(b, t, p):
    """|t| ** p: sqr, sqrt and abs for the usual exponents, exp(p log|t|) otherwise (log 0 = -inf gives 0)."""
    c = b.ctx
    a = lib.ggml_abs(c, t)
    if p == 1.0:
        return a
    if p == 2.0:
        return lib.ggml_sqr(c, t)
    if p == 0.5:
        return lib.ggml_sqrt(c, a)
    return lib.ggml_exp(c, lib.ggml_scale(c, lib.ggml_log(c, a), p))


@op("LpPool")
def _lppool(b, node, ins, at):
    x = ins[0]
    b.need(x.rank in (3, 4, 5), f"only 1-, 2- and 3-D pooling are supported (input rank {x.rank})")
    p = at.get("p", 2)
    b.need(float(p) > 0, f"p must be positive, got {p}")
    ks, strides, dils, pb, pe, ceil = _pool_attrs(b, x, at)
    return _pool_windows(b, x, at, "lp", ks, strides, dils, pb, pe, ceil)


def _pool_outs(sizes, ks, strides, pb, pe, ceil):
    """(outs, pad_e) of a 2-D pooling of planes `sizes`: its output's sizes, and the end pads that make
    every window whole (ceil_mode's windows that pass the end pads)."""
    outs, pad_e = [], []
    for i in range(2):
        span = sizes[i] + pb[i] + pe[i] - ks[i]
        o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= sizes[i] + pb[i]:
            o -= 1  # the last window must start inside the input or the left padding
        outs.append(o)
        pad_e.append(pe[i] + max(0, (o - 1) * strides[i] + ks[i] - (sizes[i] + pb[i] + pe[i])))
    return outs, pad_e


def _pool(b, node, ins, at, kind):
    x = ins[0]
    b.need(x.rank in (3, 4, 5), f"only 1-, 2- and 3-D pooling are supported (input rank {x.rank})")
    nd = x.rank - 2
    ks, strides, dils, pb, pe, _ = _pool_attrs(b, x, at)
    want_idx = kind == "max" and len(node.output) > 1 and bool(node.output[1])
    if nd == 3 or want_idx or any(d != 1 for d in dils):
        return _pool_windows(b, x, at, kind, ks, strides, dils, pb, pe, int(at.get("ceil_mode", 0)), want_idx)
    xt, xs = _as_2d(b, x)
    if nd == 1:
        ks, strides, pb, pe = [1] + ks, [1] + strides, [0] + pb, [0] + pe
    sizes = list(xs[2:])
    outs, pad_e = _pool_outs(sizes, ks, strides, pb, pe, int(at.get("ceil_mode", 0)))
    k = b.kernels
    if kind == "max" and k is not None and k.maxpool2d is not None:
        y = b.kernel_node(k.maxpool2d(b.ctx, cont(b, xt), tuple(ks), tuple(strides), tuple(pb), tuple(outs)),
                          "maxpool2d")
        shape = (xs[0], xs[1], outs[0], outs[1]) if nd == 2 else (xs[0], xs[1], outs[1])
        return [b.out(reshape(b, y, shape), shape, x.dtype)]
    if pb == pad_e and kind == "max":  # ggml's own padding: out-of-range cells never enter a max
        y = lib.ggml_pool_2d(b.ctx, cont(b, xt), POOL_MAX, ks[1], ks[0], strides[1], strides[0],
                             float(pb[1]), float(pb[0]))
        shape = (xs[0], xs[1], outs[0], outs[1])
        if nd == 1:
            shape = (xs[0], xs[1], outs[1])
            y = reshape(b, y, shape)
        return [b.out(y, shape, x.dtype)]
    t, shape = pad_zero(b, xt, xs, [0, 0] + pb, [0, 0] + pad_e)
    Hp, Wp = shape[2], shape[3]
    if kind == "max" and (any(pb) or any(pad_e)):
        mask = np.zeros((Hp, Wp), dtype=np.float32)  # padding never wins a max
        mask[:pb[0], :] = mask[Hp - pad_e[0]:, :] = -FLT_MAX
        mask[:, :pb[1]] = mask[:, Wp - pad_e[1]:] = -FLT_MAX
        t = lib.ggml_add(b.ctx, t, b.weight(mask))
    y = lib.ggml_pool_2d(b.ctx, cont(b, t), POOL_MAX if kind == "max" else POOL_AVG,
                         ks[1], ks[0], strides[1], strides[0], 0.0, 0.0)
    if kind == "avg":
        # ggml divides by the window size; ONNX by the cells inside the input (and its pads if asked)
        incl = int(at.get("count_include_pad", 0))
        counts = []
        for i in range(2):
            lo, hi = (-pb[i], sizes[i] + pe[i]) if incl else (0, sizes[i])
            st = np.arange(outs[i]) * strides[i] - pb[i]
            counts.append(np.minimum(st + ks[i], hi) - np.maximum(st, lo))
        div = np.outer(counts[0], counts[1]).astype(np.float64)
        scale = (ks[0] * ks[1] / div).astype(np.float32)
        if not np.all(scale == 1.0):
            y = lib.ggml_mul(b.ctx, y, b.weight(scale))
    shape = (xs[0], xs[1], outs[0], outs[1])
    if nd == 1:
        shape = (xs[0], xs[1], outs[1])
        y = reshape(b, y, shape)
    return [b.out(y, shape, x.dtype)]


@op("MaxPool")
def _maxpool(b, node, ins, at):
    return _pool(b, node, ins, at, "max")


@op("AveragePool")
def _avgpool(b, node, ins, at):
    return _pool(b, node, ins, at, "avg")


def _global(b, x, kind):
    b.need(x.rank >= 3, "global pooling needs (N, C, spatial...)")
    N, C = x.shape[:2]
    S = int(np.prod(x.shape[2:], dtype=np.int64))
    t = reshape(b, b.tensor(x), (N * C, S))
    if kind == "avg" and b.kernels is not None and t.type == lib.GGML_TYPE_F32:
        # ggmlpy's row sums (the rows shared among the threads, several accumulators a row) then the
        # scale: ggml's mean sums a row in one chain of dependent adds, on one thread
        y = lib.ggml_scale(b.ctx, b.kernel_node(b.kernels.sum_rows(b.ctx, t), "sum_rows"), 1.0 / S)
    elif kind == "avg":
        y = lib.ggml_mean(b.ctx, t)
    else:
        y = lib.ggml_pool_1d(b.ctx, t, POOL_MAX, S, S, 0)
    shape = (N, C) + (1,) * (x.rank - 2)
    return [b.out(reshape(b, y, shape), shape, x.dtype)]


@op("GlobalAveragePool")
def _gap(b, node, ins, at):
    return _global(b, ins[0], "avg")


@op("GlobalMaxPool")
def _gmp(b, node, ins, at):
    return _global(b, ins[0], "max")


# -- reductions -----------------------------------------------------------------------------------------
def _row_max(b, t):
    R = int(t.ne[0])
    return lib.ggml_pool_1d(b.ctx, cont(b, t), POOL_MAX, R, R, 0)


ROW_REDUCE = {
    "ReduceSum": lambda b, t: lib.ggml_sum_rows(b.ctx, t),
    "ReduceMean": lambda b, t: lib.ggml_mean(b.ctx, t),
    "ReduceMax": _row_max,
    "ReduceMin": lambda b, t: lib.ggml_neg(b.ctx, _row_max(b, lib.ggml_neg(b.ctx, t))),
    "ReduceSumSquare": lambda b, t: lib.ggml_sum_rows(b.ctx, lib.ggml_sqr(b.ctx, t)),
    "ReduceL1": lambda b, t: lib.ggml_sum_rows(b.ctx, lib.ggml_abs(b.ctx, t)),
    "ReduceL2": lambda b, t: lib.ggml_sqrt(b.ctx, lib.ggml_sum_rows(b.ctx, lib.ggml_sqr(b.ctx, t))),
    "ReduceLogSum": lambda b, t: lib.ggml_log(b.ctx, lib.ggml_sum_rows(b.ctx, t)),
    "ReduceLogSumExp": lambda b, t: _logsumexp(b, t),
}


def _logsumexp(b, t):
    m = _row_max(b, t)
    s = lib.ggml_sum_rows(b.ctx, lib.ggml_exp(b.ctx, lib.ggml_sub(b.ctx, t, m)))
    return lib.ggml_add(b.ctx, lib.ggml_log(b.ctx, s), m)


def _reduce(name):
    def build(b, node, ins, at):
        x = ins[0]
        axes = None
        if len(ins) > 1 and ins[1] is not None:
            axes = [int(a) for a in cval(b, ins[1], "axes").reshape(-1)]
        elif "axes" in at:
            axes = [int(a) for a in at["axes"]]
        keep = int(at.get("keepdims", 1))
        if not axes:
            if int(at.get("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(x.rank))
        axes = sorted({norm_axis(b, a, x.rank) for a in axes})
        rows, kept, _ = to_rows(b, b.tensor(x), x.shape, axes)
        y = ROW_REDUCE[name](b, rows)
        shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape)) if keep else \
            tuple(d for k, d in enumerate(x.shape) if k not in axes)
        return [b.out(reshape(b, y, shape), shape, x.dtype)]
    return build


for _name in ROW_REDUCE:
    op(_name, const_inputs=(1,))(_reduce(_name))


def arg_rows(b, rows, last=False):
    """Index of the maximum of each row (ggml ne0), the first (or last) of equal maxima, as F32 ne [1, R].
    Computed from the row maximum and a mask, not with ggml_argmax, whose choice among equal maxima
    differs between backends (the CPU keeps the last, Vulkan the first)."""
    c = b.ctx
    L = int(rows.ne[0])
    rows = cont(b, rows)
    m = _row_max(b, rows)
    d = lib.ggml_sub(c, rows, m)  # 0 at the maxima, negative elsewhere
    eq = lib.ggml_scale_bias(c, lib.ggml_step(c, lib.ggml_neg(c, d)), -1.0, 1.0)
    if last:  # max over (i + 1) * eq, minus one
        w = np.arange(1, L + 1, dtype=np.float32)
        return lib.ggml_scale_bias(c, _row_max(b, lib.ggml_mul(c, eq, b.weight(w))), 1.0, -1.0)
    w = np.arange(L, 0, -1, dtype=np.float32)  # L - i: the first maximum scores highest
    return lib.ggml_scale_bias(c, _row_max(b, lib.ggml_mul(c, eq, b.weight(w))), -1.0, float(L))


def _argext(sign):
    def build(b, node, ins, at):
        x = ins[0]
        axis = norm_axis(b, at.get("axis", 0), x.rank)
        rows, kept, _ = to_rows(b, b.tensor(x), x.shape, [axis])
        if sign < 0:
            rows = lib.ggml_neg(b.ctx, rows)
        y = arg_rows(b, rows, bool(int(at.get("select_last_index", 0))))
        shape = tuple(1 if k == axis else d for k, d in enumerate(x.shape)) if int(at.get("keepdims", 1)) else \
            tuple(d for k, d in enumerate(x.shape) if k != axis)
        return [b.out(reshape(b, y, shape), shape, I64)]
    return build


op("ArgMax")(_argext(1))
op("ArgMin")(_argext(-1))


# -- softmax --------------------------------------------------------------------------------------------
def _softmax_rows(b, x, axis, opset, log):
    if opset < 13:  # the input is coerced to 2-D at axis
        R = int(np.prod(x.shape[axis:], dtype=np.int64))
        rows = reshape(b, b.tensor(x), (x.size // R, R))
        perm = None
    else:
        rows, _, perm = to_rows(b, b.tensor(x), x.shape, [axis])
    if log:
        m = _row_max(b, rows)
        z = lib.ggml_sub(b.ctx, rows, m)
        y = lib.ggml_sub(b.ctx, z, lib.ggml_log(b.ctx, lib.ggml_sum_rows(b.ctx, lib.ggml_exp(b.ctx, z))))
    else:
        y = lib.ggml_soft_max(b.ctx, rows)
    if perm is None:
        return reshape(b, y, x.shape)
    moved = tuple(x.shape[p] for p in perm)
    inv = list(np.argsort(perm))
    return permute(b, reshape(b, y, moved), inv)


def _softmax(log):
    def build(b, node, ins, at):
        x = ins[0]
        opset = b.opset
        axis = norm_axis(b, at.get("axis", -1 if opset >= 13 else 1), x.rank)
        return [b.out(_softmax_rows(b, x, axis, opset, log), x.shape, x.dtype)]
    return build


op("Softmax")(_softmax(False))
op("LogSoftmax")(_softmax(True))


# -- normalisations -------------------------------------------------------------------------------------
def _channel(b, v: Val, C, rank):
    return reshape(b, b.tensor(v), (1, C) + (1,) * (rank - 2))


@op("BatchNormalization")
def _batchnorm(b, node, ins, at):
    x, scale, bias, mean, var = ins[:5]
    b.need(x.rank >= 2, f"BatchNormalization needs (N, C, ...), got rank {x.rank}")
    C = x.shape[1]
    for name, v in zip(("scale", "B", "input_mean", "input_var"), ins[1:5]):
        b.need(v is not None and v.size == C, f"{name} must have {C} values (one per channel)")
    training = int(at.get("training_mode", 0))
    b.need(training in (0, 1), f"training_mode must be 0 or 1, got {training}")
    eps = float(at.get("epsilon", 1e-5))
    if training:
        return _batchnorm_training(b, node, x, scale, bias, mean, var, eps, float(at.get("momentum", 0.9)))
    if all(v.is_const for v in (scale, bias, mean, var)):  # one multiply and one add
        s = (scale.const.astype(np.float64) / np.sqrt(var.const.astype(np.float64) + eps))
        sh = bias.const.astype(np.float64) - mean.const.astype(np.float64) * s
        y = lib.ggml_mul(b.ctx, f(b, x), b.weight(s.astype(np.float32).reshape((1, C) + (1,) * (x.rank - 2))))
        y = lib.ggml_add(b.ctx, y, b.weight(sh.astype(np.float32).reshape((1, C) + (1,) * (x.rank - 2))))
    else:
        c = b.ctx
        inv = lib.ggml_sqrt(c, lib.ggml_scale_bias(c, _channel(b, var, C, x.rank), 1.0, eps))
        y = lib.ggml_div(c, lib.ggml_sub(c, f(b, x), _channel(b, mean, C, x.rank)), inv)
        y = lib.ggml_add(c, lib.ggml_mul(c, y, _channel(b, scale, C, x.rank)), _channel(b, bias, C, x.rank))
    return [b.out(y, x.shape, x.dtype)]


def _batchnorm_training(b, node, x, scale, bias, mean, var, eps, momentum):
    """training_mode=1: normalised by the batch's statistics per channel (over N and the spatial axes,
    population variance), and the running statistics updated: momentum * input + (1 - momentum) * batch."""
    c = b.ctx
    C = x.shape[1]
    rows, _, _ = to_rows(b, b.tensor(x), x.shape, [k for k in range(x.rank) if k != 1])  # ne [N*spatial, C]
    mu = lib.ggml_mean(c, rows)  # ne [1, C]
    d = lib.ggml_sub(c, rows, mu)
    sig = lib.ggml_mean(c, lib.ggml_sqr(c, d))
    chan = (1, C) + (1,) * (x.rank - 2)
    inv = lib.ggml_sqrt(c, lib.ggml_scale_bias(c, reshape(b, sig, chan), 1.0, eps))
    y = lib.ggml_div(c, lib.ggml_sub(c, f(b, x), reshape(b, mu, chan)), inv)
    y = lib.ggml_add(c, lib.ggml_mul(c, y, _channel(b, scale, C, x.rank)), _channel(b, bias, C, x.rank))
    outs = [b.out(y, x.shape, x.dtype)]
    for running, batch in ((mean, mu), (var, sig)):
        r = lib.ggml_add(c, lib.ggml_scale(c, reshape(b, b.tensor(running), (C,)), momentum),
                         lib.ggml_scale(c, reshape(b, batch, (C,)), 1.0 - momentum))
        outs.append(b.out(r, (C,), x.dtype))
    return outs[:max(1, len(node.output))]


def _affine(b, y, shape, scale, bias, dtype):
    v = Val(shape, dtype, t=y)
    if scale is not None:
        t, shp = binary(b, lambda c, p, q: lib.ggml_mul(c, p, q), v, scale, True)
        v = Val(shp, dtype, t=t)
    if bias is not None:
        t, shp = binary(b, lambda c, p, q: lib.ggml_add(c, p, q), v, bias, True)
        v = Val(shp, dtype, t=t)
    return b.out(v.t, v.shape, dtype)


@op("LayerNormalization")
def _layernorm(b, node, ins, at):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    eps = float(at.get("epsilon", 1e-5))
    R = int(np.prod(x.shape[axis:], dtype=np.int64))
    rows = reshape(b, b.tensor(x), (x.size // R, R))
    k = b.kernels
    if (k is not None and k.layernorm is not None and len(node.output) == 1 and scale.size == R
            and (bias is None or bias.size == R)):  # one pass: normalise, scale, shift
        vec = lambda v: None if v is None else reshape(b, b.tensor(v), (R,))  # noqa: E731
        y = b.kernel_node(k.layernorm(b.ctx, rows, vec(scale), vec(bias), eps), "layernorm")
        return [b.out(reshape(b, y, x.shape), x.shape, x.dtype)]
    y = reshape(b, lib.ggml_norm(b.ctx, rows, eps), x.shape)
    outs = [_affine(b, y, x.shape, scale, bias, x.dtype)]
    if len(node.output) > 1:
        sshape = x.shape[:axis] + (1,) * (x.rank - axis)
        mean = lib.ggml_mean(b.ctx, rows)
        var = lib.ggml_mean(b.ctx, lib.ggml_sqr(b.ctx, lib.ggml_sub(b.ctx, rows, mean)))
        inv = lib.ggml_sqrt(b.ctx, lib.ggml_scale_bias(b.ctx, var, 1.0, eps))
        inv = lib.ggml_div(b.ctx, lib.ggml_repeat(b.ctx, scalar_f32(b, 1.0), inv), inv)
        outs += [b.out(reshape(b, mean, sshape), sshape, x.dtype), b.out(reshape(b, inv, sshape), sshape, x.dtype)]
    return outs[:len(node.output)]


@op("RMSNormalization")
def _rmsnorm(b, node, ins, at):
    x, scale = ins[0], ins[1]
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    eps = float(at.get("epsilon", 1e-5))
    R = int(np.prod(x.shape[axis:], dtype=np.int64))
    rows = reshape(b, b.tensor(x), (x.size // R, R))
    y = reshape(b, lib.ggml_rms_norm(b.ctx, rows, eps), x.shape)
    return [_affine(b, y, x.shape, scale, None, x.dtype)]


@op("InstanceNormalization")
def _instancenorm(b, node, ins, at):
    x, scale, bias = ins
    eps = float(at.get("epsilon", 1e-5))
    N, C = x.shape[:2]
    S = x.size // (N * C)
    y = reshape(b, lib.ggml_norm(b.ctx, reshape(b, b.tensor(x), (N * C, S)), eps), x.shape)
    y = lib.ggml_mul(b.ctx, y, _channel(b, scale, C, x.rank))
    y = lib.ggml_add(b.ctx, y, _channel(b, bias, C, x.rank))
    return [b.out(y, x.shape, x.dtype)]


@op("GroupNormalization")
def _groupnorm(b, node, ins, at):
    x, scale, bias = ins
    G = int(at["num_groups"])
    eps = float(at.get("epsilon", 1e-5))
    N, C = x.shape[:2]
    b.need(C % G == 0, f"{C} channels do not split into {G} groups")
    S = x.size // (N * C)
    rows = reshape(b, b.tensor(x), (N * G, (C // G) * S))
    y = reshape(b, lib.ggml_norm(b.ctx, rows, eps), x.shape)
    if scale.size == G and G != C:  # opset 18: one scale and bias per group
        b.need_value(scale.is_const and bias.is_const, "per-group scale and bias must be constant", scale, bias)
        scale = const(np.repeat(scale.const, C // G), scale.dtype)
        bias = const(np.repeat(bias.const, C // G), bias.dtype)
    y = lib.ggml_mul(b.ctx, y, _channel(b, scale, C, x.rank))
    y = lib.ggml_add(b.ctx, y, _channel(b, bias, C, x.rank))
    return [b.out(y, x.shape, x.dtype)]


@op("LpNormalization")
def _lpnorm(b, node, ins, at):
    x = ins[0]
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    p = int(at.get("p", 2))
    b.need(p in (1, 2), f"p={p}")
    rows, _, perm = to_rows(b, b.tensor(x), x.shape, [axis])
    c = b.ctx
    n = lib.ggml_sum_rows(c, lib.ggml_abs(c, rows)) if p == 1 else lib.ggml_sqrt(c, lib.ggml_sum_rows(c, lib.ggml_sqr(c, rows)))
    y = lib.ggml_div(c, rows, lib.ggml_clamp(c, n, 1e-30, FLT_MAX))  # a zero vector stays zero
    moved = tuple(x.shape[q] for q in perm)
    return [b.out(permute(b, reshape(b, y, moved), list(np.argsort(perm))), x.shape, x.dtype)]


# -- pad ------------------------------------------------------------------------------------------------
@op("Pad", const_inputs=(1, 2, 3))
def _pad(b, node, ins, at):
    x = ins[0]
    r = x.rank
    if len(ins) > 1 and ins[1] is not None:
        pads = [int(p) for p in cval(b, ins[1], "pads")]
        value = float(cval(b, ins[2], "constant_value").reshape(-1)[0]) if len(ins) > 2 and ins[2] is not None else 0.0
        axes = [norm_axis(b, a, r) for a in cval(b, ins[3], "axes")] if len(ins) > 3 and ins[3] is not None else list(range(r))
    else:
        pads = [int(p) for p in at["pads"]]
        value = float(at.get("value", 0.0))
        axes = list(range(r))
    mode = at.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    na = len(axes)
    pb, pe = [0] * r, [0] * r
    for i, a in enumerate(axes):
        pb[a], pe[a] = pads[i], pads[na + i]
    t, shape = b.tensor(x), x.shape
    if mode == "constant":
        for a in range(r):  # negative pads crop
            if pb[a] < 0 or pe[a] < 0:
                t, shape = slice_axis(b, t, shape, a, max(0, -pb[a]), shape[a] - max(0, -pe[a]))
        pbp, pep = [max(0, p) for p in pb], [max(0, p) for p in pe]
        inner = shape
        t, shape = pad_zero(b, t, shape, pbp, pep)
        if value != 0.0 and (any(pbp) or any(pep)):
            mask = np.full(shape, value, dtype=np.float32)
            mask[tuple(slice(p, p + s) for p, s in zip(pbp, inner))] = 0.0
            t = lib.ggml_add(b.ctx, t, b.weight(mask))
        return [b.out(t, shape, x.dtype)]
    npmode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(mode)
    b.need(npmode is not None, f"pad mode '{mode}'")
    for a in range(r):
        if pb[a] or pe[a]:
            b.need(pb[a] >= 0 and pe[a] >= 0, "negative pads with mode " + mode)
            idx = np.pad(np.arange(shape[a]), (pb[a], pe[a]), mode=npmode)
            t, shape = take(b, t, shape, a, idx)
    return [b.out(t, shape, x.dtype)]
