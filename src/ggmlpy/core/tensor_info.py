"""What a ggml tensor is: element size, op names and descriptions, shape, strides and layout
predicates (ggmlR's ggml_tensor_shape, ggml_is_transposed, ggml_can_repeat, ...).

Each query reads ggml's own answer for a checked Tensor argument (checked.tensor_arg).
"""
from __future__ import annotations

from collections.abc import Callable

from ..bindings import ffi, lib
from .._naming import public_function
from ..errors import check
from .checked import tensor_arg
from .handles import Tensor
from .ops import can_repeat


def ggml_element_size(t: Tensor) -> int:
    """Bytes per element of t (its type's block size)."""
    return int(lib.ggml_element_size(tensor_arg(t, "ggml_element_size").ptr))


def _op_namer(cname: str, count: str, kind: str, doc: str) -> Callable[[int], str]:
    """ggml's name (or symbol) of an op code of one enum, the code checked against the enum's count."""
    fn, n = getattr(lib, cname), int(getattr(lib, count))

    def name(op: int) -> str:
        op = int(op)
        check(0 <= op < n, f"{cname}: unknown {kind} {op}")
        return ffi.string(fn(op)).decode()
    return public_function(name, cname, doc)


ggml_op_name = _op_namer("ggml_op_name", "GGML_OP_COUNT", "op", 'ggml\'s name of an op code (GGML_OP_*), e.g. "ADD".')
ggml_op_symbol = _op_namer("ggml_op_symbol", "GGML_OP_COUNT", "op", 'ggml\'s symbol for an op code, e.g. "x+y".')
ggml_unary_op_name = _op_namer("ggml_unary_op_name", "GGML_UNARY_OP_COUNT", "unary op",
                               'ggml\'s name of a unary op code (GGML_UNARY_OP_*), e.g. "RELU".')
ggml_glu_op_name = _op_namer("ggml_glu_op_name", "GGML_GLU_OP_COUNT", "GLU op",
                             'ggml\'s name of a GLU op code (GGML_GLU_OP_*), e.g. "SWIGLU".')


def ggml_op_desc(t: Tensor) -> str:
    """The op that computes t, by name (a unary op's own name for UNARY, "NONE" for a leaf)."""
    return ffi.string(lib.ggml_op_desc(tensor_arg(t, "ggml_op_desc").ptr)).decode()


def ggml_get_unary_op(t: Tensor) -> int:
    """t's unary op code (GGML_UNARY_OP_*), or -1 when t is not a UNARY node."""
    t = tensor_arg(t, "ggml_get_unary_op")
    if t.ptr.op != lib.GGML_OP_UNARY:  # ggml asserts this
        return -1
    return int(lib.ggml_get_unary_op(t.ptr))


# ggml-alloc.c's list of ops whose result may reuse an input's memory (ggml_op_can_inplace is not in
# the public headers)
_CAN_INPLACE = frozenset(getattr(lib, f"GGML_OP_{n}") for n in (
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV", "SQR",
    "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK", "CLAMP", "SOFT_MAX",
    "SOFT_MAX_BACK") if hasattr(lib, f"GGML_OP_{n}"))


def ggml_op_can_inplace(op: int) -> bool:
    """Whether ggml's graph allocator may compute `op` into one of its inputs' memory."""
    return int(op) in _CAN_INPLACE


# -- tensor shape and layout queries ----------------------------------------------------------------------
def ggml_tensor_shape(t: Tensor) -> list:
    """All four of t's ne (ggml order, trailing ones kept): ggmlR's shape vector."""
    return list(tensor_arg(t, "ggml_tensor_shape").ne)


def ggml_tensor_nb(t: Tensor) -> list:
    """t's five byte strides nb, as ggmlR's ggml (GGML_MAX_DIMS 5) gives them: a four-dim tensor's
    nb4 is nb3 * ne3."""
    t = tensor_arg(t, "ggml_tensor_nb")
    nb = list(t.nb)
    return nb if len(nb) == 5 else nb + [nb[3] * t.ne[3]]


def ggml_tensor_type(t: Tensor) -> int:
    """t's type code (GGML_TYPE_*)."""
    return tensor_arg(t, "ggml_tensor_type").type


def _pred(cname: str, doc: str, n_args: int = 1) -> Callable[..., bool]:
    fn = getattr(lib, cname)

    if n_args == 1:
        def q(t: Tensor) -> bool:
            return bool(fn(tensor_arg(t, cname).ptr))
    else:
        def q(a: Tensor, b: Tensor) -> bool:
            return bool(fn(tensor_arg(a, cname).ptr, tensor_arg(b, cname).ptr))
    return public_function(q, cname, doc)


_PREDICATES = {
    "ggml_is_transposed": "Whether t's first two axes are swapped (nb0 > nb1).",
    "ggml_is_permuted": "Whether t's strides are not in increasing order (a permuted view).",
    "ggml_is_contiguous_0": "Whether t is contiguous (same as ggml_is_contiguous).",
    "ggml_is_contiguous_1": "Whether t is contiguous from dim 1 on (rows may be padded).",
    "ggml_is_contiguous_2": "Whether t is contiguous from dim 2 on.",
    "ggml_is_contiguous_channels": "Whether t is laid out channels-first in memory (a [W, H, C] permuted from [C, W, H]).",
    "ggml_is_contiguous_rows": "Whether each of t's rows is packed (nb0 = element size).",
    "ggml_is_contiguously_allocated": "Whether t's elements occupy one gap-free block (in any order).",
    "ggml_is_empty": "Whether t has no elements.",
    "ggml_is_scalar": "Whether t has exactly one element in every dim.",
    "ggml_is_vector": "Whether t is 1-d.",
    "ggml_is_matrix": "Whether t is at most 2-d.",
    "ggml_is_3d": "Whether t is at most 3-d.",
}
for _n, _d in _PREDICATES.items():
    globals()[_n] = _pred(_n, _d)
for _n, _d in {"ggml_are_same_shape": "Whether a and b have the same ne.",
               "ggml_are_same_stride": "Whether a and b have the same nb."}.items():
    globals()[_n] = _pred(_n, _d, 2)


def ggml_are_same_layout(a: Tensor, b: Tensor) -> bool:
    """Whether a and b have the same type, ne and nb (so one's bytes read as the other)."""
    a, b = tensor_arg(a, "ggml_are_same_layout"), tensor_arg(b, "ggml_are_same_layout")
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def ggml_can_repeat(a: Tensor, b: Tensor) -> bool:
    """Whether a tiles b (each of a's dims divides b's): ggml's broadcasting rule."""
    return can_repeat(tensor_arg(a, "ggml_can_repeat"), tensor_arg(b, "ggml_can_repeat"))


__all__ = sorted(n for n in globals() if n.startswith("ggml_"))
