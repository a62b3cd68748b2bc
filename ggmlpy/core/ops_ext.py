"""More of ggmlR's ggml_* ops: GLU, RoPE variants, 1-d and depthwise convolutions,
add1/diag/arange/roll/windows/relative positions, mul_mat_id, set, and the `*_inplace` table.

Same rules as ops.py: every constructor checks what ggml's builder and CPU kernel
assert, then calls ggml. Composite ops (conv_1d, conv_2d_dw, ...) are assembled
from ggmlpy's own checked primitives, the same graph ggml's C helper would build.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

import numpy as np

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from . import ops as _ops
from .checked import conv_out as _conv_out
from .ops import (F16, F32, I32, _c, _contiguous, _ctx, _dense0, _make, _ne, _rope_check, _same,
                  _shape_str, _t, _types)

if TYPE_CHECKING:
    from .context import Context, Tensor

# -- constants (ggml.h) --------------------------------------------------------------------------------
GGML_GLU_OP_REGLU = lib.GGML_GLU_OP_REGLU
GGML_GLU_OP_GEGLU = lib.GGML_GLU_OP_GEGLU
GGML_GLU_OP_SWIGLU = lib.GGML_GLU_OP_SWIGLU
GGML_GLU_OP_SWIGLU_OAI = lib.GGML_GLU_OP_SWIGLU_OAI
GGML_GLU_OP_GEGLU_ERF = lib.GGML_GLU_OP_GEGLU_ERF
GGML_GLU_OP_GEGLU_QUICK = lib.GGML_GLU_OP_GEGLU_QUICK
_GLU_OPS = (GGML_GLU_OP_REGLU, GGML_GLU_OP_GEGLU, GGML_GLU_OP_SWIGLU, GGML_GLU_OP_SWIGLU_OAI,
            GGML_GLU_OP_GEGLU_ERF, GGML_GLU_OP_GEGLU_QUICK)
# #defines are not in the cdef: values from ggml.h
GGML_ROPE_TYPE_NORM = GGML_ROPE_TYPE_NORMAL = 0
GGML_ROPE_TYPE_NEOX = 2
GGML_ROPE_TYPE_MROPE = 8
GGML_ROPE_TYPE_VISION = 24
GGML_ROPE_TYPE_IMROPE = 40
GGML_SCALE_MODE_NEAREST = lib.GGML_SCALE_MODE_NEAREST
GGML_SCALE_MODE_BILINEAR = lib.GGML_SCALE_MODE_BILINEAR
GGML_SCALE_MODE_BICUBIC = lib.GGML_SCALE_MODE_BICUBIC
GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64


def _i(v, what, name) -> int:
    """An int argument that fits C's int (ggml stores most in int32)."""
    iv = int(v)
    check(iv == v and -2**31 <= iv < 2**31, f"{what}: {name} must be an integer in int32 range, got {v}")
    return iv


# -- GLU --------------------------------------------------------------------------------------------------
def ggml_glu(ctx: Context, a: Tensor, op: int, swapped: bool = False) -> Tensor:
    """Gated linear unit over halves of ne0: act(x1) * x2 (x2 * act(x1) with the halves swapped).
    a [2n, ...] -> [n, ...]; op is a GGML_GLU_OP_* constant."""
    return _glu(ctx, a, None, op, swapped, "ggml_glu")


def ggml_glu_split(ctx: Context, a: Tensor, b: Tensor, op: int) -> Tensor:
    """act(a) * b for same-shaped a (the gate) and b; op is a GGML_GLU_OP_* constant."""
    return _glu(ctx, a, b, op, False, "ggml_glu_split")


