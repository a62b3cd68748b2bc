"""ggmlR's ggml_* op constructors, each checked before it reaches ggml.

ggml asserts (and so aborts the process) on shapes, types and context memory it
cannot handle. Every constructor here validates its inputs against the same
conditions first and raises GGMLError instead: its arguments, types and strides
here, the shape rule of each ggml op in core/checked.py (the one table every
front end uses). The kernels are ggml's own.

Naming and argument order follow ggml's C API (and so ggmlR's R functions):
`ggml_add(ctx, a, b)`, `ggml_soft_max_ext(ctx, a, mask, scale, max_bias)`.
"""
from __future__ import annotations

import functools
import threading

from ..bindings import ffi, lib
from ..errors import GGMLError, check
from . import checked as _rules
from .checked import check_rule as _check_rule, context_arg as _context_arg, conv_out as _conv_out
from .checked import tensor_arg as _tensor_arg
from .context import Context, Tensor, type_name, wrap

F32, F16, BF16, I32 = lib.GGML_TYPE_F32, lib.GGML_TYPE_F16, lib.GGML_TYPE_BF16, lib.GGML_TYPE_I32
FLOAT = (F32, F16, BF16)
CPU_FLOAT = (F32, F16)  # kernels the CPU backend has for most element-wise ops
# block-quantized types: weights for mul_mat, get_rows and flash attention's K/V (whether a device
# has the kernel for a given type is checked with ggml_backend_dev_supports_op before compute)
QUANTIZED = tuple(t for t in range(int(lib.GGML_TYPE_COUNT)) if lib.ggml_type_size(t) and lib.ggml_is_quantized(t))
N_OVERHEAD = int(lib.ggml_tensor_overhead())


# -- checks -------------------------------------------------------------------------------
# The contexts of the current op's inputs: _ctx() starts an op, _t() records, _make() links them,
# so a result's context keeps its inputs' contexts alive and graphs can tell when one was freed.
_inputs = threading.local()


def _ctx(ctx) -> Context:
    ctx = _context_arg(ctx)
    _inputs.ctxs = []
    return ctx


def _t(x, what: str, arg: str = "a") -> Tensor:
    x = _tensor_arg(x, what, arg)
    getattr(_inputs, "ctxs", []).append(x.ctx)
    return x


def _types(x: Tensor, allowed, what: str, arg: str = "a") -> None:
    if x.type not in allowed:
        names = ", ".join(type_name(t) for t in allowed)
        raise GGMLError(f"{what}: {arg} has type {x.type_name}; supported: {names}")


def _dense0(x: Tensor, what: str, arg: str = "a") -> None:
    """Kernels that walk ne0 as packed elements assert nb0 == element size (transposed views fail it)."""
    if int(x.ptr.nb[0]) != int(lib.ggml_type_size(x.type)):
        raise GGMLError(f"{what}: {arg} must have packed rows (nb0 = element size), which a transposed or "
                        "permuted view has not; use ggml_cont() first")


def _contiguous(x: Tensor, what: str, arg: str = "a") -> None:
    # ggml_is_contiguous ignores the strides of size-1 dims; kernels still assert nb0 == element size
    if not lib.ggml_is_contiguous(x.ptr) or int(x.ptr.nb[0]) != int(lib.ggml_type_size(x.type)):
        raise GGMLError(f"{what}: {arg} must be contiguous; use ggml_cont() first")


def _ne(x: Tensor) -> list:
    return [int(v) for v in x.ptr.ne]


def can_repeat(small: Tensor, big: Tensor) -> bool:
    """ggml's rule for broadcasting: every dim of `small` divides the same dim of `big`."""
    return _rules.can_repeat(small.ptr, big.ptr)


def _nodiv(big: int, small: int) -> bool:
    """small does not divide big (ggml computes big % small in C: a zero would crash)."""
    return small <= 0 or big % small != 0


def _shape_str(x: Tensor) -> str:
    return str(list(x.shape))


def _make(ctx: Context, what: str, ne, out_type: int, call, *, view=False, extra=0):
    """Reserve context memory for the result (ggml aborts when the arena is full), then build."""
    ctx.reserve_tensor(out_type, ne, what, view=view)
    if extra:
        ctx.reserve(extra, what)
    for c in getattr(_inputs, "ctxs", ()):
        if c is not ctx:
            ctx._deps.add(c)
    _inputs.ctxs = []
    return wrap(call(), ctx)


def _same(ctx, what, a: Tensor, call, out_type=None, view=False):
    return _make(ctx, what, _ne(a), a.type if out_type is None else out_type, call, view=view)


@functools.lru_cache(maxsize=None)
def _c(cname: str, inplace: bool):
    """ggml's C function, or its `_inplace` twin (whose result is a view of the first input)."""
    return getattr(lib, cname + "_inplace" if inplace else cname)


# -- element-wise binary ------------------------------------------------------------------
def _binary(cname: str):
    what = cname

    def op(ctx: Context, a: Tensor, b: Tensor, *, _inplace: bool = False) -> Tensor:
        ctx = _ctx(ctx)
        a, b = _t(a, what, "a"), _t(b, what, "b")
        _types(a, CPU_FLOAT, what, "a")
        _dense0(a, what, "a")  # the CPU kernel asserts it (b may be strided)
        if b.type != a.type and b.type != F32:
            raise GGMLError(f"{what}: b has type {b.type_name}, a has {a.type_name}; they must match (or b be f32)")
        _check_rule(cname, what, a.ptr, b.ptr)
        return _same(ctx, what, a, lambda: _c(cname, _inplace)(ctx.ptr, a.ptr, b.ptr), view=_inplace)

    op.__name__ = op.__qualname__ = cname
    op.__doc__ = f"{cname}(ctx, a, b): element-wise; b broadcasts to a's shape (ggml's rule)."
    return op


