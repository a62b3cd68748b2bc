"""ONNX options beyond the common path, against numpy or onnx's reference implementation, on every
selected device (`--devices cpu,vulkan`): Mod of infinities and NaN, pooling with dilations and
MaxPool's Indices, BatchNormalization in training mode, blocked (De)QuantizeLinear, Resize antialias."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import OnnxError  # noqa: E402

RNG = np.random.default_rng(7)


def one_node(op, inputs, outputs, inits=None, opset=21, **attrs):
    """A one-node model: inputs and outputs as (name, onnx type, shape or None)."""
    g = helper.make_graph([helper.make_node(op, [n for n, _, _ in inputs] + list(inits or {}),
                                            [n for n, _, _ in outputs], **attrs)], "m",
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run(proto, feeds, device="cpu"):
    return ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device=device), feeds)


def reference(proto, feeds):
    return ReferenceEvaluator(proto).run(None, feeds)


# -- Mod: infinities and NaN ---------------------------------------------------------------------------------
EDGE_A = np.array([0, -0.0, -3, 3, -1, 1, 5, -5, np.inf, -np.inf, 1, 1, np.nan, 1, 7.5, -7.5, 3e38, -3e38, 2.5],
                  np.float32)
EDGE_B = np.array([-2, 2, np.inf, np.inf, -np.inf, -np.inf, np.inf, -np.inf, 2, 2, 0, -0.0, 2, np.nan, 2, 2,
                   -np.inf, np.inf, -np.inf], np.float32)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_of_infinities_and_nan_follows_numpy_and_c_fmod(device, fmod):
    proto = one_node("Mod", [("a", T.FLOAT, [19]), ("b", T.FLOAT, [19])], [("z", T.FLOAT, [19])], fmod=fmod)
    got = run(proto, {"a": EDGE_A, "b": EDGE_B}, device)["z"]
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.fmod(EDGE_A, EDGE_B) if fmod else np.mod(EDGE_A, EDGE_B)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.isinf(want).sum() == (5 if not fmod else 0)  # the case really has infinite results


def test_mod_broadcasts_with_infinite_divisors(device):
    proto = one_node("Mod", [("a", T.FLOAT, [3, 4]), ("b", T.FLOAT, [4])], [("z", T.FLOAT, [3, 4])])
    a = RNG.standard_normal((3, 4)).astype(np.float32) * 5
    b = np.array([2.0, -np.inf, np.inf, -1.5], np.float32)
    got = run(proto, {"a": a, "b": b}, device)["z"]
    np.testing.assert_allclose(got, np.mod(a, b), rtol=1e-5, atol=1e-6)


def test_mod_rejects_a_bad_fmod():
    proto = one_node("Mod", [("a", T.FLOAT, [2]), ("b", T.FLOAT, [2])], [("z", T.FLOAT, [2])], fmod=2)
    with pytest.raises(OnnxError, match="fmod"):
        ggmlpy.onnx_load(proto, device="cpu")


# -- pooling: dilations, MaxPool's Indices, 3-D ------------------------------------------------------------
POOLS = [  # (input shape, attributes)
    ((2, 3, 9, 8), dict(kernel_shape=[3, 2], dilations=[2, 3])),
    ((1, 2, 10, 11), dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[2, 3], pads=[1, 2, 2, 0])),
    ((2, 2, 9, 9), dict(kernel_shape=[2, 3], dilations=[3, 2], strides=[2, 2], ceil_mode=1, pads=[1, 1, 0, 1])),
    ((1, 3, 7, 8), dict(kernel_shape=[3, 3], dilations=[2, 1], auto_pad="SAME_UPPER")),
    ((2, 3, 13), dict(kernel_shape=[3], dilations=[3], strides=[2], pads=[2, 1])),
    ((1, 2, 6, 7, 8), dict(kernel_shape=[2, 3, 2], dilations=[2, 1, 3], strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 1])),
    ((1, 1, 12, 12, 12), dict(kernel_shape=[3, 3, 3], dilations=[2, 2, 2], strides=[3, 3, 3], ceil_mode=1)),
]


def pool_model(op, shape, attrs, outputs=("y",)):
    """The model, its outputs declared with the shapes onnx's reference implementation gives."""
    def make(shapes):
        return one_node(op, [("x", T.FLOAT, list(shape))],
                        [(o, T.FLOAT if o == "y" else T.INT64, s) for o, s in zip(outputs, shapes)], opset=22, **attrs)
    try:
        got = ReferenceEvaluator(make([None] * len(outputs))).run(None, {"x": np.zeros(shape, np.float32)})
    except Exception:  # attributes the reference refuses too: the shapes stay unknown
        return make([None] * len(outputs))
    return make([list(a.shape) for a in got])


