"""Convolution, pooling and resampling: im2col, conv_1d/2d and their depthwise, direct and
transposed forms, pool_1d/2d, upscale. Composite convolutions are assembled from ggmlpy's own
checked primitives, the same graph ggml's C helper would build.
"""
from __future__ import annotations



from ...bindings import lib
from ...errors import check
from .. import checked
from ..checked import check_rule, conv_out
from ..handles import Context, Tensor
from .args import (F16, F32, N_OVERHEAD, check_contiguous, check_types, dims, input_tensor, int_arg, make_tensor, shape_str, start_op)
from .products import ggml_mul_mat
from .views import ggml_cont, ggml_permute, ggml_reshape_2d, ggml_reshape_3d, ggml_reshape_4d

GGML_OP_POOL_MAX = lib.GGML_OP_POOL_MAX
GGML_OP_POOL_AVG = lib.GGML_OP_POOL_AVG


# -- convolution, pooling, resampling -----------------------------------------------------------------
def ggml_im2col(ctx: Context, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int,
                is_2D: bool = True, dst_type: int = F32) -> Tensor:
    """Unfold b [W, H, C, N] into columns for kernel a [KW, KH, C, OC]."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_im2col", "a"), input_tensor(b, "ggml_im2col", "b")
    check_types(b, (F32,), "ggml_im2col", "b")
    check_contiguous(b, "ggml_im2col", "b")  # the kernel indexes each plane as [IH][IW]
    check(0 not in dims(a) + dims(b), "ggml_im2col: kernel and input must not be empty")
    check(dst_type in (F32, F16), "ggml_im2col: dst_type must be f32 or f16")
    s0, s1, p0, p1, d0, d1 = (int(v) for v in (s0, s1, p0, p1, d0, d1))
    check_rule("ggml_im2col", "ggml_im2col", a.ptr, b.ptr, s0, s1, p0, p1, d0, d1, bool(is_2D))
    na, nb_ = dims(a), dims(b)
    oh = conv_out(nb_[1], na[1], s1, p1, d1) if is_2D else 0
    ow = conv_out(nb_[0], na[0], s0, p0, d0)
    ne = [na[2] * na[1] * na[0], ow, oh, nb_[3]] if is_2D else [na[1] * na[0], ow, nb_[2], 1]
    return make_tensor(ctx, "ggml_im2col", ne, dst_type,
                 lambda: lib.ggml_im2col(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1, bool(is_2D), dst_type))


def ggml_conv_2d(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                 d0: int = 1, d1: int = 1) -> Tensor:
    """2-d convolution of b [W, H, C, N] with kernel a [KW, KH, C, OC] -> [OW, OH, OC, N]."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_conv_2d", "a"), input_tensor(b, "ggml_conv_2d", "b")
    check_types(a, (F32, F16), "ggml_conv_2d", "a")
    check_types(b, (F32,), "ggml_conv_2d", "b")
    check_contiguous(b, "ggml_conv_2d", "b")  # through im2col
    check(0 not in dims(a) + dims(b), "ggml_conv_2d: kernel and input must not be empty")  # ggml asserts deep inside
    check(bool(lib.ggml_is_contiguous(a.ptr)), "ggml_conv_2d: kernel must be contiguous")
    na, nb_ = dims(a), dims(b)
    s0, s1, p0, p1, d0, d1 = (int(v) for v in (s0, s1, p0, p1, d0, d1))
    check_rule("ggml_conv_2d", "ggml_conv_2d", a.ptr, b.ptr, s0, s1, p0, p1, d0, d1)
    ow, oh = conv_out(nb_[0], na[0], s0, p0, d0), conv_out(nb_[1], na[1], s1, p1, d1)
    cols = na[0] * na[1] * na[2] * ow * oh * nb_[3]
    out = ow * oh * na[3] * nb_[3]
    # im2col (f16), mul_mat, then a permuted copy: reserve all of them, plus the views between.
    extra = 2 * cols + 8 * out + 8 * N_OVERHEAD + 64
    return make_tensor(ctx, "ggml_conv_2d", [ow, oh, na[3], nb_[3]], F32,
                 lambda: lib.ggml_conv_2d(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1), extra=extra)


def _pool_op(op):
    ops = {"max": lib.GGML_OP_POOL_MAX, "avg": lib.GGML_OP_POOL_AVG}
    if isinstance(op, str):
        check(op in ops, f"pool op must be 'max' or 'avg', got {op!r}")
        return ops[op]
    check(op in ops.values(), f"unknown pool op {op}")
    return int(op)


