"""Matrix products: mul_mat, out_prod, and mul_mat_id (a product per row, with expert ids).
"""
from __future__ import annotations



from ...bindings import lib
from ...errors import check
from ..checked import check_rule, tensor_arg
from ..tensor5 import Tensor5, dims5, plain, unfold
from ..handles import Context, Tensor
from .args import (F16, F32, FLOAT, I32, QUANTIZED, check_packed_rows, check_types, dims, input_tensor, make_tensor, shape_str, start_op)


# -- matrix products ------------------------------------------------------------------------
def ggml_mul_mat(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """a [K, M, ...] x b [K, N, ...] -> [M, N, ...]: in R terms t(a) %*% b. Five-dim batches (ne2..ne4):
    a's ne3 and ne4 are b's or both one (ggml spreads a smaller batch over b's by division, which a
    merged pair of other sizes would mix)."""
    ctx = start_op(ctx)
    if isinstance(a, Tensor5) or isinstance(b, Tensor5):  # ne3 and ne4 merged (tensor5.py)
        a, b = tensor_arg(a, "ggml_mul_mat", "a"), tensor_arg(b, "ggml_mul_mat", "b")
        na, nb_ = dims5(a), dims5(b)
        check(na[3:] in (nb_[3:], [1, 1]), f"ggml_mul_mat: a's batch dims 3, 4 {na[3:]} must be b's {nb_[3:]} or "
                                           f"[1, 1] with five dims (a {na}, b {nb_})")
        return unfold(ctx, ggml_mul_mat(ctx, plain(a), plain(b)), 3, [na[1], nb_[1], nb_[2], nb_[3], nb_[4]])
    a, b = input_tensor(a, "ggml_mul_mat", "a"), input_tensor(b, "ggml_mul_mat", "b")
    check_types(a, FLOAT + QUANTIZED, "ggml_mul_mat", "a")
    check_types(b, (F32,), "ggml_mul_mat", "b")
    na, nb_ = dims(a), dims(b)
    check_rule("ggml_mul_mat", "ggml_mul_mat", a.ptr, b.ptr)
    check_packed_rows(a, "ggml_mul_mat", "a")
    check_packed_rows(b, "ggml_mul_mat", "b")
    return make_tensor(ctx, "ggml_mul_mat", [na[1], nb_[1], nb_[2], nb_[3]], F32,
                 lambda: lib.ggml_mul_mat(ctx.ptr, a.ptr, b.ptr))


def ggml_out_prod(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """a [M, K] (x) b [N, K] -> [M, N]: in R terms a %*% t(b)."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_out_prod", "a"), input_tensor(b, "ggml_out_prod", "b")
    check_types(a, (F32,), "ggml_out_prod", "a")
    check_types(b, (F32,), "ggml_out_prod", "b")
    na, nb_ = dims(a), dims(b)
    check_rule("ggml_out_prod", "ggml_out_prod", a.ptr, b.ptr)
    check_packed_rows(a, "ggml_out_prod", "a")
    return make_tensor(ctx, "ggml_out_prod", [na[0], nb_[0], nb_[2], nb_[3]], F32,
                 lambda: lib.ggml_out_prod(ctx.ptr, a.ptr, b.ptr))


def ggml_mul_mat_id(ctx: Context, as_: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    """Mixture-of-experts product: as_ [K, M, n_expert] stacks expert matrices, b [K, n_b, n_tokens],
    ids i32 [n_used, n_tokens] picks the experts; -> [M, n_used, n_tokens]."""
    what = "ggml_mul_mat_id"
    ctx = start_op(ctx)
    as_, b, ids = input_tensor(as_, what, "as"), input_tensor(b, what, "b"), input_tensor(ids, what, "ids")
    check_types(as_, (F32, F16), what, "as")
    check_types(b, (F32,), what, "b")
    check_types(ids, (I32,), what, "ids")
    check_packed_rows(as_, what, "as")
    check_packed_rows(b, what, "b")
    na, nb, ni = dims(as_), dims(b), dims(ids)
    check(not lib.ggml_is_transposed(as_.ptr), f"{what}: as must not be transposed")
    check(na[3] == 1 and nb[3] == 1, f"{what}: as and b must be at most 3-d")
    check(ni[2] == 1 and ni[3] == 1, f"{what}: ids must be 2-d, got {shape_str(ids)}")
    check(ni[1] == nb[2], f"{what}: ids needs one row of experts per b token (ne1 = {nb[2]}), got {shape_str(ids)}")
    check(na[0] == nb[0], f"{what}: as and b must share ne0, got {na[0]} and {nb[0]}")
    check(nb[1] > 0 and ni[0] % nb[1] == 0, f"{what}: b's ne1 ({nb[1]}) must divide ids' ne0 ({ni[0]})")
    # the ids' values are range-checked before compute (check_graph): the kernel asserts 0 <= id < n_expert
    return make_tensor(ctx, what, [na[1], ni[0], nb[2], 1], F32, lambda: lib.ggml_mul_mat_id(ctx.ptr, as_.ptr, b.ptr, ids.ptr))


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
