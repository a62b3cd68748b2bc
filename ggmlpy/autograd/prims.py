"""Forward builders of the differentiable primitives, as ggml graph fragments.

Each builder takes a ggml context and the input tensors (f32, R shapes: ne =
[nrow, ncol]) and returns the output tensor. They are the only place that knows
how an R-level operation maps onto ggml ops; the executor compiles and caches
them, and graph mode (later) emits them into one big graph.
"""
from __future__ import annotations

import threading

from .._threadlocal import bound
from ..bindings import lib

L = lib
F32 = lib.GGML_TYPE_F32
_local = threading.local()


def blas_products(enabled: bool = True):
    """Build products for ggml's BLAS backend: see matmul()."""
    return bound(_local, "blas", enabled)



def _t(ctx, x):
    return L.ggml_cont(ctx, L.ggml_transpose(ctx, x))


def matmul(ctx, a, b, ta=False, tb=False):
    """op(a) %*% op(b). ggml_mul_mat(x, y) computes t(x) %*% y with x, y sharing ne0, so
    a %*% b costs ggml's CPU kernels a transposed copy of a, and a %*% t(b) two copies
    (51 us each at 256x256, against 130 us for the product itself).
    Under blas_products(), those become ggml_out_prod(a, op(b)ᵀ), which ggml's BLAS
    backend computes from the transposed view in place (176 against 235 and 349 us)."""
    if ta:
        return L.ggml_mul_mat(ctx, a, _t(ctx, b) if tb else b)
    if getattr(_local, "blas", False) and min(a.ne[0], a.ne[1], b.ne[0], b.ne[1]) >= 32:
        return L.ggml_out_prod(ctx, a, b if tb else L.ggml_transpose(ctx, b))
    return L.ggml_mul_mat(ctx, _t(ctx, a), _t(ctx, b) if tb else b)


def add(ctx, a, b):
    return L.ggml_add(ctx, a, _widen(ctx, b, a))  # b broadcasts (ggml repeats the second operand)


def sub(ctx, a, b):
    return L.ggml_sub(ctx, a, _widen(ctx, b, a))


def mul(ctx, a, b):
    return L.ggml_mul(ctx, a, _widen(ctx, b, a)) if _covers(a, b) else L.ggml_mul(ctx, b, _widen(ctx, a, b))


def div(ctx, a, b):
    if _covers(a, b):
        return L.ggml_div(ctx, a, _widen(ctx, b, a))
    return L.ggml_div(ctx, L.ggml_repeat_4d(ctx, a, b.ne[0], b.ne[1], 1, 1), b)


def _widen(ctx, small, big):
    """ggml broadcasts a one-element-wide operand one element per call (a 256x256 times a
    1x1 took 116 us against 4 us): repeat it to full rows first, which broadcast at full speed."""
    if small.ne[0] == 1 and big.ne[0] > 1:
        return L.ggml_repeat_4d(ctx, small, big.ne[0], small.ne[1], 1, 1)
    return small


def _covers(a, b) -> bool:
    return a.ne[0] >= b.ne[0] and a.ne[1] >= b.ne[1]


def scale(ctx, x, s):
    return L.ggml_scale(ctx, x, s)


def add_scalar(ctx, x, c):
    return L.ggml_scale_bias(ctx, x, 1.0, c)


def neg(ctx, x):
    return L.ggml_neg(ctx, x)


def unary(ctx, x, fn):
    return getattr(L, "ggml_" + fn)(ctx, x)


def relu(ctx, x):
    """max(x, 0), keeping NaN as PyTorch does (ggml's relu turns NaN into 0, a silent wrong value):
    x * step(x), two cheap kernels that ggml's own backward also differentiates. The price: an
    input of -inf gives NaN (-inf * 0) where PyTorch gives 0. Exact forms cost a transcendental
    kernel (elu, tanh or exp: +27 % on the 12-layer eager step, measured), this one about 5 %."""
    return L.ggml_mul(ctx, x, L.ggml_step(ctx, x))


def add_relu(ctx, a, b):
    """relu(a + b), b broadcast: a linear layer's bias and relu as one graph (one eager launch)."""
    return relu(ctx, add(ctx, a, b))


def where_positive(ctx, g, y):
    """g where y > 0, else 0: relu's backward, as one graph (step, then mul) instead of two."""
    return L.ggml_mul(ctx, g, L.ggml_step(ctx, y))


def pow_(ctx, x, p):
    """x^p as R computes it: exact special cases, sign kept for odd integer powers."""
    if p == 1:
        return L.ggml_scale(ctx, x, 1.0)
    if p == 2:
        return L.ggml_sqr(ctx, x)
    if p == 0.5:
        return L.ggml_sqrt(ctx, x)
    if p == 0:
        return L.ggml_scale_bias(ctx, x, 0.0, 1.0)
    mag = L.ggml_exp(ctx, L.ggml_scale(ctx, L.ggml_log(ctx, L.ggml_abs(ctx, x)), p))
    if float(p).is_integer():
        return L.ggml_mul(ctx, mag, L.ggml_sgn(ctx, x)) if int(p) % 2 else mag
    # R gives NaN for a negative base with a fractional power: log of x itself does the same.
    return L.ggml_exp(ctx, L.ggml_scale(ctx, L.ggml_log(ctx, x), p))


def clamp(ctx, x, lo, hi):
    """ggml's clamp turns NaN into hi; adding 0 * tanh(x) (0 for every number, infinities
    included, NaN for NaN) keeps NaN, as PyTorch does."""
    return L.ggml_add(ctx, L.ggml_clamp(ctx, x, lo, hi), L.ggml_scale(ctx, L.ggml_tanh(ctx, x), 0.0))


