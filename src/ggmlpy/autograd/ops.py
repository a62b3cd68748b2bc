"""ggmlR's ag_* functions, with its shapes, broadcasting rules and error cases.

Shapes are R's [nrow, ncol]; samples are columns; tensors may carry up to two
batch axes after those ([d, T, B], [d, T, H, B]), which products, softmax and
the column reductions treat as batches. `ag_add`/`ag_sub` broadcast only their
second argument ([m, 1] across columns, [1, n] across rows, [1, 1], and for
batched tensors any dim of 1); `ag_mul` broadcasts either. Everything computes through ggml on the
inputs' device; see rules.py for the gradients.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import TYPE_CHECKING

import numpy as np

from .._naming import public_function
from ..errors import GGMLError
from ..tensor import AGTensor, _operand, ag_tensor, norm_shape
from .engine import apply

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def _ag(x, what: str, arg: str = "x", like: AGTensor | None = None) -> AGTensor:
    """A tensor argument: an ag tensor as it is, or (as in ggmlR) a numeric matrix or array made a
    constant by the operators' rule (tensor._operand: on `like`'s device, in its dtype)."""
    x = _operand(x, like)
    if not isinstance(x, AGTensor):
        raise GGMLError(f"{what}: {arg} must be an ag tensor or a numeric matrix, got {type(x).__name__}")
    return x


def _ag2(a, b, what: str, names=("a", "b")) -> tuple[AGTensor, AGTensor]:
    """Both tensor arguments of a binary op; a plain matrix joins the other operand's device and dtype."""
    like = a if isinstance(a, AGTensor) else b if isinstance(b, AGTensor) else None
    return _ag(a, what, names[0], like), _ag(b, what, names[1], like)


