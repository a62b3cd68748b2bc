"""The ag_* op table shared by the reverse-mode and forward-mode tests:
(name, fn on ag tensors, numpy reference, input arrays)."""
import math

import numpy as np

import ggmlpy as g
from ggmlpy.autograd.engine import apply
from llama_reference import rms_norm, rope

rng = np.random.default_rng(7)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape)


def away(x, *kinks, gap=0.05):
    """Move entries off the kinks of piecewise functions, where finite differences are meaningless."""
    for k in kinks:
        near = np.abs(x - k) < gap
        x[near] = k + np.copysign(gap, x[near] - k + 1e-12)
    return x


def softmax_cols(x):
    e = np.exp(x - x.max(axis=0))
    return e / e.sum(axis=0)


# (name, fn on ag tensors, numpy reference, input arrays)
UNARY = [
    ("relu", g.ag_relu, lambda x: np.maximum(x, 0), [away(r(4, 3), 0)]),
    ("sigmoid", g.ag_sigmoid, lambda x: 1 / (1 + np.exp(-x)), [r(4, 3)]),
    ("tanh", g.ag_tanh, np.tanh, [r(4, 3)]),
    ("exp", g.ag_exp, np.exp, [r(4, 3)]),
    ("log", g.ag_log, np.log, [r(4, 3, lo=0.5, hi=2)]),
    ("sqrt", g.ag_sqrt, np.sqrt, [r(4, 3, lo=0.5, hi=2)]),
    ("neg", g.ag_neg, np.negative, [r(4, 3)]),
    ("abs", g.ag_abs, np.abs, [away(r(4, 3), 0)]),
    ("gelu", g.ag_gelu, lambda x: x * 0.5 * (1 + np.vectorize(math.erf)(x / np.sqrt(2))), [r(4, 3)]),
    ("silu", g.ag_silu, lambda x: x / (1 + np.exp(-x)), [r(4, 3)]),
    ("softmax", g.ag_softmax, softmax_cols, [r(5, 3)]),
    ("scale", lambda x: g.ag_scale(x, -1.7), lambda x: -1.7 * x, [r(4, 3)]),
    ("pow3", lambda x: g.ag_pow(x, 3), lambda x: x ** 3, [r(4, 3)]),
    ("pow1.5", lambda x: g.ag_pow(x, 1.5), lambda x: x ** 1.5, [r(4, 3, lo=0.5, hi=2)]),
    ("clamp", lambda x: g.ag_clamp(x, -0.5, 0.4), lambda x: np.clip(x, -0.5, 0.4), [away(r(5, 4), -0.5, 0.4)]),
    ("sum", g.ag_sum, lambda x: x.sum().reshape(1, 1), [r(4, 3)]),
    ("sum1", lambda x: g.ag_sum(x, 1), lambda x: x.sum(1, keepdims=True), [r(4, 3)]),
    ("sum2", lambda x: g.ag_sum(x, 2), lambda x: x.sum(0, keepdims=True), [r(4, 3)]),
    ("mean", g.ag_mean, lambda x: x.mean().reshape(1, 1), [r(4, 3)]),
    ("mean1", lambda x: g.ag_mean(x, 1), lambda x: x.mean(1, keepdims=True), [r(4, 3)]),
    ("transpose", g.ag_transpose, lambda x: x.T, [r(4, 3)]),
    ("reshape", lambda x: g.ag_reshape(x, 2, 6), lambda x: x.reshape(2, 6, order="F"), [r(4, 3)]),
    ("slice", lambda x: g.ag_slice(x, slice(1, 3), slice(0, 2)), lambda x: x[1:3, 0:2], [r(4, 3)]),
    ("layer_norm", g.ag_layer_norm, lambda x: (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), [r(5, 3)]),
    ("rms_norm", g.ag_rms_norm, lambda x: rms_norm(x, 1e-5), [r(5, 3)]),
    # x [head_dim, n_head, T(, B)]; positions 0 .. T - 1 made in the graph, or given
    ("rope_normal", g.ag_rope, rope, [r(6, 2, 4)]),
    ("rope_neox", lambda x: g.ag_rope(x, mode=2), lambda x: rope(x, mode=2), [r(6, 2, 4)]),
    ("rope_partial_pos", lambda x: g.ag_rope(x, [3, 0, 7], n_dims=4, freq_base=100.0, freq_scale=0.5),
     lambda x: rope(x, [3, 0, 7], 4, 0, 100.0, 0.5), [r(6, 2, 3, 2)]),
    ("rope_neox_pos", lambda x: g.ag_rope(x, [5, 1], mode=2, freq_base=50.0),
     lambda x: rope(x, [5, 1], mode=2, freq_base=50.0), [r(4, 3, 2, 2)]),
]
BINARY = [
    ("matmul", g.ag_matmul, lambda a, b: a @ b, [r(3, 4), r(4, 2)]),
    ("add", g.ag_add, np.add, [r(3, 4), r(3, 4)]),
    ("add_col", g.ag_add, np.add, [r(3, 4), r(3, 1)]),
    ("add_row", g.ag_add, np.add, [r(3, 4), r(1, 4)]),
    ("sub_row", g.ag_sub, np.subtract, [r(3, 4), r(1, 4)]),
    ("mul", g.ag_mul, np.multiply, [r(3, 4), r(3, 4)]),
    ("mul_lhs_col", g.ag_mul, np.multiply, [r(3, 1), r(3, 4)]),
    ("div", g.ag_div, np.divide, [r(3, 4), r(3, 4, lo=0.5, hi=2)]),
    ("div_row", g.ag_div, np.divide, [r(3, 4), r(1, 4, lo=0.5, hi=2)]),
    ("concat1", lambda a, b: g.ag_concat(a, b, 1), lambda a, b: np.vstack([a, b]), [r(2, 3), r(4, 3)]),
    ("concat2", lambda a, b: g.ag_concat(a, b, 2), lambda a, b: np.hstack([a, b]), [r(2, 3), r(2, 1)]),
    ("mse", g.ag_mse_loss, lambda p, t: np.mean((p - t) ** 2).reshape(1, 1), [r(3, 4), r(3, 4)]),
    ("cross_entropy", g.ag_cross_entropy_loss,
     lambda p, t: (-np.sum(t * np.log(np.clip(p, 1e-7, 1 - 1e-7))) / p.shape[1]).reshape(1, 1),
     [r(4, 3, lo=0.1, hi=0.9), softmax_cols(r(4, 3))]),
    ("softmax_ce", g.ag_softmax_cross_entropy_loss,
     lambda x, t: (-np.sum(t * np.log(np.maximum(softmax_cols(x), 1e-7))) / x.shape[1]).reshape(1, 1),
     [r(4, 3), np.eye(4)[:, [0, 2, 3]]]),
]
def _away_from_zero_sum(shape, bias):
    """An input whose sum with `bias` (broadcast) keeps clear of relu's kink."""
    return away(r(*shape), 0) - bias


_BIAS = r(3, 1)
# Primitives behind layers rather than ag_* functions: ag_linear's bias and relu are one.
BINARY.append(("add_relu", lambda a, b: apply("add_relu", a, b), lambda a, b: np.maximum(a + b, 0),
               [_away_from_zero_sum((3, 4), _BIAS), _BIAS]))
# Losses whose second argument (the target) gets no gradient, as in ggmlR.
TARGETS = {"mse", "cross_entropy", "softmax_ce"}
CASES = UNARY + BINARY


