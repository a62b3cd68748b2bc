"""Rotary position embeddings (rope, rope_ext, rope_multi and the backward) and gated linear units
(glu, glu_split and the named reglu, geglu, swiglu, ...).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


from ..._naming import public_function
from ...bindings import ffi, lib
from ...errors import check
from ..handles import Context, Tensor
from .args import (F16, F32, I32, c_function, check_packed_rows, check_types, dims, input_tensor, make_like,
                   make_tensor, shape_str, start_op)


def rope_check(what, a, b, c, n_dims, mode, mrope):
    """ggml's rope asserts, and its CPU kernel's: positions i32, one (four for mrope) per ne2 row."""
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32, F16), what, "a")
    check_types(b, (I32,), what, "b")
    check_packed_rows(a, what, "a")  # the kernel asserts nb0 == nb00 == element size
    n_dims = dims(a)[0] if n_dims is None else int(n_dims)
    check(mode & 1 == 0, f"{what}: odd modes are no longer supported by ggml, got {mode}")
    check(0 < n_dims <= dims(a)[0] and n_dims % 2 == 0, f"{what}: n_dims must be even and in 1..ne0={dims(a)[0]}, got {n_dims}")
    per_token = 4 if mrope else 1
    check(bool(lib.ggml_is_vector(b.ptr)) and dims(b)[0] == per_token * dims(a)[2],
          f"{what}: positions b must be a vector of {per_token} x ne2 = {per_token * dims(a)[2]} entries, "
          f"got {shape_str(b)}")
    cp = ffi.NULL
    if c is not None:
        c = input_tensor(c, what, "c")
        check_types(c, (F32,), what, "c")
        check(dims(c)[0] >= n_dims // 2, f"{what}: freq factors c need at least n_dims/2 entries")
        cp = c.ptr
    return a, b, cp, n_dims


_PLAIN_ROPE_MODES = (0, 2)  # GGML_ROPE_TYPE_NORMAL, GGML_ROPE_TYPE_NEOX; MROPE/VISION/IMROPE go through rope_multi


def ggml_rope_ext(ctx: Context, a: Tensor, b: Tensor, c: Tensor | None = None, n_dims: int | None = None,
                  mode: int = 0, n_ctx_orig: int = 0, freq_base: float = 10000.0, freq_scale: float = 1.0,
                  ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                  beta_slow: float = 1.0, *, _inplace: bool = False, _back: bool = False) -> Tensor:
    """Rotary position embedding of a [head_dim, n_head, n_tokens] at i32 positions b [n_tokens]."""
    what = "ggml_rope_ext_back" if _back else "ggml_rope_ext"
    ctx = start_op(ctx)
    mode = int(mode)
    check(mode in _PLAIN_ROPE_MODES, f"{what}: mode must be 0 (normal) or 2 (neox), got {mode}; "
          "multi-section modes (GGML_ROPE_TYPE_MROPE, _VISION) need ggml_rope_multi")
    a, b, cp, n_dims = rope_check(what, a, b, c, n_dims, mode, False)
    args = (int(n_ctx_orig), float(freq_base), float(freq_scale), float(ext_factor), float(attn_factor),
            float(beta_fast), float(beta_slow))
    fn = lib.ggml_rope_ext_back if _back else c_function("ggml_rope_ext", _inplace)
    return make_like(ctx, what, a, lambda: fn(ctx.ptr, a.ptr, b.ptr, cp, n_dims, mode, *args), view=_inplace)


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


# -- GLU --------------------------------------------------------------------------------------------------
def ggml_glu(ctx: Context, a: Tensor, op: int, swapped: bool = False) -> Tensor:
    """Gated linear unit over halves of ne0: act(x1) * x2 (x2 * act(x1) with the halves swapped).
    a [2n, ...] -> [n, ...]; op is a GGML_GLU_OP_* constant."""
    return _glu(ctx, a, None, op, swapped, "ggml_glu")


def ggml_glu_split(ctx: Context, a: Tensor, b: Tensor, op: int) -> Tensor:
    """act(a) * b for same-shaped a (the gate) and b; op is a GGML_GLU_OP_* constant."""
    return _glu(ctx, a, b, op, False, "ggml_glu_split")


def _glu(ctx, a, b, op, swapped, what):
    ctx = start_op(ctx)
    a = input_tensor(a, what, "a")
    check_types(a, (F32, F16), what, "a")
    op = int(op)
    check(op in _GLU_OPS, f"{what}: op must be a GGML_GLU_OP_* constant, got {op}")
    if op == GGML_GLU_OP_SWIGLU_OAI:  # its CPU kernel has no f16 case (it would abort)
        check_types(a, (F32,), f"{what} (SWIGLU_OAI)", "a")
    check(bool(lib.ggml_is_contiguous_1(a.ptr)) and int(a.ptr.nb[0]) == int(lib.ggml_type_size(a.type)),
          f"{what}: a must have contiguous rows; use ggml_cont() first")
    ne = dims(a)
    if b is None:
        check(ne[0] % 2 == 0, f"{what}: ne0 of a must be even (two halves), got {ne[0]}")
        out = [ne[0] // 2] + ne[1:]
        call = lambda: lib.ggml_glu(ctx.ptr, a.ptr, op, bool(swapped))  # noqa: E731
    else:
        b = input_tensor(b, what, "b")
        check(b.type == a.type, f"{what}: a and b types differ ({a.type_name} vs {b.type_name})")
        check(dims(b) == ne, f"{what}: a {shape_str(a)} and b {shape_str(b)} must have the same shape")
        check(bool(lib.ggml_is_contiguous_1(b.ptr)) and int(b.ptr.nb[0]) == int(lib.ggml_type_size(b.type)),
              f"{what}: b must have contiguous rows; use ggml_cont() first")
        out = ne
        call = lambda: lib.ggml_glu_split(ctx.ptr, a.ptr, b.ptr, op)  # noqa: E731
    return make_tensor(ctx, what, out, a.type, call)


def _glu_named(name: str, op: int) -> tuple[Callable[..., Tensor], Callable[..., Tensor]]:
    def fused(ctx: Context, a: Tensor) -> Tensor:
        return _glu(ctx, a, None, op, False, f"ggml_{name}")

    def split(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
        return _glu(ctx, a, b, op, False, f"ggml_{name}_split")

    return (public_function(fused, f"ggml_{name}", f"ggml_{name}(ctx, a): ggml_glu(ctx, a, GGML_GLU_OP_{name.upper()}): "
                            "halves of ne0, [2n, ...] -> [n, ...]."),
            public_function(split, f"ggml_{name}_split", f"ggml_{name}_split(ctx, a, b): act(a) * b with "
                            f"GGML_GLU_OP_{name.upper()}'s activation."))


for _name, _op in (("reglu", GGML_GLU_OP_REGLU), ("geglu", GGML_GLU_OP_GEGLU), ("swiglu", GGML_GLU_OP_SWIGLU),
                   ("geglu_erf", GGML_GLU_OP_GEGLU_ERF), ("geglu_quick", GGML_GLU_OP_GEGLU_QUICK)):
    globals()[f"ggml_{_name}"], globals()[f"ggml_{_name}_split"] = _glu_named(_name, _op)


# -- RoPE -----------------------------------------------------------------------------------------------
def ggml_rope(ctx: Context, a: Tensor, b: Tensor, n_dims: int | None, mode: int = 0, *,
              _inplace: bool = False) -> Tensor:
    """ggml_rope_ext with ggml's defaults (no frequency factors, base 10000, no YaRN)."""
    return ggml_rope_ext(ctx, a, b, None, n_dims, mode, _inplace=_inplace)


