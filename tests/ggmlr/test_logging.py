"""Port of ggmlR's tests/testthat/test-logging.R (ggmlR 0.8.2).

Blocks of ggmlR's file not ported, and why:
- "abort callback functions exist and work": R-only: ggmlR's abort handler turns ggml's abort into an R error
  (a longjmp); ggmlpy validates every call so ggml never aborts.
"""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_logging_functions_exist_and_work():
    """logging functions exist and work

    ggmlR switches ggml's log between R's console (ggml_log_set_r, R-only) and stderr; ggmlpy's
    counterpart of the R routing is Python's logging: the same switches, with _python for _r."""
    ggml_log_set_python()
    assert ggml_log_is_python_enabled()

    ggml_log_set_default()
    assert not (ggml_log_is_python_enabled())

    # Restore Python logging for subsequent tests
    ggml_log_set_python()


def test_op_params_functions_work():
    """op_params functions work"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)

    params = ggml_get_op_params(a)
    assert isinstance(params, bytes)  # R's raw vector
    assert length(params) == 64

    ggml_set_op_params_i32(a, 0, 42)
    expect_equal(ggml_get_op_params_i32(a, 0), 42)

    ggml_set_op_params_i32(a, 1, -100)
    expect_equal(ggml_get_op_params_i32(a, 1), -100)

    ggml_set_op_params_f32(a, 2, 3.14)
    result = ggml_get_op_params_f32(a, 2)
    expect_equal(result, 3.14, tolerance = 1e-5)

    new_params = bytes([1, 2, 3, 4] + [0] * 60)
    ggml_set_op_params(a, new_params)
    retrieved = ggml_get_op_params(a)
    assert retrieved[0:4] == bytes([1, 2, 3, 4])


def test_op_params_index_bounds_are_checked():
    """op_params index bounds are checked"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)

    with pytest.raises(GGMLError):
        ggml_get_op_params_i32(a, -1)
    with pytest.raises(GGMLError):
        ggml_get_op_params_i32(a, 100)
    with pytest.raises(GGMLError):
        ggml_set_op_params_i32(a, -1, 0)

