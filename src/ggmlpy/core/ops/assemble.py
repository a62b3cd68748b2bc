"""Tensors assembled from others: concat, get_rows (and its backward), repeat (and back), pad,
pad_reflect_1d, acc and set_* (b written into a view of a copy of a), roll, diag, windows
(win_part, win_unpart), and made from nothing: arange, timestep_embedding.
"""
from __future__ import annotations


import numpy as np

from ...bindings import lib
from ...errors import GGMLError, check
from ..checked import check_rule, tensor_arg
from ..tensor5 import Tensor5, broadcast_pair, concat_pair, dims5, unfold
from ..handles import Context, Tensor
from .args import (contiguous_input, BF16, CPU_FLOAT, F16, F32, I32, QUANTIZED, c_function, check_contiguous, check_packed_rows, check_types, dims, input_tensor, int_arg, make_like,
                   make_tensor, shape_str, start_op)


# -- assembling tensors ------------------------------------------------------------------------------
def ggml_concat(ctx: Context, a: Tensor, b: Tensor, dim: int = 0) -> Tensor:
    """a and b joined along axis `dim` (0..3, ggml's ne order; 0..4 for five-dim tensors); the other
    axes must match."""
    ctx = start_op(ctx)
    if isinstance(a, Tensor5) or isinstance(b, Tensor5):  # a pair of the five dims merged (tensor5.py)
        a, b = tensor_arg(a, "ggml_concat", "a"), tensor_arg(b, "ggml_concat", "b")
        a4, b4, dim4, j, ne5 = concat_pair(ctx, a, b, int(dim), "ggml_concat")
        return unfold(ctx, ggml_concat(ctx, a4, b4, dim4), j, ne5)
    a, b = input_tensor(a, "ggml_concat", "a"), input_tensor(b, "ggml_concat", "b")
    check_types(a, (F32, F16, I32), "ggml_concat", "a")
    dim = int(dim)
    check_rule("ggml_concat", "ggml_concat", a.ptr, b.ptr, dim)
    check(bool(lib.ggml_is_contiguous_rows(a.ptr) and lib.ggml_is_contiguous_rows(b.ptr)),
          "ggml_concat: a and b must have packed rows; use ggml_cont() first")
    na, nb_ = dims(a), dims(b)
    ne = list(na)
    ne[dim] += nb_[dim]
    return make_tensor(ctx, "ggml_concat", ne, a.type, lambda: lib.ggml_concat(ctx.ptr, a.ptr, b.ptr, dim))


def ggml_get_rows(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Rows of a (along ne1) picked by the i32 indices in b: [ne0, len(b)]."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_get_rows", "a"), input_tensor(b, "ggml_get_rows", "b")
    check_types(a, (F32, F16, BF16, I32) + QUANTIZED, "ggml_get_rows", "a")
    check_types(b, (I32,), "ggml_get_rows", "b")
    check_packed_rows(a, "ggml_get_rows", "a")
    check_rule("ggml_get_rows", "ggml_get_rows", a.ptr, b.ptr)
    na, nb_ = dims(a), dims(b)
    out_type = I32 if a.type == I32 else F32
    return make_tensor(ctx, "ggml_get_rows", [na[0], nb_[0], nb_[1], nb_[2]], out_type,
                 lambda: lib.ggml_get_rows(ctx.ptr, a.ptr, b.ptr))