ggml_add = _binary("ggml_add")
ggml_sub = _binary("ggml_sub")
ggml_mul = _binary("ggml_mul")
ggml_div = _binary("ggml_div")


# -- element-wise unary -------------------------------------------------------------------
def _unary(cname: str, types=CPU_FLOAT):

    def op(ctx: Context, a: Tensor, *, _inplace: bool = False) -> Tensor:
        ctx = _ctx(ctx)
        a = _t(a, cname)
        _types(a, types, cname)
        _dense0(a, cname)  # every CPU unary kernel asserts it, whatever ne0
        return _same(ctx, cname, a, lambda: _c(cname, _inplace)(ctx.ptr, a.ptr), view=_inplace)

    op.__name__ = op.__qualname__ = cname
    op.__doc__ = f"{cname}(ctx, a): element-wise, same shape as a."
    return op


# Plain ops, and those ggml implements through ggml_unary.
_PLAIN_UNARY = ["sqr", "sqrt", "log", "sin", "cos"]
_UNARY_OPS = ["abs", "sgn", "neg", "step", "tanh", "elu", "relu", "sigmoid", "gelu", "gelu_erf",
              "gelu_quick", "silu", "hardswish", "hardsigmoid", "exp", "softplus", "expm1",
              "floor", "ceil", "round", "trunc"]
for _n in _PLAIN_UNARY:
    globals()[f"ggml_{_n}"] = _unary(f"ggml_{_n}", types=(F32,) if _n in ("sin", "cos") else CPU_FLOAT)
for _n in _UNARY_OPS:
    globals()[f"ggml_{_n}"] = _unary(f"ggml_{_n}")


def ggml_leaky_relu(ctx: Context, a: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """max(a, 0) + negative_slope * min(a, 0), element-wise (inplace: into a's memory)."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_leaky_relu")
    _types(a, CPU_FLOAT, "ggml_leaky_relu")
    _contiguous(a, "ggml_leaky_relu")  # the kernel steps through rows by nb1 alone
    return _same(ctx, "ggml_leaky_relu", a,
                 lambda: lib.ggml_leaky_relu(ctx.ptr, a.ptr, float(negative_slope), bool(inplace)), view=bool(inplace))


def ggml_scale(ctx: Context, a: Tensor, s: float, *, _inplace: bool = False) -> Tensor:
    """a * s (inplace: into a's memory)."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_scale")
    _types(a, (F32,), "ggml_scale")
    check(lib.ggml_is_contiguous(a.ptr), "ggml_scale: a must be contiguous")
    _check_rule("ggml_scale", "ggml_scale", a.ptr)  # ggml_is_padded_1d, stricter about size-1 dims' strides
    return _same(ctx, "ggml_scale", a, lambda: _c("ggml_scale", _inplace)(ctx.ptr, a.ptr, float(s)), view=_inplace)


def ggml_clamp(ctx: Context, a: Tensor, min_val: float, max_val: float) -> Tensor:
    """a clamped element-wise to [min_val, max_val]."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_clamp")
    _types(a, CPU_FLOAT, "ggml_clamp")
    _dense0(a, "ggml_clamp")
    check(not (min_val > max_val), f"ggml_clamp: min_val {min_val} > max_val {max_val}")
    return _same(ctx, "ggml_clamp", a, lambda: lib.ggml_clamp(ctx.ptr, a.ptr, float(min_val), float(max_val)))


def ggml_silu_back(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Gradient of silu: a = upstream gradient dy, b = the silu input x (ggml's argument order)."""
    return _same_shape_pair("ggml_silu_back", ctx, a, b, lib.ggml_silu_back)


def _same_shape_pair(what, ctx, a, b, fn, *args, view=False):
    ctx = _ctx(ctx)
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32,), what, "a")
    _types(b, (F32,), what, "b")
    if _ne(a) != _ne(b):
        raise GGMLError(f"{what}: a {_shape_str(a)} and b {_shape_str(b)} must have the same shape")
    _contiguous(a, what, "a")
    _contiguous(b, what, "b")
    return _same(ctx, what, a, lambda: fn(ctx.ptr, a.ptr, b.ptr, *args), view=view)


# -- matrix products ------------------------------------------------------------------------
def ggml_mul_mat(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """a [K, M, ...] x b [K, N, ...] -> [M, N, ...]: in R terms t(a) %*% b."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_mul_mat", "a"), _t(b, "ggml_mul_mat", "b")
    _types(a, FLOAT + QUANTIZED, "ggml_mul_mat", "a")
    _types(b, (F32,), "ggml_mul_mat", "b")
    na, nb_ = _ne(a), _ne(b)
    _check_rule("ggml_mul_mat", "ggml_mul_mat", a.ptr, b.ptr)
    _dense0(a, "ggml_mul_mat", "a")
    _dense0(b, "ggml_mul_mat", "b")
    return _make(ctx, "ggml_mul_mat", [na[1], nb_[1], nb_[2], nb_[3]], F32,
                 lambda: lib.ggml_mul_mat(ctx.ptr, a.ptr, b.ptr))


def ggml_out_prod(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """a [M, K] (x) b [N, K] -> [M, N]: in R terms a %*% t(b)."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_out_prod", "a"), _t(b, "ggml_out_prod", "b")
    _types(a, (F32,), "ggml_out_prod", "a")
    _types(b, (F32,), "ggml_out_prod", "b")
    na, nb_ = _ne(a), _ne(b)
    _check_rule("ggml_out_prod", "ggml_out_prod", a.ptr, b.ptr)
    _dense0(a, "ggml_out_prod", "a")
    return _make(ctx, "ggml_out_prod", [na[0], nb_[0], nb_[2], nb_[3]], F32,
                 lambda: lib.ggml_out_prod(ctx.ptr, a.ptr, b.ptr))


# -- softmax ------------------------------------------------------------------------------------
def ggml_soft_max(ctx: Context, a: Tensor, *, _inplace: bool = False) -> Tensor:
    """Softmax along ne0 (per R column)."""
    return ggml_soft_max_ext(ctx, a, None, 1.0, 0.0, _inplace=_inplace)


