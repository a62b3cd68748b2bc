"""What every op constructor shares: the element types it accepts, its checked context and tensor
arguments (the contexts of an op's inputs, so that a result keeps them alive), the tensor it makes,
and ggml.h's limits.
"""
from __future__ import annotations

import functools
import threading


from ...bindings import lib
from ...errors import GGMLError, check
from .. import checked
from ..checked import context_arg, tensor_arg
from ..handles import Context, Tensor, type_name, wrap
from ..tensor5 import MAX_DIMS, READS_FIVE, SAME_FIVE, Tensor5, five

F32, F16, BF16, I32 = lib.GGML_TYPE_F32, lib.GGML_TYPE_F16, lib.GGML_TYPE_BF16, lib.GGML_TYPE_I32


FLOAT = (F32, F16, BF16)
CPU_FLOAT = (F32, F16)  # kernels the CPU backend has for most element-wise ops
# block-quantized types: weights for mul_mat, get_rows and flash attention's K/V (whether a device
# has the kernel for a given type is checked with ggml_backend_dev_supports_op before compute)
QUANTIZED = tuple(t for t in range(int(lib.GGML_TYPE_COUNT)) if lib.ggml_type_size(t) and lib.ggml_is_quantized(t))
N_OVERHEAD = int(lib.ggml_tensor_overhead())


# -- checks -------------------------------------------------------------------------------
# The contexts of the current op's inputs: start_op() starts an op, input_tensor() records, make_tensor() links them,
# so a result's context keeps its inputs' contexts alive and graphs can tell when one was freed.
_inputs = threading.local()


def start_op(ctx) -> Context:
    ctx = context_arg(ctx)
    _inputs.ctxs = []
    _inputs.ne4 = 1
    return ctx


def input_tensor(x, what: str, arg: str = "a") -> Tensor:
    x = tensor_arg(x, what, arg)
    if isinstance(x, Tensor5):  # tensor5.py: only the ops listed there see the merged dims as they are
        if what not in SAME_FIVE and what not in READS_FIVE:
            raise GGMLError(f"{what}: {arg} has five dims {list(x.ne)}; ggml 0.25.3 has four and holds a fifth "
                            f"merged with ne3, which {what} does not treat alike (not supported)")
        if what in SAME_FIVE and getattr(_inputs, "ne4", 1) == 1:
            _inputs.ne4 = x.ne4
    getattr(_inputs, "ctxs", []).append(x.ctx)
    return x


def check_types(x: Tensor, allowed, what: str, arg: str = "a") -> None:
    if x.type not in allowed:
        names = ", ".join(type_name(t) for t in allowed)
        raise GGMLError(f"{what}: {arg} has type {x.type_name}; supported: {names}")


def check_packed_rows(x: Tensor, what: str, arg: str = "a") -> None:
    """Kernels that walk ne0 as packed elements assert nb0 == element size (transposed views fail it)."""
    if int(x.ptr.nb[0]) != int(lib.ggml_type_size(x.type)):
        raise GGMLError(f"{what}: {arg} must have packed rows (nb0 = element size), which a transposed or "
                        "permuted view has not; use ggml_cont() first")


def check_contiguous(x: Tensor, what: str, arg: str = "a") -> None:
    # ggml_is_contiguous ignores the strides of size-1 dims; kernels still assert nb0 == element size
    if not lib.ggml_is_contiguous(x.ptr) or int(x.ptr.nb[0]) != int(lib.ggml_type_size(x.type)):
        raise GGMLError(f"{what}: {arg} must be contiguous; use ggml_cont() first")


def contiguous_input(ctx, a, what: str, types) -> tuple:
    """Start an op of one input: its context, and `a` checked to be a live tensor of one of `types`,
    contiguous (the ggml kernels these ops reach walk their input as one packed block)."""
    ctx, a = start_op(ctx), input_tensor(a, what)
    check_types(a, types, what)
    check_contiguous(a, what)
    return ctx, a


def dims(x: Tensor) -> list:
    return [int(v) for v in x.ptr.ne]


def can_repeat(small: Tensor, big: Tensor) -> bool:
    """ggml's rule for broadcasting: every dim of `small` divides the same dim of `big`."""
    return checked.can_repeat(small.ptr, big.ptr)


def not_divisible(big: int, small: int) -> bool:
    """small does not divide big (ggml computes big % small in C: a zero would crash)."""
    return small <= 0 or big % small != 0


def shape_str(x: Tensor) -> str:
    return str(list(x.shape))


def make_tensor(ctx: Context, what: str, ne, out_type: int, call, *, view=False, extra=0):
    """Reserve context memory for the result (ggml aborts when the arena is full), then build."""
    ctx.reserve_tensor(out_type, ne, what, view=view)
    if extra:
        ctx.reserve(extra, what)
    for c in getattr(_inputs, "ctxs", ()):
        if c is not ctx:
            ctx._deps.add(c)
    _inputs.ctxs = []
    ne4, _inputs.ne4 = getattr(_inputs, "ne4", 1), 1
    t = wrap(call(), ctx)
    return five(t, ne4) if ne4 > 1 and what in SAME_FIVE else t


def make_like(ctx, what, a: Tensor, call, out_type=None, view=False):
    return make_tensor(ctx, what, dims(a), a.type if out_type is None else out_type, call, view=view)


@functools.lru_cache(maxsize=None)
def c_function(cname: str, inplace: bool):
    """ggml's C function, or its `_inplace` twin (whose result is a view of the first input)."""
    return getattr(lib, cname + "_inplace" if inplace else cname)


GGML_MAX_DIMS = MAX_DIMS  # ggmlR's: five, the fifth merged with ne3 (tensor5.py); ggml 0.25.3 itself has 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64


def int_arg(v, what, name) -> int:
    """An int argument that fits C's int (ggml stores most in int32)."""
    iv = int(v)
    check(iv == v and -2**31 <= iv < 2**31, f"{what}: {name} must be an integer in int32 range, got {v}")
    return iv


def same_shape_pair(what, ctx, a, b, fn, *args, view=False):
    """An op of two f32 tensors of one shape, both contiguous (ggml asserts it)."""
    ctx = start_op(ctx)
    a, b = input_tensor(a, what, "a"), input_tensor(b, what, "b")
    check_types(a, (F32,), what, "a")
    check_types(b, (F32,), what, "b")
    if dims(a) != dims(b):
        raise GGMLError(f"{what}: a {shape_str(a)} and b {shape_str(b)} must have the same shape")
    check_contiguous(a, what, "a")
    check_contiguous(b, what, "b")
    return make_like(ctx, what, a, lambda: fn(ctx.ptr, a.ptr, b.ptr, *args), view=view)



__all__ = sorted(n for n in globals() if n.startswith("GGML_"))  # ggml.h's limits