def _num(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _pad4(shape) -> tuple:
    return tuple(shape) + (1,) * (4 - len(shape))


def _fits(small, big) -> bool:
    """ggmlR's broadcast shapes (equal, a column [m,1], a row [1,n], or a scalar [1,1]), and for
    batched tensors: each dim equal or 1."""
    return all(s in (b, 1) for s, b in zip(_pad4(small), _pad4(big)))


def _batch_fits(a, b) -> bool:
    """One operand's batch axes divide the other's (ggml's mul_mat broadcast)."""
    ba, bb = _pad4(a.shape)[2:], _pad4(b.shape)[2:]
    return all(y % x == 0 for x, y in zip(ba, bb)) or all(x % y == 0 for x, y in zip(ba, bb))


def ag_matmul(a: AGTensor, b: AGTensor, transpose_a: bool = False, transpose_b: bool = False) -> AGTensor:
    """a %*% b, batched over the axes past the first two (a [m, k, B...] %*% b [k, n, B...] ->
    [m, n, B...]; a batch of 1 broadcasts, so a 2-D weight multiplies every sample of a batch).
    `transpose_a` / `transpose_b` take t(a) / t(b) (per batch) without a transposed copy where
    ggml can: t(k) %*% q is ggml's native product."""
    a, b = _ag2(a, b, "ag_matmul")
    ka = a.nrow if transpose_a else a.ncol
    kb = b.ncol if transpose_b else b.nrow
    if ka != kb:
        hint = ("; b looks like PyTorch's [batch, features] layout: ggmlpy's ag_* API takes samples as "
                "columns, [features, batch], so pass b.T" if not transpose_b and a.ncol == b.ncol else "")
        ta, tb = ("t" if transpose_a else "", "t" if transpose_b else "")
        raise GGMLError(f"ag_matmul: non-conformable arguments: {ta}[{a.nrow}, {a.ncol}] %*% "
                        f"{tb}[{b.nrow}, {b.ncol}]{hint}")
    if not _batch_fits(a, b):
        raise GGMLError(f"ag_matmul: batch axes {list(a.shape[2:])} and {list(b.shape[2:])} do not broadcast "
                        "(one must divide the other, axis by axis)")
    return apply("matmul", a, b, ta=bool(transpose_a), tb=bool(transpose_b))


def _second_broadcasts(what, a, b):
    if _fits(b.shape, a.shape):
        return
    if _fits(a.shape, b.shape):
        raise GGMLError(f"{what}: only the second argument broadcasts; got a {list(a.shape)} and b "
                        f"{list(b.shape)} (swap them, or broadcast a explicitly)")
    raise GGMLError(f"{what}: shapes {list(a.shape)} and {list(b.shape)} do not broadcast")


def ag_add(a: AGTensor, b: AGTensor | float) -> AGTensor:
    """a + b; b may be a column [m,1], a row [1,n], a [1,1] or a number."""
    a = _ag(a, "ag_add", "a", like=b if isinstance(b, AGTensor) else None)
    if _num(b):
        return apply("add_scalar", a, c=float(b))
    b = _ag(b, "ag_add", "b", like=a)
    _second_broadcasts("ag_add", a, b)
    return apply("add", a, b)


def ag_sub(a: AGTensor, b: AGTensor | float) -> AGTensor:
    """a - b; b may be a column [m,1], a row [1,n], a [1,1] or a number."""
    a = _ag(a, "ag_sub", "a", like=b if isinstance(b, AGTensor) else None)
    if _num(b):
        return apply("add_scalar", a, c=-float(b))
    b = _ag(b, "ag_sub", "b", like=a)
    _second_broadcasts("ag_sub", a, b)
    return apply("sub", a, b)


def ag_mul(a: AGTensor, b: AGTensor) -> AGTensor:
    """Element-wise a * b; either may broadcast. A plain number is an error, as in ggmlR: use ag_scale."""
    a = _ag(a, "ag_mul", "a", like=b if isinstance(b, AGTensor) else None)
    if _num(b):
        raise GGMLError("ag_mul: b is a number; use ag_scale(x, scalar) to multiply by a scalar")
    b = _ag(b, "ag_mul", "b", like=a)
    if not (_fits(b.shape, a.shape) or _fits(a.shape, b.shape)):
        raise GGMLError(f"ag_mul: shapes {list(a.shape)} and {list(b.shape)} do not broadcast")
    return apply("mul", a, b)


def ag_div(a: AGTensor, b: AGTensor | float) -> AGTensor:
    """Element-wise a / b; either may broadcast; b may be a number."""
    a = _ag(a, "ag_div", "a", like=b if isinstance(b, AGTensor) else None)
    if _num(b):
        return apply("scale", a, s=float(np.float64(1.0) / np.float64(b)) if b else float("inf"))
    b = _ag(b, "ag_div", "b", like=a)
    if not (_fits(b.shape, a.shape) or _fits(a.shape, b.shape)):
        raise GGMLError(f"ag_div: shapes {list(a.shape)} and {list(b.shape)} do not broadcast")
    return apply("div", a, b)


def ag_scale(x: AGTensor, scalar: float) -> AGTensor:
    """x * scalar (the scalar is a constant, not tracked)."""
    x = _ag(x, "ag_scale")
    if not _num(scalar):
        raise GGMLError(f"ag_scale: scalar must be a number, got {type(scalar).__name__}")
    return apply("scale", x, s=float(scalar))


def ag_neg(x: AGTensor) -> AGTensor:
    """-x."""
    return apply("neg", _ag(x, "ag_neg"))


def _unary(op, doc):
    def f(x: AGTensor) -> AGTensor:
        return apply(op, _ag(x, f"ag_{op}"))
    return public_function(f, f"ag_{op}", doc)


ag_relu = _unary("relu", "max(x, 0); gradient mask x > 0.")
ag_sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)).")
ag_tanh = _unary("tanh", "tanh(x).")
ag_exp = _unary("exp", "exp(x).")
ag_log = _unary("log", "Natural log.")
ag_sqrt = _unary("sqrt", "Square root.")
ag_abs = _unary("abs", "|x|.")
ag_gelu = _unary("gelu", "Exact GELU, x * Phi(x) (erf form, as PyTorch's default).")
ag_silu = _unary("silu", "x * sigmoid(x).")