def ggml_pool_1d(ctx: Context, a: Tensor, op: int | str, k0: int, s0: int, p0: int = 0) -> Tensor:
    """1-D pooling along ne0: op "max"/"avg" (or GGML_OP_POOL_*), kernel k0, stride s0, padding p0."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_pool_1d")
    check_types(a, (F32, F16), "ggml_pool_1d")
    check_contiguous(a, "ggml_pool_1d")  # the kernel steps through rows by nb1 alone
    op, k0, s0, p0 = _pool_op(op), int(k0), int(s0), int(p0)
    check_rule("ggml_pool_1d", "ggml_pool_1d", a.ptr, op, k0, s0, p0)
    n = dims(a)
    o0 = checked.pool_out(n[0], k0, s0, p0)
    return make_tensor(ctx, "ggml_pool_1d", [o0] + n[1:], F32, lambda: lib.ggml_pool_1d(ctx.ptr, a.ptr, op, k0, s0, p0))


def ggml_pool_2d(ctx: Context, a: Tensor, op: int | str, k0: int, k1: int, s0: int, s1: int, p0: float = 0.0,
                 p1: float = 0.0) -> Tensor:
    """2-D pooling over ne0 and ne1: op "max"/"avg", kernel k0 x k1, strides s0, s1, padding p0, p1."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_pool_2d")
    check_types(a, (F32, F16), "ggml_pool_2d")
    check_contiguous(a, "ggml_pool_2d")  # it walks planes by nb2 to the end of a's bytes: more planes than dst has
    op, k0, k1, s0, s1 = _pool_op(op), int(k0), int(k1), int(s0), int(s1)
    check_rule("ggml_pool_2d", "ggml_pool_2d", a.ptr, op, k0, k1, s0, s1, float(p0), float(p1))
    n = dims(a)
    o0, o1 = checked.pool_out(n[0], k0, s0, p0), checked.pool_out(n[1], k1, s1, p1)
    return make_tensor(ctx, "ggml_pool_2d", [o0, o1] + n[2:], F32,
                 lambda: lib.ggml_pool_2d(ctx.ptr, a.ptr, op, k0, k1, s0, s1, float(p0), float(p1)))


