"""The ops and utilities added for ggmlR's low-level API (the ops package, tensor_info.py,
tensor_api.py, graph.py, backend_api.py, ...), each against numpy."""
import math

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import GGMLError

RNG = np.random.default_rng(1234)
F32 = g.GGML_TYPE_F32


@pytest.fixture
def ctx():
    c = g.ggml_init(64 * 1024 * 1024)
    yield c
    g.ggml_free(c)


def run(ctx, *ts):
    """Compute every tensor in ts in one graph; numpy results (shape = ne reversed)."""
    gf = g.ggml_new_graph(ctx)
    for t in ts:
        g.ggml_build_forward_expand(gf, t)
    g.ggml_graph_compute(ctx, gf)
    out = [g.ggml_get_f32(t) for t in ts]
    return out[0] if len(out) == 1 else out


def T(ctx, a, type=None):
    return g.ggml_new_from_numpy(ctx, np.asarray(a, np.float32 if type is None else None), type)


def close(a, b, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == b.size:  # ggml drops trailing ne = 1, so numpy shapes may lack leading 1s
        a = a.reshape(b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / math.sqrt(2)))


def silu(x):
    return x / (1 + np.exp(-x))


ACTS = {"reglu": lambda x: np.maximum(x, 0), "geglu": gelu_tanh, "swiglu": silu, "geglu_erf": gelu_erf,
        "geglu_quick": lambda x: x / (1 + np.exp(-1.702 * x))}


# -- GLU ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ACTS))
def test_glu_family_against_numpy(ctx, name):
    x = RNG.normal(size=(3, 8)).astype(np.float32)      # ne = [8, 3]: halves of ne0
    a, b = x[:, :4], x[:, 4:]
    tol = 2e-3 if name.startswith("geglu") and name != "geglu_erf" else 1e-4  # ggml's gelu tables are f16
    fused = getattr(g, f"ggml_{name}")(ctx, T(ctx, x))
    split = getattr(g, f"ggml_{name}_split")(ctx, T(ctx, a), T(ctx, b))
    op = getattr(g, f"GGML_GLU_OP_{name.upper()}")
    swapped = g.ggml_glu(ctx, T(ctx, x), op, True)
    generic = g.ggml_glu_split(ctx, T(ctx, a), T(ctx, b), op)
    f, s, sw, ge = run(ctx, fused, split, swapped, generic)
    close(f, ACTS[name](a) * b, tol)
    close(s, ACTS[name](a) * b, tol)
    close(ge, ACTS[name](a) * b, tol)
    close(sw, ACTS[name](b) * a, tol)  # swapped: the second half is the gate


def test_glu_checks(ctx):
    with pytest.raises(GGMLError, match="even"):
        g.ggml_swiglu(ctx, T(ctx, np.ones((2, 5))))
    with pytest.raises(GGMLError, match="same shape"):
        g.ggml_swiglu_split(ctx, T(ctx, np.ones((2, 4))), T(ctx, np.ones((2, 3))))
    with pytest.raises(GGMLError, match="GGML_GLU_OP"):
        g.ggml_glu(ctx, T(ctx, np.ones((2, 4))), 99)


# -- RoPE -------------------------------------------------------------------------------------------------
def rope_ref(x, pos, n_dims, neox, base=10000.0):
    """x numpy (n_tokens, n_head, head_dim); rotation pairs (2i, 2i+1), or (i, i + n_dims/2) for neox."""
    out = x.astype(np.float64).copy()
    half = n_dims // 2
    for t, p in enumerate(pos):
        for i in range(half):
            th = p * base ** (-2.0 * i / n_dims)
            c, s = math.cos(th), math.sin(th)
            j0, j1 = (i, i + half) if neox else (2 * i, 2 * i + 1)
            x0, x1 = x[t, :, j0].astype(np.float64), x[t, :, j1].astype(np.float64)
            out[t, :, j0] = x0 * c - x1 * s
            out[t, :, j1] = x0 * s + x1 * c
    return out


@pytest.mark.parametrize("mode", [0, 2])
def test_rope_and_rope_ext_back_against_numpy(ctx, mode):
    x = RNG.normal(size=(3, 2, 8)).astype(np.float32)   # ne = [head_dim 8, n_head 2, n_tokens 3]
    pos = np.array([0, 1, 5], np.int32)
    p = g.ggml_new_from_numpy(ctx, pos)
    y = g.ggml_rope(ctx, T(ctx, x), p, 6, mode)        # n_dims 6 < head_dim: the rest passes through
    back = g.ggml_rope_ext_back(ctx, y, p, None, 6, mode)
    yy, bb = run(ctx, y, back)
    close(yy, rope_ref(x, pos, 6, neox=mode == 2), 1e-4)
    close(bb, x, 1e-4)                                  # the gradient rotates back


