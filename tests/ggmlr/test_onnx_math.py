"""Port of ggmlR tests/testthat/test-onnx-math.R."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import make_unary, run_onnx  # noqa: E402


@pytest.mark.parametrize("op,x,fn,tol", [
    ("Sqrt", [1, 4, 9, 16], np.sqrt, 1e-5),
    ("Exp", [0, 1, 2, -1], np.exp, 1e-4),
    ("Log", [1, 2, 10, 100], np.log, 1e-4),
    ("Abs", [-3, -1, 0, 5], np.abs, 1e-5),
    ("Neg", [-3, -1, 0, 5], np.negative, 1e-5),
    ("Floor", [-1.5, 0.3, 2.7, 3.0], np.floor, 1e-5),
    ("Ceil", [-1.5, 0.3, 2.7, 3.0], np.ceil, 1e-5),
], ids=["sqrt", "exp", "log", "abs", "neg", "floor", "ceil"])
def test_onnx_math_op_works(op, x, fn, tol):
    """One R test_that block per op ("ONNX Sqrt works", ...), parametrised."""
    x = np.array(x, dtype=np.float64)
    expect_equal(run_onnx(make_unary(op, (4,)), {"X": x}), fn(x), rtol=tol, atol=1e-7)