def inside(ctx, x, lo, hi):
    """1 where lo < x < hi (strictly), else 0: ggmlR's clamp gradient mask."""
    m = None
    if lo != float("-inf"):
        m = L.ggml_step(ctx, L.ggml_scale_bias(ctx, x, 1.0, -lo))
    if hi != float("inf"):
        up = L.ggml_step(ctx, L.ggml_scale_bias(ctx, x, -1.0, hi))
        m = up if m is None else L.ggml_mul(ctx, m, up)
    return m if m is not None else L.ggml_scale_bias(ctx, x, 0.0, 1.0)


def softmax(ctx, x):
    return L.ggml_soft_max(ctx, x)  # along ne0: per R column


def sum_all(ctx, x):
    return L.ggml_reshape_2d(ctx, L.ggml_sum(ctx, x), 1, 1)


def col_sums(ctx, x):
    return L.ggml_sum_rows(ctx, x)  # [nrow, ncol] -> [1, ncol]


def row_sums(ctx, x):
    """[nrow, ncol] -> [nrow, 1]: repeat_back sums the columns without a transposed copy."""
    return L.ggml_repeat_back(ctx, x, L.ggml_new_tensor_2d(ctx, F32, x.ne[0], 1))


def transpose(ctx, x):
    return _t(ctx, x)


def reshape(ctx, x, nrow, ncol):
    return L.ggml_reshape_2d(ctx, L.ggml_cont(ctx, x), nrow, ncol)


def broadcast(ctx, x, nrow, ncol):
    return L.ggml_repeat_4d(ctx, x, nrow, ncol, 1, 1)


def unbroadcast(ctx, g, nrow, ncol):
    """Sum g down to [nrow, ncol] (the adjoint of broadcast)."""
    if (g.ne[0], g.ne[1]) == (nrow, ncol):
        return g
    if (nrow, ncol) == (1, 1):
        return sum_all(ctx, g)
    if nrow == 1:
        return col_sums(ctx, g)
    return row_sums(ctx, g)


def concat(ctx, a, b, dim):
    return L.ggml_concat(ctx, a, b, dim)


def slice_(ctx, x, r0, r1, c0, c1):
    v = L.ggml_view_2d(ctx, x, r1 - r0, c1 - c0, x.nb[1], r0 * x.nb[0] + c0 * x.nb[1])
    return L.ggml_cont(ctx, v)


def pad_into(ctx, g, r0, c0, nrow, ncol):
    """The adjoint of slice_: g placed at (r0, c0) in a zero [nrow, ncol] matrix."""
    z = L.ggml_scale(ctx, L.ggml_repeat_4d(ctx, L.ggml_view_1d(ctx, g, 1, 0), nrow, ncol, 1, 1), 0.0)
    return L.ggml_acc(ctx, z, g, z.nb[1], z.nb[2], z.nb[3], r0 * z.nb[0] + c0 * z.nb[1])


def get_cols(ctx, w, idx):
    """Columns idx (0-based, i32) of w [dim, vocab] -> [dim, n]."""
    return L.ggml_get_rows(ctx, w, L.ggml_reshape_1d(ctx, idx, idx.ne[0] * idx.ne[1]))


def get_cols_back(ctx, g, idx, vocab):
    template = L.ggml_new_tensor_2d(ctx, F32, g.ne[0], vocab)
    return L.ggml_get_rows_back(ctx, g, L.ggml_reshape_1d(ctx, idx, idx.ne[0] * idx.ne[1]), template)


# -- losses, with ggmlR's exact definitions -------------------------------------------------------------
def mse(ctx, p, t):
    n = p.ne[0] * p.ne[1]
    return L.ggml_scale(ctx, sum_all(ctx, L.ggml_sqr(ctx, L.ggml_sub(ctx, p, t))), 1.0 / n)


def cross_entropy(ctx, p, t):
    """-sum(t * log(clamp(p, 1e-7, 1 - 1e-7))) / ncol."""
    lp = L.ggml_log(ctx, L.ggml_clamp(ctx, p, 1e-7, 1 - 1e-7))
    return L.ggml_scale(ctx, sum_all(ctx, L.ggml_mul(ctx, t, lp)), -1.0 / p.ne[1])


def softmax_ce(ctx, x, t):
    """-sum(t * log(max(softmax(x), 1e-7))) / ncol."""
    lp = L.ggml_log(ctx, L.ggml_clamp(ctx, L.ggml_soft_max(ctx, x), 1e-7, float("inf")))
    return L.ggml_scale(ctx, sum_all(ctx, L.ggml_mul(ctx, t, lp)), -1.0 / x.ne[1])


def copy(ctx, x):
    return L.ggml_scale(ctx, x, 1.0)


def fill(ctx, x, value):
    return L.ggml_fill(ctx, x, value)


def erf(ctx, x):
    """erf(x) from exp (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7): ggml has no erf op."""
    a1, a2, a3, a4, a5, p = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911
    ax = L.ggml_abs(ctx, x)
    t = L.ggml_div(ctx, L.ggml_scale_bias(ctx, ax, 0.0, 1.0), L.ggml_scale_bias(ctx, ax, p, 1.0))
    poly = L.ggml_scale_bias(ctx, t, a5, a4)
    for a in (a3, a2, a1):
        poly = L.ggml_scale_bias(ctx, L.ggml_mul(ctx, poly, t), 1.0, a)
    poly = L.ggml_mul(ctx, poly, t)
    y = L.ggml_scale_bias(ctx, L.ggml_mul(ctx, poly, L.ggml_exp(ctx, L.ggml_neg(ctx, L.ggml_sqr(ctx, x)))), -1.0, 1.0)
    return L.ggml_mul(ctx, y, L.ggml_sgn(ctx, x))
