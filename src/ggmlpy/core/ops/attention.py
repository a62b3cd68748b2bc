"""Attention: softmax (with mask and ALiBi slopes) and its backward, the causal masks
(diag_mask_inf, diag_mask_zero), relative positions (get_rel_pos, add_rel_pos), flash attention
and its backward.
"""
from __future__ import annotations

from typing import NoReturn


from ...bindings import ffi, lib
from ...errors import GGMLError, check
from ..checked import check_rule
from ..handles import Context, Tensor
from ..tensor5 import Tensor5
from .args import (contiguous_input, F16, F32, QUANTIZED, c_function, check_contiguous, check_packed_rows, check_types, dims, input_tensor, int_arg, make_like,
                   make_tensor, not_divisible, same_shape_pair, shape_str, start_op)


# -- softmax ------------------------------------------------------------------------------------
def ggml_soft_max(ctx: Context, a: Tensor, *, _inplace: bool = False) -> Tensor:
    """Softmax along ne0 (per R column)."""
    return ggml_soft_max_ext(ctx, a, None, 1.0, 0.0, _inplace=_inplace)


def ggml_soft_max_ext(ctx: Context, a: Tensor, mask: Tensor | None = None, scale: float = 1.0,
                      max_bias: float = 0.0, *, _inplace: bool = False) -> Tensor:
    """softmax(a * scale + mask) along ne0; mask (f32/f16) has a's ne0 and at least its ne1 rows."""
    what = "ggml_soft_max_ext"
    ctx = start_op(ctx)
    a = input_tensor(a, what)
    check_types(a, (F32,), what)
    check(lib.ggml_is_contiguous(a.ptr), f"{what}: a must be contiguous")
    mp = ffi.NULL
    if mask is not None:
        mask = input_tensor(mask, what, "mask")
        # a five-dim a is softmaxed with ne3 and ne4 merged: a mask repeating over them would mix them
        check(not isinstance(mask, Tensor5) and (not isinstance(a, Tensor5) or dims(mask)[2:] == [1, 1]),
              f"{what}: the mask must have four dims, and one plane (ne2 = ne3 = 1) with a five-dim a")
        check_types(mask, (F32, F16), what, "mask")
        check(lib.ggml_is_contiguous(mask.ptr), f"{what}: mask must be contiguous")
        mp = mask.ptr
    check(max_bias >= 0, f"{what}: max_bias must be >= 0")
    check_rule("ggml_soft_max_ext", what, a.ptr, mp, scale, max_bias)
    if _inplace and mask is None and scale == 1.0:
        return make_like(ctx, what, a, lambda: lib.ggml_soft_max_inplace(ctx.ptr, a.ptr), view=True)
    return make_like(ctx, what, a, lambda: c_function("ggml_soft_max_ext", _inplace)(ctx.ptr, a.ptr, mp, float(scale),
                                                                         float(max_bias)), view=_inplace)


def ggml_soft_max_ext_back(ctx: Context, a: Tensor, b: Tensor, scale: float = 1.0,
                           max_bias: float = 0.0, *, _inplace: bool = False) -> Tensor:
    """Gradient of softmax: a = upstream gradient, b = the softmax output."""
    check(max_bias == 0, "ggml_soft_max_ext_back: the CPU backend supports only max_bias = 0")
    return same_shape_pair("ggml_soft_max_ext_back", ctx, a, b, c_function("ggml_soft_max_ext_back", _inplace),
                            float(scale), float(max_bias), view=_inplace)


