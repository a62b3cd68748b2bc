"""Port of ggmlR tests/testthat/test-onnx-logic.R (Where, Equal, and the attention-mask pattern)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import helper, make_binary, model, run_onnx, vi  # noqa: E402


def where_model(then_softmax=False):
    nodes = [helper.make_node("Where", ["C", "X", "Y"], ["W" if then_softmax else "Z"])]
    if then_softmax:
        nodes.append(helper.make_node("Softmax", ["W"], ["Z"]))
    return model(nodes, [vi("C", (4,)), vi("X", (4,)), vi("Y", (4,))], [vi("Z", (4,))])


def test_onnx_where_selects_from_x_when_cond_1_y_when_cond_0():
    r = run_onnx(where_model(), {"C": [1, 0, 1, 0], "X": [10, 20, 30, 40], "Y": [100, 200, 300, 400]})
    expect_equal(r, [10, 200, 30, 400], rtol=1e-3)


def test_onnx_where_with_minus_1e9_y_values_does_not_produce_nan():
    r = run_onnx(where_model(), {"C": [1, 1, 0, 0], "X": [0.5, 1.0, 2.0, 3.0], "Y": [-1e9] * 4})
    assert not np.isnan(r).any()
    expect_equal(r[0], 0.5, rtol=1e-3)
    expect_equal(r[1], 1.0, rtol=1e-3)
    assert r[2] < -1e8
    assert r[3] < -1e8


def test_onnx_where_with_large_neg_y_survives_softmax_downstream():
    r = run_onnx(where_model(True), {"C": [1, 1, 0, 0], "X": [1.0, 2.0, 3.0, 4.0], "Y": [-3.4e38] * 4})
    assert not np.isnan(r).any()
    assert (r >= 0).all()
    expect_equal(r.sum(), 1.0, rtol=1e-3)
    assert r[2] < 1e-5
    assert r[3] < 1e-5
    sm = np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum()
    expect_equal(r[0], sm[0], rtol=1e-3)
    expect_equal(r[1], sm[1], rtol=1e-3)


def test_onnx_equal_produces_0_1_mask():
    r = run_onnx(make_binary("Equal", (4,)), {"A": [1, 2, 3, 4], "B": [1, 0, 3, 0]})
    expect_equal(r, [1, 0, 1, 0], rtol=1e-3)


def test_onnx_equal_with_broadcast_works():
    m = model([helper.make_node("Equal", ["A", "B"], ["Y"])], [vi("A", (4,)), vi("B", (1,))], [vi("Y", (4,))])
    expect_equal(run_onnx(m, {"A": [0, 1, 0, 2], "B": [0]}), [1, 0, 1, 0], rtol=1e-3)


def test_onnx_equal_where_softmax_attention_mask_pattern_works():
    nodes = [helper.make_node("Equal", ["M", "Z"], ["eq_out"]),
             helper.make_node("Where", ["eq_out", "F", "S"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["Y"])]
    m = model(nodes, [vi("M", (4,)), vi("S", (4,)), vi("F", (1,)), vi("Z", (1,))], [vi("Y", (4,))])
    r = run_onnx(m, {"M": [1, 1, 0, 0], "S": [1.0, 2.0, 3.0, 4.0], "F": [-1e9], "Z": [0]})
    assert not np.isnan(r).any()
    expect_equal(r.sum(), 1.0, rtol=1e-3)
    assert r[2] < 1e-5
    assert r[3] < 1e-5
