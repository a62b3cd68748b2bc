"""The one checked entry into ggml: the rule each ggml graph op asserts, written once.

ggml aborts the process on a failed GGML_ASSERT, and on a context with no room for one more
tensor. `SHAPE_RULES` maps a ggml function to the check of its operands ggml would otherwise assert
on: it takes the call's arguments after the context (raw tensor pointers, ints) and returns
None when ggml accepts them, or a message saying why not. Every front end reaches ggml through
it, and keeps its own error type:

- `CheckedLib`: `bindings.lib` with each ruled function checked before the call, and the room in the
  context checked before every call that makes a tensor; for the builders on raw pointers
  (autograd's primitives, the optimizers' graphs, the Keras-like builder, ONNX with its own
  error types). `checked_lib` below raises ShapeError and GraphFull.
- `check_rule(name, what, *args)`: for ggmlR's ggml_* wrappers (the core/ops package),
  which check their Python arguments (`context_arg`, `tensor_arg`), types and strides first.

A rule is exactly ggml's condition (tests/test_checked.py holds each against ggml itself), plus
what ggml does not assert but would get wrong silently (a view reaching past its source).
"""
from __future__ import annotations

from collections.abc import Callable

from ..bindings import ffi, lib
from ..errors import GGMLError
from .handles import Context, Tensor


class ShapeError(GGMLError):
    """Operands that break the shape rule of the ggml op they were passed to (ggml would abort)."""


class GraphFull(GGMLError):
    """A context or graph is about to run out of room (ggml would abort): build in a bigger one."""


# -- the Python arguments of ggmlR's ggml_* functions ---------------------------------------------
def context_arg(ctx, what: str | None = None, live: bool = True) -> Context:
    """ctx as a Context (a live one unless `live` is False: freeing twice, asking its size), or a
    GGMLError naming the function."""
    if not isinstance(ctx, Context):
        got = type(ctx).__name__
        raise GGMLError(f"{what}: expected a ggml Context, got {got}" if what
                        else f"expected a ggml Context as first argument, got {got}")
    if live:
        ctx.ensure_alive()
    return ctx


def tensor_arg(x, what: str, arg: str | None = None) -> Tensor:
    """x as a Tensor of a live context (x.ptr raises on a freed one), or a GGMLError naming the argument."""
    if not isinstance(x, Tensor):
        got = type(x).__name__
        raise GGMLError(f"{what}: argument {arg} must be a ggml Tensor, got {got}" if arg
                        else f"{what}: expected a ggml Tensor, got {got}")
    x.ptr
    return x


def index_arg(i, n, what) -> int:
    """i as an index into n things (0-based), or a GGMLError naming the function."""
    i = int(i)
    if not 0 <= i < n:
        raise GGMLError(f"{what}: index {i} is out of range 0..{n - 1} (0-based)")
    return i


def handle_arg(x, cls: type, what: str, noun: str):
    """x as a live handle of class `cls` (its ptr not yet freed), or a GGMLError naming the function."""
    if not isinstance(x, cls):
        raise GGMLError(f"{what}: expected a {cls.__name__}, got {type(x).__name__}")
    if x.ptr is None:
        raise GGMLError(f"{what}: the {noun} has been freed")
    return x


# -- the rules, on raw tensor pointers --------------------------------------------------------------
def ne(t) -> list:
    """ggml's four dims of a tensor pointer."""
    return list(t.ne)


def _shape(t) -> list:
    """ne without trailing ones (the shape a message shows, as Tensor.shape)."""
    return ne(t)[: max(int(lib.ggml_n_dims(t)), 1)]


def _nel(t) -> int:
    n0, n1, n2, n3 = t.ne
    return n0 * n1 * n2 * n3


def can_repeat(small, big) -> bool:
    """ggml_can_repeat: `big` is a tiling of `small` (an empty small tiles only an empty big).
    Unrolled: every graph builder asks it for every element-wise op."""
    s0, s1, s2, s3 = small.ne
    b0, b1, b2, b3 = big.ne
    if not (s0 and s1 and s2 and s3):
        return not (b0 and b1 and b2 and b3)
    return not (b0 % s0 or b1 % s1 or b2 % s2 or b3 % s3)


def _divides(small: int, big: int) -> bool:
    """big % small == 0 as ggml computes it in C, where a zero small divides by zero."""
    return small > 0 and big % small == 0


def _binary(a, b):
    if not can_repeat(b, a):
        return (f"b {_shape(b)} cannot be broadcast to a {_shape(a)}; ggml broadcasts only the second "
                "operand, and each of its dims must divide a's")