# -- attention ---------------------------------------------------------------------------------------------
def ggml_diag_mask_inf(ctx: Context, a: Tensor, n_past: int = 0, *, _inplace: bool = False) -> Tensor:
    """Set a[i, j] = -inf for i > n_past + j (causal masking of a [keys, queries] score matrix)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_diag_mask_inf")
    check_types(a, (F32,), "ggml_diag_mask_inf")
    n_past = int(n_past)
    check(n_past >= 0, f"ggml_diag_mask_inf: n_past must be >= 0, got {n_past}")  # the kernel asserts it
    check_contiguous(a, "ggml_diag_mask_inf")
    return make_like(ctx, "ggml_diag_mask_inf", a, lambda: c_function("ggml_diag_mask_inf", _inplace)(ctx.ptr, a.ptr, int(n_past)),
                 view=_inplace)


def ggml_flash_attn_ext(ctx: Context, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                        scale: float = 1.0, max_bias: float = 0.0, logit_softcap: float = 0.0) -> Tensor:
    """Fused attention: q [D, n_q, H, B], k [D, n_kv, H_kv, B], v [Dv, n_kv, H_kv, B] -> [Dv, H, n_q, B]."""
    what = "ggml_flash_attn_ext"
    ctx = start_op(ctx)
    q, k, v = input_tensor(q, what, "q"), input_tensor(k, what, "k"), input_tensor(v, what, "v")
    check_types(q, (F32,), what, "q")
    check_types(k, (F32, F16) + QUANTIZED, what, "k")
    check_types(v, (F32, F16) + QUANTIZED, what, "v")
    for x, arg in ((q, "q"), (k, "k"), (v, "v")):
        check_packed_rows(x, what, arg)
    nq, nk, nv = dims(q), dims(k), dims(v)
    if nk[0] != nq[0] or not_divisible(nq[2], nk[2]) or not_divisible(nq[3], nk[3]):
        raise GGMLError(f"{what}: k {shape_str(k)} does not fit q {shape_str(q)} (same ne0, heads dividing)")
    if nq[3] != nk[3] or nq[3] != nv[3] or nv[1] != nk[1] or nv[2] != nk[2]:
        raise GGMLError(f"{what}: v {shape_str(v)} does not fit k {shape_str(k)}")
    mp = ffi.NULL
    if mask is not None:
        mask = input_tensor(mask, what, "mask")
        check_types(mask, (F16,), what, "mask")
        nm = dims(mask)
        check(bool(lib.ggml_is_contiguous(mask.ptr)), f"{what}: mask must be contiguous")
        if nm[0] != nk[1] or nm[1] < nq[1] or not_divisible(nq[2], nm[2]) or not_divisible(nq[3], nm[3]):
            raise GGMLError(f"{what}: mask {shape_str(mask)} must be [n_kv, >= n_q, ...] for q {shape_str(q)}")
        mp = mask.ptr
    check(max_bias >= 0 and (max_bias == 0 or mask is not None), f"{what}: max_bias > 0 needs a mask")
    return make_tensor(ctx, what, [nv[0], nq[2], nq[1], nq[3]], F32, lambda: lib.ggml_flash_attn_ext(
        ctx.ptr, q.ptr, k.ptr, v.ptr, mp, float(scale), float(max_bias), float(logit_softcap)))


def ggml_diag_mask_zero(ctx: Context, a: Tensor, n_past: int = 0, *, _inplace: bool = False) -> Tensor:
    """Set a[i, j] = 0 for i > n_past + j (as diag_mask_inf, with zeros)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_diag_mask_zero")
    check_types(a, (F32,), "ggml_diag_mask_zero")
    n_past = int_arg(n_past, "ggml_diag_mask_zero", "n_past")
    check(n_past >= 0, f"ggml_diag_mask_zero: n_past must be >= 0, got {n_past}")
    check_contiguous(a, "ggml_diag_mask_zero")
    return make_like(ctx, "ggml_diag_mask_zero", a, lambda: c_function("ggml_diag_mask_zero", _inplace)(ctx.ptr, a.ptr, n_past),
                 view=_inplace)


def ggml_get_rel_pos(ctx: Context, a: Tensor, qh: int, kh: int) -> Tensor:
    """Relative position table [C, kh, qh] (f16) gathered from a [C, 2*qh - 1] (f16), as in SAM."""
    what = "ggml_get_rel_pos"
    ctx, a = contiguous_input(ctx, a, what, (F16,))
    qh, kh = int_arg(qh, what, "qh"), int_arg(kh, what, "kh")
    check(qh == kh and qh > 0, f"{what}: qh and kh must be equal and positive, got {qh}, {kh}")
    check(dims(a)[1] == 2 * qh - 1, f"{what}: a needs ne1 = 2*qh - 1 = {2 * qh - 1}, got {shape_str(a)}")
    return make_tensor(ctx, what, [dims(a)[0], kh, qh, 1], F16, lambda: lib.ggml_get_rel_pos(ctx.ptr, a.ptr, qh, kh))


