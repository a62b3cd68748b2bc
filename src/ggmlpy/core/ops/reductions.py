"""Ops along rows: norms (norm, rms_norm, group_norm), reductions (sum, sum_rows, mean, argmax,
count_equal) and sorting (argsort, top_k).
"""
from __future__ import annotations



from ...bindings import lib
from ...errors import check
from ..._naming import public_function
from ..checked import check_rule
from ..handles import Context, Tensor
from .args import (CPU_FLOAT, F32, I32, c_function, check_contiguous, check_packed_rows, check_types, dims, input_tensor, make_like,
                   make_tensor, same_shape_pair, shape_str, start_op)
from .views import ggml_reshape_2d

GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC = 0, 1  # enum ggml_sort_order


# -- norms ------------------------------------------------------------------------------------------
def _norm(cname: str):

    def op(ctx: Context, a: Tensor, eps: float = 1e-5, *, _inplace: bool = False) -> Tensor:
        ctx = start_op(ctx)
        a = input_tensor(a, cname)
        check_types(a, (F32,), cname)
        check_packed_rows(a, cname)
        check(eps >= 0, f"{cname}: eps must be >= 0")
        return make_like(ctx, cname, a, lambda: c_function(cname, _inplace)(ctx.ptr, a.ptr, float(eps)), view=_inplace)

    return public_function(op, cname, f"{cname}(ctx, a, eps=1e-5): normalise along ne0 (per R column).")


ggml_norm = _norm("ggml_norm")
ggml_rms_norm = _norm("ggml_rms_norm")
ggml_l2_norm = _norm("ggml_l2_norm")


def ggml_rms_norm_back(ctx: Context, a: Tensor, b: Tensor, eps: float = 1e-5) -> Tensor:
    """Gradient of rms_norm: a = upstream gradient, b = the rms_norm input x."""
    return same_shape_pair("ggml_rms_norm_back", ctx, a, b, lib.ggml_rms_norm_back, float(eps))


def ggml_group_norm(ctx: Context, a: Tensor, n_groups: int, eps: float = 1e-5, *, _inplace: bool = False) -> Tensor:
    """Normalise groups of channels (ne2): ggml splits ne2 into n_groups groups of
    ceil(ne2 / n_groups) channels; with n_groups > ne2 every channel is its own group.
    ggmlR refuses n_groups > ne2, which ggml handles."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_group_norm")
    check_types(a, (F32,), "ggml_group_norm")
    check_packed_rows(a, "ggml_group_norm")
    n_groups = int(n_groups)
    check(n_groups > 0, f"ggml_group_norm: n_groups must be positive, got {n_groups}")
    check(eps >= 0, "ggml_group_norm: eps must be >= 0")
    return make_like(ctx, "ggml_group_norm", a, lambda: c_function("ggml_group_norm", _inplace)(ctx.ptr, a.ptr, n_groups, float(eps)),
                 view=_inplace)


# -- reductions ---------------------------------------------------------------------------------------
def ggml_sum(ctx: Context, a: Tensor) -> Tensor:
    """The sum of all elements of a, as a one-element tensor."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_sum")
    check_types(a, CPU_FLOAT, "ggml_sum")
    check_packed_rows(a, "ggml_sum")
    return make_tensor(ctx, "ggml_sum", [1, 1, 1, 1], a.type, lambda: lib.ggml_sum(ctx.ptr, a.ptr))


def ggml_sum_rows(ctx: Context, a: Tensor) -> Tensor:
    """Sum along ne0: [ne0, ne1, ...] -> [1, ne1, ...] (R colSums)."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_sum_rows")
    check_types(a, (F32,), "ggml_sum_rows")  # the CPU kernel aborts on f16
    check_packed_rows(a, "ggml_sum_rows")
    return make_tensor(ctx, "ggml_sum_rows", [1] + dims(a)[1:], a.type, lambda: lib.ggml_sum_rows(ctx.ptr, a.ptr))


def ggml_mean(ctx: Context, a: Tensor) -> Tensor:
    """Mean along ne0: [ne0, ne1, ...] -> [1, ne1, ...] (R colMeans)."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_mean")
    check_types(a, (F32,), "ggml_mean")
    check_packed_rows(a, "ggml_mean")
    return make_tensor(ctx, "ggml_mean", [1] + dims(a)[1:], F32, lambda: lib.ggml_mean(ctx.ptr, a.ptr))


def ggml_argmax(ctx: Context, a: Tensor) -> Tensor:
    """Index of the maximum along ne0 of a matrix: [ne0, ne1] -> i32 [ne1]."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_argmax")
    check_types(a, (F32,), "ggml_argmax")
    check_packed_rows(a, "ggml_argmax")
    check_rule("ggml_argmax", "ggml_argmax", a.ptr)
    return make_tensor(ctx, "ggml_argmax", [dims(a)[1], 1, 1, 1], I32, lambda: lib.ggml_argmax(ctx.ptr, a.ptr))


def ggml_count_equal(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Number of equal elements of two i32 tensors of the same shape (an i64 scalar)."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_count_equal", "a"), input_tensor(b, "ggml_count_equal", "b")
    check_types(a, (I32,), "ggml_count_equal", "a")
    check_types(b, (I32,), "ggml_count_equal", "b")
    check(dims(a) == dims(b), f"ggml_count_equal: shapes differ: {shape_str(a)} vs {shape_str(b)}")
    ne = dims(a)
    if ne[2] * ne[3] > 1:  # ggml's kernel mis-indexes 3-d/4-d rows (wrong counts, reads out of bounds)
        for x, arg in ((a, "a"), (b, "b")):
            check_contiguous(x, "ggml_count_equal (3-d or 4-d)", arg)
        a, b = (ggml_reshape_2d(ctx, x, ne[0], ne[1] * ne[2] * ne[3]) for x in (a, b))
    return make_tensor(ctx, "ggml_count_equal", [1, 1, 1, 1], lib.GGML_TYPE_I64,
                 lambda: lib.ggml_count_equal(ctx.ptr, a.ptr, b.ptr))


# -- sorting ---------------------------------------------------------------------------------------------
def ggml_argsort(ctx: Context, a: Tensor, order: int = 0) -> Tensor:
    """i32 indices that sort each row (along ne0); order 0 ascending, 1 descending."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_argsort")
    check_types(a, (F32,), "ggml_argsort")
    check_contiguous(a, "ggml_argsort")  # the kernel steps through rows by nb1 alone
    check(int(order) in (0, 1), "ggml_argsort: order must be 0 (ascending) or 1 (descending)")
    return make_tensor(ctx, "ggml_argsort", dims(a), I32, lambda: lib.ggml_argsort(ctx.ptr, a.ptr, int(order)))


def ggml_top_k(ctx: Context, a: Tensor, k: int) -> Tensor:
    """i32 indices of the k largest entries of each row (order within the k is unspecified)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_top_k")
    check_types(a, (F32,), "ggml_top_k")
    check_contiguous(a, "ggml_top_k")
    k = int(k)
    check(0 < k <= dims(a)[0], f"ggml_top_k: k must be in 1..{dims(a)[0]}, got {k}")
    return make_tensor(ctx, "ggml_top_k", [k] + dims(a)[1:], I32, lambda: lib.ggml_top_k(ctx.ptr, a.ptr, k))


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
