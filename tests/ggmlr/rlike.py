"""The few R and testthat idioms ggmlR's low-level tests use, in numpy.

ggmlR's `ggml_get_f32` returns a flat R vector in ggml memory order; the ports
flatten ggmlpy's numpy result (`.ravel()`, no copy) where they index it the R way.
"""
import math

import numpy as np

pi = math.pi
Inf = math.inf
NaN = math.nan
NA = math.nan


def c(*xs):
    """R's c(): concatenate scalars and vectors into one flat float vector."""
    parts = [np.ravel(np.asarray(x, dtype=float)) for x in xs]
    return np.concatenate(parts) if parts else np.zeros(0)


def rep(x, times=1, each=1, length_out=None):
    v = np.repeat(np.ravel(np.asarray(x, dtype=float)), each)
    v = np.tile(v, times)
    return v if length_out is None else np.resize(v, length_out)


def rng(a, b):
    """R's a:b (inclusive, counting down when b < a)."""
    a, b = int(a), int(b)
    return np.arange(a, b + 1) if b >= a else np.arange(a, b - 1, -1)


def seq_len(n):
    return np.arange(1, int(n) + 1)


def seq(from_, to, by=None, length_out=None):
    if length_out is not None:
        return np.linspace(from_, to, int(length_out))
    by = (1 if to >= from_ else -1) if by is None else by
    return np.arange(from_, to + by * 1e-9, by)


def length(x):
    if isinstance(x, (bytes, bytearray)):
        return len(x)
    if isinstance(x, (dict, list, tuple, str)):
        return 1 if isinstance(x, str) else len(x)
    return int(np.size(x))


def names(x):
    return list(x.keys()) if isinstance(x, dict) else None


def nchar(s):
    return len(s)


def as_numeric(x):
    return _r_vector(x)


def as_integer(x):
    return np.ravel(np.asarray(x)).astype(np.int64)


def is_na(x):
    return np.isnan(np.asarray(x, dtype=float))


def is_finite(x):
    return np.isfinite(np.asarray(x, dtype=float))


def is_infinite(x):
    return np.isinf(np.asarray(x, dtype=float))


exp, log, sqrt, tanh, prod, pmax, pmin = np.exp, np.log, np.sqrt, np.tanh, np.prod, np.maximum, np.minimum
mean = np.mean


def sd(x):
    return float(np.std(np.asarray(x, dtype=float), ddof=1))


def var(x):
    return float(np.var(np.asarray(x, dtype=float), ddof=1))


_rng = np.random.default_rng(0)


def set_seed(n):
    global _rng
    _rng = np.random.default_rng(n)


def rnorm(n, mean=0.0, sd=1.0):
    return _rng.normal(mean, sd, int(n))


def runif(n, min=0.0, max=1.0):
    return _rng.uniform(min, max, int(n))


def matrix(data, nrow=None, ncol=None, byrow=False):
    """R's matrix(): numpy (nrow, ncol), filled by column unless byrow."""
    v = np.ravel(np.asarray(data, dtype=float))
    if nrow is None:
        nrow = v.size // ncol
    if ncol is None:
        ncol = v.size // nrow
    return np.resize(v, nrow * ncol).reshape((nrow, ncol), order="C" if byrow else "F").view(RMatrix)


class RMatrix(np.ndarray):
    """An R matrix: its vector form (what ggmlR's flat results compare with) is column-major."""


def _r_vector(x):
    a = np.asarray(x, dtype=float)
    return np.ravel(a, order="F") if isinstance(x, RMatrix) else np.ravel(a)


def outer(x, y):
    """R's outer(x, y): the (len(x), len(y)) matrix x_i * y_j."""
    return np.outer(np.ravel(x), np.ravel(y)).view(RMatrix)


def ifelse(cond, yes, no):
    return np.where(cond, yes, no)


def as_vector(m):
    """R's as.vector: a matrix's column-major order."""
    return _r_vector(m)