def ggml_soft_max_ext(ctx: Context, a: Tensor, mask: Tensor | None = None, scale: float = 1.0,
                      max_bias: float = 0.0, *, _inplace: bool = False) -> Tensor:
    """softmax(a * scale + mask) along ne0; mask (f32/f16) has a's ne0 and at least its ne1 rows."""
    what = "ggml_soft_max_ext"
    ctx = _ctx(ctx)
    a = _t(a, what)
    _types(a, (F32,), what)
    check(lib.ggml_is_contiguous(a.ptr), f"{what}: a must be contiguous")
    mp = ffi.NULL
    if mask is not None:
        mask = _t(mask, what, "mask")
        _types(mask, (F32, F16), what, "mask")
        check(lib.ggml_is_contiguous(mask.ptr), f"{what}: mask must be contiguous")
        mp = mask.ptr
    check(max_bias >= 0, f"{what}: max_bias must be >= 0")
    _check_rule("ggml_soft_max_ext", what, a.ptr, mp, scale, max_bias)
    if _inplace and mask is None and scale == 1.0:
        return _same(ctx, what, a, lambda: lib.ggml_soft_max_inplace(ctx.ptr, a.ptr), view=True)
    return _same(ctx, what, a, lambda: _c("ggml_soft_max_ext", _inplace)(ctx.ptr, a.ptr, mp, float(scale),
                                                                         float(max_bias)), view=_inplace)


def ggml_soft_max_ext_back(ctx: Context, a: Tensor, b: Tensor, scale: float = 1.0,
                           max_bias: float = 0.0, *, _inplace: bool = False) -> Tensor:
    """Gradient of softmax: a = upstream gradient, b = the softmax output."""
    check(max_bias == 0, "ggml_soft_max_ext_back: the CPU backend supports only max_bias = 0")
    return _same_shape_pair("ggml_soft_max_ext_back", ctx, a, b, _c("ggml_soft_max_ext_back", _inplace),
                            float(scale), float(max_bias), view=_inplace)


# -- norms ------------------------------------------------------------------------------------------
def _norm(cname: str):

    def op(ctx: Context, a: Tensor, eps: float = 1e-5, *, _inplace: bool = False) -> Tensor:
        ctx = _ctx(ctx)
        a = _t(a, cname)
        _types(a, (F32,), cname)
        _dense0(a, cname)
        check(eps >= 0, f"{cname}: eps must be >= 0")
        return _same(ctx, cname, a, lambda: _c(cname, _inplace)(ctx.ptr, a.ptr, float(eps)), view=_inplace)

    op.__name__ = op.__qualname__ = cname
    op.__doc__ = f"{cname}(ctx, a, eps=1e-5): normalise along ne0 (per R column)."
    return op


ggml_norm = _norm("ggml_norm")
ggml_rms_norm = _norm("ggml_rms_norm")
ggml_l2_norm = _norm("ggml_l2_norm")


def ggml_rms_norm_back(ctx: Context, a: Tensor, b: Tensor, eps: float = 1e-5) -> Tensor:
    """Gradient of rms_norm: a = upstream gradient, b = the rms_norm input x."""
    return _same_shape_pair("ggml_rms_norm_back", ctx, a, b, lib.ggml_rms_norm_back, float(eps))


def ggml_group_norm(ctx: Context, a: Tensor, n_groups: int, eps: float = 1e-5, *, _inplace: bool = False) -> Tensor:
    """Normalise groups of channels (ne2): ggml splits ne2 into n_groups groups of
    ceil(ne2 / n_groups) channels; with n_groups > ne2 every channel is its own group.
    ggmlR refuses n_groups > ne2, which ggml handles."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_group_norm")
    _types(a, (F32,), "ggml_group_norm")
    _dense0(a, "ggml_group_norm")
    n_groups = int(n_groups)
    check(n_groups > 0, f"ggml_group_norm: n_groups must be positive, got {n_groups}")
    check(eps >= 0, "ggml_group_norm: eps must be >= 0")
    return _same(ctx, "ggml_group_norm", a, lambda: _c("ggml_group_norm", _inplace)(ctx.ptr, a.ptr, n_groups, float(eps)),
                 view=_inplace)


# -- reductions ---------------------------------------------------------------------------------------
def ggml_sum(ctx: Context, a: Tensor) -> Tensor:
    """The sum of all elements of a, as a one-element tensor."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_sum")
    _types(a, CPU_FLOAT, "ggml_sum")
    _dense0(a, "ggml_sum")
    return _make(ctx, "ggml_sum", [1, 1, 1, 1], a.type, lambda: lib.ggml_sum(ctx.ptr, a.ptr))


def ggml_sum_rows(ctx: Context, a: Tensor) -> Tensor:
    """Sum along ne0: [ne0, ne1, ...] -> [1, ne1, ...] (R colSums)."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_sum_rows")
    _types(a, (F32,), "ggml_sum_rows")  # the CPU kernel aborts on f16
    _dense0(a, "ggml_sum_rows")
    return _make(ctx, "ggml_sum_rows", [1] + _ne(a)[1:], a.type, lambda: lib.ggml_sum_rows(ctx.ptr, a.ptr))


def ggml_mean(ctx: Context, a: Tensor) -> Tensor:
    """Mean along ne0: [ne0, ne1, ...] -> [1, ne1, ...] (R colMeans)."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_mean")
    _types(a, (F32,), "ggml_mean")
    _dense0(a, "ggml_mean")
    return _make(ctx, "ggml_mean", [1] + _ne(a)[1:], F32, lambda: lib.ggml_mean(ctx.ptr, a.ptr))


