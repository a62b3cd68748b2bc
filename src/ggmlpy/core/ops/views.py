"""Views, reshapes and copies: reshape_*, view_*, permute, transpose, cont, dup, cpy, cast.
"""
from __future__ import annotations



from ...bindings import lib
from ...errors import GGMLError, check
from ..checked import check_rule, tensor_arg
from ..tensor5 import Tensor5, five, plain
from ..handles import Context, Tensor
from .args import (BF16, F16, F32, FLOAT, I32, c_function, check_types, dims, input_tensor, make_like,
                   make_tensor, start_op)


# -- views, reshapes and copies -------------------------------------------------------------------------
def ggml_reshape(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Reshape contiguous a to b's shape (a view)."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_reshape", "a"), input_tensor(b, "ggml_reshape", "b")
    return _reshape(ctx, "ggml_reshape", a, dims(b), lambda: lib.ggml_reshape(ctx.ptr, a.ptr, b.ptr))


def _reshape(ctx, what, a, ne, call):
    check(all(d >= 0 for d in ne), f"{what}: dims must be >= 0, got {ne}")
    check_rule(f"ggml_reshape_{len(ne)}d", what, a.ptr, *ne)
    return make_tensor(ctx, what, ne, a.type, call, view=True)


def ggml_reshape_1d(ctx: Context, a: Tensor, ne0: int) -> Tensor:
    """A view of contiguous a as ne = [ne0]."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_reshape_1d")
    return _reshape(ctx, "ggml_reshape_1d", a, [int(ne0)], lambda: lib.ggml_reshape_1d(ctx.ptr, a.ptr, int(ne0)))


def ggml_reshape_2d(ctx: Context, a: Tensor, ne0: int, ne1: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1] (ne0 is the fastest-changing axis)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_reshape_2d")
    ne = [int(ne0), int(ne1)]
    return _reshape(ctx, "ggml_reshape_2d", a, ne, lambda: lib.ggml_reshape_2d(ctx.ptr, a.ptr, *ne))


def ggml_reshape_3d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1, ne2]."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_reshape_3d")
    ne = [int(ne0), int(ne1), int(ne2)]
    return _reshape(ctx, "ggml_reshape_3d", a, ne, lambda: lib.ggml_reshape_3d(ctx.ptr, a.ptr, *ne))


def ggml_reshape_4d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1, ne2, ne3]."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_reshape_4d")
    ne = [int(ne0), int(ne1), int(ne2), int(ne3)]
    return _reshape(ctx, "ggml_reshape_4d", a, ne, lambda: lib.ggml_reshape_4d(ctx.ptr, a.ptr, *ne))


def ggml_reshape_5d(ctx: Context, a: Tensor, ne0: int, ne1: int, ne2: int, ne3: int, ne4: int) -> Tensor:
    """A view of contiguous a as ne = [ne0, ne1, ne2, ne3, ne4] (ggmlR's ggml; ne3 and ne4 are held
    merged in ggml 0.25.3's four dims, see ggmlpy.core.tensor5)."""
    ne = [int(ne0), int(ne1), int(ne2), int(ne3), int(ne4)]
    check(all(d >= 0 for d in ne), f"ggml_reshape_5d: dims must be >= 0, got {ne}")
    t = ggml_reshape_4d(ctx, plain(tensor_arg(a, "ggml_reshape_5d")), ne[0], ne[1], ne[2], ne[3] * ne[4])
    return five(t, ne[4]) if ne[3] * ne[4] else t


def _view(what, ctx, a, ne, nbs, offset, call):
    """A view must stay inside its source's bytes (ggml asserts this)."""
    ctx, a = start_op(ctx), input_tensor(a, what)
    ne = [int(d) for d in ne]
    offset = int(offset)
    check(all(d >= 0 for d in ne) and offset >= 0, f"{what}: dims and offset must be >= 0")
    nbs = [int(s) for s in nbs]
    check(all(s > 0 for s in nbs), f"{what}: strides must be positive")
    check_rule(f"ggml_view_{len(ne)}d", what, a.ptr, *ne, *nbs, offset)
    return make_tensor(ctx, what, ne + [1] * (4 - len(ne)), a.type, lambda: call(ctx, a), view=True)


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
    ctx, a = start_op(ctx), input_tensor(a, "ggml_permute")
    axes = [int(axis0), int(axis1), int(axis2), int(axis3)]
    # a five-dim a has ne3 and ne4 merged (tensor5.py): they move together only where ne3 stays
    check(not isinstance(a, Tensor5) or axes[3] == 3,
          f"ggml_permute: a has five dims {list(a.ne)}; dim 3 must stay (axis3 = 3), dim 4 stays with it")
    check_rule("ggml_permute", "ggml_permute", a.ptr, *axes)
    ne = [0] * 4
    for i, ax in enumerate(axes):
        ne[ax] = dims(a)[i]
    return make_tensor(ctx, "ggml_permute", ne, a.type, lambda: lib.ggml_permute(ctx.ptr, a.ptr, *axes), view=True)


def ggml_transpose(ctx: Context, a: Tensor) -> Tensor:
    """Swap ne0 and ne1 (a view; ggml_cont() materialises it)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_transpose")
    n = dims(a)
    return make_tensor(ctx, "ggml_transpose", [n[1], n[0], n[2], n[3]], a.type,
                 lambda: lib.ggml_transpose(ctx.ptr, a.ptr), view=True)


def ggml_cont(ctx: Context, a: Tensor) -> Tensor:
    """A contiguous copy of a (materialises views)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_cont")
    return make_like(ctx, "ggml_cont", a, lambda: lib.ggml_cont(ctx.ptr, a.ptr))


def ggml_dup(ctx: Context, a: Tensor, *, _inplace: bool = False) -> Tensor:
    """A copy of a (ggml_dup_inplace: a view of a that the graph copies onto itself)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_dup")
    return make_like(ctx, "ggml_dup", a, lambda: c_function("ggml_dup", _inplace)(ctx.ptr, a.ptr), view=_inplace)


def ggml_cpy(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Copy a into b (converting the type); the result is a view of b."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_cpy", "a"), input_tensor(b, "ggml_cpy", "b")
    check_types(a, (F32, F16, BF16, I32), "ggml_cpy", "a")
    check_types(b, (F32, F16, BF16, I32), "ggml_cpy", "b")
    if (a.type == I32) != (b.type == I32):
        raise GGMLError("ggml_cpy: the CPU backend cannot convert between i32 and floating point")
    check_rule("ggml_cpy", "ggml_cpy", a.ptr, b.ptr)
    return make_tensor(ctx, "ggml_cpy", dims(b), b.type, lambda: lib.ggml_cpy(ctx.ptr, a.ptr, b.ptr), view=True)


def ggml_cast(ctx: Context, a: Tensor, type: int) -> Tensor:
    """a converted to `type` (GGML_TYPE_F32, _F16 or _BF16)."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_cast")
    check_types(a, FLOAT, "ggml_cast")
    check(type in FLOAT, "ggml_cast: target type must be f32, f16 or bf16")
    return make_tensor(ctx, "ggml_cast", dims(a), type, lambda: lib.ggml_cast(ctx.ptr, a.ptr, type))


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