def test_rope_inplace_writes_into_its_input(ctx):
    x = RNG.normal(size=(2, 1, 4)).astype(np.float32)
    a = T(ctx, x)
    y = g.ggml_rope_inplace(ctx, a, g.ggml_new_from_numpy(ctx, np.array([1, 2], np.int32)), 4, 0)
    out = run(ctx, y)
    close(out, rope_ref(x, [1, 2], 4, False), 1e-4)
    close(g.ggml_get_f32(a), out)


def test_rope_multi_matches_neox_when_all_sections_share_positions(ctx):
    """M-RoPE rotates neox-style pairs; with the same position in all four components it is plain neox rope."""
    x = RNG.normal(size=(4, 2, 8)).astype(np.float32)
    pos = np.array([0, 2, 3, 7], np.int32)
    y = g.ggml_rope_multi(ctx, T(ctx, x), g.ggml_new_from_numpy(ctx, np.tile(pos, 4)), None, 8, [2, 1, 1, 0],
                          g.GGML_ROPE_TYPE_MROPE)
    close(run(ctx, y), rope_ref(x, pos, 8, neox=True), 1e-4)


def test_rope_multi_sections_pick_position_components(ctx):
    """Pair i uses component t/h/w by section; a different h position changes only h's pairs."""
    x = RNG.normal(size=(1, 1, 8)).astype(np.float32)
    b = np.array([3, 5, 3, 3], np.int32)               # t=3, h=5, w=3, e=3 for the one token
    y = run(ctx, g.ggml_rope_multi(ctx, T(ctx, x), g.ggml_new_from_numpy(ctx, b), None, 8, [2, 1, 1, 0],
                                   g.GGML_ROPE_TYPE_MROPE)).reshape(1, 1, 8)
    ref3, ref5 = rope_ref(x, [3], 8, True), rope_ref(x, [5], 8, True)
    # pairs (i, i+4): i = 0, 1 section t (pos 3), i = 2 section h (pos 5), i = 3 section w (pos 3)
    for i, ref in ((0, ref3), (1, ref3), (2, ref5), (3, ref3)):
        close(y[..., [i, i + 4]], ref[..., [i, i + 4]], 1e-4)


def test_rope_checks(ctx):
    a = T(ctx, np.ones((3, 2, 8)))
    with pytest.raises(GGMLError, match="positions"):
        g.ggml_rope(ctx, a, g.ggml_new_from_numpy(ctx, np.zeros(2, np.int32)), 8)
    with pytest.raises(GGMLError, match="ggml_rope_multi"):
        g.ggml_rope(ctx, a, g.ggml_new_from_numpy(ctx, np.zeros(3, np.int32)), 8, g.GGML_ROPE_TYPE_MROPE)
    with pytest.raises(GGMLError, match="4 x ne2"):
        g.ggml_rope_multi(ctx, a, g.ggml_new_from_numpy(ctx, np.zeros(3, np.int32)), None, 8, [1, 1, 1, 1], 8)
    with pytest.raises(GGMLError, match="section"):
        g.ggml_rope_multi(ctx, a, g.ggml_new_from_numpy(ctx, np.zeros(12, np.int32)), None, 8, [0, 0, 0, 0], 8)
    with pytest.raises(GGMLError, match="vision"):
        g.ggml_rope_multi(ctx, a, g.ggml_new_from_numpy(ctx, np.zeros(12, np.int32)), None, 8, [1, 1, 0, 0], 24)


# -- convolutions ------------------------------------------------------------------------------------------
def conv1d_ref(x, w, s, p, d):
    """x (N, IC, L), w (OC, IC, K) -> (N, OC, OL)."""
    N, IC, L = x.shape
    OC, _, K = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p)))
    OL = (L + 2 * p - d * (K - 1) - 1) // s + 1
    out = np.zeros((N, OC, OL))
    for o in range(OL):
        seg = xp[:, :, o * s: o * s + d * (K - 1) + 1: d]     # (N, IC, K)
        out[:, :, o] = np.einsum("nik,oik->no", seg, w)
    return out


