"""Port of ggmlR tests/testthat/test-onnx-elementwise.R."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import helper, make_binary, model, run_onnx, vi  # noqa: E402


def binary(op, da, db, dout):
    return model([helper.make_node(op, ["A", "B"], ["Y"])], [vi("A", da), vi("B", db)], [vi("Y", dout)])


def test_onnx_add_works():
    a, b = np.array([1, 2, 3, 4.0]), np.array([10, 20, 30, 40.0])
    expect_equal(run_onnx(make_binary("Add", (4,)), {"A": a, "B": b}), a + b, rtol=1e-5)


def test_onnx_sub_works():
    a, b = np.array([10, 20, 30, 40.0]), np.array([1, 2, 3, 4.0])
    expect_equal(run_onnx(make_binary("Sub", (4,)), {"A": a, "B": b}), a - b, rtol=1e-5)


def test_onnx_mul_works():
    a, b = np.array([2, 3, 4, 5.0]), np.array([10, 10, 10, 10.0])
    expect_equal(run_onnx(make_binary("Mul", (4,)), {"A": a, "B": b}), a * b, rtol=1e-5)


def test_onnx_div_works():
    a, b = np.array([10, 20, 30, 40.0]), np.array([2, 4, 5, 8.0])
    expect_equal(run_onnx(make_binary("Div", (4,)), {"A": a, "B": b}), a / b, rtol=1e-5)


def test_onnx_add_broadcast_4_plus_1():
    y = run_onnx(make_binary("Add", (4,), (1,)), {"A": [1, 2, 3, 4], "B": [10]})
    expect_equal(y, [11, 12, 13, 14], rtol=1e-5)


def test_onnx_mul_broadcast_2x4_times_1x4():
    y = run_onnx(binary("Mul", (2, 4), (1, 4), (2, 4)), {"A": np.arange(1, 9), "B": [10, 20, 30, 40]})
    expect_equal(y, [10, 40, 90, 160, 50, 120, 210, 320], rtol=1e-3)


def test_onnx_add_broadcast_2x3x4_plus_1x1x4():
    a, b = np.arange(1, 25), np.array([100, 200, 300, 400])
    y = run_onnx(binary("Add", (2, 3, 4), (1, 1, 4), (2, 3, 4)), {"A": a, "B": b})
    expect_equal(y, a + np.tile(b, 6), rtol=1e-3)


def test_onnx_add_broadcast_2x3_plus_3_right_align():
    y = run_onnx(binary("Add", (2, 3), (3,), (2, 3)), {"A": [1, 2, 3, 4, 5, 6], "B": [10, 20, 30]})
    expect_equal(y, [11, 22, 33, 14, 25, 36], rtol=1e-5)


def test_onnx_add_broadcast_channel_bias():
    y = run_onnx(binary("Add", (1, 4, 1, 1), (1, 4, 3, 3), (1, 4, 3, 3)), {"A": [10, 20, 30, 40], "B": np.ones(36)})
    assert len(y) == 36
    expect_equal(y[0], 11, rtol=1e-3)   # R's result[1], [10], [19], [28]: 1-based
    expect_equal(y[9], 21, rtol=1e-3)
    expect_equal(y[18], 31, rtol=1e-3)
    expect_equal(y[27], 41, rtol=1e-3)