def ggml_upscale(ctx: Context, a: Tensor, scale_factor: int, mode: int = 0) -> Tensor:
    """Nearest (mode 0) or bilinear (mode 1) upscaling of dims 0 and 1 by an integer factor."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_upscale")
    check_types(a, (F32,), "ggml_upscale")
    sf = int(scale_factor)
    check(sf > 1, f"ggml_upscale: scale_factor must be > 1, got {scale_factor}")
    check(int(mode) in (0, 1, 2), "ggml_upscale: mode must be 0 (nearest), 1 (bilinear) or 2 (bicubic)")
    n = dims(a)
    return make_tensor(ctx, "ggml_upscale", [n[0] * sf, n[1] * sf, n[2], n[3]], F32,
                 lambda: lib.ggml_upscale(ctx.ptr, a.ptr, sf, int(mode)))


GGML_SCALE_MODE_NEAREST = lib.GGML_SCALE_MODE_NEAREST
GGML_SCALE_MODE_BILINEAR = lib.GGML_SCALE_MODE_BILINEAR
GGML_SCALE_MODE_BICUBIC = lib.GGML_SCALE_MODE_BICUBIC


# -- convolutions -------------------------------------------------------------------------------------------
def ggml_conv_1d(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, p0: int = 0, d0: int = 1) -> Tensor:
    """1-d convolution of b [L, IC, N] with kernel a [K, IC, OC] -> [OL, OC, N] (im2col + mul_mat)."""
    what = "ggml_conv_1d"
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32,), what, "a")
    check(bool(lib.ggml_is_contiguous(a.ptr)), f"{what}: the kernel must be contiguous")
    na = dims(a)
    check(na[3] == 1 and dims(b)[3] == 1, f"{what}: kernel and data must be at most 3-d")
    col = ggml_im2col(ctx, a, b, s0, 1, p0, 0, d0, 1, False, F32)  # [IC*K, OL, N]
    nc = dims(col)
    y = ggml_mul_mat(ctx, ggml_reshape_2d(ctx, col, nc[0], nc[2] * nc[1]),
                          ggml_reshape_2d(ctx, a, na[0] * na[1], na[2]))  # [OL*N, OC]
    if nc[2] == 1:
        return ggml_reshape_3d(ctx, y, nc[1], na[2], 1)
    # [OL*N, OC] holds batch n's outputs at OL*n..: ggml's own conv_1d reshapes this straight to
    # [OL, OC, N], which mixes batches for N > 1 (ggmlR inherits that); put OC before N instead.
    y = ggml_reshape_3d(ctx, y, nc[1], nc[2], na[2])
    return ggml_cont(ctx, ggml_permute(ctx, y, 0, 2, 1, 3))


def ggml_conv_1d_dw(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, p0: int = 0, d0: int = 1) -> Tensor:
    """Depthwise 1-d convolution: b [L, C] (one channel per row), kernel a [K, 1, C] -> [OL, C, 1]."""
    what = "ggml_conv_1d_dw"
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32,), what, "a")
    na, nb = dims(a), dims(b)
    check(na[1] == 1 and na[3] == 1, f"{what}: kernel must be [K, 1, C], got {shape_str(a)}")
    check(nb[2] == 1 and nb[3] == 1 and na[2] == nb[1],
          f"{what}: data must be [L, C] with C = the kernel's ne2 ({na[2]}), got {shape_str(b)}")
    check_contiguous(b, what, "b")
    nbr = ggml_reshape_4d(ctx, b, nb[0], 1, nb[1], nb[2])
    col = ggml_im2col(ctx, a, nbr, s0, 1, p0, 0, d0, 1, False, F32)  # [K, OL, C]
    y = ggml_mul_mat(ctx, col, a)  # [OL, 1, C]
    ny = dims(y)
    return ggml_reshape_3d(ctx, y, ny[0], ny[2], 1)


def ggml_conv_2d_dw(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                    d0: int = 1, d1: int = 1) -> Tensor:
    """Depthwise 2-d convolution: b [W, H, C, N], kernel a [KW, KH, 1, C] -> [OW, OH, C, N] (im2col path)."""
    what = "ggml_conv_2d_dw"
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32,), what, "a")
    check_types(b, (F32,), what, "b")
    na, nb = dims(a), dims(b)
    check(na[2] * na[3] == nb[2], f"{what}: kernel {shape_str(a)} needs one KW x KH filter per channel "
          f"(ne2*ne3 = C = {nb[2]})")
    check_contiguous(a, what, "a")
    check_contiguous(b, what, "b")
    new_a = ggml_reshape_4d(ctx, a, na[0], na[1], 1, na[2] * na[3])
    col = ggml_im2col(ctx, new_a, ggml_reshape_4d(ctx, b, nb[0], nb[1], 1, nb[2] * nb[3]),
                           s0, s1, p0, p1, d0, d1, True, F32)  # [KW*KH, OW, OH, C*N]
    nc = dims(col)
    new_b = ggml_reshape_4d(ctx, col, nc[0], nc[2] * nc[1], nb[2], nb[3])
    new_a = ggml_reshape_4d(ctx, new_a, na[0] * na[1], 1, na[2] * na[3], 1)
    y = ggml_mul_mat(ctx, new_a, new_b)
    return ggml_reshape_4d(ctx, y, nc[1], nc[2], nb[2], nb[3])


def _conv_args(what, vals):
    s0, s1, p0, p1, d0, d1 = (int_arg(v, what, n) for v, n in zip(vals, ("s0", "s1", "p0", "p1", "d0", "d1")))
    check(s0 > 0 and s1 > 0 and d0 > 0 and d1 > 0 and p0 >= 0 and p1 >= 0,
          f"{what}: strides and dilations must be > 0, paddings >= 0")
    return s0, s1, p0, p1, d0, d1


def _kernel_and_input(ctx, a, b, what):
    """A convolution's operands as ggml's kernels take them: a kernel a (f32 or f16) and an f32 input b, both
    contiguous."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32, F16), what, "a")
    check_types(b, (F32,), what, "b")
    check_contiguous(a, what, "a")
    check_contiguous(b, what, "b")
    return ctx, a, b


def _direct_out(what, na, nb, s0, s1, p0, p1, d0, d1) -> tuple:
    """(OW, OH) of a direct convolution of kernel dims na over input dims nb; the input must hold the kernel."""
    ow, oh = conv_out(nb[0], na[0], s0, p0, d0), conv_out(nb[1], na[1], s1, p1, d1)
    check(ow > 0 and oh > 0, f"{what}: input too small for the kernel")
    return ow, oh