def ggml_rope_ext_back(ctx: Context, a: Tensor, b: Tensor, c: Tensor | None = None, n_dims: int | None = None,
                       mode: int = 0, n_ctx_orig: int = 0, freq_base: float = 10000.0, freq_scale: float = 1.0,
                       ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                       beta_slow: float = 1.0) -> Tensor:
    """Gradient of ggml_rope_ext: rotates a (the upstream gradient) back by the same angles."""
    return ggml_rope_ext(ctx, a, b, c, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor,
                              attn_factor, beta_fast, beta_slow, _back=True)


def ggml_rope_multi(ctx: Context, a: Tensor, b: Tensor, c: Tensor | None = None, n_dims: int | None = None,
                    sections: Sequence[int] = (0, 0, 0, 0), mode: int = 0, n_ctx_orig: int = 0,
                    freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0,
                    attn_factor: float = 1.0, beta_fast: float = 32.0, beta_slow: float = 1.0, *,
                    _inplace: bool = False) -> Tensor:
    """Multi-section RoPE (Qwen2-VL): mode GGML_ROPE_TYPE_MROPE or _VISION (or IMROPE); b holds 4
    positions per token (4 x ne2, section by section); `sections` splits the n_dims/2 rotation pairs."""
    what = "ggml_rope_multi"
    ctx = start_op(ctx)
    mode = int(mode)
    mrope = bool(mode & GGML_ROPE_TYPE_MROPE)
    check(mode in (0, 2, GGML_ROPE_TYPE_MROPE, GGML_ROPE_TYPE_VISION, GGML_ROPE_TYPE_IMROPE),
          f"{what}: unknown rope mode {mode}")
    sec = [int(s) for s in sections]
    check(len(sec) == 4 and all(s >= 0 for s in sec), f"{what}: sections must be 4 non-negative ints, got {sections}")
    a, b, cp, n_dims = rope_check(what, a, b, c, n_dims, mode, mrope)
    if mrope:
        check(any(s > 0 for s in sec[:3]), f"{what}: at least one of the first three sections must be > 0")
        check(sum(sec) <= dims(a)[0], f"{what}: the sections add up to {sum(sec)}, more than ne0 = {dims(a)[0]}")
    if mode == GGML_ROPE_TYPE_VISION:
        check(n_dims == dims(a)[0] // 2, f"{what}: vision mode needs n_dims == ne0/2 = {dims(a)[0] // 2}, got {n_dims}")
    sp = ffi.new("int[4]", sec)
    args = (int(n_ctx_orig), float(freq_base), float(freq_scale), float(ext_factor), float(attn_factor),
            float(beta_fast), float(beta_slow))
    fn = c_function("ggml_rope_multi", _inplace)
    return make_like(ctx, what, a, lambda: fn(ctx.ptr, a.ptr, b.ptr, cp, n_dims, sp, mode, *args), view=_inplace)


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
