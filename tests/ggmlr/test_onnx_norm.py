"""Port of ggmlR tests/testthat/test-onnx-norm.R.

R writes these models under opset 13, where GroupNormalization (opset 18) and RMSNormalization
(opset 23) do not exist yet and onnx.checker rejects them: the ports declare the opset that
defines each operator. R only checks sums and finiteness; the exact values are checked too."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import helper, init, make_unary, model, run_onnx, vi  # noqa: E402


def group_norm(dims, C):
    m = model([helper.make_node("GroupNormalization", ["X", "scale", "bias"], ["Y"], num_groups=2)],
              [vi("X", dims), vi("scale", (C,)), vi("bias", (C,))], [vi("Y", dims)],
              [init("scale", (C,), np.ones(C)), init("bias", (C,), np.zeros(C))])
    m.opset_import[0].version = 21
    return m


def test_onnx_groupnormalization_1d_works():
    x = np.array([1, 3, 2, 6.0])
    r = run_onnx(group_norm((1, 4), 4), {"X": x})
    assert len(r) == 4
    assert np.isfinite(r).all()
    expect_equal(r.sum(), 0, atol=0.5)
    g = x.reshape(2, 2)
    expect_equal(r, ((g - g.mean(1, keepdims=True)) / np.sqrt(g.var(1, keepdims=True) + 1e-5)).reshape(-1),
                 rtol=1e-4, atol=1e-5)


def test_onnx_groupnormalization_4d_works():
    x = np.arange(1, 9.0)
    r = run_onnx(group_norm((1, 2, 2, 2), 2), {"X": x})
    assert len(r) == 8
    expect_equal(r[:4].sum(), 0, atol=0.1)
    expect_equal(r[4:].sum(), 0, atol=0.1)


def rms(dims):
    m = make_unary("RMSNormalization", dims)
    m.opset_import[0].version = 23
    return m


def test_onnx_rmsnormalization_works():
    """ONNX's RMSNormalization needs its scale input; R's model omits it (ggmlR treats it as ones):
    the port gives a scale of ones."""
    x = np.array([1, 2, 3, 4.0])
    m = rms((4,))
    m.graph.node[0].input.append("scale")
    m.graph.initializer.append(init("scale", (4,), np.ones(4)))
    r = run_onnx(m, {"X": x})
    assert len(r) == 4
    expect_equal(r, x / np.sqrt(np.mean(x ** 2)), rtol=0.01)


def test_onnx_rmsnormalization_uniform_input_works():
    m = rms((4,))
    m.graph.node[0].input.append("scale")
    m.graph.initializer.append(init("scale", (4,), np.ones(4)))
    expect_equal(run_onnx(m, {"X": [3, 3, 3, 3]}), np.ones(4), rtol=0.01)