def ggml_add_rel_pos(ctx: Context, a: Tensor, pw: Tensor, ph: Tensor, *, _inplace: bool = False) -> Tensor:
    """Add decomposed relative-position biases pw, ph [W, W, H, B] to attention a [W*W, W*H, B]."""
    what = "ggml_add_rel_pos"
    ctx = start_op(ctx)
    a, pw, ph = input_tensor(a, what, "a"), input_tensor(pw, what, "pw"), input_tensor(ph, what, "ph")
    check_types(a, (F32,), what, "a")
    check_types(pw, (F32,), what, "pw")
    check_types(ph, (F32,), what, "ph")
    for x, arg in ((a, "a"), (pw, "pw"), (ph, "ph")):
        check_contiguous(x, what, arg)
    na, nw = dims(a), dims(pw)
    check(nw == dims(ph), f"{what}: pw {shape_str(pw)} and ph {shape_str(ph)} must have the same shape")
    check(nw[3] == na[2] and nw[0] * nw[0] == na[0] and nw[1] * nw[2] == na[1],
          f"{what}: pw {shape_str(pw)} does not fit a {shape_str(a)} (a ne0 = pw ne0^2, ne1 = ne1*ne2, ne2 = ne3)")
    return make_like(ctx, what, a, lambda: c_function("ggml_add_rel_pos", _inplace)(ctx.ptr, a.ptr, pw.ptr, ph.ptr),
                 view=_inplace)


# -- attention gradient ----------------------------------------------------------------------------------
def ggml_flash_attn_back(ctx: Context, q: Tensor, k: Tensor, v: Tensor, d: Tensor, masked: bool = True) -> NoReturn:
    """ggml's fused attention gradient (q [D, N, H, B], k [D, M, H_kv, B], v transposed [M, D, H_kv, B],
    d [D, N, H, B]). The inputs are checked as ggml would, then a GGMLError says that ggml 0.25.3 has no
    implementation: its builder aborts the process (ggmlR's own test skips it for that reason)."""
    what = "ggml_flash_attn_back"
    ctx = start_op(ctx)
    q, k, v, d = input_tensor(q, what, "q"), input_tensor(k, what, "k"), input_tensor(v, what, "v"), input_tensor(d, what, "d")
    for x, arg in ((q, "q"), (k, "k"), (v, "v"), (d, "d")):
        check_types(x, (F32,), what, arg)
        check_packed_rows(x, what, arg)
    nq, nk, nv, nd = dims(q), dims(k), dims(v), dims(d)
    D, N, M = nq[0], nq[1], nk[1]
    check(nk[0] == D and nd[0] == D and nd[1] == N, f"{what}: q, k and d must share ne0 = D = {D}, d ne1 = N = {N}")
    check(nv[0] == M and nv[1] == D, f"{what}: v must be transposed, [M = {M}, D = {D}, ...], got {shape_str(v)}")
    check(M >= N, f"{what}: k needs at least as many positions (M = {M}) as q (N = {N})")
    check(nv[2] == nk[2] and nv[3] == nk[3] == nq[3] and nd[2] == nq[2] and nd[3] == nq[3],
          f"{what}: head and batch dims of q {shape_str(q)}, k {shape_str(k)}, v {shape_str(v)}, "
          f"d {shape_str(d)} do not fit")
    check(nk[2] > 0 and nq[2] % nk[2] == 0, f"{what}: k's heads ({nk[2]}) must divide q's ({nq[2]})")

    # ggml 0.25.3's builder aborts unconditionally ("TODO: adapt to ggml_flash_attn_ext() changes"):
    # after the checks above, say so instead of letting the process die.
    raise GGMLError(f"{what}: ggml 0.25.3 does not implement it (its builder aborts: 'TODO: adapt to "
                    "ggml_flash_attn_ext() changes'); differentiate attention with the ag_* autograd instead")


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