def ag_softmax(x: AGTensor, mask: AGTensor | None = None, scale: float = 1.0, causal: bool = False) -> AGTensor:
    """Column-wise softmax: each column (sample) sums to 1.

    softmax(scale * x + mask) in one ggml kernel: `mask` is additive (0 keeps, -inf drops) and
    broadcasts: [nrow, ncol] or a column [nrow, 1], with batch axes equal to x's or 1.
    `causal=True` drops the entries whose row index exceeds the column index (attention scores
    [keys, queries]: a query sees no later key)."""
    x = _ag(x, "ag_softmax")
    if mask is None and scale == 1.0 and not causal:
        return apply("softmax", x)
    if not _num(scale) or not scale > 0:
        raise GGMLError(f"ag_softmax: scale must be a positive number, got {scale!r}")
    params = {"scale": float(scale), "causal": bool(causal)}
    if mask is None:
        return apply("softmax_ext", x, **params)
    mask = _ag(mask, "ag_softmax", "mask", like=x)
    ms, xs = _pad4(mask.shape), _pad4(x.shape)
    if ms[0] != xs[0] or ms[1] not in (1, xs[1]) or any(xs[i] % ms[i] for i in (2, 3)):
        raise GGMLError(f"ag_softmax: mask {list(mask.shape)} does not broadcast to x {list(x.shape)} "
                        "(it needs x's rows, and 1 or x's size in every other dim)")
    return apply("softmax_ext", x, mask, **params)


def ag_pow(x: AGTensor, p: float) -> AGTensor:
    """x ^ p for a constant p; gradient p * x^(p-1)."""
    x = _ag(x, "ag_pow")
    if not _num(p):
        raise GGMLError("ag_pow: p must be a number")
    return apply("pow", x, p=float(p))


def ag_clamp(x: AGTensor, lo: float = -math.inf, hi: float = math.inf) -> AGTensor:
    """Clamp to [lo, hi]; the gradient passes where lo < x < hi (strictly), as in ggmlR."""
    x = _ag(x, "ag_clamp")
    lo, hi = float(lo), float(hi)
    if lo > hi:
        raise GGMLError(f"ag_clamp: lo ({lo}) > hi ({hi})")
    return apply("clamp", x, lo=lo, hi=hi)


def _dim(dim, what):
    if dim is None:
        return None
    if dim not in (1, 2):
        raise GGMLError(f"{what}: dim must be NULL/None, 1 (rows) or 2 (columns), got {dim!r}")
    return int(dim)


def _axes(axis, x, what) -> tuple:
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if not axes or any(not isinstance(a, (int, np.integer)) or not -x.ndim <= a < x.ndim for a in axes):
        raise GGMLError(f"{what}: axis must be an int or a tuple of ints in [-{x.ndim}, {x.ndim}), got {axis!r}")
    return tuple(sorted({int(a) % x.ndim for a in axes}))