def conv2d_ref(x, w, s, p, d, groups=1):
    """x (N, C, H, W), w (OC, C/groups, KH, KW) -> (N, OC, OH, OW)."""
    N, C, H, W = x.shape
    OC, Cg, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[1], p[1]), (p[0], p[0])))
    OH = (H + 2 * p[1] - d[1] * (KH - 1) - 1) // s[1] + 1
    OW = (W + 2 * p[0] - d[0] * (KW - 1) - 1) // s[0] + 1
    out = np.zeros((N, OC, OH, OW))
    per = OC // groups
    for oc in range(OC):
        gi = oc // per
        for i in range(OH):
            for j in range(OW):
                patch = xp[:, gi * Cg:(gi + 1) * Cg, i * s[1]: i * s[1] + d[1] * (KH - 1) + 1: d[1],
                           j * s[0]: j * s[0] + d[0] * (KW - 1) + 1: d[0]]
                out[:, oc, i, j] = np.einsum("nchw,chw->n", patch, w[oc])
    return out


@pytest.mark.parametrize("s,p,d", [(1, 0, 1), (2, 1, 1), (1, 2, 2)])
def test_conv_1d_against_numpy(ctx, s, p, d):
    x = RNG.normal(size=(2, 3, 9)).astype(np.float32)   # ggml b [L, IC, N]
    w = RNG.normal(size=(4, 3, 3)).astype(np.float32)   # ggml a [K, IC, OC]
    y = g.ggml_conv_1d(ctx, T(ctx, w), T(ctx, x), s, p, d)
    close(run(ctx, y), conv1d_ref(x, w, s, p, d), 1e-4)


def test_conv_1d_dw_against_numpy(ctx):
    x = RNG.normal(size=(3, 10)).astype(np.float32)     # ggml [L, C]
    w = RNG.normal(size=(3, 1, 3)).astype(np.float32)   # ggml [K, 1, C]
    y = run(ctx, g.ggml_conv_1d_dw(ctx, T(ctx, w), T(ctx, x), 1, 1, 1))
    ref = np.stack([conv1d_ref(x[None, c:c + 1], w[c:c + 1], 1, 1, 1)[0, 0] for c in range(3)])
    close(y.reshape(3, -1), ref, 1e-4)


@pytest.mark.parametrize("fn", ["ggml_conv_2d_dw", "ggml_conv_2d_dw_direct"])
def test_conv_2d_dw_against_numpy(ctx, fn):
    x = RNG.normal(size=(2, 3, 6, 7)).astype(np.float32)   # ggml [W, H, C, N]
    w = RNG.normal(size=(3, 1, 3, 3)).astype(np.float32)   # ggml [KW, KH, 1, C]
    y = run(ctx, getattr(g, fn)(ctx, T(ctx, w), T(ctx, x), 2, 1, 1, 1, 1, 2))
    close(y, conv2d_ref(x, w, (2, 1), (1, 1), (1, 2), groups=3), 1e-4)


def test_conv_2d_direct_against_numpy_and_conv_2d(ctx):
    x = RNG.normal(size=(1, 2, 6, 5)).astype(np.float32)   # [W, H, C, N]
    w = RNG.normal(size=(4, 2, 3, 3)).astype(np.float32)   # [KW, KH, C, OC]
    y, y2 = run(ctx, g.ggml_conv_2d_direct(ctx, T(ctx, w), T(ctx, x), 1, 2, 1, 0, 1, 1),
                g.ggml_conv_2d(ctx, T(ctx, w), T(ctx, x), 1, 2, 1, 0, 1, 1))
    close(y, conv2d_ref(x, w, (1, 2), (1, 0), (1, 1)), 1e-4)
    close(y, y2, 1e-2)  # ggml_conv_2d goes through an f16 im2col


@pytest.mark.parametrize("s", [1, 2, 3])
def test_conv_transpose_1d_against_numpy(ctx, s):
    x = RNG.normal(size=(2, 4)).astype(np.float32)        # ggml [L=4, IC=2]
    w = RNG.normal(size=(2, 3, 3)).astype(np.float32)     # ggml [K=3, OC=3, IC=2]
    y = run(ctx, g.ggml_conv_transpose_1d(ctx, T(ctx, w), T(ctx, x), s, 0, 1))
    L, K = 4, 3
    ref = np.zeros((3, (L - 1) * s + K))
    for ic in range(2):
        for oc in range(3):
            for i in range(L):
                ref[oc, i * s: i * s + K] += x[ic, i] * w[ic, oc]
    close(y, ref, 1e-4)


