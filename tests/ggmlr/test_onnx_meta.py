"""Port of ggmlR tests/testthat/test-onnx-meta.R (metadata, summary, inputs, print, Constant, device info)."""
import pytest

pytest.importorskip("onnx")
import ggmlpy as g  # noqa: E402
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import helper, make_binary, make_unary, model, run_onnx, vi  # noqa: E402


def test_onnx_load_returns_correct_metadata():
    m = g.onnx_load(make_unary("Relu", (4,)), device="cpu")
    assert isinstance(m, g.OnnxModel)  # R: expect_s3_class(m, "onnx_model")
    assert m.n_nodes == 1
    assert "Relu" in m.ops


def test_onnx_summary_works():
    s = g.onnx_summary(g.onnx_load(make_unary("Relu", (4,)), device="cpu"))
    assert isinstance(s, dict)
    assert s["n_nodes"] == 1


def test_onnx_inputs_returns_correct_info():
    inp = g.onnx_inputs(g.onnx_load(make_binary("Add", (4,)), device="cpu"))
    assert isinstance(inp, dict)
    assert len(inp) >= 2


def test_print_onnx_model_works():
    """R's print method; Python's str() gives the same text."""
    assert str(g.onnx_load(make_unary("Relu", (4,)), device="cpu")).startswith("ONNX Model")


def test_onnx_constant_tensor_plus_add_works():
    const = helper.make_node("Constant", [], ["C"], value=helper.make_tensor("v", 1, [4], [10, 20, 30, 40]))
    m = model([const, helper.make_node("Add", ["C", "X"], ["Y"])], [vi("X", (4,))], [vi("Y", (4,))])
    expect_equal(run_onnx(m, {"X": [1, 2, 3, 4]}), [11, 22, 33, 44], rtol=1e-5)


def test_onnx_device_info_returns_valid_diagnostics():
    import numpy as np
    m = g.onnx_load(make_unary("Relu", (4,)), device="cpu")
    g.onnx_run(m, {"X": np.array([1, -1, 2, -2], np.float32)})
    di = g.onnx_device_info(m)
    assert isinstance(di, dict)
    assert "n_nodes" in di
    assert "n_splits" in di
    assert di["n_nodes"] >= 1


def test_onnx_device_info_works_before_first_inference():
    di = g.onnx_device_info(g.onnx_load(make_unary("Relu", (4,)), device="cpu"))
    assert isinstance(di, dict)
    assert di["n_nodes"] >= 1