def _glu(ctx, a, b, op, swapped, what):
    ctx = _ctx(ctx)
    a = _t(a, what, "a")
    _types(a, (F32, F16), what, "a")
    op = int(op)
    check(op in _GLU_OPS, f"{what}: op must be a GGML_GLU_OP_* constant, got {op}")
    if op == GGML_GLU_OP_SWIGLU_OAI:  # its CPU kernel has no f16 case (it would abort)
        _types(a, (F32,), f"{what} (SWIGLU_OAI)", "a")
    check(bool(lib.ggml_is_contiguous_1(a.ptr)) and int(a.ptr.nb[0]) == int(lib.ggml_type_size(a.type)),
          f"{what}: a must have contiguous rows; use ggml_cont() first")
    ne = _ne(a)
    if b is None:
        check(ne[0] % 2 == 0, f"{what}: ne0 of a must be even (two halves), got {ne[0]}")
        out = [ne[0] // 2] + ne[1:]
        call = lambda: lib.ggml_glu(ctx.ptr, a.ptr, op, bool(swapped))  # noqa: E731
    else:
        b = _t(b, what, "b")
        check(b.type == a.type, f"{what}: a and b types differ ({a.type_name} vs {b.type_name})")
        check(_ne(b) == ne, f"{what}: a {_shape_str(a)} and b {_shape_str(b)} must have the same shape")
        check(bool(lib.ggml_is_contiguous_1(b.ptr)) and int(b.ptr.nb[0]) == int(lib.ggml_type_size(b.type)),
              f"{what}: b must have contiguous rows; use ggml_cont() first")
        out = ne
        call = lambda: lib.ggml_glu_split(ctx.ptr, a.ptr, b.ptr, op)  # noqa: E731
    return _make(ctx, what, out, a.type, call)


def _glu_named(name: str, op: int) -> tuple[Callable[..., Tensor], Callable[..., Tensor]]:
    def fused(ctx: Context, a: Tensor) -> Tensor:
        return _glu(ctx, a, None, op, False, f"ggml_{name}")

    def split(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        return _glu(ctx, a, b, op, False, f"ggml_{name}_split")

    fused.__name__ = fused.__qualname__ = f"ggml_{name}"
    split.__name__ = split.__qualname__ = f"ggml_{name}_split"
    fused.__doc__ = f"ggml_{name}(ctx, a): ggml_glu(ctx, a, GGML_GLU_OP_{name.upper()}): halves of ne0, [2n, ...] -> [n, ...]."
    split.__doc__ = f"ggml_{name}_split(ctx, a, b): act(a) * b with GGML_GLU_OP_{name.upper()}'s activation."
    return fused, split


for _name, _op in (("reglu", GGML_GLU_OP_REGLU), ("geglu", GGML_GLU_OP_GEGLU), ("swiglu", GGML_GLU_OP_SWIGLU),
                   ("geglu_erf", GGML_GLU_OP_GEGLU_ERF), ("geglu_quick", GGML_GLU_OP_GEGLU_QUICK)):
    globals()[f"ggml_{_name}"], globals()[f"ggml_{_name}_split"] = _glu_named(_name, _op)


# -- RoPE -----------------------------------------------------------------------------------------------
def ggml_rope(ctx: Context, a: Tensor, b: Tensor, n_dims: int | None, mode: int = 0, *,
              _inplace: bool = False) -> Tensor:
    """ggml_rope_ext with ggml's defaults (no frequency factors, base 10000, no YaRN)."""
    return _ops.ggml_rope_ext(ctx, a, b, None, n_dims, mode, _inplace=_inplace)


def ggml_rope_ext_back(ctx: Context, a: Tensor, b: Tensor, c: Tensor | None = None, n_dims: int | None = None,
                       mode: int = 0, n_ctx_orig: int = 0, freq_base: float = 10000.0, freq_scale: float = 1.0,
                       ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                       beta_slow: float = 1.0) -> Tensor:
    """Gradient of ggml_rope_ext: rotates a (the upstream gradient) back by the same angles."""
    return _ops.ggml_rope_ext(ctx, a, b, c, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor,
                              attn_factor, beta_fast, beta_slow, _back=True)


def ggml_rope_multi(ctx: Context, a: Tensor, b: Tensor, c: Tensor | None = None, n_dims: int | None = None,
                    sections: Sequence[int] = (0, 0, 0, 0), mode: int = 0, n_ctx_orig: int = 0,
                    freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
                    attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0, *,
                    _inplace: bool = False) -> Tensor:
    """Multi-section RoPE (Qwen2-VL): mode GGML_ROPE_TYPE_MROPE or _VISION (or IMROPE); b holds 4
    positions per token (4 x ne2, section by section); `sections` splits the n_dims/2 rotation pairs."""
    what = "ggml_rope_multi"
    ctx = _ctx(ctx)
    mode = int(mode)
    mrope = bool(mode & GGML_ROPE_TYPE_MROPE)
    check(mode in (0, 2, GGML_ROPE_TYPE_MROPE, GGML_ROPE_TYPE_VISION, GGML_ROPE_TYPE_IMROPE),
          f"{what}: unknown rope mode {mode}")
    sec = [int(s) for s in sections]
    check(len(sec) == 4 and all(s >= 0 for s in sec), f"{what}: sections must be 4 non-negative ints, got {sections}")
    a, b, cp, n_dims = _rope_check(what, a, b, c, n_dims, mode, mrope)
    if mrope:
        check(any(s > 0 for s in sec[:3]), f"{what}: at least one of the first three sections must be > 0")
        check(sum(sec) <= _ne(a)[0], f"{what}: the sections add up to {sum(sec)}, more than ne0 = {_ne(a)[0]}")
    if mode == GGML_ROPE_TYPE_VISION:
        check(n_dims == _ne(a)[0] // 2, f"{what}: vision mode needs n_dims == ne0/2 = {_ne(a)[0] // 2}, got {n_dims}")
    sp = ffi.new("int[4]", sec)
    args = (int(n_ctx_orig), float(freq_base), float(freq_scale), float(ext_factor), float(attn_factor),
            float(beta_fast), float(beta_slow))
    fn = _c("ggml_rope_multi", _inplace)
    return _same(ctx, what, a, lambda: fn(ctx.ptr, a.ptr, b.ptr, cp, n_dims, sp, mode, *args), view=_inplace)


# -- small element-wise and shape ops ----------------------------------------------------------------------------
def ggml_add1(ctx: Context, a: Tensor, b: Tensor, *, _inplace: bool = False) -> Tensor:
    """a + b where b is a one-element tensor (ggml's ADD1)."""
    what = "ggml_add1"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, F16), what, "a")
    # the f32 kernel reads b as f32 whatever its type: an f16 b would be read as garbage
    _types(b, (F32,) if a.type == F32 else (F32, F16), what, "b")
    check(bool(lib.ggml_is_scalar(b.ptr)), f"{what}: b must be a scalar (one element), got {_shape_str(b)}")
    ne, nb = _ne(a), [int(v) for v in a.ptr.nb]
    check(nb[0] == lib.ggml_type_size(a.type) and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2],
          f"{what}: a must be densely packed; use ggml_cont() first")
    return _same(ctx, what, a, lambda: _c("ggml_add1", _inplace)(ctx.ptr, a.ptr, b.ptr), view=_inplace)