def all_equal(actual, expected, tolerance):
    """testthat's numeric comparison: mean absolute difference relative to mean |expected|
    (absolute when that mean is below the tolerance); non-finite values must match exactly."""
    x, y = np.ravel(np.asarray(actual, dtype=float)), np.ravel(np.asarray(expected, dtype=float))
    if x.size != y.size:
        return False
    fin = np.isfinite(x) & np.isfinite(y)
    if not np.array_equal(np.isnan(x), np.isnan(y)) or not np.array_equal(x[np.isinf(x)], y[np.isinf(y)]) \
            or not np.array_equal(np.isinf(x), np.isinf(y)):
        return False
    if not fin.any():
        return True
    diff = np.mean(np.abs(x[fin] - y[fin]))
    scale = np.mean(np.abs(y[fin]))
    if np.isfinite(scale) and scale > tolerance:
        diff /= scale
    return diff < tolerance


def expect_equal(actual, expected, tolerance=None):
    """testthat's expect_equal. Without a tolerance, numbers compare at float32 resolution
    (rtol 1e-4 / atol 1e-5): ggmlR's expected values are R doubles, ggmlpy's results float32."""
    if isinstance(expected, (str, bool, type(None))) or isinstance(actual, (str, type(None))):
        assert actual == expected, f"{actual!r} != {expected!r}"
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), f"{actual!r} != {expected!r}"
        for k in expected:
            expect_equal(actual[k], expected[k], tolerance)
        return
    a, e = np.asarray(actual, dtype=float), np.asarray(expected, dtype=float)
    if a.size == e.size:  # R vectors carry no shape: compare in memory order (an R matrix's is column-major)
        a, e = _r_vector(actual), _r_vector(expected)
    assert a.shape == e.shape, f"lengths differ: {a.shape} vs {e.shape}"
    if tolerance is None:
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)
    else:
        assert all_equal(a, e, tolerance), f"not equal within {tolerance}:\n{a}\n{e}"


def expect_identical(actual, expected):
    if isinstance(expected, (str, bool, int, type(None))) and not isinstance(actual, np.ndarray):
        assert actual == expected, f"{actual!r} != {expected!r}"
    else:
        np.testing.assert_array_equal(np.ravel(actual), np.ravel(expected))


def _is_num(x):
    return isinstance(x, (float, int, np.floating, np.integer)) and not isinstance(x, (bool, np.bool_))


_R_TYPES = {
    "double": lambda x: _is_num(x) or (isinstance(x, np.ndarray) and x.dtype.kind in "fiu")
    or (isinstance(x, (list, tuple)) and all(_is_num(v) for v in x))
    or (isinstance(x, dict) and all(_is_num(v) for v in x.values())),  # an R named numeric vector
    "integer": lambda x: isinstance(x, (int, np.integer)) and not isinstance(x, bool)
    or (isinstance(x, np.ndarray) and x.dtype.kind in "iu"),
    "character": lambda x: isinstance(x, str) or (isinstance(x, (list, tuple)) and all(isinstance(s, str) for s in x)),
    "logical": lambda x: isinstance(x, (bool, np.bool_)) or (isinstance(x, np.ndarray) and x.dtype == bool),
    "list": lambda x: isinstance(x, (dict, list, tuple)),
    "closure": callable,
    # an R external pointer: a ggmlpy handle object (Context, Tensor, Graph, Backend, ...)
    "externalptr": lambda x: x is not None and (hasattr(x, "ptr") or hasattr(x, "_ptr")),
}


def expect_type(x, rtype):
    """testthat's expect_type, with R's types mapped to Python's (R double: any real number;
    ggmlpy returns Python ints where ggmlR returns doubles holding integers)."""
    assert _R_TYPES[rtype](x), f"{x!r} is not of R type {rtype}"


def expect_setequal(a, b):
    assert set(np.ravel(a).tolist()) == set(np.ravel(b).tolist())


def diff(x):
    return np.diff(np.ravel(np.asarray(x, dtype=float)))


def sort(x, decreasing=False):
    v = np.sort(np.ravel(x))
    return v[::-1] if decreasing else v


def rev(x):
    return np.ravel(x)[::-1]


def which_max(x):
    """R's which.max: 1-based."""
    return int(np.argmax(np.ravel(x))) + 1


def rlist(*xs, **kw):
    """R's list(): positional -> a Python list, named -> a dict."""
    return dict(kw) if kw else list(xs)
