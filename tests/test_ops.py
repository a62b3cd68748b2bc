"""Every op of ggmlpy.core.ops, computed by ggml on random inputs, against a numpy reference.

References are written from each op's definition, in numpy order: a C-contiguous array of
shape (d3, d2, d1, d0) is the ggml tensor ne = [d0, d1, d2, d3], so "along ne0" is axis -1.
"""
import math

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.core import ops

F32, F16, BF16, I32 = g.GGML_TYPE_F32, g.GGML_TYPE_F16, g.GGML_TYPE_BF16, g.GGML_TYPE_I32
rng = np.random.default_rng(20250325)


def rnd(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def ints(*shape, hi):
    return rng.integers(0, hi, shape).astype(np.int32)


class As:
    """An input created with a given ggml type (the array holds the values that type can store)."""

    def __init__(self, arr, type):
        self.type = type
        self.arr = arr.astype(np.float16).astype(np.float32) if type == F16 else arr


def compute(build, inputs, n_threads=2):
    """Create the inputs in a fresh context, build the op, compute it, return the result as numpy."""
    with g.ggml_init(64 << 20) as ctx:
        ts = [g.ggml_new_from_numpy(ctx, x.arr, x.type) if isinstance(x, As) else g.ggml_new_from_numpy(ctx, x)
              for x in inputs]
        y = build(ctx, *ts)
        g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y), n_threads=n_threads)
        return g.ggml_get_f32(y)


def close(out, ref, tol):
    ref = np.asarray(ref, dtype=np.float64)
    # ggml drops trailing ne = 1, i.e. numpy's leading 1s: (1, 3, 4) and (3, 4) are the same tensor
    assert _lead(out.shape) == _lead(ref.shape), f"shape {out.shape} != reference {ref.shape}"
    ref = ref.reshape(out.shape)
    finite = np.abs(ref[np.isfinite(ref)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale)


def _lead(shape):
    return tuple(shape[next((i for i, d in enumerate(shape) if d != 1), len(shape)):])


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _round_half_away(x):  # C roundf; numpy's round is half-to-even
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _with_ties():
    x = rnd(2, 3, 8, lo=-5, hi=5)
    x.flat[:8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, 3.0]
    return x


_erf = np.vectorize(math.erf)

# -- unary: name -> (reference, input, tol) ------------------------------------------------------
POS = (0.05, 4.0)
UNARY = {
    "abs": (np.abs, None, 0), "neg": (np.negative, None, 0), "sqr": (np.square, None, 1e-6),
    "sqrt": (np.sqrt, POS, 1e-6), "exp": (np.exp, None, 1e-5), "log": (np.log, POS, 1e-5),
    "sin": (np.sin, (-6, 6), 1e-5), "cos": (np.cos, (-6, 6), 1e-5),
    "step": (lambda x: (x > 0) * 1.0, None, 0), "sgn": (np.sign, None, 0),
    "relu": (lambda x: np.maximum(x, 0), None, 0),
    "gelu": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), (-12, 12), 2e-3),
    "gelu_erf": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), None, 1e-5),
    "gelu_quick": (lambda x: x * _sig(1.702 * x), None, 2e-3),
    "silu": (lambda x: x * _sig(x), None, 1e-5), "sigmoid": (_sig, None, 1e-5), "tanh": (np.tanh, None, 1e-5),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), None, 1e-5),
    "hardswish": (lambda x: x * np.clip((x + 3) / 6, 0, 1), (-5, 5), 1e-5),
    "hardsigmoid": (lambda x: np.clip((x + 3) / 6, 0, 1), (-5, 5), 1e-5),
    "softplus": (lambda x: np.where(x > 20, x, np.log1p(np.exp(x))), (-8, 25), 1e-5),
    "expm1": (np.expm1, None, 1e-5),
    "floor": (np.floor, "ties", 0), "ceil": (np.ceil, "ties", 0),
    "round": (_round_half_away, "ties", 0), "trunc": (np.trunc, "ties", 0),
}