def ag_sum(x: AGTensor, dim: int | None = None, keepdim: bool = False, axis: int | tuple | None = None) -> AGTensor:
    """dim=None: [1,1]; dim=1: rowSums [nrow,1]; dim=2: colSums [1,ncol] (per batch for a batched
    tensor). keepdim is ignored (as in ggmlR). `axis` (0-based, numpy's meaning: the axes summed,
    kept as dims of 1) sums over any axes instead."""
    x = _ag(x, "ag_sum")
    if axis is not None:
        axes = _axes(axis, x, "ag_sum")
        return apply("unbroadcast", x, shape=tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    dim = _dim(dim, "ag_sum")
    return apply({None: "sum_all", 1: "row_sums", 2: "col_sums"}[dim], x)


def ag_mean(x: AGTensor, dim: int | None = None, keepdim: bool = False, axis: int | tuple | None = None) -> AGTensor:
    """dim=None: [1,1]; dim=1: rowMeans [nrow,1]; dim=2: colMeans [1,ncol]; or over `axis` (see ag_sum)."""
    x = _ag(x, "ag_mean")
    if axis is not None:
        n = math.prod(x.shape[a] for a in _axes(axis, x, "ag_mean"))
        return apply("scale", ag_sum(x, axis=axis), s=1.0 / n)
    dim = _dim(dim, "ag_mean")
    n = {None: x.size, 1: x.ncol, 2: x.nrow}[dim]
    return apply("scale", ag_sum(x, dim), s=1.0 / n)


def ag_transpose(x: AGTensor) -> AGTensor:
    """R's t(x): [nrow, ncol] -> [ncol, nrow] (also `x.T`)."""
    return apply("transpose", _ag(x, "ag_transpose"))


def ag_reshape(x: AGTensor, nrow: int, ncol: int, *more: int) -> AGTensor:
    """R's matrix(x, nrow, ncol) (or array(x, c(nrow, ncol, ...)), up to 4 dims): column-major;
    one dim may be -1 (inferred)."""
    x = _ag(x, "ag_reshape")
    n = x.size
    dims = [int(d) for d in (nrow, ncol, *more)]
    if len(dims) > 4:
        raise GGMLError(f"ag_reshape: at most 4 dims, got {len(dims)}")
    known = 1
    for d in dims:
        known *= d if d != -1 else 1
    if dims.count(-1) == 1 and known > 0 and n % known == 0:
        dims[dims.index(-1)] = n // known
    if any(d <= 0 for d in dims) or known == 0 or math.prod(dims) != n:
        raise GGMLError(f"ag_reshape: cannot reshape {n} elements {list(x.shape)} to {dims}")
    shape = norm_shape(dims)
    return x if shape == x.shape else apply("reshape", x, shape=shape)


def ag_permute(x: AGTensor, *perm: int) -> AGTensor:
    """The axes reordered, as numpy.transpose(x, perm): the result's axis i is x's axis perm[i]
    (0-based; ag_permute(x, 0, 2, 1, 3) swaps the middle two). Trailing axes may be left out."""
    x = _ag(x, "ag_permute")
    perm = tuple(perm[0]) if len(perm) == 1 and isinstance(perm[0], (tuple, list)) else perm
    nd = max(len(perm), x.ndim)
    full = tuple(int(p) for p in perm) + tuple(range(len(perm), nd))
    if sorted(full) != list(range(nd)) or nd > 4:
        raise GGMLError(f"ag_permute: {list(perm)} is not a permutation of the axes of a {x.ndim}-dim tensor")
    if full == tuple(range(nd)):
        return x
    return apply("permute", x, perm=full)


def ag_concat(a: AGTensor, b: AGTensor, dim: int = 1) -> AGTensor:
    """Stack along R dim 1 (rows, rbind) or 2 (columns, cbind), or 3 / 4 for batched tensors."""
    a, b = _ag2(a, b, "ag_concat")
    if dim not in (1, 2, 3, 4):
        raise GGMLError(f"ag_concat: dim must be 1 (rows), 2 (columns), 3 or 4, got {dim!r}")
    pa, pb = _pad4(a.shape), _pad4(b.shape)
    if any(pa[k] != pb[k] for k in range(4) if k != dim - 1):
        raise GGMLError(f"ag_concat: shapes {list(a.shape)} and {list(b.shape)} differ along the kept dim")
    return apply("concat", a, b, dim=dim - 1)


def ag_slice(x: AGTensor, rows: int | slice | None = None, cols: int | slice | None = None,
             *more: int | slice | None) -> AGTensor:
    """x[rows, cols, ...] with 0-based Python slices (step 1), e.g. ag_slice(x, slice(0, 2), None);
    batched tensors take one more per batch axis."""
    x = _ag(x, "ag_slice")
    if len(more) > x.ndim - 2:
        raise GGMLError(f"ag_slice: {2 + len(more)} ranges for a {x.ndim}-dim tensor")

    def bounds(s, n, name):
        if s is None:
            return 0, n
        if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
            if not -n <= s < n:
                raise GGMLError(f"ag_slice: {name} index {s} is out of range for {n} {name}")
            s = slice(s % n, s % n + 1)  # -1 is the last one, as in Python
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise GGMLError(f"ag_slice: {name} must be None, an int or a slice with step 1")
        lo, hi, _ = s.indices(n)
        if hi <= lo:
            raise GGMLError(f"ag_slice: empty {name} range {s}")
        return lo, hi

    ranges = [bounds(s, n, name) for s, n, name in
              zip((rows, cols, *more) + (None,) * (x.ndim - 2 - len(more)), x.shape, ("rows", "cols", "dim 3", "dim 4"))]
    start, size = tuple(lo for lo, _ in ranges), tuple(hi - lo for lo, hi in ranges)
    if size == x.shape:
        return x
    return apply("slice", x, start=start, size=size)


def ag_layer_norm(x: AGTensor, eps: float = 1e-5, gamma: AGTensor | None = None,
                  beta: AGTensor | None = None) -> AGTensor:
    """Normalise each column (sample) to zero mean, unit variance (biased); then * gamma + beta ([F,1])."""
    x = _ag(x, "ag_layer_norm")
    if not _num(eps) or eps < 0:
        raise GGMLError(f"ag_layer_norm: eps must be a non-negative number, got {eps!r}")
    y = apply("layer_norm", x, eps=float(eps))  # one ggml kernel; the rule table has its gradients
    if gamma is not None:
        y = ag_mul(y, gamma)
    if beta is not None:
        y = ag_add(y, beta)
    return y


def ag_rms_norm(x: AGTensor, eps: float = 1e-5, gamma: AGTensor | None = None) -> AGTensor:
    """Divide each column (sample) by its root mean square, x / sqrt(mean(x^2) + eps) (ggml_rms_norm,
    LLaMA's RMSNorm); then * gamma ([F, 1]) if given."""
    x = _ag(x, "ag_rms_norm")
    if not _num(eps) or eps < 0:
        raise GGMLError(f"ag_rms_norm: eps must be a non-negative number, got {eps!r}")
    y = apply("rms_norm", x, eps=float(eps))
    return y if gamma is None else ag_mul(y, gamma)


def ag_rope(x: AGTensor, pos: AGTensor | ArrayLike | None = None, n_dims: int | None = None, mode: int = 0, n_ctx_orig: int = 0,
            freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0, attn_factor: float = 1.0,
            beta_fast: float = 32.0, beta_slow: float = 1.0) -> AGTensor:
    """Rotary position embedding, as ggml_rope_ext applies it (same arguments): x [head_dim, n_head, T]
    or [head_dim, n_head, T, B]; the first n_dims (default head_dim) entries of each head rotated in
    pairs by pos * freq_scale * freq_base^(-2i/n_dims). mode 0 (ggml's GGML_ROPE_TYPE_NORMAL, which
    llama.cpp's `llama` uses) pairs entries (2i, 2i + 1); mode 2 (GGML_ROPE_TYPE_NEOX) pairs
    (i, i + n_dims/2). pos: the T positions (an
    i32 ag tensor, which ag_compile can take as an input, or integers), or None for 0 .. T - 1."""
    x = _ag(x, "ag_rope")
    if x.ndim not in (3, 4):
        raise GGMLError(f"ag_rope: x must be [head_dim, n_head, T] or [head_dim, n_head, T, B], got {list(x.shape)}")
    head_dim, t = x.shape[0], x.shape[2]
    n_dims = head_dim if n_dims is None else n_dims
    if not isinstance(n_dims, numbers.Integral) or not 0 < n_dims <= head_dim or n_dims % 2:
        raise GGMLError(f"ag_rope: n_dims must be an even integer in 2..head_dim={head_dim}, got {n_dims!r}")
    if mode not in (0, 2):
        raise GGMLError(f"ag_rope: mode must be 0 (normal) or 2 (NeoX), got {mode!r}")
    floats = dict(freq_base=freq_base, freq_scale=freq_scale, ext_factor=ext_factor, attn_factor=attn_factor,
                  beta_fast=beta_fast, beta_slow=beta_slow)
    for name, v in floats.items():
        if not _num(v) or not math.isfinite(v):
            raise GGMLError(f"ag_rope: {name} must be a finite number, got {v!r}")
    if not isinstance(n_ctx_orig, numbers.Integral) or n_ctx_orig < 0:
        raise GGMLError(f"ag_rope: n_ctx_orig must be a non-negative integer, got {n_ctx_orig!r}")
    params = dict(n_dims=int(n_dims), mode=int(mode), n_ctx_orig=int(n_ctx_orig),
                  **{k: float(v) for k, v in floats.items()})
    if pos is None:
        return apply("rope", x, **params)
    return apply("rope", x, _positions(pos, t, x), **params)


def _positions(pos: AGTensor | ArrayLike, t: int, like: AGTensor) -> AGTensor:
    if isinstance(pos, AGTensor):
        if pos.dtype != "i32" or pos.size != t:
            raise GGMLError(f"ag_rope: pos must hold {t} i32 positions (one per token), got {pos.dtype} {list(pos.shape)}")
        return pos if pos.shape == (t, 1) else apply("reshape", pos, shape=(t, 1))
    arr = np.asarray(pos)
    if arr.size != t or arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise GGMLError(f"ag_rope: pos must hold {t} integer positions (one per token), got shape {list(arr.shape)}")
    if arr.size and np.abs(arr).max() >= 2 ** 31:
        raise GGMLError("ag_rope: positions must fit in 32 bits")
    return ag_tensor(arr.reshape(t, 1).astype(np.int64), device=like.device_context.spec, dtype="i32")


def ag_zeros(nrow: int, ncol: int, *more: int, device: str | None = None) -> AGTensor:
    """A [nrow, ncol] (or [nrow, ncol, ...]) tensor of zeros (a constant, on `device` or the current one)."""
    return ag_tensor(np.zeros((nrow, ncol, *more)), device=device)


def ag_ones(nrow: int, ncol: int, *more: int, device: str | None = None) -> AGTensor:
    """A [nrow, ncol] (or [nrow, ncol, ...]) tensor of ones (a constant, on `device` or the current one)."""
    return ag_tensor(np.ones((nrow, ncol, *more)), device=device)


# -- losses -----------------------------------------------------------------------------------------------
def _same_shape(what, p, t):
    if p.shape != t.shape:
        hint = (" (one of them is transposed: ggmlpy's ag_* API takes samples as columns, [features, batch]; "
                "use .T on the [batch, features] one)" if p.shape == t.shape[::-1] else "")
        raise GGMLError(f"{what}: pred {list(p.shape)} and target {list(t.shape)} differ in shape{hint}")


def _target(target, pred: AGTensor, what: str) -> AGTensor:
    """A loss target: an ag tensor as it is, or (as in ggmlR) a plain matrix or a number, made a
    constant on pred's device."""
    return _ag(np.asarray(target) if _num(target) else target, what, "target", like=pred)


def _elementwise_loss(rule: str, what: str, pred, target) -> AGTensor:
    """The loss primitive `rule` of pred and a target of pred's shape (an ag tensor, or a plain
    matrix or number made a constant on pred's device)."""
    pred = _ag(pred, what, "pred")
    target = _target(target, pred, what)
    _same_shape(what, pred, target)
    return apply(rule, pred, target)


def ag_mse_loss(pred: AGTensor, target: AGTensor | np.ndarray) -> AGTensor:
    """sum((pred - target)^2) / length(pred); the gradient flows to pred only (as in ggmlR).
    `target` may be an ag tensor or a plain numpy matrix of pred's shape."""
    return _elementwise_loss("mse", "ag_mse_loss", pred, target)


def ag_cross_entropy_loss(pred: AGTensor, target: AGTensor | np.ndarray) -> AGTensor:
    """-sum(target * log(clamp(pred, 1e-7, 1 - 1e-7))) / ncol, for probabilities `pred`.
    `target` may be an ag tensor or a plain numpy matrix of pred's shape."""
    return _elementwise_loss("cross_entropy", "ag_cross_entropy_loss", pred, target)


def ag_softmax_cross_entropy_loss(logits: AGTensor, target: AGTensor | np.ndarray) -> AGTensor:
    """Softmax (per column) then cross-entropy with log(max(p, 1e-7)), averaged over columns.

    `target` is one-hot [classes, ncol] (an ag tensor or a plain numpy matrix), or 0-based
    class indices: a [1, ncol] tensor or matrix (when logits have more than one row) or an
    integer vector."""
    logits = _ag(logits, "ag_softmax_cross_entropy_loss", "logits")
    if logits.nrow == 1:
        warnings.warn("ag_softmax_cross_entropy_loss: the logits have one row, i.e. one class; a softmax over "
                      "one class is always 1, so this loss is always 0 and trains nothing. Classes are rows "
                      "(samples are columns: transpose [batch, classes] logits with .T); for a binary target "
                      "use ag_sigmoid with ag_cross_entropy_loss, or two rows.", RuntimeWarning, stacklevel=2)
    target = _one_hot_target(logits, target)
    _same_shape("ag_softmax_cross_entropy_loss", logits, target)
    return apply("softmax_ce", logits, target)


def _index_layout(shape, logits) -> None:
    """Class indices pair with the logits' columns in column order: a vector, or the logits'
    own column dims ([T, B] for [V, T, B]). Same-size other shapes ([B, T]) would pair wrongly."""
    n = logits.size // logits.nrow
    flat = norm_shape(shape) in ((n, 1), (1, n)) or len(shape) == 1
    if not flat and norm_shape(shape) != norm_shape(logits.shape[1:]):
        raise GGMLError(f"ag_softmax_cross_entropy_loss: class indices of shape {list(shape)} for logits "
                        f"{list(logits.shape)}: give one index per column, as a vector or shaped like the "
                        f"logits' column dims {list(logits.shape[1:])}")


def _one_hot_target(logits, target):
    """The loss's target as a tensor of the logits' shape: a one-hot (or soft) target as given;
    class indices (one per column) turned one-hot on the device, by the "one_hot" primitive, so
    that ag_compile can take i32 index tensors as inputs."""
    cols = logits.size // logits.nrow
    if isinstance(target, AGTensor):
        if target.shape == logits.shape or target.size != cols or logits.nrow == 1:
            return target
        _index_layout(target.shape, logits)
        if target.dtype == "i32":
            return apply("one_hot", target, shape=logits.shape)  # checked on the device side (engine)
        idx = target.numpy().ravel(order="F")
    else:
        idx = np.asarray(target)
        if idx.shape == logits.shape and logits.nrow > 1:
            return _target(idx, logits, "ag_softmax_cross_entropy_loss")  # a one-hot (or soft) target matrix
        if idx.dtype.kind not in "iu" and not (idx.dtype.kind == "f" and np.all(idx == np.round(idx))):
            raise GGMLError("ag_softmax_cross_entropy_loss: target must be an ag tensor or integer class indices")
        if idx.size == cols:
            _index_layout(idx.shape, logits)
        idx = idx.ravel(order="F")
    if idx.size != cols:
        hint = (" (the logits look like [batch, classes]: ggmlpy's ag_* API takes samples as columns, so "
                "pass logits.T)" if idx.size == logits.nrow else "")
        raise GGMLError(f"ag_softmax_cross_entropy_loss: {idx.size} class indices for {cols} columns{hint}")
    cls = idx.astype(np.int64)
    if np.any(cls != idx) or cls.min() < 0 or cls.max() >= logits.nrow:
        raise GGMLError(f"ag_softmax_cross_entropy_loss: class indices must be integers in 0..{logits.nrow - 1}")
    ids = ag_tensor(cls.reshape(-1, 1), device=logits.device_context.spec, dtype="i32")
    return apply("one_hot", ids, shape=logits.shape)


# -- images ---------------------------------------------------------------------------------------------
def _pair(v, what: str, name: str, least: int) -> tuple:
    """An int or a pair of ints (along W, then H: the tensor's own axis order), each >= least."""
    pair = (v, v) if isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, bool) else v
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 \
            or any(isinstance(p, bool) or not isinstance(p, (numbers.Integral, np.integer)) or p < least for p in pair):
        raise GGMLError(f"{what}: {name} must be an int >= {least} or a pair of them (along W, then H), got {v!r}")
    return int(pair[0]), int(pair[1])