def ggml_argmax(ctx: Context, a: Tensor) -> Tensor:
    """Index of the maximum along ne0 of a matrix: [ne0, ne1] -> i32 [ne1]."""
    ctx = _ctx(ctx)
    a = _t(a, "ggml_argmax")
    _types(a, (F32,), "ggml_argmax")
    _dense0(a, "ggml_argmax")
    _check_rule("ggml_argmax", "ggml_argmax", a.ptr)
    return _make(ctx, "ggml_argmax", [_ne(a)[1], 1, 1, 1], I32, lambda: lib.ggml_argmax(ctx.ptr, a.ptr))


def ggml_count_equal(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Number of equal elements of two i32 tensors of the same shape (an i64 scalar)."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_count_equal", "a"), _t(b, "ggml_count_equal", "b")
    _types(a, (I32,), "ggml_count_equal", "a")
    _types(b, (I32,), "ggml_count_equal", "b")
    check(_ne(a) == _ne(b), f"ggml_count_equal: shapes differ: {_shape_str(a)} vs {_shape_str(b)}")
    ne = _ne(a)
    if ne[2] * ne[3] > 1:  # ggml's kernel mis-indexes 3-d/4-d rows (wrong counts, reads out of bounds)
        for x, arg in ((a, "a"), (b, "b")):
            _contiguous(x, "ggml_count_equal (3-d or 4-d)", arg)
        a, b = (ggml_reshape_2d(ctx, x, ne[0], ne[1] * ne[2] * ne[3]) for x in (a, b))
    return _make(ctx, "ggml_count_equal", [1, 1, 1, 1], lib.GGML_TYPE_I64,
                 lambda: lib.ggml_count_equal(ctx.ptr, a.ptr, b.ptr))


# -- views, reshapes and copies -------------------------------------------------------------------------
def ggml_reshape(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Reshape contiguous a to b's shape (a view)."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_reshape", "a"), _t(b, "ggml_reshape", "b")
    return _reshape(ctx, "ggml_reshape", a, _ne(b), lambda: lib.ggml_reshape(ctx.ptr, a.ptr, b.ptr))


def _reshape(ctx, what, a, ne, call):
    check(all(d >= 0 for d in ne), f"{what}: dims must be >= 0, got {ne}")
    _check_rule(f"ggml_reshape_{len(ne)}d", what, a.ptr, *ne)
    return _make(ctx, what, ne, a.type, call, view=True)


def ggml_reshape_1d(ctx: Context, a: Tensor, ne0: int) -> Tensor:
    """A view of contiguous a as ne = [ne0]."""
    ctx, a = _ctx(ctx), _t(a, "ggml_reshape_1d")
    return _reshape(ctx, "ggml_reshape_1d", a, [int(ne0)], lambda: lib.ggml_reshape_1d(ctx.ptr, a.ptr, int(ne0)))


def ggml_reshape_2d(ctx: Context, a: Tensor, ne0: int, ne1: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1] (ne0 is the fastest-changing axis)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_reshape_2d")
    ne = [int(ne0), int(ne1)]
    return _reshape(ctx, "ggml_reshape_2d", a, ne, lambda: lib.ggml_reshape_2d(ctx.ptr, a.ptr, *ne))


def ggml_reshape_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1, ne2]."""
    ctx, a = _ctx(ctx), _t(a, "ggml_reshape_3d")
    ne = [int(ne0), int(ne1), int(ne2)]
    return _reshape(ctx, "ggml_reshape_3d", a, ne, lambda: lib.ggml_reshape_3d(ctx.ptr, a.ptr, *ne))


def ggml_reshape_4d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1, ne2, ne3]."""
    ctx, a = _ctx(ctx), _t(a, "ggml_reshape_4d")
    ne = [int(ne0), int(ne1), int(ne2), int(ne3)]
    return _reshape(ctx, "ggml_reshape_4d", a, ne, lambda: lib.ggml_reshape_4d(ctx.ptr, a.ptr, *ne))


def _view(what, ctx, a, ne, nbs, offset, call):
    """A view must stay inside its source's bytes (ggml asserts this)."""
    ctx, a = _ctx(ctx), _t(a, what)
    ne = [int(d) for d in ne]
    offset = int(offset)
    check(all(d >= 0 for d in ne) and offset >= 0, f"{what}: dims and offset must be >= 0")
    nbs = [int(s) for s in nbs]
    check(all(s > 0 for s in nbs), f"{what}: strides must be positive")
    _check_rule(f"ggml_view_{len(ne)}d", what, a.ptr, *ne, *nbs, offset)
    return _make(ctx, what, ne + [1] * (4 - len(ne)), a.type, lambda: call(ctx, a), view=True)


def ggml_view_1d(ctx: Context, a: Tensor, ne0: int, offset: int = 0) -> Tensor:
    """A view of ne0 elements of a, starting `offset` bytes in."""
    return _view("ggml_view_1d", ctx, a, [ne0], [], offset,
                 lambda c, t: lib.ggml_view_1d(c.ptr, t.ptr, int(ne0), int(offset)))


def ggml_view_2d(ctx: Context, a: Tensor, ne0: int, ne1: int, nb1: int, offset: int = 0) -> Tensor:
    """A view of a as [ne0, ne1] with row stride nb1 bytes, starting `offset` bytes in."""
    return _view("ggml_view_2d", ctx, a, [ne0, ne1], [nb1], offset,
                 lambda c, t: lib.ggml_view_2d(c.ptr, t.ptr, int(ne0), int(ne1), int(nb1), int(offset)))


def ggml_view_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int,
                 offset: int = 0) -> Tensor:
    """A view of a as [ne0, ne1, ne2] with strides nb1, nb2 bytes, starting `offset` bytes in."""
    return _view("ggml_view_3d", ctx, a, [ne0, ne1, ne2], [nb1, nb2], offset,
                 lambda c, t: lib.ggml_view_3d(c.ptr, t.ptr, int(ne0), int(ne1), int(ne2),
                                               int(nb1), int(nb2), int(offset)))