def test_conv_transpose_checks(ctx):
    with pytest.raises(GGMLError, match="p0 = 0"):
        g.ggml_conv_transpose_1d(ctx, T(ctx, np.ones((2, 3, 3))), T(ctx, np.ones((2, 4))), 1, 1, 1)


# -- small ops -------------------------------------------------------------------------------------------------
def test_add1_diag_diag_mask_zero_against_numpy(ctx):
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    a1 = g.ggml_add1(ctx, T(ctx, x), T(ctx, [2.5]))
    dg = g.ggml_diag(ctx, T(ctx, [[1, 2, 3]]))
    mz = g.ggml_diag_mask_zero(ctx, T(ctx, np.ones((4, 4))), 1)
    r1, r2, r3 = run(ctx, a1, dg, mz)
    close(r1, x + 2.5)
    close(r2, np.diag([1, 2, 3]))
    close(r3, np.tril(np.ones((4, 4)), 1))  # row i (query) keeps keys j <= i + n_past
    with pytest.raises(GGMLError, match="scalar"):
        g.ggml_add1(ctx, T(ctx, x), T(ctx, [1, 2]))
    with pytest.raises(GGMLError, match="ne1 == 1"):
        g.ggml_diag(ctx, T(ctx, x))


def test_arange_timestep_embedding_roll_pad_reflect_against_numpy(ctx):
    ar = g.ggml_arange(ctx, 0.5, 3.0, 0.75)
    ts = np.array([0.0, 1.0, 7.5], np.float32)
    te = g.ggml_timestep_embedding(ctx, T(ctx, ts), 6, 100)
    x = RNG.normal(size=(2, 3, 5)).astype(np.float32)
    ro = g.ggml_roll(ctx, T(ctx, x), 2, -1, 1, 0)
    pr = g.ggml_pad_reflect_1d(ctx, T(ctx, x), 2, 3)
    r_ar, r_te, r_ro, r_pr = run(ctx, ar, te, ro, pr)
    close(r_ar, np.arange(0.5, 3.0, 0.75))
    half = 3
    freqs = np.exp(-math.log(100) * np.arange(half) / half)
    args = ts[:, None] * freqs[None, :]
    close(r_te, np.concatenate([np.cos(args), np.sin(args)], axis=1), 1e-5)
    close(r_ro, np.roll(x, (1, -1, 2), axis=(0, 1, 2)))
    close(r_pr, np.pad(x, ((0, 0), (0, 0), (2, 3)), mode="reflect"))
    with pytest.raises(GGMLError, match="greater than start"):
        g.ggml_arange(ctx, 3, 1)
    with pytest.raises(GGMLError, match="shift0"):
        g.ggml_roll(ctx, T(ctx, x), 5)
    with pytest.raises(GGMLError, match="paddings"):
        g.ggml_pad_reflect_1d(ctx, T(ctx, x), 5, 0)


def test_win_part_against_numpy(ctx):
    x = RNG.normal(size=(5, 3, 2)).astype(np.float32)   # ggml [C=2, W=3, H=5]
    wp = g.ggml_win_part(ctx, T(ctx, x), 2)
    wu = g.ggml_win_unpart(ctx, wp, 3, 5, 2)
    r_wp, r_wu = run(ctx, wp, wu)
    padded = np.zeros((6, 4, 2), np.float32)
    padded[:5, :3] = x
    wins = [padded[py * 2:(py + 1) * 2, px * 2:(px + 1) * 2] for py in range(3) for px in range(2)]
    close(r_wp, np.stack(wins))
    close(r_wu, x)


def test_mul_mat_id_against_numpy(ctx):
    K, M, n_exp, n_used, n_tok = 4, 3, 3, 2, 5
    experts = RNG.normal(size=(n_exp, M, K)).astype(np.float32)   # ggml as [K, M, n_exp]
    b = RNG.normal(size=(n_tok, 1, K)).astype(np.float32)          # ggml [K, 1, n_tok]
    ids = RNG.integers(0, n_exp, size=(n_tok, n_used)).astype(np.int32)
    y = run(ctx, g.ggml_mul_mat_id(ctx, T(ctx, experts), T(ctx, b), g.ggml_new_from_numpy(ctx, ids)))
    ref = np.einsum("tumk,tk->tum", experts[ids], b[:, 0])
    close(y, ref, 1e-4)