def numpy_pool(x, op, kernel_shape, strides=None, dilations=None, pads=None, ceil_mode=0, count_include_pad=0,
               auto_pad=None, p=2):
    """Pooling as ONNX's operator text defines it, cell by cell. (onnx's reference implementation pads
    AveragePool as if undilated under SAME padding and misplaces its ceil-mode windows with dilations;
    onnxruntime agrees with this one there.)"""
    nd = x.ndim - 2
    ks, st = list(kernel_shape), list(strides or [1] * nd)
    dl = list(dilations or [1] * nd)
    keff = [(k - 1) * d + 1 for k, d in zip(ks, dl)]
    size = x.shape[2:]
    if auto_pad:
        outs = [-(-n // s) for n, s in zip(size, st)]
        tot = [max(0, (o - 1) * s + k - n) for o, s, k, n in zip(outs, st, keff, size)]
        pb = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in tot]
        pe = [t - b for t, b in zip(tot, pb)]
    else:
        pads = list(pads or [0] * 2 * nd)
        pb, pe = pads[:nd], pads[nd:]
        outs = []
        for i in range(nd):
            span = size[i] + pb[i] + pe[i] - keff[i]
            o = (-(-span // st[i]) if ceil_mode else span // st[i]) + 1
            if ceil_mode and (o - 1) * st[i] >= size[i] + pb[i]:
                o -= 1
            outs.append(o)
    y = np.zeros(x.shape[:2] + tuple(outs), np.float64)
    for o in np.ndindex(*outs):
        pos = [o[i] * st[i] - pb[i] + np.arange(ks[i]) * dl[i] for i in range(nd)]
        inside = [p[(p >= 0) & (p < size[i])] for i, p in enumerate(pos)]
        win = x[(slice(None), slice(None)) + np.ix_(*inside)].reshape(x.shape[0], x.shape[1], -1)
        if op == "MaxPool":
            y[(slice(None), slice(None)) + o] = win.max(axis=2)
        elif op == "LpPool":
            y[(slice(None), slice(None)) + o] = (np.abs(win) ** p).sum(axis=2) ** (1.0 / p)
        else:
            lo_hi = [(-pb[i], size[i] + pe[i]) if count_include_pad else (0, size[i]) for i in range(nd)]
            count = np.prod([((p >= lo) & (p < hi)).sum() for p, (lo, hi) in zip(pos, lo_hi)])
            y[(slice(None), slice(None)) + o] = win.sum(axis=2) / count
    return y


@pytest.mark.parametrize("shape,attrs", POOLS)
@pytest.mark.parametrize("op,extra", [("MaxPool", {}), ("AveragePool", {}),
                                      ("AveragePool", {"count_include_pad": 1})])
def test_pooling_with_dilations_matches_the_operator_definition(device, tol, op, extra, shape, attrs):
    proto = pool_model(op, shape, {**attrs, **extra})
    x = RNG.standard_normal(shape).astype(np.float32)
    got = run(proto, {"x": x}, device)["y"]
    want = numpy_pool(x.astype(np.float64), op, **attrs, **extra)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol)
    if op == "MaxPool":  # onnx's reference agrees for MaxPool
        np.testing.assert_array_equal(got, reference(proto, {"x": x})[0])


@pytest.mark.parametrize("shape,attrs", POOLS)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lppool_matches_the_operator_definition(device, tol, shape, attrs, p):
    proto = pool_model("LpPool", shape, {**attrs, "p": p})
    x = RNG.standard_normal(shape).astype(np.float32)
    got = run(proto, {"x": x}, device)["y"]
    want = numpy_pool(x.astype(np.float64), "LpPool", **attrs, p=p)
    np.testing.assert_allclose(got, want, rtol=max(tol["rtol"], 1e-5), atol=max(tol["atol"], 1e-5))


@pytest.mark.parametrize("shape,attrs", POOLS + [((2, 3, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2],
                                                                     pads=[1, 0, 1, 1]))])
@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices_are_the_first_maximum_in_either_storage_order(device, shape, attrs, order):
    proto = pool_model("MaxPool", shape, {**attrs, "storage_order": order}, ("y", "i"))
    x = RNG.integers(-3, 4, shape).astype(np.float32)  # many ties: the first maximum must win
    got = run(proto, {"x": x}, device)
    want_y, want_i = reference(proto, {"x": x})
    np.testing.assert_array_equal(got["y"], want_y)
    assert got["i"].dtype == np.int64
    np.testing.assert_array_equal(got["i"], want_i)


@pytest.mark.parametrize("shape", [(1, 6, 7, 7), (3, 5, 2, 9), (2, 4, 13), (1, 6, 3, 4, 5)])
def test_global_average_pooling_keeps_nan_and_infinities(device, tol, shape):
    """GlobalAveragePool over every plane (ResNet's 7 x 7, 1-D, 3-D): each plane's mean, NaN where it
    holds a NaN or both infinities, the infinity where it holds one; on 1 to 3 threads."""
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1, int(np.prod(shape[2:])))  # a view: the planes of x
    flat[0, 3] = np.nan
    flat[-1, -1] = np.inf
    if len(flat) > 2:
        flat[1, 0], flat[1, -1] = np.inf, -np.inf
    want = x.astype(np.float64).mean(axis=tuple(range(2, len(shape))), keepdims=True)
    assert np.isfinite(want).sum() >= 3
    proto = one_node("GlobalAveragePool", [("x", T.FLOAT, list(shape))], [("y", T.FLOAT, list(want.shape))])
    for threads in ((1, 2, 3) if device == "cpu" else (1,)):
        got = ggmlpy.onnx_run(ggmlpy.onnx_load(proto, device=device, n_threads=threads), {"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, **tol)


def test_pooling_rejects_bad_attributes():
    bad = [dict(kernel_shape=[2, 2], dilations=[0, 1]), dict(kernel_shape=[2]), dict(kernel_shape=[2, 2], strides=[1]),
           dict(kernel_shape=[2, 2], pads=[1, -1, 0, 0]), dict(kernel_shape=[9, 2], dilations=[2, 1]),
           dict(kernel_shape=[2, 2], ceil_mode=2)]
    for attrs in bad:
        with pytest.raises(OnnxError):
            ggmlpy.onnx_load(pool_model("MaxPool", (1, 1, 5, 5), attrs), device="cpu")
    with pytest.raises(OnnxError, match="storage_order"):
        ggmlpy.onnx_load(pool_model("MaxPool", (1, 1, 5, 5), dict(kernel_shape=[2, 2], storage_order=3), ("y", "i")),
                         device="cpu")


def test_3d_pooling_of_more_than_four_non_unit_dimensions_merges_n_and_c():
    """N and C both above one: five non-unit dimensions, pooled with every (n, c) plane alike (onnx/rank5.py)."""
    x = RNG.standard_normal((2, 3, 4, 4, 4)).astype(np.float32)
    got = run(pool_model("MaxPool", x.shape, dict(kernel_shape=[2, 2, 2])), {"x": x})["y"]
    np.testing.assert_array_equal(got, numpy_pool(x, "MaxPool", [2, 2, 2]))


# -- BatchNormalization in training mode ---------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 5), (2, 4, 7)])
@pytest.mark.parametrize("outputs", [("y", "rm", "rv"), ("y",)])
def test_batchnorm_training_mode_uses_batch_statistics_and_updates_the_running_ones(device, tol, shape, outputs):
    C = shape[1]
    params = {"s": RNG.uniform(0.5, 1.5, C), "bias": RNG.standard_normal(C), "mean": RNG.standard_normal(C),
              "var": RNG.uniform(0.5, 2, C)}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    proto = one_node("BatchNormalization", [("x", T.FLOAT, list(shape))],
                     [(o, T.FLOAT, list(shape) if o == "y" else [C]) for o in outputs], params, opset=15,
                     training_mode=1, momentum=0.8, epsilon=1e-3)
    x = (RNG.standard_normal(shape) * 2 + 1).astype(np.float32)
    got = run(proto, {"x": x}, device)
    axes = tuple(k for k in range(len(shape)) if k != 1)
    mu, var = x.astype(np.float64).mean(axis=axes), x.astype(np.float64).var(axis=axes)
    ch = (1, C) + (1,) * (len(shape) - 2)
    y = (x - mu.reshape(ch)) / np.sqrt(var.reshape(ch) + 1e-3) * params["s"].reshape(ch) + params["bias"].reshape(ch)
    np.testing.assert_allclose(got["y"], y, **tol)
    if len(outputs) == 3:
        np.testing.assert_allclose(got["rm"], 0.8 * params["mean"] + 0.2 * mu, **tol)
        np.testing.assert_allclose(got["rv"], 0.8 * params["var"] + 0.2 * var, **tol)
    ref = reference(proto, {"x": x})
    for g, r in zip([got[o] for o in outputs], ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_batchnorm_rejects_bad_parameters():
    C = 3
    p = {k: np.ones(C, np.float32) for k in ("s", "bias", "mean", "var")}
    bad = one_node("BatchNormalization", [("x", T.FLOAT, [2, C, 4])], [("y", T.FLOAT, [2, C, 4])], p, opset=15,
                   training_mode=2)
    with pytest.raises(OnnxError, match="training_mode"):
        ggmlpy.onnx_load(bad, device="cpu")
    p["var"] = np.ones(C + 1, np.float32)
    short = one_node("BatchNormalization", [("x", T.FLOAT, [2, C, 4])], [("y", T.FLOAT, [2, C, 4])], p, opset=15)
    with pytest.raises(OnnxError, match="input_var"):
        ggmlpy.onnx_load(short, device="cpu")


# -- blocked quantization ------------------------------------------------------------------------------------
def numpy_blocks(p, axis, bs, D):
    return np.take(p, np.arange(D) // bs, axis=axis)


@pytest.mark.parametrize("const_params", [False, True])
@pytest.mark.parametrize("shape,axis,bs", [((3, 7), 1, 3), ((4, 6, 2), 1, 2), ((5, 4), 0, 2), ((2, 3, 5), -1, 4)])
def test_blocked_quantize_and_dequantize(device, const_params, shape, axis, bs):
    ax = axis % len(shape)
    pshape = tuple(-(-d // bs) if k == ax else d for k, d in enumerate(shape))
    scale = RNG.uniform(0.05, 0.2, pshape).astype(np.float32)
    zp = RNG.integers(0, 40, pshape).astype(np.uint8)
    x = (RNG.standard_normal(shape) * 5).astype(np.float32)
    inputs = [("x", T.FLOAT, list(shape))]
    params = {"s": scale, "z": zp}
    if not const_params:
        inputs += [("s", T.FLOAT, list(pshape)), ("z", T.UINT8, list(pshape))]
        params = None
    q = one_node("QuantizeLinear", inputs, [("q", T.UINT8, list(shape))], params, axis=axis, block_size=bs)
    feeds = {"x": x} if const_params else {"x": x, "s": scale, "z": zp}
    got = run(q, feeds, device)["q"]
    s_full, z_full = numpy_blocks(scale, ax, bs, shape[ax]), numpy_blocks(zp, ax, bs, shape[ax]).astype(np.float64)
    want = np.clip(np.rint(x / s_full) + z_full, 0, 255).astype(np.uint8)
    assert got.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # float32 division at a rounding boundary
    np.testing.assert_array_equal(got, reference(q, feeds)[0])
    qx = RNG.integers(0, 256, shape).astype(np.uint8)
    dq_inputs = [("qx", T.UINT8, list(shape))] + inputs[1:]
    dq = one_node("DequantizeLinear", dq_inputs, [("y", T.FLOAT, list(shape))], params, axis=axis, block_size=bs)
    feeds = {"qx": qx} if const_params else {"qx": qx, "s": scale, "z": zp}
    np.testing.assert_allclose(run(dq, feeds, device)["y"], (qx - z_full) * s_full, rtol=1e-6, atol=1e-6)


def test_blocked_quantization_checks_the_parameter_shapes():
    x = [("x", T.FLOAT, [3, 8])]
    for pshape, attrs in (((3, 3), dict(axis=1, block_size=2)), ((3, 4), dict(axis=1, block_size=-1)),
                          ((1, 4), dict(axis=1, block_size=2))):
        m = one_node("QuantizeLinear", x, [("q", T.UINT8, [3, 8])],
                     {"s": np.ones(pshape, np.float32), "z": np.zeros(pshape, np.uint8)}, **attrs)
        with pytest.raises(OnnxError, match="block"):
            ggmlpy.onnx_load(m, device="cpu")


# -- Resize antialias ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("scales,exclude", [((1, 1, 0.6, 0.35), 0), ((1, 1, 0.25, 1.5), 1), ((1, 1, 0.5, 0.5), 0)])
def test_resize_antialias_matches_the_reference(device, tol, mode, ctm, scales, exclude):
    shape = (2, 3, 11, 17)
    s = np.array(scales, np.float32)
    out = [int(np.floor(d * f)) for d, f in zip(shape, scales)]
    proto = one_node("Resize", [("x", T.FLOAT, list(shape))], [("y", T.FLOAT, out)],
                     {"roi": np.array([], np.float32), "scales": s}, opset=18, mode=mode, antialias=1,
                     coordinate_transformation_mode=ctm, exclude_outside=exclude)
    x = RNG.standard_normal(shape).astype(np.float32)
    got = run(proto, {"x": x}, device)["y"]
    want = reference(proto, {"x": x})[0]
    assert got.shape == want.shape
    # float32 sums of up to 16 taps with negative cubic lobes: a few 1e-6 of cancellation on the CPU.
    # An output near zero is taps of the input's size cancelling, so a device's rounding (f16
    # accumulation on Vulkan) is bounded in units of the input's magnitude, not of the output's.
    scale = float(np.abs(x).max())
    np.testing.assert_allclose(got, want, rtol=max(tol["rtol"], 1e-4), atol=max(tol["atol"] * scale, 1e-5))
    if device == "cpu" and ctm == "half_pixel" and not exclude:  # it really filters: plain linear differs
        plain = one_node("Resize", [("x", T.FLOAT, list(shape))], [("y", T.FLOAT, out)],
                         {"roi": np.array([], np.float32), "scales": s}, opset=18, mode=mode)
        assert np.abs(run(plain, {"x": x})["y"] - got).max() > 0.05


def test_resize_rejects_a_bad_antialias():
    m = one_node("Resize", [("x", T.FLOAT, [1, 1, 4, 4])], [("y", T.FLOAT, [1, 1, 2, 2])],
                 {"roi": np.array([], np.float32), "scales": np.array([1, 1, 0.5, 0.5], np.float32)}, opset=18,
                 mode="linear", antialias=2)
    with pytest.raises(OnnxError, match="antialias"):
        ggmlpy.onnx_load(m, device="cpu")


# -- comparisons with a constant infinity (attention's fully masked rows) -----------------------------------
def test_equal_to_a_constant_infinity_sees_where_masked_values(device):
    """Where stores a constant -inf as -FLT_MAX; Equal with a constant infinity compares clamped values, so
    ONNX's attention function finds its fully masked rows and gives them zero weights."""
    n = helper.make_node
    nodes = [n("Where", ["mask", "zero", "neginf"], ["bias"]),
             n("ReduceMax", ["bias", "axes"], ["rowmax"], keepdims=1),
             n("Equal", ["rowmax", "neginf"], ["allmasked"]),
             n("Equal", ["x", "neginf"], ["xneg"]),
             n("Add", ["scores", "bias"], ["masked"]), n("Softmax", ["masked"], ["p"], axis=-1),
             n("Where", ["allmasked", "zero", "p"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "neginf"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("mask", T.BOOL, [3, 4]),
                                       helper.make_tensor_value_info("scores", T.FLOAT, [3, 4]),
                                       helper.make_tensor_value_info("x", T.FLOAT, [5])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("allmasked", T.BOOL, [3, 1]),
                           helper.make_tensor_value_info("xneg", T.BOOL, [5])], inits)
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    mask = np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]], bool)
    scores = RNG.standard_normal((3, 4)).astype(np.float32)
    x = np.array([-np.inf, -3.0, 0.0, np.inf, 1e30], np.float32)
    got = run(proto, {"mask": mask, "scores": scores, "x": x}, device)
    want = reference(proto, {"mask": mask, "scores": scores, "x": x})
    np.testing.assert_array_equal(got["allmasked"], [[False], [True], [False]])
    np.testing.assert_array_equal(got["xneg"], [True, False, False, False, False])
    np.testing.assert_allclose(got["y"], np.nan_to_num(want[0]), rtol=1e-5, atol=1e-6)
    assert not np.isnan(got["y"]).any() and (got["y"][1] == 0).all()


# -- GatherElements with indices computed in the graph ------------------------------------------------------
@pytest.mark.parametrize("shape,ishape,axis", [((4, 5), (4, 3), 1), ((3, 4, 5), (2, 4, 5), 0), ((2, 3, 6), (2, 3, 6), -1)])
def test_gather_elements_with_runtime_indices(device, shape, ishape, axis):
    proto = one_node("GatherElements", [("x", T.FLOAT, list(shape)), ("i", T.INT64, list(ishape))],
                     [("y", T.FLOAT, list(ishape))], axis=axis)
    L = shape[axis]
    x = RNG.standard_normal(shape).astype(np.float32)
    i = RNG.integers(-L, L, ishape).astype(np.int64)  # negative indices count from the end
    got = run(proto, {"x": x, "i": i}, device)["y"]
    np.testing.assert_array_equal(got, np.take_along_axis(x, np.where(i < 0, i + L, i), axis=axis))
    np.testing.assert_array_equal(got, reference(proto, {"x": x, "i": i})[0])


def test_gather_elements_out_of_range_runtime_index_gives_nan_not_a_crash(device):
    proto = one_node("GatherElements", [("x", T.FLOAT, [2, 3]), ("i", T.INT64, [2, 2])], [("y", T.FLOAT, [2, 2])],
                     axis=1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = run(proto, {"x": x, "i": np.array([[0, 3], [-4, 2]])}, device)["y"]
    assert got[0, 0] == 0 and got[1, 1] == 5 and np.isnan(got[0, 1]) and np.isnan(got[1, 0])


def test_value_inputs_are_those_shapes_and_parameters_are_computed_from():
    """The graph inputs from which a shape or op parameter is computed (a Range bound two nodes away), but
    not those only read for their shape or type (Shape, CastLike's target)."""
    from ggmlpy.onnx.shaping import value_inputs
    n = helper.make_node
    nodes = [n("Add", ["size", "one"], ["s1"]), n("Range", ["zero", "s1", "one"], ["r"]),
             n("Shape", ["x"], ["sx"]), n("Reshape", ["x", "sx"], ["y"]),
             n("CastLike", ["one", "x"], ["o"]), n("Unsqueeze", ["x", "o"], ["z"])]
    assert value_inputs(nodes, {"size", "one", "zero", "x"}) == {"size", "one", "zero"}


# -- 3-D ConvTranspose ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("xshape,wshape,attrs,with_bias", [
    ((1, 2, 3, 4, 5), (2, 3, 3, 2, 3), {}, True),
    ((1, 2, 3, 3, 4), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[1, 0, 0, 1, 1, 0], output_padding=[1, 0, 1]),
     False),
    ((1, 3, 4, 3, 3), (3, 2, 2, 2, 3), dict(dilations=[2, 1, 2], strides=[1, 2, 1]), True),
    ((2, 1, 3, 3, 3), (1, 1, 2, 2, 2), dict(strides=[2, 2, 2], output_shape=[6, 6, 5], auto_pad="SAME_UPPER"), True),
])
def test_convtranspose_3d_matches_the_reference(device, tol, xshape, wshape, attrs, with_bias):
    inits = {"w": (RNG.standard_normal(wshape) / 4).astype(np.float32)}
    if with_bias:
        inits["bias"] = RNG.standard_normal(wshape[1]).astype(np.float32)

    def make(out):
        return one_node("ConvTranspose", [("x", T.FLOAT, list(xshape))], [("y", T.FLOAT, out)], inits, opset=17,
                        **attrs)
    x = RNG.standard_normal(xshape).astype(np.float32)
    want = reference(make(None), {"x": x})[0]
    got = run(make(list(want.shape)), {"x": x}, device)["y"]
    assert got.shape == want.shape
    if device != "cpu":  # ggml's Vulkan products round their operands to f16: a few 1e-4 on these sums
        tol = {"rtol": 1e-2, "atol": 2e-3}
    np.testing.assert_allclose(got, want, **tol)


def test_convtranspose_3d_rejects_groups_and_bad_strides():
    w = {"w": np.ones((2, 1, 2, 2, 2), np.float32)}
    for attrs in (dict(group=2), dict(strides=[0, 1, 1])):
        m = one_node("ConvTranspose", [("x", T.FLOAT, [1, 2, 3, 3, 3])], [("y", T.FLOAT, None)], w, opset=17,
                     **attrs)
        with pytest.raises(OnnxError):
            ggmlpy.onnx_load(m, device="cpu")


# -- Dropout in training mode -------------------------------------------------------------------------------
def test_dropout_training_mode_with_ratio_zero_is_the_identity_and_other_ratios_are_refused(device):
    def model(ratio):
        return one_node("Dropout", [("x", T.FLOAT, [3, 4])], [("y", T.FLOAT, [3, 4]), ("m", T.BOOL, [3, 4])],
                        {"r": np.array(ratio, np.float32), "t": np.array(True)}, opset=13)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    got = run(model(0.0), {"x": x}, device)
    np.testing.assert_array_equal(got["y"], x)
    assert got["m"].dtype == bool and got["m"].all()
    with pytest.raises(OnnxError, match="random mask"):
        ggmlpy.onnx_load(model(0.5), device="cpu")


# -- Where selects: the unselected operand's inf or NaN stays out ------------------------------------------
def test_where_of_computed_values_is_a_true_selection(device):
    n = helper.make_node
    nodes = [n("Log", ["a"], ["la"]), n("Div", ["a", "z"], ["q"]),  # -inf, NaN (0/0) and inf appear
             n("Where", ["c", "la", "q"], ["y"]), n("Where", ["c", "zero", "q"], ["y2"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("c", T.BOOL, [2, 3]),
                                       helper.make_tensor_value_info("a", T.FLOAT, [2, 3]),
                                       helper.make_tensor_value_info("z", T.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("y2", T.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    c = np.array([[1, 0, 1], [0, 1, 0]], bool)
    a = np.array([[0, 0, 2], [1, -1, 3]], np.float32)
    z = np.array([0, 0, 1], np.float32)
    got = run(proto, {"c": c, "a": a, "z": z}, device)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(c, np.log(a), a / z), np.where(c, 0, a / z)
    np.testing.assert_array_equal(got["y"], want[0].astype(np.float32))
    np.testing.assert_array_equal(got["y2"], want[1].astype(np.float32))


# -- empty inputs: shape and type only -------------------------------------------------------------------------
def test_an_empty_input_gives_castlike_its_type(device):
    proto = one_node("CastLike", [("x", T.FLOAT, [2, 3]), ("like", T.FLOAT16, [0])], [("y", T.FLOAT16, [2, 3])])
    x = np.array([[1.0001, -2.5, 3e-5], [65519.0, 7.0, -0.1]], np.float32)
    got = run(proto, {"x": x, "like": np.zeros(0, np.float16)}, device)["y"]
    np.testing.assert_array_equal(got, x.astype(np.float16))
