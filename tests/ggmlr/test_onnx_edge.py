"""Port of ggmlR's tests/testthat/test-onnx-edge.R (ggmlR 0.8.2): its five-axis blocks (5D Reshape,
5D Transpose), which ggmlpy runs on ggml's four dimensions by merging two axes (ggmlpy/onnx/rank5.py).

Blocks of ggmlR's file not ported here: scalar tensors, broadcasting, negative axes, large batches
(four axes or fewer, covered by the other test_onnx_*.py ports and tests/test_onnx_*.py)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def reshape_relu(din, shape, dout):
    return model([helper.make_node("Reshape", ["X", "shape"], ["tmp"]), helper.make_node("Relu", ["tmp"], ["Y"])],
                 [vi("X", din), vi("shape", (len(shape),), T.INT64)], [vi("Y", dout)],
                 [init("shape", (len(shape),), shape, T.INT64)])


def transpose(din, perm, dout):
    return model([helper.make_node("Transpose", ["X"], ["Y"], perm=list(perm))], [vi("X", din)], [vi("Y", dout)])


def test_5d_reshape_2_3_4_3_2_to_144_flatten():
    """5D Reshape: [2,3,4,3,2] -> [144] flatten"""
    x = np.arange(-72, 72) * 1.0
    result = run_onnx(reshape_relu((2, 3, 4, 3, 2), [144], (144,)), {"X": x})
    assert len(result) == 144
    expect_equal(result, np.maximum(x, 0), rtol=1e-5)


def test_5d_reshape_144_to_2_3_4_3_2_expand():
    """5D Reshape: [144] -> [2,3,4,3,2] expand"""
    x = np.arange(-72, 72) * 1.0
    result = run_onnx(reshape_relu((144,), [2, 3, 4, 3, 2], (2, 3, 4, 3, 2)), {"X": x})
    assert len(result) == 144
    expect_equal(result, np.maximum(x, 0), rtol=1e-5)


def test_5d_reshape_round_trip_24_to_1_2_3_4_1_preserves_values():
    """5D Reshape round-trip: [24] -> [1,2,3,4,1] preserves values"""
    x = np.arange(-12, 12) * 1.0
    result = run_onnx(reshape_relu((24,), [1, 2, 3, 4, 1], (1, 2, 3, 4, 1)), {"X": x})
    assert len(result) == 24
    expect_equal(result, np.maximum(x, 0), rtol=1e-5)


def test_5d_transpose_perm_0_1_2_4_3_swaps_last_two_dims():
    """5D Transpose: perm=[0,1,2,4,3] swaps last two dims"""
    result = run_onnx(transpose((1, 2, 1, 2, 3), [0, 1, 2, 4, 3], (1, 2, 1, 3, 2)), {"X": np.arange(1, 13) * 1.0})
    assert len(result) == 12
    expect_equal(result, [1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12], rtol=1e-5)


def test_5d_transpose_perm_0_2_1_3_4_swaps_middle_dims():
    """5D Transpose: perm=[0,2,1,3,4] swaps middle dims"""
    result = run_onnx(transpose((1, 2, 3, 1, 1), [0, 2, 1, 3, 4], (1, 3, 2, 1, 1)), {"X": np.arange(1, 7) * 1.0})
    assert len(result) == 6
    expect_equal(result, [1, 4, 2, 5, 3, 6], rtol=1e-5)


def test_5d_transpose_with_every_axis_above_one():
    """ggmlpy: the same two permutations where no axis is one (ggmlR's own shapes have ones, which
    ggmlpy drops; these take the merged pair)."""
    x = np.arange(2 * 3 * 4 * 3 * 2) * 1.0
    for perm in ([0, 1, 2, 4, 3], [0, 2, 1, 3, 4]):
        want = np.transpose(x.reshape(2, 3, 4, 3, 2), perm)
        result = run_onnx(transpose((2, 3, 4, 3, 2), perm, want.shape), {"X": x})
        expect_equal(result, want.reshape(-1), rtol=0, atol=0)
