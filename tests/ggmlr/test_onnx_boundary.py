"""Port of ggmlR's tests/testthat/test-onnx-boundary.R (ggmlR 0.8.2): its "4D truncation" blocks
(five-axis values must keep every element), which ggmlpy runs on ggml's four dimensions by merging two
axes (ggmlpy/onnx/rank5.py).

Blocks of ggmlR's file not ported here: aliasing, tile boundaries, Conv dispatch, graph chains and
batches (four axes or fewer, covered by the other test_onnx_*.py ports and tests/test_onnx_*.py)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def test_4d_truncation_5d_matmul_2_4_3_1_1_preserved():
    """4D truncation: 5D MatMul [2,4,3,1,1] preserved"""
    m = model([helper.make_node("Reshape", ["A", "sf"], ["A2d"]), helper.make_node("MatMul", ["A2d", "B"], ["Y2d"]),
               helper.make_node("Reshape", ["Y2d", "so"], ["Y"])],
              [vi("A", (2, 4, 3, 1, 1)), vi("B", (3, 5)), vi("sf", (2,), T.INT64), vi("so", (5,), T.INT64)],
              [vi("Y", (2, 4, 5, 1, 1))], [init("sf", (2,), [8, 3], T.INT64), init("so", (5,), [2, 4, 5, 1, 1], T.INT64)])
    a, b = np.arange(1, 25) * 0.1, np.arange(1, 16) * 0.1
    result = run_onnx(m, {"A": a, "B": b})
    assert len(result) == 40
    # ggmlpy: the values too (ggmlR checks the count)
    expect_equal(result, (a.reshape(8, 3) @ b.reshape(3, 5)).reshape(-1), rtol=1e-5)


def test_4d_truncation_relu_on_5d_1_2_3_4_2_preserves_all_48_elements():
    """4D truncation: Relu on 5D [1,2,3,4,2] preserves all 48 elements"""
    m = model([helper.make_node("Relu", ["X"], ["Y"])], [vi("X", (1, 2, 3, 4, 2))], [vi("Y", (1, 2, 3, 4, 2))])
    x = np.arange(-24, 24) * 0.1
    result = run_onnx(m, {"X": x})
    assert len(result) == 48
    expect_equal(result, np.maximum(x, 0), rtol=1e-5)


def test_4d_truncation_add_two_5d_tensors_1_2_3_4_2():
    """4D truncation: Add two 5D tensors [1,2,3,4,2]"""
    m = model([helper.make_node("Add", ["A", "B"], ["Y"])], [vi("A", (1, 2, 3, 4, 2)), vi("B", (1, 2, 3, 4, 2))],
              [vi("Y", (1, 2, 3, 4, 2))])
    a, b = np.arange(1, 49) * 0.1, np.ones(48)
    result = run_onnx(m, {"A": a, "B": b})
    assert len(result) == 48
    expect_equal(result, a + b, rtol=1e-5)


def test_4d_truncation_reshape_to_5d_then_back_preserves_all_values_60():
    """4D truncation: Reshape to 5D then back preserves all values [60]"""
    m = model([helper.make_node("Reshape", ["X", "s5d"], ["X5d"]), helper.make_node("Relu", ["X5d"], ["X5r"]),
               helper.make_node("Reshape", ["X5r", "sb"], ["Y"])],
              [vi("X", (60,)), vi("s5d", (5,), T.INT64), vi("sb", (1,), T.INT64)], [vi("Y", (60,))],
              [init("s5d", (5,), [2, 3, 5, 2, 1], T.INT64), init("sb", (1,), [60], T.INT64)])
    x = np.arange(-30, 30) * 0.1
    result = run_onnx(m, {"X": x})
    assert len(result) == 60
    expect_equal(result, np.maximum(x, 0), rtol=1e-5)


def test_4d_truncation_with_five_axes_above_one():
    """ggmlpy: ggmlR's shapes above have ones, which ggmlpy drops; [2,4,3,2,2] takes the merged pair."""
    m = model([helper.make_node("Add", ["A", "B"], ["S"]), helper.make_node("Relu", ["S"], ["Y"])],
              [vi("A", (2, 4, 3, 2, 2)), vi("B", (2, 4, 3, 2, 2))], [vi("Y", (2, 4, 3, 2, 2))])
    a, b = np.arange(-48, 48) * 0.1, np.linspace(-1, 1, 96)
    result = run_onnx(m, {"A": a, "B": b})
    assert len(result) == 96
    expect_equal(result, np.maximum(a + b, 0), rtol=1e-5)
