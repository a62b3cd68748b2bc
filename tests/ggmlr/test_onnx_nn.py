"""Port of ggmlR tests/testthat/test-onnx-nn.R (MatMul, LayerNormalization, Conv, BatchNormalization,
Gather)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def test_onnx_matmul_works_for_2d():
    m = model([helper.make_node("MatMul", ["A", "B"], ["Y"])], [vi("A", (2, 3)), vi("B", (3, 2))], [vi("Y", (2, 2))])
    expect_equal(run_onnx(m, {"A": np.arange(1, 7), "B": np.arange(1, 7)}), [22, 28, 49, 64], rtol=1e-3)


def test_onnx_layernormalization_works_1d():
    n = 4
    m = model([helper.make_node("LayerNormalization", ["X", "scale", "bias"], ["Y"], epsilon=1e-5)],
              [vi("X", (n,)), vi("scale", (n,)), vi("bias", (n,))], [vi("Y", (n,))],
              [init("scale", (n,), np.ones(n)), init("bias", (n,), np.zeros(n))])
    m.opset_import[0].version = 17  # LayerNormalization is opset 17 (R writes 13)
    x = np.array([1, 2, 3, 4.0])
    r = run_onnx(m, {"X": x})
    assert len(r) == 4
    assert abs(r.mean()) < 0.01
    expect_equal(r, (x - x.mean()) / np.sqrt(np.mean((x - x.mean()) ** 2)), rtol=0.01)


def conv(with_bias):
    names = ["X", "W"] + (["B"] if with_bias else [])
    inits = [init("W", (1, 1, 2, 2), np.ones(4))] + ([init("B", (1,), [10.0])] if with_bias else [])
    ins = [vi("X", (1, 1, 3, 3)), vi("W", (1, 1, 2, 2))] + ([vi("B", (1,))] if with_bias else [])
    return model([helper.make_node("Conv", names, ["Y"])], ins, [vi("Y", (1, 1, 2, 2))], inits)


def test_onnx_conv_2d_basic_works():
    expect_equal(run_onnx(conv(False), {"X": np.arange(1, 10)}), [12, 16, 24, 28], rtol=1e-3)


def test_onnx_conv_2d_with_bias_works():
    expect_equal(run_onnx(conv(True), {"X": np.arange(1, 10)}), np.array([12, 16, 24, 28]) + 10, rtol=1e-3)


def batchnorm(dims, C, scale, bias):
    names = ["X", "scale", "bias", "mean", "var"]
    inits = [init("scale", (C,), scale), init("bias", (C,), bias), init("mean", (C,), np.zeros(C)),
             init("var", (C,), np.ones(C))]
    return model([helper.make_node("BatchNormalization", names, ["Y"])],
                 [vi("X", dims)] + [vi(n, (C,)) for n in names[1:]], [vi("Y", dims)], inits)


def test_onnx_batchnormalization_2d_works():
    """Variance 1 and epsilon 1e-5: y = x / sqrt(1 + 1e-5), within R's tolerance of x."""
    x = np.arange(1, 9.0)
    expect_equal(run_onnx(batchnorm((2, 4), 4, np.ones(4), np.zeros(4)), {"X": x}), x, rtol=1e-3)


def test_onnx_batchnormalization_4d_works():
    r = run_onnx(batchnorm((1, 2, 2, 2), 2, [2.0, 1.0], [1.0, 0.0]), {"X": np.arange(1, 9)})
    expect_equal(r, [3, 5, 7, 9, 5, 6, 7, 8], rtol=1e-3)


def test_onnx_gather_works_embedding_lookup():
    w = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
    m = model([helper.make_node("Gather", ["W", "I"], ["Y"], axis=0)], [vi("I", (2,), T.INT64), vi("W", (4, 3))],
              [vi("Y", (2, 3))], [init("W", (4, 3), w)])
    expect_equal(run_onnx(m, {"I": [0, 2]}), [0.1, 0.2, 0.3, 0.7, 0.8, 0.9], rtol=1e-3)
