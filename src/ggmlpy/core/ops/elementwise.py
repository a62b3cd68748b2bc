"""Element-wise ops: add, sub, mul, div (b broadcast over a), the unary functions (abs, exp, relu,
gelu, ...), leaky_relu, scale, clamp, silu_back, add1.
"""
from __future__ import annotations


from ...bindings import lib
from ..._naming import public_function
from ...errors import GGMLError, check
from ..checked import check_rule, tensor_arg
from ..tensor5 import Tensor5, broadcast_pair, unfold
from ..handles import Context, Tensor
from .args import (CPU_FLOAT, F16, F32, c_function, check_contiguous, check_packed_rows, check_types, dims, input_tensor, make_like,
                   same_shape_pair, shape_str, start_op)


# -- element-wise binary ------------------------------------------------------------------
def _binary(cname: str):
    what = cname

    def op(ctx: Context, a: Tensor, b: Tensor, *, _inplace: bool = False) -> Tensor:
        ctx = start_op(ctx)
        if isinstance(a, Tensor5) or isinstance(b, Tensor5):  # a pair of the five dims merged (tensor5.py)
            a4, b4, j, ne5 = broadcast_pair(ctx, tensor_arg(a, what, "a"), tensor_arg(b, what, "b"), what)
            return unfold(ctx, op(ctx, a4, b4, _inplace=_inplace), j, ne5)
        a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
        check_types(a, CPU_FLOAT, what, "a")
        check_packed_rows(a, what, "a")  # the CPU kernel asserts it (b may be strided)
        if b.type != a.type and b.type != F32:
            raise GGMLError(f"{what}: b has type {b.type_name}, a has {a.type_name}; they must match (or b be f32)")
        check_rule(cname, what, a.ptr, b.ptr)
        return make_like(ctx, what, a, lambda: c_function(cname, _inplace)(ctx.ptr, a.ptr, b.ptr), view=_inplace)

    return public_function(op, cname, f"{cname}(ctx, a, b): element-wise; b broadcasts to a's shape (ggml's rule).")


ggml_add = _binary("ggml_add")
ggml_sub = _binary("ggml_sub")
ggml_mul = _binary("ggml_mul")
ggml_div = _binary("ggml_div")


# -- element-wise unary -------------------------------------------------------------------
def _unary(cname: str, types=CPU_FLOAT):

    def op(ctx: Context, a: Tensor, *, _inplace: bool = False) -> Tensor:
        ctx = start_op(ctx)
        a = input_tensor(a, cname)
        check_types(a, types, cname)
        check_packed_rows(a, cname)  # every CPU unary kernel asserts it, whatever ne0
        return make_like(ctx, cname, a, lambda: c_function(cname, _inplace)(ctx.ptr, a.ptr), view=_inplace)

    return public_function(op, cname, f"{cname}(ctx, a): element-wise, same shape as a.")


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
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_leaky_relu")
    check_types(a, CPU_FLOAT, "ggml_leaky_relu")
    check_contiguous(a, "ggml_leaky_relu")  # the kernel steps through rows by nb1 alone
    return make_like(ctx, "ggml_leaky_relu", a,
                 lambda: lib.ggml_leaky_relu(ctx.ptr, a.ptr, float(negative_slope), bool(inplace)), view=bool(inplace))


def ggml_scale(ctx: Context, a: Tensor, s: float, *, _inplace: bool = False) -> Tensor:
    """a * s (inplace: into a's memory)."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_scale")
    check_types(a, (F32,), "ggml_scale")
    check(lib.ggml_is_contiguous(a.ptr), "ggml_scale: a must be contiguous")
    check_rule("ggml_scale", "ggml_scale", a.ptr)  # ggml_is_padded_1d, stricter about size-1 dims' strides
    return make_like(ctx, "ggml_scale", a, lambda: c_function("ggml_scale", _inplace)(ctx.ptr, a.ptr, float(s)), view=_inplace)


def ggml_clamp(ctx: Context, a: Tensor, min_val: float, max_val: float) -> Tensor:
    """a clamped element-wise to [min_val, max_val]."""
    ctx = start_op(ctx)
    a = input_tensor(a, "ggml_clamp")
    check_types(a, CPU_FLOAT, "ggml_clamp")
    check_packed_rows(a, "ggml_clamp")
    check(not (min_val > max_val), f"ggml_clamp: min_val {min_val} > max_val {max_val}")
    return make_like(ctx, "ggml_clamp", a, lambda: lib.ggml_clamp(ctx.ptr, a.ptr, float(min_val), float(max_val)))


def ggml_silu_back(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Gradient of silu: a = upstream gradient dy, b = the silu input x (ggml's argument order)."""
    return same_shape_pair("ggml_silu_back", ctx, a, b, lib.ggml_silu_back)


# -- small element-wise and shape ops ----------------------------------------------------------------------------
def ggml_add1(ctx: Context, a: Tensor, b: Tensor, *, _inplace: bool = False) -> Tensor:
    """a + b where b is a one-element tensor (ggml's ADD1)."""
    what = "ggml_add1"
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32, F16), what, "a")
    # the f32 kernel reads b as f32 whatever its type: an f16 b would be read as garbage
    check_types(b, (F32,) if a.type == F32 else (F32, F16), what, "b")
    check(bool(lib.ggml_is_scalar(b.ptr)), f"{what}: b must be a scalar (one element), got {shape_str(b)}")
    ne, nb = dims(a), [int(v) for v in a.ptr.nb]
    check(nb[0] == lib.ggml_type_size(a.type) and nb[2] == nb[1] * ne[1] and nb[3] == nb[2] * ne[2],
          f"{what}: a must be densely packed; use ggml_cont() first")
    return make_like(ctx, what, a, lambda: c_function("ggml_add1", _inplace)(ctx.ptr, a.ptr, b.ptr), view=_inplace)


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
