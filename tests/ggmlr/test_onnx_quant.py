"""Port of ggmlR tests/testthat/test-onnx-quant.R.

R's models give zero points as float32 and feed float inputs; ONNX types zero points as 8-bit (or
wider) integers, and the quantized output takes the zero point's type. The ports use uint8 zero
points and quantized inputs where the operator needs them, with R's numbers. QLinearSigmoid,
QLinearAdd and QLinearConcat are onnxruntime's contrib operators (domain com.microsoft), not ONNX
ones: the ports put them in that domain, as onnxruntime's quantizer writes them. QLinearSigmoid's
output is read back through a DequantizeLinear (y_scale 1/256) so that R's checks on probabilities
apply."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def scalar(name, value, elem=T.FLOAT):
    dt = {T.FLOAT: np.float32, T.UINT8: np.uint8, T.INT8: np.int8}[elem]
    import onnx
    return onnx.numpy_helper.from_array(np.array([value], dtype=dt), name), vi(name, (1,), elem)


def graph(op, names, ins, outs, consts):
    return model([helper.make_node(op, names, ["Y"])], ins + [c[1] for c in consts], outs, [c[0] for c in consts])


def test_onnx_dequantizelinear_per_tensor_works():
    m = graph("DequantizeLinear", ["X", "scale", "zp"], [vi("X", (4,), T.UINT8)], [vi("Y", (4,))],
              [scalar("scale", 2.0), scalar("zp", 1, T.UINT8)])
    expect_equal(run_onnx(m, {"X": [0, 1, 2, 4]}), [-2, 0, 2, 6], rtol=1e-3)


def test_onnx_dequantizelinear_no_zero_point_works():
    m = graph("DequantizeLinear", ["X", "scale"], [vi("X", (4,), T.UINT8)], [vi("Y", (4,))], [scalar("scale", 0.5)])
    expect_equal(run_onnx(m, {"X": [2, 4, 6, 8]}), [1, 2, 3, 4], rtol=1e-3)


def test_onnx_quantizelinear_per_tensor_works():
    m = graph("QuantizeLinear", ["X", "scale", "zp"], [vi("X", (4,))], [vi("Y", (4,), T.UINT8)],
              [scalar("scale", 2.0), scalar("zp", 1, T.UINT8)])
    expect_equal(run_onnx(m, {"X": [0, 2, 4, 6]}), [1, 2, 3, 4], rtol=1e-3)


def ms_model(nodes, ins, outs, inits):
    m = model(nodes, ins, outs, inits)
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m


def test_onnx_qlinearsigmoid_works():
    consts = [scalar("x_scale", 1.0), scalar("x_zp", 0, T.INT8), scalar("y_scale", 1 / 256), scalar("y_zp", 0, T.UINT8)]
    nodes = [helper.make_node("QLinearSigmoid", ["X", "x_scale", "x_zp", "y_scale", "y_zp"], ["q"],
                              domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["q", "y_scale", "y_zp"], ["Y"])]
    m = ms_model(nodes, [vi("X", (4,), T.INT8)] + [c[1] for c in consts], [vi("Y", (4,))], [c[0] for c in consts])
    r = run_onnx(m, {"X": [0, 10, -10, 1]})
    expect_equal(r[0], 0.5, atol=0.01)
    assert r[1] > 0.99
    assert r[2] < 0.01
    assert 0.7 < r[3] < 0.8


def test_onnx_qlinearadd_works():
    names = ["A", "a_scale", "a_zp", "B", "b_scale", "b_zp", "y_scale", "y_zp"]
    consts = qparams("a", "b", "y")
    m = ms_model([helper.make_node("QLinearAdd", names, ["Y"], domain="com.microsoft")],
                 [vi("A", (4,), T.UINT8), vi("B", (4,), T.UINT8)] + [c[1] for c in consts], [vi("Y", (4,), T.UINT8)],
                 [c[0] for c in consts])
    expect_equal(run_onnx(m, {"A": [1, 2, 3, 4], "B": [10, 20, 30, 40]}), [11, 22, 33, 44], rtol=1e-3)


def qparams(*names):
    out = []
    for n in names:
        out += [scalar(n + "_scale", 1.0), scalar(n + "_zp", 0, T.UINT8)]
    return out


def test_onnx_qlinearmatmul_works():
    names = ["A", "a_scale", "a_zp", "B", "b_scale", "b_zp", "y_scale", "y_zp"]
    consts = qparams("a", "b", "y")
    m = model([helper.make_node("QLinearMatMul", names, ["Y"])],
              [vi("A", (2, 3), T.UINT8), vi("B", (3, 2), T.UINT8)] + [c[1] for c in consts],
              [vi("Y", (2, 2), T.UINT8)], [c[0] for c in consts])
    r = run_onnx(m, {"A": [1, 2, 3, 4, 5, 6], "B": [1, 0, 0, 1, 1, 1]})
    expect_equal(r, [4, 5, 10, 11], rtol=1e-3)


def test_onnx_qlinearconv_1d_works():
    names = ["X", "x_scale", "x_zp", "W", "w_scale", "w_zp", "y_scale", "y_zp"]
    consts = qparams("x", "y") + [scalar("w_scale", 1.0), scalar("w_zp", 0, T.UINT8)]
    import onnx
    w = onnx.numpy_helper.from_array(np.ones((1, 1, 2), np.uint8), "W")
    m = model([helper.make_node("QLinearConv", names, ["Y"])],
              [vi("X", (1, 1, 4), T.UINT8), vi("W", (1, 1, 2), T.UINT8)] + [c[1] for c in consts],
              [vi("Y", (1, 1, 3), T.UINT8)], [c[0] for c in consts] + [w])
    expect_equal(run_onnx(m, {"X": [1, 2, 3, 4]}), [3, 5, 7], rtol=1e-3)


def test_onnx_qlinearconcat_axis_0_works():
    names = ["y_scale", "y_zp", "A", "a_scale", "a_zp", "B", "b_scale", "b_zp"]
    consts = qparams("y", "a", "b")
    m = ms_model([helper.make_node("QLinearConcat", names, ["Y"], axis=0, domain="com.microsoft")],
                 [vi("A", (2,), T.UINT8), vi("B", (2,), T.UINT8)] + [c[1] for c in consts], [vi("Y", (4,), T.UINT8)],
                 [c[0] for c in consts])
    expect_equal(run_onnx(m, {"A": [1, 2], "B": [3, 4]}), [1, 2, 3, 4], rtol=1e-3)
