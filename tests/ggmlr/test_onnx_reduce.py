"""Port of ggmlR tests/testthat/test-onnx-reduce.R (reductions, pooling, Pad)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, make_unary, model, run_onnx, vi  # noqa: E402


def test_onnx_reducemean_reduces_to_scalar():
    expect_equal(run_onnx(make_unary("ReduceMean", (4,)), {"X": [2, 4, 6, 8]}), [5.0], rtol=1e-4)


def test_onnx_reducesum_reduces_to_scalar():
    expect_equal(run_onnx(make_unary("ReduceSum", (4,)), {"X": [1, 2, 3, 4]}), [10.0], rtol=1e-4)


def pool(op):
    return model([helper.make_node(op, ["X"], ["Y"], kernel_shape=[2, 2], strides=[2, 2])],
                 [vi("X", (1, 1, 4, 4))], [vi("Y", (1, 1, 2, 2))])


def test_onnx_maxpool_2d_works():
    expect_equal(run_onnx(pool("MaxPool"), {"X": np.arange(1, 17)}), [6, 8, 14, 16], rtol=1e-3)


def test_onnx_averagepool_2d_works():
    expect_equal(run_onnx(pool("AveragePool"), {"X": np.arange(1, 17)}), [3.5, 5.5, 11.5, 13.5], rtol=1e-3)


def test_onnx_globalaveragepool_works():
    m = model([helper.make_node("GlobalAveragePool", ["X"], ["Y"])], [vi("X", (1, 2, 3, 3))], [vi("Y", (1, 2, 1, 1))])
    expect_equal(run_onnx(m, {"X": np.arange(1, 19)}), [5, 14], rtol=1e-3)


def test_onnx_pad_2d_zero_padding_works():
    """R checks only the size and the sum (its note: ggml_pad pads at the end only); ggmlpy pads
    both sides as ONNX says, which the last assertion checks."""
    m = model([helper.make_node("Pad", ["X", "pads"], ["Y"])], [vi("X", (1, 1, 2, 2)), vi("pads", (8,), T.INT64)],
              [vi("Y", (1, 1, 4, 4))], [init("pads", (8,), [0, 0, 1, 1, 0, 0, 1, 1], T.INT64)])
    r = run_onnx(m, {"X": [1, 2, 3, 4]})
    assert len(r) == 16
    expect_equal(r.sum(), 10, rtol=1e-3)
    expect_equal(r.reshape(4, 4), np.pad(np.array([[1, 2], [3, 4.0]]), 1), rtol=0, atol=0)