def ggml_diag(ctx: Context, a: Tensor) -> Tensor:
    """A row vector a [n, 1, ...] -> the diagonal matrix [n, n, ...]."""
    ctx, a = _ctx(ctx), _t(a, "ggml_diag")
    _types(a, (F32,), "ggml_diag")
    _dense0(a, "ggml_diag")
    n = _ne(a)
    check(n[1] == 1, f"ggml_diag: a must have ne1 == 1 (a vector per ne2/ne3), got {_shape_str(a)}")
    return _make(ctx, "ggml_diag", [n[0], n[0], n[2], n[3]], F32, lambda: lib.ggml_diag(ctx.ptr, a.ptr))


def ggml_diag_mask_zero(ctx: Context, a: Tensor, n_past: int = 0, *, _inplace: bool = False) -> Tensor:
    """Set a[i, j] = 0 for i > n_past + j (as diag_mask_inf, with zeros)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_diag_mask_zero")
    _types(a, (F32,), "ggml_diag_mask_zero")
    n_past = _i(n_past, "ggml_diag_mask_zero", "n_past")
    check(n_past >= 0, f"ggml_diag_mask_zero: n_past must be >= 0, got {n_past}")
    _contiguous(a, "ggml_diag_mask_zero")
    return _same(ctx, "ggml_diag_mask_zero", a, lambda: _c("ggml_diag_mask_zero", _inplace)(ctx.ptr, a.ptr, n_past),
                 view=_inplace)


def ggml_arange(ctx: Context, start: float, stop: float, step: float = 1.0) -> Tensor:
    """f32 [ceil((stop - start) / step)]: start, start + step, ... below stop."""
    ctx = _ctx(ctx)
    start, stop, step = float(start), float(stop), float(step)
    check(stop > start, f"ggml_arange: stop ({stop}) must be greater than start ({start})")
    check(step > 0, f"ggml_arange: step must be positive, got {step}")
    # ggml computes the length in float32: do the same so the reservation matches
    n = int(np.ceil(np.float32((np.float32(stop) - np.float32(start)) / np.float32(step))))
    check(0 < n < 2**40, f"ggml_arange: {n} steps")
    return _make(ctx, "ggml_arange", [n, 1, 1, 1], F32, lambda: lib.ggml_arange(ctx.ptr, start, stop, step))


def ggml_timestep_embedding(ctx: Context, timesteps: Tensor, dim: int, max_period: int = 10000) -> Tensor:
    """Sinusoidal embeddings [dim, n] of f32 timesteps [n]: cos(t f_i) for the first half, sin(t f_i) for
    the second, f_i = max_period^(-i / half) (odd dim: a zero last column)."""
    what = "ggml_timestep_embedding"
    ctx, t = _ctx(ctx), _t(timesteps, what, "timesteps")
    _types(t, (F32,), what, "timesteps")
    _dense0(t, what, "timesteps")
    dim, max_period = _i(dim, what, "dim"), _i(max_period, what, "max_period")
    check(dim > 0, f"{what}: dim must be positive, got {dim}")
    check(bool(lib.ggml_is_vector(t.ptr)), f"{what}: timesteps must be a vector, got {_shape_str(t)}")
    return _make(ctx, what, [dim, _ne(t)[0], 1, 1], F32, lambda: lib.ggml_timestep_embedding(ctx.ptr, t.ptr, dim,
                                                                                               max_period))


def ggml_roll(ctx: Context, a: Tensor, shift0: int = 0, shift1: int = 0, shift2: int = 0, shift3: int = 0) -> Tensor:
    """Circular shift along each dim (elements pushed off one end come back at the other)."""
    what = "ggml_roll"
    ctx, a = _ctx(ctx), _t(a, what)
    _types(a, (F32,), what)
    _dense0(a, what)
    shifts = [_i(s, what, f"shift{k}") for k, s in enumerate((shift0, shift1, shift2, shift3))]
    for k, (s, n) in enumerate(zip(shifts, _ne(a))):
        check(abs(s) < n, f"{what}: |shift{k}| must be below ne{k} = {n}, got {s}")
    return _same(ctx, what, a, lambda: lib.ggml_roll(ctx.ptr, a.ptr, *shifts))


def ggml_pad_reflect_1d(ctx: Context, a: Tensor, p0: int, p1: int) -> Tensor:
    """Reflection padding of ne0: p0 in front, p1 behind (each below ne0)."""
    what = "ggml_pad_reflect_1d"
    ctx, a = _ctx(ctx), _t(a, what)
    _types(a, (F32,), what)
    _contiguous(a, what)
    p0, p1 = _i(p0, what, "p0"), _i(p1, what, "p1")
    n = _ne(a)
    check(0 <= p0 < n[0] and 0 <= p1 < n[0], f"{what}: paddings must be in 0..ne0-1 = {n[0] - 1}, got {p0}, {p1}")
    return _make(ctx, what, [n[0] + p0 + p1] + n[1:], F32, lambda: lib.ggml_pad_reflect_1d(ctx.ptr, a.ptr, p0, p1))


def ggml_win_part(ctx: Context, a: Tensor, w: int) -> Tensor:
    """Split a [C, W, H] into w x w windows [C, w, w, n_windows], zero-padding W and H to multiples of w."""
    what = "ggml_win_part"
    ctx, a = _ctx(ctx), _t(a, what)
    _types(a, (F32,), what)
    _contiguous(a, what)
    w = _i(w, what, "w")
    n = _ne(a)
    check(w > 0, f"{what}: w must be positive, got {w}")
    check(n[3] == 1, f"{what}: a must be at most 3-d, got {_shape_str(a)}")
    npx, npy = (n[1] + w - 1) // w, (n[2] + w - 1) // w
    return _make(ctx, what, [n[0], w, w, npx * npy], F32, lambda: lib.ggml_win_part(ctx.ptr, a.ptr, w))


def ggml_win_unpart(ctx: Context, a: Tensor, w0: int, h0: int, w: int) -> Tensor:
    """Inverse of ggml_win_part: windows [C, w, w, n] back to [C, w0, h0]."""
    what = "ggml_win_unpart"
    ctx, a = _ctx(ctx), _t(a, what)
    _types(a, (F32,), what)
    _contiguous(a, what)
    w0, h0, w = _i(w0, what, "w0"), _i(h0, what, "h0"), _i(w, what, "w")
    n = _ne(a)
    check(w > 0 and w0 > 0 and h0 > 0, f"{what}: w, w0 and h0 must be positive")
    npx, npy = (w0 + w - 1) // w, (h0 + w - 1) // w
    check(n[1] == w and n[2] == w and n[3] == npx * npy,
          f"{what}: a {_shape_str(a)} is not [C, {w}, {w}, {npx * npy}] windows of a {w0} x {h0} map")
    return _make(ctx, what, [n[0], w0, h0, 1], F32, lambda: lib.ggml_win_unpart(ctx.ptr, a.ptr, w0, h0, w))


def ggml_get_rel_pos(ctx: Context, a: Tensor, qh: int, kh: int) -> Tensor:
    """Relative position table [C, kh, qh] (f16) gathered from a [C, 2*qh - 1] (f16), as in SAM."""
    what = "ggml_get_rel_pos"
    ctx, a = _ctx(ctx), _t(a, what)
    _types(a, (F16,), what)
    _contiguous(a, what)
    qh, kh = _i(qh, what, "qh"), _i(kh, what, "kh")
    check(qh == kh and qh > 0, f"{what}: qh and kh must be equal and positive, got {qh}, {kh}")
    check(_ne(a)[1] == 2 * qh - 1, f"{what}: a needs ne1 = 2*qh - 1 = {2 * qh - 1}, got {_shape_str(a)}")
    return _make(ctx, what, [_ne(a)[0], kh, qh, 1], F16, lambda: lib.ggml_get_rel_pos(ctx.ptr, a.ptr, qh, kh))


def ggml_add_rel_pos(ctx: Context, a: Tensor, pw: Tensor, ph: Tensor, *, _inplace: bool = False) -> Tensor:
    """Add decomposed relative-position biases pw, ph [W, W, H, B] to attention a [W*W, W*H, B]."""
    what = "ggml_add_rel_pos"
    ctx = _ctx(ctx)
    a, pw, ph = _t(a, what, "a"), _t(pw, what, "pw"), _t(ph, what, "ph")
    _types(a, (F32,), what, "a")
    _types(pw, (F32,), what, "pw")
    _types(ph, (F32,), what, "ph")
    for x, arg in ((a, "a"), (pw, "pw"), (ph, "ph")):
        _contiguous(x, what, arg)
    na, nw = _ne(a), _ne(pw)
    check(nw == _ne(ph), f"{what}: pw {_shape_str(pw)} and ph {_shape_str(ph)} must have the same shape")
    check(nw[3] == na[2] and nw[0] * nw[0] == na[0] and nw[1] * nw[2] == na[1],
          f"{what}: pw {_shape_str(pw)} does not fit a {_shape_str(a)} (a ne0 = pw ne0^2, ne1 = ne1*ne2, ne2 = ne3)")
    return _same(ctx, what, a, lambda: _c("ggml_add_rel_pos", _inplace)(ctx.ptr, a.ptr, pw.ptr, ph.ptr),
                 view=_inplace)


def ggml_mul_mat_id(ctx: Context, as_: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    """Mixture-of-experts product: as_ [K, M, n_expert] stacks expert matrices, b [K, n_b, n_tokens],
    ids i32 [n_used, n_tokens] picks the experts; -> [M, n_used, n_tokens]."""
    what = "ggml_mul_mat_id"
    ctx = _ctx(ctx)
    as_, b, ids = _t(as_, what, "as"), _t(b, what, "b"), _t(ids, what, "ids")
    _types(as_, (F32, F16), what, "as")
    _types(b, (F32,), what, "b")
    _types(ids, (I32,), what, "ids")
    _dense0(as_, what, "as")
    _dense0(b, what, "b")
    na, nb, ni = _ne(as_), _ne(b), _ne(ids)
    check(not lib.ggml_is_transposed(as_.ptr), f"{what}: as must not be transposed")
    check(na[3] == 1 and nb[3] == 1, f"{what}: as and b must be at most 3-d")
    check(ni[2] == 1 and ni[3] == 1, f"{what}: ids must be 2-d, got {_shape_str(ids)}")
    check(ni[1] == nb[2], f"{what}: ids needs one row of experts per b token (ne1 = {nb[2]}), got {_shape_str(ids)}")
    check(na[0] == nb[0], f"{what}: as and b must share ne0, got {na[0]} and {nb[0]}")
    check(nb[1] > 0 and ni[0] % nb[1] == 0, f"{what}: b's ne1 ({nb[1]}) must divide ids' ne0 ({ni[0]})")
    # the ids' values are range-checked before compute (check_graph): the kernel asserts 0 <= id < n_expert
    return _make(ctx, what, [na[1], ni[0], nb[2], 1], F32, lambda: lib.ggml_mul_mat_id(ctx.ptr, as_.ptr, b.ptr, ids.ptr))


# -- set: write b into a view of a copy of a ----------------------------------------------------------------
def ggml_set(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int, *,
             _inplace: bool = False) -> Tensor:
    """A copy of a with b written into its view (strides nb1..nb3 bytes, byte offset)."""
    return _set("ggml_set", ctx, a, b, [nb1, nb2, nb3], offset, _inplace,
                lambda c, x, y, s, o: _c("ggml_set", _inplace)(c, x, y, s[0], s[1], s[2], o))


def ggml_set_1d(ctx: Context, a: Tensor, b: Tensor, offset: int, *, _inplace: bool = False) -> Tensor:
    """A copy of a with b's elements written from byte `offset` on."""
    return _set("ggml_set_1d", ctx, a, b, None, offset, _inplace,
                lambda c, x, y, s, o: _c("ggml_set_1d", _inplace)(c, x, y, o))


