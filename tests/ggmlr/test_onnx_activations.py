"""Port of ggmlR tests/testthat/test-onnx-activations.R (R's tolerances kept, as relative ones).

Blocks of ggmlR's file not ported, and why:
- "test_onnx_silu_works": 'Silu' is no ONNX operator (onnx.checker rejects the model); ONNX models spell it x
  * Sigmoid(x), which ggmlpy runs.
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import make_chain, make_unary, run_onnx  # noqa: E402


def test_onnx_relu_works():
    x = np.array([-2, -1, 0, 3.0])
    expect_equal(run_onnx(make_unary("Relu", (4,)), {"X": x}), np.maximum(x, 0), rtol=1e-5)


def test_onnx_sigmoid_works():
    x = np.array([-2, 0, 1, 5.0])
    expect_equal(run_onnx(make_unary("Sigmoid", (4,)), {"X": x}), 1 / (1 + np.exp(-x)), rtol=1e-4)


def test_onnx_tanh_works():
    x = np.array([-2, -0.5, 0, 1.5])
    expect_equal(run_onnx(make_unary("Tanh", (4,)), {"X": x}), np.tanh(x), rtol=1e-5)


def test_onnx_elu_works():
    x = np.array([-2, -1, 0, 1.0])
    expect_equal(run_onnx(make_unary("Elu", (4,)), {"X": x}), np.where(x >= 0, x, np.exp(x) - 1), rtol=1e-4)


def test_onnx_softmax_works():
    x = np.array([1, 2, 3, 4.0])
    expect_equal(run_onnx(make_unary("Softmax", (4,)), {"X": x}), np.exp(x) / np.exp(x).sum(), rtol=1e-4)


def test_onnx_leakyrelu_works():
    x = np.array([-2, -1, 0, 3.0])
    y = run_onnx(make_unary("LeakyRelu", (4,), {"alpha": 0.1}), {"X": x})
    expect_equal(y, np.where(x >= 0, x, 0.1 * x), rtol=1e-5)


def test_onnx_identity_is_pass_through():
    x = np.array([1, 2, 3, 4.0])
    expect_equal(run_onnx(make_unary("Identity", (4,)), {"X": x}), x, rtol=1e-5)


def test_onnx_dropout_is_pass_through_inference():
    x = np.array([1, 2, 3, 4.0])
    expect_equal(run_onnx(make_unary("Dropout", (4,)), {"X": x}), x, rtol=1e-5)


def test_onnx_chain_relu_sigmoid_works():
    x = np.array([-2, -1, 0, 3.0])
    expect_equal(run_onnx(make_chain("Relu", "Sigmoid", (4,)), {"X": x}), 1 / (1 + np.exp(-np.maximum(x, 0))),
                 rtol=1e-4)
