"""Five-dimensional tensors on ggml 0.25.3's four (ggmlR's ggml fork has GGML_MAX_DIMS 5).

A `Tensor5` is a handle on an ordinary ggml tensor of four dims whose last one holds ggmlR's ne3 and
ne4 merged: ne = [ne0, ne1, ne2, ne3 * ne4], so ne4's stride is ne3 times ne3's (ggml's layout of a
fifth dim). Its `ne`, `nb`, `shape` and `n_dims` are the five, and its data go in and out as five-dim
arrays. An op built on the merged tensor computes the five-dim result exactly when it treats ne3 and
ne4 alike: element-wise ops, row-wise ops (along ne0: softmax, sum_rows, mean, norms), copies. The ops
that do not (broadcasting where ne3 and ne4 broadcast differently, concat along ne3, products whose
batches broadcast) merge another pair of adjacent dims when the tensors are contiguous, or raise; every
other op given a Tensor5 raises a GGMLError naming it and the shape: never a value computed across the
wrong dims (ops/args.py's input_tensor and make_tensor apply the lists below).
"""
from __future__ import annotations

from ..bindings import lib
from ..errors import GGMLError
from .handles import Context, Tensor

MAX_DIMS = 5  # ggmlR's GGML_MAX_DIMS

# ops whose result has the first input's five dims (or a reduction of ne0 only), built on the merged
# tensor as it is
SAME_FIVE = frozenset(
    [f"ggml_{n}" for n in ("sqr", "sqrt", "log", "sin", "cos", "abs", "sgn", "neg", "step", "tanh", "elu", "relu",
                           "sigmoid", "gelu", "gelu_erf", "gelu_quick", "silu", "hardswish", "hardsigmoid", "exp",
                           "softplus", "expm1", "floor", "ceil", "round", "trunc", "leaky_relu", "scale", "clamp", "cont", "dup", "soft_max", "sum_rows", "mean", "norm",
                           "rms_norm", "l2_norm", "cast", "soft_max_ext", "transpose", "permute",
                           "soft_max_ext_back", "silu_back")])
# ops that read a Tensor5 and make an ordinary tensor (reshapes to four dims or fewer; a scalar sum)
READS_FIVE = frozenset(["ggml_reshape", "ggml_reshape_1d", "ggml_reshape_2d", "ggml_reshape_3d", "ggml_reshape_4d",
                        "ggml_sum"])