def ggml_set_2d(ctx: Context, a: Tensor, b: Tensor, nb1: int, offset: int, *, _inplace: bool = False) -> Tensor:
    """A copy of a with b written as rows nb1 bytes apart, from byte `offset` on."""
    return _set("ggml_set_2d", ctx, a, b, [nb1], offset, _inplace,
                lambda c, x, y, s, o: _c("ggml_set_2d", _inplace)(c, x, y, s[0], o))


def _set(what, ctx, a, b, strides, offset, inplace, call):
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, I32), what, "a")
    check(b.type == a.type, f"{what}: b has type {b.type_name}, a has {a.type_name}; they must match")
    _contiguous(a, what, "a")
    _dense0(b, what, "b")
    es = int(lib.ggml_type_size(a.type))
    offset = int(offset)
    full = [int(a.ptr.nb[k]) for k in (1, 2, 3)]
    strides = [int(s) for s in strides] if strides is not None else []
    s = strides + full[len(strides):]  # ggml fills the missing strides with a's own
    check(all(0 <= v < 2**31 for v in s + [offset]), f"{what}: strides and offset must be in 0..2**31-1")
    check(offset < 2**30, f"{what}: offset must be below 2**30 bytes")
    check(b.nelements() <= a.nelements(), f"{what}: b has more elements than a")
    nb = _ne(b)
    span = 0 if 0 in nb else es + sum((d - 1) * st for d, st in zip(nb, [es] + s))
    if offset + span > a.nbytes():
        raise GGMLError(f"{what}: b {_shape_str(b)} at offset {offset} with strides {s} reaches byte "
                        f"{offset + span}, past a's {a.nbytes()} bytes")
    return _same(ctx, what, a, lambda: call(ctx.ptr, a.ptr, b.ptr, s, offset), view=inplace)