def test_mul_mat_id_refuses_out_of_range_experts(ctx):
    ids = g.ggml_new_from_numpy(ctx, np.array([[0, 3]], np.int32))
    y = g.ggml_mul_mat_id(ctx, T(ctx, np.ones((3, 2, 4))), T(ctx, np.ones((1, 1, 4))), ids)
    with pytest.raises(GGMLError, match="out of range"):
        run(ctx, y)


def test_set_1d_2d_and_set_against_numpy(ctx):
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    s1 = g.ggml_set_1d(ctx, T(ctx, x), T(ctx, [9, 8]), 4 * 3)
    s2 = g.ggml_set_2d(ctx, T(ctx, x), T(ctx, b), 4 * 5, 4 * 6)
    s3 = g.ggml_set(ctx, T(ctx, x), T(ctx, b), 4 * 5, 4 * 10, 4 * 20, 4)
    a = T(ctx, x)
    s4 = g.ggml_set_1d_inplace(ctx, a, T(ctx, [7]), 0)
    r1, r2, r3, r4 = run(ctx, s1, s2, s3, s4)
    e1 = x.copy().ravel()
    e1[3:5] = [9, 8]
    close(r1.ravel(), e1)
    e2 = x.copy()
    e2[1:3, 1:4] = b
    close(r2, e2)
    e3 = x.copy()
    e3[0:2, 1:4] = b
    close(r3, e3)
    e4 = x.copy().ravel()
    e4[0] = 7
    close(g.ggml_get_f32(a).ravel(), e4)
    close(r4.ravel(), e4)
    with pytest.raises(GGMLError, match="past a's"):
        g.ggml_set_1d(ctx, T(ctx, x), T(ctx, b), 4 * 18)


# -- in-place variants: the same numbers as their base op, written into the input --------------------------
_INPLACE_CASES = {
    "add": "TT", "sub": "TT", "mul": "TT", "div": "TT", "sqr": "T", "sqrt": "P", "exp": "T", "log": "P",
    "abs": "T", "neg": "T", "sgn": "T", "step": "T", "ceil": "T", "floor": "T", "round": "T", "trunc": "T",
    "relu": "T", "gelu": "T", "gelu_erf": "T", "gelu_quick": "T", "silu": "T", "sigmoid": "T", "tanh": "T",
    "softplus": "T", "elu": "T", "expm1": "T", "sin": "T", "cos": "T", "scale": "Tf", "dup": "T", "norm": "Tf",
    "rms_norm": "Tf", "l2_norm": "Tf", "group_norm": "Ti", "soft_max": "T", "soft_max_ext": "TNf",
    "soft_max_ext_back": "TT", "diag_mask_inf": "Ti", "diag_mask_zero": "Ti", "add1": "TS",
}


@pytest.mark.parametrize("name", sorted(_INPLACE_CASES))
def test_inplace_variant_equals_base_op(name):
    ctx = g.ggml_init(16 * 1024 * 1024)
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    args = []
    for k in _INPLACE_CASES[name]:
        args.append({"T": lambda: RNG.normal(size=(2, 3, 4)).astype(np.float32),
                     "P": lambda: RNG.uniform(0.5, 2, size=(2, 3, 4)).astype(np.float32),
                     "S": lambda: np.array([1.5], np.float32), "N": lambda: None,
                     "f": lambda: 0.5, "i": lambda: 1}[k]())
    if _INPLACE_CASES[name][0] == "P":
        args[0] = np.abs(x) + 0.5
    else:
        args[0] = x
    conv = [T(ctx, v) if isinstance(v, np.ndarray) else v for v in args]
    base = getattr(g, f"ggml_{name}")(ctx, *conv)
    first = T(ctx, args[0])
    inplace = getattr(g, f"ggml_{name}_inplace")(ctx, first, *conv[1:])
    assert g.ggml_get_name(inplace) is not None and inplace.ptr.view_src == first.ptr  # a view of its input
    rb, ri = run(ctx, base, inplace)
    close(ri, rb, 1e-6)
    close(g.ggml_get_f32(first), rb, 1e-6)
    assert g.ggml_op_can_inplace(inplace.op) == (inplace.op in g.core.tensor_info._CAN_INPLACE)
    g.ggml_free(ctx)


