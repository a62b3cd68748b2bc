"""Quantized ops and the ops around them give onnxruntime's values to the bit, so that an int8
detection model's proposals, levels and boxes are onnxruntime's: QLinearConv, QGemm, QLinearMatMul
and QLinearAdd as onnxruntime computes them,
TopK's order of equal values, QuantizeLinear of an infinity, RoiAlign in float32. Each node is fed
from the graph (a Relu or Identity first), so the graph's own kernel runs, not constant folding."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import ggmlpy  # noqa: E402

RNG = np.random.default_rng(39)
MS = "com.microsoft"


def both(nodes, inputs, outputs, inits, feeds, opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ggmlpy.onnx_run(ggmlpy.onnx_load(m, device="cpu"), feeds)
    return want, [got[o.name] for o in outputs]


def u8(name, shape):
    return helper.make_tensor_value_info(name, T.UINT8, list(shape))


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_equals_onnxruntime_to_the_bit(per_channel):
    x = RNG.integers(0, 256, (1, 16, 12, 12), dtype=np.uint8)
    w = RNG.integers(0, 256, (8, 16, 3, 3), dtype=np.uint8)
    inits = {"sx": np.float32(0.0173), "zx": np.uint8(117), "w": w,
             "sw": (RNG.uniform(0.002, 0.01, 8) if per_channel else np.array(0.0061)).astype(np.float32),
             "zw": (RNG.integers(100, 150, 8) if per_channel else np.array(128)).astype(np.uint8),
             "sy": np.float32(0.0927), "zy": np.uint8(90), "bias": RNG.integers(-3000, 3000, 8).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["xi", "sx", "zx", "w", "sw", "zw", "sy", "zy", "bias"], ["y"], pads=[1, 1, 1, 1])
    want, got = both([helper.make_node("Identity", ["x"], ["xi"]), node], [u8("x", x.shape)],
                     [helper.make_tensor_value_info("y", T.UINT8, None)], inits, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_qgemm_and_qlinear_matmul_equal_onnxruntime_to_the_bit():
    a = RNG.integers(0, 256, (6, 300), dtype=np.uint8)
    w = RNG.integers(0, 256, (40, 300), dtype=np.uint8)
    inits = {"sa": np.float32(0.021), "za": np.uint8(3), "w": w, "wt": np.ascontiguousarray(w.T),
             "sw": RNG.uniform(0.001, 0.004, 40).astype(np.float32), "zw": RNG.integers(120, 136, 40).astype(np.uint8),
             "sw1": np.float32(0.0031), "zw1": np.uint8(128), "c": RNG.integers(-5000, 5000, 40).astype(np.int32),
             "sy": np.float32(0.25), "zy": np.uint8(128)}
    nodes = [helper.make_node("Identity", ["a"], ["ai"]),
             helper.make_node("QGemm", ["ai", "sa", "za", "w", "sw", "zw", "c", "sy", "zy"], ["y"], domain=MS, transB=1,
                              alpha=0.75),
             helper.make_node("QGemm", ["ai", "sa", "za", "w", "sw", "zw", "c"], ["yf"], domain=MS, transB=1),
             helper.make_node("QLinearMatMul", ["ai", "sa", "za", "wt", "sw1", "zw1", "sy", "zy"], ["m"])]
    outs = [helper.make_tensor_value_info("y", T.UINT8, None), helper.make_tensor_value_info("yf", T.FLOAT, None),
            helper.make_tensor_value_info("m", T.UINT8, None)]
    want, got = both(nodes, [u8("a", a.shape)], outs, inits, {"a": a})
    for w_, g_ in zip(want, got):
        np.testing.assert_array_equal(g_, w_)


def test_qlinear_add_rounds_half_integers_as_onnxruntime():
    """x + 0.5 w (a box's centre) lands on half-integers: onnxruntime's fused multiply-add decides."""
    x = np.arange(256, dtype=np.uint8)
    inits = {"sa": np.float32(0.8489041), "za": np.uint8(0), "sb": np.float32(0.4392157), "zb": np.uint8(0),
             "sc": np.float32(0.86366767), "zc": np.uint8(0)}
    b = RNG.integers(0, 256, 256, dtype=np.uint8)
    nodes = [helper.make_node("Identity", ["x"], ["xi"]),
             helper.make_node("QLinearAdd", ["xi", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain=MS)]
    xs = np.repeat(x, 256)
    bs = np.tile(b, 256)
    want, got = both(nodes, [u8("x", xs.shape), u8("b", bs.shape)], [helper.make_tensor_value_info("y", T.UINT8, None)],
                     inits, {"x": xs, "b": bs})
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_orders_equal_values_by_index(largest):
    x = RNG.integers(0, 4, (3, 50)).astype(np.float32)  # many equal values
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("TopK", ["r", "k"], ["v", "i"], axis=1, largest=largest)]
    outs = [helper.make_tensor_value_info("v", T.FLOAT, None), helper.make_tensor_value_info("i", T.INT64, None)]
    want, got = both(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [3, 50])], outs,
                     {"k": np.array([20], np.int64)}, {"x": x})
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("zt,z", [(T.UINT8, np.uint8(10)), (T.INT8, np.int8(-3))])
def test_quantize_linear_saturates_infinities(zt, z):
    x = np.array([-np.inf, np.inf, -3.0, 1e30, -1e30, 0.5, 1.5, 2.5], np.float32)
    nodes = [helper.make_node("Identity", ["x"], ["xi"]), helper.make_node("QuantizeLinear", ["xi", "s", "z"], ["y"])]
    want, got = both(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [8])], [helper.make_tensor_value_info("y", zt, None)],
                     {"s": np.float32(0.5), "z": z}, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_roi_align_then_quantize_equals_onnxruntime():
    """RoiAlign in float32 in onnxruntime's order: the pooled values quantized after it round alike."""
    X = RNG.standard_normal((1, 32, 20, 20)).astype(np.float32)
    xy = RNG.uniform(0, 60, (200, 2)).astype(np.float32)
    rois = np.concatenate([xy, xy + RNG.uniform(1, 40, (200, 2)).astype(np.float32)], axis=1)
    nodes = [helper.make_node("Relu", ["X"], ["Xr"]),
             helper.make_node("RoiAlign", ["Xr", "rois", "bi"], ["p"], output_height=7, output_width=7, sampling_ratio=2,
                              spatial_scale=0.25, mode="avg"),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["q"])]
    want, got = both(nodes, [helper.make_tensor_value_info("X", T.FLOAT, list(X.shape)),
                             helper.make_tensor_value_info("rois", T.FLOAT, [200, 4])],
                     [helper.make_tensor_value_info("q", T.UINT8, None), helper.make_tensor_value_info("p", T.FLOAT, None)],
                     {"bi": np.zeros(200, np.int64), "s": np.float32(0.003), "z": np.uint8(0)}, {"X": X, "rois": rois},
                     opset=16)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=0)