# -- convolutions -------------------------------------------------------------------------------------------
def ggml_conv_1d(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, p0: int = 0, d0: int = 1) -> Tensor:
    """1-d convolution of b [L, IC, N] with kernel a [K, IC, OC] -> [OL, OC, N] (im2col + mul_mat)."""
    what = "ggml_conv_1d"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32,), what, "a")
    check(bool(lib.ggml_is_contiguous(a.ptr)), f"{what}: the kernel must be contiguous")
    na = _ne(a)
    check(na[3] == 1 and _ne(b)[3] == 1, f"{what}: kernel and data must be at most 3-d")
    col = _ops.ggml_im2col(ctx, a, b, s0, 1, p0, 0, d0, 1, False, F32)  # [IC*K, OL, N]
    nc = _ne(col)
    y = _ops.ggml_mul_mat(ctx, _ops.ggml_reshape_2d(ctx, col, nc[0], nc[2] * nc[1]),
                          _ops.ggml_reshape_2d(ctx, a, na[0] * na[1], na[2]))  # [OL*N, OC]
    if nc[2] == 1:
        return _ops.ggml_reshape_3d(ctx, y, nc[1], na[2], 1)
    # [OL*N, OC] holds batch n's outputs at OL*n..: ggml's own conv_1d reshapes this straight to
    # [OL, OC, N], which mixes batches for N > 1 (ggmlR inherits that); put OC before N instead.
    y = _ops.ggml_reshape_3d(ctx, y, nc[1], nc[2], na[2])
    return _ops.ggml_cont(ctx, _ops.ggml_permute(ctx, y, 0, 2, 1, 3))


