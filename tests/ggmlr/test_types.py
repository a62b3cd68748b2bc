"""Port of ggmlR's tests/testthat/test-types.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_type_f32_constant_is_defined():
    """GGML_TYPE_F32 constant is defined"""
    expect_equal(GGML_TYPE_F32, 0)


def test_type_size_calculation_works():
    """type size calculation works"""
    ctx = ggml_init(1024 * 1024)
    tensor = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 100)

    expect_equal(ggml_nbytes(tensor), 400)

    ggml_free(ctx)