class Tensor5(Tensor):
    """A ggml tensor of five dims: ne3 and ne4 merged into ggml's ne3 (see the module's note)."""

    __slots__ = ("ne4",)

    def __init__(self, ptr, ctx: Context, ne4: int):
        super().__init__(ptr, ctx)
        self.ne4 = int(ne4)

    @property
    def ne(self) -> tuple:
        """Elements per dim, ggml order, 5 entries."""
        n = super().ne
        return n[:3] + (n[3] // self.ne4, self.ne4)

    @property
    def nb(self) -> tuple:
        """Byte strides per dim, ggml order, 5 entries."""
        s = super().nb
        return s + (s[3] * self.ne[3],)

    @property
    def n_dims(self) -> int:
        return MAX_DIMS

    @property
    def shape(self) -> tuple:
        return self.ne


def five(t: Tensor, ne4: int) -> Tensor:
    """t (whose ggml ne3 holds ne3 * ne4) as a five-dim handle; t itself when ne4 is 1."""
    ne4 = int(ne4)
    if ne4 <= 1:  # four dims (or no elements)
        return t
    if int(t.ptr.ne[3]) % ne4:
        raise GGMLError(f"internal: ne3 = {int(t.ptr.ne[3])} does not hold ne4 = {ne4}")
    return Tensor5(t.ptr, t.ctx, ne4)


def dims5(t: Tensor) -> list:
    """t's five dims (a four-dim tensor has ne4 = 1)."""
    n = list(t.ne)
    return n + [1] * (MAX_DIMS - len(n))


def merged(ne, j: int) -> list:
    """Five dims with j and j + 1 merged: four."""
    ne = list(ne)
    return ne[:j] + [ne[j] * ne[j + 1]] + ne[j + 2:]


def refold(ctx: Context, t: Tensor, j: int) -> Tensor:
    """A contiguous t viewed with dims j and j + 1 of its five merged (an ordinary tensor)."""
    if not lib.ggml_is_contiguous(t.ptr):
        raise GGMLError(f"a five-dim tensor {list(t.ne)} must be contiguous here (ggml_cont() first): merging "
                        f"dims {j} and {j + 1} is a reshape")
    ne = merged(dims5(t), j)
    ctx.reserve_tensor(t.type, ne, "refold", view=True)
    return Tensor(lib.ggml_reshape_4d(ctx.ptr, t.ptr, *ne), ctx)


def unfold(ctx: Context, t: Tensor, j: int, ne5) -> Tensor:
    """The op result t (contiguous), built with dims j and j + 1 merged, as a Tensor5 of dims ne5."""
    ne5 = [int(d) for d in ne5]
    if j != 3:
        ne = merged(ne5, 3)
        ctx.reserve_tensor(t.type, ne, "unfold", view=True)
        t = Tensor(lib.ggml_reshape_4d(ctx.ptr, t.ptr, *ne), ctx)
    return five(t, ne5[4])


def plain(t: Tensor) -> Tensor:
    """The merged four-dim tensor under t."""
    return Tensor(t.ptr, t.ctx) if isinstance(t, Tensor5) else t


def broadcast_pair(ctx: Context, a: Tensor, b: Tensor, what: str):
    """(a4, b4, j, ne5): a and b with a pair j, j + 1 of their five dims merged over which ggml's
    repetition of b (index modulo each of b's dims) is the five-dim one: b has a's size in dim j
    (then dim j + 1 may repeat) or one in dim j + 1 (then dim j repeats within it). ne5: the result's dims."""
    na, nb = dims5(a), dims5(b)
    if any(y <= 0 or x % y for x, y in zip(na, nb)):
        raise GGMLError(f"{what}: b {nb} does not repeat into a {na} (each dim of b must divide a's)")
    j = next((j for j in (3, 2, 1, 0) if nb[j] == na[j] or nb[j + 1] == 1), None)
    if j is None:
        raise GGMLError(f"{what}: b {nb} repeats into a {na} differently in every pair of adjacent dims; ggml "
                        f"0.25.3 has four dims and a five-dim op merges a pair that repeats alike (not supported)")
    if j == 3:
        return plain(a), plain(b), 3, na
    return refold(ctx, a, j), refold(ctx, b, j), j, na


def concat_pair(ctx: Context, a: Tensor, b: Tensor, dim: int, what: str):
    """(a4, b4, dim4, j, ne5) for ggml_concat of five-dim a and b along `dim`: dims 3 and 4 merged
    unless dim is 3 (concatenating the merged dim appends b after all of a: dim 4's concat), then
    dims 0 and 1 (contiguous copies where needed: concat copies anyway)."""
    na, nb = dims5(a), dims5(b)
    if not 0 <= dim < MAX_DIMS or any(x != y for k, (x, y) in enumerate(zip(na, nb)) if k != dim):
        raise GGMLError(f"{what}: a {na} and b {nb} cannot be joined along dim {dim} (0..4; the other dims must match)")
    ne5 = list(na)
    ne5[dim] += nb[dim]
    if dim != 3:
        return plain(a), plain(b), min(dim, 3), 3, ne5
    a, b = (t if lib.ggml_is_contiguous(t.ptr) else five(Tensor(lib.ggml_cont(ctx.ptr, t.ptr), ctx), dims5(t)[4])
            for t in (a, b))
    return refold(ctx, a, 0), refold(ctx, b, 0), 2, 0, ne5