def ggml_conv_1d_dw(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, p0: int = 0, d0: int = 1) -> Tensor:
    """Depthwise 1-d convolution: b [L, C] (one channel per row), kernel a [K, 1, C] -> [OL, C, 1]."""
    what = "ggml_conv_1d_dw"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32,), what, "a")
    na, nb = _ne(a), _ne(b)
    check(na[1] == 1 and na[3] == 1, f"{what}: kernel must be [K, 1, C], got {_shape_str(a)}")
    check(nb[2] == 1 and nb[3] == 1 and na[2] == nb[1],
          f"{what}: data must be [L, C] with C = the kernel's ne2 ({na[2]}), got {_shape_str(b)}")
    _contiguous(b, what, "b")
    nbr = _ops.ggml_reshape_4d(ctx, b, nb[0], 1, nb[1], nb[2])
    col = _ops.ggml_im2col(ctx, a, nbr, s0, 1, p0, 0, d0, 1, False, F32)  # [K, OL, C]
    y = _ops.ggml_mul_mat(ctx, col, a)  # [OL, 1, C]
    ny = _ne(y)
    return _ops.ggml_reshape_3d(ctx, y, ny[0], ny[2], 1)


def ggml_conv_2d_dw(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                    d0: int = 1, d1: int = 1) -> Tensor:
    """Depthwise 2-d convolution: b [W, H, C, N], kernel a [KW, KH, 1, C] -> [OW, OH, C, N] (im2col path)."""
    what = "ggml_conv_2d_dw"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32,), what, "a")
    _types(b, (F32,), what, "b")
    na, nb = _ne(a), _ne(b)
    check(na[2] * na[3] == nb[2], f"{what}: kernel {_shape_str(a)} needs one KW x KH filter per channel "
          f"(ne2*ne3 = C = {nb[2]})")
    _contiguous(a, what, "a")
    _contiguous(b, what, "b")
    new_a = _ops.ggml_reshape_4d(ctx, a, na[0], na[1], 1, na[2] * na[3])
    col = _ops.ggml_im2col(ctx, new_a, _ops.ggml_reshape_4d(ctx, b, nb[0], nb[1], 1, nb[2] * nb[3]),
                           s0, s1, p0, p1, d0, d1, True, F32)  # [KW*KH, OW, OH, C*N]
    nc = _ne(col)
    new_b = _ops.ggml_reshape_4d(ctx, col, nc[0], nc[2] * nc[1], nb[2], nb[3])
    new_a = _ops.ggml_reshape_4d(ctx, new_a, na[0] * na[1], 1, na[2] * na[3], 1)
    y = _ops.ggml_mul_mat(ctx, new_a, new_b)
    return _ops.ggml_reshape_4d(ctx, y, nc[1], nc[2], nb[2], nb[3])