def _unary_input(domain):
    if domain == "ties":
        return _with_ties()
    lo, hi = domain or (-3, 3)
    return rnd(3, 4, 9, lo=lo, hi=hi)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    ref, domain, tol = UNARY[name]
    x = _unary_input(domain)
    out = compute(getattr(g, f"ggml_{name}"), [x])
    close(out, ref(x.astype(np.float64)), tol)


@pytest.mark.parametrize("name", ["abs", "neg", "relu", "sqr", "sqrt", "exp", "silu", "tanh"])
def test_unary_f16(name):
    ref, domain, _ = UNARY[name]
    x = As(_unary_input(domain), F16)
    out = compute(getattr(g, f"ggml_{name}"), [x])
    close(out, ref(x.arr.astype(np.float64)), 2e-3)


# -- binary, with ggml's broadcasting of b (every dim of b divides a's: b is tiled) ---------------------
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
SHAPES = [((4, 5, 6), (4, 5, 6)), ((4, 5, 6), (6,)), ((4, 5, 6), (4, 1, 6)),
          ((4, 5, 6), (5, 1)), ((2, 3, 4, 6), (1, 3, 2, 6))]


def _tile_to(b, shape):
    b = b.reshape((1,) * (len(shape) - b.ndim) + b.shape)
    return np.tile(b, np.array(shape) // np.array(b.shape))


def _b_operand(shape):
    b = rnd(*shape)
    return np.where(np.abs(b) < 0.3, 0.5, b).astype(np.float32)  # keep division tame


@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}-{s[1]}")
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, shapes):
    a, b = rnd(*shapes[0]), _b_operand(shapes[1])
    out = compute(getattr(g, f"ggml_{name}"), [a, b])
    close(out, BINARY[name](a.astype(np.float64), _tile_to(b, a.shape)), 1e-6)


@pytest.mark.parametrize("b_type", [F16, F32], ids=["b_f16", "b_f32"])
@pytest.mark.parametrize("name", ["add", "mul"])
def test_binary_f16(name, b_type):
    a, b = As(rnd(3, 8), F16), As(rnd(3, 8), b_type)
    with g.ggml_init(1 << 20) as ctx:
        ta, tb = g.ggml_new_from_numpy(ctx, a.arr, F16), g.ggml_new_from_numpy(ctx, b.arr, b_type)
        y = getattr(g, f"ggml_{name}")(ctx, ta, tb)
        assert y.type == F16
        g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
        out = g.ggml_get_f32(y)
    ref = BINARY[name](a.arr, b.arr).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


# -- everything else: (ops covered, build, reference, inputs, tol) -------------------------------------------
def case(id, build, ref, inputs, tol=1e-5, post=None):
    return pytest.param(build, ref, inputs, tol, post, id=id)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _alibi_softmax(x, mask, scale, max_bias):
    n_head = x.shape[-3]
    n_log2 = 2 ** math.floor(math.log2(n_head))
    m0, m1 = 2 ** (-max_bias / n_log2), 2 ** (-max_bias / 2 / n_log2)
    slope = np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)])
    return _softmax(x * scale + slope[:, None, None] * mask)


def _norm(x, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)


def _rms_norm(x, eps=1e-5):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)


def _rms_norm_back(dy, x, eps=1e-5):
    s = 1 / np.sqrt((x**2).mean(-1, keepdims=True) + eps)
    return s * dy - x * s**3 * (x * dy).mean(-1, keepdims=True)


def _group_norm(x, n_groups, eps=1e-5):  # x (N, C, H, W): groups of channels
    n = x.shape[0]
    grouped = x.reshape(n, n_groups, -1)
    m = grouped.mean(-1, keepdims=True)
    v = ((grouped - m) ** 2).mean(-1, keepdims=True)
    return ((grouped - m) / np.sqrt(v + eps)).reshape(x.shape)