def _repeat(a, b):
    if not can_repeat(a, b):
        return f"a {_shape(a)} does not tile b {_shape(b)}"


def _repeat_back(a, b):
    if not can_repeat(b, a):
        return f"b {_shape(b)} does not tile a {_shape(a)}"


def _repeat_4d(a, *shape):
    shape = [int(v) for v in shape]
    if any(d < 0 for d in shape) or 0 not in ne(a) and any(d % x for x, d in zip(ne(a), shape)):
        return f"a {_shape(a)} does not tile {shape}"


def _mul_mat(a, b):
    na, nb = ne(a), ne(b)
    if na[0] != nb[0]:
        return f"a {_shape(a)} and b {_shape(b)} must share ne0 (the reduced dimension): {na[0]} != {nb[0]}"
    if not (_divides(na[2], nb[2]) and _divides(na[3], nb[3])):
        return f"a's batch dims {na[2:]} must divide b's {nb[2:]}"
    if lib.ggml_is_transposed(a):
        return "a must not be a transposed view; use ggml_cont(ggml_transpose(a))"


def _out_prod(a, b):
    na, nb = ne(a), ne(b)
    if na[1] != nb[1] or not (_divides(na[2], nb[2]) and _divides(na[3], nb[3])):
        return f"a {_shape(a)} and b {_shape(b)} must share ne1, and a's batch dims must divide b's"
    if lib.ggml_is_transposed(a):
        return "a must not be a transposed view"


def _concat(a, b, dim):
    dim = int(dim)
    if not 0 <= dim < 4:
        return f"dim must be in 0..3, got {dim}"
    if a.type != b.type:
        return "a and b must have the same type"
    na, nb = ne(a), ne(b)
    if any(x != y for i, (x, y) in enumerate(zip(na, nb)) if i != dim):
        return f"a {_shape(a)} and b {_shape(b)} differ outside dim {dim}"


def _reshape_to(a, shape):
    if not lib.ggml_is_contiguous(a):
        return "a must be contiguous; use ggml_cont() first"
    n = 1
    for d in shape:
        n *= int(d)
    if n != _nel(a) or any(int(d) < 0 for d in shape):
        return f"cannot reshape {_nel(a)} elements {_shape(a)} to {[int(d) for d in shape]}"


def _reshape(a, *shape):
    return _reshape_to(a, shape)


def _reshape_like(a, b):
    return _reshape_to(a, ne(b))


def _cont_nd(a, *shape):
    n = 1
    for d in shape:
        n *= int(d)
    if n != _nel(a):
        return f"cannot lay out {_nel(a)} elements {_shape(a)} as {[int(d) for d in shape]}"


def _cpy(a, b):
    if _nel(a) != _nel(b):
        return f"a {_shape(a)} and b {_shape(b)} must have as many elements"


def _view(n_dims):
    """ggml_view_Nd(a, ne0.., nb1.., offset): ggml asserts the view's packed size fits after the
    offset; a view whose strides reach past the source's bytes would read them silently."""
    def rule(a, *args):
        shape, strides, offset = [int(v) for v in args[:n_dims]], [int(v) for v in args[n_dims:-1]], int(args[-1])
        if any(d < 0 for d in shape) or offset < 0 or any(s < 0 for s in strides):
            return "dims, strides and offset must be >= 0"
        if 0 in shape:
            return None
        row = int(lib.ggml_row_size(a.type, shape[0]))
        packed = row
        for d in shape[1:]:
            packed *= d
        span = row + sum((d - 1) * s for d, s in zip(shape[1:], strides))
        end = offset + max(packed, span)
        if end > int(lib.ggml_nbytes(a)):
            return f"view of {shape} at offset {offset} reaches byte {end}, past the source's {int(lib.ggml_nbytes(a))} bytes"
    return rule


def _permute(a, *axes):
    if sorted(int(x) for x in axes) != [0, 1, 2, 3]:
        return f"axes must be a permutation of 0..3, got {[int(x) for x in axes]}"


def _get_rows(a, b):
    na, nb = ne(a), ne(b)
    if b.type != lib.GGML_TYPE_I32:
        return "the row indices b must be i32"
    if na[2] != nb[1] or na[3] != nb[2] or nb[3] != 1:
        return f"the row indices b {_shape(b)} do not fit a {_shape(a)} (b's ne1, ne2 must be a's ne2, ne3)"


