"""Port of ggmlR tests/testthat/test-onnx-misc.R (Gelu, EyeLike, ConstantOfShape, Reshape, Upsample).
Gelu is an opset-20 operator and Upsample was removed after opset 9: those ports declare those opsets
(R writes 13)."""
import math

import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, make_unary, model, run_onnx, vi  # noqa: E402


def test_onnx_gelu_works():
    m = make_unary("Gelu", (4,))
    m.opset_import[0].version = 20
    x = [-1, 0, 0.5, 1]
    r = run_onnx(m, {"X": x})
    expect_equal(r[1], 0, atol=1e-5)
    assert -1 < r[0] < 0
    assert 0.3 < r[2] < 0.4
    assert 0.8 < r[3] < 0.9
    expect_equal(r, [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x], rtol=1e-5, atol=1e-7)


def eyelike(dims):
    return model([helper.make_node("EyeLike", ["X"], ["Y"]), helper.make_node("Add", ["Y", "X"], ["Z"])],
                 [vi("X", dims)], [vi("Z", dims)])


def test_onnx_eyelike_3x3_identity_works():
    expect_equal(run_onnx(eyelike((3, 3)), {"X": np.zeros(9)}), np.eye(3).reshape(-1), atol=1e-5)


def test_onnx_eyelike_2x4_rectangular_works():
    expect_equal(run_onnx(eyelike((2, 4)), {"X": np.zeros(8)}), [1, 0, 0, 0, 0, 1, 0, 0], atol=1e-5)


def cos_model(value=None):
    attrs = {} if value is None else {"value": helper.make_tensor("value", T.FLOAT, [1], [value])}
    return model([helper.make_node("ConstantOfShape", ["shape"], ["C"], **attrs), helper.make_node("Add", ["X", "C"], ["Z"])],
                 [vi("X", (4,)), vi("shape", (1,), T.INT64)], [vi("Z", (4,))], [init("shape", (1,), [4], T.INT64)])


def test_onnx_constantofshape_zeros_works():
    expect_equal(run_onnx(cos_model(), {"X": [1, 2, 3, 4]}), [1, 2, 3, 4], rtol=1e-5)


def test_onnx_constantofshape_with_fill_value_works():
    expect_equal(run_onnx(cos_model(7.0), {"X": [1, 2, 3, 4]}), [8, 9, 10, 11], rtol=1e-5)


def test_onnx_shape_is_tested_indirectly_via_reshape_cval_pipeline():
    m = model([helper.make_node("Reshape", ["X", "shape"], ["Y"])], [vi("X", (12,)), vi("shape", (2,), T.INT64)],
              [vi("Y", (4, 3))], [init("shape", (2,), [-1, 3], T.INT64)])
    r = run_onnx(m, {"X": np.arange(1, 13)})
    assert len(r) == 12
    expect_equal(r, np.arange(1, 13), rtol=1e-5)


def test_onnx_upsample_nearest_2x_works():
    m = model([helper.make_node("Upsample", ["X", "scales"], ["Y"])], [vi("X", (1, 1, 2, 2)), vi("scales", (4,))],
              [vi("Y", (1, 1, 4, 4))], [init("scales", (4,), [1, 1, 2, 2])])
    m.opset_import[0].version = 9
    r = run_onnx(m, {"X": [1, 2, 3, 4]})
    assert len(r) == 16
    expect_equal(r[0], 1, rtol=1e-5)
    expect_equal(r[15], 4, rtol=1e-5)
