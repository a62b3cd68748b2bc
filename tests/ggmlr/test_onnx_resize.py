"""Port of ggmlR tests/testthat/test-onnx-resize.R (Resize with scales and sizes, ConvTranspose 1-D)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def test_onnx_resize_nearest_with_scales_works():
    m = model([helper.make_node("Resize", ["X", "roi", "scales"], ["Y"])],
              [vi("X", (1, 1, 2, 2)), vi("roi", (0,)), vi("scales", (4,))], [vi("Y", (1, 1, 4, 4))],
              [init("roi", (0,), []), init("scales", (4,), [1, 1, 2, 2])])
    r = run_onnx(m, {"X": [1, 2, 3, 4]})
    assert len(r) == 16
    expect_equal(r[0], 1, rtol=1e-5)
    expect_equal(r[15], 4, rtol=1e-5)
    expect_equal(r.reshape(4, 4), np.array([[1, 2], [3, 4]]).repeat(2, 0).repeat(2, 1), rtol=0, atol=0)


def test_onnx_resize_nearest_with_sizes_works():
    m = model([helper.make_node("Resize", ["X", "roi", "scales", "sizes"], ["Y"])],
              [vi("X", (1, 1, 2, 3)), vi("roi", (0,)), vi("scales", (0,)), vi("sizes", (4,), T.INT64)],
              [vi("Y", (1, 1, 4, 6))],
              [init("roi", (0,), []), init("scales", (0,), []), init("sizes", (4,), [1, 1, 4, 6], T.INT64)])
    r = run_onnx(m, {"X": np.arange(1, 7)})
    assert len(r) == 24
    expect_equal(r.reshape(4, 6), np.arange(1, 7).reshape(2, 3).repeat(2, 0).repeat(2, 1), rtol=0, atol=0)


def test_onnx_convtranspose_1d_works():
    m = model([helper.make_node("ConvTranspose", ["X", "W"], ["Y"], strides=[2])],
              [vi("X", (1, 1, 3)), vi("W", (1, 1, 2))], [vi("Y", (1, 1, 6))], [init("W", (1, 1, 2), [1.0, 1.0])])
    r = run_onnx(m, {"X": [1, 2, 3]})
    assert len(r) == 6
    expect_equal(r, [1, 1, 2, 2, 3, 3], rtol=1e-5)