def _acc(a, b, *_strides_offset):
    if _nel(b) > _nel(a):
        return "b has more elements than a"
    if not lib.ggml_is_contiguous(a):
        return "a must be contiguous"
    if a.type != lib.GGML_TYPE_F32 or b.type != lib.GGML_TYPE_F32:
        return "a and b must be f32"


def _same_shape(*ts):
    first = ne(ts[0])
    if any(ne(t) != first for t in ts[1:]):
        return f"operands must have the same shape, got {[_shape(t) for t in ts]}"


def _opt_step(n_hyper, n_state):
    def rule(a, *rest):
        if not a.flags & lib.GGML_TENSOR_FLAG_PARAM:
            return "the parameter must be marked with ggml_set_param"
        if (msg := _same_shape(a, *rest[:n_state])) is not None:
            return msg
        hyper = rest[n_state]
        if hyper.type != lib.GGML_TYPE_F32 or _nel(hyper) != n_hyper:
            return f"the hyper-parameters must be {n_hyper} f32 values"
    return rule


def conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """ggml_calc_conv_output_size."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _im2col(a, b, s0, s1, p0, p1, d0, d1, is_2d=True, dst_type=None):
    na, nb = ne(a), ne(b)
    if min(int(v) for v in (s0, s1, d0, d1)) <= 0 or min(int(p0), int(p1)) < 0:
        return "strides and dilations must be > 0, paddings >= 0"
    if is_2d:
        if na[2] != nb[2]:
            return f"channels differ: kernel {na[2]}, input {nb[2]}"
        if conv_out(nb[1], na[1], int(s1), int(p1), int(d1)) <= 0:
            return "input too small for the kernel"
    elif nb[1] != na[1] or nb[3] != 1:
        return "1-d kernel and input do not fit"
    if conv_out(nb[0], na[0], int(s0), int(p0), int(d0)) <= 0:
        return "input too small for the kernel"


def _conv_2d(a, b, s0, s1, p0, p1, d0, d1):
    return _im2col(a, b, s0, s1, p0, p1, d0, d1, True)


def pool_out(size: int, kernel: int, stride: int, pad: float) -> int:
    """ggml_calc_pool_output_size."""
    return int((size + 2 * pad - kernel) / stride + 1)


def _pool_1d(a, op, k0, s0, p0):
    if int(k0) <= 0 or int(s0) <= 0 or int(p0) < 0:
        return "kernel and stride must be > 0, padding >= 0"
    if pool_out(ne(a)[0], int(k0), int(s0), int(p0)) <= 0:
        return "input too small for the kernel"


def _pool_2d(a, op, k0, k1, s0, s1, p0, p1):
    if min(int(k0), int(k1), int(s0), int(s1)) <= 0 or p0 < 0 or p1 < 0:
        return "kernel and stride must be > 0, padding >= 0"
    n = ne(a)
    if pool_out(n[0], int(k0), int(s0), p0) <= 0 or pool_out(n[1], int(k1), int(s1), p1) <= 0:
        return "input too small for the kernel"


def _soft_max(a, mask=None, scale=1.0, max_bias=0.0):
    if not lib.ggml_is_contiguous(a):
        return "a must be contiguous"
    if mask is None or mask == ffi.NULL:
        return "max_bias > 0 needs a mask" if max_bias > 0 else None
    na, nm = ne(a), ne(mask)
    if mask.type not in (lib.GGML_TYPE_F32, lib.GGML_TYPE_F16) or not lib.ggml_is_contiguous(mask):
        return "mask must be contiguous f32 or f16"
    if nm[0] != na[0] or nm[1] < na[1] or not (_divides(nm[2], na[2]) and _divides(nm[3], na[3])):
        return (f"mask {_shape(mask)} does not fit a {_shape(a)} (needs the same ne0, at least as many rows, "
                "and dims 2-3 dividing a's)")


def _scale(a, *_values):
    n, nb = ne(a), list(a.nb)
    if not (nb[0] == lib.ggml_type_size(a.type) and nb[2] == nb[1] * n[1] and nb[3] == nb[2] * n[2]):
        return "a must be densely packed (a view with size-1 dims can fail this); use ggml_cont() first"


def _glu_split(a, b, *_op):
    if a.type != b.type or ne(a) != ne(b):
        return f"a {_shape(a)} and b {_shape(b)} must have the same shape and type"
    if not (lib.ggml_is_contiguous_1(a) and lib.ggml_is_contiguous_1(b)):
        return "a and b must have contiguous rows; use ggml_cont() first"


def _argmax(a):
    if not lib.ggml_is_matrix(a):
        return f"a must be a matrix, got {_shape(a)}"


SHAPE_RULES: dict[str, Callable[..., str | None]] = {
    **{f"ggml_{op}{sfx}": _binary for op in ("add", "sub", "mul", "div") for sfx in ("", "_inplace")},
    "ggml_repeat": _repeat, "ggml_repeat_back": _repeat_back, "ggml_repeat_4d": _repeat_4d,
    "ggml_mul_mat": _mul_mat, "ggml_out_prod": _out_prod, "ggml_concat": _concat,
    **{f"ggml_reshape_{n}d": _reshape for n in (1, 2, 3, 4)}, "ggml_reshape": _reshape_like,
    **{f"ggml_cont_{n}d": _cont_nd for n in (1, 2, 3, 4)},
    "ggml_cpy": _cpy,
    **{f"ggml_view_{n}d": _view(n) for n in (1, 2, 3, 4)},
    "ggml_permute": _permute, "ggml_get_rows": _get_rows,
    "ggml_acc": _acc, "ggml_acc_inplace": _acc,
    "ggml_opt_step_adamw": _opt_step(7, 3), "ggml_opt_step_sgd": _opt_step(2, 1),
    "ggml_im2col": _im2col, "ggml_conv_2d": _conv_2d, "ggml_pool_1d": _pool_1d, "ggml_pool_2d": _pool_2d,
    "ggml_soft_max": _soft_max, "ggml_soft_max_inplace": _soft_max,
    "ggml_soft_max_ext": _soft_max, "ggml_soft_max_ext_inplace": _soft_max,
    "ggml_scale": _scale, "ggml_scale_inplace": _scale, "ggml_scale_bias": _scale,
    "ggml_glu_split": _glu_split, "ggml_argmax": _argmax,
}


def check_rule(name: str, what: str, *args) -> None:
    """Apply `SHAPE_RULES[name]` to `args`; a failure is a ShapeError (a GGMLError) naming ggmlR's function `what`."""
    msg = SHAPE_RULES[name](*args)
    if msg is not None:
        raise ShapeError(f"{what}: {msg}")