def test_every_ggmlr_inplace_name_exists():
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "ggmlR", "exports.txt")  # beside the checkout
    if not os.path.exists(path):
        pytest.skip("ggmlR's export list (shared/ggmlR/exports.txt) is not next to this checkout")
    names = [n.strip() for n in open(path) if n.strip().endswith("_inplace")]
    assert len(names) == 34  # 33 ops and ggml_op_can_inplace
    missing = [n for n in names if not hasattr(g, n)]
    assert not missing


# -- group_norm: ggmlR refuses n_groups > ne2; ggml handles it --------------------------------------------
def group_norm_ref(x, n_groups, eps=1e-5):
    """x numpy (ne3, ne2, ne1, ne0): ggml groups ceil(ne2 / n_groups) channels together."""
    C = x.shape[1]
    per = (C + n_groups - 1) // n_groups
    out = np.empty_like(x, dtype=np.float64)
    for s in range(0, C, per):
        blk = x[:, s:s + per].astype(np.float64)
        mu = blk.mean(axis=(1, 2, 3), keepdims=True)
        var = ((blk - mu) ** 2).mean(axis=(1, 2, 3), keepdims=True)
        out[:, s:s + per] = (blk - mu) / np.sqrt(var + eps)
    return out


@pytest.mark.parametrize("n_groups", [1, 2, 3, 5])
def test_group_norm_any_number_of_groups(ctx, n_groups):
    """n_groups may exceed ne2 (then each channel is its own group): ggmlR refuses that, ggml does not."""
    x = RNG.normal(size=(1, 3, 2, 4)).astype(np.float32)
    close(run(ctx, g.ggml_group_norm(ctx, T(ctx, x), n_groups)), group_norm_ref(x, n_groups), 1e-4)


# -- utilities -----------------------------------------------------------------------------------------------------
def test_nd_accessors_follow_ggml_indices_and_views(ctx):
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)    # ne = [4, 3, 2]
    t = T(ctx, x)
    assert g.ggml_get_f32_nd(t, 3, 1, 0) == pytest.approx(float(x[0, 1, 3]))
    g.ggml_set_f32_nd(t, 0, 2, 1, value=42.0)
    assert g.ggml_get_f32(t)[1, 2, 0] == 42.0
    tr = g.ggml_transpose(ctx, t)                          # a strided view: strides are followed
    assert g.ggml_get_f32_nd(tr, 2, 3, 1) == pytest.approx(float(g.ggml_get_f32(t)[1, 2, 3]))
    i = g.ggml_new_from_numpy(ctx, np.arange(6, dtype=np.int32).reshape(2, 3))
    assert g.ggml_get_i32_nd(i, 2, 1) == 5
    g.ggml_set_i32_nd(i, 0, 0, value=-7)
    assert g.ggml_get_i32(i)[0, 0] == -7
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_get_f32_nd(t, 4)


def test_tensor_queries(ctx):
    t = g.ggml_new_tensor_3d(ctx, F32, 4, 3, 2)
    assert g.ggml_tensor_shape(t) == [4, 3, 2, 1]
    assert g.ggml_tensor_nb(t) == [4, 16, 48, 96, 96]  # ggmlR gives five (nb4 = nb3 * ne3)
    assert g.ggml_tensor_type(t) == F32
    tr = g.ggml_transpose(ctx, t)
    pm = g.ggml_permute(ctx, t, 2, 0, 1, 3)
    assert g.ggml_is_transposed(tr) and not g.ggml_is_transposed(t)
    assert g.ggml_is_permuted(pm) and not g.ggml_is_permuted(t)
    assert g.ggml_is_contiguous_0(t) and not g.ggml_is_contiguous_0(tr)
    assert g.ggml_are_same_shape(t, g.ggml_dup_tensor(ctx, t))
    assert g.ggml_are_same_layout(t, g.ggml_view_tensor(ctx, t))
    assert not g.ggml_are_same_stride(t, tr)
    assert g.ggml_can_repeat(g.ggml_new_tensor_1d(ctx, F32, 4), t)
    assert g.ggml_element_size(t) == 4 and g.ggml_type_size(g.GGML_TYPE_F16) == 2
    assert g.ggml_op_name(1) == "DUP" and g.ggml_op_desc(g.ggml_relu(ctx, t)) == "RELU"
    assert g.ggml_get_unary_op(g.ggml_relu(ctx, t)) == g.core.api.lib.GGML_UNARY_OP_RELU
    assert g.ggml_get_unary_op(t) == -1