def _strided(x, ne, nb, offset):
    """The ggml view (ne, nb in bytes, offset in bytes) of x's f32 memory, in numpy order."""
    flat = np.ascontiguousarray(x, dtype=np.float32).ravel()[offset // 4:]
    return np.lib.stride_tricks.as_strided(flat, shape=tuple(reversed(ne)), strides=tuple(reversed(nb))).copy()


def _permute_ref(x, axes):
    """ggml_permute: axis i of a becomes axis axes[i]; worked out in ggml (ne) order, x.T."""
    inv = [0] * 4
    for i, ax in enumerate(axes):
        inv[ax] = i
    return np.transpose(x.T, inv).T


def _repeat_back(a, shape):
    """Sum the tiles of a down to `shape` (the adjoint of np.tile)."""
    reps = np.array(a.shape) // np.array(shape)
    inter = [v for pair in zip(reps, shape) for v in pair]
    return a.reshape(inter).sum(axis=tuple(range(0, 2 * a.ndim, 2)))


def _get_rows_back(grad, idx, n_rows):
    out = np.zeros((n_rows, grad.shape[-1]))
    np.add.at(out, idx, grad)
    return out


def _acc(a, b, nb, offset):
    out = a.astype(np.float64).ravel().copy()
    view = np.lib.stride_tricks.as_strided(out[offset // 4:], shape=tuple(reversed(b.T.shape)),
                                           strides=tuple(2 * s for s in reversed(nb[:b.ndim])))
    view += b.reshape(view.shape)
    return out.reshape(a.shape)


def _im2col(x, kh, kw, s0, s1, p0, p1, d0, d1):
    """x (N, C, H, W) -> (N, OH, OW, C*KH*KW), columns ordered (C, KH, KW) with KW fastest."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p1 - d1 * (kh - 1) - 1) // s1 + 1, (w + 2 * p0 - d0 * (kw - 1) - 1) // s0 + 1
    xp = np.pad(x, ((0, 0), (0, 0), (p1, p1), (p0, p0)))
    out = np.empty((n, oh, ow, c, kh, kw))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * d1: i * d1 + s1 * (oh - 1) + 1: s1, j * d0: j * d0 + s0 * (ow - 1) + 1: s0]
            out[..., i, j] = win.transpose(0, 2, 3, 1)
    return out.reshape(n, oh, ow, c * kh * kw)


def _f16(x):
    return x.astype(np.float16).astype(np.float64)


def _conv_2d(k, x, s0, s1, p0, p1, d0, d1):  # k (OC, C, KH, KW), x (N, C, H, W) -> (N, OC, OH, OW)
    # ggml_conv_2d runs im2col into f16 and so multiplies in f16: round both inputs the same way
    k, x = _f16(k), _f16(x)
    cols = _im2col(x, k.shape[2], k.shape[3], s0, s1, p0, p1, d0, d1)
    return (cols @ k.reshape(k.shape[0], -1).T).transpose(0, 3, 1, 2)


def _pool_1d(x, op, k, s, p):  # padding is skipped: avg divides by the in-range count
    n = x.shape[-1]
    out = []
    for o in range((n + 2 * p - k) // s + 1):
        win = x[..., max(o * s - p, 0): min(o * s - p + k, n)]
        out.append(win.max(-1) if op == "max" else win.mean(-1))
    return np.stack(out, -1)


def _pool_2d(x, op, k0, k1, s0, s1, p0, p1):  # avg divides by k0*k1, padding included
    h, w = x.shape[-2:]
    oh, ow = (h + 2 * p1 - k1) // s1 + 1, (w + 2 * p0 - k0) // s0 + 1
    out = np.empty(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = x[..., max(i * s1 - p1, 0): max(i * s1 - p1 + k1, 0), max(j * s0 - p0, 0): max(j * s0 - p0 + k0, 0)]
            out[..., i, j] = win.max((-1, -2)) if op == "max" else win.sum((-1, -2)) / (k0 * k1)
    return out


def _upscale(x, sf, mode):
    h, w = x.shape[-2:]
    if mode == 0:
        return x[..., np.arange(h * sf) // sf, :][..., np.arange(w * sf) // sf]

    def axis(n):  # half-pixel centres, clamped at the borders (PyTorch align_corners=False)
        pos = (np.arange(n * sf) + 0.5) / sf - 0.5
        i0 = np.clip(np.floor(pos).astype(int), 0, n - 1)
        i1 = np.clip(i0 + 1, 0, n - 1)
        return i0, i1, np.clip(pos - i0, 0, 1)

    y0, y1, dy = axis(h)
    x0, x1, dx = axis(w)
    dy = dy[:, None]
    rows0, rows1 = x[..., y0, :], x[..., y1, :]
    return ((rows0[..., x0] * (1 - dx) + rows0[..., x1] * dx) * (1 - dy)
            + (rows1[..., x0] * (1 - dx) + rows1[..., x1] * dx) * dy)


def _rope(x, pos, n_dims, mode, base=10000.0, ff=None):  # x (T, H, D), pos (T,)
    i = np.arange(n_dims // 2)
    theta = pos[:, None] * base ** (-2.0 * i / n_dims)
    if ff is not None:
        theta = theta / ff
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    i0, i1 = (2 * i, 2 * i + 1) if mode == 0 else (i, i + n_dims // 2)
    out = x.astype(np.float64).copy()
    out[..., i0] = x[..., i0] * c - x[..., i1] * s
    out[..., i1] = x[..., i0] * s + x[..., i1] * c
    return out


def _attention(q, k, v, mask, scale):  # q (B,H,nq,D), k (B,Hkv,nkv,D), v (B,Hkv,nkv,Dv) -> (B,nq,H,Dv)
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = scale * q @ np.swapaxes(k, -1, -2)
    if mask is not None:
        s = s + mask[: q.shape[2]]
    return (_softmax(s) @ v).transpose(0, 2, 1, 3)


def _diag_mask(x, n_past):
    rows, cols = np.indices(x.shape[-2:])
    return np.where(cols > n_past + rows, -np.inf, x)


def _top_k_sets(x, k):
    return np.sort(np.argsort(-x, -1)[..., :k], -1)


# Inputs are drawn once, at collection time, from the seeded generator.
X3, M34, IDX = rnd(2, 4, 6), rnd(4, 6), np.array([3, 0, 5, 3], np.int32)
A_MM, B_MM = rnd(5, 7), rnd(3, 7)            # ne [K=7, M=5], [K=7, N=3]
A_BMM, B_BMM = rnd(1, 2, 5, 7), rnd(3, 4, 3, 7)
A_BIG, B_BIG = rnd(64, 128), rnd(32, 128)
SMX = rnd(3, 4, 6)
Y_SM = _softmax(rnd(3, 7).astype(np.float64)).astype(np.float32)
MASK = np.where(rng.random((4, 6)) < 0.3, -np.inf, 0).astype(np.float32)
MASK[:, 0] = 0  # keep every row non-empty
X4 = rnd(2, 3, 4, 5)
IMG, KER = rnd(2, 3, 6, 7), rnd(4, 3, 3, 2)  # (N, C, H, W), (OC, C, KH, KW)
GN = rnd(2, 6, 3, 4)
ROPE_X, ROPE_POS, FF = rnd(3, 2, 8), np.array([0, 5, 17], np.int32), rng.uniform(1, 3, 4).astype(np.float32)
Q, K, V = rnd(1, 4, 3, 8), rnd(1, 2, 5, 8), rnd(1, 2, 5, 6)
FA_MASK = np.where(rng.random((3, 5)) < 0.3, -np.inf, 0).astype(np.float32)
FA_MASK[:, 0] = 0
EQ_A, EQ_B = ints(3, 8, hi=3), ints(3, 8, hi=3)

CASES = [
    case("scale", lambda c, a: g.ggml_scale(c, a, -0.75), lambda a: a * -0.75, [X3]),
    case("clamp", lambda c, a: g.ggml_clamp(c, a, -0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), [X3]),
    case("leaky_relu", lambda c, a: g.ggml_leaky_relu(c, a, 0.1), lambda a: np.where(a > 0, a, 0.1 * a), [X3]),
    # matrix products
    case("mul_mat", g.ggml_mul_mat, lambda a, b: b.astype(np.float64) @ a.T, [A_MM, B_MM], 1e-5),
    case("mul_mat-broadcast", g.ggml_mul_mat,
         lambda a, b: b @ np.swapaxes(np.repeat(np.repeat(a.astype(np.float64), 3, 0), 2, 1), -1, -2),
         [A_BMM, B_BMM], 1e-5),
    case("mul_mat-big", g.ggml_mul_mat, lambda a, b: b.astype(np.float64) @ a.T, [A_BIG, B_BIG], 1e-4),
    case("mul_mat-f16", g.ggml_mul_mat, lambda a, b: b.astype(np.float64) @ a.T, [As(A_BIG, F16), B_BIG], 1e-2),
    case("out_prod", g.ggml_out_prod, lambda a, b: b.T.astype(np.float64) @ a, [rnd(7, 5), rnd(7, 3)], 1e-5),
    # softmax
    case("soft_max", g.ggml_soft_max, _softmax, [SMX]),
    case("soft_max_ext", lambda c, a, m: g.ggml_soft_max_ext(c, a, m, 0.7),
         lambda a, m: _softmax(a * 0.7 + m), [SMX, MASK]),
    case("soft_max_ext-f16mask-long", lambda c, a, m: g.ggml_soft_max_ext(c, a, m, 1.3),
         lambda a, m: _softmax(a * 1.3 + m[:4]), [SMX, As(np.vstack([MASK, MASK[:2]]), F16)]),
    case("soft_max_ext-alibi", lambda c, a, m: g.ggml_soft_max_ext(c, a, m, 0.5, 8.0),
         lambda a, m: _alibi_softmax(a, m, 0.5, 8.0), [SMX, MASK]),
    case("soft_max_ext_back", lambda c, dy, y: g.ggml_soft_max_ext_back(c, dy, y, 0.5),
         lambda dy, y: 0.5 * y * (dy - (y * dy).sum(-1, keepdims=True)), [rnd(3, 7), Y_SM]),
    # norms
    case("norm", g.ggml_norm, _norm, [X3]),
    case("rms_norm", g.ggml_rms_norm, _rms_norm, [X3]),
    case("rms_norm_back", g.ggml_rms_norm_back, _rms_norm_back, [rnd(3, 6), rnd(3, 6)]),
    case("l2_norm", lambda c, a: g.ggml_l2_norm(c, a, 1e-6),
         lambda a: a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-6), [X3]),
    case("group_norm", lambda c, a: g.ggml_group_norm(c, a, 3), lambda a: _group_norm(a, 3), [GN]),
    case("silu_back", g.ggml_silu_back, lambda dy, x: dy * _sig(x) * (1 + x * (1 - _sig(x))), [rnd(3, 6), rnd(3, 6)]),
    # reductions
    case("sum", g.ggml_sum, lambda a: a.sum(dtype=np.float64).reshape(1), [X3]),
    case("sum_rows", g.ggml_sum_rows, lambda a: a.sum(-1, keepdims=True), [X3]),
    case("mean", g.ggml_mean, lambda a: a.mean(-1, keepdims=True), [X3]),
    case("argmax", g.ggml_argmax, lambda a: a.argmax(-1), [rnd(5, 9)], 0),
    case("count_equal", g.ggml_count_equal, lambda a, b: np.array([(a == b).sum()]), [EQ_A, EQ_B], 0),
    case("count_equal-4d", g.ggml_count_equal, lambda a, b: np.array([(a == b).sum()]),
         [ints(2, 3, 4, 2, hi=2), ints(2, 3, 4, 2, hi=2)], 0),
    # reshapes, views, copies
    case("reshape_1d", lambda c, a: g.ggml_reshape_1d(c, a, 48), lambda a: a.ravel(), [X3], 0),
    case("reshape_2d", lambda c, a: g.ggml_reshape_2d(c, a, 8, 6), lambda a: a.reshape(6, 8), [X3], 0),
    case("reshape_3d", lambda c, a: g.ggml_reshape_3d(c, a, 3, 4, 4), lambda a: a.reshape(4, 4, 3), [X3], 0),
    case("reshape_4d", lambda c, a: g.ggml_reshape_4d(c, a, 2, 3, 4, 2), lambda a: a.reshape(2, 4, 3, 2), [X3], 0),
    case("reshape_5d", lambda c, a: g.ggml_reshape_5d(c, a, 2, 3, 2, 2, 2), lambda a: a.reshape(2, 2, 2, 3, 2), [X3], 0),
    case("reshape", g.ggml_reshape, lambda a, b: a.reshape(b.shape), [X3, rnd(8, 6)], 0),
    case("view_1d", lambda c, a: g.ggml_view_1d(c, a, 10, 4 * 7), lambda a: a.ravel()[7:17], [X3], 0),
    case("view_2d", lambda c, a: g.ggml_cont(c, g.ggml_view_2d(c, a, 3, 5, 36, 8)),
         lambda a: _strided(a, [3, 5], [4, 36], 8), [X3], 0),
    case("view_3d", lambda c, a: g.ggml_cont(c, g.ggml_view_3d(c, a, 2, 3, 2, 24, 96, 4)),
         lambda a: _strided(a, [2, 3, 2], [4, 24, 96], 4), [X3], 0),
    case("view_4d", lambda c, a: g.ggml_cont(c, g.ggml_view_4d(c, a, 2, 2, 2, 2, 20, 60, 240, 4)),
         lambda a: _strided(a, [2, 2, 2, 2], [4, 20, 60, 240], 4), [X4], 0),
    case("permute", lambda c, a: g.ggml_cont(c, g.ggml_permute(c, a, 2, 0, 3, 1)),
         lambda a: _permute_ref(a, [2, 0, 3, 1]), [X4], 0),
    case("transpose", lambda c, a: g.ggml_cont(c, g.ggml_transpose(c, a)), lambda a: np.swapaxes(a, -1, -2), [X3], 0),
    case("cont", lambda c, a: g.ggml_cont(c, g.ggml_permute(c, a, 1, 2, 0, 3)),
         lambda a: _permute_ref(a, [1, 2, 0, 3]), [X4], 0),
    case("dup", g.ggml_dup, lambda a: a, [X3], 0),
    case("cpy-f32-f16", lambda c, a, b: g.ggml_cpy(c, a, b),
         lambda a, b: a.astype(np.float16).astype(np.float32).reshape(b.shape), [X3, As(rnd(6, 8), F16)], 0),
    case("cast-f32-f16", lambda c, a: g.ggml_cast(c, a, F16), lambda a: a.astype(np.float16).astype(np.float32),
         [X3], 0),
    case("cast-f16-f32", lambda c, a: g.ggml_cast(c, a, F32), lambda a: a, [As(X3, F16)], 0),
    # assembling tensors
    *[case(f"concat-dim{d}", lambda c, a, b, d=d: g.ggml_concat(c, a, b, d),
           lambda a, b, d=d: np.concatenate([a, b], 3 - d),  # ggml dim d is numpy axis 3 - d
           [X4, rnd(*[2 if i == 3 - d else n for i, n in enumerate(X4.shape)])], 0)
      for d in range(4)],
    case("get_rows", g.ggml_get_rows, lambda a, i: a[i], [rnd(6, 5), IDX], 0),
    case("get_rows-3d", g.ggml_get_rows, lambda a, i: np.stack([a[k][i[k]] for k in range(2)]),
         [rnd(2, 6, 5), ints(2, 4, hi=6)], 0),
    case("get_rows-f16", g.ggml_get_rows, lambda a, i: a[i], [As(rnd(6, 5), F16), IDX], 0),
    case("get_rows_back", lambda c, a, i, r: g.ggml_get_rows_back(c, a, i, r),
         lambda a, i, r: _get_rows_back(a, i, r.shape[0]), [rnd(4, 5), IDX, rnd(6, 5)]),
    case("repeat", g.ggml_repeat, lambda a, b: _tile_to(a, b.shape), [rnd(1, 2, 3), rnd(2, 4, 3)], 0),
    case("repeat_back", g.ggml_repeat_back, lambda a, b: _repeat_back(a, b.shape), [rnd(2, 4, 6), rnd(1, 2, 3)]),
    case("pad", lambda c, a: g.ggml_pad(c, a, 2, 1, 3, 0), lambda a: np.pad(a, ((0, 3), (0, 1), (0, 2))), [X3], 0),
    case("acc", lambda c, a, b: g.ggml_acc(c, a, b, 24, 96, 192, 4 * (6 + 2)),
         lambda a, b: _acc(a, b, [4, 24, 96, 192], 4 * (6 + 2)), [X3, rnd(2, 3)]),
    # convolution, pooling, resampling
    case("im2col", lambda c, k, x: g.ggml_im2col(c, k, x, 2, 1, 1, 0, 1, 2),
         lambda k, x: _im2col(x, 3, 2, 2, 1, 1, 0, 1, 2), [KER, IMG]),
    case("conv_2d", lambda c, k, x: g.ggml_conv_2d(c, k, x, 1, 2, 1, 1, 1, 1),
         lambda k, x: _conv_2d(k, x, 1, 2, 1, 1, 1, 1), [KER, IMG], 1e-4),
    case("conv_2d-dilated", lambda c, k, x: g.ggml_conv_2d(c, k, x, 2, 1, 0, 2, 2, 1),
         lambda k, x: _conv_2d(k, x, 2, 1, 0, 2, 2, 1), [KER, IMG], 1e-4),
    *[case(f"pool_1d-{op}", lambda c, a, op=op: g.ggml_pool_1d(c, a, op, 3, 2, 1),
           lambda a, op=op: _pool_1d(a, op, 3, 2, 1), [rnd(3, 10)]) for op in ("max", "avg")],
    *[case(f"pool_2d-{op}", lambda c, a, op=op: g.ggml_pool_2d(c, a, op, 3, 2, 2, 2, 1, 1),
           lambda a, op=op: _pool_2d(a, op, 3, 2, 2, 2, 1, 1), [rnd(2, 7, 8)]) for op in ("max", "avg")],
    case("upscale-nearest", lambda c, a: g.ggml_upscale(c, a, 2, 0), lambda a: _upscale(a, 2, 0), [X3], 0),
    case("upscale-bilinear", lambda c, a: g.ggml_upscale(c, a, 3, 1), lambda a: _upscale(a, 3, 1), [X3]),
    # attention
    *[case(f"rope_ext-mode{m}-ndims{n}", lambda c, a, p, m=m, n=n: g.ggml_rope_ext(c, a, p, None, n, m),
           lambda a, p, m=m, n=n: _rope(a, p, n, m), [ROPE_X, ROPE_POS], 1e-4)
      for m in (0, 2) for n in (8, 4)],
    case("rope_ext-freq_factors", lambda c, a, p, f: g.ggml_rope_ext(c, a, p, f, 8, 2, freq_base=500.0),
         lambda a, p, f: _rope(a, p, 8, 2, 500.0, f), [ROPE_X, ROPE_POS, FF], 1e-4),
    case("flash_attn_ext", lambda c, q, k, v: g.ggml_flash_attn_ext(c, q, k, v, None, 0.35),
         lambda q, k, v: _attention(q, k, v, None, 0.35), [Q, K, V], 1e-4),
    case("flash_attn_ext-f16kv-mask", lambda c, q, k, v, m: g.ggml_flash_attn_ext(c, q, k, v, m, 0.35),
         lambda q, k, v, m: _attention(q, k, v, m, 0.35), [Q, As(K, F16), As(V, F16), As(FA_MASK, F16)], 5e-3),
    *[case(f"diag_mask_inf-past{n}", lambda c, a, n=n: g.ggml_diag_mask_inf(c, a, n),
           lambda a, n=n: _diag_mask(a, n), [rnd(2, 4, 5)], 0) for n in (0, 2)],
    # sorting
    case("argsort-asc", lambda c, a: g.ggml_argsort(c, a, 0), lambda a: np.argsort(a, -1), [rnd(3, 7)], 0),
    case("argsort-desc", lambda c, a: g.ggml_argsort(c, a, 1), lambda a: np.argsort(-a, -1), [rnd(3, 7)], 0),
    case("top_k", lambda c, a: g.ggml_top_k(c, a, 4), lambda a: _top_k_sets(a, 4), [rnd(3, 10)], 0,
         post=lambda out: np.sort(out, -1)),
]


@pytest.mark.parametrize("build, ref, inputs, tol, post", CASES)
def test_op(build, ref, inputs, tol, post):
    out = compute(build, inputs)
    if post is not None:
        out = post(out)
    arrays = [x.arr if isinstance(x, As) else x for x in inputs]
    close(out, ref(*[a.astype(np.float64) if a.dtype == np.float32 else a for a in arrays]), tol)


# ggmlR's later additions: each computed against numpy in test_lowlevel_ext.py, and with every *_inplace
# variant driven with bad arguments by test_fuzz.py
LATER = {f"ggml_{n}" for n in (
    "add1 add_rel_pos arange conv_1d conv_1d_dw conv_2d_direct conv_2d_dw conv_2d_dw_direct conv_transpose_1d "
    "conv_transpose_2d_p0 diag diag_mask_zero flash_attn_back geglu geglu_erf geglu_erf_split geglu_quick "
    "geglu_quick_split geglu_split get_rel_pos glu glu_split mul_mat_id pad_reflect_1d reglu reglu_split roll rope "
    "rope_ext_back rope_multi set set_1d set_2d swiglu swiglu_split timestep_embedding win_part win_unpart").split()}


def test_every_op_is_covered():
    tested = {f"ggml_{n}" for n in UNARY} | {f"ggml_{n}" for n in BINARY}
    tested |= {f"ggml_{p.id.split('-')[0]}" for p in CASES}
    assert {n for n in ops.OPS if not n.endswith("_inplace")} - LATER - tested == set()


# -- multi-threading and dtypes -------------------------------------------------------------------------------
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_threads_agree(n_threads):
    out = compute(g.ggml_mul_mat, [A_BIG, B_BIG], n_threads=n_threads)
    close(out, B_BIG.astype(np.float64) @ A_BIG.T, 1e-4)


def _bf16_round(x):  # round to nearest even on the top 16 bits
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("type, rounding", [(F16, lambda x: x.astype(np.float16).astype(np.float32)),
                                            (BF16, _bf16_round), (F32, lambda x: x)], ids=["f16", "bf16", "f32"])
def test_set_get_round_trip(type, rounding):
    x = rnd(4, 6, lo=-100, hi=100)
    with g.ggml_init(1 << 20) as ctx:
        t = g.ggml_new_tensor_2d(ctx, type, 6, 4)
        g.ggml_set_f32(t, x)
        out = g.ggml_get_f32(t)
    np.testing.assert_array_equal(out, rounding(x))


@pytest.mark.parametrize("type", [F16, BF16], ids=["f16", "bf16"])
def test_cpy_converts_like_set(type):
    """ggml's own f32 -> f16/bf16 conversion (in cpy) agrees with ggmlpy's host-side one."""
    x = rnd(5, 7, lo=-50, hi=50)
    with g.ggml_init(1 << 20) as ctx:
        a = g.ggml_new_from_numpy(ctx, x)
        b = g.ggml_new_tensor_2d(ctx, type, 7, 5)
        y = g.ggml_cpy(ctx, a, b)
        g.ggml_graph_compute(ctx, g.ggml_build_forward_expand(ctx, y))
        via_ggml = g.ggml_get_f32(y)
        g.ggml_set_f32(b, x)
        np.testing.assert_array_equal(via_ggml, g.ggml_get_f32(b))
