"""Port of ggmlR tests/testthat/test-onnx-shape.R (Reshape, Transpose, Flatten, (Un)Squeeze, Concat,
Split, Expand, Slice). R writes Squeeze/Unsqueeze's `axes` as an attribute under opset 13, where it is
an input (onnx.checker rejects the model): those two ports declare opset 11."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def reshape_model(din, shape, dout):
    return model([helper.make_node("Reshape", ["X", "shape"], ["Y"])], [vi("X", din), vi("shape", (len(shape),), T.INT64)],
                 [vi("Y", dout)], [init("shape", (len(shape),), shape, T.INT64)])


def one(op, din, dout, **attrs):
    return model([helper.make_node(op, ["X"], ["Y"], **attrs)], [vi("X", din)], [vi("Y", dout)])


def with_relu(op, din, dout, opset=None, **attrs):
    m = model([helper.make_node(op, ["X"], ["tmp"], **attrs), helper.make_node("Relu", ["tmp"], ["Y"])],
              [vi("X", din)], [vi("Y", dout)])
    if opset:
        m.opset_import[0].version = opset
    return m


def test_onnx_reshape_preserves_elements():
    assert len(run_onnx(reshape_model((2, 3), [3, 2], (3, 2)), {"X": np.arange(1, 7)})) == 6


def test_onnx_reshape_with_minus_1_infers_dim():
    x = np.arange(1, 7.0)
    r = run_onnx(reshape_model((2, 3), [-1], (6,)), {"X": x})
    assert len(r) == 6
    expect_equal(r, x, rtol=1e-5)


def test_onnx_reshape_with_minus_1_partial():
    assert len(run_onnx(reshape_model((2, 3, 4), [2, -1], (2, 12)), {"X": np.arange(1, 25)})) == 24


def test_onnx_reshape_with_0_keeps_dim():
    x = np.arange(1, 7.0)
    r = run_onnx(reshape_model((2, 3), [0, -1], (2, 3)), {"X": x})
    assert len(r) == 6
    expect_equal(r, x, rtol=1e-5)


def test_onnx_transpose_2d_default_reverse_dims():
    expect_equal(run_onnx(one("Transpose", (2, 3), (3, 2)), {"X": np.arange(1, 7)}), [1, 4, 2, 5, 3, 6], rtol=1e-5)


def test_onnx_transpose_3d_with_perm():
    r = run_onnx(one("Transpose", (2, 3, 4), (2, 4, 3), perm=[0, 2, 1]), {"X": np.arange(1, 25)})
    assert len(r) == 24
    expect_equal(r[0], 1, rtol=1e-5)
    expect_equal(r, np.arange(1, 25).reshape(2, 3, 4).transpose(0, 2, 1).reshape(-1), rtol=0, atol=0)


def test_onnx_transpose_4d_nchw_to_nhwc():
    r = run_onnx(one("Transpose", (1, 2, 3, 4), (1, 3, 4, 2), perm=[0, 2, 3, 1]), {"X": np.arange(1, 25)})
    assert len(r) == 24
    expect_equal(r[0], 1, rtol=1e-5)
    expect_equal(r.sum(), np.arange(1, 25).sum(), rtol=1e-3)


def test_onnx_transpose_identity_perm_is_no_op():
    x = np.arange(1, 7.0)
    expect_equal(run_onnx(one("Transpose", (2, 3), (2, 3), perm=[0, 1]), {"X": x}), x, rtol=1e-5)


def test_onnx_flatten_works():
    """R declares the output [6]; Flatten(axis=1) of [2, 3] is [2, 3] (same elements in order)."""
    x = np.arange(1, 7.0)
    r = run_onnx(one("Flatten", (2, 3), (2, 3)), {"X": x})
    assert len(r) == 6
    expect_equal(r, x, rtol=1e-5)


def test_onnx_unsqueeze_works_attr_axes():
    x = np.array([1, -2, 3, -4, 5, -6.0])
    expect_equal(run_onnx(with_relu("Unsqueeze", (2, 3), (1, 2, 3), 11, axes=[0]), {"X": x}), np.maximum(x, 0),
                 rtol=1e-5)


def test_onnx_squeeze_works_attr_axes():
    x = np.array([1, -2, 3, -4, 5, -6.0])
    expect_equal(run_onnx(with_relu("Squeeze", (1, 2, 3), (2, 3), 11, axes=[0]), {"X": x}), np.maximum(x, 0),
                 rtol=1e-5)


def test_onnx_squeeze_without_axes_squeezes_all_1_dims():
    x = np.array([-1, 2, -3, 4.0])
    expect_equal(run_onnx(with_relu("Squeeze", (1, 4, 1), (4,)), {"X": x}), np.maximum(x, 0), rtol=1e-5)


def concat(da, db, dout, axis):
    return model([helper.make_node("Concat", ["A", "B"], ["Y"], axis=axis)], [vi("A", da), vi("B", db)], [vi("Y", dout)])


def test_onnx_concat_axis_0_works():
    expect_equal(run_onnx(concat((3,), (2,), (5,), 0), {"A": [1, 2, 3], "B": [4, 5]}), [1, 2, 3, 4, 5], rtol=1e-5)


def test_onnx_concat_axis_1_works_2d():
    r = run_onnx(concat((2, 2), (2, 3), (2, 5), 1), {"A": [1, 2, 3, 4], "B": [5, 6, 7, 8, 9, 10]})
    expect_equal(r, [1, 2, 5, 6, 7, 3, 4, 8, 9, 10], rtol=1e-5)


def test_onnx_split_works_with_equal_chunks():
    m = model([helper.make_node("Split", ["X"], ["Y1", "Y2"], axis=0), helper.make_node("Add", ["Y1", "Y2"], ["Z"])],
              [vi("X", (6,))], [vi("Z", (3,))])
    expect_equal(run_onnx(m, {"X": [1, 2, 3, 10, 20, 30]}), [11, 22, 33], rtol=1e-5)


def test_onnx_split_works_with_explicit_sizes():
    m = model([helper.make_node("Split", ["X", "sp"], ["Y1", "Y2"], axis=0), helper.make_node("Relu", ["Y2"], ["Z"])],
              [vi("X", (6,)), vi("sp", (2,), T.INT64)], [vi("Z", (4,))], [init("sp", (2,), [2, 4], T.INT64)])
    expect_equal(run_onnx(m, {"X": [100, 200, -1, 2, -3, 4]}), [0, 2, 0, 4], rtol=1e-5)


def test_onnx_expand_broadcasts_1d_to_2d():
    m = model([helper.make_node("Expand", ["X", "shape"], ["Y"]), helper.make_node("Relu", ["Y"], ["Z"])],
              [vi("X", (3,)), vi("shape", (2,), T.INT64)], [vi("Z", (2, 3))], [init("shape", (2,), [2, 3], T.INT64)])
    expect_equal(run_onnx(m, {"X": [-1, 2, 3]}), [0, 2, 3, 0, 2, 3], rtol=1e-5)


def test_onnx_expand_broadcasts_scalar_to_1d():
    m = model([helper.make_node("Expand", ["X", "shape"], ["Y"])], [vi("X", (1,)), vi("shape", (1,), T.INT64)],
              [vi("Y", (4,))], [init("shape", (1,), [4], T.INT64)])
    expect_equal(run_onnx(m, {"X": [5]}), [5, 5, 5, 5], rtol=1e-5)


def slice_model(din, dout, starts, ends, axes=None):
    names = ["X", "starts", "ends"] + (["axes"] if axes is not None else [])
    inits = [init("starts", (1,), starts, T.INT64), init("ends", (1,), ends, T.INT64)]
    if axes is not None:
        inits.append(init("axes", (1,), axes, T.INT64))
    return model([helper.make_node("Slice", names, ["Y"])],
                 [vi("X", din)] + [vi(n, (1,), T.INT64) for n in names[1:]], [vi("Y", dout)], inits)


def test_onnx_slice_works_on_1d():
    r = run_onnx(slice_model((6,), (3,), [1], [4]), {"X": [10, 20, 30, 40, 50, 60]})
    expect_equal(r, [20, 30, 40], rtol=1e-5)


def test_onnx_slice_works_on_2d_with_axes():
    r = run_onnx(slice_model((2, 4), (2, 2), [1], [3], [1]), {"X": np.arange(1, 9)})
    expect_equal(r, [2, 3, 6, 7], rtol=1e-5)