def ggml_view_4d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, nb1: int, nb2: int, nb3: int,
                 offset: int = 0) -> Tensor:
    """A view of a as [ne0, ne1, ne2, ne3] with strides nb1, nb2, nb3 bytes, starting `offset` bytes in."""
    return _view("ggml_view_4d", ctx, a, [ne0, ne1, ne2, ne3], [nb1, nb2, nb3], offset,
                 lambda c, t: lib.ggml_view_4d(c.ptr, t.ptr, int(ne0), int(ne1), int(ne2), int(ne3),
                                               int(nb1), int(nb2), int(nb3), int(offset)))


def ggml_permute(ctx: Context, a: Tensor, axis0: int, axis1: int, axis2: int, axis3: int) -> Tensor:
    """Axis i of a becomes axis `axis_i` of the result (a view)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_permute")
    axes = [int(axis0), int(axis1), int(axis2), int(axis3)]
    _check_rule("ggml_permute", "ggml_permute", a.ptr, *axes)
    ne = [0] * 4
    for i, ax in enumerate(axes):
        ne[ax] = _ne(a)[i]
    return _make(ctx, "ggml_permute", ne, a.type, lambda: lib.ggml_permute(ctx.ptr, a.ptr, *axes), view=True)


def ggml_transpose(ctx: Context, a: Tensor) -> Tensor:
    """Swap ne0 and ne1 (a view; ggml_cont() materialises it)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_transpose")
    n = _ne(a)
    return _make(ctx, "ggml_transpose", [n[1], n[0], n[2], n[3]], a.type,
                 lambda: lib.ggml_transpose(ctx.ptr, a.ptr), view=True)


def ggml_cont(ctx: Context, a: Tensor) -> Tensor:
    """A contiguous copy of a (materialises views)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_cont")
    return _same(ctx, "ggml_cont", a, lambda: lib.ggml_cont(ctx.ptr, a.ptr))


def ggml_dup(ctx: Context, a: Tensor, *, _inplace: bool = False) -> Tensor:
    """A copy of a (ggml_dup_inplace: a view of a that the graph copies onto itself)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_dup")
    return _same(ctx, "ggml_dup", a, lambda: _c("ggml_dup", _inplace)(ctx.ptr, a.ptr), view=_inplace)


def ggml_cpy(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Copy a into b (converting the type); the result is a view of b."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_cpy", "a"), _t(b, "ggml_cpy", "b")
    _types(a, (F32, F16, BF16, I32), "ggml_cpy", "a")
    _types(b, (F32, F16, BF16, I32), "ggml_cpy", "b")
    if (a.type == I32) != (b.type == I32):
        raise GGMLError("ggml_cpy: the CPU backend cannot convert between i32 and floating point")
    _check_rule("ggml_cpy", "ggml_cpy", a.ptr, b.ptr)
    return _make(ctx, "ggml_cpy", _ne(b), b.type, lambda: lib.ggml_cpy(ctx.ptr, a.ptr, b.ptr), view=True)