def ggml_get_rows_back(ctx: Context, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """Gradient of get_rows: scatter-add rows of a into a tensor shaped like c."""
    ctx = start_op(ctx)
    a, b, c = (input_tensor(a, "ggml_get_rows_back", "a"), input_tensor(b, "ggml_get_rows_back", "b"),
               input_tensor(c, "ggml_get_rows_back", "c"))
    check_types(a, (F32,), "ggml_get_rows_back", "a")
    check_types(b, (I32,), "ggml_get_rows_back", "b")
    check_packed_rows(a, "ggml_get_rows_back", "a")
    ok = (lib.ggml_is_matrix(a.ptr) and lib.ggml_is_vector(b.ptr) and lib.ggml_is_matrix(c.ptr)
          and dims(a)[0] == dims(c)[0] and dims(a)[1] == dims(b)[0])
    check(ok, f"ggml_get_rows_back: a {shape_str(a)}, indices {shape_str(b)} and c {shape_str(c)} do not fit")
    return make_tensor(ctx, "ggml_get_rows_back", dims(c), F32, lambda: lib.ggml_get_rows_back(ctx.ptr, a.ptr, b.ptr, c.ptr))


def ggml_repeat(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Tile a to b's shape (each of a's dims must divide b's)."""
    ctx = start_op(ctx)
    if isinstance(a, Tensor5) or isinstance(b, Tensor5):  # a pair of the five dims merged (tensor5.py)
        b4, a4, j, ne5 = broadcast_pair(ctx, tensor_arg(b, "ggml_repeat", "b"), tensor_arg(a, "ggml_repeat", "a"),
                                        "ggml_repeat")
        return unfold(ctx, ggml_repeat(ctx, a4, b4), j, ne5)
    a, b = input_tensor(a, "ggml_repeat", "a"), input_tensor(b, "ggml_repeat", "b")
    check_types(a, CPU_FLOAT, "ggml_repeat")
    check_packed_rows(a, "ggml_repeat")
    check_rule("ggml_repeat", "ggml_repeat", a.ptr, b.ptr)
    return make_tensor(ctx, "ggml_repeat", dims(b), a.type, lambda: lib.ggml_repeat(ctx.ptr, a.ptr, b.ptr))


def ggml_repeat_back(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    """Sum a's tiles down to b's shape (the gradient of repeat)."""
    ctx = start_op(ctx)
    if isinstance(a, Tensor5) or isinstance(b, Tensor5):  # the same pair as the repeat (tensor5.py)
        a4, b4, j, _ = broadcast_pair(ctx, tensor_arg(a, "ggml_repeat_back", "a"),
                                      tensor_arg(b, "ggml_repeat_back", "b"), "ggml_repeat_back")
        return unfold(ctx, ggml_repeat_back(ctx, a4, b4), j, dims5(b))
    a, b = input_tensor(a, "ggml_repeat_back", "a"), input_tensor(b, "ggml_repeat_back", "b")
    check_types(a, (F32,), "ggml_repeat_back")  # the CPU kernel aborts on f16
    check_packed_rows(a, "ggml_repeat_back")
    check_rule("ggml_repeat_back", "ggml_repeat_back", a.ptr, b.ptr)
    return make_tensor(ctx, "ggml_repeat_back", dims(b), a.type, lambda: lib.ggml_repeat_back(ctx.ptr, a.ptr, b.ptr))


def ggml_pad(ctx: Context, a: Tensor, p0: int = 0, p1: int = 0, p2: int = 0, p3: int = 0) -> Tensor:
    """Zero-pad at the end of each dim."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_pad")
    check_types(a, (F32,), "ggml_pad")
    ps = [int(p0), int(p1), int(p2), int(p3)]
    check(all(p >= 0 for p in ps), f"ggml_pad: padding must be >= 0, got {ps}")
    ne = [d + p for d, p in zip(dims(a), ps)]
    return make_tensor(ctx, "ggml_pad", ne, F32, lambda: lib.ggml_pad(ctx.ptr, a.ptr, *ps))


def ggml_acc(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int) -> Tensor:
    """a with b added into the view (nb1, nb2, nb3, offset) of it."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, "ggml_acc", "a"), input_tensor(b, "ggml_acc", "b")
    check_types(a, (F32,), "ggml_acc", "a")
    check_types(b, (F32,), "ggml_acc", "b")
    check_rule("ggml_acc", "ggml_acc", a.ptr, b.ptr)
    check_packed_rows(b, "ggml_acc", "b")
    nb = dims(b)
    strides = [4, int(nb1), int(nb2), int(nb3)]
    check(all(0 <= v < 2**31 for v in strides[1:] + [int(offset)]),
          "ggml_acc: strides and offset must be in 0..2**31-1 (ggml stores them as int32)")
    span = 0 if 0 in nb else 4 + sum((d - 1) * s for d, s in zip(nb, strides))
    if int(offset) < 0 or int(offset) + max(span, 1) > a.nbytes():
        raise GGMLError(f"ggml_acc: b {shape_str(b)} at offset {offset} falls outside a's {a.nbytes()} bytes")
    return make_like(ctx, "ggml_acc", a, lambda: lib.ggml_acc(ctx.ptr, a.ptr, b.ptr, int(nb1), int(nb2),
                                                          int(nb3), int(offset)))


def ggml_diag(ctx: Context, a: Tensor) -> Tensor:
    """A row vector a [n, 1, ...] -> the diagonal matrix [n, n, ...]."""
    ctx, a = start_op(ctx), input_tensor(a, "ggml_diag")
    check_types(a, (F32,), "ggml_diag")
    check_packed_rows(a, "ggml_diag")
    n = dims(a)
    check(n[1] == 1, f"ggml_diag: a must have ne1 == 1 (a vector per ne2/ne3), got {shape_str(a)}")
    return make_tensor(ctx, "ggml_diag", [n[0], n[0], n[2], n[3]], F32, lambda: lib.ggml_diag(ctx.ptr, a.ptr))


def ggml_arange(ctx: Context, start: float, stop: float, step: float = 1.0) -> Tensor:
    """f32 [ceil((stop - start) / step)]: start, start + step, ... below stop."""
    ctx = start_op(ctx)
    start, stop, step = float(start), float(stop), float(step)
    check(stop > start, f"ggml_arange: stop ({stop}) must be greater than start ({start})")
    check(step > 0, f"ggml_arange: step must be positive, got {step}")
    # ggml computes the length in float32: do the same so the reservation matches
    n = int(np.ceil(np.float32((np.float32(stop) - np.float32(start)) / np.float32(step))))
    check(0 < n < 2**40, f"ggml_arange: {n} steps")
    return make_tensor(ctx, "ggml_arange", [n, 1, 1, 1], F32, lambda: lib.ggml_arange(ctx.ptr, start, stop, step))


def ggml_timestep_embedding(ctx: Context, timesteps: Tensor, dim: int, max_period: int = 10000) -> Tensor:
    """Sinusoidal embeddings [dim, n] of f32 timesteps [n]: cos(t f_i) for the first half, sin(t f_i) for
    the second, f_i = max_period^(-i / half) (odd dim: a zero last column)."""
    what = "ggml_timestep_embedding"
    ctx, t = start_op(ctx), input_tensor(timesteps, what, "timesteps")
    check_types(t, (F32,), what, "timesteps")
    check_packed_rows(t, what, "timesteps")
    dim, max_period = int_arg(dim, what, "dim"), int_arg(max_period, what, "max_period")
    check(dim > 0, f"{what}: dim must be positive, got {dim}")
    check(bool(lib.ggml_is_vector(t.ptr)), f"{what}: timesteps must be a vector, got {shape_str(t)}")
    return make_tensor(ctx, what, [dim, dims(t)[0], 1, 1], F32, lambda: lib.ggml_timestep_embedding(ctx.ptr, t.ptr, dim,
                                                                                               max_period))


def ggml_roll(ctx: Context, a: Tensor, shift0: int = 0, shift1: int = 0, shift2: int = 0, shift3: int = 0) -> Tensor:
    """Circular shift along each dim (elements pushed off one end come back at the other)."""
    what = "ggml_roll"
    ctx, a = start_op(ctx), input_tensor(a, what)
    check_types(a, (F32,), what)
    check_packed_rows(a, what)
    shifts = [int_arg(s, what, f"shift{k}") for k, s in enumerate((shift0, shift1, shift2, shift3))]
    for k, (s, n) in enumerate(zip(shifts, dims(a))):
        check(abs(s) < n, f"{what}: |shift{k}| must be below ne{k} = {n}, got {s}")
    return make_like(ctx, what, a, lambda: lib.ggml_roll(ctx.ptr, a.ptr, *shifts))


def ggml_pad_reflect_1d(ctx: Context, a: Tensor, p0: int, p1: int) -> Tensor:
    """Reflection padding of ne0: p0 in front, p1 behind (each below ne0)."""
    what = "ggml_pad_reflect_1d"
    ctx, a = contiguous_input(ctx, a, what, (F32,))
    p0, p1 = int_arg(p0, what, "p0"), int_arg(p1, what, "p1")
    n = dims(a)
    check(0 <= p0 < n[0] and 0 <= p1 < n[0], f"{what}: paddings must be in 0..ne0-1 = {n[0] - 1}, got {p0}, {p1}")
    return make_tensor(ctx, what, [n[0] + p0 + p1] + n[1:], F32, lambda: lib.ggml_pad_reflect_1d(ctx.ptr, a.ptr, p0, p1))


def ggml_win_part(ctx: Context, a: Tensor, w: int) -> Tensor:
    """Split a [C, W, H] into w x w windows [C, w, w, n_windows], zero-padding W and H to multiples of w."""
    what = "ggml_win_part"
    ctx, a = contiguous_input(ctx, a, what, (F32,))
    w = int_arg(w, what, "w")
    n = dims(a)
    check(w > 0, f"{what}: w must be positive, got {w}")
    check(n[3] == 1, f"{what}: a must be at most 3-d, got {shape_str(a)}")
    npx, npy = (n[1] + w - 1) // w, (n[2] + w - 1) // w
    return make_tensor(ctx, what, [n[0], w, w, npx * npy], F32, lambda: lib.ggml_win_part(ctx.ptr, a.ptr, w))


def ggml_win_unpart(ctx: Context, a: Tensor, w0: int, h0: int, w: int) -> Tensor:
    """Inverse of ggml_win_part: windows [C, w, w, n] back to [C, w0, h0]."""
    what = "ggml_win_unpart"
    ctx, a = contiguous_input(ctx, a, what, (F32,))
    w0, h0, w = int_arg(w0, what, "w0"), int_arg(h0, what, "h0"), int_arg(w, what, "w")
    n = dims(a)
    check(w > 0 and w0 > 0 and h0 > 0, f"{what}: w, w0 and h0 must be positive")
    npx, npy = (w0 + w - 1) // w, (h0 + w - 1) // w
    check(n[1] == w and n[2] == w and n[3] == npx * npy,
          f"{what}: a {shape_str(a)} is not [C, {w}, {w}, {npx * npy}] windows of a {w0} x {h0} map")
    return make_tensor(ctx, what, [n[0], w0, h0, 1], F32, lambda: lib.ggml_win_unpart(ctx.ptr, a.ptr, w0, h0, w))


# -- set: write b into a view of a copy of a ----------------------------------------------------------------
def ggml_set(ctx: Context, a: Tensor, b: Tensor, nb1: int, nb2: int, nb3: int, offset: int, *,
             _inplace: bool = False) -> Tensor:
    """A copy of a with b written into its view (strides nb1..nb3 bytes, byte offset)."""
    return _set("ggml_set", ctx, a, b, [nb1, nb2, nb3], offset, _inplace,
                lambda c, x, y, s, o: c_function("ggml_set", _inplace)(c, x, y, s[0], s[1], s[2], o))


def ggml_set_1d(ctx: Context, a: Tensor, b: Tensor, offset: int, *, _inplace: bool = False) -> Tensor:
    """A copy of a with b's elements written from byte `offset` on."""
    return _set("ggml_set_1d", ctx, a, b, None, offset, _inplace,
                lambda c, x, y, s, o: c_function("ggml_set_1d", _inplace)(c, x, y, o))


def ggml_set_2d(ctx: Context, a: Tensor, b: Tensor, nb1: int, offset: int, *, _inplace: bool = False) -> Tensor:
    """A copy of a with b written as rows nb1 bytes apart, from byte `offset` on."""
    return _set("ggml_set_2d", ctx, a, b, [nb1], offset, _inplace,
                lambda c, x, y, s, o: c_function("ggml_set_2d", _inplace)(c, x, y, s[0], o))


def _set(what, ctx, a, b, strides, offset, inplace, call):
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32, I32), what, "a")
    check(b.type == a.type, f"{what}: b has type {b.type_name}, a has {a.type_name}; they must match")
    check_contiguous(a, what, "a")
    check_packed_rows(b, what, "b")
    es = int(lib.ggml_type_size(a.type))
    offset = int(offset)
    full = [int(a.ptr.nb[k]) for k in (1, 2, 3)]
    strides = [int(s) for s in strides] if strides is not None else []
    s = strides + full[len(strides):]  # ggml fills the missing strides with a's own
    check(all(0 <= v < 2**31 for v in s + [offset]), f"{what}: strides and offset must be in 0..2**31-1")
    check(offset < 2**30, f"{what}: offset must be below 2**30 bytes")
    check(b.nelements() <= a.nelements(), f"{what}: b has more elements than a")
    nb = dims(b)
    span = 0 if 0 in nb else es + sum((d - 1) * st for d, st in zip(nb, [es] + s))
    if offset + span > a.nbytes():
        raise GGMLError(f"{what}: b {shape_str(b)} at offset {offset} with strides {s} reaches byte "
                        f"{offset + span}, past a's {a.nbytes()} bytes")
    return make_like(ctx, what, a, lambda: call(ctx.ptr, a.ptr, b.ptr, s, offset), view=inplace)


__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