def test_reset_invalidates_old_tensors_and_graphs(ctx):
    a = g.ggml_new_f32(ctx, 2.0)
    gf = g.ggml_build_forward_expand(ctx, g.ggml_sqr(ctx, a))
    used = g.ggml_used_mem(ctx)
    g.ggml_reset(ctx)
    assert g.ggml_used_mem(ctx) == 0 < used
    with pytest.raises(GGMLError, match="ggml_reset"):
        g.ggml_get_f32(a)
    with pytest.raises(GGMLError, match="ggml_reset"):
        g.ggml_graph_compute(ctx, gf)
    b = g.ggml_new_i32(ctx, 7)
    assert g.ggml_get_i32(b)[0] == 7


def test_graph_utilities(ctx, tmp_path):
    a = g.ggml_set_name(g.ggml_new_f32(ctx, 3.0), "a")
    y = g.ggml_set_name(g.ggml_sqr(ctx, g.ggml_add(ctx, a, a)), "y")
    gf = g.ggml_build_forward_expand(ctx, y)
    assert g.ggml_graph_node(gf, -1) == y and g.ggml_graph_node(gf, 0).op == 2  # ADD first
    assert g.ggml_graph_get_tensor(gf, "y") == y and g.ggml_graph_get_tensor(gf, "nope") is None
    part = g.ggml_graph_view(gf, 0, 1)
    g.ggml_graph_compute(ctx, part)
    assert g.ggml_get_f32(g.ggml_graph_node(gf, 0))[0] == 6.0
    g.ggml_graph_compute(ctx, g.ggml_graph_view(gf, 1, 2))
    assert g.ggml_get_f32(y)[0] == 36.0
    dot = tmp_path / "g.dot"
    g.ggml_graph_dump_dot(gf, None, str(dot))
    assert "digraph" in dot.read_text()
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_graph_node(gf, 5)


def test_op_params_roundtrip(ctx):
    t = g.ggml_scale(ctx, g.ggml_new_f32(ctx, 1.0), 0.25)
    assert g.ggml_get_op_params_f32(t, 0) == 0.25           # ggml keeps scale's factor there
    g.ggml_set_op_params_i32(t, 3, -5)
    assert g.ggml_get_op_params_i32(t, 3) == -5
    assert g.ggml_get_op_params(t)[12:16] == (-5).to_bytes(4, "little", signed=True)


def test_threads_setting_drives_graph_compute():
    old = g.ggml_get_n_threads()
    try:
        assert g.ggml_set_n_threads(1) == 1 and g.ggml_get_n_threads() == 1
        with pytest.raises(GGMLError, match="at least 1"):
            g.ggml_set_n_threads(0)
    finally:
        g.ggml_set_n_threads(old)


def test_backend_async_and_plans():
    be = g.ggml_backend_cpu_init()
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_1d(ctx, F32, 4)
    y = g.ggml_scale(ctx, a, 2.0)
    g.ggml_backend_alloc_ctx_tensors(ctx, be)
    g.ggml_backend_tensor_set_async(be, a, [1, 2, 3, 4])
    g.ggml_backend_synchronize(be)
    gf = g.ggml_build_forward_expand(ctx, y)
    plan = g.ggml_backend_graph_plan_create(be, gf)
    g.ggml_backend_graph_plan_compute(be, plan)
    g.ggml_backend_graph_plan_free(be, plan)
    close(g.ggml_backend_tensor_get_and_sync(be, y), [2, 4, 6, 8])
    close(g.ggml_backend_tensor_get_data(y, offset=8, n_elements=2), [6, 8])
    assert g.ggml_backend_event_new(g.ggml_backend_get_device(be)) is None  # the CPU has no events
    with pytest.raises(GGMLError, match="past"):
        g.ggml_backend_tensor_get_data(y, offset=8, n_elements=3)


def test_cpu_feature_table():
    feats = g.ggml_cpu_features()
    assert all(isinstance(v, bool) for k, v in feats.items() if k not in ("sve_cnt", "rvv_vlen"))
    import platform
    if platform.machine() == "x86_64":
        assert feats["sse3"] and not feats["neon"]