def _conv_args(what, vals):
    s0, s1, p0, p1, d0, d1 = (_i(v, what, n) for v, n in zip(vals, ("s0", "s1", "p0", "p1", "d0", "d1")))
    check(s0 > 0 and s1 > 0 and d0 > 0 and d1 > 0 and p0 >= 0 and p1 >= 0,
          f"{what}: strides and dilations must be > 0, paddings >= 0")
    return s0, s1, p0, p1, d0, d1


def ggml_conv_2d_dw_direct(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                           d0: int = 1, d1: int = 1) -> Tensor:
    """Depthwise 2-d convolution with ggml's direct kernel: b [W, H, C, N], a [KW, KH, 1, C] -> [OW, OH, C, N]."""
    what = "ggml_conv_2d_dw_direct"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, F16), what, "a")
    _types(b, (F32,), what, "b")
    _contiguous(a, what, "a")
    _contiguous(b, what, "b")
    na, nb = _ne(a), _ne(b)
    check(na[2] == 1 and na[3] == nb[2], f"{what}: kernel must be [KW, KH, 1, C] with C = {nb[2]}, got {_shape_str(a)}")
    s0, s1, p0, p1, d0, d1 = _conv_args(what, (s0, s1, p0, p1, d0, d1))
    ow, oh = _conv_out(nb[0], na[0], s0, p0, d0), _conv_out(nb[1], na[1], s1, p1, d1)
    check(ow > 0 and oh > 0, f"{what}: input too small for the kernel")
    return _make(ctx, what, [ow, oh, nb[2], nb[3]], F32,
                 lambda: lib.ggml_conv_2d_dw_direct(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1))


def ggml_conv_2d_direct(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                        d0: int = 1, d1: int = 1) -> Tensor:
    """2-d convolution with ggml's direct kernel (no im2col tensor): b [W, H, C, N], a [KW, KH, C, OC]."""
    what = "ggml_conv_2d_direct"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, F16), what, "a")
    _types(b, (F32,), what, "b")
    _contiguous(a, what, "a")
    _contiguous(b, what, "b")
    na, nb = _ne(a), _ne(b)
    check(na[2] == nb[2], f"{what}: channels differ: kernel {na[2]}, input {nb[2]}")
    s0, s1, p0, p1, d0, d1 = _conv_args(what, (s0, s1, p0, p1, d0, d1))
    ow, oh = _conv_out(nb[0], na[0], s0, p0, d0), _conv_out(nb[1], na[1], s1, p1, d1)
    check(ow > 0 and oh > 0, f"{what}: input too small for the kernel")
    return _make(ctx, what, [ow, oh, na[3], nb[3]], F32,
                 lambda: lib.ggml_conv_2d_direct(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1))


def ggml_conv_transpose_1d(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, p0: int = 0, d0: int = 1) -> Tensor:
    """Transposed 1-d convolution: b [L, IC], kernel a [K, OC, IC] -> [(L-1)*s0 + K, OC]. ggml supports
    only p0 = 0 and d0 = 1."""
    what = "ggml_conv_transpose_1d"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, F16), what, "a")
    _types(b, (F32,), what, "b")
    _contiguous(a, what, "a")
    _contiguous(b, what, "b")
    s0, p0, d0 = _i(s0, what, "s0"), _i(p0, what, "p0"), _i(d0, what, "d0")
    check(s0 > 0, f"{what}: stride must be positive")
    check(p0 == 0 and d0 == 1, f"{what}: ggml supports only p0 = 0 and d0 = 1, got p0={p0}, d0={d0}")
    na, nb = _ne(a), _ne(b)
    check(bool(lib.ggml_is_matrix(b.ptr)), f"{what}: data must be a matrix [L, IC], got {_shape_str(b)}")
    check(na[2] == nb[1] and na[3] == 1, f"{what}: kernel {_shape_str(a)} must be [K, OC, IC = {nb[1]}]")
    ol = (nb[0] - 1) * s0 + d0 * (na[0] - 1) + 1
    return _make(ctx, what, [ol, na[1], 1, 1], F32, lambda: lib.ggml_conv_transpose_1d(ctx.ptr, a.ptr, b.ptr, s0, 0, 1))


def ggml_conv_transpose_2d_p0(ctx: Context, a: Tensor, b: Tensor, stride: int = 1) -> Tensor:
    """Transposed 2-d convolution without padding: b [W, H, IC, N], kernel a [KW, KH, OC, IC] (f16 on the CPU)
    -> [(W-1)*stride + KW, (H-1)*stride + KH, OC, N]."""
    what = "ggml_conv_transpose_2d_p0"
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, F16), what, "a")
    _types(b, (F32,), what, "b")
    _contiguous(a, what, "a")
    _contiguous(b, what, "b")
    stride = _i(stride, what, "stride")
    check(stride > 0, f"{what}: stride must be positive")
    na, nb = _ne(a), _ne(b)
    check(na[3] == nb[2], f"{what}: kernel ne3 ({na[3]}) must equal the input channels ({nb[2]})")
    return _make(ctx, what, [(nb[0] - 1) * stride + na[0], (nb[1] - 1) * stride + na[1], na[2], nb[3]], F32,
                 lambda: lib.ggml_conv_transpose_2d_p0(ctx.ptr, a.ptr, b.ptr, stride))