def ggml_conv_2d_dw_direct(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                           d0: int = 1, d1: int = 1) -> Tensor:
    """Depthwise 2-d convolution with ggml's direct kernel: b [W, H, C, N], a [KW, KH, 1, C] -> [OW, OH, C, N]."""
    what = "ggml_conv_2d_dw_direct"
    ctx, a, b = _kernel_and_input(ctx, a, b, what)
    na, nb = dims(a), dims(b)
    check(na[2] == 1 and na[3] == nb[2], f"{what}: kernel must be [KW, KH, 1, C] with C = {nb[2]}, got {shape_str(a)}")
    s0, s1, p0, p1, d0, d1 = _conv_args(what, (s0, s1, p0, p1, d0, d1))
    ow, oh = _direct_out(what, na, nb, s0, s1, p0, p1, d0, d1)
    return make_tensor(ctx, what, [ow, oh, nb[2], nb[3]], F32,
                 lambda: lib.ggml_conv_2d_dw_direct(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1))


def ggml_conv_2d_direct(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                        d0: int = 1, d1: int = 1) -> Tensor:
    """2-d convolution with ggml's direct kernel (no im2col tensor): b [W, H, C, N], a [KW, KH, C, OC]."""
    what = "ggml_conv_2d_direct"
    ctx, a, b = _kernel_and_input(ctx, a, b, what)
    na, nb = dims(a), dims(b)
    check(na[2] == nb[2], f"{what}: channels differ: kernel {na[2]}, input {nb[2]}")
    s0, s1, p0, p1, d0, d1 = _conv_args(what, (s0, s1, p0, p1, d0, d1))
    ow, oh = _direct_out(what, na, nb, s0, s1, p0, p1, d0, d1)
    return make_tensor(ctx, what, [ow, oh, na[3], nb[3]], F32,
                 lambda: lib.ggml_conv_2d_direct(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1))


def ggml_conv_transpose_1d(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, p0: int = 0, d0: int = 1) -> Tensor:
    """Transposed 1-d convolution: b [L, IC], kernel a [K, OC, IC] -> [(L-1)*s0 + K, OC]. ggml supports
    only p0 = 0 and d0 = 1."""
    what = "ggml_conv_transpose_1d"
    ctx, a, b = _kernel_and_input(ctx, a, b, what)
    s0, p0, d0 = int_arg(s0, what, "s0"), int_arg(p0, what, "p0"), int_arg(d0, what, "d0")
    check(s0 > 0, f"{what}: stride must be positive")
    check(p0 == 0 and d0 == 1, f"{what}: ggml supports only p0 = 0 and d0 = 1, got p0={p0}, d0={d0}")
    na, nb = dims(a), dims(b)
    check(bool(lib.ggml_is_matrix(b.ptr)), f"{what}: data must be a matrix [L, IC], got {shape_str(b)}")
    check(na[2] == nb[1] and na[3] == 1, f"{what}: kernel {shape_str(a)} must be [K, OC, IC = {nb[1]}]")
    ol = (nb[0] - 1) * s0 + d0 * (na[0] - 1) + 1
    return make_tensor(ctx, what, [ol, na[1], 1, 1], F32, lambda: lib.ggml_conv_transpose_1d(ctx.ptr, a.ptr, b.ptr, s0, 0, 1))


def ggml_conv_transpose_2d_p0(ctx: Context, a: Tensor, b: Tensor, stride: int = 1) -> Tensor:
    """Transposed 2-d convolution without padding: b [W, H, IC, N], kernel a [KW, KH, OC, IC] (f16 on the CPU)
    -> [(W-1)*stride + KW, (H-1)*stride + KH, OC, N]."""
    what = "ggml_conv_transpose_2d_p0"
    ctx, a, b = _kernel_and_input(ctx, a, b, what)
    stride = int_arg(stride, what, "stride")
    check(stride > 0, f"{what}: stride must be positive")
    na, nb = dims(a), dims(b)
    check(na[3] == nb[2], f"{what}: kernel ne3 ({na[3]}) must equal the input channels ({nb[2]})")
    return make_tensor(ctx, what, [(nb[0] - 1) * stride + na[0], (nb[1] - 1) * stride + na[1], na[2], nb[3]], F32,
                 lambda: lib.ggml_conv_transpose_2d_p0(ctx.ptr, a.ptr, b.ptr, stride))


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