def ggml_cast(ctx: Context, a: Tensor, type: int) -> Tensor:
    """a converted to `type` (GGML_TYPE_F32, _F16 or _BF16)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_cast")
    _types(a, FLOAT, "ggml_cast")
    check(type in FLOAT, "ggml_cast: target type must be f32, f16 or bf16")
    return _make(ctx, "ggml_cast", _ne(a), type, lambda: lib.ggml_cast(ctx.ptr, a.ptr, type))


# -- assembling tensors ------------------------------------------------------------------------------
def ggml_concat(ctx: Context, a: Tensor, b: Tensor, dim: int = 0) -> Tensor:
    """a and b joined along axis `dim` (0..3, ggml's ne order); the other axes must match."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_concat", "a"), _t(b, "ggml_concat", "b")
    _types(a, (F32, F16, I32), "ggml_concat", "a")
    dim = int(dim)
    _check_rule("ggml_concat", "ggml_concat", a.ptr, b.ptr, dim)
    check(bool(lib.ggml_is_contiguous_rows(a.ptr) and lib.ggml_is_contiguous_rows(b.ptr)),
          "ggml_concat: a and b must have packed rows; use ggml_cont() first")
    na, nb_ = _ne(a), _ne(b)
    ne = list(na)
    ne[dim] += nb_[dim]
    return _make(ctx, "ggml_concat", ne, a.type, lambda: lib.ggml_concat(ctx.ptr, a.ptr, b.ptr, dim))


def ggml_get_rows(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Rows of a (along ne1) picked by the i32 indices in b: [ne0, len(b)]."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_get_rows", "a"), _t(b, "ggml_get_rows", "b")
    _types(a, (F32, F16, BF16, I32) + QUANTIZED, "ggml_get_rows", "a")
    _types(b, (I32,), "ggml_get_rows", "b")
    _dense0(a, "ggml_get_rows", "a")
    _check_rule("ggml_get_rows", "ggml_get_rows", a.ptr, b.ptr)
    na, nb_ = _ne(a), _ne(b)
    out_type = I32 if a.type == I32 else F32
    return _make(ctx, "ggml_get_rows", [na[0], nb_[0], nb_[1], nb_[2]], out_type,
                 lambda: lib.ggml_get_rows(ctx.ptr, a.ptr, b.ptr))


def ggml_get_rows_back(ctx: Context, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """Gradient of get_rows: scatter-add rows of a into a tensor shaped like c."""
    ctx = _ctx(ctx)
    a, b, c = (_t(a, "ggml_get_rows_back", "a"), _t(b, "ggml_get_rows_back", "b"),
               _t(c, "ggml_get_rows_back", "c"))
    _types(a, (F32,), "ggml_get_rows_back", "a")
    _types(b, (I32,), "ggml_get_rows_back", "b")
    _dense0(a, "ggml_get_rows_back", "a")
    ok = (lib.ggml_is_matrix(a.ptr) and lib.ggml_is_vector(b.ptr) and lib.ggml_is_matrix(c.ptr)
          and _ne(a)[0] == _ne(c)[0] and _ne(a)[1] == _ne(b)[0])
    check(ok, f"ggml_get_rows_back: a {_shape_str(a)}, indices {_shape_str(b)} and c {_shape_str(c)} do not fit")
    return _make(ctx, "ggml_get_rows_back", _ne(c), F32, lambda: lib.ggml_get_rows_back(ctx.ptr, a.ptr, b.ptr, c.ptr))


def ggml_repeat(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Tile a to b's shape (each of a's dims must divide b's)."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_repeat", "a"), _t(b, "ggml_repeat", "b")
    _types(a, CPU_FLOAT, "ggml_repeat")
    _dense0(a, "ggml_repeat")
    _check_rule("ggml_repeat", "ggml_repeat", a.ptr, b.ptr)
    return _make(ctx, "ggml_repeat", _ne(b), a.type, lambda: lib.ggml_repeat(ctx.ptr, a.ptr, b.ptr))


def ggml_repeat_back(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Sum a's tiles down to b's shape (the gradient of repeat)."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_repeat_back", "a"), _t(b, "ggml_repeat_back", "b")
    _types(a, (F32,), "ggml_repeat_back")  # the CPU kernel aborts on f16
    _dense0(a, "ggml_repeat_back")
    _check_rule("ggml_repeat_back", "ggml_repeat_back", a.ptr, b.ptr)
    return _make(ctx, "ggml_repeat_back", _ne(b), a.type, lambda: lib.ggml_repeat_back(ctx.ptr, a.ptr, b.ptr))


def ggml_pad(ctx: Context, a: Tensor, p0: int = 0, p1: int = 0, p2: int = 0, p3: int = 0) -> Tensor:
    """Zero-pad at the end of each dim."""
    ctx, a = _ctx(ctx), _t(a, "ggml_pad")
    _types(a, (F32,), "ggml_pad")
    ps = [int(p0), int(p1), int(p2), int(p3)]
    check(all(p >= 0 for p in ps), f"ggml_pad: padding must be >= 0, got {ps}")
    ne = [d + p for d, p in zip(_ne(a), ps)]
    return _make(ctx, "ggml_pad", ne, F32, lambda: lib.ggml_pad(ctx.ptr, a.ptr, *ps))


def ggml_acc(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
    """a with b added into the view (nb1, nb2, nb3, offset) of it."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_acc", "a"), _t(b, "ggml_acc", "b")
    _types(a, (F32,), "ggml_acc", "a")
    _types(b, (F32,), "ggml_acc", "b")
    _check_rule("ggml_acc", "ggml_acc", a.ptr, b.ptr)
    _dense0(b, "ggml_acc", "b")
    nb = _ne(b)
    strides = [4, int(nb1), int(nb2), int(nb3)]
    check(all(0 <= v < 2**31 for v in strides[1:] + [int(offset)]),
          "ggml_acc: strides and offset must be in 0..2**31-1 (ggml stores them as int32)")
    span = 0 if 0 in nb else 4 + sum((d - 1) * s for d, s in zip(nb, strides))
    if int(offset) < 0 or int(offset) + max(span, 1) > a.nbytes():
        raise GGMLError(f"ggml_acc: b {_shape_str(b)} at offset {offset} falls outside a's {a.nbytes()} bytes")
    return _same(ctx, "ggml_acc", a, lambda: lib.ggml_acc(ctx.ptr, a.ptr, b.ptr, int(nb1), int(nb2),
                                                          int(nb3), int(offset)))


# -- convolution, pooling, resampling -----------------------------------------------------------------
def ggml_im2col(ctx: Context, a: Tensor, b: Tensor, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int,
                is_2D: bool = True, dst_type: int = F32) -> Tensor:
    """Unfold b [W, H, C, N] into columns for kernel a [KW, KH, C, OC]."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_im2col", "a"), _t(b, "ggml_im2col", "b")
    _types(b, (F32,), "ggml_im2col", "b")
    _contiguous(b, "ggml_im2col", "b")  # the kernel indexes each plane as [IH][IW]
    check(0 not in _ne(a) + _ne(b), "ggml_im2col: kernel and input must not be empty")
    check(dst_type in (F32, F16), "ggml_im2col: dst_type must be f32 or f16")
    s0, s1, p0, p1, d0, d1 = (int(v) for v in (s0, s1, p0, p1, d0, d1))
    _check_rule("ggml_im2col", "ggml_im2col", a.ptr, b.ptr, s0, s1, p0, p1, d0, d1, bool(is_2D))
    na, nb_ = _ne(a), _ne(b)
    oh = _conv_out(nb_[1], na[1], s1, p1, d1) if is_2D else 0
    ow = _conv_out(nb_[0], na[0], s0, p0, d0)
    ne = [na[2] * na[1] * na[0], ow, oh, nb_[3]] if is_2D else [na[1] * na[0], ow, nb_[2], 1]
    return _make(ctx, "ggml_im2col", ne, dst_type,
                 lambda: lib.ggml_im2col(ctx.ptr, a.ptr, b.ptr, s0, s1, p0, p1, d0, d1, bool(is_2D), dst_type))


def ggml_conv_2d(ctx: Context, a: Tensor, b: Tensor, s0: int = 1, s1: int = 1, p0: int = 0, p1: int = 0,
                 d0: int = 1, d1: int = 1) -> Tensor:
    """2-d convolution of b [W, H, C, N] with kernel a [KW, KH, C, OC] -> [OW, OH, OC, N]."""
    ctx = _ctx(ctx)
    a, b = _t(a, "ggml_conv_2d", "a"), _t(b, "ggml_conv_2d", "b")
    _types(a, (F32, F16), "ggml_conv_2d", "a")
    _types(b, (F32,), "ggml_conv_2d", "b")
    _contiguous(b, "ggml_conv_2d", "b")  # through im2col
    check(0 not in _ne(a) + _ne(b), "ggml_conv_2d: kernel and input must not be empty")  # ggml asserts deep inside
    check(bool(lib.ggml_is_contiguous(a.ptr)), "ggml_conv_2d: kernel must be contiguous")
    na, nb_ = _ne(a), _ne(b)
    s0, s1, p0, p1, d0, d1 = (int(v) for v in (s0, s1, p0, p1, d0, d1))
    _check_rule("ggml_conv_2d", "ggml_conv_2d", a.ptr, b.ptr, s0, s1, p0, p1, d0, d1)
    ow, oh = _conv_out(nb_[0], na[0], s0, p0, d0), _conv_out(nb_[1], na[1], s1, p1, d1)
    cols = na[0] * na[1] * na[2] * ow * oh * nb_[3]
    out = ow * oh * na[3] * nb_[3]
    # im2col (f16), mul_mat, then a permuted copy: reserve all of them, plus the views between.
    extra = 2 * cols + 8 * out + 8 * N_OVERHEAD + 64
    return _make(ctx, "ggml_conv_2d", [ow, oh, na[3], nb_[3]], F32,
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
    ctx, a = _ctx(ctx), _t(a, "ggml_pool_1d")
    _types(a, (F32, F16), "ggml_pool_1d")
    _contiguous(a, "ggml_pool_1d")  # the kernel steps through rows by nb1 alone
    op, k0, s0, p0 = _pool_op(op), int(k0), int(s0), int(p0)
    _check_rule("ggml_pool_1d", "ggml_pool_1d", a.ptr, op, k0, s0, p0)
    n = _ne(a)
    o0 = _rules.pool_out(n[0], k0, s0, p0)
    return _make(ctx, "ggml_pool_1d", [o0] + n[1:], F32, lambda: lib.ggml_pool_1d(ctx.ptr, a.ptr, op, k0, s0, p0))


def ggml_pool_2d(ctx: Context, a: Tensor, op: int | str, k0: int, k1: int, s0: int, s1: int, p0: float = 0.0,
                 p1: float = 0.0) -> Tensor:
    """2-D pooling over ne0 and ne1: op "max"/"avg", kernel k0 x k1, strides s0, s1, padding p0, p1."""
    ctx, a = _ctx(ctx), _t(a, "ggml_pool_2d")
    _types(a, (F32, F16), "ggml_pool_2d")
    _contiguous(a, "ggml_pool_2d")  # it walks planes by nb2 to the end of a's bytes: more planes than dst has
    op, k0, k1, s0, s1 = _pool_op(op), int(k0), int(k1), int(s0), int(s1)
    _check_rule("ggml_pool_2d", "ggml_pool_2d", a.ptr, op, k0, k1, s0, s1, float(p0), float(p1))
    n = _ne(a)
    o0, o1 = _rules.pool_out(n[0], k0, s0, p0), _rules.pool_out(n[1], k1, s1, p1)
    return _make(ctx, "ggml_pool_2d", [o0, o1] + n[2:], F32,
                 lambda: lib.ggml_pool_2d(ctx.ptr, a.ptr, op, k0, k1, s0, s1, float(p0), float(p1)))


def ggml_upscale(ctx: Context, a: Tensor, scale_factor: int, mode: int = 0) -> Tensor:
    """Nearest (mode 0) or bilinear (mode 1) upscaling of dims 0 and 1 by an integer factor."""
    ctx, a = _ctx(ctx), _t(a, "ggml_upscale")
    _types(a, (F32,), "ggml_upscale")
    sf = int(scale_factor)
    check(sf > 1, f"ggml_upscale: scale_factor must be > 1, got {scale_factor}")
    check(int(mode) in (0, 1, 2), "ggml_upscale: mode must be 0 (nearest), 1 (bilinear) or 2 (bicubic)")
    n = _ne(a)
    return _make(ctx, "ggml_upscale", [n[0] * sf, n[1] * sf, n[2], n[3]], F32,
                 lambda: lib.ggml_upscale(ctx.ptr, a.ptr, sf, int(mode)))


# -- attention ---------------------------------------------------------------------------------------------
def ggml_diag_mask_inf(ctx: Context, a: Tensor, n_past: int = 0, *, _inplace: bool = False) -> Tensor:
    """Set a[i, j] = -inf for i > n_past + j (causal masking of a [keys, queries] score matrix)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_diag_mask_inf")
    _types(a, (F32,), "ggml_diag_mask_inf")
    n_past = int(n_past)
    check(n_past >= 0, f"ggml_diag_mask_inf: n_past must be >= 0, got {n_past}")  # the kernel asserts it
    _contiguous(a, "ggml_diag_mask_inf")
    return _same(ctx, "ggml_diag_mask_inf", a, lambda: _c("ggml_diag_mask_inf", _inplace)(ctx.ptr, a.ptr, int(n_past)),
                 view=_inplace)


def _rope_check(what, a, b, c, n_dims, mode, mrope):
    """ggml's rope asserts, and its CPU kernel's: positions i32, one (four for mrope) per ne2 row."""
    a, b = _t(a, what, "a"), _t(b, what, "b")
    _types(a, (F32, F16), what, "a")
    _types(b, (I32,), what, "b")
    _dense0(a, what, "a")  # the kernel asserts nb0 == nb00 == element size
    n_dims = _ne(a)[0] if n_dims is None else int(n_dims)
    check(mode & 1 == 0, f"{what}: odd modes are no longer supported by ggml, got {mode}")
    check(0 < n_dims <= _ne(a)[0] and n_dims % 2 == 0, f"{what}: n_dims must be even and in 1..ne0={_ne(a)[0]}, got {n_dims}")
    per_token = 4 if mrope else 1
    check(bool(lib.ggml_is_vector(b.ptr)) and _ne(b)[0] == per_token * _ne(a)[2],
          f"{what}: positions b must be a vector of {per_token} x ne2 = {per_token * _ne(a)[2]} entries, "
          f"got {_shape_str(b)}")
    cp = ffi.NULL
    if c is not None:
        c = _t(c, what, "c")
        _types(c, (F32,), what, "c")
        check(_ne(c)[0] >= n_dims // 2, f"{what}: freq factors c need at least n_dims/2 entries")
        cp = c.ptr
    return a, b, cp, n_dims


_PLAIN_ROPE_MODES = (0, 2)  # GGML_ROPE_TYPE_NORMAL, GGML_ROPE_TYPE_NEOX; MROPE/VISION/IMROPE go through rope_multi


def ggml_rope_ext(ctx: Context, a: Tensor, b: Tensor, c: Tensor | None = None, n_dims: int | None = None,
                  mode: int = 0, n_ctx_orig: int = 0, freq_base: float = 10000.0, freq_scale: float = 1.0,
                  ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                  beta_slow: float = 1.0, *, _inplace: bool = False, _back: bool = False) -> Tensor:
    """Rotary position embedding of a [head_dim, n_head, n_tokens] at i32 positions b [n_tokens]."""
    what = "ggml_rope_ext_back" if _back else "ggml_rope_ext"
    ctx = _ctx(ctx)
    mode = int(mode)
    check(mode in _PLAIN_ROPE_MODES, f"{what}: mode must be 0 (normal) or 2 (neox), got {mode}; "
          "multi-section modes (GGML_ROPE_TYPE_MROPE, _VISION) need ggml_rope_multi")
    a, b, cp, n_dims = _rope_check(what, a, b, c, n_dims, mode, False)
    args = (int(n_ctx_orig), float(freq_base), float(freq_scale), float(ext_factor), float(attn_factor),
            float(beta_fast), float(beta_slow))
    fn = lib.ggml_rope_ext_back if _back else _c("ggml_rope_ext", _inplace)
    return _same(ctx, what, a, lambda: fn(ctx.ptr, a.ptr, b.ptr, cp, n_dims, mode, *args), view=_inplace)


def ggml_flash_attn_ext(ctx: Context, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                        scale: float = 1.0, max_bias: float = 0.0, logit_softcap: float = 0.0) -> Tensor:
    """Fused attention: q [D, n_q, H, B], k [D, n_kv, H_kv, B], v [Dv, n_kv, H_kv, B] -> [Dv, H, n_q, B]."""
    what = "ggml_flash_attn_ext"
    ctx = _ctx(ctx)
    q, k, v = _t(q, what, "q"), _t(k, what, "k"), _t(v, what, "v")
    _types(q, (F32,), what, "q")
    _types(k, (F32, F16) + QUANTIZED, what, "k")
    _types(v, (F32, F16) + QUANTIZED, what, "v")
    for x, arg in ((q, "q"), (k, "k"), (v, "v")):
        _dense0(x, what, arg)
    nq, nk, nv = _ne(q), _ne(k), _ne(v)
    if nk[0] != nq[0] or _nodiv(nq[2], nk[2]) or _nodiv(nq[3], nk[3]):
        raise GGMLError(f"{what}: k {_shape_str(k)} does not fit q {_shape_str(q)} (same ne0, heads dividing)")
    if nq[3] != nk[3] or nq[3] != nv[3] or nv[1] != nk[1] or nv[2] != nk[2]:
        raise GGMLError(f"{what}: v {_shape_str(v)} does not fit k {_shape_str(k)}")
    mp = ffi.NULL
    if mask is not None:
        mask = _t(mask, what, "mask")
        _types(mask, (F16,), what, "mask")
        nm = _ne(mask)
        check(bool(lib.ggml_is_contiguous(mask.ptr)), f"{what}: mask must be contiguous")
        if nm[0] != nk[1] or nm[1] < nq[1] or _nodiv(nq[2], nm[2]) or _nodiv(nq[3], nm[3]):
            raise GGMLError(f"{what}: mask {_shape_str(mask)} must be [n_kv, >= n_q, ...] for q {_shape_str(q)}")
        mp = mask.ptr
    check(max_bias >= 0 and (max_bias == 0 or mask is not None), f"{what}: max_bias > 0 needs a mask")
    return _make(ctx, what, [nv[0], nq[2], nq[1], nq[3]], F32, lambda: lib.ggml_flash_attn_ext(
        ctx.ptr, q.ptr, k.ptr, v.ptr, mp, float(scale), float(max_bias), float(logit_softcap)))


# -- sorting ---------------------------------------------------------------------------------------------
def ggml_argsort(ctx: Context, a: Tensor, order: int = 0) -> Tensor:
    """i32 indices that sort each row (along ne0); order 0 ascending, 1 descending."""
    ctx, a = _ctx(ctx), _t(a, "ggml_argsort")
    _types(a, (F32,), "ggml_argsort")
    _contiguous(a, "ggml_argsort")  # the kernel steps through rows by nb1 alone
    check(int(order) in (0, 1), "ggml_argsort: order must be 0 (ascending) or 1 (descending)")
    return _make(ctx, "ggml_argsort", _ne(a), I32, lambda: lib.ggml_argsort(ctx.ptr, a.ptr, int(order)))


def ggml_top_k(ctx: Context, a: Tensor, k: int) -> Tensor:
    """i32 indices of the k largest entries of each row (order within the k is unspecified)."""
    ctx, a = _ctx(ctx), _t(a, "ggml_top_k")
    _types(a, (F32,), "ggml_top_k")
    _contiguous(a, "ggml_top_k")
    k = int(k)
    check(0 < k <= _ne(a)[0], f"ggml_top_k: k must be in 1..{_ne(a)[0]}, got {k}")
    return _make(ctx, "ggml_top_k", [k] + _ne(a)[1:], I32, lambda: lib.ggml_top_k(ctx.ptr, a.ptr, k))


OPS = sorted(name for name in globals() if name.startswith("ggml_"))