def _image(x) -> tuple:
    """[W, H, C, N] of images (shapes drop trailing 1s: [W, H] is one image of one channel)."""
    return _pad4(x.shape)


def _out_size(n, k, s, p, d) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


_IntPair = int | tuple[int, int]  # one value for both image axes, or (along W, along H)


def ag_conv2d(x: AGTensor, w: AGTensor, b: AGTensor | None = None, stride: _IntPair = 1, padding: _IntPair = 0,
              dilation: _IntPair = 1) -> AGTensor:
    """2-D cross-correlation, as ggml_conv_2d lays it out: x [W, H, C, N] (a batch of N images of C
    channels), kernel w [KW, KH, C, OC], optional bias b of OC values (any shape) -> [OW, OH, OC, N].
    `stride`, `padding` (zeros on both sides) and `dilation` are ints or pairs along W, then H.
    Computed as im2col and one product (the product's rule gives w's gradient, im2col's adjoint x's)."""
    x, w = _ag2(x, w, "ag_conv2d", ("x", "w"))
    W, H, C, N = _image(x)
    kw, kh, kc, oc = _image(w)
    s, p, d = (_pair(stride, "ag_conv2d", "stride", 1), _pair(padding, "ag_conv2d", "padding", 0),
               _pair(dilation, "ag_conv2d", "dilation", 1))
    if kc != C:
        raise GGMLError(f"ag_conv2d: w [KW, KH, C, OC] {list(w.shape)} has {kc} input channels, "
                        f"x {list(x.shape)} has {C}")
    ow, oh = _out_size(W, kw, s[0], p[0], d[0]), _out_size(H, kh, s[1], p[1], d[1])
    if ow < 1 or oh < 1:
        raise GGMLError(f"ag_conv2d: the (dilated) kernel {kw}x{kh} does not fit the padded input {W}x{H}")
    cols = apply("im2col", x, k=(kw, kh), s=s, p=p, d=d)  # [C*KH*KW, OW, OH, N]
    y = ag_matmul(ag_reshape(w, kw * kh * C, oc), cols, transpose_a=True)  # [OC, OW, OH, N]
    y = apply("permute", y, perm=(1, 2, 0, 3)) if oc > 1 else ag_reshape(y, ow, oh, 1, N)  # [OW, OH, OC, N]
    if b is None:
        return y
    b = _ag(b, "ag_conv2d", "b", like=x)
    if b.size != oc:
        raise GGMLError(f"ag_conv2d: b must hold one value per output channel ({oc}), got {list(b.shape)}")
    return ag_add(y, ag_reshape(b, 1, 1, oc))


def ag_max_pool2d(x: AGTensor, kernel: _IntPair, stride: _IntPair | None = None) -> AGTensor:
    """Max over each kernel window of images x [W, H, C] or [W, H, C, N] (no padding; a partial
    window at the far edge is dropped) -> [OW, OH, C, N]. `kernel` and `stride` (default: the
    kernel) are ints or pairs along W, then H. A window holding NaN gives NaN."""
    x = _ag(x, "ag_max_pool2d")
    W, H, _, _ = _image(x)
    k = _pair(kernel, "ag_max_pool2d", "kernel", 1)
    s = k if stride is None else _pair(stride, "ag_max_pool2d", "stride", 1)
    if k[0] > W or k[1] > H:
        raise GGMLError(f"ag_max_pool2d: kernel {list(k)} larger than the images {W}x{H}")
    return apply("max_pool2d", x, k=k, s=s)
