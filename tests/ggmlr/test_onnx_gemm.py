"""Port of ggmlR tests/testthat/test-onnx-gemm.R (Gemm, Pow, Erf, Clip, Cast, Equal, Where)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import helper, init, make_gemm, make_unary, model, run_onnx, vi  # noqa: E402


def test_onnx_gemm_basic_a_at_b_works():
    r = run_onnx(make_gemm(2, 3, 4), {"A": [1, 2, 3, 4, 5, 6]})
    expect_equal(r, [6, 6, 6, 6, 15, 15, 15, 15], rtol=1e-3)


def test_onnx_gemm_with_bias_works():
    r = run_onnx(make_gemm(2, 3, 4, bias_data=[10, 20, 30, 40]), {"A": [1, 2, 3, 4, 5, 6]})
    expect_equal(r, [16, 26, 36, 46, 25, 35, 45, 55], rtol=1e-3)


def pow_model(e):
    return model([helper.make_node("Pow", ["X", "E"], ["Y"])], [vi("X", (4,)), vi("E", (1,))], [vi("Y", (4,))],
                 [init("E", (1,), [e])])


def test_onnx_pow_scalar_exponent_works():
    x = np.array([1, 2, 3, 4.0])
    expect_equal(run_onnx(pow_model(2.0), {"X": x}), x ** 2, rtol=1e-3)


def test_onnx_pow_square_root_works():
    x = np.array([1, 4, 9, 16.0])
    expect_equal(run_onnx(pow_model(0.5), {"X": x}), np.sqrt(x), rtol=1e-3)


def test_onnx_erf_approximation_works():
    """R checks only signs and order (its Erf is a tanh approximation); ggmlpy's is within 1.5e-7,
    so the values are checked too."""
    r = run_onnx(make_unary("Erf", (4,)), {"X": [-1, 0, 0.5, 1]})
    expect_equal(r[1], 0, atol=1e-5)
    assert r[0] < 0
    assert r[2] > 0 and r[3] > 0
    assert abs(r[3]) > abs(r[2])
    expect_equal(r, [-0.8427007929, 0.0, 0.5204998778, 0.8427007929], rtol=1e-6, atol=2e-7)


def test_onnx_clip_with_attribute_min_max_works():
    m = model([helper.make_node("Clip", ["X"], ["Y"], min=0.0, max=6.0)], [vi("X", (4,))], [vi("Y", (4,))])
    m.opset_import[0].version = 6  # Clip's min/max attributes are opset < 11 (R writes them under opset 13)
    expect_equal(run_onnx(m, {"X": [-2, 3, 7, 0]}), [0, 3, 6, 0], rtol=1e-5)


def test_onnx_cast_is_pass_through_for_f32():
    x = np.array([1.5, 2.5, 3.5, 4.5])
    expect_equal(run_onnx(make_unary("Cast", (4,), {"to": 1}), {"X": x}), x, rtol=1e-5)


def test_onnx_equal_produces_0_1_mask():
    m = model([helper.make_node("Equal", ["A", "B"], ["Y"])], [vi("A", (4,)), vi("B", (4,))], [vi("Y", (4,))])
    expect_equal(run_onnx(m, {"A": [1, 2, 3, 4], "B": [1, 0, 3, 5]}), [1, 0, 1, 0], rtol=1e-5)


def test_onnx_where_conditional_select_works():
    m = model([helper.make_node("Where", ["C", "X", "Y"], ["Z"])], [vi("C", (4,)), vi("X", (4,)), vi("Y", (4,))],
              [vi("Z", (4,))])
    r = run_onnx(m, {"C": [1, 0, 1, 0], "X": [10, 20, 30, 40], "Y": [100, 200, 300, 400]})
    expect_equal(r, [10, 200, 30, 400], rtol=1e-3)