# -- attention gradient ----------------------------------------------------------------------------------
def ggml_flash_attn_back(ctx: Context, q: Tensor, k: Tensor, v: Tensor, d: Tensor, masked: bool = True) -> NoReturn:
    """ggml's fused attention gradient (q [D, N, H, B], k [D, M, H_kv, B], v transposed [M, D, H_kv, B],
    d [D, N, H, B]). The inputs are checked as ggml would, then a GGMLError says that ggml 0.25.3 has no
    implementation: its builder aborts the process (ggmlR's own test skips it for that reason)."""
    what = "ggml_flash_attn_back"
    ctx = _ctx(ctx)
    q, k, v, d = _t(q, what, "q"), _t(k, what, "k"), _t(v, what, "v"), _t(d, what, "d")
    for x, arg in ((q, "q"), (k, "k"), (v, "v"), (d, "d")):
        _types(x, (F32,), what, arg)
        _dense0(x, what, arg)
    nq, nk, nv, nd = _ne(q), _ne(k), _ne(v), _ne(d)
    D, N, M = nq[0], nq[1], nk[1]
    check(nk[0] == D and nd[0] == D and nd[1] == N, f"{what}: q, k and d must share ne0 = D = {D}, d ne1 = N = {N}")
    check(nv[0] == M and nv[1] == D, f"{what}: v must be transposed, [M = {M}, D = {D}, ...], got {_shape_str(v)}")
    check(M >= N, f"{what}: k needs at least as many positions (M = {M}) as q (N = {N})")
    check(nv[2] == nk[2] and nv[3] == nk[3] == nq[3] and nd[2] == nq[2] and nd[3] == nq[3],
          f"{what}: head and batch dims of q {_shape_str(q)}, k {_shape_str(k)}, v {_shape_str(v)}, "
          f"d {_shape_str(d)} do not fit")
    check(nk[2] > 0 and nq[2] % nk[2] == 0, f"{what}: k's heads ({nk[2]}) must divide q's ({nq[2]})")

    # ggml 0.25.3's builder aborts unconditionally ("TODO: adapt to ggml_flash_attn_ext() changes"):
    # after the checks above, say so instead of letting the process die.
    raise GGMLError(f"{what}: ggml 0.25.3 does not implement it (its builder aborts: 'TODO: adapt to "
                    "ggml_flash_attn_ext() changes'); differentiate attention with the ag_* autograd instead")


# -- in-place variants: one table ---------------------------------------------------------------------------
# name -> the checked op it shares with; its `_inplace=True` form calls ggml's `*_inplace` twin, whose
# result is a view of the first input (the graph writes into that input's memory).
_INPLACE = ["add", "sub", "mul", "div", "sqr", "sqrt", "exp", "log", "abs", "neg", "sgn", "step", "ceil", "floor",
            "round", "trunc", "relu", "gelu", "gelu_erf", "gelu_quick", "silu", "sigmoid", "tanh", "softplus", "elu",
            "expm1", "sin", "cos", "scale", "dup", "norm", "rms_norm", "l2_norm", "group_norm", "soft_max",
            "soft_max_ext", "soft_max_ext_back", "diag_mask_inf", "diag_mask_zero", "rope", "rope_ext", "rope_multi",
            "add1", "add_rel_pos", "set", "set_1d", "set_2d"]


def _make_inplace(name: str) -> Callable[..., Tensor]:
    base = globals().get(f"ggml_{name}") or getattr(_ops, f"ggml_{name}")

    @functools.wraps(base)
    def op(*args, **kw):
        return base(*args, _inplace=True, **kw)

    op.__name__ = op.__qualname__ = f"ggml_{name}_inplace"
    op.__module__ = __name__  # defined here, not where wraps() copied the base op's module from
    op.__doc__ = (f"ggml_{name}_inplace: ggml_{name} computed into its first input's memory "
                  "(the result is a view of it). Same arguments and checks as ggml_" + name + ".")
    del op.__wrapped__
    # its signature and hints are the base op's, minus the private flag
    sig = inspect.signature(base)
    op.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "_inplace"])
    op.__annotations__ = {k: v for k, v in base.__annotations__.items() if k != "_inplace"}
    return op


for _name in _INPLACE:
    globals()[f"ggml_{_name}_inplace"] = _make_inplace(_name)

__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
OPS = sorted(n for n in __all__ if n.startswith("ggml_"))  # every op constructor here (the fuzz test covers them)