# -- lib, checked -------------------------------------------------------------------------------------
_CONTEXT, _TENSOR = ffi.typeof("struct ggml_context *"), ffi.typeof("struct ggml_tensor *")
ROOM = 8 * int(lib.ggml_tensor_overhead())  # more than any single ggml call makes in its context


def makes_a_tensor(name: str, fn) -> bool:
    """Whether fn(ctx, ...) makes a tensor in ctx (an op, a view, a new tensor): not a look-up
    (ggml_get_*), nor what reads or frees a context (ggml_free, ggml_backend_alloc_ctx_tensors)."""
    try:
        t = ffi.typeof(fn)
        args, result = t.args, t.result
    except (TypeError, AttributeError):  # a constant, not a function
        return False
    return bool(args) and args[0] is _CONTEXT and result is _TENSOR and not name.startswith("ggml_get_")


class CheckedLib:
    """`bindings.lib` for the builders on raw pointers: a function of SHAPE_RULES checks its operands
    first, and every call that makes a tensor checks that its context has room for it. Failures
    are `shape_error(prefix + name + ": " + why)` and `full_error(...)`, so each front end raises
    its own kind (subclasses of ShapeError and GraphFull). Every other name is lib's own; each is
    looked up once."""

    def __init__(self, shape_error: type = ShapeError, full_error: type = GraphFull, prefix: str = ""):
        self._shape_error, self._full_error, self._prefix = shape_error, full_error, prefix

    def __getattr__(self, name: str):
        fn = getattr(lib, name)
        rule = SHAPE_RULES.get(name)
        if rule is not None or makes_a_tensor(name, fn):
            fn = self._checked(name, fn, rule)
        setattr(self, name, fn)
        return fn

    def _checked(self, name, fn, rule):
        shape_error, full_error, where = self._shape_error, self._full_error, self._prefix + name
        get_mem_size, used_mem = lib.ggml_get_mem_size, lib.ggml_used_mem

        def checked(ctx, *args):
            if get_mem_size(ctx) - used_mem(ctx) < ROOM:
                raise full_error(f"{where}: the graph outgrew its context (a builder made far more ggml "
                                 "tensors than its budget)")
            if rule is not None and (msg := rule(*args)) is not None:
                raise shape_error(f"{where}: {msg}")
            return fn(ctx, *args)
        checked.__name__ = name
        return checked


checked_lib = CheckedLib()
"""`bindings.lib`, checked: ShapeError and GraphFull (GGMLError) where ggml would abort."""