def test_scheduler_family():
    cpu = g.ggml_backend_cpu_init()
    s = g.ggml_backend_sched_new([cpu])
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_2d(ctx, F32, 3, 2)
    g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    g.ggml_backend_tensor_set_data(a, x)
    cctx = g.ggml_init(1 << 20, no_alloc=True)
    y = g.ggml_sqr(cctx, g.ggml_scale(cctx, a, 2.0))
    gf = g.ggml_build_forward_expand(cctx, y)
    assert g.ggml_backend_sched_get_n_backends(s) == 1 and g.ggml_backend_sched_get_backend(s, 0) is cpu
    assert g.ggml_backend_sched_reserve(s, gf)
    assert g.ggml_backend_sched_alloc_graph(s, gf)
    assert g.ggml_backend_sched_get_tensor_backend(s, y) is cpu
    assert g.ggml_backend_sched_get_n_splits(s) == 1 and g.ggml_backend_sched_get_n_copies(s) == 1
    assert g.ggml_backend_sched_graph_compute_async(s, gf) == 0
    g.ggml_backend_sched_synchronize(s)
    close(g.ggml_get_f32(y), (2 * x) ** 2)
    g.ggml_backend_sched_reset(s)
    with pytest.raises(GGMLError, match="not one of"):
        g.ggml_backend_sched_set_tensor_backend(s, y, g.ggml_backend_cpu_init())
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_backend_sched_get_backend(s, 1)
    g.ggml_backend_sched_free(s)
    with pytest.raises(GGMLError, match="live Scheduler"):
        g.ggml_backend_sched_get_n_splits(s)


def test_set_param_flags_leaves_only(ctx):
    a = g.ggml_new_f32(ctx, 1.0)
    g.ggml_set_param(a)
    assert a.ptr.flags & g.core.api.lib.GGML_TENSOR_FLAG_PARAM
    with pytest.raises(GGMLError, match="leaf"):
        g.ggml_set_param(g.ggml_sqr(ctx, a))


def test_type_combinations_the_cpu_kernels_lack_are_refused(ctx):
    """Kernels that would abort (swiglu_oai in f16) or misread (add1 of f32 with an f16 scalar)."""
    h = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F16, 4, 2)
    with pytest.raises(GGMLError, match="SWIGLU_OAI"):
        g.ggml_glu(ctx, h, g.GGML_GLU_OP_SWIGLU_OAI)
    with pytest.raises(GGMLError, match="b has type f16"):
        g.ggml_add1(ctx, T(ctx, np.ones(3)), g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F16, 1))


def test_backend_load_and_unload_guard():
    assert g.ggml_backend_load("/nonexistent/libggml-nothing.so") is None
    cpu = g.ggml_backend_reg_by_name("CPU")
    with pytest.raises(GGMLError, match="only modules loaded"):
        g.ggml_backend_unload(cpu)
    d = g.ggml_backend_dev_by_type(g.ggml_backend_device_type_cpu())
    assert g.ggml_backend_dev_name(d) == "CPU" and g.ggml_backend_reg_name(cpu) == "CPU"


def test_vulkan_information(capsys):
    """ggml_vulkan_*: consistent with the registry whether or not a Vulkan device is visible
    (GGMLPY_SOFTWARE_VULKAN=1 shows lavapipe)."""
    n = g.ggml_vulkan_device_count()
    devs = g.ggml_vulkan_list_devices()
    assert len(devs) == n and g.ggml_vulkan_available() == (n > 0)
    g.ggml_vulkan_status()
    assert ("AVAILABLE" in capsys.readouterr().out)
    assert not g.ggml_vulkan_is_backend(g.ggml_backend_cpu_init())
    if n == 0:
        with pytest.raises(GGMLError, match=r"Invalid device index: 0 \(available: none"):
            g.ggml_vulkan_init(0)
        return
    assert g.ggml_vulkan_device_description(0) == devs[0]["name"]
    assert g.ggml_vulkan_device_memory(0)["total"] == devs[0]["total_memory"]
    be = g.ggml_vulkan_init(0)
    assert g.ggml_vulkan_is_backend(be) and g.ggml_vulkan_backend_name(be).startswith("Vulkan")
    g.ggml_vulkan_free(be)


def test_utilities_survive_garbage():
    """tests/garbage_utilities.py feeds wrong types, indices, freed and reset objects to the utilities
    and backend functions in a child process: ggml must never abort it."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, os.path.join(here, "garbage_utilities.py")], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, GGML_NO_BACKTRACE="1"))
    assert proc.returncode == 0 and "survived" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_registering_an_already_listed_device_is_a_no_op():
    n = g.ggml_backend_dev_count()
    dev = g.ggml_backend_dev_get(0)
    assert g.ggml_backend_device_register(dev) is not None  # ran into a NameError before
    assert g.ggml_backend_dev_count() == n
